// Rung 2, coalesced: rung 1 with the thread mapping turned around.  threadIdx.x
// now walks the columns, so a warp reads 32 consecutive floats of B and writes 32
// of C (one 128-byte transaction each) and all its threads read the same element
// of A (a broadcast).  The arithmetic is unchanged; the memory traffic per warp
// shrinks.
#include <gemmlab/simt/01_naive.cuh>

namespace gemmlab {

template <int BLOCK, char OPA, char OPB>
__global__ void __launch_bounds__(BLOCK * BLOCK)
coalesced(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
          const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
          long long stride_a, long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    const TileOrigin tile = block_tile_origin_colmajor<BLOCK, BLOCK>(M);
    const int row = tile.row + threadIdx.y;
    const int col = tile.col + threadIdx.x;  // consecutive threads: consecutive columns
    if (row >= M || col >= N) return;
    store_scaled(&C[(long long)row * ldc + col], dot_row_col<OPA, OPB>(A, lda, B, ldb, row, col, K), alpha, beta);
}

}  // namespace gemmlab
