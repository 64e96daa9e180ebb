"""The gemv rung (products of a few rows) without a GPU: geometry, row blocks, alignment and
kernel="auto"'s take on it.  On a GPU: test_gemv.py."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.kernels.gemv.gemv import GEMV_MAX_M, GEMV_ROWS_MAX_M, auto_takes as gemv_auto_takes
from gemmlab.kernels.spec import Ask, Problem


@pytest.mark.parametrize(
    "op_b, aligned, dtype, vec, per_block, chunk",
    [
        ("T", True, "float32", 4, 32, None),
        ("T", True, "bfloat16", 8, 32, None),
        ("T", False, "float16", 1, 32, None),
        ("N", True, "float32", 4, 128, 64),
        ("N", True, "bfloat16", 4, 128, 64),
        ("N", False, "bfloat16", 1, 32, 64),
        ("N", False, "float32", 1, 32, 64),
    ],
)
def test_gemv_geometry(op_b, aligned, dtype, vec, per_block, chunk):
    """op(B) column-major: a warp (of 8 a block) per 4 columns, 16-byte loads along K;
    row-major (at the default MT = 8): 32 lanes along N with 4 elements each (16 or 8
    bytes), 32 * VEC columns a block, SPLITK blocks along K, chunks of 8 warps x 8 rows."""
    from gemmlab.kernels.gemv.gemv import gemv_row_chunk, gemv_vec

    spec = registry.get("gemv")
    for N in (1, 7, 8, 9, 4096, 128256):
        prob = Problem(3, N, 100, aligned, dtype, dtype).with_layout("N", op_b)
        assert gemv_vec(prob, spec.defaults()["MT"]) == vec
        geo = spec.launch(spec.defaults(), prob)
        assert geo.block == (256, 1, 1) and geo.grid == (-(-N // per_block), 1, 1)
        assert spec.name_expression(spec.defaults(), prob).endswith(f", {str(aligned).lower()}, 32, 'N', '{op_b}'>")
        if op_b == "N":
            assert gemv_row_chunk(prob, spec.defaults()["MT"], 32) == chunk
            assert spec.launch({**spec.defaults(), "SPLITK": 6}, prob).grid == (-(-N // per_block), 6, 1)
            # split: the float32-output instantiation (FP32 partial products, whatever C's dtype)
            fp32_out = Problem(3, N, 100, aligned, dtype, "float32").with_layout("N", op_b)
            assert spec.name_expression({**spec.defaults(), "SPLITK": 6}, prob) == spec.name_expression(
                spec.defaults(), fp32_out
            )
        else:
            with pytest.raises(ValueError, match="gemv's LANES applies where op.B. is row-major"):
                spec.launch({**spec.defaults(), "MT": 4, "LANES": 8}, prob)
            if dtype == "float32":  # split over K too (gridDim.y), the float32 path only
                assert spec.launch({**spec.defaults(), "SPLITK": 3}, prob).grid == (-(-N // per_block), 3, 1)
            else:
                with pytest.raises(ValueError, match="column-major .x @ W.t... in float32 only"):
                    spec.launch({**spec.defaults(), "SPLITK": 2}, prob)
            # the column path has one instantiation whatever LANES says
            assert spec.name_expression({**spec.defaults(), "MT": 4, "LANES": 8}, prob) == spec.name_expression(
                {**spec.defaults(), "MT": 4}, prob
            )


@pytest.mark.parametrize(
    "dtype, mt, lanes, vec, per_block, chunk",
    [
        ("float32", 1, 8, 4, 32, 256),
        ("float32", 4, 4, 4, 16, 512),
        ("bfloat16", 1, 8, 8, 64, 256),
        ("bfloat16", 4, 4, 8, 32, 512),
        ("bfloat16", 8, 32, 4, 128, 64),
        ("float16", 2, 32, 8, 256, 64),
    ],
)
def test_gemv_narrow_row_blocks(dtype, mt, lanes, vec, per_block, chunk):
    """Row-major op(B): LANES lanes along a row, each VEC columns (16 bytes of 16-bit
    elements up to 4 rows of C), so a block takes LANES * VEC columns and a chunk 8 warps x
    32 / LANES row groups x 8 rows; narrow blocks only for MT <= 4."""
    from gemmlab.kernels.gemv.gemv import gemv_row_chunk, gemv_row_columns, gemv_vec

    spec = registry.get("gemv")
    prob = Problem(mt, 4096, 4096, True, dtype, dtype).with_layout("N", "N")
    params = {"MT": mt, "SPLITK": 1, "LANES": lanes}
    assert gemv_vec(prob, mt) == vec and gemv_row_columns(prob, mt, lanes) == per_block
    assert gemv_row_chunk(prob, mt, lanes) == chunk
    assert spec.launch(params, prob).grid == (4096 // per_block, 1, 1)
    assert spec.name_expression(params, prob).endswith(f", true, {lanes}, 'N', 'N'>")
    with pytest.raises(ValueError, match="LANES < 32 .* MT <= 4"):
        gemmlab.plan("gemv", 8, 4096, 4096, op_b="N", MT=8, LANES=8)


@pytest.mark.parametrize("M, mt", [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8), (13, 16), (16, 16)])
@pytest.mark.parametrize("dtype, out", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float32")])
def test_auto_takes_gemv_for_a_few_rows(M, mt, dtype, out):
    """x @ W.t() (op(B) column-major) with at most GEMV_MAX_M[dtype] rows: 16 for
    float32, 4 for the 16-bit types (run 82)."""
    plan = lambda M, op_b="T", dtype=dtype: gemmlab.plan(  # noqa: E731
        "auto",
        M,
        8192,
        8192,
        dtype=dtype,
        out_dtype=out if dtype != "tf32" else "float32",
        op_b=op_b,
        arch="sm_90a",
        gpu_slug="nvidia-h100-80gb-hbm3",
    )
    takes = M <= GEMV_MAX_M[dtype]
    offer = registry.get("gemv").rules.offer(Ask(M, 8192, 8192, dtype=dtype, op_b="T", arch="sm_90a"))
    assert offer.takes == takes
    if takes:
        assert offer.params == {"MT": mt, "SPLITK": 1, "LANES": 32}
    # 16-bit x @ W.t() of up to 8 rows goes to gemv_mma, which auto asks first (sm_80 on);
    # more rows over this W (128 MiB) to wgmma
    want = {"float32": "gemv" if takes else None}.get(dtype, "gemv_mma" if M <= 8 else "wgmma")
    assert want is None or plan(M).spec.name == want
    if dtype == "float32" and takes:
        assert plan(M).params == {"MT": mt, "SPLITK": 1, "LANES": 32}
    # op(B) row-major: gemv where GEMV_ROWS_MAX_M takes it (16-bit: W of 128 MiB here, over the
    # 64 MiB gemv takes in 16-bit), else the tiled rungs
    assert (plan(M, "N").spec.name == "gemv") == (M <= GEMV_ROWS_MAX_M[dtype] and dtype == "float32")
    assert plan(GEMV_MAX_M[dtype] + 1).spec.name != "gemv"
    assert plan(GEMV_ROWS_MAX_M[dtype] + 1, "N").spec.name != "gemv"
    assert plan(M, dtype="tf32").spec.name != "gemv"


@pytest.mark.parametrize(
    "M, N, K, batch, aligned, split, lanes",
    [
        (1, 4096, 4096, 1, True, 1, 8),  # 32-column blocks: 128 of them fill 132 SMs unsplit
        (4, 4096, 128256, 1, True, 1, 8),
        (16, 4096, 4096, 1, True, 4, 32),  # 16 rows: 128-column blocks only, 32 of them split by 4
        (16, 4096, 128256, 1, True, 4, 32),
        (4, 14336, 4096, 1, True, 1, 32),  # 112 column blocks fill most of the 132 SMs already
        (16, 14336, 4096, 1, True, 1, 32),
        (16, 4096, 512, 1, True, 2, 32),  # 8 chunks of 64 rows: slices of at least 4
        (16, 4096, 4096, 4, True, 1, 32),  # a batch of 4 fills the SMs
        (1, 2048, 4096, 1, True, 1, 4),  # 64 blocks of 32 columns too few: 16 columns (64-byte rows)
        (1, 2048, 131072, 1, True, 2, 8),  # ... but over 256 MiB of W, 32 columns split over K
        (1, 331, 1037, 1, False, 1, 4),  # one element a lane: 83 blocks of 4 columns, 3 chunks of 512 rows
        # none fills unsplit: 48 blocks of 16 columns split by 2 keep 96 SMs busy, 24 of 32
        # columns split by 5 keep 120 (a one-token dY @ W of a vocabulary-long K)
        (1, 768, 51865, 1, True, 5, 8),
        (1, 768, 51865, 1, False, 1, 4),  # (one element a lane: 192 blocks of 4 columns fill it)
        (1, 2304, 256000, 1, True, 7, 32),  # over 256 MiB: 18 blocks of 128 columns split by 7, not 72 of 32
    ],
)
def test_gemv_auto_row_major_b_blocks_and_split(M, N, K, batch, aligned, split, lanes):
    """float32 dY @ W: MT as rules.size; the widest blocks (LANES) that fill 3/4 of 132 SMs
    unsplit, else the width whose split (fill_split) keeps the most SMs busy, the smaller split
    where two keep as many."""
    p = gemmlab.plan(
        "auto", M, N, K, op_b="N", batch=batch, aligned16=aligned, arch="sm_90a", gpu_slug="nvidia-h100-80gb-hbm3"
    )
    assert p.spec.name == "gemv" and p.params == {
        "MT": min(16, 1 << (M - 1).bit_length()),
        "SPLITK": split,
        "LANES": lanes,
    }
    assert p.spec.splits(p.params) == split
    # x @ W.t() (op(B) column-major) over the same W: split only where its blocks leave SMs idle
    xw = gemmlab.plan("auto", M, N, K, op_b="T", batch=batch, aligned16=aligned, arch="sm_90a")
    blocks, split = -(-N // 32) * batch, xw.params["SPLITK"]
    assert split == 1 if blocks >= 0.75 * 132 else blocks * split <= 2 * 132


@pytest.mark.parametrize(
    "N, K, lanes, split",
    [
        (4096, 4096, 4, 1),  # o's dY @ W at one token: 16-byte loads, 32-column blocks, 128 of them
        (4096, 6144, 4, 1),
        (4096, 8192, 4, 1),  # 64 MiB of W: the largest gemv takes
        (14336, 4096, None, None),  # down's: 117 MB, wgmma's ring
        (4096, 128256, None, None),
    ],
)
def test_gemv_auto_takes_one_row_16_bit_dy_w_up_to_64_mib(N, K, lanes, split):
    """16-bit dY @ W at one row runs gemv's row path where W is at most 64 MiB (run 89c);
    at two rows, or on a larger W, wgmma."""
    for dtype in ("bfloat16", "float16"):
        p = gemmlab.plan("auto", 1, N, K, dtype=dtype, out_dtype=dtype, op_b="N", arch="sm_90a", sm_count=132)
        if lanes is None:
            assert p.spec.name == "wgmma"
        else:
            assert p.spec.name == "gemv" and p.params == {"MT": 1, "SPLITK": split, "LANES": lanes}
        assert (
            gemmlab.plan("auto", 2, N, K, dtype=dtype, out_dtype=dtype, op_b="N", arch="sm_90a", sm_count=132).spec.name
            == "wgmma"
        )
    assert gemv_auto_takes(1, "bfloat16", "N", 4096, 8192)
    assert not gemv_auto_takes(1, "bfloat16", "N", 4096, 8193)
    assert gemv_auto_takes(1, "float32", "N", 4096, 128256)  # float32: any size


def test_gemv_aligned_is_about_the_rows_it_reads_16_bytes_at_a_time():
    """ALIGNED (gemv_aligned): op(B)'s stored rows start on the 16-byte grid, and where op(B)
    is column-major (the column path stages op(A) 16 bytes at a time) a row-major op(A)'s;
    C's never matter (stored element by element), nor op(A)'s in the row path (checked in
    the kernel) or a column-major op(A)'s (staged element by element)."""
    from gemmlab.kernels.gemv.gemv import gemv_aligned

    spec = registry.get("gemv")
    for op_a, op_b, rows, aligned in [
        ("N", "T", "AB", True),
        ("N", "T", "B", False),
        ("T", "T", "B", True),
        ("N", "N", "B", True),
        ("T", "N", "B", True),
        ("N", "N", "AC", False),
        ("N", "T", "ABC", True),
        ("N", "N", "", False),
    ]:
        prob = Problem(1, 51865, 768, False, "bfloat16", "bfloat16", op_a, op_b, rows_aligned16=rows)
        assert gemv_aligned(prob) == aligned, (op_a, op_b, rows)
        assert spec.name_expression({**spec.defaults(), "MT": 1}, prob).endswith(
            f", {str(aligned).lower()}, 32, '{op_a}', '{op_b}'>"
        )
    assert gemv_aligned(Problem(1, 1, 1, True, op_a="N", op_b="T"))  # aligned16: every operand's rows


