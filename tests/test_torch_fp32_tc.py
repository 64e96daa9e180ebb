"""gemmlab.torch.fp32_tc() on a GPU: every routed function, forward and
backward, against FP64 within 1.5x SGEMM's error; what it leaves alone; the
kernels that ran; torch.compile with Inductor; CUDA-graph capture."""

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
F = torch.nn.functional

import contextlib  # noqa: E402

import gemmlab  # noqa: E402
from gemmlab.torch import routing  # noqa: E402


@pytest.fixture(scope="module")
def gt():
    import gemmlab.torch as gt

    return gt


class Seen(contextlib.ContextDecorator):
    """The products the routing contexts hand to gemmlab (the backward pass's
    too), by the operands' dimensions."""

    def __enter__(self):
        self.products, self._product = [], routing.PRODUCT["fn"]

        def counted(a, b, **kwargs):
            self.products.append((a.dim(), b.dim()))
            return self._product(a, b, **kwargs)

        routing.PRODUCT["fn"] = counted
        return self

    def __exit__(self, *exc):
        routing.PRODUCT["fn"] = self._product
        return False

    @property
    def count(self):
        return len(self.products)


def rand(*shape, grad=False, g=None):
    return (torch.rand(shape, device="cuda", generator=g) * 2 - 1).requires_grad_(grad)


def rel(x, ref):
    x, ref = x.detach().double(), ref.detach().double()
    return float(torch.linalg.norm(x - ref) / torch.linalg.norm(ref))


