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
constexpr int EC_SCALED_STAGED = 4;         // 32 x 32 tiles through shared memory between two barriers (CS)
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
    __half2 staged[EC_SCALED_STAGED][32][33];   // (hi, lo) by [segment][k]; the pad spreads the banks
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

// Thread (tx, ty)'s element j of a tile: its segment (of the cluster's 32) and k (of the tile's 32).
template <bool CK>
__device__ __forceinline__ int seg_of(int j) {
    return CK ? int(threadIdx.x) / 32 + 8 * j : int(threadIdx.x) % 32;
}
template <bool CK>
__device__ __forceinline__ int k_of(int j) {
    return CK ? int(threadIdx.x) % 32 : int(threadIdx.x) / 32 + 8 * j;
}

// A chunk of the block's share into registers: segments seg0.., k from k0 (below k1).
// The addresses step from one pointer per element row (the compiler otherwise keeps
// a 64-bit address per element).
template <bool CK, int TILES>
__device__ __forceinline__ void load_chunk(float (&v)[TILES][PER_TILE], const float* __restrict__ X, int ld, int segs,
                                           int seg0, int k0, int k1) {
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    if constexpr (CK) {   // element (f, j): segment ty + 8 j, k = k0 + 32 f + tx
        const int left = k1 - k0 - tx;
#pragma unroll
        for (int j = 0; j < PER_TILE; ++j) {
            const int s = seg0 + ty + 8 * j;
            const float* row = X + (long long)min(s, segs - 1) * ld + k0 + tx;
#pragma unroll
            for (int f = 0; f < TILES; ++f) v[f][j] = s < segs && 32 * f < left ? row[32 * f] : 0.0f;
        }
    } else {              // element (f, j): segment tx, k = k0 + 32 f + ty + 8 j
        const bool in = seg0 + tx < segs;
        const int left = k1 - k0 - ty;
        const long long step = 8LL * ld;
        const float* at = X + (long long)(k0 + ty) * ld + seg0 + tx;
#pragma unroll
        for (int f = 0; f < TILES; ++f)
#pragma unroll
            for (int j = 0; j < PER_TILE; ++j, at += step) v[f][j] = in && 32 * f + 8 * j < left ? *at : 0.0f;
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

// One block's share of 32 segments of one operand: seg0 .. seg0 + 31 of X (segs of
// them, each K long), k in this block's CL-th of K, TILES x 32 values of K (a chunk)
// at a time; its counts added to sh's.
template <bool CK, int CL, int TILES>
__device__ __forceinline__ void split_segments(Shared& sh, const float* __restrict__ X, int ld, int segs, int K,
                                               int seg0, __half* __restrict__ hi, __half* __restrict__ lo, int ldp,
                                               float* __restrict__ unscale) {
    const int t = threadIdx.x, tx = t % 32, ty = t / 32;
    const int rank = CL > 1 ? int(hopper::cluster_ctarank()) : 0;
    const int share = (K + 32 * CL - 1) / (32 * CL) * 32;   // a multiple of 32
    const int kb = min(K, rank * share), ke = min(K, kb + share);
    constexpr int CHUNK = 32 * TILES;
    const int chunks = max(1, (ke - kb + CHUNK - 1) / CHUNK);
    if (t < EC_SCALED_SEGMENTS) sh.part_max[t] = 0;
    __syncthreads();

    // Each segment's largest finite magnitude over the block's share.
    float v[TILES][PER_TILE];
    unsigned m[PER_TILE] = {};
#pragma unroll 1
    for (int c = 0; c < chunks; ++c) {
        load_chunk<CK>(v, X, ld, segs, seg0, kb + c * CHUNK, ke);
#pragma unroll
        for (int f = 0; f < TILES; ++f)
#pragma unroll
            for (int j = 0; j < PER_TILE; ++j) m[j] = max(m[j], finite_magnitude(v[f][j]));
    }
    if constexpr (CK) {   // a warp's lanes share segments: warp ty holds segments ty + 8 j alone
#pragma unroll
        for (int j = 0; j < PER_TILE; ++j) {
            const unsigned w = __reduce_max_sync(0xFFFFFFFFu, m[j]);
            if (tx == 0) sh.part_max[seg_of<CK>(j)] = w;
        }
    } else {
        atomicMax(&sh.part_max[tx], max(max(m[0], m[1]), max(m[2], m[3])));
    }
    // ... and over the cluster's: then the scale.
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

    // Split: each value times its segment's scale; count for the rules.
    float scale[PER_TILE];
    int below_field[PER_TILE];   // biased exponents below this fall under FP16's normals once scaled
#pragma unroll
    for (int j = 0; j < PER_TILE; ++j) {
        const int s = sh.scale[seg_of<CK>(j)];
        scale[j] = pow2(s);
        below_field[j] = below_field_of(s);
    }
    unsigned normal = 0, below = 0;
#pragma unroll 1
    for (int c = 0; c < chunks; ++c) {
        const int k0 = kb + c * CHUNK;
        if (chunks > 1) load_chunk<CK>(v, X, ld, segs, seg0, k0, ke);
        // Written: segment seg0 + ty + 8 j, k = k0 + 32 f + tx (CK: this thread's own
        // elements; else the staged elements of a tile, transposed).
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
                if constexpr (CK) {
                    if (out[j] >= 0 && 32 * f < left) {
                        hi[out[j] + 32 * f] = h;
                        lo[out[j] + 32 * f] = l;
                    }
                } else {
                    sh.staged[f % EC_SCALED_STAGED][tx][k_of<CK>(j)] = __halves2half2(h, l);
                }
            }
            // A tile's parts are stored before the next tile's are made: left to
            // itself the compiler scales and converts far ahead of the stores, into spills.
            asm volatile("" ::: "memory");
            if constexpr (!CK) {   // every EC_SCALED_STAGED tiles: out along k, transposed
                if (f % EC_SCALED_STAGED == EC_SCALED_STAGED - 1) {
                    __syncthreads();
#pragma unroll
                    for (int g = f + 1 - EC_SCALED_STAGED; g <= f; ++g)
#pragma unroll
                        for (int j = 0; j < PER_TILE; ++j) {
                            if (out[j] >= 0 && 32 * g < left) {
                                const __half2 p = sh.staged[g % EC_SCALED_STAGED][ty + 8 * j][tx];
                                hi[out[j] + 32 * g] = __low2half(p);
                                lo[out[j] + 32 * g] = __high2half(p);
                            }
                        }
                    __syncthreads();
                }
            }
        }
    }

    add_block_counts(normal, below, tx, sh.counts);   // the block's counts for these segments
    if constexpr (CL > 1) hopper::cluster_wait();   // the others have read this block's maxima
}

