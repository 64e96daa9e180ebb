// gemmlab/layout.cuh: operand layouts and batches, shared by every GEMM kernel.
//
// Every kernel computes, for each batch z = blockIdx.z,
//     C_z = alpha * op(A)_z @ op(B)_z + beta * C_z
// with op(A) a logical M x K matrix, op(B) K x N and C row-major M x N.  Two
// template parameters, always the kernel's last two, say how op(A) and op(B)
// lie in memory (BLAS's transa / transb):
//   'N'  stored row-major: element (r, c) at p[r * ld + c]
//   'T'  stored as its transpose, i.e. column-major: element (r, c) at
//        p[c * ld + r] (a transposed view of a row-major array, or Fortran order)
// A column-major C needs no kernel support: the host computes C^T = op(B)^T op(A)^T
// instead (swapping the operands and flipping their ops).
#pragma once

namespace gemmlab {

// Offset of logical element (r, c) of an operand stored with layout OP and leading dimension ld.
template <char OP>
__host__ __device__ __forceinline__ long long elem_offset(int r, int c, int ld) {
    static_assert(OP == 'N' || OP == 'T', "an operand is stored 'N' (row-major) or 'T' (column-major)");
    return OP == 'N' ? (long long)r * ld + c : (long long)c * ld + r;
}

// Batches: three 64-bit element strides, the kernel's last three arguments,
// move A, B and C from one batch to the next; a stride of 0 gives every batch
// the same matrix (numpy.matmul's broadcasting).  A kernel adopts both with
//     template <..., char OPA, char OPB>  and  ..., long long stride_a, long long stride_b, long long stride_c)
//     batch_select(A, stride_a, B, stride_b, C, stride_c);     // first line of the body
// and by passing OPA / OPB on to the rungs' tile loaders (gemmlab/simt/*.cuh,
// gemmlab/tensor/*.cuh), which read either layout.  (Loaders
// default to 'N' so that code written before layouts still compiles; the
// level-3 tester, tests/test_blas3.py, runs every kernel in all four layouts.)
//
// Point A, B and C at batch blockIdx.z.  (PA etc. are deduced with their
// __restrict__ qualifiers, so the kernel's own parameters are moved.)
template <class PA, class PB, class PC>
__device__ __forceinline__ void batch_select(PA& A, long long stride_a, PB& B, long long stride_b, PC& C,
                                             long long stride_c) {
    const long long z = blockIdx.z;
    A += z * stride_a;
    B += z * stride_b;
    C += z * stride_c;
}

}  // namespace gemmlab
