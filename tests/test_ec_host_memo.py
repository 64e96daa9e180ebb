"""What a repeated fp32_tc call on ec_wgmma keeps (executor._DeviceChoice and
Launcher._launch_after_prepass), on the CPU: gemmlab.matmul's prepared path with
every launch recorded instead of run (NumPy arrays play device arrays, as in
emulated_gpu), workspaces at addresses the test chooses.

A call that finds what an earlier one built launches exactly what that one
launched (same kernels, shapes and argument values) and builds nothing; a call
with anything new -- an operand's address, alpha, the workspace's address -- builds
again; a workspace that is not kept (a graph's own, one too large to keep) is
never remembered; the memos stay bounded.  And the launches themselves: one histogram
launch and one split launch (per candidate) for both operands.  The GPU side of the
same: tests/test_ec_device_choice.py (hit and miss bitwise equal, moved operands),
tests/test_ec.py (the split's grids) and tests/test_graphs.py (capture)."""

import dataclasses
from collections import OrderedDict

import numpy as np
import pytest

import emulated_gpu
import gemmlab
from gemmlab import executor
from gemmlab.kernels.ec import choose_method, ec_wgmma
from gemmlab.runtime import compile as rt_compile
from gemmlab.runtime import tma


class _Workspace:
    def __init__(self, handle, kept, log):
        self.handle, self.kept, self._log = handle, kept, log

    def close(self, stream):
        self._log.append(("close", self.handle))


class Recorder:
    """Launches recorded, not run; workspaces at chosen addresses (per slot), kept or not."""

    def __init__(self):
        self.log = []                 # every launch, memset and workspace given back, in order
        self.address = {"choice": 0x10000, "scratch": 0x200000}
        self.kept = True
        self.builds = 0               # ec_wgmma argument sets built

    def workspace(self, gpu, stream, nbytes, what, hint="", slot="scratch"):
        return _Workspace(self.address[slot], self.kept, self.log)

    def launches(self):
        """The recorded launches since the last call of this: (kernel, grid, args)."""
        out = [e for e in self.log if e[0] not in ("close",)]
        self.log.clear()
        return out


@pytest.fixture
def rec(monkeypatch):
    emulated_gpu.install(monkeypatch)
    r = Recorder()
    monkeypatch.setattr(rt_compile, "load_kernel", lambda source, name, arch: name)   # a kernel is its name here
    # Tables of their own: in a process that ran GPU tests before, the real ones hold real
    # kernels and tensor maps under the same keys (the emulated GPU is an sm_90a of 132 SMs).
    monkeypatch.setattr(ec_wgmma, "_split_launches", {})
    monkeypatch.setattr(tma, "_cache", OrderedDict())
    monkeypatch.setattr(executor, "stream_workspace", r.workspace)
    monkeypatch.setattr(executor, "launch_shaped", lambda kernel, shape, stream, args:
                        r.log.append((kernel, shape.grid, args)))
    monkeypatch.setattr(executor, "launch", lambda kernel, grid, block, smem, stream, *args, cluster=(1, 1, 1):
                        r.log.append((kernel, tuple(grid), args)))
    monkeypatch.setattr(executor, "maps_backend", lambda stream: None)

    class Report:
        def __init__(self, gpu, stream):
            self.ptr = 0x30000
    monkeypatch.setattr(executor, "Report", Report)
    monkeypatch.setattr(choose_method.DeviceChoice, "zero", lambda self, stream, ws: r.log.append(("zero", ws, ())))
    real_init = executor.Launcher.__init__

    def init(self, *a, **kw):   # count the argument sets each launcher builds
        real_init(self, *a, **kw)
        if self.prepass is not None:
            build = self.prepass.build

            def counted(*args):
                r.builds += 1
                return build(*args)
            self.prepass = dataclasses.replace(self.prepass, build=counted)
    monkeypatch.setattr(executor.Launcher, "__init__", init)
    return r


def _operands(seed=0, M=70, N=50, K=90):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (M, K)).astype(np.float32), rng.uniform(-1, 1, (K, N)).astype(np.float32)


