// Rung 7, warptile: a level of tiling between the block and the thread
// (simt/07_warptile.cuh).  Each warp owns a WM x WN piece of the block tile and
// each thread WMITER x WNITER small TM x 4 subtiles spread over it, so a warp's
// 16-byte shared reads are free of bank conflicts (lanes that share a row or
// column read the same chunk as a broadcast) and each loaded fragment feeds
// WMITER x WNITER outer products.  Tile loads and epilogue are rung 6's.
#include <gemmlab/simt/07_warptile.cuh>

namespace gemmlab {

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, bool VEC, char OPA, char OPB>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)  // 1: see blocktile_2d
warptile(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
         const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
         long long stride_a, long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    constexpr int TN = 4;                                   // one float4 of columns per subtile
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
    static_assert((WSUBM / TM) * (WSUBN / TN) == 32, "a warp subtile is 32 threads' tiles");
    __shared__ __align__(16) float As[BK][BM];  // transposed: As[k][row]
    __shared__ __align__(16) float Bs[BK][BN];
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_row = (warp / (BN / WN)) * WM, warp_col = (warp % (BN / WN)) * WN;
    const int lane_row = (lane / (WSUBN / TN)) * TM, lane_col = (lane % (WSUBN / TN)) * TN;
    float acc[WMITER][WNITER][TM][TN] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_block_tiles<BM, BN, BK, THREADS, VEC, OPA, OPB>(As, Bs, A, lda, B, ldb, tile, k0, M, N, K, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k)
            warp_subtiles_step<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(
                acc, &As[k][warp_row + lane_row], &Bs[k][warp_col + lane_col]);
        __syncthreads();
    }
    store_warp_subtiles<WMITER, WNITER, WSUBM, WSUBN, TM, TN, VEC>(
        C, ldc, tile.row + warp_row + lane_row, tile.col + warp_col + lane_col, M, N, acc, alpha, beta);
}

}  // namespace gemmlab
