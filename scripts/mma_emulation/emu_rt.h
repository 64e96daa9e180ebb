// Host emulation of the CUDA pieces 03_mma_pipelined.cu uses (emulate.py builds
// the kernel's real source against it): one std::thread per CUDA thread,
// std::barrier for __syncthreads / __syncwarp, warp-wide instructions by
// exchange through a per-warp buffer, mma.sync from the PTX ISA's fragment
// layouts, cp.async landing at the wait that allows it (as late as possible).
#pragma once
#include <barrier>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cmath>
#include <vector>
#include <thread>
#include <memory>
#include <algorithm>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <vector_types.h>

#undef __device__
#undef __global__
#undef __host__
#undef __forceinline__
#undef __align__
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __align__(n) alignas(n)

struct Dim3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local Dim3 threadIdx, blockIdx;
inline Dim3 gridDim, blockDim;

using std::min; using std::max;

namespace emu {
struct Warp {
    std::unique_ptr<std::barrier<>> bar;
    unsigned addr[32];
    unsigned a[32][4], b[32][2];
};
struct Block {
    std::vector<unsigned char> smem;
    std::unique_ptr<std::barrier<>> bar;
    std::vector<Warp> warps;
};
inline Block* blk = nullptr;
struct Copy { unsigned dst; const unsigned char* src; int bytes, src_bytes; };
inline thread_local std::vector<std::vector<Copy>> groups;
inline thread_local std::vector<Copy> open_group;
inline unsigned lane() { return threadIdx.x % 32; }
inline Warp& warp() { return blk->warps[threadIdx.x / 32]; }
inline void warp_sync() { warp().bar->arrive_and_wait(); }
inline unsigned char* smem_base() { return blk->smem.data(); }
inline void check(unsigned addr, int n) {
    if (addr + n > blk->smem.size()) { fprintf(stderr, "smem access out of range: %u + %d > %zu\n", addr, n, blk->smem.size()); std::abort(); }
}
inline void land(const Copy& c) {
    check(c.dst, c.bytes);
    std::memset(smem_base() + c.dst, 0, c.bytes);
    if (c.src_bytes) std::memcpy(smem_base() + c.dst, c.src, c.src_bytes);
}
}  // namespace emu

inline void __syncthreads() { emu::blk->bar->arrive_and_wait(); }
inline void __syncwarp() { emu::warp_sync(); }
inline size_t __cvta_generic_to_shared(const void* p) {
    return (const unsigned char*)p - emu::smem_base();
}
inline void __pipeline_commit() { emu::groups.push_back(std::move(emu::open_group)); emu::open_group.clear(); }
inline void __pipeline_wait_prior(size_t n) {
    while (emu::groups.size() > n) { for (auto& c : emu::groups.front()) emu::land(c); emu::groups.erase(emu::groups.begin()); }
}

