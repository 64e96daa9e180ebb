"""Launching a compiled kernel on a caller's stream."""

from __future__ import annotations

import ctypes
import operator
import struct
import threading

import numpy as np

_pack_into = struct.pack_into

_streams: dict[int, object] = {}


def stream_from_handle(handle: int):
    """A cuda.core Stream wrapping a foreign ``cudaStream_t`` (not owned, not destroyed)."""
    s = _streams.get(handle)
    if s is None:
        from cuda.core import LEGACY_DEFAULT_STREAM, PER_THREAD_DEFAULT_STREAM, Stream

        s = (
            LEGACY_DEFAULT_STREAM
            if handle in (0, 1)
            else PER_THREAD_DEFAULT_STREAM
            if handle == 2
            else Stream.from_handle(handle)
        )
        s = _streams.setdefault(handle, s)
    return s


_driver = None


def driver():
    """cuda.bindings.driver, imported once (an import statement in a per-call path costs
    about a microsecond each time)."""
    global _driver
    if _driver is None:
        from cuda.bindings import driver as d

        _driver = d
    return _driver


def driver_call(result, what: str):
    """The values a cuda.bindings driver call returned after its status, or
    RuntimeError naming ``what`` (the call) and the status."""
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != driver().CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err.name}")
    return rest[0] if len(rest) == 1 else rest


# Dynamic shared memory a block may use without asking the driver first.
DEFAULT_DYNAMIC_SMEM = 48 * 1024
_smem_raised: dict[tuple[int, int], int] = {}


class Workspace:
    """``nbytes`` of device memory from gemmlab's stream-ordered pool, at ``handle``;
    ``close(stream)`` gives it back in stream order, after the work enqueued so far."""

    __slots__ = ("handle", "nbytes", "repeats")
    # Whether the address is the same from call to call (a stream's kept workspace), so that
    # what is built on it can be kept for as long as the workspace: not for an allocation of one call.
    kept = False

    def __init__(self, handle: int, nbytes: int, repeats: bool = False):
        # repeats: the address usually comes back at the next call (the pool hands a stream
        # the block it freed), so that arguments built on it, remembered by address, are
        # found again; not under graph capture (the graph's own memory) -- stream_workspace.
        self.handle, self.nbytes, self.repeats = handle, nbytes, repeats

    def close(self, stream_handle: int) -> None:
        if self.handle:
            d = driver()
            (err,) = d.cuMemFreeAsync(self.handle, d.CUstream(stream_handle))
            self.handle = 0
            if err != d.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cuMemFreeAsync failed: {err.name}")


_pools: dict[int, object] = {}


def _pool(device: int):
    """gemmlab's own memory pool on ``device`` (created once): stream-ordered
    allocations, which CUDA-graph capture records as allocation nodes, kept by the
    pool between calls instead of going back to the driver at every
    synchronisation (release threshold: unlimited).  Its own pool, so that no other
    library's pool settings change."""
    pool = _pools.get(device)
    if pool is None:
        from cuda.bindings import driver as d

        props = d.CUmemPoolProps()
        props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = device
        err, pool = d.cuMemPoolCreate(props)
        if err != d.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuMemPoolCreate failed on GPU {device}: {err.name}")
        (err,) = d.cuMemPoolSetAttribute(
            pool, d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, d.cuuint64_t(2**64 - 1)
        )
        if err != d.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuMemPoolSetAttribute failed on GPU {device}: {err.name}")
        pool = _pools.setdefault(device, pool)
    return pool


