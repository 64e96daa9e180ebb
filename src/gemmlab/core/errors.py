"""Exceptions raised by gemmlab."""


class GemmlabError(Exception):
    """Base class of gemmlab's own errors."""


class NoGPUError(GemmlabError, RuntimeError):
    """No usable NVIDIA GPU or driver: the message says what is missing."""


class CompileError(GemmlabError, RuntimeError):
    """NVRTC rejected a kernel; the message carries the compiler log."""


class HeaderNotFoundError(GemmlabError, RuntimeError):
    """The CUDA headers a kernel includes could not be found anywhere."""


class MissingExtraError(GemmlabError, ImportError):
    """A package or library of an optional extra is not installed: the message names
    the extra to install."""


# Modules of the optional extras (pyproject.toml), by top-level import name:
# what they are, and the install line that brings them.
_CU_INSTALL = "pip install 'gemmlab[cu13]' (or 'gemmlab[cu12]' for a CUDA 12 driver)"
_CUPY = ("CuPy (GPU arrays, cuBLAS reference)", _CU_INSTALL)
EXTRAS = {
    "cupy": _CUPY,
    "cupy_backends": _CUPY,
    "torch": ("PyTorch", "pip install 'gemmlab[torch]'"),
    "matplotlib": ("matplotlib (plots)", "pip install 'gemmlab[plot]'"),
}
NVRTC_HINT = (
    f"the NVRTC compiler library (libnvrtc) was not found: {_CU_INSTALL}, or put a CUDA toolkit's "
    "lib64 on LD_LIBRARY_PATH"
)


def missing_module_message(name: str | None) -> str | None:
    """The line to print for a missing module of an extra, or None for another module."""
    top = (name or "").split(".")[0]
    if top not in EXTRAS:
        return None
    what, install = EXTRAS[top]
    return f"{what} is not installed: {install}"
