// The wgmma rung's work items and split-K's fixup (gemmlab/tensor/04_wgmma_work.cuh, the
// header as the kernel includes it) on the CPU, run by tests/test_wgmma_work.py.  Each case
// is a launch: tiles of clusters per matrix, matrices, slices, K-steps, blocks per cluster,
// consumer warpgroups, the persistent grid's blocks, the rows of C (whether a consumer's
// rows reach into C), and the tiles the host sized the workspaces for.
//
// The schedule: every block walks its work items as the kernel does; SplitK says what each
// (item, consumer) writes, waits for and reads.  Checked: each region of the partials is
// written once and read once, by a later item (the deadlock rule: waits only on lower
// indices); the writers are the slices before the last that k_slice gives K-steps; each
// counter is counted up exactly as far as its owner waits; every index lies inside the
// workspaces the host sized; and with every block resident the walk finishes (no block
// waits forever).
//
// Then the protocol itself, where the case is small: a std::thread per GPU thread (128 per
// consumer warpgroup), std::atomic_ref for the counter, a std::barrier per warpgroup for its
// named barrier; each owner's sum must equal the sum of its tile's slices, every counter
// must be zero after the launch, and a second launch on the same counters must be right too.
// Prints the failures and exits 1 if there is one.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#define __device__
#define __forceinline__ inline
using std::min;

struct float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline void __stcg(float4* p, float4 v) { *p = v; }
inline float4 __ldcg(const float4* p) { return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) { std::this_thread::yield(); }

// The warpgroup a simulated thread belongs to: its named barrier.
static thread_local std::barrier<>* warpgroup_barrier = nullptr;
inline void splitk_bar(int) { warpgroup_barrier->arrive_and_wait(); }
inline unsigned splitk_load_acquire(const unsigned* p) {
    return std::atomic_ref<unsigned>(*const_cast<unsigned*>(p)).load(std::memory_order_acquire);
}
inline void splitk_add_release(unsigned* p) { std::atomic_ref<unsigned>(*p).fetch_add(1, std::memory_order_release); }
inline void splitk_store_relaxed(unsigned* p, unsigned v) {
    std::atomic_ref<unsigned>(*p).store(v, std::memory_order_relaxed);
}

#include <gemmlab/tensor/04_wgmma_work.cuh>

using namespace gemmlab;

static int failures = 0;

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            if (++failures <= 20) {                       \
                std::printf("FAIL %s: ", what);           \
                std::printf(__VA_ARGS__);                 \
                std::printf("\n");                        \
            }                                             \
        }                                                 \
    } while (0)

struct Case {
    int tiles_mc, tiles_n, batch, slices, k_steps, cluster, consumers, grid, M, host_tiles;
};

// The kernel's walk: what block b (of the grid) does at each of its items.
struct Item {
    int t, z, zs, s, tm, tn, ks0, ks1;
};

static std::vector<Item> items_of(const Case& k, int block) {
    const int cluster_tiles = k.tiles_mc * k.tiles_n, work = cluster_tiles * k.batch * k.slices;
    const int first = block / k.cluster, step = k.grid / k.cluster, rank = block % k.cluster;
    const int per_slice = (k.k_steps + k.slices - 1) / k.slices;
    std::vector<Item> out;
    for (int t = first; t < work; t += step) {
        int tmc, tn;
        const int zs = batch_tile(t, k.tiles_mc, k.tiles_n, tmc, tn);
        const KSlice it = k_slice(zs, k.slices, per_slice, k.k_steps);
        out.push_back({t, it.z, zs, zs - it.z * k.slices, tmc * k.cluster + rank, tn, it.ks0, it.ks1});
    }
    return out;
}

// The kernel's SplitK for block b (16-bit: a consumer's rows are 64 of the tile's 64 * consumers).
static SplitK split_of(const Case& k, int block, float* partials, unsigned* counters) {
    const int per_slice = (k.k_steps + k.slices - 1) / k.slices;
    return {partials,  counters, k.slices, splitk_writers(k.slices, per_slice, k.k_steps), k.consumers,
            k.tiles_mc * k.tiles_n, k.cluster, block % k.cluster};
}

static bool inside(const Case& k, const Item& it, int c) { return it.tm * (64 * k.consumers) + 64 * c < k.M; }

