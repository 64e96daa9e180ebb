"""gemmlab.torch's routing mode (fp32_tc(), use_gemmlab()) on the CPU: which
calls reach gemmlab's operators, with which shapes, gradients and under
torch.compile.  The operators' kernels are float64 stand-ins here
(tests/torch_cpu.py); tests/test_torch_fp32_tc.py runs the real ones on a GPU."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import gemmlab.torch as gt  # noqa: E402
from gemmlab.torch import ops  # noqa: E402
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
    ("2-D @ 1-D", torch.matmul, [(5, 7), (7,)], "mm"),
    ("3-D @ 2-D folds into rows", torch.matmul, [(4, 5, 7), (7, 3)], "mm"),
    ("3-D @ 1-D", torch.matmul, [(4, 5, 7), (7,)], "mm"),
    ("2-D @ 3-D broadcasts", torch.matmul, [(5, 7), (4, 7, 3)], "bmm"),
    ("4-D @ 3-D broadcasts", torch.matmul, [(2, 1, 5, 7), (3, 7, 3)], "bmm"),
    ("1-D @ 3-D", torch.matmul, [(7,), (4, 7, 3)], "bmm"),
    ("rmatmul", lambda a, b: b.__rmatmul__(a), [(5, 7), (7, 3)], "mm"),
    ("torch.mm", torch.mm, [(5, 7), (7, 3)], "mm"),
    ("Tensor.mm", lambda a, b: a.mm(b), [(5, 7), (7, 3)], "mm"),
    ("torch.bmm", torch.bmm, [(4, 5, 7), (4, 7, 3)], "bmm"),
    ("Tensor.bmm", lambda a, b: a.bmm(mat2=b), [(4, 5, 7), (4, 7, 3)], "bmm"),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b), [(3,), (5, 7), (7, 3)], "mm"),
    ("addmm alpha beta", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0), [(5, 3), (5, 7), (7, 3)],
     "mm"),
    ("Tensor.addmm", lambda c, a, b: c.addmm(a, b, alpha=3), [(5, 3), (5, 7), (7, 3)], "mm"),
    ("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=2.0), [(4, 5, 3), (4, 5, 7), (4, 7, 3)], "bmm"),
    ("linear", lambda x, w: F.linear(x, w), [(5, 7), (3, 7)], "mm"),
    ("linear with bias, 3-D input", lambda x, w, b: F.linear(x, w, b), [(2, 5, 7), (3, 7), (3,)], "mm"),
    ("nn.Linear keywords", lambda x, w, b: F.linear(input=x, weight=w, bias=b), [(5, 7), (3, 7), (3,)], "mm"),
]


@pytest.mark.parametrize("name, fn, shapes, op", CASES, ids=[c[0] for c in CASES])
def test_routed_forward_and_backward(calls, name, fn, shapes, op):
    args = [rand(*s, grad=True) for s in shapes]
    with CPURouting():
        out = fn(*args)
    assert calls[op] == 1 and calls["mm"] + calls["bmm"] == 1, calls
    ref_args = [x.detach().double().requires_grad_() for x in args]
    ref = fn(*ref_args)
    assert out.shape == ref.shape and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    # The backward pass: each needed gradient is again a gemmlab product, mode on or off.
    w = torch.rand(out.shape, dtype=torch.float64)
    (out.double() * w).sum().backward()
    (ref * w).sum().backward()
    for x, r in zip(args, ref_args):
        torch.testing.assert_close(x.grad.double(), r.grad, rtol=1e-5, atol=1e-5)
    assert calls[op] > 1


def test_addmm_beta_zero_does_not_read_the_bias(calls):
    bias = torch.full((5, 3), float("nan")).requires_grad_()
    with CPURouting():
        out = torch.addmm(bias, rand(5, 7), rand(7, 3), beta=0)
    assert calls["mm"] == 1 and not out.isnan().any()
    out.sum().backward()
    assert torch.equal(bias.grad, torch.zeros(5, 3))     # zeros, as PyTorch gives, not None
    # Without a gradient to give, the bias is not touched at all (attention's baddbmm(empty, q, k, beta=0)).
    with CPURouting():
        out = torch.baddbmm(torch.full((1, 5, 3), float("nan")), rand(2, 5, 7), rand(2, 7, 3), beta=0)
    assert out.shape == (2, 5, 3) and not out.isnan().any()


def test_addbmm_is_one_product_over_the_batch(calls):
    bias, a, b = rand(5, 3, grad=True), rand(4, 5, 7, grad=True), rand(4, 7, 3, grad=True)
    with CPURouting():
        out = torch.addbmm(bias, a, b, beta=0.5, alpha=2.0)
    assert calls == {"mm": 1, "bmm": 0}
    ref = torch.addbmm(bias.double(), a.double(), b.double(), beta=0.5, alpha=2.0)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    assert calls["mm"] == 3 and a.grad.shape == a.shape and b.grad.shape == b.shape


# Zero-element products: the operators answer them without a kernel (the
# stand-in refuses zero-element operands); results and gradients as PyTorch's.
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
    with CPURouting():
        out = fn(*args)
    assert calls == {"mm": 0, "bmm": 0}
    ref_args = [x.detach().double().requires_grad_() for x in args]
    ref = fn(*ref_args)
    assert out.shape == ref.shape and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    w = torch.rand(out.shape, dtype=torch.float64)
    (out.double() * w).sum().backward()
    (ref * w).sum().backward()
    for x, r in zip(args, ref_args):
        assert x.grad.shape == r.grad.shape
        torch.testing.assert_close(x.grad.double(), r.grad, rtol=1e-6, atol=1e-6)
    assert calls == {"mm": 0, "bmm": 0}


def test_operands_pytorch_refuses_raise_pytorchs_error(calls):
    with CPURouting():
        for fn in (lambda: rand(5, 3, 4) @ rand(5, 2),                        # inner dimensions differ
                   lambda: torch.addmm(rand(4, 3), rand(1, 7), rand(7, 3)),    # bias does not broadcast
                   lambda: torch.addmm(rand(4, 3), rand(1, 7), rand(7, 3), beta=0),
                   lambda: torch.addbmm(rand(5, 4), rand(2, 5, 3), rand(3, 2, 4)),   # 2 * 3 == 3 * 2
                   lambda: torch.bmm(rand(2, 5, 3), rand(3, 4)),
                   lambda: F.linear(rand(5, 3), rand(4, 3), rand(2, 5, 4))):
            with pytest.raises(RuntimeError):
                fn()
    # The two addmm and the linear ran their product before the bias was found not to broadcast.
    assert calls == {"mm": 3, "bmm": 0}


NOT_ROUTED = [
    ("float64", lambda: rand(5, 7, dtype=torch.float64) @ rand(7, 3, dtype=torch.float64)),
    ("1-D @ 1-D", lambda: rand(7) @ rand(7)),
    ("out=", lambda: torch.mm(rand(5, 7), rand(7, 3), out=torch.empty(5, 3))),
    ("in-place addmm_", lambda: rand(5, 3).addmm_(rand(5, 7), rand(7, 3))),
    ("einsum", lambda: torch.einsum("ij,jk->ik", rand(5, 7), rand(7, 3))),
    ("mixed dtypes", lambda: F.linear(rand(5, 7), rand(3, 7), rand(3, dtype=torch.float64))),
    ("mixed routed dtypes", lambda: rand(5, 7) @ rand(7, 3, dtype=torch.bfloat16)),
    ("linear with a 1-D weight", lambda: F.linear(rand(5, 7), rand(7))),
]


@pytest.mark.parametrize("name, fn", NOT_ROUTED, ids=[c[0] for c in NOT_ROUTED])
def test_what_stays_pytorchs(calls, name, fn):
    with CPURouting((torch.float32, torch.float16, torch.bfloat16)):
        try:
            fn()
        except RuntimeError:      # PyTorch's own error (mixed dtypes): it was PyTorch that ran
            pass
    assert calls == {"mm": 0, "bmm": 0}


def test_cuda_routing_leaves_cpu_tensors_alone(calls):
    with gt.fp32_tc():
        rand(5, 7) @ rand(7, 3)
    assert calls == {"mm": 0, "bmm": 0}


def test_cuda_mode_checks_on_cuda_tensors():
    """The CUDA mode's own checks (device type and index), on fake CUDA tensors:
    no GPU needed, the operators' fake implementations give the shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.products = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.products += func.namespace == "gemmlab"
            return func(*args, **(kwargs or {}))

    with FakeTensorMode():
        a, b = torch.empty(5, 7, device="cuda"), torch.empty(7, 3, device="cuda")
        seen = Seen()
        with gt.fp32_tc(), seen:
            assert (a @ b).shape == (5, 3)
            assert torch.addmm(torch.empty(3, device="cuda"), a, b).shape == (5, 3)
            assert (torch.empty(5, 5, 0, device="cuda") @ torch.empty(0, 5, device="cuda")).shape == (5, 5, 5)
            assert seen.products == 3
            a.bfloat16() @ b.bfloat16()                                   # not a routed dtype
            with pytest.raises(RuntimeError):
                a @ torch.empty(7, 3, device="cuda:1")                   # two devices: PyTorch's error
            with pytest.raises(RuntimeError):
                torch.addmm(torch.empty(3, device="cuda:1"), a, b)
        assert seen.products == 3


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


