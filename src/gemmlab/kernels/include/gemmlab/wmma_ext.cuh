// gemmlab/wmma_ext.cuh: build and read WMMA fragments in registers, knowing
// which lane holds which element.
//
//   #include <gemmlab/wmma_ext.cuh>
//   namespace wx = gemmlab::wmma_ext;
//   wx::load_vector_sync(frag_a, v);                 // v -> row 0 (row_major) / column 0 (col_major), rest 0
//   wx::store_vector_sync(v, acc, wmma::mem_row_major);
//   wx::make_identity(frag, alpha);                  // alpha on the diagonal, +0 elsewhere, no memory touched
//   wx::load_matrix_with_op_sync(frag, p, ldm, op);  // x = op(p[index]) converted to the fragment type
//   wx::foreach(frag, ldm, [&](int k, unsigned index) {...});
//   wx::foreach_ij(frag, [&](int k, unsigned row, unsigned col) {...});
//   wx::foreach_load<true>(frag, ldm, [&](unsigned index) { return ...; });   // skewed lane order
#pragma once

#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// The maps (lane, k) -> (row, col) are those of sm_80 and later (Ampere to
// Blackwell WMMA is built from mma.sync m16n8k16 / m16n8k8 tiles); gemmlab.fragments
// holds the same maps in Python, and `gemmlab fragments` measures them on a GPU.
// With g = lane / 4, t = lane % 4 and b0, b1, ... the bits of k:
//
//   matrix_a 16x16 (16-bit)   row g + 8 b1             col 2t + b0 + 8 b2
//   matrix_a 32x16 (16-bit)   row g + 8 b1 + 16 b3     col 2t + b0 + 8 b2
//   matrix_a  8x16 (16-bit)   row g                    col 2t + b0 + 8 b1
//   matrix_a 16x8  (tf32)     row g + 8 b0             col t + 4 b1
//   matrix_b 16x16 (16-bit)   row 2t + b0 + 8 b1       col g + 8 b2
//   matrix_b 16x8  (16-bit)   row 2t + b0 + 8 b1       col g
//   matrix_b 16x32 (16-bit)   row 2t + b0 + 8 b2       col g + 8 b1 + 16 b3
//   matrix_b  8x16 (tf32)     row t + 4 b0             col g + 8 b1
//   acc 16x16                 row g + 8 b1             col 2t + b0 + 8 b2
//   acc 32x8                  row g + 8 b1 + 16 b2     col 2t + b0
//   acc 8x32                  row 2t + b0              col g + 8 b1 + 16 b2
//
// Every element of a tile is held by exactly one lane.  Where a fragment has
// more slots than rows*cols/32 (FP16 matrix_a/matrix_b fragments keep the
// 16-slot size of sm_70), slot k repeats slot k % unique; the functions here
// keep the copies equal.  The memory layout a tile was loaded with does not
// change the map.
//
// -- supported architectures ---------------------------------------------------------
// The maps above hold on sm_80, sm_86, sm_89, sm_90, sm_100 and sm_120, and for the
// FP16 kinds on sm_75 (which has no BF16/TF32 WMMA): measured on H100 and H200
// (sm_90), derived elsewhere from the SASS ptxas emits for the dump kernel
// (tests/test_fragments.py), not measured.  KernelSpec.fragment_maps refuses
// other targets before NVRTC; this guard is for code that includes the header directly.
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ == 700
#error "gemmlab/wmma_ext.cuh: sm_70 is not supported (its fragment maps differ); supported: sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"
#elif __CUDA_ARCH__ == 720
#error "gemmlab/wmma_ext.cuh: sm_72 is not supported (its fragment maps differ); supported: sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"
#elif __CUDA_ARCH__ == 870
#error "gemmlab/wmma_ext.cuh: sm_87 is not supported (fragment maps not derived yet); supported: sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"
#elif __CUDA_ARCH__ == 880
#error "gemmlab/wmma_ext.cuh: sm_88 is not supported (fragment maps not derived yet); supported: sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"
#elif __CUDA_ARCH__ == 1010
#error "gemmlab/wmma_ext.cuh: sm_101 is not supported (fragment maps not derived yet); supported: sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"
#elif __CUDA_ARCH__ == 1100
#error "gemmlab/wmma_ext.cuh: sm_110 is not supported (fragment maps not derived yet); supported: sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"
#elif __CUDA_ARCH__ == 1030
#error "gemmlab/wmma_ext.cuh: sm_103 is not supported (fragment maps not derived yet); supported: sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"
#elif __CUDA_ARCH__ == 1210
#error "gemmlab/wmma_ext.cuh: sm_121 is not supported (fragment maps not derived yet); supported: sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120"
#endif
namespace gemmlab {
namespace wmma_ext {
namespace detail {
// Any other architecture: the error names __CUDA_ARCH__ through the template argument.
template <int CUDA_ARCH>
struct supported_arch {
    static_assert(CUDA_ARCH == 750 || CUDA_ARCH == 800 || CUDA_ARCH == 860 || CUDA_ARCH == 890 || CUDA_ARCH == 900 ||
                  CUDA_ARCH == 1000 || CUDA_ARCH == 1200,
                  "gemmlab/wmma_ext.cuh: fragment maps known for sm_75 (FP16), sm_80, sm_86, sm_89, sm_90, sm_100, sm_120 "
                  "only (not measured or derived for this target); see CUDA_ARCH in this message");
    static constexpr bool value = true;
};
static_assert(supported_arch<__CUDA_ARCH__>::value, "");
}  // namespace detail
}  // namespace wmma_ext
}  // namespace gemmlab
#endif

