"""The tensor-core ladder against an FP64 reference computed from the same
(rounded) inputs, on odd shapes, with the output poisoned first."""

import numpy as np
import pytest

import gemmlab
from gemmlab.core import planner
from gemmlab.kernels import registry
from gemmlab.tools.verify import random_matrix

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SHAPES = [(1, 1, 1), (7, 13, 5), (33, 65, 17), (127, 129, 255), (300, 70, 1000), (16, 16, 4096)]
# The 16-bit rungs (wgmma_fp8 multiplies FP8 only: tests/test_wgmma_fp8.py).
# The rungs gemmlab.matmul runs (not those with a call of their own, as grouped's).
TENSOR = [s.name for s in registry.ladder("tensor") if "float16" in s.dtypes and not s.own_call] + ["auto"]
# Bounds on the relative Frobenius error against FP64 on the rounded inputs, so
# that only the accumulation and the output rounding count: the tensor cores'
# FP32 accumulation does not round to nearest, so allow 1e-4 at K up to 4096
# (a wrong element or tile gives errors near 1); a 16-bit output adds its own
# rounding (2^-11 for FP16, 2^-8 for BF16, relative).
BOUND = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}


def _inputs(M, N, K, dtype, rng):
    a = torch.from_numpy(random_matrix(M, K, "uniform", rng)).cuda()
    b = torch.from_numpy(random_matrix(K, N, "uniform", rng)).cuda()
    if dtype == "tf32":
        return a, b, a.double(), b.double()
    t = getattr(torch, dtype)
    a, b = a.to(t), b.to(t)
    return a, b, a.double(), b.double()


def _tf32_round(x):
    """x rounded to TF32 (10 mantissa bits), as the tensor cores see it."""
    bits = x.float().view(torch.int32)
    bits = (bits + 0x1000) & ~0x1FFF
    return bits.view(torch.float32).double()


@pytest.mark.parametrize("kernel", TENSOR)
@pytest.mark.parametrize(
    "dtype, out_dtype",
    [
        ("float16", "float32"),
        ("float16", "float16"),
        ("bfloat16", "float32"),
        ("bfloat16", "bfloat16"),
        ("tf32", "float32"),
    ],
)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_tensor_kernel_matches_fp64(kernel, dtype, out_dtype, shape, alpha, beta):
    if kernel != "auto" and dtype not in registry.get(kernel).dtypes:
        pytest.skip(f"{kernel} computes {', '.join(registry.get(kernel).dtypes)} only (wgmma's steps: 16-bit)")
    M, N, K = shape
    rng = np.random.default_rng(M * 7 + N * 3 + K)
    a, b, a64, b64 = _inputs(M, N, K, dtype, rng)
    if dtype == "tf32":
        a64, b64 = _tf32_round(a), _tf32_round(b)
    ot = getattr(torch, out_dtype)
    c0 = (
        torch.from_numpy(random_matrix(M, N, "uniform", rng)).cuda().to(ot)
        if beta
        else torch.full((M, N), float("nan"), device="cuda", dtype=ot)
    )
    out = c0.clone()
    kw = {"precision": "tf32"} if dtype == "tf32" else {}
    gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel, **kw)
    torch.cuda.synchronize()
    ref = alpha * (a64 @ b64) + (beta * c0.double() if beta else 0)
    assert not torch.isnan(out).any(), "elements unwritten or NaN"
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"


def test_default_result_dtype_is_the_inputs():
    a = torch.rand((40, 30), device="cuda", dtype=torch.float16)
    b = torch.rand((30, 20), device="cuda", dtype=torch.float16)
    assert gemmlab.matmul(a, b).dtype == torch.float16
    assert gemmlab.matmul(a, b, out_dtype="float32").dtype == torch.float32
    f = torch.rand((40, 30), device="cuda")
    assert gemmlab.matmul(f, f.t().contiguous(), precision="tf32").dtype == torch.float32


def test_alpha_zero_reads_neither_a_nor_b_in_16_bit():
    a = torch.full((33, 17), float("nan"), device="cuda", dtype=torch.float16)
    b = torch.full((17, 40), float("nan"), device="cuda", dtype=torch.float16)
    c0 = torch.rand((33, 40), device="cuda", dtype=torch.float16)
    out = c0.clone()
    gemmlab.matmul(a, b, out=out, alpha=0.0, beta=0.5)
    assert torch.equal(out, (c0.float() * 0.5).half())


