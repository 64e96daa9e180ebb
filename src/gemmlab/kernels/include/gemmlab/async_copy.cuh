// gemmlab/async_copy.cuh: global -> shared tile copies with cp.async (sm_80+),
// which move data without passing through registers and let a kernel keep
// several tiles in flight while it computes on an earlier one.
#pragma once
#include <cuda_pipeline.h>

#include <gemmlab/common.cuh>

namespace gemmlab {

// The copy loop behind the two tile copies below: one cp.async per W floats,
// element (r, c) of the tile to smem[r * SLD + c], or to smem[c * SLD + r] with
// TRANSPOSE.  CHECKED tests each request against the matrix edge and zero-fills
// what lies outside (no global read); tiles wholly inside the matrix skip the
// tests.  Measured both ways (runs 30 and 32, benchmarks/NOTES.md): the split
// costs some configurations 2-3% and gives the fastest one 12%.
template <int ROWS, int COLS, int SLD, int THREADS, int W, bool TRANSPOSE, bool CHECKED>
__device__ __forceinline__ void cp_async_requests(float* smem, const float* __restrict__ g, int ld, int row0,
                                                  int col0, int rows, int cols, int tid) {
    static_assert((ROWS * COLS / W) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int step = 0; step < ROWS * COLS / W / THREADS; ++step) {
        const int i = step * THREADS + tid;
        const int r = i / (COLS / W), c = (i % (COLS / W)) * W;
        const bool inside = !CHECKED || (row0 + r < rows && col0 + c < cols);
        const float* src = inside ? &g[(long long)(row0 + r) * ld + col0 + c] : g;
        __pipeline_memcpy_async(&smem[TRANSPOSE ? c * SLD + r : r * SLD + c], src, 4 * W, inside ? 0 : 4 * W);
    }
}

// Start copying the ROWS x COLS tile at (row0, col0) of a rows x cols matrix
// into shared memory (row stride SLD), zero-filling what lies outside the
// matrix.  VEC copies 16 bytes per request (same alignment rules as
// load_tile_vec4), else 4 bytes.  The copy completes at a later
// __pipeline_wait_prior; the caller commits the batch.
template <int ROWS, int COLS, int SLD, int THREADS, bool VEC>
__device__ __forceinline__ void cp_async_tile(float* smem, const float* __restrict__ g, int ld,
                                              int row0, int col0, int rows, int cols, int tid) {
    constexpr int W = VEC ? 4 : 1;   // floats per request
    static_assert(COLS % W == 0 && SLD % W == 0, "16-byte copies need multiples of 4 columns");
    if (row0 + ROWS <= rows && col0 + COLS <= cols)
        cp_async_requests<ROWS, COLS, SLD, THREADS, W, false, false>(smem, g, ld, row0, col0, rows, cols, tid);
    else
        cp_async_requests<ROWS, COLS, SLD, THREADS, W, false, true>(smem, g, ld, row0, col0, rows, cols, tid);
}

// The same copy, stored transposed (smem[c * SLD + r]) so that a thread's
// consecutive rows can later be read with one 16-byte shared load.  A copy
// cannot transpose 16-byte chunks, so each element is its own 4-byte copy;
// consecutive threads take consecutive columns, so the global reads coalesce.
template <int ROWS, int COLS, int SLD, int THREADS>
__device__ __forceinline__ void cp_async_tile_transposed(float* smem, const float* __restrict__ g, int ld,
                                                         int row0, int col0, int rows, int cols, int tid) {
    if (row0 + ROWS <= rows && col0 + COLS <= cols)
        cp_async_requests<ROWS, COLS, SLD, THREADS, 1, true, false>(smem, g, ld, row0, col0, rows, cols, tid);
    else
        cp_async_requests<ROWS, COLS, SLD, THREADS, 1, true, true>(smem, g, ld, row0, col0, rows, cols, tid);
}

// K-step tiles for kernels that keep both tiles K-major in shared memory (rung
// 8): the A tile at (row0, k0) as As[k][m] (row stride SLD) and the B tile at
// (k0, col0) as Bs[k][n].  An operand whose memory is already K-major -- a
// column-major A (OPA 'T'), a row-major B -- is a straight copy, 16 bytes per
// request when VEC; the others are transposed by 4-byte copies.
template <int BM, int BK, int SLD, int THREADS, bool VEC, char OPA>
__device__ __forceinline__ void cp_async_a_tile(float* smem, const float* __restrict__ A, int lda, int row0,
                                                int k0, int M, int K, int tid) {
    if constexpr (OPA == 'N')
        cp_async_tile_transposed<BM, BK, SLD, THREADS>(smem, A, lda, row0, k0, M, K, tid);
    else   // stored K x M
        cp_async_tile<BK, BM, SLD, THREADS, VEC>(smem, A, lda, k0, row0, K, M, tid);
}

template <int BK, int BN, int SLD, int THREADS, bool VEC, char OPB>
__device__ __forceinline__ void cp_async_b_tile(float* smem, const float* __restrict__ B, int ldb, int k0,
                                                int col0, int K, int N, int tid) {
    if constexpr (OPB == 'N')
        cp_async_tile<BK, BN, SLD, THREADS, VEC>(smem, B, ldb, k0, col0, K, N, tid);
    else   // stored N x K
        cp_async_tile_transposed<BN, BK, SLD, THREADS>(smem, B, ldb, col0, k0, N, K, tid);
}


// -- byte-level copies for tiles of any element type (tensor-core rungs) -------------------

// One cp.async of 16 bytes into shared memory (a shared-window address), of
// which the first src_bytes (0..16) are read from global memory and the rest
// are zero-filled (the instruction's src-size operand): a request that
// straddles the matrix edge reads only what lies inside, one wholly outside
// (src_bytes 0) reads nothing.  .cg: cached in L2 only -- a block reads each
// chunk once and then works from shared memory.
__device__ __forceinline__ void cp_async16(unsigned smem, const void* g, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(g), "r"(src_bytes)
                 : "memory");
}

