"""The steps toward tensor rung 4 (Hopper): wgmma_tma (4a), wgmma_specialized (4b) and
wgmma_persistent (4c), each a named kernel of its own.

Without a GPU: where they sit in the ladder, that ``kernel="auto"`` never takes one, what
they refuse and why, their grids (every tile of C once), shared memory and tensor maps.  On
a Hopper GPU, as tests/test_wgmma.py checks the rung: each step against an FP64 reference
on fresh random inputs (never zeros), the output poisoned with NaN first, on shapes that
are multiples of no tile, both 16-bit types, every layout, every configuration; which
kernel ran is checked from gemmlab.last_plan().  Their SASS: test_wgmma_steps_compile.py."""

import logging

import numpy as np
import pytest

import gemmlab
from gemmlab.core import planner
from gemmlab.kernels import registry
from gemmlab.kernels.cuda_constants import read_constants
from gemmlab.kernels.spec import LAYOUTS, Problem
from gemmlab.kernels.tensor import wgmma_tma
from gemmlab.runtime import device as rt_device
from gemmlab.runtime.tma import Operands
from gemmlab.tools.verify import random_matrix

STEPS = ["wgmma_tma", "wgmma_specialized", "wgmma_persistent"]
EVERY_CONFIGURATION = [("bfloat16", "bfloat16", "NN"), ("float16", "float32", "TT"), ("bfloat16", "bfloat16", "TN")]
DTYPES = [("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"), ("bfloat16", "bfloat16")]
# As tests/test_wgmma.py: relative Frobenius error against FP64 on the rounded inputs.
BOUND = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}
GROUP_M = read_constants("include/gemmlab/tensor/04_wgmma_work.cuh")["WGMMA_GROUP_M"]
H200 = dict(arch="sm_90a", sm_count=132, gpu_name="NVIDIA H200")


# -- without a GPU -------------------------------------------------------------------------------


def test_steps_come_before_the_rung_they_build():
    tensor = registry.ladder("tensor")
    assert [s.name for s in tensor if s.rung == 4] == STEPS + ["wgmma"]
    assert [s.label for s in tensor if s.rung == 4] == ["4a", "4b", "4c", "4"]
    assert [s.source for s in tensor if s.step] == [
        "tensor/04a_wgmma_tma.cu",
        "tensor/04b_wgmma_specialized.cu",
        "tensor/04c_wgmma_persistent.cu",
    ]
    for name in STEPS:
        spec = registry.get(name)
        assert spec.family == "tensor" and spec.arches == ("sm_90a",) and spec.dtypes == ("float16", "bfloat16")
        assert spec.rules.offer is None and spec.rules.stage is None and spec.layouts == LAYOUTS
        assert {v.out_dtype for v in spec.variants} == {"float32", "float16", "bfloat16"}
        # The rung's defaults, so that the ladder bench's neighbours differ by their idea alone.
        assert {k: spec.defaults()[k] for k in ("BM", "BN", "STAGES")} == {"BM": 128, "BN": 256, "STAGES": 4}
    assert registry.get("wgmma_persistent").defaults()["CLUSTER"] == registry.get("wgmma").defaults()["CLUSTER"]


@pytest.mark.parametrize("dtype, out_dtype", DTYPES + [("tf32", "float32")])
@pytest.mark.parametrize("shape", [(1, 1, 16), (17, 33, 48), (1000, 1000, 4096), (4096, 4096, 4096), (8, 4096, 4096)])
@pytest.mark.parametrize("batch", [1, 12])
def test_auto_never_takes_a_step(dtype, out_dtype, shape, batch):
    for aligned in (True, False):
        p = planner.plan("auto", *shape, dtype=dtype, out_dtype=out_dtype, batch=batch, tma_aligned=aligned, **H200)
        assert not p.spec.step, p.describe()


