"""Argument validation of gemmlab.matmul with NumPy arrays (no GPU needed).

matmul checks everything before it touches the GPU, so each error below is
raised on this machine; each test checks the exception type, that the message
names the offending operand/shape/dtype/rule, and that ``out`` was not written.
"""

import re

import numpy as np
import pytest

import gemmlab
from gemmlab.core.planner import batch_groups
from gemmlab.core.planner import kernel_view as _kernel_view
from gemmlab.core.planner import validate as _validate
from gemmlab.runtime.device import gpu_available

SENTINEL = 7.25


def f32(*shape):
    """A float32 C-ordered array with distinct values."""
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def sentinel_out(shape, dtype=np.float32):
    return np.full(shape, SENTINEL, dtype=dtype)


def raises_leaving_out(exc, pattern, out, *args, **kwargs):
    """Call matmul(*args, out=out, **kwargs); expect ``exc`` matching ``pattern``; out untouched."""
    before = out.copy()
    with pytest.raises(exc, match=pattern):
        gemmlab.matmul(*args, out=out, **kwargs)
    assert out.dtype == before.dtype and out.shape == before.shape
    np.testing.assert_array_equal(out, before)


def label(name, shape, dtype="float32"):
    """The operand description matmul's messages use, as a regex."""
    return re.escape(f"{name} (NumPy array, shape {tuple(shape)}, {dtype}, on host memory)")


# -- shapes -----------------------------------------------------------------------


def test_inner_dimensions_differ():
    """a (4, 3) @ b (5, 2): the message names both shapes and both K values."""
    pattern = (
        r"matmul: inner dimensions differ: a has shape \(4, 3\) \(K=3\) but b has shape "
        r"\(5, 2\) \(K=5\); a @ b needs a\.shape\[-1\] == b\.shape\[-2\]$"
    )
    with pytest.raises(ValueError, match=pattern):
        gemmlab.matmul(f32(4, 3), f32(5, 2))


def test_inner_dimensions_differ_leaves_out_alone():
    raises_leaving_out(ValueError, "inner dimensions differ", sentinel_out((4, 2)), f32(4, 3), f32(5, 2))


def test_inner_dimensions_differ_names_the_ops():
    """With trans_a / trans_b the message gives the shapes of a^T and b^T."""
    pattern = (
        r"matmul: inner dimensions differ: a\^T has shape \(3, 4\) \(K=4\) but b has shape \(3, 2\) "
        r"\(K=3\); a\^T @ b needs a\^T\.shape\[-1\] == b\.shape\[-2\]"
    )
    with pytest.raises(ValueError, match=pattern):
        gemmlab.matmul(f32(4, 3), f32(3, 2), trans_a=True)
    with pytest.raises(ValueError, match=r"a has shape \(2, 5, 3\) \(K=3\) but b\^T has shape \(4, 2\) \(K=4\)"):
        gemmlab.matmul(f32(2, 5, 3), f32(2, 4), trans_b=True)


@pytest.mark.parametrize(
    "name, a, b", [("a", (), (4, 4)), ("b", (3, 4), ()), ("a", (), ())], ids=["a-0d", "b-0d", "both-0d"]
)
def test_scalars_are_refused(name, a, b):
    """numpy.matmul refuses 0-d operands (ValueError) too."""
    shape = a if name == "a" else b
    arr = lambda s: f32(*s) if s else np.array(1.0, np.float32)  # noqa: E731
    with pytest.raises(
        ValueError,
        match=label(name, shape) + r" is a scalar \(0 dimensions\); matmul takes "
        r"vectors, matrices and stacks of matrices \(1 or more dimensions\)",
    ):
        gemmlab.matmul(arr(a), arr(b))


@pytest.mark.parametrize(
    "a, b, result",
    [
        ((4,), (4, 3), (3,)),
        ((3, 4), (4,), (3,)),
        ((4,), (4,), ()),
        ((4,), (2, 4, 3), (2, 3)),
        ((2, 5, 4), (4,), (2, 5)),
        ((0,), (0,), ()),
        ((0,), (2, 0, 3), (2, 3)),
    ],
)
def test_vectors_follow_numpy_matmul(a, b, result):
    """A vector a is a 1 x K matrix, b a K x 1 one; the 1 leaves the result."""
    assert np.matmul(f32(*a), f32(*b)).shape == result
    call = _validate(f32(*a), f32(*b), None, 1.0, 0.0, False, False, None, None)
    assert call.result_shape == result
    assert (call.A.rows, call.B.cols) == ((1 if len(a) == 1 else a[-2]), (1 if len(b) == 1 else b[-1]))
    assert not call.A.copy and not call.B.copy


