"""Argument validation of gemmlab.matmul with NumPy arrays (no GPU needed).

matmul checks everything before it touches the GPU, so each error below is
raised on this machine; each test checks the exception type, that the message
names the offending operand/shape/dtype/rule, and that ``out`` was not written.
"""

import re

import numpy as np
import pytest

import gemmlab
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
    pattern = (r"inner dimensions differ: a has shape \(4, 3\) \(K=3\) but b has shape "
               r"\(5, 2\) \(K=5\).*a\.shape\[1\] == b\.shape\[0\]")
    with pytest.raises(ValueError, match=pattern):
        gemmlab.matmul(f32(4, 3), f32(5, 2))


def test_inner_dimensions_differ_leaves_out_alone():
    raises_leaving_out(ValueError, "inner dimensions differ", sentinel_out((4, 2)), f32(4, 3), f32(5, 2))


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4)], ids=["1d", "3d"])
def test_a_wrong_ndim(shape):
    pattern = label("a", shape) + rf" must be a 2-D matrix; it has {len(shape)} dimension\(s\)"
    with pytest.raises(ValueError, match=pattern):
        gemmlab.matmul(f32(*shape), f32(4, 4))


@pytest.mark.parametrize("shape", [(4,), (4, 4, 1)], ids=["1d", "3d"])
def test_b_wrong_ndim(shape):
    pattern = label("b", shape) + rf" must be a 2-D matrix; it has {len(shape)} dimension\(s\)"
    with pytest.raises(ValueError, match=pattern):
        gemmlab.matmul(f32(3, 4), f32(*shape))


@pytest.mark.parametrize("shape", [(6,), (3, 2, 1)], ids=["1d", "3d"])
def test_out_wrong_ndim(shape):
    pattern = label("out", shape) + rf" must be a 2-D matrix; it has {len(shape)} dimension\(s\)"
    raises_leaving_out(ValueError, pattern, sentinel_out(shape), f32(3, 4), f32(4, 2))


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
    raises_leaving_out(TypeError, _dtype_pattern("out", (3, 2), dtype), sentinel_out((3, 2), dtype),
                       f32(3, 4), f32(4, 2))


# -- dtypes, precision and out_dtype ---------------------------------------------

def f16(*shape):
    return f32(*shape).astype(np.float16)


def test_operands_of_two_dtypes_are_refused():
    with pytest.raises(TypeError, match=label("a", (3, 4)) + " and " + label("b", (4, 2), "float16")
                       + " differ in dtype"):
        gemmlab.matmul(f32(3, 4), f16(4, 2))


@pytest.mark.parametrize("precision, inputs, message", [
    ("tf32", f16, r"precision='tf32' is for float32 inputs; a and b are float16"),
    ("fp32", f16, r"precision='fp32' is for float32 inputs; a and b are float16"),
    ("fp64", f32, r"precision='fp64' is not one of 'fp32', 'tf32'"),
])
def test_precision_is_checked(precision, inputs, message):
    with pytest.raises(ValueError, match=message):
        gemmlab.matmul(inputs(3, 4), inputs(4, 2), precision=precision)


@pytest.mark.parametrize("inputs, kwargs, message", [
    (f32, {"out_dtype": "float16"}, r"float32 inputs give a float32 result, not float16"),
    (f32, {"precision": "tf32", "out_dtype": "float16"}, r"tf32 inputs give a float32 result, not float16"),
    (f16, {"out_dtype": "bfloat16"}, r"float16 inputs give a float32 or float16 result, not bfloat16"),
    (f16, {"out_dtype": "float64"}, r"out_dtype='float64' is not one of float32, float16, bfloat16"),
])
def test_out_dtype_is_checked(inputs, kwargs, message):
    with pytest.raises(TypeError, match=message):
        gemmlab.matmul(inputs(3, 4), inputs(4, 2), **kwargs)


def test_out_must_have_the_asked_out_dtype():
    raises_leaving_out(TypeError, label("out", (3, 2), "float16") + " does not have out_dtype=float32",
                       sentinel_out((3, 2), np.float16), f16(3, 4), f16(4, 2), out_dtype="float32")


@pytest.mark.parametrize("kernel", ["naive", "vectorized", "pipelined"])
def test_cuda_core_kernels_refuse_16_bit_inputs(kernel):
    with pytest.raises(TypeError, match=rf"kernel '{kernel}' computes float32, not float16; "
                                        r"for float16 use one of: wmma, wmma_warptile, mma_pipelined"):
        gemmlab.matmul(f16(3, 4), f16(4, 2), kernel=kernel)


def test_tensor_kernels_refuse_plain_float32():
    with pytest.raises(TypeError, match=r"kernel 'wmma' computes float16, bfloat16, tf32, not float32; "
                                        r"for float32 use one of: naive, coalesced"):
        gemmlab.matmul(f32(3, 4), f32(4, 2), kernel="wmma")


def test_plan_picks_by_dtype():
    assert gemmlab.plan("auto", 300, 300, 300, dtype="float16", out_dtype="float16").name_expression == \
        "gemmlab::mma_pipelined<0, 0, 64, 64, 32, 32, 32, 4, true>"
    assert gemmlab.plan("auto", 300, 300, 300, dtype="tf32").name_expression == \
        "gemmlab::mma_pipelined<2, 3, 64, 64, 32, 32, 32, 4, true>"
    assert gemmlab.plan("wmma", 300, 300, 300, dtype="bfloat16").name_expression == "gemmlab::wmma_tile<1, 3>"
    assert gemmlab.plan("auto", 300, 300, 300).spec.family == "simt"


