"""gemmlab.matmul follows numpy.matmul: vectors, empty dimensions, batch
broadcasting, out= of any strides or dtype or sharing memory with an input,
mixed dtypes, and the errors numpy raises.

The classes of cases are those of CuPy's own matmul and dot tests
(tests/cupy_tests/math_tests/test_matmul.py, linalg_tests/test_product.py);
the lists below are this project's.  On the CPU every case runs end to end on
the emulated GPU (emulated_gpu.py: NumPy arrays play device memory, the
kernels are emulated from their contract) against numpy.matmul, plus a
hypothesis property test (GEMMLAB_HYPOTHESIS_EXAMPLES=10000 runs it long; the
default run takes a few seconds).  The tests marked gpu run the same classes
through the real kernels on CuPy arrays and PyTorch tensors.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import emulated_gpu
import gemmlab
from gemmlab.core import api, planner

# -- the cases ---------------------------------------------------------------------------------

# (a shape, b shape): numpy.matmul accepts each.
SHAPE_PAIRS = [
    # matrices, and the empty ones (M, N or K = 0)
    ((3, 2), (2, 4)),
    ((3, 0), (0, 4)),
    ((0, 2), (2, 4)),
    ((3, 2), (2, 0)),
    ((0, 0), (0, 0)),
    ((0, 3), (3, 0)),
    ((1, 1), (1, 1)),
    ((1, 2), (2, 1)),
    ((2, 1), (1, 3)),
    ((1, 7), (7, 1)),
    ((3, 1), (1, 1)),
    ((1, 1), (1, 3)),
    ((1, 2), (2, 3)),
    ((2, 3), (3, 1)),
    # vectors: a 1 is prepended to a, appended to b, and removed from the result
    ((2,), (2, 4)),
    ((0,), (0, 4)),
    ((3, 2), (2,)),
    ((3, 0), (0,)),
    ((2,), (2,)),
    ((0,), (0,)),
    ((2,), (2, 1)),
    ((1, 2), (2,)),
    ((1,), (1,)),
    ((3,), (3,)),
    ((40,), (40, 33)),
    ((33, 40), (40,)),
    ((5, 3, 2), (2,)),
    ((5, 3, 0), (0,)),
    ((2,), (5, 2, 4)),
    ((0,), (5, 0, 4)),
    ((6, 5, 3, 2), (2,)),
    ((6, 5, 3, 0), (0,)),
    ((2,), (6, 5, 2, 4)),
    ((0,), (6, 5, 0, 4)),
    # batches, broadcast by numpy's rule, batches of 0 included
    ((5, 3, 2), (5, 2, 4)),
    ((0, 3, 2), (0, 2, 4)),
    ((5, 3, 2), (2, 4)),
    ((0, 3, 2), (2, 4)),
    ((3, 2), (5, 2, 4)),
    ((3, 2), (0, 2, 4)),
    ((5, 3, 2), (1, 2, 4)),
    ((0, 3, 2), (1, 2, 4)),
    ((1, 3, 2), (5, 2, 4)),
    ((1, 3, 2), (0, 2, 4)),
    ((2, 2, 3, 2), (2, 2, 2, 4)),
    ((5, 0, 3, 2), (5, 0, 2, 4)),
    ((6, 5, 3, 2), (2, 4)),
    ((5, 0, 3, 2), (2, 4)),
    ((3, 2), (6, 5, 2, 4)),
    ((3, 2), (5, 0, 2, 4)),
    ((1, 5, 3, 2), (6, 1, 2, 4)),
    ((1, 0, 3, 2), (6, 1, 2, 4)),
    ((6, 1, 3, 2), (1, 5, 2, 4)),
    ((6, 1, 3, 2), (1, 0, 2, 4)),
    ((1, 3, 3), (10, 1, 3, 1)),
    ((2, 3, 0), (2, 0, 2)),
    ((6, 5, 3, 2), (6, 5, 2, 4)),
    ((6, 5, 3, 2), (6, 1, 2, 4)),
    ((6, 5, 3, 2), (1, 5, 2, 4)),
    ((6, 5, 3, 2), (1, 1, 2, 4)),
    ((6, 1, 3, 2), (6, 5, 2, 4)),
    ((1, 5, 3, 2), (6, 5, 2, 4)),
    ((1, 1, 3, 2), (6, 5, 2, 4)),
    # larger than a tile, odd sizes
    ((37, 70), (70, 29)),
    ((3, 33, 65), (65, 17)),
]

# numpy.matmul raises ValueError for each (K differs, batches do not broadcast, a scalar).
INVALID_PAIRS = [
    ((5, 3, 1), (3, 1, 4)),
    ((3, 2, 3), (3, 2, 4)),
    ((3, 2), ()),
    ((), (3, 2)),
    ((), ()),
    ((3, 2), (1,)),
    ((0, 2), (3, 0)),
    ((0, 1, 1), (2, 1, 1)),
    ((4,), (3,)),
    ((2, 3), (2,)),
    ((4,), (2, 3, 4)),
    ((2, 3, 0), (3, 0, 2)),
]

DTYPE_PAIRS = [("float32", "float32"), ("float16", "float16"), ("float16", "float32"), ("float32", "float16")]
TOL = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}
# The spacing of the smallest (subnormal) values: the rounding of a tiny result is that large.
TINY = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}


def _id(pair):
    return "x".join("(" + ",".join(map(str, s)) + ")" for s in pair)


def result_dtype(da: str, db: str) -> str:
    """numpy / torch.result_type among gemmlab's dtypes."""
    return da if da == db else "float32"


