// gemmlab/pack_rows.cuh: the body of the staging copies (wgmma's pack16, rung 8's pack32),
// not a rung.  A matrix whose rows start off the 16-byte grid (a vocabulary of odd size)
// allows only element-sized loads; its copy, dst (rows x cols, rows ldd elements apart, ldd
// a multiple of 16 bytes) = src bit for bit, lets the GEMM read it 16 bytes at a time.
// Each thread loads a group of 16 bytes' worth of elements and stores it with one 16-byte
// store, the group's tail past cols as zeros (a row's padding: never read as data, and zeros
// where a kernel's 16-byte loads along K read it).  Threads walk the groups of the whole
// matrix row after row, so that short rows (attention's P, 197 elements) keep every thread busy.
// One launch copies both operands where both need it (pack_rows_copies).
#pragma once

namespace gemmlab {

constexpr int PACK_ROWS_THREADS = 256;   // threads per block of every staging copy

template <class T>
__device__ __forceinline__ void pack_rows(int rows, int cols, const T* __restrict__ src, int ld,
                                          T* __restrict__ dst, int ldd) {
    constexpr int THREADS = PACK_ROWS_THREADS;
    constexpr int GROUP = 16 / int(sizeof(T));   // elements a thread stores at once
    const int groups = (cols + GROUP - 1) / GROUP;   // of a row
    const long long total = (long long)rows * groups;
    for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < total; i += (long long)gridDim.x * THREADS) {
        const int r = int(i / groups), c0 = int(i % groups) * GROUP;
        const T* s = src + (long long)r * ld + c0;
        union {
            T v[GROUP];
            uint4 all;
        } group;
#pragma unroll
        for (int j = 0; j < GROUP; ++j) group.v[j] = c0 + j < cols ? s[j] : T(0);
        *reinterpret_cast<uint4*>(dst + (long long)r * ldd + c0) = group.all;
    }
}

// Both operands of a product copied in one launch (a launch fewer: its host time is felt in a
// small product's): blockIdx.y picks the copy (gridDim.y = 1 or 2), blockIdx.z its matrix;
// copy i has n_i matrices, src_stride_i / dst_stride_i elements apart.
template <class T>
__device__ __forceinline__ void pack_rows_copies(int rows0, int cols0, const T* __restrict__ src0, int ld0,
                                                 T* __restrict__ dst0, int ldd0, long long src_stride0,
                                                 long long dst_stride0, int n0, int rows1, int cols1,
                                                 const T* __restrict__ src1, int ld1, T* __restrict__ dst1,
                                                 int ldd1, long long src_stride1, long long dst_stride1, int n1) {
    const long long z = blockIdx.z;
    if (blockIdx.y == 0) {
        if (z < n0) pack_rows(rows0, cols0, src0 + z * src_stride0, ld0, dst0 + z * dst_stride0, ldd0);
    } else if (z < n1) {
        pack_rows(rows1, cols1, src1 + z * src_stride1, ld1, dst1 + z * dst_stride1, ldd1);
    }
}

}  // namespace gemmlab
