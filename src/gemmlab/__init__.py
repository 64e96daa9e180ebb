"""gemmlab: a readable ladder of CUDA GEMM kernels, from naive to cuBLAS-class.

import gemmlab
c = gemmlab.matmul(a, b)                          # kernel="auto"
c = gemmlab.matmul(a, b, kernel="smem_tiled", tile=16)
y = gemmlab.grouped_mm(x, w, offs)                # a mixture-of-experts layer's products (Hopper)
gemmlab.kernels()                                 # the registry
"""

from .core.api import grouped_mm, kernels, last_plan, matmul, matmul_strided_batched, plan
from .core.errors import CompileError, GemmlabError, HeaderNotFoundError, NoGPUError
from .kernels.spec import KernelSpec
from .tools.verify import verify
from .lab import fragments
from .lab.wmma_ext import compile_with_headers

__version__ = "0.1.0"

__all__ = [
    "matmul",
    "matmul_strided_batched",
    "grouped_mm",
    "kernels",
    "plan",
    "last_plan",
    "verify",
    "KernelSpec",
    "GemmlabError",
    "NoGPUError",
    "CompileError",
    "HeaderNotFoundError",
    "__version__",
    "fragments",
    "compile_with_headers",
]
