"""splitk_reduce.cu, the second half of split-K: adds the SPLITK partial products
that rung 8 or the wgmma rung wrote to a workspace into C, in C's dtype
(kernels.steps.Reduction builds its launches)."""

from __future__ import annotations

from ..spec import KERNEL_DIR, TYPE_CODES
from ..cuda_constants import read_constants

SPLITK_REDUCE_SOURCE = KERNEL_DIR / "simt" / "splitk_reduce.cu"
SPLITK_REDUCE_THREADS = read_constants("simt/splitk_reduce.cu")["SPLITK_REDUCE_THREADS"]
SPLITK_REDUCE_DTYPES = ("float32", "float16", "bfloat16")


def splitk_reduce_kernel(out_dtype: str = "float32") -> str:
    """The name expression of the reduction writing ``out_dtype`` (float32, float16, bfloat16)."""
    if out_dtype not in SPLITK_REDUCE_DTYPES:
        raise ValueError(f"split-K's reduction writes {', '.join(SPLITK_REDUCE_DTYPES)}, not {out_dtype}")
    return f"gemmlab::splitk_reduce<{TYPE_CODES[out_dtype]}>"


# The FP32 one (rung 8's outputs, and BLAS's quick return), and all of them.
SPLITK_REDUCE_KERNEL = splitk_reduce_kernel()
SPLITK_REDUCE_KERNELS = tuple(splitk_reduce_kernel(d) for d in SPLITK_REDUCE_DTYPES)