def test_a_vector_mismatch_names_the_shapes():
    with pytest.raises(
        ValueError,
        match=r"matmul: inner dimensions differ: a has shape \(4,\) \(K=4\) but b has "
        r"shape \(3, 2\) \(K=3\); a @ b needs a\.shape\[-1\] == b\.shape\[-2\]",
    ):
        gemmlab.matmul(f32(4), f32(3, 2))
    with pytest.raises(
        ValueError,
        match=r"a has shape \(3, 2\) \(K=2\) but b has shape \(3,\) \(K=3\); "
        r"a @ b needs a\.shape\[-1\] == b\.shape\[0\]",
    ):
        gemmlab.matmul(f32(3, 2), f32(3))


def test_out_vector_of_a_matrix_product_is_the_wrong_shape():
    raises_leaving_out(
        ValueError,
        label("out", (6,)) + r" has the wrong shape: a @ b is \(3, 2\)",
        sentinel_out((6,)),
        f32(3, 4),
        f32(4, 2),
    )


def test_out_with_extra_dimension_is_the_wrong_shape():
    pattern = label("out", (3, 2, 1)) + r" has the wrong shape: a @ b is \(3, 2\)"
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2, 1)), f32(3, 4), f32(4, 2))


# -- batches (numpy.matmul's broadcasting) --------------------------------------------


def test_batch_dimensions_that_do_not_broadcast():
    pattern = (
        r"matmul: the batch dimensions of "
        + label("a", (2, 3, 4))
        + " and "
        + label("b", (5, 4, 2))
        + r" do not broadcast: \(2,\) against \(5,\) differ at dimension -3 \(2 vs 5\); "
        r"numpy\.matmul's rule: aligned from the right, each pair of batch dimensions must be equal or one of them 1"
    )
    with pytest.raises(ValueError, match=pattern):
        gemmlab.matmul(f32(2, 3, 4), f32(5, 4, 2))
    with pytest.raises(ValueError, match=r"\(7, 2\) against \(3, 1\) differ at dimension -4 \(7 vs 3\)"):
        gemmlab.matmul(f32(7, 2, 3, 4), f32(3, 1, 4, 2))


@pytest.mark.parametrize(
    "a, b, result",
    [
        ((2, 3, 4), (4, 5), (2, 3, 5)),  # a 2-D operand serves every batch
        ((3, 4), (6, 4, 5), (6, 3, 5)),
        ((2, 1, 3, 4), (5, 4, 6), (2, 5, 3, 6)),  # size-1 dimensions broadcast
        ((0, 3, 4), (1, 4, 5), (0, 3, 5)),  # an empty batch
        ((1, 3, 4), (7, 4, 5), (7, 3, 5)),
    ],
)
def test_batch_shapes_follow_numpy_matmul(a, b, result):
    assert np.matmul(f32(*a), f32(*b)).shape == result  # the rule is numpy's
    call = _validate(f32(*a), f32(*b), None, 1.0, 0.0, False, False, None, None)
    assert call.result_shape == result


def test_out_must_have_the_broadcast_shape():
    pattern = (
        label("out", (3, 5)) + r" has the wrong shape: a @ b is \(2, 3, 5\) "
        r"\(a \(2, 3, 4\), b \(4, 5\); out must have the full broadcast shape\)"
    )
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 5)), f32(2, 3, 4), f32(4, 5))


def test_out_with_a_broadcast_batch_dimension_is_refused():
    """An out whose batches share memory (stride 0) would have results overwrite each other."""
    base = sentinel_out((3, 5))
    out = np.lib.stride_tricks.as_strided(base, (2, 3, 5), (0, 20, 4))
    pattern = label("out", (2, 3, 5)) + r" has element strides \(0, 5, 1\): some of its elements share memory"
    raises_leaving_out(ValueError, pattern, out, f32(2, 3, 4), f32(4, 5))