// The same for 4 bytes (src_bytes 0 or 4): one float.
__device__ __forceinline__ void cp_async4(unsigned smem, const void* g, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(g), "r"(src_bytes)
                 : "memory");
}

// A 16-byte store to shared memory at a shared-window address.
__device__ __forceinline__ void st_shared_v4(unsigned smem, const unsigned (&w)[4]) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
}

// One thread's share of copying a ROWS x COLS tile of a row-major matrix of S
// (float, or a 16-bit type) into shared memory, K-step after K-step.  The
// tile is cut into 16-byte chunks, CPR per row; thread tid copies chunk
// tid % CPR of rows tid / CPR + s * STEP_ROWS (consecutive threads take
// consecutive chunks of a row, so a warp reads contiguous global memory).
// Layout places chunk (row, chunk) of the tile at Layout::offset(row, chunk);
// its swizzle repeats every Layout::PERIOD rows, so this thread's chunks sit
// at one offset plus multiples of STEP_ROWS rows, and its global addresses at
// one pointer plus multiples of STEP_ROWS * ld: a few registers, a few adds per
// copy.  Elements outside the matrix are zero-filled; the checks are one
// comparison per chunk, no separate edge path.
//   WIDE: one 16-byte cp.async per chunk, reading only the part inside the
//   matrix (src-size); needs 16-byte aligned rows (the host checks).
//   Else one 4-byte cp.async per float, or for 16-bit types ordinary loads,
//   packed and stored 16 bytes at a time (cp.async moves 4 bytes at least,
//   and an odd leading dimension leaves 16-bit rows only 2-byte aligned).
template <int ROWS, int COLS, int THREADS, class Layout, bool WIDE, class S>
struct TileCopy {
    static constexpr int CH = 16 / int(sizeof(S));   // elements per chunk
    static constexpr int CPR = COLS / CH, STEP_ROWS = THREADS / CPR, STEPS = ROWS / STEP_ROWS;
    static_assert(COLS % CH == 0 && THREADS % CPR == 0 && ROWS % STEP_ROWS == 0,
                  "the tile's chunks must split evenly over the threads, whole rows at a time");
    static_assert(STEP_ROWS % Layout::PERIOD == 0 && Layout::ROW_BYTES == 16 * CPR,
                  "a thread's chunks must share one swizzle");

    const S* p;           // this thread's first chunk, at the current K-step
    long long row_step;   // elements from one of its chunks to the next (STEP_ROWS rows)
    unsigned dst;         // byte offset of its first chunk in the tile
    int rows_left;        // rows of the matrix from its first chunk's row on
    int cols_left;        // columns of the matrix from its chunk's first column on

    __device__ __forceinline__ TileCopy(const S* g, int ld, int row0, int col0, int rows, int cols, unsigned tid) {
        const int r = int(tid / CPR), c = int(tid % CPR);
        p = g + (long long)(row0 + r) * ld + col0 + c * CH;
        row_step = (long long)STEP_ROWS * ld;
        dst = Layout::offset(r, c);
        rows_left = rows - row0 - r;
        cols_left = cols - col0 - c * CH;
    }

    // Copy the tile at the current position into the tile at shared-window
    // address `tile`; the cp.async requests complete at a later
    // __pipeline_wait_prior, the caller commits them.
    __device__ __forceinline__ void issue(unsigned tile) const {
        const int n_cols = max(0, min(cols_left, CH));   // elements of its chunks inside the matrix
        const S* q = p;
        if constexpr (WIDE) {
#pragma unroll
            for (int s = 0; s < STEPS; ++s, q += row_step) {
                const int n = s * STEP_ROWS < rows_left ? n_cols : 0;
                cp_async16(tile + dst + s * STEP_ROWS * Layout::ROW_BYTES, q, n * int(sizeof(S)));   // src-size 0: no read
            }
        } else if constexpr (sizeof(S) == 4) {
            // Narrow copies, one chunk at a time (not unrolled: the fallback
            // should not take registers from the accumulators).
#pragma unroll 1
            for (int s = 0; s < STEPS; ++s, q += row_step) {
                const int n = s * STEP_ROWS < rows_left ? n_cols : 0;
                const unsigned d = tile + dst + s * STEP_ROWS * Layout::ROW_BYTES;
#pragma unroll
                for (int e = 0; e < CH; ++e) cp_async4(d + 4 * e, q + e, e < n ? 4 : 0);
            }
        } else {
            // 16-bit elements at any alignment: ordinary loads, one chunk at a
            // time, as above.
#pragma unroll 1
            for (int s = 0; s < STEPS; ++s, q += row_step) {
                const int n = s * STEP_ROWS < rows_left ? n_cols : 0;
                unsigned short v[CH];
#pragma unroll
                for (int e = 0; e < CH; ++e) v[e] = e < n ? reinterpret_cast<const unsigned short*>(q)[e] : 0;
                unsigned w[CH / 2];
#pragma unroll
                for (int e = 0; e < CH / 2; ++e) w[e] = unsigned(v[2 * e]) | (unsigned(v[2 * e + 1]) << 16);
                st_shared_v4(tile + dst + s * STEP_ROWS * Layout::ROW_BYTES, w);
            }
        }
    }

    // Move to the next tile to the right (n columns) or below (n rows).
    __device__ __forceinline__ void next_cols(int n) { p += n; cols_left -= n; }
    __device__ __forceinline__ void next_rows(int n, int ld) { p += (long long)n * ld; rows_left -= n; }
};

}  // namespace gemmlab
