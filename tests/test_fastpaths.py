"""Fast paths for products the models suite does not name: the cost model
(kernels/cost.py), the tile choices it makes for kernel="auto" on wgmma and
mma_pipelined, and -- on a GPU -- the configurations it picks against FP64.

Without a GPU: the plans of the products of batched odd matrices, few output tiles
and small M, as PyTorch hands them over (views, transposes), on an emulated H200
(tests/emulated_gpu.py's FakeGPU: sm_90a, 132 SMs, an H200, which ships no table); which shapes the
model moves off the measured rules and which it keeps; its ranking against
recorded measurements; the batched odd product end to end on the emulated GPU.
"""

import dataclasses

import numpy as np
import pytest

import gemmlab
from gemmlab.tools.bench.models import planning_view
from gemmlab.core import planner
from gemmlab.tools.bench import models
from gemmlab.kernels import cost, registry
from gemmlab.kernels.tensor.wgmma import PACK16_KERNEL, TF32_PACK_SOURCE
from gemmlab.kernels.tensor import mma_pipelined, wgmma
from gemmlab.runtime import device as rt_device

import emulated_gpu

GPU = emulated_gpu.FakeGPU()
SMALL = dict(mma_pipelined.SMALL_TILE)


def _stored(shape, dtype="float16", offset=0):
    return planning_view(shape, dtype, offset)


def _plan(a, b, dtype=None):
    """What matmul(a, b) would run on the emulated H200 (16-bit NumPy arrays stand for
    bf16 too: same sizes; ``dtype`` plans for another 16-bit type)."""
    call = planner.validate(a, b, None, 1.0, 0.0, False, False, None, None)
    if dtype is not None:
        call = dataclasses.replace(call, dtypes={"dtype": dtype, "out_dtype": dtype})
    kv = planner.kernel_view(
        call, planner.result_side(call), {"A": call.A.operand.ptr, "B": call.B.operand.ptr, "C": 0}
    )
    return planner.plan_call(call, kv, planner.batching(kv), GPU, "auto", {})


S, D, BH = 197, 64, 384  # ViT-B/16 at 224^2: 1 + 14^2 tokens, head dimension 64, batch 32 x 12 heads


# -- the cost model ---------------------------------------------------------------------------------


def test_tile_use_counts_the_padded_area():
    assert cost.tile_use(128, 256, 128, 256) == 1.0
    assert cost.tile_use(197, 64, 128, 256) == pytest.approx(197 * 64 / (256 * 256))  # 19%
    assert cost.tile_use(197, 64, 64, 64) == pytest.approx(197 * 64 / (256 * 64))  # 77%
    assert cost.tile_use(0, 5, 64, 64) == 1.0


def test_predict_grows_with_waste_waves_and_splits():
    m = cost.Machine(132)
    t = cost.Tile(128, 128, 64, 0.7)
    one_wave = cost.predict(128 * 11, 128 * 12, 4096, t, m)  # 132 tiles: one wave
    two_waves = cost.predict(128 * 11, 128 * 12 + 1, 4096, t, m)  # 143 tiles: a second, mostly empty
    assert two_waves.seconds > 1.5 * one_wave.seconds
    assert "1.00 waves" in one_wave.reason and "1.08 waves" in two_waves.reason
    assert "compute-bound" in one_wave.reason
    # Split: the same work items' K in slices, plus the partial tiles each tile's last slice
    # reads through L2 (added up in the kernel: no second launch).
    split = cost.predict(1024, 1024, 8192, cost.Tile(128, 128, 64, 0.7, splits=2, fixup=True), m)
    unsplit = cost.predict(1024, 1024, 8192, t, m)
    assert split.seconds < unsplit.seconds and "split 2" in split.reason
    one_tile = cost.predict(128, 128, 8192, cost.Tile(128, 128, 64, 0.7), m)
    for s in (2, 4, 8):
        sliced = cost.predict(128, 128, 8192, cost.Tile(128, 128, 64, 0.7, splits=s, fixup=True), m)
        fixup = s * 128 * 128 * 4 / m.sm_bw  # one tile: s - 1 partials read after one is written
        k_saved = (1 - 1 / s) * 2 * 128 * 128 * 8192 / (m.sm_flops * 0.7)
        assert sliced.seconds == pytest.approx(one_tile.seconds - k_saved + fixup)
        # Added by a second kernel instead: its launch, no L2 read on the SM's path (the
        # partial sums' DRAM round trip hides under this compute-bound tile's time).
        reduced = cost.predict(128, 128, 8192, cost.Tile(128, 128, 64, 0.7, splits=s), m)
        assert reduced.seconds == pytest.approx(sliced.seconds - fixup + m.launch_s)
    # A ring too short for its tile's loads bounds it by what it keeps in flight.
    deep = cost.predict(64, 8192, 4096, cost.Tile(64, 64, 64, 0.45, ring_bytes=12 * 16384), m)
    shallow = cost.predict(64, 8192, 4096, cost.Tile(64, 64, 64, 0.45, ring_bytes=2 * 16384), m)
    assert shallow.seconds > deep.seconds and "L2 loads-bound" in shallow.reason


