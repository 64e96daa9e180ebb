"""The FP8 rung (wgmma_fp8) on a Hopper GPU: gemmlab.matmul(a, b, scale_a=..., scale_b=...) on
PyTorch float8 tensors against the FP64 product of the dequantised operands, with the output
poisoned (NaN) first, on shapes that are not multiples of the tile (M = 1 included), every
kind of scale (extreme exponents included), every type pair and result type, and the
configurations.  gemmlab.last_plan() says which kernel ran.  Without a Hopper GPU every test
here is skipped; the host logic is tested on the CPU by test_wgmma_fp8_rules.py.

Run on the GPU: PYTHONPATH=src:tests python -m pytest -q tests/test_wgmma_fp8.py -s
(-s prints the promotion measurement of test_promotion_error_is_measured)."""

import math

import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.runtime import device as rt_device

torch = pytest.importorskip("torch")

SPEC = registry.get("wgmma_fp8")
hopper = pytest.mark.skipif(
    not rt_device.gpu_available() or rt_device.gpu_info(0).arch != "sm_90a", reason="needs a Hopper GPU (sm_90a)"
)
any_gpu = pytest.mark.skipif(not rt_device.gpu_available(), reason="needs a CUDA GPU")
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
# Relative Frobenius error against FP64 on the dequantised operands: the result's rounding
# (bfloat16: 8 bits), or for float32 results the sums: the products of FP8 values are exact
# in FP32, but the tensor cores add them with about 14 bits (DeepSeek-V3 report, 3.3.2;
# PROMOTE answers it), so the bound is loose; test_promotion_error_is_measured measures.
BOUND = {torch.bfloat16: 8e-3, torch.float32: 2e-3}


def _fp8(rows, cols, dtype, gen, spread=4.0):
    """A rows x cols FP8 tensor on the GPU of normal values times ``spread`` (within the type's
    range), and its FP64 copy (exact: every FP8 value is a double)."""
    limit = 448.0 if dtype == E4M3 else 57344.0
    x = (torch.randn(rows, cols, generator=gen, dtype=torch.float64) * spread).clamp(-limit, limit)
    x = x.to(dtype)
    return x.cuda(), x.double()


def _operands(M, N, K, da, db, gen):
    """a (M x K, row-major) and b (K x N, column-major: the transpose of a row-major N x K)."""
    a, a64 = _fp8(M, K, da, gen)
    bt, bt64 = _fp8(N, K, db, gen)
    return a, a64, bt.t(), bt64.t()


def _scales(kind, M, N, K, gen, lo=-4, hi=4):
    """Scales of ``kind`` as powers of two with exponents in [lo, hi] (exact in any reference)."""
    kb, nb = -(-K // 128), -(-N // 128)
    shapes = {"tensor": ((), ()), "row": ((M, 1), (1, N)), "block": ((M, kb), (nb, kb))}[kind]
    return tuple(torch.exp2(torch.randint(lo, hi + 1, s, generator=gen).float()).cuda() for s in shapes)


def _reference(a64, b64, sa, sb, kind):
    sa, sb = sa.double().cpu(), sb.double().cpu()
    if kind != "block":
        return (sa.reshape(-1, 1) * a64) @ (b64 * sb.reshape(1, -1))
    M, N = a64.shape[0], b64.shape[1]
    ref = torch.zeros(M, N, dtype=torch.float64)
    for kb in range(sa.shape[1]):
        ks = slice(128 * kb, 128 * kb + 128)
        ref += (a64[:, ks] @ b64[ks, :]) * sa[:, kb : kb + 1] * sb[:, kb].repeat_interleave(128)[:N].reshape(1, -1)
    return ref


def _check(
    M,
    N,
    K,
    kind="tensor",
    da=E4M3,
    db=E4M3,
    out_dtype=torch.bfloat16,
    alpha=1.0,
    beta=0.0,
    seed=0,
    scale_range=(-4, 4),
    **params,
):
    gen = torch.Generator().manual_seed(seed)
    a, a64, b, b64 = _operands(M, N, K, da, db, gen)
    sa, sb = _scales(kind, M, N, K, gen, *scale_range)
    c0 = torch.randn(M, N, generator=gen, dtype=torch.float64)
    out = c0.to(out_dtype).cuda() if beta else torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)
    c0 = c0.to(out_dtype).double()
    kernel = "wgmma_fp8" if params else "auto"
    gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out, alpha=alpha, beta=beta, kernel=kernel, **params)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    # Shapes with two readings compute the same product: blocks with one K-block and one
    # N-block read as outer scales, per-row scales of one row and one column as per tensor.
    same = kind == "block" and K <= 128 and N <= 128 or kind == "row" and M == 1 and N == 1
    assert p.spec.name == "wgmma_fp8" and (p.problem.scaling == kind or same), p.describe()
    ref = alpha * _reference(a64, b64, sa, sb, kind) + beta * c0
    got = out.double().cpu()
    bad = torch.isnan(got) | ((got - ref).abs() > 0.05 * ref.abs().max() + 1e-30)
    if bad.any():
        r, c = [int(x) for x in bad.nonzero()[0]]
        rows = bad.any(dim=1).nonzero().ravel()
        cols = bad.any(dim=0).nonzero().ravel()
        pytest.fail(
            f"{M}x{N}x{K} {kind} {da}x{db}->{out_dtype} {p.describe()}: {int(bad.sum())} wrong; first at ({r}, {c}): "
            f"{float(got[r, c])} vs {float(ref[r, c])}; rows {rows[:8].tolist()} ({len(rows)}), "
            f"cols {cols[:8].tolist()} ({len(cols)})"
        )
    err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref)) if torch.linalg.norm(ref) > 0 else 0.0
    assert err <= BOUND[out_dtype], f"{p.describe()}: relative error {err:.2e}"
    return err


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
def test_diagnostic_one_tile(kind):
    """128 x 128 x 128: one tile, one K-step; on failure the message says where it breaks."""
    _check(128, 128, 128, kind)


