"""Rung 8's cost model: the predicted time of one FP32 product on the CUDA cores with a
block tile and a split of K, so that kernel="auto" can weigh tile size against the
GPU's SMs where no tuned shape is near (gemmlab.core.choose) or no table exists.

kernels/cost.py's model of the tensor rungs, with what rung 8 adds:

  * work items: the tiles of every matrix of the batch times the split of K, each a
    whole padded tile over its slice of K rounded up to BK (a tile hanging past the
    matrix costs as much as a full one);
  * the busiest SM runs ceil(items / SMs) of them at the tile's share of the SM's
    FP32 peak (128 FMA a clock) -- its blocks side by side or one after the other,
    the same work -- but a block of 4 warps alone on an SM runs slower
    (LONE_BLOCK): 4 warps hide less latency than the 8 the peak was measured with;
  * A or B off the 16-byte grid run the variant with 4-byte copies: slower math
    (UNALIGNED) where an operand is copied as stored (a column-major A, a row-major B),
    little slower (UNALIGNED_TRANSPOSED) where both are transposed on the way (NT), which
    takes 4-byte copies anyway; a C off the grid is stored without 16-byte stores, an
    epilogue that costs each item in proportion to its tile (UNALIGNED_ITEM_S) and writes
    C at a fraction of the bandwidth;
  * (a staging copy of A and B to the 16-byte grid is costed beside this model, by
    pipelined.staging_choice);
  * a column-major B (NT, TT) is transposed on its way into shared memory (B_T), or the
    layout's own share where the tile was measured in each layout (LAYOUT_SHARE);
  * DRAM: A, B and C at least once, overlapped with the math; a split's partial sums
    written, then read back by the reduction, which runs after the GEMM;
  * a launch, and for a split the reduction's launch and host work.

Constants: an H200's (132 SMs, 1980 MHz, 3.6 TB/s reachable); the efficiencies and
costs below were fitted by least squares in log time to the 566 timed `pipelined`
records of benchmarks/results/nvidia-h200/shapes-2026-11-29.json and
shapes-fp32_tc-2026-11-29.json (public calls, host time taken out as a constant)
and the fastest variant of each tile and split in tune-run32.json (168 kernel-only
timings at ten shapes, NN); 64 x 64 and 256 x 128 appear in tune-run32.json only.
The 128 x 128 tile (now 16 deep) and the layout shares were set from kernel times of
208 products of the shapes suite on an H200 (2026-12-01): 128 x 128 at its ratio to
128 x 256 in NN.  What the model decides is checked on the GPU by
scripts/ab_fp32_choice.py (benchmarks/NOTES.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cost import Estimate, Machine, tile_use
from ..spec import cdiv

SM_FLOPS = 2 * 128 * 1.98e9  # FP32 FLOP/s of one SM: 128 FMA a clock at 1980 MHz (H200)
DRAM_BW = Machine.dram_bw  # bytes/s, and a launch's fixed cost: the tensor rungs' model's
LAUNCH_S = Machine.launch_s
SPLIT_S = 5.4e-6  # a split's reduction: one more launch and its host work (fitted)

# Each tile's share of the SM's FP32 peak with every SM busy, operands aligned, B row-major
# (fitted: see the module's text), and the blocks an SM holds by the registers of the
# aligned NN variant (sm_90a, NVRTC 13.0: 215-223 for 128 x 256 and 147 for 128 x 128 at 256
# threads; 181 for 128 x 64, 155 for 64 x 128 and 107 for 64 x 64 at 128 threads).
EFFICIENCY = {(128, 256): 0.70, (256, 128): 0.57, (128, 128): 0.65, (128, 64): 0.56, (64, 128): 0.61, (64, 64): 0.51}
BLOCKS_PER_SM = {(128, 256): 1, (256, 128): 1, (128, 128): 1, (128, 64): 2, (64, 128): 3, (64, 64): 4}
B_T = 0.86  # a column-major B (NT, TT): its tile transposed into shared memory
# Each layout's share of a tile's (NN) efficiency: B_T for a column-major B, except where a tile
# was measured per layout at the layout's warp tiling (pipelined.LAYOUT_TILING; kernel time, an
# H200's products of the shapes suite from 10 GFLOP, 2026-12-01, benchmarks/NOTES.md), for
# operands read 16 bytes at a time.
B_T_SHARE = {"NT": B_T, "TT": B_T}
LAYOUT_SHARE = {(128, 256): {"NT": 0.935, "TT": 0.96}, (128, 128): {"NT": 0.96, "TT": 0.94, "TN": 1.08}}
# The 4-byte-copy variant's math: with an operand copied as stored (NN, TN, TT), and NT's
# (measured on an H200 against zero-padded aligned operands, benchmarks/NOTES.md 2026-11-30).
UNALIGNED, UNALIGNED_TRANSPOSED = 0.48, 0.95
# ... and with an operand copied as stored in a batch (never staged), whose products are short:
# fitted to 10 NN batches' public calls on an H200 (attention's P @ V at S = 77..1243), which
# UNALIGNED predicted 1.2-1.8x too slow (benchmarks/NOTES.md, 2026-12-01); TN and TT batches
# take it unmeasured.
UNALIGNED_BATCH = 0.75
UNALIGNED_ITEM_S = 9.8e-6 / (128 * 256)  # its epilogue, per element of a work item's tile
UNALIGNED_WRITE = 0.20  # its C stores, as a share of DRAM bandwidth
# The same for a C off the grid stored through shared memory (either variant, where the tile
# has room: 08_pipelined.cu's STAGE_C): set by hand from an H200's A/B of staging (benchmarks/NOTES.md,
# 2026-11-30), not fitted.
SMEM_C_ITEM_S, SMEM_C_WRITE = UNALIGNED_ITEM_S / 4, 0.6
LONE_BLOCK = 1.2  # a 4-warp block alone on an SM takes this many items' time


@dataclass(frozen=True)
class Shape:
    """What the model needs of a product beyond M, N, K: the batch, whether A and B are
    read 16 bytes at a time (aligned16), whether B is column-major, and whether C's rows
    are on the 16-byte grid."""

    batch: int = 1
    aligned16: bool = True
    b_transposed: bool = False
    c_aligned: bool = True
    a_transposed: bool = False  # A column-major (TN, TT)
    c_through_smem: bool = False  # a C off the grid stored through shared memory (pipelined.c_through_smem)


def estimate(
    M: int,
    N: int,
    K: int,
    bm: int,
    bn: int,
    bk: int,
    splits: int,
    sm_count: int,
    shape: Shape = Shape(),
    label: str = "",
) -> Estimate:
    """Predicted time of ``shape.batch`` FP32 products M x N x K on rung 8 with ``bm`` x
    ``bn`` tiles, K-steps of ``bk`` and K split ``splits`` ways, with why."""
    K, batch = max(K, 1), max(shape.batch, 1)
    items = cdiv(M, bm) * cdiv(N, bn) * batch * splits
    k_slice = cdiv(cdiv(K, bk), splits) * bk
    ops = ("T" if shape.a_transposed else "N") + ("T" if shape.b_transposed else "N")
    shares = LAYOUT_SHARE.get((bm, bn), B_T_SHARE) if shape.aligned16 else B_T_SHARE
    eff = EFFICIENCY[(bm, bn)] * shares.get(ops, 1.0)
    if not shape.aligned16:
        as_stored = UNALIGNED_BATCH if batch > 1 else UNALIGNED
        eff *= as_stored if shape.a_transposed or not shape.b_transposed else UNALIGNED_TRANSPOSED
    item = 2.0 * bm * bn * k_slice / (SM_FLOPS * eff)
    if not shape.c_aligned:
        item += (SMEM_C_ITEM_S if shape.c_through_smem else UNALIGNED_ITEM_S) * bm * bn
    per_sm = cdiv(items, sm_count)
    four_warps = bm * bn <= 64 * 128  # the blocks of 128 threads the choice takes for these tiles
    compute = item * max(per_sm, LONE_BLOCK if four_warps and items else 0)
    write_bw = DRAM_BW * (1.0 if shape.c_aligned else SMEM_C_WRITE if shape.c_through_smem else UNALIGNED_WRITE)
    c_bytes = 4.0 * M * N * batch
    memory = 4.0 * (M * K + K * N) * batch / DRAM_BW
    after = LAUNCH_S
    if splits > 1:  # partial sums written; the reduction reads them and writes C, after the GEMM
        memory += splits * c_bytes / DRAM_BW
        after += SPLIT_S + splits * c_bytes / DRAM_BW + c_bytes / write_bw
    else:
        memory += c_bytes / write_bw
    body = max(compute, memory)
    bound = "compute" if body == compute else "DRAM"

    def reason() -> str:
        bps = BLOCKS_PER_SM[(bm, bn)]
        waves = items / (sm_count * bps)
        split = f" split {splits}" if splits > 1 else ""
        return (
            f"{label or f'{bm}x{bn}'}{split}: {items} work items, {waves:.2f} waves of {bps} "
            f"block{'s' * (bps > 1)} an SM, {100 * tile_use(M, N, bm, bn):.0f}% of the tile area useful, "
            f"{bound}-bound"
        )

    return Estimate(body + after, reason)