def _call(a, b, out, **kw):
    gemmlab.matmul(a, b, out=out, precision="fp32_tc", kernel="ec_wgmma", **kw)


def _same(first, second):
    """Two recorded launch sequences launch the same: kernels, grids and every argument's value and type."""
    assert len(first) == len(second)
    for (k1, g1, a1), (k2, g2, a2) in zip(first, second):
        assert (k1, g1, len(a1)) == (k2, g2, len(a2))
        for x, y in zip(a1, a2):
            assert type(x) is type(y) and x == y, (k1, x, y)


def test_a_repeated_call_launches_what_the_first_built(rec):
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    _call(a, b, out)
    first, built = rec.launches(), rec.builds
    # The choice (memset, histograms, choose), then each candidate's split and GEMM.
    kernels = [k for k, _, _ in first]
    assert kernels[0] == "zero" and kernels.count(choose_method.CHOOSE_KERNEL) == 1
    gemms = [k for k in kernels if k.startswith("gemmlab::ec_wgmma")]
    assert len(gemms) == 2 and built == 2   # the FP16 and the TF32 candidate, each built once
    for _ in range(3):
        _call(a, b, out)
        again = rec.launches()
        _same(first, again)
    assert rec.builds == built
    # The argument tuples themselves are the ones built by the first call.
    assert all(x[2] is y[2] for x, y in zip(first, again) if x[0] != "zero")


def test_anything_new_builds_again_with_its_values(rec):
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    _call(a, b, out)
    rec.launches()
    built = rec.builds
    a2 = a.copy()                       # the operand moved
    _call(a2, b, out)
    moved = rec.launches()
    assert rec.builds == built + 2
    pointers = {x for k, _, args in moved for x in args if isinstance(x, int)}
    assert a2.ctypes.data in pointers and a.ctypes.data not in pointers
    _call(a2, b, out, alpha=0.5)        # a new alpha: the GEMMs take it
    scaled = rec.launches()
    assert rec.builds == built + 4
    gemm_alphas = {args[3] for k, _, args in scaled if k.startswith("gemmlab::ec_wgmma")}
    assert gemm_alphas == {np.float32(0.5)}
    rec.address["scratch"] += 1 << 20   # the stream's workspace grew elsewhere: new maps
    _call(a2, b, out, alpha=0.5)
    grown = rec.launches()
    assert rec.builds == built + 6
    maps = {x.ptr for k, _, args in grown for x in args if isinstance(x, emulated_gpu.FakeMap)}
    assert min(maps) == rec.address["scratch"]
    rec.address["choice"] += 4096       # a new record: every launch that reads it changes
    _call(a2, b, out, alpha=0.5)
    assert rec.builds == built + 8
    record = rec.address["choice"] + choose_method.RECORD_OFFSET
    # The split pre-pass takes the record last, the GEMM before its SPLITK.
    assert all(args[-2 if k.startswith("gemmlab::ec_wgmma") else -1] == record
               for k, _, args in rec.launches() if k.startswith(("gemmlab::ec_wgmma", "gemmlab::ec_split_pack")))


def test_a_workspace_not_kept_is_never_remembered(rec):
    rec.kept = False                    # a graph's own allocation, or one too large to keep
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    _call(a, b, out)
    first = rec.launches()
    _call(a, b, out)
    _same(first, rec.launches())        # built again, to the same values
    assert rec.builds == 4
    prepared = next(iter(executor.CACHE._d.values()))
    assert not prepared.chooser._kept
    assert all(not run._prepass_memo for _, run in prepared.chooser.candidates)


def test_the_memos_are_bounded(rec):
    b = _operands()[1]
    out = np.empty((70, 50), np.float32)
    keep = []
    for seed in range(executor.ARGS_KEPT + 5):
        a = _operands(seed)[0]
        keep.append(a)                  # each at its own address
        _call(a, b, out)
        rec.launches()
    prepared = next(iter(executor.CACHE._d.values()))
    assert 0 < len(prepared.chooser._kept) <= executor.ARGS_KEPT
    for _, run in prepared.chooser.candidates:
        assert 0 < len(run._prepass_memo) <= executor.ARGS_KEPT


