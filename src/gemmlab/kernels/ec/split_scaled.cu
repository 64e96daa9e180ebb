// precision="fp32_tc"'s split pre-pass for ec_wgmma's FOLD (not a rung): it splits op(A)
// and op(B) into their tensor-core parts and chooses the method in the same pass, so A
// and B are read once before the GEMM.  A scale is decided per *segment* -- a row of
// op(A) or a column of op(B), the K values that one row or column of C is made of, so
// that its scale divides out of C -- from the segment's own largest value.  A scale per
// segment is never less accurate than one per matrix: every value lands at least as far
// above FP16's underflow.  How the blocks share a matrix: above ec_split_scaled, below.
#include <gemmlab/ec/01_ec_wmma.cuh>
#include <gemmlab/ec/choice.cuh>
#include <gemmlab/ec/choice_rules.cuh>
#include <gemmlab/hopper.cuh>

namespace gemmlab {

constexpr int EC_SCALED_THREADS = 256;      // 32 x 8
constexpr int EC_SCALED_SEGMENTS = 32;      // segments a cluster takes
constexpr int EC_SCALED_CHUNK = 512;        // elements of K per segment a block holds in registers
// ... or, for a K this short or shorter, 128: a quarter of the registers, twice the blocks an SM,
// and no slots of the chunk idle (K = 128: attention's Q @ K^T, a 128-token weight gradient).
constexpr int EC_SCALED_SHORT_CHUNK = 128;
constexpr int EC_SCALED_MAX_CLUSTER = 8;    // blocks of a cluster: the portable limit
// split_columns: rows of K a block's tile holds at most (dynamic shared memory, 128 bytes a row),
// so that a block's share of K up to this is read once (K <= 8 x this).
constexpr int EC_SCALED_HELD_MAX_ROWS = 1792;
// ec_split_scaled_rows: values a thread holds (16 float4 of whole rows along K: K <= 16384)
constexpr int EC_SCALED_ROWS_VALUES = 64;

namespace ec_scaled {

constexpr int PER_TILE = 32 * 32 / EC_SCALED_THREADS;   // a thread's elements of a tile

// A block's counts for the rules (choice_rules.cuh), in shared memory.
struct Counts {
    unsigned normal, below, clamped, top;
};

struct Shared {
    unsigned part_max[EC_SCALED_SEGMENTS];   // this block's largest finite magnitude per segment (bits)
    int scale[EC_SCALED_SEGMENTS];           // the segments' scale exponents
    Counts counts;
};

// The whole-rows path's (split_rows_operand): each warp's largest finite magnitude of each of the
// block's rows, the rows' scale exponents, the block's counts.
struct RowsShared {
    unsigned warp_max[EC_SCALED_THREADS / 32][EC_SCALED_ROWS_VALUES / 4];
    int scale[EC_SCALED_ROWS_VALUES / 4];
    Counts counts;
};

// |x|'s bits where x is finite (they order as the magnitudes do), else 0: Inf and NaN set no scale.
__device__ __forceinline__ unsigned finite_magnitude(float x) {
    const unsigned b = __float_as_uint(x) & 0x7FFFFFFFu;
    return b < 0x7F800000u ? b : 0u;
}

__device__ __forceinline__ float pow2(int e) {   // exact for |e| <= 126
    return __uint_as_float(unsigned(EXPONENT_BIAS + e) << 23);
}

// A segment's scale exponent from its largest finite magnitude's bits (scale_exponent), stored
// in ``scale``, with the block's flags: a value clamped above FP16's top, the largest exponent
// field.  Returns the exponent.
__device__ __forceinline__ int segment_scale(unsigned top, int& scale, Counts& counts) {
    const int e = int(top >> 23);   // biased exponent field; 0: no normal value
    const int s = scale_exponent(e != 0, e - EXPONENT_BIAS);
    scale = s;
    if (e != 0 && e - EXPONENT_BIAS + s > FP16_TOP) atomicOr(&counts.clamped, 1u);
    atomicMax(&counts.top, unsigned(e));
    return s;
}

// Biased exponents below this fall under FP16's normals once scaled by 2^s.
__device__ __forceinline__ int below_field_of(int s) {
    return FP16_NORMAL_MIN - s + EXPONENT_BIAS;
}

// One value counted for the rules: a normal one, and one that falls under FP16's normals once scaled.
__device__ __forceinline__ void count_value(float x, int below_field, unsigned& normal, unsigned& below) {
    const int e = (__float_as_uint(x) >> 23) & 0xFF;
    normal += e >= 1 && e <= 2 * EXPONENT_BIAS;
    below += e >= 1 && e < below_field;
}

// The threads' counts summed over each warp, then into the block's (by the warp's lane 0).
__device__ __forceinline__ void add_block_counts(unsigned normal, unsigned below, int lane, Counts& counts) {
    normal = __reduce_add_sync(0xFFFFFFFFu, normal);
    below = __reduce_add_sync(0xFFFFFFFFu, below);
    if (lane == 0) {
        atomicAdd(&counts.normal, normal);
        atomicAdd(&counts.below, below);
    }
}

// Thread (tx, ty)'s element j of a chunk's tile (split_contiguous): segment ty + 8 j (of the cluster's
// 32), k = tx (of the tile's 32).
__device__ __forceinline__ int seg_of(int j) { return int(threadIdx.x) / 32 + 8 * j; }

// A chunk of the block's share into registers: segments seg0.., k from k0 (below k1), element
// (f, j) at segment ty + 8 j, k = k0 + 32 f + tx.  The addresses step from one pointer per
// segment (the compiler otherwise keeps a 64-bit address per element).
template <int TILES>
__device__ __forceinline__ void load_chunk(float (&v)[TILES][PER_TILE], const float* __restrict__ X, int ld, int segs,
                                           int seg0, int k0, int k1) {
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int left = k1 - k0 - tx;
#pragma unroll
    for (int j = 0; j < PER_TILE; ++j) {
        const int s = seg0 + ty + 8 * j;
        const float* row = X + (long long)min(s, segs - 1) * ld + k0 + tx;
#pragma unroll
        for (int f = 0; f < TILES; ++f) v[f][j] = s < segs && 32 * f < left ? row[32 * f] : 0.0f;
    }
}

// The last block of the launch: the rules over the sums, the record written, the sums zeroed,
// and (report: not null) the record copied there, for gemmlab.last_plan() to read when asked.
__device__ __noinline__ void decide(long long* choice, long long* report) {
    volatile long long* r = choice;
    const long long normal_a = r[CHOICE_SUM_NORMAL_A], normal_b = r[CHOICE_SUM_NORMAL_B];
    const long long below_a = r[CHOICE_SUM_BELOW_A], below_b = r[CHOICE_SUM_BELOW_B];
    const long long clamped = r[CHOICE_SUM_CLAMPED];
    const bool fits_a = !(clamped & 1) && below_a * UNDERFLOW_DEN <= normal_a * UNDERFLOW_NUM;
    const bool fits_b = !(clamped & 2) && below_b * UNDERFLOW_DEN <= normal_b * UNDERFLOW_NUM;
    r[CHOICE_TOP_A] = normal_a ? r[CHOICE_SUM_TOP_A] - EXPONENT_BIAS : 0;
    r[CHOICE_TOP_B] = normal_b ? r[CHOICE_SUM_TOP_B] - EXPONENT_BIAS : 0;
    r[CHOICE_NORMAL_A] = normal_a;
    r[CHOICE_NORMAL_B] = normal_b;
    r[CHOICE_WIDE_A] = below_a;
    r[CHOICE_WIDE_B] = below_b;
    r[CHOICE_SCALE_A] = r[CHOICE_SCALE_B] = r[CHOICE_TOP_SCALE_A] = r[CHOICE_TOP_SCALE_B] = 0;
    r[CHOICE_PER_ROW] = 1;
    r[CHOICE_METHOD] = fits_a && fits_b ? METHOD_FP16_EC_SCALED : METHOD_TF32_EC;
    for (int i = CHOICE_SUM_NORMAL_A; i <= CHOICE_SUM_BLOCKS; ++i) r[i] = 0;
    if (report != nullptr)
        for (int i = 0; i < CHOICE_FIELDS; ++i) report[i] = r[i];
}

// A block's counts into the record's sums (one thread); the last of the launch's blocks decides.
__device__ __forceinline__ void count_in(unsigned normal, unsigned below, unsigned clamped, unsigned top,
                                         long long* choice, long long* report, int side, int blocks) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&choice[CHOICE_SUM_NORMAL_A + side]), (unsigned long long)normal);
    atomicAdd(reinterpret_cast<unsigned long long*>(&choice[CHOICE_SUM_BELOW_A + side]), (unsigned long long)below);
    atomicMax(&choice[CHOICE_SUM_TOP_A + side], (long long)top);
    if (clamped) atomicOr(reinterpret_cast<unsigned long long*>(&choice[CHOICE_SUM_CLAMPED]), 1ull << side);
    __threadfence();   // the sums before the count of blocks done
    const unsigned long long done =
        atomicAdd(reinterpret_cast<unsigned long long*>(&choice[CHOICE_SUM_BLOCKS]), 1ull) + 1;
    if (done == (unsigned long long)blocks) {
        __threadfence();   // every other block's sums are in
        decide(choice, report);
    }
}