def reference(a, b, alpha=1.0, beta=0.0, c=None):
    """alpha * a @ b + beta * c in float64 (numpy.matmul's shapes), and the magnitude
    |alpha| |a| @ |b| + |beta| |c| that bounds its rounding."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ref, mag = alpha * np.matmul(a64, b64), abs(alpha) * np.matmul(np.abs(a64), np.abs(b64))
    if beta != 0:
        ref, mag = ref + beta * np.asarray(c, np.float64), mag + abs(beta) * np.abs(np.asarray(c, np.float64))
    return ref, mag


def assert_close(got, ref, mag, dtype: str, k: int = 1):
    got = np.asarray(got, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.isfinite(got).all(), "unwritten (NaN) or non-finite elements"
    # The result's rounding, and the products' (float32 accumulation in the kernels).
    bound = TOL[dtype] * mag + 4 * 2.0**-24 * max(k, 1) * mag + TINY[dtype]
    err = np.abs(got - ref)
    bad = err > bound
    assert not bad.any(), f"{bad.sum()} elements off, e.g. {got[bad][:3]} for {ref[bad][:3]} (bound {bound[bad][:3]})"


# -- on the emulated GPU -----------------------------------------------------------------------


@pytest.fixture
def emu(monkeypatch):
    return emulated_gpu.install(monkeypatch)


def _rand(emu, shape, dtype="float32", seed=0):
    return emu.keep(np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype))


def _poisoned(emu, shape, dtype="float32"):
    return emu.keep(np.full(shape, np.nan, dtype))


def _k(a, b):
    return a.shape[-1] if a.ndim else 0


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("pair", SHAPE_PAIRS, ids=_id)
def test_shape_pairs(emu, pair, dtype):
    """Each pair, as numpy.matmul: the result's shape, dtype and values, a new array or out."""
    a, b = _rand(emu, pair[0], dtype, 1), _rand(emu, pair[1], dtype, 2)
    ref, mag = reference(a, b)
    got = gemmlab.matmul(a, b)
    expected = np.matmul(a, b)
    assert np.shape(got) == np.shape(expected) and np.asarray(got).dtype == expected.dtype
    assert_close(got, ref, mag, dtype, _k(a, b))
    out = _poisoned(emu, ref.shape, dtype)
    assert gemmlab.matmul(a, b, out=out) is out
    assert_close(out, ref, mag, dtype, _k(a, b))


@pytest.mark.parametrize(
    "pair", [p for p in SHAPE_PAIRS if 0 in np.matmul(np.zeros(p[0]), np.zeros(p[1])).shape], ids=_id
)
def test_an_empty_result_launches_nothing(emu, pair):
    a, b = _rand(emu, pair[0], seed=1), _rand(emu, pair[1], seed=2)
    out = emu.keep(np.full(np.matmul(a, b).shape, 7.0, np.float32))
    assert gemmlab.matmul(a, b).shape == out.shape
    assert gemmlab.matmul(a, b, out=out, beta=0.5) is out
    assert emu.launches == []


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("pair", [((3, 0), (0, 4)), ((2, 3, 0), (2, 0, 2)), ((5, 3, 0), (0,)), ((0,), (0,))], ids=_id)
def test_k_zero_gives_beta_times_out_without_a_gemm(emu, pair, dtype):
    """K = 0: zeros, or beta * out; the product's kernel is never launched (nothing to read)."""
    a, b = _rand(emu, pair[0], dtype), _rand(emu, pair[1], dtype)
    shape = np.matmul(a, b).shape
    assert np.array_equal(gemmlab.matmul(a, b), np.zeros(shape, dtype))
    c0 = np.random.default_rng(3).uniform(-1, 1, shape).astype(dtype)
    out = emu.keep(c0.copy())
    assert gemmlab.matmul(a, b, out=out, beta=-2.0) is out
    assert np.array_equal(out, (-2.0 * c0.astype(np.float64)).astype(dtype))
    assert all(k == "reduce" for k, _ in emu.launches), emu.launches


def test_vector_dot_vector_is_a_0d_result(emu):
    """1-D @ 1-D: the dot product, a 0-d array of the inputs' kind (NumPy gives a
    scalar for NumPy inputs: gemmlab's host path returns one too)."""
    a, b = _rand(emu, (7,), seed=1), _rand(emu, (7,), seed=2)
    got = gemmlab.matmul(a, b)
    assert np.shape(got) == () and abs(float(got) - float(a.astype(np.float64) @ b)) < 1e-5
    out = emu.keep(np.array(np.nan, np.float32))
    assert gemmlab.matmul(a, b, out=out) is out and abs(float(out) - float(got)) < 1e-6
    # trans_a / trans_b leave a vector alone, as a.T does in NumPy
    assert float(gemmlab.matmul(a, b, trans_a=True, trans_b=True)) == float(got)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize(
    "pair",
    [
        ((2, 3, 4), (4, 2)),
        ((1, 2), (2, 3)),
        ((2, 3), (3, 1)),
        ((0, 3), (3, 4)),
        ((2, 3), (3, 0)),
        ((3, 0), (0, 4)),
        ((2, 3, 0), (2, 0, 2)),
        ((2,), (2, 4)),
        ((4, 2), (2,)),
    ],
    ids=_id,
)
def test_transposed_views_and_trans_flags(emu, pair, trans_a, trans_b):
    """Operands given as transposed views of stored arrays (as CuPy's dot tests do), and
    the same through trans_a / trans_b on the stored arrays."""

    def stored(shape, trans, seed):
        if trans and len(shape) >= 2:
            return np.swapaxes(_rand(emu, shape[:-2] + shape[:-3:-1], seed=seed), -1, -2)
        return _rand(emu, shape, seed=seed)

    a, b = stored(pair[0], trans_a, 1), stored(pair[1], trans_b, 2)
    ref, mag = reference(a, b)
    assert_close(gemmlab.matmul(a, b), ref, mag, "float32", _k(a, b))
    ta, tb = trans_a and a.ndim >= 2, trans_b and b.ndim >= 2
    sa = np.swapaxes(a, -1, -2) if ta else a  # the stored arrays, with the flags
    sb = np.swapaxes(b, -1, -2) if tb else b
    assert_close(gemmlab.matmul(sa, sb, trans_a=ta, trans_b=tb), ref, mag, "float32", _k(a, b))


