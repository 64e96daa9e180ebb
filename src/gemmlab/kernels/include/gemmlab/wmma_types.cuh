// gemmlab/wmma_types.cuh: WMMA fragment types chosen by small integer codes, so
// that NVRTC name expressions for lab kernels stay short (fragment_dump<0, 16, 16, 16, 0, 0>).
//   USE:  0 matrix_a, 1 matrix_b, 2 accumulator
//   DT:   0 half, 1 bf16, 2 tf32, 3 float
//   COL:  0 row-major, 1 column-major (ignored for accumulators, whose layout is a load argument)
#pragma once

#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace gemmlab {
namespace wmma_types {

template <int DT> struct Storage;
template <> struct Storage<0> { using type = __half;         using wmma = __half; };
template <> struct Storage<1> { using type = __nv_bfloat16;  using wmma = __nv_bfloat16; };
template <> struct Storage<2> { using type = float;          using wmma = nvcuda::wmma::precision::tf32; };
template <> struct Storage<3> { using type = float;          using wmma = float; };

template <int USE> struct Use;
template <> struct Use<0> { using type = nvcuda::wmma::matrix_a; };
template <> struct Use<1> { using type = nvcuda::wmma::matrix_b; };

template <int COL> struct Layout { using type = nvcuda::wmma::row_major; };
template <> struct Layout<1> { using type = nvcuda::wmma::col_major; };

template <int USE, int M, int N, int K, int DT, int COL>
struct Fragment {
    using type = nvcuda::wmma::fragment<typename Use<USE>::type, M, N, K, typename Storage<DT>::wmma,
                                        typename Layout<COL>::type>;
};
template <int M, int N, int K, int DT, int COL>
struct Fragment<2, M, N, K, DT, COL> {
    using type = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, M, N, K, typename Storage<DT>::wmma>;
};

__device__ __forceinline__ unsigned raw_bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ unsigned raw_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ unsigned raw_bits(float v) { return __float_as_uint(v); }

}  // namespace wmma_types
}  // namespace gemmlab