// One operand: the cluster takes groups of 32 segments of matrix z in turn (a block a
// launch, not a group: a product of short K has many groups, and each block adds to
// the record's sums once), then the block's counts go into the record's sums and the
// last block of the launch decides.  side: 0 A, 1 B.
template <bool CK, int CL, int TILES>
__device__ __forceinline__ void split_operand(Shared& sh, const float* __restrict__ X, int ld, int segs, int K,
                                              __half* __restrict__ hi, __half* __restrict__ lo, int ldp,
                                              float* __restrict__ unscale, long long* __restrict__ choice,
                                              long long* __restrict__ report, int side, int blocks) {
    const int t = threadIdx.x;
    if (t == 0) sh.counts.normal = sh.counts.below = sh.counts.clamped = sh.counts.top = 0;
    const int groups = (segs + EC_SCALED_SEGMENTS - 1) / EC_SCALED_SEGMENTS;
    for (int g = int(blockIdx.x) / CL; g < groups; g += int(gridDim.x) / CL)
        split_segments<CK, CL, TILES>(sh, X, ld, segs, K, g * EC_SCALED_SEGMENTS, hi, lo, ldp, unscale);
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

// One operand of ec_split_scaled: by whole rows (ROWS_PATH: split_rows_operand, ROWS float4 of
// each row a thread) or by clusters (split_operand), in the kernel's shared memory.
constexpr size_t SIDE_SHARED_BYTES = sizeof(Shared) > sizeof(RowsShared) ? sizeof(Shared) : sizeof(RowsShared);
template <bool ROWS_PATH, bool CK, int CL, int TILES, int ROWS>
__device__ __forceinline__ void split_side(unsigned char* smem, const float* __restrict__ X, int ld, int segs, int K,
                                           __half* __restrict__ hi, __half* __restrict__ lo, int ldp,
                                           float* __restrict__ unscale, long long* __restrict__ choice,
                                           long long* __restrict__ report, int side, int blocks) {
    if constexpr (ROWS_PATH)
        split_rows_operand<ROWS>(*reinterpret_cast<RowsShared*>(smem), X, ld, segs, K, hi, lo, ldp, unscale, choice,
                                 report, side, blocks);
    else
        split_operand<CK, CL, TILES>(*reinterpret_cast<Shared*>(smem), X, ld, segs, K, hi, lo, ldp, unscale, choice,
                                     report, side, blocks);
}

}  // namespace ec_scaled

