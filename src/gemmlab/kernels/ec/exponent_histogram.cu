// The data behind precision="fp32_tc"'s choice of method (not a rung): how many
// elements of a rows x cols matrix (leading dimension ld) have each FP32
// exponent.  Bin e (0..255) counts the elements whose biased exponent field is
// e: bin 0 holds zeros and subnormals, bin 255 Inf and NaN, bin e the normals
// in [2^(e-127), 2^(e-126)).  hist must hold EXPONENT_BINS zeroed counters.
// gridDim.y matrices stride elements apart (a batch) all add into hist:
// choose_method.cu decides from one histogram per operand.
namespace gemmlab {

constexpr int EXPONENT_BINS = 256;       // one per value of FP32's 8-bit exponent field
constexpr int HISTOGRAM_THREADS = 256;   // threads per block: one per bin

__global__ void __launch_bounds__(HISTOGRAM_THREADS)
exponent_histogram(int rows, int cols, const float* __restrict__ X, int ld, long long stride,
                   unsigned long long* __restrict__ hist) {
    static_assert(HISTOGRAM_THREADS == EXPONENT_BINS, "thread t clears, and finally adds, bin t");
    __shared__ unsigned int local[EXPONENT_BINS];   // per-block counts first: few global atomics
    X += blockIdx.y * stride;
    local[threadIdx.x] = 0;
    __syncthreads();
    // Blocks take rows, threads consecutive columns (coalesced reads).  Whole warps
    // run every step (bin EXPONENT_BINS = past the row's end), so that the lanes
    // with one bin add together: real data puts most elements in a few bins, and
    // one shared atomic per element would serialise on them.
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = X + (long long)r * ld;
        for (int c0 = 0; c0 < cols; c0 += HISTOGRAM_THREADS) {
            const int c = c0 + threadIdx.x;
            const unsigned bin = c < cols ? (__float_as_uint(row[c]) >> 23) & 0xFFu : unsigned(EXPONENT_BINS);
            const unsigned same = __match_any_sync(0xFFFFFFFFu, bin);
            if (bin < unsigned(EXPONENT_BINS) && threadIdx.x % 32 == unsigned(__ffs(same) - 1))
                atomicAdd(&local[bin], unsigned(__popc(same)));
        }
    }
    __syncthreads();
    if (local[threadIdx.x]) atomicAdd(&hist[threadIdx.x], (unsigned long long)local[threadIdx.x]);
}

}  // namespace gemmlab