// The cluster's 32 segments' scales from each block's largest finite magnitudes (sh.part_max, all
// written): each block reads the others' through distributed shared memory, then the scale
// (segment_scale), and rank 0 writes the inverse scales.  The caller's cluster_wait (after its
// split) keeps this block's maxima alive until the others have read them.
template <int CL>
__device__ __forceinline__ void cluster_scales(Shared& sh, int rank, int seg0, int segs, float* __restrict__ unscale) {
    const int t = threadIdx.x;
    if constexpr (CL > 1) hopper::cluster_sync(); else __syncthreads();
    if (t < EC_SCALED_SEGMENTS) {
        unsigned top = sh.part_max[t];
#pragma unroll
        for (int r = 0; r < CL; ++r)
            if (r != rank) top = max(top, hopper::ld_shared_cluster(&sh.part_max[t], r));
        segment_scale(top, sh.scale[t], sh.counts);
    }
    if constexpr (CL > 1) hopper::cluster_arrive_relaxed();   // done with the others' maxima
    __syncthreads();
    if (rank == 0 && t < EC_SCALED_SEGMENTS && seg0 + t < segs) unscale[seg0 + t] = pow2(-sh.scale[t]);
}

// This block's rank in its cluster (of CL blocks) and its share of K: rows kb .. ke.
struct KShare {
    int rank, kb, ke;
};
template <int CL>
__device__ __forceinline__ KShare block_share(int K) {
    const int rank = CL > 1 ? int(hopper::cluster_ctarank()) : 0;
    const int share = (K + 32 * CL - 1) / (32 * CL) * 32;   // a multiple of 32
    const int kb = min(K, rank * share);
    return {rank, kb, min(K, kb + share)};
}

