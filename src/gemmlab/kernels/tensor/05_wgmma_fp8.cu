// Tensor-core rung 5, wgmma_fp8 (Hopper, sm_90a only): the wgmma rung's machinery -- TMA
// into a swizzled ring, mbarriers, a producer warpgroup and BM/64 consumers, a persistent
// grid (tensor/04_wgmma.cuh) -- with FP8 operands.  What changes (tensor/05_wgmma_fp8.cuh):
// a wgmma takes 32 values of K, so one 128-byte K-step is 128 values and 4 wgmmas; both
// operands must be K-major; scales multiply the result, per tensor, row or column in the
// epilogue, per 1 x 128 / 128 x 128 block at every K-step (copied by the producer into a
// ring of their own beside the tiles); the wgmma sums are added into a second set of FP32
// registers every PROMOTE K-steps (a 256-wide tile that promotes: each 128-wide half on
// its own, every K-step, so that its sums fit in the registers).
// Details: docs/tensor/05-wgmma-fp8.md.
#include <gemmlab/tensor/05_wgmma_fp8.cuh>

namespace gemmlab {

constexpr int WGMMA_FP8_PRODUCER_REGS = 40;    // setmaxnreg: producer warpgroup
constexpr int WGMMA_FP8_CONSUMER_REGS = 232;   // setmaxnreg: each consumer warpgroup
// A consumer warp's share of shared memory for C's staged stores (04_wgmma_store.cuh).
constexpr int WGMMA_FP8_WARP_STAGE = 2560;
static_assert(StagedChunk<float>::BYTES <= WGMMA_FP8_WARP_STAGE && StagedChunk<__nv_bfloat16>::BYTES <= WGMMA_FP8_WARP_STAGE,
              "a warp's staged chunk fits in its share");

// C = alpha * (A scaled) @ (B scaled) + beta * C for one matrix, C row-major.
// AT, BT: TYPE_FLOAT8_E4M3 or _E5M2 (type_codes.cuh), each operand its own.  ODT: C's type,
// TYPE_BFLOAT16 or TYPE_FLOAT32.  OPA = 'N' (A stored M x K, row-major) and OPB = 'T' (B
// stored N x K: op(B) = B^T, as torch._scaled_mm's second operand is a column-major K x N):
// the only layouts, since FP8 wgmma reads K-major operands only; the host refuses others.
// A and B are read only through their maps (3-D, a batch of one, 128 values of K per box
// row).  Scales, FP32 in global memory, sa(m, kb) = scale_a[m * sa_m + kb * sa_k] and
// SCALING = FP8_SCALE_OUTER: sb(n) = scale_b[n * sb_n], the K strides unused (a tensor's
//   scale: both strides 0);
// SCALING = FP8_SCALE_BLOCK: sb(nb, kb) = scale_b[nb * sb_n + kb * sb_k] for the
//   128 x 128 block (nb = n / 128, kb = k / 128), sa per row and K-block.
// PROMOTE: K-steps (128 values of K) between promotions, 0 for none (the wgmmas accumulate
// the whole K); block scales promote at every K-step whatever it says (the host passes 1).
// BN = 256 promotes every K-step or never (PROMOTE 1 or 0): promoting, it runs each K-step
// as two 64 x 128 wgmma groups, one per half of the tile's columns, each promoted as it
// completes (64 wgmma sums a thread beside the 128 promoted, where 128 + 128 would not fit).
template <int AT, int BT, int ODT, int BM, int BN, int STAGES, int CLUSTER, int SCALING, int PROMOTE, char OPA,
          char OPB>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
wgmma_fp8_gemm(int M, int N, int K, float alpha, const unsigned char* __restrict__ A, int lda,
               const unsigned char* __restrict__ B, int ldb, float beta, typename StorageOf<ODT>::type* __restrict__ C,
               int ldc, long long stride_a, long long stride_b, long long stride_c,
               const __grid_constant__ hopper::TensorMap map_a, const __grid_constant__ hopper::TensorMap map_b,
               const float* __restrict__ scale_a, long long sa_m, long long sa_k, const float* __restrict__ scale_b,
               long long sb_n, long long sb_k) {
    using namespace hopper;
    using O = typename StorageOf<ODT>::type;
    static_assert(OPA == 'N' && OPB == 'T', "FP8 wgmma reads K-major operands only: A stored M x K, B stored N x K");
    static_assert(BM % 64 == 0 && (BN == 64 || BN == 128 || BN == 256) && (CLUSTER == 1 || CLUSTER == 2),
                  "tile shape");
    static_assert(SCALING != FP8_SCALE_BLOCK || PROMOTE == 1, "block scales apply at every K-step's promotion");
    static_assert(BN != 256 || PROMOTE <= 1, "a 256-wide tile promotes every K-step or never");
    constexpr int BK = 128;                    // values of K per K-step: one 128-byte swizzle row
    constexpr int MMA_K = 32;                  // K of one FP8 wgmma
    static_assert(BK == FP8_SCALE_BLOCK_K, "a K-step is one block of the block scales");
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
    constexpr int CONSUMERS = BM / 64;
    constexpr bool PROMOTING = PROMOTE > 0;
    constexpr bool BLOCK = SCALING == FP8_SCALE_BLOCK;
    // The N of one wgmma group: the tile's, or half of it where a 256-wide tile promotes.
    constexpr int HALVES = (BN == 256 && PROMOTING) ? 2 : 1;
    constexpr int WN = BN / HALVES;
    static_assert(!BLOCK || WN == FP8_SCALE_BLOCK_K || FP8_SCALE_BLOCK_K % WN == 0,
                  "each wgmma group's columns lie in one 128-wide block of B's scales");
    constexpr int SB_SLOTS = 4;                // B's block scales a stage: one per half, padded
    (void)A; (void)lda; (void)B; (void)ldb; (void)stride_a; (void)stride_b; (void)stride_c;

    // Dynamic shared memory, aligned to the 1024-byte swizzle atom: STAGES tiles of A and of
    // B, each consumer warp's staging buffer for C, two barriers per stage, and per stage
    // the block scales of the tile's BM rows of A and of its (one or two) blocks of B.
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* a_tiles = smem;
    unsigned char* b_tiles = smem + STAGES * A_BYTES;
    unsigned char* epi = b_tiles + STAGES * B_BYTES;
    u64* full = reinterpret_cast<u64*>(epi + CONSUMERS * 4 * WGMMA_FP8_WARP_STAGE);
    u64* empty = full + STAGES;
    float* sa_ring = reinterpret_cast<float*>(empty + STAGES);   // [STAGES][BM]
    float* sb_ring = sa_ring + STAGES * BM;                      // [STAGES][SB_SLOTS]

    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const u32 rank = CLUSTER > 1 ? cluster_ctarank() : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            // The producer's TMA arrival, and with block scales warp 1's 32 copies' arrivals.
            mbar_init(&full[s], 1 + (BLOCK ? 32 : 0));
            mbar_init(&empty[s], CONSUMERS * 4 * CLUSTER);
        }
        mbar_fence_init();
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
    }
    if constexpr (CLUSTER > 1) cluster_sync(); else __syncthreads();

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int tiles_mc = (tiles_m + CLUSTER - 1) / CLUSTER;
    const int work = tiles_mc * tiles_n;
    const int first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;

    if (wg == 0) {
        setmaxnreg_dec<WGMMA_FP8_PRODUCER_REGS>();
        // Thread 0 issues the tiles' copies; with block scales, warp 1 copies each stage's
        // scales (cp.async, 4 bytes each), every lane's copies arriving on the stage's barrier
        // (two loops over the same stages: each stays within the producer's registers).
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = first; t < work; t += step) {
                int tmc, tn;
                grouped_tile(t, tiles_mc, tiles_n, tmc, tn);
                const int tm = tmc * CLUSTER + int(rank);
                for (int ks = 0; ks < k_steps; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
                    load_operand_tile<true, BM, BM, 1>(a_tiles + s * A_BYTES, &map_a, tm * BM, ks * BK, 0, &full[s], 0);
                    load_operand_tile<true, BN, BN / CLUSTER, CLUSTER>(b_tiles + s * B_BYTES, &map_b, tn * BN,
                                                                       ks * BK, 0, &full[s], rank);
                }
            }
        } else if (BLOCK && warp == 1) {
            int it = 0;
            const int nb_last = (N - 1) / FP8_SCALE_BLOCK_K;
            for (int t = first; t < work; t += step) {
                int tmc, tn;
                grouped_tile(t, tiles_mc, tiles_n, tmc, tn);
                const int tm = tmc * CLUSTER + int(rank);
                const int nb = min((tn * BN + lane * WN) / FP8_SCALE_BLOCK_K, nb_last);
                const float* sa_rows[BM / 32];   // the lane's rows of A's scales (past M: row M - 1,
#pragma unroll                                 // computed but never stored)
                for (int j = 0; j < BM / 32; ++j) sa_rows[j] = scale_a + min(tm * BM + lane + 32 * j, M - 1) * sa_m;
                const float* sb_col = scale_b + nb * sb_n;
                for (int ks = 0; ks < k_steps; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
#pragma unroll
                    for (int j = 0; j < BM / 32; ++j) cp_async_f32(sa_ring + s * BM + lane + 32 * j, sa_rows[j] + ks * sa_k);
                    if (lane < HALVES) cp_async_f32(sb_ring + s * SB_SLOTS + lane, sb_col + ks * sb_k);
                    cp_async_arrive_noinc(&full[s]);
                }
            }
        }
    } else {
        setmaxnreg_inc<WGMMA_FP8_CONSUMER_REGS>();
        const int c = wg - 1, wq = warp % 4, g = lane / 4, tq = lane % 4;
        const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<u64>(C) % (2 * sizeof(O)) == 0);
        unsigned char* stage_c = epi + (c * 4 + wq) * WGMMA_FP8_WARP_STAGE;
        constexpr int NACC = WN / 2, NTOTAL = BN / 2;
        float acc[NACC];                        // the wgmmas' sums (one half's, where HALVES = 2)
        float total[PROMOTING ? NTOTAL : 1];    // the promoted sums (PROMOTE > 0)
        const int row_in_tile = 64 * c + 16 * wq + g;   // the thread's first row in the tile
        int it = 0;
        for (int t = first; t < work; t += step) {
            int tmc, tn;
            grouped_tile(t, tiles_mc, tiles_n, tmc, tn);
            const int tm = tmc * CLUSTER + int(rank);
            const int m_warp = tm * BM + 64 * c + 16 * wq;   // the warp's 16 rows of C
            const int r0 = m_warp + g, r1 = r0 + 8;          // this thread's two rows
#pragma unroll
            for (int i = 0; i < NACC; ++i) acc[i] = 0.0f;
            if constexpr (PROMOTING) {
#pragma unroll
                for (int i = 0; i < NTOTAL; ++i) total[i] = 0.0f;
            }
            fence_operands(acc);
            int prev = -1;   // a stage whose wgmmas may still run, handed back once they are done
            for (int ks = 0; ks < k_steps; ++ks, ++it) {
                const int s = it % STAGES;
                mbar_wait(&full[s], (it / STAGES) & 1);
                // This K-block's factors (block scales), from the stage's scales, read before
                // the stage is handed back: f[h][0], f[h][1] for the thread's two rows.
                float f[HALVES][2];
#pragma unroll
                for (int h = 0; h < HALVES; ++h) f[h][0] = f[h][1] = 1.0f;
                if constexpr (BLOCK) {
                    const float s0 = sa_ring[s * BM + row_in_tile], s1 = sa_ring[s * BM + row_in_tile + 8];
#pragma unroll
                    for (int h = 0; h < HALVES; ++h) {
                        const float sb = sb_ring[s * SB_SLOTS + h];
                        f[h][0] = s0 * sb;
                        f[h][1] = s1 * sb;
                    }
                }
                const unsigned char* a = a_tiles + s * A_BYTES + c * (64 * 128);
                const unsigned char* b = b_tiles + s * B_BYTES;
                if constexpr (HALVES == 2) {
                    // A 256-wide tile that promotes: each half's group, completed and promoted
                    // before the next starts on the same registers.
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        wgmma_fence();
#pragma unroll
                        for (int kk = 0; kk < BK / MMA_K; ++kk)
                            WgmmaFp8<WN, AT, BT>::mma(acc, operand_desc<true>(a, kk),
                                                      operand_desc<true>(b + h * (WN * 128), kk), kk == 0 ? 0 : 1);
                        wgmma_commit();
                        wgmma_wait<0>();
                        fence_operands(acc);
                        if (h == 0) {
                            if (prev >= 0) release_stage<CLUSTER>(&empty[prev], lane);
                            prev = -1;
                            fp8_promote<0>(total, acc, f[0][0], f[0][1]);
                        } else {
                            release_stage<CLUSTER>(&empty[s], lane);
                            fp8_promote<NACC>(total, acc, f[HALVES - 1][0], f[HALVES - 1][1]);
                        }
                    }
                    continue;
                }
                // A promotion window's first wgmma overwrites the sums instead of adding (scale-d 0).
                const bool fresh = PROMOTING && ks % (PROMOTING ? PROMOTE : 1) == 0;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / MMA_K; ++kk)
                    WgmmaFp8<WN, AT, BT>::mma(acc, operand_desc<true>(a, kk), operand_desc<true>(b, kk),
                                              (kk == 0 && fresh) ? 0 : 1);
                wgmma_commit();
                const bool promote = PROMOTING && ((ks + 1) % (PROMOTING ? PROMOTE : 1) == 0 || ks + 1 == k_steps);
                if (promote) {
                    wgmma_wait<0>();
                    fence_operands(acc);
                    if (prev >= 0) release_stage<CLUSTER>(&empty[prev], lane);
                    release_stage<CLUSTER>(&empty[s], lane);
                    prev = -1;
                    if constexpr (PROMOTING) fp8_promote<0>(total, acc, f[0][0], f[0][1]);
                } else {
                    // As the wgmma rung: one group in flight, the stage before it handed back.
                    wgmma_wait<1>();
                    if (prev >= 0) release_stage<CLUSTER>(&empty[prev], lane);
                    prev = s;
                }
            }
            wgmma_wait<0>();
            fence_operands(acc);
            if (prev >= 0) release_stage<CLUSTER>(&empty[prev], lane);

            // The scales of an outer kind, then C through shared memory, each warp its own 16
            // rows (04_wgmma_store.cuh): any ldc, beta, bf16 or FP32.
            auto finish = [&](float(&sums)[NTOTAL]) {
                if constexpr (SCALING == FP8_SCALE_OUTER) {
                    const float sa0 = fp8_row_scale(scale_a, sa_m, 0, r0, 0, M);
                    const float sa1 = fp8_row_scale(scale_a, sa_m, 0, r1, 0, M);
                    fp8_scale_outer(sums, sa0, sa1, scale_b, sb_n, tn * BN, N, tq);
                }
                if (m_warp < M)
                    wgmma_store_staged<BN>(sums, stage_c, C, ldc, M, N, m_warp, tn * BN, alpha, beta, pairs,
                                           WGMMA_BIAS_NONE, static_cast<const O*>(nullptr), 0, 0, lane);
            };
            if constexpr (PROMOTING)
                finish(total);
            else
                finish(acc);
        }
    }
    // No block may leave while a peer can still arrive on its barriers.
    if constexpr (CLUSTER > 1) cluster_sync();
}

}  // namespace gemmlab
