// The pre-pass of ec_wgmma (not a rung): splits op(A) and op(B) into their two
// tensor-core parts once, into workspaces that the GEMM reads through TMA.
//
// ec_wmma splits each value at every fragment load, from FP32 tiles in shared
// memory.  On Hopper the tensor cores read both operands of wgmma straight from
// shared memory, in the 128-byte swizzled layout TMA writes; splitting there
// would mean a second copy of every tile through the registers of the
// consumers, whose registers already hold three accumulators.  A separate pass
// costs one read of A and B and one write of their parts (the same bytes for
// FP16 parts, twice for TF32), about 0.1 ms per 4096^2 matrix against a GEMM
// of several milliseconds, and hands the GEMM operands that are always
// TMA-aligned and row-major, whatever the caller's layouts and alignment.
//
//   METHOD 0 (FP16):  hi, lo = split(x * scale)  as __half   (ec_split.cuh)
//   METHOD 1 (TF32):  big, small = split(x)      as floats rounded to TF32
//
// The logical rows x cols matrix op(X) is stored with layout OP (layout.cuh);
// the parts are written row-major (T_OUT = false: part[r * ldp + c]) or
// transposed (T_OUT = true: part[c * ldp + r]; TF32 wgmma reads B K-major).
// 32 x 32 tiles go through shared memory, so that reads follow the stored
// layout and writes the written one: both coalesced.  scale is a power of two
// (the scaled FP16 method; exact), 1 otherwise.
#include <gemmlab/ec_split.cuh>
#include <gemmlab/layout.cuh>

namespace gemmlab {

constexpr int EC_PACK_TILE = 32;
constexpr int EC_PACK_ROWS = 8;   // threads per block: 32 x 8

template <int METHOD>
using EcPart = typename wmma_types::Storage<EcSplit<METHOD>::DT>::type;

template <int METHOD, char OP, bool T_OUT>
__global__ void __launch_bounds__(EC_PACK_TILE * EC_PACK_ROWS)
ec_split_pack(int rows, int cols, const float* __restrict__ src, int ld, float scale, EcPart<METHOD>* __restrict__ hi,
              EcPart<METHOD>* __restrict__ lo, int ldp) {
    __shared__ float tile[EC_PACK_TILE][EC_PACK_TILE + 1];   // [r][c]; the pad spreads columns over the banks
    const int tiles_c = (cols + EC_PACK_TILE - 1) / EC_PACK_TILE;
    const int r0 = int(blockIdx.x / tiles_c) * EC_PACK_TILE, c0 = int(blockIdx.x % tiles_c) * EC_PACK_TILE;
    const int tx = threadIdx.x % EC_PACK_TILE, ty = threadIdx.x / EC_PACK_TILE;
    // Read: consecutive threads along the stored rows (c for 'N', r for 'T').
#pragma unroll
    for (int i = ty; i < EC_PACK_TILE; i += EC_PACK_ROWS) {
        const int r = r0 + (OP == 'N' ? i : tx), c = c0 + (OP == 'N' ? tx : i);
        if (r < rows && c < cols) {
            const float v = src[elem_offset<OP>(r, c, ld)];
            if constexpr (OP == 'N') tile[i][tx] = v; else tile[tx][i] = v;
        }
    }
    __syncthreads();
    // Write: consecutive threads along the written rows (c, or r for T_OUT).
#pragma unroll
    for (int i = ty; i < EC_PACK_TILE; i += EC_PACK_ROWS) {
        const int tr = T_OUT ? tx : i, tc = T_OUT ? i : tx;
        const int r = r0 + tr, c = c0 + tc;
        if (r < rows && c < cols) {
            const long long at = T_OUT ? (long long)c * ldp + r : (long long)r * ldp + c;
            EcSplit<METHOD>::split(tile[tr][tc] * scale, hi[at], lo[at]);
        }
    }
}

}  // namespace gemmlab