def test_best_keeps_the_incumbent_within_the_margin():
    a, b = cost.Estimate(10e-6, "a"), cost.Estimate(9e-6, "b")
    assert cost.best([a, b]) is b
    assert cost.best([a, b], incumbent=a) is a  # 10% faster: within the 15% margin
    c = cost.Estimate(8e-6, "c")
    assert cost.best([a, b, c], incumbent=a) is c
    assert cost.copy_time(10**9, cost.Machine(132)) == pytest.approx(2e9 / 3.6e12 + 4e-6)


def _wg(bm, bn, stages=4, split=1):
    return {"BM": bm, "BN": bn, "STAGES": stages, "CLUSTER": 1, "SPLITK": split}


# Recorded measurements (benchmarks/NOTES.md) the model must rank in the same order, fastest first.
# (Run 88c also timed 128 x 128 split 4, last in both, with the reduction kernel that split-K
# had then; the split is added up in the kernel now, which that run did not measure.)
RANKINGS = [
    # run 88c, GPU time on an H100: o.fwd at 128 tokens 22.7 / 26.1 us
    ((128, 4096, 4096, 1), [_wg(64, 64, 12), _wg(64, 128, 8)]),
    # run 88c: qkv.fwd at 128 tokens 30.8 / 35.5 us
    ((128, 6144, 4096, 1), [_wg(64, 128, 8), _wg(64, 64, 12)]),
    # wgmma_auto_params' measurements: 1024^3 64x128 82% of cuBLAS, 128x256 48%; 2048^3 128x256 81%, 128x128 71%
    ((1024, 1024, 1024, 1), [_wg(64, 128), _wg(128, 256)]),
    ((2048, 2048, 2048, 1), [_wg(128, 256), _wg(128, 128)]),
]


@pytest.mark.parametrize("shape, fastest_first", RANKINGS, ids=lambda x: "x".join(map(str, x)) if len(x) == 4 else "")
def test_wgmma_estimates_rank_as_measured(shape, fastest_first):
    M, N, K, batch = shape
    times = [wgmma.wgmma_estimate(M, N, K, p, 132, batch).seconds for p in fastest_first]
    assert times == sorted(times), times


def test_mma_pipelined_estimates_rank_as_measured():
    """Run M2 (FP16, H100): 2048^3 410 TFLOPS on 128 x 256, 255 on 64 x 64; 1024^3 91 and 152."""
    for n, large_first in ((2048, True), (1024, False)):
        large, small = mma_pipelined.sized_estimates(n, n, n, 132)
        assert (large.seconds < small.seconds) == large_first


# -- the products, as PyTorch hands them over ---------------------------------------------------


