// The staging pre-pass of rung 8 (not a rung).  A float32 operand whose rows start off the
// 16-byte grid -- an odd leading dimension, base or width, as a vocabulary of 50257 words
// gives -- makes 08_pipelined.cu copy it 4 bytes per cp.async (its VEC = false variant).
// Where the cost model says it pays (kernels/simt/pipelined.py), the operand is first copied
// here into a workspace with rows padded to 16 bytes, zeros in the padding, and the kernel
// reads the copy 16 bytes at a time.  One launch copies A, B or both (blockIdx.y).
#include <gemmlab/pack_rows.cuh>

namespace gemmlab {

__global__ void __launch_bounds__(PACK_ROWS_THREADS)
pack32(int rows0, int cols0, const float* __restrict__ src0, int ld0, float* __restrict__ dst0, int ldd0,
       long long src_stride0, long long dst_stride0, int n0, int rows1, int cols1, const float* __restrict__ src1,
       int ld1, float* __restrict__ dst1, int ldd1, long long src_stride1, long long dst_stride1, int n1) {
    pack_rows_copies(rows0, cols0, src0, ld0, dst0, ldd0, src_stride0, dst_stride0, n0, rows1, cols1, src1, ld1, dst1,
                     ldd1, src_stride1, dst_stride1, n1);
}

}  // namespace gemmlab
