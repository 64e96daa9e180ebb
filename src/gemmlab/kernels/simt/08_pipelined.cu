// Rung 8, pipelined: rung 7's warp tiling with the global loads off the critical
// path.  Tiles move global -> shared with cp.async (simt/08_pipelined.cuh),
// STAGES deep: while the warps compute on K-step k, the copies for k+1 ..
// k+STAGES-1 are in flight, hiding the load latency rungs 4-7 wait for at every
// barrier; fragments are double-buffered in registers.  For skinny outputs with
// a long K the host splits K over gridDim.y blocks (split-K, below).
#include <gemmlab/simt/08_pipelined.cuh>

namespace gemmlab {

// VEC: A and B are read 16 bytes at a time -- their rows on the 16-byte grid in whole groups
// of 4 floats, or aligned copies of them (the staging pre-pass, kernels/simt/pipelined.py).
// STAGE_C: the 16-byte variant's C off the grid goes through shared memory (below); the host
// asks for it only where C is off the grid, so that the other calls keep its registers.
template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int STAGES, int REG_TRANSPOSE, bool VEC,
          bool STAGE_C, char OPA, char OPB>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)  // 1: see blocktile_2d
pipelined(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
          const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc,
          long long stride_a, long long stride_b, long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    constexpr int TN = 4;
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int WMITER = (WM * WN) / (32 * TM * TN * WNITER);
    constexpr int WSUBM = WM / WMITER, WSUBN = WN / WNITER;
    // Both tiles K-major in shared memory whatever the layouts (simt/08_pipelined.cuh):
    // a row-major A is transposed into rows padded by 4 floats, which spreads the
    // transposing writes over the banks.  (Keeping A row-major and reading 4 K-steps
    // of a row at once costs a thread 4x the A registers, which 128 accumulators
    // cannot spare: benchmarks/NOTES.md.)  The transpose is one 4-byte cp.async per
    // element, or with REG_TRANSPOSE (16-byte aligned operands only) 16-byte loads
    // through registers, written transposed after the K-step's math.
    constexpr int ASLD = BM + 4;   // padded row of the transposed A tile, still 16-byte aligned
    constexpr int BSLD = OPB == 'T' ? BN + 4 : BN;   // padded only when B is transposed too
    static_assert((WSUBM / TM) * (WSUBN / TN) == 32, "a warp subtile is 32 threads' tiles");
    extern __shared__ __align__(16) float smem[];
    float (*As)[BK][ASLD] = reinterpret_cast<float (*)[BK][ASLD]>(smem);                   // [STAGES]
    float (*Bs)[BK][BSLD] = reinterpret_cast<float (*)[BK][BSLD]>(smem + STAGES * BK * ASLD);  // [STAGES]
    const TileOrigin tile = block_tile_origin<BM, BN>(N);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int warp_row = (warp / (BN / WN)) * WM, warp_col = (warp % (BN / WN)) * WN;
    const int lane_row = (lane / (WSUBN / TN)) * TM, lane_col = (lane % (WSUBN / TN)) * TN;
    // Split-K: with gridDim.y > 1 (too few output tiles to fill the GPU), block y
    // takes the y-th contiguous range of K-steps and writes its partial tile to
    // slice y of a workspace (C + y * M * ldc; the host passes alpha = 1, beta = 0),
    // which splitk_reduce.cu adds into C.  gridDim.y == 1 is the plain GEMM: one
    // range covering all of K, slice 0 = C itself.
    const int k_tiles_all = (K + BK - 1) / BK;
    const int per_split = (k_tiles_all + gridDim.y - 1) / gridDim.y;
    const int kt_begin = blockIdx.y * per_split;
    const int k_tiles = max(0, min(per_split, k_tiles_all - kt_begin));   // K-steps of this block
    A += elem_offset<OPA>(0, kt_begin * BK, lda);                        // column kt_begin * BK of op(A)
    B += elem_offset<OPB>(kt_begin * BK, 0, ldb);                        // row kt_begin * BK of op(B)
    K -= kt_begin * BK;                                                  // zero-fill stops at the real end
    C += (long long)blockIdx.y * M * ldc;                                // this split's slice

    constexpr bool A_IN_REGS = REG_TRANSPOSE && VEC && OPA == 'N';   // rows of A run along K
    constexpr bool B_IN_REGS = REG_TRANSPOSE && VEC && OPB == 'T';   // so do columns of op(B)
    RegisterTransposedTile<BM, BK, THREADS> a_regs;   // (unused ones compile away)
    RegisterTransposedTile<BN, BK, THREADS> b_regs;
    auto issue = [&](int kt) {   // start the copies (or the loads) of K-step kt
        const int s = kt % STAGES;
        if constexpr (A_IN_REGS)
            a_regs.fetch(A, lda, tile.row, kt * BK, M, K, tid);
        else
            cp_async_a_tile<BM, BK, ASLD, THREADS, VEC, OPA>(&As[s][0][0], A, lda, tile.row, kt * BK, M, K, tid);
        if constexpr (B_IN_REGS)
            b_regs.fetch(B, ldb, tile.col, kt * BK, N, K, tid);
        else
            cp_async_b_tile<BK, BN, BSLD, THREADS, VEC, OPB>(&Bs[s][0][0], B, ldb, kt * BK, tile.col, K, N, tid);
    };
    auto land = [&](int kt) {    // the loaded registers into K-step kt's stage
        const int s = kt % STAGES;
        if constexpr (A_IN_REGS) a_regs.template store_transposed<ASLD>(&As[s][0][0], tid);
        if constexpr (B_IN_REGS) b_regs.template store_transposed<BSLD>(&Bs[s][0][0], tid);
    };
    // Prologue: STAGES-1 steps in flight.  Every step commits a batch (empty
    // past the end) so that "wait until at most STAGES-2 batches are pending"
    // always means "step kt has landed".
#pragma unroll
    for (int kt = 0; kt < STAGES - 1; ++kt) {
        if (kt < k_tiles) {
            issue(kt);
            land(kt);
        }
        __pipeline_commit();
    }

    float acc[WMITER][WNITER][TM][TN] = {};
    float a_frag[2][WMITER][TM], b_frag[2][WNITER][TN];   // fragments of K-steps k and k+1
    for (int kt = 0; kt < k_tiles; ++kt) {
        __pipeline_wait_prior(STAGES - 2);
        __syncthreads();   // step kt visible to all; everyone is done with step kt-1's stage
        const bool refill = kt + STAGES - 1 < k_tiles;
        if (refill) issue(kt + STAGES - 1);   // refills step kt-1's stage
        __pipeline_commit();
        const float* a_s = &As[kt % STAGES][0][warp_row + lane_row];
        const float* b_s = &Bs[kt % STAGES][0][warp_col + lane_col];
        load_warp_fragments<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(a_frag[0], b_frag[0], a_s, b_s);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // Register double buffering: the next K-step's fragments are loaded before
            // this one's FMAs, so the shared-memory latency hides behind them.
            if (k + 1 < BK)
                load_warp_fragments<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(
                    a_frag[(k + 1) % 2], b_frag[(k + 1) % 2], a_s + (k + 1) * ASLD, b_s + (k + 1) * BSLD);
            warp_fragments_product(acc, a_frag[k % 2], b_frag[k % 2]);
        }
        // Registers loaded at the top of this step go to step kt-1's stage, free since the
        // barrier above; the next iteration's barrier orders them before any read.
        if (refill) land(kt + STAGES - 1);
    }
    __pipeline_wait_prior(0);
    // C in 16-byte stores where its rows allow, whatever VEC says of A and B: operands read
    // in place or from aligned copies can feed a C of odd width (a vocabulary's logits).
    // Otherwise through shared memory a warp's subtile at a time, where the warps' regions fit
    // in the ring and the tile has registers to spare: always in the variant that reads A and
    // B 4 bytes at a time, and in the 16-byte one compiled with STAGE_C (compiled into every
    // 16-byte instantiation, the shared-memory way cost the main loop registers and speed:
    // benchmarks/NOTES.md); else 4 bytes at a time from the registers.
    if (N % 4 == 0 && ldc % 4 == 0 && reinterpret_cast<unsigned long long>(C) % 16 == 0) {
        store_warp_subtiles<WMITER, WNITER, WSUBM, WSUBN, TM, TN, true>(
            C, ldc, tile.row + warp_row + lane_row, tile.col + warp_col + lane_col, M, N, acc, alpha, beta);
        return;
    }
    constexpr int REGION = WSUBM * (WSUBN + 1);   // floats of a warp's staged subtile
    // No registers to spare: the 128-thread tiles of 64 x 128 elements, whose 4-byte variant is
    // at 255 already (the staging spills there).  pipelined.py's c_through_smem mirrors this.
    constexpr bool ROOM = !(THREADS == 128 && BM * BN == 64 * 128);
    if constexpr ((!VEC || STAGE_C) && ROOM && (THREADS / 32) * REGION <= STAGES * BK * (ASLD + BSLD)) {
        __syncthreads();   // every warp done with the ring
        store_warp_subtiles_staged<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(
            C, ldc, tile.row + warp_row, tile.col + warp_col, M, N, acc, alpha, beta, smem + warp * REGION, lane_row,
            lane_col, lane);
    } else {
        store_warp_subtiles<WMITER, WNITER, WSUBM, WSUBN, TM, TN, false>(
            C, ldc, tile.row + warp_row + lane_row, tile.col + warp_col + lane_col, M, N, acc, alpha, beta);
    }
}

}  // namespace gemmlab
