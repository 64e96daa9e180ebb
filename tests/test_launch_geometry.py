"""Launch geometry of the tiled rungs: every grid covers each tile of C once with blocks of
the sources' shape, and pipelined's dynamic shared memory (pure Python, no GPU)."""

import math

import numpy as np
import pytest

from gemmlab.kernels import registry
from gemmlab.kernels.simt.pipelined import PIPELINED_SMEM_LIMIT, SPLITK_VALUES, pipelined_smem
from gemmlab.kernels.spec import Problem

SPECS = registry.ladder()


# -- grids and blocks -----------------------------------------------------------------------

COLUMN_MAJOR_TILES = ("naive", "coalesced")  # the untiled rungs number tiles down the columns
SIZES = [(1, 1), (7, 13), (31, 33), (64, 64), (127, 129), (128, 128), (129, 257), (1000, 1000), (4097, 31), (17, 4099)]


def block_tile(spec, p):
    """(BM, BN, outputs per thread) of one block, as the kernel sources define them."""
    if spec.name in ("naive", "coalesced"):
        return 32, 32, 1
    if spec.name == "smem_tiled":
        return p["tile"], p["tile"], 1
    if spec.name == "blocktile_1d":
        return p["BM"], p["BN"], p["TM"]
    if spec.name in ("warptile", "pipelined", "wmma_warptile", "mma_pipelined"):
        return p["BM"], p["BN"], p["WM"] * p["WN"] // 32
    if spec.name == "ec_wmma":  # warps of 32 x 32
        return p["BM"], p["BN"], 32
    return p["BM"], p["BN"], p["TM"] * p["TN"]


