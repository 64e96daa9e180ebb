// precision="fp32_tc"'s choice of method, made on the GPU (not a rung): from the
// exponent histograms of A and B (exponent_histogram.cu) it applies the rules of
// gemmlab.ec.choose -- or, with scaled_only (precision="fp16_ec_scaled"), of
// scaled_choice -- and writes the method and the scale exponents into the record
// that the split pre-pass and the GEMMs read (ec/choice.cuh).  On the GPU so that
// the call never waits for the host: the stream runs on, and the call can be
// captured in a CUDA graph.  The rules' constants are ec/choice_rules.cuh's,
// which gemmlab.ec reads too.  One block, a thread per exponent bin.
#include <gemmlab/ec/choice.cuh>
#include <gemmlab/ec/choice_rules.cuh>

namespace gemmlab {

constexpr int CHOOSE_THREADS = 256;       // one per bin of exponent_histogram.cu (EXPONENT_BINS)

// Every thread's N values summed over the block; every thread gets the totals.
template <int N>
__device__ __forceinline__ void block_sum(unsigned long long (&v)[N]) {
    __shared__ unsigned long long warp_sums[CHOOSE_THREADS / 32][N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) v[i] += __shfl_xor_sync(0xFFFFFFFFu, v[i], o);
        if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32][i] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) {
        v[i] = 0;
#pragma unroll
        for (int w = 0; w < CHOOSE_THREADS / 32; ++w) v[i] += warp_sums[w][i];
    }
}

// Bin t's count if its elements lie below 2^e (ExponentStats.fraction_below's bins 1 .. e+127-1).
__device__ __forceinline__ unsigned long long count_below(unsigned long long count, int t, int e) {
    return t < min(max(e + EXPONENT_BIAS, 1), 2 * EXPONENT_BIAS + 1) ? count : 0ull;
}

// gemmlab.ec._fits: scaled by 2^s, the largest value fits and few enough fall below FP16's normals.
__device__ __forceinline__ bool fits(unsigned long long normal, int top, int s, unsigned long long below) {
    return normal == 0 || (top + s <= FP16_TOP && below * UNDERFLOW_DEN <= normal * UNDERFLOW_NUM);
}

__global__ void __launch_bounds__(CHOOSE_THREADS, 1)
ec_choose_method(const unsigned long long* __restrict__ hist_a, const unsigned long long* __restrict__ hist_b,
                 int scaled_only, long long* __restrict__ choice, long long* __restrict__ report) {
    __shared__ unsigned int top_bin[2];
    const int t = threadIdx.x;
    if (t < 2) top_bin[t] = 0;
    // Bins 1 .. 254 hold the normal elements (0: zeros and subnormals, 255: Inf and NaN).
    const bool normal = t >= 1 && t <= 2 * EXPONENT_BIAS;
    const unsigned long long ca = normal ? hist_a[t] : 0ull, cb = normal ? hist_b[t] : 0ull;
    __syncthreads();
    // Each matrix's normal elements and largest exponent.
    unsigned long long normals[2] = {ca, cb};
    block_sum(normals);
    const unsigned ta = __reduce_max_sync(0xFFFFFFFFu, ca ? t : 0), tb = __reduce_max_sync(0xFFFFFFFFu, cb ? t : 0);
    if (t % 32 == 0) {
        atomicMax(&top_bin[0], ta);
        atomicMax(&top_bin[1], tb);
    }
    __syncthreads();
    const int top_a = int(top_bin[0]) - EXPONENT_BIAS, top_b = int(top_bin[1]) - EXPONENT_BIAS;
    const int sa = scale_exponent(normals[0] != 0, top_a), sb = scale_exponent(normals[1] != 0, top_b);
    // The elements below each threshold the rules (and the report) look at.
    unsigned long long below[6] = {count_below(ca, t, FP16_NORMAL_MIN), count_below(cb, t, FP16_NORMAL_MIN),
                                   count_below(ca, t, FP16_NORMAL_MIN - sa), count_below(cb, t, FP16_NORMAL_MIN - sb),
                                   count_below(ca, t, top_a - WIDE_BINADES), count_below(cb, t, top_b - WIDE_BINADES)};
    block_sum(below);
    if (t >= CHOICE_FIELDS) return;
    // gemmlab.ec.choose: FP16 as they are, else FP16 scaled, else TF32; scaled_choice: always scaled.
    int method = METHOD_TF32_EC;
    if (scaled_only)
        method = METHOD_FP16_EC_SCALED;
    else if (fits(normals[0], top_a, 0, below[0]) && fits(normals[1], top_b, 0, below[1]))
        method = METHOD_FP16_EC;
    else if (fits(normals[0], top_a, sa, below[2]) && fits(normals[1], top_b, sb, below[3]))
        method = METHOD_FP16_EC_SCALED;
    const bool scaled = method == METHOD_FP16_EC_SCALED;
    // Thread t writes field t.
    long long v = 0;
    switch (t) {
        case CHOICE_METHOD: v = method; break;
        case CHOICE_SCALE_A: v = scaled ? sa : 0; break;
        case CHOICE_SCALE_B: v = scaled ? sb : 0; break;
        case CHOICE_TOP_A: v = top_a; break;
        case CHOICE_TOP_B: v = top_b; break;
        case CHOICE_NORMAL_A: v = (long long)normals[0]; break;
        case CHOICE_NORMAL_B: v = (long long)normals[1]; break;
        case CHOICE_WIDE_A: v = (long long)below[4]; break;
        case CHOICE_WIDE_B: v = (long long)below[5]; break;
        case CHOICE_TOP_SCALE_A: v = method == METHOD_TF32_EC ? 0 : sa; break;
        case CHOICE_TOP_SCALE_B: v = method == METHOD_TF32_EC ? 0 : sb; break;
        default: break;
    }
    choice[t] = v;
    if (report != nullptr) report[t] = v;
}

}  // namespace gemmlab
