"""The ec_wgmma rung (Hopper, error-corrected) without a GPU: where it runs, its layouts,
geometry, split-K instantiation and batch workspace."""

import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.kernels.simt.pipelined import SHALLOW_SPLITK_VALUES
from gemmlab.kernels.spec import EC_METHODS, LAYOUTS, Problem

EC_WGMMA = registry.get("ec_wgmma")


def test_ec_wgmma_exists_only_for_sm90a_and_falls_back_to_ec_wmma():
    assert EC_WGMMA.arches == ("sm_90a",) and EC_WGMMA.fallback == "ec_wmma"
    with pytest.raises(
        ValueError, match=r"kernel 'ec_wgmma' does not run on .*sm_80.*needs sm_90a.*run there for fp16_ec: ec_wmma"
    ):
        gemmlab.plan("ec_wgmma", 256, 256, 256, dtype="fp16_ec", arch="sm_80")


@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
@pytest.mark.parametrize("dtype", list(EC_METHODS))
def test_ec_wgmma_takes_every_layout_and_alignment(op_a, op_b, dtype):
    """The split pre-pass reads op(A) and op(B) as stored and writes aligned row-major
    parts, so no layout or alignment falls back, and one instantiation serves them all."""
    p = gemmlab.plan(
        "ec_wgmma",
        4097,
        4095,
        513,
        dtype=dtype,
        op_a=op_a,
        op_b=op_b,
        arch="sm_90a",
        aligned16=False,
        tma_aligned=False,
    )
    assert p.spec.name == "ec_wgmma" and not p.fallback_reason
    assert p.name_expression == f"gemmlab::ec_wgmma<{EC_METHODS[dtype]}, 3, 128, 1, 'N', 'N'>"
    assert p.spec.launching.extra_args == ("scale_a", "scale_b")


@pytest.mark.parametrize(
    "M, N, sm_count",
    [(1, 1, 132), (128, 128, 132), (129, 257, 132), (4096, 4096, 132), (2000, 1900, 114), (100, 9000, 7)],
)
def test_ec_wgmma_geometry(M, N, sm_count):
    """A persistent grid of at most one block per SM (the ring fills its shared memory), one
    producer and two consumer warpgroups; block b takes work items b, b + grid, ... -- the
    128 x BN tiles in grouped order (tensor/04_wgmma.cuh), each SPLITK times (a slice of K
    each) -- together all of them once."""
    configs = EC_WGMMA.configurations()
    assert {p["SPLITK"] for p in configs} == set(SHALLOW_SPLITK_VALUES)
    for p in configs:
        geo = EC_WGMMA.launch(p, Problem(M, N, 64, True, "fp16_ec", sm_count=sm_count))
        items = -(-M // 128) * -(-N // p["BN"]) * p["SPLITK"]
        assert geo.grid == (min(items, sm_count), 1, 1) and geo.persistent and geo.block == (384, 1, 1)
        stage = {96: 57344, 128: 65536}[p["BN"]]  # hi and lo of 128 rows of A and BN of B^T, 128 bytes each
        # FOLD: each consumer's BN column scales (split_scaled.cu's), and each of the 8 consumer
        # warps' 16 x 32 chunk of C on its way out (rows padded to 160 bytes)
        staged = (2 * p["BN"] * 4 + 8 * 16 * 160) * p["FOLD"]
        tail = 16  # the consumers' flags of the stream-K tail
        assert geo.smem_bytes == p["STAGES"] * stage + 16 * p["STAGES"] + tail + staged + 1024 <= 227 * 1024
        # A batch is one launch: the work items of every matrix share the persistent grid.
        for batch in (2, 40):
            geo = EC_WGMMA.launch(p, Problem(M, N, 64, True, "fp16_ec", sm_count=sm_count), batch)
            assert geo.grid == (min(items * batch, sm_count), 1, 1), (batch, geo.grid)


@pytest.mark.parametrize("dtype", list(EC_METHODS))
def test_ec_wgmma_split_is_the_unsplit_instantiation(dtype):
    """Split over K, ec_wgmma writes FP32 partial tiles, as it writes C: one instantiation
    serves every SPLITK (the split is a kernel argument), and the plan carries the split."""
    names = set()
    for splits in SHALLOW_SPLITK_VALUES:
        p = gemmlab.plan("ec_wgmma", 130, 200, 1000, dtype=dtype, arch="sm_90a", SPLITK=splits)
        assert p.spec.splits(p.params) == splits and EC_WGMMA.split_k_param == "SPLITK"
        names.add(p.name_expression)
    assert names == {f"gemmlab::ec_wgmma<{EC_METHODS[dtype]}, 3, 128, 1, 'N', 'N'>"}
    # METHOD x (STAGES 2-4 at BN 96 without FOLD, 2-3 with FOLD, whose epilogue buffers leave no
    # room for a fourth stage, 2-3 at BN 128 with FOLD), whatever the split
    assert len(EC_WGMMA.all_name_expressions()) == 2 * (3 + 2 + 2)


def test_ec_wgmma_takes_a_batch_and_sizes_its_parts():
    """One launch per batch (chunk); the parts of a matrix, the executor's chunking unit: hi
    and lo of A (M x K) and B^T (N x K), K padded to 8, 4 bytes an element (the layout for
    either part type)."""
    from gemmlab.core.executor import BATCH_WORKSPACE_LIMIT
    from gemmlab.kernels.ec.ec_wgmma import ec_parts_bytes

    assert EC_WGMMA.launching.batched_args and EC_WGMMA.launching.batch_workspace is ec_parts_bytes
    assert ec_parts_bytes(Problem(2048, 128, 2048, True, "fp16_ec")) == 2 * (2048 + 128) * 2048 * 4
    assert ec_parts_bytes(Problem(7, 5, 9, True, "tf32_ec")) == 2 * 12 * 16 * 4
    # P @ V at S = 4096 (132 MiB of parts a matrix): seven matrices a launch.
    assert BATCH_WORKSPACE_LIMIT // ec_parts_bytes(Problem(4096, 128, 4096, True, "fp16_ec")) == 7
