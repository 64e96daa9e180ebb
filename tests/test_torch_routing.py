"""gemmlab.torch's routing contexts (fp32_tc(), use_gemmlab()) on the CPU: which
calls reach gemmlab, with which shapes, gradients and under torch.compile.  The
contexts replace PyTorch's CPU kernels here (CPURouting) and gemmlab's product
is a float64 stand-in (tests/torch_cpu.py); tests/test_torch_fp32_tc.py runs
the real ones on a GPU."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import gemmlab.torch as gt  # noqa: E402
from torch_cpu import CPURouting, cpu_kernels  # noqa: E402


@pytest.fixture
def calls():
    with cpu_kernels() as counts:
        counts.update(mm=0, bmm=0)
        yield counts


def rand(*shape, dtype=torch.float32, grad=False):
    return (torch.rand(shape, dtype=dtype) * 2 - 1).requires_grad_(grad)


# (name, function, operand shapes, the operator expected): torch.matmul's shape
# rules, and each routed function.
CASES = [
    ("2-D @ 2-D", lambda a, b: a @ b, [(5, 7), (7, 3)], "mm"),
    ("torch.matmul", torch.matmul, [(5, 7), (7, 3)], "mm"),
    ("1-D @ 2-D", torch.matmul, [(7,), (7, 3)], "mm"),
    ("2-D @ 1-D (mv)", torch.matmul, [(5, 7), (7,)], "mm"),
    ("3-D @ 2-D folds into rows", torch.matmul, [(4, 5, 7), (7, 3)], "mm"),
    ("3-D @ 1-D", torch.matmul, [(4, 5, 7), (7,)], "mm"),
    ("2-D @ 3-D broadcasts", torch.matmul, [(5, 7), (4, 7, 3)], "mm"),  # PyTorch folds it into one mm
    ("4-D @ 3-D broadcasts", torch.matmul, [(2, 1, 5, 7), (3, 7, 3)], "bmm"),
    ("1-D @ 3-D", torch.matmul, [(7,), (4, 7, 3)], "mm"),
    ("rmatmul", lambda a, b: b.__rmatmul__(a), [(5, 7), (7, 3)], "mm"),
    ("torch.mm", torch.mm, [(5, 7), (7, 3)], "mm"),
    ("Tensor.mm", lambda a, b: a.mm(b), [(5, 7), (7, 3)], "mm"),
    ("torch.bmm", torch.bmm, [(4, 5, 7), (4, 7, 3)], "bmm"),
    ("Tensor.bmm", lambda a, b: a.bmm(mat2=b), [(4, 5, 7), (4, 7, 3)], "bmm"),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b), [(3,), (5, 7), (7, 3)], "mm"),
    ("addmm alpha beta", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0), [(5, 3), (5, 7), (7, 3)], "mm"),
    ("Tensor.addmm", lambda c, a, b: c.addmm(a, b, alpha=3), [(5, 3), (5, 7), (7, 3)], "mm"),
    ("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=2.0), [(4, 5, 3), (4, 5, 7), (4, 7, 3)], "bmm"),
    ("linear", lambda x, w: F.linear(x, w), [(5, 7), (3, 7)], "mm"),
    ("linear with bias, 3-D input", lambda x, w, b: F.linear(x, w, b), [(2, 5, 7), (3, 7), (3,)], "mm"),
    ("nn.Linear keywords", lambda x, w, b: F.linear(input=x, weight=w, bias=b), [(5, 7), (3, 7), (3,)], "mm"),
    ("linear with a 1-D weight", lambda x, w: F.linear(x, w), [(5, 7), (7,)], "mm"),
    ("einsum", lambda a, b: torch.einsum("bij,bjk->bik", a, b), [(4, 5, 7), (4, 7, 3)], "bmm"),
    ("torch.mv", torch.mv, [(5, 7), (7,)], "mm"),
    ("addmv", lambda c, a, v: torch.addmv(c, a, v, beta=0.5, alpha=-2.0), [(5,), (5, 7), (7,)], "mm"),
    ("addmv, a broadcast input", lambda c, a, v: torch.addmv(c, a, v), [(1,), (5, 7), (7,)], "mm"),
]


def _like_float64(fn, args, out, w, tol):
    """out = fn(*args) and the gradients args hold (of sum(out * w)) against float64's."""
    ref_args = [x.detach().double().requires_grad_() for x in args]
    ref = fn(*ref_args)
    assert out.shape == ref.shape and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    (ref * w).sum().backward()
    for x, r in zip(args, ref_args):
        assert x.grad.shape == r.grad.shape
        torch.testing.assert_close(x.grad.double(), r.grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("name, fn, shapes, op", CASES, ids=[c[0] for c in CASES])
def test_routed_forward_and_backward(calls, name, fn, shapes, op):
    args = [rand(*s, grad=True) for s in shapes]
    w = torch.rand(fn(*args).shape, dtype=torch.float64)
    with CPURouting():
        out = fn(*args)
        assert calls[op] == 1 and calls["mm"] + calls["bmm"] == 1, calls
        (out.double() * w).sum().backward()  # the gradients' products: gemmlab's again
    _like_float64(fn, args, out, w, 1e-5)
    assert calls[op] > 1


def test_backward_after_the_context_is_pytorchs(calls):
    a, b = rand(5, 7, grad=True), rand(7, 3, grad=True)
    with CPURouting():
        out = a @ b
    out.sum().backward()
    assert calls == {"mm": 1, "bmm": 0}
    torch.testing.assert_close(a.grad, torch.ones(5, 3) @ b.detach().t())


def test_addmm_beta_zero_does_not_read_the_bias(calls):
    bias = torch.full((5, 3), float("nan")).requires_grad_()
    with CPURouting():
        out = torch.addmm(bias, rand(5, 7), rand(7, 3), beta=0)
    assert calls["mm"] == 1 and not out.isnan().any()
    out.sum().backward()
    assert torch.equal(bias.grad, torch.zeros(5, 3))  # zeros, as PyTorch gives, not None
    # Without a gradient to give, the bias is not touched at all (attention's baddbmm(empty, q, k, beta=0)).
    with CPURouting():
        out = torch.baddbmm(torch.full((1, 5, 3), float("nan")), rand(2, 5, 7), rand(2, 7, 3), beta=0)
    assert out.shape == (2, 5, 3) and not out.isnan().any()


def test_addbmm_routes_its_products(calls):
    bias, a, b = rand(5, 3, grad=True), rand(4, 5, 7, grad=True), rand(4, 7, 3, grad=True)
    with CPURouting():
        out = torch.addbmm(bias, a, b, beta=0.5, alpha=2.0)
        assert calls["mm"] + calls["bmm"] >= 1
        out.sum().backward()
    ref = torch.addbmm(bias.double(), a.double(), b.double(), beta=0.5, alpha=2.0)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    assert a.grad.shape == a.shape and b.grad.shape == b.shape


def test_out_and_in_place_forms(calls):
    a, b, c = rand(5, 7), rand(7, 3), rand(5, 3)
    with CPURouting():
        out = torch.empty(5, 3)
        torch.mm(a, b, out=out)
        acc = c.clone()
        acc.addmm_(a, b, beta=0.5, alpha=2.0)
        into = torch.empty(5, 3)
        torch.addmm(torch.ones(3), a, b, alpha=-1.0, out=into)
        batched = torch.empty(2, 5, 3)
        torch.bmm(a.expand(2, 5, 7), b.expand(2, 7, 3), out=batched)
        v, y = b[:, 0], c[:, 0]
        mv_out = torch.empty(5)
        torch.mv(a, v, out=mv_out)
        addmv_out = torch.empty(5)
        torch.addmv(y, a, v, beta=2.0, out=addmv_out)
        y_acc = y.clone()
        y_acc.addmv_(a, v, beta=0.5, alpha=2.0)
        nan_acc = torch.full((5,), float("nan"))
        nan_acc.addmv_(a, v, beta=0)  # beta 0: the NaNs are not read
    assert calls == {"mm": 7, "bmm": 1}
    ref = a.double() @ b.double()
    torch.testing.assert_close(out.double(), ref)
    torch.testing.assert_close(acc.double(), 0.5 * c.double() + 2 * ref)
    torch.testing.assert_close(into.double(), 1 - ref)
    torch.testing.assert_close(batched.double(), ref.expand(2, 5, 3))
    ref_v = a.double() @ v.double()
    torch.testing.assert_close(mv_out.double(), ref_v)
    torch.testing.assert_close(addmv_out.double(), 2 * y.double() + ref_v)
    torch.testing.assert_close(y_acc.double(), 0.5 * y.double() + 2 * ref_v)
    torch.testing.assert_close(nan_acc.double(), ref_v)


# Zero-element products stay PyTorch's (the stand-in refuses zero-element
# operands); results and gradients as PyTorch's.
ZERO = [
    ("K = 0", torch.mm, [(5, 0), (0, 4)]),
    ("M = 0", torch.mm, [(0, 5), (5, 4)]),
    ("N = 0", torch.matmul, [(3, 5), (5, 0)]),
    ("3-D @ 2-D, K = 0", torch.matmul, [(5, 5, 0), (0, 5)]),
    ("2-D @ 3-D, all 0", torch.matmul, [(0, 0), (5, 0, 0)]),
    ("batch 0", torch.bmm, [(0, 3, 5), (0, 5, 4)]),
    ("broadcast batch 0", torch.matmul, [(2, 0, 3, 5), (1, 5, 4)]),
    ("1-D of 0 @ 2-D", torch.matmul, [(0,), (0, 4)]),
    ("addmm, K = 0", lambda c, a, b: torch.addmm(c, a, b, beta=0.5), [(4,), (5, 0), (0, 4)]),
    ("baddbmm, K = 0", torch.baddbmm, [(2, 5, 4), (2, 5, 0), (2, 0, 4)]),
    ("addbmm, batch 0", torch.addbmm, [(5, 4), (0, 5, 3), (0, 3, 4)]),
    ("linear, no rows", F.linear, [(0, 3), (4, 3), (4,)]),
]


@pytest.mark.parametrize("name, fn, shapes", ZERO, ids=[c[0] for c in ZERO])
def test_zero_element_products(calls, name, fn, shapes):
    args = [rand(*s, grad=True) for s in shapes]
    w = torch.rand(fn(*args).shape, dtype=torch.float64)
    with CPURouting():
        out = fn(*args)
        (out.double() * w).sum().backward()
    assert calls == {"mm": 0, "bmm": 0}
    _like_float64(fn, args, out, w, 1e-6)
    assert calls == {"mm": 0, "bmm": 0}


def test_operands_pytorch_refuses_raise_pytorchs_error(calls):
    with CPURouting():
        for fn in (
            lambda: rand(5, 3, 4) @ rand(5, 2),  # inner dimensions differ
            lambda: torch.addmm(rand(4, 3), rand(1, 7), rand(7, 3)),  # bias does not broadcast
            lambda: torch.addmm(rand(4, 3), rand(1, 7), rand(7, 3), beta=0),
            lambda: torch.addbmm(rand(5, 4), rand(2, 5, 3), rand(3, 2, 4)),  # 2 * 3 == 3 * 2
            lambda: torch.bmm(rand(2, 5, 3), rand(3, 4)),
            lambda: F.linear(rand(5, 3), rand(4, 3), rand(2, 5, 4)),
        ):
            with pytest.raises(RuntimeError):
                fn()
    assert calls == {"mm": 0, "bmm": 0}  # refused before any product


NOT_ROUTED = [
    ("float64", lambda: rand(5, 7, dtype=torch.float64) @ rand(7, 3, dtype=torch.float64)),
    ("1-D @ 1-D", lambda: rand(7) @ rand(7)),
    ("mixed dtypes", lambda: F.linear(rand(5, 7), rand(3, 7), rand(3, dtype=torch.float64))),
    ("mixed routed dtypes", lambda: rand(5, 7) @ rand(7, 3, dtype=torch.bfloat16)),
    ("out= of another dtype", lambda: torch.mm(rand(5, 7), rand(7, 3), out=torch.empty(5, 3, dtype=torch.float64))),
]


@pytest.mark.parametrize("name, fn", NOT_ROUTED, ids=[c[0] for c in NOT_ROUTED])
def test_what_stays_pytorchs(calls, name, fn):
    with CPURouting((torch.float32, torch.float16, torch.bfloat16)):
        try:
            fn()
        except RuntimeError:  # PyTorch's own error (mixed dtypes): it was PyTorch that ran
            pass
    assert calls == {"mm": 0, "bmm": 0}


def test_cuda_routing_leaves_cpu_tensors_alone(calls):
    with gt.fp32_tc():
        rand(5, 7) @ rand(7, 3)
    assert calls == {"mm": 0, "bmm": 0}


def test_kernels_registered_on_entry_and_given_back():
    """The first context registers gemmlab's kernels for its dispatch key (the
    CUDA one needs no GPU to register); unregister() gives PyTorch's back, and
    refuses while a context is on."""
    from gemmlab.torch import routing

    def where(name):
        return repr(torch.library.get_kernel(f"aten::{name}", "CUDA"))

    with gt.fp32_tc():
        # the products' kernels are the C++ library's where it registered (gemmlab.torch.native)
        cpp = "gemmlab/torch/csrc/routed.cpp" if "CUDA" in routing._native_keys else "gemmlab/torch/routing.py"
        assert all(cpp in where(name) for name in ("mm", "bmm", "addmm", "baddbmm", "mv", "addmv_"))
        assert routing.current() is not None
        with pytest.raises(RuntimeError, match="still on"):
            gt.unregister()
    assert routing.current() is None
    assert cpp in where("mm")  # kept for the next context
    gt.unregister()
    assert not any("gemmlab" in where(name) for name in ("mm", "bmm", "addmm", "baddbmm", "mv"))


def test_autocast_regions_stay_pytorchs(calls):
    with CPURouting(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = rand(5, 7) @ rand(7, 3)
    assert calls["mm"] == 0 and out.dtype == torch.bfloat16


def test_dtypes_and_precisions(calls):
    with CPURouting(torch.bfloat16):
        rand(5, 7) @ rand(7, 3)
        rand(5, 7, dtype=torch.bfloat16) @ rand(7, 3, dtype=torch.bfloat16)
    assert calls["mm"] == 1
    with pytest.raises(ValueError, match="float64"):
        gt.Routing(torch.float64)
    with pytest.raises(ValueError, match="precision must be one of"):
        gt.fp32_tc("fp64")
    with pytest.raises(ValueError, match="is for float32"):
        gt.Routing(torch.bfloat16, "fp32_tc")


def test_precision_and_kernel_reach_the_product():
    seen = []

    def record(a, b, kernel="auto", precision=None, **kw):
        seen.append((kernel, precision))
        return (a.double() @ b.double()).to(a.dtype)  # float64: not routed again

    x = rand(5, 7, grad=True)
    with cpu_kernels(record), CPURouting(precision="fp16_ec", kernel="ec_wgmma"):
        y = x @ rand(7, 3)
        with CPURouting(torch.bfloat16):  # nested: float32 still the outer context's
            y = y @ rand(3, 3)
        y.sum().backward()
    assert seen == [("ec_wgmma", "fp16_ec")] * 4  # two forward, two gradients' products


def test_decorator_and_global_switch(calls):
    @CPURouting()
    def f(a, b):
        return a @ b

    f(rand(5, 7), rand(7, 3))
    assert calls["mm"] == 1
    rand(5, 7) @ rand(7, 3)
    assert calls["mm"] == 1
    from gemmlab.torch import routing

    gt.enable_fp32_tc()
    try:
        state = routing.current()
        gt.enable_fp32_tc()  # twice: still one context
        assert routing.current() is state and state.routes == {("CUDA", torch.float32): ("auto", "fp32_tc")}
        with gt.use_gemmlab(torch.bfloat16):
            with pytest.raises(RuntimeError, match="leave it first"):
                gt.disable_fp32_tc()
    finally:
        gt.disable_fp32_tc()
    assert routing.current() is None
    gt.disable_fp32_tc()  # when off: nothing to do


def test_coverage_lists_are_documented():
    assert set(gt.ROUTED) >= {"matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "linear", "gradients"}
    assert "scaled_dot_product_attention" in gt.NOT_ROUTED


def test_compiled_code_is_routed_when_it_runs(calls):
    """torch.compile(fullgraph=True) of a function called inside the context:
    the compiled code's products are routed (forward and backward)."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(7, 3)

    def block(x, w):
        h = torch.relu(lin(x))
        return (h @ w).sum()

    x, w = rand(4, 5, 7, grad=True), rand(3, 6)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    with CPURouting():
        loss = compiled(x, w)
        forward_calls = calls["mm"]
        assert forward_calls == 2, calls
        loss.backward()
    assert calls["mm"] > forward_calls
    xr = x.detach().double().requires_grad_()
    ref = (torch.relu(F.linear(xr, lin.weight.double(), lin.bias.double())) @ w.double()).sum()
    ref.backward()
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-5, atol=1e-5)


def test_fake_implementations_give_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = torch.empty(5, 7), torch.empty(7, 3)
        assert torch.ops.gemmlab.mm(a, b).shape == (5, 3)
        assert torch.ops.gemmlab.bmm(torch.empty(4, 5, 7), torch.empty(4, 7, 3)).shape == (4, 5, 3)
        with pytest.raises(RuntimeError, match="inner dimensions differ"):
            torch.ops.gemmlab.mm(a, a)
        with pytest.raises(RuntimeError, match="batch sizes differ"):
            torch.ops.gemmlab.bmm(torch.empty(4, 5, 7), torch.empty(2, 7, 3))
        with pytest.raises(RuntimeError, match="one dtype"):
            torch.ops.gemmlab.mm(a, b.double())
        with pytest.raises(RuntimeError, match="2-D"):
            torch.ops.gemmlab.mm(torch.empty(2, 5, 7), b)


def test_cpu_tensors_get_gemmlabs_message():
    with pytest.raises(Exception, match="CUDA"):
        gt.mm(rand(5, 7), rand(7, 3))
