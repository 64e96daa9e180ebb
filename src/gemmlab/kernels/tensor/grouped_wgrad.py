"""Tensor rung 7, 07_grouped_wgrad.cu (Hopper): the weights' gradient of a mixture-of-experts
layer in one launch, C_g = X_g^T @ Y_g over each group g of the rows of X (T, P) and Y (T, Q),
the groups given by rung 6's offsets (on the GPU, never read by the host).  For a layer
y = x @ W_g (W stacked (G, K, N)) it is dW_g = x_g^T @ dy_g (X = x, Y = dy); for a transposed
weight, y = x @ W_g.t() (W stacked (G, N, K)), dW_g = dy_g^T @ x_g (X = dy, Y = x).

Beside the spec: the shared-memory formula, the launch shape (every group has the same tiles,
so the host knows how many: G x ceil(P / BM) x ceil(Q / BN)) and the launch arguments (2-D
maps of X and Y in 64 x 64 boxes: both operands MN-major).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...runtime.tma import SWIZZLE_BYTES, element_bytes, tensor_map
from ..cuda_constants import read_constants
from ..spec import TYPE_CODES, Constraint, KernelSpec, Launch, Problem, TileParam, cdiv
from .grouped import GROUPED_DTYPES
from .wgmma_tma import HOPPER_NEEDS, WGMMA_SM90, WGMMA_SMEM_LIMIT

# X_g^T is op(A) stored K x M ('T'), Y_g op(B) stored K x N ('N'): the only layout.
WGRAD_LAYOUT = ("T", "N")
GROUPED_WGRAD_WARP_STAGE = read_constants("tensor/07_grouped_wgrad.cu")["GROUPED_WGRAD_WARP_STAGE"]


def grouped_wgrad_smem(p) -> int:
    """Dynamic shared memory of 07_grouped_wgrad.cu: STAGES x (A tile + B tile), a staging
    buffer per consumer warp for C, two 8-byte barriers per stage, 1024 bytes of alignment."""
    return (
        p["STAGES"] * (p["BM"] + p["BN"]) * SWIZZLE_BYTES
        + (p["BM"] // 64) * 4 * GROUPED_WGRAD_WARP_STAGE
        + 16 * p["STAGES"]
        + 1024
    )


def _geometry(p, prob: Problem) -> Launch:
    """Persistent: no more blocks than SMs nor than the G x tiles work items."""
    items = prob.groups * cdiv(prob.M, p["BM"]) * cdiv(prob.N, p["BN"])
    return Launch(
        grid=(max(1, min(items, prob.sm_count)), 1, 1),
        block=(128 * (p["BM"] // 64 + 1), 1, 1),
        smem_bytes=grouped_wgrad_smem(p),
        persistent=True,
    )


def _template_args(p, prob: Problem) -> tuple:
    return (TYPE_CODES[prob.dtype], p["BM"], p["BN"], p["STAGES"])


def _unusable(prob: Problem) -> str | None:
    if prob.groups < 1:
        return "it computes a grouped product's weight gradient (gemmlab.torch.grouped_mm's backward), not one product"
    if not prob.tma_aligned:
        return "TMA reads X and Y in place only: 16-byte aligned addresses, rows a multiple of 16 bytes apart"
    return None


def grouped_wgrad_auto_tile(P: int, Q: int, groups: int, sm_count: int) -> tuple[dict, str]:
    """kernel="auto"'s tile: 128 x 256 where those tiles of every group fill two waves of the
    SMs, else 128 x 128 (each group's K, its rows, is what the host does not know)."""
    if groups * cdiv(P, 128) * cdiv(Q, 256) >= 2 * sm_count:
        return {"BM": 128, "BN": 256, "STAGES": 4}, "128 x 256 tiles: they fill 2 waves of the SMs or more"
    return {"BM": 128, "BN": 128, "STAGES": 6}, "128 x 128 tiles (too few for 128 x 256)"


@dataclass(frozen=True)
class WgradOperands:
    """A weight-gradient launch's arrays (device addresses; strides in elements): X (T x P,
    rows ldx apart), Y (T x Q, rows ldy apart), C (G matrices P x Q, rows ldc and matrices
    sc apart), offs (G int32)."""

    X: int
    ldx: int
    Y: int
    ldy: int
    C: int
    ldc: int
    sc: int
    offs: int


def grouped_wgrad_args(plan, ops: WgradOperands) -> tuple:
    """07_grouped_wgrad.cu's arguments: T, P, Q, G, offs, C, ldc, stride_c and the maps of X and
    Y (over all T rows, boxes of 64 rows x 64 columns: MN-major tiles, as 04_wgmma.cu's)."""
    pr = plan.problem
    if pr.dtype not in GROUPED_DTYPES:
        raise TypeError(f"grouped_wgrad multiplies {' and '.join(GROUPED_DTYPES)}, not {pr.dtype}")
    cols = SWIZZLE_BYTES // element_bytes(pr.dtype)
    T = pr.K  # the rows of all groups: the sum's K
    map_x = tensor_map(ops.X, T, pr.M, ops.ldx, pr.dtype, 64, cols, batch=1)
    map_y = tensor_map(ops.Y, T, pr.N, ops.ldy, pr.dtype, 64, cols, batch=1)
    return (
        np.int32(T),
        np.int32(pr.M),
        np.int32(pr.N),
        np.int32(pr.groups),
        ops.offs,
        ops.C,
        np.int32(ops.ldc),
        np.int64(ops.sc),
        map_x,
        map_y,
    )


GROUPED_WGRAD_VARIANTS = tuple(Problem(1, 1, 1, True, d, d, *WGRAD_LAYOUT, groups=1) for d in GROUPED_DTYPES)

SPEC = KernelSpec(
    name="grouped_wgrad",
    rung=7,
    family="tensor",
    dtypes=GROUPED_DTYPES,
    source="tensor/07_grouped_wgrad.cu",
    template="gemmlab::grouped_wgrad_gemm",
    description="Hopper weight gradient of a grouped product (mixture-of-experts): C_g = X_g^T @ Y_g for "
    "every group of rows in one persistent launch, each group's rows the sum's K, the last K-step's "
    "rows past the group zeroed in shared memory before the wgmmas read them",
    params=(
        TileParam("BM", (64, 128), 128, "rows of C_g per tile (columns of X): BM/64 consumer warpgroups"),
        TileParam("BN", (128, 256), 128, "columns of C_g per tile (columns of Y), the N of every wgmma"),
        TileParam("STAGES", (4, 5, 6), 6, "K-steps (64 rows of X and Y each) in the ring"),
    ),
    constraints=(
        Constraint(
            f"dynamic shared memory, STAGES*(BM+BN)*128 + (BM/64)*4*{GROUPED_WGRAD_WARP_STAGE} + 16*STAGES + "
            "1024 bytes, must fit in the 227 KiB a Hopper block can have",
            lambda p: grouped_wgrad_smem(p) <= WGMMA_SMEM_LIMIT,
        ),
    ),
    template_args=_template_args,
    geometry=_geometry,
    variants=GROUPED_WGRAD_VARIANTS,
    arches=(WGMMA_SM90,),
    needs=HOPPER_NEEDS,
    layouts=(WGRAD_LAYOUT,),
    unusable=_unusable,
    fallback="wgmma",
    own_call="gemmlab.torch.grouped_mm (backward)",
)
