// gemmlab/simt/07_warptile.cuh: rung 7's idea, a level of tiling between the
// block and the thread.  A thread's outputs are WMITER x WNITER small subtiles
// spread over its warp's tile, so that a warp's 16-byte shared reads are free of
// bank conflicts and each loaded fragment feeds several outer products.  Rung 8
// runs the same K-step on a pipelined copy.
#pragma once

#include <gemmlab/simt/06_vectorized.cuh>

namespace gemmlab {

// The K-step of the warp-tiled rungs (7, 8), in two halves.  a_k points at
// this thread's first row in row k of the transposed A tile, b_k at its first
// column in row k of the B tile: the thread loads WMITER fragments of TM rows
// (WSUBM apart) and WNITER fragments of TN columns (WSUBN apart), 16 bytes at a
// time, then adds their WMITER x WNITER outer products to its accumulators.
template <int WMITER, int WNITER, int WSUBM, int WSUBN, int TM, int TN>
__device__ __forceinline__ void load_warp_fragments(float (&a_frag)[WMITER][TM], float (&b_frag)[WNITER][TN],
                                                    const float* a_k, const float* b_k) {
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm) load_frag4(a_frag[wm], a_k + wm * WSUBM);
#pragma unroll
    for (int wn = 0; wn < WNITER; ++wn) load_frag4(b_frag[wn], b_k + wn * WSUBN);
}

template <int WMITER, int WNITER, int TM, int TN>
__device__ __forceinline__ void warp_fragments_product(float (&acc)[WMITER][WNITER][TM][TN],
                                                       const float (&a_frag)[WMITER][TM],
                                                       const float (&b_frag)[WNITER][TN]) {
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn) outer_product_acc(acc[wm][wn], a_frag[wm], b_frag[wn]);
}

template <int WMITER, int WNITER, int WSUBM, int WSUBN, int TM, int TN>
__device__ __forceinline__ void warp_subtiles_step(float (&acc)[WMITER][WNITER][TM][TN], const float* a_k,
                                                   const float* b_k) {
    float a_frag[WMITER][TM], b_frag[WNITER][TN];
    load_warp_fragments<WMITER, WNITER, WSUBM, WSUBN, TM, TN>(a_frag, b_frag, a_k, b_k);
    warp_fragments_product(acc, a_frag, b_frag);
}

// The epilogue of the warp-tiled rungs (7, 8): a thread's WMITER x WNITER
// subtiles sit WSUBM rows and WSUBN columns apart from (row0, col0).
template <int WMITER, int WNITER, int WSUBM, int WSUBN, int TM, int TN, bool VEC>
__device__ __forceinline__ void store_warp_subtiles(float* __restrict__ C, int ldc, int row0, int col0, int M, int N,
                                                    const float (&acc)[WMITER][WNITER][TM][TN],
                                                    float alpha, float beta) {
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn)
            store_tile<TM, TN, VEC>(C, ldc, row0 + wm * WSUBM, col0 + wn * WSUBN, M, N, acc[wm][wn], alpha, beta);
}

}  // namespace gemmlab
