"""Tensor rung 5, 05_wgmma_fp8.cu (Hopper): FP8 operands (e4m3, e5m2) on the wgmma rung's
machinery, with scales per tensor, per row of A / column of B, or per 1 x 128 block of A
and 128 x 128 block of B, FP32 accumulation promoted into a second register set every
PROMOTE K-steps, a bfloat16 or float32 result.

Beside the spec: the scales' shapes and what they say about the scaling (fp8_scale_layout,
which names what is wrong), and the launch arguments (2-D operands as 3-D tensor maps of
one matrix, built by runtime.tma, 128 FP8 values of K per box row).  One matrix a launch,
K unsplit, C stored from the registers through shared memory (no TMA store).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...runtime.tma import SWIZZLE_BYTES, Operands, tensor_map, tma_readable
from ..cuda_constants import read_constants
from ..spec import TYPE_CODES, Constraint, KernelSpec, Launch, Problem, TileParam, cdiv
from .wgmma_tma import HOPPER_NEEDS, WGMMA_SM90, WGMMA_SMEM_LIMIT, standard_args

FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
FP8_OUT_DTYPES = ("bfloat16", "float32")
SCALINGS = ("tensor", "row", "block")

_T = read_constants("include/gemmlab/type_codes.cuh")
FP8_TYPE_CODES = {"float8_e4m3fn": _T["TYPE_FLOAT8_E4M3"], "float8_e5m2": _T["TYPE_FLOAT8_E5M2"]}
_S = read_constants("include/gemmlab/tensor/05_wgmma_fp8.cuh")
FP8_SCALE_OUTER, FP8_SCALE_BLOCK = _S["FP8_SCALE_OUTER"], _S["FP8_SCALE_BLOCK"]
# Values of K (and of N, for B) one block scale covers: one K-step of the ring.
FP8_SCALE_BLOCK_K = _S["FP8_SCALE_BLOCK_K"]
# A consumer warp's shared memory for C's staged stores.
WGMMA_FP8_WARP_STAGE = read_constants("tensor/05_wgmma_fp8.cu")["WGMMA_FP8_WARP_STAGE"]
# The only operand layouts: FP8 wgmma reads K-major operands, A stored M x K, B stored N x K.
FP8_LAYOUT = ("N", "T")
FP8_LAYOUT_WHY = (
    "FP8 wgmma reads both operands K-major and has no transpose: a must be row-major M x K and b "
    "column-major K x N (b.T of a row-major N x K tensor, as torch._scaled_mm takes it)"
)


# Block scales a stage holds: BM of A's rows, FP8_SB_SLOTS of B's blocks (one per 128
# columns of the tile, padded), 4 bytes each.
FP8_SB_SLOTS = 4


def wgmma_fp8_smem(p) -> int:
    """Dynamic shared memory of 05_wgmma_fp8.cu: STAGES x (A tile + B tile, (BM + BN) x 128
    bytes), a staging buffer per consumer warp for C, two 8-byte barriers per stage, the
    block scales of a stage (BM + 4 floats), 1024 bytes to align the tiles to the swizzle
    atom."""
    return (
        p["STAGES"] * (p["BM"] + p["BN"]) * SWIZZLE_BYTES
        + (p["BM"] // 64) * 4 * WGMMA_FP8_WARP_STAGE
        + 16 * p["STAGES"]
        + 4 * p["STAGES"] * (p["BM"] + FP8_SB_SLOTS)
        + 1024
    )


# 128 x 256 tiles where they fill this many waves of the SMs (NOTES.md, "The FP8 rung on an
# H200"): as fast as 128 x 128 or faster on large products, and promoting at every K-step.
WIDE_TILE_WAVES = 2
WIDE_TILE = {"BM": 128, "BN": 256, "STAGES": 4, "PROMOTE": 1}


def fp8_auto_tile(M: int, N: int, sm_count: int) -> dict:
    """auto's tile for an M x N FP8 product: WIDE_TILE where its tiles fill WIDE_TILE_WAVES
    waves of ``sm_count`` SMs, else {} (the defaults: 128 x 128, six stages, PROMOTE 4)."""
    tiles = cdiv(M, WIDE_TILE["BM"]) * cdiv(N, WIDE_TILE["BN"])
    return dict(WIDE_TILE) if tiles >= WIDE_TILE_WAVES * sm_count else {}


def _threads(p) -> int:
    return 128 * (p["BM"] // 64 + 1)  # one producer warpgroup + BM/64 consumers


def _template_args(p, prob: Problem) -> tuple:
    """A's and B's FP8 type codes, C's type, the tile, how the scales apply, and the K-steps
    between promotions (block scales: every K-step, whatever PROMOTE says)."""
    block = prob.scaling == "block"
    return (
        FP8_TYPE_CODES[prob.dtype],
        FP8_TYPE_CODES[prob.dtype_b or prob.dtype],
        TYPE_CODES[prob.out_dtype],
        p["BM"],
        p["BN"],
        p["STAGES"],
        p["CLUSTER"],
        FP8_SCALE_BLOCK if block else FP8_SCALE_OUTER,
        1 if block else p["PROMOTE"],
    )


def _geometry(p, prob: Problem) -> Launch:
    """Persistent: no more blocks than SMs, in whole clusters of CLUSTER vertically adjacent tiles."""
    cl = p["CLUSTER"]
    cluster_tiles = cdiv(cdiv(prob.M, p["BM"]), cl) * cdiv(prob.N, p["BN"])
    blocks = cl * max(1, min(cluster_tiles, prob.sm_count // cl))
    return Launch(
        grid=(blocks, 1, 1),
        block=(_threads(p), 1, 1),
        smem_bytes=wgmma_fp8_smem(p),
        cluster=(cl, 1, 1),
        persistent=True,
    )


def _unusable(prob: Problem) -> str | None:
    if not prob.tma_aligned:
        return (
            "TMA reads a and b in place only: 16-byte aligned addresses and rows whose byte size is a "
            "multiple of 16 (for FP8: K a multiple of 16); a staging copy of FP8 operands is not built yet"
        )
    return None


# -- the scales ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fp8Scales:
    """Where the kernel reads its scales (device addresses of FP32 values) and how it indexes
    them (element strides): sa(m, kb) = scale_a[m * a_m + kb * a_k]; outer scaling sb(n) =
    scale_b[n * b_n], block scaling sb(nb, kb) = scale_b[nb * b_n + kb * b_k], nb and kb the
    128-wide blocks of N and K.  A tensor's single scale has strides 0."""

    a: int
    a_m: int
    a_k: int
    b: int
    b_n: int
    b_k: int


