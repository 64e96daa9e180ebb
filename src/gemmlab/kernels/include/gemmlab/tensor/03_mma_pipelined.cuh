// gemmlab/tensor/03_mma_pipelined.cuh: tensor rung 3's idea, feeding
// mma.sync (mma_sync.cuh: the instructions, fragment layouts and the swizzled
// shared-memory layout) from a cp.async pipeline: byte-level copies of tiles of
// any element type into swizzled stages (TileCopy), and an epilogue that goes
// through shared memory to store 16 bytes per lane.
#pragma once
#include <cuda_pipeline.h>

#include <gemmlab/mma_sync.cuh>
#include <gemmlab/tensor/02_wmma_warptile.cuh>

namespace gemmlab {

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

// One thread's share of copying a ROWS x COLS tile of a row-major matrix of S
// (float, or a 16-bit type) into shared memory, K-step after K-step.  The
// tile is cut into 16-byte chunks, CPR per row; thread tid copies chunk
// tid % CPR of rows tid / CPR + s * STEP_ROWS (consecutive threads take
// consecutive chunks of a row, so a warp reads contiguous global memory).
// Layout places chunk (row, chunk) of the tile at Layout::offset(row, chunk);
// its swizzle repeats every Layout::PERIOD rows, so this thread's chunks sit
// at one offset plus multiples of STEP_ROWS rows, and its global addresses at
// one pointer plus multiples of STEP_ROWS * ld: a few registers, a few adds per
// copy.  Elements outside the matrix are zero-filled; the checks are one
// comparison per chunk, no separate edge path.
//   WIDE: one 16-byte cp.async per chunk, reading only the part inside the
//   matrix (src-size); needs 16-byte aligned rows (the host checks).
//   Else one 4-byte cp.async per float, or for 16-bit types ordinary loads,
//   packed and stored 16 bytes at a time (cp.async moves 4 bytes at least,
//   and an odd leading dimension leaves 16-bit rows only 2-byte aligned):
//   load() into registers, land() into a stage, which the kernel may call a
//   K-step apart so that the loads' latency passes under the MMAs.
template <int ROWS, int COLS, int THREADS, class Layout, bool WIDE, class S>
struct TileCopy {
    static constexpr int CH = 16 / int(sizeof(S));   // elements per chunk
    static constexpr int CPR = COLS / CH, STEP_ROWS = THREADS / CPR, STEPS = ROWS / STEP_ROWS;
    static_assert(COLS % CH == 0 && THREADS % CPR == 0 && ROWS % STEP_ROWS == 0,
                  "the tile's chunks must split evenly over the threads, whole rows at a time");
    static_assert(STEP_ROWS % Layout::PERIOD == 0 && Layout::ROW_BYTES == 16 * CPR,
                  "a thread's chunks must share one swizzle");

    const S* p;           // this thread's first chunk, at the current K-step
    long long row_step;   // elements from one of its chunks to the next (STEP_ROWS rows)
    unsigned dst;         // byte offset of its first chunk in the tile
    int rows_left;        // rows of the matrix from its first chunk's row on
    int cols_left;        // columns of the matrix from its chunk's first column on

    __device__ __forceinline__ TileCopy(const S* g, int ld, int row0, int col0, int rows, int cols, unsigned tid) {
        const int r = int(tid / CPR), c = int(tid % CPR);
        p = g + (long long)(row0 + r) * ld + col0 + c * CH;
        row_step = (long long)STEP_ROWS * ld;
        dst = Layout::offset(r, c);
        rows_left = rows - row0 - r;
        cols_left = cols - col0 - c * CH;
    }

    // Copy the tile at the current position into the tile at shared-window
    // address `tile`; the cp.async requests complete at a later
    // __pipeline_wait_prior, the caller commits them.
    __device__ __forceinline__ void issue(unsigned tile) const {
        const int n_cols = max(0, min(cols_left, CH));   // elements of its chunks inside the matrix
        const S* q = p;
        if constexpr (WIDE) {
#pragma unroll
            for (int s = 0; s < STEPS; ++s, q += row_step) {
                const int n = s * STEP_ROWS < rows_left ? n_cols : 0;
                cp_async16(tile + dst + s * STEP_ROWS * Layout::ROW_BYTES, q, n * int(sizeof(S)));   // src-size 0: no read
            }
        } else if constexpr (sizeof(S) == 4) {
            // Narrow copies, one chunk at a time (not unrolled: the fallback
            // should not take registers from the accumulators).
#pragma unroll 1
            for (int s = 0; s < STEPS; ++s, q += row_step) {
                const int n = s * STEP_ROWS < rows_left ? n_cols : 0;
                const unsigned d = tile + dst + s * STEP_ROWS * Layout::ROW_BYTES;
#pragma unroll
                for (int e = 0; e < CH; ++e) cp_async4(d + 4 * e, q + e, e < n ? 4 : 0);
            }
        } else {
            // 16-bit elements at any alignment: ordinary loads, one chunk at a
            // time, as above.
#pragma unroll 1
            for (int s = 0; s < STEPS; ++s, q += row_step) {
                unsigned w[CH / 2];
                read_chunk(q, s * STEP_ROWS < rows_left ? n_cols : 0, w);
                st_shared_v4(tile + dst + s * STEP_ROWS * Layout::ROW_BYTES, w);
            }
        }
    }

