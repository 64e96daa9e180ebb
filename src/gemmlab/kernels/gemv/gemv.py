"""GEMV rung 1, gemv/01_gemv.cu: op(B) streamed once, the sums of MT rows of C in registers.

For the products a tiled GEMM wastes its tiles on: M (the rows of op(A) and C)
of 1 to 16, as in a decode step.  Every storage type (float32, float16,
bfloat16) is multiplied on the CUDA cores in FP32; the time is the read of
op(B).
"""

from __future__ import annotations

from ..cuda_constants import read_constants
from ..spec import TYPE_CODES, KernelSpec, Launch, Problem, TileParam, cdiv

_K = read_constants("include/gemmlab/gemv/01_gemv.cuh")
GEMV_THREADS, GEMV_WARPS = _K["GEMV_THREADS"], _K["GEMV_THREADS"] // 32
GEMV_COLS_PER_WARP = _K["GEMV_COLS_PER_WARP"]
GEMV_LOAD_BYTES_K, GEMV_LOAD_BYTES_N = _K["GEMV_LOAD_BYTES_K"], _K["GEMV_LOAD_BYTES_N"]
# auto takes gemv for products of at most this many rows, by input dtype, where
# op(B) is column-major (x @ W.t()), from run 82 on an H100 (benchmarks/NOTES.md):
# float32 up to 16, where gemv beat the pipelined rung auto takes otherwise at
# every M; 16-bit up to 4, where it stayed near torch.matmul (at M = 8 in bf16 it
# was 62-85% of it: the FMAs of 8 rows per 2-byte weight, not memory, bound it).
# Its row-major path (op(B) streamed along N) has too few blocks at these sizes to
# be taken by auto.
GEMV_MAX_M = {"float32": 16, "float16": 4, "bfloat16": 4}
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
    GEMV_LOAD_BYTES_K along K where op(B) is column-major, GEMV_LOAD_BYTES_N along
    N where it is row-major; one element where the operands are not 16-byte aligned."""
    if not prob.aligned16:
        return 1
    return (GEMV_LOAD_BYTES_K if prob.op_b == "T" else GEMV_LOAD_BYTES_N) // _ITEMSIZE[prob.dtype]


def _geometry(p, prob: Problem) -> Launch:
    """op(B) column-major: GEMV_COLS_PER_WARP columns a warp; row-major: 32 * VEC columns per block."""
    per_block = GEMV_WARPS * GEMV_COLS_PER_WARP if prob.op_b == "T" else 32 * gemv_vec(prob)
    return Launch(grid=(max(1, cdiv(prob.N, per_block)), 1, 1), block=(GEMV_THREADS, 1, 1))


def auto_takes(M: int, dtype: str, op_b: str) -> bool:
    """Whether kernel="auto" runs a product of M rows of ``dtype`` with op(B) stored ``op_b`` on gemv."""
    return 0 < M <= GEMV_MAX_M.get(dtype, 0) and op_b == "T"


def sized_params(M: int, N: int, K: int, sm_count: int, batch: int = 1) -> dict:
    """MT: the smallest power of two that holds every row (at most 16; more rows take more passes)."""
    mt = 1
    while mt < min(max(M, 1), 16):
        mt *= 2
    return {"MT": mt}


SPEC = KernelSpec(
    name="gemv", rung=1, family="gemv", dtypes=GEMV_DTYPES, source="gemv/01_gemv.cu", template="gemmlab::gemv",
    description="op(B) streamed once at memory bandwidth, the sums of MT rows of C in registers "
                "(products of a few rows: decode steps)",
    params=(TileParam("MT", (1, 2, 4, 8, 16), 8, "rows of C each pass over op(B) computes (more rows: more passes)"),),
    template_args=lambda p, prob: (TYPE_CODES[prob.dtype], TYPE_CODES[prob.out_dtype], p["MT"], prob.aligned16),
    geometry=_geometry,
    variants=GEMV_VARIANTS,
    sized_params=sized_params,
)
