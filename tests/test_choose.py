"""choose(): the one choice of kernel.  Its contract is tests/data/plan_goldens.json
(tests/plan_goldens.py): every recorded decision is reproduced exactly."""

from __future__ import annotations

import dataclasses

import pytest

import plan_goldens
from gemmlab.core import tables

GOLDENS = plan_goldens.load()


@pytest.fixture(autouse=True, scope="module")
def shipped_tables_only():
    """The goldens were recorded with the shipped tuned tables (conftest's cache folder has no
    user table); a table loaded before under other settings is dropped."""
    tables.load_table.cache_clear()
    yield
    tables.load_table.cache_clear()


def test_goldens_cover_every_kind_of_decision():
    results = [r for _, r in GOLDENS["plan"]]
    names = {r["describe"].split("(")[0].split(" ")[0] for r in results if "error" not in r}
    assert {"gemv", "pipelined", "wgmma", "mma_pipelined", "wmma_warptile", "ec_wgmma", "ec_wmma"} <= names
    assert any(r.get("stage") for r in results)
    assert any("cannot take these operands" in r.get("fallback_reason", "") for r in results)
    assert any(r.get("limit_reason") for r in results)
    assert any("staging for wgmma would take" in r.get("fallback_reason", "") for r in results)
    assert any("error" in r for r in results)
    calls = [r for _, r in GOLDENS["call"]]
    assert any(r.get("method") == "fp32" for r in calls) and any(r.get("candidates") for r in calls)


def test_goldens_hold_the_generators_grid():
    """The recorded cases are the ones tests/plan_goldens.py generates (a grid changed
    without recording it again would leave cases unchecked)."""
    assert [c for c, _ in GOLDENS["plan"]] == plan_goldens.plan_cases()
    assert [c for c, _ in GOLDENS["call"]] == plan_goldens.call_cases()


@pytest.mark.parametrize("chunk", range(8))
def test_plan_goldens(chunk):
    entries = GOLDENS["plan"][chunk::8]
    wrong = [(case, want, got) for case, want in entries if (got := plan_goldens.record_plan(case)) != want]
    assert not wrong, f"{len(wrong)} of {len(entries)} differ; first: {wrong[0]}"


def test_call_goldens():
    cases = [c for c, _ in GOLDENS["call"]]
    got = plan_goldens.record_calls(cases)
    wrong = [(c, w, g) for (c, w), g in zip(GOLDENS["call"], got) if g != w]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ; first: {wrong[0]}"


# -- choose() by kind of product, on the GPUs' properties alone ----------------------------------

from gemmlab.core import planner  # noqa: E402
from gemmlab.core.choose import AUTO_RUNGS, GPU, Product, choose  # noqa: E402
from gemmlab.kernels import registry  # noqa: E402
from gemmlab.kernels.ec.ec_wgmma import EC_WGMMA_BN  # noqa: E402
from gemmlab.kernels.simt import pipelined  # noqa: E402
from gemmlab.kernels.spec import Ask  # noqa: E402

H200 = GPU("sm_90a", 132, "nvidia-h200", "NVIDIA H200")
HOPPER = GPU("sm_90a", 132, None, "an H100 without a table")
H100 = GPU("sm_90a", 132, "nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3")  # the shipped table
A100 = GPU("sm_80", 108, None, "NVIDIA A100")
RTX3090 = GPU("sm_86", 82, None, "NVIDIA GeForce RTX 3090")
T4 = GPU("sm_75", 40, None, "Tesla T4")


def bf16(M, N, K, **kw):
    return Product(M, N, K, dtype="bfloat16", out_dtype="bfloat16", **kw)


def test_every_auto_rung_has_a_hook_and_the_last_takes_everything():
    for dtype, rungs in AUTO_RUNGS.items():
        for name in rungs:
            spec = registry.get(name)
            assert spec.rules.offer is not None and dtype in spec.dtypes, (dtype, name)
        last = registry.get(rungs[-1])
        for M, N, K, batch in [(1, 1, 1, 1), (3, 5000, 7, 1), (4096, 4096, 4096, 1), (197, 64, 197, 384)]:
            for arch in (None, "sm_75", "sm_90a"):
                assert last.rules.offer(Ask(M, N, K, batch, dtype, sm_count=132, arch=arch)).takes, (dtype, M, arch)


