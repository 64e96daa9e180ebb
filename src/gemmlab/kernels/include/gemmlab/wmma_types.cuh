// gemmlab/wmma_types.cuh: WMMA fragment and storage types chosen by the small
// integer codes of type_codes.cuh, so that NVRTC name expressions stay short
// (fragment_dump<0, 16, 16, 16, 0, 0>):
//   USE:  USE_MATRIX_A, USE_MATRIX_B, USE_ACCUMULATOR
//   DT:   TYPE_FLOAT16, TYPE_BFLOAT16, TYPE_TF32, TYPE_FLOAT32
//   COL:  LAYOUT_ROW, LAYOUT_COL (ignored for accumulators, whose layout is a load argument)
#pragma once

#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <gemmlab/type_codes.cuh>

namespace gemmlab {
namespace wmma_types {

template <int DT> struct Storage;
template <> struct Storage<TYPE_FLOAT16>  { using type = __half;         using wmma = __half; };
template <> struct Storage<TYPE_BFLOAT16> { using type = __nv_bfloat16;  using wmma = __nv_bfloat16; };
// TF32 WMMA exists from sm_80 (mma.h declares precision::tf32 there only); on sm_75
// only the FP16 types are usable.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
template <> struct Storage<TYPE_TF32>     { using type = float;          using wmma = nvcuda::wmma::precision::tf32; };
#endif
template <> struct Storage<TYPE_FLOAT32>  { using type = float;          using wmma = float; };

template <int USE> struct Use;
template <> struct Use<USE_MATRIX_A> { using type = nvcuda::wmma::matrix_a; };
template <> struct Use<USE_MATRIX_B> { using type = nvcuda::wmma::matrix_b; };

template <int COL> struct Layout { using type = nvcuda::wmma::row_major; };
template <> struct Layout<LAYOUT_COL> { using type = nvcuda::wmma::col_major; };

template <int USE, int M, int N, int K, int DT, int COL>
struct Fragment {
    using type = nvcuda::wmma::fragment<typename Use<USE>::type, M, N, K, typename Storage<DT>::wmma,
                                        typename Layout<COL>::type>;
};
template <int M, int N, int K, int DT, int COL>
struct Fragment<USE_ACCUMULATOR, M, N, K, DT, COL> {
    using type = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, M, N, K, typename Storage<DT>::wmma>;
};

// FP32 -> TF32 rounding for TF32 fragments.  Before sm_80 there is no TF32 WMMA: the
// template stands in so that FP16 kernels, whose TF32 branches (if constexpr) are
// discarded, compile; a TF32 instantiation there stops at the static_assert.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
__device__ __forceinline__ float to_tf32(float v) { return nvcuda::wmma::__float_to_tf32(v); }
#else
template <class T = void>
__device__ float to_tf32(float v) {
    static_assert(sizeof(T) == 0, "TF32 WMMA needs sm_80 or later");
    return v;
}
#endif

__device__ __forceinline__ unsigned raw_bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ unsigned raw_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ unsigned raw_bits(float v) { return __float_as_uint(v); }

}  // namespace wmma_types
}  // namespace gemmlab
