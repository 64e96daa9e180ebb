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
exponents (one pass over each on the GPU), then :func:`choose`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The GPU pass lives beside its kernel; HISTOGRAM_THREADS is re-exported for callers of gemmlab.ec.
from .kernels.ec.exponent_histogram import EXPONENT_BINS, HISTOGRAM_THREADS, exponent_histograms  # noqa: F401

# Largest exponent a scaled value may have: |x| < 2^15, inside FP16 (max 65504)
# with room for hi's rounding up.
FP16_TOP = 14
# Smallest exponent of a normal FP16 value: below it hi loses bits.
FP16_NORMAL_MIN = -14
# The share of nonzero elements that may lie below FP16's normal range (after
# scaling) before the FP16 methods give way to TF32 parts.  At 1e-3, U(-1, 1)
# inputs (2^-14 of them below 2^-14) stay on the unscaled FP16 method.
UNDERFLOW_LIMIT = 1e-3
# Scale factors stay within 2^-64 .. 2^64, so that scaling and unscaling are exact.
MAX_SCALE_EXPONENT = 64

EC_PRECISIONS = ("fp32_tc", "fp16_ec", "fp16_ec_scaled", "tf32_ec")


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

    def fraction_below(self, exponent: int) -> float:
        """Share of the normal elements whose unbiased exponent is below ``exponent``."""
        if not self.nonzero:
            return 0.0
        hi = min(max(exponent + 127, 1), 255)
        return float(self.counts[1:hi].sum()) / self.nonzero


@dataclass(frozen=True)
class Choice:
    """The method for one product, the scale exponents of A and B, and why."""

    method: str          # fp16_ec, fp16_ec_scaled or tf32_ec
    scale_a_exp: int = 0
    scale_b_exp: int = 0
    reason: str = ""

    @property
    def kernel_dtype(self) -> str:
        """The registry dtype of the method (what the kernel template is built for)."""
        return "tf32_ec" if self.method == "tf32_ec" else "fp16_ec"

    @property
    def extra(self) -> dict:
        return {"scale_a": 2.0 ** self.scale_a_exp, "scale_b": 2.0 ** self.scale_b_exp}


def fp16_scale_exponent(stats: ExponentStats) -> int:
    """The power of two that moves the matrix's largest magnitude just below 2^15."""
    top = stats.max_exponent
    if top is None:
        return 0
    return int(np.clip(FP16_TOP - top, -MAX_SCALE_EXPONENT, MAX_SCALE_EXPONENT))


def _fits(stats: ExponentStats, scale_exp: int) -> bool:
    top = stats.max_exponent
    if top is None:
        return True
    return top + scale_exp <= FP16_TOP and stats.fraction_below(FP16_NORMAL_MIN - scale_exp) <= UNDERFLOW_LIMIT


def _range(stats: ExponentStats) -> str:
    top = stats.max_exponent
    if top is None:
        return "no nonzero finite values"
    return f"largest magnitude 2^{top}, {100 * stats.fraction_below(top - 28):.2g}% more than 2^28 below it"


def choose(a: ExponentStats, b: ExponentStats) -> Choice:
    """The method precision="fp32_tc" uses for A and B with these exponent statistics.

    FP16 parts without scaling if both matrices fit FP16's range as they are
    (largest exponent <= 14, at most UNDERFLOW_LIMIT of the elements below
    2^-14); else FP16 parts with per-matrix power-of-two scaling if that makes
    both fit; else TF32 parts.
    """
    if _fits(a, 0) and _fits(b, 0):
        return Choice("fp16_ec", 0, 0, f"A: {_range(a)}; B: {_range(b)}; both fit FP16 as they are")
    sa, sb = fp16_scale_exponent(a), fp16_scale_exponent(b)
    if _fits(a, sa) and _fits(b, sb):
        return Choice("fp16_ec_scaled", sa, sb,
                      f"A: {_range(a)}; B: {_range(b)}; FP16 after scaling by 2^{sa} and 2^{sb}")
    return Choice("tf32_ec", 0, 0, f"A: {_range(a)}; B: {_range(b)}; too wide for FP16 parts, so TF32 parts")


def scaled_choice(a: ExponentStats, b: ExponentStats) -> Choice:
    """precision="fp16_ec_scaled": FP16 parts with each matrix's scale, whatever the range."""
    sa, sb = fp16_scale_exponent(a), fp16_scale_exponent(b)
    return Choice("fp16_ec_scaled", sa, sb, f"scaled by 2^{sa} (A) and 2^{sb} (B) as asked")


# -- the GPU side ---------------------------------------------------------------------------
# The pass itself is kernels/ec/exponent_histogram.py, beside its kernel.

def exponent_stats(gpu, stream: int, operands) -> list[ExponentStats]:
    """Exponent histograms of device matrices ``operands`` = [(ptr, rows, cols, ld), ...],
    computed on the GPU on ``stream`` (one pass over each), then copied back."""
    return [ExponentStats(counts) for counts in exponent_histograms(gpu, stream, operands)]
