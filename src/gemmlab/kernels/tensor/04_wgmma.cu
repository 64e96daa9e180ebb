// Tensor-core rung 4, wgmma (Hopper, sm_90a only): the threads stop moving data.
// TMA copies whole tiles into a swizzled shared-memory ring (mbarriers say when a
// stage is full or free), and wgmma multiplies from shared memory straight into
// registers, asynchronously, a warpgroup at a time.  The block is
// warp-specialised (a producer warpgroup, BM/64 consumers that setmaxnreg gives
// the registers) and persistent over the tiles of every matrix of a batch
// (tensor/04_wgmma.cuh: one launch per batch); CLUSTER = 2 multicasts
// each B tile to two blocks, and the epilogue hands C to TMA as well.  SPLIT
// splits K, so that few tiles with a long K still give every SM work, and adds
// the slices inside the kernel (below).
// The rung's last step (04a-04c build up to it).  Details: docs/tensor/04-wgmma.md.
#include <gemmlab/tensor/04_wgmma.cuh>

namespace gemmlab {

constexpr int WGMMA_PRODUCER_REGS = 40;   // setmaxnreg: producer warpgroup
constexpr int WGMMA_CONSUMER_REGS = 232;  // setmaxnreg: each consumer warpgroup
constexpr int WGMMA_EPI_BYTES = 8192;     // one staging buffer of the TMA-store epilogue (two per consumer)
// A warp's share of its consumer's two buffers in the staged epilogue (04_wgmma_store.cuh).
constexpr int WGMMA_WARP_STAGE = 2 * WGMMA_EPI_BYTES / 4;
static_assert(StagedChunk<float>::BYTES <= WGMMA_WARP_STAGE && StagedChunk<__half>::BYTES <= WGMMA_WARP_STAGE,
              "a warp's staged chunk fits in its share of the staging buffers");

// The epilogue's bias is compiled per kind (WGMMA_BIAS_NONE, _ROW, _COLUMN:
// tensor/04_wgmma_store.cuh).

// OPA, OPB: the operand layouts every rung's template ends with (layout.cuh):
// 'N' op(A) = A stored M x K row-major, 'T' A stored K x M (op(A) = A^T); likewise
// 'N' B stored K x N, 'T' B stored N x K.  16-bit: every layout, no copy -- each
// operand lands in shared memory as stored, K-major (A 'N', B 'T') or MN-major
// (A 'T', B 'N'), and the wgmma reads an MN-major one through its transpose bit
// (load_operand_tile, operand_desc in tensor/04_wgmma.cuh).  TF32 ('N', 'N' only;
// the registry falls back for the others) computes C^T = B^T A^T (below).
// Besides the usual arguments (layout.cuh's batch strides included) the kernel takes
// the number of matrices in the batch, the tensor maps of A, B and C (3-D, the batch
// outermost, built on the host over A and B as stored: kernels/tensor/wgmma.py) and
// whether to store through C's map; A and B themselves are only read through the
// maps, and of their strides only whether they are 0 (every matrix reads the same
// one: its map has a batch of one).  beta == 0 never reads C; alpha == 0 reads
// neither A nor B.
// SPLIT (split-K): `splits` cuts K into that many slices of whole K-steps, and the
// persistent loop's work items become (matrix, slice, tile).  The last slice of a
// tile owns it: the others leave their FP32 accumulators in `partials` and count
// themselves in on `counters` (zero before the launch, zero again after it); the
// owner adds them into its registers and runs the same epilogue as unsplit
// (tensor/04_wgmma_work.cuh), so no second kernel reduces.  The host sizes
// partials at (splits - 1) * BM * BN floats per tile and counters at BM / 64 per
// tile, the tiles of every matrix, cluster padding included.  Unsplit, splits,
// partials and counters are not read.
// bias (16-bit inputs; nullptr: none): the epilogue writes alpha * acc +
// bias[z * bias_zs + m * bias_rs + n * bias_cs] (+ beta * C), the bias added in FP32
// before the one rounding to C's type.  Its strides broadcast it, one of bias_rs and
// bias_cs 0: (0, 1) is a row vector added to every row (nn.Linear's bias), (1, 0) a
// column; the bias never costs C a second pass through memory.
// A C that TMA does not write (16-bit inputs: beta != 0, rows or base off the
// 16-byte grid -- attention's scores at 197 tokens, a vocabulary of 50257 columns -- or a
// batch with gaps) goes through shared memory too: from the accumulator layout a warp's
// store instruction reaches 8 rows (with rows of odd length one 2-byte element each, so
// 8 sectors for 64 bytes); staged, each warp writes its rows whole, lanes on consecutive
// columns (tensor/04_wgmma_store.cuh).  TF32 stores from the registers.
template <int DT, int ODT, int BM, int BN, int STAGES, int CLUSTER, bool SPLIT, char OPA, char OPB>
__global__ void __launch_bounds__((BM / 64 + 1) * 128, 1)
wgmma_gemm(int M, int N, int K, float alpha, const typename wmma_types::Storage<DT>::type* __restrict__ A, int lda,
           const typename wmma_types::Storage<DT>::type* __restrict__ B, int ldb, float beta,
           typename wmma_types::Storage<ODT>::type* __restrict__ C, int ldc, long long stride_a,
           long long stride_b, long long stride_c, int batch, const __grid_constant__ hopper::TensorMap map_a, const __grid_constant__ hopper::TensorMap map_b,
           const __grid_constant__ hopper::TensorMap map_c, int tma_store, int splits, float* __restrict__ partials,
           unsigned* __restrict__ counters, const typename wmma_types::Storage<ODT>::type* __restrict__ bias, long long bias_rs, long long bias_cs,
           long long bias_zs) {
    using namespace hopper;
    using S = typename wmma_types::Storage<DT>::type;
    using O = typename wmma_types::Storage<ODT>::type;
    constexpr int EB = int(sizeof(S));
    constexpr int BK = 128 / EB;              // one 128-byte swizzle row of K per stage
    constexpr int MMA_K = 32 / EB;            // K of one wgmma: 16 (16-bit), 8 (TF32)
    // A (row-major M x K) is K-major, what wgmma reads natively; B (row-major K x N)
    // is N-major, which the 16-bit wgmma reads through its transpose bit.  TF32 wgmma
    // has no transpose, and the tensor cores read a TF32 operand from shared memory
    // by dropping the low 13 bits (measured: truncation).  So TF32 computes
    // C^T = B^T A^T: A's tile is the wgmma's B operand (K-major along the wgmma's N,
    // which runs along C's rows), B^T its A operand, loaded into registers from the
    // N-major B tile; both tensor maps are TFLOAT32, so TMA rounds every value to
    // TF32 on its way in (an operand TMA cannot read in place is first copied,
    // rounded, by tf32_pack.cu); the epilogue writes the transposed accumulators.
    constexpr bool TF32 = DT == TYPE_TF32;    // computes C^T = B^T A^T (above)
    // The block's tile of C is TM x TN.  16-bit: the consumers split its rows (TM = BM)
    // and BN is the wgmma's N.  TF32: the wgmma's N runs along C's rows (TM = BN) and
    // the consumers split its columns (TN = BM).
    constexpr int TM = TF32 ? BN : BM, TN = TF32 ? BM : BN;
    // Each operand's tile of one K-step, as stored: K-major (A 'N': M x K rows; B 'T':
    // N x K rows) or MN-major (A 'T', B 'N': BK rows of K, 128 bytes of M or N each).
    constexpr bool A_KMAJOR = OPA == 'N', B_KMAJOR = OPB == 'T';
    static_assert(!TF32 || (OPA == 'N' && OPB == 'N'), "TF32 reads row-major A and B only (C^T = B^T A^T)");
    constexpr int A_BYTES = TM * 128;         // TM rows (M) x 128 bytes of K, in either major-ness
    constexpr int B_BYTES = TN * 128;         // TN rows (N) x 128 bytes of K
    // Rows of M (A) or N (B) per TMA box: K-major, the whole tile (B: its 1/CLUSTER
    // share); MN-major, one 128-byte swizzle row's worth (64 16-bit, 32 FP32 values).
    constexpr int A_BOX = A_KMAJOR ? TM : 128 / EB;
    constexpr int B_BOX = B_KMAJOR ? TN / CLUSTER : 128 / EB;
    constexpr int CONSUMERS = BM / 64;
    static_assert(BM % 64 == 0 && (BN == 64 || BN == 128 || BN == 192 || BN == 256) && (CLUSTER == 1 || CLUSTER == 2),
                  "tile shape");
    // BN = 192: m64n192 exists for 16-bit types only here (hopper.cuh), and B's three
    // 64-column boxes (B 'N') cannot be shared evenly by a cluster of two.
    static_assert(BN != 192 || (!TF32 && CLUSTER == 1), "BN = 192: 16-bit inputs, CLUSTER = 1");
    static_assert((TN / B_BOX) % CLUSTER == 0, "every block of a cluster copies whole boxes of B");
    // Named barriers: 1 + c the TMA-store epilogue's, FIXUP_BAR + c split-K's (0 is __syncthreads).
    constexpr int FIXUP_BAR = 1 + CONSUMERS;
    static_assert(FIXUP_BAR + CONSUMERS <= 16, "hardware barriers");
    (void)A; (void)lda; (void)B; (void)ldb;

    // Dynamic shared memory, aligned to 1024 bytes (the swizzle atom): STAGES
    // tiles of A, STAGES tiles of B, two staging buffers per consumer for the
    // epilogue, then two barriers per stage.
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* a_tiles = smem;
    unsigned char* b_tiles = smem + STAGES * A_BYTES;
    unsigned char* epi = b_tiles + STAGES * B_BYTES;
    u64* full = reinterpret_cast<u64*>(epi + CONSUMERS * 2 * WGMMA_EPI_BYTES);   // the copies have landed
    u64* empty = full + STAGES;                                                  // every consumer is done with it

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
        if (tma_store) tma_prefetch_map(&map_c);
    }
    // The peer's barriers must be initialised before our copies or arrivals reach them.
    if constexpr (CLUSTER > 1) cluster_sync(); else __syncthreads();