    // 16-bit elements at any alignment: the n of a chunk's CH elements at q that lie inside the
    // matrix (zeros for the rest), by ordinary loads, packed two to a register.
    static __device__ __forceinline__ void read_chunk(const S* q, int n, unsigned (&w)[CH / 2]) {
        unsigned short v[CH];
#pragma unroll
        for (int e = 0; e < CH; ++e) v[e] = e < n ? reinterpret_cast<const unsigned short*>(q)[e] : 0;
#pragma unroll
        for (int e = 0; e < CH / 2; ++e) w[e] = unsigned(v[2 * e]) | (unsigned(v[2 * e + 1]) << 16);
    }

    // 16-bit elements at any alignment, the copy split in two (mma_pipelined's small tiles): every
    // chunk of this thread loaded before the first is used (their latencies overlap), packed in
    // registers until land() stores them.
    unsigned held[STEPS][CH / 2];
    __device__ __forceinline__ void load() {
        const int n_cols = max(0, min(cols_left, CH));
        const S* q = p;
#pragma unroll
        for (int s = 0; s < STEPS; ++s, q += row_step) read_chunk(q, s * STEP_ROWS < rows_left ? n_cols : 0, held[s]);
    }
    __device__ __forceinline__ void land(unsigned tile) const {
#pragma unroll
        for (int s = 0; s < STEPS; ++s) st_shared_v4(tile + dst + s * STEP_ROWS * Layout::ROW_BYTES, held[s]);
    }

    // Move to the next tile to the right (n columns) or below (n rows).
    __device__ __forceinline__ void next_cols(int n) { p += n; cols_left -= n; }
    __device__ __forceinline__ void next_rows(int n, int ld) { p += (long long)n * ld; rows_left -= n; }
};

// One warp writes a ROWS x COLS slab of float results, staged in shared memory
// (row stride SLD floats, 16-byte aligned rows), to C at (row0, col0):
// C = alpha * slab + beta * C (beta == 0 never reads C), converted to C's
// type, outputs outside M x N skipped.  Each lane takes V = 16 / sizeof(O)
// consecutive columns, so neighbouring lanes write neighbouring 16-byte pieces
// of a row (coalesced).  VEC: 16-byte global accesses (C 16-byte aligned,
// ldc * sizeof(O) a multiple of 16, checked by the host); pieces that cross
// the right edge of C, and every piece without VEC, go element by element.
template <int ROWS, int COLS, int SLD, bool VEC, class O>
__device__ __forceinline__ void store_slab_scaled(const float* slab, O* __restrict__ C, int ldc, int row0, int col0,
                                                  int M, int N, float alpha, float beta, unsigned lane) {
    constexpr int V = 16 / int(sizeof(O));
    constexpr int LANES_PER_ROW = COLS / V, ROWS_PER_PASS = 32 / LANES_PER_ROW;
    static_assert(COLS % V == 0 && 32 % LANES_PER_ROW == 0 && ROWS % ROWS_PER_PASS == 0 && SLD % 4 == 0,
                  "a pass of the warp covers whole rows of the slab");
    const int c = int(lane % LANES_PER_ROW) * V, col = col0 + c;
#pragma unroll 1
    for (int r = int(lane / LANES_PER_ROW); r < ROWS; r += ROWS_PER_PASS) {
        const int row = row0 + r;
        if (row >= M || col >= N) continue;
        float v[V];
#pragma unroll
        for (int e = 0; e < V; e += 4) {
            const float4 x = *reinterpret_cast<const float4*>(&slab[r * SLD + c + e]);
            v[e] = alpha * x.x; v[e + 1] = alpha * x.y; v[e + 2] = alpha * x.z; v[e + 3] = alpha * x.w;
        }
        O* out = &C[(long long)row * ldc + col];
        if (VEC && col + V <= N) {
            uint4 piece;
            O* o = reinterpret_cast<O*>(&piece);
            if (beta != 0.0f) {
                piece = *reinterpret_cast<const uint4*>(out);
#pragma unroll
                for (int e = 0; e < V; ++e) v[e] += beta * to_float(o[e]);
            }
#pragma unroll
            for (int e = 0; e < V; ++e) o[e] = from_float<O>(v[e]);
            *reinterpret_cast<uint4*>(out) = piece;
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e)
                if (col + e < N) out[e] = from_float<O>(beta == 0.0f ? v[e] : v[e] + beta * to_float(out[e]));
        }
    }
}

}  // namespace gemmlab
