// GEMV rung 1, gemv: products with a handful of rows, as in a decode step's
// x @ W.t() (M = 1 to 16 tokens).  A tiled GEMM spends a 64- to 256-row tile
// on them and wastes nearly all of it, while the time such a product needs is
// one read of op(B) -- the weights -- from memory.  So this kernel streams
// op(B) once, at memory bandwidth, and keeps the sums of all MT rows of C in
// registers (how, for each layout of op(B): above the kernel, below).
// Arithmetic in FP32 for every storage type.  Rows beyond MT take further
// passes over op(B): correct for any M, fast for M <= MT.
#include <gemmlab/layout.cuh>
#include <gemmlab/storage.cuh>
#include <gemmlab/gemv/elements.cuh>

namespace gemmlab {

constexpr int GEMV_THREADS = 256;                 // threads per block
constexpr int GEMV_WARPS = GEMV_THREADS / 32;     // K slices (op(B) 'N')
constexpr int GEMV_COLS_PER_WARP = 4;             // columns of op(B) 'T' a warp streams together
constexpr int GEMV_COLS = GEMV_WARPS * GEMV_COLS_PER_WARP;   // columns of C a block takes (op(B) 'T')
// Bytes of op(B) a thread loads at once where op(B) is column-major (16-byte
// aligned operands): along K, so that a warp reads 512 contiguous bytes a step.
constexpr int GEMV_LOAD_BYTES_K = 16;
// op(B) row-major (16-byte aligned operands): elements a lane loads at once along
// N (16 bytes of float32, 8 of 16-bit: with 8 elements, 16 rows' sums would take
// 128 registers), and the bytes of op(B) a lane holds per chunk of K (the loads
// in flight while the previous chunk is computed).  Up to GEMV_ROW_WIDE_MT rows of
// C, 16-bit loads are 16 bytes too (8 elements: 8 sums a row).
constexpr int GEMV_ROW_VEC = 4;
constexpr int GEMV_ROW_WIDE_MT = 4;
constexpr int GEMV_ROW_CHUNK_BYTES = 128;
constexpr int GEMV_ROW_MAX_LOADS = 8;     // rows a lane loads per chunk at most (more: 16 rows' sums spill)
// Chunks of op(B) past the one loading into registers that the row-major path asks
// the L2 to fetch (prefetch.global.L2: requests in flight that take no registers).
constexpr int GEMV_ROW_PREFETCH = 2;
// Bytes of op(B) per block the column-major path asks the L2 to fetch ahead, the
// same way, at 16 rows of C with 16-byte loads, where the FMAs of a chunk take long
// enough for the fetches to land; at fewer rows, with two loads a column, it was
// slower on the large layers (benchmarks/NOTES.md).
constexpr int GEMV_COL_PREFETCH_BYTES = 64 * 1024;

// Ask the L2 for the 128-byte line at p: a request in flight that holds no register.
template <class S>
__device__ __forceinline__ void prefetch_l2(const S* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, d);
    return x;
}

// ---- op(B) column-major: op(A) staged in shared memory, several columns a warp ----
//
// Each element of op(A) is used once per column of op(B).  Loaded from global
// memory (and converted) at every use, op(A) costs MT loads for each element of
// op(B): the load and convert issue rate, not memory, then bounds the kernel
// once M > 1.  So the block stages a chunk of K of all MT rows of op(A) in
// shared memory, converted to FP32 once, and each warp streams
// GEMV_COLS_PER_WARP columns at a time, so that each staged value read feeds
// that many FMAs.

// 32-bit words of op(B) one thread holds per column and K chunk: two 16-byte loads
// (aligned operands) or 8 elements (one load each); with 16 rows' sums in registers,
// half as many, except float32's two 16-byte loads, which still fit (benchmarks/NOTES.md).
// Loads of the next chunk are issued before the current chunk is computed:
// the memory latency is hidden by these words in flight, not by more warps.
template <int VEC, class S, int MT>
struct GemvChunk {
    static constexpr bool HALVED = MT >= 16 && !(VEC > 1 && sizeof(S) == 4);
    static constexpr int LOADS = (VEC > 1 ? 2 : 8) / (HALVED ? 2 : 1);   // loads a column and chunk
    static constexpr int WORDS = gemv_words<VEC, S>();              // words a load
    static constexpr int KC = 32 * VEC * LOADS;                     // K elements a chunk
};

