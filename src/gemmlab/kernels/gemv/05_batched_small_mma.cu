// GEMV rung 5, batched_small_mma: rung 4's batch of small matrices, a block a matrix, with
// 16-bit operands multiplied on the tensor cores.  Rung 4 stages every element as FP32
// and spends 16 FMAs per 4 x 4 piece and k, and in 16-bit that arithmetic, not memory,
// sets its pace.  Here the block stages op(A) and op(B)^T as they are stored, 16 bits an
// element, K-contiguous rows in shared memory, and each warp multiplies 16 rows of C by
// all its columns with mma.sync m16n8k16, reading its fragments as 32-bit words.
// Staging is rung 4's: lines of 32 elements along the stored rows, one a lane.
#include <gemmlab/layout.cuh>
#include <gemmlab/mma_sync.cuh>
#include <gemmlab/gemv/elements.cuh>
#include <gemmlab/gemv/lines.cuh>

namespace gemmlab {

constexpr int SMALL_MMA_TILE = 64;         // rows and columns of C a block takes at most
constexpr int SMALL_MMA_KC = 32;           // elements of K staged at a time (two k16 steps)
// Staged row length in 16-bit elements: 20 words, so that the 8 rows and 4 words of a
// fragment's 32-bit loads (rows g, words q) fall in 32 different banks.
constexpr int SMALL_MMA_LDK = 40;
static_assert(SMALL_MMA_LDK == SMALL_MMA_KC + 8, "a chunk of K and 8 elements (4 words) of padding");
constexpr int SMALL_MMA_LINES_IN_FLIGHT = 6;   // lines a warp loads before it stores any

// The 32-bit word of two consecutive 16-bit elements (r, k), (r, k + 1) of a staged operand.
__device__ __forceinline__ unsigned small_mma_word(const unsigned short* s, int r, int k) {
    return *reinterpret_cast<const unsigned*>(&s[r * SMALL_MMA_LDK + k]);
}

// One block per SMALL_MMA_TILE x SMALL_MMA_TILE tile of one matrix's C (blockIdx.x, along N
// first; the matrix: blockIdx.z), a warp per 16 rows of min(M, 64).  DT: float16 or bfloat16.
template <int DT, int ODT, char OPA, char OPB>
__global__ void __launch_bounds__(SMALL_MMA_TILE / 16 * 32)
batched_small_mma(int M, int N, int K, float alpha, const typename StorageOf<DT>::type* __restrict__ A, int lda,
                  const typename StorageOf<DT>::type* __restrict__ B, int ldb, float beta,
                  typename StorageOf<ODT>::type* __restrict__ C, int ldc, long long stride_a, long long stride_b,
                  long long stride_c) {
    constexpr int NT = SMALL_MMA_TILE / 8;   // n8 tiles of a row of C a warp takes at most
    __shared__ __align__(16) unsigned short staged_a[SMALL_MMA_TILE * SMALL_MMA_LDK];
    __shared__ __align__(16) unsigned short staged_b[SMALL_MMA_TILE * SMALL_MMA_LDK];
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    const int col_tiles = (N + SMALL_MMA_TILE - 1) / SMALL_MMA_TILE;
    const int m0 = blockIdx.x / col_tiles * SMALL_MMA_TILE, n0 = blockIdx.x % col_tiles * SMALL_MMA_TILE;
    const int rows = min(SMALL_MMA_TILE, M - m0), cols = min(SMALL_MMA_TILE, N - n0);
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4, r0 = threadIdx.x / 32 * 16;
    const int n_tiles = (cols + 7) / 8;
    float acc[NT][4] = {};
    const int k_end = alpha == 0.0f ? 0 : K;   // alpha = 0 reads neither A nor B (BLAS)
    for (int k0 = 0; k0 < k_end; k0 += SMALL_MMA_KC) {
        const int kc = min(SMALL_MMA_KC, k_end - k0), kc16 = (kc + 15) / 16 * 16;
        if (k0 > 0) __syncthreads();   // every warp is done with the previous chunk
        // op(B)^T's element (n, k) is op(B)'s (k, n): the other layout of the same storage
        // As stored, element (r, k) at r * SMALL_MMA_LDK + k, zeros from kc to the k16 step.
        stage_lines<SMALL_MMA_LINES_IN_FLIGHT, true, OPA, OPB == 'N' ? 'T' : 'N'>(
            A, lda, m0, B, ldb, n0, k0, rows, cols, kc16, kc,
            LoadBits16(),
            [&](bool of_b, int r, int k, unsigned short v) { (of_b ? staged_b : staged_a)[r * SMALL_MMA_LDK + k] = v; });
        __syncthreads();
        // Rows and columns past the tile read staged values no output uses.
        for (int kk = 0; kk < kc16; kk += 16) {
            const unsigned a[4] = {small_mma_word(staged_a, r0 + g, kk + 2 * q),
                                   small_mma_word(staged_a, r0 + g + 8, kk + 2 * q),
                                   small_mma_word(staged_a, r0 + g, kk + 2 * q + 8),
                                   small_mma_word(staged_a, r0 + g + 8, kk + 2 * q + 8)};
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                if (j < n_tiles) {
                    const unsigned b[2] = {small_mma_word(staged_b, 8 * j + g, kk + 2 * q),
                                           small_mma_word(staged_b, 8 * j + g, kk + 2 * q + 8)};
                    mma::mma_16n8<DT>(acc[j], a, b);
                }
            }
        }
    }
    // The accumulator of n8 tile j: rows g and g + 8 of the warp's 16, columns 2q and 2q + 1.
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        if (j >= n_tiles) break;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = r0 + g + 8 * h;
            if (r >= rows) continue;
            auto* row = C + (long long)(m0 + r) * ldc + n0;
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int col = 8 * j + 2 * q + c;
                if (col < cols) store_scaled_as(row + col, acc[j][2 * h + c], alpha, beta);
            }
        }
    }
}

}  // namespace gemmlab
