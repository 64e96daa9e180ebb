// gemmlab/ec/choice_rules.cuh: the constants of precision="fp32_tc"'s rules for
// choosing between FP16 parts (as they are, or scaled by powers of two) and TF32
// parts (not a rung's idea).  Two kernels apply them on the GPU: choose_method.cu
// to one exponent histogram per operand (a scale per matrix), and split_scaled.cu
// to each row of op(A) and column of op(B) as it splits them (a scale per row or
// column).  gemmlab.ec reads the same lines for its host-side rules.
#pragma once

namespace gemmlab {

constexpr int EXPONENT_BIAS = 127;        // FP32's: biased exponent field e holds [2^(e-127), 2^(e-126))
// Largest exponent a value may have for the FP16 methods: |x| < 2^15, inside FP16
// (max 65504) with room for hi's rounding up.
constexpr int FP16_TOP = 14;
constexpr int FP16_NORMAL_MIN = -14;      // smallest exponent of a normal FP16 value: below it hi loses bits
// The share of normal elements that may lie below FP16's normal range (after
// scaling) before the FP16 methods give way to TF32 parts, as the ratio
// UNDERFLOW_NUM / UNDERFLOW_DEN, so that both sides compare it exactly, in integers.
// At 1/1000, U(-1, 1) inputs (2^-14 of them below 2^-14) stay on unscaled FP16.
constexpr int UNDERFLOW_NUM = 1;
constexpr int UNDERFLOW_DEN = 1000;
constexpr int MAX_SCALE_EXPONENT = 64;    // scales within 2^-64 .. 2^64: scaling and unscaling are exact
constexpr int WIDE_BINADES = 28;          // what scaled FP16 covers below a matrix's largest value

// gemmlab.ec.fp16_scale_exponent: the power of two that moves the largest
// magnitude (unbiased exponent top) just below 2^15; 0 without normal values.
__device__ __forceinline__ int scale_exponent(bool any_normal, int top) {
    return any_normal ? min(max(FP16_TOP - top, -MAX_SCALE_EXPONENT), MAX_SCALE_EXPONENT) : 0;
}

}  // namespace gemmlab
