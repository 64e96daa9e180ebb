"""Prepared calls for a band of sizes -- row counts, and a weight gradient's K
(planner.size_band, planner.k_banded, executor.Family) -- on the CPU:
gemmlab.matmul on NumPy arrays playing device arrays (tests/emulated_gpu.py), the launches
run by the emulator or recorded.

A call whose signature is new but whose family is known -- the same signature but for the
rows of op(a) and out, or the K of a weight gradient dY^T @ x, in the same bands -- is
prepared from the family without validation or a choice; it computes what a fresh call
computes (bit for bit, and the FP64 reference within rounding) and launches what a fresh
prepared call of the same plan launches.  The plan a size gets is its bands', whichever sizes
came before.  The GPU side of the same: the gpu-marked tests below, tests/test_blas3.py
(every rung at odd sizes) and the overhead suite's "new rows" and "new K" rows (gemmlab
bench --suite overhead)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import emulated_gpu
import gemmlab
from gemmlab.core import api, executor, planner
from gemmlab.runtime import device as rt_device
from test_ec_host_memo import _same as same_launches, rec  # noqa: F401 (rec: a fixture)

# Row counts across bands: band edges (257 and 288 are one band's ends, 1025..1152 another's),
# a power of two and its neighbours, odd sizes.
ROWS = [257, 300, 288, 511, 512, 513, 1025, 1030, 1151, 1152, 1153, 2000]
ROWS_MAX = 2048


@pytest.fixture
def emu(monkeypatch):
    return counting_emulator(monkeypatch)


def counting_emulator(monkeypatch):
    """The emulated GPU, counting choices and validations, its workspaces at fixed addresses."""
    e = emulated_gpu.install(monkeypatch)
    e.counts = {"choose": 0, "validate": 0}
    real_choose, real_validate = planner.choose, planner.validate

    def choose(*args, **kwargs):
        e.counts["choose"] += 1
        return real_choose(*args, **kwargs)

    def validate(*args, **kwargs):
        e.counts["validate"] += 1
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(planner, "choose", choose)
    monkeypatch.setattr(planner, "validate", validate)
    # Workspaces at one address per slot and size, so that two calls' launches compare equal.
    kept = {}

    def workspace(gpu, stream, nbytes, what, hint="", slot="scratch", zero_new=False, capturing=None):
        if (slot, nbytes) not in kept:
            kept[slot, nbytes] = emulated_gpu._Workspace(e, nbytes, zero_new)
        return kept[slot, nbytes]

    monkeypatch.setattr(executor, "stream_workspace", workspace)
    return e


def test_bands_split_each_octave_in_eight():
    for m in range(1, 256):
        assert planner.size_band(m) == (m, m)
    tops = set()
    for m in range(256, 1 << 15):
        lo, hi = planner.size_band(m)
        assert lo <= m <= hi and planner.size_band(lo) == planner.size_band(hi) == (lo, hi)
        assert hi - lo < max(1, hi // 8)
        tops.add(hi)
    for p in range(9, 15):  # eight bands in each octave (2^p, 2^(p+1)]
        assert len([t for t in tops if 1 << p < t <= 1 << (p + 1)]) == 8
    assert planner.size_band(1030) == (1025, 1152) and planner.size_band(512) == (481, 512)


def _operands(emu, layout: str, dtype, K: int = 512, N: int = 384, seed: int = 0):
    """Buffers of ROWS_MAX rows and a function rows -> (a, b, kwargs) of ``layout``."""
    rng = np.random.default_rng(seed)

    def kept(shape):
        return emu.keep(rng.uniform(-1, 1, shape).astype(dtype))

    if layout == "x @ W.t()":
        x = kept((ROWS_MAX, K))
        w = kept((N, K))
        return lambda m: (x[:m], w.T, {})
    if layout == "dY @ W":
        dy = kept((ROWS_MAX, N))
        w = kept((N, K))
        return lambda m: (dy[:m], w, {})
    if layout == "x^T stored":  # op(a) column-major: a's rows are its stored columns
        xt = kept((K, ROWS_MAX))
        w = kept((N, K))
        return lambda m: (xt[:, :m], w.T, {"trans_a": True})
    raise AssertionError(layout)


def _reference(a, b, trans_a=False):
    a = a.T if trans_a else a
    return a.astype(np.float64) @ b.astype(np.float64)


def _same_launches(first, second):
    """Two recorded launch sequences launch the same: kernels, shapes, every argument's value and type."""
    assert len(first) == len(second)
    for (k1, s1, a1), (k2, s2, a2) in zip(first, second):
        assert k1 == k2 and s1 == s2 and len(a1) == len(a2)
        for x, y in zip(a1, a2):
            assert type(x) is type(y) and x == y, (x, y)


