// gemmlab/async_copy.cuh: global -> shared tile copies with cp.async (sm_80+),
// which move data without passing through registers and let a kernel keep
// several tiles in flight while it computes on an earlier one.
#pragma once
#include <cuda_pipeline.h>

#include <gemmlab/common.cuh>

namespace gemmlab {

// The copy loop behind the two tile copies below: one cp.async per W floats,
// element (r, c) of the tile to smem[r * SLD + c], or to smem[c * SLD + r] with
// TRANSPOSE.  CHECKED tests each request against the matrix edge and zero-fills
// what lies outside (no global read); tiles wholly inside the matrix skip the
// tests.  Measured both ways (runs 30 and 32, benchmarks/NOTES.md): the split
// costs some configurations 2-3% and gives the fastest one 12%.
template <int ROWS, int COLS, int SLD, int THREADS, int W, bool TRANSPOSE, bool CHECKED>
__device__ __forceinline__ void cp_async_requests(float* smem, const float* __restrict__ g, int ld, int row0,
                                                  int col0, int rows, int cols, int tid) {
    static_assert((ROWS * COLS / W) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int step = 0; step < ROWS * COLS / W / THREADS; ++step) {
        const int i = step * THREADS + tid;
        const int r = i / (COLS / W), c = (i % (COLS / W)) * W;
        const bool inside = !CHECKED || (row0 + r < rows && col0 + c < cols);
        const float* src = inside ? &g[(long long)(row0 + r) * ld + col0 + c] : g;
        __pipeline_memcpy_async(&smem[TRANSPOSE ? c * SLD + r : r * SLD + c], src, 4 * W, inside ? 0 : 4 * W);
    }
}

// Start copying the ROWS x COLS tile at (row0, col0) of a rows x cols matrix
// into shared memory (row stride SLD), zero-filling what lies outside the
// matrix.  VEC copies 16 bytes per request (same alignment rules as
// load_tile_vec4), else 4 bytes.  The copy completes at a later
// __pipeline_wait_prior; the caller commits the batch.
template <int ROWS, int COLS, int SLD, int THREADS, bool VEC>
__device__ __forceinline__ void cp_async_tile(float* smem, const float* __restrict__ g, int ld,
                                              int row0, int col0, int rows, int cols, int tid) {
    constexpr int W = VEC ? 4 : 1;   // floats per request
    static_assert(COLS % W == 0 && SLD % W == 0, "16-byte copies need multiples of 4 columns");
    if (row0 + ROWS <= rows && col0 + COLS <= cols)
        cp_async_requests<ROWS, COLS, SLD, THREADS, W, false, false>(smem, g, ld, row0, col0, rows, cols, tid);
    else
        cp_async_requests<ROWS, COLS, SLD, THREADS, W, false, true>(smem, g, ld, row0, col0, rows, cols, tid);
}

// The same copy, stored transposed (smem[c * SLD + r]) so that a thread's
// consecutive rows can later be read with one 16-byte shared load.  A copy
// cannot transpose 16-byte chunks, so each element is its own 4-byte copy;
// consecutive threads take consecutive columns, so the global reads coalesce.
template <int ROWS, int COLS, int SLD, int THREADS>
__device__ __forceinline__ void cp_async_tile_transposed(float* smem, const float* __restrict__ g, int ld,
                                                         int row0, int col0, int rows, int cols, int tid) {
    if (row0 + ROWS <= rows && col0 + COLS <= cols)
        cp_async_requests<ROWS, COLS, SLD, THREADS, 1, true, false>(smem, g, ld, row0, col0, rows, cols, tid);
    else
        cp_async_requests<ROWS, COLS, SLD, THREADS, 1, true, true>(smem, g, ld, row0, col0, rows, cols, tid);
}

// -- byte-level copies for tiles of any element type (tensor-core rungs) -------------------

// One cp.async of 16 bytes into shared memory (a shared-window address), of
// which the first src_bytes (0..16) are read from global memory and the rest
// are zero-filled (the instruction's src-size operand): a request that
// straddles the matrix edge reads only what lies inside, one wholly outside
// (src_bytes 0) reads nothing.  .cg: cached in L2 only -- a block reads each
// chunk once and then works from shared memory.
__device__ __forceinline__ void cp_async16(unsigned smem, const void* g, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(g), "r"(src_bytes)
                 : "memory");
}

