// gemmlab/tensor_common.cuh: what the tensor-core rungs share.
//
// Conventions as in common.cuh (operands row- or column-major per layout.cuh,
// leading dimensions, any M, N, K, out = alpha * op(A) @ op(B) + beta * out
// with out row-major, beta == 0 never reads out).  Inputs are FP16,
// BF16, or FP32 values rounded to TF32; accumulation is FP32; the output is
// FP32 or the input's 16-bit type.  The fragment maps come from wmma_ext.cuh,
// which exists for sm_80 and sm_90 only (other targets get its #error).
#pragma once

#include <gemmlab/layout.cuh>
#include <gemmlab/wmma_ext.cuh>
#include <gemmlab/wmma_types.cuh>

namespace gemmlab {

constexpr int TC_WARPS_PER_BLOCK = 4;

// K of one MMA tile: 8 for TF32 (m16n16k8), 16 for the 16-bit types.
template <int DT>
__host__ __device__ constexpr int tc_tile_k() { return DT == 2 ? 8 : 16; }

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class O> __device__ __forceinline__ O from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Fill a matrix_a / matrix_b fragment with the tile at (row0, col0) of a
// rows x cols matrix stored with layout OP, element by element through the
// fragment map; zeros outside the matrix.  Reads global memory directly (no
// shared memory).  TF32 (DT 2) fragments hold floats rounded to TF32.
template <int DT, char OP = 'N', class Frag, class S>
__device__ __forceinline__ void load_fragment_masked(Frag& frag, const S* __restrict__ p, int ld, int row0, int col0,
                                                     int rows, int cols) {
    wmma_ext::foreach_ij(frag, [&](int k, unsigned r, unsigned c) {
        const int gr = row0 + int(r), gc = col0 + int(c);
        const S v = (gr < rows && gc < cols) ? p[elem_offset<OP>(gr, gc, ld)] : S(0.0f);
        if constexpr (DT == 2)
            frag.x[k] = nvcuda::wmma::__float_to_tf32(v);
        else
            frag.x[k] = v;
    });
}

// Copy the ROWS x COLS tile at (row0, col0) of a rows x cols matrix of 16-bit
// or float elements, stored with layout OP, into shared memory row-major (row
// stride SLD), zeros outside the matrix; consecutive threads take consecutive
// elements in memory (coalesced), as common.cuh's load_tile does.
template <int ROWS, int COLS, int SLD, int THREADS, char OP = 'N', class S>
__device__ __forceinline__ void stage_tile(S* smem, const S* __restrict__ g, int ld, int row0, int col0, int rows,
                                           int cols, int tid) {
    static_assert((ROWS * COLS) % THREADS == 0, "tile must split evenly over the threads");
    constexpr int RUN = OP == 'N' ? COLS : ROWS;   // consecutive threads walk this side of the tile
    if constexpr (THREADS % RUN == 0) {
        // Every step moves a thread THREADS / RUN lines (rows for 'N', columns for
        // 'T') on, the same side: one 64-bit address, then a constant stride.  An
        // address per element costs registers, which the 512-thread TF32
        // configuration of wmma_warptile cannot spare.
        constexpr int LINES = THREADS / RUN;
        const int r0 = OP == 'N' ? tid / COLS : tid % ROWS, c0 = OP == 'N' ? tid % COLS : tid / ROWS;
        const S* p = g + elem_offset<OP>(row0 + r0, col0 + c0, ld);
        const long long stride = (long long)LINES * ld;
#pragma unroll
        for (int step = 0; step < ROWS * COLS / THREADS; ++step) {
            const int r = OP == 'N' ? r0 + step * LINES : r0, c = OP == 'N' ? c0 : c0 + step * LINES;
            smem[r * SLD + c] = (row0 + r < rows && col0 + c < cols) ? p[step * stride] : S(0.0f);
        }
    } else {
#pragma unroll
        for (int step = 0; step < ROWS * COLS / THREADS; ++step) {
            const int i = step * THREADS + tid;
            const int r = OP == 'N' ? i / COLS : i % ROWS, c = OP == 'N' ? i % COLS : i / ROWS;
            smem[r * SLD + c] = (row0 + r < rows && col0 + c < cols) ? g[elem_offset<OP>(row0 + r, col0 + c, ld)]
                                                                      : S(0.0f);
        }
    }
}

// A matrix_a / matrix_b fragment from a row-major tile in shared memory (p
// 32-byte aligned, ldm a multiple of 16 bytes); TF32 fragments are rounded
// after the load, as the WMMA API requires.
template <int DT, class Frag, class S>
__device__ __forceinline__ void load_fragment(Frag& frag, const S* p, int ldm) {
    nvcuda::wmma::load_matrix_sync(frag, p, ldm);
    if constexpr (DT == 2) {
#pragma unroll
        for (int k = 0; k < frag.num_elements; ++k) frag.x[k] = nvcuda::wmma::__float_to_tf32(frag.x[k]);
    }
}

// C[row0 + r][col0 + c] = alpha * acc + beta * C for every element of a float
// accumulator fragment that lies inside M x N, converted to C's type.
template <class Frag, class O>
__device__ __forceinline__ void store_accumulator_masked(Frag& acc, O* __restrict__ C, int ldc, int row0, int col0,
                                                         int M, int N, float alpha, float beta) {
    wmma_ext::foreach_ij(acc, [&](int k, unsigned r, unsigned c) {
        const int gr = row0 + int(r), gc = col0 + int(c);
        if (gr < M && gc < N) {
            O* out = &C[(long long)gr * ldc + gc];
            const float v = beta == 0.0f ? alpha * acc.x[k] : alpha * acc.x[k] + beta * to_float(*out);
            *out = from_float<O>(v);
        }
    });
}

// One warp writes a ROWS x COLS slab of float results, staged in shared memory
// (row stride SLD floats, 16-byte aligned rows), to C at (row0, col0):
// C = alpha * slab + beta * C (beta == 0 never reads C), converted to C's
// type, outputs outside M x N skipped.  Each lane takes V = 16 / sizeof(O)
// consecutive columns, so neighbouring lanes write neighbouring 16-byte pieces
// of a row (coalesced).  VEC: 16-byte global accesses (C 16-byte aligned,
// ldc * sizeof(O) a multiple of 16, checked by the host); pieces that cross
// the right edge of C, and every piece without VEC, go element by element.
template <int ROWS, int COLS, int SLD, bool VEC, class O>
__device__ __forceinline__ void store_slab_scaled(const float* slab, O* __restrict__ C, int ldc, int row0, int col0,
                                                  int M, int N, float alpha, float beta, unsigned lane) {
    constexpr int V = 16 / int(sizeof(O));
    constexpr int LANES_PER_ROW = COLS / V, ROWS_PER_PASS = 32 / LANES_PER_ROW;
    static_assert(COLS % V == 0 && 32 % LANES_PER_ROW == 0 && ROWS % ROWS_PER_PASS == 0 && SLD % 4 == 0,
                  "a pass of the warp covers whole rows of the slab");
    const int c = int(lane % LANES_PER_ROW) * V, col = col0 + c;
#pragma unroll 1
    for (int r = int(lane / LANES_PER_ROW); r < ROWS; r += ROWS_PER_PASS) {
        const int row = row0 + r;
        if (row >= M || col >= N) continue;
        float v[V];
#pragma unroll
        for (int e = 0; e < V; e += 4) {
            const float4 x = *reinterpret_cast<const float4*>(&slab[r * SLD + c + e]);
            v[e] = alpha * x.x; v[e + 1] = alpha * x.y; v[e + 2] = alpha * x.z; v[e + 3] = alpha * x.w;
        }
        O* out = &C[(long long)row * ldc + col];
        if (VEC && col + V <= N) {
            uint4 piece;
            O* o = reinterpret_cast<O*>(&piece);
            if (beta != 0.0f) {
                piece = *reinterpret_cast<const uint4*>(out);
#pragma unroll
                for (int e = 0; e < V; ++e) v[e] += beta * to_float(o[e]);
            }
#pragma unroll
            for (int e = 0; e < V; ++e) o[e] = from_float<O>(v[e]);
            *reinterpret_cast<uint4*>(out) = piece;
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e)
                if (col + e < N) out[e] = from_float<O>(beta == 0.0f ? v[e] : v[e] + beta * to_float(out[e]));
        }
    }
}

}  // namespace gemmlab
