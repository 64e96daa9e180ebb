"""GEMV rung 4, gemv/04_batched_small.cu: a batch of small matrices, a block a matrix.

For attention within windows (Swin-T: thousands of 49 x 49 x 32 products a layer) and
other batches whose every matrix fits one block: a matrix is a few kilobytes, so the
batch's time is one read of the operands and one write of C.  A block takes one C of up
to 64 x 64 (a larger C takes more blocks) with one thread per 4 x 4 piece of it; every
storage type is multiplied on the CUDA cores in FP32.
"""

from __future__ import annotations

from ..cuda_constants import read_constants
from ..spec import TYPE_CODES, Ask, KernelSpec, Launch, Offer, Problem, Rules, cdiv
from .gemv import GEMV_DTYPES, GEMV_VARIANTS

_K = read_constants("gemv/04_batched_small.cu")
SMALL_TILE, SMALL_PIECE, SMALL_KC = _K["SMALL_TILE"], _K["SMALL_PIECE"], _K["SMALL_KC"]
SMALL_MAX_THREADS = (SMALL_TILE // SMALL_PIECE) ** 2  # 04_batched_small.cu's launch bounds
# auto takes batched_small for float32 batches (fp32_tc's too) of at least SMALL_MIN_ROUNDS
# blocks an SM whose C fits one block with room to spare (M and N at most SMALL_MAX_SIDE) and
# whose K is at most SMALL_MAX_K.  There a tiled rung's 64 x 64 tile is a quarter or more
# lost work, and this rung's blocks fill the GPU's SMs more than once (five fit an SM, by
# registers).  At 64 x 64, past that K, and in 16-bit, where the tensor-core rungs multiply,
# the tiled rungs were faster on an H200 (benchmarks/NOTES.md, "Batches of small matrices").
SMALL_MAX_SIDE = 56
SMALL_MAX_K = 64
SMALL_MIN_ROUNDS = 5
SMALL_DTYPES = ("float32",)
# Input and output types: gemv's, which is what 04_batched_small.cu's template takes
# (its loads and stores go element by element, so the 16-byte grid selects nothing).
BATCHED_SMALL_VARIANTS = tuple(v for v in GEMV_VARIANTS if not v.aligned16)


def staged_rows(side: int) -> int:
    """Floats in a staged row of op(A) (side M) or op(B)^T (side N): the tile's side in whole
    pieces, 4 more where that is a multiple of 8 (04_batched_small.cu's small_staged_row)."""
    whole = cdiv(min(side, SMALL_TILE), SMALL_PIECE) * SMALL_PIECE
    return whole + 4 if whole % 8 == 0 else whole


def smem_bytes(prob: Problem) -> int:
    """04_batched_small.cu's dynamic shared memory: min(K, SMALL_KC) staged rows of each operand, in FP32."""
    return 4 * max(1, min(prob.K, SMALL_KC)) * (staged_rows(prob.M) + staged_rows(prob.N))


def threads(prob: Problem) -> int:
    """One thread per 4 x 4 piece of a block's tile, in whole warps."""
    pieces = cdiv(min(prob.M, SMALL_TILE), SMALL_PIECE) * cdiv(min(prob.N, SMALL_TILE), SMALL_PIECE)
    return max(32, cdiv(pieces, 32) * 32)


def _geometry(p, prob: Problem) -> Launch:
    """One block per SMALL_TILE x SMALL_TILE tile of each matrix's C, along N first."""
    tiles = max(1, cdiv(prob.M, SMALL_TILE) * cdiv(prob.N, SMALL_TILE))
    return Launch(grid=(tiles, 1, 1), block=(threads(prob), 1, 1), smem_bytes=smem_bytes(prob))


def _template_args(p, prob: Problem) -> tuple:
    return (TYPE_CODES[prob.dtype], TYPE_CODES[prob.out_dtype])


def small_batch_refusal(rung: str, ask: Ask, max_k: int) -> str:
    """Why a batch rung (this one, or batched_small_mma with its own ``max_k``) does not take
    ``ask`` by the rule they share: "" where the matrices are small enough and the batch fills
    the SMs SMALL_MIN_ROUNDS times."""
    if ask.M > SMALL_MAX_SIDE or ask.N > SMALL_MAX_SIDE or not 0 < ask.K <= max_k:
        return f"{rung} takes matrices of M, N <= {SMALL_MAX_SIDE} and K = 1..{max_k}, not {ask.M} x {ask.N} x {ask.K}"
    if ask.batch < SMALL_MIN_ROUNDS * ask.sm_count:
        return (
            f"{rung} takes batches of {SMALL_MIN_ROUNDS} or more matrices an SM "
            f"({SMALL_MIN_ROUNDS * ask.sm_count} here), not {ask.batch}"
        )
    return ""


def auto_takes(ask: Ask) -> bool:
    """Whether kernel="auto" runs this product on batched_small: a float32 batch of at least
    SMALL_MIN_ROUNDS blocks an SM, of matrices with M, N <= SMALL_MAX_SIDE and K = 1..SMALL_MAX_K."""
    return ask.dtype in SMALL_DTYPES and not small_batch_refusal("batched_small", ask, SMALL_MAX_K)


def _auto_hook(ask: Ask) -> Offer:
    """A batch of small matrices (attention within windows): one read of the operands and
    one write of C, at a block a matrix.  See auto_takes."""
    if ask.dtype not in SMALL_DTYPES:
        return Offer(None, f"batched_small takes no {ask.dtype} batch: the tensor-core rungs run them faster")
    why = small_batch_refusal("batched_small", ask, SMALL_MAX_K)
    return Offer(None, why) if why else Offer({})


SPEC = KernelSpec(
    name="batched_small",
    rung=4,
    family="gemv",
    dtypes=GEMV_DTYPES,
    source="gemv/04_batched_small.cu",
    template="gemmlab::batched_small",
    description="a block a matrix of C up to 64 x 64, a thread a 4 x 4 piece of it, operands staged in FP32 "
    "(batches of small matrices: attention within windows)",
    template_args=_template_args,
    geometry=_geometry,
    variants=BATCHED_SMALL_VARIANTS,
    rules=Rules(offer=_auto_hook),
)
