"""Every kernel against an FP64 reference on fresh random inputs, output poisoned first."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.tools.verify import compare, magnitude, random_matrix, reference

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (7, 13, 5), (33, 65, 17), (127, 129, 255), (1000, 1000, 1000), (4097, 31, 129), (16, 16, 4096)]
ALPHA_BETA = [(1.0, 0.0), (0.5, 2.0)]
TOL = 1e-5
OTHER_TRANSPOSE = 1 - registry.get("pipelined").defaults()["REG_TRANSPOSE"]


def _cases():
    """Each kernel at its defaults, plus every smem_tiled tile and a few other tile shapes."""
    cases = [(s.name, {}) for s in registry.ladder("simt")]
    cases += [("smem_tiled", {"tile": t}) for t in (2, 4, 8, 16)]
    cases += [
        ("blocktile_1d", {"BM": 128, "BN": 32, "BK": 16, "TM": 8}),
        ("blocktile_2d", {"BM": 64, "BN": 128, "BK": 16, "TM": 4, "TN": 8}),
        ("vectorized", {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4}),
        ("vectorized", {"BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 4}),
        ("warptile", {"BM": 64, "BN": 128, "BK": 8, "WM": 32, "WN": 64, "WNITER": 4, "TM": 4}),
        ("warptile", {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 8}),
        ("pipelined", {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 4, "STAGES": 2}),
        ("pipelined", {"BM": 64, "BN": 128, "BK": 8, "WM": 32, "WN": 64, "WNITER": 4, "TM": 4, "STAGES": 4}),
        # 4 stages of 128x128x16 tiles: 72 KB of dynamic shared memory, above the 48 KB default
        ("pipelined", {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 4, "STAGES": 4}),
        # 256-wide tiles: 8 warps of 64 x 64, 128 accumulators per thread
        ("pipelined", {"BM": 256, "BN": 128, "BK": 8, "WM": 64, "WN": 64, "WNITER": 4, "TM": 4, "STAGES": 3}),
        ("pipelined", {"BM": 128, "BN": 256, "BK": 8, "WM": 64, "WN": 64, "WNITER": 2, "TM": 8, "STAGES": 2}),
        # split-K: partial products in a workspace, added by splitk_reduce (16: most splits
        # of the small shapes are empty and must contribute zeros)
        (
            "pipelined",
            {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4, "STAGES": 3, "SPLITK": 3},
        ),
        ("pipelined", {"SPLITK": 16}),
        ("auto", {}),
    ]
    # The transpose of rows along K (row-major A here) the defaults do not take, on a
    # 256-wide tile, a BK = 16 tile, a 128-thread tile and split-K.
    cases += [
        ("pipelined", {**p, "REG_TRANSPOSE": OTHER_TRANSPOSE})
        for p in (
            {},
            {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 4, "STAGES": 3},
            {"BM": 64, "BN": 128, "BK": 8, "WM": 32, "WN": 64, "WNITER": 4, "TM": 4, "STAGES": 4},
            {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4, "STAGES": 2, "SPLITK": 3},
        )
    ]
    return cases


def _id(case):
    name, params = case
    return name + "".join(f"-{k}{v}" for k, v in params.items())


def _check(kernel, params, M, N, K, alpha, beta, rng, *, misalign=False, trans_a=False, trans_b=False):
    """``trans_a`` / ``trans_b``: the operand as the transposed view of a row-major
    array (a column-major op(A) / op(B)); with ``misalign`` that array starts 4
    bytes into its buffer."""
    import cupy as cp

    def operand(rows, cols, trans, shifted):
        stored = (cols, rows) if trans else (rows, cols)
        n = stored[0] * stored[1]
        flat = cp.asarray(random_matrix(1, n + shifted, "uniform", rng)).ravel()[shifted:]
        x = flat.reshape(stored)
        return x.T if trans else x

    # Misaligned views start 4 bytes into a buffer: float4 access would be illegal.
    a = operand(M, K, trans_a, int(misalign))
    b = operand(K, N, trans_b, int(misalign and trans_b))
    c0 = cp.asarray(random_matrix(M, N, "uniform", rng)) if beta else cp.full((M, N), np.nan, np.float32)
    out = c0.copy()
    ret = gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel, **params)
    assert ret is out
    cp.cuda.get_current_stream().synchronize()
    err = compare(out, reference(a, b, alpha, beta, c0), magnitude(a, b, alpha, beta, c0))
    assert err.nonfinite == 0, f"{err.nonfinite} elements unwritten or non-finite"
    assert err.rel_fro <= TOL, f"relative error {err.rel_fro:.2e}"
    assert err.max_rel <= 1e-4, f"max elementwise error {err.max_rel:.2e}"


@pytest.mark.parametrize("case", _cases(), ids=_id)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("alpha,beta", ALPHA_BETA)
def test_kernel_matches_fp64(case, shape, alpha, beta):
    kernel, params = case
    _check(kernel, params, *shape, alpha, beta, np.random.default_rng())


# A column-major op(B) (x @ W.t(), the forward product of every linear layer):
# pipelined's transposing copies of the B tile, with op(A) either way, on aligned
# operands (every side a multiple of 4) and not, every edge, split-K, and the
# configurations the planner takes for small M and narrow N.
PIPELINED_CASES = [c for c in _cases() if c[0] == "pipelined"] + [
    ("pipelined", {"BM": 128, "BN": 64, "BK": 16, "WM": 32, "WN": 64, "WNITER": 2, "TM": 8, "STAGES": 3}),
    ("pipelined", {"BM": 64, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 4, "TM": 4, "STAGES": 3, "SPLITK": 4}),
]
COLUMN_MAJOR_B_SHAPES = [
    (7, 13, 5),
    (33, 65, 17),
    (127, 129, 255),
    (260, 516, 132),
    (1000, 1000, 1000),
    (4097, 31, 129),
    (16, 16, 4096),
]


@pytest.mark.parametrize("case", PIPELINED_CASES, ids=_id)
@pytest.mark.parametrize("shape", COLUMN_MAJOR_B_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("trans_a", [False, True], ids=["NT", "TT"])
def test_pipelined_column_major_b(case, shape, trans_a):
    kernel, params = case
    rng = np.random.default_rng()
    _check(kernel, params, *shape, 1.0, 0.0, rng, trans_a=trans_a, trans_b=True)
    _check(kernel, params, *shape, 0.5, 2.0, rng, trans_a=trans_a, trans_b=True)


# Few output tiles and a very long K, as a small layer's weight gradient over many positions
# (a 96 x 96 projection over 100352 tokens): the largest splits, whose slices are of unequal
# length, op(A) transposed as a weight gradient's is, and auto's own choice there.
@pytest.mark.parametrize("params", [{"SPLITK": s} for s in (24, 32, 48, 64)] + [{}], ids=lambda p: str(p or "auto"))
def test_many_splits_on_few_tiles_and_a_long_k(params):
    _check("pipelined" if params else "auto", params, 97, 95, 40001, 0.75, 0.5, np.random.default_rng(), trans_a=True)


@pytest.mark.parametrize("trans_a", [False, True], ids=["NT", "TT"])
def test_pipelined_column_major_b_misaligned(trans_a):
    _check(
        "pipelined", {}, 260, 516, 132, 1.0, 0.0, np.random.default_rng(), misalign=True, trans_a=trans_a, trans_b=True
    )


@pytest.mark.parametrize("kernel", ["vectorized", "warptile", "pipelined"])
@pytest.mark.parametrize("shape", [(33, 65, 17), (1000, 1000, 1000), (64, 128, 64)])
def test_misaligned_input_uses_scalar_path(kernel, shape):
    _check(kernel, {}, *shape, 1.0, 0.0, np.random.default_rng(), misalign=True)


def test_beta_zero_never_reads_out():
    import cupy as cp

    rng = np.random.default_rng()
    a = cp.asarray(random_matrix(70, 50, "uniform", rng))
    b = cp.asarray(random_matrix(50, 90, "uniform", rng))
    for kernel in [s.name for s in registry.ladder("simt")]:
        out = cp.full((70, 90), np.inf, np.float32)
        gemmlab.matmul(a, b, out=out, kernel=kernel)
        assert bool(cp.isfinite(out).all()), kernel


@pytest.mark.parametrize("beta", [0.0, 0.75])
def test_empty_product_reads_neither_a_nor_b(beta):
    """alpha = 0 or K = 0 is BLAS's quick return: out = beta * out, and NaN in a or b
    (alpha = 0) never reaches it; with beta = 0, NaN already in out does not either."""
    import cupy as cp

    rng = np.random.default_rng()
    for kernel in ["auto"] + [s.name for s in registry.ladder("simt")]:
        for M, N, K, alpha in [(70, 90, 50, 0.0), (33, 65, 0, 1.5)]:
            a = cp.full((M, K), np.nan, np.float32)
            b = cp.full((K, N), np.nan, np.float32)
            c0 = cp.asarray(random_matrix(M, N, "uniform", rng)) if beta else cp.full((M, N), np.nan, np.float32)
            out = c0.copy()
            gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel)
            expected = cp.float32(beta) * c0 if beta else cp.zeros((M, N), np.float32)
            assert bool((out == expected).all()), (kernel, M, N, K, alpha)


def test_numpy_in_numpy_out():
    rng = np.random.default_rng()
    a, b = random_matrix(129, 67, "normal", rng), random_matrix(67, 33, "normal", rng)
    c = gemmlab.matmul(a, b)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == (129, 33)
    assert compare(c, reference(a, b)).rel_fro <= TOL
    out = np.full((129, 33), np.nan, np.float32)
    assert gemmlab.matmul(a, b, out=out, kernel="blocktile_2d") is out
    assert compare(out, reference(a, b)).rel_fro <= TOL


def test_torch_tensors_in_place_and_on_current_stream():
    torch = pytest.importorskip("torch")
    a = torch.rand(300, 200, device="cuda") * 2 - 1
    b = torch.rand(200, 100, device="cuda") * 2 - 1
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        c = gemmlab.matmul(a, b)
    s.synchronize()
    assert isinstance(c, torch.Tensor) and c.is_cuda and c.shape == (300, 100)
    ref = a.double() @ b.double()
    assert float((c.double() - ref).norm() / ref.norm()) <= TOL
    out = torch.full((300, 100), float("nan"), device="cuda")
    assert gemmlab.matmul(a, b, out=out, kernel="smem_tiled", tile=16) is out
    assert float((out.double() - ref).norm() / ref.norm()) <= TOL
    # Tensors that require grad are read through a detached view of the same memory.
    c = gemmlab.matmul(a.clone().requires_grad_(), b.clone().requires_grad_())
    assert float((c.double() - ref).norm() / ref.norm()) <= TOL


def test_cupy_result_on_nondefault_stream():
    import cupy as cp

    rng = np.random.default_rng()
    a = cp.asarray(random_matrix(512, 384, "uniform", rng))
    b = cp.asarray(random_matrix(384, 256, "uniform", rng))
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        c = gemmlab.matmul(a, b, kernel="vectorized")
        s.synchronize()
    assert isinstance(c, cp.ndarray)
    assert compare(c, reference(a, b)).rel_fro <= TOL


def test_padded_rows_are_read_through_leading_dimension():
    import cupy as cp

    rng = np.random.default_rng()
    big = cp.asarray(random_matrix(100, 80, "uniform", rng))
    a = big[:, :37]  # row stride 80, 37 columns
    b = cp.asarray(random_matrix(37, 45, "uniform", rng))
    for kernel in ("naive", "smem_tiled", "vectorized", "warptile", "pipelined"):
        c = gemmlab.matmul(a, b, kernel=kernel)
        assert compare(c, reference(a, b)).rel_fro <= TOL, kernel


def test_error_leaves_out_untouched():
    import cupy as cp

    a = cp.ones((10, 20), cp.float32)
    b = cp.ones((21, 5), cp.float32)
    out = cp.full((10, 5), 7.0, cp.float32)
    with pytest.raises(ValueError):
        gemmlab.matmul(a, b, out=out)
    with pytest.raises(ValueError):
        gemmlab.matmul(a, cp.ones((20, 5), cp.float32), out=out, kernel="smem_tiled", tile=3)
    assert bool((out == 7.0).all())


def test_verify_api_reports_pass():
    r = gemmlab.verify("vectorized", 257, 129, 65, alpha=0.5, beta=2.0, dist="wide")
    assert r.passed and r.nonfinite == 0