def test_a_negative_batch_stride_is_read_in_place_without_tma(emu):
    """A reversed stack of float16 matrices: read in place, not through tensor maps
    (TMA steps through a batch forward only), so the plan falls back and says why."""
    a = _rand(emu, (3, 40, 24), "float16", 1)[::-1]
    b = _rand(emu, (24, 72), "float16", 2)
    kept = len(emu.arrays)
    got = gemmlab.matmul(a, b)
    assert len(emu.arrays) == kept + 1  # the result only: no copy of a
    ref, mag = reference(a, b)
    assert_close(got, ref, mag, "float16", 24)
    assert gemmlab.last_plan().spec.name != "wgmma", gemmlab.last_plan().describe()


def test_relaxed_contiguous_input(emu):
    """A view with a dimension of 1 inserted (any stride there) and a column of one
    element per batch."""
    x1 = _rand(emu, (2, 2, 3), seed=1)[:, None, :, :]
    x2 = _rand(emu, (2, 1, 3, 1), seed=2)
    ref, mag = reference(x1, x2)
    assert_close(gemmlab.matmul(x1, x2), ref, mag, "float32", 3)


def _outs(emu, shape, dtype):
    """out arrays of ``shape`` with every kind of strides, NaN-poisoned (name, array, buffer)."""
    outs = [("C", _poisoned(emu, shape, dtype))]
    if len(shape) >= 2:
        outs.append(("F", np.swapaxes(_poisoned(emu, shape[:-2] + shape[:-3:-1], dtype), -1, -2)))
        outs.append(("columns-reversed", _poisoned(emu, shape, dtype)[..., ::-1]))
    if len(shape) >= 1:
        outs.append(("reversed", _poisoned(emu, shape, dtype)[::-1]))
        big = _poisoned(emu, shape[:-1] + (2 * shape[-1] + 1,), dtype)
        outs.append(("strided", big[..., 1::2]))
    return outs


@pytest.mark.parametrize(
    "pair",
    [
        ((2, 3), (3, 4)),
        ((5, 3, 2), (5, 2, 4)),
        ((0, 3, 2), (0, 2, 4)),
        ((2,), (2, 4)),
        ((5, 3, 2), (2,)),
        ((2,), (2,)),
        ((2, 3, 4), (2, 4, 1)),
        ((2, 33, 20), (20, 17)),
    ],
    ids=_id,
)
@pytest.mark.parametrize("beta", [0.0, 0.75])
def test_out_with_any_strides(emu, pair, beta):
    """out reversed (CuPy's zeros(shape)[::-1]), column-major, every other column: the
    result lands in out's elements, nothing around them is written, out is returned."""
    a, b = _rand(emu, pair[0], seed=1), _rand(emu, pair[1], seed=2)
    shape = np.matmul(a, b).shape
    c0 = np.random.default_rng(4).uniform(-1, 1, shape).astype(np.float32)
    for name, out in _outs(emu, shape, "float32"):
        if beta:
            out[...] = c0
        ref, mag = reference(a, b, 1.0, beta, c0)
        root = out
        while isinstance(root.base, np.ndarray):
            root = root.base
        untouched = np.isnan(root).sum() - (0 if beta else out.size)
        assert gemmlab.matmul(a, b, out=out, beta=beta) is out, name
        assert_close(out, ref, mag, "float32", _k(a, b))
        assert np.isnan(root).sum() == untouched, f"{name}: memory around out was written"


@pytest.mark.parametrize("shape", [(9, 9), (2, 6, 6), (40, 40)])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_out_is_an_input(emu, shape, beta):
    """matmul(a, a, out=a), and out being b: computed into a new array, then copied into out."""
    for which in ("a", "b", "both"):
        a0 = np.random.default_rng(5).uniform(-1, 1, shape).astype(np.float32)
        b0 = np.random.default_rng(6).uniform(-1, 1, shape).astype(np.float32)
        a, b = emu.keep(a0.copy()), emu.keep(b0.copy())
        if which == "both":
            b, b0 = a, a0
        out = b if which == "b" else a
        ref, mag = reference(a0, b0, 1.0, beta, out.copy())
        assert gemmlab.matmul(a, b, out=out, beta=beta) is out
        assert_close(out, ref, mag, "float32", shape[-1])


def test_out_overlapping_an_input_partly(emu):
    """out a view sharing some rows of a's buffer, or b a view of out: numpy's answer."""
    buf = _rand(emu, (12, 8), seed=7)
    a, out = buf[:8], buf[4:12]
    b = _rand(emu, (8, 8), seed=8)
    ref, mag = reference(a.copy(), b)
    assert gemmlab.matmul(a, b, out=out) is out
    assert_close(out, ref, mag, "float32", 8)
    big = _rand(emu, (2, 8, 8), seed=9)
    a, out = _rand(emu, (2, 8, 8), seed=10), big
    b = big[:, ::-1, :]  # reversed rows of out, read as b
    ref, mag = reference(a, b.copy())
    assert gemmlab.matmul(a, b, out=out) is out
    assert_close(out, ref, mag, "float32", 8)