// Whether each of the `rows` stored rows from p, `ld` elements apart, starts on the
// grid of ELEMS elements (a single row has no stride to check).  Where op(B) is
// row-major the host checks only op(B)'s rows (the kernel's ALIGNED) and the row path
// checks op(A)'s here, per matrix of a batch, so that a dY of a few rows of odd length
// (logits) costs the 16-byte loads of op(B) nothing.
template <int ELEMS, class S>
__device__ __forceinline__ bool rows_on_grid(const S* p, int ld, int rows) {
    return reinterpret_cast<unsigned long long>(p) % (ELEMS * sizeof(S)) == 0 && (rows <= 1 || ld % ELEMS == 0);
}

// Where element kk of a staged row of op(A) sits in shared memory.  A lane reads
// the VEC elements matching its load of op(B) (kk = 32 VEC j + VEC lane + v);
// with VEC = 8 those are 32 bytes, read as two 16-byte halves, and lanes 16 bytes
// apart in each read keep it free of bank conflicts.
template <int VEC>
__device__ __forceinline__ int staged_slot(int kk) {
    if constexpr (VEC == 8)
        return kk / 256 * 256 + kk % 8 / 4 * 128 + kk % 256 / 8 * 4 + kk % 4;
    else
        return kk;
}

// The loads of one chunk of op(A) (MT rows, KC elements from k0: the column-major
// path's chunk unless given) spread over the block: by VEC along K where op(A) is row-major and aligned, else one element
// each.  Elements past K read as 0.  WHOLE: the chunk lies inside K, and `wide` its
// rows start on the AVEC grid (rows_on_grid): one load an AVEC group; else element by element.
// COLUMN_SLOTS: stored where staged_slot puts them (the column path's reads); else
// in order along K (the row path reads 4 consecutive rows at once).
template <int MT, int VEC, char OPA, class S, int KC_ = GemvChunk<VEC, S, MT>::KC, bool COLUMN_SLOTS = true>
struct GemvStagedA {
    static constexpr int KC = KC_;
    static constexpr int AVEC = OPA == 'N' ? VEC : 1;
    static constexpr int ITEMS = MT * KC / AVEC;                            // loads a chunk
    static constexpr int PER_THREAD = (ITEMS + GEMV_THREADS - 1) / GEMV_THREADS;
    unsigned w[PER_THREAD][GemvChunk<AVEC, S, 1>::WORDS];

    // WHOLE: the chunk lies inside K.  Rows past M load row M - 1 again (never read).
    template <bool WHOLE>
    __device__ __forceinline__ void load(const S* __restrict__ A, int lda, int M, int K, int m0, int k0, bool wide) {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int i = threadIdx.x + j * GEMV_THREADS;
            // 'N': consecutive threads along K; 'T' (op(A) column-major): along the rows
            const int m = min(m0 + (OPA == 'N' ? i / (KC / AVEC) : i % MT), M - 1);
            const int k = k0 + (OPA == 'N' ? i % (KC / AVEC) * AVEC : i / MT);
            if (ITEMS % GEMV_THREADS == 0 || i < ITEMS) {
                if (WHOLE && wide) load_words<true, AVEC>(&A[elem_offset<OPA>(m, k, lda)], 0, w[j]);
                else load_words<false, AVEC>(&A[elem_offset<OPA>(m, k, lda)], WHOLE ? AVEC : K - k, w[j]);
            }
        }
    }

    __device__ __forceinline__ void store(float (*staged)[KC]) const {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int i = threadIdx.x + j * GEMV_THREADS;
            if (ITEMS % GEMV_THREADS == 0 || i < ITEMS) {
                const int m = OPA == 'N' ? i / (KC / AVEC) : i % MT;
                const int kk = OPA == 'N' ? i % (KC / AVEC) * AVEC : i / MT;
                float f[AVEC];
                words_to_floats<AVEC, S>(w[j], f);
#pragma unroll
                for (int v = 0; v < AVEC; ++v) staged[m][COLUMN_SLOTS ? staged_slot<VEC>(kk + v) : kk + v] = f[v];
            }
        }
    }
};

