"""The index of the ladder: every kernel's spec, in teaching order.

Each rung's host code (spec, shared-memory formula, launch arguments, pre-pass)
sits beside its .cu file in kernels/<family>/<rung>.py; this module imports them
in ladder order and is where every tool (matmul, bench, verify, inspect, tests)
looks kernels up.  A new rung is one .cu file, one .py beside it, and one line in
RUNGS below.

The names other modules use (types from spec.py, constants and helpers of the
rungs) are re-exported here, so ``registry.X`` keeps working wherever X moved.
"""

from __future__ import annotations

from ..runtime.compile import INCLUDE_DIR  # noqa: F401  (re-exported)
from .spec import (EC_METHODS, FLOAT32_RESULT, KERNEL_DIR, LAYOUTS, SPECS, TYPE_CODES,  # noqa: F401
                   Constraint, KernelSpec, Launch, Problem, TileParam, register)
# The rungs, in ladder order, and the names callers read through the registry.
from .simt import (naive, coalesced, smem_tiled, blocktile_1d, blocktile_2d, vectorized, warptile,
                   pipelined)
from .simt.pipelined import PIPELINED_SMEM_LIMIT, SPLITK_VALUES, fill_split, pipelined_smem  # noqa: F401
from .simt.splitk_reduce import (SPLITK_REDUCE_DTYPES, SPLITK_REDUCE_KERNEL, SPLITK_REDUCE_KERNELS,  # noqa: F401
                                 SPLITK_REDUCE_SOURCE, SPLITK_REDUCE_THREADS, splitk_reduce_kernel)
from .tensor import wmma, wmma_warptile, mma_pipelined, wgmma
from .tensor.wmma import TC_VARIANTS, TC_WARPS_PER_BLOCK  # noqa: F401
from .tensor.mma_pipelined import MMA_SMEM_LIMIT  # noqa: F401
from .tensor.wgmma import (PACK16_KERNEL, TF32_PACK_KERNELS, TF32_PACK_SOURCE, TF32_PACK_THREADS, TF32_PACK_TILE,  # noqa: F401
                           WGMMA_EPI_BYTES, WGMMA_MIN_K_STEPS_PER_SLICE, WGMMA_SM90, WGMMA_SMEM_LIMIT,
                           wgmma_auto_choice, wgmma_auto_params, wgmma_rule_params, wgmma_staging_choice, wgmma_auto_split, wgmma_narrow_tile, wgmma_tile)
from .ec import ec_wmma, ec_wgmma
from .ec.ec_wgmma import (EC_SPLIT_PACK_KERNELS, EC_SPLIT_PACK_SOURCE, EC_SPLIT_PACK_THREADS,  # noqa: F401
                          EC_SPLIT_PACK_TILE, EC_WGMMA_BM, EC_WGMMA_BN, EC_WGMMA_DEFAULT_BN, EC_WGMMA_UNSCALED_PARAMS,
                          EC_SCALED_SHORT_CHUNK, EC_SPLIT_SCALED_KERNELS, EC_SPLIT_SCALED_SOURCE, ec_split_pack_kernel,
                          ec_split_scaled_kernel, ec_wgmma_auto_split)
from .gemv import gemv
from .gemv.gemv import (GEMV_MAX_M, GEMV_ROWS_MAX_M, auto_params as gemv_auto_params,  # noqa: F401
                        auto_takes as gemv_auto_takes)
from .ec.exponent_histogram import EXPONENT_HISTOGRAM_KERNEL, EXPONENT_HISTOGRAM_SOURCE  # noqa: F401

_TC_VARIANTS = TC_VARIANTS   # the name scripts/mma_emulation reads

# The families in teaching order: CUDA cores, tensor cores, FP32-accurate tensor cores,
# and products of a few rows, bound by memory.
FAMILIES = ("simt", "tensor", "ec", "gemv")

# Every rung's module, in ladder order (each defines SPEC).
RUNGS = (
    naive, coalesced, smem_tiled, blocktile_1d, blocktile_2d, vectorized, warptile, pipelined,
    wmma, wmma_warptile, mma_pipelined, wgmma,
    ec_wmma, ec_wgmma,
    gemv,
)
for _rung in RUNGS:
    register(_rung.SPEC)


def get(name: str) -> KernelSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(
            f"unknown kernel {name!r}; known kernels: {', '.join(['auto', *SPECS])}") from None


def ladder(family: str | None = None) -> list[KernelSpec]:
    specs = sorted(SPECS.values(), key=lambda s: (FAMILIES.index(s.family), s.rung))
    return [s for s in specs if family is None or s.family == family]
