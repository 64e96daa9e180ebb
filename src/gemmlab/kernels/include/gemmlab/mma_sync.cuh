// gemmlab/mma_sync.cuh: the warp-level tensor-core instructions under WMMA,
// written out as inline PTX (sm_80 and sm_90), and the swizzled shared-memory
// layout that lets them read tiles without bank conflicts.
//
//   mma.sync.aligned.m16n8k16  D(16x8, f32) += A(16x16, f16/bf16) B(16x8)
//   mma.sync.aligned.m16n8k8   D(16x8, f32) += A(16x8, tf32) B(8x8)
//   ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: four 8x8 tiles of 16-bit
//       elements from shared memory into registers, lane l giving the address
//       of one 16-byte row; .trans hands each lane the transposed elements.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <gemmlab/type_codes.cuh>

namespace gemmlab {
namespace mma {

// -- shared-memory layout ----------------------------------------------------------

// Tiles are stored as rows of CPR 16-byte chunks.  Chunk c of row r goes to
// chunk position swizzle(r, c) of that row: an XOR of c with a few bits of r,
// different for neighbouring rows, so that the lanes of one shared load,
// which read the same column chunk of different rows, fall in different banks
// (a 128-byte window of 8 chunks covers all 32 banks; an unswizzled tile whose
// rows are a multiple of 128 bytes long puts one column of every row in the
// same 4 banks).  The permutation depends on r % 8 only, so a tile of 8-row
// slabs can add row0 * CPR * 16 bytes to a lane's offset for any row0 that is
// a multiple of 8.
//
// For ldmatrix (LDMATRIX_ROWS): one phase reads one chunk from each of 8
// consecutive rows, which must land in 8 different positions of a window.
//   CPR >= 8:  c ^ (r % 8)
//   CPR == 4:  rows of 64 bytes, two per window: c ^ ((r / 2) % 4), so rows
//              r..r+7 cover the 8 positions of their 4 windows.
// For TF32 B fragments (!LDMATRIX_ROWS): a 32-bit load reads rows t = 0..3
// (or 4..7), 8 consecutive columns -- two neighbouring chunks {c, c+1}, c even
// -- from each: c ^ (2 (r % 4)) sends the 4 rows to the 4 chunk pairs of a
// window, and rows r and r + 4 alike (they are read by different loads).
template <int CPR, bool LDMATRIX_ROWS = true>
__device__ __forceinline__ unsigned swizzle(unsigned row, unsigned chunk) {
    static_assert(CPR == 4 || CPR % 8 == 0, "rows of 64 bytes or of a multiple of 128 bytes");
    static_assert(LDMATRIX_ROWS || CPR % 8 == 0, "TF32 B rows are a multiple of 128 bytes");
    if constexpr (!LDMATRIX_ROWS)
        return chunk ^ ((row & 3) << 1);
    else if constexpr (CPR == 4)
        return chunk ^ ((row >> 1) & 3);
    else
        return chunk ^ (row & 7);
}

// The layout as a type for TileCopy (tensor/03_mma_pipelined.cuh): byte offset of chunk
// (row, chunk) in a tile of CPR chunks per row.
template <int CPR, bool LDMATRIX_ROWS = true>
struct Swizzled {
    static constexpr int ROW_BYTES = 16 * CPR;
    static constexpr int PERIOD = LDMATRIX_ROWS ? 8 : 4;   // rows after which the swizzle repeats
    static __device__ __forceinline__ unsigned offset(unsigned row, unsigned chunk) {
        return (row * CPR + swizzle<CPR, LDMATRIX_ROWS>(row, chunk)) * 16;
    }
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// -- loads from shared memory ----------------------------------------------------------

// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 / m16n8k8";
// the same maps gemmlab.fragments measures for WMMA).  g = lane / 4,
// t = lane % 4; a register of a 16-bit fragment holds two elements (low half
// first):
//
//   m16n8k16 A   a[0]: (g, 2t..2t+1)    a[1]: (g+8, 2t..)    a[2]: (g, 2t+8..)    a[3]: (g+8, 2t+8..)
//            B   b[0]: (k 2t..2t+1, n g)                     b[1]: (k 2t+8.., n g)
//   m16n8k8  A   a[0]: (g, t)   a[1]: (g+8, t)   a[2]: (g, t+4)   a[3]: (g+8, t+4)     (one tf32 each)
//            B   b[0]: (k t, n g)               b[1]: (k t+4, n g)
//   C / D        d[0..1]: (g, 2t..2t+1)         d[2..3]: (g+8, 2t..2t+1)             (both shapes)
//
// An 8x8 ldmatrix tile gives lane l row l/4, elements 2(l%4) and 2(l%4)+1 --
// exactly a[0] of the 16-bit A layout; .trans gives lane l column l/4, rows
// 2(l%4) and 2(l%4)+1 -- exactly b[0] of a row-major (K x N) B tile.  With
// 32-bit elements an 8x8 b16 tile is 8 rows of 4 floats, and lane l gets
// (l/4, l%4): a[0] of the TF32 layout.  There is no 32-bit transpose, so TF32
// B fragments are read with one 32-bit shared load per register.
//
// Four 8x8 tiles of 16-bit elements: lanes 8i..8i+7 give the row addresses of
// tile i, which lands in r[i].
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The same, each tile transposed on the way (lane l gets column l/4).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ unsigned lds32(unsigned addr) {
    unsigned v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
}

// FP32 bits -> TF32 bits, rounded to nearest (ties away from zero), as WMMA's
// __float_to_tf32 does (three SASS instructions on sm_80/sm_90).
__device__ __forceinline__ unsigned to_tf32(unsigned f32_bits) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(f32_bits)));
    return r;
}

