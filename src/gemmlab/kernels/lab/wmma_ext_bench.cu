// gemmlab lab: wmma_ext_bench.cu -- the experiments behind gemmlab/wmma_ext.cuh
// (`gemmlab bench --suite wmma_ext`, gemmlab/tools/bench/wmma_ext.py).  Each experiment
// has the extension's way and the way without it (a tile staged in shared memory
// for wmma::load_matrix_sync), selected by the template argument EXT.
#include <gemmlab/wmma_ext.cuh>

namespace gemmlab {
namespace lab {

namespace wx = gemmlab::wmma_ext;
using namespace nvcuda;

constexpr int BENCH_WARPS = 4;   // warps per block in vec_product, scaled_transpose, smem_load

//   vec_product<EXT>     out_i = v_i^T B for a batch of 16-element FP16 vectors:
//                        load_vector_sync / store_vector_sync vs a zero-padded 16x16
//                        tile in shared memory (rows 1..15 stay zero) + load/store_matrix_sync.
//   scaled_transpose<EXT> Y_t = alpha_t X_t^T for a batch of 16x16 FP16 tiles, as
//                        (alpha_t I) x X_t^T: make_identity vs alpha_t I written to
//                        shared memory + load_matrix_sync, once per tile.
//   ec_gemm<EXT>         C = A B in FP32 from FP16 tensor cores with the hi/lo split
//                        (A = Ahi + Alo, B = Bhi + Blo; C = Ahi Bhi + Ahi Blo + Alo Bhi):
//                        load_matrix_with_op_sync from the FP32 tiles in shared memory vs a
//                        second pass writing four FP16 tiles to shared memory.
//   smem_load<MODE>      repeated fragment loads from a 16x16 FP16 tile in shared memory
//                        (leading dimension 16: rows g and g+4 share banks): MODE 0
//                        load_matrix_with_op_sync, 1 the same with the skew, 2 wmma::load_matrix_sync.
template <bool EXT>
__global__ void __launch_bounds__(32 * BENCH_WARPS) vec_product(const __half* __restrict__ v,
                                                                 const __half* __restrict__ B,
                                                                 float* __restrict__ out, int batch) {
    __shared__ __align__(32) __half a_tile[BENCH_WARPS][16 * 16];
    __shared__ __align__(32) float c_tile[BENCH_WARPS][16 * 16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
    wmma::load_matrix_sync(fb, B, 16);
    if (!EXT) {
        for (int i = lane; i < 256; i += 32) a_tile[warp][i] = __float2half(0.0f);
        __syncwarp();
    }
    const int stride = gridDim.x * BENCH_WARPS;
    for (int i = blockIdx.x * BENCH_WARPS + warp; i < batch; i += stride) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        if (EXT) {
            wx::load_vector_sync(fa, v + (long)i * 16);
            wmma::mma_sync(acc, fa, fb, acc);
            wx::store_vector_sync(out + (long)i * 16, acc, wmma::mem_row_major);
        } else {
            if (lane < 16) a_tile[warp][lane] = v[(long)i * 16 + lane];
            __syncwarp();
            wmma::load_matrix_sync(fa, a_tile[warp], 16);
            wmma::mma_sync(acc, fa, fb, acc);
            wmma::store_matrix_sync(c_tile[warp], acc, 16, wmma::mem_row_major);
            __syncwarp();
            if (lane < 16) out[(long)i * 16 + lane] = c_tile[warp][lane];
            __syncwarp();
        }
    }
}

template <bool EXT>
__global__ void __launch_bounds__(32 * BENCH_WARPS) scaled_transpose(const __half* __restrict__ X,
                                                                      const float* __restrict__ alpha,
                                                                      float* __restrict__ Y, int tiles) {
    __shared__ __align__(32) __half i_tile[BENCH_WARPS][16 * 16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int stride = gridDim.x * BENCH_WARPS;
    for (int t = blockIdx.x * BENCH_WARPS + warp; t < tiles; t += stride) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        const float a = alpha[t];
        if (EXT) {
            wx::make_identity(fa, a);
        } else {
            const __half ha = __float2half(a), zero = __float2half(0.0f);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int e = lane * 8 + j;
                i_tile[warp][e] = (e / 16 == e % 16) ? ha : zero;
            }
            __syncwarp();
            wmma::load_matrix_sync(fa, i_tile[warp], 16);
        }
        wmma::load_matrix_sync(fb, X + (long)t * 256, 16);   // column-major view of X_t = X_t^T
        wmma::fill_fragment(acc, 0.0f);
        wmma::mma_sync(acc, fa, fb, acc);
        wmma::store_matrix_sync(Y + (long)t * 256, acc, 16, wmma::mem_row_major);
        if (!EXT) __syncwarp();
    }
}

// -- error-corrected GEMM: 64x64 block tile, 4 warps of 32x32, K step 16 --------------------

constexpr int EC_BM = 64;   // the host launches (n / EC_BM) * (n / EC_BN) blocks
constexpr int EC_BN = 64;
constexpr int EC_BK = 16;
constexpr int EC_LDA = EC_BK + 4, EC_LDB = EC_BN + 4;   // FP32 tiles, padded
constexpr int EC_LDH = EC_BK + 8, EC_LDHB = EC_BN + 8;  // FP16 tiles (two-pass variant), padded

__device__ __forceinline__ __half hi_part(float x) { return __float2half_rn(x); }
__device__ __forceinline__ __half lo_part(float x) { return __float2half_rn(x - __half2float(__float2half_rn(x))); }

template <bool EXT>
__global__ void __launch_bounds__(128) ec_gemm(int n, const float* __restrict__ A, const float* __restrict__ B,
                                               float* __restrict__ C) {
    __shared__ __align__(32) float As[EC_BM * EC_LDA];
    __shared__ __align__(32) float Bs[EC_BK * EC_LDB];
    __shared__ __align__(32) __half Ah[EC_BM * EC_LDH], Al[EC_BM * EC_LDH];
    __shared__ __align__(32) __half Bh[EC_BK * EC_LDHB], Bl[EC_BK * EC_LDHB];
    const int tiles_n = n / EC_BN;
    const int row0 = (blockIdx.x / tiles_n) * EC_BM, col0 = (blockIdx.x % tiles_n) * EC_BN;
    const int warp = threadIdx.x / 32;
    const int wr = (warp / 2) * 32, wc = (warp % 2) * 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < n; k0 += EC_BK) {
        // 64x16 of A and 16x64 of B, 8 floats each per thread, as float4.
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int q = threadIdx.x + s * 128;          // 256 float4 per tile
            const int ar = q / 4, ac = (q % 4) * 4;
            const float4 va = *reinterpret_cast<const float4*>(A + (long)(row0 + ar) * n + k0 + ac);
            As[ar * EC_LDA + ac + 0] = va.x; As[ar * EC_LDA + ac + 1] = va.y;
            As[ar * EC_LDA + ac + 2] = va.z; As[ar * EC_LDA + ac + 3] = va.w;
            const int br = q / 16, bc = (q % 16) * 4;
            const float4 vb = *reinterpret_cast<const float4*>(B + (long)(k0 + br) * n + col0 + bc);
            *reinterpret_cast<float4*>(&Bs[br * EC_LDB + bc]) = vb;
        }
        __syncthreads();
        if (!EXT) {   // second pass: the four FP16 tiles
            for (int e = threadIdx.x; e < EC_BM * EC_BK; e += 128) {
                const int r = e / EC_BK, c = e % EC_BK;
                const float x = As[r * EC_LDA + c];
                Ah[r * EC_LDH + c] = hi_part(x);
                Al[r * EC_LDH + c] = lo_part(x);
            }
            for (int e = threadIdx.x; e < EC_BK * EC_BN; e += 128) {
                const int r = e / EC_BN, c = e % EC_BN;
                const float x = Bs[r * EC_LDB + c];
                Bh[r * EC_LDHB + c] = hi_part(x);
                Bl[r * EC_LDHB + c] = lo_part(x);
            }
            __syncthreads();
        }
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> ah[2], al[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> bh[2], bl[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int r = wr + 16 * i, c = wc + 16 * i;
            if (EXT) {
                wx::load_matrix_with_op_sync(ah[i], As + r * EC_LDA, EC_LDA, [](float x) { return hi_part(x); });
                wx::load_matrix_with_op_sync(al[i], As + r * EC_LDA, EC_LDA, [](float x) { return lo_part(x); });
                wx::load_matrix_with_op_sync(bh[i], Bs + c, EC_LDB, [](float x) { return hi_part(x); });
                wx::load_matrix_with_op_sync(bl[i], Bs + c, EC_LDB, [](float x) { return lo_part(x); });
            } else {
                wmma::load_matrix_sync(ah[i], Ah + r * EC_LDH, EC_LDH);
                wmma::load_matrix_sync(al[i], Al + r * EC_LDH, EC_LDH);
                wmma::load_matrix_sync(bh[i], Bh + c, EC_LDHB);
                wmma::load_matrix_sync(bl[i], Bl + c, EC_LDHB);
            }
        }
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                wmma::mma_sync(acc[i][j], al[i], bh[j], acc[i][j]);
                wmma::mma_sync(acc[i][j], ah[i], bl[j], acc[i][j]);
                wmma::mma_sync(acc[i][j], ah[i], bh[j], acc[i][j]);
            }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(C + (long)(row0 + wr + 16 * i) * n + col0 + wc + 16 * j, acc[i][j], n,
                                    wmma::mem_row_major);
}

// -- fragment loads from shared memory, with and without the skew -------------------------------

template <int MODE>
__global__ void __launch_bounds__(32 * BENCH_WARPS) smem_load(const __half* __restrict__ src,
                                                               float* __restrict__ out, int iters) {
    __shared__ __align__(32) __half tile[BENCH_WARPS][2][16 * 16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = lane; i < 512; i += 32) tile[warp][i / 256][i % 256] = src[i];
    __syncwarp();
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
    wmma::load_matrix_sync(fb, tile[warp][0], 16);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int it = 0; it < iters; ++it) {
        const __half* t = tile[warp][it & 1];
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        if (MODE == 0) wx::load_matrix_with_op_sync<false>(fa, t, 16, [](__half x) { return x; });
        else if (MODE == 1) wx::load_matrix_with_op_sync<true>(fa, t, 16, [](__half x) { return x; });
        else wmma::load_matrix_sync(fa, t, 16);
        wmma::mma_sync(acc, fa, fb, acc);
        __syncwarp();
    }
    const long base = (long)(blockIdx.x * BENCH_WARPS + warp) * 256;
    wmma::store_matrix_sync(out + base, acc, 16, wmma::mem_row_major);
}

}  // namespace lab
}  // namespace gemmlab
