// Rung 3, shared-memory tiling: a TILE x TILE block of threads computes a TILE x
// TILE tile of C, walking K a tile at a time: the block copies a tile of A and
// one of B into shared memory (load_tile, simt/03_smem_tiled.cuh) and every
// thread reads its row and column from there.  Each global element is fetched
// once per block instead of once per thread: TILE times less global traffic.
#include <gemmlab/simt/03_smem_tiled.cuh>

namespace gemmlab {

template <int TILE, char OPA, char OPB>
__global__ void __launch_bounds__(TILE * TILE)
smem_tiled(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
           const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
           long long stride_a, long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const TileOrigin tile = block_tile_origin<TILE, TILE>(N);
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        load_tile<TILE, TILE, TILE, TILE * TILE, OPA>(&As[0][0], A, lda, tile.row, k0, M, K, tid);
        load_tile<TILE, TILE, TILE, TILE * TILE, OPB>(&Bs[0][0], B, ldb, k0, tile.col, K, N, tid);
        __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();  // everyone is done before the next copy overwrites them
    }
    const int row = tile.row + ty, col = tile.col + tx;
    if (row < M && col < N) store_scaled(&C[(long long)row * ldc + col], acc, alpha, beta);
}

}  // namespace gemmlab
