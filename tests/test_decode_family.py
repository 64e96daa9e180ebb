"""A decode step's attention over a growing key/value cache -- Q @ K^T with the cache length
as N, P @ V with it as K, a batch of thin products -- prepared from a family of cache lengths
(planner.thin_batch_call, n_banded, k_banded; executor.Family) on the CPU: gemmlab.matmul on
NumPy arrays playing device arrays (tests/emulated_gpu.py), the launches run by the emulator.

Each token brings a new N (or K), so each call is a new signature.  Where the family of its
band and alignment class is known, the call is derived from the family's first prepared call
without validation or a choice; it computes what a fresh call computes (bit for bit, and the
FP64 reference within rounding) and launches the same.  The GPU side: the gpu-marked test
below and the overhead suite's "a longer cache each call" rows (gemmlab bench --suite
overhead)."""

from __future__ import annotations

import numpy as np
import pytest

import gemmlab
from gemmlab.core import api, executor, planner
from gemmlab.runtime import device as rt_device
from test_row_family import _call, _same_launches, counting_emulator, plans_in_orders

CACHE_MAX = 1536
HEAD = 64
# Cache lengths: band edges (257 / 288, 1025 / 1152), every alignment class (odd, 2, 4, 8, 16
# elements), and below BAND_MIN (not banded: no family).
LENGTHS = [257, 288, 300, 1025, 1026, 1028, 1032, 1040, 1100, 1151, 1152, 1153, 200]
PRODUCTS = ["Q @ K^T", "Q @ K^T, K^T stored", "P @ V"]


@pytest.fixture
def emu(monkeypatch):
    return counting_emulator(monkeypatch)


def _decode(emulator, product: str, dtype, rows: int = 1, batch=(2, 3), seed: int = 0, storage: str = "static"):
    """Cache buffers of CACHE_MAX positions and a function n -> (a, b, out) over the first n:
    views of the buffers ("static", a cache allocated for the longest context; "restrided",
    the same with the stride of an axis of one element following n), or new contiguous
    arrays ("grown", a cache grown by concatenation at every token)."""
    rng = np.random.default_rng(seed)

    def kept(shape):
        return emulator.keep(rng.uniform(-1, 1, batch + shape).astype(dtype))

    def grown(x):
        if storage == "static":
            return x
        if storage == "restrided":  # axes of one element given the stride that follows the
            # sizes, as PyTorch's reshape in torch.matmul gives a score row p[..., :n]
            strides = tuple(s if d != 1 else x.strides[-1] * x.shape[-1] for d, s in zip(x.shape, x.strides))
            return np.lib.stride_tricks.as_strided(x, x.shape, strides)
        return emulator.keep(np.ascontiguousarray(x))

    q, p = kept((rows, HEAD)), kept((rows, CACHE_MAX))
    scores, out = kept((rows, CACHE_MAX)), kept((rows, HEAD))
    if product == "Q @ K^T":  # op(b) column-major: the cache's rows are its columns
        k = kept((CACHE_MAX, HEAD))
        return lambda n: (q, grown(k[..., :n, :]).swapaxes(-1, -2), scores[..., :n])
    if product == "Q @ K^T, K^T stored":  # op(b) row-major, n wide
        kt = kept((HEAD, CACHE_MAX))
        return lambda n: (q, grown(kt[..., :n]), scores[..., :n])
    if product == "P @ V":
        v = kept((CACHE_MAX, HEAD))
        return lambda n: (grown(p[..., :n]), grown(v[..., :n, :]), out)
    raise AssertionError(product)


def _class(n: int) -> int:
    return min(n & -n, 16)


