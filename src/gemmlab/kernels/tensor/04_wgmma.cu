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
// its threads issues the copies, the rest idle), warpgroups 1..BM/64 are
// consumers, one 64-row slice of the BM x BN output tile each.  setmaxnreg
// moves registers from the producer (40) to the consumers (232), which hold the
// accumulators.  The grid is persistent: min(#SMs, tiles) blocks walk the output
// tiles in groups of GROUP_M tile-rows, so blocks working at the same time share
// rows of A and columns of B in L2; the producer runs ahead into the next tile
// while the consumers write this one out.
//
// Operand layouts.  A (row-major M x K) is K-major, what wgmma reads natively.
// B (row-major K x N) is N-major: for FP16/BF16 the descriptor describes
// 64-column chunks of K-rows and the instruction's transpose bit (imm-trans-b)
// reads them as such.  TF32 wgmma has no transpose, so for TF32 the launcher
// first packs B^T (N x K) and a copy of A, both rounded to TF32, into a
// K-major workspace (tensor/tf32_pack.cu) and the maps point there.
//
// The kernel takes the usual (M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) plus
// the two tensor maps (built on the host: runtime/tma.py); A and B themselves
// are only read through the maps.  Epilogue: C = alpha * acc + beta * C from
// the registers, masked at the edges; beta == 0 never reads C; alpha == 0 reads
// neither A nor B.
#include <gemmlab/hopper.cuh>
#include <gemmlab/tensor_common.cuh>

namespace gemmlab {

constexpr int WGMMA_GROUP_M = 8;          // tile-rows per group of the tile order
constexpr int WGMMA_PRODUCER_REGS = 40;   // setmaxnreg: producer warpgroup
constexpr int WGMMA_CONSUMER_REGS = 232;  // setmaxnreg: each consumer warpgroup

// Tile `t` of a tiles_m x tiles_n grid in grouped order: down a group of
// GROUP_M tile-rows first, then to the next column, then to the next group.
__device__ __forceinline__ void grouped_tile(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
    const int per_group = WGMMA_GROUP_M * tiles_n;
    const int first_m = (t / per_group) * WGMMA_GROUP_M;
    const int rows = min(tiles_m - first_m, WGMMA_GROUP_M);
    const int r = t % per_group;
    tm = first_m + r % rows;
    tn = r / rows;
}

// C[row][col], C[row][col + 1] = alpha * (v0, v1) + beta * old, whichever lie inside.
template <class O>
__device__ __forceinline__ void store_pair(O* __restrict__ C, int ldc, int row, int col, int M, int N, float v0,
                                           float v1, float alpha, float beta, bool pairs) {
    if (row >= M || col >= N) return;
    O* p = C + (long long)row * ldc + col;
    if (pairs && col + 1 < N) {   // one 8-byte (FP32) or 4-byte (16-bit) store
        float r0 = alpha * v0, r1 = alpha * v1;
        if constexpr (sizeof(O) == 4) {
            float2* q = reinterpret_cast<float2*>(p);
            if (beta != 0.0f) { const float2 o = *q; r0 += beta * o.x; r1 += beta * o.y; }
            *q = make_float2(r0, r1);
        } else {
            struct alignas(4) Two { O x, y; };
            Two* q = reinterpret_cast<Two*>(p);
            if (beta != 0.0f) { const Two o = *q; r0 += beta * to_float(o.x); r1 += beta * to_float(o.y); }
            *q = Two{from_float<O>(r0), from_float<O>(r1)};
        }
        return;
    }
    p[0] = from_float<O>(beta == 0.0f ? alpha * v0 : alpha * v0 + beta * to_float(p[0]));
    if (col + 1 < N) p[1] = from_float<O>(beta == 0.0f ? alpha * v1 : alpha * v1 + beta * to_float(p[1]));
}

template <int DT, int ODT, int BM, int BN, int STAGES>
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
    constexpr bool B_N_MAJOR = DT != 2;       // TF32 reads the packed, K-major B^T
    constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
    constexpr int CONSUMERS = BM / 64;
    static_assert(BM % 64 == 0 && BN % 64 == 0 && (BN == 128 || BN == 256), "tile shape");
    (void)A; (void)lda; (void)B; (void)ldb;