// Split where the segments lie along K in memory (rows: op(A) stored 'N', op(B) stored 'T'): one block's share
// of 32 segments seg0 .. seg0 + 31 of X (segs of them, each K long), k in this block's CL-th of
// K, TILES x 32 values of K (a chunk) at a time in registers, a warp's lanes along K, so that the
// reads coalesce; its counts added to sh's.
template <int CL, int TILES>
__device__ __forceinline__ void split_contiguous(Shared& sh, const float* __restrict__ X, int ld, int segs, int K,
                                                 int seg0, __half* __restrict__ hi, __half* __restrict__ lo, int ldp,
                                                 float* __restrict__ unscale) {
    const int t = threadIdx.x, tx = t % 32, ty = t / 32;
    const auto [rank, kb, ke] = block_share<CL>(K);
    constexpr int CHUNK = 32 * TILES;
    const int chunks = max(1, (ke - kb + CHUNK - 1) / CHUNK);
    if (t < EC_SCALED_SEGMENTS) sh.part_max[t] = 0;
    __syncthreads();

    // Each segment's largest finite magnitude over the block's share (a warp holds its segments alone).
    float v[TILES][PER_TILE];
    unsigned m[PER_TILE] = {};
#pragma unroll 1
    for (int c = 0; c < chunks; ++c) {
        load_chunk(v, X, ld, segs, seg0, kb + c * CHUNK, ke);
#pragma unroll
        for (int f = 0; f < TILES; ++f)
#pragma unroll
            for (int j = 0; j < PER_TILE; ++j) m[j] = max(m[j], finite_magnitude(v[f][j]));
    }
#pragma unroll
    for (int j = 0; j < PER_TILE; ++j) {
        const unsigned w = __reduce_max_sync(0xFFFFFFFFu, m[j]);
        if (tx == 0) sh.part_max[seg_of(j)] = w;
    }
    cluster_scales<CL>(sh, rank, seg0, segs, unscale);

    // Split: each value times its segment's scale; count for the rules.
    float scale[PER_TILE];
    int below_field[PER_TILE];   // biased exponents below this fall under FP16's normals once scaled
#pragma unroll
    for (int j = 0; j < PER_TILE; ++j) {
        const int s = sh.scale[seg_of(j)];
        scale[j] = pow2(s);
        below_field[j] = below_field_of(s);
    }
    unsigned normal = 0, below = 0;
#pragma unroll 1
    for (int c = 0; c < chunks; ++c) {
        const int k0 = kb + c * CHUNK;
        if (chunks > 1) load_chunk(v, X, ld, segs, seg0, k0, ke);
        // Written: segment seg0 + ty + 8 j, k = k0 + 32 f + tx: this thread's own elements.
        const int left = ke - k0 - tx;
        long long out[PER_TILE];
#pragma unroll
        for (int j = 0; j < PER_TILE; ++j)
            out[j] = seg0 + ty + 8 * j < segs ? (long long)(seg0 + ty + 8 * j) * ldp + k0 + tx : -1;
#pragma unroll
        for (int f = 0; f < TILES; ++f) {
#pragma unroll
            for (int j = 0; j < PER_TILE; ++j) {
                float x = v[f][j];
                // count_value's rule written out: through the helper, ptxas allocates this
                // loop's registers otherwise in some layouts (scripts/sass_diff.py).
                const int e = (__float_as_uint(x) >> 23) & 0xFF;
                normal += e >= 1 && e <= 2 * EXPONENT_BIAS;
                below += e >= 1 && e < below_field[j];
                asm volatile("" : "+f"(x));   // scaled here, not hoisted above the previous tile's stores
                __half h, l;
                EcSplit<METHOD_FP16_EC>::split<true>(x * scale[j], h, l);
                if (out[j] >= 0 && 32 * f < left) {
                    hi[out[j] + 32 * f] = h;
                    lo[out[j] + 32 * f] = l;
                }
            }
            // A tile's parts are stored before the next tile's are made: left to
            // itself the compiler scales and converts far ahead of the stores, into spills.
            asm volatile("" ::: "memory");
        }
    }

    add_block_counts(normal, below, tx, sh.counts);   // the block's counts for these segments
    if constexpr (CL > 1) hopper::cluster_wait();   // the others have read this block's maxima
}

// cp.async of 16 bytes of which the first `bytes` are read and the rest zeroed, with `bytes` in a
// register: one instruction (cuda_pipeline.h's zfill becomes a branch per value).
__device__ __forceinline__ void copy_async_16(float* dst, const float* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(hopper::smem_u32(dst)), "l"(src), "r"(bytes)
                 : "memory");
}

// cp.async of 4 bytes, or (`in` false) 4 zero bytes without a read.
__device__ __forceinline__ void copy_async_4(float* dst, const float* src, bool in) {
    asm volatile(
        "{\n\t.reg .pred skip;\n\tsetp.eq.u32 skip, %2, 0;\n\t"
        "cp.async.ca.shared.global [%0], [%1], 4, skip;\n\t}" ::"r"(hopper::smem_u32(dst)),
        "l"(src), "r"(unsigned(in))
        : "memory");
}

