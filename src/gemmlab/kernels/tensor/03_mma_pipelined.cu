// Tensor-core rung 3, mma_pipelined: rung 2's block and warp tiling with the
// tensor cores driven by mma.sync as inline PTX instead of WMMA, fed the way fast
// Ampere GEMMs do (tensor/03_mma_pipelined.cuh, mma_sync.cuh): fragments loaded
// with ldmatrix from shared memory swizzled by 16-byte chunks (no bank
// conflicts, no padding), a STAGES-deep cp.async pipeline as in CUDA-core rung
// 8, fragments of the next K-step loaded during this one's MMAs, 64 x 64 warp
// tiles, TF32 rounding in registers between MMAs, an epilogue through shared
// memory, and blocks in grouped order for L2.  Details: docs/tensor/03-mma-pipelined.md.
#include <gemmlab/tensor/03_mma_pipelined.cuh>

namespace gemmlab {

// OPA, OPB: the operand layouts every rung's template ends with (layout.cuh).
// 16-bit operands in every layout, as stored: a tile is copied with its rows as
// they lie in memory (A 'N': M rows of K; 'T': K rows of M; B 'N': K rows of N;
// 'T': N rows of K), and the ldmatrix that hands out the fragments is the plain
// one where K runs along the stored rows (A 'N', B 'T') and .trans where it runs
// down them (A 'T', B 'N').  TF32 has no 32-bit transpose: row-major A and B
// only (the registry falls back for the others).  GROUP_M: tile-rows
// per group of the block order (tile_order.cuh); the registry does not pass it
// (8; benchmarks/NOTES.md compares 1, 4, 8, 16, named in the instantiation).
// BK counts bytes, not elements: a stage holds 2*BK bytes of each row of A, so a
// configuration takes the same shared memory for every type.  VEC: 16-byte
// cp.async and stores of C (aligned operands); else 4-byte cp.async per float,
// or ordinary 16-bit loads, and element-wise stores.  Edges: the copies
// zero-fill outside the matrix; the epilogue skips outputs outside M x N.
template <int DT, int ODT, int BM, int BN, int BK, int WM, int WN, int STAGES, bool VEC, char OPA, char OPB,
          int GROUP_M = 8>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)
