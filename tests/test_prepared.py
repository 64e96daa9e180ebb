"""The prepared-call cache, end to end on the CPU (emulated kernels, NumPy arrays
playing GPU arrays and taking the fast path as CuPy arrays do): a repeated call
reuses what its first call prepared; two calls that differ in any element of
the signature never share a prepared call; and a warm cache skips no check whose
outcome could differ -- bad input raises the same error as on a cold cache and
leaves out untouched."""

import numpy as np
import pytest

import emulated_gpu
import gemmlab
from gemmlab.core import executor, tables


_emu = None


@pytest.fixture
def emu(monkeypatch):
    global _emu
    _emu = emulated_gpu.install(monkeypatch)
    return _emu


def _dev(x):
    """x as emulated device memory (the emulated kernels touch only such arrays)."""
    return _emu.keep(x)


def _rand(shape, dtype="float32", seed=0):
    return _dev(np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype))


def _ref(a, b, alpha=1.0, beta=0.0, c=None):
    r = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    return r if c is None else r + beta * c.astype(np.float64)


def _check(out, ref, bound=1e-5):
    assert np.isfinite(out).all()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < bound


def test_a_repeated_call_reuses_its_prepared_call_on_new_data(emu):
    a, b = _rand((37, 21)), _rand((21, 19), seed=1)
    _check(gemmlab.matmul(a, b, kernel="vectorized"), _ref(a, b))
    assert len(executor.CACHE) == 1
    launches = len(emu.launches)
    for seed in range(3):  # new arrays at new addresses, same signature
        a2, b2 = _rand((37, 21), seed=10 + seed), _rand((21, 19), seed=20 + seed)
        out = _dev(np.full((37, 19), np.nan, np.float32))
        assert gemmlab.matmul(a2, b2, out=out, kernel="vectorized") is out
        _check(out, _ref(a2, b2))
    assert len(executor.CACHE) == 2  # out= is another signature than a new result
    assert len(emu.launches) == launches + 3
    assert gemmlab.last_plan().spec.name == "vectorized"


def _variants():
    """(name, kwargs-maker): calls that differ from the base call in one element of the signature."""

    def base():
        return dict(a=_rand((33, 20)), b=_rand((20, 24), seed=1), kw={"kernel": "vectorized"})

    def stride():
        d = base()
        d["a"] = _dev(np.asfortranarray(d["a"]))  # same shape, column-major
        return d

    def alignment():
        d = base()
        buf = _dev(np.empty(33 * 20 + 1, np.float32))[1:]  # 4 bytes off the 16-byte grid
        d["a"] = buf.reshape(33, 20)
        d["a"][...] = _rand((33, 20))
        return d

    def dtype():
        d = base()
        d["a"], d["b"], d["kw"] = (
            _dev(d["a"].astype(np.float16)),
            _dev(d["b"].astype(np.float16)),
            {"kernel": "wmma_warptile"},
        )
        return d

    def out_given():
        d = base()
        d["kw"] = dict(d["kw"], out=_dev(np.empty((33, 24), np.float32)))
        return d

    def alpha_zero():
        d = base()
        d["kw"] = dict(d["kw"], alpha=0.0)
        return d

    def beta_nonzero():
        d = base()
        d["kw"] = dict(d["kw"], out=_rand((33, 24), seed=5), beta=0.5)
        return d

    def tile_params():
        d = base()
        d["kw"] = dict(d["kw"], BM=64, BN=64)
        return d

    def precision():
        d = base()
        d["kw"] = {"kernel": "wmma_warptile", "precision": "tf32"}
        return d

    def trans():
        d = base()
        d["a"] = _dev(np.ascontiguousarray(d["a"].T))
        d["kw"] = dict(d["kw"], trans_a=True)
        return d

    return [base, stride, alignment, dtype, out_given, alpha_zero, beta_nonzero, tile_params, precision, trans]


def test_calls_differing_in_one_element_of_the_signature_never_share_a_prepared_call(emu):
    seen = []
    for make in _variants():
        d = make()
        kw = dict(d["kw"])
        out = kw.get("out")
        c0 = None if out is None or kw.get("beta", 0.0) == 0 else out.astype(np.float64)  # beta = 0: out unread
        result = gemmlab.matmul(d["a"], d["b"], **kw)
        assert len(executor.CACHE) == len(seen) + 1, f"{make.__name__} shared a prepared call"
        p = gemmlab.last_plan()
        seen.append((make.__name__, p.name_expression))
        # and the result is right for each
        ref = _ref(d["a"].T if kw.get("trans_a") else d["a"], d["b"], kw.get("alpha", 1.0), kw.get("beta", 0.0), c0)
        if kw.get("alpha", 1.0) == 0:
            assert (result == 0).all()
        else:
            _check(result, ref, 1e-2 if d["a"].dtype == np.float16 or kw.get("precision") else 1e-5)
    assert len({d for _, d in seen}) >= 5  # several of them also instantiate other kernels


def test_a_new_tuned_table_plans_the_call_again(emu):
    a, b = _rand((40, 40)), _rand((40, 40), seed=1)
    gemmlab.matmul(a, b)
    tables.reload()
    gemmlab.matmul(a, b)
    assert len(executor.CACHE) == 2


# -- a warm cache skips no check whose outcome could differ ------------------------------------