// The same rounding as an MMA operand sees it, in two SASS instructions
// instead of three: half a TF32 ulp added to the bits of a finite value
// (FSETP, predicated IADD), the low 13 bits left for the tensor core to drop
// -- it reads the top 19 bits of a TF32 operand only (measured, see
// benchmarks/NOTES.md; ptxas itself drops the third instruction of cvt.rna,
// the mask, in some places where the result feeds an HMMA).  So the MMA multiplies bit
// for bit what it multiplies after to_tf32, ties rounded away from zero,
// overflow to infinity.  Non-finite values are left alone: half an ulp added
// to a NaN such as 0x7fffffff would carry into the sign bit and make it -0.
// Only for values that go straight to an MMA.
__device__ __forceinline__ unsigned to_tf32_half_ulp(unsigned f32_bits) {
    return isfinite(__uint_as_float(f32_bits)) ? f32_bits + 0x1000u : f32_bits;
}

// -- the MMAs ---------------------------------------------------------------------------

// d += a b for one m16n8 tile; DT: TYPE_FLOAT16, TYPE_BFLOAT16 or TYPE_TF32 (type_codes.cuh).
template <int DT>
__device__ __forceinline__ void mma_16n8(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    if constexpr (DT == TYPE_FLOAT16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else if constexpr (DT == TYPE_BFLOAT16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        static_assert(DT == TYPE_TF32, "DT: TYPE_FLOAT16, TYPE_BFLOAT16 or TYPE_TF32");
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

// K of one MMA: 16 for the 16-bit types, 8 for TF32 -- 32 bytes of each row
// of A either way, so a K-step reads two 16-byte chunks of A per row.
template <int DT>
__host__ __device__ constexpr int k_per_mma() { return DT == TYPE_TF32 ? 8 : 16; }

// The accumulators of one m16 row of MMA tiles, acc[FN][4] (n8 tiles side
// by side), into a float slab in shared memory (row stride SLD floats): lane
// (g, t) holds rows g and g + 8, columns 2t and 2t + 1 of each tile.  With
// SLD % 32 == 8 the 8-byte stores of rows g = 0..3 cover all 32 banks and
// rows 4..7 again: two wavefronts, the least for 256 bytes.
template <int FN, int SLD>
__device__ __forceinline__ void store_acc_row(float* slab, const float (&acc)[FN][4], unsigned lane) {
    const unsigned g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < FN; ++j) {
        *reinterpret_cast<float2*>(&slab[g * SLD + 8 * j + 2 * t]) = make_float2(acc[j][0], acc[j][1]);
        *reinterpret_cast<float2*>(&slab[(g + 8) * SLD + 8 * j + 2 * t]) = make_float2(acc[j][2], acc[j][3]);
    }
}

// -- where each lane reads ------------------------------------------------------------------

// ldmatrix.x4 over a 16-row slab of a Layout tile, lane l pointing at row
// l % 16, chunk chunk0 + l / 16: the four 8x8 tiles are rows 0-7 / 8-15 of
// chunk chunk0, then of chunk0 + 1.  For A (rows M, chunks along K) that is
// the m16 x k16 fragment in a[0..3] order (chunk0 = 2 x K-step); for row-major
// B (rows K, chunks along N) with .trans, the two k16 x n8 fragments of the
// columns of chunks chunk0 and chunk0 + 1, in b[0..1], b[0..1] order.
template <class Layout>
__device__ __forceinline__ unsigned ldmatrix_lane_offset(unsigned lane, unsigned chunk0) {
    return Layout::offset(lane & 15, chunk0 + (lane >> 4));
}

// ldmatrix.x4 over a 16-row slab with the other order of its four 8x8 tiles: lanes 0-7
// point at rows 0-7 of chunk chunk0, lanes 8-15 at the same rows of chunk0 + 1, lanes
// 16-31 likewise at rows 8-15.  For a column-major A (rows K, chunks along M) with .trans
// that is the m16 x k16 fragment in a[0..3] order; for a column-major B (rows N, chunks
// along K) without it, the k16 x n8 fragments of rows 0-7 and 8-15, in b[0..1], b[0..1]
// order.
template <class Layout>
__device__ __forceinline__ unsigned ldmatrix_pairs_lane_offset(unsigned lane, unsigned chunk0) {
    return Layout::offset((lane & 7) | ((lane >> 4) << 3), chunk0 + ((lane >> 3) & 1));
}

// The TF32 B fragment of the n8 tile whose columns start at chunk chunk0
// (chunk0 even: 8 floats are two chunks): lane (g, t) reads row t, column
// g -- chunk chunk0 + g / 4, float g % 4; its b[1] is row t + 4, the same
// offset plus 4 rows.
template <class Layout>
__device__ __forceinline__ unsigned tf32_b_lane_offset(unsigned lane, unsigned chunk0) {
    return Layout::offset(lane & 3, chunk0 + (lane >> 4)) + 4 * ((lane >> 2) & 3);
}

}  // namespace mma
}  // namespace gemmlab
