"""Finding the CUDA headers (<mma.h>, <cuda_pipeline.h>, ...) for NVRTC.

NVRTC itself ships only a few built-in headers.  The rest come either from
NVIDIA's pip wheels (nvidia-cuda-runtime + nvidia-cuda-crt, found through
cuda.pathfinder) or from a CUDA toolkit.  Some folders that look right are not:
CuPy's bundled include folder lacks crt/mma.h, so a folder is accepted only if
it holds every header in REQUIRED.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import HeaderNotFoundError

# What the kernels include, directly or through <mma.h>.
REQUIRED = ("cuda_runtime.h", "mma.h", "crt/mma.h", "cuda_pipeline.h", "cuda_fp16.h")


@dataclass(frozen=True)
class HeaderSearch:
    include_dir: Path | None
    found_via: str
    rejected: tuple[tuple[str, str], ...] = field(default=())  # (folder, why)

    def report(self) -> str:
        lines = [f"CUDA headers: {self.include_dir or 'not found'} ({self.found_via})"]
        lines += [f"  passed over {folder}: {why}" for folder, why in self.rejected]
        return "\n".join(lines)


def _candidates() -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    env = os.environ.get("GEMMLAB_CUDA_INCLUDE")
    if env:
        out.append(("GEMMLAB_CUDA_INCLUDE", Path(env)))
    try:
        import cuda.pathfinder as pf
        located = pf.locate_nvidia_header_directory("cudart")
        if located is not None:
            out.append((f"cuda.pathfinder ({located.found_via})", Path(located.abs_path)))
    except Exception:  # an old or broken pathfinder must not stop the other searches
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            out.append((var, Path(os.environ[var]) / "include"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        out.append(("nvcc on PATH", Path(nvcc).resolve().parent.parent / "include"))
    out.append(("/usr/local/cuda", Path("/usr/local/cuda/include")))
    return out


@functools.lru_cache(maxsize=None)
def find_cuda_headers() -> HeaderSearch:
    rejected = []
    seen = set()
    for how, folder in _candidates():
        key = str(folder.resolve()) if folder.exists() else str(folder)
        if key in seen:
            continue
        seen.add(key)
        if not folder.is_dir():
            rejected.append((str(folder), "no such folder"))
            continue
        missing = [h for h in REQUIRED if not (folder / h).is_file()]
        if missing:
            rejected.append((str(folder), "lacks " + ", ".join(missing)))
            continue
        return HeaderSearch(folder, how, tuple(rejected))
    return HeaderSearch(None, "no folder holds all of " + ", ".join(REQUIRED), tuple(rejected))


def require_cuda_headers() -> Path:
    found = find_cuda_headers()
    if found.include_dir is None:
        raise HeaderNotFoundError(
            "the CUDA headers (" + ", ".join(REQUIRED) + ") were not found.  Install them with "
            "`pip install \"cuda-toolkit[cudart,crt]==13.*\"` (or ==12.* for CUDA 12), or point "
            "GEMMLAB_CUDA_INCLUDE at a CUDA toolkit's include folder.\n" + found.report())
    return found.include_dir
