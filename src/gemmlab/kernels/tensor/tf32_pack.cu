// The TF32 pre-pass of the wgmma rung (not a rung).  wgmma reads TF32 operands
// through TFLOAT32 tensor maps, which round them as TMA copies; an operand TMA
// cannot read in place (unaligned base, or rows not a multiple of 16 bytes) is
// first copied by this kernel, rounded to nearest (cvt.rna, as the WMMA rungs
// round in registers), into a workspace with rows padded to 16 bytes:
//   TRANSPOSE = false:  dst (rows x cols) = round_tf32(src)       (what the launch uses)
//   TRANSPOSE = true:   dst (cols x rows) = round_tf32(src)^T     (kept as the transposing example)
// 32 x 32 tiles through shared memory (padded against bank conflicts): coalesced both ways.
// A batch in one launch: blockIdx.z's matrix, src_stride / dst_stride elements apart.
#include <gemmlab/hopper.cuh>
#include <gemmlab/pack_rows.cuh>

namespace gemmlab {

constexpr int TF32_PACK_TILE = 32;      // a block's tile: 32 x 32 elements
constexpr int TF32_PACK_THREADS = 256;  // threads per block: 32 x 8
constexpr int TF32_PACK_ROWS = TF32_PACK_THREADS / TF32_PACK_TILE;   // rows a pass of the block covers

template <bool TRANSPOSE>
__global__ void __launch_bounds__(TF32_PACK_THREADS)
tf32_pack(int rows, int cols, const float* __restrict__ src, int ld, float* __restrict__ dst, int ldd,
          long long src_stride, long long dst_stride) {
    src += blockIdx.z * src_stride;
    dst += blockIdx.z * dst_stride;
    __shared__ float tile[TF32_PACK_TILE][TF32_PACK_TILE + 1];
    const int tiles_c = (cols + TF32_PACK_TILE - 1) / TF32_PACK_TILE;
    const int r0 = int(blockIdx.x / tiles_c) * TF32_PACK_TILE, c0 = int(blockIdx.x % tiles_c) * TF32_PACK_TILE;
    const int tx = threadIdx.x % TF32_PACK_TILE, ty = threadIdx.x / TF32_PACK_TILE;
#pragma unroll
    for (int i = ty; i < TF32_PACK_TILE; i += TF32_PACK_ROWS) {
        const int r = r0 + i, c = c0 + tx;
        if (r < rows && c < cols) tile[i][tx] = hopper::round_tf32(src[(long long)r * ld + c]);
    }
    if constexpr (!TRANSPOSE) {
#pragma unroll
        for (int i = ty; i < TF32_PACK_TILE; i += TF32_PACK_ROWS) {
            const int r = r0 + i, c = c0 + tx;
            if (r < rows && c < cols) dst[(long long)r * ldd + c] = tile[i][tx];
        }
    } else {
        __syncthreads();
#pragma unroll
        for (int i = ty; i < TF32_PACK_TILE; i += TF32_PACK_ROWS) {
            const int c = c0 + i, r = r0 + tx;   // dst row c, column r
            if (r < rows && c < cols) dst[(long long)c * ldd + r] = tile[tx][i];
        }
    }
}

}  // namespace gemmlab

namespace gemmlab {

// pack16: the staging copies of the 16-bit operands TMA cannot read in place (a row stride,
// base or batch stride off the 16-byte grid: a vocabulary of odd size), for the wgmma
// rung: dst (rows x cols, rows ldd apart, ldd a multiple of 8) = src, bit for bit, 8
// elements a thread, one or both operands a launch (gemmlab/pack_rows.cuh).
__global__ void __launch_bounds__(PACK_ROWS_THREADS)
pack16(int rows0, int cols0, const unsigned short* __restrict__ src0, int ld0, unsigned short* __restrict__ dst0,
       int ldd0, long long src_stride0, long long dst_stride0, int n0, int rows1, int cols1,
       const unsigned short* __restrict__ src1, int ld1, unsigned short* __restrict__ dst1, int ldd1,
       long long src_stride1, long long dst_stride1, int n1) {
    pack_rows_copies(rows0, cols0, src0, ld0, dst0, ldd0, src_stride0, dst_stride0, n0, rows1, cols1, src1, ld1, dst1,
                     ldd1, src_stride1, dst_stride1, n1);
}

}  // namespace gemmlab