def expected_block(spec, p):
    if spec.name in ("naive", "coalesced"):
        return (32, 32, 1)
    if spec.name == "smem_tiled":
        return (p["tile"], p["tile"], 1)
    if spec.name == "blocktile_1d":
        return ((p["BM"] // p["TM"]) * p["BN"], 1, 1)
    if spec.name in ("warptile", "pipelined", "wmma_warptile", "mma_pipelined"):
        return ((p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32, 1, 1)
    if spec.name == "ec_wmma":
        return ((p["BM"] // 32) * (p["BN"] // 32) * 32, 1, 1)
    return ((p["BM"] // p["TM"]) * (p["BN"] // p["TN"]), 1, 1)


def _cases():
    # wmma numbers warp tiles (test_wmma_geometry, test_tensor_rules.py); wgmma, wgmma_fp8,
    # grouped, grouped_wgrad and ec_wgmma are persistent (test_wgmma_geometry,
    # test_geometry_is_a_persistent_grid, test_grouped_geometry, test_ec_wgmma_geometry, in
    # test_wgmma_rules.py, test_wgmma_fp8_rules.py, test_grouped_rules.py and
    # test_ec_wgmma_rules.py); wgmma's steps number their tiles in grouped order or are
    # persistent (test_step_geometry, test_wgmma_steps.py); gemv and outer have no tile
    # parameters (test_gemv_geometry, test_outer_geometry, in test_gemv_rules.py and
    # test_outer_rules.py).
    steps = ("wgmma_tma", "wgmma_specialized", "wgmma_persistent")
    elsewhere = ("wmma", "wgmma", "wgmma_fp8", "grouped", "grouped_wgrad", "ec_wgmma") + steps
    for spec in [s for s in SPECS if s.name not in elsewhere and s.family != "gemv"]:
        configs = spec.configurations()
        if spec.split_k_param:  # every tile shape unsplit, and the defaults with each split
            configs = [p for p in configs if p[spec.split_k_param] == 1] + [
                {**spec.defaults(), spec.split_k_param: s} for s in SPLITK_VALUES if s > 1
            ]
        for p in configs:
            yield pytest.param(spec, p, id=spec.name + "".join(f"-{k}{v}" for k, v in p.items()))


@pytest.mark.parametrize("spec, p", list(_cases()))
def test_launch_covers_every_output(spec, p):
    """The 1-D grid, numbered over tiles as tile_order.cuh's block_tile_origin (row-major)
    or block_tile_origin_colmajor does, hits every BM x BN tile of C once, and no
    block starts outside C."""
    BM, BN, per_thread = block_tile(spec, p)
    for M, N in SIZES:
        for aligned in (True, False):
            geo = spec.launch(p, Problem(M, N, 64, aligned))
            assert geo.block == expected_block(spec, p)
            threads = math.prod(geo.block)
            assert 0 < threads <= 1024
            assert threads * per_thread == BM * BN, "threads x outputs per thread must fill the tile"
            assert geo.grid[1:] == (spec.splits(p), 1)  # gridDim.y: blocks per tile (split-K)
            blocks = geo.grid[0]
            tiles_m, tiles_n = -(-M // BM), -(-N // BN)
            bid = np.arange(blocks)
            if spec.name in COLUMN_MAJOR_TILES:  # block_tile_origin_colmajor
                rows0, cols0 = (bid % tiles_m) * BM, (bid // tiles_m) * BN
            else:  # block_tile_origin
                rows0, cols0 = (bid // tiles_n) * BM, (bid % tiles_n) * BN
            assert (rows0 < M).all() and (cols0 < N).all(), "a block starts outside C"
            origins = set(zip(rows0.tolist(), cols0.tolist()))
            assert len(origins) == blocks, "two blocks share a tile"
            assert blocks == math.ceil(M / BM) * math.ceil(N / BN), (M, N, blocks)
            if aligned and blocks <= 5000:  # direct check, where cheap
                covered = np.zeros((M, N), dtype=np.int32)
                for r, c in origins:
                    covered[r : r + BM, c : c + BN] += 1
                assert (covered == 1).all(), (M, N)


def test_launch_geometry_examples():
    v = registry.get("vectorized")
    geo = v.launch({"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}, Problem(4096, 4096, 4096, True))
    assert geo.grid == (32 * 32, 1, 1) and geo.block == (256, 1, 1)
    geo = v.launch({"BM": 64, "BN": 128, "BK": 16, "TM": 8, "TN": 4}, Problem(4096, 1000, 4096, False))
    assert geo.grid == (64 * 8, 1, 1) and geo.block == (8 * 32, 1, 1)
    n = registry.get("naive")
    geo = n.launch({}, Problem(33, 65, 1, True))
    assert geo.grid == (2 * 3, 1, 1) and geo.block == (32, 32, 1)


# -- pipelined's dynamic shared memory -----------------------------------------------------


def test_pipelined_asks_for_its_dynamic_shared_memory():
    """08_pipelined.cu keeps STAGES tiles of transposed A (rows of BM + 4) and B in dynamic shared memory."""
    spec = registry.get("pipelined")
    for p in spec.configurations():
        geo = spec.launch(p, Problem(300, 300, 300, True))
        assert geo.smem_bytes == 4 * p["STAGES"] * p["BK"] * (p["BM"] + 4 + p["BN"])
        assert geo.smem_bytes <= 96 * 1024
    assert max(spec.launch(p, Problem(1, 1, 1, True)).smem_bytes for p in spec.configurations()) > 48 * 1024


def test_pipelined_pads_the_b_tile_only_when_b_is_transposed():
    """Rung 8 copies a column-major B tile transposed into rows padded by 4 floats
    (as it does A's); the legality rule counts the padded size."""
    spec = registry.get("pipelined")
    d = spec.defaults()
    nn = spec.launch(d, Problem(4096, 4096, 4096, True)).smem_bytes
    nt = spec.launch(d, Problem(4096, 4096, 4096, True, op_b="T")).smem_bytes
    assert nn == 4 * d["STAGES"] * d["BK"] * (d["BM"] + 4 + d["BN"])
    assert nt == nn + 4 * d["STAGES"] * d["BK"] * 4
    assert spec.launch(d, Problem(4096, 4096, 4096, True, op_a="T")).smem_bytes == nn
    assert all(pipelined_smem(c) <= PIPELINED_SMEM_LIMIT for c in spec.configurations())
