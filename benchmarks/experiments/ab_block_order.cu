// Experiment (not a rung): does the order in which blocks walk the output tiles
// matter?  Since run 14 the shipped naive and coalesced number their tiles down
// the columns (block_tile_origin_colmajor) and the tiled rungs row-major
// (block_tile_origin); each variant here is a shipped kernel with the other
// order, so re-running this file repeats the A/B of runs 13-14.
//
// ab-variant: gemmlab_exp::naive_rowmajor block=32x32 tile=32x32
// ab-variant: gemmlab_exp::coalesced_rowmajor block=32x32 tile=32x32
// ab-variant: gemmlab_exp::smem32_colmajor block=32x32 tile=32x32
// ab-shipped: naive
// ab-shipped: coalesced
// ab-shipped: smem_tiled:tile=32
#include <gemmlab/simt/07_warptile.cuh>   // every CUDA-core rung header up to rung 7

namespace gemmlab_exp {
using namespace gemmlab;

__global__ void __launch_bounds__(1024)
naive_rowmajor(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
               const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    const TileOrigin tile = block_tile_origin<32, 32>(N);
    const int row = tile.row + threadIdx.x, col = tile.col + threadIdx.y;
    if (row < M && col < N)
        store_scaled(&C[(long long)row * ldc + col], dot_row_col(A, lda, B, ldb, row, col, K), alpha, beta);
}

__global__ void __launch_bounds__(1024)
coalesced_rowmajor(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                   const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    const TileOrigin tile = block_tile_origin<32, 32>(N);
    const int row = tile.row + threadIdx.y, col = tile.col + threadIdx.x;
    if (row < M && col < N)
        store_scaled(&C[(long long)row * ldc + col], dot_row_col(A, lda, B, ldb, row, col, K), alpha, beta);
}

__global__ void __launch_bounds__(1024)
smem32_colmajor(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    __shared__ float As[32][32];
    __shared__ float Bs[32][32];
    const TileOrigin tile = block_tile_origin_colmajor<32, 32>(M);
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 32) {
        load_tile<32, 32, 32, 1024>(&As[0][0], A, lda, tile.row, k0, M, K, tid);
        load_tile<32, 32, 32, 1024>(&Bs[0][0], B, ldb, k0, tile.col, K, N, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 32; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    const int row = tile.row + ty, col = tile.col + tx;
    if (row < M && col < N) store_scaled(&C[(long long)row * ldc + col], acc, alpha, beta);
}
}  // namespace gemmlab_exp