def test_out_overlap_on_a_warm_cache(emu):
    """The first call of a signature is prepared; a later call of that signature whose
    out shares memory with a (same shapes, strides, alignment) is computed correctly
    through a copy, not refused and not run in place."""
    a, b = _rand(emu, (16, 16), seed=1), _rand(emu, (16, 16), seed=2)
    gemmlab.matmul(a, b, out=_poisoned(emu, (16, 16)))
    a2 = _rand(emu, (16, 16), seed=3)
    ref, mag = reference(a2.copy(), b)
    assert gemmlab.matmul(a2, b, out=a2) is a2
    assert_close(a2, ref, mag, "float32", 16)


@pytest.mark.parametrize("da, db", DTYPE_PAIRS)
@pytest.mark.parametrize(
    "pair", [((3, 2), (2, 4)), ((5, 3, 2), (2,)), ((2, 33, 20), (1, 20, 17)), ((0, 3, 2), (2, 4))], ids=_id
)
def test_mixed_dtypes_promote(emu, pair, da, db):
    """float16 with float32: float32, as numpy.matmul (and torch.matmul's type promotion)."""
    a, b = _rand(emu, pair[0], da, 1), _rand(emu, pair[1], db, 2)
    got = gemmlab.matmul(a, b)
    rt = result_dtype(da, db)
    assert got.dtype == np.matmul(a, b).dtype == np.dtype(rt)
    ref, mag = reference(a, b)
    assert_close(got, ref, mag, rt, _k(a, b))


@pytest.mark.parametrize(
    "inputs, out_dtype", [("float32", "float16"), ("float16", "float32"), (("float16", "float32"), "float16")], ids=str
)
def test_out_of_another_float_dtype_is_cast_into(emu, inputs, out_dtype):
    """out of another float dtype than the result: numpy's casting="same_kind"."""
    da, db = (inputs, inputs) if isinstance(inputs, str) else inputs
    a, b = _rand(emu, (2, 9, 7), da, 1), _rand(emu, (7, 5), db, 2)
    out = _poisoned(emu, (2, 9, 5), out_dtype)
    expected = np.matmul(a, b, out=np.empty((2, 9, 5), out_dtype))
    assert gemmlab.matmul(a, b, out=out) is out and out.dtype == expected.dtype
    ref, mag = reference(a, b)
    assert_close(out, ref, mag, "float16", 7)


@pytest.mark.parametrize("pair", INVALID_PAIRS, ids=_id)
def test_invalid_shapes_are_value_errors(emu, pair):
    def arr(s):
        return emu.keep(np.float32(1.5) * np.ones(s, np.float32)) if s else emu.keep(np.array(1.5, np.float32))

    a, b = arr(pair[0]), arr(pair[1])
    with pytest.raises(ValueError):
        np.matmul(a, b)
    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ|do not broadcast|is a scalar"):
        gemmlab.matmul(a, b)
    assert emu.launches == []


def test_out_of_the_wrong_shape_is_left_alone(emu):
    a, b = _rand(emu, (2,), seed=1), _rand(emu, (2, 4), seed=2)
    for shape in [(1, 4), (4, 1), (), (2, 4)]:
        out = emu.keep(np.full(shape, 3.0, np.float32))
        with pytest.raises(ValueError, match=r"has the wrong shape: a @ b is \(4,\) \(a \(2,\), b \(2, 4\)"):
            gemmlab.matmul(a, b, out=out)
        assert (out == 3.0).all()


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "bool", "complex64", "float64", ">f4"])
def test_other_dtypes_are_type_errors(emu, dtype):
    good = _rand(emu, (3, 4))
    bad = emu.keep(np.ones((3, 4), dtype))
    for args in ((bad, good.T), (good, bad.T)):
        with pytest.raises(TypeError, match=r"(is not supported|other byte order)"):
            gemmlab.matmul(*args)
    out = emu.keep(np.full((3, 3), 2, dtype))
    before = out.copy()
    with pytest.raises(TypeError, match=r"out .*(is not supported|other byte order)"):
        gemmlab.matmul(good, good.T, out=out)
    assert np.array_equal(out, before)


def test_an_out_whose_elements_overlap_stays_an_error(emu):
    base = emu.keep(np.full((4,), 5.0, np.float32))
    out = np.lib.stride_tricks.as_strided(base, (3, 4), (0, 4))
    with pytest.raises(ValueError, match=r"some of its elements share memory"):
        gemmlab.matmul(_rand(emu, (3, 2)), _rand(emu, (2, 4)), out=out)
    assert (base == 5.0).all()


# -- the fast path ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pair, dtypes",
    [
        (((5, 3, 2), (2,)), ("float32", "float32")),
        (((2,), (2,)), ("float32", "float32")),
        (((0, 3, 2), (2, 4)), ("float32", "float32")),
        (((3, 0), (0, 4)), ("float16", "float16")),
        (((6, 1, 3, 2), (1, 5, 2, 4)), ("float16", "float16")),
    ],
    ids=str,
)
def test_a_repeated_call_takes_the_prepared_path(emu, monkeypatch, pair, dtypes):
    """Vectors, empty batches, K = 0, broadcasting: the second call of a signature goes
    from its signature to the prepared call, with no validation or planning."""
    a, b = _rand(emu, pair[0], dtypes[0], 1), _rand(emu, pair[1], dtypes[1], 2)
    gemmlab.matmul(a, b)
    full = []
    monkeypatch.setattr(api, "_matmul_full", lambda *args: full.append(args))
    monkeypatch.setattr(planner, "validate", lambda *args: full.append(args))
    a2, b2 = _rand(emu, pair[0], dtypes[0], 3), _rand(emu, pair[1], dtypes[1], 4)
    got = gemmlab.matmul(a2, b2)
    assert full == []
    ref, mag = reference(a2, b2)
    assert_close(got, ref, mag, dtypes[0], _k(a2, b2))


