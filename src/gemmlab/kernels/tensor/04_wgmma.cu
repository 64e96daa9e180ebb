// Tensor-core rung 4, wgmma (Hopper, sm_90a only).  The WMMA rungs make every
// warp load its fragments from shared memory into registers (ldmatrix) before
// each 16x16 MMA, and every thread copies tiles from global memory: registers,
// issue slots and shared-memory bandwidth go to moving data.  Hopper moves the
// data with dedicated hardware instead:
//
//   * TMA (the copy engine): ONE thread asks for a whole BMx(128 bytes) tile of
//     A and the tile of B; they arrive in shared memory already 128-byte
//     swizzled (bank-conflict free for the tensor cores), and zeros where the
//     tile sticks out of the matrix, so edges need no code on the load side.
//   * mbarrier: each stage of the shared-memory ring has a "full" barrier (the
//     copy engine completes it when all bytes have landed) and an "empty"
//     barrier (the consumers arrive on it when they no longer read the stage).
//   * wgmma: a warpgroup (128 threads) multiplies a 64 x K tile of A by a
//     K x BN tile of B read straight from shared memory through descriptors,
//     asynchronously, into 64 x BN FP32 accumulators (BN/2 registers a thread).
//
// so the block specialises its warpgroups: warpgroup 0 is the producer (one of
// its threads issues the copies), warpgroups 1..BM/64 are consumers, one
// 64-row slice of the BM x BN output tile each.  setmaxnreg moves registers
// from the producer (40) to the consumers (232), which hold the accumulators.
// The grid is persistent: at most one block per SM, walking the output tiles in
// groups of GROUP_M tile-rows, so that blocks working at the same time share
// rows of A and columns of B in L2; the producer runs ahead into the next tile
// while the consumers write this one out.  With CLUSTER = 2, the two blocks of a
// cluster take vertically adjacent tiles, which need the same B tile: each
// block copies half of it, multicast into both, halving B's traffic from L2.
//
// Operand layouts.  A (row-major M x K) is K-major, what wgmma reads natively.
// B (row-major K x N) is N-major: for FP16/BF16 the descriptor describes
// 64-column chunks of K-rows and the instruction's transpose bit (imm-trans-b)
// reads them as such.  TF32 wgmma has no transpose, so for TF32 the launcher
// first packs B^T (N x K, K-major), rounded to TF32, into a workspace
// (tensor/tf32_pack.cu) and the B map points there.  The tensor cores read a
// TF32 operand from shared memory by dropping the low 13 bits of each float
// (measured: truncation), so for TF32 the consumers feed A from registers,
// rounded to nearest as they load it (B^T was rounded when it was packed).
//
// The kernel takes the usual (M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) plus
// the two tensor maps (built on the host: runtime/tma.py); A and B themselves
// are only read through the maps.  Epilogue: C = alpha * acc + beta * C from
// the registers, masked at the edges; beta == 0 never reads C; alpha == 0 reads
// neither A nor B.
#include <gemmlab/hopper_gemm.cuh>

