// gemmlab/tensor/04_wgmma_work.cuh: the work items of the wgmma rung's persistent loop
// (shared with ec_wgmma): which tile of which matrix, and which slice of K, each is.
// Needs nothing but CUDA's built-ins.
#pragma once

namespace gemmlab {

constexpr int WGMMA_GROUP_M = 16;   // tile-rows per group of the tile order (16 measured faster than 8: NOTES.md)

// Tile `t` of a tiles_m x tiles_n grid in grouped order: down a group of
// GROUP_M tile-rows first, then to the next column, then to the next group.
__device__ __forceinline__ void grouped_tile(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
    const int per_group = WGMMA_GROUP_M * tiles_n;
    const int first_m = (t / per_group) * WGMMA_GROUP_M;
    const int rows = min(tiles_m - first_m, WGMMA_GROUP_M);
    const int r = t % per_group;
    tm = first_m + r % rows;
    tn = r / rows;
}

// Work item `t` of a batch: tile t % tiles_per_matrix (grouped_tile's order) of
// matrix z = t / tiles_per_matrix, returned.  The batch index is part of the
// persistent loop's linear work index, so one launch takes a whole batch: a batch
// of small products, each with fewer tiles than there are SMs, still fills the
// GPU, and a block goes on to the next matrix's tiles without a launch between.
__device__ __forceinline__ int batch_tile(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
    const int per_matrix = tiles_m * tiles_n;
    const int z = t / per_matrix;
    grouped_tile(t - z * per_matrix, tiles_m, tiles_n, tm, tn);
    return z;
}

// Split-K's work items (wgmma and ec_wgmma): batch_tile's "matrix" zs = z * slices + s
// is matrix z's slice s of K, the K-steps [ks0, ks1) -- per_slice of them, the last
// slice possibly shorter or empty.
struct KSlice {
    int z, ks0, ks1;
};
__device__ __forceinline__ KSlice k_slice(int zs, int slices, int per_slice, int k_steps) {
    const int ks0 = (zs % slices) * per_slice;
    return {zs / slices, ks0, min(ks0 + per_slice, k_steps)};
}

}  // namespace gemmlab