namespace gemmlab {
__device__ __forceinline__ void cp_async16(unsigned smem, const void* g, int src_bytes) {
    if (smem % 16) { fprintf(stderr, "cp.async 16 misaligned dst\n"); std::abort(); }
    if (src_bytes && ((uintptr_t)g % 16)) { fprintf(stderr, "cp.async 16 misaligned src\n"); std::abort(); }
    if (src_bytes < 0 || src_bytes > 16) { fprintf(stderr, "src_bytes %d\n", src_bytes); std::abort(); }
    emu::open_group.push_back({smem, (const unsigned char*)g, 16, src_bytes});
}
__device__ __forceinline__ void cp_async4(unsigned smem, const void* g, int src_bytes) {
    if (smem % 4 || (src_bytes && (uintptr_t)g % 4)) { fprintf(stderr, "cp.async 4 misaligned\n"); std::abort(); }
    emu::open_group.push_back({smem, (const unsigned char*)g, 4, src_bytes});
}
__device__ __forceinline__ void st_shared_v4(unsigned smem, const unsigned (&w)[4]) {
    if (smem % 16) { fprintf(stderr, "st.shared.v4 misaligned\n"); std::abort(); }
    emu::check(smem, 16);
    std::memcpy(emu::smem_base() + smem, w, 16);
}
namespace mma {
inline unsigned ld32(unsigned addr) { emu::check(addr, 4); unsigned v; std::memcpy(&v, emu::smem_base() + addr, 4); return v; }
inline unsigned ld16(unsigned addr) { emu::check(addr, 2); unsigned short v; std::memcpy(&v, emu::smem_base() + addr, 2); return v; }
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    auto& w = emu::warp(); unsigned l = emu::lane();
    if (addr % 16) { fprintf(stderr, "ldmatrix row address not 16-byte aligned\n"); std::abort(); }
    w.addr[l] = addr; emu::warp_sync();
    for (int i = 0; i < 4; ++i) r[i] = ld32(w.addr[8 * i + l / 4] + 4 * (l % 4));
    emu::warp_sync();
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    auto& w = emu::warp(); unsigned l = emu::lane();
    if (addr % 16) { fprintf(stderr, "ldmatrix row address not 16-byte aligned\n"); std::abort(); }
    w.addr[l] = addr; emu::warp_sync();
    for (int i = 0; i < 4; ++i) {
        unsigned lo = ld16(w.addr[8 * i + 2 * (l % 4)] + 2 * (l / 4));
        unsigned hi = ld16(w.addr[8 * i + 2 * (l % 4) + 1] + 2 * (l / 4));
        r[i] = lo | (hi << 16);
    }
    emu::warp_sync();
}
__device__ __forceinline__ unsigned lds32(unsigned addr) { return ld32(addr); }
__device__ __forceinline__ unsigned to_tf32(unsigned bits) { return (bits + 0x1000u) & ~0x1fffu; }
// Half an ulp added to finite values; mma_16n8 below drops the low 13 bits, as the tensor cores do.
__device__ __forceinline__ unsigned to_tf32_half_ulp(unsigned bits) {
    return (bits & 0x7f800000u) != 0x7f800000u ? bits + 0x1000u : bits;
}
inline float bits_f(unsigned b) { float f; std::memcpy(&f, &b, 4); return f; }
template <int DT> inline float elem(unsigned word, int h) {
    unsigned short u = h ? word >> 16 : word & 0xffff;
    if constexpr (DT == 0) { __half x = __ushort_as_half(u); return __half2float(x); }
    else { __nv_bfloat16 x = __ushort_as_bfloat16(u); return __bfloat162float(x); }
}
template <int DT>
__device__ __forceinline__ void mma_16n8(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    auto& w = emu::warp(); unsigned l = emu::lane();
    for (int i = 0; i < 4; ++i) w.a[l][i] = a[i];
    w.b[l][0] = b[0]; w.b[l][1] = b[1];
    emu::warp_sync();
    const int K = DT == 2 ? 8 : 16;
    float A[16][16], B[16][8];
    for (int ln = 0; ln < 32; ++ln) {
        int g = ln / 4, t = ln % 4;
        if constexpr (DT == 2) {
            A[g][t] = bits_f(w.a[ln][0] & ~0x1fffu); A[g + 8][t] = bits_f(w.a[ln][1] & ~0x1fffu);
            A[g][t + 4] = bits_f(w.a[ln][2] & ~0x1fffu); A[g + 8][t + 4] = bits_f(w.a[ln][3] & ~0x1fffu);
            B[t][g] = bits_f(w.b[ln][0] & ~0x1fffu); B[t + 4][g] = bits_f(w.b[ln][1] & ~0x1fffu);
        } else {
            for (int h = 0; h < 2; ++h) {
                A[g][2 * t + h] = elem<DT>(w.a[ln][0], h); A[g + 8][2 * t + h] = elem<DT>(w.a[ln][1], h);
                A[g][2 * t + 8 + h] = elem<DT>(w.a[ln][2], h); A[g + 8][2 * t + 8 + h] = elem<DT>(w.a[ln][3], h);
                B[2 * t + h][g] = elem<DT>(w.b[ln][0], h); B[2 * t + 8 + h][g] = elem<DT>(w.b[ln][1], h);
            }
        }
    }
    emu::warp_sync();
    int g = l / 4, t = l % 4;
    int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; ++e) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += double(A[rows[e]][k]) * B[k][cols[e]];
        d[e] += float(s);
    }
}
}  // namespace mma
}  // namespace gemmlab
