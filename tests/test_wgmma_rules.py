"""The wgmma rung (Hopper) without a GPU: where it runs, kernel="auto"'s tiles and split-K,
fallbacks, TMA alignment, geometry, shared memory and instantiations.  On a GPU: test_wgmma.py."""

import json
from pathlib import Path

import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.kernels.simt.pipelined import SPLITK_VALUES
from gemmlab.kernels.spec import LAYOUTS, Problem
from gemmlab.kernels.tensor.wgmma import WGMMA_MIN_K_STEPS_PER_SLICE, wgmma_narrow_tile, wgmma_ring

SPECS = registry.ladder()
WGMMA = registry.get("wgmma")


def test_wgmma_exists_only_for_sm90a():
    assert WGMMA.arches == ("sm_90a",)
    assert WGMMA.builds_for("sm_90a") and not WGMMA.builds_for("sm_80") and not WGMMA.builds_for("sm_90")
    hopper = ("wgmma_tma", "wgmma_specialized", "wgmma_persistent", "wgmma", "wgmma_fp8", "grouped", "grouped_wgrad")
    assert all(s.builds_for("sm_80") for s in SPECS if s.name not in hopper + ("ec_wgmma",))
    assert [k["arches"] for k in gemmlab.kernels() if k["name"] == "wgmma"] == [["sm_90a"]]
    with pytest.raises(ValueError, match=r"kernel 'wgmma' does not run on NVIDIA A100 \(sm_80\): it needs sm_90a"):
        WGMMA.check_arch("sm_80", "NVIDIA A100")


def test_plan_refuses_wgmma_on_other_architectures():
    with pytest.raises(
        ValueError,
        match=r"kernel 'wgmma' does not run on .*sm_80.*needs sm_90a.*run there for bfloat16: wmma, wmma_warptile, mma_pipelined",
    ):
        gemmlab.plan("wgmma", 256, 256, 256, dtype="bfloat16", out_dtype="bfloat16", arch="sm_80")
    # Without an architecture (planning before the GPU is known) the name is accepted.
    assert gemmlab.plan("wgmma", 256, 256, 256, dtype="bfloat16", out_dtype="bfloat16").spec.name == "wgmma"


@pytest.mark.parametrize("dtype, out_dtype", [("float16", "float16"), ("bfloat16", "float32"), ("tf32", "float32")])
def test_auto_picks_wgmma_on_hopper_only(dtype, out_dtype):
    kw = dict(dtype=dtype, out_dtype=out_dtype)
    assert gemmlab.plan("auto", 4096, 4096, 4096, arch="sm_90a", **kw).spec.name == "wgmma"
    assert gemmlab.plan("auto", 4096, 4096, 4096, arch="sm_80", **kw).spec.name == "mma_pipelined"
    assert gemmlab.plan("auto", 4096, 4096, 4096, **kw).spec.name == "mma_pipelined"
    assert gemmlab.plan("auto", 4096, 4096, 4096, arch="sm_90a").spec.family == "simt"  # float32


