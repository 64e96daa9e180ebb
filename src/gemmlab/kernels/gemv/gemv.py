"""GEMV rung 1, gemv/01_gemv.cu: op(B) streamed once, the sums of MT rows of C in registers.

For the products a tiled GEMM wastes its tiles on: M (the rows of op(A) and C)
of 1 to 16, as in a decode step.  Every storage type (float32, float16,
bfloat16) is multiplied on the CUDA cores in FP32; the time is the read of
op(B).
"""

from __future__ import annotations

from ..cuda_constants import read_constants
from ..simt.pipelined import SHALLOW_SPLIT_MAX, SHALLOW_SPLITK_VALUES, fill_split
from ..spec import TYPE_CODES, Ask, Constraint, KernelSpec, Launch, Offer, Problem, Rules, TileParam, cdiv
from ..tensor.wgmma_tma import WGMMA_SM90

_K = read_constants("gemv/01_gemv.cu")
GEMV_THREADS, GEMV_WARPS = _K["GEMV_THREADS"], _K["GEMV_THREADS"] // 32
GEMV_COLS_PER_WARP = _K["GEMV_COLS_PER_WARP"]
GEMV_LOAD_BYTES_K, GEMV_ROW_VEC = _K["GEMV_LOAD_BYTES_K"], _K["GEMV_ROW_VEC"]
GEMV_ROW_WIDE_MT = _K["GEMV_ROW_WIDE_MT"]
GEMV_ROW_CHUNK_BYTES, GEMV_ROW_MAX_LOADS = _K["GEMV_ROW_CHUNK_BYTES"], _K["GEMV_ROW_MAX_LOADS"]
# auto takes gemv for products of at most this many rows, by input dtype, where
# op(B) is column-major (x @ W.t()), measured on an H100 (benchmarks/NOTES.md):
# float32 up to 16, where gemv beat the pipelined rung auto takes otherwise at
# every M; 16-bit up to 4, where it stayed near torch.matmul (at M = 8 in bf16 the
# FMAs of 8 rows per 2-byte weight, not memory, bound it).
GEMV_MAX_M = {"float32": 16, "float16": 4, "bfloat16": 4}
# The same where op(B) is row-major (dY @ W), for the row-major path (see auto_takes).
GEMV_ROWS_MAX_M = {"float32": 16, "float16": 1, "bfloat16": 1}
# The row path's blocks fill the GPU where there are at least this share of one an SM
# (01_gemv.cu's launch bounds: one block an SM).
GEMV_ROW_FILL = 3 / 4
# 16-bit dY @ W at one row runs on gemv up to this many bytes of W: the small layers
# lost more to wgmma's split (its second launch) than to gemv's register-bound stream,
# the large ones ran faster on wgmma's ring.
GEMV_ROWS_16BIT_MAX_BYTES = 64 << 20
# Up to this many bytes of op(B), narrow blocks whose row segments are 64 bytes beat
# 128-byte segments split over K: there the split's second launch costs more than
# the shorter segments.
GEMV_SHORT_SEGMENT_MAX_BYTES = 256 << 20
# Where op(B) is column-major and its blocks leave SMs idle, K is split in slices of at least
# this many of a warp's chunks (01_gemv.cu's GemvChunk: 1 KiB of each of its four columns);
# slices of one chunk ran fastest on the narrowest layers (benchmarks/NOTES.md).
GEMV_COLUMN_MIN_CHUNKS = 1
# Where op(B) is column-major, a warp reads one column of K at a time: columns of at most
# this many bytes leave most of its lanes idle (decode attention's Q @ K^T, K = a head of
# 64..256).  On an H200 gemv ran such 16-bit batches at 16-69% of torch.matmul while
# wgmma, which reads op(B) in whole tiles, ran the same kind (7 rows) at 122-213%
# (shapes suite, benchmarks/NOTES.md); so on GPUs with wgmma auto leaves them to it.
GEMV_COLUMN_SHORT_BYTES = 512
GEMV_DTYPES = ("float32", "float16", "bfloat16")
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
# (input, output) dtypes: float32 in and out; 16-bit in, float32 or the same type out.
GEMV_VARIANTS = tuple(
    Problem(1, 1, 1, aligned, dt, odt)
    for dt, odt in (
        ("float32", "float32"),
        ("float16", "float32"),
        ("float16", "float16"),
        ("bfloat16", "float32"),
        ("bfloat16", "bfloat16"),
    )
    for aligned in (True, False)
)


