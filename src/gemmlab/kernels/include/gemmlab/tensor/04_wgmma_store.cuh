// gemmlab/tensor/04_wgmma_store.cuh: the wgmma rung's epilogue for a C that TMA does not
// write (its rows or base off the 16-byte grid, beta != 0, a batch with gaps): C still
// goes through shared memory, so that global memory sees whole rows.  From wgmma's
// accumulator layout a warp's store instruction would touch 8 rows of C with a few
// bytes each (8 sectors for 64 bytes where a row's length is odd and each element is
// stored alone); staged, one instruction writes 32 (or 64, in pairs) consecutive
// elements of one row.  Needs nothing but storage.cuh: no Hopper instruction.
#pragma once

#include <gemmlab/storage.cuh>

namespace gemmlab {

// The epilogue's bias, as compiled: none; a row of values by column (bias_rs = 0:
// nn.Linear's, added to every row); a column of values by row (bias_cs = 0).  The host
// adds any other bias after the product (wgmma_epilogue_bias in kernels/tensor/wgmma.py).
constexpr int WGMMA_BIAS_NONE = 0;
constexpr int WGMMA_BIAS_ROW = 1;
constexpr int WGMMA_BIAS_COLUMN = 2;

// Two adjacent values in one 8-byte (FP32) or 4-byte (16-bit) access.
template <class O>
struct alignas(2 * sizeof(O)) Pair {
    O x, y;
};

// Two adjacent outputs in one 8-byte (FP32) or 4-byte (16-bit) store; p must be aligned to it.
template <class O>
__device__ __forceinline__ void store_two(O* p, float v0, float v1) {
    *reinterpret_cast<Pair<O>*>(p) = Pair<O>{from_float<O>(v0), from_float<O>(v1)};
}

// Asks L2 for the line that holds p: nothing waits for it and no register holds it.  (Off
// the GPU -- tests/wgmma_store_check.cpp -- nothing.)
__device__ __forceinline__ void prefetch_l2(const void* p) {
#ifdef __CUDA_ARCH__
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

// One chunk of a warp's rows as staged in shared memory (T: the staged type, C's own with
// beta == 0, FP32 with beta != 0 so that beta * C is added before the one rounding).  A
// warp owns 16 rows of its warpgroup's 64 (wgmma's accumulator layout: hopper.cuh), so it
// stages, reads and stores them alone: __syncwarp, no barrier of the warpgroup.  A chunk
// is 128 bytes of each row (64 16-bit or 32 FP32 columns), row-major, rows PITCH bytes
// apart.  The pitch keeps the accumulator writes free of bank conflicts: one store
// instruction writes, for 8 rows g (16-bit, 4 bytes a lane) or 4 (FP32, 8 bytes a lane:
// a half-warp at a time), the 8 * sizeof(T) bytes of its 4 lanes, so rows 8 * sizeof(T)
// bytes apart modulo 128 fill the 32 banks once.  The reads take consecutive bytes of one
// row (or two FP32 rows, one per half-warp): conflict-free whatever the pitch.
template <class T>
struct StagedChunk {
    static constexpr int ROWS = 16;
    static constexpr int COLS = 128 / int(sizeof(T));
    static constexpr int PITCH = 128 + 8 * int(sizeof(T));
    static constexpr int BYTES = ROWS * PITCH;
};

// What a lane moves at a time: one value, or a pair (V = 2).
template <int V, class T>
struct RunOf {
    using type = T;
};
template <class T>
struct RunOf<2, T> {
    using type = Pair<T>;
};

// The warp writes a staged chunk -- rows m0.., columns n0.. of C -- to C, V = 1 or 2
// consecutive elements a lane: lane l's i-th run is u = l + 32 i, row u / (COLS / V),
// column V * (u % (COLS / V)), so one instruction covers 32 V consecutive elements of a
// row (or two rows of 16 V).  Rows past M and columns past N are not touched.  T wider
// than O, or FP32 output with beta != 0 (READ_C): out = staged + beta * C, rounded once.
// The runs go GROUP at a time, in a loop that is not unrolled: the loads of a group
// (the staged values, unconditional: the buffer holds every run; C's, where inside) are
// issued before the first value is used, and only a group's addresses and values take
// registers beside the accumulators (more made ptxas spill).  V = 2 needs pairs aligned
// in C (even ldc, base on 2 elements).
template <int V, int GROUP_MAX, bool READ_C, class T, class O>
__device__ __forceinline__ void staged_write_out(const unsigned char* buf, O* __restrict__ C, int ldc, int M, int N,
                                                 int m0, int n0, float beta, int lane) {
    using K = StagedChunk<T>;
    using R = typename RunOf<V, T>::type;
    constexpr int PER_ROW = K::COLS / V, RUNS = K::ROWS * PER_ROW / 32;
    constexpr int GROUP = RUNS < GROUP_MAX ? RUNS : GROUP_MAX;
    static_assert(RUNS % GROUP == 0, "whole groups of runs");
    static_assert(!READ_C || sizeof(T) == 4, "beta * C is added to FP32 values");
#pragma unroll 1
    for (int i0 = 0; i0 < RUNS; i0 += GROUP) {
        R staged[GROUP];
        [[maybe_unused]] Pair<O> old[GROUP];   // as stored: a 16-bit pair takes one register
#pragma unroll
        for (int i = 0; i < GROUP; ++i) {
            const int u = lane + 32 * (i0 + i), r = u / PER_ROW, col = V * (u % PER_ROW);
            staged[i] = *reinterpret_cast<const R*>(buf + r * K::PITCH + col * int(sizeof(T)));
            if constexpr (READ_C) {
                const int m = m0 + r, n = n0 + col;
                const O* p = C + (long long)m * ldc + n;
                old[i] = Pair<O>{from_float<O>(0.0f), from_float<O>(0.0f)};
                if (m < M && n < N) {
                    if (V == 2 && n + 1 < N)
                        old[i] = *reinterpret_cast<const Pair<O>*>(p);
                    else
                        old[i].x = p[0];
                }
            }
        }
#pragma unroll
        for (int i = 0; i < GROUP; ++i) {
            const int u = lane + 32 * (i0 + i), m = m0 + u / PER_ROW, n = n0 + V * (u % PER_ROW);
            if (m >= M || n >= N) continue;
            O* p = C + (long long)m * ldc + n;
            const bool two = V == 2 && n + 1 < N;
            if constexpr (sizeof(T) == 2) {   // C's own 16-bit values (beta == 0): copied as they are
                if constexpr (V == 2) {
                    if (two)
                        *reinterpret_cast<Pair<O>*>(p) = staged[i];
                    else
                        p[0] = staged[i].x;
                } else {
                    p[0] = staged[i];
                }
            } else {
                float v0, v1 = 0.0f;
                if constexpr (V == 2) {
                    v0 = staged[i].x;
                    v1 = staged[i].y;
                } else {
                    v0 = staged[i];
                }
                if constexpr (READ_C) {
                    v0 += beta * to_float(old[i].x);
                    v1 += beta * to_float(old[i].y);
                }
                if (two)
                    store_two(p, v0, v1);
                else
                    p[0] = from_float<O>(v0);
            }
        }
    }
}

// One warp's 16 rows of a consumer's 64 x TN tile of C, rows m0.., columns n_tile.., from
// its accumulators (hopper.cuh's layout: acc[4j + 2h + e] is row lane / 4 + 8h of the
// warp's, column 8j + 2 (lane % 4) + e), through StagedChunk<T> at buf, a chunk of
// columns at a time: alpha * acc + bias in FP32, converted to T; __syncwarp; the rows
// written out (staged_write_out, in pairs where `pairs`); __syncwarp before the buffer
// is reused.  Chunks wholly past N are skipped.  The bias: bias[m * bias_rs + n * bias_cs],
// bias_kind says which of the strides is 0 (a constant where the caller is inlined); a
// row's values are loaded per chunk, all before the first is added, a column's per tile.
// The loop over chunks is not unrolled, so that the write-out is compiled once: each pass
// picks its chunk's writes from the accumulators, which an index known at compile time
// keeps in registers, by a branch the whole warp takes.
template <class T, int TN, class O>
__device__ __forceinline__ void wgmma_staged_epilogue(const float (&acc)[TN / 2], unsigned char* buf,
                                                      O* __restrict__ C, int ldc, int M, int N, int m0, int n_tile,
                                                      float alpha, float beta, bool pairs, int bias_kind,
                                                      const O* __restrict__ bias, long long bias_rs,
                                                      long long bias_cs, int lane) {
    using K = StagedChunk<T>;
    constexpr int COLS = K::COLS, CHUNKS = TN / COLS;
    // The write-out's runs at a time (staged_write_out), reading C or not: beside the 128
    // accumulators of a 256-column tile, 4 runs reading C made ptxas spill in some
    // instantiations, 2 do not.
    constexpr int GROUP_C = TN >= 256 ? 2 : 4, GROUP = TN >= 256 ? 4 : 8;
    static_assert(TN % COLS == 0, "whole chunks");
    const int g = lane / 4, tq = lane % 4;
    // Staged in C's own type means beta == 0; C is read only otherwise (so T is FP32 where it
    // is read).  Then every line of the warp's rows of C is asked of L2 first, so that the
    // write-out's loads, a few in flight a lane, wait for L2 rather than for DRAM.
    const bool read_c = sizeof(T) != sizeof(O) || (sizeof(O) == 4 && beta != 0.0f);
    if (read_c) {
        constexpr int PER_LINE = 128 / int(sizeof(O)), LINES = TN / PER_LINE + 1;   // a row's, at most
        const int last = (N < n_tile + TN ? N : n_tile + TN) - 1;
#pragma unroll 1
        for (int i = lane; i < K::ROWS * LINES; i += 32) {
            const int m = m0 + i / LINES, n = n_tile + (i % LINES) * PER_LINE;
            if (m < M) prefetch_l2(C + (long long)m * ldc + (n < last ? n : last));
        }
    }
    [[maybe_unused]] float bc[2];
    if (bias_kind == WGMMA_BIAS_COLUMN) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + g + 8 * h;
            bc[h] = m < M ? to_float(bias[m * bias_rs]) : 0.0f;
        }
    }
#pragma unroll 1
    for (int ch = 0; ch < CHUNKS; ++ch) {
        const int n0 = n_tile + ch * COLS;
        if (n0 >= N) break;
        [[maybe_unused]] float bv[COLS / 8][2];
        if (bias_kind == WGMMA_BIAS_ROW) {
#pragma unroll
            for (int jj = 0; jj < COLS / 8; ++jj) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = n0 + 8 * jj + 2 * tq + e;
                    bv[jj][e] = n < N ? to_float(bias[n * bias_cs]) : 0.0f;
                }
            }
        }
