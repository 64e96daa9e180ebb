// Golden kernels for tests/test_sass_facts.py: each runs a known number of the
// instructions `gemmlab inspect` counts (the comments say which), the same number
// on every target from sm_75 to sm_120.  Compiled only, never launched.

extern "C" __global__ void memory_ops(const float* __restrict__ a, float* b, float4* c,
                                      const float4* __restrict__ d) {
    __shared__ float s[256];
    __shared__ float4 s4[64];
    int i = threadIdx.x;
    float x = a[i];                 // LDG.32 (read-only path)
    float y = b[i + 1];             // LDG.32
    float4 v = d[i];                // LDG.128
    s[i] = x;                       // STS
    s4[i & 63] = v;                 // STS (128-bit)
    __syncthreads();                // BAR
    float z = s[(i + 1) & 255];     // LDS.32
    float4 w = s4[(i + 3) & 63];    // LDS.128
    c[i] = make_float4(z + w.x, y + w.y, w.z, w.w);   // STG.128
}

extern "C" __global__ void fma_chain(const float* __restrict__ a, float* out) {
    int i = threadIdx.x;
    float x = a[i], y = a[i + 32], acc = a[i + 64];
#pragma unroll
    for (int k = 0; k < 16; ++k) acc = fmaf(acc, x, y);   // 16 dependent FFMA
    out[i] = acc;
}

extern "C" __global__ void tensor_ops(const unsigned* __restrict__ a, float* out) {
    __shared__ uint4 tile[32];      // four 8x8 tiles of 16-bit elements
    int i = threadIdx.x;
    tile[i] = make_uint4(a[i], a[i + 32], a[i + 64], a[i + 96]);   // STS (128-bit); 4 LDG.32
    __syncthreads();                                                // BAR
    // Lane i gives row i % 8 of tile i / 8 (16 bytes: one row of 8 elements).
    unsigned addr = (unsigned)__cvta_generic_to_shared(&tile[i]);
    unsigned r0, r1, r2, r3, t0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));                 // LDSM
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(t0) : "r"(addr));   // LDSM.T
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(r0), "r"(r1), "r"(t0));  // HMMA
    out[i] = d0 + d1 + d2 + d3 + __uint_as_float(r2 ^ r3);
}

#if __CUDA_ARCH__ >= 800
extern "C" __global__ void async_copy(const float4* __restrict__ a, float* out) {
    __shared__ float4 s[32];
    int i = threadIdx.x;
    unsigned dst = (unsigned)__cvta_generic_to_shared(&s[i]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(a + i));    // LDGSTS
    asm volatile("cp.async.wait_all;");
    __syncthreads();
    out[i] = s[(i + 1) & 31].x;
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wgmma (sm_90a only): one warpgroup MMA from shared-memory descriptors.
extern "C" __global__ void warpgroup_mma(unsigned long long desc_a, unsigned long long desc_b, float* out) {
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("wgmma.fence.sync.aligned;");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, %4, %5, 0, 1, 1, 0, 0;"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(desc_a), "l"(desc_b));             // HGMMA
    asm volatile("wgmma.commit_group.sync.aligned;");
    asm volatile("wgmma.wait_group.sync.aligned 0;" : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3));
    out[threadIdx.x] = d0 + d1 + d2 + d3;                                                          // STG.32
}
#endif
