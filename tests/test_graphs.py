"""Prepared calls on the GPU: every kernel family through the cached path against
FP64 on odd shapes (a first call, a second on fresh data that reuses what the
first prepared, a third whose only change is the alignment of a), CUDA-graph
capture and replay with new data in the same buffers (torch.cuda.graph and
CuPy stream capture), the error-corrected methods that choose on the GPU at
every replay, and 8 threads on 8 streams sharing one cache.

Inputs are fresh random values, never zeros; out is poisoned (NaN) before
every run, so an element a kernel does not write fails."""

import numpy as np
import pytest

import gemmlab
from gemmlab.runtime import device as rt_device
from threads import run_in_threads
from ec_expect import fp32_tc_method

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch") if rt_device.gpu_available() else None

HOPPER = rt_device.gpu_available() and rt_device.gpu_info(0).arch == "sm_90a"
SPLITK = {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4, "STAGES": 3, "SPLITK": 3}

# (id, kernel, input dtype, precision, tile params, hopper only)
FAMILIES = [
    ("naive", "naive", "float32", None, {}, False),
    ("coalesced", "coalesced", "float32", None, {}, False),
    ("smem_tiled", "smem_tiled", "float32", None, {}, False),
    ("blocktile_1d", "blocktile_1d", "float32", None, {}, False),
    ("blocktile_2d", "blocktile_2d", "float32", None, {}, False),
    ("vectorized", "vectorized", "float32", None, {}, False),
    ("warptile", "warptile", "float32", None, {}, False),
    ("pipelined", "pipelined", "float32", None, {}, False),
    ("pipelined-splitk", "pipelined", "float32", None, SPLITK, False),
    ("auto-fp32", "auto", "float32", None, {}, False),
    ("wmma-fp16", "wmma", "float16", None, {}, False),
    ("wmma_warptile-bf16", "wmma_warptile", "bfloat16", None, {}, False),
    ("mma_pipelined-fp16", "mma_pipelined", "float16", None, {}, False),
    ("mma_pipelined-tf32", "mma_pipelined", "float32", "tf32", {}, False),
    ("wgmma-bf16", "wgmma", "bfloat16", None, {}, True),
    ("wgmma-tf32", "wgmma", "float32", "tf32", {}, True),
    ("wgmma-fp16-splitk", "wgmma", "float16", None, {"BM": 64, "BN": 128, "SPLITK": 3}, True),
    ("wgmma-tf32-splitk", "wgmma", "float32", "tf32", {"BM": 64, "BN": 128, "SPLITK": 2}, True),
    ("auto-bf16", "auto", "bfloat16", None, {}, False),
    ("ec_wmma-fp16_ec", "ec_wmma", "float32", "fp16_ec", {}, False),
    ("ec_wmma-tf32_ec", "ec_wmma", "float32", "tf32_ec", {}, False),
    ("ec_wgmma-fp16_ec", "ec_wgmma", "float32", "fp16_ec", {}, True),
    ("ec_wgmma-tf32_ec", "ec_wgmma", "float32", "tf32_ec", {}, True),
    ("ec_wgmma-fp16_ec-splitk", "ec_wgmma", "float32", "fp16_ec", {"SPLITK": 3}, True),
    ("ec_wgmma-tf32_ec-splitk", "ec_wgmma", "float32", "tf32_ec", {"SPLITK": 2}, True),
]
LAYOUTS = ["NN", "TN", "NT"]