SHAPES = [(1, 1, 16), (1, 4096, 4096), (17, 33, 48), (129, 257, 400), (300, 200, 1040), (1000, 1000, 4096)]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_odd_shapes(shape, kind, out_dtype):
    _check(*shape, kind, out_dtype=out_dtype)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("da, db", [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3), (E5M2, E5M2)], ids=str)
@pytest.mark.parametrize("kind", ["row", "block"])
def test_every_type_pair(da, db, kind):
    _check(257, 383, 1040, kind, da, db, torch.float32)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("params", SPEC.configurations(), ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize("kind", ["row", "block"])
def test_every_configuration(params, kind):
    """Two tile-rows and columns past the edges, several K-steps (and a partial one), so that
    every block takes more than one tile on a GPU with few enough SMs, promotion windows end
    both on and off a window boundary."""
    _check(2 * params["BM"] + 17, 3 * params["BN"] - 5, 7 * 128 + 48, kind, **params)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
@pytest.mark.parametrize("exps", [(-60, -40), (40, 60), (-126, -100)], ids=["tiny", "huge", "near-fp32-min"])
def test_extreme_exponent_scales(kind, exps):
    """Scales far from 1 on one side, their inverse range on the other, so that the product stays
    in range: the kernel must multiply the two scales (or apply them in an order) that neither
    overflows nor flushes to zero in FP32."""
    lo, hi = exps
    gen = torch.Generator().manual_seed(3)
    M, N, K = 200, 300, 640
    a, a64, b, b64 = _operands(M, N, K, E4M3, E4M3, gen)
    sa, sb = _scales(kind, M, N, K, gen, lo, hi)
    sb = torch.exp2(-torch.log2(sb))  # the inverse exponents: sa * sb within 2^(hi - lo) of 1
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out)
    ref = _reference(a64, b64, sa, sb, kind)
    got = out.double().cpu()
    assert not torch.isnan(got).any() and not torch.isinf(got).any()
    err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[torch.float32], err


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_alpha_and_beta_with_out(out_dtype):
    _check(300, 500, 256, "row", out_dtype=out_dtype, alpha=-0.5, beta=2.0)


@hopper
@pytest.mark.gpu
def test_clusters_on_odd_shapes():
    _check(3 * 128 + 1, 260, 512, "row", CLUSTER=2, BM=128, BN=128, STAGES=4, PROMOTE=4)
    _check(3 * 64 + 1, 260, 512, "block", CLUSTER=2, BM=64, BN=64, STAGES=6, PROMOTE=1)


@hopper
@pytest.mark.gpu
def test_empty_products_and_k_zero():
    gen = torch.Generator().manual_seed(0)
    one = torch.ones((), device="cuda")
    a, _, b, _ = _operands(64, 32, 0, E4M3, E4M3, gen)
    out = gemmlab.matmul(a, b, scale_a=one, scale_b=one)
    assert out.shape == (64, 32) and not out.double().abs().sum()
    a, _, b, _ = _operands(0, 32, 64, E4M3, E4M3, gen)
    assert gemmlab.matmul(a, b, scale_a=one, scale_b=one).shape == (0, 32)