# -- mma_pipelined: every configuration, both copy variants, padded and misaligned operands --------

PAIRS = [
    ("float16", "float32"),
    ("float16", "float16"),
    ("bfloat16", "float32"),
    ("bfloat16", "bfloat16"),
    ("tf32", "float32"),
]
MMA = registry.get("mma_pipelined")


def _operand(rows, cols, dtype, rng, ld=None, offset=0):
    """A rows x cols matrix of random values (rounded to dtype; float32 storage for tf32) as a view
    with leading dimension ld (default cols) starting `offset` elements into its buffer, and its FP64
    copy as the kernel sees it (rounded to TF32 for tf32).  The padding holds NaN."""
    ld = ld or cols
    t = torch.float32 if dtype == "tf32" else getattr(torch, dtype)
    buf = torch.full((offset + rows * ld + 8,), float("nan"), device="cuda", dtype=t)
    view = buf[offset : offset + rows * ld].view(rows, ld)[:, :cols]
    view.copy_(torch.from_numpy(random_matrix(rows, cols, "uniform", rng)).cuda().to(t))
    ref = _tf32_round(view) if dtype == "tf32" else view.double()
    return view, ref, buf


def _aligned(*views):
    """What matmul decides about 16-byte copies for these operands (a, b, out)."""
    a, b, o = views
    call = planner.validate(a, b, o, 1.0, 1.0, False, False, "tf32" if a.dtype == torch.float32 else None, None)
    return planner.kernel_view(call).aligned16()


def _launch_forced_aligned(a, b, out, alpha, beta, dtype, out_dtype, **params):
    """mma_pipelined's 16-byte-copy variant on these views, launched directly.
    matmul picks that variant only when every stored row is a multiple of 16
    bytes (one rule for all rungs); the variant itself also takes rows whose
    width is ragged but whose starts are 16 bytes apart, clipping the last chunk."""
    from gemmlab.core import executor
    from gemmlab.runtime.device import gpu_info

    M, K = a.shape
    N = b.shape[1]
    p = gemmlab.plan("mma_pipelined", M, N, K, aligned16=True, dtype=dtype, out_dtype=out_dtype, **params)
    executor.run_plan(
        p,
        gpu_info(0),
        torch.cuda.current_stream().cuda_stream,
        a.data_ptr(),
        a.stride(0),
        b.data_ptr(),
        b.stride(0),
        out.data_ptr(),
        out.stride(0),
        alpha,
        beta,
    )


def _run_mma(
    M,
    N,
    K,
    dtype,
    out_dtype,
    rng,
    lds=(None, None, None),
    offsets=(0, 0, 0),
    alpha=0.5,
    beta=2.0,
    force_aligned=False,
    **params,
):
    a, a64, _ = _operand(M, K, dtype, rng, lds[0], offsets[0])
    b, b64, _ = _operand(K, N, dtype, rng, lds[1], offsets[1])
    out, c64, obuf = _operand(M, N, out_dtype, rng, lds[2], offsets[2])
    kw = {"precision": "tf32"} if dtype == "tf32" else {}
    if force_aligned:
        _launch_forced_aligned(a, b, out, alpha, beta, dtype, out_dtype, **params)
    else:
        gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel="mma_pipelined", **kw, **params)
    torch.cuda.synchronize()
    ref = alpha * (a64 @ b64) + beta * c64
    assert not torch.isnan(out).any(), "elements unwritten or NaN"
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"
    ld = out.stride(0)
    pad = obuf[offsets[2] : offsets[2] + M * ld].view(M, ld)[:, N:]
    assert torch.isnan(pad).all(), "the padding of out's rows was written"
    return a, b, out