def _bound(dtype, precision):
    if precision == "tf32":
        return 3e-3  # inputs rounded to TF32 by the kernel
    return {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[dtype]


def _shape(fam):
    """Odd sizes; for the TMA rungs rows of a multiple of 16 bytes (else they fall back)."""
    return (77, 48, 136) if fam[5] or fam[1] == "auto" else (77, 45, 130)


def _operand(rows, cols, dtype, layout, gen, offset=0):
    """A rows x cols operand of fresh values, stored row-major ('N') or as the
    transpose of a row-major cols x rows tensor ('T'), ``offset`` elements into its buffer."""
    stored = (rows, cols) if layout == "N" else (cols, rows)
    n = stored[0] * stored[1]
    buf = torch.empty(n + offset, device="cuda", dtype=getattr(torch, dtype))
    buf.uniform_(-1, 1, generator=gen)
    x = buf[offset:].view(stored)
    return x if layout == "N" else x.t()


def _check(out, a, b, bound):
    ref = a.double() @ b.double()
    got = out.double()
    assert not torch.isnan(got).any(), "an element was not written"
    err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
    assert err < bound, err


def _skip_off_hopper(fam):
    if fam[5] and not HOPPER:
        pytest.skip("needs a Hopper GPU (sm_90a)")


def _kw(fam):
    _, kernel, dtype, precision, params, _ = fam
    kw = dict(kernel=kernel, **params)
    if precision:
        kw["precision"] = precision
    return kw


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f[0])
def test_the_cached_path_matches_fp64(fam, layout):
    _skip_off_hopper(fam)
    M, N, K = _shape(fam)
    gen = torch.Generator(device="cuda").manual_seed(hash((fam[0], layout)) % 2**31)
    kw, bound = _kw(fam), _bound(fam[2], fam[3])
    for call in range(3):
        # the third call moves a by one element: only its alignment changes
        a = _operand(M, K, fam[2], layout[0], gen, offset=1 if call == 2 else 0)
        b = _operand(K, N, fam[2], layout[1], gen)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=a.dtype)
        assert gemmlab.matmul(a, b, out=out, **kw) is out
        torch.cuda.synchronize()
        _check(out, a, b, bound)
        ran = gemmlab.last_plan()
        if call == 0 and fam[1] != "auto" and layout == "NN":
            assert ran.spec.name == fam[1], ran.describe()
    r = gemmlab.matmul(a, b, **kw)  # a new result: another signature, prepared and run
    torch.cuda.synchronize()
    _check(r, a, b, bound)


def _replay_checks(fam, layout, capture):
    """Capture one call with ``capture`` (a context manager maker), then replay it
    with new values copied into the same buffers, twice."""
    M, N, K = _shape(fam)
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = _operand(M, K, fam[2], layout[0], gen)
    b = _operand(K, N, fam[2], layout[1], gen)
    out = torch.empty((M, N), device="cuda", dtype=a.dtype)
    kw = _kw(fam)
    gemmlab.matmul(a, b, out=out, **kw)  # warm: compiled, loaded, prepared
    torch.cuda.synchronize()
    replay = capture(lambda: gemmlab.matmul(a, b, out=out, **kw))
    for _ in range(2):
        a.copy_(_operand(M, K, fam[2], layout[0], gen))
        b.copy_(_operand(K, N, fam[2], layout[1], gen))
        out.fill_(float("nan"))
        replay()
        torch.cuda.synchronize()
        _check(out, a, b, _bound(fam[2], fam[3]))


def _torch_graph(fn):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f[0])
def test_torch_cuda_graph_capture_and_replay(fam, layout):
    _skip_off_hopper(fam)
    _replay_checks(fam, layout, _torch_graph)


@pytest.mark.parametrize(
    "fam",
    [
        f
        for f in FAMILIES
        if f[0]
        in (
            "pipelined-splitk",
            "wgmma-bf16",
            "auto-fp32",
            "ec_wgmma-fp16_ec",
            "mma_pipelined-tf32",
            "wgmma-fp16-splitk",
            "ec_wgmma-fp16_ec-splitk",
        )
    ],
    ids=lambda f: f[0],
)
def test_cupy_stream_capture_and_replay(fam):
    _skip_off_hopper(fam)
    cp = pytest.importorskip("cupy")
    M, N, K = _shape(fam)
    rng = np.random.default_rng(3)
    host_dt = np.float32 if fam[2] == "float32" else np.float16
    if fam[2] == "bfloat16":
        pytest.skip("CuPy has no bfloat16")

    def fresh(r, c):
        return cp.asarray(rng.uniform(-1, 1, (r, c)).astype(host_dt))

    a, b = fresh(M, K), fresh(K, N)
    out = cp.empty((M, N), host_dt)
    kw = _kw(fam)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        gemmlab.matmul(a, b, out=out, **kw)  # warm
        stream.synchronize()
        stream.begin_capture()
        gemmlab.matmul(a, b, out=out, **kw)
        graph = stream.end_capture()
        for _ in range(2):
            a[...], b[...] = fresh(M, K), fresh(K, N)
            out.fill(np.nan)
            graph.launch(stream)
            stream.synchronize()
            ref = a.get().astype(np.float64) @ b.get().astype(np.float64)
            got = out.get().astype(np.float64)
            assert np.isfinite(got).all()
            assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < _bound(fam[2], fam[3])


