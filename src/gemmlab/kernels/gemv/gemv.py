"""GEMV rung 1, gemv/01_gemv.cu: op(B) streamed once, the sums of MT rows of C in registers.

For the products a tiled GEMM wastes its tiles on: M (the rows of op(A) and C)
of 1 to 16, as in a decode step.  Every storage type (float32, float16,
bfloat16) is multiplied on the CUDA cores in FP32; the time is the read of
op(B).
"""

from __future__ import annotations

from ..cuda_constants import read_constants
from ..simt.pipelined import SPLITK_VALUES, fill_split
from ..spec import TYPE_CODES, KernelSpec, Launch, Problem, TileParam, cdiv

_K = read_constants("include/gemmlab/gemv/01_gemv.cuh")
GEMV_THREADS, GEMV_WARPS = _K["GEMV_THREADS"], _K["GEMV_THREADS"] // 32
GEMV_COLS_PER_WARP = _K["GEMV_COLS_PER_WARP"]
GEMV_LOAD_BYTES_K, GEMV_ROW_VEC = _K["GEMV_LOAD_BYTES_K"], _K["GEMV_ROW_VEC"]
GEMV_ROW_CHUNK_BYTES, GEMV_ROW_MAX_LOADS = _K["GEMV_ROW_CHUNK_BYTES"], _K["GEMV_ROW_MAX_LOADS"]
# auto takes gemv for products of at most this many rows, by input dtype, where
# op(B) is column-major (x @ W.t()), from run 82 on an H100 (benchmarks/NOTES.md):
# float32 up to 16, where gemv beat the pipelined rung auto takes otherwise at
# every M; 16-bit up to 4, where it stayed near torch.matmul (at M = 8 in bf16 it
# was 62-85% of it: the FMAs of 8 rows per 2-byte weight, not memory, bound it).
GEMV_MAX_M = {"float32": 16, "float16": 4, "bfloat16": 4}
# The same where op(B) is row-major (dY @ W), for the row-major path split over K
# (run 85a, benchmarks/NOTES.md; see auto_takes).
GEMV_ROWS_MAX_M = {"float32": 16, "float16": 0, "bfloat16": 0}
GEMV_DTYPES = ("float32", "float16", "bfloat16")
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
# (input, output) dtypes: float32 in and out; 16-bit in, float32 or the same type out.
GEMV_VARIANTS = tuple(Problem(1, 1, 1, aligned, dt, odt)
                      for dt, odt in (("float32", "float32"), ("float16", "float32"), ("float16", "float16"),
                                      ("bfloat16", "float32"), ("bfloat16", "bfloat16"))
                      for aligned in (True, False))


def gemv_staged_k(prob: Problem, mt: int) -> int:
    """Elements of K per chunk of op(A) the column-major path stages (GemvChunk::KC):
    two 16-byte loads a lane (aligned operands), else eight elements; half as
    many for MT = 16."""
    return 32 * gemv_vec(prob) * (2 if prob.aligned16 else 8) // (2 if mt >= 16 else 1)


def gemv_vec(prob: Problem) -> int:
    """Elements of op(B) a thread loads at once, as 01_gemv.cu derives VEC:
    GEMV_LOAD_BYTES_K along K where op(B) is column-major, GEMV_ROW_VEC along N
    where it is row-major; one element where the operands are not 16-byte aligned."""
    if not prob.aligned16:
        return 1
    return GEMV_LOAD_BYTES_K // _ITEMSIZE[prob.dtype] if prob.op_b == "T" else GEMV_ROW_VEC