#pragma unroll
        for (int k = 0; k < CHUNKS; ++k) {
            if (k != ch) continue;
#pragma unroll
            for (int jj = 0; jj < COLS / 8; ++jj) {
                const int j = k * (COLS / 8) + jj;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float v0 = alpha * acc[4 * j + 2 * h], v1 = alpha * acc[4 * j + 2 * h + 1];
                    if (bias_kind == WGMMA_BIAS_ROW) {
                        v0 += bv[jj][0];
                        v1 += bv[jj][1];
                    } else if (bias_kind == WGMMA_BIAS_COLUMN) {
                        v0 += bc[h];
                        v1 += bc[h];
                    }
                    store_two(reinterpret_cast<T*>(buf + (g + 8 * h) * K::PITCH) + 8 * jj + 2 * tq, v0, v1);
                }
            }
        }
        __syncwarp();
        if (read_c) {
            if (pairs)
                staged_write_out<2, GROUP_C, sizeof(T) == 4, T>(buf, C, ldc, M, N, m0, n0, beta, lane);
            else
                staged_write_out<1, GROUP_C, sizeof(T) == 4, T>(buf, C, ldc, M, N, m0, n0, beta, lane);
        } else {
            if (pairs)
                staged_write_out<2, GROUP, false, T>(buf, C, ldc, M, N, m0, n0, beta, lane);
            else
                staged_write_out<1, GROUP, false, T>(buf, C, ldc, M, N, m0, n0, beta, lane);
        }
        __syncwarp();
    }
}

// The staged epilogue of one warp: a 16-bit C staged in its own type where beta == 0
// (half the shared memory traffic and twice the columns a chunk), else in FP32.
template <int TN, class O>
__device__ __forceinline__ void wgmma_store_staged(const float (&acc)[TN / 2], unsigned char* buf, O* __restrict__ C,
                                                   int ldc, int M, int N, int m0, int n_tile, float alpha, float beta,
                                                   bool pairs, int bias_kind, const O* __restrict__ bias,
                                                   long long bias_rs, long long bias_cs, int lane) {
    if constexpr (sizeof(O) == 2) {
        if (beta == 0.0f) {
            wgmma_staged_epilogue<O, TN>(acc, buf, C, ldc, M, N, m0, n_tile, alpha, beta, pairs, bias_kind, bias,
                                         bias_rs, bias_cs, lane);
            return;
        }
    }
    wgmma_staged_epilogue<float, TN>(acc, buf, C, ldc, M, N, m0, n_tile, alpha, beta, pairs, bias_kind, bias, bias_rs,
                                     bias_cs, lane);
}

}  // namespace gemmlab