namespace gemmlab {
namespace wmma_ext {

namespace wmma = nvcuda::wmma;

__device__ __forceinline__ unsigned lane_id() {
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

namespace detail {

// Conversions into a fragment's storage type (tf32 is stored as float, not rounded).
template <class S> struct conv;
template <> struct conv<__half> {
    template <class V> __device__ static __half to(V v) { return __float2half_rn(float(v)); }
    __device__ static __half to(__half v) { return v; }
    __device__ static __half to(__nv_bfloat16 v) { return __float2half_rn(__bfloat162float(v)); }
};
template <> struct conv<__nv_bfloat16> {
    template <class V> __device__ static __nv_bfloat16 to(V v) { return __float2bfloat16_rn(float(v)); }
    __device__ static __nv_bfloat16 to(__nv_bfloat16 v) { return v; }
    __device__ static __nv_bfloat16 to(__half v) { return __float2bfloat16_rn(__half2float(v)); }
};
template <> struct conv<float> {
    template <class V> __device__ static float to(V v) { return float(v); }
    __device__ static float to(__half v) { return __half2float(v); }
    __device__ static float to(__nv_bfloat16 v) { return __bfloat162float(v); }
};
template <class T> __device__ __forceinline__ float to_float(T v) { return float(v); }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class A, class B> struct same { static constexpr bool value = false; };
template <class A> struct same<A, A> { static constexpr bool value = true; };

template <class T> struct is_tf32 { static constexpr bool value = false; };
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800   // sm_75 has no TF32 WMMA
template <> struct is_tf32<wmma::precision::tf32> { static constexpr bool value = true; };
#endif

// USE: 0 matrix_a, 1 matrix_b, 2 accumulator.  ORDER: 0 row-major, 1 column-major, -1 runtime (accumulators).
template <int USE, int M, int N, int K, bool TF32>
struct shape_map {
    static constexpr int rows = USE == 0 ? M : (USE == 1 ? K : M);
    static constexpr int cols = USE == 0 ? K : (USE == 1 ? N : N);
    static constexpr int unique = rows * cols / 32;

    __device__ __forceinline__ static unsigned row(unsigned lane, unsigned k) {
        const unsigned g = lane >> 2, t = lane & 3u;
        const unsigned b0 = k & 1u, b1 = (k >> 1) & 1u, b2 = (k >> 2) & 1u, b3 = (k >> 3) & 1u;
        if constexpr (USE == 0) {
            if constexpr (TF32) return g + 8 * b0;
            else if constexpr (M == 16) return g + 8 * b1;
            else if constexpr (M == 32) return g + 8 * b1 + 16 * b3;
            else return g;
        } else if constexpr (USE == 1) {
            if constexpr (TF32) return t + 4 * b0;
            else if constexpr (N == 32) return 2 * t + b0 + 8 * b2;
            else return 2 * t + b0 + 8 * b1;
        } else {
            if constexpr (M == 32) return g + 8 * b1 + 16 * b2;
            else if constexpr (M == 8) return 2 * t + b0;
            else return g + 8 * b1;
        }
    }
    __device__ __forceinline__ static unsigned col(unsigned lane, unsigned k) {
        const unsigned g = lane >> 2, t = lane & 3u;
        const unsigned b0 = k & 1u, b1 = (k >> 1) & 1u, b2 = (k >> 2) & 1u, b3 = (k >> 3) & 1u;
        if constexpr (USE == 0) {
            if constexpr (TF32) return t + 4 * b1;
            else if constexpr (M == 8) return 2 * t + b0 + 8 * b1;
            else return 2 * t + b0 + 8 * b2;
        } else if constexpr (USE == 1) {
            if constexpr (TF32) return g + 8 * b1;
            else if constexpr (N == 16) return g + 8 * b2;
            else if constexpr (N == 8) return g;
            else return g + 8 * b1 + 16 * b3;
        } else {
            if constexpr (M == 32) return 2 * t + b0;
            else if constexpr (M == 8) return g + 8 * b1 + 16 * b2;
            else return 2 * t + b0 + 8 * b2;
        }
    }
    // The bit of k that moves an element 8 places (4 for tf32) along the row
    // (ORDER 0) or the column (ORDER 1): the skew swaps slot pairs differing in it.
    __host__ __device__ static constexpr unsigned skew_bit(int order) {
        if constexpr (USE == 0) {
            if constexpr (TF32) return order == 0 ? 2u : 1u;
            else if constexpr (M == 8) return order == 0 ? 2u : 0u;   // 8 rows only: no row step of 8
            else return order == 0 ? 4u : 2u;
        } else if constexpr (USE == 1) {
            if constexpr (TF32) return order == 0 ? 2u : 1u;
            else if constexpr (N == 32) return order == 0 ? 2u : 4u;
            else if constexpr (N == 8) return order == 0 ? 0u : 2u;
            else return order == 0 ? 4u : 2u;
        } else {
            if constexpr (M == 32) return order == 0 ? 0u : 2u;
            else if constexpr (M == 8) return order == 0 ? 2u : 0u;
            else return order == 0 ? 4u : 2u;
        }
    }
};

template <class Frag> struct frag_info;
template <int M, int N, int K, class T, class L>
struct frag_info<wmma::fragment<wmma::matrix_a, M, N, K, T, L>> {
    using map = shape_map<0, M, N, K, is_tf32<T>::value>;
    static constexpr int order = same<L, wmma::col_major>::value ? 1 : 0;
    static constexpr bool accumulator = false;
};
template <int M, int N, int K, class T, class L>
struct frag_info<wmma::fragment<wmma::matrix_b, M, N, K, T, L>> {
    using map = shape_map<1, M, N, K, is_tf32<T>::value>;
    static constexpr int order = same<L, wmma::col_major>::value ? 1 : 0;
    static constexpr bool accumulator = false;
};
template <int M, int N, int K, class T>
struct frag_info<wmma::fragment<wmma::accumulator, M, N, K, T, void>> {
    using map = shape_map<2, M, N, K, false>;
    static constexpr int order = -1;
    static constexpr bool accumulator = true;
};

template <class Frag>
using storage_t = typename Frag::storage_element_type;

template <class Frag>
__device__ __forceinline__ void copy_duplicates(Frag& frag) {
    constexpr int U = frag_info<Frag>::map::unique;
#pragma unroll
    for (int k = U; k < Frag::num_elements; ++k)
        frag.x[k] = frag.x[k % U];
}

template <int ORDER>
__device__ __forceinline__ unsigned mem_index(unsigned row, unsigned col, unsigned ldm) {
    return ORDER == 0 ? row * ldm + col : col * ldm + row;
}

template <int ORDER, class Frag, class F>
__device__ __forceinline__ void foreach_impl(Frag& frag, unsigned ldm, F&& f) {
    using map = typename frag_info<Frag>::map;
    const unsigned lane = lane_id();
#pragma unroll
    for (int k = 0; k < Frag::num_elements; ++k)
        f(k, mem_index<ORDER>(map::row(lane, k), map::col(lane, k), ldm));
}

// x[k] = g(index of element k).  With SKEW, lanes whose first element starts in
// an odd 128-byte line (for elements of ELEM_BYTES bytes) visit each slot pair
// (s, s ^ bit) in the other order, so that at each step half the warp reads 8
// elements further along the line: rows that map onto the same banks then hit
// different banks.  Register indices stay static (selects, no local memory).
template <int ORDER, bool SKEW, int ELEM_BYTES, class Frag, class G>
__device__ __forceinline__ void foreach_load_impl(Frag& frag, unsigned ldm, G&& g) {
    using map = typename frag_info<Frag>::map;
    using S = storage_t<Frag>;
    constexpr int U = map::unique;
    constexpr unsigned BIT = map::skew_bit(ORDER);
    const unsigned lane = lane_id();
    if constexpr (!SKEW || BIT == 0u) {
#pragma unroll
        for (int k = 0; k < U; ++k)
            frag.x[k] = conv<S>::to(g(mem_index<ORDER>(map::row(lane, k), map::col(lane, k), ldm)));
    } else {
        const unsigned first = mem_index<ORDER>(map::row(lane, 0), map::col(lane, 0), ldm);
        const bool swap = ((first * ELEM_BYTES) >> 7) & 1u;
#pragma unroll
        for (int s = 0; s < U; ++s) {
            if ((s & BIT) != 0u) continue;
            const unsigned e0 = swap ? (s | BIT) : unsigned(s);
            const unsigned e1 = swap ? unsigned(s) : (s | BIT);
            const S v0 = conv<S>::to(g(mem_index<ORDER>(map::row(lane, e0), map::col(lane, e0), ldm)));
            const S v1 = conv<S>::to(g(mem_index<ORDER>(map::row(lane, e1), map::col(lane, e1), ldm)));
            frag.x[s] = swap ? v1 : v0;
            frag.x[s | BIT] = swap ? v0 : v1;
        }
    }
    copy_duplicates(frag);
}

}  // namespace detail

// -- visiting elements ---------------------------------------------------------------

// f(k, row, col) for every slot k of the fragment (copies included).
template <class Frag, class F>
__device__ __forceinline__ void foreach_ij(Frag& frag, F&& f) {
    using map = typename detail::frag_info<Frag>::map;
    const unsigned lane = lane_id();
#pragma unroll
    for (int k = 0; k < Frag::num_elements; ++k)
        f(k, map::row(lane, k), map::col(lane, k));
}

// f(k, index) for every slot k, index = the element's offset in a tile stored
// with leading dimension ldm in the fragment's layout (matrix_a/matrix_b) ...
template <class Frag, class F>
__device__ __forceinline__ void foreach(Frag& frag, unsigned ldm, F&& f) {
    static_assert(!detail::frag_info<Frag>::accumulator, "accumulators: pass a wmma::layout_t as well");
    detail::foreach_impl<detail::frag_info<Frag>::order>(frag, ldm, f);
}
// ... or in the layout given (accumulators).
template <class Frag, class F>
__device__ __forceinline__ void foreach(Frag& frag, unsigned ldm, wmma::layout_t layout, F&& f) {
    if (layout == wmma::mem_row_major) detail::foreach_impl<0>(frag, ldm, f);
    else detail::foreach_impl<1>(frag, ldm, f);
}

// x[k] = g(index) converted to the fragment's type; SKEW reorders the lanes'
// reads to spread shared-memory banks (ELEM_BYTES: size of what g reads).
template <bool SKEW = false, int ELEM_BYTES = 0, class Frag, class G>
__device__ __forceinline__ void foreach_load(Frag& frag, unsigned ldm, G&& g) {
    static_assert(!detail::frag_info<Frag>::accumulator, "accumulators: pass a wmma::layout_t as well");
    constexpr int EB = ELEM_BYTES ? ELEM_BYTES : int(sizeof(detail::storage_t<Frag>));
    detail::foreach_load_impl<detail::frag_info<Frag>::order, SKEW, EB>(frag, ldm, g);
}
template <bool SKEW = false, int ELEM_BYTES = 0, class Frag, class G>
__device__ __forceinline__ void foreach_load(Frag& frag, unsigned ldm, wmma::layout_t layout, G&& g) {
    constexpr int EB = ELEM_BYTES ? ELEM_BYTES : int(sizeof(detail::storage_t<Frag>));
    if (layout == wmma::mem_row_major) detail::foreach_load_impl<0, SKEW, EB>(frag, ldm, g);
    else detail::foreach_load_impl<1, SKEW, EB>(frag, ldm, g);
}

// -- loads and stores ------------------------------------------------------------------

// x = op(p[index]) converted to the fragment's type: an element-wise function
// applied while loading (e.g. the FP32 -> FP16 hi/lo split), from global or
// shared memory of any element type.
template <bool SKEW = false, class Frag, class T, class Op>
__device__ __forceinline__ void load_matrix_with_op_sync(Frag& frag, const T* p, unsigned ldm, Op&& op) {
    foreach_load<SKEW, int(sizeof(T))>(frag, ldm, [&](unsigned i) { return op(p[i]); });
}
template <bool SKEW = false, class Frag, class T, class Op>
__device__ __forceinline__ void load_matrix_with_op_sync(Frag& frag, const T* p, unsigned ldm,
                                                         wmma::layout_t layout, Op&& op) {
    foreach_load<SKEW, int(sizeof(T))>(frag, ldm, layout, [&](unsigned i) { return op(p[i]); });
}

namespace detail {
template <int ORDER, class Frag, class T>
__device__ __forceinline__ void load_vector_impl(Frag& frag, const T* v) {
    using map = typename frag_info<Frag>::map;
    using S = storage_t<Frag>;
    constexpr int U = map::unique;
    const unsigned lane = lane_id();
#pragma unroll
    for (int k = 0; k < U; ++k) {
        const unsigned r = map::row(lane, k), c = map::col(lane, k);
        const unsigned line = ORDER == 0 ? r : c, pos = ORDER == 0 ? c : r;
        frag.x[k] = line == 0 ? conv<S>::to(v[pos]) : conv<S>::to(0.0f);
    }
    copy_duplicates(frag);
}
template <int ORDER, class Frag, class T>
__device__ __forceinline__ void store_vector_impl(T* v, const Frag& frag) {
    using map = typename frag_info<Frag>::map;
    constexpr int U = map::unique;
    const unsigned lane = lane_id();
#pragma unroll
    for (int k = 0; k < U; ++k) {
        const unsigned r = map::row(lane, k), c = map::col(lane, k);
        if ((ORDER == 0 ? r : c) == 0) v[ORDER == 0 ? c : r] = conv<T>::to(frag.x[k]);
    }
}
}  // namespace detail

// The fragment load_matrix_sync would give for a tile whose first row
// (row_major) or first column (col_major) is v and whose other elements are 0,
// without a tile in memory: v has cols (row_major) or rows (col_major) elements.
template <class Frag, class T>
__device__ __forceinline__ void load_vector_sync(Frag& frag, const T* v) {
    static_assert(!detail::frag_info<Frag>::accumulator, "accumulators: pass a wmma::layout_t as well");
    detail::load_vector_impl<detail::frag_info<Frag>::order>(frag, v);
}
template <class Frag, class T>
__device__ __forceinline__ void load_vector_sync(Frag& frag, const T* v, wmma::layout_t layout) {
    if (layout == wmma::mem_row_major) detail::load_vector_impl<0>(frag, v);
    else detail::load_vector_impl<1>(frag, v);
}

// The first row (mem_row_major) or first column (mem_col_major) of the tile
// into v; each element is written once, by the lane that holds it.
template <class T, class Frag>
__device__ __forceinline__ void store_vector_sync(T* v, const Frag& frag, wmma::layout_t layout) {
    if (layout == wmma::mem_row_major) detail::store_vector_impl<0>(v, frag);
    else detail::store_vector_impl<1>(v, frag);
}
template <class T, class Frag>
__device__ __forceinline__ void store_vector_sync(T* v, const Frag& frag) {
    static_assert(!detail::frag_info<Frag>::accumulator, "accumulators: pass a wmma::layout_t as well");
    detail::store_vector_impl<detail::frag_info<Frag>::order>(v, frag);
}

// alpha on the diagonal (row == col of the tile, also for 32x8 and 8x32) and +0
// everywhere else, built in registers: the fragment load_matrix_sync gives for an
// identity matrix with alpha written on its diagonal.  The off-diagonal zeros are
// +0 whatever alpha is -- not the IEEE product alpha * I, which would hold -0 for a
// negative alpha and NaN for a NaN one (tests/test_wmma_ext.py checks the bits).
template <class Frag, class A>
__device__ __forceinline__ void make_identity(Frag& frag, A alpha) {
    using S = detail::storage_t<Frag>;
    const S one = detail::conv<S>::to(alpha), zero = detail::conv<S>::to(0.0f);
    foreach_ij(frag, [&](int k, unsigned r, unsigned c) { frag.x[k] = r == c ? one : zero; });
}

}  // namespace wmma_ext
}  // namespace gemmlab