def test_out_with_overlapping_rows_is_refused():
    base = sentinel_out((12,))
    out = np.lib.stride_tricks.as_strided(base, (3, 4), (8, 4))  # rows 2 apart, 4 wide
    raises_leaving_out(
        ValueError, r"has element strides \(2, 1\): some of its elements share memory", out, f32(3, 2), f32(2, 4)
    )


def test_out_wrong_shape():
    """out (3, 3) for a (3, 4) @ b (4, 2): the message gives out's shape and the product's."""
    pattern = label("out", (3, 3)) + r" has the wrong shape: a @ b is \(3, 2\)"
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 3)), f32(3, 4), f32(4, 2))


def test_out_transposed_shape_is_wrong():
    """out of shape (N, M) instead of (M, N) is refused too."""
    pattern = label("out", (2, 3)) + r" has the wrong shape: a @ b is \(3, 2\)"
    raises_leaving_out(ValueError, pattern, sentinel_out((2, 3)), f32(3, 4), f32(4, 2))


# -- dtypes -----------------------------------------------------------------------

BAD_DTYPES = [np.float64, np.int32, np.complex64]


def _dtype_pattern(name, shape, dtype):
    dt = np.dtype(dtype).name
    return label(name, shape, dt) + rf": dtype {dt} is not supported; gemmlab's kernels take float32, float16, bfloat16"


@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_unsupported_dtype(dtype):
    with pytest.raises(TypeError, match=_dtype_pattern("a", (3, 4), dtype)):
        gemmlab.matmul(f32(3, 4).astype(dtype), f32(4, 2))


@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=lambda d: np.dtype(d).name)
def test_b_unsupported_dtype(dtype):
    with pytest.raises(TypeError, match=_dtype_pattern("b", (4, 2), dtype)):
        gemmlab.matmul(f32(3, 4), f32(4, 2).astype(dtype))


@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=lambda d: np.dtype(d).name)
def test_out_unsupported_dtype(dtype):
    """out of the right shape but the wrong dtype."""
    raises_leaving_out(
        TypeError, _dtype_pattern("out", (3, 2), dtype), sentinel_out((3, 2), dtype), f32(3, 4), f32(4, 2)
    )


# -- dtypes, precision and out_dtype ---------------------------------------------


def f16(*shape):
    return f32(*shape).astype(np.float16)


def test_operands_of_two_dtypes_are_promoted():
    """float16 with float32: the float16 operand is converted to float32 (a copy), the
    product is float32, as numpy.matmul's and torch.matmul's type promotion give."""
    call = _validate(f32(3, 4), f16(4, 2), None, 1.0, 0.0, False, False, None, None)
    assert call.dtypes == {"dtype": "float32", "out_dtype": "float32"}
    assert not call.A.copy and call.B.copy and call.B.cast == "float32"


def test_an_out_of_another_dtype_gets_the_result_cast_into_it():
    """numpy's casting="same_kind": computed in float32, then copied into out."""
    call = _validate(f32(3, 4), f32(4, 2), sentinel_out((3, 2), np.float16), 1.0, 0.0, False, False, None, None)
    assert call.dtypes == {"dtype": "float32", "out_dtype": "float32"} and call.C.copy
    call = _validate(f16(3, 4), f16(4, 2), sentinel_out((3, 2), np.float32), 1.0, 0.0, False, False, None, None)
    assert call.dtypes == {"dtype": "float16", "out_dtype": "float32"} and not call.C.copy  # written as it is


@pytest.mark.parametrize(
    "precision, inputs, message",
    [
        ("tf32", f16, r"precision='tf32' is for float32 inputs; a and b are float16"),
        ("fp32", f16, r"precision='fp32' is for float32 inputs; a and b are float16"),
        ("fp64", f32, r"precision='fp64' is not one of 'fp32', 'tf32'"),
    ],
)
def test_precision_is_checked(precision, inputs, message):
    with pytest.raises(ValueError, match=message):
        gemmlab.matmul(inputs(3, 4), inputs(4, 2), precision=precision)


