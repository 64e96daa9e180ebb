"""precision="fp32_tc"'s method chosen on the GPU (kernels/ec/choose_method.cu):
the same choice as gemmlab.core.methods.choose on every input -- random and crafted
histograms, the input sets of `gemmlab accuracy`, edge cases, batches --, no
host synchronisation during the call, and last_plan() reading the choice back
when asked."""

import time

import numpy as np
import pytest

import gemmlab
from gemmlab.core import methods
from gemmlab.tools.accuracy import INPUT_SETS, make_inputs
from gemmlab.tools.verify import compare, reference
from ec_expect import per_row

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


def _gpu():
    from gemmlab.runtime.device import gpu_info

    return gpu_info(cp.cuda.Device().id)


def _device_choices(pairs, scaled_only):
    """choose_method.cu run on each (counts of A, counts of B): the records, read back."""
    from gemmlab.kernels.ec.choose_method import CHOICE_FIELDS, CHOOSE_KERNEL, CHOOSE_SOURCE, CHOOSE_THREADS
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime.launch import launch

    gpu = _gpu()
    kernel = rt_compile.load_kernel(CHOOSE_SOURCE, CHOOSE_KERNEL, gpu.arch)
    hists = cp.asarray(np.array([[a, b] for a, b in pairs], dtype=np.uint64))
    records = cp.full((len(pairs), CHOICE_FIELDS), -7, dtype=np.int64)
    stream = cp.cuda.get_current_stream().ptr
    for i in range(len(pairs)):
        launch(
            kernel,
            (1, 1, 1),
            (CHOOSE_THREADS, 1, 1),
            0,
            stream,
            hists[i, 0].data.ptr,
            hists[i, 1].data.ptr,
            np.int32(scaled_only),
            records[i].data.ptr,
            0,
        )
    return records.get()


def _agree(pairs):
    """The device's choice equals gemmlab.core.methods.choose's (and scaled_choice's) for every pair."""
    for scaled_only in (False, True):
        rule = methods.scaled_choice if scaled_only else methods.choose
        for (a, b), record in zip(pairs, _device_choices(pairs, scaled_only)):
            want = rule(methods.ExponentStats(np.asarray(a, np.int64)), methods.ExponentStats(np.asarray(b, np.int64)))
            got = methods.choice_of_record(record, scaled_only)
            assert (got.method, got.scale_a_exp, got.scale_b_exp) == (
                want.method,
                want.scale_a_exp,
                want.scale_b_exp,
            ), (want.reason, got.reason)
            if not scaled_only:  # the report's ranges say what choose's reason says
                assert got.reason.endswith(want.reason), (got.reason, want.reason)


def test_random_and_boundary_histograms():
    rng = np.random.default_rng(1)
    pairs = []
    for _ in range(300):
        pair = []
        for _ in range(2):
            counts = np.zeros(256, np.int64)
            lo, hi = sorted(rng.integers(0, 256, 2))
            counts[lo : hi + 1] = rng.integers(0, 1000, hi - lo + 1) * (rng.random(hi - lo + 1) < 0.5)
            counts[0] = rng.integers(0, 3) * rng.integers(0, 100)
            counts[255] = rng.integers(0, 2) * rng.integers(0, 10)
            pair.append(counts)
        pairs.append(pair)
    # Exactly at the underflow limit and one past it, unscaled and after scaling.
    for extra in (0, 1):
        for top in (0, 14, 20, -10):
            counts = np.zeros(256, np.int64)
            counts[127 + top] = 1000 * methods.UNDERFLOW_DEN
            counts[127 - 40] = 1000 * methods.UNDERFLOW_NUM + extra
            ok = np.zeros(256, np.int64)
            ok[127] = 5
            pairs += [(counts, ok), (ok, counts)]
    # The largest exponent at FP16_TOP and one above; a scale clamped at 2^64.
    for top in (methods.FP16_TOP, methods.FP16_TOP + 1, -100, 127):
        counts = np.zeros(256, np.int64)
        counts[127 + top] = 3
        pairs.append((counts, counts))
    zero = np.zeros(256, np.int64)
    pairs += [(zero, zero), (zero, pairs[0][1])]
    _agree(pairs)


def _edge_inputs(rng):
    u = lambda r, c: make_inputs("uniform", r, c, rng)  # noqa: E731
    a = u(64, 96)
    nonfinite = u(64, 96)
    nonfinite[3, 4], nonfinite[5, 6], nonfinite[7, 8] = np.nan, np.inf, -np.inf
    subnormal = u(64, 96) * np.float32(2.0**-126)
    big = u(64, 96) * np.float32(1e5)
    return {
        "zeros": (np.zeros((64, 96), np.float32), np.zeros((96, 48), np.float32)),
        "nan_inf": (nonfinite, u(96, 48)),
        "subnormals": (subnormal, u(96, 48)),
        "one_wide": (a, make_inputs("log_uniform", 96, 48, rng)),
        "above_65504": (big, u(96, 48)),
        "tiny": (u(64, 96) * np.float32(2.0**-100), u(96, 48)),
    }


