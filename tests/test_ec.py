"""FP32-accurate GEMM on tensor cores (precision="fp32_tc" and the explicit
methods) against FP64, beside cuBLAS SGEMM's error on the same inputs."""

import numpy as np
import pytest

import gemmlab
from gemmlab.tools.accuracy import make_inputs
from gemmlab.tools.verify import compare, reference
from ec_expect import fp32_tc_method

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

SETS = ["uniform", "uniform_small", "uniform_large", "normal", "log_uniform"]
# Which input sets each method is meant for (gemmlab.core.methods's docstring): there its
# error must be within 1.5x of cuBLAS SGEMM's.
SUPPORTED = {
    "fp16_ec": {"uniform", "uniform_large", "normal"},
    "fp16_ec_scaled": {"uniform", "uniform_small", "uniform_large", "normal"},
    "tf32_ec": set(SETS),
    "fp32_tc": set(SETS),
}
SHAPE = (129, 67, 4099)  # no multiple of any tile; K long enough for accumulation error to show
# The implementations: WMMA everywhere, wgmma on Hopper ("auto" picks the latter there), in
# its default form (FOLD: three accumulator sets, 128 x 128) and with four sets (128 x 96).
KERNELS = ["ec_wmma", "ec_wgmma", "ec_wgmma:BN=96,FOLD=0,STAGES=4"]


def kw(kernel):
    """matmul's kernel arguments for an entry of KERNELS, "name:NAME=value,...", read as the CLI reads it."""
    from gemmlab.tools.cli import _kernel_entries

    ((name, params),) = _kernel_entries([kernel], list)
    return dict(kernel=name, **params)


def needs(kernel):
    """Skip a kernel this GPU cannot run (ec_wgmma needs sm_90a)."""
    from gemmlab.kernels import registry
    from gemmlab.runtime.device import gpu_info

    arch = gpu_info(0).arch
    spec = registry.get(kernel.partition(":")[0])
    if not spec.builds_for(arch):
        pytest.skip(f"{spec.name} needs {', '.join(spec.arches)}; this GPU is {arch}")