def test_gemv_hook_takes_a_few_rows_and_says_why_not_more():
    hook = registry.get("gemv").rules.offer
    decode = hook(Ask(4, 14336, 4096, dtype="bfloat16", op_b="T"))
    assert decode.takes and decode.params["MT"] == 4
    many = hook(Ask(77, 3072, 768, dtype="bfloat16", op_b="T"))
    assert not many.takes and many.reason == "gemv takes 1..4 rows of bfloat16 with op(B) column-major, not M = 77"
    big = hook(Ask(1, 65536, 2048, dtype="bfloat16", op_b="N"))
    assert not big.takes and "over the 64 MiB it streams row-major" in big.reason
    assert not hook(Ask(1, 64, 64, dtype="tf32", op_b="T")).takes
    assert hook(Ask(16, 4096, 4096, dtype="float32", op_b="N")).takes


def test_wgmma_hook_needs_sm_90a_and_gives_its_tile_rules_reason():
    hook = registry.get("wgmma").rules.offer
    for arch in (None, "sm_80", "sm_86"):
        offer = hook(Ask(2048, 2048, 2048, dtype="bfloat16", arch=arch))
        assert not offer.takes and "sm_90a only" in offer.reason
    offer = hook(Ask(8192, 8192, 8192, dtype="bfloat16", arch="sm_90a"))
    assert offer.takes and (offer.params["BM"], offer.params["BN"]) == (128, 256)
    assert offer.reason.startswith("wgmma's tile rules, kept by the cost model against 128x192: ")
    assert hook(Ask(8192, 8192, 8192, dtype="tf32", arch="sm_90a")).reason == "wgmma's tile rules"
    # N = 768: 128 x 192 fills the last round of tiles (wgmma_wave_choice)
    wave = hook(Ask(4096, 768, 3072, dtype="bfloat16", op_b="T", arch="sm_90a"))
    assert (wave.params["BM"], wave.params["BN"]) == (128, 192)
    assert wave.reason.startswith("cost model over wgmma's tile rules, 128x192 against their 128x256")
    few = hook(Ask(2048, 1024, 3584, dtype="bfloat16", op_b="T", arch="sm_90a"))
    assert few.reason.startswith("cost model over wgmma's tile rules") and few.params["BN"] == 128


def test_mma_pipelined_hook_sizes_tiles_by_the_cost_model():
    hook = registry.get("mma_pipelined").rules.offer
    big = hook(Ask(8192, 8192, 8192, dtype="float16"))
    assert big.params == {} and big.reason.startswith("the tile-count rule, kept by the cost model")
    attention = hook(Ask(197, 64, 197, batch=384, dtype="bfloat16"))
    assert attention.params["BM"] == 64 and attention.reason.startswith("cost model over the tile-count rule")


def test_pipelined_hook_takes_skinny_tiles_and_splits_few_tiles():
    hook = registry.get("pipelined").rules.offer
    assert hook(Ask(8192, 64, 8192)).params["BN"] == 64
    assert hook(Ask(1024, 1024, 1024)).params["SPLITK"] > 1  # 32 tiles of 128 x 256 on 132 SMs
    assert hook(Ask(4096, 4096, 4096)).params["SPLITK"] == 1


def test_ec_hooks():
    wg, wm = registry.get("ec_wgmma").rules.offer, registry.get("ec_wmma").rules.offer
    assert wg(Ask(4096, 4096, 4096, dtype="fp16_ec", arch="sm_90a")).params == {"SPLITK": 1}
    assert wg(Ask(128, 8192, 8192, dtype="fp16_ec", arch="sm_90a")).params["SPLITK"] > 1  # long K, few tiles
    small = wg(Ask(256, 256, 256, dtype="tf32_ec", arch="sm_90a"))
    assert not small.takes and "does not pay" in small.reason
    assert not wg(Ask(4096, 4096, 4096, dtype="fp16_ec", arch="sm_80")).takes
    assert wm(Ask(256, 256, 256, dtype="tf32_ec")).params == {}


