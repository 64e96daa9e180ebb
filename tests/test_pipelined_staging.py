"""Rung 8 (pipelined) on float32 operands off the 16-byte grid: its staging pre-pass (pack32
copies A and B to rows on the grid, then the kernel reads them 16 bytes at a time), the choice
of it by the cost model, and C's 16-byte stores decided by the kernel from C alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gemmlab
from gemmlab.core import planner
from gemmlab.kernels.simt import pipelined, staging
from gemmlab.kernels.spec import SPECS, Ask, Problem
from gemmlab.runtime import device as rt_device

import emulated_gpu


def _rows(M, N, K, op_a, op_b):
    """rows_aligned16 and tma_aligned of fresh contiguous float32 operands of these sizes."""
    wa, wb = (K if op_a == "N" else M), (N if op_b == "N" else K)
    rows = ("A" if wa % 4 == 0 else "") + ("B" if wb % 4 == 0 else "") + ("C" if N % 4 == 0 else "")
    return rows, wa % 4 == 0 and wb % 4 == 0


def _plan(M, N, K, ops, batch=1):
    rows, tma = _rows(M, N, K, *ops)
    stored = [
        (r, c)
        for x, r, c in (("A", *((M, K) if ops[0] == "N" else (K, M))), ("B", *((K, N) if ops[1] == "N" else (N, K))))
        if x not in rows
    ]
    return planner.plan(
        "auto", M, N, K, aligned16=False, op_a=ops[0], op_b=ops[1], batch=batch, arch="sm_90a", sm_count=132,
        tma_aligned=tma, rows_aligned16=rows, gpu_name="NVIDIA H200", stage_bytes=sum(4 * r * c * batch for r, c in stored),
    )  # fmt: skip


# -- which operands the kernel reads 16 bytes at a time --------------------------------------------


def test_reads_16_bytes_asks_of_a_and_b_only():
    """VEC follows A and B: a C of odd width (a vocabulary's logits) leaves it on, a K of odd
    length (A's rows) turns it off, and a staged problem has it on whatever the operands."""
    logits = Problem(1024, 50257, 768, False, op_b="T", rows_aligned16="AB")
    assert pipelined.reads_16_bytes(logits) and not pipelined.c_on_grid(logits)
    dgrad = Problem(1024, 768, 50257, False, rows_aligned16="BC")
    assert not pipelined.reads_16_bytes(dgrad) and pipelined.c_on_grid(dgrad)
    assert pipelined.reads_16_bytes(dataclasses.replace(dgrad, stage=True))
    # Rows on the grid but of a width off it (a slice of K) are read 4 bytes at a time too.
    assert not pipelined.reads_16_bytes(Ask(64, 64, 6, aligned16=False, rows_aligned16="ABC"))
    assert pipelined.SPEC.template_args(pipelined.SPEC.defaults(), logits)[-1] is True  # REG_TRANSPOSE 1
    assert pipelined.SPEC.template_args(pipelined.SPEC.defaults(), dgrad)[-1] is False


@pytest.mark.parametrize(
    "x, grid",
    [
        ((4096, 3, 8, 8), True),  # rows of 8 floats, 32 bytes apart
        ((4100, 3, 8, 8), False),  # base off the grid
        ((4096, 3, 7, 8), False),  # a partial group at each row's end
        ((4096, 3, 8, 9), False),  # rows 36 bytes apart
        ((4096, 1, 8, 9), True),  # one row: no stride to check
    ],
)
def test_on_grid(x, grid):
    assert staging.on_grid(x) == grid


# -- the choice ----------------------------------------------------------------------------------


def test_a_long_odd_k_is_staged_and_a_thin_one_is_not():
    """dY @ W of a 30522-word vocabulary with 128 tokens (K = 30522: dY's rows off the grid) pays
    for one copy of dY; a product whose operands are read about once does not (the copy costs what
    the product does), and says why in its reason."""
    p = _plan(128, 768, 30522, "NN")
    assert p.spec.name == "pipelined" and p.problem.stage, p.describe()
    assert p.reason.startswith("cost model: ") and "a copy of 14.9 MiB to the 16-byte grid" in p.reason
    assert p.describe().endswith("[operands off the 16-byte grid copied onto it first]")
    assert p.spec.pre_pass(p.problem) is staging.PREPASS
    thin = _plan(681, 2792, 35, "TN")  # C on the grid, K = 35: the copy costs more than it gains
    assert not thin.problem.stage and thin.spec.pre_pass(thin.problem) is None
    assert "staging would take" in thin.reason and "no faster than" in thin.reason, thin.reason
    # C off the grid and a short K: the copies' kernel stores C through shared memory too (STAGE_C),
    # so the copy pays on a large enough product (1.41x, measured), and not on a tiny one.
    odd_c = _plan(755, 4009, 95, "NN")
    assert odd_c.problem.stage and odd_c.spec.template_args(odd_c.params, odd_c.problem)[-2:] == (True, True)
    tiny = _plan(361, 57, 445, "NT")
    assert not tiny.problem.stage and "no faster than" in tiny.reason, tiny.reason


def test_a_batch_is_not_staged_and_says_why():
    p = _plan(207, 64, 207, "NN", batch=48)
    assert not p.problem.stage and "a batch reads its operands as they are" in p.reason, p.reason


def test_operands_on_the_grid_ask_nothing_of_staging():
    p = _plan(1024, 50257, 768, "NT")  # only C off the grid
    assert not p.problem.stage and "staging" not in p.reason, p.reason


def test_an_odd_c_in_nt_takes_the_variant_that_stores_it_through_shared_memory():
    """NT with A and B on the grid and C off it, with or without REG_TRANSPOSE: VEC follows the
    operands, and STAGE_C stores C through shared memory (without REG_TRANSPOSE both operands
    are transposed by 4-byte copies whatever VEC says: the same machine code the 4-byte variant
    has, where it once ran for this reason); C on the grid, or another layout, keeps VEC and
    no STAGE_C."""
    logits = Problem(1024, 50257, 768, False, op_b="T", rows_aligned16="AB")
    p = {**pipelined.SPEC.defaults(), "REG_TRANSPOSE": 0}
    args = lambda p, prob: pipelined.SPEC.template_args(p, prob)[-2:]  # noqa: E731  (VEC, STAGE_C)
    assert pipelined.reads_16_bytes(logits) and args(p, logits) == (True, True)
    assert args({**pipelined.TILE_64, "SPLITK": 1, "REG_TRANSPOSE": 0}, logits) == (True, True)
    assert args({**p, "REG_TRANSPOSE": 1}, logits)[0] is True
    assert args(p, dataclasses.replace(logits, N=50256, rows_aligned16="ABC")) == (True, False)
    assert args(p, dataclasses.replace(logits, op_a="T", M=1024, rows_aligned16="AB"))[0] is True


def test_the_16_byte_variant_stages_an_odd_c_only_where_asked():
    """STAGE_C: the 16-byte variant with C off the grid (logits of 50257 words from aligned
    operands; staged copies beside an odd C) stores C through shared memory where the tile has
    room, so it is a template argument of its own; C on the grid, the 4-byte variant (which has
    the path anyway) and the 128-thread 64 x 128 tile (no registers to spare) keep it off."""
    logits = Problem(1024, 50257, 768, False, op_b="T", rows_aligned16="AB")
    p = {**pipelined.SPEC.defaults(), "REG_TRANSPOSE": 1}
    assert pipelined.stage_c(p, logits)
    assert pipelined.SPEC.template_args(p, logits)[-2:] == (True, True)
    assert not pipelined.stage_c(p, dataclasses.replace(logits, N=50256, rows_aligned16="ABC"))
    assert pipelined.stage_c({**p, "REG_TRANSPOSE": 0}, logits)  # 4-byte copies of both, VEC all the same
    assert not pipelined.stage_c(p, dataclasses.replace(logits, rows_aligned16=""))  # the 4-byte variant
    staged = Problem(681, 2795, 35, False, op_a="T", stage=True)
    assert pipelined.stage_c(pipelined.TILE_128 | {"SPLITK": 1}, staged)
    assert not pipelined.stage_c(pipelined.TILE_64 | {"SPLITK": 1}, dataclasses.replace(staged, aligned16=True))
    narrow = {**p, "BM": 64, "BN": 128, "WM": 64, "WN": 32, "WNITER": 4, "TM": 4}
    assert not pipelined.c_through_smem(narrow) and not pipelined.stage_c(narrow, staged)


# -- end to end on the emulated GPU -----------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, ops, copies",
    [
        ((128, 768, 30522), "NN", 1),  # dY @ W: dY's rows off the grid, W's on it; split over K
        ((1001, 2003, 6007), "TT", 2),  # A stored K x M (rows 1001 long), B stored N x K (rows 6007)
        ((2003, 1001, 6007), "TN", 2),  # stored K x M and K x N: rows M and N long
    ],
)
def test_staging_end_to_end_on_the_emulated_gpu(monkeypatch, shape, ops, copies):
    """pack32 copies each operand off the grid into one workspace, rows padded with zeros, in one
    launch whether one operand or both (gridDim.y the copies); the kernel reads the copies (the
    emulator checks every address it touches); the result right."""
    emu = emulated_gpu.install(monkeypatch)
    M, N, K = shape
    rng = np.random.default_rng(M + K)
    a = emu.keep(rng.standard_normal((M, K) if ops[0] == "N" else (K, M)).astype(np.float32))
    b = emu.keep(rng.standard_normal((K, N) if ops[1] == "N" else (N, K)).astype(np.float32))
    a_op = a if ops[0] == "N" else a.T
    b_op = b if ops[1] == "N" else b.T
    out = emu.keep(np.full((M, N), np.nan, np.float32))
    gemmlab.matmul(a_op, b_op, out=out)
    p = gemmlab.last_plan()
    assert p.spec.name == "pipelined" and p.problem.stage, p.describe()
    kernels = [
        k if isinstance(k, str) else getattr(getattr(k, "spec", None), "name", "reduce") for k, _ in emu.launches
    ]
    assert kernels[:2] == ["pack32", "pipelined"], kernels
    assert emu.launches[0][1][1] == copies, emu.launches[0]
    ref = a_op.astype(np.float64) @ b_op.astype(np.float64)
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


# -- on the GPU ----------------------------------------------------------------------------------------

hopper_or_ampere = pytest.mark.skipif(not rt_device.gpu_available(), reason="needs a GPU")


def _check_staged(a, b):
    """matmul(a, b) by auto into a NaN-poisoned out: rung 8 on staged copies, FP64 reference."""
    import torch

    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda")
    gemmlab.matmul(a, b, out=out)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "pipelined" and p.problem.stage, p.describe()
    ref = a.double() @ b.double()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-5, (err, p.describe())


def _always(ask, nbytes):
    """A staging hook that copies whatever the kernel would read 4 bytes at a time (a batch of one)."""
    if ask.dtype != "float32" or pipelined.reads_16_bytes(ask) or ask.batch > 1:
        return None, ""
    return pipelined.auto_choice(ask, staged=True)[0], "staged by the test"


@pytest.mark.gpu
@hopper_or_ampere
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("M, N, K, offset", [(517, 263, 3001, 0), (131, 1021, 997, 1), (2049, 67, 10007, 3)])
def test_gpu_staged_products(monkeypatch, ops, M, N, K, offset):
    """Every layout staged (the hook forced; sizes of this test only, so no kept plan of another
    test answers), bases off the grid too, split or not as the model sizes it: FP64 reference,
    a NaN-poisoned out of odd width (C's 4-byte stores)."""
    import torch

    monkeypatch.setitem(
        SPECS,
        "pipelined",
        dataclasses.replace(pipelined.SPEC, rules=dataclasses.replace(pipelined.SPEC.rules, stage=_always)),
    )
    torch.manual_seed(M + N + K + offset)

    def make(rows, cols):
        return torch.randn(rows * cols + offset, device="cuda")[offset:].view(rows, cols)

    a = make(M, K) if ops[0] == "N" else make(K, M).t()
    b = make(K, N) if ops[1] == "N" else make(N, K).t()
    _check_staged(a, b)


@pytest.mark.gpu
@hopper_or_ampere
@pytest.mark.parametrize("reg", [0, 1])
@pytest.mark.parametrize("b, M, N, K", [(1, 300, 1001, 256), (6, 197, 197, 64), (1, 77, 50257, 64)])
def test_gpu_c_off_the_grid_with_a_and_b_on_it(b, M, N, K, reg):
    """x @ W.t() (NT) with A and B on the grid and C of odd width, a batch whose C matrices start
    off the grid included: the 16-byte variant compiled with STAGE_C, with or without
    REG_TRANSPOSE (without it both operands are 4-byte copies whatever VEC says), stores C
    through shared memory.  FP64 reference, NaN-poisoned out."""
    import torch

    torch.manual_seed(M + N)
    lead = (b,) if b > 1 else ()
    a = torch.randn(lead + (M, K), device="cuda")
    w = torch.randn(lead + (N, K), device="cuda").transpose(-1, -2)
    out = torch.full(lead + (M, N), float("nan"), device="cuda")
    gemmlab.matmul(a, w, out=out, kernel="pipelined", **{**pipelined.TILE_64, "REG_TRANSPOSE": reg})
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.template_args(p.params, p.problem)[-2:] == (True, True), p.describe()
    ref = a.double() @ w.double()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


@pytest.mark.gpu
@hopper_or_ampere
@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize(
    "b, M, N, K, ops, tile",
    [
        (1, 681, 2795, 35, "TN", pipelined.TILE_128),
        (3, 301, 257, 129, "NN", pipelined.TILE_64),
        (1, 999, 157, 211, "NT", {}),
        (2, 133, 517, 77, "TT", pipelined.SKINNY_M),
        (1, 517, 133, 300, "NN", pipelined.SKINNY_N),
    ],
)
def test_gpu_c_through_shared_memory(b, M, N, K, ops, tile, beta):
    """The variant that reads A and B 4 bytes at a time stores a C of odd width through shared
    memory, a warp's subtile at a time: every tile it is chosen with, beta reading C back, a
    batch whose matrices start off the grid, tiles hanging over every edge."""
    import torch

    torch.manual_seed(M + K)
    lead = (b,) if b > 1 else ()

    def op(rows, cols, how):
        return (
            torch.randn(lead + (rows, cols), device="cuda")
            if how == "N"
            else torch.randn(lead + (cols, rows), device="cuda").transpose(-1, -2)
        )

    a, w = op(M, K, ops[0]), op(K, N, ops[1])
    c0 = torch.randn(lead + (M, N), device="cuda")
    out = c0.clone()
    gemmlab.matmul(a, w, out=out, beta=beta, kernel="pipelined", **tile)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.template_args(p.params, p.problem)[-2:] == (False, False), p.describe()
    ref = a.double() @ w.double() + beta * c0.double()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5, p.describe()


@pytest.mark.gpu
@hopper_or_ampere
@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize(
    "M, N, K, ops, tile",
    [
        (681, 2795, 35, "TN", pipelined.TILE_128),
        (1001, 517, 3001, "NN", {}),
        (301, 257, 129, "NT", pipelined.TILE_64),
        (133, 517, 77, "TT", pipelined.SKINNY_M),
        (517, 133, 300, "NN", pipelined.SKINNY_N),
        (64, 1001, 4000, "NN", {"SPLITK": 3}),
    ],
)
def test_gpu_staged_operands_beside_an_odd_c(monkeypatch, M, N, K, ops, tile, beta):
    """Operands off the grid copied onto it (a hook stages them in ``tile``) beside a C of odd
    width: the 16-byte variant compiled with STAGE_C stores C through shared memory, a warp's
    subtile at a time, in every tile it is chosen with, beta reading C back, split over K, tiles
    hanging over every edge; out's neighbours in its rows untouched."""
    import torch

    def stage_in_tile(ask, nbytes):
        if ask.dtype != "float32" or pipelined.reads_16_bytes(ask):
            return None, ""
        return {**pipelined.auto_choice(ask, staged=True)[0], **tile}, "staged by the test"

    monkeypatch.setitem(
        SPECS,
        "pipelined",
        dataclasses.replace(pipelined.SPEC, rules=dataclasses.replace(pipelined.SPEC.rules, stage=stage_in_tile)),
    )
    torch.manual_seed(M + N + K)

    def op(rows, cols, how):  # rows of odd length: off the grid, so staged
        x = torch.randn((rows, cols + 1) if how == "N" else (cols, rows + 1), device="cuda")
        return x[:, :cols] if how == "N" else x[:, :rows].t()

    a, w = op(M, K, ops[0]), op(K, N, ops[1])
    buf = torch.full((M, N + 3), float("nan"), device="cuda")
    out = buf[:, :N]
    c0 = torch.randn(M, N, device="cuda")
    if beta:
        out.copy_(c0)
    gemmlab.matmul(a, w, out=out, beta=beta)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "pipelined" and p.problem.stage, p.describe()
    assert all(p.params[k] == v for k, v in tile.items()), p.describe()
    assert p.spec.template_args(p.params, p.problem)[-2:] == (True, pipelined.c_through_smem(p.params, ops[1]))
    ref = a.double() @ w.double() + beta * c0.double()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5, p.describe()
    assert torch.isnan(buf[:, N:]).all(), "written outside out"


def test_a_k_slice_view_is_staged_on_the_emulated_gpu(monkeypatch):
    """x[:, :4095] of a 4096-wide x: rows on the 16-byte grid (TMA could read them) but a width
    off it, so the kernel would read them 4 bytes at a time; rung 8's own rule stages them
    (pack32 pads the copy's rows with zeros), the result right."""
    emu = emulated_gpu.install(monkeypatch)
    rng = np.random.default_rng(7)
    x = emu.keep(rng.standard_normal((1024, 4096)).astype(np.float32))
    w = emu.keep(rng.standard_normal((4095, 768)).astype(np.float32))
    out = emu.keep(np.full((1024, 768), np.nan, np.float32))
    gemmlab.matmul(x[:, :4095], w, out=out)
    p = gemmlab.last_plan()
    assert p.spec.name == "pipelined" and p.problem.stage, p.describe()
    assert "a copy of 16.0 MiB" in p.reason, p.reason
    kernels = [
        k if isinstance(k, str) else getattr(getattr(k, "spec", None), "name", "reduce") for k, _ in emu.launches
    ]
    assert kernels[:2] == ["pack32", "pipelined"], kernels
    ref = x[:, :4095].astype(np.float64) @ w.astype(np.float64)
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.gpu
@hopper_or_ampere
@pytest.mark.parametrize("shape", [(1024, 768, 4095), (333, 1000, 6001)])
def test_gpu_k_slice_view_staged_by_auto(shape):
    """x[:, :K] of a wider x (rows on the grid, a width off it) and W: auto stages x; FP64
    reference, NaN-poisoned out."""
    import torch

    M, N, K = shape
    torch.manual_seed(K)
    x = torch.randn(M, (K + 3) // 4 * 4 + 4, device="cuda")[:, :K]  # leading dimension a multiple of 4
    _check_staged(x, torch.randn(K, N, device="cuda"))


def test_the_staging_choice_against_recorded_arms():
    """An H200's timings of products with A or B off the grid, staging forced off and on, the
    kernel on the copies storing an odd C through shared memory (STAGE_C)
    (benchmarks/results/nvidia-h200/ab-fp32-staging-arms-2026-12-01.json, benchmarks/NOTES.md):
    where one way was faster by more than 10%, the choice takes it, but for two products staged
    and 10-15% slower (183 x 2877 x 4775, 6849 x 123 x 2767 TN: a thin side beside a long K) --
    what the model is known to miss."""
    import json
    import math
    from pathlib import Path

    record = Path(__file__).resolve().parents[1] / "benchmarks/results/nvidia-h200/ab-fp32-staging-arms-2026-12-01.json"
    rec = json.loads(record.read_text())
    clear, wrong = 0, []
    for off, on in zip(rec["never"], rec["always"]):
        M, N, K, ops = off["M"], off["N"], off["K"], off["ops"]
        rows, tma = _rows(M, N, K, *ops)
        if off["b"] > 1 or ("A" in rows and "B" in rows):
            continue
        ratio = off["gemmlab_us"] / on["gemmlab_us"]
        if abs(math.log(ratio)) < 0.1:  # within a command's noise
            continue
        clear += 1
        staged = planner.plan(
            "auto", M, N, K, aligned16=False, op_a=ops[0], op_b=ops[1], arch="sm_90a", sm_count=132,
            tma_aligned=tma, rows_aligned16=rows, gpu_slug="nvidia-h200", gpu_name="NVIDIA H200",
        ).problem.stage  # fmt: skip
        if staged != (ratio > 1):
            wrong.append((M, N, K, ops, round(ratio, 2)))
    assert clear >= 12 and len(wrong) <= 2, (clear, wrong)