def device_workspace(gpu, stream_handle: int, nbytes: int, what: str, hint: str = "") -> Workspace:
    """A stream-ordered device allocation of ``nbytes`` on ``gpu`` (freed with
    ``.close(stream)``), for ``what`` the caller needs it for; MemoryError naming
    both, the size and the GPU when there is no room."""
    d = driver()
    if nbytes <= 0:
        return Workspace(0, 0)
    pool = _pools.get(gpu.ordinal)
    if pool is None and stream_is_capturing(stream_handle):
        # No pool can be created while a graph is captured: the device's own pool
        # serves this allocation (an allocation node of the graph all the same).
        err, ptr = d.cuMemAllocAsync(nbytes, d.CUstream(stream_handle))
    else:
        err, ptr = d.cuMemAllocFromPoolAsync(nbytes, pool or _pool(gpu.ordinal), d.CUstream(stream_handle))
    if err != d.CUresult.CUDA_SUCCESS:
        exc = MemoryError if err == d.CUresult.CUDA_ERROR_OUT_OF_MEMORY else RuntimeError
        raise exc(
            f"{what} needs a workspace of {nbytes / 2**20:.1f} MiB on {gpu.name} and could not get "
            f"it ({err.name}){'; ' + hint if hint else ''}"
        )
    return Workspace(int(ptr), nbytes)


def stream_is_capturing(stream_handle: int) -> bool:
    """Whether work enqueued on the stream now is being captured into a CUDA graph."""
    d = driver()
    err, status = d.cuStreamIsCapturing(d.CUstream(stream_handle))
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuStreamIsCapturing failed: {err.name}")
    return status != d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


class _Borrowed:
    """A stream's scratch workspace, lent to one call until close()."""

    __slots__ = ("handle", "_lock")
    kept = True
    repeats = True

    def __init__(self, handle: int, lock):
        self.handle, self._lock = handle, lock

    def close(self, stream_handle: int) -> None:
        self._lock.release()


_scratch: dict[tuple[int, int, str], list] = {}  # (device, stream, slot) -> [lock, workspace]
_scratch_lock = threading.Lock()
# Called when a kept workspace is replaced by a larger one: what remembers launches on the
# old one's address (gemmlab.torch.native) forgets them.
on_workspace_replaced: list = []


def _pthread():
    """libc's (or libpthread's) mutex functions (init, lock, unlock, trylock), or None where
    neither has them."""
    import ctypes.util

    for name in (None, ctypes.util.find_library("pthread")):
        try:
            lib = ctypes.CDLL(name)
            fns = lib.pthread_mutex_init, lib.pthread_mutex_lock, lib.pthread_mutex_unlock
        except (OSError, AttributeError):
            continue
        init, lock, unlock = fns
        try:
            trylock = lib.pthread_mutex_trylock
        except AttributeError:
            continue
        fns += (trylock,)
        init.argtypes = [ctypes.c_void_p, ctypes.c_void_p]  # (mutex, attributes: none)
        lock.argtypes = unlock.argtypes = trylock.argtypes = [ctypes.c_void_p]
        for fn in fns:
            fn.restype = ctypes.c_int
        return fns
    return None


_mutex = _pthread()


class SlotLock:
    """A kept workspace's lock: a POSIX mutex, so that the C++ routed kernels
    (gemmlab.torch.native) can hold it too while they repeat a call's launches on the
    workspace.  ctypes lets go of the GIL while a thread waits for it.  ``address``: the
    mutex's, 0 where this C library has none (then a Python lock, which C++ cannot take)."""

    __slots__ = ("address", "_buffer", "_py")

    def __init__(self):
        self._py = None
        if _mutex is None:
            self.address, self._py = 0, threading.Lock()
            return
        self._buffer = ctypes.create_string_buffer(128)  # a pthread_mutex_t is 40-48 bytes
        self.address = ctypes.addressof(self._buffer)
        if _mutex[0](self.address, None) != 0:
            self.address, self._py = 0, threading.Lock()

    def acquire(self) -> None:
        if self._py is not None:
            self._py.acquire()
        else:
            _mutex[1](self.address)

    def release(self) -> None:
        if self._py is not None:
            self._py.release()
        else:
            _mutex[2](self.address)


PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD
# Workspaces up to this size are kept per stream (fp32_tc's parts workspace of a 4096^3 product,
# laid out for either candidate's parts, is 256 MiB; taken from the pool at every call it held up
# the call's first kernel: benchmarks/NOTES.md); larger ones belong to products whose kernels take far
# longer than an allocation, so they come from the pool each call.  The pool keeps what is
# freed to it either way (its release threshold is unlimited), so keeping costs no memory
# that the pool would not hold.
SCRATCH_KEPT_BYTES = 512 * 2**20


