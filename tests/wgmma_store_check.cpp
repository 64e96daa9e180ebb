// The wgmma rung's staged epilogue (gemmlab/tensor/04_wgmma_store.cuh, the header as the
// kernel includes it) run on the CPU by tests/test_wgmma_store.py: one warp, a std::thread
// per lane, __syncwarp a std::barrier, shared memory a plain buffer filled with 0xFF.  Each
// lane's accumulators are filled in wgmma's layout (hopper.cuh) from a known function;
// C (poisoned where beta == 0, holding values where beta != 0) must then hold, bit for bit,
// alpha * acc + bias (+ beta * C) rounded once to C's type on the warp's rows and the
// tile's columns inside M x N, and every other element as it was.  Also checks that
// StagedChunk's pitch makes the accumulator writes free of bank conflicts.  Prints the
// failures and exits 1 if there is one.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#undef __device__
#undef __host__
#undef __forceinline__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict

static std::barrier<>* warp_barrier = nullptr;
inline void __syncwarp() { warp_barrier->arrive_and_wait(); }

#include <gemmlab/tensor/04_wgmma_store.cuh>

using namespace gemmlab;

static int failures = 0, cases = 0;

template <class O>
static uint32_t bits(O v) {
    uint32_t b = 0;
    std::memcpy(&b, &v, sizeof(O));
    return b;
}

// The accumulator of row r, column c of the warp's 16 x TN block (before alpha).
static float acc_value(int r, int c) { return float((r * 131 + c * 71) % 997) / 331.0f - 1.5f + 1e-3f * float(c % 7); }

template <int TN, class O>
static void run_case(int rows_in, int cols_in, int ld_extra, int offset, float alpha, float beta, int bias_kind,
                     int bias_stride, unsigned seed) {
    ++cases;
    const int m0 = 48, n_tile = TN;                // the warp's first row, the tile's first column
    const int M = m0 + rows_in, N = n_tile + cols_in;
    const int ldc = N + ld_extra;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> U(-2.0f, 2.0f);
    std::vector<O> store(size_t(M + 1) * ldc + 16);
    O* C = store.data() + offset;
    for (auto& v : store) v = from_float<O>(beta != 0.0f ? U(rng) : NAN);
    const std::vector<O> before = store;
    std::vector<O> bias(size_t(std::max(M, N)) * bias_stride + 1);
    for (auto& v : bias) v = from_float<O>(U(rng));
    const long long bias_rs = bias_kind == WGMMA_BIAS_COLUMN ? bias_stride : 0;
    const long long bias_cs = bias_kind == WGMMA_BIAS_ROW ? bias_stride : 0;
    // As the kernel decides: pairs need an even ldc and C on a 2-element boundary.
    const bool pairs = ldc % 2 == 0 && reinterpret_cast<uintptr_t>(C) % (2 * sizeof(O)) == 0;
    alignas(1024) static unsigned char buf[4096];
    std::memset(buf, 0xFF, sizeof(buf));

    std::barrier<> bar(32);
    warp_barrier = &bar;
    std::vector<std::thread> lanes;
    for (int lane = 0; lane < 32; ++lane) {
        lanes.emplace_back([&, lane] {
            float acc[TN / 2];
            const int g = lane / 4, tq = lane % 4;
            for (int j = 0; j < TN / 8; ++j)
                for (int h = 0; h < 2; ++h)
                    for (int e = 0; e < 2; ++e) acc[4 * j + 2 * h + e] = acc_value(g + 8 * h, 8 * j + 2 * tq + e);
            wgmma_store_staged<TN>(acc, buf, C, ldc, M, N, m0, n_tile, alpha, beta, pairs, bias_kind,
                                   bias_kind == WGMMA_BIAS_NONE ? nullptr : bias.data(), bias_rs, bias_cs, lane);
        });
    }
    for (auto& t : lanes) t.join();

    std::vector<O> want = before;
    for (int r = 0; r < 16 && m0 + r < M; ++r) {
        for (int c = 0; c < TN && n_tile + c < N; ++c) {
            const int m = m0 + r, n = n_tile + c;
            float v = alpha * acc_value(r, c);
            if (bias_kind == WGMMA_BIAS_ROW) v += to_float(bias[n * bias_cs]);
            if (bias_kind == WGMMA_BIAS_COLUMN) v += to_float(bias[m * bias_rs]);
            O& w = want[offset + size_t(m) * ldc + n];
            w = from_float<O>(beta != 0.0f ? v + beta * to_float(w) : v);
        }
    }
    int bad = 0;
    for (size_t i = 0; i < store.size(); ++i) {
        if (bits(store[i]) != bits(want[i]) && bad++ < 3) {
            const long long k = (long long)i - offset;
            std::printf("FAIL %s TN=%d rows=%d cols=%d ldc=%d offset=%d alpha=%g beta=%g bias=%d/%d pairs=%d: "
                        "C[%lld][%lld] = %g (bits %x), want %g (bits %x)\n",
                        sizeof(O) == 4 ? "float" : (std::is_same_v<O, __half> ? "half" : "bfloat16"), TN, rows_in,
                        cols_in, ldc, offset, alpha, beta, bias_kind, bias_stride, int(pairs), k / ldc, k % ldc,
                        to_float(store[i]), bits(store[i]), to_float(want[i]), bits(want[i]));
        }
    }
    failures += bad != 0;
}

