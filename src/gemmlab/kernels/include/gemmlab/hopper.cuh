// gemmlab/hopper.cuh: thin wrappers over the Hopper instructions the wgmma rung is built
// from (tensor/04_wgmma.cuh includes it), so that later kernels (ec_wgmma) reuse them:
//   mbarrier   a 64-bit shared-memory barrier that counts arrivals AND bytes
//              (expect_tx / complete_tx); waiters poll one phase bit (parity)
//   TMA        cp.async.bulk.tensor: one thread asks the copy engine for a whole 2-D (or
//              3-D: a batch) box of a tensor map; it lands (swizzled) in shared memory and
//              completes on an mbarrier; out-of-range parts of the box read zero
//   wgmma      warpgroup (4 warps, 128 threads) matrix multiply-accumulate, operands read
//              from shared memory through 64-bit descriptors, accumulators in registers,
//              issued asynchronously in groups
//   setmaxnreg move registers between warpgroups (producer gives, consumer takes)
// Everything here needs sm_90a (wgmma, setmaxnreg) or sm_90 (TMA, mbarrier).
#pragma once

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ != 900 || !defined(__CUDA_ARCH_FEAT_SM90_ALL))
#error "gemmlab/hopper.cuh needs sm_90a (wgmma and setmaxnreg exist only on the architecture-specific Hopper target)"
#endif

#include <gemmlab/type_codes.cuh>

namespace gemmlab {
namespace hopper {

using u32 = unsigned int;
using u64 = unsigned long long;

// A CUtensorMap as the kernel sees it: 128 opaque bytes, 64-byte aligned,
// passed by value as a `const __grid_constant__` parameter so that TMA can read
// it where the launch put it (no copy to local memory).  Defined here rather
// than taken from <cuda.h> so that NVRTC needs no driver headers.
struct alignas(64) TensorMap {
    u64 opaque[16];
};

__device__ __forceinline__ u32 smem_u32(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// -- mbarrier -----------------------------------------------------------------

__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// Makes initialised barriers visible to the async proxy (the copy engine).
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Arrive once and announce `bytes` more bytes of copies that will complete on
// this barrier in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(u64* bar, u32 parity) {
    u32 done;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
    return done != 0;
}

// Wait until the phase with this parity has completed (try_wait suspends the
// thread for a while in hardware before it returns false, so the loop is cheap).
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}

// Arrive on the barrier at the same shared-memory offset in CTA `cta` of this
// cluster (mapa turns the local address into that CTA's).
__device__ __forceinline__ void mbar_arrive_cluster(u64* bar, u32 cta) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
        ::"r"(smem_u32(bar)), "r"(cta)
        : "memory");
}

// -- clusters --------------------------------------------------------------------

__device__ __forceinline__ u32 cluster_ctarank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// Every thread of every CTA of the cluster: orders earlier shared-memory work
// (barrier inits, last remote arrivals) before what follows in all of them.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// cluster_sync in two halves, so that a CTA can work between them: arrive once done
// with what the others may still read of it, wait before it leaves (a CTA's shared
// memory must outlive the cluster's reads of it).  Relaxed: it orders no memory (a
// read whose value was used is complete), so no fence waits for earlier stores.
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// The 32-bit word at the same shared-memory offset as `p` in CTA `cta` of this cluster.
__device__ __forceinline__ u32 ld_shared_cluster(const u32* p, u32 cta) {
    u32 v;
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %1, %2;\n"
        "ld.shared::cluster.u32 %0, [remote];\n}\n"
        : "=r"(v)
        : "r"(smem_u32(p)), "r"(cta)
        : "memory");
    return v;
}

// Ordinary stores to shared memory become visible to the async proxy (wgmma,
// TMA) only after this fence (then a barrier orders them for the readers).
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// -- TMA ------------------------------------------------------------------------

// Copy the box at coordinates (c0 innermost, c1) of `map` into shared memory at
// `dst`; its bytes complete on `bar`.  Issued by one thread.
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int c0, int c1, u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];"
        ::"r"(smem_u32(dst)), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
        : "memory");
}

// The same copy, written to the same offset in every CTA of the cluster named in
// `cta_mask` (multicast: one read of global memory feeds them all); the bytes
// complete on the barrier at `bar`'s offset in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TensorMap* map, int c0, int c1, u64* bar,
                                                      unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;"
        ::"r"(smem_u32(dst)), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)), "h"(cta_mask)
        : "memory");
}

