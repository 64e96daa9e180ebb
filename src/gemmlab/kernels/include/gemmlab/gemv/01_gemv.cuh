// gemmlab/gemv/01_gemv.cuh: the gemv rung's device functions (gemv/01_gemv.cu).
// One pass streams op(B) once; each element of op(B) read serves the MT rows
// of op(A), whose elements come from the cache (op(A) is MT rows: small).
#pragma once

#include <gemmlab/layout.cuh>
#include <gemmlab/storage.cuh>

namespace gemmlab {

constexpr int GEMV_THREADS = 256;                 // threads per block
constexpr int GEMV_WARPS = GEMV_THREADS / 32;     // columns per block (op(B) 'T'), K slices (op(B) 'N')
// Bytes of op(B) a thread loads at once (16-byte aligned operands): along K where
// op(B) is column-major (a warp reads 512 contiguous bytes a step); along N where
// it is row-major (a warp reads a 128-byte row segment, and the blocks, 32
// threads wide, stay many).
constexpr int GEMV_LOAD_BYTES_K = 16;
constexpr int GEMV_LOAD_BYTES_N = 4;

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

// VEC consecutive elements at p (aligned to their size) as floats, in one load;
// the elements are taken out of the loaded 32-bit words by shifts.
template <int VEC, class S>
__device__ __forceinline__ void load_vec(const S* __restrict__ p, float (&out)[VEC]) {
    constexpr int BYTES = VEC * int(sizeof(S));
    unsigned w[(BYTES + 3) / 4];
    if constexpr (BYTES == 16) {
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(p));
        w[0] = q.x; w[1] = q.y; w[2] = q.z; w[3] = q.w;
    } else if constexpr (BYTES == 8) {
        const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
        w[0] = q.x; w[1] = q.y;
    } else if constexpr (BYTES == 4) {
        w[0] = __ldg(reinterpret_cast<const unsigned*>(p));
    } else {
        static_assert(BYTES == 2, "loads of 2, 4, 8 or 16 bytes");
        w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
    }
#pragma unroll
    for (int v = 0; v < VEC; ++v)
        out[v] = elem_from_bits<S>(sizeof(S) == 4 ? w[v] : w[v / 2] >> (16 * (v % 2)));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, d);
    return x;
}

// op(B) column-major: a warp per column n of C, lanes along K (VEC elements each
// per step), the MT rows' sums reduced across the warp at the end.
template <int MT, int VEC, char OPA, class S, class O>
__device__ __forceinline__ void gemv_columns_along_k(int M, int N, int K, float alpha, const S* __restrict__ A,
                                                     int lda, const S* __restrict__ B, int ldb, float beta,
                                                     O* __restrict__ C, int ldc) {
    const int lane = threadIdx.x % 32;
    const int k_vec = K / VEC * VEC;   // read VEC at a time; the rest one at a time
    for (int n = blockIdx.x * GEMV_WARPS + threadIdx.x / 32; n < N; n += gridDim.x * GEMV_WARPS) {
        const S* col = B + (long long)n * ldb;
        for (int m0 = 0; m0 < M; m0 += MT) {
            float acc[MT];
#pragma unroll
            for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
#pragma unroll 2
            for (int k = lane * VEC; k < k_vec; k += 32 * VEC) {
                float b[VEC];
                load_vec<VEC>(col + k, b);
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    if (m0 + m < M) {
#pragma unroll
                        for (int v = 0; v < VEC; ++v)
                            acc[m] = fmaf(load_ro(&A[elem_offset<OPA>(m0 + m, k + v, lda)]), b[v], acc[m]);
                    }
                }
            }
            for (int k = k_vec + lane; k < K; k += 32) {
                const float b = load_ro(&col[k]);
#pragma unroll
                for (int m = 0; m < MT; ++m)
                    if (m0 + m < M) acc[m] = fmaf(load_ro(&A[elem_offset<OPA>(m0 + m, k, lda)]), b, acc[m]);
            }
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const float sum = warp_sum(acc[m]);
                if (lane == 0 && m0 + m < M) store_scaled_as(&C[(long long)(m0 + m) * ldc + n], sum, alpha, beta);
            }
        }
    }
}

// op(B) row-major: a thread per VEC consecutive columns, the block's warps taking
// every GEMV_WARPS-th row of op(B), their sums added through shared memory.
template <int MT, int VEC, char OPA, class S, class O>
__device__ __forceinline__ void gemv_rows_along_n(int M, int N, int K, float alpha, const S* __restrict__ A,
                                                  int lda, const S* __restrict__ B, int ldb, float beta,
                                                  O* __restrict__ C, int ldc) {
    constexpr int COLS = 32 * VEC;             // columns of C per block and pass
    __shared__ float partial[GEMV_WARPS][MT][COLS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int n0 = blockIdx.x * COLS; n0 < N; n0 += gridDim.x * COLS) {
        const int n = n0 + lane * VEC;
        const bool whole = n + VEC <= N;       // else the columns past N read as zeros
        for (int m0 = 0; m0 < M; m0 += MT) {
            float acc[MT][VEC];
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int v = 0; v < VEC; ++v) acc[m][v] = 0.0f;
#pragma unroll 2
            for (int k = warp; k < K; k += GEMV_WARPS) {
                const S* row = B + (long long)k * ldb;
                float b[VEC];
                if (whole) {
                    load_vec<VEC>(row + n, b);
                } else {
#pragma unroll
                    for (int v = 0; v < VEC; ++v) b[v] = n + v < N ? load_ro(&row[n + v]) : 0.0f;
                }
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    if (m0 + m < M) {
                        const float a = load_ro(&A[elem_offset<OPA>(m0 + m, k, lda)]);   // one address a warp
#pragma unroll
                        for (int v = 0; v < VEC; ++v) acc[m][v] = fmaf(a, b[v], acc[m][v]);
                    }
                }
            }
            // Every warp's sums at once (indices known at compile time: acc stays in
            // registers), then each thread adds up outputs across the warps.
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int v = 0; v < VEC; ++v) partial[warp][m][lane * VEC + v] = acc[m][v];
            __syncthreads();
            for (int i = threadIdx.x; i < MT * COLS; i += GEMV_THREADS) {
                const int m = i / COLS, c = i % COLS;
                if (m0 + m < M && n0 + c < N) {
                    float sum = 0.0f;
#pragma unroll
                    for (int w = 0; w < GEMV_WARPS; ++w) sum += partial[w][m][c];
                    store_scaled_as(&C[(long long)(m0 + m) * ldc + n0 + c], sum, alpha, beta);
                }
            }
            __syncthreads();   // read before the next pass writes
        }
    }
}

}  // namespace gemmlab
