"""What a repeated fp32_tc call on ec_wgmma keeps (executor._MethodChooser and
Launcher._launch_after_prepass), on the CPU: gemmlab.matmul's prepared path with
every launch recorded instead of run (NumPy arrays play device arrays, as in
emulated_gpu), workspaces at addresses the test chooses.

A call that finds what an earlier one built launches exactly what that one
launched (same kernels, shapes and argument values) and builds nothing; a call on
operands at new addresses copies an earlier call's launches with the addresses
replaced (executor._address_moves learns where they are from a second build with
the addresses moved), and launches what a build would; a call with anything else
new -- alpha, the workspace's address -- builds again; a workspace that is not kept (a graph's own, one too large to keep) is
never remembered; the memos stay bounded.  And the launches themselves: one histogram
launch and one split launch (per candidate) for both operands; split over K, each
candidate's GEMM into split-K's workspace and its reduction, which reads the record too,
with the stream's workspaces taken in their fixed order.  The GPU side of the
same: tests/test_ec_device_choice.py (hit and miss bitwise equal, moved operands),
tests/test_ec.py (the split's grids, split-K's results) and tests/test_graphs.py (capture)."""

import dataclasses
import shutil
import subprocess
from collections import OrderedDict

import numpy as np
import pytest

import emulated_gpu
import gemmlab
from gemmlab.core import executor
from gemmlab.kernels import registry
from gemmlab.kernels.ec.ec_wgmma import EC_SCALED_SHORT_CHUNK, ec_split_scaled_kernel, ec_wgmma_auto_split
from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_SOURCE, splitk_reduce_kernel
from gemmlab.kernels.spec import EC_METHODS
from gemmlab.kernels.tensor.wgmma import PACK16_KERNEL
from gemmlab.kernels.ec import choose_method, ec_wgmma
from gemmlab.runtime import compile as rt_compile
from gemmlab.runtime import tma


class _Workspace:
    def __init__(self, handle, kept, repeats, log):
        self.handle, self.kept, self.repeats, self._log = handle, kept, repeats, log

    def close(self, stream):
        self._log.append(("close", self.handle))


class Recorder:
    """Launches recorded, not run; workspaces at chosen addresses (per slot), kept or not."""

    def __init__(self):
        self.log = []  # every launch, memset, workspace taken and given back, in order
        self.address = {"choice": 0x10000, "splitk": 0x4000000, "splitk_counters": 0x80000, "scratch": 0x200000}
        self.kept = True
        self.repeats = True  # the address comes back at the next call (kept, or from the pool again)
        self.builds = 0  # ec_wgmma argument sets built

    def workspace(self, gpu, stream, nbytes, what, hint="", slot="scratch", zero_new=False, capturing=None):
        self.log.append(("take", slot))
        return _Workspace(self.address[slot], self.kept, self.repeats, self.log)

    def launches(self):
        """The recorded launches since the last call of this: (kernel, grid, args)."""
        out = [e for e in self.log if e[0] not in ("take", "close")]
        self.log.clear()
        return out

    def workspaces(self):
        """The workspaces taken and given back since the last call of this, by slot, in order."""
        slots = {v: k for k, v in self.address.items()}
        out = [(e[0], e[1] if e[0] == "take" else slots[e[1]]) for e in self.log if e[0] in ("take", "close")]
        self.log.clear()
        return out


@pytest.fixture
def rec(monkeypatch):
    emulated_gpu.install(monkeypatch)
    r = Recorder()
    monkeypatch.setattr(rt_compile, "load_kernel", lambda source, name, arch: name)  # a kernel is its name here
    # Tables of their own: in a process that ran GPU tests before, the real ones hold real
    # kernels and tensor maps under the same keys (the emulated GPU is an sm_90a of 132 SMs).
    monkeypatch.setattr(ec_wgmma, "_split_launches", {})
    monkeypatch.setattr(tma, "_cache", OrderedDict())
    monkeypatch.setattr(executor, "stream_workspace", r.workspace)
    monkeypatch.setattr(
        executor, "launch_shaped", lambda kernel, shape, stream, args: r.log.append((kernel, shape.grid, args))
    )

    class Report:
        def __init__(self, gpu, stream):
            self.ptr = 0x30000

    monkeypatch.setattr(choose_method, "Report", Report)
    monkeypatch.setattr(executor, "zero_async", lambda ws, nbytes, stream: r.log.append(("zero", ws, ())))
    real_init = executor.Launcher.__init__

    def init(self, *a, **kw):  # count the argument sets each launcher builds
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
    # Each candidate's split (the FP16 one, split_scaled.cu, chooses and copies the record to
    # the report) and GEMM: no memset (the record's sums are left zero), no histograms, no
    # choose, no copy.
    kernels = [k for k, _, _ in first]
    assert kernels[0] == ec_split_scaled_kernel("N", "N", 1, ec_wgmma.ec_scaled_chunk(90))
    assert first[0][2][-1] == 0x30000  # the report's address
    assert len(kernels) == 4 and "zero" not in kernels and choose_method.CHOOSE_KERNEL not in kernels
    gemms = [k for k in kernels if k.startswith("gemmlab::ec_wgmma")]
    # The FP16 and the TF32 candidate, each built once: the second build with the addresses
    # moved (executor._address_moves) waits for a second set of addresses (SEEN_ONCE).
    assert len(gemms) == 2 and built == 2
    for _ in range(3):
        _call(a, b, out)
        again = rec.launches()
        _same(first, again)
    assert rec.builds == built
    # The argument tuples themselves are the ones built by the first call.
    assert all(x[2] is y[2] for x, y in zip(first, again))