// A lane's running sums (its rows of op(A) x its columns of C; acc, total below), for
// input type S.  A sum runs over many products of K: K / 32 of them in the
// column path, a split's K / KC chunks of LOADS in the row path.  Adding each chunk's
// partial sum into a second one (total) makes the rounding error grow with the
// chunk's length plus the number of chunks instead of their product, which keeps a
// decode step's error at SGEMM's (fp32_tc runs thin products here: benchmarks/NOTES.md).
// It costs an add per chunk and a register per sum, so only for float32
// inputs (16-bit ones are rounded far more coarsely than their FP32 sums; and at one
// row the column path's two blocks an SM leave it no register to spare) and where the
// sums are few (at most 16: at 16 rows the row path has no register to spare either).
template <class S>
__host__ __device__ constexpr bool gemv_blocked_sums(int sums) {
    return sizeof(S) == 4 && sums <= 16;
}

// The end of a chunk: its partial sums (acc) into the running ones (total), where blocked.
template <class S, int ROWS, int COLS>
__device__ __forceinline__ void gemv_end_chunk(float (&total)[ROWS][COLS], float (&acc)[ROWS][COLS]) {
    if constexpr (gemv_blocked_sums<S>(ROWS * COLS)) {
#pragma unroll
        for (int m = 0; m < ROWS; ++m)
#pragma unroll
            for (int v = 0; v < COLS; ++v) {
                total[m][v] += acc[m][v];
                acc[m][v] = 0.0f;
            }
    }
}

// A lane's sum of output (m, v) once K is done.
template <class S, int ROWS, int COLS>
__device__ __forceinline__ float gemv_sum(const float (&total)[ROWS][COLS], const float (&acc)[ROWS][COLS], int m,
                                          int v) {
    return gemv_blocked_sums<S>(ROWS * COLS) ? total[m][v] : acc[m][v];
}

// dst = src, element by element: the next chunk's loads, in registers, become this chunk's.
__device__ __forceinline__ void copy_registers(unsigned& dst, unsigned src) { dst = src; }

template <class T, int N>
__device__ __forceinline__ void copy_registers(T (&dst)[N], const T (&src)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) copy_registers(dst[i], src[i]);
}

