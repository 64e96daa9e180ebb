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

// The transposed copy in K-pairs: element (r, c) of the ROWS x COLS tile (c
// along K) to smem[(c / 2) * SLD + 2 * r + c % 2], so each shared row holds
// two K-steps, interleaved.  The two elements of a pair are adjacent in memory
// too, so one 8-byte request (W = 2; the 16-byte alignment of VEC covers it,
// and VEC's rows are a multiple of 4 elements long, so no pair straddles the
// edge) moves both: half the requests of cp_async_tile_transposed.  Consecutive
// threads take consecutive pairs of a row, so the global reads still coalesce.
template <int ROWS, int COLS, int SLD, int THREADS, int W, bool CHECKED>
__device__ __forceinline__ void cp_async_pair_requests(float* smem, const float* __restrict__ g, int ld, int row0,
                                                       int col0, int rows, int cols, int tid) {
    static_assert((W == 1 || W == 2) && COLS % 2 == 0, "a request moves one element or one K-pair");
    static_assert((ROWS * COLS / W) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int step = 0; step < ROWS * COLS / W / THREADS; ++step) {
        const int i = step * THREADS + tid;
        const int r = i / (COLS / W), c = (i % (COLS / W)) * W;
        const bool inside = !CHECKED || (row0 + r < rows && col0 + c < cols);
        const float* src = inside ? &g[(long long)(row0 + r) * ld + col0 + c] : g;
        __pipeline_memcpy_async(&smem[(c / 2) * SLD + 2 * r + c % 2], src, 4 * W, inside ? 0 : 4 * W);
    }
}

template <int ROWS, int COLS, int SLD, int THREADS, bool VEC>
__device__ __forceinline__ void cp_async_tile_pairs(float* smem, const float* __restrict__ g, int ld, int row0,
                                                    int col0, int rows, int cols, int tid) {
    constexpr int W = VEC ? 2 : 1;
    if (row0 + ROWS <= rows && col0 + COLS <= cols)
        cp_async_pair_requests<ROWS, COLS, SLD, THREADS, W, false>(smem, g, ld, row0, col0, rows, cols, tid);
    else
        cp_async_pair_requests<ROWS, COLS, SLD, THREADS, W, true>(smem, g, ld, row0, col0, rows, cols, tid);
}

// K-step tiles for kernels that keep both tiles K-major in shared memory (rung
// 8): the A tile at (row0, k0) as As[k][m] (row stride SLD) and the B tile at
// (k0, col0) as Bs[k][n].  An operand whose memory is already K-major -- a
// column-major A (OPA 'T'), a row-major B -- is a straight copy, 16 bytes per
// request when VEC; a row-major A is transposed by 4-byte copies, and a
// column-major B (OPB 'T') is copied in K-pairs (cp_async_tile_pairs: Bs[k / 2]
// holds n's two K-steps side by side).
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
        cp_async_tile_pairs<BN, BK, SLD, THREADS, VEC>(smem, B, ldb, col0, k0, N, K, tid);
}

// The fragments of rung 8's K-step loop when B sits in K-pairs (a column-major B,
// cp_async_tile_pairs).  A's are rung 7's (one K-step row of the transposed
// tile); a thread's TN = 4 columns of B subtile wn are 8 consecutive floats of a
// pair row, (n, k) (n, k+1) (n+1, k) ..., so two 16-byte loads give them for
// K-steps k and k+1 at once.  The loads of a warp cover 4 columns x 16 bytes
// with lanes 8 floats apart, every bank once: conflict-free like rung 7's.
template <int WMITER, int WSUBM, int TM>
__device__ __forceinline__ void load_a_fragments(float (&a_frag)[WMITER][TM], const float* a_k) {
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm) load_frag4(a_frag[wm], a_k + wm * WSUBM);
}

template <int WSUBN>
__device__ __forceinline__ void load_b_pair_fragment(float (&even)[4], float (&odd)[4], const float* b_pair, int wn) {
    const float4 lo = *reinterpret_cast<const float4*>(b_pair + 2 * wn * WSUBN);
    const float4 hi = *reinterpret_cast<const float4*>(b_pair + 2 * wn * WSUBN + 4);
    even[0] = lo.x; even[1] = lo.z; even[2] = hi.x; even[3] = hi.z;
    odd[0] = lo.y;  odd[1] = lo.w;  odd[2] = hi.y;  odd[3] = hi.w;
}

template <int WNITER, int WSUBN>
__device__ __forceinline__ void load_b_pair_fragments(float (&even)[WNITER][4], float (&odd)[WNITER][4],
                                                      const float* b_pair) {
#pragma unroll
    for (int wn = 0; wn < WNITER; ++wn) load_b_pair_fragment<WSUBN>(even[wn], odd[wn], b_pair, wn);
}

}  // namespace gemmlab
