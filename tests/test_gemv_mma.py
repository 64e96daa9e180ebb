"""gemv_mma: x @ W.t() for a few rows of 16-bit x on the tensor cores (gemv/03_gemv_mma.cu).

CPU: which products kernel="auto" gives it and why it passes the others on.  GPU: against
FP64 with the output poisoned (NaN where beta = 0), for the row counts of one and two n8
tiles and past them (more passes), N of no multiple of its 16 rows, K whose last step is
partial (rows padded to the 16-byte grid), alpha / beta, both output types, batches with
one W or a W each, and operands off the 16-byte grid (handed to gemv)."""

import dataclasses

import pytest

import gemmlab
from gemmlab.core.choose import GPU, Product, choose
from gemmlab.kernels import registry
from gemmlab.runtime import device as rt_device
from fp32_sums_check import check_fp32_sums

H200 = GPU(arch="sm_90a", sm_count=132, slug="nvidia-h200", name="NVIDIA H200")
A100 = GPU(arch="sm_80", sm_count=108, slug="nvidia-a100", name="NVIDIA A100")
T4 = GPU(arch="sm_75", sm_count=40, slug="tesla-t4", name="Tesla T4")


def _bf16(M, N, K, **kw):
    return Product(M, N, K, dtype="bfloat16", out_dtype="bfloat16", op_a="N", op_b="T", **kw)


# -- the choice (CPU) ------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", [H200, A100], ids=["sm_90a", "sm_80"])
@pytest.mark.parametrize("M, N, mt", [(1, 9216, 8), (4, 14336, 8), (8, 14336, 8), (9, 2048, 16), (16, 1024, 16)])
def test_auto_takes_decode_rows_on_sm80_and_later(gpu, M, N, mt):
    """1..8 rows over any W; 9..16 over a W of at most GEMV_MMA_WIDE_MAX_BYTES (16 MiB)."""
    c = choose(_bf16(M, N, 4096), gpu)
    assert (c.rung, c.params, c.passed_over, c.fallbacks) == ("gemv_mma", {"MT": mt}, (), ())
    fp16 = choose(dataclasses.replace(_bf16(M, N, 4096), dtype="float16", out_dtype="float32"), gpu)
    assert fp16.rung == "gemv_mma"


@pytest.mark.parametrize(
    "product, gpu, why",
    [
        (_bf16(17, 4096, 4096), H200, "gemv_mma takes 1..16 rows, not M = 17"),
        (_bf16(16, 14336, 4096), H200, "gemv_mma takes 9..16 rows only over a W of at most 16 MiB, not 112"),
        (_bf16(1, 128256, 3072), H200, "gemv_mma: one row over 128256 rows of W (>= 12288) streams faster on gemv"),
        (_bf16(4, 4096, 256, batch=32), H200, "gemv_mma: rows of W of 256 values leave its warps"),
        (_bf16(4, 4096, 4096), T4, "gemv_mma needs mma.sync on sm_80 or later (sm_75)"),
        (dataclasses.replace(_bf16(4, 4096, 4096), op_b="N"), H200, "gemv_mma takes x @ W.t() (layouts NT), not NN"),
        (_bf16(4, 4096, 4095, aligned16=False, rows_aligned16="C"), H200, "gemv_mma: rows of x or W off"),
        (Product(4, 4096, 4096, op_b="T"), H200, "gemv_mma takes 16-bit products, not float32"),
    ],
    ids=[
        "M=17",
        "M=16 over a large W",
        "one row over a tall W",
        "short K",
        "sm_75",
        "W row-major",
        "rows off the grid",
        "float32",
    ],
)
def test_auto_passes_it_over_saying_why(product, gpu, why):
    c = choose(product, gpu)
    assert c.rung != "gemv_mma"
    if product.dtype != "float32":
        assert c.passed_over[0].startswith(why), c.passed_over


def test_asked_for_on_rows_off_the_grid_it_hands_them_to_gemv():
    c = choose(dataclasses.replace(_bf16(4, 4096, 4095, aligned16=False), kernel="gemv_mma"), H200)
    assert c.rung == "gemv" and "gemv_mma cannot take these operands: rows of A and B off" in c.fallbacks[0]


def test_it_does_not_build_before_sm80():
    spec = registry.get("gemv_mma")
    assert not spec.builds_for("sm_75") and spec.builds_for("sm_80") and spec.builds_for("sm_90a")


# -- on the GPU ------------------------------------------------------------------------------

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
gpu = pytest.mark.gpu

