// gemmlab/simt/05_blocktile_2d.cuh: rung 5's idea, a TM x TN register tile per
// thread updated by outer products: TM + TN values loaded, TM * TN multiply-adds.
// (Rung 4, the 1-D case, needs no function of its own: its loop is in its .cu.)
// Rungs 6-8 keep this arithmetic and change how the operands arrive.
#pragma once

#include <gemmlab/simt/03_smem_tiled.cuh>

namespace gemmlab {

// acc += a (column fragment) x b (row fragment): TM * TN multiply-adds from
// TM + TN values in registers.
template <int TM, int TN>
__device__ __forceinline__ void outer_product_acc(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
}

}  // namespace gemmlab
