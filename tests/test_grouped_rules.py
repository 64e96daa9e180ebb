"""The grouped rung's host side on the CPU: the spec (tiles, shared memory, launch shape), the
plan, the launch arguments (tensor maps over A and over B's stack, both layouts), the work list
the kernel walks (tests/grouped_work_check.cpp runs 06_grouped.cuh with g++), every refusal of
gemmlab.grouped_mm before anything is written, whole calls on the emulator (tests/emulated_gpu.py:
random offsets with empty, one-row and odd groups, both layouts of B, float16 and bfloat16,
prepared calls), and torch.ops.gemmlab.grouped_mm's registration (opcheck on the CPU with a
float64 stand-in for the kernel, autograd against a loop of matmuls).  On a GPU: test_grouped.py."""

import math
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import emulated_gpu
import gemmlab
from gemmlab.core import grouped
from gemmlab.core.planner import plan_grouped
from gemmlab.kernels import registry
from gemmlab.kernels.spec import Problem
from gemmlab.kernels.tensor.grouped import (
    GROUPED_MAX_GROUPS,
    GroupedOperands,
    grouped_args,
    grouped_items_bound,
    grouped_smem,
)
from gemmlab.runtime import tma
from gemmlab.runtime.compile import INCLUDE_DIR

torch = pytest.importorskip("torch")

SPEC = registry.get("grouped")
CHECK = Path(__file__).with_name("grouped_work_check.cpp")


# -- the spec --------------------------------------------------------------------------------


def test_spec_is_tensor_rung_6_on_hopper_only():
    assert (SPEC.family, SPEC.rung, SPEC.arches, SPEC.own_call) == ("tensor", 6, ("sm_90a",), "gemmlab.grouped_mm")
    assert SPEC.dtypes == ("float16", "bfloat16") and SPEC.layouts == (("N", "N"), ("N", "T"))
    with pytest.raises(ValueError, match=r"kernel 'grouped' does not run on NVIDIA A100 \(sm_80\): it needs sm_90a"):
        SPEC.check_arch("sm_80", "NVIDIA A100")


def test_shared_memory_fits_every_configuration():
    for p in SPEC.configurations():
        assert grouped_smem(p) <= 227 * 1024
        assert (
            grouped_smem(p)
            == p["STAGES"] * (p["BM"] + p["BN"]) * 128
            + p["BM"] // 64 * 4 * 2304
            + 16 * p["STAGES"]
            + 4 * GROUPED_MAX_GROUPS
            + 1024
        )
    with pytest.raises(ValueError, match="must fit in the 227 KiB"):
        SPEC.resolve({"BM": 128, "BN": 256, "STAGES": 6})


