"""runtime.launch's per-call path, on the CPU: launch_shaped hands the driver's
cuLaunchKernelEx the shape's configuration for the caller's stream and the arguments
packed as the kernel reads them (a PackedArgs packed once, however often it is
launched); without cuda.core's packer it goes through cuda.core.launch; and
stream_workspace keeps a stream's workspace up to SCRATCH_KEPT_BYTES, allocating
nothing for a repeated call.  The launches themselves run in every GPU test."""

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from gemmlab.runtime import launch as L


class _Driver:
    """cuda.bindings.driver with cuLaunchKernelEx recorded (what it was given, the
    arguments read back through the pointers) instead of called."""

    def __init__(self, status=None):
        self.real = L.driver()
        self.calls = []
        self.kinds = ()  # the launched kernel's parameter types, to read the arguments back by
        self.status = status if status is not None else self.real.CUresult.CUDA_SUCCESS

    def __getattr__(self, name):
        return getattr(self.real, name)

    def cuLaunchKernelEx(self, config, function, params, extra):
        # read back now: a plain tuple's packed arguments live only as long as the launch
        self.calls.append((config, int(function), params, extra, _read_back(params, self.kinds)))
        return (self.status,)


class _Kernel:
    def __init__(self, handle):
        self.handle = handle


def _read_back(params: int, kinds):
    """The values behind the array of pointers at ``params``, as the kernel's parameters ``kinds``."""
    ptrs = (ctypes.c_void_p * len(kinds)).from_address(params)
    return [kind.from_address(p).value for kind, p in zip(kinds, ptrs)]


@pytest.fixture
def drv(monkeypatch):
    d = _Driver()
    monkeypatch.setattr(L, "_driver", d)
    return d


def test_a_launch_takes_the_shapes_configuration_for_its_stream(drv):
    shape = L.LaunchShape((16, 3, 2), (256, 1, 1), 5000, (8, 1, 1), pdl=True)
    drv.kinds = (ctypes.c_int32, ctypes.c_uint64, ctypes.c_float, ctypes.c_int64)
    L.launch_shaped(_Kernel(0xABC0), shape, 7, (np.int32(-5), 0x12345678, np.float32(1.5), np.int64(1 << 40)))
    L.launch_shaped(_Kernel(0xABC0), shape, 9, (np.int32(1), 0, np.float32(0), np.int64(0)))
    (c7, f7, _, x7, v7), (c9, *_) = drv.calls
    assert f7 == 0xABC0 and x7 == 0
    assert (c7.gridDimX, c7.gridDimY, c7.gridDimZ) == (16, 3, 2)  # blocks, with clusters or not
    assert (c7.blockDimX, c7.blockDimY, c7.blockDimZ, c7.sharedMemBytes) == (256, 1, 1, 5000)
    assert int(c7.hStream) == 7 and int(c9.hStream) == 9
    ids = [a.id for a in c7.attrs]
    assert ids == [
        drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
    ]
    assert c7.numAttrs == 2
    cl = c7.attrs[0].value.clusterDim
    assert (cl.x, cl.y, cl.z) == (8, 1, 1)
    assert c7.attrs[1].value.programmaticStreamSerializationAllowed == 1
    assert v7 == [-5, 0x12345678, 1.5, 1 << 40]
    # one configuration per stream, built once
    assert shape.driver_config(7) is c7 and shape.driver_config(9) is c9 and c7 is not c9


def test_a_plain_shape_has_no_launch_attributes(drv):
    L.launch_shaped(_Kernel(1), L.LaunchShape((5, 1, 1), (128, 1, 1)), 0, (np.int32(3),))
    config = drv.calls[0][0]
    assert config.numAttrs == 0 and int(config.hStream) == 0


