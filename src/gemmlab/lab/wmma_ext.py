"""Compile your own kernels against gemmlab's device headers (gemmlab/wmma_ext.cuh).

    import gemmlab
    module = gemmlab.compile_with_headers(r'''
        #include <gemmlab/wmma_ext.cuh>
        __global__ void k(const half* v, float* out) { ... }
    ''', ["k"])                     # arch: the current GPU's (sm_90a on Hopper) unless given
    kernel = module.kernel("k")     # a cuda.core Kernel, for cuda.core.launch

The include path holds gemmlab's headers (``include_dir()``) and the CUDA headers
gemmlab found; compiled cubins share gemmlab's disk cache.  Other compilers
(nvcc, CuPy's RawModule) can use ``-I`` + ``include_dir()``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..runtime.compile import INCLUDE_DIR


def include_dir() -> Path:
    """The folder to put on the include path: ``#include <gemmlab/wmma_ext.cuh>``."""
    return INCLUDE_DIR


def header() -> Path:
    """The path of gemmlab/wmma_ext.cuh."""
    return INCLUDE_DIR / "gemmlab" / "wmma_ext.cuh"


def compile_with_headers(source, name_expressions=(), arch: str | None = None):
    """Compile CUDA C++ (a .cu path, or source text) with gemmlab's headers on the
    include path.  ``name_expressions``: kernel names or template instantiations
    to keep (``"k"``, ``"my_kernel<16>"``).  ``arch``: e.g. ``"sm_80"``,
    ``"sm_90a"``; default the GPU's.  Returns a CompiledModule (``.kernel(name)``,
    ``.resources(name)`` with registers and spills, ``.cubin``)."""
    from ..runtime.compile import cache_dir, compile_module

    if arch is None:
        from ..runtime.device import gpu_info

        arch = gpu_info().arch
    if isinstance(source, Path) or ("\n" not in str(source) and str(source).endswith((".cu", ".cuh"))):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no CUDA source file {path}")
    else:
        text = str(source)
        folder = cache_dir() / "user-sources"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.cu"
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return compile_module(path, tuple(name_expressions), arch)
