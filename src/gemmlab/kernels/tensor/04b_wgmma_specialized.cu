// Tensor rung 4, step b: wgmma_specialized (Hopper, sm_90a only).  Step a's ring and
// wgmmas, with the copies given a warpgroup of their own: warp specialisation.  Warpgroup
// 0 is the producer (one thread keeps the ring full, waiting on `empty` barriers only);
// BM/64 consumer warpgroups wait on `full` and multiply, never on a copy's issuer.  The
// producer needs few registers and the consumers many: setmaxnreg moves them (40 and 232
// a thread), so 384 threads fit where 168 registers each would be the cap.  Still one
// block per tile of C, stored from the registers.  Details: docs/tensor/04b-wgmma-specialized.md.
#include <gemmlab/tensor/04_wgmma_steps.cuh>

namespace gemmlab {

// Arguments as step a's (04a_wgmma_tma.cu).  setmaxnreg needs a register cap at entry
// (__launch_bounds__(threads, 1)) and the two roles as one if / else, or ptxas drops it.
template <int DT, int ODT, int BM, int BN, int STAGES, char OPA, char OPB>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
wgmma_specialized_gemm(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A,
                       int lda, const typename wmma_types::Storage<DT>::type* __restrict__ B, int ldb, float beta,
                       typename wmma_types::Storage<ODT>::type* __restrict__ C, int ldc,
                       const __grid_constant__ hopper::TensorMap map_a,
                       const __grid_constant__ hopper::TensorMap map_b) {
    using namespace hopper;
    using Ring = StepRing<BM, BN, STAGES>;
    constexpr int BK = 64;   // 16-bit values of K a K-step: one 128-byte swizzle row
    constexpr bool A_KMAJOR = OPA == 'N', B_KMAJOR = OPB == 'T';
    constexpr int CONSUMERS = BM / 64;
    static_assert(DT != TYPE_TF32 && (BM == 64 || BM == 128) && (BN == 128 || BN == 256), "16-bit, tile shape");
    (void)A; (void)lda; (void)B; (void)ldb;
    extern __shared__ unsigned char smem_raw[];
    const Ring ring(smem_raw);
    const TileOrigin tile = block_tile_origin_grouped<BM, BN, WGMMA_GROUP_M>(M, N);
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        ring.init(CONSUMERS * 4);   // `empty`: one arrival from each consumer warp
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
    }
    __syncthreads();

    if (wg == 0) {
        // The producer: a stage is refilled as soon as every consumer warp released it.
        setmaxnreg_dec<WGMMA_STEP_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            for (int ks = 0; ks < k_steps; ++ks) {
                const int s = ks % STAGES;
                if (ks >= STAGES) mbar_wait(&ring.empty[s], ((ks / STAGES) & 1) ^ 1);   // K-step ks - STAGES done
                load_k_step<A_KMAJOR, B_KMAJOR, 1>(ring, s, &map_a, &map_b, tile.row, tile.col, ks * BK, 0);
            }
        }
    } else {
        // The consumers: warpgroup c multiplies rows [64c, 64c + 64) of the tile.
        setmaxnreg_inc<WGMMA_STEP_CONSUMER_REGS>();
        const int c = wg - 1;
        float acc[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
        fence_operands(acc);
        const unsigned char* a_rows = ring.a + c * (64 * 128);
        for (int ks = 0; ks < k_steps; ++ks) {
            const int s = ks % STAGES;
            mbar_wait(&ring.full[s], (ks / STAGES) & 1);
            wgmma_k_step<BN, DT, A_KMAJOR, B_KMAJOR>(acc, a_rows + s * Ring::A_BYTES, ring.b + s * Ring::B_BYTES);
            wgmma_wait<1>();   // the previous K-step's wgmmas are done: hand its stage back
            if (ks > 0) release_stage<1>(&ring.empty[(ks - 1) % STAGES], lane);
        }
        wgmma_wait<0>();
        fence_operands(acc);
        store_accumulators<BN>(acc, C, ldc, M, N, tile.row + 64 * c, tile.col, alpha, beta, pairs_aligned(C, ldc));
    }
}

}  // namespace gemmlab