static void schedule(const Case& k, const char* what) {
    std::map<long long, std::vector<int>> written, read;   // region -> item indices
    std::map<long long, int> writer_cluster;               // region -> the cluster that writes it
    std::map<long long, int> counted, waited;              // counter -> increments, an owner's wait
    std::map<long long, int> owners;                       // counter -> owners
    std::map<int, std::vector<long long>> waits_of;        // item -> the regions its owners wait for
    const long long regions = (long long)k.host_tiles * (k.slices - 1) * k.consumers;
    const long long counters = (long long)k.host_tiles * k.consumers;
    for (int b = 0; b < k.grid; ++b) {
        const SplitK sk = split_of(k, b, nullptr, nullptr);
        for (const Item& it : items_of(k, b)) {
            const long long tile = sk.tile(it.t, it.zs, it.z);
            CHECK(tile >= 0 && tile < k.host_tiles, "item %d: tile %lld of %d", it.t, tile, k.host_tiles);
            for (int c = 0; c < k.consumers; ++c) {
                const long long cnt = sk.counter(tile, c);
                CHECK(cnt >= 0 && cnt < counters, "counter %lld of %lld", cnt, counters);
                if (!inside(k, it, c)) continue;
                CHECK(sk.owns(it.s) == (it.s == k.slices - 1), "item %d: slice %d of %d owns", it.t, it.s, k.slices);
                if (!sk.owns(it.s)) {
                    // A writer exactly where k_slice gives the slice K-steps.
                    CHECK(sk.writes(it.s) == (it.ks1 > it.ks0), "item %d slice %d: writers %d, K-steps [%d, %d)",
                          it.t, it.s, sk.writers, it.ks0, it.ks1);
                    if (sk.writes(it.s)) {
                        const long long r = sk.region(tile, it.s, c);
                        CHECK(r >= 0 && r < regions, "region %lld of %lld", r, regions);
                        written[r].push_back(it.t);
                        writer_cluster[r] = b / k.cluster;
                        ++counted[cnt];
                    }
                } else {
                    ++owners[cnt];
                    waited[cnt] = sk.writers;
                    for (int s = 0; s < sk.writers; ++s) {
                        const long long r = sk.region(tile, s, c);
                        CHECK(sk.region(tile, 0, c) + (long long)s * k.consumers == r, "slice stride");
                        read[r].push_back(it.t);
                        waits_of[it.t].push_back(r);
                    }
                }
            }
        }
    }
    for (auto& [r, ts] : written) {
        CHECK(ts.size() == 1, "region %lld written %zu times", r, ts.size());
        CHECK(read.count(r) && read[r].size() == 1, "region %lld written, read %zu times", r,
              read.count(r) ? read[r].size() : 0);
        if (read.count(r) && !read[r].empty()) CHECK(ts[0] < read[r][0], "item %d waits on item %d", read[r][0], ts[0]);
    }
    for (auto& [r, ts] : read) CHECK(written.count(r), "region %lld read, never written", r);
    for (auto& [cnt, n] : owners) CHECK(n == 1, "counter %lld has %d owners", cnt, n);
    for (auto& [cnt, n] : counted) CHECK(waited.count(cnt) && waited[cnt] == n, "counter %lld: %d counted in", cnt, n);
    for (auto& [cnt, n] : waited) CHECK(n == (counted.count(cnt) ? counted[cnt] : 0), "counter %lld waits for %d", cnt, n);

    // Every cluster resident, at its next item (its blocks share B's tiles through the ring, so
    // they go on together); an item finishes once every region an owner of it waits for was
    // written (the writing cluster finished that item).  The walk must end.
    const int clusters = k.grid / k.cluster;
    std::vector<std::vector<Item>> walk(clusters);
    std::vector<size_t> at(clusters, 0);
    std::map<std::pair<int, int>, bool> done;   // (cluster, item) finished
    for (int q = 0; q < clusters; ++q) walk[q] = items_of(k, q * k.cluster);
    for (bool moved = true; moved;) {
        moved = false;
        for (int q = 0; q < clusters; ++q) {
            if (at[q] == walk[q].size()) continue;
            const int t = walk[q][at[q]].t;
            bool ready = true;
            for (long long r : waits_of[t]) ready = ready && written.count(r) && done[{writer_cluster[r], written[r][0]}];
            if (ready) {
                done[{q, t}] = true;
                ++at[q];
                moved = true;
            }
        }
    }
    for (int q = 0; q < clusters; ++q)
        CHECK(at[q] == walk[q].size(), "cluster %d stuck at item %d", q, at[q] < walk[q].size() ? walk[q][at[q]].t : -1);
}