    // A cluster of CLUSTER blocks takes CLUSTER vertically adjacent tiles that share
    // their columns of B: each block copies its own A tile and 1/CLUSTER of the B
    // tile, multicast into every block of the cluster.
    const int tiles_m = (M + TM - 1) / TM, tiles_n = (N + TN - 1) / TN;
    const int tiles_mc = (tiles_m + CLUSTER - 1) / CLUSTER;
    const int cluster_tiles = tiles_mc * tiles_n;
    // Split-K: batch_tile's "matrix" is the pair (matrix z, slice s), zs = z * slices + s,
    // so the blocks of one round take the same slice of neighbouring tiles, and a tile's
    // last slice has its highest item index (the owner: 04_wgmma_work.cuh).
    const int slices = SPLIT ? splits : 1;
    const int work = cluster_tiles * batch * slices;   // (matrix, slice, tile) triples: batch_tile
    const int first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;   // alpha = 0 reads neither A nor B
    const int per_slice = (k_steps + slices - 1) / slices;      // K-steps of a slice (the last may have fewer)

    if (wg == 0) {
        setmaxnreg_dec<WGMMA_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            // Producer: one thread walks the same tiles as the consumers and keeps the
            // ring full; a stage is refilled once every consumer of the cluster released it.
            int it = 0;
            for (int t = first; t < work; t += step) {
                int tmc, tn;
                const KSlice item = k_slice(batch_tile(t, tiles_mc, tiles_n, tmc, tn), slices, per_slice, k_steps);
                const int z = item.z, ks0 = item.ks0, ks1 = item.ks1;
                const int za = stride_a ? z : 0, zb = stride_b ? z : 0;
                const int tm = tmc * CLUSTER + int(rank);
                for (int ks = ks0; ks < ks1; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
                    // A: this block's own; B: this block's boxes of it, multicast to the cluster.
                    load_operand_tile<A_KMAJOR, TM, A_BOX, 1>(a_tiles + s * A_BYTES, &map_a, tm * TM, ks * BK, za,
                                                              &full[s], 0);
                    load_operand_tile<B_KMAJOR, TN, B_BOX, CLUSTER>(b_tiles + s * B_BYTES, &map_b, tn * TN,
                                                                    ks * BK, zb, &full[s], rank);
                }
            }
        }
    } else {
        // Consumers.  16-bit: warpgroup c owns rows [64c, 64c + 64) of the block tile;
        // TF32: columns [64c, 64c + 64).
        setmaxnreg_inc<WGMMA_CONSUMER_REGS>();
        const int c = wg - 1;
        const int wq = warp % 4;
        const int g = lane / 4, tq = lane % 4;
        // 8-byte / 4-byte paired stores need an even ldc and stride_c and an aligned C.
        const bool pairs = (ldc % 2 == 0) && (stride_c % 2 == 0) && (reinterpret_cast<u64>(C) % (2 * sizeof(O)) == 0);
        unsigned char* stage_c = epi + c * (2 * WGMMA_EPI_BYTES);   // this consumer's two staging buffers
        int chunk = 0;                                              // staging buffers used so far

        // TF32: the wgmma's A operand is B^T from registers.  Its 64 rows (C's columns
        // of this consumer) may be assigned to threads in any order, as long as the
        // epilogue knows it: thread (warp wq, g) takes columns n and n + 1 as its rows
        // g and g + 8, so that one 8-byte load fetches both from the N-major B tile, and
        // the 16 columns of a warp are chosen so that each half-warp's loads hit all 32
        // banks of the swizzled tile (16-byte chunks q and q ^ 5, both halves of each:
        // XORed with rows 0-3 or 4-7 of a K8 -- the swizzle -- they stay disjoint).
        const int grp = 2 * (wq % 2) + g / 4;            // 0..3
        const int q = (g % 4 < 2) ? grp : grp ^ 5;       // 16-byte chunk of the 128-byte row
        const int half = g % 2;                          // which 8 bytes of it
        const int box = 2 * c + wq / 2;                  // 32-column box of the B tile
        const int n_local = 32 * box + 4 * q + 2 * half; // C column of rows g, g + 8 (within the tile)
        const int off_lo = box * (BK * 128) + tq * 128 + ((q ^ tq) * 16) + half * 8;
        const int off_hi = box * (BK * 128) + (tq + 4) * 128 + ((q ^ (tq + 4)) * 16) + half * 8;

        constexpr int NACC = (TF32 ? TM : TN) / 2;   // accumulators a thread
        float acc[NACC];
        // Split-K: this thread's index in its warpgroup, and the launch's fixup.
        [[maybe_unused]] const int t128 = threadIdx.x % 128;
        [[maybe_unused]] const int writers = SPLIT ? splitk_writers(slices, per_slice, k_steps) : 0;
        [[maybe_unused]] const SplitK split{partials, counters, slices, writers, CONSUMERS, cluster_tiles, CLUSTER,
                                            int(rank)};
        int it = 0;
        for (int t = first; t < work; t += step) {
            int tmc, tn;
            // zs: the matrix unsplit; split, the pair (matrix z, slice zs - z * slices).
            const int zs = batch_tile(t, tiles_mc, tiles_n, tmc, tn);
            const KSlice item = k_slice(zs, slices, per_slice, k_steps);
            const int z = item.z, ks0 = item.ks0, ks1 = item.ks1;
            const int tm = tmc * CLUSTER + int(rank);
#pragma unroll
            for (int i = 0; i < int(sizeof(acc) / sizeof(float)); ++i) acc[i] = 0.0f;
            fence_operands(acc);
            if constexpr (TF32) {
                // Per K-step: 4 x (K8: 2 8-byte loads a thread) of B^T from the B tile --
                // TMA rounded it to TF32 on the way in (a TFLOAT32 tensor map), as it did A --
                // then 4 wgmmas with A^T (= A's tile, K-major) from shared memory.
                for (int ks = ks0; ks < ks1; ++ks, ++it) {
                    const int s = it % STAGES;
                    mbar_wait(&full[s], (it / STAGES) & 1);
                    const unsigned char* a = a_tiles + s * A_BYTES;
                    const unsigned char* b = b_tiles + s * B_BYTES;
                    u32 fb[BK / MMA_K][4];
#pragma unroll
                    for (int kk = 0; kk < BK / MMA_K; ++kk) {
                        const float2 lo = *reinterpret_cast<const float2*>(b + off_lo + kk * 1024);
                        const float2 hi = *reinterpret_cast<const float2*>(b + off_hi + kk * 1024);
                        fb[kk][0] = __float_as_uint(lo.x);
                        fb[kk][1] = __float_as_uint(lo.y);
                        fb[kk][2] = __float_as_uint(hi.x);
                        fb[kk][3] = __float_as_uint(hi.y);
                    }
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK / MMA_K; ++kk)
                        WgmmaRegA<TM, 2>::mma(acc, fb[kk], make_smem_desc(a + 32 * kk, 16, 1024), 1);
                    wgmma_commit();
                    // The fragments must stay untouched until these wgmmas are done: wait
                    // for them (the other consumer warpgroup keeps the tensor cores busy
                    // meanwhile) and hand the stage back at once.
                    wgmma_wait<0>();
#pragma unroll
                    for (int kk = 0; kk < BK / MMA_K; ++kk) fence_operands(fb[kk]);
                    release_stage<CLUSTER>(&empty[s], lane);
                }
                fence_operands(acc);
            } else {
                int prev = 0;
                for (int ks = ks0; ks < ks1; ++ks, ++it) {
                    const int s = it % STAGES;
                    mbar_wait(&full[s], (it / STAGES) & 1);
                    // This consumer's 64 rows of A: 64 K-major rows, or the 64-wide MN-major box c.
                    const unsigned char* a = a_tiles + s * A_BYTES + c * (64 * 128);
                    const unsigned char* b = b_tiles + s * B_BYTES;
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK / MMA_K; ++kk) {
                        // The kk-th K16 slice of each tile (operand_desc); an MN-major operand
                        // is read through the instruction's transpose bit (1).
                        Wgmma<BN, DT>::template mma<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(
                            acc, operand_desc<A_KMAJOR>(a, kk), operand_desc<B_KMAJOR>(b, kk), 1);
                    }
                    wgmma_commit();
                    // Keep one group in flight; the one before it is done, so its stage
                    // goes back to the producers (one arrival per warp, in every block of
                    // the cluster, as every block's producer writes into it).
                    wgmma_wait<1>();
                    if (ks > ks0) release_stage<CLUSTER>(&empty[prev], lane);
                    prev = s;
                }
                wgmma_wait<0>();
                fence_operands(acc);
                if (ks1 > ks0) release_stage<CLUSTER>(&empty[prev], lane);
            }

            if constexpr (SPLIT) {
                // Split-K's fixup (04_wgmma_work.cuh): a slice before the last leaves its partial
                // and goes on to its next item; the last adds the others' and stores C.
                const bool inside = TF32 ? tm * TM < M && tn * TN + 64 * c < N : tm * TM + 64 * c < M;
                if (!split.fixup(acc, t, zs, z, c, inside, FIXUP_BAR + c, t128)) continue;
            }

            // The epilogue, inlined for each kind of bias (WGMMA_BIAS_*): without one,
            // nothing of it is in the code; with one (16-bit: the only products the host
            // hands a bias), bias[m][n] = bz[m * bias_rs + n * bias_cs], one of the
            // strides 0, is added to alpha * acc in FP32, each value read once per chunk
            // (row) or per tile (column), not once per element.
            const O* bz = bias != nullptr ? bias + z * bias_zs : nullptr;
            auto epilogue = [&](const int bias_kind) {
                [[maybe_unused]] auto bias_of = [&](int m, int n) -> float {
                    if (bias_kind == WGMMA_BIAS_ROW)
                        return n < N ? to_float(bz[n * bias_cs]) : 0.0f;
                    else
                        return m < M ? to_float(bz[m * bias_rs]) : 0.0f;
                };
                if (tma_store) {
                    // Epilogue through shared memory (beta == 0 and a C that TMA can write): the
                    // consumer writes alpha * acc, converted, into one of its two 8 KB staging
                    // buffers (laid out as a TMA box: 128-byte rows, 128-byte swizzle) and one
                    // thread hands it to the copy engine, which writes it to C while this
                    // warpgroup goes on with the next tile, instead of the grid stalling on a
                    // burst of stores from registers (benchmarks/NOTES.md).  The parts of a box
                    // outside C are not written.  Before a buffer is reused, the store issued
                    // from it two chunks ago must have read it.
                    auto begin_chunk = [&]() -> unsigned char* {
                        if (wq == 0 && lane == 0) bulk_wait_read<1>();
                        named_barrier_sync(1 + c, 128);
                        return stage_c + (chunk % 2) * WGMMA_EPI_BYTES;
                    };
                    auto end_chunk = [&](const unsigned char* buf, int x0, int y0, int boxes, int box_bytes,
                                         int box_cols) {
                        fence_proxy_async_smem();
                        named_barrier_sync(1 + c, 128);
                        if (wq == 0 && lane == 0) {
                            for (int i = 0; i < boxes; ++i)
                                tma_store_3d(&map_c, buf + i * box_bytes, x0 + i * box_cols, y0, z);
                            bulk_commit();
                        }
                        ++chunk;
                    };
                    if constexpr (TF32) {
                        // C^T's accumulators: thread holds C[m][n0], C[m][n0 + 1] (n0 = n_local)
                        // for m = 8j + 2 tq + e: d[4j + e] and d[4j + 2 + e].  A chunk is 32 rows
                        // of the consumer's 64 columns: two boxes of 32 rows x 32 floats, warps
                        // 0-1 in the first, 2-3 in the second.  Each half-warp's 8-byte writes
                        // cover all 32 banks (chunks q, q ^ 5 against rows 2 tq + e: disjoint).
#pragma unroll
                        for (int ch = 0; ch < TM / 32; ++ch) {
                            unsigned char* buf = begin_chunk();
                            unsigned char* wb = buf + (wq / 2) * 4096;
#pragma unroll
                            for (int jj = 0; jj < 4; ++jj) {
                                const int j = 4 * ch + jj;
#pragma unroll
                                for (int e = 0; e < 2; ++e) {
                                    const int row = 8 * jj + 2 * tq + e;
                                    *reinterpret_cast<float2*>(wb + row * 128 + ((q ^ (row % 8)) * 16) + half * 8) =
                                        make_float2(alpha * acc[4 * j + e], alpha * acc[4 * j + 2 + e]);
                                }
                            }
                            end_chunk(buf, tn * TN + 64 * c, tm * TM + 32 * ch, 2, 4096, 32);
                        }
                    } else {
                        // Rows 16 wq + g (+ 8) of the consumer's 64, columns 8j + 2 tq (+ 1): a
                        // chunk is one box of 64 rows x 128 bytes (64 16-bit or 32 FP32 columns).
                        constexpr int COLS = 128 / int(sizeof(O));    // columns per chunk
                        // A column's values for the thread's two rows of the tile.
                        [[maybe_unused]] float bc[2];
                        if (bias_kind == WGMMA_BIAS_COLUMN) {
                            bc[0] = bias_of(tm * TM + 64 * c + 16 * wq + g, 0);
                            bc[1] = bias_of(tm * TM + 64 * c + 16 * wq + g + 8, 0);
                        }
#pragma unroll
                        for (int ch = 0; ch < TN / COLS; ++ch) {
                            // A row's values for the chunk's columns, all loaded before the first
                            // is added, so that their latencies overlap instead of adding up.
                            [[maybe_unused]] float bv[COLS / 8][2];
                            if (bias_kind == WGMMA_BIAS_ROW) {
#pragma unroll
                                for (int jj = 0; jj < COLS / 8; ++jj) {
                                    const int n = tn * TN + COLS * ch + 8 * jj + 2 * tq;
                                    bv[jj][0] = bias_of(0, n);
                                    bv[jj][1] = bias_of(0, n + 1);
                                }
                            }
                            unsigned char* buf = begin_chunk();
#pragma unroll
                            for (int jj = 0; jj < COLS / 8; ++jj) {
                                const int j = ch * (COLS / 8) + jj;
#pragma unroll
                                for (int h = 0; h < 2; ++h) {
                                    const int row = 16 * wq + g + 8 * h;
                                    const int byte = (8 * jj + 2 * tq) * int(sizeof(O));   // within the row
                                    O* at = reinterpret_cast<O*>(buf + row * 128 + (((byte / 16) ^ (row % 8)) * 16) +
                                                                 byte % 16);
                                    const float v0 = alpha * acc[4 * j + 2 * h], v1 = alpha * acc[4 * j + 2 * h + 1];
                                    if (bias_kind == WGMMA_BIAS_ROW)
                                        store_two(at, v0 + bv[jj][0], v1 + bv[jj][1]);
                                    else if (bias_kind == WGMMA_BIAS_COLUMN)
                                        store_two(at, v0 + bc[h], v1 + bc[h]);
                                    else
                                        store_two(at, v0, v1);
                                }
                            }
                            end_chunk(buf, tn * TN + COLS * ch, tm * TM + 64 * c, 1, 0, 0);
                        }
                    }
                } else if constexpr (TF32) {
                    // Straight from the registers (beta != 0, or C not TMA-aligned): pairs along a row.
                    O* Cz = C + z * stride_c;
                    const int m0 = tm * TM + 2 * tq, n0 = tn * TN + n_local;
#pragma unroll
                    for (int j = 0; j < TM / 8; ++j) {
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            store_pair(Cz, ldc, m0 + 8 * j + e, n0, M, N, acc[4 * j + e], acc[4 * j + 2 + e], alpha,
                                       beta, pairs);
                    }
                } else {
                    // 16-bit inputs, C not written by TMA (beta != 0, rows or base off the 16-byte
                    // grid, a batch with gaps): through shared memory too, each warp its own 16 rows
                    // in its quarter of the two staging buffers, written out a row at a time
                    // (tensor/04_wgmma_store.cuh), so that a store instruction covers consecutive
                    // elements of one row instead of a few of each of 8 rows.
                    const int m0 = tm * TM + 64 * c + 16 * wq;
                    if (m0 < M)
                        wgmma_store_staged<TN>(acc, stage_c + wq * WGMMA_WARP_STAGE, C + z * stride_c, ldc, M, N,
                                               m0, tn * TN, alpha, beta, pairs, bias_kind, bz, bias_rs, bias_cs,
                                               lane);
                }
            };
            if constexpr (!TF32) {
                // Called with a constant at each site, so that each is compiled for its kind.
                if (bz == nullptr)
                    epilogue(WGMMA_BIAS_NONE);
                else if (bias_rs == 0)
                    epilogue(WGMMA_BIAS_ROW);
                else
                    epilogue(WGMMA_BIAS_COLUMN);
            } else {
                epilogue(WGMMA_BIAS_NONE);
            }
        }
        // The staging buffers must stay until the copy engine has read them.
        if (tma_store && wq == 0 && lane == 0) bulk_wait<0>();
    }
    // No block may leave while a peer can still arrive on its barriers.
    if constexpr (CLUSTER > 1) cluster_sync();
}

}  // namespace gemmlab