def _copy_case(emu, case: str, seed: int):
    """(a, b, out, beta) of one signature that needs copies, new values at each ``seed``."""
    a, b = _rand(emu, (9, 6), seed=seed), _rand(emu, (6, 7), seed=seed + 1)
    out, beta = _poisoned(emu, (9, 7)), 0.0
    if case == "reversed out":
        out = _poisoned(emu, (9, 7))[::-1]
    elif case == "reversed out, beta":
        out, beta = _rand(emu, (9, 7), seed=seed + 2)[::-1], 0.5
    elif case == "strided a":
        a = _rand(emu, (9, 12), seed=seed)[:, ::2]
    elif case == "float16 a":
        a = _rand(emu, (9, 6), "float16", seed)
    elif case == "float16 out":
        out = _poisoned(emu, (9, 7), "float16")
    elif case == "strided b, out in place":
        b = _rand(emu, (12, 7), seed=seed + 1)[::2]
    return a, b, out, beta


@pytest.mark.parametrize(
    "case",
    ["reversed out", "reversed out, beta", "strided a", "float16 a", "float16 out", "strided b, out in place"],
)
def test_a_repeated_call_that_needs_copies_is_validated_once(emu, monkeypatch, case):
    """Operands the kernels cannot take in place (a reversed or strided view, another dtype, an
    out of another dtype) are copied at every call, but the signature is validated once: later
    calls go through its CopiedCall, each with new values, each result right."""
    a, b, out, beta = _copy_case(emu, case, 1)
    gemmlab.matmul(a, b, out=out, beta=beta)
    full = []
    monkeypatch.setattr(planner, "validate", lambda *args: full.append(args))
    for seed in (10, 20):
        a, b, out, beta = _copy_case(emu, case, seed)
        c0 = out.astype(np.float32)
        ref, mag = reference(a.astype(np.float32), b.astype(np.float32), 1.0, beta, c0)
        assert gemmlab.matmul(a, b, out=out, beta=beta) is out
        assert_close(out.astype(np.float32), ref, mag, str(out.dtype), 6)
    assert full == []


def test_a_copied_call_decides_out_by_beta_as_rounded_and_keeps_no_arrays(emu):
    """beta = 1e-46 is 0 in float32 (the key's "beta == 0" says otherwise): the first call
    computes into a new array; a later beta = 0.5 of the same signature still reads out.  The
    kept CopiedCall holds none of the first call's arrays."""
    from gemmlab.core import executor

    a, b = _rand(emu, (9, 6), seed=1), _rand(emu, (6, 7), seed=2)
    gemmlab.matmul(a, b, out=_rand(emu, (9, 7), seed=3)[::-1], beta=1e-46)
    out = _rand(emu, (9, 7), seed=4)[::-1]
    c0 = out.copy()
    ref, mag = reference(a, b, 1.0, 0.5, c0)
    assert gemmlab.matmul(a, b, out=out, beta=0.5) is out
    assert_close(out, ref, mag, "float32", 6)
    kept = [c for c in executor.CACHE._d.values() if type(c) is api.CopiedCall]
    assert kept and all(op is None or op.obj is None for c in kept for op in (c.a, c.b, c.out))


def test_a_copied_call_whose_out_meets_an_input_takes_the_full_path(emu):
    """The signature's CopiedCall writes out in place (only b is copied); a later call of the
    same signature whose out is a itself (same shape, strides, dtype) is computed into a new
    array first, as numpy.matmul does (the product on the copies checks out against a)."""
    a, b = _rand(emu, (8, 8), seed=1), _rand(emu, (8, 16), seed=2)[:, ::2]
    gemmlab.matmul(a, b, out=_poisoned(emu, (8, 8)))
    a2 = _rand(emu, (8, 8), seed=3)
    ref, mag = reference(a2.copy(), b)
    assert gemmlab.matmul(a2, b, out=a2) is a2
    assert_close(a2, ref, mag, "float32", 8)


# -- the property test --------------------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("GEMMLAB_HYPOTHESIS_EXAMPLES", "0") or 0)
VIEWS = ["C", "F", "reversed", "strided", "broadcast", "misaligned"]
OUTS = ["none", "C", "F", "reversed", "strided", "is_a", "is_b", "cast"]


def _view(buf_maker, shape, view, rng, xp=np):
    """An array of ``shape`` with the strides ``view`` names, filled with uniform(-1, 1)."""
    values = xp.asarray(rng.uniform(-1, 1, shape))
    if view == "F" and len(shape) >= 2:
        x = xp.swapaxes(buf_maker(shape[:-2] + shape[:-3:-1]), -1, -2)
    elif view == "reversed" and len(shape) >= 1:
        x = buf_maker(shape)[::-1]
    elif view == "strided" and len(shape) >= 1:
        x = buf_maker(shape[:-1] + (2 * shape[-1],))[..., ::2]
    elif view == "broadcast" and len(shape) >= 3:  # every batch the same stored matrix (stride 0)
        buf = buf_maker((1,) + shape[1:])
        buf[...] = xp.asarray(rng.uniform(-1, 1, buf.shape))
        return xp.broadcast_to(buf, shape)
    elif view == "misaligned":
        n = int(np.prod(shape))
        x = buf_maker((n + 1,))[1:].reshape(shape)
    else:
        x = buf_maker(shape)
    x[...] = values
    return x


