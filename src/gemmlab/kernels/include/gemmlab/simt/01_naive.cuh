// gemmlab/simt/01_naive.cuh: the CUDA-core ladder starts here.  Rung 1's inner
// loop, a dot product straight from global memory; rung 2 reuses it with the
// threads mapped the other way round.  The plumbing every rung shares comes in
// with it: operand layouts and batches (layout.cuh), tile numbering
// (tile_order.cuh), edges and the scaled store (edges.cuh).
#pragma once

#include <gemmlab/edges.cuh>
#include <gemmlab/layout.cuh>
#include <gemmlab/tile_order.cuh>

namespace gemmlab {

// Row `row` of op(A) times column `col` of op(B), straight from global memory:
// the whole inner loop of the untiled rungs (1 and 2), which differ only in how
// threads are mapped to (row, col).  (Layouts default to 'N', row-major, for
// code written before layouts existed; gemmlab's kernels pass theirs.)
template <char OPA = 'N', char OPB = 'N'>
__device__ __forceinline__ float dot_row_col(const float* __restrict__ A, int lda,
                                            const float* __restrict__ B, int ldb, int row, int col, int K) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += A[elem_offset<OPA>(row, k, lda)] * B[elem_offset<OPB>(k, col, ldb)];
    return acc;
}

}  // namespace gemmlab
