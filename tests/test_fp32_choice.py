"""FP32's tile and split from rung 8's cost model (kernels/simt/pipelined_cost.py,
pipelined.auto_choice, choose.NEAR_TUNED), without a GPU.

The model's ranking against recorded measurements (tune-run32.json, H200), its fit to
the shapes suite's records, and the choice kernel="auto" makes by kind of product, as
PyTorch hands the operands over (views, transposes), on an emulated H200
(tests/emulated_gpu.py's FakeGPU: sm_90a, 132 SMs, an H200, which ships no table).
"""

import dataclasses
import json
import math
import statistics
from pathlib import Path

import pytest

import gemmlab
from gemmlab.tools.bench.models import planning_view
from gemmlab.core import choose, planner
from gemmlab.tools.bench import shapes
from gemmlab.kernels import registry
from gemmlab.kernels.simt import pipelined
from gemmlab.kernels.simt import pipelined_cost as cost

import emulated_gpu

GPU = emulated_gpu.FakeGPU()
H200 = choose.GPU("sm_90a", 132, "nvidia-h200", "NVIDIA H200")
H100 = choose.GPU("sm_90a", 132, "nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3")  # the shipped table
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "nvidia-h200"


def _stored(shape, dtype="float32", offset=0):
    return planning_view(shape, dtype, offset)


def _plan(a, b, precision=None):
    """What matmul(a, b, precision=precision) would run on the emulated H200."""
    call = planner.validate(a, b, None, 1.0, 0.0, False, False, precision, None)
    kv = planner.kernel_view(
        call, planner.result_side(call), {"A": call.A.operand.ptr, "B": call.B.operand.ptr, "C": 0}
    )
    return planner.plan_call(call, kv, planner.batching(kv), GPU, "auto", {}, precision)


def _tile(p) -> tuple[int, int, int]:
    return p.params["BM"], p.params["BN"], p.params["SPLITK"]


# -- the model -----------------------------------------------------------------------------------


def _est(M, N, K, bm, bn, splits=1, **shape):
    bk = 8 if bm * bn > 128 * 128 else 16  # the candidates' K-steps (pipelined.SIZED_TILES)
    return cost.estimate(M, N, K, bm, bn, bk, splits, 132, cost.Shape(**shape)).seconds


def test_estimates_grow_with_waves_waste_splits_and_alignment():
    one_wave = _est(128 * 12, 256 * 11, 4096, 128, 256)  # 132 tiles
    assert _est(128 * 12 + 1, 256 * 11, 4096, 128, 256) > 1.9 * one_wave  # 143: a second round
    assert _est(100, 100, 4096, 128, 256) == pytest.approx(_est(128, 256, 4096, 128, 256))  # padded
    # A split shortens each item but adds the partial sums and the reduction's launch.
    assert _est(128, 256, 8192, 128, 256, 4) < _est(128, 256, 8192, 128, 256)
    assert _est(4096, 4096, 64, 128, 256, 2) > _est(4096, 4096, 64, 128, 256)
    # A and B off the 16-byte grid: slower math where an operand is copied as stored (NN), little
    # slower where both are transposed on the way anyway (NT).
    assert _est(4096, 4096, 4096, 128, 256, aligned16=False) > 1.8 * _est(4096, 4096, 4096, 128, 256)
    nt, nt_off = (_est(4096, 4096, 4096, 128, 256, b_transposed=True, aligned16=a) for a in (True, False))
    assert nt < nt_off < 1.15 * nt
    # C off it: an epilogue without 16-byte stores, slower C writes.
    assert _est(4096, 4096, 1, 128, 256, c_aligned=False) > 3 * _est(4096, 4096, 1, 128, 256)
    # A column-major B is transposed into shared memory.
    assert _est(4096, 4096, 4096, 128, 256, b_transposed=True) > _est(4096, 4096, 4096, 128, 256)


def test_a_small_block_alone_on_an_sm_runs_below_its_share():
    lone = cost.estimate(64, 64, 4096, 64, 64, 16, 1, 132)
    two = cost.estimate(64, 128, 4096, 64, 64, 16, 1, 132)  # two items, one each on two SMs
    assert lone.seconds == pytest.approx(two.seconds)
    assert "0.00 waves of 4 blocks an SM" in lone.reason and "compute-bound" in lone.reason