def test_decode_runs_on_a_thin_rung():
    c = choose(bf16(4, 14336, 4096, op_b="T"), H200)
    assert (c.rung, c.params["MT"], c.passed_over, c.fallbacks) == ("gemv_mma", 8, (), ())
    # float32 has no tensor-core gemv: gemv takes it, after batched_small (a batch of small
    # matrices) said why not
    c = choose(Product(4, 14336, 4096, op_b="T"), H200)
    assert (c.rung, c.params["MT"], c.fallbacks) == ("gemv", 4, ())
    assert c.passed_over == ("batched_small takes matrices of M, N <= 56 and K = 1..64, not 4 x 14336 x 4096",)


@pytest.mark.parametrize(
    "M, N, K, ops", [(49, 49, 32, "NT"), (49, 32, 49, "NN"), (49, 32, 49, "TN"), (7, 56, 64, "TT")]
)
def test_window_attention_runs_on_the_batched_small_rungs(M, N, K, ops):
    """Batches of small matrices (Swin's 7 x 7 windows) of at least SMALL_MIN_ROUNDS blocks an SM:
    batched_small in float32, fp32_tc too (IEEE FP32 on the CUDA cores, saying why);
    batched_small_mma in 16-bit where K is one staged chunk (a head of 32) and mma.sync runs,
    else the tiled tensor-core rungs, saying why it declined."""
    from gemmlab.kernels.gemv.batched_small import SMALL_MIN_ROUNDS
    from gemmlab.kernels.gemv.batched_small_mma import SMALL_MMA_MAX_K

    batch = SMALL_MIN_ROUNDS * H200.sm_count
    fp32 = Product(M, N, K, batch, "float32", "float32", op_a=ops[0], op_b=ops[1])
    c = choose(fp32, H200)
    assert (c.rung, c.params, c.passed_over, c.fallbacks) == ("batched_small", {}, (), ())
    tc = choose(dataclasses.replace(fp32, dtype="fp16_ec", precision="fp32_tc"), H200)
    assert (tc.rung, tc.method) == ("batched_small", "fp32") and "bound by memory" in tc.reason
    assert choose(fp32, A100).rung == "batched_small"  # CUDA cores: every target
    c16 = choose(bf16(M, N, K, batch=batch, op_a=ops[0], op_b=ops[1]), H200)
    if K <= SMALL_MMA_MAX_K:
        assert (c16.rung, len(c16.passed_over)) == ("batched_small_mma", 3)  # after the thin rungs
        assert choose(bf16(M, N, K, batch=batch, op_a=ops[0], op_b=ops[1]), A100).rung == "batched_small_mma"
    else:
        assert c16.rung in ("wgmma", "mma_pipelined")
        assert c16.passed_over[-1] == (
            f"batched_small_mma takes matrices of M, N <= 56 and K = 1..{SMALL_MMA_MAX_K}, not {M} x {N} x {K}"
        )


@pytest.mark.parametrize(
    "batch, M, N, K, why",
    [
        (659, 49, 49, 32, "batched_small takes batches of 5 or more matrices an SM (660 here), not 659"),
        (6144, 64, 64, 32, "batched_small takes matrices of M, N <= 56 and K = 1..64, not 64 x 64 x 32"),
        (6144, 49, 49, 65, "batched_small takes matrices of M, N <= 56 and K = 1..64, not 49 x 49 x 65"),
    ],
)
def test_batched_small_declines_past_its_rule(batch, M, N, K, why):
    """Fewer blocks than fill the SMs SMALL_MIN_ROUNDS times, a 64-wide C, or K past
    SMALL_MAX_K: the tiled rung 8, with batched_small's reason kept."""
    c = choose(Product(M, N, K, batch, "float32", "float32", op_b="T"), H200)
    assert c.rung == "pipelined" and c.passed_over[0] == why


