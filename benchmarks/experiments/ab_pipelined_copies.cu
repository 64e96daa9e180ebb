// Experiment (A/B of runs 30 and 32): rung 8 with every cp.async request
// tested against the matrix edge, against the shipped kernel, whose tiles that
// lie wholly inside the matrix skip those tests.  Same kernel otherwise.
// (In run 32 the roles were swapped: the shipped kernel tested every request
// and the variant had the interior fast path.)
// ab-variant: gemmlab::pipelined_checked_copies<128, 256, 8, 64, 64, 2, 4, 3, true> block=256 tile=128x256 smem=37248
// ab-variant: gemmlab::pipelined_checked_copies<128, 256, 8, 64, 64, 4, 8, 4, true> block=256 tile=128x256 smem=49664
// ab-variant: gemmlab::pipelined_checked_copies<128, 64, 8, 32, 64, 2, 8, 4, true> block=128 tile=128x64 smem=25088
// ab-variant: gemmlab::pipelined_checked_copies<64, 128, 8, 64, 32, 4, 4, 3, true> block=128 tile=64x128 smem=18816
// ab-shipped: pipelined:BM=128;BN=256;BK=8;WM=64;WN=64;WNITER=2;TM=4;STAGES=3
// ab-shipped: pipelined:BM=128;BN=256;BK=8;WM=64;WN=64;WNITER=4;TM=8;STAGES=4
// ab-shipped: pipelined:BM=128;BN=64;BK=8;WM=32;WN=64;WNITER=2;TM=8;STAGES=4
// ab-shipped: pipelined:BM=64;BN=128;BK=8;WM=64;WN=32;WNITER=4;TM=4;STAGES=3
#include <gemmlab/simt/08_pipelined.cuh>

namespace gemmlab {

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int STAGES, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)  // 1: see blocktile_2d
pipelined_checked_copies(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
          const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int TN = 4;
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
    constexpr int ASLD = BM + 4;   // padded row of the transposed A tile, still 16-byte aligned
    static_assert((WSUBM / TM) * (WSUBN / TN) == 32, "a warp subtile is 32 threads' tiles");
    extern __shared__ __align__(16) float smem[];
    float (*As)[BK][ASLD] = reinterpret_cast<float (*)[BK][ASLD]>(smem);                   // [STAGES]
    float (*Bs)[BK][BN] = reinterpret_cast<float (*)[BK][BN]>(smem + STAGES * BK * ASLD);  // [STAGES]
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_row = (warp / (BN / WN)) * WM, warp_col = (warp % (BN / WN)) * WN;
    const int lane_row = (lane / (WSUBN / TN)) * TM, lane_col = (lane % (WSUBN / TN)) * TN;
    const int k_tiles_all = (K + BK - 1) / BK;
    const int per_split = (k_tiles_all + gridDim.y - 1) / gridDim.y;
    const int kt_begin = blockIdx.y * per_split;
    const int k_tiles = max(0, min(per_split, k_tiles_all - kt_begin));   // K-steps of this block
    A += kt_begin * BK;                                                  // column kt_begin * BK of A
    B += (long long)kt_begin * BK * ldb;                                 // row kt_begin * BK of B
    K -= kt_begin * BK;                                                  // zero-fill stops at the real end
    C += (long long)blockIdx.y * M * ldc;                                // this split's slice

    auto issue = [&](int kt) {   // start the copies of K-step kt into its stage
        const int s = kt % STAGES;
        cp_async_requests<BM, BK, ASLD, THREADS, 1, true, true>(&As[s][0][0], A, lda, tile.row, kt * BK, M, K, tid);
        cp_async_requests<BK, BN, BN, THREADS, VEC ? 4 : 1, false, true>(&Bs[s][0][0], B, ldb, kt * BK, tile.col,
                                                                          K, N, tid);
    };
    // Prologue: STAGES-1 steps in flight.  Every step commits a batch (empty
    // past the end) so that "wait until at most STAGES-2 batches are pending"
    // always means "step kt has landed".
#pragma unroll
    for (int kt = 0; kt < STAGES - 1; ++kt) {
        if (kt < k_tiles) issue(kt);
        __pipeline_commit();
    }

    float acc[WMITER][WNITER][TM][TN] = {};
    float a_frag[2][WMITER][TM], b_frag[2][WNITER][TN];   // fragments of K-steps k and k+1
    for (int kt = 0; kt < k_tiles; ++kt) {
        __pipeline_wait_prior(STAGES - 2);
        __syncthreads();   // step kt visible to all; everyone is done with step kt-1's stage
        if (kt + STAGES - 1 < k_tiles) issue(kt + STAGES - 1);   // refills step kt-1's stage
        __pipeline_commit();
        const float* a_s = &As[kt % STAGES][0][warp_row + lane_row];
        const float* b_s = &Bs[kt % STAGES][0][warp_col + lane_col];
        load_warp_fragments<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(a_frag[0], b_frag[0], a_s, b_s);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // Register double buffering: the next K-step's fragments are loaded before
            // this one's FMAs, so the shared-memory latency hides behind them.
            if (k + 1 < BK)
                load_warp_fragments<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(
                    a_frag[(k + 1) % 2], b_frag[(k + 1) % 2], a_s + (k + 1) * ASLD, b_s + (k + 1) * BN);
            warp_fragments_product(acc, a_frag[k % 2], b_frag[k % 2]);
        }
    }
    __pipeline_wait_prior(0);
    store_warp_subtiles<WMITER, WNITER, WSUBM, WSUBN, TM, TN, VEC>(
        C, ldc, tile.row + warp_row + lane_row, tile.col + warp_col + lane_col, M, N, acc, alpha, beta);
}

}  // namespace gemmlab