def test_attention_p_at_v_of_odd_size_stages_for_wgmma():
    """P @ V, (B*H, 197, 197) @ (B*H, 197, 64): P's rows (394 bytes) are off TMA's 16-byte grid; a
    copy of P to the grid, then wgmma, beats mma_pipelined reading P with 2-byte copies (H200,
    2026-11-29: 60 against 93 us); V is read in place.  The backward's P^T @ dO the same."""
    p = _plan(_stored((BH, S, S)), _stored((BH, S, D)), "bfloat16")
    assert p.spec.name == "wgmma" and p.problem.stage, p.describe()
    assert p.reason.startswith("cost model: ") and "than mma_pipelined" not in p.reason
    p_t = _plan(_stored((BH, S, S)).transpose(0, 2, 1), _stored((BH, S, D)), "bfloat16")  # dV = P^T @ dO
    assert p_t.spec.name == "wgmma" and p_t.problem.stage and p_t.problem.op_a == "T"
    # Off Hopper the fallback's tiles are sized by the model: 64 x 64, 77% of the tile area useful.
    p = gemmlab.plan(
        "auto",
        S,
        D,
        S,
        batch=BH,
        aligned16=False,
        dtype="bfloat16",
        out_dtype="bfloat16",
        arch="sm_80",
        tma_aligned=False,
    )
    assert p.spec.name == "mma_pipelined" and p.params == mma_pipelined.SPEC.resolve(SMALL), p.describe()
    assert p.reason.startswith("cost model over the tile-count rule: ") and "77% of the tile area" in p.reason


def test_attention_q_at_k_transposed_keeps_wgmma_128x128():
    """Q @ K^T reads both operands on the grid (rows of 64 elements): wgmma, 128 x 128 by the
    attention rule (run 88e), which the model keeps (every 64-multiple tile covers 197 as 256)."""
    p = _plan(_stored((BH, S, D)), _stored((BH, S, D)).transpose(0, 2, 1), "bfloat16")
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"], p.params["SPLITK"]) == (128, 128, 1)
    assert p.reason.startswith("wgmma's tile rules, kept by the cost model")


def test_gqa_projection_takes_128x128_in_one_round():
    """x @ W.t(), 2048 x 1024 x 3584: 64 tiles of 128 x 256 leave half the SMs idle; the rule took
    64 x 128 (256 tiles, two rounds); 128 x 128 is one round of 128."""
    p = _plan(_stored((2048, 3584)), _stored((1024, 3584)).T, "bfloat16")
    assert p.spec.name == "wgmma" and p.params == registry.get("wgmma").resolve(_wg(128, 128, 5)), p.describe()
    assert p.reason.startswith("cost model over wgmma's tile rules") and "0.97 waves" in p.reason
    assert wgmma.wgmma_rule_params(2048, 1024, 132, 1, 3584) == _wg(64, 128, 8)  # wgmma_ring


def test_small_m_with_a_short_k_takes_the_deep_ring():
    """77 x 3072 x 768 (CLIP's text MLP at 77 tokens): 24 tiles of 128 x 128 and K too short to
    split; the deep-ring 64 x 64 tile gives 96 SMs a block."""
    p = _plan(_stored((77, 768)), _stored((3072, 768)).T, "bfloat16")
    assert p.spec.name == "wgmma" and p.params == registry.get("wgmma").resolve(_wg(64, 64, 12)), p.describe()
    assert "cost model" in p.reason


@pytest.mark.parametrize(
    "M, N, K, expect",
    [
        (16, 8192, 8192, ("wgmma", {"BM": 64, "BN": 64, "STAGES": 12})),  # the narrow rule's, kept
        (4, 14336, 4096, ("gemv_mma", {"MT": 8})),  # gemv_mma takes M <= 8 (16-bit x @ W.t())
        (16, 1024, 4096, ("gemv_mma", {"MT": 16})),  # ... and up to 16 over a W of at most 16 MiB
    ],
)
def test_small_m_keeps_its_rule(M, N, K, expect):
    p = _plan(_stored((M, K)), _stored((N, K)).T, "bfloat16")
    assert p.spec.name == expect[0] and {k: p.params[k] for k in expect[1]} == expect[1], p.describe()