@pytest.mark.parametrize(
    "case", list(INPUT_SETS) + ["zeros", "nan_inf", "subnormals", "one_wide", "above_65504", "tiny"]
)
def test_matmul_chooses_as_ec_choose(case):
    """Through gemmlab.matmul: last_plan()'s method and scales are methods.choose's on the
    host counts of the same arrays, and the reason says the GPU chose."""
    rng = np.random.default_rng(2)
    if case in INPUT_SETS:
        a, b = make_inputs(case, 64, 96, rng), make_inputs(case, 96, 48, rng)
    else:
        a, b = _edge_inputs(rng)[case]
    for precision, rule in (("fp32_tc", methods.choose), ("fp16_ec_scaled", methods.scaled_choice)):
        want = rule(methods.ExponentStats.of(a), methods.ExponentStats.of(b))
        # ec_wmma named: auto runs a product this thin as FP32 where ec_wgmma builds (Hopper)
        out = gemmlab.matmul(cp.asarray(a), cp.asarray(b), precision=precision, kernel="ec_wmma")
        p = gemmlab.last_plan()
        assert (p.method, p.extra["scale_a"], p.extra["scale_b"]) == (
            want.method,
            2.0**want.scale_a_exp,
            2.0**want.scale_b_exp,
        ), p.reason
        assert p.reason.startswith(
            f"chosen on the GPU: {want.method}, scales 2^{want.scale_a_exp} (A) and 2^{want.scale_b_exp} (B)"
        ), p.reason
        assert p.problem.dtype == want.kernel_dtype and f"[{want.method}]" in p.describe()
        if case in ("uniform", "normal", "uniform_large") and precision == "fp32_tc":
            assert compare(out, reference(a, b)).ok(1e-6)


def test_a_batch_is_chosen_from_all_its_matrices():
    """One matrix of a batch with large values: the choice over the whole batch
    (histograms summed on the GPU) is the scaled method, for every matrix."""
    rng = np.random.default_rng(3)
    a = np.stack([make_inputs("uniform", 40, 70, rng) for _ in range(5)])
    a[3] *= np.float32(2.0**16)  # largest 2^15: scaled by 2^-1, the rest stay above 2^-13
    b = make_inputs("uniform", 70, 30, rng)
    want = methods.choose(
        methods.ExponentStats(sum(methods.ExponentStats.of(x).counts for x in a)), methods.ExponentStats.of(b)
    )
    assert want.method == "fp16_ec_scaled"
    out = gemmlab.matmul(cp.asarray(a), cp.asarray(b), precision="fp32_tc", kernel="ec_wmma")
    p = gemmlab.last_plan()
    assert (p.method, p.extra["scale_a"]) == (want.method, 2.0**want.scale_a_exp), p.reason
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    err = np.linalg.norm(out.get() - ref) / np.linalg.norm(ref)
    assert err < 1e-6, err


_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
"""


@pytest.mark.parametrize("kernel", ["ec_wmma", "ec_wgmma"])
@pytest.mark.parametrize("precision", ["fp32_tc", "fp16_ec_scaled"])
def test_the_call_does_not_wait_for_the_gpu(precision, kernel):
    """Behind a kernel that keeps the stream busy for about half a second, the call
    returns at once and the stream is still busy: nothing in it synchronises (on
    ec_wgmma, fp32_tc's split_scaled.cu and the record's copy to the report too)."""
    if kernel not in _kernels():
        pytest.skip("ec_wgmma needs sm_90a")
    rng = np.random.default_rng(4)
    a, b = cp.asarray(make_inputs("uniform", 512, 512, rng)), cp.asarray(make_inputs("log_uniform", 512, 512, rng))
    gemmlab.matmul(a, b, precision=precision, kernel=kernel)  # compiled, loaded, prepared
    spin = cp.RawKernel(_SPIN, "spin")
    stream = cp.cuda.get_current_stream()
    stream.synchronize()
    clock_khz = cp.cuda.Device().attributes["ClockRate"]
    spin((1,), (1,), (np.int64(clock_khz * 500),), stream=stream)  # ~0.5 s
    t0 = time.perf_counter()
    out = gemmlab.matmul(a, b, precision=precision, kernel=kernel)
    dt = time.perf_counter() - t0
    busy = not stream.done
    stream.synchronize()
    assert busy and dt < 0.1, (busy, dt)
    assert compare(out, reference(a, b)).ok(1e-5)
    assert gemmlab.last_plan().method == ("tf32_ec" if precision == "fp32_tc" else "fp16_ec_scaled")


def test_capture_in_global_mode():
    """torch.cuda.graph in its strictest mode: any synchronising call inside fails the capture."""
    torch = pytest.importorskip("torch")
    a = torch.rand(96, 128, device="cuda") - 0.5
    b = torch.rand(128, 80, device="cuda") - 0.5
    out = torch.empty(96, 80, device="cuda")
    kw = dict(precision="fp32_tc", kernel="ec_wmma")  # named: auto runs this size as FP32 on Hopper
    gemmlab.matmul(a, b, out=out, **kw)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="global"):
        gemmlab.matmul(a, b, out=out, **kw)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-6


# -- what a repeated call keeps (executor._MethodChooser, Launcher._launch_after_prepass) ---------


def _kernels():
    return ["ec_wmma", "ec_wgmma"] if _gpu().arch == "sm_90a" else ["ec_wmma"]


def _forget_kept_launches():
    """Empty every prepared call's kept launches, so that the next call builds them again."""
    from gemmlab.core import executor

    for prepared in list(executor.CACHE._d.values()):
        if getattr(prepared, "chooser", None) is not None:  # (a CopiedCall has none)
            prepared.chooser._kept.clear()
            for _, run in prepared.chooser.candidates:
                run._prepass_memo.clear()