def zero_async(ptr: int, nbytes: int, stream_handle: int) -> None:
    """On the stream: ``nbytes`` of device memory at ``ptr`` set to zero."""
    if _recordings[0]:
        rec = recording()
        if rec is not None:
            rec.steps.append((MEMSET, ptr, nbytes))
    d = driver()
    driver_call(d.cuMemsetD8Async(ptr, 0, nbytes, d.CUstream(stream_handle)), "cuMemsetD8Async")


def _zeroed(ws: Workspace, stream_handle: int) -> Workspace:
    """``ws`` with its bytes zeroed, in stream order (a new workspace's first state)."""
    if ws.handle:
        zero_async(ws.handle, ws.nbytes, stream_handle)
    return ws


def stream_workspace(
    gpu,
    stream_handle: int,
    nbytes: int,
    what: str,
    hint: str = "",
    slot: str = "scratch",
    zero_new: bool = False,
    capturing: bool | None = None,
):
    """Like device_workspace, but outside graph capture one workspace per device,
    stream and ``slot`` is kept and reused (grown when a call needs more, up to
    SCRATCH_KEPT_BYTES): a small product's split-K or split pre-pass then costs no
    allocation, and tensor maps of the workspace stay valid from call to call
    (``.kept`` says which workspaces those are).  Reuse is safe in stream order; a
    lock held from here to ``close()`` keeps two threads that share a stream from
    interleaving their use of it.  A call that needs more than one at once takes them
    from as many slots, always in the same order: "choice" (fp32_tc's method choice),
    then "splitk" (split-K's partial products), then "splitk_counters" (wgmma's
    split-K counters), then "scratch" (ec_wgmma's split parts, wgmma's staging
    copies), so that two threads on one stream cannot each hold one the other waits
    for; a slot's lock is not re-entrant, so no call takes one slot twice.  Under capture
    the graph gets its own allocation, and so does a call on the per-thread default
    stream: its handle names another stream in each thread, which a kept workspace
    would not order.  A workspace too large to keep comes from the pool at every call
    and is freed after it; the pool hands the stream the same block again, so its
    ``.repeats`` is true (what is built on it is worth remembering by address).
    ``zero_new``: a workspace allocated by this call starts zeroed (in stream order),
    for a user that leaves it zeroed when done (fp32_tc's choice record, whose sums
    split_scaled.cu zeroes again; wgmma's split-K counters, which each tile's owner
    zeroes again), so that a kept one needs no zeroing per call.
    ``capturing``: whether the stream is being captured, where the caller has asked
    already in this call (each question is a driver call, about 2 µs); None: ask.
    A recording (gemmlab.torch.native) may repeat a call on a kept workspace: it notes the
    lock and the stream; any other workspace spoils it."""
    if capturing is None:
        capturing = stream_is_capturing(stream_handle)
    if stream_handle == PER_THREAD_STREAM or capturing or nbytes > SCRATCH_KEPT_BYTES:
        if _recordings[0]:
            spoil_recording()  # memory of this call alone
        ws = device_workspace(gpu, stream_handle, nbytes, what, hint)
        if nbytes > SCRATCH_KEPT_BYTES and not capturing and stream_handle != PER_THREAD_STREAM:
            ws.repeats = True
        return _zeroed(ws, stream_handle) if zero_new else ws
    key = (gpu.ordinal, stream_handle, slot)
    entry = _scratch.get(key)
    if entry is None:
        with _scratch_lock:
            entry = _scratch.setdefault(key, [SlotLock(), None])
    lock = entry[0]
    lock.acquire()
    try:
        ws = entry[1]
        if ws is None or ws.nbytes < nbytes:
            if _recordings[0]:
                spoil_recording()  # a first state a repeat would not make again
            if ws is not None:
                ws.close(stream_handle)  # after the work already enqueued on the stream
                _generation[0] += 1
                for forget in on_workspace_replaced:
                    forget()
            entry[1] = ws = device_workspace(gpu, stream_handle, nbytes, what, hint)
            if zero_new:
                _zeroed(ws, stream_handle)
        if _recordings[0]:
            rec = recording()
            if rec is not None:
                rec.hold(lock.address, stream_handle)
    except BaseException:
        lock.release()
        raise
    return _Borrowed(ws.handle, lock)


