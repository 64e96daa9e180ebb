"""Exceptions raised by gemmlab."""


class GemmlabError(Exception):
    """Base class of gemmlab's own errors."""


class NoGPUError(GemmlabError, RuntimeError):
    """No usable NVIDIA GPU or driver: the message says what is missing."""


class CompileError(GemmlabError, RuntimeError):
    """NVRTC rejected a kernel; the message carries the compiler log."""


class HeaderNotFoundError(GemmlabError, RuntimeError):
    """The CUDA headers a kernel includes could not be found anywhere."""