def test_odd_vocabulary_input_gradient_stages_its_operand_for_wgmma():
    """dY @ W with K = 50257: TMA cannot read dY's rows (100514 bytes) in place.  On the operands
    as they are, mma_pipelined would take 64 x 64 tiles (24 tiles of 128 x 256 for 132 SMs) and
    cannot split K; the model prefers one copy of dY to the 16-byte grid, then wgmma split over K
    (128 x 192 tiles split 4 ways: 128 work items, against 120 of 128 x 256 split 5)."""
    p = _plan(_stored((1024, 50257)), _stored((50257, 768)), "bfloat16")
    assert p.spec.name == "wgmma" and p.problem.stage and not p.problem.tma_aligned, p.describe()
    assert (p.params["BM"], p.params["BN"], p.params["SPLITK"]) == (128, 192, 4)
    assert p.reason.startswith("cost model: ") and "a copy of 98.2 MiB" in p.reason and not p.fallback_reason
    assert p.describe().endswith("[operands off the 16-byte grid copied onto it first]")
    # Only dY is copied: W's rows (768 elements) are on the grid.
    assert "98.2 MiB" in wgmma.wgmma_staging_choice(1024, 768, 50257, 132, 1, "bfloat16", 1024 * 50257 * 2)[1]


def test_odd_vocabulary_weight_gradient_stages_and_a_small_product_does_not():
    """dY.t() @ x (50257 x 768 x 1024): staged, 245 us against mma_pipelined's 836 on the operands as
    they are (H200, 2026-11-29); a small product with a short K (361 x 445 x 57, 0.1 MiB copied)
    costs less on the fallback than a copy and a second launch (24 against 31 us): no copy."""
    p = _plan(_stored((1024, 50257)).T, _stored((1024, 768)), "bfloat16")
    assert p.spec.name == "wgmma" and p.problem.stage, p.describe()
    p = _plan(_stored((361, 57)), _stored((57, 445)), "bfloat16")
    assert p.spec.name == "mma_pipelined" and "staging for wgmma would take" in p.fallback_reason, p.describe()


def test_staging_is_for_auto_and_16_bit_only():
    named = gemmlab.plan(
        "wgmma", 1024, 768, 50257, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", tma_aligned=False
    )
    assert named.spec.name == "mma_pipelined" and not named.problem.stage  # a named wgmma falls back
    tf32 = gemmlab.plan("auto", 1024, 768, 50257, dtype="tf32", out_dtype="float32", arch="sm_90a", tma_aligned=False)
    assert not tf32.problem.stage  # TF32 packs in its own argument builder (tf32_pack)
    auto = gemmlab.plan(
        "auto", 1024, 768, 50257, dtype="float16", out_dtype="float16", arch="sm_90a", tma_aligned=False
    )
    assert auto.spec.name == "wgmma" and auto.problem.stage


# -- what the model changes, and what it keeps --------------------------------------------------------


