// gemmlab/gemv/elements.cuh: loads of operand elements as their bits, through the
// read-only cache, converted to FP32 (the gemv rungs, gemv/01_gemv.cu, gemv/02_outer.cu
// and gemv/03_gemv_mma.cu, which keeps the bits as mma fragments).
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

// 32-bit words that VEC elements of type S fill.
template <int VEC, class S>
__host__ __device__ constexpr int gemv_words() { return (VEC * int(sizeof(S)) + 3) / 4; }

// Bits of VEC consecutive elements at p, through the read-only path; converted
// later by words_to_floats.  WHOLE: all VEC inside K, else `valid` of them (the
// rest read as 0: the end of K, element by element).
template <bool WHOLE, int VEC, class S>
__device__ __forceinline__ void load_words(const S* __restrict__ p, int valid, unsigned (&w)[gemv_words<VEC, S>()]) {
    constexpr int BYTES = VEC * int(sizeof(S));   // WHOLE: one load of them (p aligned to it)
    if constexpr (WHOLE && BYTES == 16) {
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(p));
        w[0] = q.x; w[1] = q.y; w[2] = q.z; w[3] = q.w;
    } else if constexpr (WHOLE && BYTES == 8) {
        const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
        w[0] = q.x; w[1] = q.y;
    } else if constexpr (WHOLE && BYTES == 4) {
        w[0] = __ldg(reinterpret_cast<const unsigned*>(p));
    } else if constexpr (WHOLE) {
        static_assert(BYTES == 2, "loads of 2, 4, 8 or 16 bytes");
        w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
    } else {
#pragma unroll
        for (int i = 0; i < gemv_words<VEC, S>(); ++i) w[i] = 0;
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
            if (v < valid) {
                const unsigned e = __ldg(reinterpret_cast<const GemvBits<S>*>(p + v));
                w[v * int(sizeof(S)) / 4] |= sizeof(S) == 4 ? e : e << (16 * (v % 2));
            }
        }
    }
}

template <int VEC, class S>
__device__ __forceinline__ void words_to_floats(const unsigned (&w)[gemv_words<VEC, S>()], float (&out)[VEC]) {
#pragma unroll
    for (int v = 0; v < VEC; ++v)
        out[v] = elem_from_bits<S>(sizeof(S) == 4 ? w[v] : w[v / 2] >> (16 * (v % 2)));
}

}  // namespace gemmlab