def test_precision_and_kernel_reach_the_operator():
    seen = []

    def record(a, b, kernel_name="auto", precision=""):
        seen.append((kernel_name, precision))
        return a @ b

    saved = ops.CPU_KERNELS["mm"]
    ops.CPU_KERNELS["mm"] = record
    try:
        x = rand(5, 7, grad=True)
        with CPURouting(precision="fp16_ec", kernel="ec_wgmma"):
            y = x @ rand(7, 3)
        y.sum().backward()
    finally:
        ops.CPU_KERNELS["mm"] = saved
    assert seen == [("ec_wgmma", "fp16_ec")] * 2    # forward, and the gradient's product


def test_decorator_and_global_switch(calls):
    @CPURouting()
    def f(a, b):
        return a @ b

    f(rand(5, 7), rand(7, 3))
    assert calls["mm"] == 1
    rand(5, 7) @ rand(7, 3)
    assert calls["mm"] == 1
    stack = torch.overrides._get_current_function_mode_stack
    gt.enable_fp32_tc()
    try:
        gt.enable_fp32_tc()   # twice: still one mode
        assert sum(isinstance(m, gt.Routing) for m in stack()) == 1
    finally:
        gt.disable_fp32_tc()
    assert not any(isinstance(m, gt.Routing) for m in stack())
    gt.disable_fp32_tc()      # when off: nothing to do


def test_coverage_lists_are_documented():
    assert set(gt.ROUTED) == {"matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "linear"}
    assert "scaled_dot_product_attention" in gt.NOT_ROUTED


@pytest.mark.parametrize("enter_inside", [False, True])
def test_compiled_with_the_mode_has_no_graph_break(calls, enter_inside):
    """torch.compile(fullgraph=True) traces through the mode, and the graph calls
    gemmlab's operators (forward and backward)."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(7, 3)

    def block(x, w):
        h = torch.relu(lin(x))
        return (h @ w).sum()

    def inside(x, w):
        with CPURouting():
            return block(x, w)

    x, w = rand(4, 5, 7, grad=True), rand(3, 6)
    if enter_inside:
        compiled = torch.compile(inside, fullgraph=True, backend="aot_eager")
        loss = compiled(x, w)
    else:
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
