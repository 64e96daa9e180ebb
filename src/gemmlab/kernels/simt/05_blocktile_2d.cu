// Rung 5, 2-D block tiling: each thread computes a TM x TN tile of C.  Per step
// of k it loads TM values of A and TN of B into registers and does TM * TN
// multiply-adds with them (outer_product_acc, simt/05_blocktile_2d.cuh), so
// shared-memory loads per FMA fall to (TM + TN) / (TM * TN), a quarter for 8 x 8:
// the arithmetic, not memory, starts to set the pace.
#include <gemmlab/simt/05_blocktile_2d.cuh>

namespace gemmlab {

// The explicit "1 block per SM" keeps NVRTC 13.0 from capping registers for
// occupancy on its own, which made one configuration spill on sm_80.
template <int BM, int BN, int BK, int TM, int TN, char OPA, char OPB>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), 1)
blocktile_2d(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
             const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
             long long stride_a, long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    constexpr int THREADS = (BM / TM) * (BN / TN);
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    float acc[TM][TN] = {};
    float a_frag[TM], b_frag[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile<BM, BK, BK, THREADS, OPA>(&As[0][0], A, lda, tile.row, k0, M, K, tid);
        load_tile<BK, BN, BN, THREADS, OPB>(&Bs[0][0], B, ldb, k0, tile.col, K, N, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a_frag[i] = As[trow * TM + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b_frag[j] = Bs[k][tcol * TN + j];
            outer_product_acc(acc, a_frag, b_frag);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = tile.row + trow * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = tile.col + tcol * TN + j;
            if (row < M && col < N) store_scaled(&C[(long long)row * ldc + col], acc[i][j], alpha, beta);
        }
    }
}

}  // namespace gemmlab
