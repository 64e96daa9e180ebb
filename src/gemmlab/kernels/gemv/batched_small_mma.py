"""GEMV rung 5, gemv/05_batched_small_mma.cu: rung 4's batch of small matrices, a block a
matrix, with 16-bit operands multiplied on the tensor cores (mma.sync m16n8k16, sm_80 on).

A block takes one C of up to 64 x 64 (a larger C takes more blocks), a warp per 16 of its
rows; op(A) and op(B)^T are staged as stored, 16 bits an element, in rows along K.
"""

from __future__ import annotations

from ..cuda_constants import read_constants
from ..spec import TYPE_CODES, Ask, KernelSpec, Launch, Offer, Problem, Rules, cdiv
from .batched_small import BATCHED_SMALL_VARIANTS, small_batch_refusal

_K = read_constants("gemv/05_batched_small_mma.cu")
SMALL_MMA_TILE, SMALL_MMA_LDK = _K["SMALL_MMA_TILE"], _K["SMALL_MMA_LDK"]
SMALL_MMA_DTYPES = ("float16", "bfloat16")
# mma.sync m16n8k16 on 16-bit inputs needs sm_80.
SMALL_MMA_MIN_ARCH = {dt: 80 for dt in SMALL_MMA_DTYPES}
# auto takes batched_small_mma for 16-bit batches by rung 4's rule (batched_small.auto_takes)
# but for K: at most one staged chunk, SMALL_MMA_MAX_K.  Attention within windows at a head
# of 32 (Q @ K^T and the backward's dO @ V^T) ran faster than on wgmma's 64 x 64 tiles; the
# products over K = 49 tokens (P @ V and three of the backward's), staged in two chunks, ran
# slower than the tiled rungs (benchmarks/NOTES.md, "Batches of small matrices").
SMALL_MMA_MAX_K = _K["SMALL_MMA_KC"]
# (input, output) dtypes: rung 4's 16-bit ones (16-bit in, float32 or the same type out).
SMALL_MMA_VARIANTS = tuple(v for v in BATCHED_SMALL_VARIANTS if v.dtype in SMALL_MMA_DTYPES)


def _geometry(p, prob: Problem) -> Launch:
    """One block per 64 x 64 tile of each matrix's C, along N first; a warp per 16 rows of min(M, 64)."""
    tiles = max(1, cdiv(prob.M, SMALL_MMA_TILE) * cdiv(prob.N, SMALL_MMA_TILE))
    warps = max(1, cdiv(min(prob.M, SMALL_MMA_TILE), 16))
    return Launch(grid=(tiles, 1, 1), block=(32 * warps, 1, 1))


def _template_args(p, prob: Problem) -> tuple:
    return (TYPE_CODES[prob.dtype], TYPE_CODES[prob.out_dtype])


def auto_takes(ask: Ask) -> bool:
    """Whether kernel="auto" runs this product on batched_small_mma: a 16-bit batch of at least
    SMALL_MIN_ROUNDS matrices an SM, M and N at most SMALL_MAX_SIDE, K one staged chunk
    (SMALL_MMA_MAX_K) or less, on a GPU with mma.sync."""
    return _auto_hook(ask).takes


def _auto_hook(ask: Ask) -> Offer:
    """A 16-bit batch of small matrices (attention within windows): a block a matrix, the
    products on mma.sync.  See auto_takes."""
    if ask.dtype not in SMALL_MMA_DTYPES:
        return Offer(None, f"batched_small_mma takes float16 and bfloat16, not {ask.dtype}")
    if ask.arch is None or not SPEC.builds_for(ask.arch, ask.dtype):
        return Offer(None, f"batched_small_mma needs mma.sync on sm_80 or later ({ask.arch or 'no GPU known'})")
    why = small_batch_refusal("batched_small_mma", ask, SMALL_MMA_MAX_K)
    return Offer(None, why) if why else Offer({})


SPEC = KernelSpec(
    name="batched_small_mma",
    rung=5,
    family="gemv",
    dtypes=SMALL_MMA_DTYPES,
    source="gemv/05_batched_small_mma.cu",
    template="gemmlab::batched_small_mma",
    description="rung 4's block a matrix with 16-bit operands staged as stored and multiplied on mma.sync "
    "(16-bit batches of small matrices: attention within windows)",
    template_args=_template_args,
    geometry=_geometry,
    variants=SMALL_MMA_VARIANTS,
    rules=Rules(offer=_auto_hook),
    min_arch=SMALL_MMA_MIN_ARCH,
    needs="mma.sync m16n8k16 on FP16 and BF16 (sm_80)",
)
