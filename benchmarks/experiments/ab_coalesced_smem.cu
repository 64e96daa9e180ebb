// Experiment (not a rung): is the gap of `coalesced` and `smem_tiled` to the
// published figures the cost of bounds checks and 64-bit address arithmetic?
// Each variant changes one thing against the shipped kernel; run with
// scripts/ab_variants.py at 4096^3 (all variants valid there).
//
// ab-variant: gemmlab_exp::coalesced_ptr block=32x32 tile=32x32
// ab-variant: gemmlab_exp::coalesced_u32 block=32x32 tile=32x32
// ab-variant: gemmlab_exp::smem32_unchecked block=32x32 tile=32x32
// ab-variant: gemmlab_exp::smem32_guarded_u32 block=32x32 tile=32x32
// ab-shipped: coalesced
// ab-shipped: smem_tiled:tile=32
#include <gemmlab/simt/07_warptile.cuh>   // every CUDA-core rung header up to rung 7

namespace gemmlab_exp {
using gemmlab::TileOrigin;
using gemmlab::block_tile_origin;

// coalesced, walking pointers instead of recomputing 64-bit indices.
__global__ void __launch_bounds__(1024)
coalesced_ptr(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
              const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    const TileOrigin tile = block_tile_origin<32, 32>(N);
    const int row = tile.row + threadIdx.y, col = tile.col + threadIdx.x;
    if (row >= M || col >= N) return;
    const float* a = A + (long long)row * lda;
    const float* b = B + col;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k, b += ldb) acc += a[k] * *b;
    gemmlab::store_scaled(&C[(long long)row * ldc + col], acc, alpha, beta);
}

// coalesced with 32-bit unsigned offsets (valid while every offset < 2^32).
__global__ void __launch_bounds__(1024)
coalesced_u32(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
              const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    const TileOrigin tile = block_tile_origin<32, 32>(N);
    const unsigned row = tile.row + threadIdx.y, col = tile.col + threadIdx.x;
    if (row >= (unsigned)M || col >= (unsigned)N) return;
    float acc = 0.0f;
    for (unsigned k = 0; k < (unsigned)K; ++k) acc += A[row * lda + k] * B[k * ldb + col];
    gemmlab::store_scaled(&C[row * ldc + col], acc, alpha, beta);
}

// smem_tiled<32> without bounds checks, 32-bit offsets (multiples of 32 only).
__global__ void __launch_bounds__(1024)
smem32_unchecked(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                 const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    __shared__ float As[32][32];
    __shared__ float Bs[32][32];
    const TileOrigin tile = block_tile_origin<32, 32>(N);
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    A += (unsigned)tile.row * lda;
    B += tile.col;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 32) {
        As[ty][tx] = A[ty * lda + tx];
        Bs[ty][tx] = B[ty * ldb + tx];
        __syncthreads();
        A += 32;
        B += 32 * ldb;
#pragma unroll
        for (int k = 0; k < 32; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    gemmlab::store_scaled(&C[(tile.row + ty) * ldc + tile.col + tx], acc, alpha, beta);
}

// smem_tiled<32> with the shipped guarded loader but no 64-bit tile offsets.
__global__ void __launch_bounds__(1024)
smem32_guarded_u32(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                   const float* __restrict__ B, int ldb, float beta, float* __restrict__ C, int ldc) {
    __shared__ float As[32][32];
    __shared__ float Bs[32][32];
    const TileOrigin tile = block_tile_origin<32, 32>(N);
    const unsigned tx = threadIdx.x, ty = threadIdx.y;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 32) {
        As[ty][tx] = (tile.row + ty < M && k0 + tx < K) ? A[(tile.row + ty) * (unsigned)lda + k0 + tx] : 0.f;
        Bs[ty][tx] = (k0 + ty < K && tile.col + tx < N) ? B[(k0 + ty) * (unsigned)ldb + tile.col + tx] : 0.f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 32; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    const unsigned row = tile.row + ty, col = tile.col + tx;
    if (row < (unsigned)M && col < (unsigned)N) gemmlab::store_scaled(&C[row * ldc + col], acc, alpha, beta);
}
}  // namespace gemmlab_exp