def _split_k_case(seed: int):
    """(M, N, K, a, b, out, the call's keywords, the generator) of the split-K family's product."""
    fam = next(f for f in FAMILIES if f[0] == "pipelined-splitk")
    M, N, K = _shape(fam)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b = _operand(M, K, "float32", "N", gen), _operand(K, N, "float32", "N", gen)
    return M, N, K, a, b, torch.empty((M, N), device="cuda"), dict(kernel="pipelined", **SPLITK), gen


def test_split_k_in_a_graph_gets_its_own_workspace():
    """A graph replayed beside eager calls on another stream: each uses its own workspace."""
    M, N, K, a, b, out, kw, gen = _split_k_case(11)
    gemmlab.matmul(a, b, out=out, **kw)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gemmlab.matmul(a, b, out=out, **kw)
    a2, b2 = _operand(M, K, "float32", "N", gen), _operand(K, N, "float32", "N", gen)
    out2 = torch.empty((M, N), device="cuda")
    side = torch.cuda.Stream()
    for _ in range(20):
        out.fill_(float("nan"))
        out2.fill_(float("nan"))
        torch.cuda.synchronize()
        g.replay()
        with torch.cuda.stream(side):
            gemmlab.matmul(a2, b2, out=out2, **kw)
        torch.cuda.synchronize()
        _check(out, a, b, 1e-5)
        _check(out2, a2, b2, 1e-5)


def test_a_workspace_first_needed_inside_a_capture():
    """A split-K call captured before gemmlab's memory pool exists (a pool cannot be
    created during capture): its workspace comes from the device's own pool, and
    the graph replays right on new data."""
    from gemmlab.runtime import launch

    M, N, K, a, b, out, kw, gen = _split_k_case(12)
    gemmlab.matmul(a, b, out=out, **kw)  # prepared (and the pool made)
    torch.cuda.synchronize()
    ordinal = torch.cuda.current_device()
    pool = launch._pools.pop(ordinal)
    try:
        replay = _torch_graph(lambda: gemmlab.matmul(a, b, out=out, **kw))
        assert ordinal not in launch._pools
    finally:
        launch._pools.setdefault(ordinal, pool)
    for _ in range(3):
        a.copy_(_operand(M, K, "float32", "N", gen))
        out.fill_(float("nan"))
        replay()
        torch.cuda.synchronize()
        _check(out, a, b, 1e-5)


# New data for each replay of a captured fp32_tc call, and the method it must choose:
# U(-1,1), values around 1e6 (FP16 after scaling), a spread of 2^-40 .. 2^40.
REPLAYS = [("uniform", "fp16_ec"), ("large", "fp16_ec_scaled"), ("wide", "tf32_ec")]


def _replays_on_new_data(replay, a, b, out, gen):
    """For each (kind of data, method fp32_tc should choose) of REPLAYS: new data of that
    kind in a and b (B uniform where A is "large"), out poisoned, the captured call
    replayed; yields (kind, method, its error against FP64, SGEMM's, last_plan())."""
    for kind, method in REPLAYS:
        a.copy_(_data(kind, tuple(a.shape), gen))
        b.copy_(_data(kind if kind != "large" else "uniform", tuple(b.shape), gen))
        out.fill_(float("nan"))
        replay()
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        err = float((out.double() - ref).norm() / ref.norm())
        sgemm = float(((a @ b).double() - ref).norm() / ref.norm())
        yield kind, method, err, sgemm, gemmlab.last_plan()


