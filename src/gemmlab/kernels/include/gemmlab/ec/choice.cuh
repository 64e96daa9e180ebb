// gemmlab/ec/choice.cuh: the record precision="fp32_tc" chooses its method into
// on the GPU (ec/choose_method.cu), and what its readers need (not a rung's idea).
// The split pre-pass and both error-corrected GEMMs take a pointer to it: null
// keeps the method of their template and the scales of their arguments; else
// the FP16 and the TF32 instantiations are both launched and the one whose parts
// were not chosen returns at once, and the scales come from the record.  Split
// over K, each candidate's reduction (simt/splitk_reduce.cu) reads it too.  One
// array of long long; gemmlab.ec reads the same fields when last_plan() asks.
#pragma once

#include <gemmlab/type_codes.cuh>

namespace gemmlab {

constexpr int CHOICE_METHOD = 0;        // METHOD_FP16_EC, METHOD_FP16_EC_SCALED or METHOD_TF32_EC
constexpr int CHOICE_SCALE_A = 1;       // A is multiplied by 2^this before the split (0 unscaled)
constexpr int CHOICE_SCALE_B = 2;
constexpr int CHOICE_TOP_A = 3;         // unbiased exponent of A's largest normal value
constexpr int CHOICE_TOP_B = 4;
constexpr int CHOICE_NORMAL_A = 5;      // A's normal elements (0: no top)
constexpr int CHOICE_NORMAL_B = 6;
constexpr int CHOICE_WIDE_A = 7;        // A's normal elements more than 2^28 below its top
constexpr int CHOICE_WIDE_B = 8;
// For the kernels that keep lo in hi's units (ec_wgmma's FOLD): the scale that puts
// A's largest value just below 2^15 whichever FP16 method was chosen (0 for TF32).
constexpr int CHOICE_TOP_SCALE_A = 9;
constexpr int CHOICE_TOP_SCALE_B = 10;
// 1 where split_scaled.cu chose: A scaled per row of op(A), B per column of op(B),
// the scales' inverses in the split workspace (the fields above then describe the
// whole matrix: its top, its normal elements, those more than 2^28 below their
// row's or column's top); the scale fields are 0.
constexpr int CHOICE_PER_ROW = 11;
// split_scaled.cu's running sums over its blocks: zero before its launch, and zeroed
// again by its last block once it has decided (so that a second launch may follow).
constexpr int CHOICE_SUM_NORMAL_A = 16;
constexpr int CHOICE_SUM_NORMAL_B = 17;
constexpr int CHOICE_SUM_BELOW_A = 18;  // normal elements below FP16's normals after their row's scale
constexpr int CHOICE_SUM_BELOW_B = 19;
constexpr int CHOICE_SUM_TOP_A = 20;    // the largest biased exponent field of a normal value
constexpr int CHOICE_SUM_TOP_B = 21;
constexpr int CHOICE_SUM_CLAMPED = 22;  // bit 0: a row of A's scale hit MAX_SCALE_EXPONENT; bit 1: B's
constexpr int CHOICE_SUM_BLOCKS = 23;   // blocks done
constexpr int CHOICE_FIELDS = 24;       // 192 bytes

// Whether the record asks for the parts of `method` (scaled FP16 runs the FP16
// kernels): the runtime form, for split-K's reduction, which serves every method.
__device__ __forceinline__ bool ec_chosen_method(const long long* choice, int method) {
    return (choice[CHOICE_METHOD] == METHOD_TF32_EC) == (method == METHOD_TF32_EC);
}

template <int METHOD>
__device__ __forceinline__ bool ec_chosen(const long long* choice) {
    return ec_chosen_method(choice, METHOD);
}

// Programmatic dependent launch (runtime.launch.LaunchShape's pdl): a kernel that reads
// the record is launched so that it may start before the kernel ahead of it in the
// stream has finished -- its launch and set-up overlap that kernel's last blocks --
// and waits here, before it reads the record or the parts, until that kernel is done
// and its writes are visible.  Every thread waits, so that this kernel cannot finish
// before the one it follows.  ec_allow_next_grid lets the next such kernel be
// launched (it waits in turn).  Both do nothing in a launch without PDL, and before
// Hopper.
__device__ __forceinline__ void ec_wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void ec_allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// What a kernel launched with PDL that reads the record does first: let the next such
// kernel be launched, wait for the record's writer, and say whether the record chose the
// parts of METHOD (the kernel returns at once if not).
template <int METHOD>
__device__ __forceinline__ bool ec_wait_and_chosen(const long long* choice) {
    ec_allow_next_grid();
    ec_wait_prior_grid();
    return ec_chosen<METHOD>(choice);
}

// The power of two of a scale field (exact: the exponent stays within +-64).
__device__ __forceinline__ float ec_choice_scale(const long long* choice, int field) {
    return ldexpf(1.0f, int(choice[field]));
}

}  // namespace gemmlab
