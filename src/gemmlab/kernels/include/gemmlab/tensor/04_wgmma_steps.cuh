// gemmlab/tensor/04_wgmma_steps.cuh: what the three steps toward tensor rung 4 share
// (tensor/04a_wgmma_tma.cu, 04b_wgmma_specialized.cu, 04c_wgmma_persistent.cu): the
// shared-memory ring and one K-step's copies and wgmmas.  Their epilogue stores a consumer
// warpgroup's accumulators to C straight from the registers (04_wgmma.cuh's
// store_accumulators), which the rung's own kernel (04_wgmma.cu) replaces by TMA stores.
// The copies, descriptors and the release of a stage are tensor/04_wgmma.cuh's; the
// instructions are hopper.cuh's.
#pragma once

#include <gemmlab/tensor/04_wgmma.cuh>
#include <gemmlab/tile_order.cuh>

namespace gemmlab {

constexpr int WGMMA_STEP_PRODUCER_REGS = 40;    // setmaxnreg (steps b, c): the producer warpgroup
constexpr int WGMMA_STEP_CONSUMER_REGS = 232;   // setmaxnreg: each consumer warpgroup

// The ring in dynamic shared memory, aligned to 1024 bytes (the swizzle atom): STAGES tiles
// of A (BM rows of M x 128 bytes of K, either major-ness), STAGES tiles of B (BN rows of N),
// then per stage a `full` barrier (the copies have landed) and an `empty` one (every
// consumer warp is done with it).
template <int BM, int BN, int STAGES>
struct StepRing {
    static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
    unsigned char* a;
    unsigned char* b;
    hopper::u64* full;
    hopper::u64* empty;

    __device__ __forceinline__ explicit StepRing(unsigned char* raw) {
        unsigned char* base = raw + ((1024 - (hopper::smem_u32(raw) & 1023)) & 1023);
        a = base;
        b = base + STAGES * A_BYTES;
        full = reinterpret_cast<hopper::u64*>(b + STAGES * B_BYTES);
        empty = full + STAGES;
    }
    // One thread: `full` waits for one arrival (the copies' issuer) and their bytes; `empty`
    // for one arrival from each of `warps` warps.
    __device__ __forceinline__ void init(int warps) const {
        for (int s = 0; s < STAGES; ++s) {
            hopper::mbar_init(&full[s], 1);
            hopper::mbar_init(&empty[s], warps);
        }
        hopper::mbar_fence_init();
    }
};

// One thread copies K-step k0 (in elements) of the block's tiles into stage s: A's BM rows
// from m0, B's BN rows (columns of C) from n0, each as stored (load_operand_tile), and
// announces their bytes on full[s].  In a cluster of CLUSTER blocks, this block copies its
// share of B's boxes and multicasts them; the others copy the rest into this block.
template <bool A_KMAJOR, bool B_KMAJOR, int CLUSTER, int BM, int BN, int STAGES>
__device__ __forceinline__ void load_k_step(const StepRing<BM, BN, STAGES>& ring, int s,
                                            const hopper::TensorMap* map_a, const hopper::TensorMap* map_b, int m0,
                                            int n0, int k0, hopper::u32 rank) {
    using R = StepRing<BM, BN, STAGES>;
    hopper::mbar_arrive_expect_tx(&ring.full[s], R::A_BYTES + R::B_BYTES);
    load_operand_tile<A_KMAJOR, BM, A_KMAJOR ? BM : 64, 1>(ring.a + s * R::A_BYTES, map_a, m0, k0, 0, &ring.full[s], 0);
    load_operand_tile<B_KMAJOR, BN, B_KMAJOR ? BN / CLUSTER : 64, CLUSTER>(ring.b + s * R::B_BYTES, map_b, n0, k0, 0,
                                                                           &ring.full[s], rank);
}

// One K-step of a consumer warpgroup, issued and committed as one group of wgmmas: its 64
// rows of the stage's A tile (`a`) times the B tile (`b`), 4 wgmmas of K = 16, an MN-major
// operand read through the instruction's transpose bit.
template <int BN, int DT, bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void wgmma_k_step(float (&acc)[BN / 2], const unsigned char* a, const unsigned char* b) {
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        hopper::Wgmma<BN, DT>::template mma<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(
            acc, operand_desc<A_KMAJOR>(a, kk), operand_desc<B_KMAJOR>(b, kk), 1);
    hopper::wgmma_commit();
}

}  // namespace gemmlab
