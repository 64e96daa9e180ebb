// gemmlab/gemv/02_outer.cuh: the outer rung's device functions (gemv/02_outer.cu).
// A product of a few columns of op(A) (K of 1 to a few) is an outer product: C
// holds far more than op(A) and op(B) together, so each element of C is written
// once, whole rows of it by a warp, and op(A) and op(B) are read element by element
// into shared memory.
#pragma once

#include <gemmlab/layout.cuh>
#include <gemmlab/gemv/elements.cuh>

namespace gemmlab {

constexpr int OUTER_THREADS = 256;                 // threads per block
constexpr int OUTER_WARPS = OUTER_THREADS / 32;
constexpr int OUTER_ROWS_PER_WARP = 4;             // rows of C each lane writes a piece of
// Bytes of a row of C a lane writes: one 16-byte store where C's rows start on the
// 16-byte grid (ALIGNED), else as many bytes element by element.
constexpr int OUTER_STORE_BYTES = 16;
constexpr int OUTER_KC = 8;                        // elements of K staged at a time

// The bits of v rounded to the output type O, in the low sizeof(O) bytes (the inverse
// of elements.cuh's elem_from_bits).
template <class O> __device__ __forceinline__ unsigned bits_of_output(float v);
template <> __device__ __forceinline__ unsigned bits_of_output<float>(float v) { return __float_as_uint(v); }
template <> __device__ __forceinline__ unsigned bits_of_output<__half>(float v) {
    return __half_as_ushort(__float2half_rn(v));
}
template <> __device__ __forceinline__ unsigned bits_of_output<__nv_bfloat16>(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// A lane's VEC outputs of one row of C, out = alpha acc + beta out in O.  WIDE: VEC
// consecutive elements inside the row from a 16-byte aligned p, one 16-byte store
// (beta != 0: one 16-byte load of them first; C is written, so not through the
// read-only path); else element v at p + v step, the first `valid` of them.
template <bool WIDE, int VEC, class O>
__device__ __forceinline__ void outer_store(O* p, int step, int valid, const float (&acc)[VEC], float alpha,
                                            float beta) {
    if constexpr (WIDE) {
        static_assert(VEC * sizeof(O) == 16, "one 16-byte store a row");
        constexpr int PER_WORD = 4 / int(sizeof(O));
        uint4 q = make_uint4(0u, 0u, 0u, 0u);
        if (beta != 0.0f) q = *reinterpret_cast<const uint4*>(p);
        unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
            const int word = v / PER_WORD, shift = 32 / PER_WORD * (v % PER_WORD);
            const float r = beta == 0.0f ? alpha * acc[v] : alpha * acc[v] + beta * elem_from_bits<O>(w[word] >> shift);
            const unsigned keep = PER_WORD == 1 ? 0u : w[word] & ~(0xFFFFu << shift);
            w[word] = keep | bits_of_output<O>(r) << shift;
        }
        *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v)
            if (v < valid) store_scaled_as(p + v * step, acc[v], alpha, beta);
    }
}

