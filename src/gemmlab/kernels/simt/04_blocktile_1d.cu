// Rung 4, 1-D block tiling: each thread computes TM outputs of one column of C
// instead of one.  The value of B it loads from shared memory serves TM
// multiply-adds from a register, so shared-memory loads per FMA drop from 2 to
// about 1 + 1/TM; larger BM x BN blocks make each global element serve more
// outputs too.  The idea is the inner loop below; the tiles are rung 3's.
#include <gemmlab/simt/03_smem_tiled.cuh>

namespace gemmlab {

template <int BM, int BN, int BK, int TM, char OPA, char OPB>
__global__ void __launch_bounds__((BM / TM) * BN)
blocktile_1d(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
             const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
             long long stride_a, long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    constexpr int THREADS = (BM / TM) * BN;
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x;
    const int tcol = tid % BN, trow = tid / BN;  // this thread: rows trow*TM.., column tcol
    float acc[TM] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_tile<BM, BK, BK, THREADS, OPA>(&As[0][0], A, lda, tile.row, k0, M, K, tid);
        load_tile<BK, BN, BN, THREADS, OPB>(&Bs[0][0], B, ldb, k0, tile.col, K, N, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][tcol];  // one shared load, TM uses
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] += As[trow * TM + i][k] * b;
        }
        __syncthreads();
    }
    const int col = tile.col + tcol;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = tile.row + trow * TM + i;
        if (row < M && col < N) store_scaled(&C[(long long)row * ldc + col], acc[i], alpha, beta);
    }
}

}  // namespace gemmlab
