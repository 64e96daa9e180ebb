// Experiment (A/B of runs 28-29): two earlier forms of rung 8 against the
// shipped one (A transposed by 4-byte cp.async, fragments double-buffered):
//  - pipelined_rowmajor_a: as in run 27, A kept row-major in shared memory and
//    read 4 K-steps at a time (a4 registers);
//  - pipelined_single_buffer: as in run 28, A transposed, one set of fragments.
// ab-variant: gemmlab::pipelined_rowmajor_a<128, 256, 16, 64, 64, 2, 4, 3, true> block=256 tile=128x256 smem=79872
// ab-variant: gemmlab::pipelined_rowmajor_a<128, 64, 16, 32, 64, 2, 4, 2, true> block=128 tile=128x64 smem=28672
// ab-variant: gemmlab::pipelined_single_buffer<128, 256, 8, 64, 64, 2, 4, 3, true> block=256 tile=128x256 smem=37248
// ab-variant: gemmlab::pipelined_single_buffer<128, 256, 16, 64, 64, 2, 4, 3, true> block=256 tile=128x256 smem=74496
// ab-shipped: pipelined:BM=128;BN=256;BK=8;WM=64;WN=64;WNITER=2;TM=4;STAGES=3
// ab-shipped: pipelined:BM=128;BN=256;BK=16;WM=64;WN=64;WNITER=2;TM=4;STAGES=3
// ab-shipped: pipelined:BM=128;BN=64;BK=16;WM=32;WN=64;WNITER=2;TM=4;STAGES=2
// ab-shipped: warptile
//
// Rung 8, pipelined (run 27): rung 7's warp tiling with the global loads taken off the
// critical path.  Tiles move global -> shared with cp.async (no trip through
// registers), STAGES deep: while the warps compute on the tile of step k, the
// copies for steps k+1 .. k+STAGES-1 are already in flight, so the load
// latency that rungs 4-7 wait for at every barrier is hidden behind the math.
// cp.async cannot transpose, so A stays row-major in shared memory (rows padded
// by 4 floats) and each thread reads 4 K-steps of a row of A with one 16-byte
// load; B is read as in rung 7.
//
// Split-K: when M x N has too few tiles to fill the GPU (a skinny output with a
// long K), the host launches gridDim.y > 1 blocks per output tile.  Block y
// takes the y-th contiguous range of K-steps and writes its partial tile to
// slice y of a workspace (C + y * M * ldc, alpha = 1, beta = 0); a second
// kernel (splitk_reduce.cu) adds the slices into C.  gridDim.y == 1 is the
// plain GEMM: one range covering all of K, slice 0 = C itself.
#include <gemmlab/simt/08_pipelined.cuh>

namespace gemmlab {

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int STAGES, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)  // 1: see blocktile_2d
pipelined_rowmajor_a(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
          const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int TN = 4;
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
    constexpr int ASLD = BK + 4;   // padded row: 16-byte aligned, rows start on different banks
    static_assert((WSUBM / TM) * (WSUBN / TN) == 32, "a warp subtile is 32 threads' tiles");
    static_assert(BK % 4 == 0, "A is read 4 K-steps at a time");
    extern __shared__ __align__(16) float smem[];
    float (*As)[BM][ASLD] = reinterpret_cast<float (*)[BM][ASLD]>(smem);                   // [STAGES]
    float (*Bs)[BK][BN] = reinterpret_cast<float (*)[BK][BN]>(smem + STAGES * BM * ASLD);  // [STAGES]
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
        cp_async_tile<BM, BK, ASLD, THREADS, VEC>(&As[s][0][0], A, lda, tile.row, kt * BK, M, K, tid);
        cp_async_tile<BK, BN, BN, THREADS, VEC>(&Bs[s][0][0], B, ldb, kt * BK, tile.col, K, N, tid);
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
    float a4[WMITER][TM][4], a_frag[WMITER][TM], b_frag[WNITER][TN];
    for (int kt = 0; kt < k_tiles; ++kt) {
        __pipeline_wait_prior(STAGES - 2);
        __syncthreads();   // step kt visible to all; everyone is done with step kt-1's stage
        if (kt + STAGES - 1 < k_tiles) issue(kt + STAGES - 1);   // refills step kt-1's stage
        __pipeline_commit();
        const int s = kt % STAGES;
#pragma unroll
        for (int k = 0; k < BK; k += 4) {
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; ++i)
                    load_frag4(a4[wm][i], &As[s][warp_row + wm * WSUBM + lane_row + i][k]);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                for (int wn = 0; wn < WNITER; ++wn)
                    load_frag4(b_frag[wn], &Bs[s][k + kk][warp_col + wn * WSUBN + lane_col]);
#pragma unroll
                for (int wm = 0; wm < WMITER; ++wm) {
#pragma unroll
                    for (int i = 0; i < TM; ++i) a_frag[wm][i] = a4[wm][i][kk];
#pragma unroll
                    for (int wn = 0; wn < WNITER; ++wn) outer_product_acc(acc[wm][wn], a_frag[wm], b_frag[wn]);
                }
            }
        }
    }
    __pipeline_wait_prior(0);
    store_warp_subtiles<WMITER, WNITER, WSUBM, WSUBN, TM, TN, VEC>(
        C, ldc, tile.row + warp_row + lane_row, tile.col + warp_col + lane_col, M, N, acc, alpha, beta);
}

// Run 28's form: A transposed (as shipped), one set of fragments per K-step.
template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int STAGES, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)
pipelined_single_buffer(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                        const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int TN = 4;
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
    constexpr int ASLD = BM + 4;
    extern __shared__ __align__(16) float smem[];
    float (*As)[BK][ASLD] = reinterpret_cast<float (*)[BK][ASLD]>(smem);
    float (*Bs)[BK][BN] = reinterpret_cast<float (*)[BK][BN]>(smem + STAGES * BK * ASLD);
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_row = (warp / (BN / WN)) * WM, warp_col = (warp % (BN / WN)) * WN;
    const int lane_row = (lane / (WSUBN / TN)) * TM, lane_col = (lane % (WSUBN / TN)) * TN;
    const int k_tiles = (K + BK - 1) / BK;
    auto issue = [&](int kt) {
        const int s = kt % STAGES;
        cp_async_tile_transposed<BM, BK, ASLD, THREADS>(&As[s][0][0], A, lda, tile.row, kt * BK, M, K, tid);
        cp_async_tile<BK, BN, BN, THREADS, VEC>(&Bs[s][0][0], B, ldb, kt * BK, tile.col, K, N, tid);
    };
#pragma unroll
    for (int kt = 0; kt < STAGES - 1; ++kt) {
        if (kt < k_tiles) issue(kt);
        __pipeline_commit();
    }
    float acc[WMITER][WNITER][TM][TN] = {};
    for (int kt = 0; kt < k_tiles; ++kt) {
        __pipeline_wait_prior(STAGES - 2);
        __syncthreads();
        if (kt + STAGES - 1 < k_tiles) issue(kt + STAGES - 1);
        __pipeline_commit();
        const int s = kt % STAGES;
#pragma unroll
        for (int k = 0; k < BK; ++k)
            warp_subtiles_step<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(
                acc, &As[s][k][warp_row + lane_row], &Bs[s][k][warp_col + lane_col]);
    }
    __pipeline_wait_prior(0);
    store_warp_subtiles<WMITER, WNITER, WSUBM, WSUBN, TM, TN, VEC>(
        C, ldc, tile.row + warp_row + lane_row, tile.col + warp_col + lane_col, M, N, acc, alpha, beta);
}

}  // namespace gemmlab