def allow_dynamic_smem(kernel, nbytes: int, device: int) -> None:
    """Raise ``kernel``'s dynamic shared memory limit on ``device`` to ``nbytes`` where they and
    the kernel's static shared memory pass the default 48 KB (asked of the driver; a tile of
    48 KB beside a few static bytes needs it too).  Done once per kernel, device and size."""
    key = (int(kernel.handle), device)
    if nbytes <= 0 or _smem_raised.get(key, 0) >= nbytes:
        return
    from cuda.bindings import driver

    if nbytes <= DEFAULT_DYNAMIC_SMEM:
        static = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        err, static_bytes = driver.cuKernelGetAttribute(static, kernel.handle, device)
        if err == driver.CUresult.CUDA_SUCCESS and nbytes + static_bytes <= DEFAULT_DYNAMIC_SMEM:
            _smem_raised[key] = nbytes  # the default holds it: nothing to raise
            return
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    (err,) = driver.cuKernelSetAttribute(attr, nbytes, kernel.handle, device)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"could not allow {nbytes} bytes of dynamic shared memory: {err.name}")
    _smem_raised[key] = nbytes


def _config(grid, block, smem_bytes: int, cluster, pdl: bool = False):
    """cuda.core's LaunchConfig; with a cluster its grid counts clusters, ours counts blocks.
    ``pdl``: programmatic dependent launch (LaunchShape)."""
    from cuda.core import LaunchConfig

    extra = {"programmatic_stream_serialization": True} if pdl else {}
    if tuple(cluster) == (1, 1, 1):
        return LaunchConfig(grid=tuple(grid), block=tuple(block), shmem_size=smem_bytes, **extra)
    if any(g % c for g, c in zip(grid, cluster)):
        raise ValueError(f"a grid of {tuple(grid)} blocks is not a whole number of {tuple(cluster)} clusters")
    return LaunchConfig(
        grid=tuple(g // c for g, c in zip(grid, cluster)),
        cluster=tuple(cluster),
        block=tuple(block),
        shmem_size=smem_bytes,
        **extra,
    )


class LaunchShape:
    """A launch's grid (in blocks), block, dynamic shared memory and cluster, with
    its launch configurations built once: cuda.core's LaunchConfig (launch()), and the
    driver's CUlaunchConfig per stream (launch_shaped).  ``pdl``: programmatic
    dependent launch -- the kernel may start before the one ahead of it in the stream
    has finished, and must wait for it (griddepcontrol.wait) before it reads what that
    one wrote: for kernels written so (ec/choice.cuh's ec_wait_prior_grid), so that
    their launch overlaps the end of the kernel before."""

    __slots__ = ("grid", "block", "smem_bytes", "cluster", "pdl", "_config", "_driver")

    def __init__(self, grid, block, smem_bytes: int = 0, cluster=(1, 1, 1), pdl: bool = False):
        self.grid, self.block, self.smem_bytes, self.cluster = tuple(grid), tuple(block), smem_bytes, tuple(cluster)
        self.pdl = pdl
        self._config = None
        self._driver = {}  # stream handle -> CUlaunchConfig

    def config(self):
        if self._config is None:
            self._config = _config(self.grid, self.block, self.smem_bytes, self.cluster, self.pdl)
        return self._config

    def driver_config(self, stream_handle: int):
        """The driver's launch configuration of this shape on the stream (built once per
        stream, never changed after, so that threads may share it)."""
        cfg = self._driver.get(stream_handle)
        if cfg is None:
            d = driver()
            cfg = d.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = self.grid  # in blocks, clusters or not
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.block
            cfg.sharedMemBytes = self.smem_bytes
            cfg.hStream = d.CUstream(stream_handle)
            attrs = []
            if self.cluster != (1, 1, 1):
                if any(g % c for g, c in zip(self.grid, self.cluster)):
                    raise ValueError(f"a grid of {self.grid} blocks is not a whole number of {self.cluster} clusters")
                at = d.CUlaunchAttribute()
                at.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = self.cluster
                attrs.append(at)
            if self.pdl:
                at = d.CUlaunchAttribute()
                at.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                at.value.programmaticStreamSerializationAllowed = 1
                attrs.append(at)
            cfg.attrs = attrs
            cfg.numAttrs = len(attrs)
            cfg = self._driver.setdefault(stream_handle, cfg)
        return cfg


class PackedArgs(tuple):
    """A launch's arguments that are launched again and again (a prepared call's kept
    launches): packed for the driver once, at the first launch, and kept packed."""

    @classmethod
    def of(cls, holder) -> PackedArgs:
        """Arguments that are already packed (MapParams.rebound): launched as they are."""
        args = cls()
        args.__dict__["holder"] = holder
        return args

    def packed(self):
        """The packed arguments (an object whose ``ptr`` is the kernelParams array), or
        None where only cuda.core.launch can take them."""
        holder = self.__dict__.get("holder")
        if holder is None:
            if any(is_tensor_map(a) for a in self):
                holder = MapParams(self)
            else:
                holder_class = _param_holder()
                holder = holder_class(self) if holder_class else False
            self.__dict__["holder"] = holder
        return holder or None


# struct's codes (native size and alignment, as a kernel's parameters are laid out) of
# the scalar arguments MapParams takes; a Python int is a device pointer.
_CODES = {"int32": "i", "uint32": "I", "int64": "q", "uint64": "Q", "float32": "f", "float64": "d", "int": "Q"}
MAP_BYTES = 128  # a CUtensorMap, 64-byte aligned
_layouts: dict[tuple, _Layout] = {}


class _Layout:
    """Where MapParams puts arguments of one tuple of types, from a 64-byte aligned base:
    the maps' 128 bytes each, then the array of pointers (one per argument, to its value),
    then the scalars, aligned as a C struct would align them."""

    __slots__ = ("n", "maps", "table", "fmt", "nbytes", "at", "codes", "scalars", "pointers", "sizes")

    def __init__(self, kinds: tuple):
        self.n = n = len(kinds)
        self.pointers = struct.Struct(f"@{n}Q")  # the pointer array alone (MapParams.rebound)
        self.maps = tuple(i for i, kind in enumerate(kinds) if kind.__name__ == "CUtensorMap")
        self.table = MAP_BYTES * len(self.maps)  # the pointer array's offset
        fmt, at, codes, scalars = "@", [0] * n, [""] * n, []
        for j, i in enumerate(self.maps):
            at[i] = MAP_BYTES * j
        for i, kind in enumerate(kinds):
            if i in self.maps:
                continue
            code = _CODES.get(kind.__name__)
            if code is None:
                raise TypeError(f"a kernel argument of type {kind.__name__} cannot be packed with tensor maps")
            fmt += code
            at[i] = self.table + 8 * n + struct.calcsize(fmt) - struct.calcsize("@" + code)
            codes[i] = "@" + code
            scalars.append(i)
        self.fmt = f"@{n}Q" + fmt[1:]  # the pointer array, then the scalars
        self.nbytes = self.table + struct.calcsize(self.fmt)
        self.at, self.codes = tuple(at), tuple(codes)
        self.sizes = tuple(MAP_BYTES if i in self.maps else struct.calcsize(codes[i]) for i in range(n))
        self.scalars = (
            operator.itemgetter(*scalars) if len(scalars) > 1 else lambda args: tuple(args[i] for i in scalars)
        )


def _aligned_buffer(nbytes: int):
    """(a zeroed buffer, the offset of its first 64-byte aligned byte, that byte's address)."""
    raw = (ctypes.c_uint64 * (-(-nbytes // 8) + 8))()
    address = ctypes.addressof(raw)
    shift = -address % 64
    return raw, shift, address + shift


class MapParams:
    """The kernelParams of a launch that passes tensor maps (driver CUtensorMaps, which
    cuda.core's ParamHolder does not take), in one buffer (_Layout): a copy of each map,
    the array of pointers to each argument's value, the scalars.  ``rebound`` makes the
    same launch on other addresses from it: a copy of the buffer with some values and the
    maps' addresses replaced, without building the arguments again."""

    __slots__ = ("ptr", "_buffer", "_layout")

    def __init__(self, args=None, *, layout: _Layout | None = None):
        if args is None:  # rebound's: filled in there
            self._layout = layout
            return
        kinds = tuple(map(type, args))
        self._layout = lay = _layouts.get(kinds) or _layouts.setdefault(kinds, _Layout(kinds))
        self._buffer, shift, base = _aligned_buffer(lay.nbytes)
        _pack_into(lay.fmt, self._buffer, shift + lay.table, *[base + at for at in lay.at], *lay.scalars(args))
        for i in lay.maps:
            ctypes.memmove(base + lay.at[i], args[i].getPtr(), MAP_BYTES)
        self.ptr = base + lay.table

    def rebound(self, values, maps, replace_address) -> MapParams:
        """A copy with the arguments at positions ``values`` = ((position, value), ...)
        replaced, and the maps at positions ``maps`` = ((position, address), ...) pointed at
        other addresses by ``replace_address(map address, address)`` (runtime.tma)."""
        lay = self._layout
        new = MapParams(layout=lay)
        new._buffer, shift, base = _aligned_buffer(lay.nbytes)
        ctypes.memmove(base, self.ptr - lay.table, lay.nbytes)
        lay.pointers.pack_into(new._buffer, shift + lay.table, *[base + at for at in lay.at])
        for i, value in values:
            _pack_into(lay.codes[i], new._buffer, shift + lay.at[i], value)
        for i, address in maps:
            replace_address(base + lay.at[i], address)
        new.ptr = base + lay.table
        return new


_cc_launch = None


def cuda_core_launch():
    """cuda.core.launch, imported once."""
    global _cc_launch
    if _cc_launch is None:
        from cuda.core import launch as cc_launch

        _cc_launch = cc_launch
    return _cc_launch


_holder_class = None


def _param_holder():
    """cuda.core's packer of kernel arguments (the array of pointers to their values that
    cuLaunchKernelEx takes; NumPy scalars, ints as pointers, tensor map descriptors),
    imported once; None where this cuda.core has none by that name."""
    global _holder_class
    if _holder_class is None:
        try:
            from cuda.core._kernel_arg_handler import ParamHolder
        except ImportError:
            ParamHolder = False
        _holder_class = ParamHolder
    return _holder_class or None


_functions: dict[int, tuple] = {}  # id(kernel) -> (kernel, its handle as a CUfunction)


def _function(kernel):
    entry = _functions.get(id(kernel))
    if entry is None:  # the kernel is kept with it, so that its id is not reused
        entry = _functions.setdefault(id(kernel), (kernel, driver().CUfunction(int(kernel.handle))))
    return entry[1]


def launch_shaped(kernel, shape: LaunchShape, stream_handle: int, args: tuple) -> None:
    """Enqueue ``kernel`` with a prepared shape: the per-call path of a prepared
    call (arguments: NumPy scalars, ints for pointers; a PackedArgs, packed once, may
    also hold tensor maps).  Straight to the driver's cuLaunchKernelEx with the
    shape's configuration for the stream, which takes less host time than
    cuda.core.launch (benchmarks/NOTES.md); through cuda.core.launch where this
    cuda.core has no argument packer gemmlab knows."""
    if type(args) is PackedArgs:
        holder = args.packed()
    else:
        holder_class = _holder_class if _holder_class is not None else _param_holder()
        holder = holder_class(args) if holder_class else None
    if holder is None:
        if _recordings[0]:
            spoil_recording()
        config = shape._config if shape._config is not None else shape.config()
        (_cc_launch or cuda_core_launch())(stream_from_handle(stream_handle), config, kernel, *args)
        return
    cfg = shape._driver.get(stream_handle)
    if cfg is None:
        cfg = shape.driver_config(stream_handle)
    _launch_driver(cfg, _function(kernel), holder.ptr)
    if _recordings[0]:
        _record(kernel, shape, holder, args)


def _launch_driver(cfg, function, params: int) -> None:
    """cuLaunchKernelEx with a launch configuration and packed arguments made before."""
    d = _driver or driver()
    (err,) = d.cuLaunchKernelEx(cfg, function, params, 0)
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernelEx failed: {err.name}")


def launch(kernel, grid, block, smem_bytes: int, stream_handle: int, *args, cluster=(1, 1, 1)) -> None:
    """Enqueue ``kernel`` on the stream (``grid`` in blocks, ``cluster`` blocks per
    cluster).  Arguments: NumPy scalars, ints (device pointers) -- through
    cuda.core.launch -- or with tensor maps among them, through cuLaunchKernelEx
    (launch_shaped)."""
    if any(is_tensor_map(a) for a in args):
        launch_shaped(kernel, LaunchShape(grid, block, smem_bytes, cluster), stream_handle, PackedArgs(args))
        return
    if _recordings[0]:
        spoil_recording()
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


def is_tensor_map(arg) -> bool:
    """Whether ``arg`` is a tensor map (runtime.tma: a cuda.bindings CUtensorMap)."""
    return type(arg).__name__ == "CUtensorMap" and hasattr(arg, "getPtr")


# -- a call's launches, recorded (gemmlab.torch.native) ---------------------------------------


LAUNCH, MEMSET = 0, 1  # a recorded step's kind


class Recording:
    """What one call enqueues, recorded for the C++ routed kernels to repeat
    (gemmlab.torch.native), in order in ``steps``: (LAUNCH, kernel, shape, its kernelParams
    array's holder, each argument's bytes) for each launch_shaped launch, (MEMSET, address,
    bytes) for each zero_async.  ``locks`` and ``stream``: the kept workspaces' locks the
    call took, in the order it took them, and the stream they belong to (a repeat must take
    them too, on that stream).  ``add_after``: the multiple of the call's bias that was added
    to the result after its launches (PyTorch's add), or None.  ``spoiled`` where anything
    else reached the GPU -- a workspace of this call alone, a launch by another path, the full
    path of gemmlab.matmul with its copies -- which a repeat would leave out, and
    ``prepared``: the calls of prepared calls it saw (gemmlab.core.api).  A context manager;
    recordings nest, and an inner one spoils the outer ones (its launches are not theirs to
    repeat alone)."""

    __slots__ = ("steps", "spoiled", "prepared", "locks", "stream", "add_after")

    def __init__(self):
        self.steps, self.spoiled, self.prepared = [], False, 0
        self.locks, self.stream, self.add_after = [], None, None

    def __enter__(self) -> Recording:
        stack = _recording_stack()
        for outer in stack:
            outer.spoiled = True
        stack.append(self)
        with _recordings_lock:
            _recordings[0] += 1
        return self

    def __exit__(self, *exc) -> bool:
        _recording_stack().remove(self)
        with _recordings_lock:
            _recordings[0] -= 1
        return False

    def hold(self, lock_address: int, stream_handle: int) -> None:
        """The call took a kept workspace of ``stream_handle`` under this lock."""
        if not lock_address or self.stream not in (None, stream_handle):
            self.spoiled = True
            return
        self.locks.append(lock_address)
        self.stream = stream_handle

    def added(self, multiple: float) -> None:
        """The call's bias times ``multiple`` was added to its result after the launches."""
        if self.add_after is not None:
            self.spoiled = True
        self.add_after = multiple

    def repeatable(self) -> list | None:
        """The steps of one prepared call, with nothing else on the GPU; None for any other
        call."""
        if self.spoiled or self.prepared != 1 or not self.steps:
            return None
        return self.steps


_recordings = [0]  # recordings open in all threads: launches look further only where any is
_recordings_lock = threading.Lock()
_recording_local = threading.local()


def _recording_stack() -> list:
    stack = getattr(_recording_local, "stack", None)
    if stack is None:
        stack = _recording_local.stack = []
    return stack


def recording() -> Recording | None:
    """This thread's innermost open recording, or None."""
    if not _recordings[0]:
        return None
    stack = getattr(_recording_local, "stack", None)
    return stack[-1] if stack else None


def spoil_recording() -> None:
    """Mark this thread's open recordings: the call did something their launches leave out."""
    if not _recordings[0]:
        return
    for rec in getattr(_recording_local, "stack", ()) or ():
        rec.spoiled = True


def _argument_sizes(holder, args) -> tuple | None:
    """Each kernel argument's bytes, or None where a type is not one gemmlab passes."""
    if type(holder) is MapParams:
        return holder._layout.sizes
    sizes = []
    for x in args:
        if type(x) is int:
            sizes.append(8)  # a device pointer
        elif isinstance(x, np.generic):
            sizes.append(x.itemsize)
        else:
            return None
    return tuple(sizes)


def _record(kernel, shape, holder, args) -> None:
    rec = recording()
    if rec is None:
        return
    sizes = _argument_sizes(holder, args)
    if sizes is None:
        rec.spoiled = True
        return
    rec.steps.append((LAUNCH, kernel, shape, holder, sizes))


# -- a call's launches, enqueued again from Python -------------------------------------------

# Bumped whenever a kept workspace is replaced by a larger one: a Replay made before then holds
# the old address and is not enqueued again.
_generation = [0]


def workspace_generation() -> int:
    """How many kept workspaces have been replaced so far (Replay.of's ``generation``)."""
    return _generation[0]


class Replay:
    """A recorded call (a Recording's steps) bound to the stream it ran on, enqueued again as
    it was: the same addresses and scalars make the same launches, so a repeated call of
    several steps -- a staging copy and the kernel, split-K's slices and their sum, fp32_tc's
    pre-passes and candidates -- goes straight to the driver instead of through the builders,
    the memos and the workspace bookkeeping that made them (gemmlab.core.executor keeps one
    per prepared call and addresses).  The kept workspaces' locks are taken as the recorded
    call took them; :meth:`enqueue` declines (False) where the call must run in full: on
    another stream, under graph capture, or after a workspace it used was replaced.
    ``result``: what the recorded call returned, returned again by its caller."""

    __slots__ = ("steps", "locks", "stream", "generation", "result")

    def __init__(self, rec: Recording, stream_handle: int, result, generation: int):
        self.stream, self.locks, self.result = stream_handle, tuple(rec.locks), result
        self.generation = generation
        steps = []
        for step in rec.steps:
            if step[0] == LAUNCH:
                _, kernel, shape, holder, _ = step
                steps.append((LAUNCH, shape.driver_config(stream_handle), _function(kernel), holder.ptr, holder))
            else:
                steps.append(step)
        self.steps = tuple(steps)

    @staticmethod
    def of(rec: Recording, stream_handle: int, result, generation: int) -> Replay | None:
        """A Replay of what ``rec`` saw, where it saw only launches and memsets of one call, on
        kept workspaces of ``stream_handle`` (or none), each taken once, none replaced since
        ``generation`` (workspace_generation() before the recorded call began); else None."""
        if rec.spoiled or not rec.steps or rec.stream not in (None, stream_handle):
            return None
        if rec.locks and (_mutex is None or len(set(rec.locks)) != len(rec.locks)):
            return None  # a slot taken twice (a batch's chunks one after another): not held at once
        if generation != _generation[0]:
            return None  # a workspace may have moved after the call took it
        return Replay(rec, stream_handle, result, generation)

    def stale(self) -> bool:
        """Whether a kept workspace was replaced since the recording (its steps hold the old one)."""
        return bool(self.locks) and self.generation != _generation[0]

    def enqueue(self, stream_handle: int) -> bool:
        """Enqueue the recorded steps on the stream they were recorded on; False (nothing
        enqueued) where the call must run in full instead."""
        if stream_handle != self.stream:
            return False
        locks = self.locks
        if locks and stream_is_capturing(stream_handle):  # the graph gets workspaces of its own
            return False
        taken = 0
        try:
            # Never wait for a lock while holding another (a thread on the full path takes them
            # in the slots' order, which need not be this one's): one busy, the call runs in full.
            for address in locks:
                if _mutex[3](address) != 0:
                    return False
                taken += 1
            if locks and self.generation != _generation[0]:
                return False
            for step in self.steps:
                if step[0] == LAUNCH:
                    _launch_driver(step[1], step[2], step[3])
                else:
                    zero_async(step[1], step[2], stream_handle)
        finally:
            for address in reversed(locks[:taken]):
                _mutex[2](address)
        return True
