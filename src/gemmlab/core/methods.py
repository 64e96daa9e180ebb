"""FP32-accurate GEMM on tensor cores by error correction: choosing the method.

Each FP32 value is split into a high and a low tensor-core part (see
kernels/include/gemmlab/ec/01_ec_wmma.cuh).  Three methods, all with the main
product accumulated in FP32 outside the tensor core:

``fp16_ec``         FP16 parts, hi = fp16(x), lo = fp16((x - hi) * 2^11).  Fast and
                    accurate while the values fit FP16's exponent range: beyond
                    65504 hi overflows, and below 2^-14 hi (and, 2^11 lower, lo)
                    becomes subnormal and loses bits.
``fp16_ec_scaled``  The same after multiplying A and B by powers of two chosen from
                    their largest exponents (so the largest magnitude lands just
                    below 2^15); the result is scaled back.  Covers any range of
                    28 binades below each matrix's largest value.
``tf32_ec``         TF32 parts (big = tf32(x), small = tf32(x - big)): FP32's exponent
                    range, so no scaling; TF32 tensor cores run at half the FP16 rate.

``precision="fp32_tc"`` picks one from the data: a histogram of A's and B's
exponents (one pass over each on the GPU), then :func:`choose`'s rules --
applied on the GPU by kernels/ec/choose_method.cu, so that the call never waits
for the host; :func:`choose` is the same rules on host-side counts, and
:func:`choice_of_record` reads back what the GPU chose.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The GPU passes live beside their kernels.
from ..kernels.ec.exponent_histogram import EXPONENT_BINS, exponent_histograms

# The rules' constants are written once, in kernels/ec/choose_method.cu, which
# applies the same rules on the GPU for matmul:
#   FP16_TOP            largest exponent a (scaled) value may have: |x| < 2^15
#   FP16_NORMAL_MIN     smallest exponent of a normal FP16 value: below it hi loses bits
#   UNDERFLOW_NUM / UNDERFLOW_DEN   the share of normal elements that may lie below
#                       FP16's normal range (after scaling) before the FP16 methods give
#                       way to TF32 parts, compared exactly, in integers
#   MAX_SCALE_EXPONENT  scale factors stay within 2^-64 .. 2^64 (exact)
#   WIDE_BINADES        the range scaled FP16 covers below a matrix's largest value
from ..kernels.ec.choose_method import (
    CHOICE,
    CHOICE_METHODS,
    FP16_NORMAL_MIN,
    FP16_TOP,  # noqa: F401
    MAX_SCALE_EXPONENT,
    UNDERFLOW_DEN,
    UNDERFLOW_NUM,
    WIDE_BINADES,
)

UNDERFLOW_LIMIT = UNDERFLOW_NUM / UNDERFLOW_DEN  # the same share as a number, for messages and tests

EC_PRECISIONS = ("fp32_tc", "fp16_ec", "fp16_ec_scaled", "tf32_ec")
# The precisions whose method is chosen on the GPU from the data, with their candidates
# (the FP16 one first: its pre-pass may make the choice) and whether the choice is only
# the scales (choice_of_record's scaled_only).
CHOSEN_ON_GPU = {"fp32_tc": (("fp16_ec", "tf32_ec"), False), "fp16_ec_scaled": (("fp16_ec_scaled",), True)}


@dataclass(frozen=True)
class ExponentStats:
    """Counts of a matrix's elements by FP32 biased exponent field (256 bins:
    0 = zero or subnormal, 255 = Inf or NaN)."""

    counts: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray) -> "ExponentStats":
        """The histogram of a host array, computed with NumPy (the GPU path is
        :func:`exponent_stats`)."""
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        return cls(np.bincount(((bits >> 23) & 0xFF).ravel(), minlength=EXPONENT_BINS).astype(np.int64))

    @property
    def nonzero(self) -> int:
        """Finite, normal elements (zeros, subnormals, Inf and NaN are not counted)."""
        return int(self.counts[1:255].sum())

    @property
    def max_exponent(self) -> int | None:
        """The largest unbiased exponent among normal elements, or None if there are none."""
        nz = np.nonzero(self.counts[1:255])[0]
        return int(nz[-1]) + 1 - 127 if len(nz) else None

    def count_below(self, exponent: int) -> int:
        """Normal elements whose unbiased exponent is below ``exponent``."""
        return int(self.counts[1 : min(max(exponent + 127, 1), 255)].sum())

    def fraction_below(self, exponent: int) -> float:
        """Share of the normal elements whose unbiased exponent is below ``exponent``."""
        return self.count_below(exponent) / self.nonzero if self.nonzero else 0.0


@dataclass(frozen=True)
class MethodChoice:
    """The method for one product, the scale exponents of A and B, and why."""

    method: str  # fp16_ec, fp16_ec_scaled or tf32_ec
    scale_a_exp: int = 0
    scale_b_exp: int = 0
    reason: str = ""
    per_row: bool = False  # fp16_ec_scaled with a scale per row of op(A) and column of op(B) (then 0, 0 above)

    @property
    def kernel_dtype(self) -> str:
        """The registry dtype of the method (what the kernel template is built for)."""
        return "tf32_ec" if self.method == "tf32_ec" else "fp16_ec"

    @property
    def extra(self) -> dict:
        """The scalar scales a plan passes its kernel (1 where each row and column has its own)."""
        return {"scale_a": 2.0**self.scale_a_exp, "scale_b": 2.0**self.scale_b_exp}


def _scale_exponent(top):
    """choice_rules.cuh's scale_exponent for an unbiased exponent (or an array of them, a
    segment each): the power of two that moves the largest magnitude just below 2^15,
    within +-MAX_SCALE_EXPONENT."""
    return np.clip(FP16_TOP - top, -MAX_SCALE_EXPONENT, MAX_SCALE_EXPONENT)


def _few_below(below: int, normal: int) -> bool:
    """At most UNDERFLOW_NUM / UNDERFLOW_DEN of the normal elements fall below FP16's
    normals once scaled, in integers (as the kernels compare)."""
    return below * UNDERFLOW_DEN <= normal * UNDERFLOW_NUM


def fp16_scale_exponent(stats: ExponentStats) -> int:
    """The power of two that moves the matrix's largest magnitude just below 2^15."""
    top = stats.max_exponent
    return 0 if top is None else int(_scale_exponent(top))