// The protocol on threads: NACC accumulators a thread, each thread's value of slice s a small
// integer (exact sums in any order).
constexpr int NACC = 32;

static float value(int z, long long tile, int s, int c, int t128, int i) {
    return float(int((z * 7 + tile * 3 + s * 5 + c * 11 + t128 * 13 + i) % 17) - 8);
}

static void protocol(const Case& k, const char* what) {
    const long long tiles = k.host_tiles;
    std::vector<float> partials(size_t(tiles) * (k.slices - 1) * k.consumers * 128 * NACC, -1e30f);
    std::vector<unsigned> counters(size_t(tiles) * k.consumers, 0u);
    std::atomic<int> wrong{0};
    for (int launch = 0; launch < 2; ++launch) {
        std::vector<std::unique_ptr<std::barrier<>>> bars;
        for (int i = 0; i < k.grid * k.consumers; ++i) bars.push_back(std::make_unique<std::barrier<>>(128));
        std::vector<std::thread> threads;
        for (int b = 0; b < k.grid; ++b)
            for (int c = 0; c < k.consumers; ++c)
                for (int t128 = 0; t128 < 128; ++t128)
                    threads.emplace_back([&, b, c, t128] {
                        warpgroup_barrier = bars[b * k.consumers + c].get();
                        const SplitK sk = split_of(k, b, partials.data(), counters.data());
                        for (const Item& it : items_of(k, b)) {
                            const long long tile = sk.tile(it.t, it.zs, it.z);
                            float acc[NACC];
                            for (int i = 0; i < NACC; ++i)
                                acc[i] = it.ks1 > it.ks0 ? value(it.z, tile, it.s, c, t128, i) : 0.0f;
                            const bool in = inside(k, it, c);
                            if (!sk.fixup(acc, it.t, it.zs, it.z, c, in, 0, t128)) continue;
                            for (int i = 0; i < NACC; ++i) {
                                float want = it.ks1 > it.ks0 ? value(it.z, tile, it.s, c, t128, i) : 0.0f;
                                for (int s = 0; in && s < sk.writers; ++s) want += value(it.z, tile, s, c, t128, i);
                                if (acc[i] != want) ++wrong;
                            }
                        }
                    });
        for (auto& th : threads) th.join();
        CHECK(wrong == 0, "launch %d: %d owner sums wrong", launch, wrong.load());
        CHECK(std::all_of(counters.begin(), counters.end(), [](unsigned v) { return v == 0; }),
              "launch %d left a counter non-zero", launch);
    }
}

int main(int argc, char** argv) {
    // argv: cases of 10 integers each (Case's fields), then "threads" cases after a "--".
    int cases = 0, threaded = 0;
    bool threads = false;
    for (int i = 1; i < argc;) {
        if (std::string(argv[i]) == "--") {
            threads = true;
            ++i;
            continue;
        }
        if (i + 10 > argc) {
            std::printf("a case needs 10 integers\n");
            return 2;
        }
        int v[10];
        for (int j = 0; j < 10; ++j) v[j] = std::atoi(argv[i + j]);
        i += 10;
        const Case k{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]};
        char what[200];
        std::snprintf(what, sizeof what, "%dx%d tiles x%d, %d slices of %d steps, cluster %d, %d consumers, grid %d, M %d",
                      k.tiles_mc, k.tiles_n, k.batch, k.slices, k.k_steps, k.cluster, k.consumers, k.grid, k.M);
        schedule(k, what);
        ++cases;
        if (threads) {
            std::printf("on threads: %s\n", what);   // (a deadlock stops here: the caller's timeout)
            std::fflush(stdout);
            protocol(k, what);
            ++threaded;
        }
        std::fflush(stdout);
    }
    std::printf("%d cases, %d on threads, %d failed\n", cases, threaded, failures);
    return failures ? 1 : 0;
}
