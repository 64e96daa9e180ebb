// Split-K, second half (not a rung: rung 8 launches it for skinny outputs with
// long K, the wgmma rung for products with fewer tiles than SMs): C = alpha *
// (sum of the SPLITS FP32 partial products) + beta * C, in C's storage type ODT
// (type_codes.cuh: FP32, FP16, BF16).  Slice s of batch z = blockIdx.y sits at
// ws[(z * splits + s) * M * N ...] (row-major, leading dimension N); C of batch
// z at stride_c elements after batch z - 1's.  One thread per element, so a
// warp's reads of each slice coalesce.  splits = 0 is the BLAS quick return
// (K = 0 or alpha = 0): C = beta * C, reading neither the workspace nor A and B
// (nor C, with beta = 0).  choice, method: null and 0, or a method chosen on the
// GPU (precision="fp32_tc", ec/choice.cuh) and the METHOD of the GEMM whose slices
// these are: both candidates' GEMMs and reductions are launched, and the one not
// chosen must return at once, or it would add a workspace its GEMM never wrote.
#include <gemmlab/ec/choice.cuh>
#include <gemmlab/storage.cuh>

namespace gemmlab {

constexpr int SPLITK_REDUCE_THREADS = 256;   // the block size the host launches with (the kernel reads blockDim.x)

template <int ODT>
__global__ void splitk_reduce(int M, int N, int splits, const float* __restrict__ ws, float alpha,
                              float beta, typename StorageOf<ODT>::type* __restrict__ C, int ldc, long long stride_c,
                              const long long* __restrict__ choice, int method) {
    if (choice != nullptr && !ec_chosen_method(choice, method)) return;
    ws += blockIdx.y * (long long)splits * M * N;
    C += blockIdx.y * stride_c;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)M * N) return;
    const long long slice = (long long)M * N;
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += ws[s * slice + i];
    const int row = int(i / N), col = int(i % N);
    store_scaled_as(&C[(long long)row * ldc + col], sum, alpha, beta);
}

}  // namespace gemmlab