@pytest.fixture(autouse=True)
def ieee_fp32():
    """SGEMM as the yardstick: TF32 off for PyTorch's float32 products."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


# (name, function, operand shapes as stored, which operands are transposed views).
CASES = [
    ("matmul NN", lambda a, b: a @ b, [(130, 300), (300, 70)]),
    ("x @ W.t() (nn.Linear's product)", lambda x, w: x @ w.t(), [(130, 300), (70, 300)]),
    ("x.t() @ y (a weight gradient)", lambda x, y: x.t() @ y, [(300, 130), (300, 70)]),
    ("TT", lambda a, b: a.t() @ b.t(), [(300, 130), (70, 300)]),
    ("batched 3-D", torch.bmm, [(6, 65, 257), (6, 257, 33)]),
    ("Q @ K^T batched", lambda q, k: q @ k.transpose(-1, -2), [(2, 3, 65, 128), (2, 3, 97, 128)]),
    ("broadcast 4-D @ 3-D", torch.matmul, [(2, 1, 65, 257), (3, 257, 33)]),
    ("3-D @ 2-D folded", torch.matmul, [(4, 65, 257), (257, 33)]),
    ("1-D @ 2-D", torch.matmul, [(257,), (257, 33)]),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), [(33,), (65, 257), (257, 33)]),
    ("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b), [(4, 65, 33), (4, 65, 257), (4, 257, 33)]),
    ("linear with bias", lambda x, w, b: F.linear(x, w, b), [(3, 65, 257), (33, 257), (33,)]),
]


@pytest.mark.parametrize("name, fn, shapes", CASES, ids=[c[0] for c in CASES])
def test_routed_forward_and_backward_within_sgemm_error(gt, name, fn, shapes):
    g = torch.Generator(device="cuda").manual_seed(len(name))
    args = [rand(*s, grad=True, g=g) for s in shapes]
    seen = Seen()
    with gt.fp32_tc(), seen:
        out = fn(*args)
        w = torch.rand(out.shape, device="cuda", generator=g)
        (out * w).sum().backward()
    assert seen.count == 3, seen.products  # the forward product, and one for each operand's gradient
    plan = gemmlab.last_plan()  # the last gradient's product
    if plan.method == "fp32":  # IEEE FP32 on CUDA cores: a 1-D operand, or predicted faster than ec_wgmma on Hopper
        assert plan.spec.family in ("simt", "gemv"), plan.describe()
        assert min(plan.problem.M, plan.problem.N, plan.problem.K) <= 16 or "predicted faster" in plan.reason
    else:
        assert plan.spec.name in ("ec_wgmma", "ec_wmma"), plan.describe()

    ref_args = [x.detach().double().requires_grad_() for x in args]
    ref = fn(*ref_args)
    (ref * w.double()).sum().backward()
    sgemm_args = [x.detach().clone().requires_grad_() for x in args]
    sgemm = fn(*sgemm_args)
    (sgemm * w).sum().backward()

    # 1.5x SGEMM's error, or the split's own floor: its two parts hold about 22 of
    # an FP32 value's 24 bits (docs/ec/01-ec-wmma.md), which short sums (K = 33 in
    # the gradient of a 1-D operand) can bring SGEMM's error below.
    def bound(sgemm_err):
        return max(1.5 * sgemm_err, 2.0**-22)

    assert rel(out, ref) <= bound(rel(sgemm, ref)), (rel(out, ref), rel(sgemm, ref))
    for x, r, s in zip(args, ref_args, sgemm_args):
        assert rel(x.grad, r.grad) <= bound(rel(s.grad, r.grad)), (rel(x.grad, r.grad), rel(s.grad, r.grad))


def test_nn_linear_model_routes_every_product(gt):
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)).cuda()
    x = rand(8, 33, 256)
    seen = Seen()
    with gt.fp32_tc(), seen:
        model(x).square().mean().backward()
    assert seen.count == 2 + 3, seen.products  # two forward; dW twice, dX once (the first layer's input needs none)


def test_other_dtypes_and_cpu_tensors_pass_through(gt):
    seen = Seen()
    a16, b16 = rand(64, 96).bfloat16(), rand(96, 32).bfloat16()
    with gt.fp32_tc(), seen:
        c16 = a16 @ b16
        c_cpu = torch.rand(8, 4) @ torch.rand(4, 2)
        c64 = rand(8, 4).double() @ rand(4, 2).double()
    assert seen.count == 0
    assert c16.dtype == torch.bfloat16 and c_cpu.device.type == "cpu" and c64.dtype == torch.float64


def test_autocast_keeps_its_dtype(gt):
    with gt.fp32_tc(), torch.autocast("cuda", dtype=torch.bfloat16):
        out = rand(64, 96) @ rand(96, 32)
    assert out.dtype == torch.bfloat16


def test_use_gemmlab_routes_bf16(gt):
    seen = Seen()
    a, b = rand(64, 96).bfloat16(), rand(96, 32).bfloat16()
    with gt.use_gemmlab(torch.bfloat16), seen:
        out = a @ b
    assert seen.count == 1
    assert rel(out, a.double() @ b.double()) < 1e-2


def test_torch_compile_inductor_calls_gemmlab(gt):
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    x = rand(4, 65, 256, grad=True)

    def step(x):
        return model(x).square().mean()

    compiled = torch.compile(step, fullgraph=True)
    with gt.fp32_tc(), Seen() as seen:
        loss = compiled(x)
        forward = seen.count
        loss.backward()
    assert forward == 2 and seen.count == 2 + 4, seen.products  # the compiled code's products, routed
    xr = x.detach().double().requires_grad_()
    model64 = model.double()
    ref = model64(xr).square().mean()
    ref.backward()
    assert rel(loss, ref) < 1e-6
    assert rel(x.grad, xr.grad) < 1e-5


def test_cuda_graph_capture_and_replay(gt):
    x, w = rand(128, 256), rand(512, 256)
    static_out = None
    # Warm up on a side stream (the prepared call and its workspaces), as torch.cuda.graph asks.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), gt.fp32_tc():
        for _ in range(2):
            F.linear(x, w)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), gt.fp32_tc():
        static_out = F.linear(x, w)
    for scale in (1.0, 3.0e4):
        x.copy_(rand(128, 256) * scale)
        graph.replay()
        torch.cuda.synchronize()
        ref = x.double() @ w.double().t()
        assert rel(static_out, ref) < 1e-6, scale