# tune-run32.json (H200, kernel-only, NN, the tuner's fastest variant of each tile), ms: the model
# must rank these as measured, fastest first.  Its 128 x 128 tile was 8 deep, without rows through
# registers: not the candidate now (pipelined.TILE_128), whose rankings are the next test's.
RANKINGS = [
    ((512, 512, 512), [(64, 128, 8), (64, 64, 4), (128, 256, 12)]),  # 16.8, 17.8, 31.2 us
    ((1024, 1024, 1024), [(128, 256, 4), (64, 128, 2), (128, 64, 1)]),  # 62.7, 67.9, 77.1
    ((256, 4096, 4096), [(128, 256, 4), (64, 128, 3), (64, 64, 1)]),  # 207, 230, 274
    ((8192, 64, 8192), [(128, 64, 4), (64, 64, 3), (64, 128, 2), (128, 64, 1)]),  # 256, 281, 446, 578
    ((64, 8192, 8192), [(64, 128, 4), (64, 64, 2), (128, 256, 8)]),  # 229, 276, 391
    ((4096, 4096, 4096), [(128, 256, 1), (64, 128, 1), (64, 64, 1)]),  # 3.10, 3.38, 4.00 ms
]


@pytest.mark.parametrize("shape, fastest_first", RANKINGS, ids=lambda x: "x".join(map(str, x)) if len(x) == 3 else "")
def test_estimates_rank_as_measured(shape, fastest_first):
    times = [_est(*shape, bm, bn, s) for bm, bn, s in fastest_first]
    assert times == sorted(times), times


def test_the_layout_shares_rank_128_x_256_against_128_x_128_as_measured():
    """ab-fp32-tiles-2026-12-01.json (H200, kernel time, 208 products of the shapes suite, and 162
    sizes of it laid out as a.T @ b.T): the 128 x 256 tile at its layout's warp tiling
    (pipelined.LAYOUT_TILING) against TILE_128, 16 deep.  Where one was faster by more than 5%, the
    model (LAYOUT_SHARE) ranks them so in all but one of 118 products (755 x 4009 x 95 NN, K of 6
    steps; the model before them: 26 wrong), and all but one of 150 in TT."""
    record = json.loads((RESULTS / "ab-fp32-tiles-2026-12-01.json").read_text())
    rows = record["rows"] + record["rows_TT"]
    tiling = {"NN": "t4x8s2r1", "NT": "t2x4s2r1", "TN": "t4x8s4r0", "TT": "t2x4s2r1"}
    assert {k: v for k, v in pipelined.layout_defaults("N", "T").items() if k in ("WNITER", "TM", "STAGES")} == {
        "WNITER": 2,
        "TM": 4,
        "STAGES": 2,
    }
    assert (pipelined.TILE_128["BK"], pipelined.TILE_128["STAGES"]) == (16, 4)
    clear, wrong = 0, []
    for r in rows:
        wide, square = r["cfg"][tiling[r["ops"]]], r["cfg"]["q128s4"]
        if abs(math.log(wide / square)) < 0.05:
            continue
        clear += 1
        shape = cost.Shape(r["batch"], True, r["ops"][1] == "T", True, r["ops"][0] == "T")
        model = [
            cost.estimate(r["M"], r["N"], r["K"], 128, bn, bk, 1, 132, shape).seconds
            for bn, bk in ((256, 8), (128, 16))
        ]
        if (model[0] < model[1]) != (wide < square):
            wrong.append((r["name"], r["ops"], round(wide / square, 2)))
    assert clear >= 250 and len(wrong) <= 2, (clear, wrong)


def _views(product):
    """The shapes suite's product as PyTorch hands it over, as NumPy views."""
    first, second = (_stored(shape) for shape in product.stored)
    if product.product in ("fwd", "qk"):  # x @ W.t(), Q @ K.transpose(-1, -2)
        return first, second.swapaxes(-1, -2)
    if product.product == "wgrad":  # dY.t() @ x
        return first.swapaxes(-1, -2), second
    return first, second