template <int MT, int VEC, char OPA, class S, class O>
__device__ __forceinline__ void gemv_columns_along_k(int M, int N, int K, float alpha, const S* __restrict__ A,
                                                     int lda, const S* __restrict__ B, int ldb, float beta,
                                                     O* __restrict__ C, int ldc) {
    using Chunk = GemvChunk<VEC, S, MT>;
    constexpr int R = GEMV_COLS_PER_WARP, KC = Chunk::KC;
    // A column's 128-byte lines in a chunk, the prefetch rounds that cover the warp's
    // columns (a lane a line), and how many chunks ahead they run.
    constexpr int LINES = KC * int(sizeof(S)) >= 128 ? KC * int(sizeof(S)) / 128 : 1;
    constexpr int PREFETCH_ROUNDS = (R * LINES + 31) / 32;
    constexpr int BLOCK_CHUNK_BYTES = GEMV_COLS * KC * int(sizeof(S));
    constexpr int PREFETCH = MT < 16 || VEC == 1 ? 0
                             : GEMV_COL_PREFETCH_BYTES / BLOCK_CHUNK_BYTES > 0 ? GEMV_COL_PREFETCH_BYTES / BLOCK_CHUNK_BYTES : 1;
    __shared__ __align__(16) float staged[MT][KC];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int chunks = (K + KC - 1) / KC;
    for (int n0 = blockIdx.x * GEMV_COLS; n0 < N; n0 += gridDim.x * GEMV_COLS) {
        // The warp's columns n0 + R warp + r (past N: column N - 1 read again, not stored).
        const S* col[R];
#pragma unroll
        for (int r = 0; r < R; ++r) col[r] = B + (long long)min(n0 + R * warp + r, N - 1) * ldb;
        auto prefetch_chunk = [&](int c) {
#pragma unroll
            for (int p = 0; p < PREFETCH_ROUNDS; ++p) {
                const int i = lane + 32 * p, r = i / LINES;
                const int k = c * KC + i % LINES * (128 / int(sizeof(S)));
                if (r < R && k < K) prefetch_l2(B + (long long)min(n0 + R * warp + r, N - 1) * ldb + k);
            }
        };
        for (int m0 = 0; m0 < M; m0 += MT) {
            float acc[MT][R] = {}, total[MT][R] = {};
            GemvStagedA<MT, VEC, OPA, S> a;
            unsigned b[R][Chunk::LOADS][Chunk::WORDS], b_next[R][Chunk::LOADS][Chunk::WORDS];
            // One chunk's loads (of op(A) and of the warp's columns), checked against K
            // element by element only in the chunk that K ends in.
            auto load_chunk = [&](int k0, unsigned (&dst)[R][Chunk::LOADS][Chunk::WORDS]) {
                const bool whole = k0 + KC <= K;
                // (ALIGNED: the host checked op(A)'s rows too, as they are staged 16 bytes at a time)
                if (whole) a.template load<true>(A, lda, M, K, m0, k0, true);
                else a.template load<false>(A, lda, M, K, m0, k0, true);
#pragma unroll
                for (int j = 0; j < Chunk::LOADS; ++j) {
                    const int k = k0 + 32 * VEC * j + VEC * lane;
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        // (in the chunk K ends in, whole 16-byte groups still load at once:
                        // a K of one and a half chunks would read a third of op(B) by element)
                        if (whole || K - k >= VEC) load_words<true, VEC>(col[r] + k, 0, dst[r][j]);
                        else load_words<false, VEC>(col[r] + k, K - k, dst[r][j]);
                    }
                }
            };
            if (chunks > 0) load_chunk(0, b);
#pragma unroll
            for (int f = 1; f <= PREFETCH; ++f)
                if (f < chunks) prefetch_chunk(f);
            for (int c = 0; c < chunks; ++c) {
                __syncthreads();           // every warp is done with the previous chunk
                a.store(staged);
                __syncthreads();
                if (c + 1 < chunks) load_chunk((c + 1) * KC, b_next);   // in flight during this chunk's FMAs
                if (c + 1 + PREFETCH < chunks) prefetch_chunk(c + 1 + PREFETCH);
                // A quarter of a 16-byte load (Q = 4 elements; 1 unaligned) of each
                // column at a time, so that few converted values are live.
                constexpr int Q = VEC < 4 ? VEC : 4;
#pragma unroll
                for (int j = 0; j < Chunk::LOADS; ++j)
#pragma unroll
                for (int h = 0; h < VEC / Q; ++h) {
                    float bq[R][Q];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        float f[VEC];
                        words_to_floats<VEC, S>(b[r][j], f);   // (the unused quarters are dead code)
#pragma unroll
                        for (int q = 0; q < Q; ++q) bq[r][q] = f[Q * h + q];
                    }
                    // Every one of the MT rows, M's or not (rows past M hold row M - 1 again
                    // and are not stored): a branch per row would keep ptxas from issuing the
                    // next rows' shared-memory reads ahead of this row's FMAs.
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        // 16-byte reads, lanes 16 bytes apart (see staged_slot)
                        const float* src = &staged[m][staged_slot<VEC>(32 * VEC * j + VEC * lane + Q * h)];
                        float aq[Q];
                        if constexpr (Q == 4) {
                            const float4 t = *reinterpret_cast<const float4*>(src);
                            aq[0] = t.x; aq[1] = t.y; aq[2] = t.z; aq[3] = t.w;
                        } else {
                            aq[0] = src[0];
                        }
#pragma unroll
                        for (int r = 0; r < R; ++r)
#pragma unroll
                            for (int q = 0; q < Q; ++q) acc[m][r] = fmaf(aq[q], bq[r][q], acc[m][r]);
                    }
                }
                gemv_end_chunk<S>(total, acc);
                copy_registers(b, b_next);
            }
            // Each sum across the warp; lanes take turns storing them.
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const float sum = warp_sum(gemv_sum<S>(total, acc, m, r));
                    const int n = n0 + R * warp + r;
                    if (lane == (m * R + r) % 32 && m0 + m < M && n < N)
                        store_scaled_as(&C[(long long)(m0 + m) * ldc + n], sum, alpha, beta);
                }
        }
    }
}