def test_rows_on_the_16_byte_grid_ignore_the_width_and_a_single_rows_stride():
    """planner's _Side.rows_aligned16: base, batch strides and, for more than one stored
    row, the leading dimension; aligned16 also wants every row's width a multiple of 16
    bytes.  The three products of a one-token step with an odd vocabulary (51865)."""
    from gemmlab.core import planner

    V, D = 51865, 768
    W, x, dY = np.zeros((V, D), np.float32), np.zeros((1, D), np.float32), np.zeros((1, V), np.float32)
    for a, b, M, N, K, rows in [
        (x, W.T, 1, V, D, "ABC"),
        (dY, W, 1, D, V, "ABC"),
        (dY.T, x, V, D, 1, "ABC"),
        (np.zeros((3, V), np.float32), W, 3, D, V, "BC"),
        (np.zeros((3, D), np.float32), W.T, 3, V, D, "AB"),
    ]:
        call = planner.validate(a, b, None, 1.0, 0.0, False, False, None, None)
        kv = planner.kernel_view(
            call, planner.result_side(call), {"A": a.ctypes.data - a.ctypes.data % 16, "B": 0, "C": 0}
        )
        assert (kv.M, kv.N, call.K) == (M, N, K)
        assert kv.rows_aligned16() == rows and not kv.aligned16()
    # the shapes suite's contiguous operands say the same
    assert planner.contiguous_rows_aligned16(1, V, D, "N", "T") == "ABC"
    assert planner.contiguous_rows_aligned16(V, D, 1, "T", "N") == "ABC"
    assert planner.contiguous_rows_aligned16(3, D, V, "N", "N") == "BC"
    assert planner.contiguous_rows_aligned16(3, V, D, "N", "T", "bfloat16") == "AB"