def gemv_aligned(prob: Problem) -> bool:
    """01_gemv.cu's ALIGNED: op(B)'s stored rows all start on the 16-byte grid, whatever
    their width (a row's end is loaded element by element) and whatever C's do (it is
    stored element by element); where op(B) is column-major also op(A)'s, if it is
    row-major (the column path stages it 16 bytes at a time; the row path checks
    op(A)'s rows itself, 01_gemv.cu's rows_on_grid)."""
    a_read_wide = prob.op_b == "T" and prob.op_a == "N"
    return prob.rows_on_grid("B") and (not a_read_wide or prob.rows_on_grid("A"))


def gemv_staged_k(prob: Problem, mt: int) -> int:
    """Elements of K per chunk of op(A) the column-major path stages (GemvChunk::KC):
    two 16-byte loads a lane (ALIGNED), else eight elements; half as
    many for MT = 16, except aligned float32 (GemvChunk::HALVED)."""
    aligned = gemv_aligned(prob)
    halved = mt >= 16 and not (aligned and _ITEMSIZE[prob.dtype] == 4)
    return 32 * gemv_vec(prob, mt) * (2 if aligned else 8) // (2 if halved else 1)


def gemv_vec(prob: Problem, mt: int) -> int:
    """Elements of op(B) a thread loads at once, as 01_gemv.cu derives VEC:
    GEMV_LOAD_BYTES_K along K where op(B) is column-major; along N where it is
    row-major, GEMV_ROW_VEC, or 16 bytes of 16-bit elements for at most
    GEMV_ROW_WIDE_MT rows; one element where op(B)'s rows are off the 16-byte grid."""
    if not gemv_aligned(prob):
        return 1
    if prob.op_b == "T":
        return GEMV_LOAD_BYTES_K // _ITEMSIZE[prob.dtype]
    return 8 if _ITEMSIZE[prob.dtype] == 2 and mt <= GEMV_ROW_WIDE_MT else GEMV_ROW_VEC