def test_anything_new_builds_again_with_its_values(rec):
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    _call(a, b, out)
    rec.launches()
    built = rec.builds
    _call(a.copy(), b, out)  # the operand moved: built, and built once more moved (the probe)
    rec.launches()
    assert rec.builds == built + 4
    built = rec.builds
    a2 = a.copy()  # moved again: the first call's launches copied, nothing built
    _call(a2, b, out)
    moved = rec.launches()
    assert rec.builds == built
    pointers = {x for k, _, args in moved for x in args if isinstance(x, int)}
    assert a2.ctypes.data in pointers and a.ctypes.data not in pointers
    executor.CACHE.clear()  # what a call that builds everything launches on these addresses
    _call(a2, b, out)
    _same(rec.launches(), moved)
    built = rec.builds
    _call(a2, b, out, alpha=0.5)  # a new alpha: the GEMMs take it
    scaled = rec.launches()
    assert rec.builds == built + 2
    gemm_alphas = {args[3] for k, _, args in scaled if k.startswith("gemmlab::ec_wgmma")}
    assert gemm_alphas == {np.float32(0.5)}
    rec.address["scratch"] += 1 << 20  # the stream's workspace grew elsewhere: new maps
    _call(a2, b, out, alpha=0.5)
    grown = rec.launches()
    assert rec.builds == built + 4
    maps = {x.ptr for k, _, args in grown for x in args if isinstance(x, emulated_gpu.FakeMap)}
    assert min(maps) == rec.address["scratch"]
    rec.address["choice"] += 4096  # a new record: every launch that reads it changes
    _call(a2, b, out, alpha=0.5)
    assert rec.builds == built + 6
    record = rec.address["choice"] + choose_method.RECORD_OFFSET
    # split_pack.cu takes the record last, split_scaled.cu before the report, the GEMM before
    # its SPLITK, the layouts, the inverse scales and the stream-K tail's three.
    at = {"gemmlab::ec_wgmma": -8, "gemmlab::ec_split_scaled": -2, "gemmlab::ec_split_pack": -1}
    assert all(
        args[next(i for name, i in at.items() if k.startswith(name))] == record
        for k, _, args in rec.launches()
        if k.startswith(tuple(at))
    )


def test_a_graphs_own_workspace_is_never_remembered(rec):
    rec.kept = rec.repeats = False  # a graph's own allocation
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    _call(a, b, out)
    first = rec.launches()
    _call(a, b, out)
    _same(first, rec.launches())  # built again, to the same values
    assert rec.builds == 4  # each candidate, at each call
    prepared = next(iter(executor.CACHE._d.values()))
    assert not prepared.chooser._kept
    assert all(not run._prepass_memo for _, run in prepared.chooser.candidates)


def test_a_workspace_too_large_to_keep_is_remembered_by_address(rec):
    """A workspace from the pool at every call (too large for the stream to keep): the
    pool hands the stream the same block again, and what was built on that address is
    found (no tensor maps encoded again); the choice's own workspace is kept as always."""
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    rec.kept = False  # the scratch workspace: from the pool, address repeating
    _call(a, b, out)
    first, built = rec.launches(), rec.builds
    _call(a, b, out)
    again = rec.launches()
    _same(first, again)
    assert rec.builds == built == 2  # each candidate built once
    assert all(x[2] is y[2] for x, y in zip(first, again))
    rec.address["scratch"] += 1 << 20  # another block this time: built again for it
    _call(a, b, out)
    assert rec.builds == built + 2


# fp32_tc on the four-set kernel: the choice by histograms and choose_method.cu, whose
# launches a prepared call keeps per set of addresses (on FOLD split_scaled.cu chooses).
HISTOGRAMS = {"BN": 96, "FOLD": 0}


@pytest.mark.parametrize("tile", [HISTOGRAMS, {}], ids=["histograms", "per-row"])
def test_the_memos_are_bounded(rec, tile, monkeypatch):
    monkeypatch.setattr(executor, "ARGS_KEPT", 16)  # the bound, small enough to reach here
    b = _operands()[1]
    out = np.empty((70, 50), np.float32)
    keep = []
    for seed in range(executor.ARGS_KEPT + 5):
        a = _operands(seed)[0]
        keep.append(a)  # each at its own address
        _call(a, b, out, **tile)
        rec.launches()
    prepared = next(iter(executor.CACHE._d.values()))
    assert (0 < len(prepared.chooser._kept) <= executor.ARGS_KEPT) if tile else not prepared.chooser._kept
    for _, run in prepared.chooser.candidates:
        assert 0 < len(run._prepass_memo) <= executor.ARGS_KEPT


def test_the_split_kernels_are_the_prepared_ones(rec):
    """The pre-pass's kernels and shapes come from ec_wgmma's table of prepared split launches."""
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    _call(a, b, out)
    splits = [k for k, _, _ in rec.launches() if k.startswith("gemmlab::ec_split")]
    assert len(splits) == 2 and set(splits) <= {k for k, _ in ec_wgmma._split_launches.values()}


def test_one_histogram_launch_counts_both_operands(rec):
    """The choice's histograms: one launch, blockIdx.z the operand (A into the first
    histogram, B into the second), its grid the larger operand's."""
    from gemmlab.kernels.ec.exponent_histogram import EXPONENT_HISTOGRAM_KERNEL, HISTOGRAM_WARPS

    a, b = _operands(M=300, K=40, N=20)
    out = np.empty((300, 20), np.float32)
    _call(a, b, out, **HISTOGRAMS)
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
    assert tuple(shape_b) == (0, 0) and rest_b[2] == 0  # nothing of B: its blocks return at once