def _same_class_in_band(n: int) -> int | None:
    """Another length of n's band and alignment class (it prepares the family), or None."""
    lo, hi = planner.size_band(n)
    return next((x for x in range(hi, lo - 1, -1) if x != n and _class(x) == _class(n)), None)


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("storage", ["static", "restrided", "grown"])
@pytest.mark.parametrize("with_out", [True, False])
def test_a_cache_length_of_a_known_family_computes_and_launches_what_a_fresh_call_does(
    emu, product, dtype, rows, storage, with_out
):
    make = _decode(emu, product, dtype, rows, storage=storage)
    tol = 2e-2 if dtype == np.float16 else 1e-4

    def call(a, b, out):
        return _call(emu, a, b, out if with_out else None)

    for n in LENGTHS:
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        other = _same_class_in_band(n) if n >= planner.BAND_MIN else None
        if other is not None:
            a, b, out = make(other)
            gemmlab.matmul(a, b, out=out if with_out else None)  # the family
        a, b, out = make(n)
        got, launches, p, chose, validated = call(a, b, out)
        lo, hi = planner.size_band(n)
        banded = "K" if product == "P @ V" else "N"
        # A family member (no validation, no choice) unless the plan stages an operand TMA
        # cannot read (the copy's launches follow the sizes: planned in full).
        staging = p.spec.launching.staging
        staged = staging is not None and p.spec.pre_pass(p.problem) is staging
        if other is not None:
            assert (validated, chose) == ((1, 1) if staged else (0, 0)), n
        assert (p.problem.N, p.problem.K) == (n, HEAD) if banded == "N" else (HEAD, n)
        assert (f"chosen for {banded} {lo}..{hi}" in p.reason) == (n != hi), (n, p.reason)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert got.shape == ref.shape and not np.isnan(got).any()
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
        # A fresh call (nothing prepared, nothing planned): the same plan, launches and bits.
        executor.CACHE.clear()
        planner.CALL_PLANS.clear()
        again, fresh_launches, fresh_plan, _, validated = call(a, b, out)
        assert validated == 1
        assert fresh_plan == p
        if with_out:  # (a new result is at a new address each call)
            _same_launches(launches, fresh_launches)
        np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize("product", ["Q @ K^T", "P @ V"])
def test_a_growing_cache_is_validated_once_per_band_and_alignment_class(emu, product):
    make = _decode(emu, product, np.float16, seed=1)
    executor.CACHE.clear()
    planner.CALL_PLANS.clear()
    first, last = 1000, 1300
    before = emu.counts["validate"]
    for n in range(first, last + 1):
        a, b, out = make(n)
        out[...] = np.nan
        gemmlab.matmul(a, b, out=out)
        if n % 37 == 0 or n in (first, last):
            ref = a.astype(np.float64) @ b.astype(np.float64)
            np.testing.assert_allclose(out, ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())
    classes = {(planner.size_band(n), _class(n)) for n in range(first, last + 1)}
    assert emu.counts["validate"] - before == len(classes) < 25


def test_the_plan_of_a_cache_length_does_not_depend_on_the_lengths_before_it(emu):
    make = _decode(emu, "Q @ K^T", np.float32, seed=2)

    def call(n):
        a, b, out = make(n)
        gemmlab.matmul(a, b, out=out)

    plans = plans_in_orders(LENGTHS, call)
    assert plans[0] == plans[1] == plans[2]


@pytest.mark.parametrize("product", ["Q @ K^T, K^T stored", "P @ V"])
def test_sizes_that_differ_between_operands_are_refused_though_their_band_has_a_family(emu, product):
    make = _decode(emu, product, np.float16)
    a, b, out = make(1028)
    gemmlab.matmul(a, b, out=out)  # the family of lengths 1025..1152, class 4
    a, b, out = make(1100)
    if product == "P @ V":  # K: p of 1100 columns, v of 1092 rows
        b = make(1092)[1]
        with pytest.raises(ValueError, match="inner dimensions differ"):
            gemmlab.matmul(a, b, out=out)
    else:  # N: scores of 1092 columns for a b of 1100; K (not banded): b of 63 rows for q's 64
        with pytest.raises(ValueError, match="wrong shape"):
            gemmlab.matmul(a, b, out=make(1092)[2])
        with pytest.raises(ValueError, match="inner dimensions differ"):
            gemmlab.matmul(a, b[..., : HEAD - 1, :], out=out)