def _old_mma_rule(M, N, batch):
    return {} if 2 * -(-M // 128) * -(-N // 256) * batch >= 132 else SMALL


def test_models_suite_plans_are_unchanged():
    """Every product of the models suite (bf16 and fp16 on an H200-sized GPU) keeps the tiles the
    measured rules gave it: the model moves nothing it was tuned on."""
    for case in models.select():
        for dtype in ("bfloat16", "float16"):
            new, why = wgmma.wgmma_auto_choice(case.M, case.N, 132, case.batch, case.K, dtype)
            assert new == wgmma.wgmma_rule_params(case.M, case.N, 132, case.batch, case.K, dtype), (case.label, why)
        assert mma_pipelined.sized_params(case.M, case.N, case.K, 132, case.batch) == _old_mma_rule(
            case.M, case.N, case.batch
        ), case.label


GRID = [
    (m, n, k, b)
    for m in (1, 5, 17, 77, 128, 197, 1000, 2048, 4096)
    for n in (1, 64, 197, 1024, 3072, 8192)
    for k in (1, 64, 197, 768, 4096, 50257)
    for b in (1, 12, 384)
]


def test_every_choice_is_a_legal_configuration_that_fits():
    """Over a grid of sizes and batches: each configuration chosen resolves (legal values and
    rules, the type's included), fits a Hopper block's shared memory, and the model moves wgmma
    off the rules only where 128 x 256 tiles leave half of the SMs idle or for a batch, or else
    from 128 x 256 to 128 x 192 (wgmma_wave_choice), never below 5 rows."""
    wg, mp = registry.get("wgmma"), registry.get("mma_pipelined")
    moved, waves = [], []
    for M, N, K, b in GRID:
        for dtype in ("bfloat16", "float16", "tf32"):
            p, _ = wgmma.wgmma_auto_choice(M, N, 132, b, K, dtype)
            wg.resolve(p, dtype)
            assert wgmma.wgmma_smem(p) <= wgmma.WGMMA_SMEM_LIMIT
            rule = wgmma.wgmma_rule_params(M, N, 132, b, K, dtype)
            if p != rule:
                assert dtype != "tf32" and M >= wgmma.WGMMA_NARROW_MIN_M
                if b > 1 or 2 * -(-M // 128) * -(-N // 256) < 132:
                    moved.append((M, N, K, b))
                else:
                    assert (rule["BM"], rule["BN"], rule["SPLITK"]) == (128, 256, 1) and p == wgmma.WGMMA_WAVE_TILE
                    waves.append((M, N, K))
        mp.resolve(mma_pipelined.sized_params(M, N, K, 132, b))
    assert moved and waves  # the model does move some (the kinds of product; N = 3072 on 2048 rows)


def test_auto_plan_carries_the_reason_of_the_tile_choice():
    p = gemmlab.plan(
        "auto",
        197,
        64,
        197,
        batch=384,
        aligned16=False,
        dtype="bfloat16",
        out_dtype="bfloat16",
        arch="sm_90a",
        tma_aligned=False,
    )
    assert p.spec.name == "wgmma" and p.problem.stage and "cost model" in p.reason
    p = gemmlab.plan("auto", 2048, 1024, 3584, op_b="T", dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a")
    assert p.params["BM"] == 128 and p.params["BN"] == 128 and "cost model" in p.reason
    # Off Hopper the same tile choice sizes mma_pipelined.
    p = gemmlab.plan("auto", 197, 64, 197, batch=384, dtype="float16", out_dtype="float16", arch="sm_80")
    assert p.spec.name == "mma_pipelined" and p.params["BM"] == 64


# -- end to end on the emulated GPU ----------------------------------------------------------------------


def test_batched_odd_product_end_to_end_on_the_emulated_gpu(monkeypatch):
    """P @ V of ViT-B/16's attention, (384, 197, 197) @ (384, 197, 64): P's rows are off the
    16-byte grid, so pack16 copies every matrix of P to the grid in one launch (gridDim.z the
    batch), then wgmma reads the copies and V through 3-D tensor maps in one launch (the emulator
    checks their alignment and every matrix's addresses); every matrix right."""
    emu = emulated_gpu.install(monkeypatch)
    rng = np.random.default_rng(0)
    pm = emu.keep(rng.standard_normal((BH, S, S)).astype(np.float16))
    v = emu.keep(rng.standard_normal((BH, S, D)).astype(np.float16))
    out = gemmlab.matmul(pm, v)
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and p.problem.stage, p.describe()
    ref = pm.astype(np.float64) @ v.astype(np.float64)
    assert np.abs(out - ref).max() <= 2e-2 * np.abs(ref).max()
    kernels = [k if isinstance(k, str) else k.spec.name for k, _ in emu.launches]
    assert kernels == ["pack16", "wgmma"], kernels
    assert emu.launches[0][1][2] == BH  # one copy launch over the batch


@pytest.mark.parametrize(
    "shape, ops, batch",
    [
        ((128, 384, 20001), "NN", 1),  # dY @ W, K odd: A's rows off the grid; split 16 over K
        ((257, 384, 20000), "TN", 1),  # dY.t() @ x with an odd row: A^T's rows off the grid
        ((100, 200, 20001), "NT", 2),  # x @ W.t(), K odd: both operands, a batch with odd strides
        ((64, 256, 30001), "NN", 2),  # a batch sharing B (stride 0): A copied per matrix, B once
    ],
)
def test_staging_copy_end_to_end_on_the_emulated_gpu(monkeypatch, shape, ops, batch):
    """The staging copy as launched: one pack16 launch copies each operand TMA cannot read (every
    matrix of a batch; gridDim.y the operands) into a workspace with rows padded to 16 bytes, then
    wgmma reads it through tensor maps (the emulator checks their alignment), split over K; the
    result right."""
    emu = emulated_gpu.install(monkeypatch)
    M, N, K = shape
    rng = np.random.default_rng(M + K)
    lead = (batch,) if batch > 1 else ()
    a = emu.keep(rng.standard_normal(lead + ((M, K) if ops[0] == "N" else (K, M))).astype(np.float16))
    b_lead = () if shape == (64, 256, 30001) else lead
    b = emu.keep(rng.standard_normal(b_lead + ((K, N) if ops[1] == "N" else (N, K))).astype(np.float16))
    a_op = a if ops[0] == "N" else a.swapaxes(-1, -2)
    b_op = b if ops[1] == "N" else b.swapaxes(-1, -2)
    out = gemmlab.matmul(a_op, b_op)
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and p.problem.stage and p.params["SPLITK"] > 1, p.describe()
    packs = [grid for kernel, grid in emu.launches if kernel == "pack16"]
    a_off = ops[0] == "N"  # K odd: A's stored rows are K long (or M = 257 long in TN)
    b_off = ops[1] == "T"  # x @ W.t(): W stored N x K, rows K long
    assert len(packs) == 1, packs
    assert packs[0][1] == a_off + b_off or (ops == "TN" and packs[0][1] == 1), packs
    assert packs[0][2] == batch if a_off else True
    ref = a_op.astype(np.float64) @ b_op.astype(np.float64)
    assert np.abs(out.astype(np.float64) - ref).max() <= 1e-2 * np.abs(ref).max()


@pytest.mark.parametrize("view", ["reversed batch", "odd K"])
def test_tf32_packs_what_tma_cannot_read_on_the_emulated_gpu(monkeypatch, view):
    """precision="tf32" on wgmma: an operand TMA cannot read in place -- a batch read backwards
    (a[::-1]: TMA steps forward only) or rows off the 16-byte grid -- is copied by tf32_pack,
    TF32-rounded, into a workspace the tensor maps read; the result right."""
    emu = emulated_gpu.install(monkeypatch)
    rng = np.random.default_rng(5)
    if view == "reversed batch":
        a = emu.keep(rng.standard_normal((3, 40, 24)).astype(np.float32))[::-1]
        b = emu.keep(rng.standard_normal((3, 24, 16)).astype(np.float32))
    else:
        a = emu.keep(rng.standard_normal((40, 23)).astype(np.float32))
        b = emu.keep(rng.standard_normal((23, 16)).astype(np.float32))
    out = gemmlab.matmul(a, b, precision="tf32", kernel="wgmma")
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma", p.describe()
    assert [k for k, _ in emu.launches].count("tf32_pack") >= 1, emu.launches
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(out - ref).max() <= 2e-3 * np.abs(ref).max()


# -- on a GPU: every configuration the model picks, against FP64 -----------------------------------------

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
hopper = pytest.mark.skipif(
    not rt_device.gpu_available() or rt_device.gpu_info(0).arch != "sm_90a", reason="needs a Hopper GPU (sm_90a)"
)
BOUND = {"float16": 2e-3, "bfloat16": 1.2e-2}


def _check(a, b, expect_kernel, expect_params, dtype, caplog=None):
    """matmul(a, b) into a NaN-poisoned out against FP64, and the configuration that ran."""
    shape = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    out = torch.full(shape, float("nan"), device="cuda", dtype=a.dtype)
    gemmlab.matmul(a, b, out=out)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == expect_kernel and all(p.params[k] == v for k, v in expect_params.items()), p.describe()
    ref = a.double() @ b.double()
    assert not torch.isnan(out).any()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < BOUND[dtype], err
    return p


def _rand(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype)) * 0.5 + 0.25


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize(
    "bh, s, d, staged",
    [(384, 197, 64, True), (96, 77, 80, True), (200, 131, 96, True), (64, 257, 64, True), (12, 133, 96, False)],
)
def test_gpu_attention_of_odd_size(dtype, bh, s, d, staged):
    """The attention products at odd S and head dimensions 64/80/96, forward and backward views:
    P @ V and dS @ K (P, dS rows off the 16-byte grid: wgmma on a staging copy of P, or for a
    batch of 12 mma_pipelined's 64 x 64 on P as it is), P^T @ dO (a transposed view), Q @ K^T (wgmma)."""
    torch.manual_seed(s + d)
    q, k, v = (_rand(bh, s, d, dtype=dtype) for _ in range(3))
    pm = torch.softmax(_rand(bh, s, s, dtype=dtype).float(), -1).to(q.dtype)
    kernel, tiles = ("wgmma", {}) if staged else ("mma_pipelined", {"BM": 64, "BN": 64})
    assert _check(pm, v, kernel, tiles, dtype).problem.stage == staged  # P @ V
    assert _check(pm.transpose(-1, -2), v, kernel, tiles, dtype).problem.stage == staged  # P^T @ dO
    _check(q, k.transpose(-1, -2), "wgmma", {}, dtype)  # Q @ K^T (rows of d: on the grid)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("M, N, K", [(2048, 1024, 3584), (2000, 1000, 3000), (1537, 1031, 2056)])
def test_gpu_few_tiles_on_128x128(dtype, M, N, K):
    """Few output tiles: 128 x 128 in one round where the model takes it, odd edges included."""
    torch.manual_seed(M)
    x, w = _rand(M, K, dtype=dtype), _rand(N, K, dtype=dtype)
    p, _ = wgmma.wgmma_auto_choice(M, N, rt_device.gpu_info(0).sm_count, 1, K, dtype)
    _check(x, w.t(), "wgmma", {k: p[k] for k in ("BM", "BN", "STAGES", "SPLITK")}, dtype)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("M", [5, 16, 33, 77, 100, 127, 128, 129, 200, 256])
def test_gpu_small_m(dtype, M):
    """Small M on the tiles the model picks (x @ W.t() and dY @ W, N and K off every tile; x @ W.t()
    of up to 16 rows over this small W runs on gemv_mma, tests/test_gemv_mma.py)."""
    torch.manual_seed(M)
    N, K = 3000, 776
    x, w = _rand(M, K, dtype=dtype), _rand(N, K, dtype=dtype)
    sm = rt_device.gpu_info(0).sm_count
    p, _ = wgmma.wgmma_auto_choice(M, N, sm, 1, K, dtype)
    if M <= 16:
        _check(x, w.t(), "gemv_mma", {"MT": 8 if M <= 8 else 16}, dtype)
    else:
        _check(x, w.t(), "wgmma", {k: p[k] for k in ("BM", "BN", "STAGES", "SPLITK")}, dtype)
    dy, w2 = _rand(M, N, dtype=dtype), _rand(N, K, dtype=dtype)
    p, _ = wgmma.wgmma_auto_choice(M, K, sm, 1, N, dtype)
    _check(dy, w2, "wgmma", {k: p[k] for k in ("BM", "BN", "STAGES", "SPLITK")}, dtype)


STAGED = [
    ((128, 384, 20001), "NN", 1),
    ((257, 384, 20000), "TN", 1),
    ((100, 200, 20001), "NT", 2),
    ((65, 130, 30001), "TT", 3),
    ((1024, 768, 50257), "NN", 1),
]


def _operands(shape, ops, batch, dtype, offset=0):
    """op(a), op(b) of fresh random values stored as ``ops`` says (N: row-major, T: a transposed
    view), ``offset`` elements into their buffers (a base off the 16-byte grid)."""
    M, N, K = shape
    lead = (batch,) if batch > 1 else ()

    def make(rows, cols):
        n = batch * rows * cols
        return _rand(n + offset, dtype=dtype)[offset:].view(lead + (rows, cols))

    a = make(M, K) if ops[0] == "N" else make(K, M).transpose(-1, -2)
    b = make(K, N) if ops[1] == "N" else make(N, K).transpose(-1, -2)
    return a, b


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize(
    "shape, ops, batch", STAGED, ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x)
)
def test_gpu_staging_copy(dtype, shape, ops, batch):
    """Operands TMA cannot read (rows of an odd length) copied to the 16-byte grid, then wgmma split
    over K, in every layout and in batches, against FP64 into a NaN-poisoned out."""
    torch.manual_seed(shape[2])
    a, b = _operands(shape, ops, batch, dtype)
    _check(a, b, "wgmma", {}, dtype)
    assert gemmlab.last_plan().problem.stage, gemmlab.last_plan().describe()


@pytest.mark.gpu
@hopper
def test_gpu_staging_copy_of_an_offset_base_with_alpha_and_beta():
    """A base 2 bytes off the grid (rows of 20008 elements are on it), alpha and beta, into an out
    with padded rows: C = alpha * A B + beta * C."""
    torch.manual_seed(7)
    M, N, K = 128, 384, 20008
    a, b = _operands((M, N, K), "NN", 1, "bfloat16", offset=1)
    base = _rand(M, N + 8, dtype="bfloat16")
    out = base[:, :N]
    before, padding = out.double().clone(), base[:, N:].clone()
    gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and p.problem.stage, p.describe()
    ref = 0.5 * (a.double() @ b.double()) + 2.0 * before
    assert ((out.double() - ref).norm() / ref.norm()).item() < BOUND["bfloat16"]
    assert torch.equal(base[:, N:], padding)  # the row padding of out untouched


@pytest.mark.gpu
@hopper
def test_gpu_staging_copy_in_a_cuda_graph():
    """The staged call captured in a CUDA graph (its workspace and copy stream-ordered, its tensor
    maps encoded by the driver under capture) and replayed on new values of the same arrays."""
    torch.manual_seed(11)
    a, b = _operands((128, 384, 20001), "NN", 1, "float16")
    out = torch.empty(128, 384, device="cuda", dtype=torch.float16)
    gemmlab.matmul(a, b, out=out)  # compile and prepare outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        gemmlab.matmul(a, b, out=out)
    a.copy_(torch.randn_like(a))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert gemmlab.last_plan().problem.stage
    ref = a.double() @ b.double()
    assert not torch.isnan(out).any()
    assert ((out.double() - ref).norm() / ref.norm()).item() < BOUND["float16"]


@pytest.mark.parametrize("shape, ops, batch", STAGED + [((128, 384, 20008), "NN", 1)])
def test_the_gpu_staging_shapes_are_staged(shape, ops, batch):
    """The shapes test_gpu_staging_copy runs are ones the model stages (planned on the emulated H200;
    the last is the offset base of test_gpu_staging_copy_of_an_offset_base_with_alpha_and_beta)."""
    M, N, K = shape
    lead = (batch,) if batch > 1 else ()
    offset = 1 if K == 20008 else 0
    a = _stored(lead + ((M, K) if ops[0] == "N" else (K, M)), offset=offset)
    b = _stored(lead + ((K, N) if ops[1] == "N" else (N, K)))
    p = _plan(a if ops[0] == "N" else a.swapaxes(-1, -2), b if ops[1] == "N" else b.swapaxes(-1, -2), "bfloat16")
    assert p.spec.name == "wgmma" and p.problem.stage, p.describe()


def test_pack16_compiles_for_hopper_without_spills():
    from gemmlab.runtime.compile import compile_module, parse_ptxas_log

    module = compile_module(TF32_PACK_SOURCE, [PACK16_KERNEL], "sm_90a")
    found = parse_ptxas_log(module.log)[module.symbols[PACK16_KERNEL]]
    assert found.spill_store_bytes == 0 and found.spill_load_bytes == 0
