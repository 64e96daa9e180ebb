"""The tensor-core rungs below wgmma without a GPU: wmma's instantiations and geometry;
mma_pipelined's tiles, shared memory, instantiations and kernel="auto" off Hopper."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.kernels.spec import Problem

# The (input, output) dtype pairs every tensor-core rung computes, written out here (not read
# from the specs) so that the tests state what the rungs must take.
TC_PAIRS = [
    ("float16", "float32"),
    ("float16", "float16"),
    ("bfloat16", "float32"),
    ("bfloat16", "bfloat16"),
    ("tf32", "float32"),
]


# -- wmma -----------------------------------------------------------------------------------


def test_wmma_name_expressions_follow_the_dtypes():
    spec = registry.get("wmma")
    codes = {"float16": 0, "bfloat16": 1, "tf32": 2, "float32": 3}
    for dt, odt in TC_PAIRS:
        prob = Problem(10, 10, 10, True, dt, odt)
        spec.check_dtypes(prob)
        assert spec.name_expression({}, prob) == f"gemmlab::wmma_tile<{codes[dt]}, {codes[odt]}, 'N', 'N'>"
    assert len(spec.all_name_expressions()) == 5 * 4  # x 4 layouts
    for dt, odt in [("float16", "bfloat16"), ("tf32", "float16"), ("float32", "float32")]:
        with pytest.raises(TypeError):
            spec.check_dtypes(Problem(10, 10, 10, True, dt, odt))


@pytest.mark.parametrize("M, N", [(1, 1), (16, 16), (17, 33), (1000, 70), (64, 4097)])
def test_wmma_geometry(M, N):
    """01_wmma.cu: warp w of the grid owns the 16x16 tile w (row-major over tiles); 4 warps
    per block; every tile has a warp, the spare warps of the last block start outside C."""
    geo = registry.get("wmma").launch({}, Problem(M, N, 8, True, "float16", "float32"))
    assert geo.block == (128, 1, 1) and geo.grid[1:] == (1, 1)
    tiles_n, tiles = -(-N // 16), -(-M // 16) * -(-N // 16)
    warps = np.arange(geo.grid[0] * 4)
    rows0, cols0 = (warps // tiles_n) * 16, (warps % tiles_n) * 16
    inside = rows0 < M
    assert inside.sum() == tiles and (cols0 < N).all()
    assert geo.grid[0] == -(-tiles // 4)


# -- mma_pipelined ---------------------------------------------------------------------------

MMA_SMALL = {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 4}


def test_mma_pipelined_configurations():
    """The legal set: 64 x 64 blocks of 4 warps (32 x 32), and 128 x 256 / 256 x 128 blocks of
    8 warps (64 x 64), each with 3 or 4 stages of BK = 32, or 64 where 160 KiB allow."""
    got = {(c["BM"], c["BN"], c["BK"], c["WM"], c["STAGES"]) for c in registry.get("mma_pipelined").configurations()}
    assert got == {(64, 64, bk, 32, st) for bk in (32, 64) for st in (3, 4)} | {
        (bm, bn, 32, 64, st) for bm, bn in ((128, 256), (256, 128)) for st in (3, 4)
    } | {(128, 256, 64, 64, 3), (256, 128, 64, 64, 3)}


@pytest.mark.parametrize(
    "params, rule",
    [
        (dict(BM=128, BN=128), "64 x 64 warp tiles in blocks of 8 warps"),
        (dict(BM=128, BN=128, WM=32, WN=32), "32 x 32 warp tiles only in a 64 x 64 block"),
        (dict(WN=32), "square warp tiles, WM == WN"),
        (dict(BK=64, STAGES=4), "must fit in 160 KiB"),
    ],
)
def test_mma_pipelined_illegal_combinations(params, rule):
    spec = registry.get("mma_pipelined")
    with pytest.raises(ValueError, match=r"not a legal combination for kernel 'mma_pipelined'") as info:
        spec.resolve(params)
    assert rule in str(info.value)


def test_mma_pipelined_shared_memory_and_geometry():
    """STAGES stages of an A tile (BM rows of 2*BK bytes) and a B tile (2*BK bytes of K, BN columns),
    the same bytes for every dtype; one block per BM x BN tile."""
    spec = registry.get("mma_pipelined")
    for p in spec.configurations():
        for prob in spec.variants:
            geo = spec.launch(p, Problem(1000, 700, 300, prob.aligned16, prob.dtype, prob.out_dtype))
            assert geo.smem_bytes == p["STAGES"] * 2 * p["BK"] * (p["BM"] + p["BN"]) <= 160 * 1024
            assert geo.grid == (-(-1000 // p["BM"]) * -(-700 // p["BN"]), 1, 1)
    assert spec.launch(spec.defaults(), Problem(1, 1, 1, True)).smem_bytes == 3 * 128 * 384


def test_mma_pipelined_name_expressions():
    """Template arguments: dtype codes, the tile parameters, then the 16-byte-copy flag."""
    spec = registry.get("mma_pipelined")
    d = spec.defaults()
    assert (
        spec.name_expression(d, Problem(9, 9, 9, True, "float16", "float16"))
        == "gemmlab::mma_pipelined<0, 0, 128, 256, 64, 64, 64, 3, true, 'N', 'N'>"
    )
    assert (
        spec.name_expression(d, Problem(9, 9, 9, False, "tf32", "float32"))
        == "gemmlab::mma_pipelined<2, 3, 128, 256, 64, 64, 64, 3, false, 'N', 'N'>"
    )
    assert len(spec.variants) == 10
    assert {(v.dtype, v.out_dtype, v.aligned16) for v in spec.variants} == {
        (dt, odt, al) for dt, odt in TC_PAIRS for al in (True, False)
    }


# kernel="auto" for 16-bit and TF32 (mma_pipelined's rules.size, through choose.sized_choice): mma_pipelined at its defaults
# when 2 * ceil(M/128) * ceil(N/256) >= sm_count (half of the SMs busy), else its 64 x 64 tiles,
# unless the cost model predicts the other clearly faster (mma_pipelined.sized_choice).
@pytest.mark.parametrize(
    "M, N, K, sm_count, big",
    [
        (4096, 4096, 4096, 132, True),  # 32 * 16 = 512 tiles
        (2048, 2048, 2048, 132, True),  # 16 * 8 = 128 >= 66
        (1024, 1024, 1024, 132, False),  # 8 * 4 = 32 < 66
        (1281, 1536, 64, 132, True),  # 11 * 6 = 66 (ceiling of 1281 / 128): exactly half
        (1280, 1536, 64, 132, False),  # 10 * 6 = 60
        (17, 1, 9, 132, False),  # more rows than gemv takes, more K than outer takes
        # One tile keeps half of 2 SMs busy, but a 128 x 256 tile over a 17 x 1 output is all
        # waste: the cost model takes 64 x 64.
        (17, 1, 9, 2, False),
    ],
)
@pytest.mark.parametrize("dtype, out_dtype", [("float16", "float16"), ("bfloat16", "float32"), ("tf32", "float32")])
def test_auto_for_tensor_dtypes(M, N, K, sm_count, big, dtype, out_dtype):
    p = gemmlab.plan("auto", M, N, K, sm_count=sm_count, dtype=dtype, out_dtype=out_dtype)
    spec = registry.get("mma_pipelined")
    assert p.spec is spec
    assert p.params == (spec.defaults() if big else MMA_SMALL)
    assert p.problem.dtype == dtype and p.problem.out_dtype == out_dtype
    assert MMA_SMALL in spec.configurations()


def test_auto_for_tensor_dtypes_follows_alignment():
    assert gemmlab.plan(
        "auto", 64, 64, 64, aligned16=False, dtype="float16", out_dtype="float16"
    ).name_expression.endswith(", false, 'N', 'N'>")
    assert gemmlab.plan(
        "auto", 64, 64, 64, aligned16=True, dtype="float16", out_dtype="float16"
    ).name_expression.endswith(", true, 'N', 'N'>")


@pytest.mark.parametrize(
    "M, N, K, dtype, out_dtype, aligned",
    [
        (10, 16, 8, "float16", "float16", True),  # rows of 16 and 32 bytes
        (10, 12, 8, "float16", "float16", False),  # B and C rows of 24 bytes
        (10, 8, 8, "float16", "float32", True),
        (10, 16, 12, "bfloat16", "float32", False),  # A rows of 24 bytes
        (10, 4, 4, "tf32", "float32", True),
        (10, 6, 4, "tf32", "float32", False),
        (10, 8, 6, "float32", "float32", False),  # float32: K and N multiples of 4, as before
        (10, 8, 4, "float32", "float32", True),
    ],
)
def test_contiguous_alignment_counts_bytes(M, N, K, dtype, out_dtype, aligned):
    """16-byte accesses need 16-byte rows: 4 floats, or 8 16-bit elements; each operand in its
    own element size (a float32 output of 16-bit inputs has wider rows)."""
    from gemmlab.core.planner import contiguous_aligned16

    assert contiguous_aligned16(M, N, K, dtype=dtype, out_dtype=out_dtype) is aligned
