// gemmlab/storage.cuh: the types values are stored in (type_codes.cuh's FLOAT32,
// FLOAT16, BFLOAT16), their conversions to and from the FP32 the kernels compute
// in, and the alpha/beta store of one output in its own type.  Shared by the
// tensor-core rungs (tensor/01_wmma.cuh on) and gemv.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <gemmlab/type_codes.cuh>

namespace gemmlab {

template <int DT> struct StorageOf;
template <> struct StorageOf<TYPE_FLOAT32>  { using type = float; };
template <> struct StorageOf<TYPE_FLOAT16>  { using type = __half; };
template <> struct StorageOf<TYPE_BFLOAT16> { using type = __nv_bfloat16; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class O> __device__ __forceinline__ O from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// *out = alpha * acc + beta * *out in out's type; beta == 0 never reads *out, so
// NaN or Inf left in an uninitialised output cannot leak into the result.
template <class O>
__device__ __forceinline__ void store_scaled_as(O* out, float acc, float alpha, float beta) {
    *out = from_float<O>(beta == 0.0f ? alpha * acc : alpha * acc + beta * to_float(*out));
}

}  // namespace gemmlab
