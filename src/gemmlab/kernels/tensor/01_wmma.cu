// Tensor-core rung 1, wmma: the WMMA API at its plainest.  One warp computes
// one 16 x 16 tile of C: for each K-step it fills an A fragment (16 x 16, or
// 16 x 8 for TF32) and a B fragment straight from global memory and lets
// mma_sync multiply them into a float accumulator fragment.  Nothing is staged
// in shared memory and nothing is reused: each fragment element is read from
// global memory once per warp that needs it, which is what rung 2 fixes.
//
// The fragments are filled element by element through the fragment map of
// gemmlab/wmma_ext.cuh (which lane holds which (row, col)), so tiles that stick
// out of the matrix read zeros and any M, N, K works, with no alignment rules.
// The epilogue writes alpha * acc + beta * C from the registers the same way.
//
// DT: input type code (0 FP16, 1 BF16, 2 TF32 from float storage); ODT: output
// type code (3 float, or DT for FP16/BF16 outputs).  See wmma_types.cuh.  OPA,
// OPB: the operands' layouts (layout.cuh); the fragment map reads either.
#include <gemmlab/tensor_common.cuh>

namespace gemmlab {

template <int DT, int ODT, char OPA, char OPB>
__global__ void __launch_bounds__(TC_WARPS_PER_BLOCK * 32)
wmma_tile(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A, int lda,
          const typename wmma_types::Storage<DT>::type* __restrict__ B, int ldb, float beta,
          typename wmma_types::Storage<ODT>::type* __restrict__ C, int ldc, long long stride_a,
          long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    constexpr int TK = tc_tile_k<DT>();
    typename wmma_types::Fragment<0, 16, 16, TK, DT, 0>::type a;
    typename wmma_types::Fragment<1, 16, 16, TK, DT, 0>::type b;
    typename wmma_types::Fragment<2, 16, 16, TK, 3, 0>::type acc;
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