// A cluster of CL blocks takes 32 segments at a time (several groups in turn where
// there are many), each block a CL-th of K, held in registers (CHUNK elements of K
// per segment; a longer share is read twice, once for the maxima and once to split).  The blocks trade their 32 partial maxima
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
// the segments, and then the parts (rows along K) go out through shared memory,
// transposed, as in split_pack.cu.  Where both operands' segments lie along K
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
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(EC_SCALED_THREADS, CHUNK <= EC_SCALED_SHORT_CHUNK ? 4 : 2)
ec_split_scaled(int M, int N, int K, const float* __restrict__ A, int lda, long long stride_a, int matrices_a,
                const float* __restrict__ B, int ldb, long long stride_b, int matrices_b, __half* __restrict__ a_hi,
                __half* __restrict__ a_lo, __half* __restrict__ b_hi, __half* __restrict__ b_lo, int ldp,
                float* __restrict__ unscale_a, float* __restrict__ unscale_b, int blocks,
                long long* __restrict__ choice, long long* __restrict__ report) {
    static_assert(CL >= 1 && CL <= EC_SCALED_MAX_CLUSTER, "a portable cluster");
    static_assert(CHUNK == EC_SCALED_CHUNK || CHUNK == EC_SCALED_SHORT_CHUNK, "a chunk of 512 or of 128");
    constexpr int TILES = CHUNK / 32;
    static_assert(TILES % EC_SCALED_STAGED == 0, "the staged tiles divide a chunk");
    constexpr bool rows_a = ROWS > 0 && OP_A == 'N', rows_b = ROWS > 0 && OP_B == 'T';
    static_assert(ROWS == 0 || (rows_a != rows_b && CHUNK == EC_SCALED_CHUNK), "NN or TT, the long chunk");
    __shared__ alignas(16) unsigned char smem[ec_scaled::SIDE_SHARED_BYTES];   // the clustered path's or the rows path's
    ec_allow_next_grid();   // the GEMM may be launched (once every block has begun); it waits for this grid
    const long long z = blockIdx.y;
    const int seg0 = int(blockIdx.x) / CL * EC_SCALED_SEGMENTS;   // the cluster's first group (all its blocks')
    const int row0 = ROWS > 0 ? int(blockIdx.x) * (EC_SCALED_ROWS_VALUES / 4 / max(ROWS, 1)) : 0;   // rows: the block's
    if (blockIdx.z == 0) {
        if (z >= matrices_a || (rows_a ? row0 : seg0) >= M) return;
        ec_scaled::split_side<rows_a, OP_A == 'N', CL, TILES, ROWS>(smem, A + z * stride_a, lda, M, K, a_hi + z * M * ldp,
                                                                 a_lo + z * M * ldp, ldp, unscale_a + z * M, choice,
                                                                 report, 0, blocks);
    } else {
        if (z >= matrices_b || (rows_b ? row0 : seg0) >= N) return;
        ec_scaled::split_side<rows_b, OP_B == 'T', CL, TILES, ROWS>(smem, B + z * stride_b, ldb, N, K, b_hi + z * N * ldp,
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
                     float* __restrict__ unscale_a, float* __restrict__ unscale_b, int blocks,
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