@pytest.mark.parametrize(
    "inputs, kwargs, message",
    [
        (f32, {"out_dtype": "float16"}, r"float32 inputs give a float32 result, not float16"),
        (f32, {"precision": "tf32", "out_dtype": "float16"}, r"tf32 inputs give a float32 result, not float16"),
        (f16, {"out_dtype": "bfloat16"}, r"float16 inputs give a float32 or float16 result, not bfloat16"),
        (f16, {"out_dtype": "float64"}, r"out_dtype='float64' is not one of float32, float16, bfloat16"),
    ],
)
def test_out_dtype_is_checked(inputs, kwargs, message):
    with pytest.raises(TypeError, match=message):
        gemmlab.matmul(inputs(3, 4), inputs(4, 2), **kwargs)


def test_out_must_have_the_asked_out_dtype():
    raises_leaving_out(
        TypeError,
        label("out", (3, 2), "float16") + " does not have out_dtype=float32",
        sentinel_out((3, 2), np.float16),
        f16(3, 4),
        f16(4, 2),
        out_dtype="float32",
    )


@pytest.mark.parametrize("kernel", ["naive", "vectorized", "pipelined"])
def test_cuda_core_kernels_refuse_16_bit_inputs(kernel):
    with pytest.raises(
        TypeError,
        match=rf"kernel '{kernel}' computes float32, not float16; "
        r"for float16 use one of: wmma, wmma_warptile, mma_pipelined",
    ):
        gemmlab.matmul(f16(3, 4), f16(4, 2), kernel=kernel)


def test_tensor_kernels_refuse_plain_float32():
    with pytest.raises(
        TypeError,
        match=r"kernel 'wmma' computes float16, bfloat16, tf32, not float32; "
        r"for float32 use one of: naive, coalesced",
    ):
        gemmlab.matmul(f32(3, 4), f32(4, 2), kernel="wmma")


def test_plan_picks_by_dtype():
    assert (
        gemmlab.plan("auto", 300, 300, 300, dtype="float16", out_dtype="float16").name_expression
        == "gemmlab::mma_pipelined<0, 0, 64, 64, 32, 32, 32, 4, true, 'N', 'N'>"
    )
    assert (
        gemmlab.plan("auto", 300, 300, 300, dtype="tf32").name_expression
        == "gemmlab::mma_pipelined<2, 3, 64, 64, 32, 32, 32, 4, true, 'N', 'N'>"
    )
    # mma_pipelined reads TF32 row-major only: a column-major one falls back to wmma_warptile;
    # 16-bit operands it reads in every layout.
    p = gemmlab.plan("auto", 300, 300, 300, dtype="tf32", op_a="T")
    assert p.name_expression == "gemmlab::wmma_warptile<2, 3, 128, 128, 16, 32, 32, 'T', 'N'>"
    assert (
        "mma_pipelined cannot take these operands: its TF32 path reads row-major a and b (NN) only, not TN"
        in p.fallback_reason
    )
    assert (
        gemmlab.plan("auto", 300, 300, 300, dtype="float16", out_dtype="float16", op_a="T").name_expression
        == "gemmlab::mma_pipelined<0, 0, 64, 64, 32, 32, 32, 4, true, 'T', 'N'>"
    )
    assert (
        gemmlab.plan("wmma", 300, 300, 300, dtype="bfloat16", op_b="T").name_expression
        == "gemmlab::wmma_tile<1, 3, 'N', 'T'>"
    )
    assert gemmlab.plan("auto", 300, 300, 300).spec.family == "simt"


# -- layout and kinds -----------------------------------------------------------


def test_trans_flags_must_be_bools():
    with pytest.raises(TypeError, match=r"trans_a must be True or False .*; got 'T'"):
        gemmlab.matmul(f32(4, 3), f32(4, 2), trans_a="T")
    with pytest.raises(TypeError, match=r"trans_b must be True or False .*; got 1"):
        gemmlab.matmul(f32(3, 4), f32(2, 4), trans_b=1)


def _sides(a, b, out=None, trans_a=False, trans_b=False, beta=0.0):
    call = _validate(a, b, out, 1.0, beta, trans_a, trans_b, None, None)
    return call, _kernel_view(call)


_X = f32(6, 10)