def _fits(stats: ExponentStats, scale_exp: int) -> bool:
    top = stats.max_exponent
    if top is None:
        return True
    return top + scale_exp <= FP16_TOP and _few_below(stats.count_below(FP16_NORMAL_MIN - scale_exp), stats.nonzero)


def _range_text(top: int | None, wide_share: float) -> str:
    if top is None:
        return "no nonzero finite values"
    return f"largest magnitude 2^{top}, {100 * wide_share:.2g}% more than 2^{WIDE_BINADES} below it"


def _range(stats: ExponentStats) -> str:
    top = stats.max_exponent
    return _range_text(top, stats.fraction_below(top - WIDE_BINADES) if top is not None else 0.0)


_WHY = {
    "fp16_ec": "both fit FP16 as they are",
    "fp16_ec_scaled": "FP16 after scaling by 2^{sa} and 2^{sb}",
    "tf32_ec": "too wide for FP16 parts, so TF32 parts",
}


def choose(a: ExponentStats, b: ExponentStats) -> MethodChoice:
    """The method precision="fp32_tc" uses for A and B with these exponent statistics.

    FP16 parts without scaling if both matrices fit FP16's range as they are
    (largest exponent <= FP16_TOP, at most UNDERFLOW_NUM / UNDERFLOW_DEN of
    the elements below 2^FP16_NORMAL_MIN); else FP16 parts with per-matrix power-of-two scaling if that makes
    both fit; else TF32 parts.
    """
    if _fits(a, 0) and _fits(b, 0):
        return MethodChoice("fp16_ec", 0, 0, f"A: {_range(a)}; B: {_range(b)}; {_WHY['fp16_ec']}")
    sa, sb = fp16_scale_exponent(a), fp16_scale_exponent(b)
    if _fits(a, sa) and _fits(b, sb):
        return MethodChoice(
            "fp16_ec_scaled", sa, sb, f"A: {_range(a)}; B: {_range(b)}; {_WHY['fp16_ec_scaled'].format(sa=sa, sb=sb)}"
        )
    return MethodChoice("tf32_ec", 0, 0, f"A: {_range(a)}; B: {_range(b)}; {_WHY['tf32_ec']}")


def scaled_choice(a: ExponentStats, b: ExponentStats) -> MethodChoice:
    """precision="fp16_ec_scaled": FP16 parts with each matrix's scale, whatever the range."""
    sa, sb = fp16_scale_exponent(a), fp16_scale_exponent(b)
    return MethodChoice("fp16_ec_scaled", sa, sb, _SCALED_AS_ASKED.format(sa=sa, sb=sb))


_SCALED_AS_ASKED = "scaled by 2^{sa} (A) and 2^{sb} (B) as asked"


