// gemmlab/tensor/01_wmma.cuh: the tensor-core ladder starts here.  Inputs are
// FP16, BF16, or FP32 values rounded to TF32 (DT, type_codes.cuh); accumulation
// is FP32; the output is FP32 or the input's 16-bit type (ODT).  Conventions as
// in the CUDA-core ladder (layout.cuh, edges.cuh).  Rung 1's idea: fragments
// filled and stored element by element through the fragment map of
// wmma_ext.cuh, so any M, N, K and alignment works without shared memory.
// wmma_ext.cuh holds the maps of sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100 and sm_120 (others: its #error).
#pragma once

#include <gemmlab/layout.cuh>
#include <gemmlab/storage.cuh>
#include <gemmlab/tile_order.cuh>
#include <gemmlab/type_codes.cuh>
#include <gemmlab/wmma_ext.cuh>
#include <gemmlab/wmma_types.cuh>

namespace gemmlab {

// K of one MMA tile: 8 for TF32 (m16n16k8), 16 for the 16-bit types.
template <int DT>
__host__ __device__ constexpr int tc_tile_k() { return DT == TYPE_TF32 ? 8 : 16; }

// Fill a matrix_a / matrix_b fragment with the tile at (row0, col0) of a
// rows x cols matrix stored with layout OP, element by element through the
// fragment map; zeros outside the matrix.  Reads global memory directly (no
// shared memory).  TF32 fragments hold floats rounded to TF32.
template <int DT, char OP = 'N', class Frag, class S>
__device__ __forceinline__ void load_fragment_masked(Frag& frag, const S* __restrict__ p, int ld, int row0, int col0,
                                                     int rows, int cols) {
    wmma_ext::foreach_ij(frag, [&](int k, unsigned r, unsigned c) {
        const int gr = row0 + int(r), gc = col0 + int(c);
        const S v = (gr < rows && gc < cols) ? p[elem_offset<OP>(gr, gc, ld)] : S(0.0f);
        if constexpr (DT == TYPE_TF32)
            frag.x[k] = wmma_types::to_tf32(v);
        else
            frag.x[k] = v;
    });
}

// C[row0 + r][col0 + c] = alpha * acc + beta * C for every element of a float
// accumulator fragment that lies inside M x N, converted to C's type.
template <class Frag, class O>
__device__ __forceinline__ void store_accumulator_masked(Frag& acc, O* __restrict__ C, int ldc, int row0, int col0,
                                                         int M, int N, float alpha, float beta) {
    wmma_ext::foreach_ij(acc, [&](int k, unsigned r, unsigned c) {
        const int gr = row0 + int(r), gc = col0 + int(c);
        if (gr < M && gc < N) {
            store_scaled_as(&C[(long long)gr * ldc + gc], acc.x[k], alpha, beta);
        }
    });
}

}  // namespace gemmlab