@st.composite
def problems(draw):
    """A numpy.matmul call: shapes with 0s and 1s, broadcast batches, vectors, views,
    dtypes, scalars and an out (or none) of any strides, dtype, or sharing memory."""
    small = st.sampled_from([2, 1, 3, 5, 8, 17, 1, 2, 3, 4, 6, 7, 9, 1, 2, 0])
    M, N, K = draw(small), draw(small), draw(small)
    nb = draw(st.integers(0, 3))
    batch = tuple(draw(st.sampled_from([2, 1, 3, 1, 2, 4, 1, 2, 3, 0])) for _ in range(nb))
    vec_a, vec_b = draw(st.booleans()) and draw(st.booleans()), draw(st.booleans()) and draw(st.booleans())
    out_kind = draw(st.sampled_from(OUTS))
    if out_kind == "is_a":  # a has the result's shape: K = N, a's batch the full one
        vec_a, N = False, K
    if out_kind == "is_b":
        vec_b, M = False, K

    def cut(s):  # a batch operand's own dimensions: some dropped from the left, some set to 1
        s = s[draw(st.integers(0, len(s))) :]
        return tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in s)

    ba = batch if out_kind == "is_a" else cut(batch)
    bb = batch if out_kind == "is_b" else cut(batch)
    sa = (K,) if vec_a else ba + (M, K)
    sb = (K,) if vec_b else bb + (K, N)
    bad_k = draw(st.sampled_from([False] * 15 + [True]))  # a mismatch now and then: both must refuse
    if bad_k:
        sb = (K + 1,) if vec_b else bb + (K + 1, N)
    da = draw(st.sampled_from(["float32", "float16"]))
    db = da if draw(st.booleans()) else draw(st.sampled_from(["float32", "float16"]))
    if out_kind == "is_a":
        db = da if draw(st.booleans()) else db
    return dict(
        sa=sa,
        sb=sb,
        da=da,
        db=db,
        va=draw(st.sampled_from(VIEWS)),
        vb=draw(st.sampled_from(VIEWS)),
        trans_a=draw(st.booleans()) and not vec_a,
        trans_b=draw(st.booleans()) and not vec_b,
        out=out_kind,
        out_view=draw(st.sampled_from(VIEWS[:4])),
        cast_to=draw(st.sampled_from(["float32", "float16"])),
        alpha=draw(st.sampled_from([1.0, -0.5, 0.0])),
        beta=draw(st.sampled_from([0.0, 0.0, 0.5])),
        seed=draw(st.integers(0, 2**16)),
    )


def _run_problem(p, seed, alloc, xp=np, host=lambda x: x):
    """One drawn problem on arrays ``alloc(shape, dtype)`` makes (xp: their module, host:
    a NumPy copy of one), against numpy.matmul on the same values."""
    rng = np.random.default_rng(seed)
    sa, sb = p["sa"], p["sb"]
    if p["trans_a"]:  # stored transposed, passed with trans_a
        sa = sa[:-2] + sa[:-3:-1]
    if p["trans_b"]:
        sb = sb[:-2] + sb[:-3:-1]
    a = _view(lambda s: alloc(s, p["da"]), sa, p["va"], rng, xp)
    b = _view(lambda s: alloc(s, p["db"]), sb, p["vb"], rng, xp)
    oa = host(xp.swapaxes(a, -1, -2) if p["trans_a"] else a)
    ob = host(xp.swapaxes(b, -1, -2) if p["trans_b"] else b)
    try:
        expected = np.matmul(oa, ob)
    except ValueError:
        event("refused by numpy")
        with pytest.raises(ValueError):
            gemmlab.matmul(a, b, trans_a=p["trans_a"], trans_b=p["trans_b"])
        return
    rt = result_dtype(p["da"], p["db"])
    assert expected.dtype == np.dtype(rt)
    kw = dict(trans_a=p["trans_a"], trans_b=p["trans_b"], alpha=p["alpha"])
    out, beta, c0 = None, 0.0, None
    if p["out"] == "is_a" and p["va"] != "broadcast" and oa.shape == expected.shape and not p["trans_a"]:
        out = a
    elif p["out"] == "is_b" and p["vb"] != "broadcast" and ob.shape == expected.shape and not p["trans_b"]:
        out = b
    elif p["out"] != "none":
        dt = p["cast_to"] if p["out"] == "cast" else rt
        view = p["out_view"] if p["out"] != "cast" else "C"
        out = _view(lambda s: alloc(s, dt), expected.shape, view, rng, xp)
    event(
        "out is a"
        if out is a and a is not None
        else "out is b"
        if out is b and b is not None
        else "no out"
        if out is None
        else f"out {p['out']}"
    )
    if expected.size == 0:
        event("empty result")
    if out is not None:
        beta = p["beta"]
        if beta == 0 and out is not a and out is not b:
            out[...] = np.nan
        c0 = host(out).astype(np.float64)
        kw.update(out=out, beta=beta)
    ref, mag = reference(oa, ob, p["alpha"], beta, c0)
    got = gemmlab.matmul(a, b, **kw)
    if out is not None:
        assert got is out
        tol_dtype = "float16" if "float16" in (rt, str(out.dtype)) else "float32"
    else:
        assert np.shape(got) == expected.shape and np.dtype(str(got.dtype)) == expected.dtype
        tol_dtype = rt
    assert_close(host(got), ref, mag, tol_dtype, oa.shape[-1] if oa.ndim else 0)