@pytest.mark.parametrize(
    "view, layout, ld, copy",
    [
        (_X, "N", 10, False),  # C order
        (np.asfortranarray(_X), "T", 6, False),  # Fortran order: column-major
        (_X.T.T, "N", 10, False),
        (f32(10, 6).T, "T", 6, False),  # a transposed view
        (_X[:, :7], "N", 10, False),  # padded rows
        (f32(12, 6)[:10].T, "T", 6, False),  # a transposed view with padded columns
        (np.asfortranarray(f32(9, 7))[:6, :], "T", 9, False),  # Fortran order, padded columns
        (_X[:, ::2], None, 5, True),  # no unit stride: one contiguous copy
        (_X[::-1], None, 10, True),  # a negative stride: one contiguous copy
        (_X[:1, ::3], "T", 3, False),  # one row with a stride: a 1 x n column-major matrix
        (np.broadcast_to(f32(1, 10), (6, 10)), "N", 0, False),  # a broadcast row: ld 0, read as it is
        (f32(1, 6).T, "T", 6, False),  # one column of unit stride (dY.t() of one token):
        (f32(6, 1), "T", 6, False),  # one stored row of 6, not 6 rows of one element
        (f32(6, 3)[:, :1], "N", 3, False),  # a column with a stride: rows of one element
    ],
    ids=[
        "C",
        "F",
        "TT",
        "transposed",
        "padded",
        "transposed-padded",
        "F-padded",
        "strided",
        "reversed",
        "one-row",
        "broadcast-row",
        "one-column-transposed",
        "one-column",
        "strided-column",
    ],
)
def test_operand_layouts_are_read_from_strides(view, layout, ld, copy):
    call, kv = _sides(view, f32(view.shape[1], 3))
    assert call.A.copy == copy
    assert call.A.ld == ld
    # a copy is C-ordered, so row-major
    assert call.A.layout == (layout or "N") and kv.A.layout == call.A.layout


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_trans_flags_and_transposed_views_give_the_kernel_layouts(trans_a, trans_b):
    """op(a) = a^T of a row-major array is column-major ('T'); a^T of a transposed view is row-major."""
    a = f32(7, 5) if trans_a else f32(5, 7)
    b = f32(3, 7) if trans_b else f32(7, 3)
    call, kv = _sides(a, b, trans_a=trans_a, trans_b=trans_b)
    assert (kv.M, kv.N, call.K) == (5, 3, 7)
    assert (kv.A.layout, kv.B.layout) == ("T" if trans_a else "N", "T" if trans_b else "N")
    call, kv = _sides(a.T, b.T, trans_a=not trans_a, trans_b=not trans_b)
    assert (kv.M, kv.N, call.K) == (5, 3, 7)
    assert (kv.A.layout, kv.B.layout) == ("T" if trans_a else "N", "T" if trans_b else "N")
    assert not call.A.copy and not call.B.copy


def test_column_major_out_swaps_the_operands():
    """out^T = b^T a^T: M and N swap, each operand is read as its transpose, out^T is row-major."""
    out = np.asfortranarray(sentinel_out((5, 3)))
    call, kv = _sides(f32(5, 7), f32(7, 3).T.copy().T, out=out)
    assert (kv.M, kv.N) == (3, 5)
    assert (kv.A.layout, kv.B.layout, kv.C.layout) == ("N", "T", "N")  # b (column-major) read as b^T: row-major
    assert kv.C.ld == 5 and not call.C.copy


def test_a_one_column_input_is_read_as_one_aligned_row():
    """K = 1 (a weight gradient dY.t() @ x of one token): op(a) = dY.t() is M x 1 with
    unit row stride; read column-major it is one stored row of M floats, so the
    16-byte copies and stores of the aligned variants apply (rows of one element
    would not be 16-byte aligned).  An output column keeps its row-major reading."""
    dy, x = f32(1, 8), f32(1, 12)
    call, kv = _sides(dy, x, trans_a=True)
    assert (kv.M, kv.N, call.K) == (8, 12, 1)
    assert (kv.A.layout, kv.A.ld, kv.B.layout) == ("T", 8, "N") and not call.A.copy
    assert kv.aligned16()
    call, kv = _sides(f32(8, 3), f32(3, 1), out=sentinel_out((8, 1)))
    assert kv.C.layout == "N" and kv.B.layout == "T"


def test_strided_out_is_computed_in_a_copy():
    big = sentinel_out((5, 6))
    call, kv = _sides(f32(5, 7), f32(7, 3), out=big[:, ::2], beta=1.0)
    assert call.C.copy and kv.C.layout == "N"