// Rows k0 .. k1 (k1 - k0 <= the tile's rows) of columns seg0 .. seg0 + 31 of X into the tile
// (row r at tile + 32 r), zeros past k1 up to the next multiple of 32 rows (a whole slab) and
// past segs, by cp.async: 16 bytes a copy where X and ld lie on the 16-byte grid (vec), else 4.
// Each thread keeps one column offset and steps its source pointer down the rows.  Between two
// barriers: the tile's readers before, the copy's after.
__device__ __forceinline__ void copy_columns(float* tile, const float* __restrict__ X, int ld, int segs, int seg0,
                                             int k0, int k1, bool vec) {
    const int t = threadIdx.x, rows = (k1 - k0 + 31) / 32 * 32;
    __syncthreads();   // the tile's last readers are done
    if (vec) {   // thread t: 16 bytes at column 4 (t % 8) of rows t / 8, + 32, ...
        const int c = 4 * (t % 8), bytes = 4 * min(max(segs - seg0 - c, 0), 4);
        const float* src = X + (long long)(k0 + t / 8) * ld + seg0 + c;
        for (int r = t / 8; r < rows; r += EC_SCALED_THREADS / 8, src += EC_SCALED_THREADS / 8 * (long long)ld) {
            const int n = k0 + r < k1 ? bytes : 0;
            copy_async_16(tile + 32 * r + c, n ? src : X, n);
        }
    } else {     // 4 bytes at column t % 32 of rows t / 32, + 8, ...
        const int c = t % 32;
        const bool column = seg0 + c < segs;
        const float* src = X + (long long)(k0 + t / 32) * ld + seg0 + c;
        for (int r = t / 32; r < rows; r += EC_SCALED_THREADS / 32, src += EC_SCALED_THREADS / 32 * (long long)ld) {
            const bool in = column && k0 + r < k1;
            copy_async_4(tile + 32 * r + c, in ? src : X, in);
        }
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
    __syncthreads();
}

// count_value's rule by magnitudes, with the counts added under predicates (five instructions, not
// nine): x normal where FP32's smallest normal <= |x| <= its largest (NaN and Inf fail); below where
// also |x 2^s| < 2^FP16_NORMAL_MIN, the same test as its exponent against below_field_of(s), since
// scaling by a power of two is exact down to FP32's normals and what falls under them is below too.
__device__ __forceinline__ void count_scaled(float x, float scale, unsigned& normal, unsigned& below) {
    static_assert(FP16_NORMAL_MIN == -14, "0f38800000 is 2^-14");
    asm("{\n\t.reg .pred n, b;\n\t"
        "setp.le.f32 n, %2, 0f7F7FFFFF;\n\t"
        "setp.ge.and.f32 n, %2, 0f00800000, n;\n\t"
        "setp.lt.and.f32 b, %3, 0f38800000, n;\n\t"
        "@n add.u32 %0, %0, 1;\n\t"
        "@b add.u32 %1, %1, 1;\n\t}"
        : "+r"(normal), "+r"(below)
        : "f"(fabsf(x)), "f"(fabsf(__fmul_rn(x, scale))));
}

// Eight values of a segment split into FOLD's parts, scaled by `scale` first, as eight halves each.
// `careful`: where a part may be infinite (an Inf, or a value beyond FP16's range once scaled),
// EcSplit's split value by value, which gives an infinite hi a zero lo; else two at a time.
__device__ __forceinline__ void split_eight(const float (&x)[8], float scale, bool careful, uint4& hi, uint4& lo) {
    __half2 h[4], l[4];
    if (careful) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            __half h0, h1, l0, l1;
            EcSplit<METHOD_FP16_EC>::split<true>(__fmul_rn(x[2 * q], scale), h0, l0);
            EcSplit<METHOD_FP16_EC>::split<true>(__fmul_rn(x[2 * q + 1], scale), h1, l1);
            h[q] = __halves2half2(h0, h1);
            l[q] = __halves2half2(l0, l1);
        }
    } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {   // the same parts: hi rounded, lo = what hi left (exact in FP32), rounded
            const float y0 = __fmul_rn(x[2 * q], scale), y1 = __fmul_rn(x[2 * q + 1], scale);
            h[q] = __floats2half2_rn(y0, y1);
            const float2 back = __half22float2(h[q]);
            l[q] = __floats2half2_rn(__fsub_rn(y0, back.x), __fsub_rn(y1, back.y));
        }
    }
    hi = *reinterpret_cast<const uint4*>(h);
    lo = *reinterpret_cast<const uint4*>(l);
}