@pytest.mark.parametrize("inputs", ["normal", "uniform_small", "log_uniform"])  # fp16_ec, scaled, tf32_ec
@pytest.mark.parametrize(
    "kernel, params",
    [("ec_wmma", {}), ("ec_wgmma", {}), ("ec_wgmma", {"SPLITK": 3})],
    ids=["ec_wmma", "ec_wgmma", "ec_wgmma-SPLITK3"],
)
def test_a_call_on_kept_launches_gives_bitwise_what_a_new_build_gives(kernel, params, inputs):
    """The same arrays three times: built, found kept, built again (kept launches
    forgotten): bitwise the same result each time, right against FP64, out poisoned
    (NaN) before every call; split over K too (each candidate's GEMM and reduction)."""
    if kernel not in _kernels():
        pytest.skip("ec_wgmma needs sm_90a")
    rng = np.random.default_rng(7)
    a_host, b_host = make_inputs(inputs, 96, 136, rng), make_inputs(inputs, 136, 80, rng)
    a, b = cp.asarray(a_host), cp.asarray(b_host)
    out = cp.empty((96, 80), cp.float32)
    results = []
    for forget in (False, False, True):
        if forget:
            _forget_kept_launches()
        out.fill(cp.nan)
        gemmlab.matmul(a, b, out=out, precision="fp32_tc", kernel=kernel, **params)
        results.append(out.get())
    p = gemmlab.last_plan()
    want = (
        methods.choose_per_row(a_host, b_host).choice
        if per_row(p)
        else methods.choose(methods.ExponentStats.of(a_host), methods.ExponentStats.of(b_host))
    )
    assert p.spec.name == kernel and p.method == want.method, p.reason
    assert all(p.params[k] == v for k, v in params.items()), p.describe()
    for r in results[1:]:
        assert np.array_equal(r.view(np.uint32), results[0].view(np.uint32))
    ref = reference(a_host, b_host)
    sgemm = compare(cp.matmul(a, b), ref).rel_fro
    assert compare(results[0], ref).ok(max(1e-6, 1.5 * sgemm)), compare(results[0], ref)


@pytest.mark.parametrize("kernel", ["ec_wmma", "ec_wgmma"])
def test_calls_after_the_operands_moved_are_right(kernel):
    """After calls whose launches were kept: new arrays at other addresses (new data,
    each asking for another method), a batch view into a larger buffer, then the
    first arrays again: every result right against FP64, out poisoned before each."""
    if kernel not in _kernels():
        pytest.skip("ec_wgmma needs sm_90a")
    rng = np.random.default_rng(8)
    M, N, K = 77, 100, 136
    out = cp.empty((M, N), cp.float32)

    def check(a_host, b_host, a, b):
        out.fill(cp.nan)
        gemmlab.matmul(a, b, out=out, precision="fp32_tc", kernel=kernel)
        assert gemmlab.last_plan().spec.name == kernel
        ref = reference(a_host, b_host)
        sgemm = compare(cp.matmul(cp.asarray(a_host), cp.asarray(b_host)), ref).rel_fro
        report = compare(out, ref)
        assert report.ok(max(1e-6, 1.5 * sgemm)), (report, sgemm)
        return gemmlab.last_plan().method

    first = make_inputs("uniform", M, K, rng), make_inputs("uniform", K, N, rng)
    a0, b0 = cp.asarray(first[0]), cp.asarray(first[1])
    for _ in range(2):
        check(*first, a0, b0)
    methods = set()
    for inputs in ("uniform_small", "log_uniform", "normal"):
        a_host, b_host = make_inputs(inputs, M, K, rng), make_inputs(inputs, K, N, rng)
        methods.add(check(a_host, b_host, cp.asarray(a_host), cp.asarray(b_host)))
    # per row (ec_wgmma's FOLD), FP16 parts are always scaled
    assert methods == {"fp16_ec_scaled", "tf32_ec"} | (set() if kernel == "ec_wgmma" else {"fp16_ec"}), methods
    # a at an offset into a larger buffer: another address of the same signature
    big = cp.asarray(make_inputs("normal", M * K + 64, 1, rng).ravel())
    a_view = big[16 : 16 + M * K].reshape(M, K)
    check(a_view.get(), first[1], a_view, b0)
    check(*first, a0, b0)
