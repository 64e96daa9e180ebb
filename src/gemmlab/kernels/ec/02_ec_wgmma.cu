// FP32-accurate rung 2, ec_wgmma (Hopper, sm_90a only): ec_wmma's arithmetic
// on the machinery of tensor rung 4 (wgmma, TMA, warp specialisation, a
// persistent grid; read tensor/04_wgmma.cu first).
//
//     A B ~ hi_A hi_B + (lo_A hi_B + hi_A lo_B) * 2^-11        (FP16 parts)
//     A B ~ big_A big_B + small_A big_B + big_A small_B           (TF32 parts)
//
// What changes from ec_wmma:
//  * The split happens once, before the GEMM (ec/split_pack.cu writes the two
//    parts of op(A), and of op(B)^T, into workspaces).  wgmma reads its
//    operands from shared memory as TMA left them, so a split at load time
//    would cost the consumers a pass over every tile through registers they do
//    not have to spare (below).  The parts are K-major and TMA-aligned, so this
//    kernel takes every layout and alignment the same way, and FP16 and TF32
//    parts the same way (TF32 wgmma has no transpose; B^T needs none).
//  * A stage of the ring holds four tiles: hi and lo of A (128 rows x 128
//    bytes of K each), hi and lo of B^T (96 rows); the producer's one thread
//    asks TMA for all four.
//  * Each consumer warpgroup (64 rows x 96 columns of C) keeps four sets of 48
//    accumulators a thread:
//      hh    the main product of one stage (64 of K for FP16, 32 for TF32),
//            computed by wgmma from zero (scale-d = 0);
//      block hh added with round-to-nearest FP32 adds, stage after stage;
//      acc   block added every ~sqrt(stages) stages, then block cleared, so the
//            rounding error grows like K^(1/4) (ec_wmma's blocking);
//      corr  the two correction products, accumulated inside the tensor core
//            over all of K (2^-11 smaller, so their truncation does not show).
//    Four sets are why the tile is 128 x 96 and not 128 x 256: 192 of a
//    consumer's 232 registers.
//  * The adds overlap the tensor cores: a stage's main product and its
//    corrections are committed as two groups; the consumer waits for the first
//    only, and adds it while the corrections (and the other consumer's work)
//    keep the tensor cores busy.
//
// Accuracy (benchmarks/NOTES.md, run 49): with one accumulator and an add per
// stage the error grew like sqrt(K/64), to cuBLAS SGEMM's level at K = 131072
// on U(-1,1) but 2.8x SGEMM's on log-uniform inputs (TF32 parts, an add per 32
// of K); blocked as above it stays below SGEMM's.
//
// scale_a, scale_b: the powers of two the pre-pass multiplied A and B by (the
// scaled FP16 method; 1 otherwise); the epilogue divides them out one at a time.
// The layouts OPA, OPB are the pre-pass's business: the registry instantiates
// this kernel for 'N', 'N' only (KernelSpec.packed).
#include <gemmlab/ec_split.cuh>
#include <gemmlab/hopper_gemm.cuh>