@pytest.mark.parametrize("params", MMA.configurations(), ids=lambda p: f"{p['BM']}x{p['BN']}-s{p['STAGES']}")
@pytest.mark.parametrize("dtype, out_dtype", PAIRS)
@pytest.mark.parametrize("shape", [(200, 264, 328), (127, 129, 255)], ids=lambda s: "x".join(map(str, s)))
def test_mma_pipelined_every_configuration(params, dtype, out_dtype, shape):
    """200 x 264 x 328 has 16-byte rows (the cp.async path), 127 x 129 x 255 does not (narrow copies);
    neither is a multiple of any tile, and K ends inside a stage."""
    rng = np.random.default_rng(sum(shape) + 31 * len(dtype))
    a, b, out = _run_mma(*shape, dtype, out_dtype, rng, **params)
    assert _aligned(a, b, out) is (shape[2] == 328)


@pytest.mark.parametrize("dtype, out_dtype", PAIRS)
@pytest.mark.parametrize("shape", [(33, 65, 17), (64, 128, 64), (130, 260, 96)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("small", [False, True], ids=["default", "64x64"])
def test_mma_pipelined_misaligned_views(dtype, out_dtype, shape, small):
    """a, b and out each start one element into their buffers: 2- or 4-byte aligned, so the kernel's
    variant with narrow copies runs (ordinary 16-bit loads, or 4-byte cp.async for TF32)."""
    rng = np.random.default_rng(7 * sum(shape) + small)
    params = {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 4} if small else {}
    a, b, out = _run_mma(*shape, dtype, out_dtype, rng, offsets=(1, 1, 1), **params)
    assert _aligned(a, b, out) is False


@pytest.mark.parametrize("ops", ["TN", "NT", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", PAIRS[:4])
@pytest.mark.parametrize(
    "shape, offset",
    [((200, 264, 328), 0), ((127, 129, 255), 0), ((130, 260, 96), 1)],
    ids=["16-byte rows", "ragged rows", "misaligned"],
)
@pytest.mark.parametrize("small", [False, True], ids=["default", "64x64"])
def test_mma_pipelined_reads_16bit_operands_in_every_layout(ops, dtype, out_dtype, shape, offset, small):
    """op(A) and op(B) as transposed views (A stored K x M: ldmatrix.trans; B stored N x K:
    plain ldmatrix), 16-byte copies where the stored rows allow them, narrow ones otherwise and
    for views one element into their buffers; the rung itself runs, no fallback, and out's
    padding stays untouched."""
    M, N, K = shape
    rng = np.random.default_rng(sum(shape) + 3 * len(dtype) + ord(ops[0]) + 2 * ord(ops[1]) + small)
    ta, tb = ops[0] == "T", ops[1] == "T"
    a_st, a64, _ = _operand(K if ta else M, M if ta else K, dtype, rng, offset=offset)
    b_st, b64, _ = _operand(N if tb else K, K if tb else N, dtype, rng, offset=offset)
    a, b = (a_st.t() if ta else a_st), (b_st.t() if tb else b_st)
    a64, b64 = (a64.t() if ta else a64), (b64.t() if tb else b64)
    out, c64, obuf = _operand(M, N, out_dtype, rng, ld=N + 8)
    params = {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 4} if small else {}
    gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel="mma_pipelined", **params)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "mma_pipelined" and not p.fallback_reason, p.describe()
    assert p.name_expression.endswith(f", '{ops[0]}', '{ops[1]}'>"), p.name_expression
    assert p.problem.aligned16 is (K == 328 and offset == 0), p.describe()
    ref = 0.5 * (a64 @ b64) + 2.0 * c64
    assert not torch.isnan(out).any(), "elements unwritten or NaN"
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"
    assert torch.isnan(obuf[: M * (N + 8)].view(M, N + 8)[:, N:]).all(), "the padding of out's rows was written"


@pytest.mark.parametrize(
    "params", [c for c in MMA.configurations() if c["WM"] == 32], ids=lambda p: f"bk{p['BK']}-s{p['STAGES']}"
)
@pytest.mark.parametrize("dtype, out_dtype", PAIRS[:4])
@pytest.mark.parametrize(
    "shape",
    [(97, 131, 1001), (65, 67, 97), (70, 90, 65), (33, 40, 40), (129, 257, 2049)],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("ops", ["NN", "TT"])
def test_mma_pipelined_deferred_copies_over_k(params, dtype, out_dtype, shape, ops):
    """16-bit operands off the grid on the 64 x 64 tiles: each K-step's loads land in their stage
    one K-step after they are issued (DEFER in 03_mma_pipelined.cu).  K of many K-steps, of as
    many as the prologue fills or fewer, and ending inside a K-step; both layouts' copies."""
    M, N, K = shape
    rng = np.random.default_rng(sum(shape) + params["BK"] + params["STAGES"] + len(dtype) + ord(ops[0]))
    ta, tb = ops[0] == "T", ops[1] == "T"
    a_st, a64, _ = _operand(K if ta else M, M if ta else K, dtype, rng, offset=1)
    b_st, b64, _ = _operand(N if tb else K, K if tb else N, dtype, rng, offset=1)
    a, b = (a_st.t() if ta else a_st), (b_st.t() if tb else b_st)
    a64, b64 = (a64.t() if ta else a64), (b64.t() if tb else b64)
    out, c64, obuf = _operand(M, N, out_dtype, rng, ld=N + 8)
    gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel="mma_pipelined", **params)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "mma_pipelined" and not p.problem.aligned16 and p.params == params, p.describe()
    ref = 0.5 * (a64 @ b64) + 2.0 * c64
    assert not torch.isnan(out).any(), "elements unwritten or NaN"
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"
    assert torch.isnan(obuf[: M * (N + 8)].view(M, N + 8)[:, N:]).all(), "the padding of out's rows was written"


@pytest.mark.parametrize("dtype, out_dtype", PAIRS)
@pytest.mark.parametrize("shape", [(100, 70, 90), (300, 250, 37)], ids=lambda s: "x".join(map(str, s)))
def test_mma_pipelined_padded_rows_clip_ragged_chunks(dtype, out_dtype, shape):
    """Rows padded to a multiple of 16 bytes, widths K and N not: the 16-byte copies (launched
    directly, see _launch_forced_aligned) run, and the
    chunk that straddles the end of a row reads only its first bytes (cp.async src-size) -- the
    padding holds NaN, so a chunk read whole would poison the result; the output's padding must
    stay untouched."""
    M, N, K = shape
    rng = np.random.default_rng(M + N + K)
    e, eo = (4 if dtype == "tf32" else 2), (4 if out_dtype in ("float32",) else 2)
    up = lambda n, el: -(-n // (16 // el)) * (16 // el)  # noqa: E731
    a, b, out = _run_mma(M, N, K, dtype, out_dtype, rng, lds=(up(K, e), up(N, e), up(N, eo)), force_aligned=True)
    assert _aligned(a, b, out) is False  # matmul itself would take the narrow copies (ragged widths)


@pytest.mark.parametrize("small", [False, True], ids=["default", "64x64"])
@pytest.mark.parametrize("offset", [0, 1], ids=["16-byte copies", "4-byte copies"])
def test_mma_pipelined_tf32_rounds_to_nearest_and_keeps_non_finite(small, offset):
    """TF32 operands are rounded to nearest (ties away), not truncated: a = 1 + 3 * 2^-12 and the tie
    b = 1 + 2^-11 both round to 1 + 2^-10, so over K = 8 every output is 8 (1 + 2^-10)^2 (truncation
    gives 8).  The rounding must leave non-finite values alone: a NaN whose bits are 0x7fffffff
    (adding half an ulp to its bits would wrap to -0) and an infinity reach the output."""
    M, N, K = 70, 40, 8
    abuf = torch.full((offset + M * K,), 1 + 3 * 2.0**-12, device="cuda", dtype=torch.float32)
    bbuf = torch.full((offset + K * N,), 1 + 2.0**-11, device="cuda", dtype=torch.float32)
    a, b = abuf[offset:].view(M, K), bbuf[offset:].view(K, N)
    a.view(torch.int32)[3, 5] = 0x7FFFFFFF
    a[66, 2] = float("inf")
    out = torch.empty((M, N), device="cuda", dtype=torch.float32)
    params = {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 4} if small else {}
    gemmlab.matmul(a, b, out=out, precision="tf32", kernel="mma_pipelined", **params)
    torch.cuda.synchronize()
    want = 8 * (1 + 2.0**-10) ** 2
    rows = [r for r in range(M) if r not in (3, 66)]
    assert torch.equal(out[rows], torch.full_like(out[rows], want)), out[rows].unique()
    assert torch.isnan(out[3]).all() and torch.isposinf(out[66]).all()