mma_pipelined(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A,
              int lda, const typename wmma_types::Storage<DT>::type* __restrict__ B, int ldb, float beta,
              typename wmma_types::Storage<ODT>::type* __restrict__ C, int ldc, long long stride_a,
              long long stride_b, long long stride_c) {
    constexpr bool A_T = OPA == 'T', B_T = OPB == 'T';   // stored K x M / N x K
    static_assert(DT != TYPE_TF32 || (!A_T && !B_T), "TF32 reads row-major A and B only");
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    using S = typename wmma_types::Storage<DT>::type;
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int E = int(sizeof(S));
    constexpr int KT = 2 * BK / E;                        // K per stage: BK 16-bit elements or BK/2 floats
    constexpr int KSTEPS = KT / mma::k_per_mma<DT>();     // MMAs along K per stage (BK / 16)
    // 16-byte chunks per tile row: a row of K is 2*BK bytes, a row of M or N BM*E or BN*E.
    constexpr int A_CPR = A_T ? BM * E / 16 : 2 * BK / 16, B_CPR = B_T ? 2 * BK / 16 : BN * E / 16;
    constexpr int A_ROW = 16 * A_CPR, B_ROW = 16 * B_CPR;     // bytes per tile row
    constexpr int A_BYTES = (A_T ? KT : BM) * A_ROW, B_BYTES = (B_T ? BN : KT) * B_ROW;  // one stage of each
    constexpr int FM = WM / 16, FN = WN / 8;              // m16 x n8 MMA tiles per warp
    using ALayout = mma::Swizzled<A_CPR>;
    using BLayout = mma::Swizzled<B_CPR, DT != TYPE_TF32>;   // TF32 B is read by 32-bit loads, not ldmatrix
    static_assert(KSTEPS % 2 == 0, "fragments are double-buffered over pairs of K-steps");
    static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles are made of 16 x 16 pieces");

    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned a_smem = mma::smem_addr(smem), b_smem = a_smem + STAGES * A_BYTES;
    const TileOrigin tile = block_tile_origin_grouped<BM, BN, GROUP_M>(M, N);
    const unsigned tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const unsigned warp_row = (warp / (BN / WN)) * WM, warp_col = (warp % (BN / WN)) * WN;
    const int k_tiles = alpha == 0.0f ? 0 : (K + KT - 1) / KT;   // alpha = 0 reads neither A nor B

    // This thread's share of the copies; issue() starts those of the next
    // K-step (they are issued in order) into `stage`.
    using ACopy = TileCopy<A_T ? KT : BM, A_T ? BM : KT, THREADS, ALayout, VEC, S>;
    using BCopy = TileCopy<B_T ? BN : KT, B_T ? KT : BN, THREADS, BLayout, VEC, S>;
    ACopy a_copy = A_T ? ACopy(A, lda, 0, tile.row, K, M, tid) : ACopy(A, lda, tile.row, 0, M, K, tid);
    BCopy b_copy = B_T ? BCopy(B, ldb, tile.col, 0, N, K, tid) : BCopy(B, ldb, 0, tile.col, K, N, tid);
    auto next = [&]() {
        if constexpr (A_T) a_copy.next_rows(KT, lda); else a_copy.next_cols(KT);
        if constexpr (B_T) b_copy.next_cols(KT); else b_copy.next_rows(KT, ldb);
    };
    auto issue = [&](unsigned stage) {
        a_copy.issue(a_smem + stage * A_BYTES);
        b_copy.issue(b_smem + stage * B_BYTES);
        next();
    };
    // 16-bit operands off the 16-byte grid come by ordinary loads, which a thread waits for
    // before it can store them: in the main loop each K-step's loads are issued one K-step
    // before their stores (TileCopy::load, land), so that a K-step of MMAs covers their latency.
    // The stage stored then is read only after the next barrier from three stages on.  Tiles
    // whose warps hold 128 accumulators a thread have no registers for the loads in flight.
    constexpr bool DEFER = !VEC && E == 2 && STAGES >= 3 && FM * FN * 4 <= 64;
    bool pending = false;         // DEFER: a K-step's loads wait in registers (TileCopy::held)
    unsigned pending_stage = 0;   // for this stage

    // Where this lane reads its fragments, relative to a stage: the swizzle
    // repeats every 8 rows, so the m16 tiles of A (16 rows apart) and the
    // K-steps of B (16 or 8 rows apart) differ by constant offsets.
    // A 'N': one offset per K-step (chunks 2 ks, 2 ks + 1 of the rows); A 'T': one per
    // m16 tile (chunks of M), K-steps 16 rows apart.
    unsigned a_lane[A_T ? FM : KSTEPS];
#pragma unroll
    for (int x = 0; x < (A_T ? FM : KSTEPS); ++x)
        a_lane[x] = A_T ? mma::ldmatrix_pairs_lane_offset<ALayout>(lane, warp_row / 8 + 2 * x)
                        : warp_row * A_ROW + mma::ldmatrix_lane_offset<ALayout>(lane, 2 * x);
    // B: 16-bit, one ldmatrix.x4.trans per 16 columns (2 chunks); TF32, one
    // offset per 8 columns (2 chunks).  The swizzle permutes chunks within
    // 128-byte windows of 8, so pieces a window apart (j and j + 4) differ by
    // 128 bytes and share an offset register.
    // B 'T' (N rows of K): one offset per K-step (chunks 2 ks, 2 ks + 1), pieces of 16
    // rows (two n8 tiles) apart, the lanes ordered so that the tiles land in b[2j][0..1],
    // b[2j + 1][0..1] order.
    constexpr int BPIECES = DT == TYPE_TF32 ? FN : FN / 2, BOFFS = B_T ? KSTEPS : BPIECES < 4 ? BPIECES : 4;
    unsigned b_lane[BOFFS];
#pragma unroll
    for (int j = 0; j < BOFFS; ++j)
        b_lane[j] = B_T ? warp_col * B_ROW + mma::ldmatrix_pairs_lane_offset<BLayout>(lane, 2 * j)
                  : DT == TYPE_TF32 ? mma::tf32_b_lane_offset<BLayout>(lane, warp_col / 4 + 2 * j)
                                    : mma::ldmatrix_lane_offset<BLayout>(lane, warp_col / 8 + 2 * j);
    auto b_offset = [&](int j) { return b_lane[j % 4] + 128 * (j / 4); };

    // Fragments of two K-steps: the next one's load while this one's MMAs run.
    unsigned a[2][FM][4], b[2][FN][2];
    float acc[FM][FN][4] = {};
    auto load_a = [&](int buf, unsigned stage, int ks) {
        const unsigned at = a_smem + stage * A_BYTES;
        if constexpr (A_T) {
#pragma unroll
            for (int i = 0; i < FM; ++i)
                mma::ldmatrix_x4_trans(a[buf][i], at + a_lane[i] + 16 * ks * A_ROW);
        } else {
#pragma unroll
            for (int i = 0; i < FM; ++i) mma::ldmatrix_x4(a[buf][i], at + a_lane[ks] + 16 * i * A_ROW);
        }
    };
    auto load_b = [&](int buf, unsigned stage, int ks) {
        const unsigned bt = b_smem + stage * B_BYTES;
        if constexpr (DT == TYPE_TF32) {   // rows 8 ks + t and 8 ks + t + 4
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                b[buf][j][0] = mma::lds32(bt + b_offset(j) + 8 * ks * B_ROW);
                b[buf][j][1] = mma::lds32(bt + b_offset(j) + (8 * ks + 4) * B_ROW);
            }
        } else if constexpr (B_T) {   // (N rows 0-7 | 8-15 of a piece) x (K chunks 2 ks | 2 ks + 1)
#pragma unroll
            for (int j = 0; j < FN / 2; ++j)
                mma::ldmatrix_x4(reinterpret_cast<unsigned(&)[4]>(b[buf][2 * j][0]), bt + b_lane[ks] + 16 * j * B_ROW);
        } else {                   // rows 16 ks .. 16 ks + 15, two n8 tiles per ldmatrix
#pragma unroll
            for (int j = 0; j < FN / 2; ++j) {
                unsigned r[4];
                mma::ldmatrix_x4_trans(r, bt + b_offset(j) + 16 * ks * B_ROW);
                b[buf][2 * j][0] = r[0]; b[buf][2 * j][1] = r[1];
                b[buf][2 * j + 1][0] = r[2]; b[buf][2 * j + 1][1] = r[3];
            }
        }
    };

    // TF32: fragments are rounded to nearest in registers, one K-step after their
    // load and a row of MMAs apart, so the rounding issues between MMAs, two
    // instructions a register (mma::to_tf32_half_ulp) instead of cvt.rna's three;
    // the products are the same bit for bit (faster than rounding in shared memory
    // or with cvt.rna: benchmarks/NOTES.md).  Part p of FM is A fragment p and B
    // fragments p FN/FM .. (p + 1) FN/FM - 1.
    static_assert(FN % FM == 0, "B fragments split evenly over the rows of A fragments");
    auto round_part = [&](int buf, int p) {
        if constexpr (DT == TYPE_TF32) {
#pragma unroll
            for (int r = 0; r < 4; ++r) a[buf][p][r] = mma::to_tf32_half_ulp(a[buf][p][r]);
#pragma unroll
            for (int j = p * (FN / FM); j < (p + 1) * (FN / FM); ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) b[buf][j][r] = mma::to_tf32_half_ulp(b[buf][j][r]);
        }
    };

    // Prologue: STAGES-1 K-steps in flight.  Every step commits a batch (empty
    // past the end), so "at most STAGES-2 batches pending" always means "the
    // oldest outstanding step has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) issue(s);
        __pipeline_commit();
    }
    __pipeline_wait_prior(STAGES - 2);
    __syncthreads();
    if (k_tiles > 0) {
        load_a(0, 0, 0);
        load_b(0, 0, 0);
#pragma unroll
        for (int p = 0; p < FM; ++p) round_part(0, p);
    }

    unsigned read_stage = 0, write_stage = STAGES - 1;
    for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            if (ks == KSTEPS - 1) {
                // Step kt+1 visible to all; every warp is done reading step kt-1's
                // stage (its last fragments were loaded one K-step ago).
                __pipeline_wait_prior(STAGES - 2);
                read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
                __syncthreads();
            }
            // The next K-step's fragments (the next stage's first, at the last
            // step) load while this step's MMAs run.
            if (ks < KSTEPS - 1 || kt + 1 < k_tiles) {
                load_a((ks + 1) % 2, read_stage, (ks + 1) % KSTEPS);
                load_b((ks + 1) % 2, read_stage, (ks + 1) % KSTEPS);
            }
            if (ks == 0) {   // refill the stage step kt-1 used
                if constexpr (DEFER) {
                    if (pending) {   // K-step kt + STAGES - 2, loaded one K-step ago
                        a_copy.land(a_smem + pending_stage * A_BYTES);
                        b_copy.land(b_smem + pending_stage * B_BYTES);
                    }
                    pending = kt + STAGES - 1 < k_tiles;
                    if (pending) {   // K-step kt + STAGES - 1, stored at the next K-step
                        a_copy.load();
                        b_copy.load();
                        next();
                        pending_stage = write_stage;
                    }
                } else if (kt + STAGES - 1 < k_tiles) {
                    issue(write_stage);   // K-step kt + STAGES - 1
                }
                __pipeline_commit();
                write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
            }
            // This K-step's MMAs, a row of tiles at a time; TF32 rounds the next
            // K-step's fragments a part at a time in between (a row of MMAs after
            // their load, which has landed by then).
