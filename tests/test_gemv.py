"""gemv on the GPU: decode-sized x @ W.t() (op(B) column-major, the path that
stages op(A) in shared memory) against an FP64 reference, for the row counts
each MT serves (M = 1 to 16, and past 16: more passes), widths that are
multiples of nothing, operands off the 16-byte grid, alpha / beta, every
storage type, transposed op(A) and batches.  The output starts as NaN where
beta = 0, so an element the kernel never writes (or reads) shows."""

import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.runtime import device as rt_device

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
pytestmark = pytest.mark.gpu

DTYPES = [("float32", "float32"), ("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16"),
          ("bfloat16", "float32")]
# Rounding of the output type (the FP32 accumulation has its own term below).
OUT_EPS = {"float32": 0.0, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
# (K, N): odd widths (every load one element, K ends inside a chunk), a K of
# 16-byte rows that is no multiple of any chunk, K shorter than a warp's step.
SHAPES = [(1037, 331), (4104, 200), (8, 33)]


def _matrix(rows, cols, dtype, gen, offset=0):
    """A rows x cols row-major view ``offset`` elements into a fresh buffer, and its FP64 copy."""
    base = torch.empty(rows * cols + offset, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen)
    base = base.to(getattr(torch, dtype))
    view = base[offset:].view(rows, cols)
    return view, view.double()


def _check(M, N, K, dtype, out_dtype, alpha, beta, *, a_offset=0, w_offset=0, x_transposed=False, batch=None,
           shared_w=True, mt=None, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    lead = () if batch is None else (batch,)
    if x_transposed:   # op(A) column-major: a K x M array read through its transpose
        xt, xt64 = _matrix(K * (batch or 1), M, dtype, gen, a_offset)
        x, x64 = xt.view(*lead, K, M).transpose(-1, -2), xt64.view(*lead, K, M).transpose(-1, -2)
    else:
        x, x64 = _matrix(M * (batch or 1), K, dtype, gen, a_offset)
        x, x64 = x.view(*lead, M, K), x64.view(*lead, M, K)
    wb = 1 if shared_w or batch is None else batch
    w, w64 = _matrix(N * wb, K, dtype, gen, w_offset)
    if wb > 1:
        w, w64 = w.view(wb, N, K), w64.view(wb, N, K)
    ot = getattr(torch, out_dtype)
    c0 = torch.empty(*lead, M, N, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen).to(ot)
    out = c0.clone() if beta else torch.full((*lead, M, N), float("nan"), device="cuda", dtype=ot)
    params = {"MT": mt} if mt else {}
    gemmlab.matmul(x, w.transpose(-1, -2), out=out, alpha=alpha, beta=beta, kernel="gemv", **params)
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == "gemv"
    ref = alpha * (x64 @ w64.transpose(-1, -2)) + (beta * c0.double() if beta else 0)
    # FP32 sums of K products, then one rounding to the output type.
    scale = abs(alpha) * (x64.abs() @ w64.abs().transpose(-1, -2)) + (abs(beta) * c0.double().abs() if beta else 0)
    tol = 4 * (K + 8) * 2.0 ** -24 * scale + OUT_EPS[out_dtype] * ref.abs() + 1e-30
    bad = torch.isnan(out) | ((out.double() - ref).abs() > tol)
    if bad.any():
        idx = [int(i) for i in bad.nonzero()[0]]
        pytest.fail(f"{plan.name_expression} {M}x{N}x{K}: {int(bad.sum())} of {bad.numel()} wrong; first at {idx}: "
                    f"{float(out[tuple(idx)])} vs {float(ref[tuple(idx)])}")
    return plan


@pytest.mark.parametrize("M", [1, 2, 5, 8, 13, 16])
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("K, N", SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_rows_up_to_16(M, dtype, out_dtype, K, N, alpha, beta):
    """MT as auto sizes it: every row of C in one pass over op(B)."""
    mt = registry.get("gemv").sized_params(M, N, K, 132)["MT"]
    plan = _check(M, N, K, dtype, out_dtype, alpha, beta, mt=mt, seed=M)
    assert plan.params["MT"] == mt
    # the 16-byte loads where every stored row (x's, W's, out's) is a multiple of 16 bytes
    e, eo = (4 if dtype == "float32" else 2), (4 if out_dtype == "float32" else 2)
    assert (", true, " in plan.name_expression) == (K * e % 16 == 0 and N * eo % 16 == 0)


@pytest.mark.parametrize("M, mt", [(21, 16), (13, 4), (3, 1)])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16")])
def test_more_rows_than_a_pass_holds(M, mt, dtype, out_dtype):
    _check(M, 200, 4104, dtype, out_dtype, 1.0, 0.0, mt=mt)
    _check(M, 331, 1037, dtype, out_dtype, -1.5, 0.5, mt=mt)


@pytest.mark.parametrize("M", [2, 13])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("float16", "float16"), ("bfloat16", "float32")])
@pytest.mark.parametrize("where", ["x", "W"])
def test_operands_off_the_16_byte_grid(M, dtype, out_dtype, where):
    """A row-major x or W one element into its buffer: the one-element variant."""
    plan = _check(M, 264, 4104, dtype, out_dtype, 0.5, 2.0, mt=16 if M > 8 else 2,
                  **({"a_offset": 1} if where == "x" else {"w_offset": 1}))
    assert ", false, " in plan.name_expression


@pytest.mark.parametrize("M", [5, 16])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16")])
@pytest.mark.parametrize("K, N", [(1037, 331), (4104, 200)], ids=lambda s: str(s))
def test_transposed_x(M, dtype, out_dtype, K, N):
    """op(A) column-major (x stored K x M): staged one element a load."""
    plan = _check(M, N, K, dtype, out_dtype, 1.0, 0.0, x_transposed=True, mt=16 if M > 8 else 8)
    assert plan.name_expression.endswith("'T', 'T'>")


@pytest.mark.parametrize("M", [3, 16])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16")])
@pytest.mark.parametrize("shared_w", [True, False])
def test_batches(M, dtype, out_dtype, shared_w):
    """A batch of x (3-D) against one W (stride 0) or a W per batch."""
    _check(M, 200, 1040, dtype, out_dtype, 0.5, 2.0, batch=3, shared_w=shared_w, mt=16 if M > 8 else 4)
    _check(M, 331, 1037, dtype, out_dtype, 1.0, 0.0, batch=3, shared_w=shared_w, mt=16 if M > 8 else 4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_alpha_zero_reads_neither_operand(dtype):
    """alpha = 0: C = beta C, whatever x and W hold (NaN here)."""
    x = torch.full((5, 1037), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    w = torch.full((331, 1037), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    c0 = torch.ones(5, 331, device="cuda", dtype=getattr(torch, dtype))
    out = c0.clone()
    gemmlab.matmul(x, w.t(), out=out, alpha=0.0, beta=3.0, kernel="gemv", MT=8)
    torch.cuda.synchronize()
    assert gemmlab.last_plan().spec.name == "gemv"
    assert torch.equal(out, 3 * c0)
