// GEMV rung 4, batched_small: a batch of many small matrices, as attention within
// windows gives (Swin's 7 x 7 windows: thousands of 49 x 49 x 32 products a layer).
// Each matrix is a few kilobytes, so what such a batch needs is one read of the
// operands and one write of C.  A tiled rung spends a tile of 64 x 64 or more, a
// K pipeline and its epilogue on every matrix, and the tile's rows and columns past
// 49 are lost work.  Here a block takes one matrix's C (up to 64 x 64; a larger C
// takes more blocks), with one thread per 4 x 4 piece of it, so a 49 x 49 C keeps
// 169 threads busy and no more.  The block stages op(A) and op(B) as FP32 in shared
// memory, K 32 at a time (a warp's loads run along the stored rows, a lane an element:
// no thread divides), and each thread writes its piece straight from registers.
// Many such blocks share an SM, so one block's loads overlap another's arithmetic.
// Arithmetic in FP32 for every storage type; correct for any shape.
#include <gemmlab/layout.cuh>
#include <gemmlab/gemv/elements.cuh>
#include <gemmlab/gemv/lines.cuh>

namespace gemmlab {

constexpr int SMALL_TILE = 64;    // rows and columns of C a block takes at most
constexpr int SMALL_PIECE = 4;    // a thread's SMALL_PIECE x SMALL_PIECE outputs
constexpr int SMALL_KC = 32;      // elements of K staged at a time
constexpr int SMALL_MAX_THREADS = SMALL_TILE / SMALL_PIECE * (SMALL_TILE / SMALL_PIECE);

constexpr int SMALL_LINES_IN_FLIGHT = 6;   // lines a warp loads before it stores any

// Floats in a staged row of an operand whose C side is `side` (batched_small.staged_rows).
__device__ __forceinline__ int small_staged_row(int side) {
    const int whole = (min(side, SMALL_TILE) + SMALL_PIECE - 1) / SMALL_PIECE * SMALL_PIECE;
    return whole % 8 == 0 ? whole + 4 : whole;
}

// One block per SMALL_TILE x SMALL_TILE tile of one matrix's C (blockIdx.x, along N
// first; the matrix: blockIdx.z), blockDim.x a multiple of 32 covering the
// 4 x 4 pieces of min(M, 64) x min(N, 64).  Dynamic shared memory: the host's
// batched_small.smem_bytes, min(K, SMALL_KC) rows of lda_s + ldb_s floats.
template <int DT, int ODT, char OPA, char OPB>
__global__ void __launch_bounds__(SMALL_MAX_THREADS)
batched_small(int M, int N, int K, float alpha, const typename StorageOf<DT>::type* __restrict__ A, int lda,
              const typename StorageOf<DT>::type* __restrict__ B, int ldb, float beta,
              typename StorageOf<ODT>::type* __restrict__ C, int ldc, long long stride_a, long long stride_b,
              long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    extern __shared__ __align__(16) float staged[];
    const int col_tiles = (N + SMALL_TILE - 1) / SMALL_TILE;
    const int m0 = blockIdx.x / col_tiles * SMALL_TILE, n0 = blockIdx.x % col_tiles * SMALL_TILE;
    const int rows = min(SMALL_TILE, M - m0), cols = min(SMALL_TILE, N - n0);
    // Staged rows of op(A) and op(B)^T, whole pieces long (one float4 read per k) and 4 mod 8
    // floats apart: a warp writing 32 k of one row (lines along k) meets each bank at most
    // 4 times (a multiple of 32 apart, 32 times).  The host sizes the shared memory by the same.
    const int lda_s = small_staged_row(M), ldb_s = small_staged_row(N);
    float* staged_a = staged;
    float* staged_b = staged + min(K, SMALL_KC) * lda_s;
    // This thread's piece of the tile; threads past the last piece only stage.
    const int pieces_n = (cols + SMALL_PIECE - 1) / SMALL_PIECE;
    const bool computes = threadIdx.x < (rows + SMALL_PIECE - 1) / SMALL_PIECE * pieces_n;
    const int pr = threadIdx.x / pieces_n * SMALL_PIECE, pc = threadIdx.x % pieces_n * SMALL_PIECE;
    float acc[SMALL_PIECE][SMALL_PIECE] = {};
    const int k_end = alpha == 0.0f ? 0 : K;   // alpha = 0 reads neither A nor B (BLAS)
    for (int k0 = 0; k0 < k_end; k0 += SMALL_KC) {
        const int kc = min(SMALL_KC, k_end - k0);
        if (k0 > 0) __syncthreads();   // every thread is done with the previous chunk
        // op(B)^T's element (n, k) is op(B)'s (k, n): the other layout of the same storage
        // As FP32, element (r, k) at k * ld_s + r: a thread's 4 rows (columns) of a k are one float4.
        stage_lines<SMALL_LINES_IN_FLIGHT, false, OPA, OPB == 'N' ? 'T' : 'N'>(
            A, lda, m0, B, ldb, n0, k0, rows, cols, kc, kc, LoadAsFloat(),
            [&](bool of_b, int r, int k, float v) { (of_b ? staged_b[k * ldb_s + r] : staged_a[k * lda_s + r]) = v; });
        __syncthreads();
        if (computes) {
            // Rows of the piece past the tile read staged values no output uses.
#pragma unroll 4
            for (int k = 0; k < kc; ++k) {
                const float4 a = *reinterpret_cast<const float4*>(&staged_a[k * lda_s + pr]);
                const float4 b = *reinterpret_cast<const float4*>(&staged_b[k * ldb_s + pc]);
                const float av[SMALL_PIECE] = {a.x, a.y, a.z, a.w}, bv[SMALL_PIECE] = {b.x, b.y, b.z, b.w};
#pragma unroll
                for (int i = 0; i < SMALL_PIECE; ++i)
#pragma unroll
                    for (int j = 0; j < SMALL_PIECE; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
        }
    }
    if (!computes) return;
#pragma unroll
    for (int i = 0; i < SMALL_PIECE; ++i) {
        if (pr + i >= rows) break;
        auto* row = C + (long long)(m0 + pr + i) * ldc + n0 + pc;
#pragma unroll
        for (int j = 0; j < SMALL_PIECE; ++j)
            if (pc + j < cols) store_scaled_as(row + j, acc[i][j], alpha, beta);
    }
}

}  // namespace gemmlab
