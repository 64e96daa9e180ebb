"""kernel="auto" for float32 by rule and table: rung 8's tile-count rule
(pipelined.auto_params, fill_split) and the shipped H100 table at shapes it was
and were not tuned for (no GPU).  The cost model that weighs them: tests/test_fp32_choice.py."""

import pytest

import gemmlab
from gemmlab.core import choose, tables
from gemmlab.kernels import registry
from gemmlab.kernels.simt import pipelined
from gemmlab.kernels.simt.pipelined import fill_split
from gemmlab.kernels.spec import LAYOUTS


# pipelined.auto_params, the tile-count rule (kernel="auto" on a GPU without a tuned table
# weighs it against rung 8's cost model: tests/test_fp32_choice.py): pipelined at its
# defaults for the layout (128 x 256 tiles; NN's here), split over K where ceil(M/128) *
# ceil(N/256) tiles leave more than half the SMs idle: the largest split s <= 4 (of 1, 2, 3, 4)
# with s * tiles <= SMs and at least 4 K-steps (BK = 8) per slice.
PIPE_DEFAULTS = registry.get("pipelined").resolve(pipelined.layout_defaults("N", "N"))


def _rule(M, N, K, sm_count, batch=1):
    name, params = pipelined.auto_params(M, N, K, sm_count, batch)
    assert name == "pipelined"
    return registry.get("pipelined").resolve(params)


@pytest.mark.parametrize(
    "M, N, K, sm_count, splits",
    [
        (4096, 4096, 4096, 132, 1),  # 32 * 16 = 512 tiles
        (2048, 2048, 512, 132, 1),  # 16 * 8 = 128 tiles: more than half the SMs
        (1152, 2048, 512, 132, 1),  # 9 * 8 = 72 tiles >= 66
        (1024, 1024, 1024, 132, 4),  # 8 * 4 = 32 tiles: 4 * 32 = 128 <= 132
        (256, 4096, 4096, 132, 4),  # 2 * 16 = 32 tiles
        (1024, 2048, 4096, 132, 2),  # 8 * 8 = 64 tiles < 66: 2 * 64 = 128 <= 132
        (100, 100, 100000, 132, 4),  # one tile: split at most 4
        (100, 100, 96, 132, 3),  # 12 K-steps: 3 slices of 4
        (100, 100, 64, 132, 2),  # 8 K-steps
        (65, 65, 64, 132, 2),
        (65, 65, 31, 132, 1),  # 4 K-steps: no split
        (128, 256, 4096, 1, 1),  # one tile fills the one SM
    ],
)
def test_auto_heuristic(M, N, K, sm_count, splits):
    assert _rule(M, N, K, sm_count) == {**PIPE_DEFAULTS, "SPLITK": splits}


@pytest.mark.parametrize(
    "M, N, K, sm_count",
    [
        (4096, 4096, 4096, 132),
        (2048, 2048, 512, 132),
        (1024, 1024, 1024, 132),
        (256, 4096, 4096, 132),
        (1024, 2048, 4096, 132),
        (128, 256, 4096, 1),
    ],
)
def test_auto_keeps_the_rule_where_the_cost_model_agrees(M, N, K, sm_count):
    p = gemmlab.plan("auto", M, N, K, sm_count=sm_count)
    assert p.spec.name == "pipelined" and p.params == _rule(M, N, K, sm_count)
    assert p.reason.startswith("the tile-count rule, kept by the cost model: ")


@pytest.mark.parametrize(
    "M, N, tile, splits",
    [
        (8192, 64, pipelined.SKINNY_N, 2),  # 64 tiles of 128 x 64: 2 * 64 <= 132
        (64, 8192, pipelined.SKINNY_M, 2),
        (64, 64, pipelined.SKINNY_N, 4),  # one tile
        (8192, 48, pipelined.SKINNY_N, 2),
    ],
)
def test_auto_heuristic_for_a_skinny_side(M, N, tile, splits):
    p = _rule(M, N, 8192, 132)
    assert p == {**PIPE_DEFAULTS, **tile, "SPLITK": splits}
    assert p in registry.get("pipelined").configurations()


def test_auto_choices_are_legal_configurations():
    for splits in (1, 2, 3, 4):
        assert {**PIPE_DEFAULTS, "SPLITK": splits} in registry.get("pipelined").configurations()


