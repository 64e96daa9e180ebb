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
    for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) {
        const long long r = i / cols, c = i % cols;
        atomicAdd(&local[(__float_as_uint(X[r * ld + c]) >> 23) & 0xFFu], 1u);
    }
    __syncthreads();
    if (local[threadIdx.x]) atomicAdd(&hist[threadIdx.x], (unsigned long long)local[threadIdx.x]);
}

}  // namespace gemmlab