def _call(emu, a, b, out, **kw):
    """One call into a poisoned ``out`` (None: a new result): (result copy, its launches, the
    plan, choices made, validations)."""
    if out is not None:
        out[...] = np.nan
    before, counts = len(emu.calls), dict(emu.counts)
    got = gemmlab.matmul(a, b, out=out, **kw)
    return (
        got.copy(),
        emu.calls[before:],
        gemmlab.last_plan(),
        emu.counts["choose"] - counts["choose"],
        emu.counts["validate"] - counts["validate"],
    )


@pytest.mark.parametrize("layout", ["x @ W.t()", "dY @ W", "x^T stored"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("K", [512, 501])  # 501: rows off the 16-byte grid, TMA cannot read them
def test_a_family_member_computes_and_launches_what_a_fresh_call_does(emu, layout, dtype, K):
    make = _operands(emu, layout, dtype, K=K)
    tol = 2e-2 if dtype == np.float16 else 1e-4
    for m in ROWS:
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        lo, hi = planner.size_band(m)
        other = hi if m != hi else lo  # another size of the band prepares the family
        a, b, kw = make(other)
        gemmlab.matmul(a, b, out=emu.keep(np.empty((other, b.shape[1]), dtype)), **kw)
        a, b, kw = make(m)
        out = emu.keep(np.empty((m, b.shape[1]), dtype))
        got, launches, p, chose, validated = _call(emu, a, b, out, **kw)
        assert validated == 0, m  # a family hit: no validation, and no choice ...
        # ... unless the rows change what the choice reads: op(a) column-major has its rows
        # as the stored width, 16-byte aligned or not (then chosen once for that, in the
        # band), where every other stored row is on the grid (K = 512: aligned16 follows them)
        width_moved = (m - other) * np.dtype(dtype).itemsize % 16 != 0
        assert chose == (layout == "x^T stored" and K == 512 and width_moved), m
        assert p.problem.M == m and ("chosen for rows" in p.reason) == (m != hi)
        if m != hi:
            assert f"chosen for rows {lo}..{hi}" in p.reason
        ref = _reference(a, b, **kw)
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
        # A fresh call (nothing prepared, nothing planned): the same plan, launches and bits.
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        again, fresh_launches, fresh_plan, chose, validated = _call(emu, a, b, out, **kw)
        assert chose >= 1 and validated == 1  # (NumPy operands: planned once more, to check names)
        assert fresh_plan == p
        _same_launches(launches, fresh_launches)
        np.testing.assert_array_equal(again, got)
        # The kernel named, with the plan's parameters: the same bits.
        named = emu.keep(np.empty_like(out))
        gemmlab.matmul(a, b, out=named, kernel=p.spec.name, **kw, **p.params)
        np.testing.assert_array_equal(named, got)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_family_member_without_out_and_with_a_bias(emu, dtype):
    make = _operands(emu, "x @ W.t()", dtype)
    rng = np.random.default_rng(3)
    bias = emu.keep(rng.uniform(-1, 1, 384).astype(dtype))
    tol = 2e-2 if dtype == np.float16 else 1e-4
    gemmlab.matmul(*make(1152)[:2], bias=bias)
    for m in (1025, 1100, 1151):
        a, b, _ = make(m)
        counts = dict(emu.counts)
        got = gemmlab.matmul(a, b, bias=bias)
        assert emu.counts == counts  # no validation, no choice
        assert got.shape == (m, 384)
        ref = _reference(a, b) + bias.astype(np.float64)
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
        executor.CACHE.clear()
        np.testing.assert_array_equal(gemmlab.matmul(a, b, bias=bias), got)


def plans_in_orders(sizes, call) -> list[dict]:
    """The plan of each size (``call(size)`` makes the call), the sizes called in three orders,
    each from nothing prepared or planned."""
    plans = []
    for order in (sizes, sizes[::-1], sorted(sizes, key=lambda n: n % 7)):
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        found = {}
        for n in order:
            call(n)
            found[n] = gemmlab.last_plan()
        plans.append(found)
    return plans


def test_the_plan_of_a_size_does_not_depend_on_the_sizes_before_it(emu):
    make = _operands(emu, "x @ W.t()", np.float16)
    plans = plans_in_orders(ROWS, lambda m: gemmlab.matmul(*make(m)[:2]))
    assert plans[0] == plans[1] == plans[2]
    # ... and it is the band top's plan, applied to the exact rows.
    for m, p in plans[0].items():
        top = plans[0].get(planner.size_band(m)[1])
        if top is not None:
            assert (p.spec, p.params, p.problem) == (top.spec, top.params, dataclasses.replace(top.problem, M=m))


@pytest.mark.parametrize("N, K, sizes", [(768, 256, (2576, 2700, 2816)), (1024, 512, (4112, 4400, 4608))])
def test_wgmma_wave_choice_is_made_for_the_exact_size(emu, N, K, sizes):
    """wgmma's wave choice counts tiles, so a band's top can choose 128 x 256 where one of its sizes
    fills the last round better with 128 x 192, or leaves that regime (planner.band_holds): every
    size gets the tiles wgmma_auto_choice gives it, the band's plan where they agree, whatever
    the order of the calls (a family derived from another size included)."""
    from gemmlab.kernels.tensor.wgmma import wgmma_auto_choice

    rng = np.random.default_rng(1)
    x = emu.keep(rng.uniform(-1, 1, (max(sizes), K)).astype(np.float16))
    w = emu.keep(rng.uniform(-1, 1, (N, K)).astype(np.float16))
    top = planner.size_band(sizes[0])[1]
    assert all(planner.size_band(m)[1] == top for m in sizes)
    wants = {m: wgmma_auto_choice(m, N, 132, 1, K, "float16")[0] for m in sizes}
    assert len({tuple(p.items()) for p in wants.values()}) > 1  # the band's sizes disagree
    seen = []
    for order in (sizes, sizes[::-1], sizes[1:] + sizes[:1]):
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        found = {}
        for m in order:
            got = gemmlab.matmul(x[:m], w.T)
            p = gemmlab.last_plan()
            assert p.spec.name == "wgmma" and p.params == wants[m] and p.problem.M == m, p.describe()
            assert ("chosen for rows" in p.reason) == (m != top and wants[m] == wants[top]), p.reason
            np.testing.assert_allclose(got, _reference(x[:m], w.T), rtol=2e-2, atol=2e-2)
            found[m] = p
        seen.append(found)
    assert seen[0] == seen[1] == seen[2]


def test_an_out_that_meets_a_takes_the_full_path(emu):
    """A family member's out overlapping a (the signature cannot see it) is computed in a
    copy, as the full path computes it."""
    rng = np.random.default_rng(1)
    buf = emu.keep(rng.uniform(-1, 1, (ROWS_MAX, 256)).astype(np.float32))
    w = emu.keep(rng.uniform(-1, 1, (256, 256)).astype(np.float32))
    other = emu.keep(np.empty((ROWS_MAX, 256), np.float32))
    gemmlab.matmul(buf[:1152], w.T, out=other[:1152])
    a = buf[:1100]
    ref = _reference(a, w.T)
    counts = dict(emu.counts)
    gemmlab.matmul(a, w.T, out=buf[8:1108])
    assert emu.counts["validate"] > counts["validate"]  # the full path, and its copy
    np.testing.assert_allclose(buf[8:1108], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


# The weight gradients of a backward pass, the tokens their K (planner.k_banded): nn.Linear's
# dW = dY^T @ x (N_out x K_in) as torch computes it (dY.t() @ x) or with trans_a, and x @ W's
# dW = x^T @ dY (K_in x N_out).
WGRAD = ["dY.t() @ x", "dY^T @ x (trans_a)", "x.t() @ dY"]


def _wgrad_operands(emu, layout: str, dtype, N_out: int = 384, K_in: int = 512, seed: int = 2):
    """Buffers of ROWS_MAX tokens and a function tokens -> (a, b, kwargs) of ``layout``."""
    rng = np.random.default_rng(seed)
    dy = emu.keep(rng.uniform(-1, 1, (ROWS_MAX, N_out)).astype(dtype))
    x = emu.keep(rng.uniform(-1, 1, (ROWS_MAX, K_in)).astype(dtype))
    if layout == "dY.t() @ x":
        return lambda k: (dy[:k].T, x[:k], {})
    if layout == "dY^T @ x (trans_a)":
        return lambda k: (dy[:k], x[:k], {"trans_a": True})
    if layout == "x.t() @ dY":
        return lambda k: (x[:k].T, dy[:k], {})
    raise AssertionError(layout)


def _rows_of(a, kw) -> int:
    return a.shape[1] if kw.get("trans_a") else a.shape[0]


@pytest.mark.parametrize("layout", WGRAD)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_weight_gradient_of_a_new_k_is_a_family_member(emu, layout, dtype):
    """dY^T @ x with the tokens as K: K is banded, and a new K of a known band computes,
    plans and launches what a fresh call does, without validation or a choice."""
    make = _wgrad_operands(emu, layout, dtype)
    tol = 2e-2 if dtype == np.float16 else 1e-4
    for k in ROWS:
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        lo, hi = planner.size_band(k)
        other = hi if k != hi else lo  # another K of the band prepares the family
        a, b, kw = make(other)
        gemmlab.matmul(a, b, out=emu.keep(np.empty((_rows_of(a, kw), b.shape[1]), dtype)), **kw)
        a, b, kw = make(k)
        out = emu.keep(np.empty((_rows_of(a, kw), b.shape[1]), dtype))
        got, launches, p, chose, validated = _call(emu, a, b, out, **kw)
        assert (validated, chose) == (0, 0), k
        assert p.problem.K == k and ("chosen for K" in p.reason) == (k != hi), p.reason
        if k != hi:
            assert f"chosen for K {lo}..{hi}" in p.reason
        ref = _reference(a, b, **kw)
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        again, fresh_launches, fresh_plan, chose, validated = _call(emu, a, b, out, **kw)
        assert chose >= 1 and validated == 1
        assert fresh_plan == p
        _same_launches(launches, fresh_launches)
        np.testing.assert_array_equal(again, got)
        named = emu.keep(np.empty_like(out))
        gemmlab.matmul(a, b, out=named, kernel=p.spec.name, **kw, **p.params)
        np.testing.assert_array_equal(named, got)


def test_the_plan_of_a_k_does_not_depend_on_the_ks_before_it(emu):
    make = _wgrad_operands(emu, "dY.t() @ x", np.float16)
    plans = []
    for order in (ROWS, ROWS[::-1], sorted(ROWS, key=lambda k: k % 7)):
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        found = {}
        for k in order:
            a, b, _ = make(k)
            gemmlab.matmul(a, b)
            found[k] = gemmlab.last_plan()
        plans.append(found)
    assert plans[0] == plans[1] == plans[2]
    for k, p in plans[0].items():  # the band top's plan, applied to the exact K
        top = plans[0].get(planner.size_band(k)[1])
        if top is not None:
            assert (p.spec, p.params, p.problem) == (top.spec, top.params, dataclasses.replace(top.problem, K=k))


def test_rows_and_k_banded_together(emu):
    """op(a) of many rows and a weight gradient's K: both banded, one family for both."""
    rng = np.random.default_rng(5)
    dy = emu.keep(rng.uniform(-1, 1, (ROWS_MAX, ROWS_MAX)).astype(np.float16))
    x = emu.keep(rng.uniform(-1, 1, (ROWS_MAX, 320)).astype(np.float16))
    gemmlab.matmul(dy[:1152, :1152].T, x[:1152])
    for m, k in ((1104, 1030), (1032, 1152), (1152, 1101)):  # op(a)'s stored rows (M) on the 16-byte grid
        a, b = dy[:k, :m].T, x[:k]
        counts = dict(emu.counts)
        got = gemmlab.matmul(a, b)
        p = gemmlab.last_plan()
        assert emu.counts == counts, (m, k)
        assert (p.problem.M, p.problem.K) == (m, k)
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        np.testing.assert_array_equal(gemmlab.matmul(a, b), got)
        assert gemmlab.last_plan() == p


def test_k_is_banded_only_for_a_weight_gradient(emu):
    """K stays exact where it is not the outer stored axis of both operands (x @ W.t(): K is
    a hidden size), for thin products and below BAND_MIN."""
    rng = np.random.default_rng(6)
    x = emu.keep(rng.uniform(-1, 1, (300, 1100)).astype(np.float16))
    w = emu.keep(rng.uniform(-1, 1, (300, 1100)).astype(np.float16))
    gemmlab.matmul(x, w.T)
    assert gemmlab.last_plan().problem.K == 1100 and "K 1025" not in gemmlab.last_plan().reason
    assert not planner.k_banded(16, 512, 1100, "T", "N") and not planner.k_banded(384, 512, 255, "T", "N")
    assert not planner.k_banded(384, 512, 1100, "N", "N") and planner.k_banded(384, 512, 1100, "T", "N")
    dy = emu.keep(rng.uniform(-1, 1, (1100, 16)).astype(np.float16))
    gemmlab.matmul(dy.T, emu.keep(rng.uniform(-1, 1, (1100, 64)).astype(np.float16)))
    assert "chosen for" not in gemmlab.last_plan().reason  # 16 rows: a thin product, K exact


def test_a_shape_a_tuned_table_measured_keeps_its_own_plan(emu, monkeypatch):
    """A tuned table's entry measured at the exact shape is honoured (banding stops there),
    the family's other sizes are chosen for the band."""
    from gemmlab.core import tables

    params = {"BM": 64, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 4, "TM": 4, "STAGES": 3}
    params |= {"REG_TRANSPOSE": 1, "SPLITK": 2}
    win = {"kernel": "pipelined", "params": params, "ms": 1.0, "tflops": 1.0}
    shapes = {"384x512x1100": {"best": win, "kernels": {"pipelined": win}, "uses": [{"ops": "TN", "batch": 1}]}}
    table = tables.TunedTable("nvidia-h200", shapes)
    monkeypatch.setattr(tables, "load_table", lambda slug: table)
    make = _wgrad_operands(emu, "dY.t() @ x", np.float32)
    for first in (1100, 1152, 1030):
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        gemmlab.matmul(*make(first)[:2])
        for k in (1100, 1030, 1152, 1101):
            a, b, _ = make(k)
            got = gemmlab.matmul(a, b)
            p = gemmlab.last_plan()
            assert p.problem.K == k
            if k == 1100:
                assert "winner at this shape" in p.reason and "chosen for" not in p.reason
                assert p.params == params
            else:
                assert ("chosen for K 1025..1152" in p.reason) == (k != 1152)
            executor.CACHE.clear()
            planner.CALL_PLANS.clear()
            np.testing.assert_array_equal(gemmlab.matmul(a, b), got)
            assert gemmlab.last_plan() == p
            gemmlab.matmul(*make(first)[:2])  # the family again


def test_small_rows_and_batches_keep_the_exact_path(emu):
    make = _operands(emu, "x @ W.t()", np.float16)
    gemmlab.matmul(*make(200)[:2])
    assert (
        api._family_key(api._signature(*make(201)[:2], None, 1.0, 0.0, False, False, "auto", None, None, {})[0])[0]
        is None
    )
    a3 = emu.keep(np.zeros((2, 300, 512), np.float16))
    key = api._signature(a3, make(300)[1], None, 1.0, 0.0, False, False, "auto", None, None, {})[0]
    assert api._family_key(key)[0] is None


def test_families_are_bounded_and_cleared_with_the_cache(emu):
    make = _operands(emu, "x @ W.t()", np.float16)
    gemmlab.matmul(*make(1100)[:2])
    assert len(executor.CACHE._families) == 1
    executor.CACHE.clear()
    assert len(executor.CACHE._families) == 0
    # a family holds none of the caller's arrays
    gemmlab.matmul(*make(1100)[:2])
    (family,) = executor.CACHE._families.values()
    assert family.call.A.operand.obj is None and family.call.B.operand.obj is None


def test_an_fp32_tc_family_member_launches_what_a_fresh_call_does(rec, monkeypatch):  # noqa: F811
    """precision="fp32_tc" (executor._MethodChooser: the method chosen on the GPU between two
    candidates, each planned for the band): a family member launches, launch for launch, what
    a fresh call of the same size launches, with no choice made (launches recorded, not run)."""
    chosen = []
    real_choose = planner.choose
    monkeypatch.setattr(planner, "choose", lambda *a, **k: chosen.append(1) or real_choose(*a, **k))
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (ROWS_MAX, 1024)).astype(np.float32)
    w = rng.uniform(-1, 1, (1024, 1024)).astype(np.float32)
    for m in (1152, 1025, 1100, 1151):
        out = np.empty((m, 1024), np.float32)
        gemmlab.matmul(x[:m], w.T, out=out, precision="fp32_tc")
        member = rec.launches()
        assert any(k.startswith("gemmlab::ec_wgmma") for k, _, _ in member)
        if m != 1152:
            assert not chosen, m
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        planner.CHOICE_PLANS.clear()
        gemmlab.matmul(x[:m], w.T, out=out, precision="fp32_tc")
        same_launches(member, rec.launches())
        chosen.clear()
        executor.CACHE.clear()
        gemmlab.matmul(x[:1152], w.T, out=np.empty((1152, 1024), np.float32), precision="fp32_tc")  # the family
        rec.launches()
        chosen.clear()


def test_an_fp32_tc_weight_gradient_of_a_new_k_launches_what_a_fresh_call_does(rec, monkeypatch):  # noqa: F811
    """precision="fp32_tc" with the tokens as K: both candidates planned for the band of K, a
    member (prepared from the family, no choice) launches what a fresh call launches."""
    chosen = []
    real_choose = planner.choose
    monkeypatch.setattr(planner, "choose", lambda *a, **k: chosen.append(1) or real_choose(*a, **k))
    rng = np.random.default_rng(7)
    # 2048 features: a weight gradient that fp32_tc's cost models give to ec_wgmma (at 1024 x 1024
    # and K ~ 1100, FP32 on the CUDA cores is predicted faster).
    dy = rng.uniform(-1, 1, (ROWS_MAX, 2048)).astype(np.float32)
    x = rng.uniform(-1, 1, (ROWS_MAX, 2048)).astype(np.float32)
    out = np.empty((2048, 2048), np.float32)
    for k in (1152, 1025, 1100, 1151):
        gemmlab.matmul(dy[:k].T, x[:k], out=out, precision="fp32_tc")
        member = rec.launches()
        assert any(n.startswith("gemmlab::ec_wgmma") for n, _, _ in member)
        if k != 1152:
            assert not chosen, k
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        planner.CHOICE_PLANS.clear()
        gemmlab.matmul(dy[:k].T, x[:k], out=out, precision="fp32_tc")
        same_launches(member, rec.launches())
        executor.CACHE.clear()
        gemmlab.matmul(dy[:1152].T, x[:1152], out=out, precision="fp32_tc")  # the family
        rec.launches()
        chosen.clear()


gpu = pytest.mark.skipif(not rt_device.gpu_available(), reason="needs a GPU")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("K", [1024, 1001])
@pytest.mark.parametrize("precision", [None, "fp32_tc"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["x @ W.t()", "dY @ W"])
def test_on_the_gpu_a_family_member_computes_what_a_fresh_call_does(layout, dtype, precision, K):
    """PyTorch tensors on the GPU: a family member's result is bitwise a fresh call's (the
    cache emptied), for sizes across bands, with a bias where nn.Linear has one; K = 1001
    puts the rows of x or W off the 16-byte grid (TMA cannot read them: a member is derived
    where no staging copy runs)."""
    torch = pytest.importorskip("torch")
    if precision == "fp32_tc" and dtype != "float32":
        pytest.skip("fp32_tc is for float32 inputs")
    g = torch.Generator(device="cuda").manual_seed(0)
    dt = getattr(torch, dtype)
    N = 512
    big = torch.rand(ROWS_MAX, K if layout == "x @ W.t()" else N, device="cuda", generator=g).to(dt) - 0.5
    w = torch.rand(N, K, device="cuda", generator=g).to(dt) - 0.5
    b = w.t() if layout == "x @ W.t()" else w
    bias = torch.rand(b.shape[1], device="cuda", generator=g).to(dt) if layout == "x @ W.t()" else None
    for m in ROWS:
        lo, hi = planner.size_band(m)
        other = hi if m != hi else lo
        executor.CACHE.clear()
        gemmlab.matmul(big[:other], b, bias=bias, precision=precision)  # the family
        got = gemmlab.matmul(big[:m], b, bias=bias, precision=precision)
        p = gemmlab.last_plan()
        assert p.problem.M == m and (f"chosen for rows {lo}..{hi}" in p.reason) == (m != hi), p.reason
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        fresh = gemmlab.matmul(big[:m], b, bias=bias, precision=precision)
        torch.cuda.synchronize()
        assert torch.equal(got, fresh), m
        ref = big[:m].double() @ b.double() + (bias.double() if bias is not None else 0)
        tol = 2e-2 if dtype == "bfloat16" else 1e-5
        assert float((got.double() - ref).abs().max() / ref.abs().max()) < tol, m


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision", [None, "fp32_tc"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("layout", ["dY.t() @ x", "x.t() @ dY"])
def test_on_the_gpu_a_weight_gradient_of_a_new_k_computes_what_a_fresh_call_does(layout, dtype, precision):
    """PyTorch tensors on the GPU, the tokens as K (planner.k_banded): a family member's
    result is bitwise a fresh call's, for K across bands."""
    torch = pytest.importorskip("torch")
    if precision == "fp32_tc" and dtype != "float32":
        pytest.skip("fp32_tc is for float32 inputs")
    g = torch.Generator(device="cuda").manual_seed(1)
    dt = getattr(torch, dtype)
    N_out, K_in = 512, 1024
    dy = torch.rand(ROWS_MAX, N_out, device="cuda", generator=g).to(dt) - 0.5
    x = torch.rand(ROWS_MAX, K_in, device="cuda", generator=g).to(dt) - 0.5

    def operands(k):
        return (dy[:k].t(), x[:k]) if layout == "dY.t() @ x" else (x[:k].t(), dy[:k])

    for k in ROWS:
        lo, hi = planner.size_band(k)
        other = hi if k != hi else lo
        executor.CACHE.clear()
        gemmlab.matmul(*operands(other), precision=precision)  # the family
        got = gemmlab.matmul(*operands(k), precision=precision)
        p = gemmlab.last_plan()
        assert p.problem.K == k and (f"chosen for K {lo}..{hi}" in p.reason) == (k != hi), p.reason
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        fresh = gemmlab.matmul(*operands(k), precision=precision)
        torch.cuda.synchronize()
        assert torch.equal(got, fresh), k
        a, b = operands(k)
        ref = a.double() @ b.double()
        tol = 2e-2 if dtype != "float32" else 1e-5
        assert float((got.double() - ref).abs().max() / ref.abs().max()) < tol, k


def test_a_k_that_differs_in_a_and_b_is_refused_though_its_band_has_a_family(emu):
    """The family key holds a band's top for K in a and b alike: the exact K of each must agree
    before the key is looked up (else a call that is not a product would run)."""
    rng = np.random.default_rng(5)
    dy = emu.keep(rng.uniform(-1, 1, (ROWS_MAX, 384)).astype(np.float32))
    x = emu.keep(rng.uniform(-1, 1, (ROWS_MAX, 512)).astype(np.float32))
    gemmlab.matmul(dy[:1152].T, x[:1152])  # the family of K 1025..1152
    assert len(executor.CACHE._families) == 1
    with pytest.raises(ValueError, match="inner dimensions differ"):
        gemmlab.matmul(dy[:1100].T, x[:1092])