def test_packed_arguments_are_packed_once(drv, monkeypatch):
    packed = []
    real = L._param_holder()

    def counting(args):
        packed.append(tuple(args))
        return real(args)

    monkeypatch.setattr(L, "_holder_class", counting)
    shape = L.LaunchShape((4, 1, 1), (32, 1, 1))
    drv.kinds = (ctypes.c_int32, ctypes.c_uint64)
    args = L.PackedArgs((np.int32(11), 0xBEEF))
    for _ in range(3):
        L.launch_shaped(_Kernel(2), shape, 0, args)
    L.launch_shaped(_Kernel(2), shape, 0, (np.int32(12), 0xF00D))  # a plain tuple: packed per launch
    L.launch_shaped(_Kernel(2), shape, 0, (np.int32(13), 0xF00E))
    assert packed == [(11, 0xBEEF), (12, 0xF00D), (13, 0xF00E)]
    params = [call[2] for call in drv.calls]
    assert params[0] == params[1] == params[2]  # the same packed arguments each time
    assert [call[4] for call in drv.calls] == [[11, 0xBEEF]] * 3 + [[12, 0xF00D], [13, 0xF00E]]


def test_a_failed_launch_names_the_call_and_the_status(monkeypatch):
    d = _Driver(status=L.driver().CUresult.CUDA_ERROR_INVALID_VALUE)
    monkeypatch.setattr(L, "_driver", d)
    with pytest.raises(RuntimeError, match="cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE"):
        L.launch_shaped(_Kernel(3), L.LaunchShape((1, 1, 1), (1, 1, 1)), 0, (np.int32(0),))


def test_a_grid_that_is_not_whole_clusters_is_refused(drv):
    with pytest.raises(ValueError, match="not a whole number of"):
        L.launch_shaped(_Kernel(4), L.LaunchShape((10, 1, 1), (64, 1, 1), 0, (4, 1, 1)), 0, (np.int32(0),))
    assert not drv.calls


def test_without_cuda_cores_packer_the_launch_goes_through_cuda_core(drv, monkeypatch):
    seen = []
    monkeypatch.setattr(L, "_holder_class", False)
    monkeypatch.setattr(L, "_cc_launch", lambda stream, config, kernel, *args: seen.append((config, kernel, args)))
    monkeypatch.setattr(L, "stream_from_handle", lambda handle: handle)
    shape = L.LaunchShape((6, 1, 1), (64, 1, 1))
    monkeypatch.setattr(shape, "_config", "the LaunchConfig")
    k = _Kernel(5)
    L.launch_shaped(k, shape, 0, L.PackedArgs((np.int32(1), 2)))
    assert seen == [("the LaunchConfig", k, (1, 2))] and not drv.calls


def test_a_stream_keeps_its_workspace_up_to_the_limit(monkeypatch):
    taken = []

    def device_workspace(gpu, stream, nbytes, what, hint=""):
        taken.append(nbytes)
        return L.Workspace(0x1000 * len(taken), nbytes)

    monkeypatch.setattr(L, "device_workspace", device_workspace)
    monkeypatch.setattr(L, "_scratch", {})
    gpu = SimpleNamespace(ordinal=0)
    big = 256 * 2**20 + 32 * 1024  # fp32_tc's parts workspace of a 4096^3 product
    assert big <= L.SCRATCH_KEPT_BYTES
    handles = []
    for _ in range(3):
        ws = L.stream_workspace(gpu, 5, big, "parts", capturing=False)
        handles.append(ws.handle)
        ws.close(5)
    assert taken == [big] and len(set(handles)) == 1
    # more than the limit: from the pool at every call, given back after it
    freed = []
    monkeypatch.setattr(L.Workspace, "close", lambda self, stream: freed.append(self.nbytes))
    for _ in range(2):
        ws = L.stream_workspace(gpu, 5, L.SCRATCH_KEPT_BYTES + 1, "parts", capturing=False)
        assert ws.repeats
        ws.close(5)
    assert taken == [big] + [L.SCRATCH_KEPT_BYTES + 1] * 2 and freed == [L.SCRATCH_KEPT_BYTES + 1] * 2


