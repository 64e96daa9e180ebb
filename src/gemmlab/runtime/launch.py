"""Launching a compiled kernel on a caller's stream."""

from __future__ import annotations

_streams: dict[int, object] = {}


def stream_from_handle(handle: int):
    """A cuda.core Stream wrapping a foreign ``cudaStream_t`` (not owned, not destroyed)."""
    from cuda.core import LEGACY_DEFAULT_STREAM, PER_THREAD_DEFAULT_STREAM, Stream
    if handle == 0 or handle == 1:
        return LEGACY_DEFAULT_STREAM
    if handle == 2:
        return PER_THREAD_DEFAULT_STREAM
    s = _streams.get(handle)
    if s is None:
        s = _streams[handle] = Stream.from_handle(handle)
    return s


# Dynamic shared memory a block may use without asking the driver first.
DEFAULT_DYNAMIC_SMEM = 48 * 1024
_smem_raised: dict[tuple[int, int], int] = {}


def device_workspace(gpu, stream_handle: int, nbytes: int, what: str, hint: str = ""):
    """A stream-ordered device allocation of ``nbytes`` on ``gpu`` (freed with
    ``.close(stream)``), for ``what`` the caller needs it for; MemoryError naming
    both, the size and the GPU when there is no room."""
    from cuda.core import Device
    try:
        return Device(gpu.ordinal).allocate(nbytes, stream=stream_from_handle(stream_handle))
    except Exception as exc:
        raise MemoryError(f"{what} needs a workspace of {nbytes / 2**20:.1f} MiB on {gpu.name} and could not get "
                          f"it ({exc}){'; ' + hint if hint else ''}") from exc


def allow_dynamic_smem(kernel, nbytes: int, device: int) -> None:
    """Raise ``kernel``'s dynamic shared memory limit on ``device`` to ``nbytes``
    (needed above 48 KB; done once per kernel, device and size)."""
    key = (int(kernel.handle), device)
    if nbytes <= DEFAULT_DYNAMIC_SMEM or _smem_raised.get(key, 0) >= nbytes:
        return
    from cuda.bindings import driver
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    err, = driver.cuKernelSetAttribute(attr, nbytes, kernel.handle, device)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"could not allow {nbytes} bytes of dynamic shared memory: {err.name}")
    _smem_raised[key] = nbytes


def _config(grid, block, smem_bytes: int, cluster):
    """cuda.core's LaunchConfig; with a cluster its grid counts clusters, ours counts blocks."""
    from cuda.core import LaunchConfig
    if tuple(cluster) == (1, 1, 1):
        return LaunchConfig(grid=tuple(grid), block=tuple(block), shmem_size=smem_bytes)
    if any(g % c for g, c in zip(grid, cluster)):
        raise ValueError(f"a grid of {tuple(grid)} blocks is not a whole number of {tuple(cluster)} clusters")
    return LaunchConfig(grid=tuple(g // c for g, c in zip(grid, cluster)), cluster=tuple(cluster),
                        block=tuple(block), shmem_size=smem_bytes)


class LaunchShape:
    """A launch's grid (in blocks), block, dynamic shared memory and cluster, with
    cuda.core's LaunchConfig built once, at the first launch."""

    __slots__ = ("grid", "block", "smem_bytes", "cluster", "_config")

    def __init__(self, grid, block, smem_bytes: int = 0, cluster=(1, 1, 1)):
        self.grid, self.block, self.smem_bytes, self.cluster = tuple(grid), tuple(block), smem_bytes, tuple(cluster)
        self._config = None

    def config(self):
        if self._config is None:
            self._config = _config(self.grid, self.block, self.smem_bytes, self.cluster)
        return self._config


def launch_shaped(kernel, shape: LaunchShape, stream_handle: int, args: tuple) -> None:
    """Enqueue ``kernel`` with a prepared shape: the per-call path of a prepared
    call (arguments: NumPy scalars, ints for pointers, cuda.core tensor maps)."""
    from cuda.core import launch as cc_launch
    cc_launch(stream_from_handle(stream_handle), shape.config(), kernel, *args)


def launch(kernel, grid, block, smem_bytes: int, stream_handle: int, *args, cluster=(1, 1, 1)) -> None:
    """Enqueue ``kernel`` on the stream (``grid`` in blocks, ``cluster`` blocks per
    cluster).  Arguments: NumPy scalars, ints (device pointers), cuda.core
    TensorMapDescriptors -- through cuda.core.launch -- or driver CUtensorMaps
    (runtime.tma's fallback), which only cuLaunchKernel takes."""
    if any(_is_driver_tensor_map(a) for a in args):
        if tuple(cluster) != (1, 1, 1):
            raise RuntimeError("cluster launches with driver-built tensor maps are not supported; "
                               "unset GEMMLAB_TMA or use CLUSTER=1")
        _launch_driver(kernel, grid, block, smem_bytes, stream_handle, args)
        return
    from cuda.core import launch as cc_launch
    cc_launch(stream_from_handle(stream_handle), _config(grid, block, smem_bytes, cluster), kernel, *args)


_cluster_fit: dict[tuple, int] = {}


def clusters_that_fit(kernel, grid, block, smem_bytes: int, cluster, stream_handle: int) -> int:
    """How many clusters of this launch can run at once on the device (cached per
    kernel and shape): what a persistent grid of clusters should not exceed."""
    key = (int(kernel.handle), tuple(block), smem_bytes, tuple(cluster))
    if key not in _cluster_fit:
        config = _config(grid, block, smem_bytes, cluster)
        _cluster_fit[key] = int(kernel.occupancy.max_active_clusters(config, stream=stream_from_handle(stream_handle)))
    return _cluster_fit[key]


def _is_driver_tensor_map(arg) -> bool:
    return type(arg).__name__ == "CUtensorMap" and hasattr(arg, "getPtr")


def _launch_driver(kernel, grid, block, smem_bytes: int, stream_handle: int, args) -> None:
    """cuLaunchKernel with kernelParams: an array of pointers, one per argument, to
    a copy of its value (NumPy buffers, kept alive until the call returns)."""
    import numpy as np
    from cuda.bindings import driver
    keep, ptrs = [], []
    for a in args:
        if _is_driver_tensor_map(a):
            keep.append(a)
            ptrs.append(int(a.getPtr()))
            continue
        buf = np.array([a]) if isinstance(a, np.generic) else np.array([int(a)], dtype=np.uint64)
        keep.append(buf)
        ptrs.append(buf.ctypes.data)
    params = np.array(ptrs, dtype=np.uint64)
    err, = driver.cuLaunchKernel(kernel.handle, *grid, *block, smem_bytes, driver.CUstream(stream_handle),
                                 params.ctypes.data, 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernel failed: {err.name}")