@pytest.mark.parametrize(
    "batch, M, N, K", [(64, 4, 4096, 128), (128, 1, 2049, 96), (32, 2, 513, 256), (1, 1, 4096, 64)]
)
def test_decode_attention_q_at_k_runs_on_wgmma_on_hopper(batch, M, N, K):
    """Q @ K^T of a decode step: columns of op(B) of a head (<= 512 bytes) leave gemv's warps
    idle; on Hopper wgmma takes them, elsewhere gemv still does, and float32 and long
    columns stay on gemv everywhere."""
    c = choose(bf16(M, N, K, op_b="T", batch=batch), H200)
    assert c.rung == "wgmma" and c.passed_over[0].startswith(f"gemv_mma: rows of W of {K} values leave its warps")
    assert c.passed_over[1].startswith(f"gemv: columns of op(B) of {K} bfloat16 values")
    assert choose(bf16(M, N, K, op_b="T", batch=batch), A100).rung == "gemv"
    fp32 = Product(M, N, K, batch, "float32", "float32", op_b="T")
    assert choose(fp32, H200).rung == "gemv"
    assert choose(bf16(M, N, 768, op_b="T", batch=batch), H200).rung == "gemv_mma"  # 1536-byte rows of W


def test_small_m_on_hopper_says_why_gemv_was_passed_over():
    c = choose(bf16(77, 3072, 768, op_b="T"), H200)
    assert c.rung == "wgmma" and c.passed_over == (
        "gemv_mma takes 1..16 rows, not M = 77",
        "gemv takes 1..4 rows of bfloat16 with op(B) column-major, not M = 77",
        "outer takes K = 1..8 of bfloat16, not K = 768",
        "batched_small_mma takes matrices of M, N <= 56 and K = 1..32, not 77 x 3072 x 768",
    )
    assert "cost model" in c.reason


def test_off_hopper_the_tensor_rungs_pass_wgmma_over():
    c = choose(bf16(77, 3072, 768, op_b="T"), A100)
    assert c.rung == "mma_pipelined" and c.passed_over[4] == "wgmma runs on sm_90a only (sm_80)"
    # sm_75 has no mma_pipelined for these: the highest tensor rung that runs there.
    c = choose(Product(77, 3072, 768, dtype="float16", out_dtype="float16", op_b="T"), T4)
    assert c.rung == "wmma_warptile" and c.params == registry.get("wmma_warptile").defaults()
    # A block of an sm_86 GPU gets 99 KiB: mma_pipelined's defaults are fitted to it.
    c = choose(bf16(2048, 2048, 2048), RTX3090)
    assert c.rung == "mma_pipelined" and "needs 147456 bytes of shared memory" in c.limit_reason


def test_operands_tma_cannot_read_stage_or_fall_back():
    # A vocabulary's dY @ W: a long K over few tiles, where the staging copy pays.
    c = choose(bf16(1024, 768, 50257, aligned16=False, tma_aligned=False), H200)
    assert c.rung == "wgmma" and c.problem.stage and c.reason.startswith("cost model: ") and not c.fallbacks
    # Attention's odd batches (P's rows of 197 elements) stage too, since pack16 keeps every thread busy.
    c = choose(bf16(197, 64, 197, batch=384, aligned16=False, tma_aligned=False), H200)
    assert c.rung == "wgmma" and c.problem.stage
    # A small product whose copy costs as much as the fallback's whole run: no copy.
    c = choose(bf16(361, 445, 57, aligned16=False, tma_aligned=False), H200)
    assert c.rung == "mma_pipelined" and not c.problem.stage
    assert c.fallbacks[0].startswith("staging for wgmma would take") and c.fallbacks[1].startswith(
        "wgmma cannot take these operands: TMA needs"
    )


def test_named_kernels_hand_over_to_their_fallbacks():
    c = choose(Product(512, 512, 512, dtype="tf32", op_a="T", kernel="wgmma"), H200)
    assert c.rung == "wmma_warptile" and [f.split(" cannot")[0] for f in c.fallbacks] == ["wgmma", "mma_pipelined"]
    with pytest.raises(ValueError, match=r"kernel 'wgmma' does not run on NVIDIA A100 \(sm_80\)"):
        choose(bf16(2048, 2048, 2048, kernel="wgmma"), A100)
    with pytest.raises(ValueError, match="tile parameter BM=7 is not legal"):
        choose(Product(64, 64, 64, kernel="pipelined", tile_params={"BM": 7}), H200)


