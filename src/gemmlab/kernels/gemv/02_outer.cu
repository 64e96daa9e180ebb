// GEMV rung 2, outer: products with a handful of K, as in a weight gradient
// dY.t() @ x at one token (K = 1: an outer product).  Then C holds far more than
// op(A) and op(B) together, and the time such a product needs is one write of C
// (and one read where beta != 0).  A tiled GEMM spends a K loop, shared memory
// and an epilogue shaped for long K on it; where an operand is off the 16-byte
// grid (one token's dY of odd length) its 4-byte variant also scatters C's stores.  So
// this kernel gives each warp whole rows of C and each lane one 16-byte piece of
// a row, computed from K products in registers, and reads op(A) and op(B) element
// by element through the caches (how: gemv/02_outer.cuh).  Arithmetic in FP32 for
// every storage type; correct for any K, fast for a few.
#include <gemmlab/gemv/02_outer.cuh>

namespace gemmlab {

// ALIGNED: C's rows start on the 16-byte grid (base, ldc, batch stride), whatever
// their width and whatever op(A) and op(B) are.
template <int DT, int ODT, bool ALIGNED, char OPA, char OPB>
__global__ void __launch_bounds__(OUTER_THREADS)
outer(int M, int N, int K, float alpha, const typename StorageOf<DT>::type* __restrict__ A, int lda,
      const typename StorageOf<DT>::type* __restrict__ B, int ldb, float beta,
      typename StorageOf<ODT>::type* __restrict__ C, int ldc, long long stride_a, long long stride_b,
      long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    const int k_end = alpha == 0.0f ? 0 : K;   // alpha = 0 reads neither A nor B (BLAS)
    outer_tile<ALIGNED, OPA, OPB>(M, N, k_end, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace gemmlab
