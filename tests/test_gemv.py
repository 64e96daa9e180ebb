"""gemv on the GPU: decode-sized x @ W.t() (op(B) column-major) and dY @ W
(op(B) row-major, split over K or not) against an FP64 reference, for the row
counts each MT serves (M = 1 to 16, and past 16: more passes), widths that are
multiples of nothing, operands off the 16-byte grid, alpha / beta, every
storage type, transposed op(A) and batches.  The output starts as NaN where
beta = 0, so an element the kernel never writes (or reads) shows."""

import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.kernels.gemv.gemv import auto_params as gemv_auto_params, gemv_aligned
from gemmlab.runtime import device as rt_device
from fp32_sums_check import THIN_DTYPES as DTYPES, check_fp32_sums

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
pytestmark = pytest.mark.gpu

# Rounding of the output type (the FP32 accumulation has its own term below).
# (K, N): odd widths (every load one element, K ends inside a chunk), a K of
# 16-byte rows that is no multiple of any chunk, K shorter than a warp's step.
SHAPES = [(1037, 331), (4104, 200), (8, 33)]


def _matrix(rows, cols, dtype, gen, offset=0):
    """A rows x cols row-major view ``offset`` elements into a fresh buffer, and its FP64 copy."""
    base = torch.empty(rows * cols + offset, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen)
    base = base.to(getattr(torch, dtype))
    view = base[offset:].view(rows, cols)
    return view, view.double()