@pytest.mark.parametrize("T, N, G", [(1, 8, 1), (4096, 14336, 8), (300, 512, 64), (10**6, 4096, 128), (0, 8, 3)])
def test_grouped_geometry(T, N, G):
    """A persistent grid: no more blocks than SMs nor than the tiles could be (every group's rows
    fill whole tile-rows but its last)."""
    for p in SPEC.configurations():
        prob = Problem(T, N, 64, True, "bfloat16", "bfloat16", "N", "T", groups=G, sm_count=132)
        geo = SPEC.launch(p, prob)
        bound = (-(-T // p["BM"]) + G) * -(-N // p["BN"])
        assert bound == grouped_items_bound(T, N, G, p["BM"], p["BN"])
        assert geo.grid == (max(1, min(132, bound)), 1, 1) and geo.persistent and geo.cluster == (1, 1, 1)
        assert geo.block == (128 * (p["BM"] // 64 + 1), 1, 1) and geo.smem_bytes == grouped_smem(p)


def test_one_product_is_not_a_grouped_one():
    """gemmlab.matmul(kernel="grouped") on one product falls back to the wgmma rung, saying why."""
    prob = Problem(100, 100, 100, True, "bfloat16", "bfloat16", "N", "N")
    assert "not one product" in SPEC.why_unusable(prob)
    assert SPEC.fallback == "wgmma"
    assert SPEC.why_unusable(Problem(100, 100, 100, True, "bfloat16", "bfloat16", "T", "N", groups=2))
    assert SPEC.why_unusable(Problem(100, 100, 100, True, "bfloat16", "bfloat16", "N", "T", groups=2)) is None


# -- the plan --------------------------------------------------------------------------------


def test_plan_auto_tiles():
    small = plan_grouped(8 * 30, 2048, 1024, 8, "bfloat16", "T", arch="sm_90a")
    assert small.params == {"BM": 64, "BN": 128, "STAGES": 6} and "average 30 rows" in small.reason
    wide = plan_grouped(65536, 14336, 4096, 8, "bfloat16", "T", arch="sm_90a")
    assert wide.params == {"BM": 128, "BN": 256, "STAGES": 4}
    mid = plan_grouped(8 * 512, 1024, 1024, 8, "float16", "N", arch="sm_90a")
    assert mid.params == {"BM": 128, "BN": 128, "STAGES": 6}
    assert mid.name_expression == "gemmlab::grouped_gemm<0, 128, 128, 6, 'N', 'N'>"
    named = plan_grouped(100, 64, 64, 3, "bfloat16", kernel="grouped", BM=64, BN=256, STAGES=4)
    assert named.name_expression == "gemmlab::grouped_gemm<1, 64, 256, 4, 'N', 'T'>"


def test_plan_refusals():
    with pytest.raises(TypeError, match="float16 or bfloat16, not float32"):
        plan_grouped(10, 8, 8, 1, "float32")
    with pytest.raises(ValueError, match="'grouped' only"):
        plan_grouped(10, 8, 8, 1, "bfloat16", kernel="wgmma")
    with pytest.raises(ValueError, match="need a named kernel"):
        plan_grouped(10, 8, 8, 1, "bfloat16", BM=64)
    with pytest.raises(ValueError, match=f"at most {GROUPED_MAX_GROUPS} groups"):
        plan_grouped(10, 8, 8, GROUPED_MAX_GROUPS + 1, "bfloat16")
    with pytest.raises(ValueError, match=r"does not run on NVIDIA A100 \(sm_80\)"):
        plan_grouped(10, 8, 8, 1, "bfloat16", arch="sm_80", gpu_name="NVIDIA A100")
    with pytest.raises(ValueError, match="needs 220256 bytes of shared memory"):
        plan_grouped(10, 8, 8, 1, "bfloat16", kernel="grouped", smem_limit=100 * 1024)


# -- the launch arguments --------------------------------------------------------------------


@pytest.mark.parametrize("op_b", ["N", "T"])
def test_maps_cover_a_and_the_stack_of_b(monkeypatch, op_b):
    monkeypatch.setattr(tma, "_encode", lambda *a: emulated_gpu.FakeMap(*a))
    T, N, K, G = 1000, 384, 256, 7
    p = plan_grouped(T, N, K, G, "bfloat16", op_b, kernel="grouped", BM=64, BN=256, STAGES=4)
    ldb, sb = (N, K * N) if op_b == "N" else (K, N * K)
    ops = GroupedOperands(0x10000, K, 0x100000, ldb, sb, 0x900000, N, 0x5000)
    args = grouped_args(p, ops)
    assert [int(x) for x in args[:7]] == [T, N, K, G, 0x5000, 0x900000, N]
    map_a, map_b = args[7:]
    assert map_a == emulated_gpu.FakeMap(0x10000, T, K, K, "bfloat16", 64, 64, 1, map_a.bstride)
    rows, cols, box = (K, N, 64) if op_b == "N" else (N, K, 256)
    assert map_b == emulated_gpu.FakeMap(0x100000, rows, cols, ldb, "bfloat16", box, 64, G, 2 * sb)


# -- the work list the kernel walks ----------------------------------------------------------


def _offsets(rng, T, G, empty=0.3):
    """G cumulative ends of T rows, about ``empty`` of the groups empty, some of one row."""
    sizes = [0 if rng.random() < empty else rng.choice([1, 2, 63, 64, 65, 127, 129, 300]) for _ in range(G)]
    if not any(sizes):
        sizes[-1] = 5
    ends, total = [], 0
    for s in sizes:
        total += s
        ends.append(total)
    return ends, total


def _work_cases() -> list[str]:
    rng = random.Random(7)
    lines = []
    for G in (1, 2, 8, 64, 128, 1024):
        for bm, bn in ((64, 128), (128, 256)):
            ends, T = _offsets(rng, T=None, G=G)
            N = rng.choice([8, 128, 136, 1024])
            tiles = (-(-T // bm) + G) * -(-N // bn)
            for grid in {1, 3, min(132, max(1, tiles))}:
                lines.append(" ".join(map(str, [T, N, bm, bn, grid, G, *ends])))
    # Offsets the kernel clamps: negative, decreasing, past T; all groups empty; T = 0.
    lines += ["50 16 64 128 4 4 -3 20 10 99", "50 16 64 128 4 3 0 0 0", "0 16 128 128 1 2 0 0", "7 8 64 128 2 1 7"]
    return lines


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_work_list_on_the_cpu(tmp_path):
    exe = tmp_path / "grouped_work_check"
    subprocess.run(
        ["g++", "-std=c++17", "-O1", "-I", str(INCLUDE_DIR), "-o", str(exe), str(CHECK)],
        check=True,
        capture_output=True,
    )
    cases = _work_cases()
    run = subprocess.run([str(exe)], input="\n".join(cases) + "\n", capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:]
    # The negative control: a tile walked twice is caught (the same list, one block's items
    # walked by two blocks that claim to be block 0 of a grid of 1 and 2).
    bad = tmp_path / "bad.cpp"
    bad.write_text(CHECK.read_text().replace("for (int t = b; t < work; t += grid)", "for (int t = 0; t < work; ++t)"))
    subprocess.run(["g++", "-std=c++17", "-I", str(INCLUDE_DIR), "-o", str(exe), str(bad)], check=True)
    run = subprocess.run([str(exe)], input="37 300 64 128 2 4 5 5 30 37\n", capture_output=True, text=True)
    assert run.returncode == 1 and "twice" in run.stdout


# -- refusals, before anything is written ----------------------------------------------------


def _t(shape, dtype=torch.bfloat16):
    return torch.zeros(shape, dtype=dtype)


OFFS = torch.tensor([3, 3, 10], dtype=torch.int32)


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((np.zeros((10, 16)), _t((3, 16, 8)), OFFS), {}, TypeError, "a is a ndarray"),
        ((_t((10, 16), torch.float32), _t((3, 16, 8), torch.float32), OFFS), {}, TypeError, "a has dtype float32"),
        ((_t((10, 16)), _t((3, 16, 8), torch.float16), OFFS), {}, TypeError, "b has dtype float16 and a bfloat16"),
        ((_t((2, 10, 16)), _t((3, 16, 8)), OFFS), {}, ValueError, "a is 3-D and b 3-D"),
        ((_t((10, 16)), _t((3, 24, 8)), OFFS), {}, ValueError, "inner dimensions differ"),
        ((_t((10, 16)), _t((3, 16, 8)), OFFS.long()), {}, ValueError, "1-D int32 tensor of the 3 groups'"),
        ((_t((10, 16)), _t((4, 16, 8)), OFFS), {}, ValueError, r"of shape \(3,\)"),
        ((_t((10, 12)), _t((3, 12, 8)), OFFS), {}, ValueError, "K and N multiples of 8 .* K = 12, N = 8"),
        ((_t((10, 16)), _t((3, 16, 20)), OFFS), {}, ValueError, "K = 16, N = 20"),
        ((_t((16, 10)).t(), _t((3, 16, 8)), OFFS), {}, ValueError, "row-major with unit column stride"),
        ((_t((10, 16)), _t((3, 16, 16))[:, :, ::2], OFFS), {}, ValueError, "neither row-major"),
        ((_t((10, 16)), _t((1, 16, 8)).expand(3, 16, 8), OFFS), {}, ValueError, "an expanded b is not read"),
        ((_t((10, 24))[:, 1:17], _t((3, 16, 8)), OFFS), {}, ValueError, "16-byte aligned address"),
        ((_t((10, 20))[:, :16], _t((3, 16, 8)), OFFS), {}, ValueError, "rows 20 elements apart"),
        ((_t((10, 16)), _t((3, 16, 8)), OFFS), {"out_dtype": torch.float32}, TypeError, "not float32"),
        ((_t((10, 16)), _t((3, 16, 8)), OFFS), {"out": _t((10, 9))}, ValueError, r"out has shape \(10, 9\)"),
        ((_t((10, 16)), _t((3, 16, 8)), OFFS), {"out": _t((10, 8), torch.float16)}, TypeError, "out must be"),
        ((_t((10, 16)), _t((3, 16, 8)), OFFS), {"out": _t((8, 10)).t()}, ValueError, "unit column stride"),
        ((_t((10, 16)), _t((3, 16, 8)), OFFS), {}, ValueError, "a is on the cpu"),
    ],
)
def test_refusals_name_the_problem_before_anything_is_written(args, kwargs, error, match):
    out = kwargs.get("out")
    before = None if out is None else out.clone()
    with pytest.raises(error, match=match):
        gemmlab.grouped_mm(*args, **kwargs)
    if out is not None:
        assert torch.equal(out, before)


def test_too_many_groups_is_refused():
    n = GROUPED_MAX_GROUPS + 1
    with pytest.raises(ValueError, match=f"at most {GROUPED_MAX_GROUPS} groups, not {n}"):
        grouped.validate_grouped(_t((10, 16)), _t((n, 16, 8)), torch.zeros(n, dtype=torch.int32))


def test_layouts_of_b():
    w = _t((3, 8, 16))  # (G, N, K): W_e of x @ W_e.t()
    assert grouped.validate_grouped(_t((10, 16)), w.transpose(-2, -1), OFFS).op_b == "T"
    call = grouped.validate_grouped(_t((10, 16)), _t((3, 16, 8)), OFFS)
    assert (call.op_b, call.lda, call.ldb, call.sb) == ("N", 16, 8, 128)


# -- whole calls, emulated ---------------------------------------------------------------------


def _case(emu, T, K, N, ends, op_b, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    G = len(ends)
    a = torch.randn(T, K, generator=g).to(dtype)
    w = torch.randn(G, N, K, generator=g).to(dtype) if op_b == "T" else torch.randn(G, K, N, generator=g).to(dtype)

    def dev(t):
        return emulated_gpu.emulated_tensor(emu, t.contiguous().view(torch.uint16).numpy()).view(dtype)

    a_d, w_d = dev(a), dev(w)
    b_d = w_d.transpose(-2, -1) if op_b == "T" else w_d
    b = w.transpose(-2, -1) if op_b == "T" else w
    offs = emulated_gpu.emulated_tensor(emu, np.array(ends, np.int32))
    ref = torch.full((T, N), math.nan, dtype=torch.float64)
    prev = 0
    for i, end in enumerate(ends):
        s, e = min(max(prev, 0), T), min(max(end, min(max(prev, 0), T)), T)
        prev = end
        ref[s:e] = a[s:e].double() @ b[i].double()
    return a_d, b_d, offs, ref


@pytest.mark.parametrize("op_b", ["N", "T"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("G", [1, 5, 64])
def test_emulated_grouped_mm(monkeypatch, op_b, dtype, G):
    emu = emulated_gpu.install(monkeypatch)
    rng = random.Random(G)
    ends, T = _offsets(rng, None, G)
    a, b, offs, ref = _case(emu, T + 3, 40, 24, ends, op_b, dtype, seed=G)  # 3 rows in no group
    out = emulated_gpu.emulated_tensor(emu, np.full((T + 3, 24), 0x7FC0, np.uint16)).view(dtype)  # NaN
    r = gemmlab.grouped_mm(a, b, offs, out=out)
    assert r is out and gemmlab.last_plan().spec.name == "grouped"
    got = out.double()
    assert torch.isnan(got[T:]).all(), "rows in no group are not written"
    bound = 8e-3 if dtype == torch.bfloat16 else 1e-3
    assert torch.allclose(got[:T], ref[:T], rtol=bound, atol=bound * ref[:T].abs().max().item()), (
        (got[:T] - ref[:T]).abs().max()
    )
    # A new out, and the prepared call of the same signature on other tensors.
    r2 = gemmlab.grouped_mm(a, b, offs)
    assert torch.equal(r2[:T].double(), got[:T]) and len(grouped.PREPARED) == 2
    assert len(emu.calls) == 2 and emu.calls[-1][1][0][0] <= 132


def test_emulated_clamped_offsets_and_empty_calls(monkeypatch):
    emu = emulated_gpu.install(monkeypatch)
    a, b, offs, ref = _case(emu, 30, 16, 8, [-5, 12, 7, 40], "T", torch.bfloat16)
    out = gemmlab.grouped_mm(a, b, offs)
    assert torch.allclose(out.double(), ref, rtol=8e-3, atol=0.1)
    launches = len(emu.calls)
    # No rows, or K = 0 (zeros): nothing launched.
    a0, b0, offs0, _ = _case(emu, 0, 16, 8, [0, 0], "N", torch.bfloat16)
    assert gemmlab.grouped_mm(a0, b0, offs0).shape == (0, 8)
    z = gemmlab.grouped_mm(torch.zeros(5, 0, dtype=torch.bfloat16), torch.zeros(2, 0, 8, dtype=torch.bfloat16), offs0)
    assert z.shape == (5, 8) and not z.any()
    assert len(emu.calls) == launches


# -- torch.ops.gemmlab.grouped_mm -----------------------------------------------------------------


@pytest.fixture
def gt():
    """gemmlab.torch with the grouped kernel's CPU stand-in: the float64 product per group, rows
    in no group NaN (as the kernel leaves them unwritten)."""
    import gemmlab.torch as gt
    from gemmlab.torch import ops
    from torch_cpu import grouped_forms_product

    def reference(a, b, offs, bias=None, out_dtype=None):
        ops._grouped_refusals(a, b, offs, bias, out_dtype)
        return grouped_forms_product(a, b, offs)

    saved = ops.CPU_KERNELS["grouped_mm"]
    ops.CPU_KERNELS["grouped_mm"] = reference
    yield gt
    ops.CPU_KERNELS["grouped_mm"] = saved


def _moe(T=37, K=16, N=24, ends=(5, 5, 30, 36), transposed=True, grad=True):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(T, K, generator=g).to(torch.bfloat16).requires_grad_(grad)
    G = len(ends)
    w = (torch.randn(G, N, K, generator=g) if transposed else torch.randn(G, K, N, generator=g)).to(torch.bfloat16)
    w.requires_grad_(grad)
    return a, w, torch.tensor(ends, dtype=torch.int32)


@pytest.mark.parametrize("transposed", [True, False])
def test_opcheck_on_the_cpu(gt, transposed):
    a, w, offs = _moe(T=36, transposed=transposed)
    b = w.transpose(-2, -1) if transposed else w
    result = torch.library.opcheck(torch.ops.gemmlab.grouped_mm.default, (a, b, offs))
    assert set(result.values()) == {"SUCCESS"}, result
    grad = torch.randn(36, 24).to(torch.bfloat16)
    result = torch.library.opcheck(
        torch.ops.gemmlab.grouped_mm_weight_grad.default, (a.detach(), grad, offs, transposed)
    )
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("transposed", [True, False])
def test_autograd_matches_a_loop_of_matmuls(gt, transposed):
    """grad_a: the grouped product with B's matrices transposed; grad_b: a_g^T @ grad_g per
    group (zeros for the empty group), laid out as b is; rows in no group get zero gradient."""
    a, w, offs = _moe(transposed=transposed)  # 37 rows, the last in no group
    b = w.transpose(-2, -1) if transposed else w
    out = gt.grouped_mm(a, b, offs)
    up = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(out.dtype)
    out[:36].backward(up[:36])
    a2, w2 = a.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    b2 = w2.transpose(-2, -1) if transposed else w2
    bounds = [(0, 5), (5, 5), (5, 30), (30, 36)]
    torch.cat([a2[s:e] @ b2[g] for g, (s, e) in enumerate(bounds)]).backward(up[:36].double())
    assert torch.allclose(a.grad.double(), a2.grad, rtol=2e-2, atol=5e-2) and not a.grad[36].any()
    assert torch.allclose(w.grad.double(), w2.grad, rtol=2e-2, atol=5e-2) and not w.grad[1].any()
    assert w.grad.stride() == w.stride()


def test_fake_shapes_and_refusals(gt):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, w, offs = torch.empty(50, 64, dtype=torch.bfloat16), torch.empty(4, 64, 32, dtype=torch.bfloat16), None
        offs = torch.empty(4, dtype=torch.int32)
        assert gt.grouped_mm(a, w, offs).shape == (50, 32)
    a, w, offs = _moe(grad=False)
    with pytest.raises(ValueError, match="adds no bias"):
        gt.grouped_mm(a, w.transpose(-2, -1), offs, bias=torch.zeros(24))
    with pytest.raises(TypeError, match="not out_dtype torch.float32"):
        gt.grouped_mm(a, w.transpose(-2, -1), offs, out_dtype=torch.float32)
    with pytest.raises(ValueError, match="a 2-D or 3-D self and mat2"):
        gt.grouped_mm(a, w[0, 0], offs)
    with pytest.raises(ValueError, match="2d x 3d form needs offs"):
        gt.grouped_mm(a, w.transpose(-2, -1))
    with pytest.raises(ValueError, match="a batch and take no offs"):
        gt.grouped_mm(w, w.transpose(-2, -1), offs)


# The other three forms of torch._grouped_mm: (self, mat2, offs or None) and the float64 answer.
G3, ENDS3 = 4, (5, 5, 30, 36)


def _forms(grad=True, width=37):
    """Each form's operands; ``width``: the grouped dimension's length (37: its last index in no
    group; 36: every index in one, as opcheck's comparisons need, NaN being unequal to itself)."""
    g = torch.Generator().manual_seed(11)

    def t(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).requires_grad_(grad)

    offs = torch.tensor(ENDS3, dtype=torch.int32)
    return {
        # (M, K) x (K, N), offs over K = 37 (the last column of self in no group) -> (G, M, N)
        "2d2d": (t(16, width), t(width, 24), offs),
        # (G, M, K) x (K, N) with b column-major, offs over N = 37 -> (M, N)
        "3d2d": (t(G3, 16, 24), t(width, 24).detach().t().requires_grad_(grad), offs),
        "3d3d": (t(G3, 16, 24), t(G3, 24, 8), None),
    }


def _forms_float64(form, a, b):
    """The form's product by a loop of float64 matmuls (what the groups cover only)."""
    bounds = [(0, 5), (5, 5), (5, 30), (30, 36)]
    if form == "2d2d":
        return torch.stack([a[:, s:e] @ b[s:e] for s, e in bounds])
    if form == "3d2d":
        return torch.cat([a[g] @ b[:, s:e] for g, (s, e) in enumerate(bounds)], dim=1)
    return a @ b


@pytest.mark.parametrize("form", ["2d2d", "3d2d", "3d3d"])
def test_every_form_under_opcheck_and_fake(gt, form):
    from torch._subclasses.fake_tensor import FakeTensorMode

    a, b, offs = _forms(width=36)[form]
    result = torch.library.opcheck(torch.ops.gemmlab.grouped_mm.default, (a, b, offs))
    assert set(result.values()) == {"SUCCESS"}, result
    want = {"2d2d": (G3, 16, 24), "3d2d": (16, 36), "3d3d": (G3, 16, 8)}[form]
    assert gt.grouped_mm(a, b, offs).shape == want
    with FakeTensorMode() as mode:
        fake = [None if x is None else mode.from_tensor(x) for x in (a, b, offs)]
        assert gt.grouped_mm(*fake).shape == want


@pytest.mark.parametrize("form", ["2d2d", "3d2d", "3d3d"])
def test_every_form_with_autograd_matches_a_loop_of_matmuls(gt, form):
    """Each form's product and both gradients against float64 loops; the gradients are the forms
    again (2-D x 2-D: 3-D x 2-D and 2-D x 3-D; 3-D x 2-D: 2-D x 2-D and 3-D x 2-D), and what no
    group covers gets zero gradient."""
    a, b, offs = _forms()[form]
    out = gt.grouped_mm(a, b, offs)
    a2, b2 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ref = _forms_float64(form, a2, b2)
    up = torch.randn(ref.shape, generator=torch.Generator().manual_seed(5)).to(out.dtype)
    covered = out[:, :36] if form == "3d2d" else out
    covered.backward(up)
    ref.backward(up.double())
    torch.testing.assert_close(covered.double(), ref, rtol=2e-2, atol=5e-2)
    for got, want in ((a.grad, a2.grad), (b.grad, b2.grad)):
        assert got.shape == want.shape
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=5e-2)
    if form == "2d2d":
        assert not a.grad[:, 36].any() and not b.grad[36].any()  # K past the last group
    if form == "3d2d":
        assert not b.grad[:, 36].any()


def test_the_cpu_kernel_says_it_reads_cuda_tensors():
    import gemmlab.torch as gt

    a, w, offs = _moe(ends=(8, 16, 24, 37), grad=False)
    with pytest.raises(ValueError, match="a is on the cpu; grouped_mm runs on a CUDA device"):
        gt.grouped_mm(a, w.transpose(-2, -1), offs)


# -- the weights' gradient in one launch (grouped_wgrad, rung 7) ----------------------------------


WGRAD = registry.get("grouped_wgrad")


def test_wgrad_spec_plan_and_geometry():
    from gemmlab.core.planner import plan_grouped_wgrad
    from gemmlab.kernels.tensor.grouped_wgrad import grouped_wgrad_smem

    assert (WGRAD.family, WGRAD.rung, WGRAD.arches, WGRAD.layouts) == ("tensor", 7, ("sm_90a",), (("T", "N"),))
    for p in WGRAD.configurations():
        assert (
            grouped_wgrad_smem(p)
            == p["STAGES"] * (p["BM"] + p["BN"]) * 128 + p["BM"] // 64 * 9216 + 16 * p["STAGES"] + 1024
        )
        assert grouped_wgrad_smem(p) <= 227 * 1024
    p = plan_grouped_wgrad(4096, 28672, 16384, 8, "bfloat16", arch="sm_90a")
    assert p.params == {"BM": 128, "BN": 256, "STAGES": 4}
    assert p.name_expression == "gemmlab::grouped_wgrad_gemm<1, 128, 256, 4, 'T', 'N'>"
    assert WGRAD.launch(p.params, p.problem).grid == (132, 1, 1)
    small = plan_grouped_wgrad(64, 128, 10, 2, "float16", arch="sm_90a")
    assert small.params["BN"] == 128 and WGRAD.launch(small.params, small.problem).grid == (2, 1, 1)
    with pytest.raises(ValueError, match="'grouped_wgrad' only"):
        plan_grouped_wgrad(64, 128, 10, 2, "float16", kernel="grouped")
    assert "not one product" in WGRAD.why_unusable(Problem(8, 8, 8, True, "float16", "float16", "T", "N"))


def test_wgrad_maps(monkeypatch):
    from gemmlab.core.planner import plan_grouped_wgrad
    from gemmlab.kernels.tensor.grouped_wgrad import WgradOperands, grouped_wgrad_args

    monkeypatch.setattr(tma, "_encode", lambda *a: emulated_gpu.FakeMap(*a))
    p = plan_grouped_wgrad(256, 384, 1000, 5, "bfloat16", arch="sm_90a")
    args = grouped_wgrad_args(p, WgradOperands(0x10000, 256, 0x90000, 392, 0x200000, 384, 256 * 384, 0x5000))
    assert [int(x) for x in args[:8]] == [1000, 256, 384, 5, 0x5000, 0x200000, 384, 256 * 384]
    assert args[8] == emulated_gpu.FakeMap(0x10000, 1000, 256, 256, "bfloat16", 64, 64, 1, args[8].bstride)
    assert args[9] == emulated_gpu.FakeMap(0x90000, 1000, 384, 392, "bfloat16", 64, 64, 1, args[9].bstride)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("G", [1, 6, 64])
def test_emulated_weight_grad(monkeypatch, dtype, G):
    emu = emulated_gpu.install(monkeypatch)
    ends, T = _offsets(random.Random(G + 100), None, G)
    g = torch.Generator().manual_seed(G)
    x, y = torch.randn(T + 2, 40, generator=g).to(dtype), torch.randn(T + 2, 24, generator=g).to(dtype)

    def dev(t):
        return emulated_gpu.emulated_tensor(emu, t.contiguous().view(torch.uint16).numpy()).view(dtype)

    offs = emulated_gpu.emulated_tensor(emu, np.array(ends, np.int32))
    out = grouped.grouped_weight_grad(dev(x), dev(y), offs)
    assert out.shape == (G, 40, 24) and grouped.last_grouped_plan().spec.name == "grouped_wgrad"
    prev = 0
    for i, end in enumerate(ends):
        want = x[prev:end].double().t() @ y[prev:end].double()
        if end == prev:
            assert not out[i].double().any(), "an empty group's gradient is zeros"
        else:
            assert torch.allclose(out[i].double(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
        prev = end


def test_wgrad_refusals_before_anything_is_written():
    x, y = _t((10, 16)), _t((10, 8))
    with pytest.raises(ValueError, match="P = 12, Q = 8"):
        grouped.validate_wgrad(_t((10, 12)), y, OFFS)
    with pytest.raises(ValueError, match="the same rows"):
        grouped.validate_wgrad(x, _t((11, 8)), OFFS)
    with pytest.raises(TypeError, match="of one dtype"):
        grouped.validate_wgrad(x, y.half(), OFFS)
    out = torch.full((3, 16, 9), 7.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out has shape \(3, 16, 9\)"):
        grouped.grouped_weight_grad(x, y, OFFS, out=out)
    assert (out == 7).all()
    with pytest.raises(ValueError, match="x is on the cpu; grouped_weight_grad runs on a CUDA device"):
        grouped.grouped_weight_grad(x, y, OFFS)