DTYPES = [("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float16", "float16"), ("float16", "float32")]
# (K, N): K in rows padded to the 16-byte grid with a partial last step; K a multiple of 8 but
# not of a warp's slice; K of a single step per warp; N of no multiple of 16 (a block's rows).
SHAPES = [(1037, 331), (4104, 200), (520, 17), (3000, 1000)]


def _padded(rows, cols, dtype, gen, batch=None):
    """rows x cols values in rows padded to a multiple of 8 elements (16 bytes), and FP64."""
    lead = () if batch is None else (batch,)
    width = -(-cols // 8) * 8
    base = torch.empty(*lead, rows, width, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen)
    view = base.to(getattr(torch, dtype))[..., :cols]
    return view, view.double()


def _check(M, N, K, dtype, out_dtype, alpha=1.0, beta=0.0, *, batch=None, shared_w=True, seed=0, mt=None):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, x64 = _padded(M, K, dtype, gen, batch)
    w, w64 = _padded(N, K, dtype, gen, None if shared_w else batch)
    lead = () if batch is None else (batch,)
    ot = getattr(torch, out_dtype)
    c0 = torch.empty(*lead, M, N, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen).to(ot)
    out = c0.clone() if beta else torch.full((*lead, M, N), float("nan"), device="cuda", dtype=ot)
    kwargs = {"MT": mt} if mt else {}
    gemmlab.matmul(x, w.transpose(-1, -2), out=out, alpha=alpha, beta=beta, kernel="gemv_mma", **kwargs)
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == "gemv_mma"
    check_fp32_sums(out, x64, w64.transpose(-1, -2), c0, alpha, beta, K, out_dtype, plan)
    return plan


@gpu
@pytest.mark.parametrize("M", [1, 2, 5, 8, 9, 13, 16])
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("K, N", SHAPES, ids=str)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_rows_up_to_16(M, dtype, out_dtype, K, N, alpha, beta):
    mt = registry.get("gemv_mma").rules.size(M, N, K, 132)["MT"]
    plan = _check(M, N, K, dtype, out_dtype, alpha, beta, seed=M, mt=mt)
    assert plan.params["MT"] == (8 if M <= 8 else 16)


@gpu
@pytest.mark.parametrize("M, mt", [(17, 16), (40, 16), (20, 8)])
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float32")])
def test_more_rows_than_a_pass_holds(M, mt, dtype, out_dtype):
    _check(M, 331, 1037, dtype, out_dtype, -1.5, 0.5, mt=mt)


@gpu
@pytest.mark.parametrize("M", [3, 16])
@pytest.mark.parametrize("shared_w", [True, False])
def test_batches(M, shared_w):
    _check(M, 200, 1040, "bfloat16", "bfloat16", 0.5, 2.0, batch=3, shared_w=shared_w)
    _check(M, 331, 1037, "float16", "float32", 1.0, 0.0, batch=3, shared_w=shared_w)


@gpu
def test_alpha_zero_reads_neither_operand():
    x = torch.full((5, 1040), float("nan"), device="cuda", dtype=torch.bfloat16)
    w = torch.full((331, 1040), float("nan"), device="cuda", dtype=torch.bfloat16)
    c0 = torch.ones(5, 331, device="cuda", dtype=torch.bfloat16)
    out = c0.clone()
    gemmlab.matmul(x, w.t(), out=out, alpha=0.0, beta=3.0, kernel="gemv_mma")
    torch.cuda.synchronize()
    assert gemmlab.last_plan().spec.name == "gemv_mma" and torch.equal(out, 3 * c0)


@gpu
@pytest.mark.parametrize("M, N, K", [(4, 14336, 4096), (1, 4096, 14336), (3, 51865, 768)])
def test_auto_runs_a_decode_step_on_it(M, N, K):
    """x @ W.t() at a few tokens as a model writes it (whisper's vocabulary of odd length: the
    logits' rows are odd, W's start on the 16-byte grid): auto's choice, against FP64."""
    gen = torch.Generator(device="cuda").manual_seed(M)
    x, x64 = _padded(M, K, "bfloat16", gen)
    w, w64 = _padded(N, K, "bfloat16", gen)
    out = gemmlab.matmul(x, w.t())
    torch.cuda.synchronize()
    assert gemmlab.last_plan().spec.name == "gemv_mma"
    check_fp32_sums(out, x64, w64.t(), torch.zeros(1), 1.0, 0.0, K, "bfloat16", gemmlab.last_plan())
