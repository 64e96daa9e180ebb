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
template <> struct Storage<TYPE_TF32>     { using type = float;          using wmma = nvcuda::wmma::precision::tf32; };
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

__device__ __forceinline__ unsigned raw_bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ unsigned raw_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ unsigned raw_bits(float v) { return __float_as_uint(v); }

}  // namespace wmma_types
}  // namespace gemmlab
