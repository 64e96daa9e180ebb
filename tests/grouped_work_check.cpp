// The grouped rung's work list (gemmlab/tensor/06_grouped.cuh, the header as the kernel
// includes it) on the CPU, run by tests/test_grouped_rules.py.  Each line of stdin is a launch:
// T N BM BN grid G offs[0] .. offs[G-1].
//
// item_end is summed as the kernel's scan sums it (group_items per group, in order); every
// block of the persistent grid walks its items t = block, block + grid, ... through
// grouped_item, passing its last group on as the kernel does.  Checked: the items are exactly
// the tiles (group, tile-row, tile-column) of the groups' rows as group_rows clamps them, each
// once; every tile starts inside its group and inside A's T rows; an empty group has no item;
// a block's groups only go forward.  Prints the failures and exits 1 if there is one.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#define __device__
#define __forceinline__ inline
using std::max;
using std::min;

// What 04_wgmma_work.cuh's split-K fixup (included with grouped_tile) names; never called here.
struct float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline void __stcg(float4* p, float4 v) { *p = v; }
inline float4 __ldcg(const float4* p) { return *p; }
inline void __threadfence() {}
inline void __nanosleep(unsigned) {}
inline void splitk_bar(int) {}
inline unsigned splitk_load_acquire(const unsigned* p) { return *p; }
inline void splitk_add_release(unsigned* p) { ++*p; }
inline void splitk_store_relaxed(unsigned* p, unsigned v) { *p = v; }

#include <gemmlab/tensor/06_grouped.cuh>

using namespace gemmlab;

static int failures = 0;
#define CHECK(cond, ...)                                 \
    do {                                                 \
        if (!(cond)) {                                   \
            ++failures;                                  \
            std::printf("case %d: ", case_no);           \
            std::printf(__VA_ARGS__);                    \
            std::printf("\n");                           \
        }                                                \
    } while (0)

int main() {
    std::string line;
    int case_no = 0;
    while (std::getline(std::cin, line)) {
        if (line.empty()) continue;
        ++case_no;
        std::istringstream in(line);
        int T, N, bm, bn, grid, G;
        in >> T >> N >> bm >> bn >> grid >> G;
        std::vector<int> offs(G);
        for (int& o : offs) in >> o;
        const int tiles_n = (N + bn - 1) / bn;
        std::vector<int> item_end(G);
        int carry = 0;
        for (int g = 0; g < G; ++g) {
            int s, e;
            group_rows(offs.data(), g, T, s, e);
            carry += group_items(e - s, bm, tiles_n);
            item_end[g] = carry;
        }
        const int work = G > 0 ? item_end[G - 1] : 0;
        std::set<std::tuple<int, int, int>> want, seen;
        for (int g = 0; g < G; ++g) {
            int s, e;
            group_rows(offs.data(), g, T, s, e);
            CHECK(0 <= s && s <= e && e <= T, "group %d rows [%d, %d) outside [0, %d]", g, s, e, T);
            for (int tm = 0; tm * bm < e - s; ++tm)
                for (int tn = 0; tn < tiles_n; ++tn) want.insert({g, tm, tn});
        }
        CHECK(int(want.size()) == work, "%d items for %zu tiles", work, want.size());
        for (int b = 0; b < grid; ++b) {
            int g_last = 0;
            for (int t = b; t < work; t += grid) {
                const GroupedItem w = grouped_item(t, item_end.data(), G, offs.data(), T, bm, tiles_n, g_last);
                CHECK(w.g >= g_last, "block %d went back from group %d to %d", b, g_last, w.g);
                g_last = w.g;
                CHECK(w.rows > 0, "item %d in empty group %d", t, w.g);
                CHECK(w.tm * bm < w.rows && w.start + w.tm * bm < T, "item %d: tile-row %d outside group %d", t,
                      w.tm, w.g);
                CHECK(0 <= w.tn && w.tn < tiles_n, "item %d: tile-column %d", t, w.tn);
                CHECK(seen.insert({w.g, w.tm, w.tn}).second, "item %d: tile (%d, %d, %d) twice", t, w.g, w.tm,
                      w.tn);
            }
        }
        CHECK(seen == want, "%zu tiles walked of %zu", seen.size(), want.size());
    }
    if (failures) std::printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
