// gemmlab/tensor/06_grouped.cuh: the grouped rung's work list.  G groups of rows of one
// (T, K) matrix A, group g the rows [offs[g - 1], offs[g]) (offs[-1] = 0: the cumulative
// ends torch._grouped_mm takes), each multiplied by its own B_g.  The offsets live on the
// GPU (the router wrote them), so the host cannot count the tiles without waiting for
// the GPU; every block counts them itself: item_end[g] = the work items of groups
// 0..g, where group g has ceil(rows_g / BM) * tiles_n items (an empty group none).  A
// persistent block walks the items t = first, first + step, ... and finds each one's
// group by a binary search of item_end: no group, empty or not, is ever launched for.
// Nothing here is a Hopper instruction: tests/grouped_work_check.cpp runs it on the CPU.
#pragma once

#include <gemmlab/tensor/04_wgmma_work.cuh>

namespace gemmlab {

// Groups a launch takes at most: item_end lives in shared memory (4 bytes a group).
constexpr int GROUPED_MAX_GROUPS = 1024;

// Rows [start, end) of group g among T.  Offsets outside [0, T] are clamped and a group
// ending before its start is empty, so that no offset makes the kernel touch memory
// outside A or C (decreasing offsets give overlapping groups); the host does not check
// them (it would have to wait for the GPU to read them).
__device__ __forceinline__ void group_rows(const int* offs, int g, int T, int& start, int& end) {
    const int lo = g == 0 ? 0 : offs[g - 1];
    start = lo < 0 ? 0 : (lo > T ? T : lo);
    const int hi = offs[g];
    end = hi < start ? start : (hi > T ? T : hi);
}

// Work items of one group: its tile-rows times the tile-columns of N.
__device__ __forceinline__ int group_items(int rows, int bm, int tiles_n) { return (rows + bm - 1) / bm * tiles_n; }

// One work item: group g, tile (tm, tn) of it, the group's first row and its rows.
struct GroupedItem {
    int g, tm, tn, start, rows;
};

// Work item t (< item_end[G - 1]) with the tiles of each group in the wgmma rung's grouped
// order (04_wgmma_work.cuh: down a few tile-rows, then across).  `g_lo`: a group at or
// before t's (a block's items only go forward, so it passes its last item's group).
__device__ __forceinline__ GroupedItem grouped_item(int t, const int* item_end, int G, const int* offs, int T,
                                                    int bm, int tiles_n, int g_lo) {
    int lo = g_lo, hi = G - 1;   // the first group whose items end after t
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (item_end[mid] > t)
            hi = mid;
        else
            lo = mid + 1;
    }
    GroupedItem it;
    it.g = lo;
    int end;
    group_rows(offs, lo, T, it.start, end);
    it.rows = end - it.start;
    const int local = t - (lo == 0 ? 0 : item_end[lo - 1]);
    grouped_tile(local, (it.rows + bm - 1) / bm, tiles_n, it.tm, it.tn);
    return it;
}

}  // namespace gemmlab