// Split by columns (segments across rows in memory: op(A) stored 'T', op(B) stored 'N'): one block's
// share of K (block_share) of 32 columns seg0 .. seg0 + 31 of X, brought into shared memory by
// cp.async, `held` rows at a time (the whole share when it fits: read once), so that no register
// holds it and several blocks' copies are in flight on an SM.  Lane = column, so a warp reads a
// row of the tile at once.  Warp w takes the slabs of 32 rows w, w + 8, ...: it splits a slab's
// values of its lanes' columns, writes the parts over the slab, by column (they take its bytes
// exactly), and stores them from there along K, 64 bytes of each of 8 columns a store, so that
// a store touches 8 lines of a part, not 32.
template <int CL>
__device__ __forceinline__ void split_columns(Shared& sh, float* __restrict__ tile, int held,
                                              const float* __restrict__ X, int ld, int segs, int K, int seg0,
                                              __half* __restrict__ hi, __half* __restrict__ lo, int ldp,
                                              float* __restrict__ unscale) {
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const auto [rank, kb, ke] = block_share<CL>(K);
    const int passes = max(1, (ke - kb + held - 1) / held);
    const bool vec = ((reinterpret_cast<unsigned long long>(X) | unsigned(ld) * 4ull) & 15) == 0;
    constexpr int WARPS = EC_SCALED_THREADS / 32;
    if (t < EC_SCALED_SEGMENTS) sh.part_max[t] = 0;   // read after copy_columns's barrier

    // The largest magnitude of the thread's slabs of its column: Inf included, NaN not (fmaxf drops it).
    float m = 0.0f;
    for (int p = 0; p < passes; ++p) {
        const int k0 = kb + p * held, k1 = min(ke, k0 + held);
        copy_columns(tile, X, ld, segs, seg0, k0, k1, vec);
        for (int q = warp; 32 * q < k1 - k0; q += WARPS)
#pragma unroll 8
            for (int i = 0; i < 32; ++i) m = fmaxf(m, fabsf(tile[32 * (32 * q + i) + lane]));
    }
    unsigned top = __float_as_uint(m);
    if (__syncthreads_or(isinf(m))) {   // rare: Inf sets no scale, so the largest finite magnitude instead
        top = 0;
        for (int p = 0; p < passes; ++p) {
            const int k0 = kb + p * held, k1 = min(ke, k0 + held);
            if (passes > 1) copy_columns(tile, X, ld, segs, seg0, k0, k1, vec);
            for (int q = warp; 32 * q < k1 - k0; q += WARPS)
#pragma unroll 8
                for (int i = 0; i < 32; ++i) top = max(top, finite_magnitude(tile[32 * (32 * q + i) + lane]));
        }
    }
    atomicMax(&sh.part_max[lane], top);
    cluster_scales<CL>(sh, rank, seg0, segs, unscale);

    // Split: each value times its column's scale; count for the rules (zeros past K count as neither).
    const float scale = pow2(sh.scale[lane]);
    const bool careful = __hisinf(__float2half_rn(__fmul_rn(m, scale)));
    const int swizzle = (lane >> 1) & 3;   // spreads the 16-byte writes of the parts over the banks
    unsigned normal = 0, below = 0;
    for (int p = 0; p < passes; ++p) {
        const int k0 = kb + p * held, k1 = min(ke, k0 + held);
        if (passes > 1) copy_columns(tile, X, ld, segs, seg0, k0, k1, vec);
        for (int q = warp; 32 * q < k1 - k0; q += WARPS) {
            float* slab = tile + 32 * 32 * q;
            uint4 h[4], l[4];   // the parts of k = 32 q + 8 o .. of the lane's column
#pragma unroll
            for (int o = 0; o < 4; ++o) {
                float x[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    x[i] = slab[32 * (8 * o + i) + lane];
                    count_scaled(x[i], scale, normal, below);
                }
                split_eight(x, scale, careful, h[o], l[o]);
            }
            __syncwarp();   // the slab read: its 4 KB take the parts, hi's 32 columns x 64 bytes then lo's
            uint4* parts = reinterpret_cast<uint4*>(slab);
#pragma unroll
            for (int o = 0; o < 4; ++o) {
                parts[4 * lane + (o ^ swizzle)] = h[o];
                parts[128 + 4 * lane + (o ^ swizzle)] = l[o];
            }
            __syncwarp();
#pragma unroll
            for (int i = 0; i < 4; ++i) {   // column 8 i + lane / 4, its 16 bytes lane % 4
                const int s = 8 * i + lane / 4, c = lane % 4, k = k0 + 32 * q + 8 * c;
                const int at = 4 * s + (c ^ ((s >> 1) & 3));
                if (seg0 + s < segs && k < k1) {   // k, ldp multiples of 8; past K, zeros into the padding
                    const long long out = (long long)(seg0 + s) * ldp + k;
                    *reinterpret_cast<uint4*>(hi + out) = parts[at];
                    *reinterpret_cast<uint4*>(lo + out) = parts[128 + at];
                }
            }
        }
    }

    add_block_counts(normal, below, lane, sh.counts);   // the block's counts for these columns
    if constexpr (CL > 1) hopper::cluster_wait();   // the others have read this block's maxima
}

