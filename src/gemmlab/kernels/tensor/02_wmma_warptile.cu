// Tensor-core rung 2, wmma_warptile: a block stages a BM x BK tile of A and a
// BK x BN tile of B in shared memory once (tensor/02_wmma_warptile.cuh), and each
// warp computes a WM x WN piece as (WM/16) x (WN/16) accumulator fragments: per
// K-step it loads WM/16 A fragments and WN/16 B fragments with load_matrix_sync
// and does (WM/16) x (WN/16) MMAs, so each fragment read serves several MMAs
// instead of one (rung 1).  Rows are padded by 16 bytes: 32-byte aligned
// fragments, spread over the banks.
#include <gemmlab/tensor/02_wmma_warptile.cuh>

namespace gemmlab {

template <int DT, int ODT, int BM, int BN, int BK, int WM, int WN, char OPA, char OPB>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)  // 1: see blocktile_2d
wmma_warptile(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A,
              int lda, const typename wmma_types::Storage<DT>::type* __restrict__ B, int ldb, float beta,
              typename wmma_types::Storage<ODT>::type* __restrict__ C, int ldc, long long stride_a,
              long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    using S = typename wmma_types::Storage<DT>::type;
    constexpr int TK = tc_tile_k<DT>();
    constexpr int FM = WM / 16, FN = WN / 16;                 // fragments per warp
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int PAD = 16 / int(sizeof(S));                  // 16 bytes
    constexpr int ALD = BK + PAD, BLD = BN + PAD;
    static_assert(BK % TK == 0, "BK must be a multiple of the MMA's K");
    __shared__ __align__(32) S As[BM][ALD];
    __shared__ __align__(32) S Bs[BK][BLD];
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x, warp = tid / 32;
    const int warp_row = (warp / (BN / WN)) * WM, warp_col = (warp % (BN / WN)) * WN;

    typename wmma_types::Fragment<USE_MATRIX_A, 16, 16, TK, DT, LAYOUT_ROW>::type a[FM];
    // B fragments one at a time: the registers go to the accumulators.
    typename wmma_types::Fragment<USE_MATRIX_B, 16, 16, TK, DT, LAYOUT_ROW>::type b;
    typename wmma_types::Fragment<USE_ACCUMULATOR, 16, 16, TK, TYPE_FLOAT32, LAYOUT_ROW>::type acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);

    const int k_end = alpha == 0.0f ? 0 : K;   // alpha = 0 reads neither A nor B (BLAS)
    for (int k0 = 0; k0 < k_end; k0 += BK) {
        stage_tile<BM, BK, ALD, THREADS, OPA>(&As[0][0], A, lda, tile.row, k0, M, K, tid);
        stage_tile<BK, BN, BLD, THREADS, OPB>(&Bs[0][0], B, ldb, k0, tile.col, K, N, tid);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += TK) {
#pragma unroll
            for (int i = 0; i < FM; ++i) load_fragment<DT>(a[i], &As[warp_row + 16 * i][kk], ALD);
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                load_fragment<DT>(b, &Bs[kk][warp_col + 16 * j], BLD);
#pragma unroll
                for (int i = 0; i < FM; ++i) nvcuda::wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
            store_accumulator_masked(acc[i][j], C, ldc, tile.row + warp_row + 16 * i, tile.col + warp_col + 16 * j,
                                     M, N, alpha, beta);
}

}  // namespace gemmlab