def _aligned_zeros(shape, offset_elems=0):
    """A float32 array of ``shape`` starting ``offset_elems`` after a 64-byte boundary."""
    n = int(np.prod(shape))
    buf = np.zeros(n + 32, np.float32)
    start = (-buf.ctypes.data % 64) // 4 + offset_elems
    return buf[start : start + n].reshape(shape)


def _operands_for(case):
    if case == "plain":
        return _aligned_zeros((4, 8)), _aligned_zeros((8, 4))
    if case == "a-misaligned":
        return _aligned_zeros((4, 8), 1), _aligned_zeros((8, 4))
    if case == "lda-odd":
        return _aligned_zeros((4, 6))[:, :4], _aligned_zeros((4, 4))
    if case == "width-odd":
        return _aligned_zeros((8, 6)).T, _aligned_zeros((8, 4))
    if case == "batch-odd":
        return np.lib.stride_tricks.as_strided(_aligned_zeros((2, 18)), (2, 4, 8), (72, 32, 4)), _aligned_zeros((8, 4))
    if case == "batch-ok":
        return _aligned_zeros((2, 4, 8)), _aligned_zeros((8, 4))
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case, expect",
    [
        ("plain", True),
        ("a-misaligned", False),  # a starts 4 bytes past a 16-byte boundary
        ("lda-odd", False),  # rows of a 6 floats apart (24 bytes)
        ("width-odd", False),  # a transposed view whose stored rows are 6 wide
        ("batch-odd", False),  # matrices of a 18 floats apart
        ("batch-ok", True),  # 32 floats apart
    ],
)
def test_alignment_covers_every_operand_and_batch_stride(case, expect):
    """16-byte accesses (the VEC variants) need every base address, leading dimension,
    stored row width and batch stride of A, B and C to be multiples of 16 bytes."""
    a, b = _operands_for(case)
    call, kv = _sides(a, b)
    assert kv.aligned16() == expect, (kv.A, kv.B)


def test_batch_strides_and_broadcasting_reach_the_kernels():
    a = f32(2, 1, 3, 4)  # batch (2, 1): stride 12 over the first dimension
    b = f32(5, 4, 6)
    call, kv = _sides(a, b)
    assert call.batch_shape == (2, 5)
    assert kv.A.batch == (12, 0) and kv.B.batch == (0, 24)
    assert batch_groups(call.batch_shape, kv.A.batch, kv.B.batch, (30 * 6, 18)) == [(2, (12, 0, 180)), (5, (0, 24, 18))]
    # Contiguous stacks merge into one launch over all batches.
    assert batch_groups((4, 3), (36, 12), (0, 0), (30, 10)) == [(12, (12, 0, 10))]
    assert batch_groups((4, 1, 3), (36, 0, 12), (0, 0, 0), (30, 0, 10)) == [(12, (12, 0, 10))]
    assert (
        batch_groups(
            (),
        )
        == []
    )


def test_list_input_is_type_error():
    with pytest.raises(TypeError, match=r"a must be a CuPy array, .*NumPy array.*; got list"):
        gemmlab.matmul([[1.0, 2.0], [3.0, 4.0]], f32(2, 2))


def test_list_b_is_type_error():
    with pytest.raises(TypeError, match=r"b must be a CuPy array, .*; got list"):
        gemmlab.matmul(f32(2, 2), [[1.0, 2.0], [3.0, 4.0]])


# -- scalars ------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", ["2", None, True, 1 + 2j], ids=["str", "None", "bool", "complex"])
def test_alpha_not_a_number(alpha):
    pattern = rf"alpha must be a real number; got {type(alpha).__name__} {re.escape(repr(alpha))}"
    raises_leaving_out(TypeError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2), alpha=alpha)


def test_beta_not_a_number():
    raises_leaving_out(
        TypeError, r"beta must be a real number; got str 'x'", sentinel_out((3, 2)), f32(3, 4), f32(4, 2), beta="x"
    )


def test_beta_without_out():
    with pytest.raises(ValueError, match=r"beta=0\.5 scales an existing output, so it needs out="):
        gemmlab.matmul(f32(3, 4), f32(4, 2), beta=0.5)


# -- out aliasing ---------------------------------------------------------------------