def test_the_fit_holds_over_the_shapes_suites_records():
    """Every timed rung-8 record of the shapes suite's float32 and fp32_tc runs on an H200
    (public calls): the model's time of the plan that ran plus the host's, a constant of
    the fit (13.5 us beyond the model's launch), against the measured time."""
    products = {(p.name, p.batch, p.M, p.N, p.K, p.ops): p for p in shapes.select()}
    errors = []
    for name, dtype in (("shapes-2026-11-29.json", "fp32"), ("shapes-fp32_tc-2026-11-29.json", "fp32_tc")):
        for r in json.loads((RESULTS / name).read_text())["records"]:
            if r["dtype"] != dtype or r["rung"] != "pipelined" or not r.get("ms"):
                continue
            a, b = _views(products[(r["case"], r["batch"], r["M"], r["N"], r["K"], r["ops"])])
            call = planner.validate(a, b, None, 1.0, 0.0, False, False, None, None)
            kv = planner.kernel_view(
                call, planner.result_side(call), {"A": call.A.operand.ptr, "B": call.B.operand.ptr, "C": 0}
            )
            p = r["params"]
            e = (
                cost.estimate(
                    kv.M,
                    kv.N,
                    r["K"],
                    p["BM"],
                    p["BN"],
                    p["BK"],
                    p["SPLITK"],
                    132,
                    cost.Shape(r["batch"], kv.aligned16(), kv.B.layout == "T"),
                ).seconds
                + 13.5e-6
            )
            errors.append(math.log(e / (r["ms"] * 1e-3)))
    assert len(errors) > 500
    assert abs(statistics.mean(errors)) < 0.05
    assert statistics.median(abs(e) for e in errors) < 0.08


# -- the choice, by kind of product -----------------------------------------------------------------


def test_few_tiles_and_a_long_k_take_a_smaller_tile_and_a_larger_split():
    """BERT's MLM decoder's input gradient, dY @ W (128 x 768 x 30522): dY's rows (30522
    floats) are off the 16-byte grid.  The table's nearest shape (256x4096x4096) gave
    128 x 256 tiles split 8: 24 blocks on 132 SMs, 17.6% of SGEMM on an H200.  Now dY is
    copied to the grid first (14.9 MiB), then read 16 bytes at a time on small tiles."""
    p = _plan(_stored((128, 30522)), _stored((30522, 768)))
    bm, bn, splits = _tile(p)
    assert p.spec.name == "pipelined" and not p.problem.aligned16 and p.problem.stage
    assert bm * bn < 128 * 256 and splits > 8, p.describe()
    assert p.reason.startswith("cost model: ") and "a copy of 14.9 MiB to the 16-byte grid" in p.reason
    # Qwen's 77-row k/v projection, x @ W.t(): 2 tiles of 128 x 256 split 8 before.
    p = _plan(_stored((77, 3584)), _stored((512, 3584)).T)
    assert p.problem.op_b == "T" and _tile(p)[0] * _tile(p)[1] < 128 * 256 and _tile(p)[2] > 8


def test_splits_past_16_only_where_every_slice_keeps_1024_values_of_k():
    """A small layer's weight gradient over 10^5 positions (Swin-T's 96 x 96 projection, 4 tiles)
    takes more than 16 slices, each of at least DEEP_SPLIT_MIN_K values; BERT's 128 x 768 x 3072
    forward (slices of 96-320 values measured slower past 16) takes 16 at most; fp32_tc runs
    the same plan (its FP32 method); wgmma's rule stops at 16 on the same product in 16-bit."""
    dy, x = _stored((100352, 96)), _stored((100352, 96))
    for precision in (None, "fp32_tc"):
        p = _plan(dy.T, x, precision)
        splits = _tile(p)[2]
        assert p.spec.name == "pipelined" and 16 < splits <= 64, p.describe()
        assert 100352 // splits >= pipelined.DEEP_SPLIT_MIN_K
    assert _tile(_plan(_stored((128, 3072)), _stored((768, 3072)).T))[2] <= pipelined.SHALLOW_SPLIT_MAX
    dy16, x16 = _stored((100352, 96), "float16"), _stored((100352, 96), "float16")
    p = _plan(dy16.T, x16)
    assert p.spec.name == "wgmma" and p.params["SPLITK"] <= pipelined.SHALLOW_SPLIT_MAX, p.describe()
    assert not pipelined.auto_may_split(24, 24 * 1024 - 1) and pipelined.auto_may_split(24, 24 * 1024)
    assert pipelined.auto_may_split(16, 16)  # up to 16: the K-step floors alone decide


@pytest.mark.parametrize("M, N, K", [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096)])
def test_large_square_products_keep_128x256_unsplit(M, N, K):
    """The rule's tile, kept by the model (the H200 has no table: its rules measured faster,
    benchmarks/NOTES.md), and the H100 table's winner at its own shapes."""
    p = _plan(_stored((M, K)), _stored((K, N)))
    assert _tile(p) == (128, 256, 1) and p.reason.startswith("the tile-count rule, kept by the cost model"), p.reason
    assert p.params == registry.get("pipelined").resolve({**pipelined.layout_defaults("N", "N"), "SPLITK": 1})
    if (M, N, K) != (16384, 4096, 4096):  # the H100 table's winner there is 256 x 128
        tabled = choose.choose(choose.Product(M, N, K), H100)
        assert (tabled.params["BM"], tabled.params["BN"], tabled.params["SPLITK"]) == (128, 256, 1)
        assert tabled.reason.startswith("the tuned table's winner at this shape"), tabled.reason


