"""GEMV rung 2, gemv/02_outer.cu: products of a few columns of op(A), C written once.

For the products whose short side is K (1 to a few), as in a weight gradient at
one token, dY.t() @ x: C is far larger than op(A) and op(B), and the time is one
write of C (with a read where beta != 0).  Every storage type (float32, float16,
bfloat16) is multiplied on the CUDA cores in FP32.
"""

from __future__ import annotations

from ..cuda_constants import read_constants
from ..spec import TYPE_CODES, Ask, KernelSpec, Launch, Offer, Problem, Rules, cdiv
from ..tensor.wgmma_tma import WGMMA_SM90
from .gemv import GEMV_DTYPES, GEMV_VARIANTS

_K = read_constants("include/gemmlab/gemv/02_outer.cuh")
OUTER_THREADS, OUTER_WARPS = _K["OUTER_THREADS"], _K["OUTER_THREADS"] // 32
OUTER_ROWS = OUTER_WARPS * _K["OUTER_ROWS_PER_WARP"]  # rows of C a block writes
OUTER_STORE_BYTES = _K["OUTER_STORE_BYTES"]
OUTER_KC = _K["OUTER_KC"]  # elements of K staged at a time
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
# auto takes outer for products of at most this K, by input dtype.  At K products per
# element of C, one lane's loads and FMAs of a 16-byte piece of a row stay well below
# what an SM issues in the time its share of the memory bandwidth writes that piece,
# so the write of C bounds the kernel.  The tiled rungs spend a whole K-step (8 of
# float32, 64 of 16-bit) and a tile's fixed costs on each piece of C, which loses at K = 16
# and on small products below it (scripts/ab_gemv.py, benchmarks/NOTES.md).
OUTER_MAX_K = {"float32": 8, "float16": 8, "bfloat16": 8}
# Except on Hopper, for one 16-bit matrix (batches were not measured) whose operands TMA reads
# in place and whose C has more than this many elements: there wgmma's tensor cores and TMA
# store write C faster than outer's FMAs do.  Smaller, or where wgmma would first copy an
# operand onto the 16-byte grid, outer stays ahead (benchmarks/NOTES.md, "Products and models
# no suite names").
OUTER_16BIT_MAX_OUTPUTS = 8 << 20


def outer_aligned(prob: Problem) -> bool:
    """02_outer.cu's ALIGNED: C's stored rows all start on the 16-byte grid (a row's end
    is stored element by element; op(A) and op(B) are read element by element)."""
    return prob.rows_on_grid("C")


def outer_columns(prob: Problem) -> int:
    """Columns of C a block takes: 32 lanes of OUTER_STORE_BYTES of C's type each."""
    return 32 * OUTER_STORE_BYTES // _ITEMSIZE[prob.out_dtype]


def _geometry(p, prob: Problem) -> Launch:
    """One block per OUTER_ROWS x outer_columns tile of C, along N first."""
    return Launch(
        grid=(max(1, cdiv(prob.M, OUTER_ROWS) * cdiv(prob.N, outer_columns(prob))), 1, 1), block=(OUTER_THREADS, 1, 1)
    )


def _template_args(p, prob: Problem) -> tuple:
    return (TYPE_CODES[prob.dtype], TYPE_CODES[prob.out_dtype], outer_aligned(prob))


def auto_takes(K: int, dtype: str) -> bool:
    """Whether kernel="auto" runs a product of this K and ``dtype`` on outer: 1..OUTER_MAX_K."""
    return 0 < K <= OUTER_MAX_K.get(dtype, 0)


def _auto_hook(ask: Ask) -> Offer:
    """A few K (a weight gradient at a token or a few): one write of C, which outer
    makes at memory bandwidth in 16-byte pieces of its rows.  See auto_takes, and
    OUTER_16BIT_MAX_OUTPUTS for the large 16-bit products Hopper's wgmma takes instead."""
    if auto_takes(ask.K, ask.dtype):
        outputs = ask.M * ask.N
        large = ask.batch == 1 and outputs > OUTER_16BIT_MAX_OUTPUTS
        if ask.dtype != "float32" and ask.arch == WGMMA_SM90 and ask.tma_aligned and large:
            return Offer(None, f"wgmma writes a 16-bit C of {outputs} elements (> {OUTER_16BIT_MAX_OUTPUTS}) faster")
        return Offer({})
    most = OUTER_MAX_K.get(ask.dtype, 0)
    if not most:
        return Offer(None, f"outer takes no {ask.dtype} product")
    return Offer(None, f"outer takes K = 1..{most} of {ask.dtype}, not K = {ask.K}")


SPEC = KernelSpec(
    name="outer",
    rung=2,
    family="gemv",
    dtypes=GEMV_DTYPES,
    source="gemv/02_outer.cu",
    template="gemmlab::outer",
    description="C written once at memory bandwidth, 16-byte pieces of its rows from K products in registers "
    "(products of a few K: weight gradients at a token)",
    template_args=_template_args,
    geometry=_geometry,
    variants=GEMV_VARIANTS,
    rules=Rules(offer=_auto_hook),
)
