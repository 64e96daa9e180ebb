"""Finding the CUDA headers (<mma.h>, <cuda_pipeline.h>, ...) for NVRTC.

NVRTC itself ships only a few built-in headers.  The rest come either from
NVIDIA's pip wheels, found through cuda.pathfinder, or from a CUDA toolkit.
The wheels split them differently by CUDA version: for CUDA 13,
nvidia-cuda-runtime and nvidia-cuda-crt share one folder; for CUDA 12, crt/
lives beside nvcc (nvidia-cuda-nvcc-cu12), away from the runtime headers.  A
candidate is therefore a list of folders, accepted only if together they hold
every header in REQUIRED.  Some folders that look right are not: CuPy's bundled
include folder lacks crt/mma.h.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import HeaderNotFoundError

# What the kernels include, directly or through <mma.h>.
REQUIRED = ("cuda_runtime.h", "mma.h", "crt/mma.h", "cuda_pipeline.h", "cuda_fp16.h")


@dataclass(frozen=True)
class HeaderSearch:
    include_dirs: tuple[Path, ...]  # empty if nothing was found
    found_via: str
    rejected: tuple[tuple[str, str], ...] = field(default=())  # (folder(s), why)

    @property
    def include_dir(self) -> Path | None:
        """The main folder (the one holding cuda_runtime.h), or None."""
        return self.include_dirs[0] if self.include_dirs else None

    def locate(self, header: str) -> Path | None:
        for folder in self.include_dirs:
            if (folder / header).is_file():
                return folder / header
        return None

    def report(self) -> str:
        where = " + ".join(map(str, self.include_dirs)) or "not found"
        lines = [f"CUDA headers: {where} ({self.found_via})"]
        lines += [f"  passed over {folder}: {why}" for folder, why in self.rejected]
        return "\n".join(lines)


def _has_all(folders) -> bool:
    return all(any((Path(f) / h).is_file() for f in folders) for h in REQUIRED)


def _pathfinder_candidate() -> list[tuple[str, tuple[Path, ...]]]:
    """The runtime headers' folder from NVIDIA's wheels; with nvcc's folder beside
    it only when the runtime folder alone lacks something (crt/ in CUDA 12)."""
    try:
        import cuda.pathfinder as pf
    except Exception:  # an old or broken pathfinder must not stop the other searches
        return []

    def locate(lib):
        try:
            return pf.locate_nvidia_header_directory(lib)
        except Exception:
            return None

    cudart = locate("cudart")
    if cudart is None:
        return []
    folders = (Path(cudart.abs_path),)
    if not _has_all(folders):
        nvcc = locate("nvcc")
        if nvcc is not None and Path(nvcc.abs_path) not in folders and nvcc.found_via == cudart.found_via:
            folders += (Path(nvcc.abs_path),)
    return [(f"cuda.pathfinder ({cudart.found_via})", folders)]


def _candidates() -> list[tuple[str, tuple[Path, ...]]]:
    out: list[tuple[str, tuple[Path, ...]]] = []
    env = os.environ.get("GEMMLAB_CUDA_INCLUDE")
    if env:
        out.append(("GEMMLAB_CUDA_INCLUDE", tuple(Path(p) for p in env.split(os.pathsep) if p)))
    out += _pathfinder_candidate()
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            out.append((var, (Path(os.environ[var]) / "include",)))
    nvcc = shutil.which("nvcc")
    if nvcc:
        out.append(("nvcc on PATH", (Path(nvcc).resolve().parent.parent / "include",)))
    out.append(("/usr/local/cuda", (Path("/usr/local/cuda/include"),)))
    return out


@functools.lru_cache(maxsize=None)
def find_cuda_headers() -> HeaderSearch:
    rejected = []
    seen = set()
    for how, folders in _candidates():
        key = tuple(str(f.resolve()) if f.exists() else str(f) for f in folders)
        if key in seen:
            continue
        seen.add(key)
        label = " + ".join(map(str, folders))
        missing_dirs = [f for f in folders if not f.is_dir()]
        if missing_dirs:
            rejected.append((label, "no such folder"))
            continue
        missing = [h for h in REQUIRED if not any((f / h).is_file() for f in folders)]
        if missing:
            rejected.append((label, "lacks " + ", ".join(missing)))
            continue
        return HeaderSearch(tuple(folders), how, tuple(rejected))
    return HeaderSearch((), "no folder holds all of " + ", ".join(REQUIRED), tuple(rejected))


def require_cuda_headers() -> tuple[Path, ...]:
    found = find_cuda_headers()
    if not found.include_dirs:
        raise HeaderNotFoundError(
            "the CUDA headers (" + ", ".join(REQUIRED) + ") were not found.  Install them with "
            '`pip install "cuda-toolkit[cudart,crt]==13.*"` (or "cuda-toolkit[cudart,nvcc]==12.*" '
            "for CUDA 12), or point GEMMLAB_CUDA_INCLUDE at a CUDA toolkit's include folder.\n" + found.report()
        )
    return found.include_dirs