// ---- op(B) row-major: rows of op(B) streamed, op(A) staged, K split over blocks ----
//
// A block takes LANES VEC columns of C, a lane VEC of them; each chunk of K gives
// each lane LOADS consecutive rows of op(B), so that it has LOADS independent
// loads in flight (GEMV_ROW_CHUNK_BYTES) while the previous chunk is computed,
// and the L2 is asked for the GEMV_ROW_PREFETCH chunks after that.  With LANES =
// 32 a warp's lanes lie along one row; with fewer, a warp reads 32 / LANES rows at
// once (each a full line of LANES VEC elements where that is 128 bytes), which
// makes the blocks narrower and so more of them: N / (32 VEC) blocks alone would
// leave most SMs idle (32 for N = 4096).  op(A)'s MT rows of the chunk are staged
// in shared memory in FP32, as in the column-major path: the lanes of a row group
// read the same 16 bytes (a broadcast) and each value feeds VEC FMAs.  Where the
// blocks are still too few, the host splits K over gridDim.y (gemv_rows_split_k).

template <int VEC, class S, int LANES = 32>
struct GemvRowChunk {
    static constexpr int WORDS = gemv_words<VEC, S>();                            // words a load
    static constexpr int BY_BYTES = GEMV_ROW_CHUNK_BYTES / (VEC * int(sizeof(S)));
    static constexpr int LOADS = BY_BYTES < GEMV_ROW_MAX_LOADS ? BY_BYTES : GEMV_ROW_MAX_LOADS;   // rows a lane
    static constexpr int GROUPS = 32 / LANES;                                     // rows a warp reads at once
    static constexpr int KC = GEMV_WARPS * GROUPS * LOADS;                        // rows of op(B) a chunk
    static constexpr int COLS = LANES * VEC;                                      // columns a block
};