def test_the_split_kernels_are_the_prepared_ones(rec):
    """The pre-pass's kernels and shapes come from ec_wgmma's table of prepared split launches."""
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    _call(a, b, out)
    splits = [k for k, _, _ in rec.launches() if k.startswith("gemmlab::ec_split_pack")]
    assert splits and set(splits) <= {k for k, _ in ec_wgmma._split_launches.values()}


def test_one_histogram_launch_counts_both_operands(rec):
    """The choice's histograms: one launch, blockIdx.z the operand (A into the first
    histogram, B into the second), its grid the larger operand's."""
    from gemmlab.kernels.ec.exponent_histogram import EXPONENT_HISTOGRAM_KERNEL, HISTOGRAM_WARPS
    a, b = _operands(M=300, K=40, N=20)
    out = np.empty((300, 20), np.float32)
    _call(a, b, out)
    hists = [(g, args) for k, g, args in rec.launches() if k == EXPONENT_HISTOGRAM_KERNEL]
    assert len(hists) == 1
    grid, args = hists[0]
    ws = rec.address["choice"]
    assert grid == (-(-300 // HISTOGRAM_WARPS), 1, 2)
    # rows, cols, X, ld, stride, matrices, histogram -- of A, then of B
    assert args[:7] == (300, 40, a.ctypes.data, 40, 0, 1, ws)
    assert args[7:] == (40, 20, b.ctypes.data, 20, 0, 1, ws + choose_method.HIST_BYTES)


def test_histogram_launches_pair_the_operands_chunks():
    """A batch of more than 65535 matrices is counted in chunks; the other operand's one
    launch goes with the first chunk, the later chunks count nothing of it."""
    from gemmlab.kernels.ec.exponent_histogram import GRID_Y_MAX, histogram_launches
    gpu = emulated_gpu.FakeGPU()
    batch = GRID_Y_MAX + 10
    launches = histogram_launches(gpu, [(0, 8, 16, 16, batch, 128)], [(64, 16, 4, 4, 1, 0)])
    assert len(launches) == 2
    (off_a, off_b, grid, shape_a, rest_a, shape_b, rest_b), second = launches
    assert (off_a, off_b, grid[1:], rest_a[2], rest_b[2]) == (0, 64, (GRID_Y_MAX, 2), GRID_Y_MAX, 1)
    off_a, _, grid, _, rest_a, shape_b, rest_b = second
    assert (off_a, grid[1:], rest_a[2]) == (GRID_Y_MAX * 128 * 4, (10, 2), 10)
    assert tuple(shape_b) == (0, 0) and rest_b[2] == 0   # nothing of B: its blocks return at once


def test_one_split_launch_takes_both_operands(rec):
    """Each candidate's split pre-pass: one launch, blockIdx.z the operand, A's parts then
    B^T's in the workspace, both candidates into the same buffers (a choice's layout)."""
    a, b = _operands(M=300, K=40, N=20)
    out = np.empty((300, 20), np.float32)
    _call(a, b, out)
    splits = [(k, g, args) for k, g, args in rec.launches() if k.startswith("gemmlab::ec_split_pack")]
    assert [k for k, _, _ in splits] == ["gemmlab::ec_split_pack<0, 'N', 'N'>", "gemmlab::ec_split_pack<1, 'N', 'N'>"]
    ws, kp = rec.address["scratch"], 40   # K padded to 8 elements
    a_part, b_part = 300 * kp * 4, 20 * kp * 4
    for _, grid, args in splits:
        assert grid == (-(-300 // 32) * -(-40 // 32), 1, 2)   # A's tiles, more than B's
        assert args[:7] == (300, 20, 40, a.ctypes.data, 40, 0, 1) and args[8:12] == (b.ctypes.data, 20, 0, 1)
        assert args[13:18] == (ws, ws + a_part, ws + 2 * a_part, ws + 2 * a_part + b_part, kp)
