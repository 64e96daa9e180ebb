// Tensor-core rung 1, wmma: the WMMA API at its plainest.  One warp computes one
// 16 x 16 tile of C, filling its A and B fragments straight from global memory
// through the fragment map (tensor/01_wmma.cuh), so any M, N, K and alignment
// works; mma_sync multiplies them into a float accumulator.  Nothing is staged
// or reused: each fragment element is read once per warp that needs it, which
// is what rung 2 fixes.  DT, ODT: input and output type codes (type_codes.cuh).
#include <gemmlab/tensor/01_wmma.cuh>

namespace gemmlab {

constexpr int TC_WARPS_PER_BLOCK = 4;   // warps per block, one 16 x 16 tile of C each

template <int DT, int ODT, char OPA, char OPB>
__global__ void __launch_bounds__(TC_WARPS_PER_BLOCK * 32)
wmma_tile(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A, int lda,
          const typename wmma_types::Storage<DT>::type* __restrict__ B, int ldb, float beta,
          typename wmma_types::Storage<ODT>::type* __restrict__ C, int ldc, long long stride_a,
          long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    constexpr int TK = tc_tile_k<DT>();
    typename wmma_types::Fragment<USE_MATRIX_A, 16, 16, TK, DT, LAYOUT_ROW>::type a;
    typename wmma_types::Fragment<USE_MATRIX_B, 16, 16, TK, DT, LAYOUT_ROW>::type b;
    typename wmma_types::Fragment<USE_ACCUMULATOR, 16, 16, TK, TYPE_FLOAT32, LAYOUT_ROW>::type acc;
    const int warp = blockIdx.x * TC_WARPS_PER_BLOCK + threadIdx.x / 32;
    const int tiles_n = (N + 15) / 16;
    const int row0 = (warp / tiles_n) * 16, col0 = (warp % tiles_n) * 16;
    if (row0 >= M) return;   // the last block's spare warps (whole warps: mma_sync stays warp-uniform)
    nvcuda::wmma::fill_fragment(acc, 0.0f);
    const int k_end = alpha == 0.0f ? 0 : K;   // alpha = 0 reads neither A nor B (BLAS)
    for (int k0 = 0; k0 < k_end; k0 += TK) {
        load_fragment_masked<DT, OPA>(a, A, lda, row0, k0, M, K);
        load_fragment_masked<DT, OPB>(b, B, ldb, k0, col0, K, N);
        nvcuda::wmma::mma_sync(acc, a, b, acc);
    }
    store_accumulator_masked(acc, C, ldc, row0, col0, M, N, alpha, beta);
}

}  // namespace gemmlab