// The 3-D forms: coordinate c2 picks the matrix of a batch (a map whose outermost
// dimension is the batch, its stride the bytes from one matrix to the next).
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, int c0, int c1, int c2, u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];"
        ::"r"(smem_u32(dst)), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
        : "memory");
}

__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const TensorMap* map, int c0, int c1, int c2,
                                                      u64* bar, unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3, %4}], [%5], %6;"
        ::"r"(smem_u32(dst)), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar)),
          "h"(cta_mask)
        : "memory");
}

// The other direction: the box at (c0, c1) of `map` is written from shared
// memory at `src` (laid out as a load of the same box would leave it, swizzle
// included); the parts of the box outside the tensor are not written.  The copy
// runs asynchronously in the bulk-async group of the issuing thread: commit it
// with bulk_commit, and wait with bulk_wait_read before `src` is overwritten.
// Issued by one thread, after the writes to `src` were made visible to the
// async proxy (fence_proxy_async_smem, then a barrier of the writers).
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, const void* src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 ::"l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(smem_u32(src))
                 : "memory");
}

__device__ __forceinline__ void tma_store_3d(const TensorMap* map, const void* src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];"
                 ::"l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(src))
                 : "memory");
}

// Closes the bulk-async group of the stores issued by this thread since the last commit.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until at most N of this thread's committed store groups still READ shared
// memory (their writes to global memory may still be under way).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Waits until at most N of this thread's committed store groups are still running at all.
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// A barrier for `threads` threads (a multiple of 32) on hardware barrier `id`
// (1..15; 0 is __syncthreads'): e.g. the 128 threads of one warpgroup.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Fetch the tensor map's 128 bytes into the descriptor cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_map(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// -- wgmma shared-memory descriptors ------------------------------------------------
//
// 64 bits: start address >> 4 (bits 0-13), leading byte offset >> 4 (16-29),
// stride byte offset >> 4 (32-45), base offset (49-51, 0 when every swizzle
// atom starts on a 1024-byte boundary), layout (62-63: 1 = 128-byte swizzle).
// With the 128-byte swizzle an operand is made of atoms of 8 rows x 128 bytes
// (1024 bytes); the offsets say where the next atoms are:
//   K-major (rows = M or N, 128 bytes of K each): SBO = bytes between groups of
//     8 rows (1024 when rows are dense); LBO unused (16 bytes, as CUTLASS sets it).
//   MN-major (rows = K, 128 bytes = 64 16-bit values of M or N each): SBO =
//     bytes between groups of 8 K-rows; LBO = bytes between 64-wide M/N chunks.
constexpr u64 SWIZZLE_128B_LAYOUT = 1;

__device__ __forceinline__ u64 make_smem_desc(const void* smem, u32 lbo_bytes, u32 sbo_bytes) {
    const u64 addr = smem_u32(smem);
    return ((addr & 0x3FFFF) >> 4) | (u64((lbo_bytes >> 4) & 0x3FFF) << 16) |
           (u64((sbo_bytes >> 4) & 0x3FFF) << 32) | (SWIZZLE_128B_LAYOUT << 62);
}

// -- wgmma ------------------------------------------------------------------------

// Orders this warpgroup's earlier register and shared-memory accesses before
// the wgmma operations that follow (needed before the first wgmma that reads
// accumulators written by ordinary instructions).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// Closes the group of wgmma operations issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Tells the compiler that `r` may have changed here: keeps it from moving
// reads or writes of wgmma accumulators across the asynchronous window.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) fence_operand(r[i]);
}

