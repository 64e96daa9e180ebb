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
    // Blocks take rows, threads consecutive columns (coalesced reads).  Whole warps
    // run every step (bin 256 = past the row's end), so that the lanes with one
    // bin add together: real data puts most elements in a few bins, and one
    // shared atomic per element would serialise on them.
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = X + (long long)r * ld;
        for (int c0 = 0; c0 < cols; c0 += 256) {
            const int c = c0 + threadIdx.x;
            const unsigned bin = c < cols ? (__float_as_uint(row[c]) >> 23) & 0xFFu : 256u;
            const unsigned same = __match_any_sync(0xFFFFFFFFu, bin);
            if (bin < 256u && threadIdx.x % 32 == unsigned(__ffs(same) - 1)) atomicAdd(&local[bin], unsigned(__popc(same)));
        }
    }
    __syncthreads();
    if (local[threadIdx.x]) atomicAdd(&hist[threadIdx.x], (unsigned long long)local[threadIdx.x]);
}

}  // namespace gemmlab
