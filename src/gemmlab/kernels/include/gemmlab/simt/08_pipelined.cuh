// gemmlab/simt/08_pipelined.cuh: rung 8's idea, global -> shared copies with
// cp.async (sm_80+), which move data without passing through registers, so a
// kernel can keep several K-steps in flight while it computes on an earlier
// one.  The K-step's arithmetic stays rung 7's.  ec_wmma uses the same copies.
#pragma once
#include <cuda_pipeline.h>

#include <gemmlab/simt/07_warptile.cuh>

namespace gemmlab {

// The copy loop behind the two tile copies below: one cp.async per W floats,
// element (r, c) of the tile to smem[r * SLD + c], or to smem[c * SLD + r] with
// TRANSPOSE.  CHECKED tests each request against the matrix edge and zero-fills
// what lies outside (no global read); tiles wholly inside the matrix skip the
// tests (a net gain: benchmarks/NOTES.md, "Figures moved from kernel headers").
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

// The other way to transpose a tile whose rows run along K (a row-major A, a
// column-major B): rung 6's transposing copy (load_tile_transposed) cut in two,
// 16-byte global loads into registers when a K-step's copies are issued, written to
// shared memory transposed (store4_transposed) once that step's math is done.  A quarter of the 4-byte copies' requests, for ROWS * COLS / THREADS
// registers held across the math; consecutive threads read consecutive 16-byte
// chunks of a row, so the loads coalesce.  Needs the same alignment as VEC.
template <int ROWS, int COLS, int THREADS>
struct RegisterTransposedTile {
    static_assert(COLS % 4 == 0 && (ROWS * COLS / 4) % THREADS == 0,
                  "16-byte loads need multiples of 4 columns, split evenly over the threads");
    static constexpr int PER_THREAD = ROWS * COLS / 4 / THREADS;
    float4 v[PER_THREAD];

    template <bool CHECKED>
    __device__ __forceinline__ void fetch_chunks(const float* __restrict__ g, int ld, int row0, int col0,
                                                 int rows, int cols, int tid) {
#pragma unroll
        for (int step = 0; step < PER_THREAD; ++step) {
            const int i = step * THREADS + tid;
            const int r = i / (COLS / 4), c = (i % (COLS / 4)) * 4;
            v[step] = CHECKED ? load4_or_zero(g, ld, row0 + r, col0 + c, rows, cols)
                              : *reinterpret_cast<const float4*>(&g[(long long)(row0 + r) * ld + col0 + c]);
        }
    }

    // Start the loads of the tile at (row0, col0) of a rows x cols row-major matrix.
    __device__ __forceinline__ void fetch(const float* __restrict__ g, int ld, int row0, int col0, int rows,
                                          int cols, int tid) {
        if (row0 + ROWS <= rows && col0 + COLS <= cols)
            fetch_chunks<false>(g, ld, row0, col0, rows, cols, tid);
        else
            fetch_chunks<true>(g, ld, row0, col0, rows, cols, tid);
    }

    template <int SLD>
    __device__ __forceinline__ void store_transposed(float* smem, int tid) const {
#pragma unroll
        for (int step = 0; step < PER_THREAD; ++step) {
            const int i = step * THREADS + tid;
            store4_transposed<SLD>(smem, i / (COLS / 4), (i % (COLS / 4)) * 4, v[step]);
        }
    }
};

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

// C of odd width (rows off the 16-byte grid: attention's scores at 197 tokens, a vocabulary's
// logits) without 16-byte stores.  Stored straight from the registers, a warp's 4-byte store
// reaches 8 rows, a few scattered floats in each; instead each warp writes one subtile of its
// sums at a time to its own region of shared memory (free once the K-loop is done: the
// caller waits at a barrier first) and stores it back row by row, consecutive lanes on
// consecutive columns, so that each store covers whole runs of a row.
template <int WMITER, int WNITER, int WSUBM, int WSUBN, int TM, int TN>
__device__ __forceinline__ void store_warp_subtiles_staged(float* __restrict__ C, int ldc, int row0, int col0, int M,
                                                           int N, const float (&acc)[WMITER][WNITER][TM][TN],
                                                           float alpha, float beta, float* region, int lane_row,
                                                           int lane_col, int lane) {
    constexpr int PITCH = WSUBN + 1;   // odd: a lane's column of TM rows spreads over the banks
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn) {
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) region[(lane_row + i) * PITCH + lane_col + j] = acc[wm][wn][i][j];
            __syncwarp();
            const int r0 = row0 + wm * WSUBM, c0 = col0 + wn * WSUBN;
            for (int e = lane; e < WSUBM * WSUBN; e += 32) {
                const int r = e / WSUBN, c = e % WSUBN;
                if (r0 + r < M && c0 + c < N)
                    store_scaled(&C[(long long)(r0 + r) * ldc + c0 + c], region[r * PITCH + c], alpha, beta);
            }
            __syncwarp();   // read before the next subtile overwrites the region
        }
}

}  // namespace gemmlab
