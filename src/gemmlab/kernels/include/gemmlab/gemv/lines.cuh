// gemmlab/gemv/lines.cuh: how the batch rungs (gemv/04_batched_small.cu and
// gemv/05_batched_small_mma.cu) walk their operands when they stage them.
#pragma once

#include <gemmlab/layout.cuh>
#include <gemmlab/gemv/elements.cuh>

namespace gemmlab {

// The operands are staged in lines: runs of up to 32 elements along their stored rows, one
// per lane, so a warp's load of a line is coalesced in either layout and no thread divides.
// For an operand of `rows` x `kc` elements (element (r, k) at elem_offset<OP>(r, k)):
// OP 'N' stores rows along k, so line r holds (r, k = lane) (kc <= 32: one staged chunk); OP 'T'
// stores them along r, so line (k, h) holds (r = 32 h + lane, k), h < 2 (rows <= 64).
template <char OP>
__device__ __forceinline__ int small_lines(int rows, int kc) {
    return OP == 'N' ? rows : kc * ((rows + 31) / 32);
}

// The element (r, k) of `line` that this lane takes; false where it lies past rows or kc.
template <char OP>
__device__ __forceinline__ bool small_element(int line, int lane, int rows, int kc, int& r, int& k) {
    if constexpr (OP == 'N') {
        r = line, k = lane;
        return lane < kc;
    } else {
        const bool halves = rows > 32;
        k = halves ? line >> 1 : line, r = (halves ? (line & 1) * 32 : 0) + lane;
        return r < rows;
    }
}

// The loads the rungs stage with (functors: NVRTC 12 compiles an unannotated generic lambda in
// device code as a host function): an element as FP32 (rung 4), and a 16-bit element's bits as
// stored (rung 5).
struct LoadAsFloat {
    template <class S>
    __device__ __forceinline__ float operator()(const S* p) const { return load_ro(p); }
};
struct LoadBits16 {
    template <class S>
    __device__ __forceinline__ unsigned short operator()(const S* p) const {
        return __ldg(reinterpret_cast<const unsigned short*>(p));
    }
};

// Stage op(A)'s rows x kc elements (from (m0, k0)) and op(B)^T's cols x kc (from (n0, k0);
// OPBT is op(B)^T's layout, the other of op(B)'s): each warp takes every warps-th line of A's
// and then B's, loads U of them (load(p): the element at p, as the rung stages it) before it
// writes any (put(of_b, r, k, v)).  With ZERO_PAST, the lines reach kc but hold elements only
// for k < k_end, zeros after (a rung whose steps of K are wider than the operand's end).
template <int U, bool ZERO_PAST, char OPA, char OPBT, class S, class Load, class Put>
__device__ __forceinline__ void stage_lines(const S* __restrict__ A, int lda, int m0, const S* __restrict__ B, int ldb,
                                            int n0, int k0, int rows, int cols, int kc, int k_end, Load load, Put put) {
    using V = decltype(load(A));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int lines_a = small_lines<OPA>(rows, kc), lines = lines_a + small_lines<OPBT>(cols, kc);
    for (int l0 = warp; l0 < lines; l0 += U * warps) {
        V v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int line = l0 + u * warps;   // the same for the whole warp: no divergence
            int r, k;
            v[u] = V(0);
            if (line < lines_a) {
                if (small_element<OPA>(line, lane, rows, kc, r, k) && (!ZERO_PAST || k < k_end))
                    v[u] = load(&A[elem_offset<OPA>(m0 + r, k0 + k, lda)]);
            } else if (line < lines) {
                if (small_element<OPBT>(line - lines_a, lane, cols, kc, r, k) && (!ZERO_PAST || k < k_end))
                    v[u] = load(&B[elem_offset<OPBT>(n0 + r, k0 + k, ldb)]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int line = l0 + u * warps;
            int r, k;
            if (line < lines_a) {
                if (small_element<OPA>(line, lane, rows, kc, r, k)) put(false, r, k, v[u]);
            } else if (line < lines) {
                if (small_element<OPBT>(line - lines_a, lane, cols, kc, r, k)) put(true, r, k, v[u]);
            }
        }
    }
}

}  // namespace gemmlab