// The same for registers an asynchronous wgmma reads (its A fragments): keeps
// them from being reused before this point.
template <int N>
__device__ __forceinline__ void fence_operands(u32 (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// -- setmaxnreg ----------------------------------------------------------------------

// Each warpgroup's registers per thread after warp specialisation: the producer
// gives registers back, the consumers take them (the kernel needs a register
// cap at entry: __launch_bounds__(threads, 1)).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

// -- TF32 rounding ------------------------------------------------------------------

// Round to nearest (ties away from zero) to TF32's 10 mantissa bits, as
// cvt.rna.tf32.f32 does; the result is a float with the low 13 bits zero.
__device__ __forceinline__ u32 round_tf32_bits(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float round_tf32(float x) { return __uint_as_float(round_tf32_bits(x)); }

// The accumulator operands of a wgmma (one asm operand per register): the
// register list in the instruction text and the matching "+f" constraints.
#define GEMMLAB_WGMMA_ACC8(d, i)                                                                 \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define GEMMLAB_WGMMA_ACC32(d) \
    GEMMLAB_WGMMA_ACC8(d, 0), GEMMLAB_WGMMA_ACC8(d, 8), GEMMLAB_WGMMA_ACC8(d, 16), GEMMLAB_WGMMA_ACC8(d, 24)
#define GEMMLAB_WGMMA_ACC48(d)                                                                     \
    GEMMLAB_WGMMA_ACC8(d, 0), GEMMLAB_WGMMA_ACC8(d, 8), GEMMLAB_WGMMA_ACC8(d, 16), GEMMLAB_WGMMA_ACC8(d, 24), \
        GEMMLAB_WGMMA_ACC8(d, 32), GEMMLAB_WGMMA_ACC8(d, 40)
#define GEMMLAB_WGMMA_ACC64(d)                                                                     \
    GEMMLAB_WGMMA_ACC8(d, 0), GEMMLAB_WGMMA_ACC8(d, 8), GEMMLAB_WGMMA_ACC8(d, 16), GEMMLAB_WGMMA_ACC8(d, 24), \
        GEMMLAB_WGMMA_ACC8(d, 32), GEMMLAB_WGMMA_ACC8(d, 40), GEMMLAB_WGMMA_ACC8(d, 48), GEMMLAB_WGMMA_ACC8(d, 56)
#define GEMMLAB_WGMMA_ACC96(d)                                                                     \
    GEMMLAB_WGMMA_ACC64(d), GEMMLAB_WGMMA_ACC8(d, 64), GEMMLAB_WGMMA_ACC8(d, 72), GEMMLAB_WGMMA_ACC8(d, 80),   \
        GEMMLAB_WGMMA_ACC8(d, 88)
#define GEMMLAB_WGMMA_ACC128(d)                                                                    \
    GEMMLAB_WGMMA_ACC64(d), GEMMLAB_WGMMA_ACC8(d, 64), GEMMLAB_WGMMA_ACC8(d, 72), GEMMLAB_WGMMA_ACC8(d, 80),   \
        GEMMLAB_WGMMA_ACC8(d, 88), GEMMLAB_WGMMA_ACC8(d, 96), GEMMLAB_WGMMA_ACC8(d, 104),                    \
        GEMMLAB_WGMMA_ACC8(d, 112), GEMMLAB_WGMMA_ACC8(d, 120)
#define GEMMLAB_WGMMA_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define GEMMLAB_WGMMA_REGS48 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define GEMMLAB_WGMMA_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define GEMMLAB_WGMMA_REGS96 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define GEMMLAB_WGMMA_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// wgmma.mma_async m64nNk{16,8} with both operands in shared memory:
// D[64 x N] (+)= A[64 x K] * B[K x N], FP32 accumulators, N/2 per thread.
// DT: TYPE_FLOAT16, TYPE_BFLOAT16 (K = 16, TRANS_A/TRANS_B = 1 for an M- / N-major
// operand), TYPE_TF32 (K = 8, both operands K-major: the instruction has no transpose).
// scale_d = 0 ignores the old accumulators (D = A*B).
// Accumulator layout: thread t of the warpgroup (warp w = t/32, lane l) holds
// d[4j + 2h + e] = D[16w + l/4 + 8h][8j + 2(l%4) + e] for h, e in {0, 1}.
template <int N, int DT> struct Wgmma;

// The specialisations differ only in the instruction's name and in the operand
// numbers: the N/2 accumulators are %0 .. %(N/2 - 1), then come desc_a, desc_b,
// scale_d and, for 16-bit types, the two transpose flags: R = N/2 names the
// register list and numbers desc_a; DB, SC, TA, TB are the numbers after it.
#define GEMMLAB_WGMMA_SS_16BIT(N, DT, TYPE, R, DB, SC, TA, TB)                                            \
    template <> struct Wgmma<N, DT> {                                                                     \
        template <int TRANS_A, int TRANS_B>                                                               \
        static __device__ __forceinline__ void mma(float* d, u64 desc_a, u64 desc_b, int scale_d) {      \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SC ", 0;\n"                               \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " "               \
                         GEMMLAB_WGMMA_REGS##R ", %" #R ", %" #DB ", p, 1, 1, %" #TA ", %" #TB ";\n}\n"   \
                         : GEMMLAB_WGMMA_ACC##R(d)                                                        \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));          \
        }                                                                                                 \
    };
#define GEMMLAB_WGMMA_SS_TF32(N, R, DB, SC)                                                               \
    template <> struct Wgmma<N, TYPE_TF32> {                                                              \
        template <int TRANS_A, int TRANS_B>                                                               \
        static __device__ __forceinline__ void mma(float* d, u64 desc_a, u64 desc_b, int scale_d) {      \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SC ", 0;\n"                               \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 "                        \
                         GEMMLAB_WGMMA_REGS##R ", %" #R ", %" #DB ", p, 1, 1;\n}\n"                      \
                         : GEMMLAB_WGMMA_ACC##R(d)                                                        \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                       \
        }                                                                                                 \
    };

// m64n64: the wgmma rung's narrow tile (products of a few rows: more blocks, no split).
GEMMLAB_WGMMA_SS_16BIT(64, TYPE_FLOAT16, "f16", 32, 33, 34, 35, 36)
GEMMLAB_WGMMA_SS_16BIT(64, TYPE_BFLOAT16, "bf16", 32, 33, 34, 35, 36)
GEMMLAB_WGMMA_SS_TF32(64, 32, 33, 34)
// m64n96: the error-corrected kernel's tile (four sets of accumulators a thread).
GEMMLAB_WGMMA_SS_16BIT(96, TYPE_FLOAT16, "f16", 48, 49, 50, 51, 52)
GEMMLAB_WGMMA_SS_TF32(96, 48, 49, 50)
GEMMLAB_WGMMA_SS_16BIT(128, TYPE_FLOAT16, "f16", 64, 65, 66, 67, 68)
GEMMLAB_WGMMA_SS_16BIT(128, TYPE_BFLOAT16, "bf16", 64, 65, 66, 67, 68)
GEMMLAB_WGMMA_SS_TF32(128, 64, 65, 66)
// m64n192 (16-bit only): the 128 x 192 tile, for products whose 256-wide tiles leave the
// last round of the persistent grid part-empty (wave quantisation: docs/tensor/04-wgmma.md).
GEMMLAB_WGMMA_SS_16BIT(192, TYPE_FLOAT16, "f16", 96, 97, 98, 99, 100)
GEMMLAB_WGMMA_SS_16BIT(192, TYPE_BFLOAT16, "bf16", 96, 97, 98, 99, 100)
GEMMLAB_WGMMA_SS_16BIT(256, TYPE_FLOAT16, "f16", 128, 129, 130, 131, 132)
GEMMLAB_WGMMA_SS_16BIT(256, TYPE_BFLOAT16, "bf16", 128, 129, 130, 131, 132)
GEMMLAB_WGMMA_SS_TF32(256, 128, 129, 130)

// wgmma.mma_async with A from registers (TF32 only so far): D[64 x N] (+)= A * B,
// B from shared memory as above.  Thread t of the warpgroup (warp w, lane l)
// supplies a[0..3] = A[16w + l/4 (+8 for a[1], a[3])][l%4 (+4 for a[2], a[3])]
// (the layout of mma.m16n8k8's A, one 16-row slice per warp); the registers must
// keep their values until the wgmma has completed (wgmma_wait).
template <int N, int DT> struct WgmmaRegA;

// As GEMMLAB_WGMMA_SS_TF32: the accumulators, then a[0..3] from %R to %(R + 3), desc_b
// (%DB) and scale_d (%SC).
#define GEMMLAB_WGMMA_RS_TF32(N, R, A0, A1, A2, A3, DB, SC)                                               \
    template <> struct WgmmaRegA<N, TYPE_TF32> {                                                          \
        static __device__ __forceinline__ void mma(float* d, const u32 (&a)[4], u64 desc_b, int scale_d) { \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SC ", 0;\n"                               \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 "                        \
                         GEMMLAB_WGMMA_REGS##R ", {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #DB         \
                         ", p, 1, 1;\n}\n"                                                                 \
                         : GEMMLAB_WGMMA_ACC##R(d)                                                        \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));     \
        }                                                                                                 \
    };
GEMMLAB_WGMMA_RS_TF32(64, 32, 32, 33, 34, 35, 36, 37)
GEMMLAB_WGMMA_RS_TF32(128, 64, 64, 65, 66, 67, 68, 69)
GEMMLAB_WGMMA_RS_TF32(256, 128, 128, 129, 130, 131, 132, 133)

}  // namespace hopper
}  // namespace gemmlab