def test_auto_follows_alignment():
    """Operands off the 16-byte grid are never read 16 bytes at a time in place: the 4-byte
    variant, or the 16-byte one on staged copies (auto decides; here it stages)."""
    p = gemmlab.plan("auto", 4096, 4096, 4096, aligned16=False)
    assert p.problem.stage and p.spec.pre_pass(p.problem) is not None, p.describe()
    assert p.spec.template_args(p.params, p.problem)[-2] is True  # VEC
    p = gemmlab.plan("pipelined", 4096, 4096, 4096, aligned16=False)  # named: never staged
    assert not p.problem.stage and p.name_expression.endswith(", false, false, 'N', 'N'>")


@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
def test_auto_honours_layouts(op_a, op_b):
    """Each layout compiles its own variant, and the 128 x 256 tile takes the layout's warp
    tiling and stages (pipelined.LAYOUT_TILING: NT's and TT's thread tile 16 x 8 over 2 stages)."""
    own = pipelined.layout_defaults(op_a, op_b)
    assert pipelined.auto_params(4096, 4096, 4096, 132, 1, op_a, op_b)[1] == {**own, "SPLITK": 1}
    for M, N, K in [(4096, 4096, 4096), (1024, 1024, 512), (100, 100, 100000)]:
        p = gemmlab.plan("auto", M, N, K, op_a=op_a, op_b=op_b)
        assert (p.problem.op_a, p.problem.op_b) == (op_a, op_b)
        assert p.name_expression.endswith(f", '{op_a}', '{op_b}'>")
        if (p.params["BM"], p.params["BN"]) == (128, 256):
            assert {k: p.params[k] for k in ("WNITER", "TM", "STAGES")} == {
                k: own[k] for k in ("WNITER", "TM", "STAGES")
            }, p.reason
    for op_a in "NT":
        bt = gemmlab.plan("auto", 4096, 4096, 4096, op_a=op_a, op_b="T").params
        assert (bt["WNITER"], bt["TM"], bt["STAGES"]) == (2, 4, 2)


