"""GEMV rung 3, gemv/03_gemv_mma.cu: x @ W.t() for a few rows of 16-bit x on the tensor cores.

gemv (rung 1) streams W on the CUDA cores; from two rows of 16-bit x on, its
converts and FMAs rather than memory set its pace.  gemv_mma reads W the same
way, once, and hands the multiplications to mma.sync, so its time is the read of
W up to 16 rows of x.  It takes x row-major and W row-major (op(B) = W.t()
column-major: a decode step's x @ W.t()), both with rows on the 16-byte grid.
"""

from __future__ import annotations

from ...runtime.tma import element_bytes
from ..cuda_constants import read_constants
from ..spec import TYPE_CODES, Ask, KernelSpec, Launch, Offer, Problem, Rules, TileParam, cdiv

_K = read_constants("gemv/03_gemv_mma.cu")
GEMV_MMA_THREADS, GEMV_MMA_ROWS = _K["GEMV_MMA_THREADS"], _K["GEMV_MMA_ROWS"]
GEMV_MMA_DTYPES = ("float16", "bfloat16")
# mma.sync m16n8k16 on 16-bit inputs needs sm_80.
GEMV_MMA_MIN_ARCH = {dt: 80 for dt in GEMV_MMA_DTYPES}
# auto takes gemv_mma for products of at most this many rows (one n8 tile, MT = 8), and
# up to two n8 tiles (MT = 16) where W holds at most GEMV_MMA_WIDE_MAX_BYTES.  At 16 rows
# the second tile's registers halve the loads a lane keeps in flight, and on an H200 wgmma's
# narrow tiles split over K were faster from about 100 MiB of W on, slower at 8 MiB
# (shapes suite; benchmarks/NOTES.md, "gemv_mma").
GEMV_MMA_MAX_M = 8
GEMV_MMA_WIDE_MAX_M = 16
GEMV_MMA_WIDE_MAX_BYTES = 16 << 20
# A warp of the block takes a slice of K in steps of 32 elements; rows of W of at most
# this many bytes leave most of the 8 warps without a step (decode attention's
# Q @ K^T at a head of 64..256), which wgmma's whole tiles read better on Hopper.
GEMV_MMA_SHORT_BYTES = 512
# One row of x over a W of at least this many rows stays on gemv: at one row there is no
# arithmetic to save, and gemv's 32-column blocks streamed a tall W faster on an H200
# (ab-gemv-mma-2026-12-01.json, GPU time: 14336 x 4096 40.9 µs against 45.5, 151936 x 3584
# 259 against 279; at N = 4096..9216 and 50257 x 768 gemv_mma was as fast or faster).
GEMV_MMA_ONE_ROW_MAX_N = 12288
# (input, output) dtypes: 16-bit in, float32 or the same type out.
GEMV_MMA_VARIANTS = tuple(
    Problem(1, 1, 1, True, dt, odt, "N", "T")
    for dt, odt in (("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"))
)


def _rows_off_grid(x: Problem | Ask) -> list[str]:
    """Of x ("A") and W ("B"), those whose stored rows do not all start on the 16-byte grid."""
    return [side for side in ("A", "B") if not x.rows_on_grid(side)]


def _unusable(prob: Problem) -> str | None:
    """Its loads are 16 bytes wide: the stored rows of x and W must start on the 16-byte grid."""
    off = _rows_off_grid(prob)
    if off:
        return f"rows of {' and '.join(off)} off the 16-byte grid (its loads are 16 bytes wide)"
    return None


def _geometry(p, prob: Problem) -> Launch:
    """A block per GEMV_MMA_ROWS columns of C (rows of W)."""
    return Launch(grid=(max(1, cdiv(prob.N, GEMV_MMA_ROWS)), 1, 1), block=(GEMV_MMA_THREADS, 1, 1))


def _template_args(p, prob: Problem) -> tuple:
    return (TYPE_CODES[prob.dtype], TYPE_CODES[prob.out_dtype], p["MT"])


def sized_params(M: int, N: int, K: int, sm_count: int, batch: int = 1) -> dict:
    """MT: one n8 tile of rows of x up to 8 rows, two beyond."""
    return {"MT": 8 if M <= 8 else 16}


def _auto_hook(ask: Ask) -> Offer:
    """A decode step's x @ W.t() in 16 bits: 1..GEMV_MMA_MAX_M rows (up to GEMV_MMA_WIDE_MAX_M
    over a small W), x and W row-major with rows on the 16-byte grid, rows of W longer than
    GEMV_MMA_SHORT_BYTES, sm_80 or later; one row over a tall W (GEMV_MMA_ONE_ROW_MAX_N) is gemv's."""
    if ask.dtype not in GEMV_MMA_DTYPES:
        return Offer(None, f"gemv_mma takes 16-bit products, not {ask.dtype}")
    if ask.arch is None or not SPEC.builds_for(ask.arch, ask.dtype):
        return Offer(None, f"gemv_mma needs mma.sync on sm_80 or later ({ask.arch or 'no GPU known'})")
    if (ask.op_a, ask.op_b) != ("N", "T"):
        return Offer(None, f"gemv_mma takes x @ W.t() (layouts NT), not {ask.op_a}{ask.op_b}")
    if not 0 < ask.M <= GEMV_MMA_WIDE_MAX_M:
        return Offer(None, f"gemv_mma takes 1..{GEMV_MMA_WIDE_MAX_M} rows, not M = {ask.M}")
    w_bytes = ask.N * ask.K * element_bytes(ask.dtype)
    if ask.M > GEMV_MMA_MAX_M and w_bytes > GEMV_MMA_WIDE_MAX_BYTES:
        return Offer(
            None,
            f"gemv_mma takes {GEMV_MMA_MAX_M + 1}..{GEMV_MMA_WIDE_MAX_M} rows only over a W of at most "
            f"{GEMV_MMA_WIDE_MAX_BYTES >> 20} MiB, not {w_bytes / 2**20:.0f} MiB",
        )
    if ask.K * element_bytes(ask.dtype) <= GEMV_MMA_SHORT_BYTES:
        return Offer(None, f"gemv_mma: rows of W of {ask.K} values leave its warps without a slice of K")
    if _rows_off_grid(ask):
        return Offer(None, "gemv_mma: rows of x or W off the 16-byte grid")
    if ask.M == 1 and ask.N >= GEMV_MMA_ONE_ROW_MAX_N:
        return Offer(
            None, f"gemv_mma: one row over {ask.N} rows of W (>= {GEMV_MMA_ONE_ROW_MAX_N}) streams faster on gemv"
        )
    return Offer(sized_params(ask.M, ask.N, ask.K, ask.sm_count, ask.batch))


SPEC = KernelSpec(
    name="gemv_mma",
    rung=3,
    family="gemv",
    dtypes=GEMV_MMA_DTYPES,
    source="gemv/03_gemv_mma.cu",
    template="gemmlab::gemv_mma",
    description="W streamed once in 16-byte loads, K permuted so they feed mma.sync directly "
    "(x @ W.t() at a few rows of 16-bit x: decode steps)",
    params=(TileParam("MT", (8, 16), 8, "rows of x each pass over W multiplies (one or two n8 tiles)"),),
    template_args=_template_args,
    geometry=_geometry,
    variants=GEMV_MMA_VARIANTS,
    layouts=(("N", "T"),),
    unusable=_unusable,
    fallback="gemv",
    rules=Rules(offer=_auto_hook, size=sized_params),
    min_arch=GEMV_MMA_MIN_ARCH,
    needs="mma.sync m16n8k16 on FP16 and BF16 (sm_80)",
)
