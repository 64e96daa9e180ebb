// FP32-accurate rung 1, ec_wmma: an FP32 GEMM on FP16 or TF32 tensor cores with
// SGEMM's accuracy, by error correction.  Each FP32 value is split into a high and
// a low part as its fragment is loaded (EcSplit, ec/01_ec_wmma.cuh), and three
// tensor-core products replace one: A B ~ hi_A hi_B + (lo_A hi_B + hi_A lo_B) * 2^-11.
// The main product is summed outside the tensor core (whose own accumulation does
// not round to nearest) with FP32 adds, blocked so that the rounding error grows
// like K^(1/4).  Around that: CUDA-core rung 8's cp.async pipeline and tensor rung
// 2's warp tiling of 16 x 16 fragments.
#include <gemmlab/ec/01_ec_wmma.cuh>
#include <gemmlab/ec/choice.cuh>

namespace gemmlab {

// METHOD: METHOD_FP16_EC (m16n16k16 parts) or METHOD_TF32_EC (m16n16k8, no
// scaling).  scale_a, scale_b: powers of two applied to A and B before the split
// (the FP16 method's per-matrix scaling, 1 otherwise); the epilogue divides them
// out again, one at a time so that neither step overflows.  Operand layouts as
// every rung (layout.cuh): a column-major operand's tile is transposed by the
// copy (4-byte cp.async), so the split always reads row-major tiles.  choice:
// null, or the record of the method chosen on the GPU (precision="fp32_tc",
// ec/choice.cuh): both METHODs are launched, the one not chosen returns at once,
// and the scales are the record's.
template <int METHOD, int BM, int BN, int BK, int WM, int WN, int STAGES, bool VEC, char OPA, char OPB>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)
ec_wmma(int M, int N, int K, float alpha, const float* __restrict__ A, int lda, const float* __restrict__ B,
        int ldb, float beta, float* __restrict__ C, int ldc, long long stride_a, long long stride_b,
        long long stride_c, float scale_a, float scale_b, const long long* __restrict__ choice) {
    if (choice != nullptr) {   // the method chosen on the GPU
        if (!ec_chosen<METHOD>(choice)) return;
        if constexpr (METHOD == METHOD_FP16_EC) {   // TF32 parts are never scaled
            scale_a = ec_choice_scale(choice, CHOICE_SCALE_A);
            scale_b = ec_choice_scale(choice, CHOICE_SCALE_B);
        }
    }
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    using Split = EcSplit<METHOD>;
    constexpr int TK = tc_tile_k<Split::DT>();
    constexpr int FM = WM / 16, FN = WN / 16;              // fragments per warp
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int ALD = BK + 4, BLD = BN + 4;              // padded rows, still 16-byte aligned
    static_assert(BK % TK == 0, "BK must be a multiple of the MMA's K");
    extern __shared__ __align__(128) float smem[];
    float (*As)[BM][ALD] = reinterpret_cast<float (*)[BM][ALD]>(smem);                     // [STAGES]
    float (*Bs)[BK][BLD] = reinterpret_cast<float (*)[BK][BLD]>(smem + STAGES * BM * ALD);  // [STAGES]
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x, warp = tid / 32;
    const int warp_row = (warp / (BN / WN)) * WM, warp_col = (warp % (BN / WN)) * WN;

    using FragA = typename wmma_types::Fragment<USE_MATRIX_A, 16, 16, TK, Split::DT, LAYOUT_ROW>::type;
    using FragB = typename wmma_types::Fragment<USE_MATRIX_B, 16, 16, TK, Split::DT, LAYOUT_ROW>::type;
    using FragC = typename wmma_types::Fragment<USE_ACCUMULATOR, 16, 16, TK, TYPE_FLOAT32, LAYOUT_ROW>::type;
    // The main product outside the tensor core (acc, fed by block), the corrections inside.
    FragC acc[FM][FN], block[FM][FN], corr[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
            nvcuda::wmma::fill_fragment(block[i][j], 0.0f);
            nvcuda::wmma::fill_fragment(corr[i][j], 0.0f);
        }

    const int k_tiles = alpha == 0.0f ? 0 : (K + BK - 1) / BK;   // alpha = 0 reads neither A nor B
    // Each K-step's main product goes into a zeroed fragment and is added to a block
    // accumulator with round-to-nearest FP32 adds; after about sqrt(steps) K-steps
    // the block is added into acc and cleared, so the rounding error grows like
    // K^(1/4) instead of K^(1/2) (one accumulator alone grows past SGEMM's error at
    // large K: benchmarks/NOTES.md).  The two correction products accumulate inside
    // the tensor core, where their error is 2^-11 smaller.
    const int block_tiles = max(1, int(sqrtf(float(k_tiles * (BK / TK)))) / (BK / TK));   // ~sqrt(steps) steps
    auto issue = [&](int kt) {
        const int s = kt % STAGES;
        if constexpr (OPA == 'N')
            cp_async_tile<BM, BK, ALD, THREADS, VEC>(&As[s][0][0], A, lda, tile.row, kt * BK, M, K, tid);
        else   // stored K x M: transposed by the copy into As[m][k]
            cp_async_tile_transposed<BK, BM, ALD, THREADS>(&As[s][0][0], A, lda, kt * BK, tile.row, K, M, tid);
        if constexpr (OPB == 'N')
            cp_async_tile<BK, BN, BLD, THREADS, VEC>(&Bs[s][0][0], B, ldb, kt * BK, tile.col, K, N, tid);
        else   // stored N x K: transposed by the copy into Bs[k][n]
            cp_async_tile_transposed<BN, BK, BLD, THREADS>(&Bs[s][0][0], B, ldb, tile.col, kt * BK, N, K, tid);
    };
#pragma unroll
    for (int kt = 0; kt < STAGES - 1; ++kt) {   // prologue: STAGES-1 steps in flight (see rung 8)
        if (kt < k_tiles) issue(kt);
        __pipeline_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        __pipeline_wait_prior(STAGES - 2);
        __syncthreads();
        if (kt + STAGES - 1 < k_tiles) issue(kt + STAGES - 1);
        __pipeline_commit();
        const int s = kt % STAGES;
#pragma unroll
        for (int kk = 0; kk < BK; kk += TK) {
            FragA a_hi[FM], a_lo[FM];
#pragma unroll
            for (int i = 0; i < FM; ++i) load_split<METHOD>(a_hi[i], a_lo[i], &As[s][warp_row + 16 * i][kk], ALD, scale_a);
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                FragB b_hi, b_lo;
                load_split<METHOD>(b_hi, b_lo, &Bs[s][kk][warp_col + 16 * j], BLD, scale_b);
#pragma unroll
                for (int i = 0; i < FM; ++i) {
                    FragC step;
                    nvcuda::wmma::fill_fragment(step, 0.0f);
                    nvcuda::wmma::mma_sync(step, a_hi[i], b_hi, step);
#pragma unroll
                    for (int e = 0; e < step.num_elements; ++e) block[i][j].x[e] += step.x[e];
                    nvcuda::wmma::mma_sync(corr[i][j], a_lo[i], b_hi, corr[i][j]);
                    nvcuda::wmma::mma_sync(corr[i][j], a_hi[i], b_lo, corr[i][j]);
                }
            }
        }
        if ((kt + 1) % block_tiles == 0 || kt + 1 == k_tiles) {
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
#pragma unroll
                    for (int e = 0; e < acc[i][j].num_elements; ++e) {
                        acc[i][j].x[e] += block[i][j].x[e];
                        block[i][j].x[e] = 0.0f;
                    }
        }
    }
    __pipeline_wait_prior(0);
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
#pragma unroll
            for (int e = 0; e < acc[i][j].num_elements; ++e) {
                // A non-finite main product is already IEEE's answer (Inf, or NaN from
                // Inf * 0); its corrections could only add a spurious NaN (Inf * 0 with lo = 0).
                const float v = acc[i][j].x[e];
                acc[i][j].x[e] = (isfinite(v) ? v + corr[i][j].x[e] * Split::LO_WEIGHT : v) / scale_a / scale_b;
            }
            store_accumulator_masked(acc[i][j], C, ldc, tile.row + warp_row + 16 * i, tile.col + warp_col + 16 * j,
                                     M, N, alpha, beta);
        }
}

}  // namespace gemmlab