@pytest.mark.parametrize(
    "M, N, K, batch, splits",
    [
        (4096, 4096, 4096, 7, 1),
        (96, 96, 4096, 1, 4),  # one tile: split-K
        (96, 96, 4096, 33, 4),  # 33 tiles x 4 = 132
        (96, 96, 4096, 34, 3),  # 34 x 4 > 132: 3
        (96, 96, 4096, 66, 1),  # 66 tiles in the batch: half the SMs, no split
    ],
)
def test_auto_counts_a_batch_as_tiles(M, N, K, batch, splits):
    assert _rule(M, N, K, 132, batch) == {**PIPE_DEFAULTS, "SPLITK": splits}
    if batch > 1:  # what auto runs: a split only where the batch's tiles leave SMs idle
        p = gemmlab.plan("auto", M, N, K, sm_count=132, batch=batch)
        tiles = -(-M // p.params["BM"]) * -(-N // p.params["BN"]) * batch
        assert p.params["SPLITK"] == 1 or tiles < 132


# The shipped H100 table at shapes it was not tuned for (choose._fit_nearest): the nearest
# tuned shape's tile, its split-K chosen again for this shape's tiles.
H100 = "nvidia-h100-80gb-hbm3"
H200 = "nvidia-h200"


@pytest.mark.parametrize(
    "M, N, K, splits",
    [
        (128, 4096, 4096, 8),  # 16 tiles of 128 x 256 (nearest 256x4096x4096 split 4: 64 blocks)
        (128, 4096, 28672, 8),
        (128, 6144, 4096, 5),  # 24 tiles: 5 x 24 = 120 <= 132 < 6 x 24
        (128, 14336, 4096, 2),  # 56 tiles: 2 x 56 = 112
        (128, 28672, 4096, 1),  # 112 tiles fill more than half the SMs
        (128, 4096, 96, 3),  # 12 K-steps: 3 slices of 4
    ],
)
def test_nearest_tuned_shape_has_its_split_k_fitted(M, N, K, splits):
    """The table's answer as fitted (what kernel="auto" runs where the cost model keeps it:
    all but the last, whose 12 K-steps the model gives to 64 x 64 tiles unsplit)."""
    found = choose._tuned("auto", choose.Product(M, N, K), choose.GPU("sm_90a", 132, H100))
    params = registry.get("pipelined").resolve(found.params)
    assert found.name == "pipelined" and (params["BM"], params["BN"]) == (128, 256)
    assert params["SPLITK"] == splits
    assert params in registry.get("pipelined").configurations()
    p = gemmlab.plan("auto", M, N, K, sm_count=132, gpu_slug=H100, arch="sm_90a")
    assert (p.params == params) == (K != 96), p.reason


def test_an_output_128_wide_takes_tiles_128_wide():
    """Attention's P @ V (N = 128): a 128 x 256 tile would compute half zeros.  Without a table
    (the H200) the cost model takes 128-wide tiles, split for a single product; the H100's
    table has P @ V's own shapes (tuned in batches of 32 and 128): their winners, and for a
    single product the split chosen again."""
    for batch in (32, 128, 1):
        p = gemmlab.plan("auto", 2048, 128, 2048, sm_count=132, gpu_slug=H200, arch="sm_90a", batch=batch)
        assert p.params["BN"] == 128 and p.reason.startswith("cost model over the tile-count rule"), p.reason
        assert (p.params["SPLITK"] > 1) == (batch == 1)
    for batch, splits in ((32, 1), (128, 1), (1, 4)):
        p = gemmlab.plan("auto", 2048, 128, 2048, sm_count=132, gpu_slug=H100, arch="sm_90a", batch=batch)
        own = tables.load_table(H100).shapes["2048x128x2048"]["best"]["params"]
        assert p.params == {**own, "SPLITK": splits}
    p = gemmlab.plan("auto", 4096, 128, 4096, sm_count=132, gpu_slug=H100, arch="sm_90a", batch=32)
    assert (p.params["BM"], p.params["BN"]) == (64, 128)  # not a neighbour's 128 x 64


@pytest.mark.parametrize("shape", ["256x4096x4096", "8192x64x8192", "1024x1024x1024"])
def test_a_tuned_shape_keeps_its_own_winner(shape):
    from gemmlab.core import tables

    M, N, K = tables.parse_shape_key(shape)
    p = gemmlab.plan("auto", M, N, K, sm_count=132, gpu_slug=H100, arch="sm_90a")
    assert p.params == p.spec.resolve(tables.load_table(H100).shapes[shape]["best"]["params"])


def test_tuned_split_k_is_dropped_when_the_batch_fills_the_gpu():
    """The shipped H100 table picks split-K for 8192x64x8192; a batch of 64 such products does not need it."""
    one = gemmlab.plan("auto", 8192, 64, 8192, sm_count=132, gpu_slug=H100)
    assert one.spec.splits(one.params) > 1
    many = gemmlab.plan("auto", 8192, 64, 8192, sm_count=132, gpu_slug=H100, batch=64)
    assert many.spec.name == one.spec.name and many.spec.splits(many.params) == 1
    assert {k: v for k, v in many.params.items() if k != "SPLITK"} == {
        k: v for k, v in one.params.items() if k != "SPLITK"
    }
    # An explicit SPLITK is the caller's choice and stays.
    p = gemmlab.plan("pipelined", 64, 64, 4096, sm_count=132, batch=1000, SPLITK=4)
    assert p.params["SPLITK"] == 4


def test_auto_refuses_tile_params():
    with pytest.raises(ValueError, match=r"need a named kernel, not kernel='auto'"):
        gemmlab.plan("auto", 64, 64, 64, BM=64)


def test_fill_split_is_the_split_rule_of_rung_8_and_wgmma():
    """One rule behind auto_params, the fitted tuned configuration and wgmma_auto_split: the
    largest allowed split whose blocks fit the SMs with slices of at least min_steps K-steps."""
    assert fill_split(32, 1000, 132, most=4, min_steps=4) == 4
    assert fill_split(32, 1000, 132, most=16, min_steps=16) == 4  # 32 x 6 > 132
    assert fill_split(8, 1000, 132, most=16, min_steps=16) == 16
    assert fill_split(8, 40, 132, most=16, min_steps=16) == 2  # slices of 16 K-steps
    assert fill_split(100, 1000, 132, most=8, min_steps=4) == 1  # 200 > 132