@pytest.mark.parametrize(
    "M, N, K, batch, dtype, aligned, split",
    [
        (1, 2048, 8192, 1, "float32", True, 2),  # 64 blocks: two waves' fill at most; 128 of 132
        (4, 2048, 8192, 1, "float32", True, 2),
        (1, 2304, 9216, 1, "float32", True, 3),  # 72 blocks: 216 in two waves, not 144 (one SM in 11 twice)
        (1, 512, 2048, 1, "float32", True, 8),  # 16 blocks; 8 chunks of 256: a chunk a slice
        (1, 576, 1536, 1, "float32", True, 6),  # 18 blocks, 6 chunks
        (1, 3072, 3072, 1, "float32", True, 1),  # 96 blocks: split 2 would make two waves of half as long
        (1, 2048, 8192, 4, "float32", True, 1),  # a batch of 4 fills the SMs
        (1, 8192, 8192, 1, "float32", True, 1),  # 256 blocks fill them unsplit
        (1, 2048, 256, 1, "float32", True, 1),  # one chunk: nothing to split
        (1, 2048, 8192, 1, "bfloat16", True, 1),  # the 16-bit column path is not split
    ],
)
def test_gemv_auto_splits_the_column_path_where_its_blocks_leave_sms_idle(M, N, K, batch, dtype, aligned, split):
    """x @ W.t() (op(B) column-major): N / 32 blocks; where they reach less than GEMV_ROW_FILL of
    the SMs, K is split (float32): the split whose waves of one block an SM (at most two) take
    least of a block's time, the smaller where two tie."""
    from gemmlab.kernels.gemv.gemv import auto_params

    p = auto_params(M, N, K, 132, batch, dtype=dtype, op_b="T", aligned16=aligned)
    assert p["SPLITK"] == split and p["LANES"] == 32
