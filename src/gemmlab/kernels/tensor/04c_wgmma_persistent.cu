// Tensor rung 4, step c: wgmma_persistent (Hopper, sm_90a only).  Step b's producer and
// consumers, with a persistent grid: no more blocks than SMs, each walking tiles b, b +
// grid, ... in grouped order, its ring and barriers kept from one tile to the next, so the
// producer copies the next tile's K-steps while the consumers store this one, and no block
// pays a launch and an empty ring per tile.  With CLUSTER = 2 two blocks take vertically
// adjacent tiles, which share their columns of B: each copies half of the B tile and TMA
// multicasts it into both.  Still stored from the registers.
// Details: docs/tensor/04c-wgmma-persistent.md.
#include <gemmlab/tensor/04_wgmma_steps.cuh>

namespace gemmlab {

// Arguments as step a's (04a_wgmma_tma.cu).  A stage of a cluster is filled by every block's
// producer (B's halves), so each consumer warp releases it in every block of the cluster.
template <int DT, int ODT, int BM, int BN, int STAGES, int CLUSTER, char OPA, char OPB>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
wgmma_persistent_gemm(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A,
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
    static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of one or two blocks");
    (void)A; (void)lda; (void)B; (void)ldb;
    extern __shared__ unsigned char smem_raw[];
    const Ring ring(smem_raw);
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
    const u32 rank = CLUSTER > 1 ? cluster_ctarank() : 0;

    if (threadIdx.x == 0) {
        ring.init(CONSUMERS * 4 * CLUSTER);   // `empty`: each consumer warp of each block of the cluster
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
    }
    // A peer's copies and arrivals may reach our barriers only once they are initialised.
    if constexpr (CLUSTER > 1) cluster_sync(); else __syncthreads();

    // Work item t is a cluster's tile: CLUSTER vertically adjacent tiles, block `rank` the
    // rank-th of them, in grouped_tile's order (tensor/04_wgmma_work.cuh).
    const int tiles_n = (N + BN - 1) / BN, tiles_mc = ((M + BM - 1) / BM + CLUSTER - 1) / CLUSTER;
    const int work = tiles_mc * tiles_n, first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;

    if (wg == 0) {
        setmaxnreg_dec<WGMMA_STEP_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int it = 0;   // K-steps copied so far, over every tile: the ring runs on across tiles
            for (int t = first; t < work; t += step) {
                int tmc, tn;
                grouped_tile(t, tiles_mc, tiles_n, tmc, tn);
                const int m0 = (tmc * CLUSTER + int(rank)) * BM, n0 = tn * BN;
                for (int ks = 0; ks < k_steps; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&ring.empty[s], ((it / STAGES) & 1) ^ 1);
                    load_k_step<A_KMAJOR, B_KMAJOR, CLUSTER>(ring, s, &map_a, &map_b, m0, n0, ks * BK, rank);
                }
            }
        }
    } else {
        setmaxnreg_inc<WGMMA_STEP_CONSUMER_REGS>();
        const int c = wg - 1;
        const bool pairs = pairs_aligned(C, ldc);
        const unsigned char* a_rows = ring.a + c * (64 * 128);
        int it = 0;
        for (int t = first; t < work; t += step) {
            int tmc, tn;
            grouped_tile(t, tiles_mc, tiles_n, tmc, tn);
            const int m0 = (tmc * CLUSTER + int(rank)) * BM, n0 = tn * BN;
            float acc[BN / 2];
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
            fence_operands(acc);
            for (int ks = 0; ks < k_steps; ++ks, ++it) {
                const int s = it % STAGES;
                mbar_wait(&ring.full[s], (it / STAGES) & 1);
                wgmma_k_step<BN, DT, A_KMAJOR, B_KMAJOR>(acc, a_rows + s * Ring::A_BYTES, ring.b + s * Ring::B_BYTES);
                wgmma_wait<1>();
                if (ks > 0) release_stage<CLUSTER>(&ring.empty[(it - 1) % STAGES], lane);
            }
            wgmma_wait<0>();
            fence_operands(acc);
            // The tile's last stage goes back before the stores: the producer is already
            // copying the next tile's K-steps into the others.
            if (k_steps > 0) release_stage<CLUSTER>(&ring.empty[(it - 1) % STAGES], lane);
            store_accumulators<BN>(acc, C, ldc, M, N, m0 + 64 * c, n0, alpha, beta, pairs);
        }
    }
    // No block may leave while a peer can still multicast into it or arrive on its barriers.
    if constexpr (CLUSTER > 1) cluster_sync();
}

}  // namespace gemmlab
