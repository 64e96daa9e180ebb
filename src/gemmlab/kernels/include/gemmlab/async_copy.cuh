// gemmlab/async_copy.cuh: global -> shared tile copies with cp.async (sm_80+),
// which move data without passing through registers and let a kernel keep
// several tiles in flight while it computes on an earlier one.
#pragma once
#include <cuda_pipeline.h>

#include <gemmlab/common.cuh>

namespace gemmlab {

// Start copying the ROWS x COLS tile at (row0, col0) of a rows x cols matrix
// into shared memory (row stride SLD).  Elements outside the matrix are
// zero-filled by the copy itself (no global read).  VEC copies 16 bytes per
// request (same alignment rules as load_tile_vec4), else 4 bytes.  The copy
// completes at a later __pipeline_wait_prior; the caller commits the batch.
template <int ROWS, int COLS, int SLD, int THREADS, bool VEC>
__device__ __forceinline__ void cp_async_tile(float* smem, const float* __restrict__ g, int ld,
                                              int row0, int col0, int rows, int cols, int tid) {
    constexpr int W = VEC ? 4 : 1;   // floats per request
    static_assert(COLS % W == 0 && SLD % W == 0, "16-byte copies need multiples of 4 columns");
    static_assert((ROWS * COLS / W) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int step = 0; step < ROWS * COLS / W / THREADS; ++step) {
        const int i = step * THREADS + tid;
        const int r = i / (COLS / W), c = (i % (COLS / W)) * W;
        const bool inside = row0 + r < rows && col0 + c < cols;
        const float* src = inside ? &g[(long long)(row0 + r) * ld + col0 + c] : g;
        __pipeline_memcpy_async(&smem[r * SLD + c], src, 4 * W, inside ? 0 : 4 * W);
    }
}

}  // namespace gemmlab