def _warm(shape_a=(16, 12), shape_b=(12, 8)):
    a, b = _rand(shape_a), _rand(shape_b, seed=1)
    out = _dev(np.empty((shape_a[0], shape_b[1]), np.float32))
    gemmlab.matmul(a, b, out=out, kernel="vectorized")
    return a, b, out


def _same_error(call):
    """The exception a call raises on a warm cache, and on a cold one."""
    with pytest.raises(Exception) as warm:
        call()
    executor.CACHE.clear()
    with pytest.raises(Exception) as cold:
        call()
    assert type(warm.value) is type(cold.value) and str(warm.value) == str(cold.value)
    return warm.value


def test_out_overlapping_an_input_is_computed_in_a_copy_on_a_warm_cache(emu):
    """A call of a warm signature whose out shares memory with a: not run in place (the
    product would read rows it has overwritten) but through a copy, as on a cold cache."""
    _warm((16, 16), (16, 16))
    for cold in (False, True):
        if cold:
            executor.CACHE.clear()
        buf = _rand((32, 16), seed=3)
        a, out = buf[:16], buf[8:24]  # same shapes and strides as the warm call
        b = _rand((16, 16), seed=4)
        ref = _ref(a.copy(), b)
        assert gemmlab.matmul(a, b, out=out, kernel="vectorized") is out
        _check(out, ref)


def test_out_that_is_b_is_computed_in_a_copy_on_a_warm_cache(emu):
    a, b, out = _warm((16, 16), (16, 16))
    b2 = _dev(b.copy())
    ref = _ref(a, b2.copy())
    assert gemmlab.matmul(a, b2, out=b2, kernel="vectorized") is b2
    _check(b2, ref)


@pytest.mark.parametrize(
    "change",
    [
        {"alpha": True},
        {"alpha": "2"},
        {"beta": None},
        {"trans_a": 1},
        {"trans_b": 0},
        {"BM": 64.0},
        {"BM": 7},
        {"kernel": "nope"},
        {"precision": "fp64"},
        {"out_dtype": "float16"},
        {"kernel": 3},
    ],
    ids=str,
)
def test_arguments_a_warm_signature_cannot_vouch_for_are_checked(emu, change):
    a, b, out = _warm()
    kw = {"out": out, "kernel": "vectorized"}
    kw.update(change)
    before = out.copy()
    _same_error(lambda: gemmlab.matmul(a, b, **kw))
    assert np.array_equal(out, before)


def test_the_result_is_a_new_array_each_call(emu):
    a, b = _rand((20, 20)), _rand((20, 20), seed=1)
    r1 = gemmlab.matmul(a, b)
    r2 = gemmlab.matmul(a, b)
    assert r1 is not r2 and r1.ctypes.data != r2.ctypes.data
    assert np.array_equal(r1, r2)


def test_the_cache_is_bounded(emu, monkeypatch):
    monkeypatch.setattr(executor.CACHE, "size", 3)
    for n in range(1, 7):
        gemmlab.matmul(_rand((n, 4)), _rand((4, 4), seed=n), kernel="naive")
    assert len(executor.CACHE) == 3


def test_split_k_and_batches_through_the_prepared_path(emu):
    rng = np.random.default_rng(7)
    for _ in range(2):  # cold, then warm
        a = _dev(rng.uniform(-1, 1, (3, 2, 17, 300)).astype(np.float32))
        b = _dev(rng.uniform(-1, 1, (2, 300, 9)).astype(np.float32))
        out = gemmlab.matmul(
            a, b, kernel="pipelined", BM=64, BN=64, BK=16, WM=32, WN=32, WNITER=2, TM=4, STAGES=3, SPLITK=3
        )
        _check(out, np.matmul(a.astype(np.float64), b.astype(np.float64)))
    assert len(executor.CACHE) == 1


def test_a_tuned_split_k_is_lowered_for_a_short_k():
    """The shipped H100 table answers 64^3 from its nearest tuned shape; its split-K
    would leave slices of one K-step, so it is dropped (the tuner's own rule)."""
    from gemmlab.core import planner

    p = planner.plan("auto", 64, 64, 64, gpu_slug="nvidia-h100-80gb-hbm3", sm_count=132)
    assert p.spec.splits(p.params) == 1 or -(-64 // p.params["BK"]) >= 4 * p.spec.splits(p.params)
    long_k = planner.plan("pipelined", 64, 64, 8192, SPLITK=4)
    assert long_k.spec.splits(long_k.params) == 4  # asked for explicitly: kept


def test_an_unhashable_tile_parameter_gets_the_full_paths_message(monkeypatch):
    """A list as a tile parameter cannot key the cache: the repeated-call path hands the call to
    the full path, whose TypeError names the parameter (not Python's "unhashable type" of a dict look-up)."""
    import numpy as np

    from gemmlab.core import api

    class Fake(np.ndarray):  # an array type the signature readers know
        pass

    monkeypatch.setitem(api.SIGNATURES, Fake, lambda x: (x.ctypes.data, ("fake", x.shape)))
    a = np.ones((8, 8), np.float32).view(Fake)
    with pytest.raises(TypeError, match="tile parameter BM"):
        gemmlab.matmul(a, a, kernel="blocktile_2d", BM=[64])
