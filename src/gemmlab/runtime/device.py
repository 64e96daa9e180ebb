"""GPU detection, done once per process, and the figures derived from it.

Without a driver or a GPU, ``import gemmlab`` still works; the first call that
needs the GPU raises :class:`gemmlab.NoGPUError` saying what is missing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..core.errors import NoGPUError

# FP32 lanes (CUDA cores) per SM by compute capability: the numbers NVIDIA's
# architecture whitepapers give.  Used only for the "% of FP32 peak" column.
_FP32_LANES_PER_SM = {
    (7, 0): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (10, 3): 128,
    (12, 0): 128,
}


@dataclass(frozen=True)
class ArchLimits:
    """What one block and one SM may use on a compute capability."""

    smem_per_block_optin: int  # dynamic shared memory a block may opt in to, bytes
    smem_per_sm: int  # shared memory of an SM (several blocks share it), bytes
    threads_per_sm: int
    regs_per_sm: int = 64 * 1024
    regs_per_block: int = 64 * 1024
    threads_per_block: int = 1024
    regs_per_thread: int = 255


_KB = 1024
# The CUDA C++ Programming Guide's "Technical Specifications per Compute Capability"
# table: shared memory per block (opt-in) and per SM, resident threads per SM; 64K
# 32-bit registers per SM and per block, 255 per thread, on all of them.  Used where
# no device is present (planning or `gemmlab inspect` for a target); a detected GPU's
# own figures (GPUInfo) take precedence.
ARCH_LIMITS = {
    (7, 5): ArchLimits(64 * _KB, 64 * _KB, 1024),  # Turing: T4, RTX 20
    (8, 0): ArchLimits(163 * _KB, 164 * _KB, 2048),  # A100
    (8, 6): ArchLimits(99 * _KB, 100 * _KB, 1536),  # RTX 30, A10, A40
    (8, 7): ArchLimits(163 * _KB, 164 * _KB, 1536),  # Jetson Orin
    (8, 9): ArchLimits(99 * _KB, 100 * _KB, 1536),  # RTX 40, L4, L40S
    (9, 0): ArchLimits(227 * _KB, 228 * _KB, 2048),  # H100, H200
    (10, 0): ArchLimits(227 * _KB, 228 * _KB, 2048),  # B200
    (10, 3): ArchLimits(227 * _KB, 228 * _KB, 2048),  # B300
    (12, 0): ArchLimits(99 * _KB, 100 * _KB, 1536),  # RTX 50, RTX PRO 6000
}


def cc_of(arch: str) -> tuple[int, int]:
    """The compute capability of an NVRTC target: sm_86 -> (8, 6), sm_100a -> (10, 0)."""
    digits = arch.removeprefix("sm_").rstrip("af")
    return int(digits[:-1]), int(digits[-1])


def arch_limits(arch: str) -> ArchLimits:
    """The table's limits for an NVRTC target; ValueError for a target not in it."""
    try:
        return ARCH_LIMITS[cc_of(arch)]
    except (KeyError, ValueError):
        known = ", ".join(f"sm_{a}{b}" for a, b in ARCH_LIMITS)
        raise ValueError(f"no limits known for {arch!r}; the table covers {known}") from None


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
    clock_mhz: float  # maximum SM clock
    l2_bytes: int
    max_smem_per_block_optin: int
    # Read from the device as well (0: not read, e.g. a GPUInfo made by hand; `limits`
    # then takes the table's figure for the compute capability).
    max_smem_per_sm: int = 0
    regs_per_sm: int = 0
    regs_per_block: int = 0
    max_threads_per_sm: int = 0

    @property
    def limits(self) -> ArchLimits:
        """This GPU's limits: the device's figures, the table's where one was not read."""
        table = ARCH_LIMITS.get(self.compute_capability) or ArchLimits(
            self.max_smem_per_block_optin, self.max_smem_per_block_optin, 1024
        )
        return ArchLimits(
            self.max_smem_per_block_optin,
            self.max_smem_per_sm or table.smem_per_sm,
            self.max_threads_per_sm or table.threads_per_sm,
            self.regs_per_sm or table.regs_per_sm,
            self.regs_per_block or table.regs_per_block,
        )

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
        return (
            "the NVIDIA driver (libcuda.so) was not found on this machine; "
            "install the NVIDIA display driver on a machine with an NVIDIA GPU"
        )
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
        (err,) = driver.cuInit(0)
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
        max_smem_per_sm=props.max_shared_memory_per_multiprocessor,
        regs_per_sm=props.max_registers_per_multiprocessor,
        regs_per_block=props.max_registers_per_block,
        max_threads_per_sm=props.max_threads_per_multiprocessor,
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
