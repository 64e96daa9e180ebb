"""The grouped rung on a Hopper GPU: gemmlab.grouped_mm(a, b, offs) and torch.ops.gemmlab.grouped_mm
against FP64 products of each group, the output poisoned (NaN) first, on random offsets with empty
groups, groups of one row and odd row counts, 1 to 128 groups (and the 1024 the work list holds),
both layouts of b, float16 and bfloat16, every configuration; rows in no group are left as they
were; the weights' gradient in one launch (grouped_wgrad); the backward pass against torch's
autograd of a loop of matmuls; beside torch._grouped_mm where this PyTorch has it.  Without a Hopper GPU every test here is skipped; the host side is
tested on the CPU by test_grouped_rules.py, the kernels' compilation by test_grouped_compile.py.

Run on the GPU: PYTHONPATH=src:tests python -m pytest -q tests/test_grouped.py"""

import random

import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.runtime import device as rt_device

torch = pytest.importorskip("torch")

SPEC = registry.get("grouped")
pytestmark = pytest.mark.skipif(
    not rt_device.gpu_available() or rt_device.gpu_info(0).arch != "sm_90a", reason="needs a Hopper GPU (sm_90a)"
)
# Relative Frobenius error of each group against FP64: the result's rounding (bfloat16 8 bits,
# float16 11) and FP32 sums of K products.
BOUND = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def _sizes(G: int, rng: random.Random) -> list[int]:
    """G group sizes: about a quarter empty, some of one row, odd and tile-straddling ones."""
    pool = [0, 0, 1, 1, 2, 3, 17, 63, 64, 65, 127, 128, 129, 255, 333]
    sizes = [rng.choice(pool) for _ in range(G)]
    return sizes if any(sizes) else sizes[:-1] + [7]


