"""matmul's ``bias``: alpha * op(a) @ op(b) + bias (+ beta * out), the bias broadcast as
NumPy broadcasts; added in wgmma's epilogue where it can be, after the product elsewhere.

CPU: validation (nothing runs on a bad bias), the strides the epilogue reads, the add
after the product.  GPU: every rung against an FP64 reference on odd shapes, out
poisoned first; on Hopper, that the fused calls add nothing after the product, and
that a repeated call with a new bias reads the new one.
"""

import numpy as np
import pytest

import gemmlab
from gemmlab.core import api, bias as bias_mod, planner
from gemmlab.runtime import device as rt_device


# -- CPU ------------------------------------------------------------------------------------


def _call(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    return planner.validate(a, b, None, 1.0, 0.0, False, False, None, None)


@pytest.mark.parametrize(
    "a_shape, b_shape, bias_shape, strides",
    [
        ((5, 3), (3, 7), (7,), (0, 1, 0)),  # nn.Linear's: one row added to every row
        ((5, 3), (3, 7), (1, 7), (0, 1, 0)),
        ((5, 3), (3, 7), (5, 1), (1, 0, 0)),  # a column
        ((5, 3), (3, 7), (5, 7), (7, 1, 0)),  # a whole matrix
        ((5, 3), (3, 7), (1,), (0, 0, 0)),  # one value
        ((4, 5, 3), (3, 7), (7,), (0, 1, 0)),  # a batch shares it
        ((4, 5, 3), (4, 3, 7), (4, 1, 7), (0, 1, 7)),  # one per matrix
        ((2, 4, 5, 3), (3, 7), (2, 4, 5, 7), (7, 1, 35)),  # the batch flattened: one stride
    ],
)
def test_epilogue_strides(a_shape, b_shape, bias_shape, strides):
    call = _call(a_shape, b_shape)
    bias = np.ones(bias_shape, np.float32)
    assert bias_mod.bias_view(bias, call, None).strides == strides


def test_epilogue_strides_none_where_three_cannot_say_it():
    call = _call((2, 4, 5, 3), (3, 7))
    bias = np.ones((4, 2, 5, 7), np.float32).transpose(1, 0, 2, 3)  # batch dimensions swapped
    assert bias_mod.bias_view(bias, call, None).strides is None
    call = _call((3,), (3, 7))  # a vector's 1 left the result
    assert bias_mod.bias_view(np.ones(7, np.float32), call, None).strides is None


def _refused(exc, match, a, b, bias, **kw):
    with pytest.raises(exc, match=match):
        gemmlab.matmul(a, b, bias=bias, **kw)


def test_bad_biases_are_refused_before_anything_runs():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal((3, 7)).astype(np.float32)
    _refused(TypeError, "must have the result's dtype, float32", a, b, np.ones(7, np.float64))
    _refused(ValueError, r"does not broadcast to the result's shape \(5, 7\)", a, b, np.ones(6, np.float32))
    _refused(ValueError, "does not broadcast", a, b, np.ones((2, 5, 7), np.float32))
    _refused(TypeError, "bias must be a CuPy array", a, b, [1.0] * 7)
    out = np.full((5, 7), np.nan, np.float32)
    _refused(ValueError, "shares memory with out", a, b, out[0], out=out)
    assert np.isnan(out).all()  # nothing written


def test_add_after_the_product_numpy():
    r = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert (bias_mod.add_bias(r, np.ones(3, np.float32)) == np.arange(1, 7).reshape(2, 3)).all()
    s = bias_mod.add_bias(np.float32(2)[()], np.float32(3))
    assert s == 5 and s.dtype == np.float32


@pytest.fixture
def adds(monkeypatch):
    """The number of biases added after a product (not in an epilogue) during a test."""
    seen = {"n": 0}
    add = api.add_bias

    def counted(result, bias):
        seen["n"] += 1
        return add(result, bias)

    monkeypatch.setattr(api, "add_bias", counted)
    return seen


# -- the emulated GPU (emulated_gpu.py: the kernels emulated from their contract) ------------


@pytest.fixture
def emu(monkeypatch):
    import emulated_gpu

    return emulated_gpu.install(monkeypatch)


def _emulated(emu, shape, seed, dtype="float16"):
    return emu.keep(np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype))


