// gemmlab/tile_order.cuh: which output tile a block computes.  Output tiles are
// numbered over a 1-D grid (a 2-D grid's y dimension stops at 65535 blocks,
// which small tiles on tall matrices would exceed); the orders below differ in
// which tiles run at the same time, and so in what they share in L2.
#pragma once

namespace gemmlab {

struct TileOrigin {
    int row;
    int col;
};

// Row-major over the tiles: the order of the tiled rungs.
template <int BM, int BN>
__device__ __forceinline__ TileOrigin block_tile_origin(int N) {
    const int tiles_n = (N + BN - 1) / BN;
    return {int(blockIdx.x / tiles_n) * BM, int(blockIdx.x % tiles_n) * BN};
}

// Down the columns: blocks that run at the same time share columns of B.  Pays
// for the untiled rungs (1, 2), whose warps stream B from global memory (it
// keeps B's columns in L2).
template <int BM, int BN>
__device__ __forceinline__ TileOrigin block_tile_origin_colmajor(int M) {
    const int tiles_m = (M + BM - 1) / BM;
    return {int(blockIdx.x % tiles_m) * BM, int(blockIdx.x / tiles_m) * BN};
}

// Grouped: down a group of GROUP_M tile-rows first, then to the next column,
// then to the next group (tensor rung 3; the wgmma rung's grouped_tile without
// its persistent loop).  Blocks that run at the same time then share a few
// tile-rows of A and a few tile-columns of B instead of one or two rows of A
// and every column of B, so more of their reads hit L2.
template <int BM, int BN, int GROUP_M>
__device__ __forceinline__ TileOrigin block_tile_origin_grouped(int M, int N) {
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int t = int(blockIdx.x), per_group = GROUP_M * tiles_n;
    const int first_m = (t / per_group) * GROUP_M;
    const int rows = min(tiles_m - first_m, GROUP_M);
    const int r = t - (t / per_group) * per_group;
    return {(first_m + r % rows) * BM, (r / rows) * BN};
}

}  // namespace gemmlab
