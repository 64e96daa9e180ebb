// Tensor-core rung 6, grouped (Hopper, sm_90a only): one launch for a mixture-of-experts
// layer's G products C_g = A_g @ B_g, A_g consecutive groups of rows of one (T, K) matrix
// (the router's sorted tokens), B a stack of G weights.  The wgmma rung's TMA ring,
// mbarriers and warpgroups as they are (tensor/04_wgmma.cuh); what changes: every block
// counts the work items (group, tile-row, tile-column) from the offsets on the GPU
// (tensor/06_grouped.cuh), so the host never waits to read them and an empty group has no
// items; A's map covers all T rows (a tile's rows past its group's end are read, never
// stored) and B's is 3-D, the group outermost; C goes through shared memory, masked at the
// group's end, where TMA could clip only at C's end; a consumer whose 64 rows lie wholly
// past its group's end waits for each stage and hands it back without a wgmma.
// Details: docs/tensor/06-grouped.md.
#include <gemmlab/tensor/04_wgmma.cuh>
#include <gemmlab/tensor/06_grouped.cuh>

namespace gemmlab {

constexpr int GROUPED_PRODUCER_REGS = 40;    // setmaxnreg: producer warpgroup
constexpr int GROUPED_CONSUMER_REGS = 232;   // setmaxnreg: each consumer warpgroup
// A consumer warp's shared memory for C's staged stores: one chunk of 16 rows of C's type.
constexpr int GROUPED_WARP_STAGE = 2304;
static_assert(StagedChunk<__half>::BYTES <= GROUPED_WARP_STAGE, "a warp's staged chunk fits in its share");

// C[offs[g-1]:offs[g]] = A[offs[g-1]:offs[g]] @ B_g for every group g < G, C row-major (T, N)
// with rows ldc apart; rows in no group are not written.  DT: TYPE_FLOAT16 or
// TYPE_BFLOAT16, A, B and C alike.  OPA = 'N' (A stored T x K, row-major); OPB = 'N' (B
// stored G x K x N, each B_g row-major K x N: MN-major, read through the wgmma's transpose
// bit) or 'T' (B stored G x N x K, B_g = W_g^T of a row-major N x K weight: K-major).  A and
// B are read only through their maps (kernels/tensor/grouped.py): A 2-D in boxes of BM rows
// x 64 K, B 3-D (G outermost) in boxes of BN rows x 64 K ('T') or 64 x 64 ('N').  offs: G
// int32 cumulative ends on the GPU (06_grouped.cuh clamps them into [0, T]).
template <int DT, int BM, int BN, int STAGES, char OPA, char OPB>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
grouped_gemm(int T, int N, int K, int G, const int* __restrict__ offs,
             typename wmma_types::Storage<DT>::type* __restrict__ C, int ldc,
             const __grid_constant__ hopper::TensorMap map_a, const __grid_constant__ hopper::TensorMap map_b) {
    using namespace hopper;
    using O = typename wmma_types::Storage<DT>::type;
    static_assert(DT == TYPE_FLOAT16 || DT == TYPE_BFLOAT16, "16-bit inputs");
    static_assert(OPA == 'N', "A is the router's (T, K) rows, row-major");
    static_assert(BM % 64 == 0 && (BN == 128 || BN == 256), "tile shape");
    constexpr int BK = 64;                      // values of K per K-step: one 128-byte swizzle row
    constexpr int MMA_K = 16;                   // K of one 16-bit wgmma
    constexpr bool B_KMAJOR = OPB == 'T';
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
    constexpr int B_BOX = B_KMAJOR ? BN : 64;   // rows of N per TMA box of B (04_wgmma.cuh)
    constexpr int CONSUMERS = BM / 64;

    // Dynamic shared memory, aligned to the 1024-byte swizzle atom: STAGES tiles of A and of
    // B, each consumer warp's staging buffer for C, two barriers per stage, the work list.
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* a_tiles = smem;
    unsigned char* b_tiles = smem + STAGES * A_BYTES;
    unsigned char* epi = b_tiles + STAGES * B_BYTES;
    u64* full = reinterpret_cast<u64*>(epi + CONSUMERS * 4 * GROUPED_WARP_STAGE);
    u64* empty = full + STAGES;
    int* item_end = reinterpret_cast<int*>(empty + STAGES);   // [G]: 06_grouped.cuh

    const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles_n = (N + BN - 1) / BN;
    if (warp == 0) {
        // The work list: each group's items, summed 32 groups at a time by a warp's scan.
        int carry = 0;
        for (int g0 = 0; g0 < G; g0 += 32) {
            const int g = g0 + lane;
            int n = 0;
            if (g < G) {
                int start, end;
                group_rows(offs, g, T, start, end);
                n = group_items(end - start, BM, tiles_n);
            }
#pragma unroll
            for (int d = 1; d < 32; d *= 2) {
                const int v = __shfl_up_sync(0xffffffffu, n, d);
                if (lane >= d) n += v;
            }
            if (g < G) item_end[g] = carry + n;
            carry += __shfl_sync(0xffffffffu, n, 31);
        }
        if (lane == 0) {
            for (int s = 0; s < STAGES; ++s) {
                mbar_init(&full[s], 1);                   // the producer's arrive (+ the bytes)
                mbar_init(&empty[s], CONSUMERS * 4);      // each consumer warp
            }
            mbar_fence_init();
            tma_prefetch_map(&map_a);
            tma_prefetch_map(&map_b);
        }
    }
    __syncthreads();

    const int work = G > 0 ? item_end[G - 1] : 0;
    const int k_steps = (K + BK - 1) / BK;

    if (wg == 0) {
        setmaxnreg_dec<GROUPED_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            // One thread walks the same items as the consumers and keeps the ring full.
            int it = 0, g = 0;
            for (int t = blockIdx.x; t < work; t += gridDim.x) {
                const GroupedItem w = grouped_item(t, item_end, G, offs, T, BM, tiles_n, g);
                g = w.g;
                for (int ks = 0; ks < k_steps; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
                    // A from the group's row start + tm * BM of the whole matrix (z 0 of a
                    // batch of one); B_g at batch coordinate g.
                    load_operand_tile<true, BM, BM, 1>(a_tiles + s * A_BYTES, &map_a, w.start + w.tm * BM, ks * BK, 0,
                                                       &full[s], 0);
                    load_operand_tile<B_KMAJOR, BN, B_BOX, 1>(b_tiles + s * B_BYTES, &map_b, w.tn * BN, ks * BK, w.g,
                                                              &full[s], 0);
                }
            }
        }
    } else {
        setmaxnreg_inc<GROUPED_CONSUMER_REGS>();
        const int c = wg - 1, wq = warp % 4;
        // 4-byte paired stores need an even ldc and a C aligned to two elements.
        const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<u64>(C) % (2 * sizeof(O)) == 0);
        unsigned char* stage_c = epi + (c * 4 + wq) * GROUPED_WARP_STAGE;
        float acc[BN / 2];
        int it = 0, g = 0;
        for (int t = blockIdx.x; t < work; t += gridDim.x) {
            const GroupedItem w = grouped_item(t, item_end, G, offs, T, BM, tiles_n, g);
            g = w.g;
            // This consumer's 64 rows of the tile, relative to the group's first row: past
            // the group's end (a group of fewer than BM - 64 rows) nothing of them is stored.
            const int m_c = w.tm * BM + 64 * c;
            const bool live = m_c < w.rows;
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
            fence_operands(acc);
            int prev = 0;
            for (int ks = 0; ks < k_steps; ++ks, ++it) {
                const int s = it % STAGES;
                mbar_wait(&full[s], (it / STAGES) & 1);
                if (!live) {   // the whole warpgroup alike: hand the stage straight back
                    release_stage<1>(&empty[s], lane);
                    continue;
                }
                const unsigned char* a = a_tiles + s * A_BYTES + c * (64 * 128);
                const unsigned char* b = b_tiles + s * B_BYTES;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / MMA_K; ++kk)
                    Wgmma<BN, DT>::template mma<0, B_KMAJOR ? 0 : 1>(acc, operand_desc<true>(a, kk),
                                                                     operand_desc<B_KMAJOR>(b, kk), 1);
                wgmma_commit();
                // As the wgmma rung: one group in flight, the stage before it handed back.
                wgmma_wait<1>();
                if (ks > 0) release_stage<1>(&empty[prev], lane);
                prev = s;
            }
            // Waited for outside any branch: ptxas serialises every wgmma of a kernel whose
            // wait it finds on a path only some threads may take (warning C7518).
            wgmma_wait<0>();
            fence_operands(acc);
            if (!live) continue;
            if (k_steps > 0) release_stage<1>(&empty[prev], lane);

            // C through shared memory, each warp its own 16 rows, masked at the group's end:
            // C_g starts at the group's first row, and its "M" is the group's rows.
            const int m_warp = m_c + 16 * wq;
            if (m_warp < w.rows)
                wgmma_staged_epilogue<O, BN>(acc, stage_c, C + (long long)w.start * ldc, ldc, w.rows, N, m_warp,
                                             w.tn * BN, 1.0f, 0.0f, pairs, WGMMA_BIAS_NONE,
                                             static_cast<const O*>(nullptr), 0, 0, lane);
        }
    }
}

}  // namespace gemmlab