def test_only_thin_batches_of_one_batch_shape_make_a_family(emu):
    def key(a, b, out=None):
        return api._family_key(api._signature(a, b, out, 1.0, 0.0, False, False, "auto", None, None, {})[0])

    make = _decode(emu, "Q @ K^T", np.float16)
    a, b, out = make(1025)
    fkey, m, n, k, banded = key(a, b, out)
    assert fkey is not None and (m, n, k, banded) == (1, 1025, HEAD, (True, False))
    assert key(*make(1026))[0] != fkey and key(*make(1027))[0] == fkey  # alignment classes apart
    assert key(*make(1153))[0] != fkey  # another band
    assert key(*make(200))[0] is None  # below BAND_MIN
    wide = _decode(emu, "Q @ K^T", np.float16, rows=planner.THIN_MAX_ROWS)
    assert key(*wide(1025)[:2])[0] is None  # not thin
    one = _decode(emu, "Q @ K^T", np.float16, batch=(1,))
    assert key(*one(1025))[0] is None  # a batch of one is a matrix: its N is not banded
    q1 = emu.keep(np.ones((1, 3, 1, HEAD), np.float16))  # broadcast over the batch
    assert key(q1, b)[0] is None
    # a family for a thin batch only where the first call derives its members
    gemmlab.matmul(a, b, out=out)
    (family,) = executor.CACHE._families.values()
    assert family.template is not None and family.call.A.operand.obj is None


gpu = pytest.mark.skipif(not rt_device.gpu_available(), reason="needs a GPU")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision", [None, "fp32_tc"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("product", ["Q @ K^T", "P @ V"])
def test_on_the_gpu_a_growing_cache_computes_what_a_fresh_call_does(product, dtype, precision):
    """PyTorch tensors on the GPU, a static cache read up to a new length at each call: the
    result is bitwise a fresh call's and within rounding of FP64."""
    torch = pytest.importorskip("torch")
    if precision == "fp32_tc" and dtype != "float32":
        pytest.skip("fp32_tc is for float32 inputs")
    g = torch.Generator(device="cuda").manual_seed(3)
    dt = getattr(torch, dtype)
    bh, d = 12, 128

    def rand(*shape):
        return (torch.rand(*shape, device="cuda", generator=g) - 0.5).to(dt)

    q, p, cache = rand(bh, 1, d), rand(bh, 1, CACHE_MAX), rand(bh, CACHE_MAX, d)
    scores, out = torch.full((bh, 1, CACHE_MAX), float("nan"), device="cuda", dtype=dt), rand(bh, 1, d)

    def operands(n):
        if product == "Q @ K^T":
            return q, cache[:, :n].transpose(-1, -2), scores[..., :n]
        return p[..., :n], cache[:, :n], out

    executor.CACHE.clear()
    tol = 2e-2 if dtype != "float32" else 1e-5
    for n in list(range(1020, 1060)) + [1151, 1152, 1153, 257, 300]:
        a, b, c = operands(n)
        c.fill_(float("nan"))
        gemmlab.matmul(a, b, out=c, precision=precision)
        got = c.clone()
        ref = a.double() @ b.double()
        assert float((got.double() - ref).abs().max() / ref.abs().max()) < tol, n
        if n % 8 == 5 or n > 1150:
            kept = dict(executor.CACHE._d), dict(executor.CACHE._families)
            executor.CACHE.clear()
            c.fill_(float("nan"))
            gemmlab.matmul(a, b, out=c, precision=precision)
            torch.cuda.synchronize()
            assert torch.equal(c, got), n
            executor.CACHE._d.update(kept[0])
            executor.CACHE._families.update(kept[1])
