// gemmlab/type_codes.cuh: the small integer codes that template parameters
// take, so that NVRTC name expressions stay short (wgmma_gemm<1, 1, ...>).  The
// host builds those names from the same numbers (registry.TYPE_CODES,
// registry.EC_METHODS, fragments.USES / DTYPES); tests/test_cuda_constants.py
// checks that both sides agree.
#pragma once

namespace gemmlab {

// Element types (DT, ODT) of the tensor-core templates: storage and MMA type.
constexpr int TYPE_FLOAT16 = 0;
constexpr int TYPE_BFLOAT16 = 1;
constexpr int TYPE_TF32 = 2;   // float storage, rounded to TF32 for the MMA
constexpr int TYPE_FLOAT32 = 3;
// FP8 operands of the wgmma_fp8 rung (1-byte storage; the wgmma's .e4m3 / .e5m2).
constexpr int TYPE_FLOAT8_E4M3 = 4;
constexpr int TYPE_FLOAT8_E5M2 = 5;

// Error-corrected FP32 methods (METHOD): which two parts a value is split into.
constexpr int METHOD_FP16_EC = 0;
constexpr int METHOD_TF32_EC = 1;
// The scaled FP16 method, as gemmlab.ec's device choice records it (ec/choice.cuh):
// no template is built for it, it runs METHOD_FP16_EC's with scales.
constexpr int METHOD_FP16_EC_SCALED = 2;

// WMMA fragment uses (USE) and layouts (COL) of the lab kernels' templates.
constexpr int USE_MATRIX_A = 0;
constexpr int USE_MATRIX_B = 1;
constexpr int USE_ACCUMULATOR = 2;
constexpr int LAYOUT_ROW = 0;
constexpr int LAYOUT_COL = 1;   // for accumulators: the layout they are loaded and stored with

}  // namespace gemmlab
