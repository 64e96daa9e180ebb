"""Tensor rung 1, 01_wmma.cu: one warp per 16 x 16 tile of C, fragments from global memory.

Introduces what every tensor-core rung shares: the (input, output) dtype pairs it
is instantiated for and the element-type codes of its template arguments.
"""

from __future__ import annotations

from ..spec import TYPE_CODES, KernelSpec, Launch, Problem, cdiv, tiles
from ..cuda_constants import read_constants

# What the tensor-core rungs compute, and the (input, output) dtype pairs, one variant each.
TC_DTYPES = ("float16", "bfloat16", "tf32")
TC_VARIANTS = tuple(Problem(1, 1, 1, True, dt, odt) for dt, odt in (
    ("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"),
    ("tf32", "float32")))
TC_WARPS_PER_BLOCK = read_constants("tensor/01_wmma.cu")["TC_WARPS_PER_BLOCK"]


def tc_type_args(prob: Problem) -> tuple[int, int]:
    """The first two template arguments of a tensor-core kernel: input and output type codes."""
    return TYPE_CODES[prob.dtype], TYPE_CODES[prob.out_dtype]


SPEC = KernelSpec(
    name="wmma", rung=1, family="tensor", dtypes=TC_DTYPES, source="tensor/01_wmma.cu",
    template="gemmlab::wmma_tile",
    description="WMMA: one warp per 16x16 tile of C, fragments filled straight from global memory",
    template_args=lambda p, prob: tc_type_args(prob),
    geometry=lambda p, prob: Launch(grid=(cdiv(tiles(prob, 16, 16), TC_WARPS_PER_BLOCK), 1, 1),
                                    block=(32 * TC_WARPS_PER_BLOCK, 1, 1)),
    variants=TC_VARIANTS,
)
