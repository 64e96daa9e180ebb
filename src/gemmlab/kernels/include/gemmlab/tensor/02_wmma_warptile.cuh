// gemmlab/tensor/02_wmma_warptile.cuh: tensor rung 2's idea, a block stages
// tiles of A and B in shared memory once and its warps load their fragments
// from there (load_matrix_sync), each fragment used by several MMAs.
#pragma once

#include <gemmlab/tensor/01_wmma.cuh>

namespace gemmlab {

// Copy the ROWS x COLS tile at (row0, col0) of a rows x cols matrix of 16-bit
// or float elements, stored with layout OP, into shared memory row-major (row
// stride SLD), zeros outside the matrix; consecutive threads take consecutive
// elements in memory (coalesced), as the CUDA-core ladder's load_tile does.
template <int ROWS, int COLS, int SLD, int THREADS, char OP = 'N', class S>
__device__ __forceinline__ void stage_tile(S* smem, const S* __restrict__ g, int ld, int row0, int col0, int rows,
                                           int cols, int tid) {
    static_assert((ROWS * COLS) % THREADS == 0, "tile must split evenly over the threads");
    constexpr int RUN = OP == 'N' ? COLS : ROWS;   // consecutive threads walk this side of the tile
    if constexpr (THREADS % RUN == 0) {
        // Every step moves a thread THREADS / RUN lines (rows for 'N', columns for
        // 'T') on, the same side: one 64-bit address, then a constant stride.  An
        // address per element costs registers, which the 512-thread TF32
        // configuration of wmma_warptile cannot spare.
        constexpr int LINES = THREADS / RUN;
        const int r0 = OP == 'N' ? tid / COLS : tid % ROWS, c0 = OP == 'N' ? tid % COLS : tid / ROWS;
        const S* p = g + elem_offset<OP>(row0 + r0, col0 + c0, ld);
        const long long stride = (long long)LINES * ld;
#pragma unroll
        for (int step = 0; step < ROWS * COLS / THREADS; ++step) {
            const int r = OP == 'N' ? r0 + step * LINES : r0, c = OP == 'N' ? c0 : c0 + step * LINES;
            smem[r * SLD + c] = (row0 + r < rows && col0 + c < cols) ? p[step * stride] : S(0.0f);
        }
    } else {
#pragma unroll
        for (int step = 0; step < ROWS * COLS / THREADS; ++step) {
            const int i = step * THREADS + tid;
            const int r = OP == 'N' ? i / COLS : i % ROWS, c = OP == 'N' ? i % COLS : i / ROWS;
            smem[r * SLD + c] = (row0 + r < rows && col0 + c < cols) ? g[elem_offset<OP>(row0 + r, col0 + c, ld)]
                                                                      : S(0.0f);
        }
    }
}

// A matrix_a / matrix_b fragment from a row-major tile in shared memory (p
// 32-byte aligned, ldm a multiple of 16 bytes); TF32 fragments are rounded
// after the load, as the WMMA API requires.
template <int DT, class Frag, class S>
__device__ __forceinline__ void load_fragment(Frag& frag, const S* p, int ldm) {
    nvcuda::wmma::load_matrix_sync(frag, p, ldm);
    if constexpr (DT == TYPE_TF32) {
#pragma unroll
        for (int k = 0; k < frag.num_elements; ++k) frag.x[k] = wmma_types::to_tf32(frag.x[k]);
    }
}

}  // namespace gemmlab