def test_float32_takes_the_tuned_table_where_it_answers():
    tabled = choose(Product(4096, 4096, 4096), H100)
    rules = choose(Product(4096, 4096, 4096), HOPPER)
    assert tabled.rung == rules.rung == "pipelined"
    assert tabled.reason == "the tuned table's winner at this shape (4096x4096x4096)"
    assert rules.reason.startswith("the tile-count rule, kept by the cost model: ")
    table = tables.load_table(H100.slug)
    assert tabled.params == registry.get("pipelined").resolve(table.lookup("auto", 4096, 4096, 4096, "NN")[1])
    assert rules.params == registry.get("pipelined").resolve(pipelined.auto_params(4096, 4096, 4096, 132)[1])
    # The H200 ships no table (its rules measured faster, benchmarks/NOTES.md): the rules.
    assert tables.load_table("nvidia-h200") is None
    assert choose(Product(4096, 4096, 4096), H200).params == rules.params


def test_precisions_that_change_the_choice():
    # fp16_ec: ec_wgmma's four-set tile (BN 96, no FOLD).
    c = choose(Product(4096, 4096, 4096, dtype="fp16_ec", precision="fp16_ec"), H200)
    assert c.rung == "ec_wgmma" and (c.params["BN"], c.params["FOLD"]) == (EC_WGMMA_BN, 0)
    assert choose(Product(4096, 4096, 4096, dtype="fp16_ec", precision="fp32_tc"), H200).params["FOLD"] == 1
    # fp32_tc on a thin product: FP32 on the CUDA cores, and the plan says so.
    c = choose(Product(4, 4096, 4096, dtype="fp16_ec", precision="fp32_tc"), H200)
    assert (c.rung, c.method, c.problem.dtype) == ("gemv", "fp32", "float32") and c.reason.startswith("M = 4 ")
    # Not with a named kernel: the caller's choice stands.
    assert choose(Product(4, 4096, 4096, dtype="fp16_ec", precision="fp32_tc", kernel="ec_wmma"), H200).method == ""


def test_fp32_tc_runs_fp32_where_hopper_would_run_ec_wmma():
    """fp32_tc with kernel="auto": where ec_wgmma exists but its model predicts it slower (a few
    tiles, small batches), FP32 on the CUDA cores, never ec_wmma (slower than the FP32 rungs on
    106 of 108 such products on an H200); off Hopper ec_wmma stays, and ec_wgmma's products and
    named kernels are untouched."""
    small = Product(197, 768, 768, dtype="fp16_ec", precision="fp32_tc")
    c = choose(small, H200)
    assert (c.rung, c.method, c.problem.dtype) == ("pipelined", "fp32", "float32"), c
    assert "predicted faster" in c.reason and c.passed_over[0].startswith("ec_wgmma predicted slower"), c
    for gpu in (A100, RTX3090):
        off = choose(small, gpu)
        assert (off.rung, off.method) == ("ec_wmma", ""), (gpu.name, off)
    big = choose(Product(4096, 4096, 4096, dtype="fp16_ec", precision="fp32_tc"), H200)
    assert (big.rung, big.method) == ("ec_wgmma", "")
    named = choose(dataclasses.replace(small, kernel="ec_wmma"), H200)
    assert (named.rung, named.method) == ("ec_wmma", "")
    plain = choose(dataclasses.replace(small, precision="fp16_ec"), H200)  # a method named: no switch
    assert (plain.rung, plain.method) == ("ec_wmma", "")


def test_plan_carries_the_rungs_passed_over():
    p = planner.plan(
        "auto", 77, 3072, 768, dtype="bfloat16", out_dtype="bfloat16", op_b="T", arch="sm_80", sm_count=108
    )
    assert p.spec.name == "mma_pipelined" and len(p.passed_over) == 5 and "wgmma" in p.passed_over[4]
    assert "passed" not in p.describe() and "gemv" not in p.describe()  # describe() is as it was


def test_explain_adds_the_reason_and_the_rungs_passed_over():
    p = planner.plan(
        "auto", 77, 3072, 768, dtype="bfloat16", out_dtype="bfloat16", op_b="T", arch="sm_80", sm_count=108
    )
    lines = p.explain().splitlines()
    assert lines[0] == p.describe() and lines[1] == f"why: {p.reason}"
    assert lines[2:] == [f"passed over: {w}" for w in p.passed_over]
    named = planner.plan("pipelined", 64, 64, 64)
    assert named.explain() == named.describe()