    // Dynamic shared memory, rounded up to 1024 bytes (the swizzle atom):
    // STAGES tiles of A, STAGES tiles of B, then the full and empty barriers.
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~u64(1023));
    unsigned char* a_tiles = smem;
    unsigned char* b_tiles = smem + STAGES * A_BYTES;
    u64* full = reinterpret_cast<u64*>(b_tiles + STAGES * B_BYTES);
    u64* empty = full + STAGES;

    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);                    // the producer's arrive (+ the copies' bytes)
            mbar_init(&empty[s], CONSUMERS * 128);     // every consumer thread
        }
        mbar_fence_init();
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
    }
    __syncthreads();

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const int k_steps = alpha == 0.0f ? 0 : (K + BK - 1) / BK;   // alpha = 0 reads neither A nor B

    if (wg == 0) {
        // Producer: one thread walks the same tiles as the consumers and keeps
        // the ring full; a stage is refilled once all consumers released it.
        setmaxnreg_dec<WGMMA_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int tm, tn;
                grouped_tile(t, tiles_m, tiles_n, tm, tn);
                for (int ks = 0; ks < k_steps; ++ks, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
                    tma_load_2d(a_tiles + s * A_BYTES, &map_a, ks * BK, tm * BM, &full[s]);
                    if constexpr (B_N_MAJOR) {
                        // BN/64 boxes of 64 columns x BK rows, each 64 rows of 128 bytes.
#pragma unroll
                        for (int j = 0; j < BN / 64; ++j)
                            tma_load_2d(b_tiles + s * B_BYTES + j * (BK * 128), &map_b, tn * BN + 64 * j, ks * BK,
                                        &full[s]);
                    } else {
                        tma_load_2d(b_tiles + s * B_BYTES, &map_b, ks * BK, tn * BN, &full[s]);
                    }
                }
            }
        }
    } else {
        // Consumers: warpgroup c owns rows [64c, 64c + 64) of the block tile.
        setmaxnreg_inc<WGMMA_CONSUMER_REGS>();
        const int c = wg - 1;
        const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
        // 8-byte / 4-byte paired stores need an even ldc and an aligned C.
        const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<u64>(C) % (2 * sizeof(O)) == 0);
        float acc[BN / 2];
        int it = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            int tm, tn;
            grouped_tile(t, tiles_m, tiles_n, tm, tn);
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
            fence_operands(acc);
            int prev = 0;
            for (int ks = 0; ks < k_steps; ++ks, ++it) {
                const int s = it % STAGES;
                mbar_wait(&full[s], (it / STAGES) & 1);
                const unsigned char* a = a_tiles + s * A_BYTES + c * (64 * 128);
                const unsigned char* b = b_tiles + s * B_BYTES;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / MMA_K; ++kk) {
                    // K-major A: the next MMA_K columns start 32 bytes further along
                    // the (swizzled) row; the hardware applies the swizzle.
                    const u64 da = make_smem_desc(a + 32 * kk, 1, 1024);
                    // N-major B: the next MMA_K rows start MMA_K * 128 bytes further;
                    // 64-column chunks lie BK * 128 bytes apart.  K-major B^T: as A.
                    const u64 db = B_N_MAJOR ? make_smem_desc(b + kk * MMA_K * 128, BK * 128, 1024)
                                             : make_smem_desc(b + 32 * kk, 1, 1024);
                    Wgmma<BN, DT>::template mma<0, B_N_MAJOR ? 1 : 0>(acc, da, db, 1);
                }
                wgmma_commit();
                // Keep one group in flight; the one before it is done, so its stage
                // can be handed back to the producer.
                wgmma_wait<1>();
                if (ks > 0) mbar_arrive(&empty[prev]);
                prev = s;
            }
            wgmma_wait<0>();
            fence_operands(acc);
            if (k_steps > 0) mbar_arrive(&empty[prev]);

            // Epilogue straight from the accumulator registers (layout: hopper.cuh).
            const int row0 = tm * BM + c * 64 + warp * 16 + lane / 4;
            const int col0 = tn * BN + 2 * (lane % 4);
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    store_pair(C, ldc, row0 + 8 * h, col0 + 8 * j, M, N, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1],
                               alpha, beta, pairs);
            }
        }
    }
}

}  // namespace gemmlab
