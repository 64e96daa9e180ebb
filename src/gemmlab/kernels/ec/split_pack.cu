// The pre-pass of ec_wgmma (not a rung): splits op(A) and op(B) into their two
// tensor-core parts once (EcSplit, ec/01_ec_wmma.cuh), into workspaces the GEMM
// reads through TMA -- a split at load time would cost wgmma's consumers a pass
// through registers they do not have, while this pass costs one read of A and B
// and one write of the parts, and hands the GEMM K-major, TMA-aligned operands
// whatever the caller's layouts.  Layouts, batches and the choice record: above
// ec_split_pack, below.
#include <gemmlab/ec/01_ec_wmma.cuh>
#include <gemmlab/ec/choice.cuh>

namespace gemmlab {

constexpr int EC_SPLIT_PACK_TILE = 32;      // a block's tile: 32 x 32 elements
constexpr int EC_SPLIT_PACK_THREADS = 256;  // threads per block: 32 x 8
constexpr int EC_SPLIT_PACK_ROWS = EC_SPLIT_PACK_THREADS / EC_SPLIT_PACK_TILE;   // rows a pass covers
// Tiles a block reads before it writes any: more loads in flight per thread (the
// pass is a stream through memory, and one tile gave a thread 4).
constexpr int EC_SPLIT_PACK_TILES_IN_FLIGHT = 2;

template <int METHOD>
using EcPart = typename wmma_types::Storage<EcSplit<METHOD>::DT>::type;

// One block's share of one matrix: rows x cols of src (layout OP, leading dimension
// ld) into hi and lo, transposed with T_OUT; the blocks of the launch walk the tiles,
// EC_SPLIT_PACK_TILES_IN_FLIGHT at a time.
using EcSplitTiles = float[EC_SPLIT_PACK_TILES_IN_FLIGHT][EC_SPLIT_PACK_TILE][EC_SPLIT_PACK_TILE + 1];

template <int METHOD, int FOLD, char OP, bool T_OUT>
__device__ __forceinline__ void split_matrix(EcSplitTiles& tiles_smem, int rows, int cols,
                                             const float* __restrict__ src, int ld, float scale,
                                             EcPart<METHOD>* __restrict__ hi, EcPart<METHOD>* __restrict__ lo,
                                             int ldp) {
    constexpr int F = EC_SPLIT_PACK_TILES_IN_FLIGHT;
    const int tiles_c = (cols + EC_SPLIT_PACK_TILE - 1) / EC_SPLIT_PACK_TILE;
    const int tiles = (rows + EC_SPLIT_PACK_TILE - 1) / EC_SPLIT_PACK_TILE * tiles_c;
    const int tx = threadIdx.x % EC_SPLIT_PACK_TILE, ty = threadIdx.x / EC_SPLIT_PACK_TILE;
    // A few blocks per SM walk the tiles: the candidate not chosen then exits with
    // a few hundred blocks, not one per tile.
    for (int t0 = blockIdx.x; t0 < tiles; t0 += F * gridDim.x) {
        // Read F tiles: consecutive threads along the stored rows (c for 'N', r for 'T').
        // Every load into registers first, then into shared memory: a store right after
        // its load would wait for it and hold back the loads behind it.
        constexpr int PER_TILE = EC_SPLIT_PACK_TILE / EC_SPLIT_PACK_ROWS;   // a thread's elements of a tile
        float v[F][PER_TILE];
#pragma unroll
        for (int f = 0; f < F; ++f) {
            const int t = t0 + f * gridDim.x;
            const int r0 = t / tiles_c * EC_SPLIT_PACK_TILE, c0 = t % tiles_c * EC_SPLIT_PACK_TILE;
#pragma unroll
            for (int j = 0; j < PER_TILE; ++j) {
                const int i = ty + j * EC_SPLIT_PACK_ROWS;
                const int r = r0 + (OP == 'N' ? i : tx), c = c0 + (OP == 'N' ? tx : i);
                v[f][j] = t < tiles && r < rows && c < cols ? src[elem_offset<OP>(r, c, ld)] : 0.0f;
            }
        }
#pragma unroll
        for (int f = 0; f < F; ++f)
#pragma unroll
            for (int j = 0; j < PER_TILE; ++j) {
                const int i = ty + j * EC_SPLIT_PACK_ROWS;
                if constexpr (OP == 'N') tiles_smem[f][i][tx] = v[f][j]; else tiles_smem[f][tx][i] = v[f][j];
            }
        __syncthreads();
        // Write them: consecutive threads along the written rows (c, or r for T_OUT).
#pragma unroll
        for (int f = 0; f < F; ++f) {
            const int t = t0 + f * gridDim.x;
            if (t >= tiles) break;
            const int r0 = t / tiles_c * EC_SPLIT_PACK_TILE, c0 = t % tiles_c * EC_SPLIT_PACK_TILE;
#pragma unroll
            for (int i = ty; i < EC_SPLIT_PACK_TILE; i += EC_SPLIT_PACK_ROWS) {
                const int tr = T_OUT ? tx : i, tc = T_OUT ? i : tx;
                const int r = r0 + tr, c = c0 + tc;
                if (r < rows && c < cols) {
                    const long long at = T_OUT ? (long long)c * ldp + r : (long long)r * ldp + c;
                    EcSplit<METHOD>::template split<FOLD>(tiles_smem[f][tr][tc] * scale, hi[at], lo[at]);
                }
            }
        }
        __syncthreads();   // the tiles are read before the next ones overwrite them
    }
}

// op(A) (M x K) is stored with layout OP_A, op(B)
// (K x N) with OP_B; A's parts are written row-major (M x K), B's transposed
// (N x K), rows of ldp elements.  32 x 32 tiles through shared memory, two at a
// time: reads and writes both coalesce.  scale: a power of two (exact), or 1.  With a choice
// record (precision="fp32_tc", ec/choice.cuh) both METHODs are launched and the
// one not chosen returns at once; the scales are the record's.  One launch splits
// both operands (blockIdx.z: 0 A, 1 B; a small fp32_tc call costs mostly the
// host's launches) and every matrix of a batch (gridDim.y), src_stride elements
// apart, their parts one after the other (M * ldp or N * ldp elements apart); the
// grid is the larger operand's, and blocks the other does not need return.
// FOLD = 1 writes lo in hi's units (EcSplit::split<true>) for ec_wgmma's FOLD,
// with a choice record's scales that put the largest value just below 2^15.
template <int METHOD, int FOLD, char OP_A, char OP_B>
__global__ void __launch_bounds__(EC_SPLIT_PACK_THREADS, 8)   // 8 blocks an SM: the grid the host sizes (ec_wgmma.py)
ec_split_pack(int M, int N, int K, const float* __restrict__ A, int lda, long long stride_a, int matrices_a,
              float scale_a, const float* __restrict__ B, int ldb, long long stride_b, int matrices_b, float scale_b,
              EcPart<METHOD>* __restrict__ a_hi, EcPart<METHOD>* __restrict__ a_lo, EcPart<METHOD>* __restrict__ b_hi,
              EcPart<METHOD>* __restrict__ b_lo, int ldp, const long long* __restrict__ choice) {
    if (choice != nullptr && !ec_wait_and_chosen<METHOD>(choice)) return;   // the GPU chose the other method
    __shared__ EcSplitTiles tile;   // [tile][r][c]; the pad spreads columns over the banks
    const long long z = blockIdx.y;   // this block's matrix of the batch
    if (blockIdx.z == 0) {
        if (z >= matrices_a) return;
        const float scale =
            choice != nullptr ? ec_choice_scale(choice, FOLD ? CHOICE_TOP_SCALE_A : CHOICE_SCALE_A) : scale_a;
        split_matrix<METHOD, FOLD, OP_A, false>(tile, M, K, A + z * stride_a, lda, scale, a_hi + z * M * ldp,
                                          a_lo + z * M * ldp, ldp);
    } else {
        if (z >= matrices_b) return;
        const float scale =
            choice != nullptr ? ec_choice_scale(choice, FOLD ? CHOICE_TOP_SCALE_B : CHOICE_SCALE_B) : scale_b;
        split_matrix<METHOD, FOLD, OP_B, true>(tile, K, N, B + z * stride_b, ldb, scale, b_hi + z * N * ldp,
                                         b_lo + z * N * ldp, ldp);
    }
}

}  // namespace gemmlab