// One operand: the cluster takes groups of 32 segments of matrix z in turn (a block a
// launch, not a group: a product of short K has many groups, and each block adds to
// the record's sums once), by rows (CK: segments along K in memory) or by columns,
// then the block's counts go into the record's sums and the last block of the launch
// decides.  side: 0 A, 1 B.
template <bool CK, int CL, int TILES>
__device__ __forceinline__ void split_operand(Shared& sh, float* __restrict__ tile, int held,
                                              const float* __restrict__ X, int ld, int segs, int K,
                                              __half* __restrict__ hi, __half* __restrict__ lo, int ldp,
                                              float* __restrict__ unscale, long long* __restrict__ choice,
                                              long long* __restrict__ report, int side, int blocks) {
    const int t = threadIdx.x;
    if (t == 0) sh.counts.normal = sh.counts.below = sh.counts.clamped = sh.counts.top = 0;
    const int groups = (segs + EC_SCALED_SEGMENTS - 1) / EC_SCALED_SEGMENTS;
    for (int g = int(blockIdx.x) / CL; g < groups; g += int(gridDim.x) / CL) {
        if constexpr (CK)
            split_contiguous<CL, TILES>(sh, X, ld, segs, K, g * EC_SCALED_SEGMENTS, hi, lo, ldp, unscale);
        else
            split_columns<CL>(sh, tile, held, X, ld, segs, K, g * EC_SCALED_SEGMENTS, hi, lo, ldp, unscale);
    }
    __syncthreads();
    if (t == 0) {
        const Counts& n = sh.counts;
        count_in(n.normal, n.below, n.clamped, n.top, choice, report, side, blocks);
    }
}

// Four halves' bits as two words, the lower k first.
__device__ __forceinline__ uint2 four_halves(const __half (&h)[4]) {
    return make_uint2(unsigned(__half_as_ushort(h[0])) | unsigned(__half_as_ushort(h[1])) << 16,
                      unsigned(__half_as_ushort(h[2])) | unsigned(__half_as_ushort(h[3])) << 16);
}

// Whole rows a block (ec_split_scaled_rows): where every segment lies along K in memory (op(A)
// stored 'N', op(B) stored 'T') and K <= 1024 CHUNKS, a block takes ROWS = 16 / CHUNKS whole
// segments at a time, CHUNKS float4 of each a thread (thread t: k = 4 (t + 256 i)), so that a
// segment's largest value is the block's own and no cluster is needed (what the clusters
// cost the split: benchmarks/NOTES.md).  Rows (and a
// batch's matrices) 16-byte aligned: the host checks.  The parts go out four k (8 bytes) a
// store along the row, zeros past K into the row's padding.  Groups of ROWS segments in turn,
// the block's counts into the record's sums once.
template <int CHUNKS>
__device__ __forceinline__ void split_rows_operand(RowsShared& sh, const float* __restrict__ X, int ld, int segs,
                                                   int K, __half* __restrict__ hi, __half* __restrict__ lo, int ldp,
                                                   float* __restrict__ unscale, long long* __restrict__ choice,
                                                   long long* __restrict__ report, int side, int blocks) {
    constexpr int ROWS = EC_SCALED_ROWS_VALUES / 4 / CHUNKS;
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    if (t == 0) sh.counts.normal = sh.counts.below = sh.counts.clamped = sh.counts.top = 0;
    unsigned normal = 0, below = 0;
    const int groups = (segs + ROWS - 1) / ROWS;
    for (int g = blockIdx.x; g < groups; g += gridDim.x) {
        const int seg0 = g * ROWS;
        float4 v[ROWS][CHUNKS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int s = seg0 + r;
            const float* row = X + (long long)min(s, segs - 1) * ld;
#pragma unroll
            for (int i = 0; i < CHUNKS; ++i) {
                const int k = 4 * (t + EC_SCALED_THREADS * i);
                if (s < segs && k + 3 < K) {
                    v[r][i] = *reinterpret_cast<const float4*>(row + k);
                } else {   // past the last row, or the row's last (partial) four
                    const bool in = s < segs;
                    v[r][i] = make_float4(in && k < K ? row[k] : 0.0f, in && k + 1 < K ? row[k + 1] : 0.0f,
                                          in && k + 2 < K ? row[k + 2] : 0.0f, in && k + 3 < K ? row[k + 3] : 0.0f);
                }
            }
        }
        // Each row's largest finite magnitude: the thread's, its warp's, the block's; then the scale.
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            unsigned m = 0;
#pragma unroll
            for (int i = 0; i < CHUNKS; ++i)
                m = max(m, max(max(finite_magnitude(v[r][i].x), finite_magnitude(v[r][i].y)),
                               max(finite_magnitude(v[r][i].z), finite_magnitude(v[r][i].w))));
            m = __reduce_max_sync(0xFFFFFFFFu, m);
            if (lane == 0) sh.warp_max[warp][r] = m;
        }
        __syncthreads();
        if (t < ROWS) {
            unsigned top = 0;
#pragma unroll
            for (int w = 0; w < EC_SCALED_THREADS / 32; ++w) top = max(top, sh.warp_max[w][t]);
            const int sc = segment_scale(top, sh.scale[t], sh.counts);
            if (seg0 + t < segs) unscale[seg0 + t] = pow2(-sc);
        }
        __syncthreads();
        // Split: each value times its row's scale; count for the rules (values past K or past the
        // last row are zero: not counted).
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int s = seg0 + r, sc = sh.scale[r];
            const float scale = pow2(sc);
            const int below_field = below_field_of(sc);
#pragma unroll
            for (int i = 0; i < CHUNKS; ++i) {
                const int k = 4 * (t + EC_SCALED_THREADS * i);
                const float x[4] = {v[r][i].x, v[r][i].y, v[r][i].z, v[r][i].w};
                __half h[4], l[4];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    count_value(x[q], below_field, normal, below);
                    EcSplit<METHOD_FP16_EC>::split<true>(x[q] * scale, h[q], l[q]);
                }
                if (s < segs && k < K) {
                    const long long at = (long long)s * ldp + k;
                    *reinterpret_cast<uint2*>(hi + at) = four_halves(h);
                    *reinterpret_cast<uint2*>(lo + at) = four_halves(l);
                }
            }
        }
        __syncthreads();   // the scales and maxima are the next group's
    }
    add_block_counts(normal, below, lane, sh.counts);
    __syncthreads();
    if (t == 0) {
        const Counts& n = sh.counts;
        count_in(n.normal, n.below, n.clamped, n.top, choice, report, side, blocks);
    }
}