@pytest.fixture(scope="module")
def cases():
    """Inputs, FP64 reference and cuBLAS SGEMM's error per input set."""
    rng = np.random.default_rng(11)
    M, N, K = SHAPE
    out = {}
    for name in SETS:
        a = cp.asarray(make_inputs(name, M, K, rng))
        b = cp.asarray(make_inputs(name, K, N, rng))
        ref = reference(a, b, keep_on_gpu=True)
        out[name] = (a, b, ref, compare(a @ b, ref).rel_fro)
    return out


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("precision", list(SUPPORTED))
@pytest.mark.parametrize("inputs", SETS)
def test_method_within_1_5x_of_sgemm(cases, precision, inputs, kernel):
    if inputs not in SUPPORTED[precision]:
        pytest.skip(f"{precision} is not meant for {inputs} (gemmlab.core.methods)")
    needs(kernel)
    a, b, ref, sgemm_err = cases[inputs]
    out = cp.full(ref.shape, np.nan, dtype=np.float32)
    gemmlab.matmul(a, b, out=out, precision=precision, **kw(kernel))
    assert gemmlab.last_plan().spec.name == kw(kernel)["kernel"]
    err = compare(out, ref)
    assert err.nonfinite == 0
    assert err.rel_fro <= 1.5 * sgemm_err, (
        f"{err.rel_fro:.2e} vs SGEMM {sgemm_err:.2e} ({gemmlab.last_plan().describe()})"
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_fp16_ec_needs_scaling_for_small_values(kernel):
    """U(-1,1) * 2^-24: unscaled, hi falls into FP16's subnormals and the product
    keeps about FP16's accuracy; the scaled method, which fp32_tc picks, does not.
    (U(-1,1) * 2^-12 is still fine unscaled: the 2^11 in lo catches what hi loses.)"""
    needs(kernel)
    rng = np.random.default_rng(13)
    a = cp.asarray(make_inputs("uniform", 65, 1000, rng) * np.float32(2.0**-24))
    b = cp.asarray(make_inputs("uniform", 1000, 33, rng))
    ref = reference(a, b, keep_on_gpu=True)
    sgemm_err = compare(a @ b, ref).rel_fro
    plain = compare(gemmlab.matmul(a, b, precision="fp16_ec", **kw(kernel)), ref).rel_fro
    scaled = compare(gemmlab.matmul(a, b, precision="fp16_ec_scaled", **kw(kernel)), ref).rel_fro
    auto = compare(gemmlab.matmul(a, b, precision="fp32_tc", **kw(kernel)), ref).rel_fro
    assert gemmlab.last_plan().method == "fp16_ec_scaled"
    assert plain > 100 * sgemm_err and scaled <= 1.5 * sgemm_err and auto == scaled


@pytest.mark.parametrize(
    "inputs, method", [("uniform", "fp16_ec"), ("uniform_small", "fp16_ec_scaled"), ("log_uniform", "tf32_ec")]
)
def test_fp32_tc_reports_its_choice(cases, inputs, method):
    """The method chosen from the data is reported (ec_wmma named); with kernel="auto" this
    shape (two tiles) runs ec_wmma where ec_wgmma does not exist, and IEEE FP32 on the CUDA
    cores where it does but its cost model predicts it slower (choose._fp32_tc_weighed)."""
    from gemmlab.kernels import registry
    from gemmlab.runtime.device import gpu_info

    a, b, ref, sgemm = cases[inputs]
    gemmlab.matmul(a, b, precision="fp32_tc", kernel="ec_wmma")
    p = gemmlab.last_plan()
    assert p.method == fp32_tc_method(p, method) and p.reason
    assert f"[{fp32_tc_method(p, method)}]" in p.describe()
    out = gemmlab.matmul(a, b, precision="fp32_tc")
    auto = gemmlab.last_plan()
    if registry.get("ec_wgmma").builds_for(gpu_info(0).arch):
        assert auto.method == "fp32" and auto.spec.family in ("simt", "gemv"), auto.describe()
        assert compare(out, ref).rel_fro <= 1.5 * sgemm + 1e-7
    else:
        assert auto.spec.name == "ec_wmma" and auto.method == fp32_tc_method(auto, method), auto.describe()


@pytest.mark.parametrize("kernel", KERNELS)
def test_hi_hi_outside_the_tensor_core_matters(kernel):
    """At K = 16384 the error must stay at SGEMM's level: accumulating the main
    product inside the tensor core (round toward zero) would grow with K."""
    needs(kernel)
    rng = np.random.default_rng(12)
    a = cp.asarray(make_inputs("uniform", 64, 16384, rng))
    b = cp.asarray(make_inputs("uniform", 16384, 48, rng))
    ref = reference(a, b, keep_on_gpu=True)
    sgemm = compare(a @ b, ref).rel_fro
    for precision in ("fp16_ec", "tf32_ec"):
        err = compare(gemmlab.matmul(a, b, precision=precision, **kw(kernel)), ref).rel_fro
        assert err <= 1.5 * sgemm, (precision, err, sgemm)


@pytest.mark.parametrize(
    "shape", [(1, 1, 1), (7, 13, 5), (33, 65, 17), (127, 129, 255), (200, 300, 16)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("precision", ["fp16_ec", "tf32_ec", "fp32_tc"])
@pytest.mark.parametrize("misaligned", [False, True])
@pytest.mark.parametrize("kernel", KERNELS)
def test_odd_shapes_alpha_beta(shape, precision, misaligned, kernel):
    needs(kernel)
    M, N, K = shape
    rng = np.random.default_rng(M + N + K)
    a = cp.asarray(make_inputs("normal", M, K, rng))
    if misaligned:  # 4 bytes into its buffer: the 4-byte-copy variant runs
        a = cp.asarray(make_inputs("normal", 1, M * K + 1, rng)).ravel()[1:].reshape(M, K)
    b = cp.asarray(make_inputs("normal", K, N, rng))
    c0 = cp.asarray(make_inputs("normal", M, N, rng))
    out = c0.copy()
    gemmlab.matmul(a, b, out=out, alpha=0.7, beta=-1.3, precision=precision, **kw(kernel))
    assert compare(out, reference(a, b, 0.7, -1.3, c0)).ok(1e-6)
    assert gemmlab.last_plan().spec.name == kw(kernel)["kernel"]
    if misaligned:
        assert not gemmlab.last_plan().problem.aligned16


@pytest.mark.parametrize("precision", ["fp16_ec", "tf32_ec", "fp32_tc"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_beta_zero_never_reads_out_and_alpha_zero_reads_nothing(precision, kernel):
    needs(kernel)
    rng = np.random.default_rng(5)
    a = cp.asarray(make_inputs("uniform", 40, 30, rng))
    b = cp.asarray(make_inputs("uniform", 30, 20, rng))
    out = cp.full((40, 20), np.nan, dtype=np.float32)
    gemmlab.matmul(a, b, out=out, precision=precision, **kw(kernel))
    assert compare(out, reference(a, b)).ok(1e-6)
    nan_a, nan_b = cp.full_like(a, np.nan), cp.full_like(b, np.nan)
    c0 = cp.asarray(make_inputs("uniform", 40, 20, rng))
    out = c0.copy()
    gemmlab.matmul(nan_a, nan_b, out=out, alpha=0.0, beta=0.5, precision=precision, **kw(kernel))
    assert cp.array_equal(out, cp.float32(0.5) * c0)


@pytest.mark.parametrize("precision", ["fp16_ec", "tf32_ec", "fp32_tc"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_nan_and_inf_propagate(precision, kernel):
    needs(kernel)
    a = cp.ones((20, 16), dtype=np.float32)
    b = cp.ones((16, 24), dtype=np.float32)
    a[3, 5] = np.nan
    a[7, 2] = np.inf
    b[2, 9] = 0.0
    a[11, :] = 0.0
    a[11, 4] = np.inf
    b[4, 13] = -1.0
    out = gemmlab.matmul(a, b, precision=precision, **kw(kernel)).get()
    ref = a.get().astype(np.float64) @ b.get().astype(np.float64)  # IEEE: Inf * 0 = NaN, etc.
    assert np.isnan(ref[3]).all() and np.isnan(ref[7, 9]) and ref[11, 13] == -np.inf
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    fin = ~np.isnan(ref)
    np.testing.assert_allclose(out[fin], ref[fin], rtol=1e-6)


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("precision, splits", [("fp32_tc", 1), ("fp16_ec_scaled", 3), ("tf32_ec", 2)])
def test_fold_sums_non_finite_elements_again(trans_a, trans_b, precision, splits):
    """FOLD's parts meet Inf * 0 and Inf - Inf in the corrections (an exact lo = 0 or a
    negative lo beside hi = Inf), so its epilogue sums each NaN element again from A and B
    (ec_dot_again): every stored layout, a batch with its strides, split over K.  Inf and NaN
    where IEEE has them, the finite elements within SGEMM's error."""
    needs("ec_wgmma")
    rng = np.random.default_rng(31)
    nb, M, N, K = 2, 150, 140, 1200
    a = rng.uniform(-1, 1, (nb, M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (nb, K, N)).astype(np.float32)
    b[:, :, :8] = np.round(b[:, :, :8] * 64) / 64  # exact in FP16 and TF32: lo = 0
    a[0, 3, 5] = np.inf
    a[1, 7, 1100] = -np.inf
    a[1, 9, 9] = np.nan
    b[0, 700, 20] = np.inf
    ref = a.astype(np.float64) @ b.astype(np.float64)
    da = cp.asarray(np.ascontiguousarray(a.transpose(0, 2, 1))).transpose(0, 2, 1) if trans_a else cp.asarray(a)
    db = cp.asarray(np.ascontiguousarray(b.transpose(0, 2, 1))).transpose(0, 2, 1) if trans_b else cp.asarray(b)
    out = cp.full((nb, M, N), 7.0, dtype=np.float32)
    gemmlab.matmul(da, db, out=out, precision=precision, kernel="ec_wgmma", SPLITK=splits)
    p = gemmlab.last_plan()
    assert p.params["FOLD"] == 1 and (p.problem.op_a, p.problem.op_b) == ("NT"[trans_a], "NT"[trans_b])
    got = out.get()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    fin = np.isfinite(ref)
    err = np.linalg.norm(got[fin] - ref[fin]) / np.linalg.norm(ref[fin])
    assert err < 1e-6, err


def test_numpy_inputs():
    rng = np.random.default_rng(6)
    a, b = make_inputs("uniform_small", 50, 70, rng), make_inputs("uniform_small", 70, 30, rng)
    out = gemmlab.matmul(a, b, precision="fp32_tc", kernel="ec_wmma")
    assert isinstance(out, np.ndarray) and gemmlab.last_plan().method == "fp16_ec_scaled"
    assert compare(out, reference(a, b)).ok(1e-6)


def test_exponent_histogram_matches_numpy():
    """The GPU histogram behind fp32_tc, on a strided view with zeros, subnormals,
    Inf and NaN, against NumPy's count."""
    from gemmlab.core import methods
    from gemmlab.runtime.device import gpu_info

    rng = np.random.default_rng(7)
    base = cp.asarray(make_inputs("log_uniform", 300, 700, rng))
    base[5, :40] = 0.0
    base[6, 3] = np.float32(1e-42)
    base[7, 7], base[8, 8] = np.inf, np.nan
    view = base[:, 13:613]  # leading dimension 700, 600 columns
    stats = methods.exponent_stats(
        gpu_info(0), cp.cuda.get_current_stream().ptr, [(view.data.ptr, 300, 600, 700), (view.data.ptr, 0, 600, 700)]
    )
    np.testing.assert_array_equal(stats[0].counts, methods.ExponentStats.of(view.get()).counts)
    assert stats[1].counts.sum() == 0


@pytest.mark.parametrize(
    "rows, cols, ld, offset",
    [
        (37, 1, 1, 0),
        (5, 3, 7, 1),
        (64, 5, 5, 2),
        (9, 130, 133, 3),
        (3, 4099, 4100, 0),
        (2, 1030, 1031, 1),
        (1, 17, 17, 3),
    ],
)
def test_exponent_histogram_every_row_alignment(rows, cols, ld, offset):
    """Rows that start at each 4-byte offset from a 16-byte boundary and end anywhere:
    the elements before the first boundary and after the last are counted one by one,
    the rest four at a time."""
    from gemmlab.core import methods
    from gemmlab.runtime.device import gpu_info

    rng = np.random.default_rng(rows * cols + offset)
    base = cp.asarray(make_inputs("log_uniform", rows * ld + offset + 8, 1, rng).ravel())
    view = base[offset : offset + rows * ld].reshape(rows, ld)[:, :cols]
    stats = methods.exponent_stats(gpu_info(0), cp.cuda.get_current_stream().ptr, [(view.data.ptr, rows, cols, ld)])
    np.testing.assert_array_equal(stats[0].counts, methods.ExponentStats.of(view.get()).counts)
    assert stats[0].counts.sum() == rows * cols


@pytest.mark.parametrize(
    "kernel, params",
    [
        ("ec_wmma", {}),
        ("ec_wgmma", {"STAGES": 2}),
        ("ec_wgmma", {"STAGES": 3}),
        ("ec_wgmma", {"STAGES": 3, "BN": 96}),
        ("ec_wgmma", {"STAGES": 2, "BN": 96, "FOLD": 0}),
        ("ec_wgmma", {"STAGES": 4, "BN": 96, "FOLD": 0}),
    ],
    ids=str,
)
@pytest.mark.parametrize("precision", ["fp16_ec", "tf32_ec"])
def test_many_tiles_per_block(kernel, params, precision):
    """More output tiles than SMs (ec_wgmma's persistent blocks take several each, and
    its ring's phases carry over from tile to tile), ragged edges on every side."""
    needs(kernel)
    rng = np.random.default_rng(21)
    M, N, K = 2000, 1900, 333
    a = cp.asarray(make_inputs("normal", M, K, rng))
    b = cp.asarray(make_inputs("normal", K, N, rng))
    ref = reference(a, b, keep_on_gpu=True)
    out = cp.full((M, N), np.nan, dtype=np.float32)
    gemmlab.matmul(a, b, out=out, precision=precision, **kw(kernel), **params)
    err = compare(out, ref)
    assert err.nonfinite == 0 and err.rel_fro <= 1.5 * compare(a @ b, ref).rel_fro, err


@pytest.mark.parametrize("shape", [(1, 300, 257), (13, 129, 65), (200, 96, 9)], ids=lambda s: "x".join(map(str, s)))
def test_fp32_tc_runs_thin_products_as_fp32(shape):
    """With a side of at most 16, fp32_tc (kernel="auto") runs a float32 rung (FP32 on the CUDA
    cores, choose.fp32_tc_on_cuda_cores), as accurate as SGEMM; a named ec kernel still runs."""
    M, N, K = shape
    rng = np.random.default_rng(M * N + K)
    a, b = cp.asarray(make_inputs("normal", M, K, rng)), cp.asarray(make_inputs("normal", K, N, rng))
    out = cp.full((M, N), np.nan, dtype=np.float32)
    gemmlab.matmul(a, b, out=out, precision="fp32_tc")
    p = gemmlab.last_plan()
    assert p.method == "fp32" and p.problem.dtype == "float32" and "at most 16" in p.reason, p.describe()
    ref = reference(a, b, keep_on_gpu=True)
    assert compare(out, ref).rel_fro <= 1.5 * compare(a @ b, ref).rel_fro + 1e-7
    gemmlab.matmul(a, b, out=out, precision="fp32_tc", kernel="ec_wmma")
    named = gemmlab.last_plan()  # the method chosen from the data: fp16_ec, fp16_ec_scaled or tf32_ec
    assert named.spec.name == "ec_wmma" and named.method in ("fp16_ec", "fp16_ec_scaled", "tf32_ec"), named.describe()


@pytest.mark.parametrize("op_b", ["N", "T"], ids=["dY@W", "x@W.t()"])
def test_fp32_tc_decode_products_keep_sgemm_accuracy(op_b):
    """One token against a long K (an LM head's input gradient: K = 128256), op(B) either
    way: fp32_tc runs it on gemv (FP32 on the CUDA cores), whose blocked sums keep the
    error within 1.5x SGEMM's (run 87: 2.6x before them)."""
    M, N, K = 1, 512, 128256
    rng = np.random.default_rng(11)
    a = cp.asarray(make_inputs("uniform", M, K, rng))
    stored = make_inputs("uniform", *((K, N) if op_b == "N" else (N, K)), rng)
    b = cp.asarray(stored) if op_b == "N" else cp.asarray(stored).T
    out = cp.full((M, N), np.nan, dtype=np.float32)
    gemmlab.matmul(a, b, out=out, precision="fp32_tc")
    p = gemmlab.last_plan()
    assert p.method == "fp32" and p.spec.name == "gemv", p.describe()
    ref = reference(a, b, keep_on_gpu=True)
    err, sgemm = compare(out, ref), compare(a @ b, ref)
    assert err.nonfinite == 0 and err.rel_fro <= 1.5 * sgemm.rel_fro, (err, sgemm)


# -- ec_wgmma's batches: one launch of each pass for the whole batch --------------------------


def _stored(nb, rows, cols, rng, gap, trans=False):
    """nb matrices (None: one 2-D matrix) of op(x), rows x cols, fresh N(0, 1) values stored
    row-major (or transposed: a column-major view) in one flat buffer, rows padded by one
    element (no 16-byte rows) and ``gap`` NaN elements between matrices; returns the view and
    the values as the product sees them, in FP64, shaped (nb or 1, rows, cols)."""
    n = nb or 1
    sr, sc = (cols, rows) if trans else (rows, cols)
    ld, per = sc + 1, sr * (sc + 1) + gap
    vals = make_inputs("normal", n * sr, sc, rng).reshape(n, sr, sc)
    host = np.full(n * per + 3, np.nan, np.float32)
    for i in range(n):
        host[i * per : i * per + sr * ld].reshape(sr, ld)[:, :sc] = vals[i]
    buf = cp.asarray(host)
    view = cp.lib.stride_tricks.as_strided(buf, (n, sr, sc), (per * 4, ld * 4, 4))
    if trans:
        view, vals = view.transpose(0, 2, 1), vals.transpose(0, 2, 1)
    return (view if nb else view[0]), vals.astype(np.float64)


class _SplitAndGemmLaunches:
    """The launches of ec_wgmma's split pre-pass (their grids, and the matrices of A and of B
    each splits), of the GEMM kernels and of split-K's reductions (the choice's histograms
    and choose_method, which fp32_tc launches first, not counted)."""

    def __init__(self, monkeypatch):
        from gemmlab.core import executor
        from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_SOURCE, splitk_reduce_kernel
        from gemmlab.kernels.ec import ec_wgmma
        from gemmlab.kernels.ec.choose_method import CHOOSE_KERNEL, CHOOSE_SOURCE
        from gemmlab.kernels.ec.exponent_histogram import EXPONENT_HISTOGRAM_KERNEL, EXPONENT_HISTOGRAM_SOURCE
        from gemmlab.runtime import compile as rt_compile
        from gemmlab.runtime.device import gpu_info

        arch = gpu_info(0).arch
        choice = [
            rt_compile.load_kernel(src, name, arch)
            for src, name in ((CHOOSE_SOURCE, CHOOSE_KERNEL), (EXPONENT_HISTOGRAM_SOURCE, EXPONENT_HISTOGRAM_KERNEL))
        ]
        reduce = rt_compile.load_kernel(SPLITK_REDUCE_SOURCE, splitk_reduce_kernel("float32"), arch)
        self.split_grids, self.split_matrices, self.gemms, self.reductions = [], [], 0, 0
        executor.CACHE.clear()  # a fresh prepared call with the limits of this test
        real_shaped = executor.launch_shaped

        def shaped(kernel, shape, stream, args):
            split = next((key for key, (k, _) in ec_wgmma._split_launches.items() if k is kernel), None)
            if split is not None:
                self.split_grids.append(tuple(shape.grid))
                # matrices_a, matrices_b: split_scaled.cu's B has no scale argument before them
                scaled = split[0].startswith("gemmlab::ec_split_scaled")  # the key begins with the kernel's name
                self.split_matrices.append((int(args[6]), int(args[10 if scaled else 11])))
            elif kernel is reduce:
                self.reductions += 1
            elif not any(kernel is k for k in choice):
                self.gemms += 1
            return real_shaped(kernel, shape, stream, args)

        monkeypatch.setattr(executor, "launch_shaped", shaped)


def _ec_batch(monkeypatch, precision, nb_a, nb_b, M, N, K, *, trans_b=False, beta=0.0, per_launch=None, **params):
    """op(a) @ op(b) (numpy.matmul broadcasting) on ec_wgmma into an out with gaps between its
    matrices and padded rows, NaN before the call (beta = 0 must not read it); checked against
    FP64 within 1.5x of SGEMM's error, out's gaps untouched; returns the launches.
    ``per_launch``: matrices a launch may take (BATCH_WORKSPACE_LIMIT lowered to that many);
    ``params``: ec_wgmma's tile parameters."""
    from gemmlab.core import executor
    from gemmlab.kernels.ec.ec_wgmma import ec_parts_bytes
    from gemmlab.kernels.spec import Problem

    needs("ec_wgmma")
    rng = np.random.default_rng(M + 3 * N + 7 * K + 11 * (nb_a or 0) + 13 * (nb_b or 0))
    a, a64 = _stored(nb_a, M, K, rng, gap=3)
    b, b64 = _stored(nb_b, K, N, rng, gap=5, trans=trans_b)
    nb = max(nb_a or 1, nb_b or 1)
    ldc, out_gap = N + 2, 7
    out_buf = cp.full(nb * (M * ldc + out_gap) + 5, np.nan, np.float32)
    out = cp.lib.stride_tricks.as_strided(out_buf, (nb, M, N), ((M * ldc + out_gap) * 4, ldc * 4, 4))
    c0 = make_inputs("normal", nb * M, N, rng).reshape(nb, M, N)
    if beta:
        out[...] = cp.asarray(c0)
    if per_launch:
        monkeypatch.setattr(
            executor, "BATCH_WORKSPACE_LIMIT", per_launch * ec_parts_bytes(Problem(M, N, K, True, "fp16_ec"))
        )
    launches = _SplitAndGemmLaunches(monkeypatch)
    alpha = 0.7
    gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, precision=precision, kernel="ec_wgmma", **params)
    cp.cuda.Device().synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "ec_wgmma" and not p.fallback_reason, p.describe()
    assert all(p.params[k] == v for k, v in params.items()), p.describe()
    ref = float(np.float32(alpha)) * np.matmul(a64, b64) + float(np.float32(beta)) * c0.astype(np.float64)
    got = out.get().astype(np.float64)
    assert np.isfinite(got).all(), "unwritten or non-finite outputs"
    sgemm = (np.float32(alpha) * cp.matmul(a, b) + np.float32(beta) * cp.asarray(c0)).get().astype(np.float64)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    sgemm_err = np.linalg.norm(sgemm - ref) / np.linalg.norm(ref)
    assert err <= 1.5 * sgemm_err + 1e-8, f"{err:.2e} vs SGEMM {sgemm_err:.2e} ({p.describe()})"
    written = np.zeros(out_buf.size, bool)
    written_idx = cp.lib.stride_tricks.as_strided(
        cp.arange(out_buf.size), out.shape, tuple(s * 2 for s in out.strides)
    ).get()  # int64 strides
    written[written_idx.ravel()] = True
    assert np.isnan(out_buf.get()[~written]).all(), "out's gaps or padding were written"
    return launches


# Launches of one batch chunk: the split of A and B (one launch), then the GEMM; fp32_tc launches
# both candidates (FP16 and TF32 parts), of which the one not chosen returns at once.
EC_CANDIDATES = {"fp16_ec": 1, "tf32_ec": 1, "fp32_tc": 2}


@pytest.mark.parametrize("precision", ["fp16_ec", "tf32_ec", "fp32_tc"])
@pytest.mark.parametrize(
    "shape, nb, beta, trans_b",
    [
        ((133, 101, 77), 5, 0.0, False),
        ((133, 101, 77), 40, -1.3, True),  # 160 tiles: several a block
        ((70, 300, 129), 3, -1.3, False),
    ],
    ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x),
)
def test_ec_wgmma_batch_is_one_launch_of_each_pass(monkeypatch, precision, shape, nb, beta, trans_b):
    """A batch with gaps between the matrices of a, b and out, sizes that are multiples of no
    tile, rows of no 16-byte multiple: one split launch for both operands (gridDim.y: the
    matrices, gridDim.z: the operand) and one GEMM launch per candidate, every matrix right,
    out's gaps untouched."""
    M, N, K = shape
    launches = _ec_batch(monkeypatch, precision, nb, nb, M, N, K, trans_b=trans_b, beta=beta)
    n = EC_CANDIDATES[precision]
    assert launches.gemms == n, launches.gemms
    assert len(launches.split_grids) == n and all(g[1:] == (nb, 2) for g in launches.split_grids), launches.split_grids


@pytest.mark.parametrize("precision", ["fp16_ec", "fp32_tc"])
@pytest.mark.parametrize("shared", ["a", "b"])
def test_ec_wgmma_splits_a_shared_operand_once(monkeypatch, precision, shared):
    """numpy.matmul broadcasting: a 2-D operand every matrix shares (stride 0) is split once
    (one matrix; the split's grid is the batch's, whose other blocks return for it) and read
    at batch coordinate 0 by every work item."""
    launches = _ec_batch(
        monkeypatch, precision, None if shared == "a" else 6, None if shared == "b" else 6, 150, 200, 72, beta=0.5
    )
    n = EC_CANDIDATES[precision]
    grids = [g[1:] for g in launches.split_grids]
    assert launches.gemms == n and grids == [(6, 2)] * n, grids
    assert launches.split_matrices == [(1, 6) if shared == "a" else (6, 1)] * n, launches.split_matrices


@pytest.mark.parametrize("precision", ["tf32_ec", "fp32_tc"])
def test_ec_wgmma_batch_in_chunks_of_the_workspace_limit(monkeypatch, precision):
    """Parts of more matrices than BATCH_WORKSPACE_LIMIT allows (lowered to 3 matrices' worth):
    a chunk of 3, 3 and 1, each a split of A and B and a GEMM launch, at its offsets."""
    launches = _ec_batch(monkeypatch, precision, 7, 7, 129, 97, 33, beta=0.5, per_launch=3)
    n = EC_CANDIDATES[precision]
    assert launches.gemms == 3 * n, launches.gemms
    assert sorted(g[1] for g in launches.split_grids) == sorted([3, 3, 1] * n), launches.split_grids


def _needs_ec_wgmma_on_132_sms():
    """Skip where ec_wgmma cannot run or the GPU has other than the 132 SMs the tail sizes are chosen for."""
    from gemmlab.runtime.device import gpu_info

    needs("ec_wgmma")
    if gpu_info(0).sm_count != 132:
        pytest.skip("the tail sizes are chosen for 132 SMs")


def _tail_of_last_call(nb):
    """(tiles of the stream-K tail, slices) of the GEMM the last fp32_tc call chose (ec_wgmma_tail)."""
    from gemmlab.kernels.ec.ec_wgmma import ec_wgmma_tail

    return ec_wgmma_tail(gemmlab.last_plan(), nb, 1)


@pytest.mark.parametrize(
    "M, N, K, trans_b, beta, tail",
    [
        (1606, 1586, 1000, False, 0.6, (37, 3)),  # 169 tiles on 132 SMs: the last 37 cut in 3 slices of K
        (1700, 1500, 2100, True, 0.0, (36, 3)),
    ],  # 168 tiles, a @ w.t(): the last 36 in 3
    ids=["169tiles", "168tiles-wT"],
)
def test_ec_wgmma_stream_k_tail(M, N, K, trans_b, beta, tail):
    """fp32_tc where the tiles would leave the persistent grid's last round part empty: the last
    round's tiles cut into slices of K, the last slice of each to finish adding them all up.
    Right against FP64 within 1.5x SGEMM's error on every element written (out NaN before a
    beta = 0 call), and bitwise the same at a second call: the slices are added in their order,
    whichever is last, and each tile's counter is left zero for the next call."""
    _needs_ec_wgmma_on_132_sms()
    rng = np.random.default_rng(M + K)
    a, a64 = _stored(None, M, K, rng, gap=3)
    b, b64 = _stored(None, K, N, rng, gap=5, trans=trans_b)
    c0 = make_inputs("normal", M, N, rng)
    runs = []
    for _ in range(2):
        out = cp.asarray(c0) if beta else cp.full((M, N), np.nan, np.float32)
        gemmlab.matmul(a, b, out=out, alpha=0.7, beta=beta, precision="fp32_tc", kernel="ec_wgmma")
        runs.append(out.get())
    assert _tail_of_last_call(1) == tail, gemmlab.last_plan().describe()
    ref = float(np.float32(0.7)) * (a64[0] @ b64[0]) + float(np.float32(beta)) * c0.astype(np.float64)
    sgemm = (np.float32(0.7) * cp.matmul(a, b) + np.float32(beta) * cp.asarray(c0)).get().astype(np.float64)
    got = runs[0].astype(np.float64)
    assert np.isfinite(got).all(), "unwritten or non-finite outputs"
    err, sgemm_err = (np.linalg.norm(x - ref) / np.linalg.norm(ref) for x in (got, sgemm))
    assert err <= 1.5 * sgemm_err + 1e-8, (err, sgemm_err)
    assert np.array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32)), "a second call differs"


def test_ec_wgmma_stream_k_tail_across_a_batch(monkeypatch):
    """40 matrices of 4 tiles: 160 work tiles, of which the last 28 (the last 7 matrices) form
    the tail, in 2 slices each; every matrix right, out's gaps untouched."""
    _needs_ec_wgmma_on_132_sms()
    _ec_batch(monkeypatch, "fp32_tc", 40, 40, 256, 256, 600, beta=-1.3)
    assert _tail_of_last_call(40) == (28, 2), gemmlab.last_plan().describe()


def test_ec_wgmma_stream_k_tail_sums_inf_again():
    """An Inf in B's last column, whose outputs all lie in the tail's tiles: the slice that holds
    it sums its elements again in FP32 (FOLD's Inf * 0 between the parts), the others add finite
    partials, and every element of that column is the FP64 product's signed Inf; the rest stays
    within 1.5x SGEMM's error."""
    _needs_ec_wgmma_on_132_sms()
    M, N, K = 1606, 1586, 1000
    rng = np.random.default_rng(5)
    a = make_inputs("uniform", M, K, rng)
    b = make_inputs("uniform", K, N, rng)
    b[700, N - 1] = np.inf
    out = cp.full((M, N), np.nan, np.float32)
    gemmlab.matmul(cp.asarray(a), cp.asarray(b), out=out, precision="fp32_tc", kernel="ec_wgmma")
    assert _tail_of_last_call(1) == (37, 3), gemmlab.last_plan().describe()
    got = out.get()
    with np.errstate(invalid="ignore", over="ignore"):
        ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(got[:, -1], ref[:, -1].astype(np.float32)) and np.isinf(got[:, -1]).all()
    finite = ref[:, :-1]
    err = np.linalg.norm(got[:, :-1] - finite) / np.linalg.norm(finite)
    sgemm = (cp.asarray(a[:, :]) @ cp.asarray(np.where(np.isinf(b), 0, b))).get()[:, :-1]
    assert err <= 1.5 * np.linalg.norm(sgemm - finite) / np.linalg.norm(finite) + 1e-8, err


def test_auto_runs_an_attention_batch_on_ec_wgmma(monkeypatch):
    """fp32_tc with kernel="auto" on an attention-sized batch of Q @ K^T (16 heads, S = 1024:
    2^31 multiply-adds, ec_wgmma.ec_wgmma_pays): ec_wgmma, one GEMM launch per candidate."""
    needs("ec_wgmma")
    rng = np.random.default_rng(5)
    q = cp.asarray(make_inputs("normal", 16 * 1024, 128, rng).reshape(16, 1024, 128))
    k = cp.asarray(make_inputs("normal", 16 * 1024, 128, rng).reshape(16, 1024, 128))
    launches = _SplitAndGemmLaunches(monkeypatch)
    got = gemmlab.matmul(q, k.transpose(0, 2, 1), precision="fp32_tc")
    cp.cuda.Device().synchronize()
    assert gemmlab.last_plan().spec.name == "ec_wgmma" and launches.gemms == 2, gemmlab.last_plan().describe()
    ref = cp.matmul(q.astype(cp.float64), k.astype(cp.float64).transpose(0, 2, 1))
    sgemm = cp.matmul(q, k.transpose(0, 2, 1))
    err, sgemm_err = float(cp.linalg.norm(got - ref)), float(cp.linalg.norm(sgemm - ref))
    assert err <= 1.5 * sgemm_err + 1e-8 * float(cp.linalg.norm(ref)), (err, sgemm_err)


# -- ec_wgmma split over K: FP32 partial tiles in a workspace, added into C by splitk_reduce -------

# Multiples of no tile; the last has K shorter than most splits: 2 K-steps of FP16 parts (4 of
# TF32), so some slices are empty and must still write their zero partial.
EC_SPLIT_SHAPES = [(130, 200, 1000), (257, 97, 4099), (33, 65, 100)]


def _split_ran(splits):
    p = gemmlab.last_plan()
    assert p.spec.name == "ec_wgmma" and p.params["SPLITK"] == splits and not p.fallback_reason, p.describe()
    return p


@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("shape", EC_SPLIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("precision", ["fp16_ec", "fp16_ec_scaled", "tf32_ec"])
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.7, -1.3)])
def test_ec_wgmma_split_k_on_odd_shapes(splits, shape, precision, alpha, beta):
    """SPLITK 2, 3 and 7 with every method, against FP64 within 1.5x of SGEMM's error (or
    1e-6 where K is short), out poisoned (NaN) where beta = 0 must not read it, else the
    reduction adds beta * C."""
    needs("ec_wgmma")
    M, N, K = shape
    rng = np.random.default_rng(M + 3 * N + 7 * K + 11 * splits)
    a = cp.asarray(make_inputs("normal", M, K, rng))
    b = cp.asarray(make_inputs("normal", K, N, rng))
    c0 = cp.asarray(make_inputs("normal", M, N, rng))
    out = cp.full((M, N), np.nan, dtype=np.float32) if beta == 0 else c0.copy()
    gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, precision=precision, kernel="ec_wgmma", SPLITK=splits)
    p = _split_ran(splits)
    assert p.method == precision, p.describe()
    ref = reference(a, b, alpha, beta, c0, keep_on_gpu=True)
    sgemm = compare(np.float32(alpha) * (a @ b) + np.float32(beta) * c0, ref).rel_fro
    err = compare(out, ref)
    assert err.ok(max(1.5 * sgemm, 1e-6)), f"{err.rel_fro:.2e} vs SGEMM {sgemm:.2e} ({p.describe()})"


@pytest.mark.parametrize(
    "inputs, method", [("uniform", "fp16_ec"), ("uniform_small", "fp16_ec_scaled"), ("log_uniform", "tf32_ec")]
)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.7, -1.3)])
def test_ec_wgmma_split_k_under_a_choice_on_the_gpu(inputs, method, alpha, beta):
    """fp32_tc split 3 ways: both candidates' GEMMs and reductions are launched, and only the
    chosen method's reduction adds into out -- the other's would add a workspace its GEMM never
    wrote (beta != 0 shows a second reduction; the previous call's slices of other data show
    a stale one).  Three calls on new data in the same buffers (the second and third on the
    launches the first kept), each right."""
    needs("ec_wgmma")
    M, N, K = 130, 200, 1000
    rng = np.random.default_rng(17)
    a, b = cp.empty((M, K), dtype=np.float32), cp.empty((K, N), dtype=np.float32)
    c0, out = cp.empty((M, N), dtype=np.float32), cp.empty((M, N), dtype=np.float32)
    for _ in range(3):
        a[...] = cp.asarray(make_inputs(inputs, M, K, rng))
        b[...] = cp.asarray(make_inputs(inputs, K, N, rng))
        c0[...] = cp.asarray(make_inputs("normal", M, N, rng))
        out[...] = np.nan if beta == 0 else c0
        gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, precision="fp32_tc", kernel="ec_wgmma", SPLITK=3)
        p = _split_ran(3)
        assert p.method == fp32_tc_method(p, method), p.reason
        ref = reference(a, b, alpha, beta, c0, keep_on_gpu=True)
        sgemm = compare(np.float32(alpha) * (a @ b) + np.float32(beta) * c0, ref).rel_fro
        err = compare(out, ref)
        assert err.ok(max(1.5 * sgemm, 1e-6)), f"{err.rel_fro:.2e} vs SGEMM {sgemm:.2e} ({p.describe()})"