#pragma unroll
            for (int i = 0; i < FM; ++i) {
#pragma unroll
                for (int j = 0; j < FN; ++j)
                    mma::mma_16n8<DT>(acc[i][j], a[ks % 2][i], b[ks % 2][j]);
                if (i > 0) round_part((ks + 1) % 2, i - 1);
            }
            round_part((ks + 1) % 2, FM - 1);
        }
    }
    __pipeline_wait_prior(0);
    __syncthreads();   // every warp is done with the stages: the epilogue reuses them

    // Epilogue, one m16 row of MMA tiles at a time: the warp puts its
    // accumulators in a 16 x WN slab of shared memory (the fragment layout
    // scatters them: lane (g, t) holds columns 2t, 2t+1 of rows g and g+8),
    // then writes the slab to C 16 bytes per lane, neighbouring lanes on
    // neighbouring columns.
    constexpr int SLD = WN + 8;   // slab row stride in floats: see store_acc_row
    static_assert((THREADS / 32) * 16 * SLD * 4 <= STAGES * (A_BYTES + B_BYTES), "slabs fit in the stages");
    float* slab = reinterpret_cast<float*>(smem) + warp * 16 * SLD;
#pragma unroll
    for (int i = 0; i < FM; ++i) {
        mma::store_acc_row<FN, SLD>(slab, acc[i], lane);
        __syncwarp();
        store_slab_scaled<16, WN, SLD, VEC>(slab, C, ldc, tile.row + int(warp_row) + 16 * i,
                                            tile.col + int(warp_col), M, N, alpha, beta, lane);
        __syncwarp();   // the slab is rewritten by the next row of tiles
    }
}

}  // namespace gemmlab
