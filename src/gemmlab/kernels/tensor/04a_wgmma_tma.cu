// Tensor rung 4, step a: wgmma_tma (Hopper, sm_90a only).  The threads stop copying
// tiles: one thread asks the copy engine (TMA) for a K-step's tiles of A and B, which
// land 128-byte swizzled in a STAGES-deep shared-memory ring, and wgmma multiplies them
// from shared memory into registers, a warpgroup (4 warps) at a time, asynchronously.
// Two mbarriers a stage replace __syncthreads: `full` completes when the stage's bytes
// have landed, `empty` when every warp is done with it.  Every warpgroup computes (64
// rows of the tile each) and thread 0 also refills the ring; one block per tile of C,
// stored from the registers.  Details: docs/tensor/04a-wgmma-tma.md.
#include <gemmlab/tensor/04_wgmma_steps.cuh>

namespace gemmlab {

// OPA, OPB: the operand layouts of every rung (layout.cuh).  Each operand's tile lands in
// shared memory as stored, K-major or MN-major, and the wgmma reads an MN-major one through
// its transpose bit (load_k_step, wgmma_k_step: tensor/04_wgmma_steps.cuh).  A and B are
// read only through the tensor maps (built on the host: kernels/tensor/wgmma_tma.py), whose
// copies read zeros past the matrix, so a ragged tile costs nothing on the load side.
// alpha == 0 reads neither A nor B.
template <int DT, int ODT, int BM, int BN, int STAGES, char OPA, char OPB>
__global__ void __launch_bounds__(BM / 64 * 128, 1)
wgmma_tma_gemm(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A, int lda,
               const typename wmma_types::Storage<DT>::type* __restrict__ B, int ldb, float beta,
               typename wmma_types::Storage<ODT>::type* __restrict__ C, int ldc,
               const __grid_constant__ hopper::TensorMap map_a, const __grid_constant__ hopper::TensorMap map_b) {
    using namespace hopper;
    using Ring = StepRing<BM, BN, STAGES>;
    constexpr int BK = 64;   // 16-bit values of K a K-step: one 128-byte swizzle row
    constexpr bool A_KMAJOR = OPA == 'N', B_KMAJOR = OPB == 'T';
    static_assert(DT != TYPE_TF32 && (BM == 64 || BM == 128) && (BN == 128 || BN == 256), "16-bit, tile shape");
    (void)A; (void)lda; (void)B; (void)ldb;
    extern __shared__ unsigned char smem_raw[];
    const Ring ring(smem_raw);
    const TileOrigin tile = block_tile_origin_grouped<BM, BN, WGMMA_GROUP_M>(M, N);
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
    auto load = [&](int ks) {
        load_k_step<A_KMAJOR, B_KMAJOR, 1>(ring, ks % STAGES, &map_a, &map_b, tile.row, tile.col, ks * BK, 0);
    };

    if (threadIdx.x == 0) {
        ring.init(BM / 64 * 4);   // `empty`: one arrival from each warp
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
        for (int ks = 0; ks < STAGES && ks < k_steps; ++ks) load(ks);   // fill the ring
    }
    __syncthreads();   // no thread waits on a barrier before it is initialised

    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    fence_operands(acc);
    const unsigned char* a_rows = ring.a + wg * (64 * 128);   // this warpgroup's 64 rows of A's tile
    for (int ks = 0; ks < k_steps; ++ks) {
        const int s = ks % STAGES;
        mbar_wait(&ring.full[s], (ks / STAGES) & 1);   // the stage's (ks / STAGES)-th filling
        wgmma_k_step<BN, DT, A_KMAJOR, B_KMAJOR>(acc, a_rows + s * Ring::A_BYTES, ring.b + s * Ring::B_BYTES);
        // This K-step's wgmmas stay in flight; the previous one's are done, so its stage is free.
        wgmma_wait<1>();
        if (ks > 0) {
            const int prev = (ks - 1) % STAGES;
            release_stage<1>(&ring.empty[prev], lane);
            // Thread 0 refills it with K-step ks - 1 + STAGES once every warp has let it go:
            // until then its own warpgroup waits with it (step b gives the copies a warpgroup).
            if (threadIdx.x == 0 && ks - 1 + STAGES < k_steps) {
                mbar_wait(&ring.empty[prev], ((ks - 1) / STAGES) & 1);
                load(ks - 1 + STAGES);
            }
        }
    }
    wgmma_wait<0>();
    fence_operands(acc);
    store_accumulators<BN>(acc, C, ldc, M, N, tile.row + 64 * wg, tile.col, alpha, beta, pairs_aligned(C, ldc));
}

}  // namespace gemmlab