@hopper
@pytest.mark.gpu
def test_a_row_major_b_is_refused_by_name():
    gen = torch.Generator().manual_seed(0)
    a, _, b, _ = _operands(64, 64, 128, E4M3, E4M3, gen)
    one = torch.ones((), device="cuda")
    with pytest.raises(ValueError, match="b .* is not column-major with K contiguous \\(layout 'T'\\)"):
        gemmlab.matmul(a, b.contiguous(), scale_a=one, scale_b=one)


@hopper
@pytest.mark.gpu
def test_promotion_error_is_measured():
    """Whether promoting the wgmma sums into FP32 registers matters (the DeepSeek-V3 report
    found Hopper's FP8 MMA accumulates with about 14 bits): the FP32 result's error against
    FP64 with PROMOTE = 0 (the tensor cores' sums over the whole K), 1 and 4, over a long K.
    Printed (run with -s) for the docs page; each must stay within a loose bound."""
    errs = {}
    for promote in (1, 4):
        errs[promote] = _check(
            256,
            256,
            16384,
            "tensor",
            out_dtype=torch.float32,
            seed=5,
            BM=128,
            BN=128,
            STAGES=6,
            CLUSTER=1,
            PROMOTE=promote,
        )
    # Without promotion, measured apart: _check's bound may not hold.
    gen = torch.Generator().manual_seed(5)
    a, a64, b, b64 = _operands(256, 256, 16384, E4M3, E4M3, gen)
    one = torch.ones((), device="cuda")
    out = gemmlab.matmul(a, b, scale_a=one, scale_b=one, out_dtype="float32", kernel="wgmma_fp8", PROMOTE=0)
    ref = a64 @ b64
    errs[0] = float(torch.linalg.norm(out.double().cpu() - ref) / torch.linalg.norm(ref))
    print(f"\nFP8 256x256x16384, FP32 out, relative error against FP64 by PROMOTE: {errs}")
    assert errs[0] <= 5e-2 and all(math.isfinite(e) for e in errs.values())


@any_gpu
@pytest.mark.gpu
def test_another_gpu_is_refused_with_the_reason(monkeypatch):
    fake = rt_device.GPUInfo(0, "NVIDIA A100-SXM4-80GB", (8, 0), "sm_80", 108, 1410.0, 40 << 20, 163 << 10)
    monkeypatch.setattr(rt_device, "gpu_info", lambda ordinal=0: fake)
    gen = torch.Generator().manual_seed(0)
    a, _, b, _ = _operands(64, 64, 128, E4M3, E4M3, gen)
    one = torch.ones((), device="cuda")
    with pytest.raises(
        ValueError, match=r"'wgmma_fp8' does not run on NVIDIA A100-SXM4-80GB \(sm_80\): it needs sm_90a"
    ):
        gemmlab.matmul(a, b, scale_a=one, scale_b=one)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["tensor", "row"])
@pytest.mark.parametrize("fast", [False, True], ids=["promoted", "fast_accum"])
def test_scaled_mm_matches_torch_scaled_mm(kind, fast):
    """torch.ops.gemmlab.scaled_mm beside torch._scaled_mm (cuBLASLt) on the scalings both take."""
    import gemmlab.torch as gt

    gen = torch.Generator().manual_seed(7)
    M, N, K = 512, 384, 1024
    a, a64, b, b64 = _operands(M, N, K, E4M3, E4M3, gen)
    sa, sb = _scales(kind, M, N, K, gen)
    ours = gt.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    theirs = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    assert gemmlab.last_plan().params["PROMOTE"] == (0 if fast else SPEC.defaults()["PROMOTE"])
    ref = _reference(a64, b64, sa, sb, kind)
    for got in (ours, theirs):
        err = float(torch.linalg.norm(got.double().cpu() - ref) / torch.linalg.norm(ref))
        assert err <= BOUND[torch.bfloat16], err


