// gemmlab/tensor/04_wgmma_work.cuh: the work items of the wgmma rung's persistent loop
// (shared with ec_wgmma), and split-K's reduction inside the kernel (a "serial fixup").
// Items are (matrix, slice of K, tile), slice-major, so a tile's last slice has its highest
// index and owns the tile: the other slices leave FP32 partials and count themselves in;
// the owner waits, adds them in its registers and runs C's epilogue.  Each consumer
// warpgroup syncs alone on its own rows (TF32: columns).
// No deadlock: an item waits only on lower indices, a block walks its items in increasing
// order, and a persistent grid has every block resident, so the lowest unfinished item
// always progresses.  tests/wgmma_work_check.cpp runs this file on the CPU.
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

// -- split-K's fixup -----------------------------------------------------------------------

// Slices with K-steps are a prefix (k_slice: per_slice steps each, the last short or empty);
// those before the owner (slice slices - 1) write a partial, and the owner waits for them.
__device__ __forceinline__ int splitk_writers(int slices, int per_slice, int k_steps) {
    const int live = k_steps > 0 ? (k_steps + per_slice - 1) / per_slice : 0;
    return live < slices - 1 ? live : slices - 1;
}

#ifdef __CUDA_ARCH__
// Named barrier `id` over one warpgroup's 128 threads.
__device__ __forceinline__ void splitk_bar(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }
// The count, as the GPU sees it (acquire: what was written before its release is visible).
__device__ __forceinline__ unsigned splitk_load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void splitk_add_release(unsigned* p) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}
__device__ __forceinline__ void splitk_store_relaxed(unsigned* p, unsigned v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
#endif

// A non-owner slice: thread t (0..127) of the consumer writes its accumulators to the
// region as float4s, i-th at region + 4 * (128 * (i / 4) + t): each warp's store covers 512
// consecutive bytes, and the owner reads them back in the same order.  Then every thread's
// writes are fenced, the warpgroup meets, and one thread counts the partial in (release).
template <int NACC>
__device__ __forceinline__ void splitk_publish(const float (&acc)[NACC], float* region, unsigned* counter, int bar,
                                               int t) {
    static_assert(NACC % 4 == 0, "whole float4s");
    float4* dst = reinterpret_cast<float4*>(region) + t;
#pragma unroll
    for (int q = 0; q < NACC / 4; ++q)
        __stcg(dst + 128 * q, make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]));
    __threadfence();
    splitk_bar(bar);
    if (t == 0) splitk_add_release(counter);
}

// The owner: one thread waits (acquire, with a growing sleep) until `writers` partials are
// counted in and zeroes the counter for the next launch (nothing else counts on it in this
// one); the warpgroup meets; every thread adds the partials of slices 0 .. writers - 1, which
// lie `stride` floats apart from `first`, in slice order.  The reads bypass L1 (ld.global.cg):
// another SM wrote them, and L1 is not coherent.  GROUP float4s at a time, loaded before the
// first is added so that their latencies overlap, in loops that are not unrolled: each pass
// adds its group to the accumulators by a branch the whole warpgroup takes (an index known at
// compile time keeps them in registers), so that only a group's loads are in flight beside
// them (unrolled, ptxas hoisted them all and spilled the TF32 instantiations).
template <int GROUP, int NACC>
__device__ __forceinline__ void splitk_gather(float (&acc)[NACC], const float* first, long long stride, int writers,
                                              unsigned* counter, int bar, int t) {
    constexpr int QUADS = NACC / 4;   // float4s a thread
    static_assert(NACC % 4 == 0 && QUADS % GROUP == 0, "whole groups of float4s");
    if (t == 0) {
        unsigned sleep = 32;
        while (splitk_load_acquire(counter) < unsigned(writers)) {
            __nanosleep(sleep);
            if (sleep < 512) sleep *= 2;
        }
        splitk_store_relaxed(counter, 0u);
    }
    splitk_bar(bar);
#pragma unroll 1
    for (int s = 0; s < writers; ++s) {
        const float4* src = reinterpret_cast<const float4*>(first + s * stride) + t;
#pragma unroll 1
        for (int q0 = 0; q0 < QUADS; q0 += GROUP) {
            float4 v[GROUP];
#pragma unroll
            for (int g = 0; g < GROUP; ++g) v[g] = __ldcg(src + 128 * (q0 + g));
#pragma unroll
            for (int k = 0; k < QUADS; k += GROUP) {
                if (k != q0) continue;
#pragma unroll
                for (int g = 0; g < GROUP; ++g) {
                    acc[4 * (k + g)] += v[g].x;
                    acc[4 * (k + g) + 1] += v[g].y;
                    acc[4 * (k + g) + 2] += v[g].z;
                    acc[4 * (k + g) + 3] += v[g].w;
                }
            }
        }
    }
}

// A split launch's fixup: its workspaces and how they are laid out.  One counter per (tile,
// consumer); one region of the consumer's 128 x NACC accumulators per (tile, slice before the
// owner, consumer), the next slice's `consumers` regions further.  A tile is (matrix, tile of
// clusters in batch_tile's order, block of the cluster): a cluster's rows past M count too.
struct SplitK {
    float* partials;
    unsigned* counters;
    int slices;          // slices of K per tile
    int writers;         // splitk_writers: the partials an owner waits for
    int consumers;       // consumer warpgroups per tile
    int cluster_tiles;   // tiles of clusters per matrix
    int cluster, rank;   // blocks per cluster, and this block's

    __device__ __forceinline__ long long tile(int t, int zs, int z) const {
        return ((long long)z * cluster_tiles + (t - zs * cluster_tiles)) * cluster + rank;
    }
    __device__ __forceinline__ long long counter(long long tile, int c) const { return tile * consumers + c; }
    __device__ __forceinline__ long long region(long long tile, int s, int c) const {
        return (tile * (slices - 1) + s) * consumers + c;
    }
    // Slice s owns its tile: the last, the highest item index of the tile's.
    __device__ __forceinline__ bool owns(int s) const { return s == slices - 1; }
    // Slice s writes a partial: one before the owner with K-steps (writers <= slices - 1).
    __device__ __forceinline__ bool writes(int s) const { return s < writers; }

    // Work item t (matrix z, batch_tile's zs) for consumer c, thread t128 of its 128, after
    // its slice's K-steps: a slice before the last with K-steps leaves its partial (a slice
    // past them has nothing to add); the last adds the others'.  `inside`: whether the
    // consumer's rows (TF32: columns) reach into C -- a consumer wholly outside neither
    // writes nor waits.  Returns whether the item owns its tile, and so stores C.
    template <int NACC>
    __device__ __forceinline__ bool fixup(float (&acc)[NACC], int t, int zs, int z, int c, bool inside, int bar,
                                          int t128) const {
        const int s = zs - z * slices;
        const long long at = tile(t, zs, z);
        float* first = partials + region(at, 0, c) * (128 * NACC);
        const long long stride = (long long)consumers * (128 * NACC);   // to the next slice's region
        if (!owns(s)) {
            if (inside && writes(s)) splitk_publish(acc, first + s * stride, counters + counter(at, c), bar, t128);
            return false;
        }
        if (inside && writers > 0) splitk_gather<8>(acc, first, stride, writers, counters + counter(at, c), bar, t128);
        return true;
    }
};

}  // namespace gemmlab