def choice_of_record(record, scaled_only: bool) -> MethodChoice | None:
    """The MethodChoice that kernels/ec/choose_method.cu wrote into ``record`` (its
    CHOICE_FIELDS int64s, read back from the GPU), with a reason that says so;
    None if no choice has been written yet (a captured call not yet replayed)."""
    r = {name: int(record[i]) for name, i in CHOICE.items()}
    method = CHOICE_METHODS.get(r["method"])
    if method is None:
        return None
    if r["per_row"]:
        return _per_row_choice(method, r)
    sa, sb = r["scale_a"], r["scale_b"]
    head = f"chosen on the GPU: {method}, scales 2^{sa} (A) and 2^{sb} (B)"
    if scaled_only:
        return MethodChoice(method, sa, sb, f"{head}; {_SCALED_AS_ASKED.format(sa=sa, sb=sb)}")

    def rng(side):
        n = r[f"normal_{side}"]
        return _range_text(r[f"top_{side}"] if n else None, r[f"wide_{side}"] / n if n else 0.0)

    why = _WHY[method].format(sa=sa, sb=sb)
    return MethodChoice(method, sa, sb, f"{head}; A: {rng('a')}; B: {rng('b')}; {why}")


_PER_ROW_HEAD = "chosen on the GPU: {method}, scales per row of A and column of B"


def _per_row_choice(method: str, r: dict) -> MethodChoice:
    """A record that split_scaled.cu wrote (per_row): its method and counts, said so."""

    def rng(side):
        n = r[f"normal_{side}"]
        if not n:
            return "no nonzero finite values"
        return (
            f"largest magnitude 2^{r[f'top_{side}']}, {100 * r[f'wide_{side}'] / n:.2g}% more than "
            f"2^{WIDE_BINADES} below their row's (column's) largest"
        )

    why = "FP16 after scaling each row and column" if method == "fp16_ec_scaled" else _WHY["tf32_ec"]
    return MethodChoice(
        method, 0, 0, f"{_PER_ROW_HEAD.format(method=method)}; A: {rng('a')}; B: {rng('b')}; {why}", per_row=True
    )


@dataclass(frozen=True)
class SegmentChoice:
    """choose_per_row's answer: the MethodChoice, each segment's scale exponent (rows of
    op(A), columns of op(B), every matrix of a batch in turn) and the counts the record
    holds."""

    choice: MethodChoice
    scale_a: np.ndarray
    scale_b: np.ndarray
    counts: dict


def _segment_stats(x: np.ndarray):
    """(scale exponents, normal elements, those below FP16's normals once scaled, largest
    biased exponent field of a normal element, any scale clamped) over the rows of ``x``
    (a segment per row)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    field = ((bits >> 23) & 0xFF).astype(np.int64)
    normal = (field >= 1) & (field <= 254)
    top_field = np.where(normal, field, 0).max(axis=1) if x.shape[1] else np.zeros(x.shape[0], np.int64)
    top = top_field - 127
    s = np.where(top_field > 0, _scale_exponent(top), 0)
    clamped = bool(np.any((top_field > 0) & (top + s > FP16_TOP)))
    below = normal & (field < (FP16_NORMAL_MIN - s + 127)[:, None])
    return s, int(normal.sum()), int(below.sum()), int(top_field.max(initial=0)), clamped


def choose_per_row(op_a: np.ndarray, op_b: np.ndarray) -> SegmentChoice:
    """What split_scaled.cu chooses (fp32_tc on ec_wgmma's FOLD), on host arrays: op(A)
    as (..., M, K), op(B) as (..., K, N).  Each row of op(A) and column of op(B) is scaled
    by the power of two that moves its largest magnitude just below 2^15
    (fp16_scale_exponent's rule per segment); FP16 parts (fp16_ec_scaled) if, per operand,
    no scale hit MAX_SCALE_EXPONENT and at most UNDERFLOW_NUM / UNDERFLOW_DEN of the normal
    elements fall below FP16's normals once scaled; else TF32 parts."""
    a = np.asarray(op_a, np.float32)
    b = np.asarray(op_b, np.float32)
    rows_a = a.reshape(-1, a.shape[-1])  # (batch * M, K)
    rows_b = np.swapaxes(b, -1, -2).reshape(-1, b.shape[-2])  # (batch * N, K)
    sa, na, ba, ta, ca = _segment_stats(rows_a)
    sb, nb, bb, tb, cb = _segment_stats(rows_b)
    fits_a = not ca and _few_below(ba, na)
    fits_b = not cb and _few_below(bb, nb)
    method = "fp16_ec_scaled" if fits_a and fits_b else "tf32_ec"
    counts = {
        "normal_a": na,
        "normal_b": nb,
        "wide_a": ba,
        "wide_b": bb,
        "top_a": ta - 127 if na else 0,
        "top_b": tb - 127 if nb else 0,
    }
    return SegmentChoice(_per_row_choice(method, {**counts, "method": method}), sa, sb, counts)


# -- the GPU side ---------------------------------------------------------------------------
# The pass itself is kernels/ec/exponent_histogram.py, beside its kernel.


def exponent_stats(gpu, stream: int, operands) -> list[ExponentStats]:
    """Exponent histograms of device matrices ``operands`` = [(ptr, rows, cols, ld), ...],
    computed on the GPU on ``stream`` (one pass over each), then copied back."""
    return [ExponentStats(counts) for counts in exponent_histograms(gpu, stream, operands)]
