"""splitk_reduce.cu, the second half of split-K: adds the SPLITK partial products
that rung 8 wrote to a workspace into C (executor.Launcher launches it)."""

from __future__ import annotations

from ..spec import KERNEL_DIR
from ..cuda_constants import read_constants

SPLITK_REDUCE_SOURCE = KERNEL_DIR / "simt" / "splitk_reduce.cu"
SPLITK_REDUCE_KERNEL = "gemmlab::splitk_reduce"
SPLITK_REDUCE_THREADS = read_constants("simt/splitk_reduce.cu")["SPLITK_REDUCE_THREADS"]
