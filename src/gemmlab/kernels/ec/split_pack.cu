// The pre-pass of ec_wgmma (not a rung): splits op(A) and op(B) into their two
// tensor-core parts once (EcSplit, ec/01_ec_wmma.cuh), into workspaces the GEMM
// reads through TMA -- a split at load time would cost wgmma's consumers a pass
// through registers they do not have, while this pass costs one read of A and B
// and one write of the parts, and hands the GEMM K-major, TMA-aligned operands
// whatever the caller's layouts.  op(X) is stored with layout OP; the parts are
// written row-major, or transposed with T_OUT.  32 x 32 tiles through shared
// memory: reads and writes both coalesce.  scale: a power of two (exact), or 1.
// With a choice record (precision="fp32_tc", ec/choice.cuh) both METHODs are
// launched and the one not chosen returns at once; the scale is the record's.
// gridDim.y matrices (a batch), src_stride elements apart, their parts
// part_stride elements apart: one launch splits every matrix of a batch.
#include <gemmlab/ec/01_ec_wmma.cuh>
#include <gemmlab/ec/choice.cuh>

namespace gemmlab {

constexpr int EC_SPLIT_PACK_TILE = 32;      // a block's tile: 32 x 32 elements
constexpr int EC_SPLIT_PACK_THREADS = 256;  // threads per block: 32 x 8
constexpr int EC_SPLIT_PACK_ROWS = EC_SPLIT_PACK_THREADS / EC_SPLIT_PACK_TILE;   // rows a pass covers

template <int METHOD>
using EcPart = typename wmma_types::Storage<EcSplit<METHOD>::DT>::type;

template <int METHOD, char OP, bool T_OUT>
__global__ void __launch_bounds__(EC_SPLIT_PACK_THREADS)
ec_split_pack(int rows, int cols, const float* __restrict__ src, int ld, long long src_stride, float scale,
              EcPart<METHOD>* __restrict__ hi, EcPart<METHOD>* __restrict__ lo, int ldp, long long part_stride,
              const long long* __restrict__ choice, int scale_field) {
    if (choice != nullptr) {   // the method chosen on the GPU
        if (!ec_chosen<METHOD>(choice)) return;
        scale = ec_choice_scale(choice, scale_field);
    }
    src += blockIdx.y * src_stride;   // this block's matrix of the batch
    hi += blockIdx.y * part_stride;
    lo += blockIdx.y * part_stride;
    __shared__ float tile[EC_SPLIT_PACK_TILE][EC_SPLIT_PACK_TILE + 1];   // [r][c]; the pad spreads columns over the banks
    const int tiles_c = (cols + EC_SPLIT_PACK_TILE - 1) / EC_SPLIT_PACK_TILE;
    const int tiles = (rows + EC_SPLIT_PACK_TILE - 1) / EC_SPLIT_PACK_TILE * tiles_c;
    const int tx = threadIdx.x % EC_SPLIT_PACK_TILE, ty = threadIdx.x / EC_SPLIT_PACK_TILE;
    // A few blocks per SM walk the tiles: the candidate not chosen then exits with
    // a few hundred blocks, not one per tile.
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int r0 = t / tiles_c * EC_SPLIT_PACK_TILE, c0 = t % tiles_c * EC_SPLIT_PACK_TILE;
        // Read: consecutive threads along the stored rows (c for 'N', r for 'T').
#pragma unroll
        for (int i = ty; i < EC_SPLIT_PACK_TILE; i += EC_SPLIT_PACK_ROWS) {
            const int r = r0 + (OP == 'N' ? i : tx), c = c0 + (OP == 'N' ? tx : i);
            if (r < rows && c < cols) {
                const float v = src[elem_offset<OP>(r, c, ld)];
                if constexpr (OP == 'N') tile[i][tx] = v; else tile[tx][i] = v;
            }
        }
        __syncthreads();
        // Write: consecutive threads along the written rows (c, or r for T_OUT).
#pragma unroll
        for (int i = ty; i < EC_SPLIT_PACK_TILE; i += EC_SPLIT_PACK_ROWS) {
            const int tr = T_OUT ? tx : i, tc = T_OUT ? i : tx;
            const int r = r0 + tr, c = c0 + tc;
            if (r < rows && c < cols) {
                const long long at = T_OUT ? (long long)c * ldp + r : (long long)r * ldp + c;
                EcSplit<METHOD>::split(tile[tr][tc] * scale, hi[at], lo[at]);
            }
        }
        __syncthreads();   // the tile is read before the next one overwrites it
    }
}

}  // namespace gemmlab