@pytest.mark.parametrize(
    "a_shape, b_shape, bias_shape",
    [
        ((37, 72), (72, 136), (136,)),
        ((37, 72), (72, 136), (37, 1)),
        ((37, 72), (72, 136), (37, 136)),
        ((5, 37, 72), (72, 136), (136,)),
        ((5, 37, 72), (5, 72, 136), (5, 1, 136)),
        ((1, 8), (8, 8), ()),
    ],
)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_emulated_wgmma_adds_the_bias_in_its_epilogue(emu, adds, a_shape, b_shape, bias_shape, alpha, beta):
    """A row or a column (or one value) in the epilogue; a whole matrix (which varies along
    both) after the product."""
    a, b = _emulated(emu, a_shape, 1), _emulated(emu, b_shape, 2)
    bias = _emulated(emu, bias_shape, 3)
    c0 = _emulated(emu, np.matmul(a, b).shape, 4)
    for _ in range(2):  # the first call and the prepared call's kept launch
        out = emu.keep(c0.copy() if beta else np.full(c0.shape, np.nan, c0.dtype))
        assert gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, bias=bias, kernel="wgmma") is out
        ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + bias + beta * c0.astype(np.float64)
        np.testing.assert_allclose(out.astype(np.float64), ref, rtol=0, atol=2e-2)
    matrix = len(bias_shape) >= 2 and bias_shape[-1] > 1 and bias_shape[-2] > 1
    assert adds["n"] == (2 if matrix else 0)


def test_emulated_transposed_out_swaps_the_bias_strides(emu, adds):
    a, b = _emulated(emu, (37, 72), 1), _emulated(emu, (72, 136), 2)
    bias = _emulated(emu, (136,), 3)
    out = emu.keep(np.full((136, 37), np.nan, np.float16)).T  # column-major: out^T = b^T a^T
    gemmlab.matmul(a, b, out=out, bias=bias, kernel="wgmma")
    ref = a.astype(np.float64) @ b.astype(np.float64) + bias
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=0, atol=2e-2)
    assert adds["n"] == 0


@pytest.mark.parametrize("dtype, kernel", [("float16", "wgmma"), ("float32", "auto")])
def test_emulated_repeated_call_refuses_a_bias_inside_out(emu, dtype, kernel):
    """The fast path of a kept signature checks the bias against out at every call, fused or not."""
    a, b = _emulated(emu, (37, 72), 1, dtype), _emulated(emu, (72, 136), 2, dtype)
    buf = emu.keep(np.zeros((2, 37, 136), dtype))
    gemmlab.matmul(a, b, out=buf[0], bias=buf[1, 0], kernel=kernel)  # apart: runs
    poisoned = emu.keep(np.full((37, 136), np.nan, dtype))
    with pytest.raises(ValueError, match="shares memory with out"):  # same signature, bias inside out
        gemmlab.matmul(a, b, out=poisoned, bias=poisoned[5], kernel=kernel)
    assert np.isnan(poisoned).all()


def test_emulated_split_k_fuses_the_bias_and_fp32_adds_it_after(emu, adds):
    """wgmma split over K adds its slices in the kernel, so its epilogue takes the bias as
    unsplit; FP32 (not on wgmma) adds it after the product."""
    a, b, bias = _emulated(emu, (40, 1024), 1), _emulated(emu, (1024, 72), 2), _emulated(emu, (72,), 3)
    got = gemmlab.matmul(a, b, bias=bias, kernel="wgmma", SPLITK=4)
    assert gemmlab.last_plan().params["SPLITK"] == 4
    np.testing.assert_allclose(got.astype(np.float64), a.astype(np.float64) @ b + bias, rtol=0, atol=0.1)
    assert adds["n"] == 0
    a32, b32, bias32 = (x.astype(np.float32) for x in (a, b, bias))
    got = gemmlab.matmul(emu.keep(a32), emu.keep(b32), bias=emu.keep(bias32))
    np.testing.assert_allclose(got, a32.astype(np.float64) @ b32 + bias32, rtol=1e-5, atol=1e-4)
    assert adds["n"] == 1


# -- GPU ------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not rt_device.gpu_available(), reason="needs a GPU")
hopper = pytest.mark.skipif(
    not rt_device.gpu_available() or rt_device.gpu_info(0).arch != "sm_90a", reason="needs a Hopper GPU (sm_90a)"
)
BOUND = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def _operands(shape, ops, dtype, seed):
    torch = pytest.importorskip("torch")
    M, N, K = shape[-3:]
    batch = shape[:-3]
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = getattr(torch, dtype)

    def make(rows, cols, layout):
        x = torch.rand(*batch, *((rows, cols) if layout == "N" else (cols, rows)), device="cuda", generator=g) * 2 - 1
        x = x.to(t)
        return x if layout == "N" else x.transpose(-1, -2)

    return make(M, K, ops[0]), make(K, N, ops[1]), g