// Blocks of ec_split_scaled an SM that its registers allow: two where a side holds its chunk in
// registers (four with a short K's chunk); three in `a.t() @ b` (both sides by columns), as many
// as 64 KB tiles (a share of 512 rows) leave room for.
template <char OP_A, char OP_B, int CHUNK>
constexpr int blocks_an_sm = OP_A == 'T' && OP_B == 'N' ? 3 : CHUNK <= EC_SCALED_SHORT_CHUNK ? 4 : 2;

// One operand of ec_split_scaled: by whole rows (ROWS_PATH: split_rows_operand, ROWS float4 of
// each row a thread) or by clusters (split_operand), in the kernel's shared memory.
constexpr size_t SIDE_SHARED_BYTES = sizeof(Shared) > sizeof(RowsShared) ? sizeof(Shared) : sizeof(RowsShared);
template <bool ROWS_PATH, bool CK, int CL, int TILES, int ROWS>
__device__ __forceinline__ void split_side(unsigned char* smem, float* __restrict__ tile, int held,
                                           const float* __restrict__ X, int ld, int segs, int K,
                                           __half* __restrict__ hi, __half* __restrict__ lo, int ldp,
                                           float* __restrict__ unscale, long long* __restrict__ choice,
                                           long long* __restrict__ report, int side, int blocks) {
    if constexpr (ROWS_PATH)
        split_rows_operand<ROWS>(*reinterpret_cast<RowsShared*>(smem), X, ld, segs, K, hi, lo, ldp, unscale, choice,
                                 report, side, blocks);
    else
        split_operand<CK, CL, TILES>(*reinterpret_cast<Shared*>(smem), tile, held, X, ld, segs, K, hi, lo, ldp, unscale,
                                     choice, report, side, blocks);
}

}  // namespace ec_scaled

// A cluster of CL blocks takes 32 segments at a time (several groups in turn where
// there are many), each block a CL-th of K, held on chip while the cluster agrees on the
// scales: in registers where the segments lie along K in memory (CHUNK elements of K per
// segment), else in shared memory (`held` rows of K, dynamic: 128 bytes a row).  A longer
// share is read twice, once for the maxima and once to split.  The blocks trade their 32 partial maxima
// through distributed shared memory, scale (a power of two, choice_rules.cuh's
// scale_exponent), split with FOLD's lo in hi's units, and write the parts in
// split_pack.cu's layout (A's M x ldp, B^T's N x ldp) and each segment's inverse
// scale, which the GEMM's epilogue multiplies by.  Each block also counts, for the
// rules of choice_rules.cuh, the normal elements that fall below FP16's normals
// after their segment's scale; the last block to finish adds the counts up,
// chooses FP16 parts (recorded as fp16_ec_scaled) or TF32 parts (tf32_ec, split
// afterwards by split_pack.cu, which runs only where the record asks) and writes
// the record (ec/choice.cuh).
//
// Reads coalesce with consecutive lanes along the stored rows: along K where a
// segment lies contiguous in memory (CK: A stored 'N', B stored 'T'), else along
// the segments (cp.async into the tile, which each thread then reads down its column, so
// that its parts go out along K 16 bytes at a time).  Where both operands' segments lie along K
// (`a @ w.t()`), K fits a block (<= 16384) and the rows are 16-byte aligned,
// ec_split_scaled_rows instead gives each block whole rows: no cluster.  Where only one
// operand's do (`a @ b`, `a.t() @ w.t()`), that one is split by whole rows inside this kernel
// (its ROWS) and only the other's blocks trade maxima in their clusters.
//
// Grid: (CL x clusters a matrix, the larger batch, 2: blockIdx.z 0 splits A, 1 B);
// clusters of CL blocks along x, each taking groups of 32 rows (columns) of its matrix
// in turn.  A batch's matrices (stride elements apart, matrices of them) have their
// parts one after the other (M * ldp, N * ldp halves apart) and their inverse scales
// too (M, N floats apart).  blocks: the launch's blocks that split something (the
// others return at once; host: ec_wgmma.py), each adds to the record once.  choice:
// the record, its sums zero; report: null, or where the record is copied.  CHUNK:
// EC_SCALED_CHUNK, or EC_SCALED_SHORT_CHUNK (four blocks an SM) where K is that short.
// ROWS > 0 (NN and TT, K of 513 .. 16384): the operand whose segments lie along K in memory (A
// stored 'N' in NN, B stored 'T' in TT) is split by whole rows instead (split_rows_operand, ROWS
// float4 of each row a thread, 16 / ROWS rows a group; the groups one a block along x), with no
// exchange between its blocks; only the other operand's blocks use their clusters.
template <char OP_A, char OP_B, int CL, int CHUNK, int ROWS = 0>
__global__ void __cluster_dims__(CL, 1, 1)
    __launch_bounds__(EC_SCALED_THREADS, ec_scaled::blocks_an_sm<OP_A, OP_B, CHUNK>)
