"""Tensor rung 4, step a, 04a_wgmma_tma.cu (Hopper): TMA copies a K-step's tiles into a
STAGES-deep swizzled shared-memory ring, mbarriers say when a stage is full and when it is
free, and every warpgroup multiplies from it with wgmma (thread 0 also issues the copies);
one block per tile of C, stored from the registers.

The steps a, b, c (wgmma_tma, wgmma_specialized, wgmma_persistent) build the wgmma rung one
idea at a time; the rung's own kernel (wgmma.py) is its last step.  They are named kernels
only: ``kernel="auto"`` never picks a step (no Rules.offer), and `gemmlab bench` times them in
the ladder.  16-bit inputs, every layout, any M, N, K whose operands TMA reads in place;
others fall back to mma_pipelined, as the rung does.  A batch is one launch per matrix.

Introduces what every Hopper kernel's host side shares: the target and why, a block's
shared-memory limit, the standard arguments, and the steps' tensor maps of A and B.
"""

from __future__ import annotations

import numpy as np

from ...runtime.tma import SWIZZLE_BYTES, Operands, element_bytes, tensor_map, tma_readable
from ..spec import LAYOUTS, Constraint, KernelSpec, Launching, Launch, Problem, TileParam, tiles
from .wmma import TC_VARIANTS, tc_type_args

# Shared memory a block of a Hopper kernel may ask for: the opt-in limit of an H100/H200 (227 KiB).
WGMMA_SMEM_LIMIT = 227 * 1024
WGMMA_SM90 = "sm_90a"
# What the Hopper rungs (the wgmma steps, wgmma, wgmma_fp8, ec_wgmma) need; no other target
# has these instructions.
HOPPER_NEEDS = (
    "wgmma.mma_async and setmaxnreg exist on sm_90a only (Hopper: H100, H200, GH200); TMA and "
    "thread-block clusters from sm_90"
)

# What the steps multiply: the tensor-core rungs' 16-bit pairs (TF32 is the rung's own path).
STEP_DTYPES = ("float16", "bfloat16")
STEP_VARIANTS = tuple(v for v in TC_VARIANTS if v.dtype in STEP_DTYPES)
# The steps' tile parameters (step c adds CLUSTER); their defaults are the rung's.
STEP_PARAMS = (
    TileParam("BM", (64, 128), 128, "rows of C per block: BM/64 warpgroups of 64 rows multiply"),
    TileParam("BN", (128, 256), 256, "columns of C per block, the N of every wgmma (BN/2 accumulators a thread)"),
    TileParam("STAGES", (3, 4, 6), 4, "K-steps of A and B tiles (128 bytes of K each) in the shared-memory ring"),
)


def step_smem(p) -> int:
    """Dynamic shared memory of a step (tensor/04_wgmma_steps.cuh's StepRing): STAGES x (A
    tile + B tile, (BM + BN) x 128 bytes), two 8-byte barriers a stage, 1024 bytes to align
    the tiles to the swizzle atom."""
    return p["STAGES"] * (p["BM"] + p["BN"]) * SWIZZLE_BYTES + 16 * p["STAGES"] + 1024


STEP_SMEM_RULE = Constraint(
    "dynamic shared memory, STAGES*(BM+BN)*128 + 16*STAGES + 1024 bytes, must fit in the 227 KiB "
    "a Hopper block can have",
    lambda p: step_smem(p) <= WGMMA_SMEM_LIMIT,
)


def step_unusable(prob: Problem) -> str | None:
    """Why a step cannot take the operands: TMA must read them in place (no staging copy)."""
    if not prob.tma_aligned:
        return (
            "TMA needs a and b at 16-byte aligned addresses with leading dimensions whose byte size "
            "is a multiple of 16 (for 16-bit elements: a multiple of 8 elements), and in a batch strides "
            "between matrices that are multiples of 16 bytes too; the steps toward wgmma make no "
            "staging copy"
        )
    return None


def standard_args(pr, ops: Operands, alpha, beta) -> tuple:
    """The eleven arguments every GEMM kernel starts with: M, N, K, alpha, A, lda, B, ldb, beta, C, ldc."""
    return (
        np.int32(pr.M),
        np.int32(pr.N),
        np.int32(pr.K),
        np.float32(alpha),
        ops.A,
        np.int32(ops.lda),
        ops.B,
        np.int32(ops.ldb),
        np.float32(beta),
        ops.C,
        np.int32(ops.ldc),
    )


def step_kernel_args(plan, gpu, stream: int, ops: Operands, alpha, beta) -> tuple:
    """Launching.kernel_args of the steps: the standard eleven, then the tensor maps of A and
    B over one matrix (3-D maps of a batch of one), boxes as load_operand_tile copies them:
    a K-major operand (A 'N', stored M x K; B 'T', stored N x K) in boxes of its tile's rows
    (B: BN / CLUSTER, each block of a cluster copies its share) x 64 K, an MN-major one (A
    'T', stored K x M; B 'N', stored K x N) in 64 x 64 boxes."""
    pr, p = plan.problem, plan.params
    if ops.batch > 1:
        raise ValueError(f"{plan.describe()} takes one matrix a launch, not {ops.batch}")
    eb = element_bytes(pr.dtype)
    a = (pr.M, pr.K) if pr.op_a == "N" else (pr.K, pr.M)
    b = (pr.K, pr.N) if pr.op_b == "N" else (pr.N, pr.K)
    if not (tma_readable(ops.A, a[0], ops.lda, eb) and tma_readable(ops.B, b[0], ops.ldb, eb)):
        raise ValueError(f"{plan.describe()}: an operand TMA cannot read in place (the planner falls back instead)")
    box_a = (p["BM"], 64) if pr.op_a == "N" else (64, 64)
    box_b = (64, 64) if pr.op_b == "N" else (p["BN"] // p.get("CLUSTER", 1), 64)
    map_a = tensor_map(ops.A, *a, ops.lda, pr.dtype, *box_a, batch=1)
    map_b = tensor_map(ops.B, *b, ops.ldb, pr.dtype, *box_b, batch=1)
    return standard_args(pr, ops, alpha, beta) + (map_a, map_b)


def _geometry(p, prob: Problem) -> Launch:
    """One block per BM x BN tile of C (a 1-D grid, grouped order), BM/64 warpgroups."""
    return Launch(
        grid=(tiles(prob, p["BM"], p["BN"]), 1, 1), block=(p["BM"] // 64 * 128, 1, 1), smem_bytes=step_smem(p)
    )


SPEC = KernelSpec(
    name="wgmma_tma",
    rung=4,
    step="a",
    family="tensor",
    dtypes=STEP_DTYPES,
    source="tensor/04a_wgmma_tma.cu",
    template="gemmlab::wgmma_tma_gemm",
    description="Hopper, step a: TMA copies into a swizzled shared-memory ring (mbarriers), every warpgroup "
    "issuing wgmma from it, one block per tile, stores from the registers",
    params=STEP_PARAMS,
    constraints=(STEP_SMEM_RULE,),
    template_args=lambda p, prob: tc_type_args(prob) + (p["BM"], p["BN"], p["STAGES"]),
    geometry=_geometry,
    variants=STEP_VARIANTS,
    arches=(WGMMA_SM90,),
    needs=HOPPER_NEEDS,
    layouts=LAYOUTS,
    unusable=step_unusable,
    fallback="mma_pipelined",
    launching=Launching(kernel_args=step_kernel_args),
)