def test_the_ladder_bench_times_every_step():
    """`gemmlab bench --dtype bf16` (or fp16): every rung of the tensor ladder, the steps
    between rung 3 and the rung's own kernel; TF32's ladder has no step."""
    from gemmlab.tools.bench.suites import default_entries

    for dtype in ("bfloat16", "float16"):
        names = [n for n, _ in default_entries(dtype)]
        assert names[names.index("mma_pipelined") + 1 : names.index("wgmma")] == STEPS
    assert not set(STEPS) & {n for n, _ in default_entries("tf32")}


@pytest.mark.parametrize("name", STEPS)
def test_a_step_names_what_it_refuses(name):
    with pytest.raises(TypeError, match=rf"kernel '{name}' computes float16, bfloat16, not tf32"):
        planner.plan(name, 256, 256, 256, dtype="tf32", **H200)
    with pytest.raises(ValueError, match=rf"kernel '{name}' does not run on NVIDIA A100 \(sm_80\): it needs sm_90a"):
        planner.plan(name, 256, 256, 256, dtype="bfloat16", arch="sm_80", gpu_name="NVIDIA A100")
    # Operands TMA cannot read in place: the rung's fallback, with the reason (no staging copy).
    p = planner.plan(name, 300, 200, 65, dtype="float16", out_dtype="float16", tma_aligned=False, **H200)
    assert p.spec.name == "mma_pipelined"
    assert p.fallback_reason.startswith(f"{name} cannot take these operands: TMA needs a and b at 16-byte aligned")
    assert "make no staging copy" in p.fallback_reason
    assert planner.plan(name, 300, 200, 65, dtype="float16", out_dtype="float16", **H200).spec.name == name


@pytest.mark.parametrize("name", STEPS)
def test_name_expressions(name):
    spec = registry.get(name)
    p = spec.defaults()
    prob = Problem(100, 100, 100, True, "bfloat16", "bfloat16", "T", "N")
    cluster = ", 1" if name == "wgmma_persistent" else ""
    assert spec.name_expression(p, prob) == f"gemmlab::{name}_gemm<1, 1, 128, 256, 4{cluster}, 'T', 'N'>"
    # every configuration x the four 16-bit variants x every layout, once each
    assert len(spec.all_name_expressions()) == len(spec.configurations()) * 4 * 4


