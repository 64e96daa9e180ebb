"""fp32_tc's cost on ec_wgmma (Hopper): the predicted time of one call, so that
kernel="auto" can weigh it against IEEE FP32 on the CUDA cores (rung 8's model,
kernels/simt/pipelined_cost.py), which is as accurate and, on short, thin or small
products, faster (gemmlab.core.choose).

The call, as the model sees it:

  * a fixed cost beyond an FP32 call's: the split pass's launch, the method chosen on
    the GPU, the other method's launches (they return at once) and the host work of
    four launches instead of one (EC_FIXED_S);
  * the split pass: every element of A and B read (4 bytes) and its two FP16 parts
    written (4 bytes), at a share of DRAM bandwidth that is lower where a row is off
    the 16-byte grid (4-byte loads);
  * the GEMM: the busiest SM's tiles (128 x BN, each over K rounded up to 64), each
    three FP16 products at a share of the tensor peak, plus a fixed time per tile
    (EC_TILE_S: its epilogue and the stage's FP32 adds, which wait for the tensor core);
  * a split of K: its partial tiles written and added by a second kernel (EC_SPLIT_K_S).

Constants fitted by least squares in relative time to 389 public calls of fp32_tc on
ec_wgmma on an H200 (the shapes suite's products, benchmarks/NOTES.md, 2026-12-01),
less an FP32 call's host time (14 us, the median of public calls over rung 8's model
on the same products), which rung 8's model leaves out too: the two models compare.
EC_TILE_S was lowered afterwards by what the leaner epilogue saves a tile, measured
against K on two products (benchmarks/NOTES.md).
"""

from __future__ import annotations

from ..cost import Estimate, Machine
from ..spec import cdiv

EC_FIXED_S = 32e-6
EC_SPLIT_BW = 3.0e12  # bytes/s of the split pass, rows on the 16-byte grid
EC_SPLIT_BW_OFF_GRID = 2.1e12  # ... and off it
EC_TENSOR_EFFICIENCY = 0.85  # share of the SM's dense FP16 peak the three products reach
EC_TILE_S = 4.3e-6  # per tile on the busiest SM
EC_SPLIT_K_S = 53e-6  # a split of K: partial tiles through memory and the reduction's launch
TILE_M, K_STEP = 128, 64


def estimate(
    M: int, N: int, K: int, batch: int, bn: int, splits: int, sm_count: int, on_grid: bool, label: str = "ec_wgmma"
) -> Estimate:
    """Predicted time of ``batch`` fp32_tc products M x N x K on ec_wgmma with 128 x ``bn``
    tiles and K split ``splits`` ways; ``on_grid``: every row of A and B on the 16-byte grid."""
    K, batch, splits = max(K, 1), max(batch, 1), max(splits, 1)
    items = cdiv(M, TILE_M) * cdiv(N, bn) * batch * splits
    per_sm = cdiv(items, sm_count)
    k_slice = cdiv(cdiv(K, K_STEP), splits) * K_STEP
    sm_flops = Machine(sm_count).sm_flops
    gemm = per_sm * (3 * 2.0 * TILE_M * bn * k_slice / (sm_flops * EC_TENSOR_EFFICIENCY) + EC_TILE_S)
    split_bytes = 8.0 * (M * K + K * N) * batch
    split = split_bytes / (EC_SPLIT_BW if on_grid else EC_SPLIT_BW_OFF_GRID)
    fixed = EC_FIXED_S + (EC_SPLIT_K_S if splits > 1 else 0.0)

    def reason() -> str:
        split_k = f" split {splits}" if splits > 1 else ""
        return (
            f"{label} 128x{bn}{split_k}: split pass {split * 1e6:.1f} us ({split_bytes / 2**20:.1f} MiB), "
            f"{items} tiles, {per_sm} on the busiest SM, {gemm * 1e6:.1f} us"
        )

    return Estimate(fixed + split + gemm, reason)
