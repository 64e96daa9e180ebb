// gemmlab/simt/06_vectorized.cuh: rung 6's idea, 16 bytes per memory
// instruction.  float4 global loads (when the host has checked widths and
// alignment), A's tile stored transposed so that a thread's TM values of A are
// contiguous, 16-byte shared loads of both fragments and float4 stores of C.
// Rung 7 keeps these loads and the epilogue; rung 8 replaces the loads.
#pragma once

#include <gemmlab/simt/05_blocktile_2d.cuh>

namespace gemmlab {

// Elements (row, col .. col+3) as one 16-byte load, or zeros outside the
// matrix.  Needs cols % 4 == 0, ld % 4 == 0 and a 16-byte aligned base: then a
// float4 that starts inside the matrix ends inside it.  The host checks this and
// otherwise launches a kernel's scalar variant.
__device__ __forceinline__ float4 load4_or_zero(const float* __restrict__ m, int ld, int row, int col,
                                                int rows, int cols) {
    if (row < rows && col < cols) return *reinterpret_cast<const float4*>(&m[(long long)row * ld + col]);
    return make_float4(0.f, 0.f, 0.f, 0.f);
}

// load_tile with 16-byte (float4) global loads and shared stores.
template <int ROWS, int COLS, int SLD, int THREADS>
__device__ __forceinline__ void load_tile_vec4(float* smem, const float* __restrict__ g, int ld,
                                               int row0, int col0, int rows, int cols, int tid) {
    static_assert(COLS % 4 == 0 && SLD % 4 == 0, "float4 tiles need multiples of 4 columns");
    static_assert((ROWS * COLS / 4) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int step = 0; step < ROWS * COLS / 4 / THREADS; ++step) {
        const int i = step * THREADS + tid;
        const int r = i / (COLS / 4), c = (i % (COLS / 4)) * 4;
        *reinterpret_cast<float4*>(&smem[r * SLD + c]) = load4_or_zero(g, ld, row0 + r, col0 + c, rows, cols);
    }
}

// Elements (r, c .. c+3) of a tile, held as one float4, into shared memory
// transposed: smem[(c + j) * SLD + r].
template <int SLD>
__device__ __forceinline__ void store4_transposed(float* smem, int r, int c, float4 v) {
    smem[(c + 0) * SLD + r] = v.x;
    smem[(c + 1) * SLD + r] = v.y;
    smem[(c + 2) * SLD + r] = v.z;
    smem[(c + 3) * SLD + r] = v.w;
}

// Copy the ROWS x COLS tile at (row0, col0) into shared memory transposed
// (smem[c * SLD + r]), so that a thread's consecutive rows sit next to each
// other and can be read with one 16-byte shared load.  VEC selects float4
// global loads under the same conditions as load_tile_vec4.
template <int ROWS, int COLS, int SLD, int THREADS, bool VEC>
__device__ __forceinline__ void load_tile_transposed(float* smem, const float* __restrict__ g, int ld,
                                                     int row0, int col0, int rows, int cols,
                                                     int tid) {
    if constexpr (VEC) {
        static_assert(COLS % 4 == 0, "float4 tiles need multiples of 4 columns");
        static_assert((ROWS * COLS / 4) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
        for (int step = 0; step < ROWS * COLS / 4 / THREADS; ++step) {
            const int i = step * THREADS + tid;
            const int r = i / (COLS / 4), c = (i % (COLS / 4)) * 4;
            store4_transposed<SLD>(smem, r, c, load4_or_zero(g, ld, row0 + r, col0 + c, rows, cols));
        }
    } else {
        static_assert((ROWS * COLS) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
        for (int step = 0; step < ROWS * COLS / THREADS; ++step) {
            const int i = step * THREADS + tid;
            const int r = i / COLS, c = i % COLS;
            smem[c * SLD + r] = load_or_zero(g, ld, row0 + r, col0 + c, rows, cols);
        }
    }
}

// Copy the ROWS x COLS tile at (row0, col0) of a row-major matrix into shared
// memory as it is, 16-byte loads when VEC, else 4-byte ones.
template <int ROWS, int COLS, int SLD, int THREADS, bool VEC>
__device__ __forceinline__ void load_tile_straight(float* smem, const float* __restrict__ g, int ld,
                                                   int row0, int col0, int rows, int cols, int tid) {
    if constexpr (VEC)
        load_tile_vec4<ROWS, COLS, SLD, THREADS>(smem, g, ld, row0, col0, rows, cols, tid);
    else
        load_tile<ROWS, COLS, SLD, THREADS, 'N'>(smem, g, ld, row0, col0, rows, cols, tid);
}

// Stage K-step k0 of a block's tiles in shared memory (rungs 6 and 7), both
// K-major: As[k][row] (so that a thread's rows of A are read with 16-byte loads)
// and Bs[k][col].  Which side of each copy transposes depends on the layout: a
// row-major A and a column-major B are transposed on the way; a column-major A
// (a transposed view) and a row-major B already are K-major in memory and are
// copied straight.  VEC selects 16-byte global loads.
template <int BM, int BN, int BK, int THREADS, bool VEC, char OPA, char OPB>
__device__ __forceinline__ void load_block_tiles(float (&As)[BK][BM], float (&Bs)[BK][BN],
                                                 const float* __restrict__ A, int lda,
                                                 const float* __restrict__ B, int ldb, TileOrigin tile,
                                                 int k0, int M, int N, int K, int tid) {
    if constexpr (OPA == 'N')
        load_tile_transposed<BM, BK, BM, THREADS, VEC>(&As[0][0], A, lda, tile.row, k0, M, K, tid);
    else   // stored K x M
        load_tile_straight<BK, BM, BM, THREADS, VEC>(&As[0][0], A, lda, k0, tile.row, K, M, tid);
    if constexpr (OPB == 'N')
        load_tile_straight<BK, BN, BN, THREADS, VEC>(&Bs[0][0], B, ldb, k0, tile.col, K, N, tid);
    else   // stored N x K
        load_tile_transposed<BN, BK, BN, THREADS, VEC>(&Bs[0][0], B, ldb, tile.col, k0, N, K, tid);
}

// out[0..3] = alpha * acc + beta * out[0..3] in one 16-byte store (beta == 0: out is not read).
__device__ __forceinline__ void store_scaled4(float* out, float4 acc, float alpha, float beta) {
    float4 r = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
    if (beta != 0.0f) {
        const float4 old = *reinterpret_cast<const float4*>(out);
        r.x += beta * old.x; r.y += beta * old.y; r.z += beta * old.z; r.w += beta * old.w;
    }
    *reinterpret_cast<float4*>(out) = r;
}

// frag[0 .. N-1] = src[0 .. N-1] with 16-byte shared loads (src 16-byte aligned).
template <int N>
__device__ __forceinline__ void load_frag4(float (&frag)[N], const float* src) {
    static_assert(N % 4 == 0, "fragments are read as float4");
#pragma unroll
    for (int i = 0; i < N; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(src + i);
        frag[i] = v.x; frag[i + 1] = v.y; frag[i + 2] = v.z; frag[i + 3] = v.w;
    }
}

// Write a thread's TM x TN register tile to C at (row0, col0): alpha * acc +
// beta * C, rows and columns outside M x N skipped.  VEC writes float4s (N %
// 4 == 0 and a 16-byte aligned C, checked by the host); else scalars.
template <int TM, int TN, bool VEC>
__device__ __forceinline__ void store_tile(float* __restrict__ C, int ldc, int row0, int col0, int M, int N,
                                           const float (&acc)[TM][TN], float alpha, float beta) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int col = col0 + j;
            float* out = &C[(long long)row * ldc + col];
            if constexpr (VEC) {
                // N % 4 == 0, so a float4 that starts inside the row ends inside it.
                if (col < N)
                    store_scaled4(out, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]),
                                  alpha, beta);
            } else {
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
                    if (col + jj < N) store_scaled(out + jj, acc[i][j + jj], alpha, beta);
            }
        }
    }
}

}  // namespace gemmlab
