"""batched_small and batched_small_mma on the GPU: batches of small matrices (attention within windows) against
an FP64 reference: Swin's 49 x 49 x 32 and 49 x 32 x 49, sides of 1 and of one tile
exactly, C larger than a block's tile (more blocks a matrix), K past one staged chunk,
every layout and storage type, alpha / beta, a shared operand (stride 0) and C off the
16-byte grid.  The output starts as NaN where beta = 0, so an element the kernel never
writes (or reads) shows."""

import pytest

import gemmlab
from gemmlab.runtime import device as rt_device
from fp32_sums_check import LAYOUTS, THIN_DTYPES as DTYPES, check_fp32_sums, operand as _operand

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
pytestmark = pytest.mark.gpu

# (M, N, K): Swin's Q @ K^T and P @ V; one tile exactly with two chunks of K; a side of 1;
# C of two by three tiles, K of three chunks with a short last one; odd everything.
SHAPES = [(49, 49, 32), (49, 32, 49), (64, 64, 64), (1, 33, 5), (130, 150, 70), (7, 3, 1), (17, 63, 33)]


def _check(
    M,
    N,
    K,
    dtype,
    out_dtype,
    alpha,
    beta,
    *,
    layout=("N", "N"),
    batch=5,
    shared_b=False,
    offset=0,
    seed=0,
    kernel="batched_small",
):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, a64 = _operand(M, K, dtype, layout[0], gen, batch, offset)
    b, b64 = _operand(K, N, dtype, layout[1], gen, None if shared_b else batch, offset)
    ot = getattr(torch, out_dtype)
    n = batch * M * N
    c0 = torch.empty(n, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen).to(ot).view(batch, M, N)
    buf = torch.full((n + offset,), float("nan"), device="cuda", dtype=ot)
    out = buf[offset:].view(batch, M, N)
    if beta:
        out.copy_(c0)
    gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel)
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == kernel, plan.describe()
    check_fp32_sums(out, a64, b64, c0, alpha, beta, K, out_dtype, plan)
    return plan


@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("M, N, K", SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: "".join(t))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_batched_small(M, N, K, dtype, out_dtype, layout, alpha, beta):
    _check(M, N, K, dtype, out_dtype, alpha, beta, layout=layout, seed=M + 3 * K)


@pytest.mark.parametrize("dtype, out_dtype", DTYPES[1:])
@pytest.mark.parametrize("M, N, K", SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: "".join(t))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_batched_small_mma(M, N, K, dtype, out_dtype, layout, alpha, beta):
    """The 16-bit rung on mma.sync: K ending inside a k16 step (zeros past it), C's rows and
    columns ending inside a warp's 16 rows and an n8 tile."""
    _check(M, N, K, dtype, out_dtype, alpha, beta, layout=layout, seed=M + 3 * K, kernel="batched_small_mma")


@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16")])
def test_a_shared_operand_and_operands_off_the_16_byte_grid(dtype, out_dtype):
    """op(B) shared by every matrix (broadcast), and every operand one element into its buffer."""
    for kernel in ("batched_small",) + (("batched_small_mma",) if dtype != "float32" else ()):
        _check(49, 49, 32, dtype, out_dtype, 1.0, 0.0, layout=("N", "T"), shared_b=True, seed=1, kernel=kernel)
        _check(49, 32, 49, dtype, out_dtype, 0.5, 2.0, offset=1, seed=2, kernel=kernel)


@pytest.mark.parametrize("dtype, kernel", [("float32", "batched_small"), ("bfloat16", "batched_small_mma")])
def test_alpha_zero_reads_neither_operand(dtype, kernel):
    """alpha = 0: C = beta C, whatever op(A) and op(B) hold (NaN here)."""
    t = getattr(torch, dtype)
    a = torch.full((6, 49, 32), float("nan"), device="cuda", dtype=t)
    b = torch.full((6, 32, 49), float("nan"), device="cuda", dtype=t)
    c0 = torch.ones(6, 49, 49, device="cuda", dtype=t)
    out = c0.clone()
    gemmlab.matmul(a, b, out=out, alpha=0.0, beta=3.0, kernel=kernel)
    torch.cuda.synchronize()
    assert gemmlab.last_plan().spec.name == kernel
    assert torch.equal(out, 3 * c0)


@pytest.mark.parametrize("precision", [None, "fp32_tc"])
def test_auto_runs_float32_window_attention_on_batched_small(precision):
    """kernel="auto" on float32 window attention (Swin's Q @ K^T over 1536 windows and heads, at
    least SMALL_MIN_ROUNDS blocks an SM): batched_small, fp32_tc too (IEEE FP32 on the CUDA
    cores); the NaN-poisoned C against FP64."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    q, q64 = _operand(49, 32, "float32", "N", gen, 1536)
    k, k64 = _operand(32, 49, "float32", "T", gen, 1536)
    out = torch.full((1536, 49, 49), float("nan"), device="cuda", dtype=torch.float32)
    gemmlab.matmul(q, k, out=out, precision=precision)
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == "batched_small", plan.describe()
    check_fp32_sums(out, q64, k64, torch.zeros_like(out), 1.0, 0.0, 32, "float32", plan)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_auto_runs_16_bit_window_attention_on_batched_small_mma(dtype):
    """kernel="auto" on 16-bit window attention at a head of 32 (Q @ K^T over 1536 windows and
    heads): batched_small_mma where mma.sync runs; P @ V (K = 49 tokens, two staged chunks)
    stays on the tiled rungs.  The NaN-poisoned C against FP64."""
    gen = torch.Generator(device="cuda").manual_seed(6)
    q, q64 = _operand(49, 32, dtype, "N", gen, 1536)
    k, k64 = _operand(32, 49, dtype, "T", gen, 1536)
    out = torch.full((1536, 49, 49), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    gemmlab.matmul(q, k, out=out)
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == "batched_small_mma", plan.describe()
    check_fp32_sums(out, q64, k64, torch.zeros_like(out), 1.0, 0.0, 32, dtype, plan)
    p, v = out, k.transpose(-1, -2).contiguous()
    gemmlab.matmul(p, v)
    assert gemmlab.last_plan().spec.name != "batched_small_mma"
