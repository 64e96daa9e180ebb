"""outer on the GPU: products of a few K (a weight gradient dY.t() @ x at a token or a
few) against an FP64 reference: K of 1 to 8 and past one staged chunk, widths that are
multiples of nothing, C's rows on the 16-byte grid or off it, every layout and storage
type, alpha / beta, batches.  The output starts as NaN where beta = 0, so an element
the kernel never writes (or reads) shows."""

import pytest

import gemmlab
from gemmlab.core.planner import matrix_layout
from gemmlab.runtime import device as rt_device
from fp32_sums_check import LAYOUTS, THIN_DTYPES as DTYPES, check_fp32_sums, operand as _operand

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
pytestmark = pytest.mark.gpu

# (M, N, K): a vocabulary-sized dY of one token (K = 1) scaled down, odd everything,
# one staged chunk of K exactly, past it (17: three chunks), a single column of C.
SHAPES = [(1037, 331, 1), (333, 257, 3), (64, 128, 8), (129, 520, 17), (7, 1, 5), (2, 40, 2)]


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
    c_offset=0,
    batch=None,
    shared_b=False,
    seed=0,
    kernel="outer",
):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, a64 = _operand(M, K, dtype, layout[0], gen, batch)
    b, b64 = _operand(K, N, dtype, layout[1], gen, None if shared_b else batch)
    lead = () if batch is None else (batch,)
    ot = getattr(torch, out_dtype)
    n = (batch or 1) * M * N
    c0 = torch.empty(n, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen).to(ot).view(*lead, M, N)
    buf = torch.full((n + c_offset,), float("nan"), device="cuda", dtype=ot)
    out = buf[c_offset:].view(*lead, M, N)
    if beta:
        out.copy_(c0)
    gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel)
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == "outer", plan.describe()
    check_fp32_sums(out, a64, b64, c0, alpha, beta, K, out_dtype, plan)
    return plan


@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("M, N, K", SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: "".join(t))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_outer(M, N, K, dtype, out_dtype, layout, alpha, beta):
    """16-byte stores where C's rows are on the grid (N a multiple of 16 bytes of C's type,
    or one row), element stores otherwise."""
    plan = _check(M, N, K, dtype, out_dtype, alpha, beta, layout=layout, seed=M + K)
    eo = 4 if out_dtype == "float32" else 2
    assert (", true, " in plan.name_expression) == (N * eo % 16 == 0 or M == 1)
    # each operand in the layout it is stored in; a single row or column in the one that
    # reads it along its length, whatever view of it arrived
    read = [
        matrix_layout(shape, _strides(shape, stored), unit_column_major=True)[0]
        for shape, stored in (((M, K), layout[0]), ((K, N), layout[1]))
    ]
    assert plan.name_expression.endswith(f"'{read[0]}', '{read[1]}'>")
    if min(M, N, K) > 1:
        assert read == list(layout)


def _strides(shape, stored):
    """The element strides of a rows x cols operand built by _operand."""
    rows, cols = shape
    return (cols, 1) if stored == "N" else (1, rows)


@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float32")])
def test_c_off_the_16_byte_grid(dtype, out_dtype):
    """C one element into its buffer: rows of 16-byte multiples, but off the grid."""
    for M, N, K in ((333, 256, 1), (64, 128, 4)):
        plan = _check(M, N, K, dtype, out_dtype, 0.5, 2.0, c_offset=1, layout=("T", "N"))
        assert ", false, " in plan.name_expression


@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16")])
@pytest.mark.parametrize("shared_b", [True, False])
def test_batches(dtype, out_dtype, shared_b):
    _check(65, 136, 3, dtype, out_dtype, 0.5, 2.0, batch=3, shared_b=shared_b, layout=("T", "N"))
    _check(33, 257, 1, dtype, out_dtype, 1.0, 0.0, batch=3, shared_b=shared_b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_alpha_zero_reads_neither_operand(dtype):
    """alpha = 0: C = beta C, whatever op(A) and op(B) hold (NaN here)."""
    t = getattr(torch, dtype)
    a = torch.full((1037, 2), float("nan"), device="cuda", dtype=t)
    b = torch.full((2, 331), float("nan"), device="cuda", dtype=t)
    c0 = torch.ones(1037, 331, device="cuda", dtype=t)
    out = c0.clone()
    gemmlab.matmul(a, b, out=out, alpha=0.0, beta=3.0, kernel="outer")
    torch.cuda.synchronize()
    assert gemmlab.last_plan().spec.name == "outer"
    assert torch.equal(out, 3 * c0)


def test_auto_runs_a_one_token_weight_gradient_of_odd_length_on_outer():
    """kernel="auto" on float32 dY.t() @ x at one token with a vocabulary of odd length
    (whisper's 51865): outer, C's rows (768 floats) stored 16 bytes at a time."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    dy = torch.empty(1, 51865, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen)
    x = torch.empty(1, 768, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen)
    got = gemmlab.matmul(dy.float().t(), x.float())
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == "outer" and ", true, 'T', 'N'>" in plan.name_expression, plan.describe()
    ref = dy.float().double().t() @ x.float().double()
    assert torch.equal(got.double(), ref.float().double())  # one product each: exact in FP32


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_auto_hands_a_large_16_bit_c_of_a_few_k_to_wgmma_on_hopper(dtype):
    """kernel="auto" on a 16-bit weight gradient at 7 tokens whose C has more elements than
    OUTER_16BIT_MAX_OUTPUTS and whose operands TMA reads in place: wgmma on Hopper (one partial
    K-step), outer elsewhere; the NaN-poisoned C against FP64 either way."""
    from gemmlab.kernels.gemv.outer import OUTER_16BIT_MAX_OUTPUTS

    M, N, K = 4544, 2056, 7
    assert M * N > OUTER_16BIT_MAX_OUTPUTS
    gen = torch.Generator(device="cuda").manual_seed(11)
    a, a64 = _operand(M, K, dtype, "T", gen)
    b, b64 = _operand(K, N, dtype, "N", gen)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    gemmlab.matmul(a, b, out=out)
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == ("wgmma" if rt_device.gpu_info().arch == "sm_90a" else "outer"), plan.describe()
    check_fp32_sums(out, a64, b64, torch.zeros_like(out), 1.0, 0.0, K, dtype, plan)