def _check(
    M,
    N,
    K,
    dtype,
    out_dtype,
    alpha,
    beta,
    *,
    a_offset=0,
    w_offset=0,
    x_transposed=False,
    batch=None,
    shared_w=True,
    mt=None,
    seed=0,
    w_rows=False,
    params=None,
    kernel="gemv",
):
    """C = alpha x @ op(W) + beta C through gemmlab.matmul: op(W) = W.t() of an N x K W
    (op(B) column-major), or with ``w_rows`` a K x N W itself (row-major, dY @ W).
    ``params``: tile parameters besides MT."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    lead = () if batch is None else (batch,)
    if x_transposed:  # op(A) column-major: a K x M array read through its transpose
        xt, xt64 = _matrix(K * (batch or 1), M, dtype, gen, a_offset)
        x, x64 = xt.view(*lead, K, M).transpose(-1, -2), xt64.view(*lead, K, M).transpose(-1, -2)
    else:
        x, x64 = _matrix(M * (batch or 1), K, dtype, gen, a_offset)
        x, x64 = x.view(*lead, M, K), x64.view(*lead, M, K)
    wb = 1 if shared_w or batch is None else batch
    rows, cols = (K, N) if w_rows else (N, K)
    w, w64 = _matrix(rows * wb, cols, dtype, gen, w_offset)
    if wb > 1:
        w, w64 = w.view(wb, rows, cols), w64.view(wb, rows, cols)
    if w_rows:  # the operand as given, and op(W) as the reference reads it
        b, b64 = w, w64
    else:
        b, b64 = w.transpose(-1, -2), w64.transpose(-1, -2)
    ot = getattr(torch, out_dtype)
    c0 = torch.empty(*lead, M, N, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen).to(ot)
    out = c0.clone() if beta else torch.full((*lead, M, N), float("nan"), device="cuda", dtype=ot)
    params = {**({"MT": mt} if mt else {}), **(params or {})}
    gemmlab.matmul(x, b, out=out, alpha=alpha, beta=beta, kernel=kernel, **params)
    torch.cuda.synchronize()
    plan = gemmlab.last_plan()
    assert plan.spec.name == "gemv"
    check_fp32_sums(out, x64, b64, c0, alpha, beta, K, out_dtype, plan)
    return plan


@pytest.mark.parametrize("M", [1, 2, 5, 8, 13, 16])
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("K, N", SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_rows_up_to_16(M, dtype, out_dtype, K, N, alpha, beta):
    """MT as auto sizes it: every row of C in one pass over op(B)."""
    mt = registry.get("gemv").rules.size(M, N, K, 132)["MT"]
    plan = _check(M, N, K, dtype, out_dtype, alpha, beta, mt=mt, seed=M)
    assert plan.params["MT"] == mt
    # the 16-byte loads where every stored row of x and W starts on the 16-byte grid (rows of
    # K elements); out's rows do not matter (stored element by element)
    e = 4 if dtype == "float32" else 2
    assert (", true, " in plan.name_expression) == (K * e % 16 == 0)


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
    plan = _check(
        M,
        264,
        4104,
        dtype,
        out_dtype,
        0.5,
        2.0,
        mt=16 if M > 8 else 2,
        **({"a_offset": 1} if where == "x" else {"w_offset": 1}),
    )
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


@pytest.mark.parametrize("M, mt", [(1, 1), (4, 4), (13, 16), (21, 16)])
@pytest.mark.parametrize("K, N", SHAPES + [(8192, 2048)], ids=lambda s: str(s))
@pytest.mark.parametrize("alpha, beta, split", [(1.0, 0.0, 2), (0.5, 2.0, 3), (-1.0, 0.0, 16)])
@pytest.mark.parametrize("case", ["plain", "x_off_grid", "w_off_grid", "x_transposed", "batch"])
def test_column_path_split_over_k(M, mt, K, N, alpha, beta, split, case):
    """float32 x @ W.t() split over K (gridDim.y, a slice of K each into the workspace, then
    splitk_reduce): slices of whole chunks, the last ones short or empty (K = 8: all but one),
    operands off the grid, x transposed, a batch of x against one W and a W per batch."""
    kw = {
        "plain": {},
        "x_off_grid": {"a_offset": 1},
        "w_off_grid": {"w_offset": 1},
        "x_transposed": {"x_transposed": True},
        "batch": {"batch": 3, "shared_w": split != 3},
    }[case]
    plan = _check(M, N, K, "float32", "float32", alpha, beta, mt=mt, seed=M + split, params={"SPLITK": split}, **kw)
    assert plan.params["SPLITK"] == split and plan.name_expression.endswith("'T'>")


@pytest.mark.parametrize(
    "M, N, K", [(1, 2048, 8192), (1, 512, 2048), (4, 2304, 9216), (16, 1024, 2304), (3, 576, 1536)]
)
def test_auto_splits_float32_x_w_t_over_k_where_its_blocks_are_few(M, N, K):
    """kernel="auto" on a decode step's float32 x @ W.t() of a narrow model: gemv split over K
    as auto_params says (N / 32 blocks too few for the SMs)."""
    plan = _check(M, N, K, "float32", "float32", 1.0, 0.0, kernel="auto", seed=N)
    want = gemv_auto_params(M, N, K, rt_device.gpu_info().sm_count, dtype="float32", op_b="T")
    assert plan.params == want and want["SPLITK"] > 1


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


# -- op(B) row-major (dY @ W): the row path, split over K (gridDim.y) or not --------

# (K, N): odd widths (every load one element; K ends inside a chunk and inside a
# slice), 16-byte rows with a K of no multiple of a chunk, K shorter than a chunk, and
# 16-byte rows of W under rows of x of odd length (x read element by element, W not).
ROW_SHAPES = [(1037, 331), (4104, 200), (8, 33), (1037, 264)]


def _rows(M, N, K, dtype, out_dtype, alpha, beta, split, params_extra=None, **kw):
    plan = _check(
        M, N, K, dtype, out_dtype, alpha, beta, w_rows=True, params={"SPLITK": split, **(params_extra or {})}, **kw
    )
    assert plan.params["SPLITK"] == split and plan.name_expression.endswith("'N'>")
    return plan


@pytest.mark.parametrize("M", [1, 2, 5, 8, 13, 16])
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("K, N", ROW_SHAPES, ids=lambda s: str(s))
@pytest.mark.parametrize("alpha, beta, split", [(1.0, 0.0, 1), (0.5, 2.0, 1), (1.0, 0.0, 3), (-0.5, 2.0, 16)])
def test_row_major_w(M, dtype, out_dtype, K, N, alpha, beta, split):
    """dY @ W with MT as auto sizes it, unsplit and split (16 slices of K = 8: all but one empty)."""
    mt = registry.get("gemv").rules.size(M, N, K, 132)["MT"]
    plan = _rows(M, N, K, dtype, out_dtype, alpha, beta, split, mt=mt, seed=M)
    # the 16-byte loads of W where its rows (N elements) start on the 16-byte grid, whatever
    # x's and out's rows do (the kernel checks x's itself; out is stored element by element)
    e = 4 if dtype == "float32" else 2
    assert (", true, " in plan.name_expression) == (N * e % 16 == 0)


@pytest.mark.parametrize("M", [1, 3, 4])
@pytest.mark.parametrize("lanes", [8, 4])
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("K, N", ROW_SHAPES + [(4104, 264)], ids=lambda s: str(s))
@pytest.mark.parametrize("alpha, beta, split", [(1.0, 0.0, 1), (0.5, 2.0, 3)])
def test_row_major_w_narrow_blocks(M, lanes, dtype, out_dtype, K, N, alpha, beta, split):
    """dY @ W with LANES lanes along a row of W (a warp reads 32 / LANES rows at once, the
    row groups' sums added by shuffles), unsplit and split."""
    mt = registry.get("gemv").rules.size(M, N, K, 132)["MT"]
    plan = _rows(M, N, K, dtype, out_dtype, alpha, beta, split, mt=mt, seed=M + lanes, params_extra={"LANES": lanes})
    assert f", {lanes}, 'N', 'N'>" in plan.name_expression


@pytest.mark.parametrize("lanes", [8, 4])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float32")])
@pytest.mark.parametrize("case", ["x_transposed", "x_off_grid", "w_off_grid", "batch_shared_w", "batch"])
def test_row_major_w_narrow_blocks_layouts_and_batches(lanes, dtype, out_dtype, case):
    kw = {
        "x_transposed": {"x_transposed": True},
        "x_off_grid": {"a_offset": 1},
        "w_off_grid": {"w_offset": 1},
        "batch_shared_w": {"batch": 3, "shared_w": True},
        "batch": {"batch": 3, "shared_w": False},
    }[case]
    for split in (1, 4):
        _rows(3, 331, 1037, dtype, out_dtype, 0.5, 2.0, split, mt=4, params_extra={"LANES": lanes}, **kw)
        _rows(2, 264, 4104, dtype, out_dtype, 1.0, 0.0, split, mt=2, params_extra={"LANES": lanes}, **kw)


@pytest.mark.parametrize("M, mt", [(21, 16), (13, 4), (3, 1)])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16")])
def test_row_major_w_more_rows_than_a_pass_holds(M, mt, dtype, out_dtype):
    _rows(M, 200, 4104, dtype, out_dtype, 1.0, 0.0, 4, mt=mt)
    _rows(M, 331, 1037, dtype, out_dtype, -1.5, 0.5, 1, mt=mt)


@pytest.mark.parametrize("M", [2, 13])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("float16", "float16"), ("bfloat16", "float32")])
@pytest.mark.parametrize("where", ["x", "W"])
@pytest.mark.parametrize("split", [1, 6])
def test_row_major_w_off_the_16_byte_grid(M, dtype, out_dtype, where, split):
    """W off the grid: one element a load.  x off it: W still 16 bytes a load, x (checked
    in the kernel) element by element."""
    plan = _rows(
        M,
        264,
        4104,
        dtype,
        out_dtype,
        0.5,
        2.0,
        split,
        mt=16 if M > 8 else 2,
        **({"a_offset": 1} if where == "x" else {"w_offset": 1}),
    )
    assert (", true, " if where == "x" else ", false, ") in plan.name_expression


