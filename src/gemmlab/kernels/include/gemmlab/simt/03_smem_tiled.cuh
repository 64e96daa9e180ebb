// gemmlab/simt/03_smem_tiled.cuh: rung 3's idea, staging tiles of A and B in
// shared memory so that a block reads each global element once.  The copy below
// serves rungs 3-5 as it is, and rungs 6-8 replace it with wider ones.
#pragma once

#include <gemmlab/simt/01_naive.cuh>

namespace gemmlab {

// Copy the ROWS x COLS tile at (row0, col0) of a rows x cols matrix stored with
// layout OP into shared memory, row-major (row stride SLD), THREADS threads
// cooperating.  Consecutive threads take consecutive elements in memory --
// columns of a row-major matrix, rows of a column-major one -- so each warp's
// global reads coalesce (for 'T' its shared stores are strided instead, the
// cheaper of the two costs).
template <int ROWS, int COLS, int SLD, int THREADS, char OP = 'N'>
__device__ __forceinline__ void load_tile(float* smem, const float* __restrict__ g, int ld,
                                          int row0, int col0, int rows, int cols, int tid) {
    static_assert((ROWS * COLS) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int step = 0; step < ROWS * COLS / THREADS; ++step) {
        const int i = step * THREADS + tid;
        const int r = OP == 'N' ? i / COLS : i % ROWS, c = OP == 'N' ? i % COLS : i / ROWS;
        smem[r * SLD + c] = load_or_zero<OP>(g, ld, row0 + r, col0 + c, rows, cols);
    }
}

}  // namespace gemmlab
