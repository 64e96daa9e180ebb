// gemmlab/gemv/lines.cuh: how the batch rungs (gemv/04_batched_small.cu and
// gemv/05_batched_small_mma.cu) walk an operand when they stage it.
#pragma once

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

}  // namespace gemmlab