@pytest.mark.parametrize("M", [5, 16])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16")])
@pytest.mark.parametrize("K, N", [(1037, 331), (4104, 200)], ids=lambda s: str(s))
def test_row_major_w_transposed_x(M, dtype, out_dtype, K, N):
    plan = _rows(M, N, K, dtype, out_dtype, 1.0, 0.0, 3, x_transposed=True, mt=16 if M > 8 else 8)
    assert plan.name_expression.endswith("'T', 'N'>")


@pytest.mark.parametrize("M", [3, 16])
@pytest.mark.parametrize("dtype, out_dtype", [("float32", "float32"), ("bfloat16", "bfloat16")])
@pytest.mark.parametrize("shared_w", [True, False])
@pytest.mark.parametrize("split", [1, 4])
def test_row_major_w_batches(M, dtype, out_dtype, shared_w, split):
    """A batch of dY against one W (stride 0) or a W per batch; split, each batch has its
    slices of the workspace."""
    _rows(M, 200, 1040, dtype, out_dtype, 0.5, 2.0, split, batch=3, shared_w=shared_w, mt=16 if M > 8 else 4)
    _rows(M, 331, 1037, dtype, out_dtype, 1.0, 0.0, split, batch=3, shared_w=shared_w, mt=16 if M > 8 else 4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("split", [1, 4])
def test_row_major_w_alpha_zero_reads_neither_operand(dtype, split):
    x = torch.full((5, 1037), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    w = torch.full((1037, 331), float("nan"), device="cuda", dtype=getattr(torch, dtype))
    c0 = torch.ones(5, 331, device="cuda", dtype=getattr(torch, dtype))
    out = c0.clone()
    gemmlab.matmul(x, w, out=out, alpha=0.0, beta=3.0, kernel="gemv", MT=8, SPLITK=split)
    torch.cuda.synchronize()
    assert torch.equal(out, 3 * c0)


@pytest.mark.parametrize("M", [1, 7, 16])
@pytest.mark.parametrize("K, N", [(4096, 4096), (6144, 4096), (4096, 14336), (3001, 999)], ids=lambda s: str(s))
def test_auto_runs_row_major_w_on_gemv_split(M, K, N):
    """kernel="auto" on float32 dY @ W with at most 16 rows: gemv with auto_params' MT, LANES and split."""
    plan = _check(M, N, K, "float32", "float32", 1.0, 0.0, w_rows=True, kernel="auto", seed=M)
    p = gemv_auto_params(
        M, N, K, rt_device.gpu_info().sm_count, dtype="float32", op_b="N", aligned16=gemv_aligned(plan.problem)
    )
    assert plan.params == p
    if N == 4096:  # 32 column blocks of 128 columns: narrower blocks (at most 4 rows), else split
        assert p["LANES"] < 32 if M <= 4 else p["SPLITK"] > 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("product", ["x @ W.t()", "dY @ W"])
@pytest.mark.parametrize("M", [1, 3])
def test_auto_on_a_vocabulary_of_odd_length(dtype, product, M):
    """A decoder's lm_head with a vocabulary of odd length (whisper's 51865, hidden 768) at
    one token or three: the logits (C of x @ W.t()) and dY (op(A) of dY @ W) have rows of
    odd length, W's rows start on the 16-byte grid, so gemv reads W 16 bytes at a time.
    (auto gives 16-bit x @ W.t() to gemv_mma: tests/test_gemv_mma.py; gemv is named here.)"""
    V, D = 51865, 768
    if product == "x @ W.t()":
        plan = _check(M, V, D, dtype, dtype, 1.0, 0.0, kernel="auto" if dtype == "float32" else "gemv", seed=M)
    elif dtype == "float32":  # (16-bit dY @ W of this size runs on wgmma)
        plan = _check(M, D, V, dtype, dtype, 1.0, 0.0, w_rows=True, kernel="auto", seed=M)
    else:
        pytest.skip("16-bit dY @ W over GEMV_ROWS_16BIT_MAX_BYTES runs on wgmma")
    assert ", true, " in plan.name_expression, plan.describe()
