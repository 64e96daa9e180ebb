"""PyTorch's own sample inputs for the routed functions, through gemmlab.torch's
routing contexts, against float64: forward and backward (run inside the context).

The samples are the OpInfo entries of torch.testing._internal's op_db (shipped
in the torch wheel) for matmul, __rmatmul__, mm, bmm, addmm, baddbmm, addbmm, mv,
addmv and nn.functional.linear: 1-D operands, batch broadcasting, zero-element
shapes, broadcast biases, alpha and beta; and for the functions PyTorch builds on
those products (einsum, tensordot, linalg.multi_dot).  Each runs under gt.fp32_tc() (float32) and
gt.use_gemmlab(dtype) (float32, bfloat16, float16):

- on the CPU with the float64 stand-in of tests/torch_cpu.py, which refuses
  zero-element operands (so they are shown never to reach a kernel);
- with the gpu marker, on CUDA tensors with gemmlab's kernels.

Every sample but 1-D @ 1-D and those with an empty operand must reach gemmlab;
those must give exactly PyTorch's own result.  A composite function's sample
reaches gemmlab where PyTorch makes a product of it (an einsum that is a sum of
elementwise products makes none): each is checked against float64 where routed,
against PyTorch's own result where not, and some sample of each must be routed.
"""

import contextlib

import sys
import types
import unittest

import pytest

torch = pytest.importorskip("torch")
from torch.utils._pytree import tree_leaves, tree_map  # noqa: E402

import gemmlab.torch as gt  # noqa: E402
from gemmlab.torch import routing as routing_module  # noqa: E402
from torch_cpu import CPURouting, cpu_kernels  # noqa: E402