def gemv_row_chunk(prob: Problem) -> int:
    """Rows of op(B) (elements of K) per chunk of the row-major path (GemvRowChunk::KC):
    8 warps, each GEMV_ROW_CHUNK_BYTES a lane in at most GEMV_ROW_MAX_LOADS loads."""
    vec = gemv_vec(prob)
    return GEMV_WARPS * min(GEMV_ROW_MAX_LOADS, GEMV_ROW_CHUNK_BYTES // (vec * _ITEMSIZE[prob.dtype]))


def _geometry(p, prob: Problem) -> Launch:
    """op(B) column-major: GEMV_COLS_PER_WARP columns a warp; row-major: 32 * VEC
    columns per block, and SPLITK blocks along K (gridDim.y)."""
    if prob.op_b == "T":
        if p["SPLITK"] != 1:
            raise ValueError(f"gemv splits K only where op(B) is row-major; SPLITK={p['SPLITK']} with op(B) "
                             f"column-major (x @ W.t()) needs SPLITK=1")
        return Launch(grid=(max(1, cdiv(prob.N, GEMV_WARPS * GEMV_COLS_PER_WARP)), 1, 1),
                      block=(GEMV_THREADS, 1, 1))
    return Launch(grid=(max(1, cdiv(prob.N, 32 * gemv_vec(prob))), p["SPLITK"], 1), block=(GEMV_THREADS, 1, 1))


def _template_args(p, prob: Problem) -> tuple:
    """Input and output type codes, MT and alignment; split over K, the kernel writes
    FP32 partial products whatever C's dtype (splitk_reduce converts), as wgmma's does."""
    out = "float32" if p["SPLITK"] > 1 else prob.out_dtype
    return (TYPE_CODES[prob.dtype], TYPE_CODES[out], p["MT"], prob.aligned16)


def auto_takes(M: int, dtype: str, op_b: str) -> bool:
    """Whether kernel="auto" runs a product of M rows of ``dtype`` with op(B) stored ``op_b`` on gemv.

    op(B) column-major: up to GEMV_MAX_M (run 82).  Row-major, split over K: up
    to GEMV_ROWS_MAX_M, float32 only, where in run 85a (benchmarks/NOTES.md) it
    beat the pipelined rung with split-K that auto took before at 1 and 16 rows
    on every layer of the models suite; in 16-bit split-K wgmma stays (see the
    notes for the figures)."""
    limits = GEMV_MAX_M if op_b == "T" else GEMV_ROWS_MAX_M
    return 0 < M <= limits.get(dtype, 0)


def _mt(M: int) -> int:
    mt = 1
    while mt < min(max(M, 1), 16):
        mt *= 2
    return mt


def sized_params(M: int, N: int, K: int, sm_count: int, batch: int = 1) -> dict:
    """MT: the smallest power of two that holds every row (at most 16; more rows take more passes)."""
    return {"MT": _mt(M)}


def auto_params(M: int, N: int, K: int, sm_count: int, batch: int = 1, *, dtype: str = "float32",
                op_b: str = "T", aligned16: bool = True) -> dict:
    """What kernel="auto" runs gemv with: sized_params' MT, and where op(B) is
    row-major the split of K that fills the SMs -- the column blocks (N / 128 with
    aligned operands, times the batch) times the split within one block an SM
    (01_gemv.cu's launch bounds), each slice at least 4 chunks long (fill_split,
    the rule rung 8 and wgmma share)."""
    params = {"MT": _mt(M), "SPLITK": 1}
    if op_b == "N":
        prob = Problem(M, N, K, aligned16, dtype, op_b="N")
        blocks = cdiv(N, 32 * gemv_vec(prob)) * max(batch, 1)
        params["SPLITK"] = fill_split(blocks, cdiv(max(K, 1), gemv_row_chunk(prob)), sm_count,
                                      most=max(SPLITK_VALUES), min_steps=4)
    return params


SPEC = KernelSpec(
    name="gemv", rung=1, family="gemv", dtypes=GEMV_DTYPES, source="gemv/01_gemv.cu", template="gemmlab::gemv",
    description="op(B) streamed once at memory bandwidth, the sums of MT rows of C in registers "
                "(products of a few rows: decode steps)",
    params=(TileParam("MT", (1, 2, 4, 8, 16), 8, "rows of C each pass over op(B) computes (more rows: more passes)"),
            TileParam("SPLITK", SPLITK_VALUES, 1,
                      "blocks along K where op(B) is row-major, each summing a slice of K (>1 adds a reduction "
                      "kernel and a workspace of SPLITK*M*N floats; op(B) column-major: 1 only)")),
    template_args=_template_args,
    geometry=_geometry,
    variants=GEMV_VARIANTS,
    sized_params=sized_params,
    split_k_param="SPLITK",
)
