// gemmlab/edges.cuh: how every FP32 (CUDA-core) rung treats the matrix edges
// and the output.  Conventions: out = alpha * op(A) @ op(B) + beta * out, each
// operand stored row-major ('N') or column-major ('T') with a leading dimension
// (layout.cuh), out row-major.  Every kernel is correct for any M, N, K >= 0:
// tiles that stick out of a matrix read zeros (load_or_zero) and skip their
// out-of-range stores.
#pragma once

#include <gemmlab/layout.cuh>

namespace gemmlab {

// Element (row, col) of a rows x cols matrix stored with layout OP, or 0
// outside it.  Padding edge tiles with zeros lets them run the same inner loop
// as interior tiles.
template <char OP = 'N'>
__device__ __forceinline__ float load_or_zero(const float* __restrict__ m, int ld, int row, int col,
                                              int rows, int cols) {
    return (row < rows && col < cols) ? m[elem_offset<OP>(row, col, ld)] : 0.0f;
}

// out = alpha * acc + beta * out.  With beta == 0 the old value is never read,
// so NaN or Inf left in an uninitialised output cannot leak into the result.
__device__ __forceinline__ void store_scaled(float* out, float acc, float alpha, float beta) {
    *out = (beta == 0.0f) ? alpha * acc : alpha * acc + beta * *out;
}

}  // namespace gemmlab
