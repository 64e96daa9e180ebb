// The data behind precision="fp32_tc"'s choice of method (not a rung): how many
// elements of a rows x cols matrix (leading dimension ld) have each FP32
// exponent.  Bin e (0..255) counts the elements whose biased exponent field is
// e: bin 0 holds zeros and subnormals, bin 255 Inf and NaN, bin e the normals
// in [2^(e-127), 2^(e-126)).  hist must hold EXPONENT_BINS zeroed counters.
// A batch of matrices stride elements apart (along gridDim.y) all add into hist:
// choose_method.cu decides from one histogram per operand.  One launch counts
// both operands, blockIdx.z choosing which (a small fp32_tc call costs mostly
// the host's launches): each has its own shape, batch and histogram, and the
// blocks of the grid (the larger operand's) that the other does not need return.
namespace gemmlab {

constexpr int EXPONENT_BINS = 256;       // one per value of FP32's 8-bit exponent field
constexpr int HISTOGRAM_THREADS = 256;   // threads per block: one per bin
constexpr int HISTOGRAM_WARPS = HISTOGRAM_THREADS / 32;
constexpr int HISTOGRAM_LOADS = 4;       // 16-byte loads a lane has in flight

__device__ __forceinline__ void count_exponent(unsigned* warp_hist, float v) {
    atomicAdd(&warp_hist[(__float_as_uint(v) >> 23) & 0xFFu], 1u);
}

// One block's share of one operand: the rows of matrix blockIdx.y (of `matrices`)
// that fall to it, counted into hist.  A block past the operand's matrices or rows
// (the grid is the larger operand's) returns at once.
__device__ __forceinline__ void count_operand(unsigned (&local)[HISTOGRAM_WARPS][EXPONENT_BINS], int rows, int cols,
                                              const float* __restrict__ X, int ld, long long stride, int matrices,
                                              unsigned long long* __restrict__ hist) {
    if (int(blockIdx.y) >= matrices || int(blockIdx.x) * HISTOGRAM_WARPS >= rows) return;
    X += blockIdx.y * stride;
#pragma unroll
    for (int w = 0; w < HISTOGRAM_WARPS; ++w) local[w][threadIdx.x] = 0;
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    unsigned* mine = local[warp];
    // Warps take rows (a block per row would leave most of its threads idle on
    // narrow ones).  A row's elements before its first 16-byte boundary and after
    // its last are counted one by one; between them, float4s: consecutive lanes
    // take consecutive float4s (coalesced), HISTOGRAM_LOADS apiece.
    for (int r = blockIdx.x * HISTOGRAM_WARPS + warp; r < rows; r += gridDim.x * HISTOGRAM_WARPS) {
        const float* row = X + (long long)r * ld;
        const int head = min(cols, int((16 - (reinterpret_cast<unsigned long long>(row) & 15)) & 15) / 4);
        const int quads = (cols - head) / 4;
        const float4* body = reinterpret_cast<const float4*>(row + head);
        if (lane < head) count_exponent(mine, row[lane]);
        for (int q0 = 0; q0 < quads; q0 += 32 * HISTOGRAM_LOADS) {
            float4 x[HISTOGRAM_LOADS];
#pragma unroll
            for (int u = 0; u < HISTOGRAM_LOADS; ++u) {
                const int q = q0 + u * 32 + lane;
                if (q < quads) x[u] = __ldg(&body[q]);
            }
#pragma unroll
            for (int u = 0; u < HISTOGRAM_LOADS; ++u) {
                if (q0 + u * 32 + lane < quads) {
                    count_exponent(mine, x[u].x);
                    count_exponent(mine, x[u].y);
                    count_exponent(mine, x[u].z);
                    count_exponent(mine, x[u].w);
                }
            }
        }
        const int tail = head + 4 * quads + lane;
        if (tail < cols) count_exponent(mine, row[tail]);
    }
    __syncthreads();
    unsigned sum = 0;
#pragma unroll
    for (int w = 0; w < HISTOGRAM_WARPS; ++w) sum += local[w][threadIdx.x];
    if (sum) atomicAdd(&hist[threadIdx.x], (unsigned long long)sum);
}

// A pass at memory speed: each lane has HISTOGRAM_LOADS 16-byte loads in
// flight before it counts them (one load at a time leaves too few bytes in
// flight to keep DRAM busy), and each warp counts into its own shared-memory
// histogram, one shared atomic per element.  Lanes that meet on one counter wait
// for each other there, which costs less than grouping the lanes by bin first
// (__match_any_sync), above all where the exponents spread over many bins
// (benchmarks/NOTES.md).
//
// 8 blocks an SM (histogram_launches' grid): at most 32 registers a thread.
// Operand 0 (blockIdx.z == 0): rows0 x cols0 of X0 (leading dimension ld0),
// matrices0 of them stride0 elements apart, into hist0; operand 1 likewise.  Each
// branch reads its own parameters (selecting them into registers first spills).
__global__ void __launch_bounds__(HISTOGRAM_THREADS, 8)
exponent_histogram(int rows0, int cols0, const float* __restrict__ X0, int ld0, long long stride0, int matrices0,
                   unsigned long long* __restrict__ hist0,
                   int rows1, int cols1, const float* __restrict__ X1, int ld1, long long stride1, int matrices1,
                   unsigned long long* __restrict__ hist1) {
    static_assert(HISTOGRAM_THREADS == EXPONENT_BINS, "thread t clears, and finally adds, bin t");
    __shared__ unsigned local[HISTOGRAM_WARPS][EXPONENT_BINS];   // a histogram per warp
    if (blockIdx.z == 0)
        count_operand(local, rows0, cols0, X0, ld0, stride0, matrices0, hist0);
    else
        count_operand(local, rows1, cols1, X1, ld1, stride1, matrices1, hist1);
}

}  // namespace gemmlab
