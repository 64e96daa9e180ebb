// FP32-accurate rung 2, ec_wgmma (Hopper, sm_90a only): ec_wmma's arithmetic on
// tensor rung 4's machinery (TMA, wgmma, warp specialisation, a persistent grid;
// read tensor/04_wgmma.cu first).  wgmma reads its operands from shared memory as
// TMA left them, so the split moves out of the GEMM into a pre-pass
// (split_pack.cu) and a stage of the ring holds four tiles: hi and lo of A and of
// B^T.  Each consumer keeps four sets of accumulators (main product of the stage,
// its block sum, the total, the corrections), and adds the main product in FP32
// while the tensor cores run the corrections.  A batch is one launch, as in the
// wgmma rung: the pre-pass splits every matrix, the parts' tensor maps are 3-D
// (the batch outermost) and the persistent loop walks every matrix's tiles.  K
// can be split as in the wgmma rung (SPLITS below), so that a product with few
// tiles and a long K (128 tokens through a linear layer) still fills the SMs.
#include <gemmlab/ec/01_ec_wmma.cuh>
#include <gemmlab/ec/choice.cuh>
#include <gemmlab/tensor/04_wgmma.cuh>

namespace gemmlab {

constexpr int EC_WGMMA_PRODUCER_REGS = 40;    // setmaxnreg, as in the wgmma rung
constexpr int EC_WGMMA_CONSUMER_REGS = 232;
// The block's tile of C: two consumer warpgroups of 64 x BN.  Four sets of 48
// accumulators a thread are why it is 128 x 96 and not 128 x 256: 192 of a
// consumer's 232 registers; with FOLD, three sets of 64 make it 128 x 128.
constexpr int EC_WGMMA_BM = 128;
constexpr int EC_WGMMA_BN = 96;               // without FOLD
constexpr int EC_WGMMA_FOLD_BN = 128;         // the widest tile FOLD's three sets fit
constexpr int EC_WGMMA_THREADS = 384;         // a producer and two consumer warpgroups
// The stream-K tail's counters, a tile's two consumers each, after the choice record (so zero
// when a call begins: its workspace starts zeroed, and each tail tile's last slice zeroes its own).
constexpr int EC_WGMMA_TAIL_COUNTERS = 1024;
// FOLD's epilogue stages a C of odd row length through shared memory, a consumer warp's chunk
// at a time (04_wgmma_store.cuh).  The four-set kernel keeps its fourth ring stage instead.
constexpr int EC_WGMMA_STAGED_C_BYTES = 2560;
static_assert(EC_WGMMA_STAGED_C_BYTES == StagedChunk<float>::BYTES, "16 rows of 32 floats, padded");

// Work item i of the persistent loop: the tile's matrix (zs: split-K's (matrix, slice) pair),
// its K-steps [ks0, ks1), and its slice of the tail (-1: a whole tile, or split-K's slice).
struct EcItem {
    int zs, ks0, ks1, tail_slice;
};

// FOLD's answer where its sum is NaN.  Inputs with Inf give the parts' products
// Inf * 0 (hi_A = Inf times an exact lo_B = 0) and Inf - Inf (a negative lo_B),
// which the four-set kernel keeps out of the main product and FOLD cannot, so
// such an element is summed again from A and B in FP32, k0 <= k < k1 (the work
// item's slice), IEEE's Inf and NaN included.  Only elements whose inputs hold
// Inf or NaN (or whose FP32 sums overflow) come here.
__device__ __noinline__ float ec_dot_again(const float* __restrict__ A, int lda, const float* __restrict__ B, int ldb,
                                           int trans, int row, int col, int k0, int k1) {
    float sum = 0.0f;
    for (int k = k0; k < k1; ++k) {
        const float a = trans & 1 ? A[elem_offset<'T'>(row, k, lda)] : A[elem_offset<'N'>(row, k, lda)];
        const float b = trans & 2 ? B[elem_offset<'T'>(k, col, ldb)] : B[elem_offset<'N'>(k, col, ldb)];
        sum = fmaf(a, b, sum);
    }
    return sum;
}

// FOLD = 1 drops the fourth set, for a wider tile (BN = 128): the pre-pass keeps
// lo in hi's units (lo = x - hi, no 2^11; the FP16 parts scaled so that the
// largest value sits just below 2^15, which leaves lo's quantum 2^-24 about 38
// binades below it), so the corrections and the main product of a stage go into
// one accumulator set, corrections first: the tensor core's truncating adds then
// meet the main product's magnitude only in its own four steps, as without FOLD.
// The stage's sum is added in FP32 once all three products are done; the two
// consumer warpgroups take turns on the tensor cores while the other adds.  Inf
// in the inputs meets Inf * 0 between the parts: ec_dot_again, below.
//
// METHOD: METHOD_FP16_EC or METHOD_TF32_EC.  scale_a, scale_b: the powers of two
// the pre-pass multiplied A and B by (the scaled FP16 method; 1 otherwise); the
// epilogue divides them out one at a time.  The layouts OPA, OPB are the
// pre-pass's business: the registry instantiates this kernel for 'N', 'N' only
// (Launching.packed).  choice: null, or the record of the method chosen on the
// GPU (precision="fp32_tc", ec/choice.cuh): both METHODs are launched (over the
// same part buffers), the one not chosen returns at once, and the scales are the
// record's.  stride_a, stride_b: the caller's batch strides; the maps read only
// whether they are 0 (an operand every matrix shares is split once: its maps hold
// one matrix, read at batch coordinate 0), ec_dot_again steps by them; stride_c:
// C's, used as is; batch: the matrices of this launch.
// SPLITS (split-K): the argument splits cuts K into that many slices of
// whole K-steps, and the persistent loop's work items become (matrix, slice,
// tile), as in tensor/04_wgmma.cu.  Each item writes its FP32 partial tile to C,
// which is then a workspace of splits partial products per matrix: item (z, s) at
// C + (z * splits + s) * stride_c, with stride_c = M * N and ldc = N.  The host
// passes alpha = 1, beta = 0 and adds the slices into the real C with
// simt/splitk_reduce.cu.  splits = 1 is the unsplit kernel (the item's zs is its
// matrix z): the output is FP32 either way, so one instantiation serves both.
// BN: the tile's columns (96, or 128 with FOLD).  FOLD: the parts' lo in hi's
// units (split_pack.cu's FOLD), one accumulator set for the three products.
// trans: the caller's layouts (bit 0: A stored transposed, bit 1: B), which only
// ec_dot_again reads.  unscale_rows, unscale_cols (FOLD): null, or the inverse scales
// of each row of op(A) and each column of op(B) that split_scaled.cu applied (one
// array per matrix split, M and N floats apart), which the epilogue multiplies by
// instead of the scalar scales.
// The tail (stream-K): where the tiles leave the persistent grid's last round part empty, the
// last tail_tiles tiles are cut into tail_slices slices of K each, one work item a slice, so that
// every SM has a share of the last round.  Each slice stores its sum, in C's units (the scales
// divided out), in tail_partials and counts itself in (its tile's counter after the choice
// record: choice is not null); the slice that comes last adds them all in slice order -- the
// same sum whichever it is -- and stores the tile.  tail_tiles = 0: none (always with split-K).
template <int METHOD, int STAGES, int BN, int FOLD, char OPA, char OPB>
__global__ void __launch_bounds__(EC_WGMMA_THREADS, 1)
ec_wgmma(int M, int N, int K, float alpha, const float* __restrict__ A, int lda, const float* __restrict__ B, int ldb,
         float beta, float* __restrict__ C, int ldc, long long stride_a, long long stride_b, long long stride_c,
         int batch, const __grid_constant__ hopper::TensorMap map_a_hi,
         const __grid_constant__ hopper::TensorMap map_a_lo, const __grid_constant__ hopper::TensorMap map_b_hi,
         const __grid_constant__ hopper::TensorMap map_b_lo, float scale_a, float scale_b,
         const long long* __restrict__ choice, int splits, int trans, const float* __restrict__ unscale_rows,
         const float* __restrict__ unscale_cols, int tail_tiles, int tail_slices, float* __restrict__ tail_partials) {
    using namespace hopper;
    static_assert(FOLD ? BN <= EC_WGMMA_FOLD_BN : BN == EC_WGMMA_BN, "three sets of BN / 2, or four of 48");
    using Split = EcSplit<METHOD>;
    constexpr int DT = Split::DT;                 // the parts: TYPE_FLOAT16 or TYPE_TF32
    constexpr int BM = EC_WGMMA_BM;
    constexpr int BK = DT == TYPE_TF32 ? 32 : 64;   // one 128-byte swizzle row of K per stage
    constexpr int MMA_K = DT == TYPE_TF32 ? 8 : 16;
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;   // 128 bytes of K a row
    constexpr int STAGE_BYTES = 2 * (A_BYTES + B_BYTES);   // hi and lo of A, hi and lo of B^T
    // A and B are read through the maps of their parts; FOLD's epilogue reads them
    // for the rare elements it computes again (ec_dot_again).

    extern __shared__ unsigned char smem_raw[];
    unsigned char* ring = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);   // swizzle atoms: 1024 B
    u64* full = reinterpret_cast<u64*>(ring + STAGES * STAGE_BYTES);
    u64* empty = full + STAGES;
    // Per consumer: whether its slice of a tail tile came last (16 bytes for both), then its
    // tile's BN inverse column scales (split_scaled.cu's), read by its epilogue.
    int* tail_last = reinterpret_cast<int*>(empty + STAGES);
    float* col_unscale_smem = reinterpret_cast<float*>(tail_last + 4);
    // FOLD: then each consumer warp's chunk of C on its way out.
    unsigned char* staged_c = reinterpret_cast<unsigned char*>(col_unscale_smem + 2 * BN) +
                              (threadIdx.x / 32 - 4) * EC_WGMMA_STAGED_C_BYTES;

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
    if (choice != nullptr) {   // the method chosen on the GPU (after the set-up above, which reads no data)
        if (!ec_wait_and_chosen<METHOD>(choice)) return;
        scale_a = ec_choice_scale(choice, FOLD ? CHOICE_TOP_SCALE_A : CHOICE_SCALE_A);
        scale_b = ec_choice_scale(choice, FOLD ? CHOICE_TOP_SCALE_B : CHOICE_SCALE_B);
    }

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    // Split-K: batch_tile's "matrix" is the pair (matrix z, slice s), zs = z * slices + s.
    const int slices = splits;
    const int work = tiles_m * tiles_n * batch * slices;   // (matrix, slice, tile) triples: batch_tile
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;
    const int per_slice = (k_steps + slices - 1) / slices;  // K-steps of a slice (the last may have fewer)
    // The work items: the triples before the tail, then tail_slices items per tile of the tail.
    const int tail_from = work - tail_tiles;
    const int items = tail_from + tail_tiles * tail_slices;
    auto item_of = [&](int i, int& tm, int& tn) -> EcItem {
        if (i < tail_from) {
            const int zs = batch_tile(i, tiles_m, tiles_n, tm, tn);
            const KSlice k = k_slice(zs, slices, per_slice, k_steps);
            return {zs, k.ks0, k.ks1, -1};
        }
        const int u = i - tail_from, slice = u % tail_slices;   // splits = 1: zs is the matrix
        const int zs = batch_tile(tail_from + u / tail_slices, tiles_m, tiles_n, tm, tn);
        return {zs, slice * k_steps / tail_slices, (slice + 1) * k_steps / tail_slices, slice};
    };

