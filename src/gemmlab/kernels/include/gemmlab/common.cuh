// gemmlab/common.cuh: the pieces every rung of the FP32 (CUDA-core) ladder shares.
//
// Conventions: out = alpha * op(A) @ op(B) + beta * out, each operand stored
// row-major ('N') or column-major ('T') with a leading dimension (layout.cuh),
// out row-major; every kernel is correct for any M, N, K >= 0, because tiles
// that stick out of a matrix read zeros and skip their out-of-range stores.
#pragma once

#include <gemmlab/layout.cuh>

namespace gemmlab {

// Output tiles are numbered row-major over a 1-D grid: a 2-D grid's y dimension
// stops at 65535 blocks, which small tiles on tall matrices would exceed.
struct TileOrigin {
    int row;
    int col;
};

template <int BM, int BN>
__device__ __forceinline__ TileOrigin block_tile_origin(int N) {
    const int tiles_n = (N + BN - 1) / BN;
    return {int(blockIdx.x / tiles_n) * BM, int(blockIdx.x % tiles_n) * BN};
}

// Tiles in grouped order: down a group of GROUP_M tile-rows first, then to the
// next column, then to the next group (the order of rung 4's grouped_tile,
// without its Hopper header).  Blocks that run at the same time then share a
// few tile-rows of A and a few tile-columns of B instead of one or two rows of
// A and every column of B, so more of their reads hit L2.
template <int BM, int BN, int GROUP_M>
__device__ __forceinline__ TileOrigin block_tile_origin_grouped(int M, int N) {
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int t = int(blockIdx.x), per_group = GROUP_M * tiles_n;
    const int first_m = (t / per_group) * GROUP_M;
    const int rows = min(tiles_m - first_m, GROUP_M);
    const int r = t - (t / per_group) * per_group;
    return {(first_m + r % rows) * BM, (r / rows) * BN};
}

// The same numbering down the columns: blocks that run at the same time share
// columns of B.  Pays for the untiled rungs, whose warps stream B from global
// memory (it keeps B's columns in L2); the tiled rungs use the row-major order.
template <int BM, int BN>
__device__ __forceinline__ TileOrigin block_tile_origin_colmajor(int M) {
    const int tiles_m = (M + BM - 1) / BM;
    return {int(blockIdx.x % tiles_m) * BM, int(blockIdx.x / tiles_m) * BN};
}

// out = alpha * acc + beta * out.  With beta == 0 the old value is never read,
// so NaN or Inf left in an uninitialised output cannot leak into the result.
__device__ __forceinline__ void store_scaled(float* out, float acc, float alpha, float beta) {
    *out = (beta == 0.0f) ? alpha * acc : alpha * acc + beta * *out;
}

__device__ __forceinline__ void store_scaled4(float* out, float4 acc, float alpha, float beta) {
    float4 r = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
    if (beta != 0.0f) {
        const float4 old = *reinterpret_cast<const float4*>(out);
        r.x += beta * old.x; r.y += beta * old.y; r.z += beta * old.z; r.w += beta * old.w;
    }
    *reinterpret_cast<float4*>(out) = r;
}

// Row `row` of op(A) times column `col` of op(B), straight from global memory:
// the whole inner loop of the untiled rungs (1 and 2), which differ only in how
// threads are mapped to (row, col).  (Layouts default to 'N', row-major, for
// code written before layouts existed; gemmlab's kernels pass theirs.)
template <char OPA = 'N', char OPB = 'N'>
__device__ __forceinline__ float dot_row_col(const float* __restrict__ A, int lda,
                                            const float* __restrict__ B, int ldb, int row, int col, int K) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += A[elem_offset<OPA>(row, k, lda)] * B[elem_offset<OPB>(k, col, ldb)];
    return acc;
}

