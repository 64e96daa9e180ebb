// Rung 6, vectorized: rung 5's tiles moved 16 bytes per instruction
// (simt/06_vectorized.cuh): float4 global loads, A's tile stored transposed so
// that both fragments are read with 16-byte shared loads, float4 stores of C --
// a quarter of rung 5's load instructions for the same bytes.  VEC = false is
// the same kernel with scalar global accesses, for matrices whose widths or
// addresses are not multiples of 16 bytes.
#include <gemmlab/simt/06_vectorized.cuh>

namespace gemmlab {

template <int BM, int BN, int BK, int TM, int TN, bool VEC, char OPA, char OPB>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
vectorized(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
           const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
           long long stride_a, long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    static_assert(TM % 4 == 0 && TN % 4 == 0, "fragments are read as float4");
    constexpr int THREADS = (BM / TM) * (BN / TN);
    __shared__ __align__(16) float As[BK][BM];  // transposed: As[k][row]
    __shared__ __align__(16) float Bs[BK][BN];
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    float acc[TM][TN] = {};
    float a_frag[TM], b_frag[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_block_tiles<BM, BN, BK, THREADS, VEC, OPA, OPB>(As, Bs, A, lda, B, ldb, tile, k0, M, N, K, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            load_frag4(a_frag, &As[k][trow * TM]);
            load_frag4(b_frag, &Bs[k][tcol * TN]);
            outer_product_acc(acc, a_frag, b_frag);
        }
        __syncthreads();
    }
    store_tile<TM, TN, VEC>(C, ldc, tile.row + trow * TM, tile.col + tcol * TN, M, N, acc, alpha, beta);
}

}  // namespace gemmlab
