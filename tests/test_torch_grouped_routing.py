"""torch._grouped_mm through use_gemmlab() on the CPU: which calls reach the grouped rungs (the
2-D x 3-D form with offs on rung 6, the 2-D x 2-D weight gradient autograd asks for on rung 7),
which stay PyTorch's, the gradients and torch.compile.  The contexts replace PyTorch's CPU kernel
here (CPURouting) and the rungs are float64 stand-ins (tests/torch_cpu.py); tests/test_grouped.py
runs the real ones on a Hopper GPU."""

import pytest

torch = pytest.importorskip("torch")

import gemmlab.torch as gt  # noqa: E402
from gemmlab.torch import routing  # noqa: E402
from torch_cpu import CPURouting, cpu_kernels, grouped_calls  # noqa: E402
from torch_cpu import calls as product_calls  # noqa: E402
from gemmlab.runtime.device import gpu_available  # noqa: E402

BF16, FP16 = torch.bfloat16, torch.float16
ENDS = (5, 5, 30, 40)  # an empty group, groups of 5, 25 and 10 rows, odd sizes


@pytest.fixture
def calls():
    with cpu_kernels():
        grouped_calls.update(grouped=0, weight_grad=0)
        yield grouped_calls


def moe(T=40, K=16, N=24, ends=ENDS, transposed=True, dtype=BF16, grad=True):
    """x (T, K), b (G, K, N) (transposed: W.transpose(-2, -1) of a row-major (G, N, K)), offs."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(T, K, generator=g).to(dtype).requires_grad_(grad)
    G = len(ends)
    w = (torch.randn(G, N, K, generator=g) if transposed else torch.randn(G, K, N, generator=g)).to(dtype)
    w.requires_grad_(grad)
    return x, w, torch.tensor(ends, dtype=torch.int32)


def loop_reference(x, w, ends, transposed, up):
    """out and the gradients (of sum(out * up)) from a float64 loop of matmuls."""
    x2, w2 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    b2 = w2.transpose(-2, -1) if transposed else w2
    starts = (0, *ends[:-1])
    out = torch.cat([x2[s:e] @ b2[g] for g, (s, e) in enumerate(zip(starts, ends))])
    out.backward(up.double())
    return out, x2.grad, w2.grad


@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("transposed", [True, False], ids=["W^T", "row-major"])
def test_routed_forward_and_backward(calls, transposed, dtype):
    """Forward on rung 6; autograd's formula asks for grad_a = _grouped_mm(grad, b^T, offs), rung 6
    again, and grad_b = _grouped_mm(x^T, grad, offs) (or its transpose for a W^T b), rung 7."""
    x, w, offs = moe(transposed=transposed, dtype=dtype)
    b = w.transpose(-2, -1) if transposed else w
    up = torch.randn(40, 24, generator=torch.Generator().manual_seed(1)).to(dtype)
    with CPURouting((torch.float32, FP16, BF16)):
        out = torch._grouped_mm(x, b, offs=offs)
        assert calls == {"grouped": 1, "weight_grad": 0}
        out.backward(up)
    assert calls == {"grouped": 2, "weight_grad": 1}
    ref, gx, gw = loop_reference(x, w, ENDS, transposed, up)
    assert out.dtype == dtype and out.shape == (40, 24)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(x.grad.double(), gx, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(w.grad.double(), gw, rtol=2e-2, atol=5e-2)
    assert not w.grad[1].any()  # the empty group's weight: zeros
    assert w.grad.shape == w.shape


def test_only_the_weights_gradient(calls):
    x, w, offs = moe(transposed=True)
    x.requires_grad_(False)
    with CPURouting(BF16):
        torch._grouped_mm(x, w.transpose(-2, -1), offs).backward(torch.ones(40, 24, dtype=BF16).contiguous())
    assert calls == {"grouped": 1, "weight_grad": 1} and x.grad is None and w.grad is not None


def test_the_weight_gradient_form_called_directly(calls):
    """torch._grouped_mm(x.t(), y, offs): the (G, P, Q) sums of x_g^T @ y_g, on rung 7; a row-major
    first operand (not x.t()) is not what grouped_wgrad reads: PyTorch's."""
    x, y, offs = torch.randn(40, 16).to(BF16), torch.randn(40, 24).to(BF16), torch.tensor(ENDS, dtype=torch.int32)
    with CPURouting(BF16):
        out = torch._grouped_mm(x.t(), y, offs=offs)
        assert calls == {"grouped": 0, "weight_grad": 1}
        mine = torch._grouped_mm(x.t().contiguous(), y, offs=offs)  # row-major (P, T)
        assert calls == {"grouped": 0, "weight_grad": 1}
    ref = torch._grouped_mm(x.t(), y, offs=offs)  # PyTorch's own (its CPU fallback)
    assert out.shape == (4, 16, 24)
    torch.testing.assert_close(out.double(), ref.double(), rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(mine.double(), ref.double(), rtol=2e-2, atol=5e-2)


def test_the_batch_form_goes_to_gemmlab_matmul(calls):
    """torch._grouped_mm's 3-D x 3-D form (a batch, no offs) goes to gemmlab.matmul as bmm does,
    with PyTorch's answer (its CPU kernel, outside the context)."""
    g = torch.Generator().manual_seed(3)
    a3, b3 = torch.randn(4, 10, 16, generator=g).to(BF16), torch.randn(4, 16, 24, generator=g).to(BF16)
    bmm_before = product_calls["bmm"]
    with CPURouting(BF16):
        batch = torch._grouped_mm(a3, b3)
        assert product_calls["bmm"] == bmm_before + 1 and calls == {"grouped": 0, "weight_grad": 0}
    torch.testing.assert_close(batch.double(), torch._grouped_mm(a3, b3).double(), rtol=2e-2, atol=5e-2)


def _declines(fn):
    """fn() inside the context: PyTorch's kernel ran (or raised its own error)."""
    try:
        fn()
    except RuntimeError:  # PyTorch's own refusal: it was PyTorch that ran
        pass


def _x(T=40, K=16, dtype=BF16):
    return torch.randn(T, K).to(dtype)


OFFS = torch.tensor(ENDS, dtype=torch.int32)
NOT_ROUTED = [
    ("float32", lambda: torch._grouped_mm(_x(dtype=torch.float32), torch.randn(4, 16, 24), offs=OFFS)),
    ("3-D x 2-D", lambda: torch._grouped_mm(torch.randn(4, 16, 16).to(BF16), _x(40, 16).t(), offs=OFFS)),
    ("2-D x 3-D without offs", lambda: torch._grouped_mm(_x(), torch.randn(4, 16, 24).to(BF16))),
    ("bias", lambda: torch._grouped_mm(_x(), torch.randn(4, 16, 24).to(BF16), OFFS, torch.zeros(4, 24).to(BF16))),
    (
        "out_dtype float32",
        lambda: torch._grouped_mm(_x(), torch.randn(4, 16, 24).to(BF16), offs=OFFS, out_dtype=torch.float32),
    ),
    ("int64 offs", lambda: torch._grouped_mm(_x(), torch.randn(4, 16, 24).to(BF16), offs=OFFS.long())),
    ("K = 12", lambda: torch._grouped_mm(_x(K=12), torch.randn(4, 12, 24).to(BF16), offs=OFFS)),
    ("N = 20", lambda: torch._grouped_mm(_x(), torch.randn(4, 16, 20).to(BF16), offs=OFFS)),
    ("column-major a", lambda: torch._grouped_mm(_x(16, 40).t(), torch.randn(4, 16, 24).to(BF16), offs=OFFS)),
    ("mixed dtypes", lambda: torch._grouped_mm(_x(), torch.randn(4, 16, 24).to(FP16), offs=OFFS)),
    ("no rows", lambda: torch._grouped_mm(_x(T=0), torch.randn(4, 16, 24).to(BF16), offs=OFFS)),
    (
        "more than 1024 groups",
        lambda: torch._grouped_mm(
            _x(), torch.randn(1025, 16, 8).to(BF16), offs=torch.full((1025,), 40, dtype=torch.int32)
        ),
    ),
    ("weight gradient, P = 12", lambda: torch._grouped_mm(_x(K=12).t(), _x(K=24), offs=OFFS)),
]


@pytest.mark.parametrize("name, fn", NOT_ROUTED, ids=[c[0] for c in NOT_ROUTED])
def test_what_stays_pytorchs(calls, name, fn):
    with CPURouting((torch.float32, FP16, BF16)):
        _declines(fn)
    assert calls == {"grouped": 0, "weight_grad": 0}


def test_declined_calls_give_pytorchs_answer(calls):
    x, b = _x(16, 40).t(), torch.randn(4, 16, 24).to(BF16)  # a column-major a: PyTorch's only
    with CPURouting(BF16):
        out = torch._grouped_mm(x, b, offs=OFFS)
    assert calls == {"grouped": 0, "weight_grad": 0}
    starts = (0, *ENDS[:-1])
    ref = torch.cat([x[s:e].double() @ b[g].double() for g, (s, e) in enumerate(zip(starts, ENDS))])
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=5e-2)