def _read_params(ptr: int, kinds) -> list:
    """The arguments a kernel would read through the kernelParams array at ``ptr``: each
    scalar by its C type, each tensor map as its 128 bytes (and whether it is 64-byte aligned)."""
    ctype = {np.int32: ctypes.c_int32, np.float32: ctypes.c_float, np.int64: ctypes.c_int64, int: ctypes.c_uint64}
    out = []
    for i, kind in enumerate(kinds):
        at = ctypes.c_uint64.from_address(ptr + 8 * i).value
        out.append((ctypes.string_at(at, 128), at % 64) if kind == "map" else ctype[kind].from_address(at).value)
    return out


def test_map_params_pack_scalars_and_maps_and_rebind_them():
    """MapParams (launches with tensor maps): every argument reads back as given, maps
    64-byte aligned copies of the objects' bytes; rebound() changes exactly the values and
    maps' addresses it is given, and leaves the launch it was made from as it was."""
    driver = L.driver()
    maps = [driver.CUtensorMap(), driver.CUtensorMap()]
    for m, fill in zip(maps, (0x11, 0x22)):
        ctypes.memset(m.getPtr(), fill, 128)
    args = (np.int32(5), np.float32(1.5), 123456789012, np.int32(-7), maps[0], np.int64(-3), np.int32(9), maps[1])
    kinds = [np.int32, np.float32, int, np.int32, "map", np.int64, np.int32, "map"]
    packed = L.PackedArgs(args).packed()
    assert isinstance(packed, L.MapParams)
    want = [5, 1.5, 123456789012, -7, (b"\x11" * 128, 0), -3, 9, (b"\x22" * 128, 0)]
    assert _read_params(packed.ptr, kinds) == want

    def replace(map_address, address):  # stands in for cuTensorMapReplaceAddress
        ctypes.c_uint64.from_address(map_address).value = address

    moved = packed.rebound(((1, 2.5), (2, 99), (5, 4)), ((7, 0xABC0),), replace)
    got = _read_params(moved.ptr, kinds)
    assert got[:4] == [5, 2.5, 99, -7] and got[4] == want[4] and got[5:7] == [4, 9]
    assert got[7] == ((0xABC0).to_bytes(8, "little") + b"\x22" * 120, 0)
    assert _read_params(packed.ptr, kinds) == want  # the original is untouched
    assert L.PackedArgs.of(moved).packed() is moved
    with pytest.raises(TypeError, match="cannot be packed with tensor maps"):
        L.MapParams((np.int16(1), maps[0]))