// The same for 4 bytes (src_bytes 0 or 4): one float.
__device__ __forceinline__ void cp_async4(unsigned smem, const void* g, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(g), "r"(src_bytes)
                 : "memory");
}

// A 16-byte store to shared memory at a shared-window address.
__device__ __forceinline__ void st_shared_v4(unsigned smem, const unsigned (&w)[4]) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
}

// The request loop behind copy_tile_chunks: tile row r, chunk c (elements
// c * CH .. c * CH + CH - 1) goes to byte Layout::offset(r, c) of the tile.
// Consecutive threads take consecutive chunks of a row, so a warp reads
// contiguous global memory.  CHECKED clips each request against the matrix
// edge; tiles wholly inside skip the tests (as cp_async_requests above).
// WIDE: one 16-byte cp.async per chunk (rows 16-byte aligned).  Else one
// 4-byte cp.async per float, or for 16-bit types ordinary loads, packed and
// stored to shared memory 16 bytes at a time (cp.async moves 4 bytes at
// least, and an odd leading dimension leaves 16-bit rows only 2-byte aligned).
template <int ROWS, int COLS, int THREADS, class Layout, bool WIDE, bool CHECKED, class S>
__device__ __forceinline__ void copy_chunk_requests(unsigned smem, const S* __restrict__ g, int ld, int row0,
                                                    int col0, int rows, int cols, unsigned tid) {
    constexpr int CH = 16 / int(sizeof(S));   // elements per 16-byte chunk
    constexpr int CPR = COLS / CH;
    static_assert(COLS % CH == 0 && (ROWS * CPR) % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
    for (int step = 0; step < ROWS * CPR / THREADS; ++step) {
        const unsigned i = step * THREADS + tid;
        const unsigned r = i / CPR, c = i % CPR;
        const int gr = row0 + int(r), gc = col0 + int(c) * CH;
        const S* src = &g[(long long)gr * ld + gc];
        const unsigned dst = smem + Layout::offset(r, c);
        // Elements of this chunk inside the matrix: 0 .. CH.
        const int n = !CHECKED ? CH : (gr < rows && gc < cols) ? min(cols - gc, CH) : 0;
        if constexpr (WIDE) {
            cp_async16(dst, n ? src : g, n * int(sizeof(S)));
        } else if constexpr (sizeof(S) == 4) {
#pragma unroll
            for (int e = 0; e < CH; ++e) cp_async4(dst + 4 * e, e < n ? src + e : g, e < n ? 4 : 0);
        } else {
            unsigned short v[CH];
#pragma unroll
            for (int e = 0; e < CH; ++e)
                v[e] = e < n ? reinterpret_cast<const unsigned short*>(src)[e] : (unsigned short)0;
            unsigned w[CH / 2];
#pragma unroll
            for (int e = 0; e < CH / 2; ++e) w[e] = unsigned(v[2 * e]) | (unsigned(v[2 * e + 1]) << 16);
            st_shared_v4(dst, w);
        }
    }
}

// Start copying the ROWS x COLS tile at (row0, col0) of a row-major rows x
// cols matrix of S (float, or a 16-bit type) into shared memory at `smem` (a
// shared-window address), laid out by Layout (16-byte chunks, see
// copy_chunk_requests), zeros outside the matrix.  WIDE needs a 16-byte
// aligned base and ld * sizeof(S) a multiple of 16 (the host checks).  The
// cp.async requests complete at a later __pipeline_wait_prior; the caller
// commits the batch.  (The 16-bit narrow path is synchronous.)
template <int ROWS, int COLS, int THREADS, class Layout, bool WIDE, class S>
__device__ __forceinline__ void copy_tile_chunks(unsigned smem, const S* __restrict__ g, int ld, int row0, int col0,
                                                 int rows, int cols, unsigned tid) {
    if (row0 + ROWS <= rows && col0 + COLS <= cols)
        copy_chunk_requests<ROWS, COLS, THREADS, Layout, WIDE, false>(smem, g, ld, row0, col0, rows, cols, tid);
    else
        copy_chunk_requests<ROWS, COLS, THREADS, Layout, WIDE, true>(smem, g, ld, row0, col0, rows, cols, tid);
}

}  // namespace gemmlab
