// gemmlab/tensor/04_wgmma.cuh: tensor rung 4's idea beyond the Hopper
// instructions themselves (hopper.cuh: TMA, mbarrier, wgmma, setmaxnreg): a
// persistent, warp-specialised GEMM.  Its pieces that are not about the multiply
// -- the work items of the persistent loop (04_wgmma_work.cuh), handing a
// shared-memory stage back to the producer, the masked stores from wgmma's
// accumulator layout -- are shared with the error-corrected ec_wgmma and with the
// rung's steps (04_wgmma_steps.cuh).  Its batches (batch_tile) are one launch: the
// persistent loop walks the tiles of every matrix.
#pragma once

#include <gemmlab/hopper.cuh>
#include <gemmlab/tensor/03_mma_pipelined.cuh>
#include <gemmlab/tensor/04_wgmma_store.cuh>
#include <gemmlab/tensor/04_wgmma_work.cuh>

namespace gemmlab {

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

// A consumer warpgroup's 64 x BN accumulators to rows m0.., columns n0.. of C, straight from
// the registers (hopper.cuh's layout: thread t holds rows 16 (t / 32) + (t % 32) / 4 (+ 8),
// columns 8j + 2 (t % 4) (+ 1)): alpha * acc + beta * C, two columns a store where `pairs`,
// nothing outside M x N.  The ec_wgmma rung and the steps toward tensor rung 4 store this way.
template <int BN, class O>
__device__ __forceinline__ void store_accumulators(const float (&acc)[BN / 2], O* __restrict__ C, int ldc, int M,
                                                   int N, int m0, int n0, float alpha, float beta, bool pairs) {
    const int t = threadIdx.x % 128;
    const int row = m0 + 16 * (t / 32) + (t % 32) / 4, col = n0 + 2 * (t % 4);
    if (pairs && beta == 0.0f && m0 + 64 <= M && n0 + BN <= N) {
        // The warpgroup's whole tile inside C and nothing to read back: no tests at each store
        // (with them, the epilogue of a short-K tile was most of its instructions).
        O* p = C + (long long)row * ldc + col;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                store_two(p + (long long)(8 * h) * ldc + 8 * j, alpha * acc[4 * j + 2 * h], alpha * acc[4 * j + 2 * h + 1]);
        return;
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
            store_pair(C, ldc, row + 8 * h, col + 8 * j, M, N, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], alpha, beta,
                       pairs);
    }
}

// Whether C takes paired stores: an even ldc and a base on two elements.
template <class O>
__device__ __forceinline__ bool pairs_aligned(const O* C, int ldc) {
    return ldc % 2 == 0 && reinterpret_cast<hopper::u64>(C) % (2 * sizeof(O)) == 0;
}

// One operand's tile of one K-step into shared memory, laid out as stored, in the
// 128-byte swizzle (hopper.cuh): ROWS rows of M (A) or N (B) from r0, 128 bytes of K
// from k0, in boxes of BOX rows, each BOX * 128 bytes after the one before:
//   K-major (stored with K contiguous: A 'N' is M x K, B 'T' is N x K): a box is BOX
//     rows of 128 bytes of K, at map coordinates (k0, row);
//   MN-major (stored with M or N contiguous: A 'T' is K x M, B 'N' is K x N): a box
//     is 128 / EB K-rows of BOX = 128 / EB values of M or N, at coordinates (row, k0).
// In a cluster, block `rank` copies boxes rank, rank + CLUSTER, ... and multicasts
// each to every block; all their bytes complete on `bar` (in every block).  The
// map is 3-D: `z` is the matrix of the batch (0 for an operand every matrix shares).
template <bool K_MAJOR, int ROWS, int BOX, int CLUSTER>
__device__ __forceinline__ void load_operand_tile(unsigned char* dst, const hopper::TensorMap* map, int r0, int k0,
                                                  int z, hopper::u64* bar, hopper::u32 rank) {
#pragma unroll
    for (int j = int(rank); j < ROWS / BOX; j += CLUSTER) {
        const int row = r0 + BOX * j;
        const int c0 = K_MAJOR ? k0 : row, c1 = K_MAJOR ? row : k0;
        if constexpr (CLUSTER > 1)
            hopper::tma_load_3d_multicast(dst + j * (BOX * 128), map, c0, c1, z, bar, (1 << CLUSTER) - 1);
        else
            hopper::tma_load_3d(dst + j * (BOX * 128), map, c0, c1, z, bar);
    }
}

// The descriptor of the kk-th K16 slice of a 16-bit operand tile (load_operand_tile's
// layout, starting at the rows this wgmma reads), 128-byte swizzle:
//   K-major: the slice starts 32 bytes further along each swizzled row (the hardware
//     applies the swizzle from the address bits); 8-row groups 1024 bytes apart (SBO);
//   MN-major: the slice is 16 K-rows further (16 * 128 bytes); 8-K-row groups 1024 bytes
//     apart (SBO); the 64-wide chunks of M or N (boxes) 64 * 128 bytes apart (LBO).
template <bool K_MAJOR>
__device__ __forceinline__ hopper::u64 operand_desc(const unsigned char* tile, int kk) {
    return K_MAJOR ? hopper::make_smem_desc(tile + 32 * kk, 16, 1024)
                   : hopper::make_smem_desc(tile + kk * 16 * 128, 64 * 128, 1024);
}

// Hand a stage back: one arrival per warp, on the stage's empty barrier in every
// block of the cluster (each block's producer multicasts into all of them).
template <int CLUSTER>
__device__ __forceinline__ void release_stage(hopper::u64* empty, int lane) {
    __syncwarp();
    if (lane == 0) {
        if constexpr (CLUSTER == 1) {
            hopper::mbar_arrive(empty);
        } else {
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r) hopper::mbar_arrive_cluster(empty, r);
        }
    }
}

}  // namespace gemmlab