@pytest.mark.parametrize("precision", ["fp16_ec", "tf32_ec", "fp32_tc"])
@pytest.mark.parametrize("shared", [None, "a", "b"])
def test_ec_wgmma_split_k_batch(monkeypatch, precision, shared):
    """A batch of 5 with gaps between the matrices (or one operand every matrix shares), split 3
    ways: one split launch, one GEMM (its work items every (matrix, slice, tile)) and one
    reduction per candidate; every matrix right, out's gaps untouched."""
    nb_a, nb_b = (None if shared == "a" else 5), (None if shared == "b" else 5)
    launches = _ec_batch(monkeypatch, precision, nb_a, nb_b, 133, 101, 1000, beta=-1.3, SPLITK=3)
    n = EC_CANDIDATES[precision]
    assert (launches.gemms, launches.reductions, len(launches.split_grids)) == (n, n, n), launches.__dict__
    _ec_batch(monkeypatch, precision, nb_a, nb_b, 70, 300, 129, SPLITK=7)  # beta = 0: out poisoned


def test_auto_splits_a_128_token_product_on_ec_wgmma(monkeypatch):
    """fp32_tc with kernel="auto" at 128 x 4096 x 16384 (one row of tiles: most SMs idle
    unsplit; K long enough that ec_wgmma's model beats FP32's): ec_wgmma split over K
    (ec_wgmma_auto_split), one GEMM and one reduction per candidate, the result right, twice
    (the second call on the prepared call's kept launches), out poisoned before each."""
    needs("ec_wgmma")
    from gemmlab.runtime.device import gpu_info

    M, N, K = 128, 4096, 16384
    rng = np.random.default_rng(19)
    a = cp.asarray(make_inputs("uniform", M, K, rng))
    b = cp.asarray(make_inputs("uniform", K, N, rng))
    ref = reference(a, b, keep_on_gpu=True)
    sgemm = compare(a @ b, ref).rel_fro
    launches = _SplitAndGemmLaunches(monkeypatch)
    out = cp.empty((M, N), dtype=np.float32)
    for _ in range(2):
        out.fill(np.nan)
        gemmlab.matmul(a, b, out=out, precision="fp32_tc")
        p = gemmlab.last_plan()
        assert p.spec.name == "ec_wgmma" and p.params["SPLITK"] > 1 and p.method == "fp16_ec_scaled", p.describe()
        tiles = -(-M // 128) * -(-N // p.params["BN"])
        assert tiles * p.params["SPLITK"] <= gpu_info(0).sm_count
        err = compare(out, ref)
        assert err.ok(1.5 * sgemm), f"{err.rel_fro:.2e} vs SGEMM {sgemm:.2e} ({p.describe()})"
    assert (launches.gemms, launches.reductions) == (4, 4), launches.__dict__