@pytest.mark.parametrize(
    "nbytes, static, raised",
    [
        (0, 592, None),  # no dynamic shared memory: nothing asked
        (40 * 1024, 592, None),  # the default holds it beside the static bytes
        (48 * 1024, 592, 48 * 1024),  # exactly 48 KB of tile beside 592 static bytes: over the default
        (64 * 1024, 0, 64 * 1024),  # above 48 KB: raised, the static bytes not asked
    ],
)
def test_dynamic_shared_memory_is_raised_where_it_and_the_static_pass_48_kb(monkeypatch, nbytes, static, raised):
    """allow_dynamic_smem asks the driver for the kernel's static shared memory where the
    dynamic alone fits the default, raises the limit where both pass it, once per size."""
    from cuda.bindings import driver

    asked, set_to = [], []

    def get_attribute(attrib, kernel, dev):
        asked.append(attrib)
        return driver.CUresult.CUDA_SUCCESS, static

    def set_attribute(attrib, val, kernel, dev):
        set_to.append(val)
        return (driver.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(driver, "cuKernelGetAttribute", get_attribute)
    monkeypatch.setattr(driver, "cuKernelSetAttribute", set_attribute)
    monkeypatch.setattr(L, "_smem_raised", {})
    kernel = SimpleNamespace(handle=0x1234)
    for _ in range(2):  # the second call asks nothing
        L.allow_dynamic_smem(kernel, nbytes, 0)
    assert set_to == ([raised] if raised else [])
    shared_size = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
    assert asked == ([shared_size] if 0 < nbytes <= 48 * 1024 else [])


# -- Replay: a recorded call enqueued again --------------------------------------------------


class _ReplayDriver(_Driver):
    """_Driver with the stream's capture status and memsets faked too."""

    def __init__(self):
        super().__init__()
        self.capturing, self.memsets = False, []

    def cuStreamIsCapturing(self, stream):
        r = self.real
        status = r.CUstreamCaptureStatus
        return r.CUresult.CUDA_SUCCESS, (
            status.CU_STREAM_CAPTURE_STATUS_ACTIVE if self.capturing else status.CU_STREAM_CAPTURE_STATUS_NONE
        )

    def cuMemFreeAsync(self, ptr, stream):  # a replaced workspace
        return (self.real.CUresult.CUDA_SUCCESS,)

    def cuMemsetD8Async(self, ptr, value, nbytes, stream):
        self.memsets.append((int(ptr), value, nbytes, int(stream)))
        return (self.real.CUresult.CUDA_SUCCESS,)


@pytest.fixture
def rdrv(monkeypatch):
    d = _ReplayDriver()
    monkeypatch.setattr(L, "_driver", d)
    monkeypatch.setattr(L, "_scratch", {})
    monkeypatch.setattr(L, "device_workspace", lambda gpu, stream, nbytes, what, hint="": L.Workspace(0x7000, nbytes))
    d.kinds = (ctypes.c_int32, ctypes.c_uint64)
    return d


def _recorded_call(stream: int, nbytes: int = 256):
    """A call of two launches and a memset on a kept workspace of ``stream``, recorded, and the
    workspace generation before it."""
    gpu = SimpleNamespace(ordinal=0)
    rec, generation = L.Recording(), L.workspace_generation()
    with rec:
        ws = L.stream_workspace(gpu, stream, nbytes, "copies", capturing=False)
        L.launch_shaped(_Kernel(0x10), L.LaunchShape((3, 1, 1), (64, 1, 1)), stream, (np.int32(1), ws.handle))
        L.zero_async(ws.handle, 16, stream)
        L.launch_shaped(_Kernel(0x20), L.LaunchShape((5, 1, 1), (128, 1, 1)), stream, L.PackedArgs((np.int32(2), 0xAB)))
        ws.close(stream)
    return rec, generation


def test_a_replay_enqueues_the_recorded_launches_under_the_workspace_lock(rdrv):
    _recorded_call(5)  # the first call allocates the kept workspace: a state no repeat makes again
    rec, g = _recorded_call(5)
    assert not rec.spoiled and len(rec.locks) == 1
    replay = L.Replay.of(rec, 5, "the plan", g)
    assert replay is not None and replay.result == "the plan" and not replay.stale()
    recorded, memsets = rdrv.calls[-2:], list(rdrv.memsets[-1:])
    rdrv.calls.clear(), rdrv.memsets.clear()
    assert replay.enqueue(5)
    assert [(int(c.hStream), f, v) for c, f, _, _, v in rdrv.calls] == [(5, 0x10, [1, 0x7000]), (5, 0x20, [2, 0xAB])]
    assert [c[2] for c in rdrv.calls] == [c[2] for c in recorded]  # the very same packed arguments
    assert rdrv.memsets == memsets == [(0x7000, 0, 16, 5)]
    lock = L._scratch[(0, 5, "scratch")][0]
    lock.acquire()  # given back after the launches
    lock.release()


def test_a_replay_declines_another_stream_a_capture_and_a_replaced_workspace(rdrv):
    _recorded_call(5)
    rec, g = _recorded_call(5)
    replay = L.Replay.of(rec, 5, None, g)
    rdrv.calls.clear()
    assert not replay.enqueue(6)
    rdrv.capturing = True
    assert not replay.enqueue(5)
    rdrv.capturing = False
    L.stream_workspace(SimpleNamespace(ordinal=0), 5, 4096, "more", capturing=False).close(5)  # grown: replaced
    assert replay.stale() and not replay.enqueue(5)
    assert not rdrv.calls and not rdrv.memsets[2:]
    rec, g = _recorded_call(5, 4096)
    assert L.Replay.of(rec, 5, None, g).enqueue(5)  # recorded again on the new one


def test_a_spoiled_recording_or_one_of_another_stream_gives_no_replay(rdrv):
    _recorded_call(5)
    rec, g = _recorded_call(5)
    assert L.Replay.of(rec, 6, None, g) is None  # its workspaces are stream 5's
    assert L.Replay.of(rec, 5, None, g - 1) is None  # a workspace replaced while it ran
    twice = L.Recording()
    twice.steps, twice.locks, twice.stream = rec.steps, rec.locks * 2, 5  # a slot taken twice
    assert L.Replay.of(twice, 5, None, g) is None
    rec.spoiled = True
    assert L.Replay.of(rec, 5, None, g) is None
    assert L.Replay.of(L.Recording(), 5, None, g) is None  # nothing launched


def test_a_replay_never_waits_for_a_busy_workspace(rdrv):
    """Another thread holding the workspace's lock: the replay declines at once (the call then
    runs in full and waits its turn there) instead of holding one lock while waiting for another."""
    import threading

    _recorded_call(5)
    rec, g = _recorded_call(5)
    replay = L.Replay.of(rec, 5, None, g)
    lock = L._scratch[(0, 5, "scratch")][0]
    held, release = threading.Event(), threading.Event()

    def holder():
        lock.acquire()
        held.set()
        release.wait(5)
        lock.release()

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    rdrv.calls.clear()
    assert not replay.enqueue(5) and not rdrv.calls
    release.set()
    t.join()
    assert replay.enqueue(5) and len(rdrv.calls) == 2


def _prepared_call(uses: int, full: list):
    """A PreparedCall of several steps whose call records its arguments in ``full`` and takes
    the stream's kept workspace ``uses`` times, one after the other, a launch on each."""
    from gemmlab.core import executor

    def run_steps(stream, A, B, C, alpha, beta):
        full.append((A, alpha))
        for use in range(uses):
            ws = L.stream_workspace(SimpleNamespace(ordinal=0), stream, 64, "copies", capturing=False)
            L.launch_shaped(_Kernel(0x30), L.LaunchShape((2, 1, 1), (32, 1, 1)), stream, (np.int32(A + use), ws.handle))
            ws.close(stream)
        return "plan"

    pc = object.__new__(executor.PreparedCall)
    pc.swap, pc.direct, pc.empty, pc._replays = False, None, False, {}
    pc._run_steps = run_steps
    return pc


def test_a_prepared_call_of_several_steps_is_replayed_from_its_third_call(rdrv):
    """PreparedCall.run: the first call of some addresses runs in full, the second is recorded,
    the next ones are its Replay; other scalars, an open recording (the C++ kernels learning a
    call) and a capture run in full."""
    full = []
    pc = _prepared_call(1, full)
    for _ in range(4):
        assert pc.run(1, 2, 3, 1.0, 0.0, 5) == "plan"
    assert full == [(1, 1.0), (1, 1.0)] and len(rdrv.calls) == 4  # two in full, then two replays
    assert [v for *_, v in rdrv.calls] == [[1, 0x7000]] * 4
    pc.run(1, 2, 3, 2.0, 0.0, 5)  # other scalars: their own entry
    with L.Recording():
        pc.run(1, 2, 3, 1.0, 0.0, 5)
    rdrv.capturing = True
    pc.run(1, 2, 3, 1.0, 0.0, 5)
    assert full[2:] == [(1, 2.0), (1, 1.0), (1, 1.0)]


def test_a_call_that_takes_a_workspace_twice_runs_in_full(rdrv):
    """A call that takes one kept workspace twice, one use after the other (a batch's chunks):
    its recording gives no replay (its locks cannot be held at once), and after REPLAY_TRIES
    recordings the prepared call stops recording it."""
    from gemmlab.core import executor

    full = []
    pc = _prepared_call(2, full)
    for _ in range(6):
        pc.run(1, 2, 3, 1.0, 0.0, 5)
    assert len(full) == 6 and pc._replays[(5, 1, 2, 3, 1.0, 0.0)] == executor.REPLAY_TRIES