def _data(kind, shape, gen):
    x = torch.rand(shape, device="cuda", generator=gen) * 2 - 1
    if kind == "large":
        return x * 1e6
    if kind == "wide":
        e = torch.randint(-40, 41, shape, device="cuda", generator=gen).float()
        return x.sign() * torch.exp2(e) * (1 + x.abs())
    return x


def _ec_kernels():
    return ["ec_wmma", "ec_wgmma"] if HOPPER else ["ec_wmma"]


@pytest.mark.parametrize("kernel", _ec_kernels())
@pytest.mark.parametrize("precision", ["fp32_tc", "fp16_ec_scaled"])
@pytest.mark.parametrize("capture", ["torch", "cupy"])
def test_methods_chosen_from_the_data_in_a_graph(capture, precision, kernel):
    """A captured call chooses its method on the GPU at every replay: new data
    between replays changes the method (fp32_tc) or the scales (fp16_ec_scaled),
    the results stay right, and last_plan() reports the latest replay's choice."""
    M, N, K = 77, 48, 136
    gen = torch.Generator(device="cuda").manual_seed(5)
    a, b = _data("uniform", (M, K), gen), _data("uniform", (K, N), gen)
    out = torch.empty((M, N), device="cuda")
    kw = dict(precision=precision, kernel=kernel)
    gemmlab.matmul(a, b, out=out, **kw)  # warm: compiled, loaded, prepared
    torch.cuda.synchronize()
    if capture == "torch":
        replay = _torch_graph(lambda: gemmlab.matmul(a, b, out=out, **kw))
        assert gemmlab.last_plan().spec.name == kernel
    else:
        cp = pytest.importorskip("cupy")
        stream = cp.cuda.Stream(non_blocking=True)
        ca, cb, co = cp.asarray(a), cp.asarray(b), cp.asarray(out)  # the same memory
        with stream:
            gemmlab.matmul(ca, cb, out=co, **kw)  # warm for CuPy arrays on this stream
            stream.synchronize()
            stream.begin_capture()
            gemmlab.matmul(ca, cb, out=co, **kw)
            graph = stream.end_capture()

        def replay():
            # The new data are written on PyTorch's stream, which CuPy's non-blocking stream does
            # not wait for: without this the graph could read the previous replay's operands.
            torch.cuda.current_stream().synchronize()
            graph.launch(stream)
            stream.synchronize()

    scales = set()
    for kind, method, err, sgemm, p in _replays_on_new_data(replay, a, b, out, gen):
        assert p.reason.startswith("chosen on the GPU"), p.reason
        scales.add((p.extra["scale_a"], p.extra["scale_b"]))
        if precision == "fp32_tc":
            assert p.method == fp32_tc_method(p, method), (kind, p.reason)
            assert err <= 1.5 * sgemm + 1e-7, (kind, err, sgemm, p.describe())
        else:
            assert p.method == "fp16_ec_scaled"
            if kind != "wide":  # beyond 28 binades the scaled method is not meant to be exact
                assert err <= 1.5 * sgemm + 1e-7, (kind, err, sgemm, p.describe())
    assert len(scales) > 1 if precision == "fp16_ec_scaled" else True


@pytest.mark.skipif(not HOPPER, reason="ec_wgmma needs sm_90a")
def test_ec_wgmma_batch_chosen_from_the_data_in_a_graph():
    """A captured fp32_tc call on a batch (ec_wgmma: every pass one launch for the whole batch,
    B shared by every matrix) chooses its method from all the batch's data at every replay."""
    nb, M, N, K = 5, 77, 100, 136
    gen = torch.Generator(device="cuda").manual_seed(9)
    a, b = _data("uniform", (nb, M, K), gen), _data("uniform", (K, N), gen)
    out = torch.empty((nb, M, N), device="cuda")
    kw = dict(precision="fp32_tc", kernel="ec_wgmma")
    gemmlab.matmul(a, b, out=out, **kw)
    torch.cuda.synchronize()
    replay = _torch_graph(lambda: gemmlab.matmul(a, b, out=out, **kw))
    for kind, method, err, sgemm, p in _replays_on_new_data(replay, a, b, out, gen):
        assert p.spec.name == "ec_wgmma" and p.method == fp32_tc_method(p, method), (kind, p.reason)
        assert err <= 1.5 * sgemm + 1e-7, (kind, err, sgemm, p.describe())