template <int TN, class O>
static void run_all() {
    unsigned seed = 1;
    for (int rows_in : {16, 5})
        for (int cols_in : {TN + 9, TN, TN - 27, 33, 1})
            for (int ld_extra : {0, 1, 3})
                for (int offset : {0, 1})
                    for (float beta : {0.0f, 0.5f})
                        for (int bias_kind : {WGMMA_BIAS_NONE, WGMMA_BIAS_ROW, WGMMA_BIAS_COLUMN})
                            run_case<TN, O>(rows_in, cols_in, ld_extra, offset, bias_kind ? 1.25f : -0.75f, beta,
                                            bias_kind, bias_kind == WGMMA_BIAS_ROW ? 3 : 1, seed++);
}

// The accumulator writes of one chunk: for every (jj, h), the 32 lanes' addresses (row
// g + 8h, column 8jj + 2 tq, rows PITCH bytes apart) in the phases the hardware serves
// together (32 lanes for 4-byte accesses, 16 for 8-byte ones) touch each bank once.
template <class T>
static void check_banks() {
    using K = StagedChunk<T>;
    const int width = 2 * int(sizeof(T)), phase = width <= 4 ? 32 : 16;
    for (int jj = 0; jj < K::COLS / 8; ++jj)
        for (int h = 0; h < 2; ++h)
            for (int first = 0; first < 32; first += phase) {
                ++cases;
                std::set<int> banks;
                for (int lane = first; lane < first + phase; ++lane) {
                    const int at = (lane / 4 + 8 * h) * K::PITCH + (8 * jj + 2 * (lane % 4)) * int(sizeof(T));
                    for (int b = 0; b < width; b += 4) banks.insert((at + b) / 4 % 32);
                }
                if (int(banks.size()) != phase * width / 4) {
                    std::printf("FAIL bank conflict: %d-byte staging, pitch %d, jj=%d h=%d\n", int(sizeof(T)),
                                K::PITCH, jj, h);
                    ++failures;
                }
            }
}

int main() {
    check_banks<__half>();
    check_banks<float>();
    run_all<64, __nv_bfloat16>();
    run_all<128, __nv_bfloat16>();
    run_all<192, __half>();
    run_all<256, __half>();
    run_all<64, float>();
    run_all<128, float>();
    run_all<192, __nv_bfloat16>();
    run_all<256, float>();
    std::printf("%d cases, %d failed\n", cases, failures);
    return failures != 0;
}