def _grouped(t, tiles_m, tiles_n):
    """tile_order.cuh's block_tile_origin_grouped / 04_wgmma_work.cuh's grouped_tile: (tm, tn)."""
    per_group = GROUP_M * tiles_n
    first_m = (t // per_group) * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)
    r = t % per_group
    return first_m + r % rows, r // rows


SIZES = [(1, 1), (17, 33), (128, 256), (129, 257), (1000, 1000), (4096, 4096), (4097, 31), (17, 4099), (2100, 300)]


@pytest.mark.parametrize("name", STEPS)
def test_step_geometry(name):
    """Steps a and b: one block per tile, numbered in grouped order; step c: a persistent
    grid of whole clusters, no more blocks than SMs, whose walk takes every tile once (a
    cluster's rows past M are its padding).  Each covers every tile of C exactly once."""
    spec = registry.get(name)
    for p in spec.configurations():
        bm, bn, cl = p["BM"], p["BN"], p.get("CLUSTER", 1)
        for M, N in SIZES:
            geo = spec.launch(p, Problem(M, N, 64, True, "bfloat16", "bfloat16", sm_count=132))
            consumers = bm // 64
            assert geo.block == ((consumers if name == "wgmma_tma" else consumers + 1) * 128, 1, 1)
            assert geo.smem_bytes == p["STAGES"] * (bm + bn) * 128 + 16 * p["STAGES"] + 1024 <= 227 * 1024
            tiles_m, tiles_n = -(-M // bm), -(-N // bn)
            seen = []
            if not geo.persistent:
                assert geo.grid == (tiles_m * tiles_n, 1, 1) and geo.cluster == (1, 1, 1)
                seen = [_grouped(t, tiles_m, tiles_n) for t in range(geo.grid[0])]
            else:
                blocks = geo.grid[0]
                assert geo.cluster == (cl, 1, 1) and blocks % cl == 0 and 0 < blocks <= 132
                tiles_mc = -(-tiles_m // cl)
                for b in range(blocks):  # rank: blockIdx.x % CLUSTER in a cluster of (CLUSTER, 1, 1)
                    for t in range(b // cl, tiles_mc * tiles_n, blocks // cl):
                        tmc, tn = _grouped(t, tiles_mc, tiles_n)
                        seen.append((tmc * cl + b % cl, tn))
                seen = [s for s in seen if s[0] < tiles_m]
            assert sorted(seen) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)], (p, M, N)


@pytest.mark.parametrize("name", STEPS)
@pytest.mark.parametrize("ops", ["NN", "TN", "NT", "TT"])
def test_tensor_maps_follow_the_layout(monkeypatch, name, ops):
    """The steps' arguments: the standard eleven, then A's and B's maps over the operands as
    stored, boxes as load_operand_tile copies them (step c's clusters: B's K-major box is
    half the tile's rows)."""
    made = []
    monkeypatch.setattr(wgmma_tma, "tensor_map", lambda *a, **kw: made.append((a, kw)) or len(made))
    spec = registry.get(name)
    for params in [{}] + ([{"CLUSTER": 2}] if name == "wgmma_persistent" else []):
        made.clear()
        plan = planner.plan(
            name, 300, 200, 72, dtype="bfloat16", out_dtype="float32", op_a=ops[0], op_b=ops[1], **params
        )
        lda, ldb = (72 if ops[0] == "N" else 304), (200 if ops[1] == "N" else 72)  # as stored, 16-byte rows
        args = spec.launching.kernel_args(plan, None, 0, Operands(1 << 20, lda, 2 << 20, ldb, 3 << 20, 200), 0.5, 2.0)
        assert len(args) == 13 and args[11:] == (1, 2) and float(args[3]) == 0.5 and float(args[8]) == 2.0
        cl = params.get("CLUSTER", 1)
        (a_args, a_kw), (b_args, b_kw) = made
        assert a_args == (
            (1 << 20, 300, 72, lda, "bfloat16", 128, 64)
            if ops[0] == "N"
            else (1 << 20, 72, 300, lda, "bfloat16", 64, 64)
        )
        assert b_args == (
            (2 << 20, 72, 200, ldb, "bfloat16", 64, 64)
            if ops[1] == "N"
            else (2 << 20, 200, 72, ldb, "bfloat16", 256 // cl, 64)
        )
        assert a_kw == b_kw == {"batch": 1}
    with pytest.raises(ValueError, match="an operand TMA cannot read in place"):
        spec.launching.kernel_args(plan, None, 0, Operands((1 << 20) + 2, 72, 2 << 20, 200, 3 << 20, 200), 1.0, 0.0)


# -- on a Hopper GPU -----------------------------------------------------------------------------

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
hopper = pytest.mark.skipif(
    not rt_device.gpu_available() or rt_device.gpu_info(0).arch != "sm_90a", reason="needs a Hopper GPU (sm_90a)"
)


def _operand(rows, cols, layout, dtype, rng):
    """op(x), rows x cols of fresh random values: stored row-major ('N') or as the transpose of
    a row-major cols x rows array ('T', a view), rows padded to 16 bytes (what TMA reads);
    returns (view, FP64 copy of what the kernel sees)."""
    sr, sc = (rows, cols) if layout == "N" else (cols, rows)
    ld = -(-sc // 8) * 8
    base = torch.from_numpy(random_matrix(sr, ld, "uniform", rng)).cuda().to(getattr(torch, dtype))
    view = base[:, :sc].t() if layout == "T" else base[:, :sc]
    return view, view.double()


def _check(kernel, M, N, K, dtype, out_dtype, *, ops="NN", alpha=1.0, beta=0.0, expect=None, **params):
    """``kernel`` on fresh operands (op(A), op(B) stored as ``ops`` says) into an output
    poisoned with NaN (random, with beta), against FP64; ``expect``: the kernel that must
    have run (None: ``kernel``, at ``params``, in that layout; "either": the result only,
    for vectors whose layout is ambiguous)."""
    rng = np.random.default_rng(M * 7 + N * 3 + K)
    a, a64 = _operand(M, K, ops[0], dtype, rng)
    b, b64 = _operand(K, N, ops[1], dtype, rng)
    ot = getattr(torch, out_dtype)
    c0 = torch.from_numpy(random_matrix(M, N, "uniform", rng)).cuda().to(ot)
    out = c0.clone() if beta else torch.full((M, N), float("nan"), device="cuda", dtype=ot)
    gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel, **params)
    torch.cuda.synchronize()
    ran = gemmlab.last_plan()
    if expect != "either":
        assert ran.spec.name == (expect or kernel), ran.describe()
    if expect is None:
        assert not ran.fallback_reason and ran.name_expression.endswith(f"'{ops[0]}', '{ops[1]}'>"), ran.describe()
        assert all(ran.params[k] == v for k, v in params.items()), ran.describe()
    ref = alpha * (a64 @ b64) + (beta * c0.double() if beta else 0)
    bad = torch.isnan(out) | ((out.double() - ref).abs() > 0.05 * ref.abs().max())
    if bad.any():
        r, c = [int(x) for x in bad.nonzero()[0]]
        rows, cols = bad.any(dim=1).nonzero().ravel(), bad.any(dim=0).nonzero().ravel()
        pytest.fail(
            f"{ran.describe()} {M}x{N}x{K} {ops} {dtype}->{out_dtype}: {int(bad.sum())} wrong elements; first at "
            f"({r}, {c}): {float(out[r, c])} vs {float(ref[r, c])}; wrong rows {rows[:8].tolist()}.."
            f"{rows[-1:].tolist()} ({len(rows)}), cols {cols[:8].tolist()}..{cols[-1:].tolist()} ({len(cols)})"
        )
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"


def instantiations() -> set[tuple[str, str]]:
    """(source, name expression) of what the GPU tests below launch, for
    scripts/precompile_tests.py: each step's defaults in every variant and layout, every
    configuration as test_every_configuration runs it, step c's clusters of two."""
    out = set()
    for name in STEPS:
        spec = registry.get(name)
        insts = spec.instantiations([spec.defaults()])
        for p in spec.configurations():
            for dt, odt, ops in EVERY_CONFIGURATION:
                insts.append((p, Problem(1, 1, 1, True, dt, odt, ops[0], ops[1])))
        out |= {(str(spec.source_path), spec.name_expression(p, prob)) for p, prob in insts}
    return out


SHAPES = [(1, 1, 16), (17, 33, 48), (129, 257, 400), (1000, 1000, 4096)]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", STEPS)
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("ops", ["NN", "TN", "NT", "TT"])
def test_step_matches_fp64(kernel, dtype, out_dtype, shape, ops):
    """Each step at its defaults on shapes that are multiples of no tile, every layout read as
    stored.  (A 'T' view with a dimension of 1 may be read as the other layout, whose stride
    TMA may refuse, and fall back: checked either way.)"""
    _check(kernel, *shape, dtype, out_dtype, ops=ops, expect=None if min(shape) > 1 or ops == "NN" else "either")


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", STEPS)
@pytest.mark.parametrize(
    "dtype, out_dtype, ops",
    [("bfloat16", "bfloat16", "NN"), ("float16", "float32", "TT"), ("bfloat16", "float32", "NT")],
)
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (4097, 4095, 1000)], ids=lambda s: "x".join(map(str, s)))
def test_step_on_large_products(kernel, dtype, out_dtype, ops, shape):
    """Many more tiles than SMs: steps a and b launch one block per tile, step c's blocks walk
    several each, the ring's phases carrying over from tile to tile."""
    _check(kernel, *shape, dtype, out_dtype, ops=ops)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", STEPS)
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "float32"), ("float16", "float16")])
@pytest.mark.parametrize("shape", [(129, 257, 400), (1000, 1000, 4096)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("ops", ["NN", "NT"])
def test_step_alpha_beta(kernel, dtype, out_dtype, shape, ops):
    """C = alpha * op(A) @ op(B) + beta * C from the registers, C read where beta != 0."""
    _check(kernel, *shape, dtype, out_dtype, ops=ops, alpha=0.5, beta=2.0)


def _configs():
    for name in STEPS:
        for p in registry.get(name).configurations():
            yield pytest.param(name, p, id=name + "-" + "-".join(f"{k}{v}" for k, v in p.items()))


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel, params", list(_configs()))
@pytest.mark.parametrize("dtype, out_dtype, ops", EVERY_CONFIGURATION)
def test_every_configuration(kernel, params, dtype, out_dtype, ops):
    _check(kernel, 300, 333, 520, dtype, out_dtype, ops=ops, **params)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize("shape", [(17, 33, 48), (129, 257, 400), (300, 333, 520), (2100, 300, 1000)], ids=str)
@pytest.mark.parametrize("ops", ["NN", "TT", "TN"])
def test_clusters_on_odd_shapes(bm, shape, ops):
    """Step c's clusters of two: B's halves multicast into both blocks, a cluster's second
    tile past M (an odd number of tile-rows) computed on zeros and not stored."""
    _check("wgmma_persistent", *shape, "bfloat16", "bfloat16", ops=ops, BM=bm, CLUSTER=2)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", STEPS)
def test_alpha_zero_reads_neither_a_nor_b(kernel):
    a = torch.full((300, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    b = torch.full((64, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    c0 = torch.rand((300, 256), device="cuda", dtype=torch.bfloat16) + 0.5
    out = c0.clone()
    gemmlab.matmul(a, b, out=out, alpha=0.0, beta=0.5, kernel=kernel)
    torch.cuda.synchronize()
    assert gemmlab.last_plan().spec.name == kernel
    assert torch.equal(out, (c0.float() * 0.5).bfloat16())


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", STEPS)
def test_fallback_when_tma_cannot_read(kernel, caplog):
    """Unpadded rows of odd width: the rung's fallback runs it, and the plan says why."""
    rng = np.random.default_rng(3)
    a = torch.from_numpy(random_matrix(301, 513, "uniform", rng)).cuda().half()
    b = torch.from_numpy(random_matrix(513, 255, "uniform", rng)).cuda().half()
    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        c = gemmlab.matmul(a, b, kernel=kernel)
        torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "mma_pipelined" and p.fallback_reason.startswith(f"{kernel} cannot take these operands")
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)) <= BOUND["float16"]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", STEPS)
def test_batch_is_a_launch_per_matrix(kernel):
    """A batch runs as one launch per matrix (the rung's own kernel takes it in one)."""
    rng = np.random.default_rng(8)
    a = torch.from_numpy(random_matrix(3 * 129, 400, "uniform", rng).reshape(3, 129, 400)).cuda().bfloat16()
    b = torch.from_numpy(random_matrix(3 * 400, 264, "uniform", rng).reshape(3, 400, 264)).cuda().bfloat16()
    out = torch.full((3, 129, 264), float("nan"), device="cuda", dtype=torch.float32)
    gemmlab.matmul(a, b, out=out, kernel=kernel)
    torch.cuda.synchronize()
    assert gemmlab.last_plan().spec.name == kernel
    ref = a.double() @ b.double()
    assert not torch.isnan(out).any()
    assert float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)) <= BOUND["float32"]