@pytest.mark.skipif(not HOPPER, reason="ec_wgmma needs sm_90a")
def test_ec_wgmma_stream_k_tail_in_a_graph():
    """A captured fp32_tc call whose last round is cut into slices of K (169 tiles on 132 SMs:
    37 tiles, 3 slices each; its counters in the graph's own record workspace): every replay on
    new data -- FP16 parts, scaled FP16 parts, TF32 parts, whose GEMM cuts its own K-steps --
    right, and two replays on the same data bitwise equal."""
    from gemmlab.kernels.ec.ec_wgmma import ec_wgmma_tail
    from gemmlab.runtime.device import gpu_info

    if gpu_info(0).sm_count != 132:
        pytest.skip("the tail's size is chosen for 132 SMs")
    M, N, K = 1606, 1586, 1000
    gen = torch.Generator(device="cuda").manual_seed(17)
    a, b = _data("uniform", (M, K), gen), _data("uniform", (K, N), gen)
    out = torch.empty((M, N), device="cuda")
    kw = dict(precision="fp32_tc", kernel="ec_wgmma")
    gemmlab.matmul(a, b, out=out, **kw)
    torch.cuda.synchronize()
    assert ec_wgmma_tail(gemmlab.last_plan(), 1, 1) == (37, 3)
    replay = _torch_graph(lambda: gemmlab.matmul(a, b, out=out, **kw))
    for kind, method, err, sgemm, p in _replays_on_new_data(replay, a, b, out, gen):
        assert p.spec.name == "ec_wgmma" and p.method == fp32_tc_method(p, method), (kind, p.reason)
        assert err <= 1.5 * sgemm + 1e-7, (kind, err, sgemm, p.describe())
        first = out.clone()
        out.fill_(float("nan"))
        replay()
        torch.cuda.synchronize()
        assert torch.equal(out, first), kind


@pytest.mark.skipif(not HOPPER, reason="ec_wgmma needs sm_90a")
def test_ec_wgmma_split_k_chosen_from_the_data_in_a_graph():
    """A captured fp32_tc call split over K (per candidate: its GEMM into a workspace of the
    graph's own, then its reduction, which reads the record too), with beta != 0, so that a
    reduction of the candidate not chosen would add into out a second time: every replay on
    new data of each kind chooses its method and is right."""
    M, N, K = 77, 100, 1000
    gen = torch.Generator(device="cuda").manual_seed(13)
    a, b = _data("uniform", (M, K), gen), _data("uniform", (K, N), gen)
    c0, out = torch.rand((M, N), device="cuda", generator=gen), torch.empty((M, N), device="cuda")
    alpha, beta = 0.5, 2.0
    kw = dict(precision="fp32_tc", kernel="ec_wgmma", SPLITK=3, alpha=alpha, beta=beta)

    def call():
        out.copy_(c0)
        gemmlab.matmul(a, b, out=out, **kw)

    call()  # warm: compiled, loaded, prepared
    torch.cuda.synchronize()
    replay = _torch_graph(call)
    for kind, method in REPLAYS:
        a.copy_(_data(kind, (M, K), gen))
        b.copy_(_data(kind if kind != "large" else "uniform", (K, N), gen))
        c0.copy_(torch.rand((M, N), device="cuda", generator=gen) * 2 - 1)  # the graph copies it into out
        replay()
        torch.cuda.synchronize()
        p = gemmlab.last_plan()
        assert p.spec.name == "ec_wgmma" and p.params["SPLITK"] == 3 and p.method == fp32_tc_method(p, method), (
            kind,
            p.reason,
        )
        ref = alpha * (a.double() @ b.double()) + beta * c0.double()
        err = float((out.double() - ref).norm() / ref.norm())
        sgemm = float(((alpha * (a @ b) + beta * c0).double() - ref).norm() / ref.norm())
        assert err <= 1.5 * sgemm + 1e-7, (kind, err, sgemm, p.describe())


