// Split-K, second half: C = alpha * (sum of the SPLITS partial products) + beta * C.
// The first half (a GEMM kernel launched with gridDim.y = splits) left slice s
// of the product in ws[s * M * N ...] (row-major, leading dimension N); batch
// z = blockIdx.y has its own splits * M * N floats of workspace and its C
// stride_c elements after batch z - 1's.  One
// thread per element; a warp reads 32 consecutive floats of each slice, so the
// reads coalesce.  Not a rung of the ladder: a helper that rung 8 launches for
// skinny outputs with long K.  With splits = 0 it is the BLAS quick return for
// an empty product (K = 0 or alpha = 0): C = beta * C, reading neither the
// workspace nor A and B (and, with beta = 0, not C either).
#include <gemmlab/common.cuh>

namespace gemmlab {

__global__ void splitk_reduce(int M, int N, int splits, const float* __restrict__ ws, float alpha,
                              float beta, float* __restrict__ C, int ldc, long long stride_c) {
    ws += blockIdx.y * (long long)splits * M * N;
    C += blockIdx.y * stride_c;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)M * N) return;
    const long long slice = (long long)M * N;
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += ws[s * slice + i];
    const int row = int(i / N), col = int(i % N);
    store_scaled(&C[(long long)row * ldc + col], sum, alpha, beta);
}

}  // namespace gemmlab