@settings(
    max_examples=EXAMPLES or 40,
    deadline=None,
    derandomize=not EXAMPLES,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(p=problems())
def test_property_against_numpy(p):
    """Any call numpy.matmul takes gives numpy's shape, dtype and values (float64 reference,
    the result dtype's rounding); any it refuses with ValueError gemmlab refuses too.  Each
    problem runs twice with new data: the first call prepares its signature, the second
    takes the prepared path."""
    with pytest.MonkeyPatch.context() as mp:
        emu = emulated_gpu.install(mp)
        for seed in (p["seed"], p["seed"] + 1):
            _run_problem(p, seed, lambda shape, dtype: emu.keep(np.empty(shape, dtype)))


# -- on the GPU: the same classes through the real kernels, CuPy arrays and PyTorch tensors ----------

BACKENDS = [("cupy", "float32"), ("cupy", "float16"), ("torch", "float32"), ("torch", "float16"), ("torch", "bfloat16")]


class _Dev:
    """Device arrays of one library: fresh uniform(-1, 1) data, NaN-poisoned outputs, and a
    float64 NumPy copy of what the device holds (the reference's inputs)."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == "cupy":
            self.xp = pytest.importorskip("cupy")
        else:
            self.torch = pytest.importorskip("torch")

    def dtype(self, name):
        return getattr(self.torch, name) if self.kind == "torch" else np.dtype(name)

    def rand(self, shape, dtype, seed):
        h = np.random.default_rng(seed).uniform(-1, 1, shape)
        if self.kind == "cupy":
            return self.xp.asarray(h).astype(dtype)
        return self.torch.tensor(h, dtype=self.torch.float64, device="cuda").to(self.dtype(dtype))

    def full(self, shape, value, dtype):
        if self.kind == "cupy":
            return self.xp.full(shape, value, dtype)
        return self.torch.full(shape, value, dtype=self.dtype(dtype), device="cuda")

    def host(self, x):
        if self.kind == "cupy":
            return self.xp.asnumpy(x).astype(np.float64)
        return x.detach().to(self.torch.float64).cpu().numpy()

    def transposed(self, x):
        return self.xp.swapaxes(x, -1, -2) if self.kind == "cupy" else x.transpose(-1, -2)

    def sync(self):
        if self.kind == "cupy":
            self.xp.cuda.get_current_stream().synchronize()
        else:
            self.torch.cuda.synchronize()


def _gpu_check(dev, got, a, b, dtype, alpha=1.0, beta=0.0, c0=None):
    dev.sync()
    ha, hb = dev.host(a), dev.host(b)
    ref, mag = reference(ha, hb, alpha, beta, c0)
    assert_close(dev.host(got), ref, mag, dtype, ha.shape[-1] if ha.ndim else 0)


@pytest.mark.gpu
@pytest.mark.parametrize("kind, dtype", BACKENDS, ids=lambda x: x)
@pytest.mark.parametrize("pair", SHAPE_PAIRS, ids=_id)
def test_gpu_shape_pairs(pair, kind, dtype):
    """Every pair through the real kernels: a new result (shape, dtype, values), then into a
    NaN-poisoned out (returned)."""
    dev = _Dev(kind)
    a, b = dev.rand(pair[0], dtype, 1), dev.rand(pair[1], dtype, 2)
    got = gemmlab.matmul(a, b)
    shape = np.matmul(np.empty(pair[0]), np.empty(pair[1])).shape
    assert tuple(got.shape) == shape and got.dtype == dev.dtype(dtype)
    _gpu_check(dev, got, a, b, dtype)
    out = dev.full(shape, np.nan, dtype)
    assert gemmlab.matmul(a, b, out=out) is out
    _gpu_check(dev, out, a, b, dtype)
    if kind == "cupy" and len(shape) >= 1:  # CuPy's reversed out: zeros(shape)[::-1]
        rev = dev.full(shape, np.nan, dtype)[::-1]
        assert gemmlab.matmul(a, b, out=rev) is rev
        _gpu_check(dev, rev, a, b, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("kind, dtype", BACKENDS, ids=lambda x: x)
@pytest.mark.parametrize(
    "pair", [((3, 0), (0, 4)), ((2, 3, 0), (2, 0, 2)), ((5, 3, 0), (0,)), ((0,), (0,)), ((70, 0), (0, 130))], ids=_id
)
def test_gpu_k_zero(pair, kind, dtype):
    """K = 0: zeros, and beta * out, for every dtype (the reduction's quick return)."""
    dev = _Dev(kind)
    a, b = dev.rand(pair[0], dtype, 1), dev.rand(pair[1], dtype, 2)
    shape = np.matmul(np.empty(pair[0]), np.empty(pair[1])).shape
    got = gemmlab.matmul(a, b)
    dev.sync()
    assert (dev.host(got) == 0).all()
    out = dev.rand(shape, dtype, 3)
    c0 = dev.host(out)
    assert gemmlab.matmul(a, b, out=out, beta=-2.0) is out
    _gpu_check(dev, out, a, b, dtype, 1.0, -2.0, c0)


@pytest.mark.gpu
@pytest.mark.parametrize("kind, dtype", BACKENDS, ids=lambda x: x)
@pytest.mark.parametrize(
    "pair",
    [
        ((2, 3, 4), (4, 2)),
        ((1, 2), (2, 3)),
        ((2, 3), (3, 1)),
        ((0, 3), (3, 4)),
        ((33, 70), (70, 40)),
        ((2, 3, 0), (2, 0, 2)),
    ],
    ids=_id,
)
def test_gpu_transposed_views(pair, kind, dtype):
    dev = _Dev(kind)
    for ta in (False, True):
        for tb in (False, True):

            def stored(shape, t, seed):
                return (
                    dev.transposed(dev.rand(shape[:-2] + shape[:-3:-1], dtype, seed))
                    if t
                    else dev.rand(shape, dtype, seed)
                )

            a, b = stored(pair[0], ta, 1), stored(pair[1], tb, 2)
            _gpu_check(dev, gemmlab.matmul(a, b), a, b, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("kind, dtype", BACKENDS, ids=lambda x: x)
@pytest.mark.parametrize("shape", [(900, 900), (2, 600, 600), (7, 7)])
def test_gpu_out_is_an_input(shape, kind, dtype):
    """CuPy's overlap test, on random data: matmul(a, a, out=a), and out = b with beta."""
    dev = _Dev(kind)
    a = dev.rand(shape, dtype, 1)
    ha = dev.host(a)
    assert gemmlab.matmul(a, a, out=a) is a
    dev.sync()
    ref, mag = reference(ha, ha)
    assert_close(dev.host(a), ref, mag, dtype, shape[-1])
    a, b = dev.rand(shape, dtype, 2), dev.rand(shape, dtype, 3)
    ha, hb = dev.host(a), dev.host(b)
    assert gemmlab.matmul(a, b, out=b, beta=0.5) is b
    dev.sync()
    ref, mag = reference(ha, hb, 1.0, 0.5, hb)
    assert_close(dev.host(b), ref, mag, dtype, shape[-1])


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cupy", "torch"])
@pytest.mark.parametrize(
    "da, db", DTYPE_PAIRS + [("bfloat16", "float16"), ("bfloat16", "float32"), ("float32", "bfloat16")], ids=str
)
def test_gpu_mixed_dtypes_and_out_casts(kind, da, db):
    if kind == "cupy" and "bfloat16" in (da, db):
        pytest.skip("CuPy has no bfloat16")
    dev = _Dev(kind)
    a, b = dev.rand((3, 37, 20), da, 1), dev.rand((20, 45), db, 2)
    rt = result_dtype(da, db)
    got = gemmlab.matmul(a, b)
    assert got.dtype == dev.dtype(rt)
    _gpu_check(dev, got, a, b, rt)
    for out_dt in ("float32", "float16"):
        out = dev.full((3, 37, 45), np.nan, out_dt)
        assert gemmlab.matmul(a, b, out=out) is out and out.dtype == dev.dtype(out_dt)
        _gpu_check(dev, out, a, b, "float16" if "float16" in (rt, out_dt) else rt)


@pytest.mark.gpu
@pytest.mark.parametrize("kind, dtype", BACKENDS, ids=lambda x: x)
@pytest.mark.parametrize(
    "pair",
    [
        ((5, 3, 2), (2,)),
        ((2,), (2,)),
        ((0, 3, 2), (2, 4)),
        ((3, 0), (0, 4)),
        ((6, 1, 33, 20), (1, 5, 20, 40)),
        ((300,), (300, 129)),
    ],
    ids=_id,
)
def test_gpu_a_repeated_call_takes_the_prepared_path(monkeypatch, pair, kind, dtype):
    dev = _Dev(kind)
    a, b = dev.rand(pair[0], dtype, 1), dev.rand(pair[1], dtype, 2)
    gemmlab.matmul(a, b)
    full = []
    monkeypatch.setattr(api, "_matmul_full", lambda *args: full.append(args))
    monkeypatch.setattr(planner, "validate", lambda *args: full.append(args))
    a2, b2 = dev.rand(pair[0], dtype, 3), dev.rand(pair[1], dtype, 4)
    got = gemmlab.matmul(a2, b2)
    assert full == [], "a repeated signature took the full path"
    monkeypatch.undo()
    _gpu_check(dev, got, a2, b2, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gpu_numpy_inputs(dtype):
    """NumPy in, NumPy out, as numpy.matmul: vector @ vector a NumPy scalar, out= any strides."""
    rng = np.random.default_rng(5)
    a, b = rng.uniform(-1, 1, 7).astype(dtype), rng.uniform(-1, 1, 7).astype(dtype)
    got = gemmlab.matmul(a, b)
    assert type(got) is type(np.matmul(a, b))
    ref, mag = reference(a, b)
    assert_close(got, ref, mag, dtype, 7)
    a, b = rng.uniform(-1, 1, (4, 5, 6)).astype(dtype), rng.uniform(-1, 1, (6,)).astype(dtype)
    out = np.full((4, 10), np.nan, dtype)[::-1, ::2]
    assert gemmlab.matmul(a, b, out=out) is out
    ref, mag = reference(a, b)
    assert_close(out, ref, mag, dtype, 6)


@pytest.mark.gpu
@settings(
    max_examples=EXAMPLES or 150,
    deadline=None,
    derandomize=not EXAMPLES,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(p=problems())
def test_gpu_property_against_numpy(p):
    """The property test on CuPy arrays through the real kernels (each problem twice: the
    second call takes the prepared path)."""
    cp = pytest.importorskip("cupy")
    for seed in (p["seed"], p["seed"] + 1):
        _run_problem(p, seed, lambda shape, dtype: cp.full(shape, np.nan, dtype), cp, lambda x: cp.asnumpy(x))
