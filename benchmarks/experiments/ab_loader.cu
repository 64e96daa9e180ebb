// Experiment (not a rung): did moving the tile loaders to base pointers
// (commit "Tile loaders take the tile's base pointer") slow blocktile_1d/2d?
// The first version's loader and kernels, renamed, against the shipped ones,
// in one run (scripts/ab_variants.py).
//
// ab-variant: gemmlab_old::blocktile_1d<64, 64, 8, 8> block=512 tile=64x64
// ab-variant: gemmlab_old::blocktile_1d<32, 64, 16, 8> block=256 tile=32x64
// ab-variant: gemmlab_old::blocktile_2d<128, 128, 8, 8, 8> block=256 tile=128x128
// ab-variant: gemmlab_old::blocktile_2d<128, 64, 16, 8, 4> block=256 tile=128x64
// ab-shipped: blocktile_1d:BM=64;BN=64;BK=8;TM=8
// ab-shipped: blocktile_1d
// ab-shipped: blocktile_2d:BM=128;BN=128;BK=8;TM=8;TN=8
// ab-shipped: blocktile_2d
#include <gemmlab/simt/07_warptile.cuh>   // every CUDA-core rung header up to rung 7

namespace gemmlab_old {
using gemmlab::TileOrigin;
using gemmlab::block_tile_origin;
using gemmlab::store_scaled;

__device__ __forceinline__ float load_or_zero(const float* __restrict__ m, int ld, int row, int col,
                                              int rows, int cols) {
    return (row < rows && col < cols) ? m[(long long)row * ld + col] : 0.0f;
}

template <int ROWS, int COLS, int SLD, int THREADS>
__device__ __forceinline__ void old_load_tile(float* smem, const float* __restrict__ g, int ld,
                                              int row0, int col0, int rows, int cols, int tid) {
#pragma unroll
    for (int step = 0; step < ROWS * COLS / THREADS; ++step) {
        const int i = step * THREADS + tid;
        const int r = i / COLS, c = i % COLS;
        smem[r * SLD + c] = load_or_zero(g, ld, row0 + r, col0 + c, rows, cols);
    }
}

template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__((BM / TM) * BN)
blocktile_1d(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
             const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int THREADS = (BM / TM) * BN;
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x;
    const int tcol = tid % BN, trow = tid / BN;  // this thread: rows trow*TM.., column tcol
    float acc[TM] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        old_load_tile<BM, BK, BK, THREADS>(&As[0][0], A, lda, tile.row, k0, M, K, tid);
        old_load_tile<BK, BN, BN, THREADS>(&Bs[0][0], B, ldb, k0, tile.col, K, N, tid);
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


template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
blocktile_2d(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
             const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    float acc[TM][TN] = {};
    float a_frag[TM], b_frag[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        old_load_tile<BM, BK, BK, THREADS>(&As[0][0], A, lda, tile.row, k0, M, K, tid);
        old_load_tile<BK, BN, BN, THREADS>(&Bs[0][0], B, ldb, k0, tile.col, K, N, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a_frag[i] = As[trow * TM + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b_frag[j] = Bs[k][tcol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
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

}  // namespace gemmlab_old