// One block's tile of C: OUTER_WARPS warps of OUTER_ROWS_PER_WARP rows, each row's
// 32 VEC columns across the warp.  With ALIGNED a lane takes VEC consecutive columns
// (one 16-byte store a row); without, VEC columns 32 apart, so that each of the
// warp's element stores still covers 32 consecutive elements.  K is taken
// OUTER_KC at a time: the block loads that chunk of its rows of op(A) and its
// columns of op(B) at once, element by element in either layout (one round of
// loads, whatever K), converts them to FP32 into shared memory, and each lane sums
// its products from there: a warp's rows of op(A) for one k are one 16-byte read,
// the same for every lane.
template <bool ALIGNED, char OPA, char OPB, class S, class O>
__device__ __forceinline__ void outer_tile(int M, int N, int K, float alpha, const S* __restrict__ A, int lda,
                                           const S* __restrict__ B, int ldb, float beta, O* __restrict__ C,
                                           int ldc) {
    constexpr int VEC = OUTER_STORE_BYTES / int(sizeof(O));
    constexpr int R = OUTER_ROWS_PER_WARP, ROWS = OUTER_WARPS * R, COLS = 32 * VEC, KC = OUTER_KC;
    static_assert(R == 4, "a warp's rows of a k are one float4 of shared memory");
    __shared__ __align__(16) float staged_a[KC][ROWS];
    __shared__ __align__(16) float staged_b[KC][COLS];
    if (M <= 0 || N <= 0) return;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int col_tiles = (N + COLS - 1) / COLS;
    const int n0 = blockIdx.x % col_tiles * COLS, m0 = blockIdx.x / col_tiles * ROWS;
    // The lane's columns of the tile: VEC consecutive ones, or VEC 32 apart.
    const int first = ALIGNED ? VEC * lane : lane, step = ALIGNED ? 1 : 32;
    float acc[R][VEC] = {};
    for (int k0 = 0; k0 < K; k0 += KC) {
        __syncthreads();   // every warp is done with the previous chunk
        // Consecutive threads along each operand's stored rows; elements past M, N or K are 0.
        static_assert(ROWS * KC % OUTER_THREADS == 0 && KC * COLS % OUTER_THREADS == 0, "whole rounds of loads");
        float va[ROWS * KC / OUTER_THREADS], vb[KC * COLS / OUTER_THREADS];
#pragma unroll
        for (int j = 0; j < ROWS * KC / OUTER_THREADS; ++j) {
            const int i = threadIdx.x + j * OUTER_THREADS;
            const int m = OPA == 'N' ? i / KC : i % ROWS, k = OPA == 'N' ? i % KC : i / ROWS;
            va[j] = m0 + m < M && k0 + k < K ? load_ro(&A[elem_offset<OPA>(m0 + m, k0 + k, lda)]) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < KC * COLS / OUTER_THREADS; ++j) {
            const int i = threadIdx.x + j * OUTER_THREADS;
            const int k = OPB == 'N' ? i / COLS : i % KC, n = OPB == 'N' ? i % COLS : i / KC;
            vb[j] = n0 + n < N && k0 + k < K ? load_ro(&B[elem_offset<OPB>(k0 + k, n0 + n, ldb)]) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < ROWS * KC / OUTER_THREADS; ++j) {
            const int i = threadIdx.x + j * OUTER_THREADS;
            staged_a[OPA == 'N' ? i % KC : i / ROWS][OPA == 'N' ? i / KC : i % ROWS] = va[j];
        }
#pragma unroll
        for (int j = 0; j < KC * COLS / OUTER_THREADS; ++j) {
            const int i = threadIdx.x + j * OUTER_THREADS;
            staged_b[OPB == 'N' ? i / COLS : i % KC][OPB == 'N' ? i % COLS : i / KC] = vb[j];
        }
        __syncthreads();
        const int kc = min(KC, K - k0);
#pragma unroll 1
        for (int k = 0; k < kc; ++k) {
            const float4 a = *reinterpret_cast<const float4*>(&staged_a[k][warp * R]);
            const float av[R] = {a.x, a.y, a.z, a.w};
            float b[VEC];
#pragma unroll
            for (int v = 0; v < VEC; ++v) b[v] = staged_b[k][first + v * step];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int v = 0; v < VEC; ++v) acc[r][v] = fmaf(av[r], b[v], acc[r][v]);
        }
    }
    // The lane's columns inside N: with ALIGNED all VEC or a row's last few, else those
    // of the 32-apart columns that N reaches.
    const int n = n0 + first;
    const int valid = ALIGNED ? N - n : (N - n + 31) / 32;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int m = m0 + warp * R + r;
        if (m >= M) break;
        O* row = C + (long long)m * ldc + n;
        if constexpr (ALIGNED) {
            if (valid >= VEC) outer_store<true, VEC>(row, 1, VEC, acc[r], alpha, beta);
            else outer_store<false, VEC>(row, 1, valid, acc[r], alpha, beta);
        } else {
            outer_store<false, VEC>(row, step, valid, acc[r], alpha, beta);
        }
    }
}

}  // namespace gemmlab