def _describe(shape) -> str:
    return "(" + ", ".join(str(int(n)) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def fp8_scale_shapes(M: int, N: int, K: int) -> str:
    """The scale shapes a product accepts, in words (for messages and docs)."""
    kb, nb = cdiv(max(K, 1), FP8_SCALE_BLOCK_K), cdiv(max(N, 1), FP8_SCALE_BLOCK_K)
    return (
        f"per tensor, one element each; per row of a and column of b, scale_a ({M}, 1) or ({M},) and "
        f"scale_b (1, {N}) or ({N},) (each side may also be per tensor); 1 x 128 and 128 x 128 blocks, "
        f"scale_a ({M}, {kb}) (row, K-block) and scale_b ({nb}, {kb}) (N-block, K-block)"
    )


def fp8_scale_layout(M: int, N: int, K: int, a_shape, a_strides, b_shape, b_strides) -> tuple[str, tuple]:
    """How the scales of an M x N x K FP8 product apply, from their shapes: ("tensor" | "row" |
    "block", (a_m, a_k, b_n, b_k) element strides for Fp8Scales).  Outer scales (per tensor,
    per row of A, per column of B; each side independently) where the shapes allow them, else
    block scales; where both readings fit (K <= 128, N <= 128) they compute the same product.
    Raises ValueError naming the scale whose shape fits neither."""
    a_shape, b_shape = tuple(int(n) for n in a_shape), tuple(int(n) for n in b_shape)
    a_strides, b_strides = tuple(int(s) for s in a_strides), tuple(int(s) for s in b_strides)
    kb, nb = cdiv(max(K, 1), FP8_SCALE_BLOCK_K), cdiv(max(N, 1), FP8_SCALE_BLOCK_K)

    def size(shape):
        return int(np.prod(shape)) if shape else 1

    def along(shape, strides, n, vector):
        """The element stride of an outer scale along its n values (0: per tensor), or None."""
        if size(shape) == 1:
            return 0
        if shape == (n,):
            return strides[0]
        if shape == vector:
            return strides[vector.index(n)] if n > 1 else 0
        return None

    sa, sb = along(a_shape, a_strides, M, (M, 1)), along(b_shape, b_strides, N, (1, N))
    if sa is not None and sb is not None:
        kind = "tensor" if size(a_shape) == 1 and size(b_shape) == 1 else "row"
        return kind, (sa, 0, sb, 0)
    if a_shape == (M, kb) and b_shape == (nb, kb):
        return "block", (a_strides[0], a_strides[1], b_strides[0], b_strides[1])
    outer_a = sa is not None
    bad, shape = ("scale_b", b_shape) if outer_a or a_shape == (M, kb) else ("scale_a", a_shape)
    raise ValueError(
        f"{bad} has shape {_describe(shape)}, which fits no scaling of a {M} x {N} x {K} FP8 product "
        f"with scale_a {_describe(a_shape)} and scale_b {_describe(b_shape)}; the shapes accepted: "
        f"{fp8_scale_shapes(M, N, K)}"
    )


# -- launch arguments ------------------------------------------------------------------------


def fp8_maps(plan, ops: Operands) -> tuple:
    """The tensor maps of A (stored M x K, boxes of BM rows x 128 values of K) and B (stored
    N x K, boxes of BN / CLUSTER rows: each block of a cluster copies its share and
    multicasts it), 3-D maps of one matrix as load_operand_tile reads them.  Raises
    ValueError where TMA cannot read an operand in place."""
    pr, p = plan.problem, plan.params
    if (pr.op_a, pr.op_b) != FP8_LAYOUT:
        raise ValueError(f"wgmma_fp8 reads op(A) 'N' and op(B) 'T' only, not {pr.op_a}{pr.op_b}: {FP8_LAYOUT_WHY}")
    stored = (("a", ops.A, pr.M, ops.lda, pr.dtype, p["BM"]), ("b", ops.B, pr.N, ops.ldb, pr.dtype_b or pr.dtype, None))
    maps = []
    for name, ptr, rows, ld, dtype, box in stored:
        if not tma_readable(ptr, rows, ld, 1):
            raise ValueError(
                f"wgmma_fp8: TMA cannot read {name} in place (address {ptr:#x}, rows {ld} bytes apart: "
                "both must be multiples of 16 bytes)"
            )
        box = box or p["BN"] // p["CLUSTER"]
        maps.append(tensor_map(ptr, rows, pr.K, ld, dtype, box, SWIZZLE_BYTES, batch=1))
    return tuple(maps)


def wgmma_fp8_args(plan, ops: Operands, alpha, beta, scales: Fp8Scales) -> tuple:
    """05_wgmma_fp8.cu's arguments: the standard eleven, three batch strides (one matrix: 0),
    the tensor maps of A and B, then the scales' addresses and strides (Fp8Scales)."""
    if ops.batch > 1:
        raise ValueError("wgmma_fp8 takes one matrix per launch (batches are not built yet)")
    if plan.problem.dtype not in FP8_DTYPES:
        raise TypeError(f"wgmma_fp8 multiplies {' and '.join(FP8_DTYPES)}, not {plan.problem.dtype}")
    map_a, map_b = fp8_maps(plan, ops)
    return standard_args(plan.problem, ops, alpha, beta) + (
        np.int64(0),
        np.int64(0),
        np.int64(0),
        map_a,
        map_b,
        scales.a,
        np.int64(scales.a_m),
        np.int64(scales.a_k),
        scales.b,
        np.int64(scales.b_n),
        np.int64(scales.b_k),
    )


# Every combination of operand types, result type and kind of scaling an instantiation is
# built for ("tensor" is "row"'s instantiation: outer scales with strides 0).
FP8_VARIANTS = tuple(
    Problem(1, 1, 1, True, a, o, "N", "T", dtype_b=b, scaling=s)
    for a in FP8_DTYPES
    for b in FP8_DTYPES
    for o in FP8_OUT_DTYPES
    for s in ("row", "block")
)


SPEC = KernelSpec(
    name="wgmma_fp8",
    rung=5,
    family="tensor",
    dtypes=FP8_DTYPES,
    out_dtypes=FP8_OUT_DTYPES,
    source="tensor/05_wgmma_fp8.cu",
    template="gemmlab::wgmma_fp8_gemm",
    description="Hopper FP8 (e4m3, e5m2): the wgmma rung's TMA ring and warpgroups, 32 values of K a wgmma, "
    "both operands K-major, scales per tensor, row/column or 1x128/128x128 block, FP32 sums promoted "
    "every PROMOTE K-steps",
    params=(
        TileParam("BM", (64, 128), 128, "rows of C per block: BM/64 consumer warpgroups of 64 rows"),
        TileParam(
            "BN",
            (64, 128, 256),
            128,
            "columns of C per block, the N of every wgmma (BN/2 accumulators per consumer thread, twice "
            "that while promoting; 256 promoting: two wgmma groups of N = 128 a K-step, each promoted, "
            "64 + 128 accumulators)",
        ),
        TileParam("STAGES", (4, 6), 6, "K-steps (128 FP8 values of K each) of A and B tiles in the ring"),
        TileParam(
            "CLUSTER",
            (1, 2),
            1,
            "blocks per cluster: 2 takes two vertically adjacent tiles whose B tile is read once and multicast",
        ),
        TileParam(
            "PROMOTE",
            (0, 1, 2, 4),
            4,
            "K-steps (128 values of K each) between additions of the wgmma sums into FP32 registers; 0: "
            "none, the tensor cores' sums accumulate the whole K (block scales promote every K-step)",
        ),
    ),
    constraints=(
        Constraint(
            "dynamic shared memory, STAGES*(BM+BN)*128 + (BM/64)*4*2560 + 16*STAGES + 4*STAGES*(BM+4) + 1024 "
            "bytes, must fit in the 227 KiB a Hopper block can have",
            lambda p: wgmma_fp8_smem(p) <= WGMMA_SMEM_LIMIT,
        ),
        Constraint(
            "BN = 256 promotes every K-step or never (PROMOTE 1 or 0): the sums of a 256-wide tile and its "
            "promoted sums would not fit in a thread's registers together",
            lambda p: p["BN"] != 256 or p["PROMOTE"] in (0, 1),
        ),
    ),
    template_args=_template_args,
    geometry=_geometry,
    variants=FP8_VARIANTS,
    arches=(WGMMA_SM90,),
    needs=HOPPER_NEEDS,
    layouts=(FP8_LAYOUT,),
    unusable=_unusable,
)
