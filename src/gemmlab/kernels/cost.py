"""A cost model of one tiled GEMM launch: predicted time from flops, bytes, waves
of tiles and tile waste, with a reason string saying what bounds it.

The auto rules use it to choose between tile shapes (and splits of K) where the
rules written from measurements did not look: batches of small or odd matrices,
products with few tiles.  It is a model, not a measurement: its constants are a
Hopper-class GPU's (H100 / H200) and each tile's share of the SM's tensor peak
at full occupancy, rounded from the measurements in benchmarks/NOTES.md; what it
decides is checked by scripts/ab_fastpaths.py on the GPU.

The model, per launch:
  * work items: tiles of every matrix of the batch, times the split of K; each
    item computes a whole padded tile (``bm x bn`` over K rounded up to ``bk``),
    so a tile hanging past the matrix costs as much as a full one (tile waste);
  * the busiest SM runs ceil(items / SMs) of them, at the tile's efficiency of the
    SM's tensor peak (compute) or at the SM's share of L2 bandwidth for the tile's
    loads, whichever is slower (waves of tiles);
  * the whole launch moves at least its operands and result once through DRAM;
  * a split of K adds its reduction: by a second kernel (the FP32 partial sums
    written and read once more through DRAM, one more launch), or, for a kernel that
    adds its slices itself (Tile.fixup: wgmma), each tile's last slice reading the
    other slices' partial tiles through L2 at the SM's share of L2 bandwidth before
    its epilogue -- time on the busiest SM's path, no second launch; every launch
    adds a fixed cost (launch, pipeline fill, epilogue).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .spec import cdiv


@dataclass(frozen=True)
class Machine:
    """What the model knows of the GPU."""

    sm_count: int
    sm_flops: float = 989e12 / 132  # dense 16-bit tensor FLOP/s of one SM (H100/H200 SXM)
    dram_bw: float = 3.6e12  # bytes/s the whole GPU streams from DRAM, reachable
    sm_bw: float = 100e9  # bytes/s one SM pulls from L2 into shared memory
    launch_s: float = 4e-6  # a launch: its start, the pipeline's fill, the epilogue
    latency_s: float = 1e-6  # a load's round trip: a ring of R bytes streams R / latency_s


@dataclass(frozen=True)
class Tile:
    """One candidate configuration as the model sees it: the tile of C a work item
    computes, its K-step, its share of the SM's tensor peak at full occupancy, and
    how many blocks one SM holds at once (1 for a persistent kernel)."""

    bm: int
    bn: int
    bk: int
    efficiency: float
    blocks_per_sm: int = 1
    splits: int = 1
    label: str = ""
    ring_bytes: int = 0  # bytes of A and B tiles a block keeps in flight (0: not limiting)
    fixup: bool = False  # split: the kernel adds its slices itself, no reduction kernel


@dataclass(frozen=True)
class Estimate:
    """A predicted time and why: ``why`` is the reason, or a function that writes it when
    asked (a choice weighs a dozen estimates and reports one)."""

    seconds: float
    why: str | Callable[[], str]
    tile: Tile | None = None

    @property
    def reason(self) -> str:
        return self.why if isinstance(self.why, str) else self.why()

    def __str__(self) -> str:
        return f"{self.seconds * 1e6:.1f} us ({self.reason})"


def tile_use(M: int, N: int, bm: int, bn: int) -> float:
    """Useful share of the tiles' area that covers an M x N matrix (1: no waste)."""
    if M <= 0 or N <= 0:
        return 1.0
    return (M * N) / (cdiv(M, bm) * bm * cdiv(N, bn) * bn)


def predict(
    M: int, N: int, K: int, tile: Tile, machine: Machine, *, batch: int = 1, in_bytes: int = 2, out_bytes: int = 2
) -> Estimate:
    """Predicted time of ``batch`` products op(A) M x K times op(B) K x N with ``tile``."""
    K = max(K, 1)
    tiles = cdiv(M, tile.bm) * cdiv(N, tile.bn) * max(batch, 1)
    items = tiles * tile.splits
    k_slice = cdiv(cdiv(K, tile.bk), tile.splits) * tile.bk
    per_sm = cdiv(items, machine.sm_count)
    compute = per_sm * 2.0 * tile.bm * tile.bn * k_slice / (machine.sm_flops * tile.efficiency)
    # An SM pulls its loads at its share of L2 bandwidth, or at what its blocks' rings keep
    # in flight over a load's latency where that is less (a short ring on a small tile).
    sm_bw = machine.sm_bw
    if tile.ring_bytes:
        sm_bw = min(sm_bw, tile.blocks_per_sm * tile.ring_bytes / machine.latency_s)
    loads = per_sm * (tile.bm + tile.bn) * k_slice * in_bytes / sm_bw
    dram = (M * K + K * N) * in_bytes * max(batch, 1) + M * N * out_bytes * max(batch, 1)
    launches, fixup = 1, 0.0
    if tile.splits > 1 and not tile.fixup:  # partial sums written, read back by the reduction
        dram += 2 * 4 * M * N * tile.splits * max(batch, 1)
        launches = 2
    memory = dram / machine.dram_bw
    body = max(compute, loads, memory)
    if tile.splits > 1 and tile.fixup:
        # The busiest SM's owned tiles each read splits - 1 FP32 partial tiles, after the
        # last of them was written: (owned tiles x (splits - 1) + 1) tiles through L2.
        owned = cdiv(tiles, machine.sm_count)
        fixup = (owned * (tile.splits - 1) + 1) * tile.bm * tile.bn * 4 / machine.sm_bw
    bound = "compute" if body == compute else "L2 loads" if body == loads else "DRAM"

    def reason() -> str:
        waves = items / (machine.sm_count * tile.blocks_per_sm)
        split = f" split {tile.splits}" if tile.splits > 1 else ""
        return (
            f"{tile.label or f'{tile.bm}x{tile.bn}'}{split}: {items} work items, {waves:.2f} waves, "
            f"{100 * tile_use(M, N, tile.bm, tile.bn):.0f}% of the tile area useful, {bound}-bound"
        )

    return Estimate(body + fixup + launches * machine.launch_s, reason, tile)


def copy_time(nbytes: int, machine: Machine, efficiency: float = 1.0) -> float:
    """An operand copied once (read and written) by one more launch, at ``efficiency`` of
    the DRAM bandwidth."""
    return 2 * nbytes / (machine.dram_bw * efficiency) + machine.launch_s


def best(estimates, *, incumbent: Estimate | None = None, margin: float = 0.85) -> Estimate:
    """The fastest estimate; where ``incumbent`` (what a measured rule chose) is given,
    another replaces it only if predicted faster by more than ``margin``: the model
    overrides a measurement only where it is confident."""
    fastest = min(estimates, key=lambda e: e.seconds)
    if incumbent is None or fastest.seconds < margin * incumbent.seconds:
        return fastest
    return incumbent