def test_out_sharing_memory_with_an_input_is_computed_in_a_copy():
    """out is a, out is b, out a view sharing some rows of a: the result goes to a new
    array, copied into out after the product (numpy's way); out itself is left to the copy."""
    a, b = f32(4, 4), f32(4, 4) + 1
    for out in (a, b):
        assert _validate(a, b, out, 1.0, 0.0, False, False, None, None).C.copy
    buf = f32(6, 4)
    assert _validate(buf[:4], f32(4, 4), buf[2:], 1.0, 0.0, False, False, None, None).C.copy
    assert not _validate(buf[:2], f32(4, 4)[:, :2], buf[2:4, :2], 1.0, 0.0, False, False, None, None).C.copy


def test_read_only_out():
    out = sentinel_out((3, 2))
    out.flags.writeable = False
    raises_leaving_out(ValueError, label("out", (3, 2)) + " is read-only", out, f32(3, 4), f32(4, 2))


# -- kernel names and tile parameters ---------------------------------------------------


def test_unknown_kernel_lists_known_kernels():
    pattern = (
        r"unknown kernel 'nosuch'; known kernels: auto, naive, coalesced, smem_tiled, "
        r"blocktile_1d, blocktile_2d, vectorized"
    )
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2), kernel="nosuch")


def test_kernel_not_a_string():
    with pytest.raises(TypeError, match=r"kernel must be a kernel name \(str\); got int"):
        gemmlab.matmul(f32(3, 4), f32(4, 2), kernel=5)


def test_illegal_tile_value():
    pattern = (
        r"tile parameter tile=3 is not legal for kernel 'smem_tiled'; "
        r"legal values: 2, 4, 8, 16, 32"
    )
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2), kernel="smem_tiled", tile=3)


def test_tile_value_not_an_int():
    with pytest.raises(TypeError, match=r"tile parameter tile=16\.0 of kernel 'smem_tiled' must be an int"):
        gemmlab.matmul(f32(3, 4), f32(4, 2), kernel="smem_tiled", tile=16.0)


def test_unknown_tile_parameter():
    pattern = r"kernel 'smem_tiled' has no tile parameter 'BM'; its tile parameters are: tile"
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2), kernel="smem_tiled", BM=64)


def test_tile_parameter_for_kernel_without_any():
    with pytest.raises(
        ValueError,
        match=r"kernel 'naive' has no tile parameter 'tile'; "
        r"its tile parameters are: none",
    ):
        gemmlab.matmul(f32(3, 4), f32(4, 2), kernel="naive", tile=16)


def test_illegal_combination_names_the_broken_rule():
    """vectorized 64x64x8 with 4x4 per thread: 256 threads, but 128 float4s per tile."""
    rule = "the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads"
    pattern = (
        r"tile parameters BM=64, BN=64, BK=8, TM=4, TN=4 are not a legal combination "
        r"for kernel 'vectorized': " + re.escape(rule)
    )
    raises_leaving_out(
        ValueError,
        pattern,
        sentinel_out((3, 2)),
        f32(3, 4),
        f32(4, 2),
        kernel="vectorized",
        BM=64,
        BN=64,
        BK=8,
        TM=4,
        TN=4,
    )


def test_tile_parameters_with_auto():
    pattern = r"tile parameters \['BK', 'BM'\] need a named kernel, not kernel='auto'"
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2), BM=64, BK=8)


# -- no GPU ---------------------------------------------------------------------------------


@pytest.mark.skipif(gpu_available(), reason="a GPU is present: matmul would run, not raise NoGPUError")
@pytest.mark.parametrize("kernel", ["auto", "smem_tiled"])
def test_valid_inputs_without_gpu_raise_no_gpu_error(kernel):
    """Everything valid: the first GPU access fails with NoGPUError naming the driver."""
    out = sentinel_out((3, 2))
    with pytest.raises(gemmlab.NoGPUError, match=r"(?i)driver"):
        gemmlab.matmul(f32(3, 4), f32(4, 2), out=out, kernel=kernel)
    np.testing.assert_array_equal(out, sentinel_out((3, 2)))
    assert issubclass(gemmlab.NoGPUError, gemmlab.GemmlabError)
    assert issubclass(gemmlab.NoGPUError, RuntimeError)
