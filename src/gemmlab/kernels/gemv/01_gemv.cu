// GEMV rung 1, gemv: products with a handful of rows, as in a decode step's
// x @ W.t() (M = 1 to 16 tokens).  A tiled GEMM spends a 64- to 256-row tile
// on them and wastes nearly all of it, while the time such a product needs is
// one read of op(B) -- the weights -- from memory.  So this kernel streams
// op(B) once, at memory bandwidth, and keeps the sums of all MT rows of C in
// registers (how, for each layout of op(B): above the kernel, below).
// Arithmetic in FP32 for every storage type.  Rows beyond MT take further
// passes over op(B): correct for any M, fast for M <= MT.
#include <gemmlab/gemv/01_gemv.cuh>

namespace gemmlab {

//   op(B) column-major (W.t(): each column's K elements contiguous): a warp per
//     GEMV_COLS_PER_WARP columns, its lanes along K with 16-byte loads, a
//     warp-shuffle sum.  The block stages each K chunk of op(A)'s MT rows in
//     shared memory, converted to FP32 once, so an FMA costs no load of op(A)
//     from global memory and each value read from shared memory feeds
//     GEMV_COLS_PER_WARP FMAs: the cost per byte of op(B) grows far more
//     slowly with M than with a load of op(A) per FMA;
//   op(B) row-major (each row's N elements contiguous, as W in dY @ W): a lane
//     per 16 bytes of columns, LANES lanes along a row (fewer: narrower blocks,
//     more of them), each lane several rows of op(B) a chunk of K, op(A) staged
//     as above, the warps' sums added through shared memory; the host splits K
//     over gridDim.y blocks (split-K: a workspace and splitk_reduce) where the
template <int DT, int ODT, int MT, bool ALIGNED, int LANES, char OPA, char OPB>
// Launch bounds, op(B) column-major: two blocks an SM for one row and 16-byte loads
// (its registers fit in 128 a thread: more warps, and the N / 32 blocks spread more
// evenly over the SMs); else one, as the others' sums and loads in flight take up
// to 255 registers (capped at 128, they spill).  Row-major: one (capped at 128,
// even one row's loads in flight and their next chunk's spill).
__global__ void __launch_bounds__(GEMV_THREADS, OPB == 'T' && MT == 1 && ALIGNED ? 2 : 1)
gemv(int M, int N, int K, float alpha, const typename StorageOf<DT>::type* __restrict__ A, int lda,
     const typename StorageOf<DT>::type* __restrict__ B, int ldb, float beta,
     typename StorageOf<ODT>::type* __restrict__ C, int ldc, long long stride_a, long long stride_b,
     long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    using S = typename StorageOf<DT>::type;
    const int k_end = alpha == 0.0f ? 0 : K;   // alpha = 0 reads neither A nor B (BLAS)
    // Elements of op(B) a thread loads at once: one where its rows are off the 16-byte
    // grid (ALIGNED false: gemv.py's gemv_aligned; C is stored element by element).
    if constexpr (OPB == 'T') {
        constexpr int VEC = !ALIGNED ? 1 : GEMV_LOAD_BYTES_K / int(sizeof(S));
        gemv_columns_along_k<MT, VEC, OPA>(M, N, k_end, alpha, A, lda, B, ldb, beta, C, ldc);
    } else {
        constexpr int VEC = !ALIGNED ? 1 : sizeof(S) == 2 && MT <= GEMV_ROW_WIDE_MT ? 8 : GEMV_ROW_VEC;
        gemv_rows_split_k<MT, VEC, LANES, OPA>(M, N, k_end, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

}  // namespace gemmlab