def _check(
    shape,
    ops,
    dtype,
    out_dtype,
    bias_shape,
    *,
    alpha=1.0,
    beta=0.0,
    out_layout="N",
    kernel="auto",
    precision=None,
    seed=0,
    **params,
):
    torch = pytest.importorskip("torch")
    a, b, g = _operands(shape, ops, dtype, seed)
    ot = getattr(torch, out_dtype)
    bias = (torch.rand(*bias_shape, device="cuda", generator=g) * 2 - 1).to(ot)
    rshape = tuple(torch.broadcast_shapes(a.shape[:-1], b.shape[:-2] + (1,))) + (b.shape[-1],)
    c0 = (torch.rand(*rshape, device="cuda", generator=g) * 2 - 1).to(ot)
    if out_layout == "T":  # a column-major out: the kernel computes out^T
        out = torch.empty(*rshape[:-2], rshape[-1], rshape[-2], device="cuda", dtype=ot).transpose(-1, -2)
    else:
        out = torch.empty(rshape, device="cuda", dtype=ot)
    out.copy_(c0) if beta else out.fill_(float("nan"))
    got = gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, bias=bias, kernel=kernel, precision=precision, **params)
    assert got is out
    ref = alpha * (a.double() @ b.double()) + bias.double() + (beta * c0.double() if beta else 0)
    assert not torch.isnan(out).any()
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], (err, gemmlab.last_plan().describe())
    return a, b, bias, out


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float16"), ("float16", "float32")])
# Rows of 16-byte multiples, so that TMA reads every layout in place; no tile divides them.
@pytest.mark.parametrize(
    "shape",
    [(8, 8, 8), (8, 24, 8), (136, 264, 72), (304, 8, 64), (1000, 1000, 264)],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("bias_shape", ["row", "column", "matrix"])
def test_wgmma_adds_the_bias_in_its_epilogue(ops, dtype, out_dtype, shape, bias_shape, adds):
    M, N, _ = shape
    bs = {"row": (N,), "column": (M, 1), "matrix": (M, N)}[bias_shape]
    _check(shape, ops, dtype, out_dtype, bs, kernel="wgmma", seed=M + N)
    # a matrix that varies along both sides is added after the product
    assert gemmlab.last_plan().spec.name == "wgmma" and adds["n"] == (1 if bias_shape == "matrix" else 0)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("alpha, beta", [(0.5, 0.0), (0.5, 2.0), (0.0, 1.0)])
@pytest.mark.parametrize("out_layout", ["N", "T"])
def test_wgmma_bias_with_alpha_beta_and_a_transposed_out(alpha, beta, out_layout, adds):
    _check(
        (136, 260, 72),
        "NT",
        "bfloat16",
        "bfloat16",
        (260,),
        alpha=alpha,
        beta=beta,
        out_layout=out_layout,
        kernel="wgmma",
    )
    assert adds["n"] == (1 if alpha == 0 else 0)  # alpha == 0: run() and an add


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("bias_shape", [(72,), (6, 1, 72), (6, 50, 72)])
def test_wgmma_batch_bias_in_one_launch(bias_shape, adds):
    _check((6, 50, 72, 64), "NN", "bfloat16", "bfloat16", bias_shape, kernel="wgmma")
    assert adds["n"] == (1 if bias_shape == (6, 50, 72) else 0)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float32")])
# Rows of 16-byte multiples; no tile divides the first and last; 4096 x 768 is what 128 x 192 is for.
@pytest.mark.parametrize(
    "shape", [(520, 392, 264), (4096, 768, 768), (136, 776, 72)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("bias_shape", ["row", "column"])
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_wgmma_128x192_adds_the_bias_in_its_epilogue(ops, dtype, out_dtype, shape, bias_shape, alpha, beta, adds):
    """BN = 192 (three 64-column chunks of a 16-bit tile, six of FP32, in the TMA store; 24
    column pairs from the registers with beta != 0): a row's values per chunk, a column's
    per tile, nothing added after the product."""
    M, N, _ = shape
    bs = {"row": (N,), "column": (M, 1)}[bias_shape]
    _check(shape, ops, dtype, out_dtype, bs, alpha=alpha, beta=beta, kernel="wgmma", seed=M + N, BM=128, BN=192)
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == (128, 192) and adds["n"] == 0


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float16"), ("float16", "float32")])
# Rows of 16-byte multiples; no tile divides them; K of 2 to 70 K-steps.
@pytest.mark.parametrize(
    "shape", [(40, 1000, 4096), (136, 264, 72), (8, 520, 2104)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("bias_shape", ["row", "column"])
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_wgmma_split_k_adds_the_bias_in_its_epilogue(ops, dtype, out_dtype, shape, bias_shape, alpha, beta, adds):
    """Split over K, the tile's last slice adds the others' partial tiles in the kernel and
    runs the epilogue once: the bias added once, nothing after the product."""
    M, N, _ = shape
    bs = {"row": (N,), "column": (M, 1)}[bias_shape]
    _check(
        shape, ops, dtype, out_dtype, bs, alpha=alpha, beta=beta, kernel="wgmma", seed=M + N, BM=64, BN=128, SPLITK=4
    )
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and p.params["SPLITK"] == 4 and adds["n"] == 0


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("bias_shape", [(200,), (5, 1, 200), (5, 40, 1)])
def test_wgmma_split_k_batch_bias_in_one_launch(bias_shape, adds):
    _check((5, 40, 200, 2048), "NT", "bfloat16", "bfloat16", bias_shape, kernel="wgmma", BM=64, BN=128, SPLITK=3)
    assert gemmlab.last_plan().params["SPLITK"] == 3 and adds["n"] == 0


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("bias_shape", [(392,), (6, 1, 392), (6, 50, 1)])
def test_wgmma_128x192_batch_bias_in_one_launch(bias_shape, adds):
    _check((6, 50, 392, 64), "NT", "float16", "float16", bias_shape, kernel="wgmma", BM=128, BN=192)
    assert gemmlab.last_plan().params["BN"] == 192 and adds["n"] == 0


@hopper
@pytest.mark.gpu
def test_a_repeated_call_reads_each_new_bias(adds):
    torch = pytest.importorskip("torch")
    a, b, _ = _operands((96, 200, 64), "NT", "bfloat16", 3)
    for i in range(3):  # the same signature, a new bias (and result) each time: the kept launch
        bias = torch.full((200,), float(i + 1), device="cuda", dtype=torch.bfloat16)
        got = gemmlab.matmul(a, b, bias=bias)
        ref = a.double() @ b.double() + (i + 1)
        assert float((got.double() - ref).abs().max()) < 0.1, i
    assert adds["n"] == 0


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype, kernel, precision, shape, params",
    [
        ("float32", "auto", None, (136, 70, 50), {}),
        ("float32", "auto", "fp32_tc", (257, 300, 129), {}),
        ("bfloat16", "mma_pipelined", None, (136, 70, 56), {}),
        ("bfloat16", "gemv", None, (4, 64, 56), {}),
    ],
)
def test_every_other_rung_adds_the_bias_after_the_product(dtype, kernel, precision, shape, params, adds):
    _check(shape, "NN", dtype, dtype, (shape[1],), kernel=kernel, precision=precision, **params)
    assert adds["n"] == 1


@gpu
@pytest.mark.gpu
def test_a_vector_operand_takes_the_bias_after_the_product(adds):
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.rand(300, device="cuda", generator=g, dtype=torch.float32)
    b = torch.rand(300, 70, device="cuda", generator=g, dtype=torch.float32)
    bias = torch.rand(70, device="cuda", generator=g, dtype=torch.float32)
    got = gemmlab.matmul(a, b, bias=bias)
    assert got.shape == (70,)
    ref = a.double() @ b.double() + bias.double()
    assert float((got.double() - ref).abs().max() / ref.abs().max()) < 1e-5
    assert adds["n"] == 1


@hopper
@pytest.mark.gpu
def test_nn_linear_routed_adds_its_bias_in_the_epilogue(adds):
    torch = pytest.importorskip("torch")
    import gemmlab.torch as gt

    torch.manual_seed(0)
    lin = torch.nn.Linear(200, 300, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4, 33, 200, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with gt.use_gemmlab():
        y = lin(x)
        y.float().square().sum().backward()
    ref = x.detach().double() @ lin.weight.detach().double().t() + lin.bias.detach().double()
    assert float((y.detach().double() - ref).abs().max() / ref.abs().max()) < 2e-2
    assert adds["n"] == 0
    gb = lin.bias.grad.double()
    ref_gb = (2 * y.detach().float()).double().sum(dim=(0, 1))
    assert float((gb - ref_gb).abs().max() / ref_gb.abs().max()) < 2e-2
