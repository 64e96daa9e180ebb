// Tensor-core rung 7, grouped_wgrad (Hopper, sm_90a only): the weights' gradient of a
// mixture-of-experts layer in one launch, C_g = X_g^T @ Y_g for each group g of rows of two
// (T, P) and (T, Q) matrices (X the layer's input and Y the gradient of its output, or the
// other way round for a transposed weight).  Rung 6's pipeline and epilogue; what changes:
// a group's rows are now the sum's K, so a group's K-steps are its own (ceil(rows / 64)), the
// work items are every group's P x Q tiles (an empty group's tiles store zeros and read
// nothing), both operands are MN-major (read through the wgmma's transpose bits), and the
// last K-step of a group zeroes its rows past the group's end in shared memory before any
// wgmma reads them: TMA read the next group's rows there, which must not enter the sum.
// Details: docs/tensor/07-grouped-wgrad.md.
#include <gemmlab/tensor/04_wgmma.cuh>
#include <gemmlab/tensor/06_grouped.cuh>

namespace gemmlab {

constexpr int GROUPED_WGRAD_PRODUCER_REGS = 40;    // setmaxnreg: producer warpgroup
constexpr int GROUPED_WGRAD_CONSUMER_REGS = 232;   // setmaxnreg: each consumer warpgroup
// A consumer warp's shared memory for C's staged stores: one chunk of 16 rows of C's type.
constexpr int GROUPED_WGRAD_WARP_STAGE = 2304;
static_assert(StagedChunk<__half>::BYTES <= GROUPED_WGRAD_WARP_STAGE, "a warp's staged chunk fits in its share");

// Zero the rows [valid, 64) of each of a tile's BOXES boxes of 64 rows x 128 bytes (an
// MN-major tile: a row is one value of the sum's K, whole whatever the swizzle), 16 bytes a
// store, spread over `threads` threads (this one `t`).
template <int BOXES>
__device__ __forceinline__ void zero_rows_past(unsigned char* tile, int valid, int t, int threads) {
    const int per_box = (64 - valid) * 8;   // 16-byte chunks past `valid` in a box
    for (int i = t; i < BOXES * per_box; i += threads) {
        const int box = i / per_box, j = i % per_box;
        *reinterpret_cast<uint4*>(tile + box * (64 * 128) + valid * 128 + j * 16) = make_uint4(0, 0, 0, 0);
    }
}

// C[g] = X[offs[g-1]:offs[g]]^T @ Y[offs[g-1]:offs[g]] for every group g < G: C is G matrices
// of P x Q, row-major, rows ldc and matrices stride_c elements apart.  X (T x P, row-major) is
// op(A) = X_g^T stored K x M ('T'); Y (T x Q, row-major) is op(B) stored K x N ('N'): both
// MN-major, read only through their maps (2-D in 3-D form, boxes of 64 rows x 64 columns).
// DT: TYPE_FLOAT16 or TYPE_BFLOAT16, X, Y and C alike.  offs: as rung 6's (06_grouped.cuh).
template <int DT, int BM, int BN, int STAGES, char OPA, char OPB>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
grouped_wgrad_gemm(int T, int P, int Q, int G, const int* __restrict__ offs,
                   typename wmma_types::Storage<DT>::type* __restrict__ C, int ldc, long long stride_c,
                   const __grid_constant__ hopper::TensorMap map_x, const __grid_constant__ hopper::TensorMap map_y) {
    using namespace hopper;
    using O = typename wmma_types::Storage<DT>::type;
    static_assert(DT == TYPE_FLOAT16 || DT == TYPE_BFLOAT16, "16-bit inputs");
    static_assert(OPA == 'T' && OPB == 'N', "X and Y are row-major (T rows): X_g^T and Y_g are MN-major");
    static_assert(BM % 64 == 0 && (BN == 128 || BN == 256), "tile shape");
    constexpr int BK = 64;                      // rows of X and Y per K-step: one 128-byte swizzle row each
    constexpr int MMA_K = 16;
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
    constexpr int CONSUMERS = BM / 64;
    constexpr int MASK_BAR = 1;                 // named barrier of the consumers' zeroing

    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* a_tiles = smem;
    unsigned char* b_tiles = smem + STAGES * A_BYTES;
    unsigned char* epi = b_tiles + STAGES * B_BYTES;
    u64* full = reinterpret_cast<u64*>(epi + CONSUMERS * 4 * GROUPED_WGRAD_WARP_STAGE);
    u64* empty = full + STAGES;

    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], CONSUMERS * 4);
        }
        mbar_fence_init();
        tma_prefetch_map(&map_x);
        tma_prefetch_map(&map_y);
    }
    __syncthreads();

    // Every group has the same P x Q tiles: items are (group, tile), group-major.
    const int tiles_m = (P + BM - 1) / BM, tiles_n = (Q + BN - 1) / BN;
    const int per_group = tiles_m * tiles_n;
    const int work = G * per_group;

    if (wg == 0) {
        setmaxnreg_dec<GROUPED_WGRAD_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < work; t += gridDim.x) {
                const int g = t / per_group;
                int tm, tn, start, end;
                grouped_tile(t - g * per_group, tiles_m, tiles_n, tm, tn);
                group_rows(offs, g, T, start, end);
                const int k_steps = (end - start + BK - 1) / BK;
                for (int ks = 0; ks < k_steps; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
                    // BM (BN) columns of X (Y) from column tm * BM (tn * BN), 64 rows from the
                    // group's start + ks * 64: the last step's rows may run into the next group.
                    load_operand_tile<false, BM, 64, 1>(a_tiles + s * A_BYTES, &map_x, tm * BM, start + ks * BK, 0,
                                                        &full[s], 0);
                    load_operand_tile<false, BN, 64, 1>(b_tiles + s * B_BYTES, &map_y, tn * BN, start + ks * BK, 0,
                                                        &full[s], 0);
                }
            }
        }
    } else {
        setmaxnreg_inc<GROUPED_WGRAD_CONSUMER_REGS>();
        const int c = wg - 1, wq = warp % 4;
        const int tc = threadIdx.x - 128;       // this thread among all the consumers' threads
        const bool pairs = (ldc % 2 == 0) && (stride_c % 2 == 0) && (reinterpret_cast<u64>(C) % (2 * sizeof(O)) == 0);
        unsigned char* stage_c = epi + (c * 4 + wq) * GROUPED_WGRAD_WARP_STAGE;
        float acc[BN / 2];
        int it = 0;
        for (int t = blockIdx.x; t < work; t += gridDim.x) {
            const int g = t / per_group;
            int tm, tn, start, end;
            grouped_tile(t - g * per_group, tiles_m, tiles_n, tm, tn);
            group_rows(offs, g, T, start, end);
            const int k_steps = (end - start + BK - 1) / BK;
            const int valid = end - start - (k_steps - 1) * BK;   // rows of the group in its last K-step
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
            fence_operands(acc);
            int prev = 0;
            for (int ks = 0; ks < k_steps; ++ks, ++it) {
                const int s = it % STAGES;
                mbar_wait(&full[s], (it / STAGES) & 1);
                unsigned char* a_all = a_tiles + s * A_BYTES;
                unsigned char* b_all = b_tiles + s * B_BYTES;
                if (ks == k_steps - 1 && valid < BK) {
                    // The next group's rows out of the sum: every consumer thread zeroes a share of
                    // both tiles, the writes are made visible to the wgmmas (async proxy), and the
                    // consumers meet before any of them reads the stage.
                    zero_rows_past<BM / 64>(a_all, valid, tc, CONSUMERS * 128);
                    zero_rows_past<BN / 64>(b_all, valid, tc, CONSUMERS * 128);
                    fence_proxy_async_smem();
                    named_barrier_sync(MASK_BAR, CONSUMERS * 128);
                }
                const unsigned char* a = a_all + c * (64 * 128);   // this consumer's 64-column box of X
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / MMA_K; ++kk)
                    Wgmma<BN, DT>::template mma<1, 1>(acc, operand_desc<false>(a, kk), operand_desc<false>(b_all, kk),
                                                      1);
                wgmma_commit();
                wgmma_wait<1>();
                if (ks > 0) release_stage<1>(&empty[prev], lane);
                prev = s;
            }
            wgmma_wait<0>();
            fence_operands(acc);
            if (k_steps > 0) release_stage<1>(&empty[prev], lane);

            // C_g through shared memory, each warp its own 16 rows (rows past P not stored); an
            // empty group stores its zeros.
            const int m_warp = tm * BM + 64 * c + 16 * wq;
            if (m_warp < P)
                wgmma_staged_epilogue<O, BN>(acc, stage_c, C + g * stride_c, ldc, P, Q, m_warp, tn * BN, 1.0f, 0.0f,
                                             pairs, WGMMA_BIAS_NONE, static_cast<const O*>(nullptr), 0, 0, lane);
        }
    }
}

}  // namespace gemmlab