ec_split_scaled(int M, int N, int K, const float* __restrict__ A, int lda, long long stride_a, int matrices_a,
                const float* __restrict__ B, int ldb, long long stride_b, int matrices_b, __half* __restrict__ a_hi,
                __half* __restrict__ a_lo, __half* __restrict__ b_hi, __half* __restrict__ b_lo, int ldp,
                float* __restrict__ unscale_a, float* __restrict__ unscale_b, int blocks, int held,
                long long* __restrict__ choice, long long* __restrict__ report) {
    static_assert(CL >= 1 && CL <= EC_SCALED_MAX_CLUSTER, "a portable cluster");
    static_assert(CHUNK == EC_SCALED_CHUNK || CHUNK == EC_SCALED_SHORT_CHUNK, "a chunk of 512 or of 128");
    static_assert(128 * EC_SCALED_HELD_MAX_ROWS + ec_scaled::SIDE_SHARED_BYTES <= 227 * 1024,
                  "the largest tile and the static shared memory fit a block");
    constexpr int TILES = CHUNK / 32;
    constexpr bool rows_a = ROWS > 0 && OP_A == 'N', rows_b = ROWS > 0 && OP_B == 'T';
    static_assert(ROWS == 0 || (rows_a != rows_b && CHUNK == EC_SCALED_CHUNK), "NN or TT, the long chunk");
    __shared__ alignas(16) unsigned char smem[ec_scaled::SIDE_SHARED_BYTES];   // the clustered path's or the rows path's
    extern __shared__ float4 held_rows[];   // split_columns's tile: held x 32 floats (dynamic)
    float* tile = reinterpret_cast<float*>(held_rows);
    ec_allow_next_grid();   // the GEMM may be launched (once every block has begun); it waits for this grid
    const long long z = blockIdx.y;
    const int seg0 = int(blockIdx.x) / CL * EC_SCALED_SEGMENTS;   // the cluster's first group (all its blocks')
    const int row0 = ROWS > 0 ? int(blockIdx.x) * (EC_SCALED_ROWS_VALUES / 4 / max(ROWS, 1)) : 0;   // rows: the block's
    if (blockIdx.z == 0) {
        if (z >= matrices_a || (rows_a ? row0 : seg0) >= M) return;
        ec_scaled::split_side<rows_a, OP_A == 'N', CL, TILES, ROWS>(smem, tile, held, A + z * stride_a, lda, M, K, a_hi + z * M * ldp,
                                                                 a_lo + z * M * ldp, ldp, unscale_a + z * M, choice,
                                                                 report, 0, blocks);
    } else {
        if (z >= matrices_b || (rows_b ? row0 : seg0) >= N) return;
        ec_scaled::split_side<rows_b, OP_B == 'T', CL, TILES, ROWS>(smem, tile, held, B + z * stride_b, ldb, N, K, b_hi + z * N * ldp,
                                                                 b_lo + z * N * ldp, ldp, unscale_b + z * N, choice,
                                                                 report, 1, blocks);
    }
}


// The whole-rows split (split_rows_operand) of op(A) stored 'N' and op(B) stored 'T', K <=
// 1024 CHUNKS, rows 16-byte aligned: grid (blocks a matrix, the larger batch, 2 operands),
// each block taking groups of 16 / CHUNKS rows of its matrix in turn; the arguments are
// ec_split_scaled's.
template <int CHUNKS>
__global__ void __launch_bounds__(EC_SCALED_THREADS, 2)
ec_split_scaled_rows(int M, int N, int K, const float* __restrict__ A, int lda, long long stride_a, int matrices_a,
                     const float* __restrict__ B, int ldb, long long stride_b, int matrices_b, __half* __restrict__ a_hi,
                     __half* __restrict__ a_lo, __half* __restrict__ b_hi, __half* __restrict__ b_lo, int ldp,
                     float* __restrict__ unscale_a, float* __restrict__ unscale_b, int blocks, int /* held */,
                     long long* __restrict__ choice, long long* __restrict__ report) {
    static_assert(CHUNKS >= 1 && CHUNKS <= EC_SCALED_ROWS_VALUES / 4 && (CHUNKS & (CHUNKS - 1)) == 0,
                  "a power of two of float4 a row, 64 values a thread");
    constexpr int ROWS = EC_SCALED_ROWS_VALUES / 4 / CHUNKS;
    __shared__ ec_scaled::RowsShared sh;
    ec_allow_next_grid();   // the GEMM may be launched (once every block has begun); it waits for this grid
    const long long z = blockIdx.y;
    const int seg0 = int(blockIdx.x) * ROWS;   // the block's first group's
    if (blockIdx.z == 0) {
        if (z >= matrices_a || seg0 >= M) return;
        ec_scaled::split_rows_operand<CHUNKS>(sh, A + z * stride_a, lda, M, K, a_hi + z * M * ldp, a_lo + z * M * ldp,
                                              ldp, unscale_a + z * M, choice, report, 0, blocks);
    } else {
        if (z >= matrices_b || seg0 >= N) return;
        ec_scaled::split_rows_operand<CHUNKS>(sh, B + z * stride_b, ldb, N, K, b_hi + z * N * ldp, b_lo + z * N * ldp,
                                              ldp, unscale_b + z * N, choice, report, 1, blocks);
    }
}

}  // namespace gemmlab