# opcheck's test_schema is left out: it runs the op under a mode that compares its inputs
# before and after with arithmetic, which PyTorch does not define for float8 tensors ("mul_cuda"
# not implemented for 'Float8_e4m3fn').  The schema's promises (no argument mutated, none
# aliased by the result) are checked here without arithmetic instead.
OPCHECK_FP8_UTILS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
def test_scaled_mm_opcheck(kind):
    import gemmlab.torch  # noqa: F401

    gen = torch.Generator().manual_seed(8)
    a, _, b, _ = _operands(128, 256, 384, E4M3, E5M2, gen)
    sa, sb = _scales(kind, 128, 256, 384, gen)
    op = torch.ops.gemmlab.scaled_mm.default
    for out_dtype in (torch.bfloat16, torch.float32):
        result = torch.library.opcheck(op, (a, b, sa, sb), {"out_dtype": out_dtype}, test_utils=OPCHECK_FP8_UTILS)
        assert set(result) == set(OPCHECK_FP8_UTILS) and set(result.values()) == {"SUCCESS"}, result


@hopper
@pytest.mark.gpu
def test_scaled_mm_schema_holds_without_arithmetic():
    """What test_schema would check, byte for byte: the schema mutates and aliases nothing, and a
    call leaves every input as it was and returns a new tensor sharing memory with none."""
    import gemmlab.torch  # noqa: F401

    schema = torch.ops.gemmlab.scaled_mm.default._schema
    assert not schema.is_mutable
    for arg in list(schema.arguments) + list(schema.returns):
        assert arg.alias_info is None, (arg.name, arg.alias_info)
    gen = torch.Generator().manual_seed(9)
    a, _, b, _ = _operands(200, 300, 512, E4M3, E4M3, gen)
    for kind in ("tensor", "row", "block"):
        sa, sb = _scales(kind, 200, 300, 512, gen)
        inputs = (a, b, sa, sb)
        # Bytes of each input's elements (a 0-d float scale cannot be viewed as bytes itself).
        before = [x.detach().reshape(-1).clone().view(torch.uint8) for x in inputs]
        for fast in (False, True):
            out = torch.ops.gemmlab.scaled_mm.default(a, b, sa, sb, None, None, torch.bfloat16, fast)
            torch.cuda.synchronize()
            for x, was in zip(inputs, before):
                assert torch.equal(x.detach().reshape(-1).view(torch.uint8), was)
                storage = x.untyped_storage()
                lo, hi = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
                assert not lo <= out.data_ptr() < hi
            assert out.shape == (200, 300) and out.dtype == torch.bfloat16 and out.is_contiguous()


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
@pytest.mark.parametrize("shape", ["row", "column", "matrix"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_bias(kind, shape, out_dtype):
    """A bias of N added to every row (torch._scaled_mm's), a column (M, 1) or a whole matrix, in
    the result's dtype, after the scales and alpha, on odd shapes, out poisoned first or new:
    against FP64 of the dequantised operands."""
    gen = torch.Generator().manual_seed(21)
    for M, N, K, given in ((129, 257, 400, True), (300, 200, 1040, False), (1, 4096, 256, True)):
        a, a64, b, b64 = _operands(M, N, K, E4M3, E5M2, gen)
        sa, sb = _scales(kind, M, N, K, gen)
        bshape = {"row": (N,), "column": (M, 1), "matrix": (M, N)}[shape]
        bias64 = (torch.randn(bshape, generator=gen, dtype=torch.float64) * 8).to(out_dtype).double()
        bias = bias64.to(out_dtype).cuda()
        out = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype) if given else None
        got = gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out, alpha=-1.5, bias=bias, out_dtype=out_dtype)
        assert got is out or not given
        ref = -1.5 * _reference(a64, b64, sa, sb, kind) + bias64
        got = got.double().cpu()
        assert not torch.isnan(got).any()
        err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
        assert err <= BOUND[out_dtype], (M, N, K, err)


@hopper
@pytest.mark.gpu
def test_scaled_mm_bias_matches_torch_scaled_mm():
    """torch.ops.gemmlab.scaled_mm's bias beside torch._scaled_mm's (a bfloat16 vector of N)."""
    import gemmlab.torch as gt

    gen = torch.Generator().manual_seed(22)
    M, N, K = 512, 384, 1024
    a, a64, b, b64 = _operands(M, N, K, E4M3, E4M3, gen)
    sa, sb = _scales("tensor", M, N, K, gen)
    bias = (torch.randn(N, generator=gen) * 4).to(torch.bfloat16).cuda()
    ours = gt.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    theirs = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    ref = _reference(a64, b64, sa, sb, "tensor") + bias.double().cpu().reshape(1, -1)
    for got in (ours, theirs):
        err = float(torch.linalg.norm(got.double().cpu() - ref) / torch.linalg.norm(ref))
        assert err <= BOUND[torch.bfloat16], err
