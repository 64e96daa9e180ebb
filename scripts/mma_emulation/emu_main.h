#include <random>
#include <cstdlib>
using namespace gemmlab;

template <class T> T from_f(float v);
template <> float from_f<float>(float v) { return v; }
template <> __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
inline float to_f(float v) { return v; }
inline float to_f(__half v) { return __half2float(v); }
inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
inline double tf32r(float v) { unsigned b; memcpy(&b, &v, 4); b = (b + 0x1000u) & ~0x1fffu; float f; memcpy(&f, &b, 4); return f; }

template <int DT, int ODT, int BM, int BN, int BK, int WM, int WN, int STAGES, bool VEC>
int run_case(int M, int N, int K, float alpha, float beta, unsigned seed) {
    using S = typename wmma_types::Storage<DT>::type;
    using O = typename wmma_types::Storage<ODT>::type;
    const int es = sizeof(S), eo = sizeof(O);
    int lda = K, ldb = N, ldc = N, off = 0, offo = 0;
    if (VEC) { lda = (K + 16 / es - 1) / (16 / es) * (16 / es); ldb = (N + 16 / es - 1) / (16 / es) * (16 / es);
               ldc = (N + 16 / eo - 1) / (16 / eo) * (16 / eo); }
    else { off = 1; offo = 1; }
    std::mt19937 rng(seed); std::uniform_real_distribution<float> U(-1, 1);
    std::vector<S> Ab(M * (size_t)lda + 64, from_f<S>(NAN)), Bb(K * (size_t)ldb + 64, from_f<S>(NAN));
    std::vector<O> Cb(M * (size_t)ldc + 64, from_f<O>(NAN));
    auto align16 = [](void* p) { return (unsigned char*)(((uintptr_t)p + 15) & ~uintptr_t(15)); };
    S* A = (S*)align16(Ab.data()) + off; S* B = (S*)align16(Bb.data()) + off; O* C = (O*)align16(Cb.data()) + offo;
    for (int i = 0; i < M; ++i) for (int k = 0; k < K; ++k) A[i * lda + k] = from_f<S>(U(rng));
    for (int k = 0; k < K; ++k) for (int j = 0; j < N; ++j) B[k * ldb + j] = from_f<S>(U(rng));
    std::vector<float> C0(M * (size_t)N);
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        float v = beta != 0 ? U(rng) : NAN;
        C[i * ldc + j] = from_f<O>(v); C0[i * N + j] = to_f(C[i * ldc + j]);
    }
    // guard elements after C rows (padding) must stay untouched
    const int THREADS = (BM / WM) * (BN / WN) * 32;
    const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    gridDim.x = tiles; gridDim.y = 1; blockDim.x = THREADS;
    const size_t smem_bytes = size_t(STAGES) * 2 * BK * (BM + BN);
    for (int bid = 0; bid < tiles; ++bid) {
        emu::Block blk;
        blk.smem.assign(smem_bytes, 0xFF);
        blk.bar = std::make_unique<std::barrier<>>(THREADS);
        blk.warps.resize(THREADS / 32);
        for (auto& w : blk.warps) w.bar = std::make_unique<std::barrier<>>(32);
        emu::blk = &blk;
        std::vector<std::thread> ts;
        for (int t = 0; t < THREADS; ++t)
            ts.emplace_back([=] {
                threadIdx.x = t; blockIdx.x = bid;
                mma_pipelined<DT, ODT, BM, BN, BK, WM, WN, STAGES, VEC, 'N', 'N'>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 0, 0, 0);
            });
        for (auto& t : ts) t.join();
    }
    double num = 0, den = 0; int bad = 0, nan = 0; int fi = -1, fj = -1; double fgot = 0, fref = 0;
    const double tol = ODT == 3 ? 1e-4 : (ODT == 0 ? 2e-3 : 1.6e-2);
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) {
            double a = to_f(A[i * lda + k]), b = to_f(B[k * ldb + j]);
            if (DT == 2) { a = tf32r(float(a)); b = tf32r(float(b)); }
            s += a * b;
        }
        double ref = alpha * s + (beta != 0 ? beta * (double)C0[i * N + j] : 0.0);
        double got = to_f(C[i * ldc + j]);
        if (std::isnan(got)) ++nan;
        num += (got - ref) * (got - ref); den += ref * ref;
        if (!(std::fabs(got - ref) <= tol * (1 + std::fabs(ref)) + 1e-3 * std::sqrt(double(K)))) {
            if (fi < 0) { fi = i; fj = j; fgot = got; fref = ref; }
            ++bad;
        }
    }
    // padding columns of C (beyond N) must be untouched
    int pad_touched = 0;
    for (int i = 0; i < M; ++i) for (int j = N; j < ldc; ++j) if (!std::isnan(to_f(C[i * ldc + j]))) ++pad_touched;
    if (pad_touched) { printf("PADDING OF C WRITTEN: %d elements\n", pad_touched); bad += pad_touched; }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    printf("DT=%d ODT=%d %dx%dx%d/%d/%d st%d VEC=%d  M=%d N=%d K=%d alpha=%g beta=%g: rel %.2e, bad %d, nan %d",
           DT, ODT, BM, BN, BK, WM, WN, STAGES, VEC, M, N, K, alpha, beta, rel, bad, nan);
    if (fi >= 0) printf("  first bad (%d,%d) got %g ref %g", fi, fj, fgot, fref);
    printf("\n");
    return bad || nan;
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    int fails = 0;
#include "cases.h"
    printf("%s\n", fails ? "FAILED" : "ALL OK");
    return fails != 0;
}
