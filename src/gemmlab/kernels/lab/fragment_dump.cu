// gemmlab lab: fragment_dump.cu -- which tile element each lane's x[k] holds.
//
// One warp loads a tile whose element (i, j) holds a code for its own index
// (i * cols + j, plus one) with wmma::load_matrix_sync, then writes the raw bits
// of every x[k] of every lane to out[lane * num_elements + k].  The host decodes
// the codes back into (row, col) -- gemmlab.fragments does that and draws the map.
//
// Template arguments are the small integer codes of type_codes.cuh, so that name
// expressions stay short:
//   USE:  USE_MATRIX_A, USE_MATRIX_B, USE_ACCUMULATOR
//   DT:   TYPE_FLOAT16, TYPE_BFLOAT16, TYPE_TF32, TYPE_FLOAT32 (accumulators: FLOAT16 or FLOAT32)
//   COL:  LAYOUT_ROW, LAYOUT_COL (the memory layout the tile is read with)
#include <gemmlab/wmma_types.cuh>

namespace gemmlab {
namespace lab {

template <int USE, int M, int N, int K, int DT, int COL>
__global__ void __launch_bounds__(32) fragment_dump(const typename wmma_types::Storage<DT>::type* tile, int ld,
                                                    unsigned* out) {
    using namespace nvcuda;
    typename wmma_types::Fragment<USE, M, N, K, DT, COL>::type frag;
    if constexpr (USE == USE_ACCUMULATOR)
        wmma::load_matrix_sync(frag, tile, ld, COL ? wmma::mem_col_major : wmma::mem_row_major);
    else
        wmma::load_matrix_sync(frag, tile, ld);
    const unsigned lane = threadIdx.x & 31u;
#pragma unroll
    for (int k = 0; k < frag.num_elements; ++k)
        out[lane * frag.num_elements + k] = wmma_types::raw_bits(frag.x[k]);
}

}  // namespace lab
}  // namespace gemmlab
