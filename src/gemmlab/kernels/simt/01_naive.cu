// Rung 1, naive: one thread per output element, reading its row of A and its
// column of B straight from global memory (dot_row_col, simt/01_naive.cuh).
// threadIdx.x walks the rows, so a warp's 32 threads touch 32 rows of A and of C
// a full row apart: every load and store is its own memory transaction.  The
// textbook starting point, and the baseline every later rung is measured from.
#include <gemmlab/simt/01_naive.cuh>

namespace gemmlab {

template <int BLOCK, char OPA, char OPB>
__global__ void __launch_bounds__(BLOCK * BLOCK)
naive(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
      const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
      long long stride_a, long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    const TileOrigin tile = block_tile_origin_colmajor<BLOCK, BLOCK>(M);
    const int row = tile.row + threadIdx.x;  // consecutive threads: consecutive rows
    const int col = tile.col + threadIdx.y;
    if (row >= M || col >= N) return;
    store_scaled(&C[(long long)row * ldc + col], dot_row_col<OPA, OPB>(A, lda, B, ldb, row, col, K), alpha, beta);
}

}  // namespace gemmlab