// acc += a (column fragment) x b (row fragment): TM * TN multiply-adds from
// TM + TN values in registers, the heart of rungs 5 and 6.
template <int TM, int TN>
__device__ __forceinline__ void outer_product_acc(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
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

// Element (row, col) of a rows x cols matrix stored with layout OP, or 0
// outside it.  Padding edge tiles with zeros lets them run the same inner loop
// as interior tiles.
template <char OP = 'N'>
__device__ __forceinline__ float load_or_zero(const float* __restrict__ m, int ld, int row, int col,
                                              int rows, int cols) {
    return (row < rows && col < cols) ? m[elem_offset<OP>(row, col, ld)] : 0.0f;
}

// Copy the ROWS x COLS tile at (row0, col0) of a rows x cols matrix stored with
// layout OP into shared memory, row-major (row stride SLD), THREADS threads
// cooperating.  Consecutive threads take consecutive elements in memory --
// columns of a row-major matrix, rows of a column-major one -- so each warp's
// global reads coalesce (for 'T' its shared stores are strided instead, the
// cheaper of the two costs).
template <int ROWS, int COLS, int SLD, int THREADS, char OP = 'N'>
__device__ __forceinline__ void load_tile(float* smem, const float* __restrict__ g, int ld,
                                          int row0, int col0, int rows, int cols, int tid) {
    static_assert((ROWS * COLS) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int step = 0; step < ROWS * COLS / THREADS; ++step) {
        const int i = step * THREADS + tid;
        const int r = OP == 'N' ? i / COLS : i % ROWS, c = OP == 'N' ? i % COLS : i / ROWS;
        smem[r * SLD + c] = load_or_zero<OP>(g, ld, row0 + r, col0 + c, rows, cols);
    }
}

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
            const float4 v = load4_or_zero(g, ld, row0 + r, col0 + c, rows, cols);
            smem[(c + 0) * SLD + r] = v.x;
            smem[(c + 1) * SLD + r] = v.y;
            smem[(c + 2) * SLD + r] = v.z;
            smem[(c + 3) * SLD + r] = v.w;
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

// The K-step of the warp-tiled rungs (7, 8), in two halves.  a_k points at
// this thread's first row in row k of the transposed A tile, b_k at its first
// column in row k of the B tile: the thread loads WMITER fragments of TM rows
// (WSUBM apart) and WNITER fragments of TN columns (WSUBN apart), 16 bytes at a
// time, then adds their WMITER x WNITER outer products to its accumulators.
template <int WMITER, int WNITER, int WSUBM, int WSUBN, int TM, int TN>
__device__ __forceinline__ void load_warp_fragments(float (&a_frag)[WMITER][TM], float (&b_frag)[WNITER][TN],
                                                    const float* a_k, const float* b_k) {
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm) load_frag4(a_frag[wm], a_k + wm * WSUBM);
#pragma unroll
    for (int wn = 0; wn < WNITER; ++wn) load_frag4(b_frag[wn], b_k + wn * WSUBN);
}

template <int WMITER, int WNITER, int TM, int TN>
__device__ __forceinline__ void warp_fragments_product(float (&acc)[WMITER][WNITER][TM][TN],
                                                       const float (&a_frag)[WMITER][TM],
                                                       const float (&b_frag)[WNITER][TN]) {
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn) outer_product_acc(acc[wm][wn], a_frag[wm], b_frag[wn]);
}

template <int WMITER, int WNITER, int WSUBM, int WSUBN, int TM, int TN>
__device__ __forceinline__ void warp_subtiles_step(float (&acc)[WMITER][WNITER][TM][TN], const float* a_k,
                                                   const float* b_k) {
    float a_frag[WMITER][TM], b_frag[WNITER][TN];
    load_warp_fragments<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(a_frag, b_frag, a_k, b_k);
    warp_fragments_product(acc, a_frag, b_frag);
}

// The epilogue of the warp-tiled rungs (7, 8): a thread's WMITER x WNITER
// subtiles sit WSUBM rows and WSUBN columns apart from (row0, col0).
template <int WMITER, int WNITER, int WSUBM, int WSUBN, int TM, int TN, bool VEC>
__device__ __forceinline__ void store_warp_subtiles(float* __restrict__ C, int ldc, int row0, int col0, int M, int N,
                                                    const float (&acc)[WMITER][WNITER][TM][TN],
                                                    float alpha, float beta) {
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn)
            store_tile<TM, TN, VEC>(C, ldc, row0 + wm * WSUBM, col0 + wn * WSUBN, M, N, acc[wm][wn], alpha, beta);
}

}  // namespace gemmlab