def gemv_row_chunk(prob: Problem, mt: int, lanes: int) -> int:
    """Rows of op(B) (elements of K) per chunk of the row-major path (GemvRowChunk::KC):
    8 warps of 32 / ``lanes`` row groups, each lane GEMV_ROW_CHUNK_BYTES in at most
    GEMV_ROW_MAX_LOADS loads."""
    vec = gemv_vec(prob, mt)
    return GEMV_WARPS * (32 // lanes) * min(GEMV_ROW_MAX_LOADS, GEMV_ROW_CHUNK_BYTES // (vec * _ITEMSIZE[prob.dtype]))


def gemv_row_columns(prob: Problem, mt: int, lanes: int) -> int:
    """Columns of C a block of the row-major path takes: LANES lanes of VEC each."""
    return lanes * gemv_vec(prob, mt)


def gemv_column_blocks(N: int) -> int:
    """Blocks of the column-major path along N: GEMV_COLS_PER_WARP columns a warp."""
    return max(1, cdiv(N, GEMV_WARPS * GEMV_COLS_PER_WARP))


def _geometry(p, prob: Problem) -> Launch:
    """op(B) column-major: GEMV_COLS_PER_WARP columns a warp; row-major: LANES * VEC
    columns per block; either way SPLITK blocks along K (gridDim.y)."""
    if prob.op_b == "T":
        if p["LANES"] != 32:
            raise ValueError(
                f"gemv's LANES applies where op(B) is row-major (dY @ W); LANES={p['LANES']} with "
                "op(B) column-major (x @ W.t()) needs LANES=32"
            )
        if p["SPLITK"] > 1 and prob.dtype != "float32":
            raise ValueError(
                f"gemv splits K with op(B) column-major (x @ W.t()) in float32 only; SPLITK={p['SPLITK']} "
                f"with {prob.dtype} needs SPLITK=1"
            )
        return Launch(
            grid=(gemv_column_blocks(prob.N), p["SPLITK"], 1),
            block=(GEMV_THREADS, 1, 1),
        )
    return Launch(
        grid=(max(1, cdiv(prob.N, gemv_row_columns(prob, p["MT"], p["LANES"]))), p["SPLITK"], 1),
        block=(GEMV_THREADS, 1, 1),
    )


def _template_args(p, prob: Problem) -> tuple:
    """Input and output type codes, MT and alignment; split over K, the kernel writes
    FP32 partial products whatever C's dtype (splitk_reduce converts), as ec_wgmma's does."""
    out = "float32" if p["SPLITK"] > 1 else prob.out_dtype
    lanes = p["LANES"] if prob.op_b == "N" else 32  # the column path has no LANES: one instantiation
    return (TYPE_CODES[prob.dtype], TYPE_CODES[out], p["MT"], gemv_aligned(prob), lanes)


def auto_takes(M: int, dtype: str, op_b: str, N: int = 0, K: int = 0) -> bool:
    """Whether kernel="auto" runs a product of M rows of ``dtype`` with op(B) stored ``op_b`` on gemv.

    op(B) column-major: up to GEMV_MAX_M.  Row-major: up to
    GEMV_ROWS_MAX_M -- in float32 16 rows, where it beat the pipelined rung with split-K that auto took before at 1 and 16 rows
    on every layer of the models suite; in 16-bit one row of a W (N x K) of at
    most GEMV_ROWS_16BIT_MAX_BYTES, where with narrow blocks it beat wgmma's
    split-K."""
    if op_b == "T":
        return 0 < M <= GEMV_MAX_M.get(dtype, 0)
    if dtype != "float32" and N * K * _ITEMSIZE.get(dtype, 4) > GEMV_ROWS_16BIT_MAX_BYTES:
        return False
    return 0 < M <= GEMV_ROWS_MAX_M.get(dtype, 0)


def _mt(M: int) -> int:
    mt = 1
    while mt < min(max(M, 1), 16):
        mt *= 2
    return mt


def sized_params(M: int, N: int, K: int, sm_count: int, batch: int = 1) -> dict:
    """MT: the smallest power of two that holds every row (at most 16; more rows take more passes)."""
    return {"MT": _mt(M)}


def auto_params(
    M: int,
    N: int,
    K: int,
    sm_count: int,
    batch: int = 1,
    *,
    dtype: str = "float32",
    op_b: str = "T",
    aligned16: bool = True,
) -> dict:
    """What kernel="auto" runs gemv with: sized_params' MT and, where op(B) is
    row-major, the block width and the split of K.  ``aligned16``: gemv_aligned, op(B)'s
    rows on the 16-byte grid.

    Blocks (one an SM) fill the GPU where they number at least GEMV_ROW_FILL of
    the SMs.  LANES is the widest of 32, 8, 4 (at most 4 rows for narrow blocks)
    whose column blocks, times the batch, fill it, unsplit: a split's second launch
    (splitk_reduce) costs more than narrower blocks on the products of a few tens of
    µs.  Two exceptions: blocks whose row segments would be under 128 bytes
    are taken only where op(B) is at most GEMV_SHORT_SEGMENT_MAX_BYTES, else the
    128-byte width with a split; and where no width fills the GPU unsplit, each
    allowed width is split -- the split that fills the SMs, each slice at least 4
    chunks long (fill_split, the rule rung 8 and wgmma share) -- and the width whose
    split blocks then keep the most SMs busy runs, the smaller split and then the
    narrower blocks where two keep as many: a split fills the SMs only in steps of
    the column blocks, so the narrowest blocks can leave a quarter of them idle where
    wider ones split further fill nearly all (a one-token dY @ W with a vocabulary-long K)."""
    mt = _mt(M)
    params = {"MT": mt, "SPLITK": 1, "LANES": 32}
    if op_b != "N":
        params["SPLITK"] = column_split(mt, N, K, sm_count, batch, dtype, aligned16)
        return params
    prob = Problem(M, N, K, aligned16, dtype, op_b="N")
    itemsize = _ITEMSIZE[dtype]
    widths = (32, 8, 4) if mt <= 4 else (32,)
    small = K * N * itemsize <= GEMV_SHORT_SEGMENT_MAX_BYTES
    usable = [w for w in widths if small or gemv_row_columns(prob, mt, w) * itemsize >= 128 or w == 32]
    blocks = {w: cdiv(N, gemv_row_columns(prob, mt, w)) * max(batch, 1) for w in usable}
    filled = [w for w in usable if blocks[w] >= GEMV_ROW_FILL * sm_count]
    if filled:
        params["LANES"] = filled[0]
        return params
    splits = {
        w: fill_split(
            blocks[w], cdiv(max(K, 1), gemv_row_chunk(prob, mt, w)), sm_count, most=SHALLOW_SPLIT_MAX, min_steps=4
        )
        for w in usable
    }
    lanes = max(reversed(usable), key=lambda w: (blocks[w] * splits[w], -splits[w]))
    params["LANES"], params["SPLITK"] = lanes, splits[lanes]
    return params


def column_split(mt: int, N: int, K: int, sm_count: int, batch: int, dtype: str, aligned16: bool) -> int:
    """SPLITK of the column-major path (x @ W.t(), float32): 1 where its N / 32 blocks, times the
    batch, reach GEMV_ROW_FILL of the SMs; else, of the splits whose blocks make at most two
    waves of one block an SM (each slice at least GEMV_COLUMN_MIN_CHUNKS chunks of K), the one
    whose waves take least of a block's time, ceil(blocks * split / SMs) / split, the smaller
    where two tie.  Fitted to a sweep of forced splits on an H200 (benchmarks/NOTES.md): 64
    blocks ran best split 2, 72 split 3, 32 split 4, 16 split 8 (one chunk a slice), 96 unsplit."""
    if dtype != "float32":  # 01_gemv.cu splits this path in float32 only
        return 1
    blocks = gemv_column_blocks(N) * max(batch, 1)
    if blocks >= GEMV_ROW_FILL * sm_count:
        return 1
    chunks = cdiv(max(K, 1), gemv_staged_k(Problem(mt, N, K, aligned16, dtype, op_b="T"), mt))
    fits = [
        s
        for s in SHALLOW_SPLITK_VALUES
        if s == 1 or blocks * s <= 2 * sm_count and chunks >= GEMV_COLUMN_MIN_CHUNKS * s
    ]
    return min(fits, key=lambda s: (cdiv(blocks * s, sm_count) / s, s))


def _auto_hook(ask: Ask) -> Offer:
    """A few rows (a decode step): the time is one read of op(B), which gemv streams at
    memory bandwidth where a tiled rung would spend a whole tile on each row (op(B)
    row-major: blocks narrow enough to fill the SMs, else split over K).  See auto_takes."""
    if (
        ask.op_b == "T"
        and ask.dtype != "float32"
        and ask.arch == WGMMA_SM90
        and 0 < ask.K * _ITEMSIZE.get(ask.dtype, 4) <= GEMV_COLUMN_SHORT_BYTES
    ):
        return Offer(
            None,
            f"gemv: columns of op(B) of {ask.K} {ask.dtype} values are too short for its warps "
            f"(at most {GEMV_COLUMN_SHORT_BYTES} bytes); wgmma reads op(B) in whole tiles",
        )
    if auto_takes(ask.M, ask.dtype, ask.op_b, ask.N, ask.K):
        return Offer(
            auto_params(
                ask.M,
                ask.N,
                ask.K,
                ask.sm_count,
                ask.batch,
                dtype=ask.dtype,
                op_b=ask.op_b,
                aligned16=ask.rows_on_grid("B"),
            )
        )
    most = (GEMV_MAX_M if ask.op_b == "T" else GEMV_ROWS_MAX_M).get(ask.dtype, 0)
    stored = "column" if ask.op_b == "T" else "row"
    if not most:
        return Offer(None, f"gemv takes no {ask.dtype} product with op(B) {stored}-major")
    if 0 < ask.M <= most:
        return Offer(
            None,
            f"gemv: op(B) of {ask.N} x {ask.K} {ask.dtype} is over the "
            f"{GEMV_ROWS_16BIT_MAX_BYTES >> 20} MiB it streams row-major",
        )
    return Offer(None, f"gemv takes 1..{most} rows of {ask.dtype} with op(B) {stored}-major, not M = {ask.M}")


SPEC = KernelSpec(
    name="gemv",
    rung=1,
    family="gemv",
    dtypes=GEMV_DTYPES,
    source="gemv/01_gemv.cu",
    template="gemmlab::gemv",
    description="op(B) streamed once at memory bandwidth, the sums of MT rows of C in registers "
    "(products of a few rows: decode steps)",
    params=(
        TileParam("MT", (1, 2, 4, 8, 16), 8, "rows of C each pass over op(B) computes (more rows: more passes)"),
        TileParam(
            "SPLITK",
            SHALLOW_SPLITK_VALUES,
            1,
            "blocks along K, each summing a slice of K (>1 adds a reduction kernel and a workspace of "
            "SPLITK*M*N floats; op(B) column-major: float32 only)",
        ),
        TileParam(
            "LANES",
            (32, 8, 4),
            32,
            "lanes along a row of op(B) where it is row-major (fewer: a warp reads 32/LANES rows at once "
            "and a block takes fewer columns, so there are more blocks; op(B) column-major: 32 only)",
        ),
    ),
    constraints=(
        Constraint(
            "LANES < 32 (narrow blocks) is for at most 4 rows, MT <= 4: with more, the rows' sums "
            "and the staged chunk of op(A) outgrow the registers",
            lambda p: p["LANES"] == 32 or p["MT"] <= 4,
        ),
    ),
    template_args=_template_args,
    geometry=_geometry,
    variants=GEMV_VARIANTS,
    rules=Rules(offer=_auto_hook, size=sized_params),
    split_k_param="SPLITK",
)
