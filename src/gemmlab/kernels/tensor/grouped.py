"""Tensor rung 6, 06_grouped.cu (Hopper): the grouped GEMM of a mixture-of-experts layer,
C_g = A_g @ B_g for G groups of consecutive rows of one (T, K) matrix A (cumulative ends
``offs`` on the GPU, as torch._grouped_mm takes them) and a stack B of G weights, stored
(G, K, N) (op_b 'N') or (G, N, K) (op_b 'T': the transpose of row-major N x K weights, as
``x @ W_e.t()`` multiplies).  One persistent launch walks the tiles of every group; the
GPU counts them from the offsets, so the host never reads the offsets.

Beside the spec: the shared-memory formula, the launch shape (a persistent grid sized
from an upper bound of the tiles, since the host does not know the groups' sizes), and
the launch arguments (A's 2-D map over all T rows, B's 3-D map, the group outermost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...runtime.tma import SWIZZLE_BYTES, element_bytes, tensor_map
from ..cuda_constants import read_constants
from ..spec import TYPE_CODES, Constraint, KernelSpec, Launch, Problem, TileParam, cdiv
from .wgmma_tma import HOPPER_NEEDS, WGMMA_SM90, WGMMA_SMEM_LIMIT

GROUPED_DTYPES = ("float16", "bfloat16")
# A is always the router's (T, K) rows, row-major ('N'); B either way.
GROUPED_LAYOUTS = (("N", "N"), ("N", "T"))
GROUPED_MAX_GROUPS = read_constants("include/gemmlab/tensor/06_grouped.cuh")["GROUPED_MAX_GROUPS"]
# A consumer warp's shared memory for C's staged stores.
GROUPED_WARP_STAGE = read_constants("tensor/06_grouped.cu")["GROUPED_WARP_STAGE"]
# What TMA needs of every operand, in elements of 16 bits: rows (and B's matrices) a
# multiple of 16 bytes apart.
GROUPED_ALIGN = 8


def grouped_smem(p) -> int:
    """Dynamic shared memory of 06_grouped.cu: STAGES x (A tile + B tile, (BM + BN) x 128
    bytes), a staging buffer per consumer warp for C, two 8-byte barriers per stage, the
    work list (4 bytes a group, GROUPED_MAX_GROUPS of them), 1024 bytes to align the tiles
    to the swizzle atom."""
    return (
        p["STAGES"] * (p["BM"] + p["BN"]) * SWIZZLE_BYTES
        + (p["BM"] // 64) * 4 * GROUPED_WARP_STAGE
        + 16 * p["STAGES"]
        + 4 * GROUPED_MAX_GROUPS
        + 1024
    )


def _threads(p) -> int:
    return 128 * (p["BM"] // 64 + 1)  # one producer warpgroup + BM/64 consumers


def grouped_items_bound(T: int, N: int, groups: int, bm: int, bn: int) -> int:
    """At most how many tiles a launch has, without the groups' sizes: each group's rows fill
    whole tile-rows but its last, so the tile-rows are at most ceil(T / BM) + groups."""
    return (cdiv(T, bm) + groups) * cdiv(N, bn)


def _geometry(p, prob: Problem) -> Launch:
    """Persistent: no more blocks than SMs, nor than the tiles could be (grouped_items_bound;
    blocks past the real tiles find no work and leave)."""
    bound = grouped_items_bound(prob.M, prob.N, prob.groups, p["BM"], p["BN"])
    return Launch(
        grid=(max(1, min(bound, prob.sm_count)), 1, 1),
        block=(_threads(p), 1, 1),
        smem_bytes=grouped_smem(p),
        persistent=True,
    )


def _template_args(p, prob: Problem) -> tuple:
    return (TYPE_CODES[prob.dtype], p["BM"], p["BN"], p["STAGES"])


def _unusable(prob: Problem) -> str | None:
    if prob.groups < 1:
        return "it multiplies groups of rows by a stack of weights (gemmlab.grouped_mm), not one product"
    if not prob.tma_aligned:
        return (
            "TMA reads a and b in place only: 16-byte aligned addresses and rows (and b's matrices) a "
            f"multiple of 16 bytes apart, K and N multiples of {GROUPED_ALIGN}"
        )
    return None


# 64-row tiles where the groups average fewer rows than this (decoding, fine-grained experts):
# a 128-row tile of a 20-row group would leave its second consumer idle.
SMALL_GROUP_ROWS = 96
# 256-wide tiles where 128 x 256 tiles would still fill this many waves of the SMs.
WIDE_TILE_WAVES = 2


def grouped_auto_tile(T: int, N: int, groups: int, sm_count: int) -> tuple[dict, str]:
    """kernel="auto"'s tile for T rows in ``groups`` groups and N columns, and why: from the
    average rows of a group (the host does not know each one's)."""
    per_group = T / max(groups, 1)
    if per_group < SMALL_GROUP_ROWS:
        return {"BM": 64, "BN": 128, "STAGES": 6}, (
            f"64 x 128 tiles: the groups average {per_group:.0f} rows, fewer than {SMALL_GROUP_ROWS}"
        )
    if cdiv(T, 128) * cdiv(N, 256) >= WIDE_TILE_WAVES * sm_count:
        return {"BM": 128, "BN": 256, "STAGES": 4}, (
            f"128 x 256 tiles: they fill {WIDE_TILE_WAVES} waves of the SMs or more"
        )
    return {"BM": 128, "BN": 128, "STAGES": 6}, "128 x 128 tiles (too few for 128 x 256)"


# -- launch arguments ------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupedOperands:
    """Where a grouped launch's arrays are (device addresses) and how they are laid out, in
    elements: A (T x K, rows lda apart), B (G matrices sb apart, rows ldb apart: K x N for
    op_b 'N', N x K for 'T'), C (T x N, rows ldc apart), offs (G int32)."""

    A: int
    lda: int
    B: int
    ldb: int
    sb: int
    C: int
    ldc: int
    offs: int


def grouped_maps(plan, ops: GroupedOperands) -> tuple:
    """A's map over all T rows (3-D, a batch of one: load_operand_tile's form) in boxes of BM
    rows x 64 K; B's over the G matrices as stored, the group outermost, in boxes of BN rows x
    64 K ('T', K-major) or 64 K-rows x 64 columns ('N', N-major)."""
    pr, p = plan.problem, plan.params
    cols = SWIZZLE_BYTES // element_bytes(pr.dtype)
    map_a = tensor_map(ops.A, pr.M, pr.K, ops.lda, pr.dtype, p["BM"], cols, batch=1)
    if pr.op_b == "T":
        rows, cols_b, box = pr.N, pr.K, (p["BN"], cols)
    else:
        rows, cols_b, box = pr.K, pr.N, (64, cols)
    map_b = tensor_map(ops.B, rows, cols_b, ops.ldb, pr.dtype, *box, batch=pr.groups, batch_stride=ops.sb)
    return map_a, map_b


def grouped_args(plan, ops: GroupedOperands) -> tuple:
    """06_grouped.cu's arguments: T, N, K, G, offs, C, ldc and the maps of A and B."""
    pr = plan.problem
    if pr.dtype not in GROUPED_DTYPES:
        raise TypeError(f"grouped multiplies {' and '.join(GROUPED_DTYPES)}, not {pr.dtype}")
    map_a, map_b = grouped_maps(plan, ops)
    return (
        np.int32(pr.M),
        np.int32(pr.N),
        np.int32(pr.K),
        np.int32(pr.groups),
        ops.offs,
        ops.C,
        np.int32(ops.ldc),
        map_a,
        map_b,
    )


# Every operand type an instantiation is built for (in each of GROUPED_LAYOUTS).
GROUPED_VARIANTS = tuple(Problem(1, 1, 1, True, d, d, "N", "T", groups=1) for d in GROUPED_DTYPES)


SPEC = KernelSpec(
    name="grouped",
    rung=6,
    family="tensor",
    dtypes=GROUPED_DTYPES,
    source="tensor/06_grouped.cu",
    template="gemmlab::grouped_gemm",
    description="Hopper grouped GEMM for mixture-of-experts: the wgmma rung's TMA ring and warpgroups over "
    "the tiles of G groups of A's rows, each times its own B, in one persistent launch that counts "
    "the groups' tiles from the offsets on the GPU; C staged and masked at each group's end",
    params=(
        TileParam("BM", (64, 128), 128, "rows of a group's tile: BM/64 consumer warpgroups of 64 rows"),
        TileParam("BN", (128, 256), 128, "columns of C per tile, the N of every wgmma"),
        TileParam("STAGES", (4, 5, 6), 6, "K-steps (64 values of K each) of A and B tiles in the ring"),
    ),
    constraints=(
        Constraint(
            f"dynamic shared memory, STAGES*(BM+BN)*128 + (BM/64)*4*{GROUPED_WARP_STAGE} + 16*STAGES + "
            f"4*{GROUPED_MAX_GROUPS} + 1024 bytes, must fit in the 227 KiB a Hopper block can have",
            lambda p: grouped_smem(p) <= WGMMA_SMEM_LIMIT,
        ),
    ),
    template_args=_template_args,
    geometry=_geometry,
    variants=GROUPED_VARIANTS,
    arches=(WGMMA_SM90,),
    needs=HOPPER_NEEDS,
    layouts=GROUPED_LAYOUTS,
    unusable=_unusable,
    # gemmlab.matmul(..., kernel="grouped") on one product: the wgmma rung, saying why.
    fallback="wgmma",
    own_call="gemmlab.grouped_mm",
)
