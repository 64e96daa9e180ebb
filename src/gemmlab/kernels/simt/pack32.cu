// The staging pre-pass of rung 8 (not a rung).  A float32 operand whose rows start off the
// 16-byte grid -- an odd leading dimension, base or width, as a vocabulary of 50257 words
// gives -- makes 08_pipelined.cu copy it 4 bytes per cp.async (its VEC = false variant).
// Where the cost model says it pays (kernels/simt/pipelined.py), the operand is first copied
// here into a workspace with rows padded to 16 bytes, zeros in the padding, and the kernel
// reads the copy 16 bytes at a time.  A batch in one launch: blockIdx.z's matrix,
// src_stride / dst_stride elements apart.
#include <gemmlab/pack_rows.cuh>

namespace gemmlab {

__global__ void __launch_bounds__(PACK_ROWS_THREADS)
pack32(int rows, int cols, const float* __restrict__ src, int ld, float* __restrict__ dst, int ldd,
       long long src_stride, long long dst_stride) {
    pack_rows(rows, cols, src + blockIdx.z * src_stride, ld, dst + blockIdx.z * dst_stride, ldd);
}

}  // namespace gemmlab
