"""Tensor rung 4, step b, 04b_wgmma_specialized.cu (Hopper): step a's ring and wgmmas with the
copies given a warpgroup of their own -- a producer warpgroup (one thread issues the copies)
and BM/64 consumer warpgroups, setmaxnreg moving registers from the one to the others -- still
one block per tile of C, stored from the registers.  A named kernel only, as every step
(wgmma_tma.py); its arguments and limits are step a's."""

from __future__ import annotations

from ..spec import LAYOUTS, KernelSpec, Launching, Launch, Problem, tiles
from .wmma import tc_type_args
from .wgmma_tma import (
    HOPPER_NEEDS,
    STEP_DTYPES,
    STEP_PARAMS,
    STEP_SMEM_RULE,
    STEP_VARIANTS,
    WGMMA_SM90,
    step_kernel_args,
    step_smem,
    step_unusable,
)


def specialized_threads(p) -> int:
    """One producer warpgroup and BM/64 consumer warpgroups."""
    return (p["BM"] // 64 + 1) * 128


def _geometry(p, prob: Problem) -> Launch:
    """One block per BM x BN tile of C (a 1-D grid, grouped order)."""
    return Launch(
        grid=(tiles(prob, p["BM"], p["BN"]), 1, 1), block=(specialized_threads(p), 1, 1), smem_bytes=step_smem(p)
    )


SPEC = KernelSpec(
    name="wgmma_specialized",
    rung=4,
    step="b",
    family="tensor",
    dtypes=STEP_DTYPES,
    source="tensor/04b_wgmma_specialized.cu",
    template="gemmlab::wgmma_specialized_gemm",
    description="Hopper, step b: step a with a producer warpgroup issuing the copies and BM/64 consumer "
    "warpgroups (setmaxnreg moves registers to them), one block per tile, stores from the registers",
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