template <int MT, int VEC, int LANES, char OPA, class S, class O>
__device__ __forceinline__ void gemv_rows_along_n(int M, int N, int K, float alpha, const S* __restrict__ A,
                                                  int lda, const S* __restrict__ B, int ldb, float beta,
                                                  O* __restrict__ C, int ldc) {
    using Chunk = GemvRowChunk<VEC, S, LANES>;
    constexpr int LOADS = Chunk::LOADS, KC = Chunk::KC, COLS = Chunk::COLS, WORDS = Chunk::WORDS;
    constexpr int GROUPS = Chunk::GROUPS;
    static_assert(LOADS % 4 == 0, "op(A) is read 4 rows of op(B) at a time");
    static_assert(32 % LANES == 0, "LANES divides the warp");
    constexpr int RM = MT < 4 ? MT : 4;      // rows of C summed across the warps at a time (shared memory)
    // A row's 128-byte lines in the block's columns, and the prefetches that cover a
    // warp's rows of a chunk (a lane each, as many rounds as that takes).
    constexpr int LINES = COLS * int(sizeof(S)) >= 128 ? COLS * int(sizeof(S)) / 128 : 1;
    constexpr int PREFETCH_ROUNDS = (GROUPS * LOADS * LINES + 31) / 32;
    __shared__ __align__(16) float staged[MT][KC];
    __shared__ __align__(16) float partial[GEMV_WARPS][RM][COLS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int col_lane = lane % LANES, group = lane / LANES;
    const int first_row = (warp * GROUPS + group) * LOADS;   // the lane's first row of a chunk
    const int chunks = (K + KC - 1) / KC;
    const bool a_wide = rows_on_grid<GemvStagedA<MT, VEC, OPA, S, KC, false>::AVEC>(A, lda, M);
    for (int n0 = blockIdx.x * COLS; n0 < N; n0 += gridDim.x * COLS) {
        const int n = n0 + VEC * col_lane;
        const bool cols_whole = n + VEC <= N;   // else the columns past N read as zeros
        const S* rows = B + (long long)first_row * ldb + n;   // the lane's first row of chunk 0
        auto prefetch_chunk = [&](int c) {
#pragma unroll
            for (int r = 0; r < PREFETCH_ROUNDS; ++r) {
                const int i = lane + 32 * r, j = i / LINES;
                const int k = c * KC + warp * GROUPS * LOADS + j;
                const int col = n0 + i % LINES * (128 / int(sizeof(S)));
                if (j < GROUPS * LOADS && k < K && col < N)
                    prefetch_l2(B + (long long)k * ldb + col);
            }
        };
        for (int m0 = 0; m0 < M; m0 += MT) {
            float acc[MT][VEC] = {}, total[MT][VEC] = {};
            GemvStagedA<MT, VEC, OPA, S, KC, false> a;
            unsigned b[LOADS][WORDS], b_next[LOADS][WORDS];
            // One chunk's loads (op(A)'s and the lane's rows), checked against K and N
            // only in the chunk that K ends in and the block that N ends in.
            auto load_chunk = [&](int c, unsigned (&dst)[LOADS][WORDS]) {
                const int k0 = c * KC;
                const bool whole = k0 + KC <= K;
                if (whole) a.template load<true>(A, lda, M, K, m0, k0, a_wide);
                else a.template load<false>(A, lda, M, K, m0, k0, a_wide);
                const S* p = rows + (long long)k0 * ldb;
                if (whole && cols_whole) {
#pragma unroll
                    for (int j = 0; j < LOADS; ++j) load_words<true, VEC>(p + (long long)j * ldb, 0, dst[j]);
                } else {
#pragma unroll
                    for (int j = 0; j < LOADS; ++j) {
                        const bool row_in = k0 + first_row + j < K;
                        if (row_in && cols_whole) load_words<true, VEC>(p + (long long)j * ldb, 0, dst[j]);
                        else load_words<false, VEC>(p + (long long)j * ldb, row_in ? N - n : 0, dst[j]);
                    }
                }
            };
            if (chunks > 0) load_chunk(0, b);
#pragma unroll
            for (int f = 1; f <= GEMV_ROW_PREFETCH; ++f)
                if (f < chunks) prefetch_chunk(f);
            for (int c = 0; c < chunks; ++c) {
                __syncthreads();           // every warp is done with the previous chunk
                a.store(staged);
                __syncthreads();
                if (c + 1 < chunks) load_chunk(c + 1, b_next);   // in flight during this chunk's FMAs
                if (c + 1 + GEMV_ROW_PREFETCH < chunks) prefetch_chunk(c + 1 + GEMV_ROW_PREFETCH);
                // Four rows of op(B) at a time: one 16-byte read of op(A) a row of C feeds 4 VEC FMAs.
#pragma unroll
                for (int j4 = 0; j4 < LOADS; j4 += 4) {
                    float bq[4][VEC];
#pragma unroll
                    for (int i = 0; i < 4; ++i) words_to_floats<VEC, S>(b[j4 + i], bq[i]);
                    // Every one of the MT rows (rows past M hold row M - 1 again and are not
                    // stored): no branch between the rows' shared-memory reads and FMAs.
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        const float4 t = *reinterpret_cast<const float4*>(&staged[m][first_row + j4]);
                        const float aq[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
                        for (int i = 0; i < 4; ++i)
#pragma unroll
                            for (int v = 0; v < VEC; ++v) acc[m][v] = fmaf(aq[i], bq[i][v], acc[m][v]);
                    }
                }
                gemv_end_chunk<S>(total, acc);
                copy_registers(b, b_next);
            }
            // The warps' sums, RM rows of C at a time (indices known at compile time:
            // the sums stay in registers): first a warp's row groups (shuffles, in a
            // fixed order), then each thread adds up one output across the warps, in
            // warp order (the same result at every run).
#pragma unroll
            for (int r0 = 0; r0 < MT; r0 += RM) {
                if (m0 + r0 >= M) break;   // the same for the whole block
#pragma unroll
                for (int m = 0; m < RM; ++m)
#pragma unroll
                    for (int v = 0; v < VEC; ++v) {
                        float x = gemv_sum<S>(total, acc, r0 + m, v);
#pragma unroll
                        for (int d = LANES; d < 32; d *= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, d);
                        if (group == 0) partial[warp][m][VEC * col_lane + v] = x;
                    }
                __syncthreads();
                for (int i = threadIdx.x; i < RM * COLS; i += GEMV_THREADS) {
                    const int m = m0 + r0 + i / COLS, col = n0 + i % COLS;
                    if (m < M && col < N) {
                        float sum = 0.0f;
#pragma unroll
                        for (int w = 0; w < GEMV_WARPS; ++w) sum += partial[w][i / COLS][i % COLS];
                        store_scaled_as(&C[(long long)m * ldc + col], sum, alpha, beta);
                    }
                }
                __syncthreads();   // read before the next rows are written
            }
        }
    }
}

// Where the host splits K over gridDim.y blocks (executor.py's split-K): this
// block's slice of it, whole chunks, the last slices possibly empty.  Block y
// writes its FP32 partial product to slice y of the workspace C (alpha 1, beta 0,
// leading dimension N: the host's arguments), which splitk_reduce adds into the
// output in its own type.  A split launch is always of the float32-output
// instantiation (gemv.py's template arguments, as wgmma's), so the other output
// types compile no split path.
template <class O> constexpr bool gemv_fp32_output = false;
template <> constexpr bool gemv_fp32_output<float> = true;

// This block's slice of K under the split: whole chunks of KC, the last slices possibly
// empty.  Returns its first element of K and leaves its length in K.
template <int KC>
__device__ __forceinline__ int gemv_split_slice(int& K) {
    const long long per_split = ((K + KC - 1) / KC + gridDim.y - 1) / gridDim.y * (long long)KC;
    const int k0 = int(min((long long)K, blockIdx.y * per_split));
    K = int(min(per_split, (long long)(K - k0)));
    return k0;
}

template <int MT, int VEC, int LANES, char OPA, class S, class O>
__device__ __forceinline__ void gemv_rows_split_k(int M, int N, int K, float alpha, const S* __restrict__ A,
                                                  int lda, const S* __restrict__ B, int ldb, float beta,
                                                  O* __restrict__ C, int ldc) {
    if (gridDim.y == 1) {
        gemv_rows_along_n<MT, VEC, LANES, OPA>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if constexpr (gemv_fp32_output<O>) {
        const int k0 = gemv_split_slice<GemvRowChunk<VEC, S, LANES>::KC>(K);
        gemv_rows_along_n<MT, VEC, LANES, OPA>(M, N, K, alpha, A + elem_offset<OPA>(0, k0, lda), lda,
                                        B + (long long)k0 * ldb, ldb, beta, C + (long long)blockIdx.y * M * ldc, ldc);
    }
}

// The same split where op(B) is column-major, in float32: its N / GEMV_COLS blocks leave
// SMs idle where N is a few thousand (a decode step's projections of a 2048-wide model).
template <int MT, int VEC, char OPA, class S, class O>
__device__ __forceinline__ void gemv_columns_split_k(int M, int N, int K, float alpha, const S* __restrict__ A,
                                                     int lda, const S* __restrict__ B, int ldb, float beta,
                                                     O* __restrict__ C, int ldc) {
    // float32 in and out only: 16-bit x @ W.t() runs on gemv_mma where it can, and with a split
    // the bf16 one-row instantiation spilled at its 128 registers.
    if constexpr (gemv_fp32_output<O> && sizeof(S) == 4) {
        if (gridDim.y > 1) {  // one body for both (two inlined copies spill at 128 registers)
            const int k0 = gemv_split_slice<GemvChunk<VEC, S, MT>::KC>(K);
            A += elem_offset<OPA>(0, k0, lda);
            B += k0;
            C += (long long)blockIdx.y * M * ldc;
        }
    }
    gemv_columns_along_k<MT, VEC, OPA>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

//   op(B) column-major (W.t(): each column's K elements contiguous): a warp per
//     GEMV_COLS_PER_WARP columns, its lanes along K with 16-byte loads, a
//     warp-shuffle sum.  The block stages each K chunk of op(A)'s MT rows in
//     shared memory, converted to FP32 once, so an FMA costs no load of op(A)
//     from global memory and each value read from shared memory feeds
//     GEMV_COLS_PER_WARP FMAs: the cost per byte of op(B) grows far more
//     slowly with M than with a load of op(A) per FMA;
//   op(B) row-major (each row's N elements contiguous, as W in dY @ W): a lane
//     per 16 bytes of columns, LANES lanes along a row (fewer: narrower blocks,
//     more of them), each lane several rows of op(B) a chunk of K, op(A) staged
//     as above, the warps' sums added through shared memory; the host splits K
//     over gridDim.y blocks (split-K: a workspace and splitk_reduce) where the
template <int DT, int ODT, int MT, bool ALIGNED, int LANES, char OPA, char OPB>
// Launch bounds, op(B) column-major: two blocks an SM for one row and 16-byte loads
// (its registers fit in 128 a thread: more warps, and the N / 32 blocks spread more
// evenly over the SMs); else one, as the others' sums and loads in flight take up
// to 255 registers (capped at 128, they spill).  Row-major: one (capped at 128,
// even one row's loads in flight and their next chunk's spill).
__global__ void __launch_bounds__(GEMV_THREADS, OPB == 'T' && MT == 1 && ALIGNED ? 2 : 1)
gemv(int M, int N, int K, float alpha, const typename StorageOf<DT>::type* __restrict__ A, int lda,
     const typename StorageOf<DT>::type* __restrict__ B, int ldb, float beta,
     typename StorageOf<ODT>::type* __restrict__ C, int ldc, long long stride_a, long long stride_b,
     long long stride_c) {
    batch_select(A, stride_a, B, stride_b, C, stride_c);
    using S = typename StorageOf<DT>::type;
    const int k_end = alpha == 0.0f ? 0 : K;   // alpha = 0 reads neither A nor B (BLAS)
    // Elements of op(B) a thread loads at once: one where its rows are off the 16-byte
    // grid (ALIGNED false: gemv.py's gemv_aligned; C is stored element by element).
    if constexpr (OPB == 'T') {
        constexpr int VEC = !ALIGNED ? 1 : GEMV_LOAD_BYTES_K / int(sizeof(S));
        gemv_columns_split_k<MT, VEC, OPA>(M, N, k_end, alpha, A, lda, B, ldb, beta, C, ldc);
    } else {
        constexpr int VEC = !ALIGNED ? 1 : sizeof(S) == 2 && MT <= GEMV_ROW_WIDE_MT ? 8 : GEMV_ROW_VEC;
        gemv_rows_split_k<MT, VEC, LANES, OPA>(M, N, k_end, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

}  // namespace gemmlab