def test_one_split_launch_takes_both_operands(rec):
    """Each candidate's split pre-pass: one launch, blockIdx.z the operand, A's parts then
    B^T's in the workspace, both candidates into the same buffers (a choice's layout).  The
    FP16 candidate's is split_scaled.cu: a cluster per 32 rows of A (columns of B), the
    inverse scales after the parts, the count of blocks that split something, the record and
    the held rows of B's tile (B stored 'N' is split by columns: K = 40 in two slabs of 32),
    the record and the report."""
    a, b = _operands(M=300, K=40, N=20)
    out = np.empty((300, 20), np.float32)
    _call(a, b, out)
    (k16, g16, a16), (k32, g32, a32) = [
        (k, g, args) for k, g, args in rec.launches() if k.startswith("gemmlab::ec_split")
    ]
    assert (k16, k32) == (
        ec_split_scaled_kernel("N", "N", 1, EC_SCALED_SHORT_CHUNK),
        "gemmlab::ec_split_pack<1, 1, 'N', 'N'>",
    )  # K = 40: the short chunk
    ws, kp = rec.address["scratch"], 40  # K padded to 8 elements
    a_part, b_part = 300 * kp * 4, 20 * kp * 4
    parts = (ws, ws + a_part, ws + 2 * a_part, ws + 2 * a_part + b_part)
    record = rec.address["choice"] + choose_method.RECORD_OFFSET
    assert g16 == (-(-300 // 32), 1, 2)  # one block (K = 40 fits its registers) per 32 rows of A, more than B's
    assert a16[:11] == (300, 20, 40, a.ctypes.data, 40, 0, 1, b.ctypes.data, 20, 0, 1)
    scales = parts[3] + b_part
    assert a16[11:] == parts + (kp, scales, scales + 4 * 300, -(-300 // 32) + 1, 64, record, 0x30000)
    assert g32 == (-(-300 // 32) * -(-40 // 32), 1, 2)  # A's tiles, more than B's
    assert a32[:7] == (300, 20, 40, a.ctypes.data, 40, 0, 1) and a32[8:12] == (b.ctypes.data, 20, 0, 1)
    assert a32[13:18] == parts + (kp,) and a32[-1] == record


def test_split_scaled_grid_bounds_the_blocks():
    """split_scaled.cu's grid: a cluster per 32 rows of the larger operand while the launch
    stays within EC_SCALED_BLOCKS_PER_SM blocks an SM; beyond, each cluster takes several
    groups in turn (a batch of short-K products), and the blocks that split something are
    counted per operand."""
    sms = 132
    grid, blocks = ec_wgmma.ec_scaled_grid(4096, 4096, 4096, 1, 1, sms)
    assert grid == (8 * 128, 1, 2) and blocks == 2 * 8 * 128
    grid, blocks = ec_wgmma.ec_scaled_grid(2048, 2048, 128, 128, 128, sms)  # Q @ K^T, 128 heads
    per_matrix = -(-ec_wgmma.EC_SCALED_BLOCKS_PER_SM * sms // (2 * 128))
    assert grid == (per_matrix, 128, 2) and per_matrix < 2048 // 32 and blocks == 2 * per_matrix * 128
    grid, blocks = ec_wgmma.ec_scaled_grid(128, 4096, 4096, 1, 1, sms)  # 128 tokens: A has 4 groups
    assert grid == (8 * 128, 1, 2) and blocks == 8 * (4 + 128)


def test_split_scaled_chunk_follows_k():
    """A K of EC_SCALED_SHORT_CHUNK or less takes the short chunk (a quarter of the
    registers); longer, the full one."""
    short = ec_wgmma.EC_SCALED_SHORT_CHUNK
    assert [ec_wgmma.ec_scaled_chunk(k) for k in (1, short, short + 1, 4096)] == [
        short,
        short,
        ec_wgmma.EC_SCALED_CHUNK,
        ec_wgmma.EC_SCALED_CHUNK,
    ]


def test_split_scaled_clusters_follow_k():
    """split_scaled.cu's cluster: the fewest blocks (1, 2, 4, 8) whose share of K fits a
    block's registers, 8 beyond (each block then reads its share twice)."""
    chunk = ec_wgmma.EC_SCALED_CHUNK
    assert [
        ec_wgmma.ec_scaled_cluster(k)
        for k in (1, chunk, chunk + 1, 2 * chunk, 4 * chunk + 1, 8 * chunk, 8 * chunk + 1, 100 * chunk)
    ] == [1, 1, 2, 2, 8, 8, 8, 8]


# -- split-K: each candidate's partial products into split-K's workspace, then its reduction ------

SPLIT_M, SPLIT_N, SPLIT_K = 70, 50, 900


def _split_launches(launches):
    """The GEMM and reduction launches of a recorded call: [(kernel, args)]."""
    return [(k, args) for k, _, args in launches if k.startswith(("gemmlab::ec_wgmma", "gemmlab::splitk_reduce"))]


def test_split_k_gemms_write_the_workspace_and_reductions_read_the_record(rec):
    """fp32_tc split 3 ways: per candidate its split, its GEMM into split-K's workspace (alpha
    1, beta 0, ldc N, a partial product M * N floats after the other, the record, SPLITK
    last) and a reduction of the three slices into out with the call's alpha and beta that
    reads the record with the candidate's method; a repeated call launches the same and
    builds nothing."""
    M, N, K = SPLIT_M, SPLIT_N, SPLIT_K
    a, b = _operands(M=M, N=N, K=K)
    out = np.empty((M, N), np.float32)
    _call(a, b, out, alpha=0.5, beta=2.0, SPLITK=3)
    first, built = rec.launches(), rec.builds
    record = rec.address["choice"] + choose_method.RECORD_OFFSET
    ws = rec.address["splitk"]
    reduce = splitk_reduce_kernel("float32")
    ran = _split_launches(first)
    assert [k for k, _ in ran] == [
        "gemmlab::ec_wgmma<0, 3, 128, 1, 'N', 'N'>",
        reduce,
        "gemmlab::ec_wgmma<1, 3, 128, 1, 'N', 'N'>",
        reduce,
    ], [k for k, _ in ran]
    for (gemm, g), (_, r), method in zip(ran[::2], ran[1::2], (0, 1)):
        assert (g[3], g[8], g[9], g[10], g[13], g[14]) == (1.0, 0.0, ws, N, M * N, 1), gemm
        assert g[-8] == record and type(g[-7]) is np.int32 and g[-7] == 3 and g[-6] == 0, gemm
        assert (g[-5] != 0 and g[-4] != 0) == (method == 0), gemm  # split_scaled.cu's inverse scales: FP16 only
        assert tuple(g[-3:]) == (0, 1, 0), gemm  # no stream-K tail with split-K
        assert r == (M, N, 3, ws, np.float32(0.5), np.float32(2.0), out.ctypes.data, N, 0, record, method), r
        assert type(r[-1]) is np.int32
    assert EC_METHODS == {"fp16_ec": 0, "tf32_ec": 1}
    _call(a, b, out, alpha=0.5, beta=2.0, SPLITK=3)
    _same(first, rec.launches())
    assert rec.builds == built == 2  # each candidate built once


def test_the_candidates_share_one_parts_workspace(rec):
    """fp32_tc's two candidates, one launch each, split into one workspace, taken once a call
    after the choice's and given back before it (the slots' order); split over K, each
    candidate takes its own (below)."""
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    rec.log.clear()
    _call(a, b, out)
    assert rec.workspaces() == [("take", "choice"), ("take", "scratch"), ("close", "scratch"), ("close", "choice")]


def test_split_k_takes_the_stream_workspaces_in_their_order(rec):
    """The choice's workspace, then per candidate split-K's and inside it the split parts'
    ("scratch"), each given back before the next candidate takes it: always choice, splitk,
    scratch (runtime.launch.stream_workspace; one slot taken twice would deadlock)."""
    a, b = _operands(M=SPLIT_M, N=SPLIT_N, K=SPLIT_K)
    out = np.empty((SPLIT_M, SPLIT_N), np.float32)
    rec.log.clear()
    _call(a, b, out, SPLITK=3)
    candidate = [("take", "splitk"), ("take", "scratch"), ("close", "scratch"), ("close", "splitk")]
    assert rec.workspaces() == [("take", "choice")] + 2 * candidate + [("close", "choice")]


def test_split_k_without_a_choice_reduces_unconditionally(rec):
    """fp16_ec named (no method chosen on the GPU), split 2 ways: one split, one GEMM with no
    record and SPLITK 2, one reduction with no record and method 0."""
    M, N, K = SPLIT_M, SPLIT_N, SPLIT_K
    a, b = _operands(M=M, N=N, K=K)
    out = np.empty((M, N), np.float32)
    gemmlab.matmul(a, b, out=out, precision="fp16_ec", kernel="ec_wgmma", SPLITK=2)
    (gemm, g), (reduce, r) = _split_launches(rec.launches())
    # fp16_ec (parts as they are): the four-set kernel (registry.EC_WGMMA_UNSCALED_PARAMS)
    assert gemm == "gemmlab::ec_wgmma<0, 4, 96, 0, 'N', 'N'>" and reduce == splitk_reduce_kernel("float32")
    assert (g[9], g[13], g[-8], g[-7], g[-5], g[-4]) == (rec.address["splitk"], M * N, 0, 2, 0, 0)
    assert tuple(g[-3:]) == (0, 1, 0)  # no stream-K tail without a record
    assert r[:4] == (M, N, 2, rec.address["splitk"]) and r[-2:] == (0, 0) and type(r[-1]) is np.int32


def test_unsplit_gemm_passes_one_split_and_its_own_c(rec):
    a, b = _operands()
    out = np.empty((70, 50), np.float32)
    _call(a, b, out)
    ran = _split_launches(rec.launches())
    assert [k for k, _ in ran] == [
        "gemmlab::ec_wgmma<0, 3, 128, 1, 'N', 'N'>",
        "gemmlab::ec_wgmma<1, 3, 128, 1, 'N', 'N'>",
    ]
    for _, g in ran:
        assert (g[9], g[10], g[13], g[-7]) == (out.ctypes.data, 50, 0, 1) and type(g[-7]) is np.int32


def test_auto_splits_both_candidates_alike(rec):
    """kernel="auto" on a 128-token product with a long K (128 x 4096 x 16384, one row of 32
    tiles on the emulated 132-SM GPU): ec_wgmma split by ec_wgmma_auto_split, the FP16 and the
    TF32 candidate the same number of ways (they share the workspace and out)."""
    M, N, K = 128, 4096, 16384
    a, b = np.zeros((M, K), np.float32), np.zeros((K, N), np.float32)
    out = np.empty((M, N), np.float32)
    gemmlab.matmul(a, b, out=out, precision="fp32_tc")
    ran = _split_launches(rec.launches())
    want = ec_wgmma_auto_split(M, N, K, 132)
    assert want > 1
    gemms = [g for k, g in ran if k.startswith("gemmlab::ec_wgmma")]
    assert len(gemms) == 2 and all(g[-7] == want for g in gemms), [g[-7] for g in gemms]
    assert [r[2] for k, r in ran if k.startswith("gemmlab::splitk_reduce")] == [want, want]
    prepared = next(iter(executor.CACHE._d.values()))
    assert [p.params["SPLITK"] for p, _ in prepared.chooser.candidates] == [want, want]


# What each host argument type is in a kernel's C++ signature.
_CXX_TYPES = {
    np.int32: "int",
    np.float32: "float",
    np.int64: "long long",
    int: "*",
    emulated_gpu.FakeMap: "gemmlab::hopper::TensorMap",
}


def _parameters(source, name: str) -> list[str]:
    """The parameter types of a compiled kernel, from its demangled name."""
    from gemmlab.runtime.compile import compile_module

    mangled = compile_module(source, [name], "sm_90a").symbols[name]
    text = subprocess.run(["c++filt", mangled], capture_output=True, text=True, check=True).stdout.strip()
    return text[text.index(">(") + 2 : -1].split(", ")  # after the template arguments


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt (binutils) demangles the kernels' names")
@pytest.mark.parametrize("splits", [1, 3])
def test_host_arguments_match_the_kernels_parameters(rec, splits):
    """Every argument the host passes ec_wgmma and splitk_reduce has the type of the kernel's
    parameter in its place (NVRTC compiles them; no GPU): as many, ints as int, floats as
    float, 64-bit ints as long long, addresses as pointers, maps as TensorMaps."""
    a, b = _operands(M=SPLIT_M, N=SPLIT_N, K=SPLIT_K)
    out = np.empty((SPLIT_M, SPLIT_N), np.float32)
    _call(a, b, out, SPLITK=splits)
    ran = _split_launches(rec.launches())
    assert len(ran) == (4 if splits > 1 else 2)
    for kernel, args in ran:
        source = SPLITK_REDUCE_SOURCE if "splitk_reduce" in kernel else registry.get("ec_wgmma").source_path
        params = _parameters(source, kernel)
        assert len(params) == len(args), (kernel, params, args)
        for param, arg in zip(params, args):
            want = _CXX_TYPES[type(arg)]
            assert param.endswith(want) if want == "*" else param == want, (kernel, param, type(arg))


def test_fp16_ec_as_they_are_runs_the_four_set_kernel(rec):
    """precision="fp16_ec" (parts as they are, no scale) runs ec_wgmma's four-set kernel,
    whose lo keeps its 2^11 (planner.plan_call): auto splits its 128 x 96 tiles;
    FOLD named by the caller is kept; fp32_tc's candidates run FOLD, whose parts are
    scaled by the choice."""
    M, N, K = 128, 4096, 4096
    a, b = np.zeros((M, K), np.float32), np.zeros((K, N), np.float32)
    out = np.empty((M, N), np.float32)
    gemmlab.matmul(a, b, out=out, precision="fp16_ec")
    p = gemmlab.last_plan()
    assert (p.spec.name, p.params) == ("ec_wgmma", {"STAGES": 4, "BN": 96, "FOLD": 0, "SPLITK": 3}), p.describe()
    assert ec_wgmma_auto_split(M, N, K, 132, bn=96) == 3
    splits = [k for k, _, _ in rec.launches() if k.startswith("gemmlab::ec_split_pack")]
    assert splits == ["gemmlab::ec_split_pack<0, 0, 'N', 'N'>"]  # lo scaled by 2^11
    gemmlab.matmul(a, b, out=out, precision="fp16_ec", kernel="ec_wgmma", FOLD=1)
    assert gemmlab.last_plan().params["FOLD"] == 1 and gemmlab.last_plan().params["BN"] == 128
    a = np.zeros((M, 4 * K), np.float32)  # a K long enough for fp32_tc to take ec_wgmma
    gemmlab.matmul(a, np.zeros((4 * K, N), np.float32), out=out, precision="fp32_tc")
    gemms = {k for k, _, _ in rec.launches() if k.startswith("gemmlab::ec_wgmma")}
    assert gemms == {"gemmlab::ec_wgmma<0, 3, 128, 1, 'N', 'N'>", "gemmlab::ec_wgmma<1, 3, 128, 1, 'N', 'N'>"}


@pytest.mark.parametrize(
    "M, N, K, splitk, choice, want",
    [
        (1536, 1536, 4096, 1, 1, (12, 8)),  # 144 tiles: the last 12 in 8 slices, one round of an eighth of a tile
        (1536, 1536, 4096, 2, 1, (0, 1)),  # split-K: none
        (1536, 1536, 4096, 1, 0, (0, 1)),  # no record to keep the counters after: none
        (1664, 1664, 4096, 1, 1, (37, 3)),  # 169 tiles: 37 x 3 slices still fit one round of 132
        (1536, 1536, 512, 1, 1, (12, 2)),  # eight K-steps: two slices of four
        (1536, 2816, 4096, 1, 1, (0, 1)),  # 264 tiles: two whole rounds
        (1606, 1586, 256, 1, 1, (0, 1)),  # four K-steps: too few to cut
        (4096, 4096, 4096, 1, 1, (0, 1)),  # 1024 tiles, 100 in the last round: two slices need two rounds
    ],
)
def test_the_stream_k_tails_rule(M, N, K, splitk, choice, want):
    """ec_wgmma_tail: the tiles of a last round that would leave SMs idle, cut into as many
    slices of K as still run in one round, where that is two or more."""
    from types import SimpleNamespace
    from gemmlab.kernels.spec import Problem

    plan = SimpleNamespace(
        problem=Problem(M, N, K, True, "fp16_ec", sm_count=132),
        params={"BN": 128, "FOLD": 1, "STAGES": 3, "SPLITK": splitk},
    )
    assert ec_wgmma.ec_wgmma_tail(plan, 1, choice) == want


def test_both_candidates_take_the_tail_after_the_shared_parts(rec):
    """169 tiles on the emulated 132 SMs: both candidates' GEMMs get the tail (the last 37 tiles,
    3 slices of K each: the FP16 step count decides for both) and its partial tiles' address, right
    after the parts (aligned to 256 bytes) in the one workspace both share, which counts them."""
    M, N, K = 1606, 1586, 1000
    a, b = _operands(M=M, N=N, K=K)
    out = np.empty((M, N), np.float32)
    _call(a, b, out)
    gemms = [args for k, _, args in rec.launches() if k.startswith("gemmlab::ec_wgmma")]
    parts = 2 * (M + N) * K * 4 + 4 * (M + N)  # hi and lo, either part type's room; the inverse scales
    offset = -(-parts // 256) * 256
    assert len(gemms) == 2
    for g in gemms:
        assert tuple(g[-3:]) == (37, 3, rec.address["scratch"] + offset), g[-3:]
        assert type(g[-3]) is np.int32 and type(g[-2]) is np.int32
    prepared = next(iter(executor.CACHE._d.values()))
    assert prepared.chooser.shared_bytes == offset + 37 * 3 * 128 * 128 * 4


@pytest.mark.parametrize(
    "op_a, op_b, K, lda, ldb, a_off, nz_a, sa, want",
    [
        ("N", "T", 4096, 4096, 4096, 0, 1, 0, 4),  # a @ w.t(): 4 float4 of each row a thread, 4 rows a block
        ("N", "T", 512, 512, 512, 0, 1, 0, 0),  # one block's share already: the clustered kernel has no cluster
        ("N", "T", 513, 516, 516, 0, 1, 0, 1),
        ("N", "T", 16384, 16384, 16384, 0, 1, 0, 16),
        ("N", "T", 16385, 16388, 16388, 0, 1, 0, 0),  # more than 64 values a thread
        ("N", "N", 4096, 4096, 4096, 0, 1, 0, 0),  # B's segments are columns
        ("T", "T", 4096, 4096, 4096, 0, 1, 0, 0),
        ("N", "T", 4096, 4097, 4096, 0, 1, 0, 0),  # rows not 16-byte aligned
        ("N", "T", 4096, 4096, 4096, 4, 1, 0, 0),  # A's first row not 16-byte aligned
        ("N", "T", 4096, 4096, 4096, 0, 3, 4096 * 70 + 2, 0),  # a batch's matrices not 16-byte apart
        ("N", "T", 4096, 4096, 4096, 0, 3, 4096 * 70, 4),
        ("N", "T", 4096, 4096, 4096, 0, 4800, 4096 * 70, 0),  # more outputs than the whole-rows split is taken for
    ],
)
def test_whole_rows_split_where_segments_lie_along_k(op_a, op_b, K, lda, ldb, a_off, nz_a, sa, want):
    """ec_scaled_rows_chunks: split_scaled.cu's whole-rows kernel (no clusters) where both operands'
    segments lie along K, K is longer than a block's share and fits 64 values a thread, every
    row is 16-byte aligned and the product has at most 4096^2 outputs; else 0, the clustered
    kernel."""
    from gemmlab.kernels.spec import Problem
    from gemmlab.runtime.tma import Operands

    pr = Problem(70, 50, K, True, "fp16_ec", op_a=op_a, op_b=op_b)
    ops = Operands(0x10000 + a_off, lda, 0x20000, ldb, 0, 50, nz_a, sa, 0)
    assert ec_wgmma.ec_scaled_rows_chunks(pr, ops, nz_a, 1) == want
    big = Problem(8192, 8192, K, True, "fp16_ec", op_a=op_a, op_b=op_b)  # 8192^2 outputs: never
    assert ec_wgmma.ec_scaled_rows_chunks(big, ops, nz_a, 1) == 0


def test_whole_rows_grid():
    """ec_scaled_rows_grid: groups of rows of the larger operand a matrix, at most 16 blocks an SM
    over the launch, and the blocks that split something counted per operand."""
    grid, blocks = ec_wgmma.ec_scaled_rows_grid(4096, 4096, 4, 1, 1, 132)
    assert grid == (1024, 1, 2) and blocks == 2048
    grid, blocks = ec_wgmma.ec_scaled_rows_grid(70, 45, 4, 3, 1, 132)  # A: 18 groups in 3 matrices, B: 12
    assert grid == (18, 3, 2) and blocks == 18 * 3 + 12
    grid, blocks = ec_wgmma.ec_scaled_rows_grid(16384, 16384, 1, 8, 8, 132)  # capped: groups in turn
    assert grid == (132, 8, 2) and blocks == 132 * 16


@pytest.mark.parametrize(
    "op_a, op_b, K, lda, ldb, a_off, b_off, nz_a, sa, want",
    [
        ("N", "N", 4096, 4096, 50, 0, 0, 1, 0, 4),  # a @ b: A by whole rows (B's rows need not be aligned)
        ("T", "T", 4096, 70, 4096, 4, 0, 1, 0, 4),  # a.t() @ w.t(): B by whole rows
        ("N", "N", 700, 700, 50, 0, 0, 1, 0, 1),
        ("N", "N", 16384, 16384, 50, 0, 0, 1, 0, 16),
        ("N", "N", 512, 512, 50, 0, 0, 1, 0, 0),  # one block's share: no cluster to spare
        ("N", "N", 16385, 16388, 50, 0, 0, 1, 0, 0),  # more than 64 values a thread
        ("N", "N", 4096, 4097, 52, 0, 0, 1, 0, 0),  # A's rows not 16-byte aligned
        ("N", "N", 4096, 4096, 52, 8, 0, 1, 0, 0),  # A's first row not 16-byte aligned
        ("T", "T", 4096, 72, 4096, 0, 8, 1, 0, 0),  # B's first row not
        ("N", "N", 4096, 4096, 52, 0, 0, 3, 4096 * 70 + 2, 0),  # a batch's matrices not 16-byte apart
        ("N", "N", 4096, 4096, 52, 0, 0, 3, 4096 * 70, 4),
        ("N", "N", 4096, 4096, 52, 0, 0, 4800, 4096 * 70, 0),  # more outputs than it is taken for
        ("N", "T", 4096, 4096, 4096, 0, 0, 1, 0, 0),  # a @ w.t(): the whole-rows kernel's
        ("T", "N", 4096, 72, 52, 0, 0, 1, 0, 0),  # both across K: clusters both
    ],
)
def test_half_rows_split_where_one_operand_lies_along_k(op_a, op_b, K, lda, ldb, a_off, b_off, nz_a, sa, want):
    """ec_scaled_half_rows: in NN and TT the operand stored along K by whole rows inside the
    clustered kernel, where its rows are 16-byte aligned, 512 < K <= 16384 and the product has at
    most 4096^2 outputs; else 0."""
    from gemmlab.kernels.spec import Problem
    from gemmlab.runtime.tma import Operands

    pr = Problem(70, 50, K, True, "fp16_ec", op_a=op_a, op_b=op_b)
    ops = Operands(0x10000 + a_off, lda, 0x20000 + b_off, ldb, 0, 50, nz_a, sa, 0)
    assert ec_wgmma.ec_scaled_half_rows(pr, ops, nz_a, 1) == want
    big = Problem(8192, 8192, K, True, "fp16_ec", op_a=op_a, op_b=op_b)
    assert ec_wgmma.ec_scaled_half_rows(big, ops, nz_a, 1) == 0


def test_half_rows_grid():
    """ec_scaled_half_rows_grid: one block a group of whole rows of the operand along K, clusters
    of ec_scaled_cluster(K) blocks a group of 32 segments of the other, as many as the larger
    needs (a multiple of the cluster), at most 16 blocks an SM over the launch."""
    from gemmlab.kernels.spec import Problem

    nn = Problem(4096, 4096, 4096, True, "fp16_ec", op_a="N", op_b="N")  # 1024 groups of 4 rows; 128 clusters of 8
    assert ec_wgmma.ec_scaled_half_rows_grid(nn, 4, 1, 1, 132) == ((1024, 1, 2), 1024 + 1024)
    small = Problem(70, 45, 3000, True, "fp16_ec", op_a="N", op_b="N")  # A: 18 groups x 3 matrices; B: 2 clusters
    assert ec_wgmma.ec_scaled_half_rows_grid(small, 4, 3, 1, 132) == ((24, 3, 2), 18 * 3 + 16)
    tt = Problem(70, 45, 700, True, "fp16_ec", op_a="T", op_b="T")  # B: 3 groups of 16 rows; A: 3 clusters of 2
    assert ec_wgmma.ec_scaled_half_rows_grid(tt, 1, 1, 1, 132) == ((6, 1, 2), 3 + 6)
    tall = Problem(8192, 2048, 4096, True, "fp16_ec", op_a="N", op_b="N")  # A's 2048 groups capped at 1056
    assert ec_wgmma.ec_scaled_half_rows_grid(tall, 4, 1, 1, 132) == ((1056, 1, 2), 1056 + 512)


def test_a_repeated_staged_wgmma_call_launches_what_the_first_built(rec):
    """wgmma on 16-bit operands TMA cannot read in place (a vocabulary's dY @ W: K odd): the
    staging pre-pass's copy and wgmma's arguments on the copy (tensor maps included) are built
    once per set of addresses and workspaces, as ec_wgmma's split is; moved operands copy
    them (the maps of B and C, read and written in place, pointed at the new ones), a graph's
    own workspace (not kept) builds every time.  Split over K in the kernel, its two
    workspaces (partials, counters) are taken before the staging copy's, in the slots' order,
    and given back after the kernel; no reduction runs."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 30001)).astype(np.float16)  # rows of 60002 bytes: off the grid
    b = rng.standard_normal((30001, 256)).astype(np.float16)
    out = np.empty((64, 256), np.float16)
    gemmlab.matmul(a, b, out=out)
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and p.problem.stage, p.describe()
    assert p.params["SPLITK"] > 1, p.describe()
    taken = [e for e in rec.log if e[0] in ("take", "close")]
    a_slot = {v: k for k, v in rec.address.items()}
    assert [(e[0], e[1] if e[0] == "take" else a_slot[e[1]]) for e in taken] == [
        ("take", "splitk"),
        ("take", "splitk_counters"),
        ("take", "scratch"),
        ("close", "scratch"),
        ("close", "splitk_counters"),
        ("close", "splitk"),
    ], taken
    first = rec.launches()
    kernels = [k for k, _, _ in first]
    assert kernels[0] == PACK16_KERNEL and kernels.count(PACK16_KERNEL) == 1, kernels
    assert [k for k in kernels if k != PACK16_KERNEL] == [p.name_expression], kernels
    assert rec.builds == 1
    for _ in range(3):
        gemmlab.matmul(a, b, out=out)
        _same(first, rec.launches())
    assert rec.builds == 1
    # Other addresses: built, and built again with the addresses moved (executor._address_moves:
    # where A, B and C sit, B's and C's tensor maps, read and written in place, included).
    gemmlab.matmul(a.copy(), b, out=out)
    rec.launches()
    assert rec.builds == 3
    moved = a.copy()  # a copy of the launches built there, nothing built
    gemmlab.matmul(moved, b, out=out)
    again = rec.launches()
    assert rec.builds == 3 and again[0][2][2] == moved.ctypes.data  # the copy reads the new address
    b2, out2 = b.copy(), np.empty_like(out)  # B's and C's maps follow them
    gemmlab.matmul(moved, b2, out=out2)
    copied = rec.launches()
    assert rec.builds == 3
    executor.CACHE.clear()  # what a prepared call that builds everything launches there
    gemmlab.matmul(moved, b2, out=out2)
    _same(rec.launches(), copied)
    rec.repeats = False
    gemmlab.matmul(a, b, out=out)
    gemmlab.matmul(a, b, out=out)
    assert rec.builds == 6


def test_address_moves_finds_the_addresses_or_refuses():
    """executor._address_moves: the positions of A, B and C in two builds (the second with
    them moved by PROBE_SHIFTS), aliased operands told apart by their shifts; None where an
    argument differs otherwise (an address plus an offset, another value).  _moved then gives
    what a build on new addresses gives."""
    from gemmlab.runtime.launch import LaunchShape, PackedArgs

    shape, shifts = LaunchShape((4, 1, 1), (128, 1, 1)), executor.PROBE_SHIFTS

    def built(a, b, c, offset=0, n=5):
        pre = (("split", shape, PackedArgs((np.int32(n), a, b, np.float32(1.0)))),)
        return pre, PackedArgs((a, b, c, np.int32(7), c + offset)), shape

    def moved_by_shifts(a, b, c, **kw):
        return built(a + shifts[0], b + shifts[1], c + shifts[2], **kw)

    A, B, C = 0x10000, 0x20000, 0x30000
    at = executor._address_moves(built(A, B, C), moved_by_shifts(A, B, C), (A, B, C))
    assert at == ((0, 1, 0), (0, 2, 1), (1, 0, 0), (1, 1, 1), (1, 2, 2), (1, 4, 2))
    new = (0x7000, 0x9000, 0xB000)
    pre, args, same_shape = executor._moved(executor.Moves(built(A, B, C), at), new)
    want = built(*new)
    assert same_shape is shape and tuple(args) == tuple(want[1])
    assert [(k, s, tuple(x)) for k, s, x in pre] == [(k, s, tuple(x)) for k, s, x in want[0]]
    # a @ a: the same address twice, told apart by how each moved
    assert executor._address_moves(built(A, A, C), moved_by_shifts(A, A, C), (A, A, C))[:2] == ((0, 1, 0), (0, 2, 1))
    # C plus an offset is not C: no copy can follow it
    assert executor._address_moves(built(A, B, C, 16), moved_by_shifts(A, B, C, offset=16), (A, B, C)) is None
    assert executor._address_moves(built(A, B, C), moved_by_shifts(A, B, C, n=6), (A, B, C)) is None


@pytest.mark.parametrize(
    "ops, batch, beta, bias, split",
    [
        ("NN", 1, 0.0, False, 1),
        ("TN", 1, 0.5, False, 1),
        ("NT", 3, 0.0, True, 1),
        ("TT", 1, 0.0, True, 2),
        ("NN", 1, 1.0, False, 3),
    ],
)
def test_wgmma_on_moved_operands_copies_its_first_launch(rec, monkeypatch, ops, batch, beta, bias, split):
    """wgmma building its own arguments (tensor maps of A, B and C): the first call of a kind
    builds them, its second set of addresses builds them and builds them again with every
    address moved (executor._address_moves); calls on other operands, out, bias (and split workspaces) build nothing and launch exactly
    what a prepared call that builds everything launches there, in every layout, batched,
    with beta, a bias and a split over K."""
    from gemmlab.kernels.tensor import wgmma

    built = []
    real = wgmma.wgmma_args
    monkeypatch.setattr(wgmma, "wgmma_args", lambda *a, **k: built.append(1) or real(*a, **k))
    rng = np.random.default_rng(5)
    M, N, K = 136, 200, 72 * split
    lead = (batch,) if batch > 1 else ()

    def operands():
        a = rng.uniform(-1, 1, lead + ((M, K) if ops[0] == "N" else (K, M))).astype(np.float16)
        b = rng.uniform(-1, 1, lead + ((K, N) if ops[1] == "N" else (N, K))).astype(np.float16)
        a_op = a if ops[0] == "N" else np.swapaxes(a, -1, -2)
        b_op = b if ops[1] == "N" else np.swapaxes(b, -1, -2)
        out = rng.uniform(-1, 1, lead + (M, N)).astype(np.float16)
        v = rng.uniform(-1, 1, N).astype(np.float16) if bias else None
        return a_op, b_op, out, v

    def call(a, b, out, v):
        gemmlab.matmul(a, b, out=out, beta=beta, bias=v, kernel="wgmma", BM=128, BN=128, SPLITK=split)

    first = operands()  # kept, so that the next operands lie elsewhere
    call(*first)
    assert len(built) == 1 and rec.launches()  # a kind's first call: built once
    call(*operands())  # its second set of addresses: built, and built again moved
    assert len(built) == 3 and rec.launches()
    moved = operands()
    call(*moved)
    copied = rec.launches()
    assert len(built) == 3  # nothing built: the launch copied
    pointers = {x for _, _, args in copied for x in args if isinstance(x, int)}
    assert moved[0].ctypes.data in pointers and first[0].ctypes.data not in pointers
    executor.CACHE.clear()  # what a prepared call that builds everything launches on them
    call(*moved)
    _same(rec.launches(), copied)
