// GEMV rung 3, gemv_mma: x @ W.t() for a few rows of 16-bit x on the tensor cores.
// gemv streams W once on the CUDA cores, but from two rows of x on its converts and
// FMAs, not memory, set its pace.  Here mma.sync m16n8k16 multiplies 16 rows of W by
// 8 rows of x, and every lane still loads 16 contiguous bytes of W: a sum over K may
// take K in any order W and x share, so a lane's 8 elements feed two mmas, 4 each
// (docs/gemv/03-gemv-mma.md draws the mapping).  A block takes 16 rows of W; its 8
// warps split K, each with one group of loads in flight while it multiplies the last,
// and add their sums through shared memory.
#include <gemmlab/layout.cuh>
#include <gemmlab/mma_sync.cuh>
#include <gemmlab/gemv/elements.cuh>

namespace gemmlab {

constexpr int GEMV_MMA_THREADS = 256;
constexpr int GEMV_MMA_WARPS = GEMV_MMA_THREADS / 32;   // slices of K
constexpr int GEMV_MMA_ROWS = 16;                       // rows of W (columns of C) a block
// 32-element steps of K in a group of loads: a warp multiplies one group while the next
// is in flight (two rows of W and the lane's rows of x a step; fewer steps at 16 rows of
// x, whose second n8 tile takes the registers).
template <int MT>
__host__ __device__ constexpr int gemv_mma_steps() { return MT <= 8 ? 3 : 2; }

// 8 consecutive 16-bit elements from p, the first at k0 of a row of K, as the mma's fragments
// take them: gemv's loader (gemv/elements.cuh), one 16-byte load where all 8 lie inside K,
// else element by element with zeros past K.
template <class S>
__device__ __forceinline__ uint4 load8(const S* __restrict__ p, int k0, int K) {
    unsigned w[4];
    if (k0 + 8 <= K) load_words<true, 8>(p, 0, w);
    else load_words<false, 8>(p, K - k0, w);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// MT: rows of x a pass (8 or 16: one or two n8 tiles); more rows take more passes over W.
// The host launches it only where the rows of x and W start on the 16-byte grid.
template <int DT, int ODT, int MT, char OPA, char OPB>
__global__ void __launch_bounds__(GEMV_MMA_THREADS, 2)
gemv_mma(int M, int N, int K, float alpha, const typename StorageOf<DT>::type* __restrict__ A, int lda,
         const typename StorageOf<DT>::type* __restrict__ B, int ldb, float beta,
         typename StorageOf<ODT>::type* __restrict__ C, int ldc, long long stride_a, long long stride_b,
         long long stride_c) {
    static_assert(OPA == 'N' && OPB == 'T', "x's rows and W's rows (op(B)'s columns) run along K");
    static_assert(MT == 8 || MT == 16, "one or two n8 tiles of rows of x");
    constexpr int NT = MT / 8, G = gemv_mma_steps<MT>();
    using S = typename StorageOf<DT>::type;
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    __shared__ float partial[GEMV_MMA_WARPS][GEMV_MMA_ROWS][MT];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, q = lane % 4;   // the fragment's row group and lane in it
    const int n0 = blockIdx.x * GEMV_MMA_ROWS;
    const int k_end = alpha == 0.0f ? 0 : K;   // alpha = 0 reads neither A nor B (BLAS)
    // The lane's two rows of W (past N: row N - 1 again, never stored), at its 8 elements of a step.
    const S* w_lo = B + (long long)min(n0 + g, N - 1) * ldb + 8 * q;
    const S* w_hi = B + (long long)min(n0 + g + 8, N - 1) * ldb + 8 * q;
    // The warp's slice of K, in whole steps.
    const int steps = (k_end + 31) / 32;
    const int per_warp = (steps + GEMV_MMA_WARPS - 1) / GEMV_MMA_WARPS;
    const int s_begin = warp * per_warp, s_end = min(steps, s_begin + per_warp);
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int m0 = 0; m0 < M; m0 += MT) {
        const S* x[NT];   // the lane's rows of x (past M: row M - 1 again, never stored)
#pragma unroll
        for (int t = 0; t < NT; ++t) x[t] = A + (long long)min(m0 + 8 * t + g, M - 1) * lda + 8 * q;
        float acc[NT][4] = {};
        // One group of G steps of the lane's loads: two rows of W and its rows of x.
        auto load_steps = [&](int s0, uint4 (&wl)[G], uint4 (&wh)[G], uint4 (&xv)[G][NT]) {
#pragma unroll
            for (int u = 0; u < G; ++u) {
                const int k = (s0 + u) * 32 + 8 * q;
                const bool in = s0 + u < s_end;
                wl[u] = in ? load8(w_lo + (s0 + u) * 32, k, k_end) : zero;
                wh[u] = in ? load8(w_hi + (s0 + u) * 32, k, k_end) : zero;
#pragma unroll
                for (int t = 0; t < NT; ++t) xv[u][t] = in ? load8(x[t] + (s0 + u) * 32, k, k_end) : zero;
            }
        };
        auto multiply = [&](const uint4 (&wl)[G], const uint4 (&wh)[G], const uint4 (&xv)[G][NT]) {
#pragma unroll
            for (int u = 0; u < G; ++u)
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    // elements 0..3 of the lane's 8, then 4..7: mma's k = 2q, 2q+1, 2q+8, 2q+9
                    const unsigned a0[4] = {wl[u].x, wh[u].x, wl[u].y, wh[u].y}, b0[2] = {xv[u][t].x, xv[u][t].y};
                    const unsigned a1[4] = {wl[u].z, wh[u].z, wl[u].w, wh[u].w}, b1[2] = {xv[u][t].z, xv[u][t].w};
                    mma::mma_16n8<DT>(acc[t], a0, b0);
                    mma::mma_16n8<DT>(acc[t], a1, b1);
                }
        };
        // Double-buffered: the next group's loads are in flight while this group is multiplied.
        uint4 wl[G], wh[G], xv[G][NT], wl2[G], wh2[G], xv2[G][NT];
        if (s_begin < s_end) load_steps(s_begin, wl, wh, xv);
        for (int s0 = s_begin; s0 < s_end; s0 += 2 * G) {
            if (s0 + G < s_end) load_steps(s0 + G, wl2, wh2, xv2);
            multiply(wl, wh, xv);
            if (s0 + G >= s_end) break;
            if (s0 + 2 * G < s_end) load_steps(s0 + 2 * G, wl, wh, xv);
            multiply(wl2, wh2, xv2);
        }
        // acc[t]: rows g and g + 8 of the block's W (columns of C), rows 8t + 2q and 8t + 2q + 1 of x.
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            partial[warp][g][8 * t + 2 * q] = acc[t][0];
            partial[warp][g][8 * t + 2 * q + 1] = acc[t][1];
            partial[warp][g + 8][8 * t + 2 * q] = acc[t][2];
            partial[warp][g + 8][8 * t + 2 * q + 1] = acc[t][3];
        }
        __syncthreads();
        // The warps' slices added in warp order (the same result at every run); consecutive
        // threads along a row of C.
        for (int i = threadIdx.x; i < GEMV_MMA_ROWS * MT; i += GEMV_MMA_THREADS) {
            const int r = i % GEMV_MMA_ROWS, m = i / GEMV_MMA_ROWS;
            if (m0 + m < M && n0 + r < N) {
                float sum = 0.0f;
#pragma unroll
                for (int w = 0; w < GEMV_MMA_WARPS; ++w) sum += partial[w][r][m];
                store_scaled_as(&C[(long long)(m0 + m) * ldc + n0 + r], sum, alpha, beta);
            }
        }
        __syncthreads();   // read before the next pass writes
    }
}

}  // namespace gemmlab
