// gemmlab/tensor/05_wgmma_fp8.cuh: what the FP8 rung adds to the wgmma rung's persistent
// GEMM (tensor/04_wgmma.cuh):
//   wgmma      m64nNk32 .e4m3 / .e5m2: 32 FP8 values of K (32 bytes, as a 16-bit wgmma's
//              16), both operands K-major: the FP8 forms have no transpose immediates (PTX
//              ISA, wgmma.mma_async: imm-trans-a / imm-trans-b are for .f16 / .bf16 only)
//   scales     C = alpha * sum_k sa(m, k) sb(n, k) A[m][k] B[k][n] (+ beta C): outer scales
//              (per tensor, row of A, column of B) multiply the finished tile; block scales
//              (1 x 128 of A, 128 x 128 of B) each 128-wide K-block's partial sum
//   promotion  the tensor cores sum FP8 products with about 14 bits (DeepSeek-V3 report,
//              3.3.2), so the wgmma sums go into a second set of FP32 registers every
//              PROMOTE K-steps (a template argument)
#pragma once

#include <gemmlab/tensor/04_wgmma.cuh>

namespace gemmlab {

// How the scales apply (the SCALING template argument).
constexpr int FP8_SCALE_OUTER = 0;   // per tensor, per row of A / column of B: in the epilogue
constexpr int FP8_SCALE_BLOCK = 1;   // 1 x 128 of A, 128 x 128 of B: per 128-wide K-block
// A block scale covers this many values of K (and, for B, of N): one K-step of the ring.
constexpr int FP8_SCALE_BLOCK_K = 128;

namespace hopper {

// wgmma.mma_async m64nNk32 with FP8 operands, both K-major in shared memory: D[64 x N]
// (+)= A[64 x 32] * B[32 x N], FP32 accumulators in hopper.cuh's layout.  Operands as
// GEMMLAB_WGMMA_SS_16BIT's, without the transpose flags.
template <int N, int AT, int BT> struct WgmmaFp8;
#define GEMMLAB_WGMMA_SS_FP8(N, AT, BT, TA, TB, R, DB, SC)                                               \
    template <> struct WgmmaFp8<N, AT, BT> {                                                             \
        static __device__ __forceinline__ void mma(float* d, u64 desc_a, u64 desc_b, int scale_d) {     \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SC ", 0;\n"                              \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." TA "." TB " "                  \
                         GEMMLAB_WGMMA_REGS##R ", %" #R ", %" #DB ", p, 1, 1;\n}\n"                     \
                         : GEMMLAB_WGMMA_ACC##R(d)                                                       \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                      \
        }                                                                                                \
    };
#define GEMMLAB_WGMMA_SS_FP8_PAIRS(N, R, DB, SC)                                                           \
    GEMMLAB_WGMMA_SS_FP8(N, TYPE_FLOAT8_E4M3, TYPE_FLOAT8_E4M3, "e4m3", "e4m3", R, DB, SC)                 \
    GEMMLAB_WGMMA_SS_FP8(N, TYPE_FLOAT8_E4M3, TYPE_FLOAT8_E5M2, "e4m3", "e5m2", R, DB, SC)                 \
    GEMMLAB_WGMMA_SS_FP8(N, TYPE_FLOAT8_E5M2, TYPE_FLOAT8_E4M3, "e5m2", "e4m3", R, DB, SC)                 \
    GEMMLAB_WGMMA_SS_FP8(N, TYPE_FLOAT8_E5M2, TYPE_FLOAT8_E5M2, "e5m2", "e5m2", R, DB, SC)
GEMMLAB_WGMMA_SS_FP8_PAIRS(64, 32, 33, 34)
GEMMLAB_WGMMA_SS_FP8_PAIRS(128, 64, 65, 66)
GEMMLAB_WGMMA_SS_FP8_PAIRS(256, 128, 129, 130)

// One FP32 value from global into shared memory without passing through registers (the
// producer's copies of the block scales), and an arrival on `bar` once every such copy the
// thread issued has landed (.noinc: the barrier's count includes these arrivals).
__device__ __forceinline__ void cp_async_f32(float* dst, const float* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_arrive_noinc(u64* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

}  // namespace hopper

// Where a thread's accumulators lie (hopper.cuh): acc[4j + 2h + e] is row 8h of the two
// rows the thread holds, column 8j + 2 (lane % 4) + e of the tile.

// total[AT + i] += acc[i] * f_h, f_h the factor of the thread's row h (1 with outer scales:
// they come at the end); AT: where acc's columns start in total (a half of a 256-wide
// tile promoted on its own: 64).  acc was just completed (wgmma_wait<0>); the next
// wgmma on it starts it again from zero (scale-d = 0).
template <int AT, int NTOTAL, int NACC>
__device__ __forceinline__ void fp8_promote(float (&total)[NTOTAL], const float (&acc)[NACC], float f0, float f1) {
    static_assert(AT + NACC <= NTOTAL, "acc lies inside total");
#pragma unroll
    for (int i = 0; i < NACC; ++i) total[AT + i] += acc[i] * ((i & 2) ? f1 : f0);
}

// Outer scales on a finished tile: acc[4j + 2h + e] *= sa_h * sb(n_tile + 8j + 2 tq + e),
// sb(n) = scale_b[n * sb_n]; columns past N get 0 (they are not stored).
template <int NACC>
__device__ __forceinline__ void fp8_scale_outer(float (&acc)[NACC], float sa0, float sa1,
                                                const float* __restrict__ scale_b, long long sb_n, int n_tile, int N,
                                                int tq) {
#pragma unroll
    for (int j = 0; j < NACC / 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int n = n_tile + 8 * j + 2 * tq + e;
            const float sb = n < N ? __ldg(scale_b + n * sb_n) : 0.0f;
            acc[4 * j + e] *= sa0 * sb;
            acc[4 * j + 2 + e] *= sa1 * sb;
        }
    }
}

// A's scale for row m (and, with block scales, K-block kb): scale_a[m * sa_m + kb * sa_k];
// 0 for rows past M, which are computed (the wgmma's 64 rows) but never stored.
__device__ __forceinline__ float fp8_row_scale(const float* __restrict__ scale_a, long long sa_m, long long sa_k,
                                               int m, int kb, int M) {
    return m < M ? __ldg(scale_a + m * sa_m + kb * sa_k) : 0.0f;
}

}  // namespace gemmlab
