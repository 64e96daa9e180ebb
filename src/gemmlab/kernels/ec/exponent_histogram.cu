// The data behind precision="fp32_tc"'s choice of method: how many elements of
// a rows x cols matrix (leading dimension ld) have each FP32 exponent.  Bin e
// (0..255) counts the elements whose biased exponent field is e: bin 0 holds
// zeros and subnormals, bin 255 Inf and NaN, bin e the normals in
// [2^(e-127), 2^(e-126)).  hist must hold 256 zeroed counters.
namespace gemmlab {

__global__ void __launch_bounds__(256) exponent_histogram(int rows, int cols, const float* __restrict__ X, int ld,
                                                          unsigned long long* __restrict__ hist) {
    __shared__ unsigned int local[256];   // per-block counts first: few global atomics
    local[threadIdx.x] = 0;
    __syncthreads();
    const long long n = (long long)rows * cols;
    // Whole warps run every iteration (bin 256 = past the end), so that the lanes
    // with one bin can add together: real data puts most elements in a few bins,
    // and one atomic per element would serialise on them.
    const long long stride = 256LL * gridDim.x;
    for (long long base = blockIdx.x * 256LL; base < n; base += stride) {
        const long long i = base + threadIdx.x;
        unsigned bin = 256u;
        if (i < n) bin = (__float_as_uint(X[(i / cols) * ld + i % cols]) >> 23) & 0xFFu;
        const unsigned same = __match_any_sync(0xFFFFFFFFu, bin);
        if (bin < 256u && (threadIdx.x % 32) == unsigned(__ffs(same) - 1)) atomicAdd(&local[bin], unsigned(__popc(same)));
    }
    __syncthreads();
    if (local[threadIdx.x]) atomicAdd(&hist[threadIdx.x], (unsigned long long)local[threadIdx.x]);
}

}  // namespace gemmlab