namespace gemmlab {

constexpr int WGMMA_PRODUCER_REGS = 40;   // setmaxnreg: producer warpgroup
constexpr int WGMMA_CONSUMER_REGS = 232;  // setmaxnreg: each consumer warpgroup

// OPA, OPB: the operand layouts every rung's template ends with (layout.cuh).
// This rung reads row-major A and B only (the registry lists just 'N', 'N';
// other layouts fall back to another rung): transposed operands would need
// the other major-ness in the tensor maps and descriptors.
template <int DT, int ODT, int BM, int BN, int STAGES, int CLUSTER, char OPA, char OPB>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
wgmma_gemm(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A, int lda,
           const typename wmma_types::Storage<DT>::type* __restrict__ B, int ldb, float beta,
           typename wmma_types::Storage<ODT>::type* __restrict__ C, int ldc,
           const __grid_constant__ hopper::TensorMap map_a, const __grid_constant__ hopper::TensorMap map_b) {
    using namespace hopper;
    using S = typename wmma_types::Storage<DT>::type;
    using O = typename wmma_types::Storage<ODT>::type;
    constexpr int EB = int(sizeof(S));
    constexpr int BK = 128 / EB;              // one 128-byte swizzle row of K per stage
    constexpr int MMA_K = 32 / EB;            // K of one wgmma: 16 (16-bit), 8 (TF32)
    constexpr bool TF32 = DT == 2;            // B^T packed K-major; A fed from registers, rounded
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
    constexpr int CONSUMERS = BM / 64;
    static_assert(BM % 64 == 0 && (BN == 128 || BN == 256) && (CLUSTER == 1 || CLUSTER == 2), "tile shape");
    static_assert(OPA == 'N' && OPB == 'N', "wgmma_gemm reads row-major A and B only");
    (void)A; (void)lda; (void)B; (void)ldb;

    // Dynamic shared memory, aligned to 1024 bytes (the swizzle atom): STAGES
    // tiles of A, STAGES tiles of B, then two barriers per stage.
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* a_tiles = smem;
    unsigned char* b_tiles = smem + STAGES * A_BYTES;
    u64* full = reinterpret_cast<u64*>(b_tiles + STAGES * B_BYTES);   // the copies have landed
    u64* empty = full + STAGES;                                        // every consumer is done with it

    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const u32 rank = CLUSTER > 1 ? cluster_ctarank() : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);                           // the producer's arrive (+ the bytes)
            mbar_init(&empty[s], CONSUMERS * 4 * CLUSTER);    // each consumer warp of each CTA
        }
        mbar_fence_init();
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
    }
    // The peer's barriers must be initialised before our copies or arrivals reach them.
    if constexpr (CLUSTER > 1) cluster_sync(); else __syncthreads();

    // A cluster of CLUSTER blocks takes CLUSTER vertically adjacent tiles that share
    // their columns of B: each block copies its own A tile and 1/CLUSTER of the B
    // tile, multicast into every block of the cluster.
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int tiles_mc = (tiles_m + CLUSTER - 1) / CLUSTER;
    const int cluster_tiles = tiles_mc * tiles_n;
    const int first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;   // alpha = 0 reads neither A nor B

    if (wg == 0) {
        setmaxnreg_dec<WGMMA_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            // Producer: one thread walks the same tiles as the consumers and keeps the
            // ring full; a stage is refilled once every consumer of the cluster released it.
            int it = 0;
            for (int t = first; t < cluster_tiles; t += step) {
                int tmc, tn;
                grouped_tile(t, tiles_mc, tiles_n, tmc, tn);
                const int tm = tmc * CLUSTER + int(rank);
                for (int ks = 0; ks < k_steps; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
                    tma_load_2d(a_tiles + s * A_BYTES, &map_a, ks * BK, tm * BM, &full[s]);
                    unsigned char* b = b_tiles + s * B_BYTES;
                    if constexpr (!TF32) {
                        // BN/64 boxes of 64 columns x BK rows (64 rows of 128 bytes each).
#pragma unroll
                        for (int j = int(rank); j < BN / 64; j += CLUSTER) {
                            if constexpr (CLUSTER > 1)
                                tma_load_2d_multicast(b + j * (BK * 128), &map_b, tn * BN + 64 * j, ks * BK,
                                                      &full[s], (1 << CLUSTER) - 1);
                            else
                                tma_load_2d(b + j * (BK * 128), &map_b, tn * BN + 64 * j, ks * BK, &full[s]);
                        }
                    } else {
                        // B^T rows [BN/CLUSTER * rank, ...) of the tile: one box per block.
                        constexpr int ROWS = BN / CLUSTER;
                        if constexpr (CLUSTER > 1)
                            tma_load_2d_multicast(b + rank * (ROWS * 128), &map_b, ks * BK, tn * BN + int(rank) * ROWS,
                                                  &full[s], (1 << CLUSTER) - 1);
                        else
                            tma_load_2d(b, &map_b, ks * BK, tn * BN, &full[s]);
                    }
                }
            }
        }
    } else {
        // Consumers: warpgroup c owns rows [64c, 64c + 64) of the block tile.
        setmaxnreg_inc<WGMMA_CONSUMER_REGS>();
        const int c = wg - 1;
        const int wq = warp % 4;
        // 8-byte / 4-byte paired stores need an even ldc and an aligned C.
        const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<u64>(C) % (2 * sizeof(O)) == 0);
        float acc[BN / 2];
        int it = 0;
        for (int t = first; t < cluster_tiles; t += step) {
            int tmc, tn;
            grouped_tile(t, tiles_mc, tiles_n, tmc, tn);
            const int tm = tmc * CLUSTER + int(rank);
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
            fence_operands(acc);
            int prev = 0;
            for (int ks = 0; ks < k_steps; ++ks, ++it) {
                const int s = it % STAGES;
                mbar_wait(&full[s], (it / STAGES) & 1);
                const unsigned char* a = a_tiles + s * A_BYTES + c * (64 * 128);
                const unsigned char* b = b_tiles + s * B_BYTES;
                if constexpr (TF32) {
                    // The tensor cores would drop the low 13 bits of each float of a
                    // shared-memory operand (measured: truncation), so A comes from
                    // registers instead, rounded to nearest on the way: per K8, 4 values
                    // a thread (the mma.m16n8k8 layout, warp w holding rows 16w..16w+15),
                    // read from the swizzled tile (16-byte chunk k/4 of row r sits at
                    // chunk (k/4) ^ (r % 8); the 8 rows of a load hit 8 chunks: no conflicts).
                    u32 fa[BK / MMA_K][4];
                    const int g = lane / 4, tq = lane % 4;
                    const unsigned char* r0 = a + (wq * 16 + g) * 128;   // rows r0 and r0 + 8
#pragma unroll
                    for (int kk = 0; kk < BK / MMA_K; ++kk) {
                        const int c0 = ((2 * kk) ^ g) * 16 + tq * 4, c1 = ((2 * kk + 1) ^ g) * 16 + tq * 4;
                        fa[kk][0] = round_tf32_bits(*reinterpret_cast<const float*>(r0 + c0));
                        fa[kk][1] = round_tf32_bits(*reinterpret_cast<const float*>(r0 + 1024 + c0));
                        fa[kk][2] = round_tf32_bits(*reinterpret_cast<const float*>(r0 + c1));
                        fa[kk][3] = round_tf32_bits(*reinterpret_cast<const float*>(r0 + 1024 + c1));
                    }
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK / MMA_K; ++kk)
                        WgmmaRegA<BN, 2>::mma(acc, fa[kk], make_smem_desc(b + 32 * kk, 16, 1024), 1);
                    wgmma_commit();
                    // The fragments must stay untouched until these wgmmas are done: wait
                    // for them (the other consumer warpgroup keeps the tensor cores busy
                    // meanwhile) and hand the stage back at once.
                    wgmma_wait<0>();
#pragma unroll
                    for (int kk = 0; kk < BK / MMA_K; ++kk) fence_operands(fa[kk]);
                    release_stage<CLUSTER>(&empty[s], lane);
                    continue;
                }
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / MMA_K; ++kk) {
                    // K-major A: the next MMA_K columns start 32 bytes further along
                    // the (swizzled) row; the hardware applies the swizzle.
                    const u64 da = make_smem_desc(a + 32 * kk, 16, 1024);
                    // N-major B: the next MMA_K rows start MMA_K * 128 bytes further;
                    // 64-column chunks lie BK * 128 bytes apart.
                    const u64 db = make_smem_desc(b + kk * MMA_K * 128, BK * 128, 1024);
                    Wgmma<BN, DT>::template mma<0, 1>(acc, da, db, 1);
                }
                wgmma_commit();
                // Keep one group in flight; the one before it is done, so its stage
                // goes back to the producers (one arrival per warp, in every block of
                // the cluster, as every block's producer writes into it).
                wgmma_wait<1>();
                if (ks > 0) release_stage<CLUSTER>(&empty[prev], lane);
                prev = s;
            }
            wgmma_wait<0>();
            fence_operands(acc);
            if (!TF32 && k_steps > 0) release_stage<CLUSTER>(&empty[prev], lane);

            // Epilogue straight from the accumulator registers (layout: hopper.cuh).
            const int row0 = tm * BM + c * 64 + wq * 16 + lane / 4;
            const int col0 = tn * BN + 2 * (lane % 4);
            if (pairs && beta == 0.0f && tm * BM + c * 64 + 64 <= M && (tn + 1) * BN <= N) {
                // The common case (a slice inside C, no old C to read): no checks per element.
                O* p = C + (long long)row0 * ldc + col0;
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                    store_two(p + 8 * j, alpha * acc[4 * j], alpha * acc[4 * j + 1]);
                    store_two(p + 8LL * ldc + 8 * j, alpha * acc[4 * j + 2], alpha * acc[4 * j + 3]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        store_pair(C, ldc, row0 + 8 * h, col0 + 8 * j, M, N, acc[4 * j + 2 * h],
                                   acc[4 * j + 2 * h + 1], alpha, beta, pairs);
                }
            }
        }
    }
    // No block may leave while a peer can still arrive on its barriers.
    if constexpr (CLUSTER > 1) cluster_sync();
}

}  // namespace gemmlab
