"""GPU detection, done once per process, and the figures derived from it.

Without a driver or a GPU, ``import gemmlab`` still works; the first call that
needs the GPU raises :class:`gemmlab.NoGPUError` saying what is missing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..errors import NoGPUError

# FP32 lanes (CUDA cores) per SM by compute capability: the numbers NVIDIA's
# architecture whitepapers give.  Used only for the "% of FP32 peak" column.
_FP32_LANES_PER_SM = {
    (7, 0): 64, (7, 5): 64,
    (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128, (10, 3): 128, (12, 0): 128,
}


def arch_for(major: int, minor: int) -> str:
    """The NVRTC target for a compute capability.

    Hopper and later get the architecture-specific target (``sm_90a``), which
    unlocks wgmma/setmaxnreg; its code runs only on that exact capability,
    which is what we compile for anyway.
    """
    suffix = "a" if major >= 9 else ""
    return f"sm_{major}{minor}{suffix}"


@dataclass(frozen=True)
class GPUInfo:
    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    arch: str
    sm_count: int
    clock_mhz: float            # maximum SM clock
    l2_bytes: int
    max_smem_per_block_optin: int

    @property
    def fp32_lanes_per_sm(self) -> int | None:
        return _FP32_LANES_PER_SM.get(self.compute_capability)

    @property
    def fp32_peak_tflops(self) -> float | None:
        """SMs x FP32 lanes x 2 (an FMA is two flops) x max clock."""
        lanes = self.fp32_lanes_per_sm
        if lanes is None:
            return None
        return self.sm_count * lanes * 2 * self.clock_mhz * 1e6 / 1e12

    @property
    def slug(self) -> str:
        """A file-name-safe GPU name, e.g. ``nvidia-h200``."""
        return "-".join(self.name.lower().replace("_", " ").split())


def _driver_problem(exc: BaseException) -> str:
    text = str(exc)
    if "driver library" in text or "libcuda" in text or "dlopen" in text:
        return ("the NVIDIA driver (libcuda.so) was not found on this machine; "
                "install the NVIDIA display driver on a machine with an NVIDIA GPU")
    return f"the CUDA driver could not be initialised ({type(exc).__name__}: {text})"


_detected: dict[int, GPUInfo | NoGPUError] = {}


def gpu_info(ordinal: int = 0) -> GPUInfo:
    """Detect GPU ``ordinal`` once per process; later calls return (or re-raise)
    the first answer without touching the driver again."""
    found = _detected.get(ordinal)
    if found is None:
        try:
            found = _detect(ordinal)
        except NoGPUError as exc:
            found = exc
        _detected[ordinal] = found
    if isinstance(found, NoGPUError):
        raise NoGPUError(str(found))
    return found


def _detect(ordinal: int) -> GPUInfo:
    try:
        from cuda.core import Device
        from cuda.bindings import driver
    except Exception as exc:  # pragma: no cover - cuda.core is a dependency
        raise NoGPUError(f"cuda.core could not be imported ({exc}); reinstall gemmlab") from exc
    try:
        err, = driver.cuInit(0)
    except Exception as exc:
        raise NoGPUError(_driver_problem(exc)) from exc
    if err != driver.CUresult.CUDA_SUCCESS:
        if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
            raise NoGPUError("the NVIDIA driver is installed but reports no CUDA-capable GPU")
        raise NoGPUError(f"the CUDA driver failed to initialise: {err.name}")
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        raise NoGPUError("the NVIDIA driver is installed but reports no CUDA-capable GPU")
    if not 0 <= ordinal < count:
        raise NoGPUError(f"GPU {ordinal} was asked for, but this machine has {count} GPU(s)")
    dev = Device(ordinal)
    props = dev.properties
    cc = dev.compute_capability
    major, minor = cc.major, cc.minor
    return GPUInfo(
        ordinal=ordinal,
        name=dev.name,
        compute_capability=(major, minor),
        arch=arch_for(major, minor),
        sm_count=props.multiprocessor_count,
        clock_mhz=props.clock_rate / 1000.0,
        l2_bytes=props.l2_cache_size,
        max_smem_per_block_optin=props.max_shared_memory_per_block_optin,
    )


def gpu_available() -> bool:
    try:
        gpu_info(0)
        return True
    except NoGPUError:
        return False


_tls = threading.local()


def make_current(ordinal: int) -> None:
    """Make GPU ``ordinal``'s primary context current on this thread (the driver
    calls of a launch need one; a thread that only used PyTorch or CuPy may have
    none yet).  Once per thread and device."""
    if getattr(_tls, "device", None) != ordinal:
        from cuda.core import Device
        Device(ordinal).set_current()
        _tls.device = ordinal