def test_a_shape_near_a_tuned_one_takes_its_answer_unweighed():
    near = choose.choose(choose.Product(4096, 4096, 2048), H100)
    assert (near.params["BM"], near.params["BN"], near.params["SPLITK"]) == (128, 256, 1)
    assert near.reason == "the tuned table's nearest entry (4096x4096x4096, 1.0 doublings away)"
    far = choose.choose(choose.Product(6144, 6144, 12288), H100)  # over one doubling: weighed
    assert "cost model" in far.reason, far.reason


@pytest.mark.parametrize("batch, S, head", [(48, 1024, 64), (384, 197, 64), (768, 197, 64)])
def test_a_batch_of_p_at_v_takes_tiles_64_wide(batch, S, head):
    """Attention's P @ V, (B*H, S, S) @ (B*H, S, 64): 128 x 256 tiles (GPT-2, 30.9% of SGEMM)
    or 64 x 128 (ViT, 40-43%) computed half or more of zeros; a batch that fills the SMs
    by itself is not split."""
    p = _plan(_stored((batch, S, S)), _stored((batch, S, head)))
    assert p.params["BN"] == 64 and p.params["SPLITK"] == 1, p.describe()
    assert "cost model" in p.reason, p.reason


def test_odd_alignment_weighs_the_unaligned_variant():
    """The same shape off the 16-byte grid: the model's estimates are of the 4-byte variant,
    slower, and the choice may differ; both are legal configurations."""
    ask = choose.ask(choose.Product(139, 459, 3897), H200)
    odd = dataclasses.replace(ask, aligned16=False)
    (p_al, why_al), (p_odd, why_odd) = pipelined.auto_choice(ask), pipelined.auto_choice(odd)
    assert float(why_odd.split(": ")[1].split(" us")[0]) > float(why_al.split(": ")[1].split(" us")[0])
    for p in (p_al, p_odd):
        assert registry.get("pipelined").resolve(p) in registry.get("pipelined").configurations()
    p = _plan(_stored((139, 3897)), _stored((3897, 459)))  # random:linear10.dgrad, 29% of SGEMM
    assert not p.problem.aligned16 and _tile(p)[0] * _tile(p)[1] < 128 * 256


def test_fp32_tc_on_the_cuda_cores_takes_the_same_choice():
    """fp32_tc's products that run FP32 on the CUDA cores (predicted faster than ec_wgmma, or a
    thin side) go through the same float32 choice."""
    for a, b in ((_stored((128, 30522)), _stored((30522, 768))), (_stored((77, 3584)), _stored((512, 3584)).T)):
        tc, plain = _plan(a, b, "fp32_tc"), _plan(a, b)
        assert (tc.spec.name, tc.method, tc.params) == ("pipelined", "fp32", plain.params)
        assert tc.reason.startswith("IEEE FP32 on the CUDA cores, as accurate and predicted faster: ")
        assert tc.passed_over[0].startswith("ec_wgmma predicted slower: ")


# fp32_tc's products on an H200 (public calls, one process, benchmarks/NOTES.md 2026-12-01):
# (batch, M, N, K, layouts, rows on the 16-byte grid, the faster method, its time and the other's
# in us).  The first six are the measured rule's own mistakes.
FP32_TC_MEASURED = [
    (128, 2048, 96, 2048, "NN", True, "ec_wgmma", 2039, 3212),  # Phi-3's P @ V
    (28, 2048, 128, 2048, "NN", True, "ec_wgmma", 448, 684),  # Qwen2.5-7B's P @ V
    (32, 1243, 80, 1243, "NN", False, "ec_wgmma", 291, 586),
    (1, 681, 2795, 35, "TN", False, "fp32", 38, 70),
    (1, 3072, 768, 128, "TN", True, "fp32", 29, 40),  # BERT's up weight gradient, 128 tokens
    (1, 37, 14336, 4096, "NN", True, "fp32", 219, 324),  # Mixtral's expert at 37 tokens, input gradient
    (768, 197, 64, 197, "NN", False, "fp32", 213, 336),  # ViT-B/16's P @ V
    (768, 197, 197, 64, "NT", False, "fp32", 248, 376),  # ViT-B/16's Q @ K^T
    (1, 4096, 4096, 4096, "NN", True, "ec_wgmma", None, None),
]


