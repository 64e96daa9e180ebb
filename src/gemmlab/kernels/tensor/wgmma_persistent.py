"""Tensor rung 4, step c, 04c_wgmma_persistent.cu (Hopper): step b's producer and consumers
on a persistent grid -- no more blocks than SMs, each walking tiles in grouped order with its
ring running on from one tile to the next -- and clusters of CLUSTER blocks whose B tile TMA
multicasts; stored from the registers.  A named kernel only, as every step (wgmma_tma.py)."""

from __future__ import annotations

from ..spec import LAYOUTS, KernelSpec, Launching, Launch, Problem, TileParam, cdiv
from .wmma import tc_type_args
from .wgmma_specialized import specialized_threads
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


def persistent_work(p, prob: Problem) -> int:
    """Work items: clusters' worth of tiles (CLUSTER vertically adjacent tiles each)."""
    return cdiv(cdiv(prob.M, p["BM"]), p["CLUSTER"]) * cdiv(prob.N, p["BN"])


def _geometry(p, prob: Problem) -> Launch:
    """Persistent: no more blocks than SMs (one block fills an SM's shared memory), in whole
    clusters; the executor lowers the grid to the clusters that fit at once."""
    cl = p["CLUSTER"]
    blocks = cl * max(1, min(persistent_work(p, prob), prob.sm_count // cl))
    return Launch(
        grid=(blocks, 1, 1),
        block=(specialized_threads(p), 1, 1),
        smem_bytes=step_smem(p),
        cluster=(cl, 1, 1),
        persistent=True,
    )


SPEC = KernelSpec(
    name="wgmma_persistent",
    rung=4,
    step="c",
    family="tensor",
    dtypes=STEP_DTYPES,
    source="tensor/04c_wgmma_persistent.cu",
    template="gemmlab::wgmma_persistent_gemm",
    description="Hopper, step c: step b on a persistent grid walking the tiles, clusters of CLUSTER blocks "
    "sharing B by TMA multicast, stores from the registers",
    params=STEP_PARAMS
    + (
        TileParam(
            "CLUSTER",
            (1, 2),
            1,
            "blocks per cluster: 2 takes two vertically adjacent tiles whose B tile is read once and multicast to both",
        ),
    ),
    constraints=(STEP_SMEM_RULE,),
    template_args=lambda p, prob: tc_type_args(prob) + (p["BM"], p["BN"], p["STAGES"], p["CLUSTER"]),
    geometry=_geometry,
    variants=STEP_VARIANTS,
    arches=(WGMMA_SM90,),
    needs=HOPPER_NEEDS,
    layouts=LAYOUTS,
    unusable=step_unusable,
    fallback="mma_pipelined",
    launching=Launching(kernel_args=step_kernel_args),
)