namespace gemmlab {

constexpr int EC_WGMMA_PRODUCER_REGS = 40;    // setmaxnreg, as in the wgmma rung
constexpr int EC_WGMMA_CONSUMER_REGS = 232;

template <int METHOD, int STAGES, char OPA, char OPB>
__global__ void __launch_bounds__(384, 1)
ec_wgmma(int M, int N, int K, float alpha, const float* __restrict__ A, int lda, const float* __restrict__ B, int ldb,
         float beta, float* __restrict__ C, int ldc, const __grid_constant__ hopper::TensorMap map_a_hi,
         const __grid_constant__ hopper::TensorMap map_a_lo, const __grid_constant__ hopper::TensorMap map_b_hi,
         const __grid_constant__ hopper::TensorMap map_b_lo, float scale_a, float scale_b) {
    using namespace hopper;
    using Split = EcSplit<METHOD>;
    constexpr int DT = Split::DT;                 // the parts: 0 FP16, 2 TF32
    constexpr int BM = 128, BN = 96;              // two consumer warpgroups of 64 x 96
    constexpr int BK = DT == 2 ? 32 : 64;         // one 128-byte swizzle row of K per stage
    constexpr int MMA_K = DT == 2 ? 8 : 16;
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;   // 128 bytes of K a row
    constexpr int STAGE_BYTES = 2 * (A_BYTES + B_BYTES);   // hi and lo of A, hi and lo of B^T
    (void)A; (void)lda; (void)B; (void)ldb;       // read through the maps of their parts

    extern __shared__ unsigned char smem_raw[];
    unsigned char* ring = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);   // swizzle atoms: 1024 B
    u64* full = reinterpret_cast<u64*>(ring + STAGES * STAGE_BYTES);
    u64* empty = full + STAGES;

    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2 * 4);   // each warp of the two consumers
        }
        mbar_fence_init();
        tma_prefetch_map(&map_a_hi);
        tma_prefetch_map(&map_a_lo);
        tma_prefetch_map(&map_b_hi);
        tma_prefetch_map(&map_b_lo);
    }
    __syncthreads();

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;

    if (wg == 0) {
        setmaxnreg_dec<EC_WGMMA_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < tiles_m * tiles_n; t += gridDim.x) {
                int tm, tn;
                grouped_tile(t, tiles_m, tiles_n, tm, tn);
                for (int ks = 0; ks < k_steps; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
                    unsigned char* st = ring + s * STAGE_BYTES;
                    tma_load_2d(st, &map_a_hi, ks * BK, tm * BM, &full[s]);
                    tma_load_2d(st + A_BYTES, &map_a_lo, ks * BK, tm * BM, &full[s]);
                    tma_load_2d(st + 2 * A_BYTES, &map_b_hi, ks * BK, tn * BN, &full[s]);   // B^T: BN rows
                    tma_load_2d(st + 2 * A_BYTES + B_BYTES, &map_b_lo, ks * BK, tn * BN, &full[s]);
                }
            }
        }
        return;
    }

    setmaxnreg_inc<EC_WGMMA_CONSUMER_REGS>();
    const int c = wg - 1, wq = warp % 4;
    const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<u64>(C) % 8 == 0);
    // Both operands K-major: the next MMA_K-deep slice starts 32 bytes further
    // along the (swizzled) 128-byte rows; the hardware applies the swizzle.
    auto desc = [](const unsigned char* tile, int kk) { return make_smem_desc(tile + 32 * kk, 16, 1024); };
    using Mma = Wgmma<BN, DT>;
    // Stages per block of the main product's adds: about sqrt(stages).
    const int block_steps = max(1, int(sqrtf(float(k_steps))));
    float acc[BN / 2], block[BN / 2], hh[BN / 2], corr[BN / 2];
    int it = 0;
    for (int t = blockIdx.x; t < tiles_m * tiles_n; t += gridDim.x) {
        int tm, tn;
        grouped_tile(t, tiles_m, tiles_n, tm, tn);
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = block[i] = corr[i] = 0.0f;
        fence_operands(corr);
        int prev = 0;
        for (int ks = 0; ks < k_steps; ++ks, ++it) {
            const int s = it % STAGES;
            mbar_wait(&full[s], (it / STAGES) & 1);
            const unsigned char* a_hi = ring + s * STAGE_BYTES + c * (64 * 128);
            const unsigned char* a_lo = a_hi + A_BYTES;
            const unsigned char* b_hi = ring + s * STAGE_BYTES + 2 * A_BYTES;
            const unsigned char* b_lo = b_hi + B_BYTES;
            wgmma_fence();   // hh was read by the adds below: order them before wgmma rewrites it
#pragma unroll
            for (int kk = 0; kk < BK / MMA_K; ++kk)   // the main product of this stage, from zero
                Mma::template mma<0, 0>(hh, desc(a_hi, kk), desc(b_hi, kk), kk > 0);
            wgmma_commit();
#pragma unroll
            for (int kk = 0; kk < BK / MMA_K; ++kk) {   // the corrections, accumulated in the tensor core
                Mma::template mma<0, 0>(corr, desc(a_lo, kk), desc(b_hi, kk), 1);
                Mma::template mma<0, 0>(corr, desc(a_hi, kk), desc(b_lo, kk), 1);
            }
            wgmma_commit();
            // The main product is done (and the previous stage's corrections, so
            // that stage goes back to the producer); this stage's corrections run
            // on while the main product is added in FP32, rounding to nearest.
            wgmma_wait<1>();
            fence_operands(hh);
            if (ks > 0) release_stage<1>(&empty[prev], lane);
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) block[i] += hh[i];
            if ((ks + 1) % block_steps == 0 || ks + 1 == k_steps) {
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) {
                    acc[i] += block[i];
                    block[i] = 0.0f;
                }
            }
            prev = s;
        }
        wgmma_wait<0>();
        fence_operands(corr);
        if (k_steps > 0) release_stage<1>(&empty[prev], lane);

        // Epilogue: acc + corr * 2^-11 (a non-finite main product is already IEEE's
        // answer; its corrections could only add a NaN from Inf * 0), the scales
        // divided out, then alpha and beta (layout of the accumulators: hopper.cuh).
        const float unscale_a = 1.0f / scale_a, unscale_b = 1.0f / scale_b;   // exact: powers of two
        const int row0 = tm * BM + c * 64 + wq * 16 + lane / 4;
        const int col0 = tn * BN + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float v[2];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float a = acc[4 * j + 2 * h + e];
                    v[e] = (isfinite(a) ? a + corr[4 * j + 2 * h + e] * Split::LO_WEIGHT : a) * unscale_a * unscale_b;
                }
                store_pair(C, ldc, row0 + 8 * h, col0 + 8 * j, M, N, v[0], v[1], alpha, beta, pairs);
            }
        }
    }
}

}  // namespace gemmlab