@pytest.mark.parametrize("batch, M, N, K, ops, on_grid, faster, t_fast, t_slow", FP32_TC_MEASURED)
def test_fp32_tc_weighs_ec_wgmma_against_fp32_by_their_cost_models(
    batch, M, N, K, ops, on_grid, faster, t_fast, t_slow
):
    """fp32_tc with kernel="auto" on Hopper: ec_wgmma or IEEE FP32 on the CUDA cores, whichever
    the two cost models predict faster (kernels/ec/ec_wgmma_cost.py, pipelined_cost.py), the
    measured rule (ec_wgmma_pays) standing within FP32_TC_MARGIN; the reason gives both."""
    p = planner.plan(
        "auto",
        M,
        N,
        K,
        dtype="fp16_ec",
        precision="fp32_tc",
        op_a=ops[0],
        op_b=ops[1],
        batch=batch,
        aligned16=on_grid,
        tma_aligned=on_grid,
        arch="sm_90a",
        sm_count=132,
        gpu_slug="nvidia-h200",
    )
    ran = "fp32" if p.method == "fp32" else p.spec.name
    assert ran == faster, p.reason
    assert " against " in p.reason and " us (" in p.reason
    if faster == "ec_wgmma":
        assert p.reason.startswith(
            (
                "ec_wgmma predicted faster than IEEE FP32 on the CUDA cores: ",
                "ec_wgmma, the measured rule's choice, kept",
            )
        )
        assert p.params["SPLITK"] in (1, choose.ec_wgmma_auto_split(M, N, K, 132, batch))


def test_ec_wgmma_cost_model_follows_its_terms():
    """ec_wgmma_cost: the split pass grows with A and B (slower off the grid), the GEMM with the
    busiest SM's tiles; a split of K costs its fixed part but shortens each tile."""
    from gemmlab.kernels.ec import ec_wgmma_cost as ecc

    def t(M, N, K, batch=1, splits=1, on_grid=True):
        return ecc.estimate(M, N, K, batch, 128, splits, 132, on_grid).seconds

    assert t(4096, 4096, 4096) < t(4096, 4096, 4096, on_grid=False)
    assert t(128 * 12, 128 * 11, 4096) < t(128 * 12 + 1, 128 * 11, 4096)  # a second wave of tiles
    assert t(2048, 2048, 64, 8) == pytest.approx(t(2048, 2048, 64, 4) * 2, rel=0.35)
    assert t(128, 768, 50000, splits=8) < t(128, 768, 50000)  # 6 tiles: a long K split pays
    assert t(1024, 1024, 256, splits=2) > t(1024, 1024, 256)  # 64 tiles of 4 K-steps: it does not
    assert t(1, 1, 1) >= ecc.EC_FIXED_S


def test_auto_choice_keeps_the_incumbent_within_the_margin():
    ask = choose.ask(choose.Product(4096, 4096, 4096), H200)
    params, why = pipelined.auto_choice(ask, {**registry.get("pipelined").defaults(), "SPLITK": 1}, "the test's")
    assert params["SPLITK"] == 1 and why.startswith("the test's, kept by the cost model: ")
    params, why = pipelined.auto_choice(choose.ask(choose.Product(64, 64, 8192), H200))
    assert (params["BM"], params["BN"], params["SPLITK"]) == (64, 64, 16)  # one tile, 512 K-steps
    assert why.startswith("cost model over the tile-count rule: ")
    assert pipelined.auto_choice(choose.ask(choose.Product(0, 64, 64), H200))[1] == ""


def test_every_choice_is_a_legal_configuration_that_fits():
    spec = registry.get("pipelined")
    legal = spec.configurations()
    for M, N, K, batch in [
        (128, 768, 30522, 1),
        (1, 1, 1, 1),
        (3, 5, 7, 2),
        (197, 64, 197, 384),
        (100, 100, 100000, 1),
        (3072, 3072, 3072, 1),
        (96, 96, 4096, 34),
    ]:
        for aligned in (True, False):
            p = gemmlab.plan("auto", M, N, K, batch=batch, aligned16=aligned, arch="sm_90a", sm_count=132)
            if p.spec.name == "pipelined":
                assert p.params in legal
                assert spec.launch(p.params, p.problem).smem_bytes <= pipelined.PIPELINED_SMEM_LIMIT
