// gemmlab/ec/01_ec_wmma.cuh: the error-corrected ladder starts here.  Its idea:
// split FP32 values into two tensor-core parts, for FP32-accurate GEMM by error
// correction (Ootomo and Yokota's method).  ec_wmma splits at every fragment load
// (tensor rungs 1-2's fragments, CUDA-core rung 8's cp.async copies); ec_wgmma
// and its pre-pass split once, before the GEMM.
//
//   FP16 (METHOD_FP16_EC):  hi = fp16(x), lo = fp16((x - hi) * 2^11)
//                           x ~ hi + lo * 2^-11 to about 2^-22 relative
//   TF32 (METHOD_TF32_EC):  big = tf32(x), small = tf32(x - big)
//                           (no scaling: TF32 keeps FP32's exponent range)
//
// A * B ~ hi_A hi_B + (lo_A hi_B + hi_A lo_B) * LO_WEIGHT; lo * lo is dropped.
#pragma once

#include <gemmlab/simt/08_pipelined.cuh>
#include <gemmlab/tensor/02_wmma_warptile.cuh>

namespace gemmlab {

template <int METHOD> struct EcSplit;

// The 2^11 keeps the low part's significant bits away from FP16's subnormals:
// without it, inputs much below 1 lose their low part and the product falls
// back to FP16 accuracy.
template <> struct EcSplit<METHOD_FP16_EC> {
    static constexpr int DT = TYPE_FLOAT16;           // the parts' type
    static constexpr float LO_SCALE = 2048.0f;        // 2^11
    static constexpr float LO_WEIGHT = 1.0f / 2048.0f;
    // FOLD (ec_wgmma's): lo in hi's units, without the 2^11 -- x scaled so that its
    // matrix's largest value lies just below 2^15 keeps lo's bits down to 2^-24, far below it.
    template <bool FOLD = false>
    __device__ static __forceinline__ void split(float x, __half& hi, __half& lo) {
        hi = __float2half_rn(x);
        // x - hi is exact in FP32.  An infinite hi (x infinite, or beyond FP16's
        // range) gets lo = 0, so that Inf stays Inf instead of becoming Inf - Inf.
        lo = __hisinf(hi) ? __float2half_rn(0.0f) : __float2half_rn((x - __half2float(hi)) * (FOLD ? 1.0f : LO_SCALE));
    }
};

template <> struct EcSplit<METHOD_TF32_EC> {
    static constexpr int DT = TYPE_TF32;              // TF32 in float storage
    static constexpr float LO_WEIGHT = 1.0f;
    template <bool FOLD = false>   // small is in big's units either way
    __device__ static __forceinline__ void split(float x, float& big, float& small) {
        big = nvcuda::wmma::__float_to_tf32(x);
        small = isinf(big) ? 0.0f : nvcuda::wmma::__float_to_tf32(x - big);   // Inf stays Inf
    }
};

// Fill the two parts' fragments (one type, so one fragment map) from a
// row-major FP32 tile in shared memory (leading dimension ld), each value
// multiplied by scale first (a power of two: exact, see the scaled method).
template <int METHOD, class Frag>
__device__ __forceinline__ void load_split(Frag& hi, Frag& lo, const float* tile, int ld, float scale) {
    wmma_ext::foreach_ij(hi, [&](int k, unsigned r, unsigned c) {
        EcSplit<METHOD>::split(tile[r * ld + c] * scale, hi.x[k], lo.x[k]);
    });
}

}  // namespace gemmlab