    if (wg == 0) {
        setmaxnreg_dec<EC_WGMMA_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < items; t += gridDim.x) {
                int tm, tn;
                const EcItem item = item_of(t, tm, tn);
                const int z = item.zs / slices, ks0 = item.ks0, ks1 = item.ks1;
                const int za = stride_a ? z : 0, zb = stride_b ? z : 0;
                for (int ks = ks0; ks < ks1; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
                    unsigned char* st = ring + s * STAGE_BYTES;
                    tma_load_3d(st, &map_a_hi, ks * BK, tm * BM, za, &full[s]);
                    tma_load_3d(st + A_BYTES, &map_a_lo, ks * BK, tm * BM, za, &full[s]);
                    tma_load_3d(st + 2 * A_BYTES, &map_b_hi, ks * BK, tn * BN, zb, &full[s]);   // B^T: BN rows
                    tma_load_3d(st + 2 * A_BYTES + B_BYTES, &map_b_lo, ks * BK, tn * BN, zb, &full[s]);
                }
            }
        }
        return;
    }

    setmaxnreg_inc<EC_WGMMA_CONSUMER_REGS>();
    const int c = wg - 1, wq = warp % 4;
    const bool pairs = (ldc % 2 == 0) && (stride_c % 2 == 0) && (reinterpret_cast<u64>(C) % 8 == 0);
    // Both operands K-major: the next MMA_K-deep slice starts 32 bytes further
    // along the (swizzled) 128-byte rows; the hardware applies the swizzle.
    auto desc = [](const unsigned char* tile, int kk) { return make_smem_desc(tile + 32 * kk, 16, 1024); };
    using Mma = Wgmma<BN, DT>;
    // Per thread: hh, the main product of one stage, computed by wgmma from zero;
    // block, hh summed with round-to-nearest FP32 adds, stage after stage; acc,
    // block added every ~sqrt(stages) stages and then cleared, so the rounding error
    // grows like K^(1/4) (ec_wmma's blocking; one accumulator alone does not keep
    // SGEMM's accuracy on every input: benchmarks/NOTES.md); corr, the two
    // correction products accumulated inside the tensor core over all of K.  With
    // FOLD, hh holds the stage's corrections and main product together, and corr
    // is not needed.
    float acc[BN / 2], block[BN / 2], hh[BN / 2], corr[FOLD ? 1 : BN / 2];
    // Scales per row and column (split_scaled.cu): each consumer stages its tile's column
    // scales in shared memory and keeps its two rows' in registers, loaded during the
    // previous tile's epilogue (loaded in the epilogue that uses them, or at the tile's start,
    // they lengthen the GEMM, most where K = 128 leaves a main loop of two stages).
    const bool per_row = FOLD && unscale_rows != nullptr;
    float next_row[2] = {1.0f, 1.0f}, next_col = 1.0f;
    auto fetch_scales = [&](int t) {   // item t's tile's, where this block has one
        if (!per_row || t >= items) return;
        int tm, tn;
        const long long z = item_of(t, tm, tn).zs / slices;
        const int r = tm * BM + c * 64 + wq * 16 + lane / 4, col = tn * BN + int(threadIdx.x) - 128 * wg;
        const float* rows = unscale_rows + (stride_a ? z : 0) * M;
#pragma unroll
        for (int h = 0; h < 2; ++h) next_row[h] = r + 8 * h < M ? rows[r + 8 * h] : 1.0f;
        next_col = col < N && col < (tn + 1) * BN ? unscale_cols[(stride_b ? z : 0) * N + col] : 1.0f;
    };
    fetch_scales(blockIdx.x);
    int it = 0;
    for (int t = blockIdx.x; t < items; t += gridDim.x) {
        int tm, tn;
        // zs: the matrix unsplit; split, the partial product (z, s) of the workspace.
        const EcItem item = item_of(t, tm, tn);
        const int zs = item.zs, ks0 = item.ks0, ks1 = item.ks1;
        // Stages per block of the main product's adds: about sqrt(the item's stages).
        const int block_steps = max(1, int(sqrtf(float(max(ks1 - ks0, 0)))));
        float unscale_row[2] = {next_row[0], next_row[1]};
        if (per_row) {
            const int i = int(threadIdx.x) - 128 * wg;
            named_barrier_sync(1 + c, 128);   // the previous tile's epilogue has read the staged scales
            if (i < BN) col_unscale_smem[c * BN + i] = next_col;
        }
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = block[i] = 0.0f;
#pragma unroll
        for (int i = 0; i < (FOLD ? 1 : BN / 2); ++i) corr[i] = 0.0f;
        fence_operands(corr);
        int prev = 0, to_add = block_steps;   // stages left before block goes into acc
        for (int ks = ks0; ks < ks1; ++ks, ++it) {
            const int s = it % STAGES;
            mbar_wait(&full[s], (it / STAGES) & 1);
            const unsigned char* a_hi = ring + s * STAGE_BYTES + c * (64 * 128);
            const unsigned char* a_lo = a_hi + A_BYTES;
            const unsigned char* b_hi = ring + s * STAGE_BYTES + 2 * A_BYTES;
            const unsigned char* b_lo = b_hi + B_BYTES;
            wgmma_fence();   // hh was read by the adds below: order them before wgmma rewrites it
            if constexpr (FOLD) {
                // The corrections first, from zero, then the main product on top:
                // one group, all of it done before the adds.
#pragma unroll
                for (int kk = 0; kk < BK / MMA_K; ++kk) {
                    Mma::template mma<0, 0>(hh, desc(a_lo, kk), desc(b_hi, kk), kk > 0);
                    Mma::template mma<0, 0>(hh, desc(a_hi, kk), desc(b_lo, kk), 1);
                }
#pragma unroll
                for (int kk = 0; kk < BK / MMA_K; ++kk) Mma::template mma<0, 0>(hh, desc(a_hi, kk), desc(b_hi, kk), 1);
                wgmma_commit();
                wgmma_wait<0>();
                fence_operands(hh);
                release_stage<1>(&empty[s], lane);
            } else {
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
                if (ks > ks0) release_stage<1>(&empty[prev], lane);
            }
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) block[i] += hh[i];
            if (--to_add == 0 || ks + 1 == ks1) {
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) {
                    acc[i] += block[i];
                    block[i] = 0.0f;
                }
                to_add = block_steps;
            }
            prev = s;
        }
        if constexpr (!FOLD) {
            wgmma_wait<0>();
            fence_operands(corr);
            if (ks1 > ks0) release_stage<1>(&empty[prev], lane);
        }

        // Epilogue: acc + corr * 2^-11 (FOLD: acc alone; a non-finite main product is already IEEE's
        // answer; its corrections could only add a NaN from Inf * 0), the scales
        // divided out, then alpha and beta (layout of the accumulators: hopper.cuh).  An
        // empty slice (K shorter than the split) still writes its zero partial.
        const float unscale_a = 1.0f / scale_a, unscale_b = 1.0f / scale_b;   // exact: powers of two
        float* Cz = C + zs * stride_c;
        const int row0 = tm * BM + c * 64 + wq * 16 + lane / 4;
        const int col0 = tn * BN + 2 * (lane % 4);
        if (per_row) {
            named_barrier_sync(1 + c, 128);   // the staged column scales are in
            // The next tile's, loaded behind this epilogue: issued inside the main loop, the
            // loads held up its first wgmma fence (tiles of a short K took longer).
            fetch_scales(t + int(gridDim.x));
        }
        else unscale_row[0] = unscale_row[1] = unscale_a;
        // FOLD: an element whose sum is NaN (bit i of `again`: acc[i]) may be Inf * 0 or
        // Inf - Inf between the parts; ec_dot_again sums it in FP32 from A and B, into acc[i]
        // (then stored without the scales).  Only inputs with Inf or NaN take that branch.
        // A NaN among the sums makes their sum NaN, so the element-by-element scan runs only then (Inf -
        // Inf between two finite-input sums that overflowed sends a tile there too, and finds nothing).
        unsigned long long again = 0;
        if constexpr (FOLD) {
            float probe[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) probe[i % 4] += acc[i];
            if (isnan((probe[0] + probe[1]) + (probe[2] + probe[3]))) {
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) again |= (unsigned long long)isnan(acc[i]) << i;
            }
            if (again != 0) {
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) {   // i = 4 j + 2 h + e
                    const int r = row0 + 8 * ((i >> 1) & 1), col = col0 + 8 * (i >> 2) + (i & 1);
                    if ((again >> i) & 1 && r < M && col < N)
                        acc[i] = ec_dot_again(A + (zs / slices) * stride_a, lda, B + (zs / slices) * stride_b, ldb,
                                              trans, r, col, ks0 * BK, min(ks1 * BK, K));
                }
            }
        }
        // The values in C's units, in place: the scales divided out (an element summed again, bit i
        // of `kept`, is in them already).  Called with kept = 0 where no element was, so that
        // the common tile compiles without the selects.
        auto to_c_units = [&](unsigned long long kept) {
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                // FOLD: the two columns' inverse scales, one 8-byte shared load for both rows
                float2 unscale_col = make_float2(unscale_b, unscale_b);
                if (FOLD && per_row)
                    unscale_col = *reinterpret_cast<const float2*>(&col_unscale_smem[c * BN + 8 * j + 2 * (lane % 4)]);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int i = 4 * j + 2 * h + e;
                        const float a = acc[i];
                        if constexpr (FOLD) {
                            acc[i] = (kept >> i) & 1 ? a : a * unscale_row[h] * (e ? unscale_col.y : unscale_col.x);
                        } else {
                            const float lo = corr[i] * Split::LO_WEIGHT;
                            acc[i] = (isfinite(a) ? a + lo : a) * unscale_a * unscale_b;
                        }
                    }
                }
            }
        };
        if (again == 0)
            to_c_units(0ull);
        else
            to_c_units(again);
        if (item.tail_slice >= 0) {
            // The tail: each slice stores its values as a partial (float4s, consecutive threads
            // side by side) and counts itself in; the slice that finds the others counted reads
            // every partial back in slice order (the same sum whichever comes last), adds, and
            // stores the tile below.  No slice waits for another.
            const int slot = (t - tail_from) / tail_slices, me = int(threadIdx.x) - 128 * wg;
            constexpr int QUADS = BN / 8;   // float4s of a thread's share of the tile
            const long long part_float4s = (long long)QUADS * 128;   // one consumer's share of one slice
            float4* parts = reinterpret_cast<float4*>(tail_partials) +
                            (long long)slot * tail_slices * 2 * part_float4s + c * part_float4s + me;
            float4* mine = parts + (long long)item.tail_slice * 2 * part_float4s;
#pragma unroll
            for (int q = 0; q < QUADS; ++q)
                mine[q * 128] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
            named_barrier_sync(1 + c, 128);   // the consumer's partial is written
            if (me == 0) {
                unsigned* counter =
                    reinterpret_cast<unsigned*>(const_cast<long long*>(choice) + CHOICE_FIELDS) + 2 * slot + c;
                // Release: the consumer's partial (ordered by the barrier) before the count; acquire:
                // the others' partials, where this count is the last, before they are read.
                unsigned before;
                asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
                const bool last = before == unsigned(tail_slices - 1);
                if (last) *counter = 0u;   // zero for the next launch
                tail_last[c] = last;
            }
            named_barrier_sync(1 + c, 128);
            if (!tail_last[c]) continue;
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
#pragma unroll 1
            for (int s = 0; s < tail_slices; ++s) {
#pragma unroll
                for (int q = 0; q < QUADS; ++q) {
                    const float4 p = __ldcg(parts + (long long)s * 2 * part_float4s + q * 128);
                    acc[4 * q] += p.x;
                    acc[4 * q + 1] += p.y;
                    acc[4 * q + 2] += p.z;
                    acc[4 * q + 3] += p.w;
                }
            }
        }
        if (FOLD && !pairs) {
            // Rows of odd length (or C off the 8-byte grid): through shared memory, so that a store
            // writes a run of each row, not 8 rows of 16 bytes (where pairs fit, the direct stores
            // fill whole 32-byte sectors and ran as fast: benchmarks/NOTES.md).
            wgmma_staged_epilogue<float, BN>(acc, staged_c, Cz, ldc, M, N, row0 - lane / 4, tn * BN, alpha, beta,
                                             pairs, WGMMA_BIAS_NONE, static_cast<const float*>(nullptr), 0, 0, lane);
        } else {
            store_accumulators<BN>(acc, Cz, ldc, M, N, tm * BM + 64 * c, tn * BN, alpha, beta, pairs);
        }
    }
}

}  // namespace gemmlab
