"""The index of the ladder: every kernel's spec, in teaching order.

Each rung's host code (spec, shared-memory formula, launch arguments, pre-pass)
sits beside its .cu file in kernels/<family>/<rung>.py; this module imports them
in ladder order and is where every tool (matmul, bench, verify, inspect, tests)
looks kernels up.  A new rung is one .cu file, one .py beside it, and one line in
RUNGS below; so is each step of a rung taught in steps (KernelSpec.step: tensor
rung 4's wgmma_tma, wgmma_specialized, wgmma_persistent, then wgmma itself).

The registry is the ladder and its lookup (:data:`__all__`); a name a rung or
spec.py defines is imported from there.
"""

from __future__ import annotations

from .spec import SPECS, KernelSpec, register

# The rungs, in ladder order.
from .simt import naive, coalesced, smem_tiled, blocktile_1d, blocktile_2d, vectorized, warptile, pipelined
from .tensor import wmma, wmma_warptile, mma_pipelined, wgmma_tma, wgmma_specialized, wgmma_persistent
from .tensor import wgmma, wgmma_fp8, grouped, grouped_wgrad
from .ec import ec_wmma, ec_wgmma
from .gemv import gemv, outer, gemv_mma, batched_small, batched_small_mma

__all__ = ["FAMILIES", "RUNGS", "get", "ladder"]

# The families in teaching order: CUDA cores, tensor cores, FP32-accurate tensor cores,
# and products with a thin side (a few rows, or a few K), bound by memory.
FAMILIES = ("simt", "tensor", "ec", "gemv")

# Every rung's module, in ladder order (each defines SPEC).
RUNGS = (
    naive,
    coalesced,
    smem_tiled,
    blocktile_1d,
    blocktile_2d,
    vectorized,
    warptile,
    pipelined,
    wmma,
    wmma_warptile,
    mma_pipelined,
    wgmma_tma,
    wgmma_specialized,
    wgmma_persistent,
    wgmma,
    wgmma_fp8,
    grouped,
    grouped_wgrad,
    ec_wmma,
    ec_wgmma,
    gemv,
    outer,
    gemv_mma,
    batched_small,
    batched_small_mma,
)
for _rung in RUNGS:
    register(_rung.SPEC)


def get(name: str) -> KernelSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown kernel {name!r}; known kernels: {', '.join(['auto', *SPECS])}") from None


def ladder(family: str | None = None) -> list[KernelSpec]:
    specs = sorted(SPECS.values(), key=lambda s: (FAMILIES.index(s.family), s.ladder_key))
    return [s for s in specs if family is None or s.family == family]