def test_dtypes_the_context_does_not_route_and_other_gpus(calls, monkeypatch):
    x, w, offs = moe(grad=False)
    with CPURouting(torch.float32):  # bfloat16 not routed
        torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    with CPURouting(FP16):
        torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    monkeypatch.setitem(routing.GROUPED, "arch", lambda device: False)  # not a Hopper GPU
    with CPURouting(BF16):
        torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    assert calls == {"grouped": 0, "weight_grad": 0}
    monkeypatch.undo()
    with CPURouting(BF16):
        torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    assert calls == {"grouped": 1, "weight_grad": 0}


def test_autocast_regions_stay_pytorchs(calls):
    x, w, offs = moe(grad=False)
    with CPURouting(BF16), torch.autocast("cpu", dtype=BF16):
        torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    assert calls == {"grouped": 0, "weight_grad": 0}


def test_backward_after_the_context_is_pytorchs(calls):
    x, w, offs = moe()
    with CPURouting(BF16):
        out = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    out.backward(torch.ones(40, 24, dtype=BF16).contiguous())
    assert calls == {"grouped": 1, "weight_grad": 0}
    assert x.grad.shape == x.shape and w.grad.shape == w.shape


def test_cuda_routing_leaves_cpu_tensors_alone(calls):
    x, w, offs = moe(grad=False)
    with gt.use_gemmlab():
        torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    assert calls == {"grouped": 0, "weight_grad": 0}


