// gemmlab/gemv/elements.cuh: loads of operand elements as their bits, through the
// read-only cache, converted to FP32 (the gemv and outer rungs, gemv/01_gemv.cu and
// gemv/02_outer.cu).
#pragma once

#include <gemmlab/storage.cuh>

namespace gemmlab {

// Elements are loaded as their bits (through the read-only cache: op(A) and op(B)
// are only read) and converted with cvt.
template <class S> struct GemvBitsOf { using type = unsigned short; };
template <> struct GemvBitsOf<float> { using type = unsigned; };
template <class S> using GemvBits = typename GemvBitsOf<S>::type;

// The element of type S whose bits are the low sizeof(S) bytes of `bits`.
template <class S> __device__ __forceinline__ float elem_from_bits(unsigned bits);
template <> __device__ __forceinline__ float elem_from_bits<float>(unsigned bits) { return __uint_as_float(bits); }
template <> __device__ __forceinline__ float elem_from_bits<__half>(unsigned bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)bits));
    return f;
}
template <> __device__ __forceinline__ float elem_from_bits<__nv_bfloat16>(unsigned bits) {
    return __uint_as_float(bits << 16);   // a bfloat16 is the top half of a float
}

// The element at p of an operand the kernel only reads.
template <class S>
__device__ __forceinline__ float load_ro(const S* __restrict__ p) {
    return elem_from_bits<S>(__ldg(reinterpret_cast<const GemvBits<S>*>(p)));
}

}  // namespace gemmlab
