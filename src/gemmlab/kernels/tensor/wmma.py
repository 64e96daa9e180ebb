"""Tensor rung 1, 01_wmma.cu: one warp per 16 x 16 tile of C, fragments from global memory.

Introduces what every tensor-core rung shares: the (input, output) dtype pairs it
is instantiated for and the element-type codes of its template arguments.
"""

from __future__ import annotations

from ..spec import TYPE_CODES, KernelSpec, Launch, Problem, cdiv, tiles
from ..cuda_constants import read_constants

# What the tensor-core rungs compute, and the (input, output) dtype pairs, one variant each.
TC_DTYPES = ("float16", "bfloat16", "tf32")
TC_VARIANTS = tuple(
    Problem(1, 1, 1, True, dt, odt)
    for dt, odt in (
        ("float16", "float32"),
        ("float16", "float16"),
        ("bfloat16", "float32"),
        ("bfloat16", "bfloat16"),
        ("tf32", "float32"),
    )
)
TC_WARPS_PER_BLOCK = read_constants("tensor/01_wmma.cu")["TC_WARPS_PER_BLOCK"]

# Minimum targets, from the "Target ISA Notes" of the PTX ISA (9.0): wmma with .f16
# sm_70; wmma with .bf16 and .tf32 (m16n16k8) sm_80; mma.sync m16n8k8 .f16 sm_75,
# m16n8k16 .f16/.bf16 and m16n8k8 .tf32 sm_80; ldmatrix sm_75; cp.async sm_80;
# wgmma.mma_async and setmaxnreg sm_90a; thread-block clusters sm_90.
# The WMMA rungs take FP16 from sm_75 (sm_70 is not an NVRTC 13 target); the
# mma.sync rungs need sm_80 for every dtype (m16n8k16, cp.async).
WMMA_MIN_ARCH = {"float16": 75, "bfloat16": 80, "tf32": 80}
TC_MIN_ARCH = {dt: 80 for dt in TC_DTYPES}
WMMA_NEEDS = (
    "WMMA (FP16 from sm_70, BF16 and TF32 from sm_80) and WMMA fragment maps known for the target (sm_75: FP16 only)"
)


def tc_type_args(prob: Problem) -> tuple[int, int]:
    """The first two template arguments of a tensor-core kernel: input and output type codes."""
    return TYPE_CODES[prob.dtype], TYPE_CODES[prob.out_dtype]


SPEC = KernelSpec(
    name="wmma",
    rung=1,
    family="tensor",
    dtypes=TC_DTYPES,
    source="tensor/01_wmma.cu",
    template="gemmlab::wmma_tile",
    description="WMMA: one warp per 16x16 tile of C, fragments filled straight from global memory",
    template_args=lambda p, prob: tc_type_args(prob),
    geometry=lambda p, prob: Launch(
        grid=(cdiv(tiles(prob, 16, 16), TC_WARPS_PER_BLOCK), 1, 1), block=(32 * TC_WARPS_PER_BLOCK, 1, 1)
    ),
    variants=TC_VARIANTS,
    min_arch=WMMA_MIN_ARCH,
    needs=WMMA_NEEDS,
    fragment_maps=True,
)