def _case(sizes, K, N, dtype, transposed, seed=0, extra_rows=0):
    """a (T + extra_rows, K), b (G, K, N) -- W.transpose(-2, -1) of a row-major (G, N, K) where
    ``transposed`` -- and offs on the GPU, with the FP64 reference of each group's rows."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    T, G = sum(sizes) + extra_rows, len(sizes)
    a = torch.randn(T, K, device="cuda", generator=g).to(dtype)
    if transposed:
        b = torch.randn(G, N, K, device="cuda", generator=g).to(dtype).transpose(-2, -1)
    else:
        b = torch.randn(G, K, N, device="cuda", generator=g).to(dtype)
    ends = torch.tensor(sizes, dtype=torch.int64).cumsum(0)
    offs = ends.to(torch.int32).cuda()
    bounds = [(int(e) - s, int(e)) for s, e in zip(sizes, ends)]
    ref = torch.full((T, N), float("nan"), device="cuda", dtype=torch.float64)
    for i, (s, e) in enumerate(bounds):
        ref[s:e] = a[s:e].double() @ b[i].double()
    return a, b, offs, bounds, ref


def _check(out, ref, bounds, dtype, rows_in_groups):
    for s, e in bounds:
        if e > s:
            err = torch.linalg.norm(out[s:e].double() - ref[s:e]) / torch.linalg.norm(ref[s:e])
            assert err < BOUND[dtype], (s, e, float(err))
    assert torch.isnan(out[rows_in_groups:].double()).all(), "rows in no group must not be written"


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("G", [1, 2, 7, 32, 128])
def test_random_groups(G, dtype, transposed):
    rng = random.Random(G)
    sizes = _sizes(G, rng)
    K, N = rng.choice([8, 64, 200, 1024]), rng.choice([8, 136, 256, 1000])
    a, b, offs, bounds, ref = _case(sizes, K, N, dtype, transposed, seed=G, extra_rows=5)
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=dtype)
    assert gemmlab.grouped_mm(a, b, offs, out=out) is out
    assert gemmlab.last_plan().spec.name == "grouped"
    _check(out, ref, bounds, dtype, sum(sizes))


@pytest.mark.parametrize("params", SPEC.configurations(), ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("transposed", [True, False])
def test_every_configuration(params, transposed):
    sizes = [1, 0, 129, 64, 0, 333, 2, 65]
    a, b, offs, bounds, ref = _case(sizes, 520, 392, torch.bfloat16, transposed, extra_rows=3)
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.grouped_mm(a, b, offs, out=out, kernel="grouped", **params)
    assert gemmlab.last_plan().params == params
    _check(out, ref, bounds, torch.bfloat16, sum(sizes))


def test_one_row_groups_and_all_groups_empty_but_one():
    sizes = [1] * 40 + [0] * 80 + [1]
    a, b, offs, bounds, ref = _case(sizes, 4096, 1024, torch.bfloat16, True)
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.grouped_mm(a, b, offs, out=out)
    _check(out, ref, bounds, torch.bfloat16, sum(sizes))
    sizes = [0] * 127 + [300]
    a, b, offs, bounds, ref = _case(sizes, 64, 64, torch.float16, False)
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.float16)
    gemmlab.grouped_mm(a, b, offs, out=out)
    _check(out, ref, bounds, torch.float16, sum(sizes))


def test_the_most_groups():
    rng = random.Random(1)
    sizes = [rng.choice([0, 1, 3, 40]) for _ in range(1024)]
    a, b, offs, bounds, ref = _case(sizes, 64, 128, torch.bfloat16, True)
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.grouped_mm(a, b, offs, out=out)
    _check(out, ref, bounds, torch.bfloat16, sum(sizes))


def test_a_new_out_and_repeated_calls_on_new_tensors():
    sizes = [100, 0, 37, 250]
    for seed in range(3):  # the prepared call of one signature on other addresses
        a, b, offs, bounds, ref = _case(sizes, 256, 512, torch.bfloat16, True, seed=seed)
        out = gemmlab.grouped_mm(a, b, offs)
        assert out.shape == ref.shape and out.dtype == torch.bfloat16
        for s, e in bounds:
            if e > s:
                assert torch.linalg.norm(out[s:e].double() - ref[s:e]) / torch.linalg.norm(ref[s:e]) < 1e-2


def test_offsets_are_clamped_not_trusted():
    """Offsets past T, negative or decreasing: clamped as 06_grouped.cuh's group_rows does; nothing
    outside out is written (out is a view into a NaN-filled buffer checked around it).  After a
    decreasing offset the next group starts there, so rows 10..19 are in two groups (either
    product may land): only rows in one group are checked."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(50, 64, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(4, 64, 64, device="cuda", generator=g).to(torch.bfloat16)
    offs = torch.tensor([-3, 20, 10, 99], dtype=torch.int32, device="cuda")
    buf = torch.full((70, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = buf[10:60]
    gemmlab.grouped_mm(a, b, offs, out=out)
    assert torch.isnan(buf[:10].double()).all() and torch.isnan(buf[60:].double()).all()
    from gemmlab.torch import ops

    # Groups: [0, 0), [0, 20), [20, 20) (10 < 20: empty), [10, 50) (99 clamped to 50).
    assert ops.group_bounds(offs.cpu(), 50) == [(0, 0), (0, 20), (20, 20), (10, 50)]
    for g, (s, e) in [(1, (0, 10)), (3, (20, 50))]:
        ref = a[s:e].double() @ b[g].double()
        assert torch.linalg.norm(out[s:e].double() - ref) / torch.linalg.norm(ref) < 1e-2


def test_torch_op_matches_torch_grouped_mm_where_torch_has_it():
    import gemmlab.torch as gt

    sizes = [30, 0, 1, 200, 64]
    a, b, offs, bounds, ref = _case(sizes, 512, 256, torch.bfloat16, True)
    ours = gt.grouped_mm(a, b, offs)
    _check(ours, ref, bounds, torch.bfloat16, sum(sizes))
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"this PyTorch ({torch.__version__}) has no torch._grouped_mm")
    theirs = torch._grouped_mm(a, b, offs=offs, out_dtype=torch.bfloat16)
    rows = sum(sizes)
    assert torch.linalg.norm(ours[:rows].double() - theirs[:rows].double()) / torch.linalg.norm(ref) < 1e-2


def test_torch_opcheck_on_the_gpu():
    import gemmlab.torch  # noqa: F401

    a, b, offs, _, _ = _case([10, 0, 23], 64, 32, torch.bfloat16, True)
    a.requires_grad_()
    result = torch.library.opcheck(torch.ops.gemmlab.grouped_mm.default, (a, b, offs))
    assert set(result.values()) == {"SUCCESS"}, result


WGRAD = registry.get("grouped_wgrad")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("G", [1, 3, 32, 128])
def test_weight_grad_in_one_launch(G, dtype):
    """grouped_wgrad: C_g = X_g^T @ Y_g over each group's rows, the rows past a group's end
    kept out of its sum, an empty group's matrix zeros, the output poisoned first."""
    from gemmlab.core import grouped

    sizes = _sizes(G, random.Random(G + 7))
    T = sum(sizes) + 3
    g = torch.Generator(device="cuda").manual_seed(G)
    x = torch.randn(T, 200, device="cuda", generator=g).to(dtype)
    y = torch.randn(T, 136, device="cuda", generator=g).to(dtype)
    offs = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    out = torch.full((G, 200, 136), float("nan"), device="cuda", dtype=dtype)
    assert grouped.grouped_weight_grad(x, y, offs, out=out) is out
    assert grouped.last_grouped_plan().spec.name == "grouped_wgrad"
    start = 0
    for i, n in enumerate(sizes):
        if n == 0:
            assert not out[i].any(), "an empty group's gradient is zeros"
        else:
            ref = x[start : start + n].double().t() @ y[start : start + n].double()
            err = torch.linalg.norm(out[i].double() - ref) / torch.linalg.norm(ref)
            assert err < BOUND[dtype], (i, n, float(err))
        start += n


@pytest.mark.parametrize("params", WGRAD.configurations(), ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_weight_grad_every_configuration(params):
    from gemmlab.core import grouped

    sizes = [1, 0, 129, 64, 63, 333, 0, 65]
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(sum(sizes), 264, device="cuda", generator=g).to(torch.bfloat16)
    y = torch.randn(sum(sizes), 392, device="cuda", generator=g).to(torch.bfloat16)
    offs = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    out = grouped.grouped_weight_grad(x, y, offs, kernel="grouped_wgrad", **params)
    start = 0
    for i, n in enumerate(sizes):
        ref = x[start : start + n].double().t() @ y[start : start + n].double()
        if n:
            assert torch.linalg.norm(out[i].double() - ref) / torch.linalg.norm(ref) < 1e-2, (params, i)
        else:
            assert not out[i].any()
        start += n


@pytest.mark.parametrize("transposed", [True, False])
def test_backward_matches_autograd_of_a_loop_of_matmuls(transposed):
    """grad_a through the grouped kernel (b's other layout), grad_b through grouped_wgrad; rows
    in no group get zero gradient; the reference is torch's autograd of a loop in FP64."""
    import gemmlab.torch as gt

    sizes = [40, 0, 1, 129, 77]
    a, b, offs, bounds, _ = _case(sizes, 256, 384, torch.bfloat16, transposed, extra_rows=2)
    w = b.transpose(-2, -1).detach().clone() if transposed else b.detach().clone()
    w.requires_grad_()
    a = a.detach().clone().requires_grad_()
    out = gt.grouped_mm(a, w.transpose(-2, -1) if transposed else w, offs)
    up = torch.randn(out.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(9))
    up = up.to(torch.bfloat16)
    rows = sum(sizes)
    out[:rows].backward(up[:rows])
    a64, w64 = a.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    b64 = w64.transpose(-2, -1) if transposed else w64
    torch.cat([a64[s:e] @ b64[i] for i, (s, e) in enumerate(bounds)]).backward(up[:rows].double())
    for got, want in ((a.grad, a64.grad), (w.grad, w64.grad)):
        err = torch.linalg.norm(got.double() - want) / torch.linalg.norm(want)
        assert err < 2e-2, float(err)
    assert not a.grad[rows:].any() and not w.grad[1].any()  # rows in no group, the empty group


@pytest.mark.parametrize("transposed", [True, False])
def test_use_gemmlab_routes_torch_grouped_mm(monkeypatch, transposed):
    """torch._grouped_mm inside use_gemmlab(): the forward and the input's gradient on the grouped
    rung, the weights' gradient (autograd's 2-D x 2-D call) on grouped_wgrad, against FP64; a
    float32 call beside it stays PyTorch's."""
    import gemmlab.torch as gt
    from gemmlab.torch import routing

    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"this PyTorch ({torch.__version__}) has no torch._grouped_mm")
    seen = []
    for name in ("mm", "weight_grad"):
        real = routing.GROUPED[name]
        monkeypatch.setitem(routing.GROUPED, name, lambda *args, _f=real, _n=name: seen.append(_n) or _f(*args))
    sizes = [40, 0, 1, 129, 78]  # every row in a group
    a, b, offs, bounds, ref = _case(sizes, 256, 384, torch.bfloat16, transposed)
    w = (b.transpose(-2, -1) if transposed else b).detach().clone().requires_grad_()
    a = a.detach().clone().requires_grad_()
    up = torch.randn(a.shape[0], 384, device="cuda", generator=torch.Generator(device="cuda").manual_seed(9))
    up = up.to(torch.bfloat16)
    with gt.use_gemmlab(torch.bfloat16):
        out = torch._grouped_mm(a, w.transpose(-2, -1) if transposed else w, offs=offs)
        assert seen == ["mm"]
        out.backward(up)
    assert sorted(seen) == ["mm", "mm", "weight_grad"]
    _check(out, ref, bounds, torch.bfloat16, sum(sizes))
    a64, w64 = a.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    b64 = w64.transpose(-2, -1) if transposed else w64
    torch.cat([a64[s:e] @ b64[i] for i, (s, e) in enumerate(bounds)]).backward(up.double())
    for got, want in ((a.grad, a64.grad), (w.grad, w64.grad)):
        err = torch.linalg.norm(got.double() - want) / torch.linalg.norm(want)
        assert err < 2e-2, float(err)
    assert not w.grad[1].any()  # the empty group's weights


# -- torch._grouped_mm's other forms through torch.ops.gemmlab.grouped_mm -------------------------


def _form_case(form, dtype, seed=4):
    """Operands of one of torch._grouped_mm's other forms, with random group sizes (an empty
    group, one of one index, odd ones) and 5 indices of the grouped dimension in no group; the
    FP64 product of what the groups cover, and the covered indices."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    sizes = [37, 0, 1, 130, 64]
    ends = torch.tensor(sizes).cumsum(0)
    offs = ends.to(torch.int32).cuda()
    bounds = [(int(e) - s, int(e)) for s, e in zip(sizes, ends)]
    width, G, M, K, N = int(ends[-1]) + 5, len(sizes), 136, 72, 200

    def t(*shape):
        return torch.randn(*shape, device="cuda", generator=g).to(dtype).requires_grad_()

    if form == "2d2d":  # (M, width) @ (width, N) -> (G, M, N); self as autograd passes x.t()
        a, b = t(width, M).detach().t().requires_grad_(), t(width, N)
        ref = torch.stack([a[:, s:e].double() @ b[s:e].double() for s, e in bounds])
    elif form == "3d2d":  # (G, M, K) @ (K, width) -> (M, width), b row-major (copied) or not
        a, b = t(G, M, K), t(K, width)
        ref = torch.cat([a[i].double() @ b[:, s:e].double() for i, (s, e) in enumerate(bounds)], dim=1)
    else:
        a, b, offs = t(G, M, K), t(G, K, N), None
        ref = a.double() @ b.double()
    return a, b, offs, ref, int(ends[-1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("form", ["2d2d", "3d2d", "3d3d"])
def test_the_other_forms_and_their_gradients_against_fp64(form, dtype):
    """Each form's product and both gradients (which are the forms again) against FP64 autograd;
    an empty group's matrix (2-D x 2-D) zeros, what no group covers zero gradient; beside
    torch._grouped_mm where this PyTorch has it."""
    import gemmlab.torch as gt

    a, b, offs, ref, covered = _form_case(form, dtype)
    out = gt.grouped_mm(a, b, offs)
    mine = out[:, :covered] if form == "3d2d" else out
    assert mine.shape == ref.shape
    err = torch.linalg.norm(mine.double() - ref) / torch.linalg.norm(ref)
    assert err < BOUND[dtype], float(err)
    if form == "2d2d":
        assert not out[1].any()  # the empty group
    up = torch.randn(ref.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(8)).to(dtype)
    mine.backward(up)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    if form == "2d2d":
        starts = [(int(s), int(e)) for s, e in zip([0, *offs.tolist()[:-1]], offs.tolist())]
        ref64 = torch.stack([a64[:, s:e] @ b64[s:e] for s, e in starts])
    elif form == "3d2d":
        starts = [(int(s), int(e)) for s, e in zip([0, *offs.tolist()[:-1]], offs.tolist())]
        ref64 = torch.cat([a64[i] @ b64[:, s:e] for i, (s, e) in enumerate(starts)], dim=1)
    else:
        ref64 = a64 @ b64
    ref64.backward(up.double())
    for got, want, name in ((a.grad, a64.grad, "self"), (b.grad, b64.grad, "mat2")):
        err = torch.linalg.norm(got.double() - want) / torch.linalg.norm(want)
        assert err < 2 * BOUND[dtype], (name, float(err))
    if form == "2d2d":
        assert not a.grad[:, covered:].any() and not b.grad[covered:].any()
    if form == "3d2d":
        assert not b.grad[:, covered:].any()
    if hasattr(torch, "_grouped_mm") and dtype == torch.bfloat16:
        try:  # PyTorch's kernel refuses some layouts of some forms; where it answers, we agree
            theirs = torch._grouped_mm(a.detach(), b.detach(), offs=offs)
        except RuntimeError:
            return
        theirs = theirs[:, :covered] if form == "3d2d" else theirs
        assert torch.linalg.norm(mine.double() - theirs.double()) / torch.linalg.norm(ref) < 2e-2


def test_use_gemmlab_routes_the_batch_form():
    """Inside use_gemmlab(): torch._grouped_mm's 3-D x 3-D call (a batch) on gemmlab's batched
    product, against FP64."""
    import gemmlab.torch as gt

    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"this PyTorch ({torch.__version__}) has no torch._grouped_mm")
    a3, b3, _, ref3, _ = _form_case("3d3d", torch.bfloat16)
    with gt.use_gemmlab(torch.bfloat16):
        out3 = torch._grouped_mm(a3.detach(), b3.detach())
        plan = gemmlab.last_plan().describe()
    assert "wgmma" in plan, plan
    assert torch.linalg.norm(out3.double() - ref3) / torch.linalg.norm(ref3) < BOUND[torch.bfloat16]