def test_registered_on_entry_and_given_back():
    def where():
        return repr(torch.library.get_kernel("aten::_grouped_mm", "CUDA"))

    with gt.use_gemmlab(BF16):
        assert "gemmlab/torch/routing.py" in where()
    gt.unregister()
    assert "gemmlab" not in where()


@pytest.mark.skipif(gpu_available(), reason="the answer of a machine without a GPU")
def test_hopper_check_without_a_gpu():
    """No driver here: the check says no (PyTorch's kernel then answers), and says it once."""
    saved = dict(routing._HOPPER)
    try:
        routing._HOPPER.pop(0, None)
        assert routing._on_hopper(0) is False and routing._HOPPER[0] is False
    finally:
        routing._HOPPER.clear()
        routing._HOPPER.update(saved)


def test_coverage_lists_say_so():
    assert "_grouped_mm" in gt.ROUTED and "_grouped_mm's other calls" in gt.NOT_ROUTED
    assert "_grouped_mm" in routing.OPERATORS


@pytest.mark.parametrize("transposed", [True, False], ids=["W^T", "row-major"])
def test_compiled_code_is_routed_when_it_runs(calls, transposed):
    """torch.compile(fullgraph=True) of a grouped layer called inside the context: the compiled
    forward's and backward's torch._grouped_mm calls are routed when they run."""
    torch._dynamo.reset()
    x, w, offs = moe(transposed=transposed)
    up = torch.randn(40, 24, generator=torch.Generator().manual_seed(2)).to(BF16)

    def layer(x, w, offs):
        b = w.transpose(-2, -1) if transposed else w
        return torch._grouped_mm(x, b, offs=offs)

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    with CPURouting(BF16):
        out = compiled(x, w, offs)
        assert calls == {"grouped": 1, "weight_grad": 0}
        out.backward(up)
    assert calls == {"grouped": 2, "weight_grad": 1}
    ref, gx, gw = loop_reference(x, w, ENDS, transposed, up)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(x.grad.double(), gx, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(w.grad.double(), gw, rtol=2e-2, atol=5e-2)