# -- layout and kinds -----------------------------------------------------------

STRIDES_RULE = r"has element strides .*: gemmlab reads row-major matrices"


def test_transposed_view_refused():
    """a.T of a C array has unit row stride: refused, naming a and its strides."""
    at = f32(4, 3).T                      # shape (3, 4), strides (1, 3) in elements
    pattern = label("a", (3, 4)) + r" has element strides \(1, 3\): gemmlab reads row-major" \
        r".*numpy\.ascontiguousarray"
    with pytest.raises(ValueError, match=pattern):
        gemmlab.matmul(at, f32(4, 2))


def test_fortran_order_refused():
    b = np.asfortranarray(f32(4, 5))
    pattern = label("b", (4, 5)) + r" has element strides \(1, 4\)"
    with pytest.raises(ValueError, match=pattern):
        gemmlab.matmul(f32(3, 4), b)


def test_fortran_order_out_refused():
    out = np.asfortranarray(sentinel_out((3, 2)))
    raises_leaving_out(ValueError, label("out", (3, 2)) + r" has element strides \(1, 3\)", out,
                       f32(3, 4), f32(4, 2))


def test_reversed_rows_refused():
    """A negative row stride (a[::-1]) is not a row-major matrix either."""
    with pytest.raises(ValueError, match=label("a", (3, 4)) + r" has element strides \(-4, 1\)"):
        gemmlab.matmul(f32(3, 4)[::-1], f32(4, 2))


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
    raises_leaving_out(TypeError, r"beta must be a real number; got str 'x'", sentinel_out((3, 2)),
                       f32(3, 4), f32(4, 2), beta="x")


def test_beta_without_out():
    with pytest.raises(ValueError, match=r"beta=0\.5 scales an existing output, so it needs out="):
        gemmlab.matmul(f32(3, 4), f32(4, 2), beta=0.5)


# -- out aliasing ---------------------------------------------------------------------

def test_out_is_a():
    a, b = f32(4, 4), f32(4, 4) + 1
    pattern = label("out", (4, 4)) + r" overlaps " + label("a", (4, 4)) + r" in memory"
    raises_leaving_out(ValueError, pattern, a, a, b)


def test_out_is_b():
    a, b = f32(4, 4), f32(4, 4) + 1
    pattern = label("out", (4, 4)) + r" overlaps " + label("b", (4, 4)) + r" in memory"
    raises_leaving_out(ValueError, pattern, b, a, b)


def test_out_partly_overlaps_a():
    """out a view sharing only some rows of a's buffer is caught as well."""
    buf = f32(6, 4)
    a, out = buf[:4], buf[2:]
    snapshot = buf.copy()
    with pytest.raises(ValueError, match=r"out \(.*\) overlaps a \(.*\) in memory"):
        gemmlab.matmul(a, f32(4, 4), out=out)
    np.testing.assert_array_equal(buf, snapshot)


def test_read_only_out():
    out = sentinel_out((3, 2))
    out.flags.writeable = False
    raises_leaving_out(ValueError, label("out", (3, 2)) + " is read-only", out, f32(3, 4), f32(4, 2))


# -- kernel names and tile parameters ---------------------------------------------------

def test_unknown_kernel_lists_known_kernels():
    pattern = (r"unknown kernel 'nosuch'; known kernels: auto, naive, coalesced, smem_tiled, "
               r"blocktile_1d, blocktile_2d, vectorized")
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2), kernel="nosuch")


def test_kernel_not_a_string():
    with pytest.raises(TypeError, match=r"kernel must be a kernel name \(str\); got int"):
        gemmlab.matmul(f32(3, 4), f32(4, 2), kernel=5)


def test_illegal_tile_value():
    pattern = (r"tile parameter tile=3 is not legal for kernel 'smem_tiled'; "
               r"legal values: 2, 4, 8, 16, 32")
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2),
                       kernel="smem_tiled", tile=3)


def test_tile_value_not_an_int():
    with pytest.raises(TypeError, match=r"tile parameter tile=16\.0 of kernel 'smem_tiled' must be an int"):
        gemmlab.matmul(f32(3, 4), f32(4, 2), kernel="smem_tiled", tile=16.0)


def test_unknown_tile_parameter():
    pattern = r"kernel 'smem_tiled' has no tile parameter 'BM'; its tile parameters are: tile"
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2),
                       kernel="smem_tiled", BM=64)


def test_tile_parameter_for_kernel_without_any():
    with pytest.raises(ValueError, match=r"kernel 'naive' has no tile parameter 'tile'; "
                                         r"its tile parameters are: none"):
        gemmlab.matmul(f32(3, 4), f32(4, 2), kernel="naive", tile=16)


def test_illegal_combination_names_the_broken_rule():
    """vectorized 64x64x8 with 4x4 per thread: 256 threads, but 128 float4s per tile."""
    rule = "the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads"
    pattern = (r"tile parameters BM=64, BN=64, BK=8, TM=4, TN=4 are not a legal combination "
               r"for kernel 'vectorized': " + re.escape(rule))
    raises_leaving_out(ValueError, pattern, sentinel_out((3, 2)), f32(3, 4), f32(4, 2),
                       kernel="vectorized", BM=64, BN=64, BK=8, TM=4, TN=4)


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