@pytest.mark.parametrize(
    "M, N, sm_count, tile",
    [
        (4096, 4096, 132, (128, 256)),  # 32 x 16 = 512 tiles
        (2048, 2048, 132, (128, 256)),  # 128 tiles: at least half the SMs
        (1024, 2048, 132, (64, 128)),  # 64 tiles: 2 * 64 = 128 < 132
        (1024, 1024, 132, (64, 128)),  # 32 tiles of 128x256; 128 of 64x128
        (1152, 2048, 132, (128, 256)),  # 9 x 8 = 72 tiles
        (17, 1, 132, (64, 128)),
        (300, 300, 8, (128, 256)),  # 8 SMs: 3 x 2 = 6 tiles of 128x256
    ],
)
def test_wgmma_auto_tile(M, N, sm_count, tile):
    p = gemmlab.plan("auto", M, N, 512, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", sm_count=sm_count)
    assert (p.params["BM"], p.params["BN"]) == tile
    assert p.params in WGMMA.configurations()


def _hopper_plan(M, N, K, dtype="bfloat16", ops="NN", batch=1):
    """kernel="auto"'s plan for a product on an sm_90a GPU of 132 SMs (an H100 / H200)."""
    return gemmlab.plan(
        "auto",
        M,
        N,
        K,
        dtype=dtype,
        out_dtype=dtype,
        arch="sm_90a",
        sm_count=132,
        op_a=ops[0],
        op_b=ops[1],
        batch=batch,
    )


@pytest.mark.parametrize(
    "M, N, K, ops, batch, tile, splits",
    [
        (2, 4096, 128256, "NN", 1, (64, 128), 4),  # lm_head's dY @ W at two tokens: 32 tiles of 64x128 (one: gemv)
        (16, 4096, 14336, "NN", 1, (64, 128), 4),  # down's x @ W.t() at 16 tokens: 224 K-steps, 56 a slice
        (2, 4096, 1024, "NN", 1, (64, 128), 1),  # 16 K-steps: too short to split
        (2, 4096, 2048, "NN", 1, (64, 128), 2),  # 32 K-steps: two slices of 16
        (128, 4096, 128256, "NN", 1, (128, 128), 4),  # 64 < M <= 128: one tile-row of 128x128, 32 tiles
        (128, 4096, 28672, "NN", 1, (128, 128), 4),
        (128, 6144, 16384, "NT", 1, (128, 128), 2),  # 48 tiles; the narrow tile's 96 too few for 256 K-steps
        (128, 14336, 4096, "NN", 1, (128, 128), 1),  # 112 tiles: more than half the SMs
        (300, 1000, 4096, "NN", 1, (64, 128), 3),  # 5 x 8 tiles of 64x128: 3 x 40 <= 132
        (16, 28672, 4096, "NT", 1, (64, 256), 1),  # 128x256 tiles fill the GPU; M <= 64: 64x256
        (4096, 4096, 4096, "NN", 1, (128, 256), 1),  # 512 tiles of 128x256
        (2048, 2048, 8192, "NN", 1, (128, 256), 1),  # 128 tiles: enough
        (16, 4096, 4096, "NN", 8, (64, 256), 1),  # a batch of 8 x 16 tiles of 128x256 fills the GPU
        (4, 4096, 4096, "NN", 2, (64, 128), 2),  # 2 x 32 tiles; 4 rows: no narrow tile
    ],
)
def test_wgmma_auto_splits_k_where_tiles_leave_sms_idle(M, N, K, ops, batch, tile, splits):
    """kernel="auto" on Hopper (16-bit): SPLITK fills the SMs the tiles leave idle, each slice
    WGMMA_MIN_K_STEPS_PER_SLICE K-steps or more, one round of work items at most."""
    p = _hopper_plan(M, N, K, ops=ops, batch=batch)
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == tile, p.describe()
    assert p.params["SPLITK"] == splits, p.describe()
    tiles = -(-M // p.params["BM"]) * -(-N // p.params["BN"]) * batch
    assert tiles * splits <= 132 or splits == 1
    assert -(-K // 64) >= WGMMA_MIN_K_STEPS_PER_SLICE * splits
    assert p.params in WGMMA.configurations()
    # The split instantiation writes FP32 partial products; the plan's output stays bf16.
    assert (", true, '" in p.name_expression) == (splits > 1) and p.problem.out_dtype == "bfloat16"


@pytest.mark.parametrize(
    "M, N, K, ops, batch, tile",
    [
        (16, 4096, 4096, "NT", 1, (64, 64, 12)),  # o's x @ W.t() at 16 tokens: 64 tiles of 64x64, 64 K-steps
        (16, 4096, 6144, "NN", 1, (64, 64, 12)),  # qkv's dY @ W: 96 K-steps
        (128, 4096, 4096, "NN", 1, (64, 64, 12)),  # 2 x 64 tiles: one round
        (128, 6144, 4096, "NT", 1, (64, 128, 8)),  # 2 x 96 tiles of 64x64: two rounds; 2 x 48 of 64x128
        (128, 4096, 14336, "NT", 1, (64, 64, 12)),  # down's x @ W.t(): 128 tiles, 224 K-steps
        (5, 4096, 4096, "TT", 1, (64, 64, 12)),
        (16, 4096, 4096, "NN", 2, (64, 64, 12)),  # 2 x 64 tiles
    ],
)
def test_wgmma_auto_narrow_tile_replaces_split_k(M, N, K, ops, batch, tile):
    """Products of 5 to 128 rows (16-bit) that split-K would serve run unsplit on 64 x 64
    (or 64 x 128) tiles with the deepest ring that fits (wgmma_narrow_tile, run 88c)."""
    p = _hopper_plan(M, N, K, ops=ops, batch=batch)
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"], p.params["STAGES"]) == tile, p.describe()
    assert p.params["SPLITK"] == 1 and p.params in WGMMA.configurations()
    assert wgmma_narrow_tile(M, N, K, 132, batch) == {**p.params, "CLUSTER": 1}


@pytest.mark.parametrize(
    "M, N, K, ops, batch, tile",
    [
        (4096, 128, 4096, "NN", 128, (128, 128)),  # P @ V, head dim 128: a 256-wide tile is half past N
        (512, 100, 512, "NN", 32, (128, 128)),
        (2048, 2048, 128, "NT", 32, (128, 128)),  # Q @ K^T: a batch with two K-steps
        (4096, 4096, 128, "TN", 1, (128, 256)),  # one matrix with a short K (a weight gradient)
        (4096, 4096, 4096, "NN", 1, (128, 256)),
        (4096, 4096, 256, "NT", 8, (128, 256)),  # four K-steps
    ],
)
def test_wgmma_auto_128_columns_for_short_k_batches_and_narrow_n(M, N, K, ops, batch, tile):
    p = _hopper_plan(M, N, K, ops=ops, batch=batch)
    assert (p.params["BM"], p.params["BN"], p.params["SPLITK"]) == tile + (1,), p.describe()


@pytest.mark.parametrize(
    "M, N, K, ops, tile",
    [
        (4096, 768, 3072, "NT", (128, 192)),  # 96 tiles of 128x256: 0.73 of a round; 128 of 128x192: one
        (12608, 768, 3072, "NT", (128, 192)),  # 297 tiles: 3 rounds, the last a quarter full; 396: 3 full ones
        (12608, 768, 768, "NN", (128, 192)),
        (4096, 2304, 768, "TN", (128, 192)),  # 288 tiles: 3 rounds; 384: 3
        (12608, 3072, 768, "NN", (128, 256)),  # 1188 tiles: 9 full rounds; 1584 would take 12
        (4096, 3072, 768, "NT", (128, 256)),  # 384 tiles: 3 rounds; 512 would take 4
        (4096, 4096, 4096, "NN", (128, 256)),
        (8192, 8192, 8192, "NN", (128, 256)),
    ],
)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_wgmma_auto_128x192_where_the_last_round_is_part_empty(M, N, K, ops, tile, dtype):
    """A 16-bit matrix whose 128 x 256 tiles fill the 132 SMs: 128 x 192 where the cost model
    predicts it faster (wgmma_wave_choice: as many rounds or nearly, each a quarter shorter),
    else 128 x 256; the reason names the comparison either way."""
    p = _hopper_plan(M, N, K, dtype, ops)
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"], p.params["SPLITK"]) == tile + (1,), p.describe()
    assert p.params in WGMMA.configurations(dtype) and p.params["STAGES"] == 4 and p.params["CLUSTER"] == 1
    took = tile == (128, 192)
    assert p.reason.startswith(
        "cost model over wgmma's tile rules, 128x192 against their 128x256"
        if took
        else "wgmma's tile rules, kept by the cost model against 128x192"
    ), p.reason
    assert "128x192x4 stages" in p.reason and "128x256x4 stages" in p.reason
    assert "why: " + p.reason in p.explain()
    if took:
        assert (
            p.name_expression.startswith("gemmlab::wgmma_gemm<") and ", 128, 192, 4, 1, false, '" in p.name_expression
        )


AB_TILES = Path(__file__).resolve().parents[1] / "benchmarks/results/nvidia-h200/ab-wgmma-tiles-2026-11-29.json"


def _measured_tile_pairs():
    """(product, M, N, K, % of torch with 128 x 256, with 128 x 192) of the single products
    scripts/ab_wgmma_tiles.py timed with both tiles forced on an H200."""
    runs = json.loads(AB_TILES.read_text())["runs"]["models"]["records"]
    return [
        (r["product"], *r["shape"], r["pct_t256"], r["pct_t192"]) for r in runs if r.get("batch", 1) == 1 and r["ok"]
    ]


@pytest.mark.parametrize("product, M, N, K, t256, t192", _measured_tile_pairs())
def test_wgmma_auto_ranks_its_wide_tiles_as_measured(product, M, N, K, t256, t192):
    """The cost model against the recorded measurement: where one of 128 x 256 and 128 x 192
    ran more than 5% faster than the other on the H200, auto (132 SMs) takes that one; closer
    than that, either may be taken."""
    p = _hopper_plan(M, N, K)
    faster = 192 if t192 > t256 else 256
    if max(t192, t256) > 1.05 * min(t192, t256):
        assert p.params["BN"] == faster, f"{product}: {p.describe()} ({t256:.1f}% with 256, {t192:.1f}% with 192)"


@pytest.mark.parametrize(
    "M, N, K, ops, batch, bn",
    [
        (197, 64, 197, "NN", 768, 64),  # ViT-B/16's P @ V (head dim 64)
        (197, 64, 197, "TN", 768, 64),  # its P^T @ dO
        (1024, 64, 1024, "NN", 96, 64),
        (197, 197, 64, "NT", 768, 128),  # Q @ K^T: N = 197, two K-steps
        (1024, 128, 1024, "NN", 64, 128),  # P @ V at a head dim of 128
        (8192, 64, 4096, "NN", 1, 128),  # a single matrix keeps the rules' 64 x 128
    ],
)
def test_wgmma_auto_batches_of_64_columns_take_128x64(M, N, K, ops, batch, bn):
    """16-bit batches of at most 64 columns (P @ V at a head dim of 64) take 128 x 64, which
    computes nothing past N, where 128 x 128 computes as much past it as in it."""
    p = _hopper_plan(M, N, K, ops=ops, batch=batch)
    assert p.spec.name == "wgmma" and p.params["BN"] == bn and p.params["SPLITK"] == 1, p.describe()
    assert p.params in WGMMA.configurations("bfloat16")


@pytest.mark.parametrize(
    "M, N, K, batch, sm_count",
    [
        (4096, 768, 3072, 1, 132),
        (12608, 768, 768, 1, 132),
        (4096, 2304, 768, 1, 132),
        (1024, 768, 50257, 1, 132),
        (256, 4096, 4096, 1, 114),
        (1024, 768, 3072, 4, 132),
    ],
)
def test_wgmma_auto_never_gives_tf32_128x192(M, N, K, batch, sm_count):
    """TF32 keeps its rules (no m64n192 TF32 wgmma): never BN = 192, where 16-bit takes it."""
    bf16 = gemmlab.plan(
        "auto", M, N, K, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", sm_count=sm_count, batch=batch
    )
    assert bf16.params["BN"] == 192, bf16.describe()
    p = gemmlab.plan("auto", M, N, K, dtype="tf32", arch="sm_90a", sm_count=sm_count, batch=batch)
    assert p.spec.name == "wgmma" and p.params["BN"] != 192 and p.reason == "wgmma's tile rules", p.describe()


@pytest.mark.parametrize(
    "M, N, K, ops, why",
    [
        (4, 4096, 4096, "NN", "fewer rows than WGMMA_NARROW_MIN_M: split"),
        (16, 4096, 14336, "NN", "64 tiles and 224 K-steps: split"),
        (16, 4096, 28672, "NN", "448 K-steps: split"),
        (300, 1000, 4096, "NN", "more rows than WGMMA_NARROW_MAX_M"),
        (16, 14336, 4096, "NN", "112 tiles of 64x128: no split to replace"),
    ],
)
def test_wgmma_auto_keeps_split_or_wide_tiles_elsewhere(M, N, K, ops, why):
    p = gemmlab.plan(
        "auto", M, N, K, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", sm_count=132, op_a=ops[0], op_b=ops[1]
    )
    assert p.params["BN"] != 64 and p.params["STAGES"] == wgmma_ring(p.params["BM"], p.params["BN"], K), (
        why,
        p.describe(),
    )


def test_wgmma_auto_tf32_keeps_its_tiles_and_splits():
    """TF32 (its tile is BN x BM: C^T) keeps the 64x128 parameters where tiles are few, split too."""
    p = gemmlab.plan("auto", 16, 4096, 8192, dtype="tf32", out_dtype="float32", arch="sm_90a", sm_count=132)
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == (64, 128), p.describe()
    # 16 x 4096 in 128 x 64 tiles: 64 of them; 256 K-steps of 32
    assert p.params["SPLITK"] == 2


def test_wgmma_auto_split_off_hopper_and_when_named():
    """A named wgmma keeps its defaults (no split) unless SPLITK is given; off Hopper auto runs
    mma_pipelined, which has no split."""
    assert gemmlab.plan("wgmma", 1, 4096, 128256, dtype="bfloat16", out_dtype="bfloat16").params["SPLITK"] == 1
    assert (
        gemmlab.plan("wgmma", 1, 4096, 128256, dtype="bfloat16", out_dtype="bfloat16", SPLITK=8).params["SPLITK"] == 8
    )
    assert (
        gemmlab.plan("auto", 2, 4096, 128256, dtype="bfloat16", out_dtype="bfloat16", op_b="N", arch="sm_80").spec.name
        == "mma_pipelined"
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_falls_back_when_tma_cannot_read_the_operands(dtype, caplog):
    import logging

    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        p = gemmlab.plan(
            "wgmma", 4097, 4095, 513, dtype=dtype, out_dtype=dtype, arch="sm_90a", tma_aligned=False, BN=128
        )
    # mma_pipelined reads any alignment (its narrow-copy variant): the next rung down, not two
    assert p.spec.name == "mma_pipelined" and p.params == registry.get("mma_pipelined").defaults()
    assert "wgmma cannot take these operands: TMA needs" in p.fallback_reason
    assert p.describe().startswith("mma_pipelined(") and "[wgmma cannot take these operands" in p.describe()
    assert any("running mma_pipelined instead" in r.getMessage() for r in caplog.records)
    # auto copies the operands to the 16-byte grid first where the cost model says that pays
    auto = gemmlab.plan("auto", 4097, 4095, 513, dtype=dtype, out_dtype=dtype, arch="sm_90a", tma_aligned=False)
    assert auto.spec.name == "wgmma" and auto.problem.stage, auto.describe()


@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_reads_every_16bit_layout(dtype, op_a, op_b):
    """x @ W.t() (NT), x.t() @ W (TN), TT: 16-bit wgmma reads each operand as stored
    (K- or MN-major in shared memory), so auto and a named wgmma run it, no fallback."""
    for kernel in ("auto", "wgmma"):
        p = gemmlab.plan(kernel, 4096, 4096, 4096, dtype=dtype, out_dtype=dtype, arch="sm_90a", op_a=op_a, op_b=op_b)
        assert p.spec.name == "wgmma" and p.fallback_reason == "", p.describe()
        assert p.name_expression.endswith(f", '{op_a}', '{op_b}'>")


@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_misaligned_16bit_operands_fall_back_to_mma_pipelined_in_every_layout(dtype, op_a, op_b):
    """x @ W.t() and the other layouts with rows TMA cannot read: wgmma falls back for the
    alignment to mma_pipelined, which reads every 16-bit layout (ldmatrix or .trans); auto
    stages such operands at this size instead (test_fastpaths.py)."""
    p = gemmlab.plan(
        "wgmma", 4096, 4096, 4096, dtype=dtype, out_dtype=dtype, arch="sm_90a", op_a=op_a, op_b=op_b, tma_aligned=False
    )
    assert p.spec.name == "mma_pipelined" and p.fallback_reason.count("cannot take these operands") == 1
    assert "TMA needs" in p.fallback_reason
    assert p.name_expression.endswith(f", '{op_a}', '{op_b}'>")


def test_tf32_fallbacks_chain_down_to_a_kernel_that_reads_the_layout():
    """TF32 x @ W.t(): wgmma's and mma_pipelined's TF32 paths read NN only, so wmma_warptile,
    with both reasons."""
    p = gemmlab.plan("auto", 4096, 4096, 4096, dtype="tf32", arch="sm_90a", op_b="T")
    assert p.spec.name == "wmma_warptile"
    assert p.fallback_reason.count("cannot take these operands") == 2
    assert "running mma_pipelined instead" in p.fallback_reason and "running wmma_warptile instead" in p.fallback_reason
    assert "no 32-bit ldmatrix.trans" in p.fallback_reason


@pytest.mark.parametrize("op_a, op_b", [("T", "N"), ("N", "T"), ("T", "T")])
def test_wgmma_tf32_reads_nn_only(op_a, op_b):
    """TF32 computes C^T = B^T A^T (its wgmma has no transpose bit): other layouts fall back,
    and the reason says so."""
    p = gemmlab.plan("wgmma", 4096, 4096, 4096, dtype="tf32", arch="sm_90a", op_a=op_a, op_b=op_b)
    assert p.spec.name != "wgmma"
    assert f"reads row-major a and b (NN) only, not {op_a}{op_b}" in p.fallback_reason


def test_wgmma_tf32_never_falls_back():
    """TF32 inputs are packed into an aligned workspace first, so any layout will do."""
    p = gemmlab.plan("wgmma", 4097, 4095, 513, dtype="tf32", arch="sm_90a", tma_aligned=False)
    assert p.spec.name == "wgmma" and p.fallback_reason == "" and p.describe().startswith("wgmma(BM=128, BN=256, ")


@pytest.mark.parametrize(
    "a_ptr, a_rows, lda, b_ptr, b_rows, ldb, eb, ok",
    [
        (256, 100, 64, 512, 64, 128, 2, True),
        (256, 100, 60, 512, 64, 128, 2, False),  # 120-byte rows
        (256, 100, 64, 512, 64, 132, 2, False),
        (258, 100, 64, 512, 64, 128, 2, False),  # base 2 bytes off
        (256, 100, 64, 520, 64, 128, 2, False),  # 8 bytes off
        (256, 1, 5, 512, 1, 3, 2, True),  # single rows: no stride to check
        (256, 100, 4, 512, 64, 4, 4, True),  # 16-byte float rows
        (256, 100, 6, 512, 64, 4, 4, False),
    ],
)
def test_tma_alignment_rule(a_ptr, a_rows, lda, b_ptr, b_rows, ldb, eb, ok):
    from gemmlab.runtime.tma import tma_aligned

    assert tma_aligned(a_ptr, a_rows, lda, b_ptr, b_rows, ldb, eb) is ok


def test_contiguous_tma_alignment():
    from gemmlab.core.planner import contiguous_tma_aligned

    assert contiguous_tma_aligned(4096, 4096, 4096, 2)
    assert not contiguous_tma_aligned(4097, 4095, 513, 2)  # a's rows: 1026 bytes
    assert not contiguous_tma_aligned(64, 100, 64, 2)  # b's rows: 200 bytes
    assert contiguous_tma_aligned(1, 1, 1, 2)  # one-row a and b
    assert contiguous_tma_aligned(1000, 12, 4, 4)  # 16-byte float rows


@pytest.mark.parametrize(
    "M, N, sm_count",
    [
        (1, 1, 132),
        (4096, 4096, 132),
        (128, 256, 132),
        (129, 257, 132),
        (300, 5000, 132),
        (4096, 4096, 114),
        (1000, 1000, 8),
        (100, 9000, 7),
    ],
)
def test_wgmma_geometry(M, N, sm_count):
    """04_wgmma.cu: a persistent grid of whole clusters, at most one block per SM; cluster c
    takes cluster tiles c, c + clusters, ... (CLUSTER vertically adjacent tiles each, in grouped
    order of GROUP_M = 8 cluster-rows), its block of rank r the tile in row CLUSTER * row + r.
    Together they cover every tile exactly once (rows past M are masked). One producer
    warpgroup plus BM/64 consumers; the shared-memory ring as dynamic shared memory."""
    for p in WGMMA.configurations():
        cl = p["CLUSTER"]
        geo = WGMMA.launch(p, Problem(M, N, 64, True, "bfloat16", "bfloat16", tma_aligned=True, sm_count=sm_count))
        tiles_m, tiles_n = -(-M // p["BM"]), -(-N // p["BN"])
        tiles_mc = -(-tiles_m // cl)
        # split over K: SPLITK work items per cluster tile (each slice of K of it)
        assert geo.grid[0] == cl * min(tiles_mc * tiles_n * p["SPLITK"], sm_count // cl)
        assert geo.grid[0] <= sm_count
        if p["SPLITK"] > 1:
            continue
        clusters = min(tiles_mc * tiles_n, sm_count // cl)
        assert geo.grid == (cl * clusters, 1, 1) and geo.cluster == (cl, 1, 1) and geo.persistent
        assert geo.block == (128 * (p["BM"] // 64 + 1), 1, 1)
        # the ring, two 8 KiB epilogue staging buffers per consumer, barriers, alignment slack
        assert geo.smem_bytes == (
            p["STAGES"] * (p["BM"] + p["BN"]) * 128 + (p["BM"] // 64) * 2 * 8192 + 16 * p["STAGES"] + 1024
        )
        seen = []
        for block in range(geo.grid[0]):
            rank = block % cl
            for t in range(block // cl, tiles_mc * tiles_n, clusters):  # grouped_tile() in 04_wgmma.cu
                first = (t // (8 * tiles_n)) * 8
                rows = min(tiles_mc - first, 8)
                r = t % (8 * tiles_n)
                tm, tn = (first + r % rows) * cl + rank, r // rows
                if tm < tiles_m:
                    seen.append((tm, tn))
        assert sorted(seen) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]


def test_wgmma_shared_memory_rule():
    assert {"BM": 128, "BN": 256, "STAGES": 5, "CLUSTER": 1} not in WGMMA.configurations()
    with pytest.raises(ValueError, match=r"must fit in the 227 KiB"):
        WGMMA.resolve({"BM": 128, "BN": 256, "STAGES": 5})
    assert len(WGMMA.configurations()) == 38 * len(SPLITK_VALUES)
    with pytest.raises(ValueError, match=r"BN = 64 runs without clusters"):
        WGMMA.resolve({"BM": 64, "BN": 64, "CLUSTER": 2})
    assert max(WGMMA.launch(p, Problem(1, 1, 1, True)).smem_bytes for p in WGMMA.configurations()) <= 227 * 1024


def test_wgmma_bn192_rules():
    """BN = 192 (m64n192, hopper.cuh: 16-bit only): no clusters (its three 64-column boxes of
    B 'N' do not split between two blocks), no TF32 (a rule of that type only,
    Constraint.dtypes: refused when resolved for TF32, left out of its configurations and
    instantiations), and at BM = 128 at most 4 stages (ring and epilogue staging in 227 KiB)."""
    tile = {"BM": 128, "BN": 192, "STAGES": 4, "CLUSTER": 1, "SPLITK": 1}
    for dtype in ("float16", "bfloat16"):
        assert tile in WGMMA.configurations(dtype) and WGMMA.resolve({"BN": 192}, dtype) == tile
    assert tile in WGMMA.configurations()  # (any type: the rules of every type)
    assert [c for c in WGMMA.configurations("tf32") if c["BN"] == 192] == []
    assert sorted({c["STAGES"] for c in WGMMA.configurations() if c["BN"] == 192 and c["BM"] == 128}) == [3, 4]
    with pytest.raises(ValueError, match=r"for kernel 'wgmma': BN = 192 runs without clusters \(CLUSTER = 1\)"):
        WGMMA.resolve({"BN": 192, "CLUSTER": 2})
    with pytest.raises(ValueError, match=r"for kernel 'wgmma' with tf32 inputs: BN = 192 is for 16-bit inputs"):
        WGMMA.resolve({"BN": 192}, "tf32")
    with pytest.raises(ValueError, match=r"with tf32 inputs: BN = 192 is for 16-bit inputs"):
        gemmlab.plan("wgmma", 4096, 768, 3072, dtype="tf32", arch="sm_90a", BN=192)
    with pytest.raises(ValueError, match=r"BN = 192 runs without clusters"):
        gemmlab.plan("wgmma", 4096, 768, 3072, dtype="bfloat16", out_dtype="bfloat16", BN=192, CLUSTER=2)
    p = gemmlab.plan("wgmma", 4096, 768, 3072, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", op_b="T", BN=192)
    assert p.name_expression == "gemmlab::wgmma_gemm<1, 1, 128, 192, 4, 1, false, 'N', 'T'>"
    assert p.spec.launch(p.params, p.problem).smem_bytes <= 227 * 1024
    names = WGMMA.all_name_expressions()
    assert not any(n.startswith("gemmlab::wgmma_gemm<2, 3, 128, 192,") for n in names)  # TF32: none
    assert {n[-9:] for n in names if ", 128, 192, 4, 1, true," in n} == {
        "'N', 'N'>",
        "'N', 'T'>",
        "'T', 'N'>",
        "'T', 'T'>",
    }
    assert any(
        r["constraints"][-1].startswith("BN = 192 is for 16-bit inputs")
        for r in gemmlab.kernels()
        if r["name"] == "wgmma"
    )


def test_wgmma_name_expressions():
    prob = Problem(10, 10, 10, True, "bfloat16", "bfloat16")
    d = WGMMA.defaults()
    assert WGMMA.name_expression(d, prob) == f"gemmlab::wgmma_gemm<1, 1, 128, 256, 4, {d['CLUSTER']}, false, 'N', 'N'>"
    assert (
        WGMMA.name_expression(
            {"BM": 64, "BN": 128, "STAGES": 3, "CLUSTER": 2, "SPLITK": 1}, Problem(1, 1, 1, True, "tf32")
        )
        == "gemmlab::wgmma_gemm<2, 3, 64, 128, 3, 2, false, 'N', 'N'>"
    )
    # Split over K: one instantiation for every SPLITK > 1, writing C in its own dtype (the
    # kernel adds its slices itself before the epilogue).
    for splits in (2, 16):
        assert (
            WGMMA.name_expression({**d, "SPLITK": splits}, prob)
            == f"gemmlab::wgmma_gemm<1, 1, 128, 256, 4, {d['CLUSTER']}, true, 'N', 'N'>"
        )
    # Unsplit and split alike: 16-bit (4 type pairs) in every layout, TF32 in NN only.  38
    # tiles, of which TF32 has 33 (no BN = 192).
    assert len(WGMMA.all_name_expressions()) == 2 * (38 * 4 * 4 + 33)
    assert (
        WGMMA.name_expression(d, prob.with_layout("N", "T"))
        == f"gemmlab::wgmma_gemm<1, 1, 128, 256, 4, {d['CLUSTER']}, false, 'N', 'T'>"
    )


@pytest.mark.parametrize("dtype, batch", [("bfloat16", None), ("tf32", None), ("float8_e4m3fn", 3)])
def test_a_map_is_encoded_through_the_drivers_entry_point_with_the_bindings_arguments(monkeypatch, dtype, batch):
    """runtime.tma's encoder hands cuTensorMapEncodeTiled (a C function of the same
    signature stands in for the driver's, through ctypes as the driver's is called) what the
    binding's call hands it: the data type, rank, address, sizes, strides and box, and the
    swizzle, interleave, L2 and fill modes.  The GPU test compares the maps' bytes."""
    import ctypes
    import types

    from gemmlab.runtime import launch, tma

    d = launch.driver()
    seen = {}
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p,
                      u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int)  # fmt: skip
    def encode(tmap, dtype_code, rank, address, dims, strides, box, steps, *modes):
        seen.update(
            tmap=tmap,
            dtype=dtype_code,
            rank=rank,
            address=address,
            dims=dims[:rank],
            strides=strides[: rank - 1],
            box=box[:rank],
            steps=steps[:rank],
            modes=modes,
        )
        ctypes.memset(tmap, 0xAB, 128)  # what the driver writes lands in the map returned
        return 0

    T = d.CUtensorMapDataType
    monkeypatch.setattr(tma, "_c", types.SimpleNamespace(encode=encode))  # the driver's entry point
    eb = tma.element_bytes(dtype)
    rows, cols, ld, box_rows, box_cols = 200, 136, 144, 64, tma.SWIZZLE_BYTES // eb
    bstride = rows * ld * eb if batch else 0
    tmap = tma._encode_driver(0x7F0000001000, rows, cols, ld, dtype, box_rows, box_cols, batch, bstride)
    assert ctypes.string_at(tmap.getPtr(), 128) == b"\xab" * 128 and seen["tmap"] == tmap.getPtr()
    want_type = {1: T.CU_TENSOR_MAP_DATA_TYPE_UINT8, 2: T.CU_TENSOR_MAP_DATA_TYPE_UINT16}.get(
        eb, T.CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 if dtype == "tf32" else T.CU_TENSOR_MAP_DATA_TYPE_FLOAT32
    )
    extra = (batch,) if batch else ()
    assert seen == {
        "tmap": tmap.getPtr(),
        "dtype": int(want_type),
        "rank": 3 if batch else 2,
        "address": 0x7F0000001000,
        "dims": [cols, rows, *extra],
        "strides": [ld * eb] + ([bstride] if batch else []),
        "box": [box_cols, box_rows] + ([1] if batch else []),
        "steps": [1] * (3 if batch else 2),
        "modes": (0, 3, 3, 0),  # no interleave, the 128-byte swizzle, 256-byte L2 promotion, no NaN fill
    }


def test_the_drivers_entry_points_are_looked_up_once_with_the_bindings_enum_values(monkeypatch):
    """_c_entries sets the C signatures of the driver's entry points, and the maps' enum
    values are the binding's (_encoding); where the driver library is not found, the
    binding's calls are used (False)."""
    import types

    from gemmlab.runtime import launch, tma

    d = launch.driver()
    lib = types.SimpleNamespace(
        cuTensorMapEncodeTiled=types.SimpleNamespace(), cuTensorMapReplaceAddress=types.SimpleNamespace()
    )
    monkeypatch.setattr(tma.ctypes, "CDLL", lambda name: lib if name == "libcuda.so.1" else None)
    monkeypatch.setattr(tma, "_c", None)
    c = tma._c_entries()
    assert tma._c is c and c.encode is lib.cuTensorMapEncodeTiled and c.replace is lib.cuTensorMapReplaceAddress
    assert len(c.encode.argtypes) == 12 and len(c.replace.argtypes) == 2
    enc = tma._encoding()
    assert enc.mode_codes == (
        int(d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE),
        int(d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B),
        int(d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B),
        int(d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
    )
    assert enc.type_codes[2] == int(d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16)

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(tma.ctypes, "CDLL", missing)
    monkeypatch.setattr(tma, "_c", None)
    assert tma._c_entries() is False and tma._c is False