PRODUCTS = ["matmul", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv", "nn.functional.linear"]
COMPOSITES = ["einsum", "tensordot", "linalg.multi_dot"]
OP_NAMES = PRODUCTS + COMPOSITES

# (id, routed dtype, precision): the modes' settings, fp32_tc() and use_gemmlab(dtype).
MODES = [
    ("fp32_tc", torch.float32, "fp32_tc"),
    ("use_gemmlab-float32", torch.float32, None),
    ("use_gemmlab-bfloat16", torch.bfloat16, None),
    ("use_gemmlab-float16", torch.float16, None),
]

# Bound on |result - float64 result|, relative to the magnitude of the sum
# (the op on |operands|, |alpha|, |beta|: sum_k |a_ik| |b_kj| + |beta| |input|),
# per element, forward and gradients.
#   float32: K <= 32 FP32 roundings (K * 2^-24; the samples' K is at most 25)
#     plus fp32_tc's split, whose two parts hold about 22 of a float's 24 bits
#     (2^-22 per product): 2^-18 in all.  TF32 (2^-11 per operand) is far over it.
#   bfloat16, float16: four roundings to the dtype (the product, alpha's
#     multiplication, beta's, the sum) at its unit roundoff (2^-8, 2^-11), over
#     FP32 accumulation: 4 * 2^-8 = 1.6e-2 is PyTorch's own bfloat16 rtol.
#   Below the dtype's smallest normal value a rounding's error is absolute, at
#   most a subnormal's spacing (smallest_normal * eps): four of them are added.
#   (PyTorch's own samples for bmm hold float16 products that small.)
RTOL = {torch.float32: 2.0**-18, torch.bfloat16: 4 * 2.0**-8, torch.float16: 4 * 2.0**-11}
ATOL = {dtype: 4 * torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps for dtype in RTOL}


def _load_op_db():
    """op_db, imported once.  PyTorch's test utilities import expecttest (a
    test-only package): where it is missing, a stand-in module with the one
    name they use.  Their import also freezes torch.backends' flags; that is
    undone, so that other tests may still set them."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stub = types.ModuleType("expecttest")
        stub.TestCase = type("TestCase", (unittest.TestCase,), {})
        sys.modules["expecttest"] = stub
    was_frozen = torch.backends.flags_frozen()
    from torch.testing._internal.common_methods_invocations import op_db

    if not was_frozen:  # the flag disable_global_flags() cleared, in torch.backends' own namespace
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
        assert not torch.backends.flags_frozen()
    return op_db


@pytest.fixture(scope="module")
def op_db():
    return _load_op_db()


class Counted:
    count = 0


@contextlib.contextmanager
def counting_products():
    """Counts the products the routing contexts hand to gemmlab (or to the stand-in)."""
    seen, product = Counted(), routing_module.PRODUCT["fn"]

    def counted(*args, **kwargs):
        seen.count += 1
        return product(*args, **kwargs)

    routing_module.PRODUCT["fn"] = counted
    try:
        yield seen
    finally:
        routing_module.PRODUCT["fn"] = product


def _tensors(x, f):
    return tree_map(lambda t: f(t) if isinstance(t, torch.Tensor) else t, x)


def _abs_numbers(kwargs):
    return {k: abs(v) if isinstance(v, (int, float)) else v for k, v in kwargs.items()}


def _float64(sample, absolute=False):
    """(input, args, kwargs) of a sample as float64 leaves (their absolute
    values), needing gradients where the sample's do."""

    def conv(t):
        x = t.detach().double()
        return (x.abs() if absolute else x).requires_grad_(t.requires_grad)

    inp, args, kwargs = _tensors((sample.input, sample.args, sample.kwargs), conv)
    return inp, args, _abs_numbers(kwargs) if absolute else kwargs


def _leaves(inp, args):
    """The tensors needing gradients, lists of them included (einsum's and multi_dot's)."""
    return [t for t in tree_leaves((inp, args)) if isinstance(t, torch.Tensor) and t.requires_grad]


def _run(op, inp, args, kwargs, grad_out):
    """The op's result and the gradients of sum(result * grad_out) (None where unused)."""
    out = op(inp, *args, **kwargs)
    return out, _grad(out, _leaves(inp, args), grad_out)


def _grad(out, leaves, grad_out):
    """The gradients of sum(out * grad_out) for leaves (None where unused; none
    for samples without gradients)."""
    if not leaves:
        return ()
    return torch.autograd.grad(out, leaves, grad_outputs=grad_out.to(out.dtype), allow_unused=True)


def _within(name, got, ref, magnitude, dtype):
    """got within the dtype's rounding of ref; where the exact value lies beyond the dtype's
    largest finite value (float16's 65504: a chain like multi_dot's overflows), got must be
    the infinity of ref's sign, and either answer is right where the bound straddles it."""
    assert got.shape == ref.shape, (name, got.shape, ref.shape)
    got, ref = got.detach().double(), ref.detach()
    bound = RTOL[dtype] * magnitude.detach() + ATOL[dtype]
    err = (got - ref).abs()
    # Round to nearest overflows from the midpoint between the largest finite value and the next.
    overflow = torch.finfo(dtype).max * (1 + torch.finfo(dtype).eps / 4)
    signed_inf = torch.isinf(got) & (torch.sign(got) == torch.sign(ref))
    beyond = ref.abs() - bound > overflow
    straddles = ~beyond & (ref.abs() + bound > overflow)
    ok = torch.where(beyond, signed_inf, (err <= bound) | (straddles & signed_inf))
    assert bool(ok.all()), (
        name,
        "worst error",
        float(err[~ok].max()),
        "at magnitude",
        float(magnitude.detach()[~ok][err[~ok].argmax()]),
        "rtol",
        RTOL[dtype],
    )


def _describe(sample):
    shape = lambda x: tuple(x.shape) if isinstance(x, torch.Tensor) else x  # noqa: E731
    return f"{shape(sample.input)}, {[shape(a) for a in sample.args]}, {sample.kwargs}"


def _expect_routed(op_name, sample):
    """Every sample but 1-D @ 1-D (a dot product) and those with an operand of
    no elements (nothing to multiply), which the contexts leave to PyTorch."""
    a, b = (
        (sample.args[0], sample.args[1])
        if op_name in ("addmm", "baddbmm", "addbmm", "addmv")
        else (sample.input, sample.args[0])
    )
    if op_name == "__rmatmul__":
        a, b = b, a
    if op_name in ("matmul", "__rmatmul__") and a.dim() == 1 and b.dim() == 1:
        return False
    return bool(a.numel() and b.numel())


def check_samples(op_db, op_name, device, dtype, routing):
    """Runs every sample of op_name's OpInfo entries under ``routing``, checks
    each against float64; returns how many reached gemmlab's operators and how
    many were left to PyTorch."""
    entries = [op for op in op_db if op.name == op_name]
    assert entries, f"no OpInfo entry named {op_name!r} in this torch"
    routed = left = gradients = 0
    for op in entries:
        for sample in op.sample_inputs(device, dtype, requires_grad=True):
            with routing, counting_products() as seen:
                out = op(sample.input, *sample.args, **sample.kwargs)
                # sum(out * grad_out)'s gradients; grad_out holds values of the dtype, exact in float64.
                grad_out = torch.randn(out.shape, device=device, dtype=dtype).double()
                grads = _grad(out, _leaves(sample.input, sample.args), grad_out)
            what = f"{op.name}.{op.variant_test_name} {_describe(sample)}"
            assert out.dtype == dtype, what
            expected = seen.count > 0 if op_name in COMPOSITES else _expect_routed(op_name, sample)
            if not expected:
                assert seen.count == 0, f"routed: {what}"
                plain, plain_grads = _run(op, sample.input, sample.args, sample.kwargs, grad_out)
                assert torch.equal(out, plain), what
                assert all(torch.equal(g, p) for g, p in zip(grads, plain_grads)), what
                left += 1
                continue
            assert seen.count > 0, f"not routed: {what}"
            routed += 1
            ref, ref_grads = _run(op, *_float64(sample), grad_out)
            mag, mag_grads = _run(op, *_float64(sample, absolute=True), grad_out.abs())
            _within(what, out, ref, mag, dtype)
            assert len(grads) == len(ref_grads) == len(mag_grads), what
            for i, (g, r, m) in enumerate(zip(grads, ref_grads, mag_grads)):
                assert (g is None) == (r is None), (what, i, g, r)
                if g is not None:
                    assert g.dtype == dtype, (what, i)
                    _within(f"{what}, gradient {i}", g, r, m, dtype)
                    gradients += 1
    assert routed > 0, f"no sample of {op_name} was routed"
    assert gradients > 0, f"no gradient of {op_name} was checked"
    return routed, left


@pytest.mark.parametrize("op_name", OP_NAMES)
@pytest.mark.parametrize("mode, dtype, precision", MODES, ids=[m[0] for m in MODES])
def test_opinfo_samples_cpu(op_db, op_name, mode, dtype, precision):
    torch.manual_seed(0)
    with cpu_kernels() as calls:
        calls.update(mm=0, bmm=0)
        check_samples(op_db, op_name, "cpu", dtype, CPURouting((dtype,), precision))
    assert calls["mm"] + calls["bmm"] > 0  # the stand-in kernels ran


@pytest.mark.gpu
@pytest.mark.parametrize("op_name", OP_NAMES)
@pytest.mark.parametrize("mode, dtype, precision", MODES, ids=[m[0] for m in MODES])
def test_opinfo_samples_gpu(op_db, op_name, mode, dtype, precision):
    torch.manual_seed(0)
    routing = gt.fp32_tc(precision) if precision else gt.use_gemmlab(dtype)
    check_samples(op_db, op_name, "cuda", dtype, routing)


def test_every_op_has_samples_of_every_kind(op_db):
    """The samples cover what the modes must handle (so a change to PyTorch's
    lists cannot hollow these tests out unnoticed)."""
    assert {op.name for op in op_db} >= set(COMPOSITES)
    shapes = []
    for op in op_db:
        if op.name in PRODUCTS:
            for s in op.sample_inputs("cpu", torch.float32):
                shapes.append(
                    (
                        op.name,
                        tuple(s.input.shape),
                        tuple(tuple(a.shape) for a in s.args if isinstance(a, torch.Tensor)),
                    )
                )
    assert {name for name, _, _ in shapes} == set(PRODUCTS)
    assert any(0 in i or any(0 in a for a in args) for _, i, args in shapes)  # zero-element
    assert any(name == "matmul" and (len(i) == 1) != (len(args[0]) == 1) for name, i, args in shapes)  # 1-D
    assert any(
        name == "matmul" and len(i) >= 3 and len(args[0]) >= 3 and i[:-2] != args[0][:-2] for name, i, args in shapes
    )  # broadcast batch


def test_a_product_beyond_the_dtypes_range_must_be_its_signed_infinity():
    """float16's largest finite value is 65504: an exact -101309.7 rounds to -inf, and
    nothing else passes; near the limit either answer passes."""
    f16 = torch.float16
    ref = torch.tensor([-101309.7, 1723.0, 65519.0], dtype=torch.float64)
    mag = torch.tensor([561553.0, 1800.0, 65519.0], dtype=torch.float64)
    _within("overflow", torch.tensor([-float("inf"), 1723.0, 65504.0], dtype=f16), ref, mag, f16)
    _within("overflow", torch.tensor([-float("inf"), 1723.0, float("inf")], dtype=f16), ref, mag, f16)
    for wrong in (float("inf"), -65504.0, float("nan")):
        with pytest.raises(AssertionError):
            _within("overflow", torch.tensor([wrong, 1723.0, 65504.0], dtype=f16), ref, mag, f16)
    with pytest.raises(AssertionError):  # a finite error beyond the bound still fails
        _within("overflow", torch.tensor([-float("inf"), 1700.0, 65504.0], dtype=f16), ref, mag, f16)