def test_the_pytorch_operator_in_a_graph():
    import gemmlab.torch as gt

    gen = torch.Generator(device="cuda").manual_seed(9)
    a, b = _operand(96, 64, "bfloat16", "N", gen), _operand(64, 80, "bfloat16", "N", gen)
    gt.mm(a, b)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = gt.mm(a, b)
    for _ in range(2):
        a.copy_(_operand(96, 64, "bfloat16", "N", gen))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        _check(out, a, b, 1e-2)


def test_eight_threads_on_eight_streams_share_the_cache():
    shapes = [(77, 45, 130), (64, 64, 64), (33, 96, 200), (128, 40, 72)]
    kinds = [("float32", {}), ("bfloat16", {}), ("float32", {"precision": "tf32"}), ("float16", {})]
    results = {}

    def work(i):
        gen = torch.Generator(device="cuda").manual_seed(100 + i)
        stream = torch.cuda.Stream()
        dtype, kw = kinds[i % len(kinds)]
        with torch.cuda.stream(stream):
            mine = []
            for j in range(24):
                M, N, K = shapes[(i + j) % len(shapes)]
                a, b = _operand(M, K, dtype, "N", gen), _operand(K, N, dtype, "TN"[j % 2], gen)
                out = torch.full((M, N), float("nan"), device="cuda", dtype=a.dtype)
                gemmlab.matmul(a, b, out=out, **kw)
                mine.append((a, b, out, _bound(dtype, kw.get("precision"))))
            stream.synchronize()
        results[i] = mine

    errors = run_in_threads(work, 8)
    assert not errors, errors
    for i, mine in results.items():
        for a, b, out, bound in mine:
            _check(out, a, b, bound)


@pytest.mark.parametrize("kernel", _ec_kernels())
def test_eager_fp32_tc_calls_around_a_capture_on_their_stream(kernel):
    """fp32_tc on one CuPy stream: eager calls (their launches kept per stream, built on
    its kept workspaces), the same call captured (built on the graph's own
    workspaces, nothing kept), then replays and eager calls interleaved, on new data
    each time (each kind asking for another method), out poisoned before each: all
    right against FP64."""
    cp = pytest.importorskip("cupy")
    M, N, K = 77, 48, 136
    rng = np.random.default_rng(12)

    def data(kind, shape):
        x = rng.uniform(-1, 1, shape)
        if kind == "large":
            x = x * 1e6
        elif kind == "wide":
            x = np.sign(x) * np.exp2(rng.integers(-40, 41, shape)) * (1 + np.abs(x))
        return x.astype(np.float32)

    a, b = cp.asarray(data("uniform", (M, K))), cp.asarray(data("uniform", (K, N)))
    out = cp.empty((M, N), cp.float32)
    kw = dict(precision="fp32_tc", kernel=kernel)

    def check(x, y):
        ref = x.get().astype(np.float64) @ y.get().astype(np.float64)
        sgemm = np.linalg.norm((x @ y).get() - ref) / np.linalg.norm(ref)
        got = out.get().astype(np.float64)
        assert np.isfinite(got).all(), "an element was not written"
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err <= 1.5 * sgemm + 1e-7, (err, sgemm)

    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(2):
            out.fill(np.nan)
            gemmlab.matmul(a, b, out=out, **kw)
            stream.synchronize()
            check(a, b)
        stream.begin_capture()
        gemmlab.matmul(a, b, out=out, **kw)
        graph = stream.end_capture()
        for kind in ("large", "wide", "uniform"):
            a[...], b[...] = (
                cp.asarray(data(kind, (M, K))),
                cp.asarray(data("uniform" if kind == "large" else kind, (K, N))),
            )
            out.fill(np.nan)
            graph.launch(stream)
            stream.synchronize()
            check(a, b)
            out.fill(np.nan)
            gemmlab.matmul(a, b, out=out, **kw)  # eager, on the launches kept before the capture
            stream.synchronize()
            check(a, b)
            a2, b2 = cp.asarray(data(kind, (M, K))), cp.asarray(data("uniform" if kind == "large" else kind, (K, N)))
            out.fill(np.nan)
            gemmlab.matmul(a2, b2, out=out, **kw)  # eager, on other arrays
            stream.synchronize()
            check(a2, b2)
