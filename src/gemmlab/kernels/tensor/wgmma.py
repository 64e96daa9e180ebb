"""Tensor rung 4, 04_wgmma.cu (Hopper): TMA into a swizzled shared-memory ring, a
producer warpgroup and BM/64 consumer warpgroups issuing wgmma, persistent grid,
optionally split over K (SPLITK: the last slice of each tile adds the others' FP32
partial tiles inside the kernel, wgmma_split_workspace's workspace, before C's own
epilogue).

The rung's last step: wgmma_tma, wgmma_specialized and wgmma_persistent (steps a, b, c)
build it one idea at a time, and this kernel adds the TMA-store epilogue, split-K, batches
in one launch, the bias and TF32.  Beside the spec: the launch arguments (3-D tensor maps
of A, B and C over a whole batch, built by runtime.tma) and the staging pre-pass
(tf32_pack.cu) that copies an operand TMA cannot read in place to the 16-byte grid.
ec_wgmma (ec/ec_wgmma.py) reuses the Hopper limits and the standard arguments.
"""

from __future__ import annotations

import numpy as np

from ...runtime.tma import SWIZZLE_BYTES, Operands, element_bytes, padded_ld, tensor_map, tma_readable
from ..cost import Estimate, Machine, Tile, best, copy_time, predict
from ..spec import (
    KERNEL_DIR,
    LAYOUTS,
    Ask,
    Constraint,
    KernelSpec,
    Launching,
    Launch,
    Offer,
    PrePass,
    Problem,
    Rules,
    TileParam,
    cdiv,
)
from .wmma import TC_DTYPES, TC_VARIANTS, tc_type_args

# The Hopper target, what it brings, a block's shared memory (the ring, the epilogue's staging
# buffers, the barriers and 1 KiB to align the tiles to the swizzle atom must fit in it) and
# the standard arguments: introduced by the rung's first step.
from .wgmma_tma import HOPPER_NEEDS, WGMMA_SM90, WGMMA_SMEM_LIMIT, standard_args
from .mma_pipelined import sized_estimates, sized_params
from ..simt.pipelined import SHALLOW_SPLIT_MAX, SPLITK_VALUES, fill_split
from ..cuda_constants import read_constants
from ..steps import PackCopy, pack_args, pack_rows_launch

# one staging buffer of the TMA-store epilogue; two per consumer warpgroup
WGMMA_EPI_BYTES = read_constants("tensor/04_wgmma.cu")["WGMMA_EPI_BYTES"]

# The TF32 pre-pass (rounds A and packs B^T, K-major).
TF32_PACK_SOURCE = KERNEL_DIR / "tensor" / "tf32_pack.cu"
TF32_PACK_KERNELS = ("gemmlab::tf32_pack<false>", "gemmlab::tf32_pack<true>")
_P = read_constants("tensor/tf32_pack.cu")
TF32_PACK_TILE, TF32_PACK_THREADS = _P["TF32_PACK_TILE"], _P["TF32_PACK_THREADS"]
# The 16-bit staging copy of the same file (an operand TMA cannot read, copied bit for bit).
PACK16_KERNEL = "gemmlab::pack16"


def wgmma_smem(p) -> int:
    """Dynamic shared memory of 04_wgmma.cu: STAGES x (A tile + B tile, (BM + BN) x 128 B),
    2 x 8 KiB of epilogue staging per consumer warpgroup, two 8-byte barriers per stage,
    1024 bytes of alignment slack."""
    return p["STAGES"] * (p["BM"] + p["BN"]) * 128 + (p["BM"] // 64) * 2 * WGMMA_EPI_BYTES + 16 * p["STAGES"] + 1024


def wgmma_tile(p, dtype: str) -> tuple[int, int]:
    """The block's tile of C, rows x columns: BM x BN, except in TF32, where the kernel
    computes C^T = B^T A^T and the tile is BN x BM (the wgmma's N runs along C's rows)."""
    return (p["BN"], p["BM"]) if dtype == "tf32" else (p["BM"], p["BN"])


def _threads(p) -> int:
    return 128 * (p["BM"] // 64 + 1)  # one producer warpgroup + BM/64 consumers


def wgmma_cluster_tiles(p, prob: Problem) -> int:
    """Work items of one matrix: clusters' worth of tiles (CLUSTER vertically adjacent tiles
    each), each SPLITK times, once per slice of K."""
    tm, tn = wgmma_tile(p, prob.dtype)
    return cdiv(cdiv(prob.M, tm), p["CLUSTER"]) * cdiv(prob.N, tn) * p.get("SPLITK", 1)


def _template_args(p, prob: Problem) -> tuple:
    """Input and output type codes, the tile, and whether K is split (the split kernel
    reduces its slices itself and writes C in its own type)."""
    dt, odt = tc_type_args(prob)
    return (dt, odt, p["BM"], p["BN"], p["STAGES"], p["CLUSTER"], p["SPLITK"] > 1)


def wgmma_split_workspace(p, prob: Problem) -> tuple[int, int]:
    """Launching.split_fixup: bytes of split-K's workspaces per matrix, (partial tiles,
    counters).  Every tile (a cluster's rows past M included) has SPLITK - 1 partial
    tiles of BM x BN floats, the slices before its last, and a 4-byte counter per consumer
    warpgroup (BM / 64)."""
    tiles = wgmma_cluster_tiles({**p, "SPLITK": 1}, prob) * p["CLUSTER"]
    return tiles * (p["SPLITK"] - 1) * p["BM"] * p["BN"] * 4, tiles * (p["BM"] // 64) * 4


def _geometry(p, prob: Problem, batch: int = 1) -> Launch:
    """Persistent: no more blocks than SMs (one block fills an SM's shared memory), in whole
    clusters; a cluster takes CLUSTER vertically adjacent tiles at a time (one slice of K
    of them, split), of any matrix of the ``batch`` the launch takes."""
    cl = p["CLUSTER"]
    cluster_tiles = wgmma_cluster_tiles(p, prob) * batch
    blocks = cl * max(1, min(cluster_tiles, prob.sm_count // cl))
    return Launch(
        grid=(blocks, 1, 1), block=(_threads(p), 1, 1), smem_bytes=wgmma_smem(p), cluster=(cl, 1, 1), persistent=True
    )


def _unusable(prob: Problem) -> str | None:
    if prob.dtype == "tf32" and (prob.op_a, prob.op_b) != ("N", "N"):
        return (
            f"its TF32 path (C^T = B^T A^T, the TF32 wgmma has no transpose bit) reads row-major a and b "
            f"(NN) only, not {prob.op_a}{prob.op_b}"
        )
    if prob.dtype in ("float16", "bfloat16") and not prob.tma_aligned and not prob.stage:
        return (
            "TMA needs a and b at 16-byte aligned addresses with leading dimensions whose byte size "
            "is a multiple of 16 (for 16-bit elements: a multiple of 8 elements), and in a batch strides "
            "between matrices that are multiples of 16 bytes too (or 0: a shared matrix)"
        )
    return None


# The ring of K-steps each tile takes: 4, except where a deeper ring that fits was measured
# faster.  On few-tile products one block has each SM, and its ring is all it keeps in flight,
# so 64 x 128 takes 8 K-steps and 128 x 128 the 5 that fit (benchmarks/NOTES.md, "wgmma's
# rings on few-tile products").
WGMMA_RINGS = {(64, 128): 8, (128, 128): 5}
WGMMA_RING = 4  # every other tile, and a K that 4 K-steps hold


def wgmma_ring(bm: int, bn: int, K: int | None = None, batch: int = 1, dtype: str = "bfloat16") -> int:
    """STAGES of the BM x BN tile as the rules and the cost model take it: WGMMA_RINGS for
    16-bit inputs (what was measured) whose K has more K-steps than WGMMA_RING, except
    128 x 128 on batches (attention's P @ V measured slower at 5); else WGMMA_RING."""
    deep = dtype != "tf32" and K is not None and cdiv(K, SWIZZLE_BYTES // 2) > WGMMA_RING
    if not deep or (bm, bn) == (128, 128) and batch > 1:
        return WGMMA_RING
    return WGMMA_RINGS.get((bm, bn), WGMMA_RING)


# Split-K's floor: each slice of K at least this many K-steps (of 128 bytes of K).
WGMMA_MIN_K_STEPS_PER_SLICE = 16


def wgmma_auto_split(tiles: int, k_steps: int, sm_count: int) -> int:
    """The split of K for ``tiles`` work items (of every matrix of a batch) of ``k_steps``
    K-steps each: 1 where the tiles leave fewer than half of the SMs idle; else the
    largest of SPLITK_VALUES up to SHALLOW_SPLIT_MAX whose items still fit in one round
    (tiles * split <= sm_count) and whose slices keep WGMMA_MIN_K_STEPS_PER_SLICE K-steps each.
    More slices measured slower even over 10^5 values of K: a tile's last slice adds every
    other slice's partial one after another (benchmarks/NOTES.md)."""
    if 2 * tiles > sm_count:
        return 1
    return fill_split(tiles, k_steps, sm_count, most=SHALLOW_SPLIT_MAX, min_steps=WGMMA_MIN_K_STEPS_PER_SLICE)


# The narrow tiles with deep rings that replace split-K on products of a few rows: 64 x BN, unsplit, the ring as deep as shared memory allows.
WGMMA_NARROW_TILES = ((64, 12), (128, 8))  # (BN, STAGES), narrowest first
WGMMA_NARROW_MIN_M = 5  # fewer rows (a decode step's dY @ W) stay split
WGMMA_NARROW_MAX_M = 128  # the rows measured: 16 and 128


def wgmma_narrow_tile(M: int, N: int, K: int, sm_count: int, batch: int = 1) -> dict | None:
    """The unsplit tile for 16-bit products of a few rows that split-K would otherwise
    serve: 64 x 64 with a ring of 12 K-steps where its tiles (of every matrix) fit in one
    round, else 64 x 128 with 8; taken where those tiles fill a quarter of the SMs and K
    has at most 128 K-steps, or three quarters with up to 256 (a memory-bound tile
    streams faster with more of its K in flight than split into slices).  None where
    neither holds: split-K stays."""
    k_steps = cdiv(max(K, 1), SWIZZLE_BYTES // 2)
    for bn, stages in WGMMA_NARROW_TILES:
        tiles = cdiv(M, 64) * cdiv(N, bn) * batch
        if tiles <= sm_count:
            if 4 * tiles >= sm_count and k_steps <= 128 or 4 * tiles >= 3 * sm_count and k_steps <= 256:
                return {"BM": 64, "BN": bn, "STAGES": stages, "CLUSTER": 1, "SPLITK": 1}
            return None
    return None


def wgmma_rule_params(
    M: int, N: int, sm_count: int, batch: int = 1, K: int | None = None, dtype: str = "bfloat16"
) -> dict:
    """wgmma's tile by the rules written from measurements, where wgmma_auto_choice starts:
    128x256 (the fastest per tile) unless its tiles
    -- of every matrix of a batch, which one launch takes -- would fill fewer than half
    the SMs; then 64x128, four times as many tiles.  On an H100 (132 SMs), BF16, 64x128
    was the faster at 1024^3 (32 tiles of 128x256), 128x256 at 2048^3 (128 tiles; 128x128
    would take two rounds).

    With ``K`` given (planner.plan), the smaller tile is split over K where it still
    leaves more than half of the SMs idle (wgmma_auto_split: one round of work items,
    slices of 16 K-steps or more), and for 16-bit inputs with 64 < M <= 128 it is
    128x128: one tile-row, so op(B) is read once, by the two consumer warpgroups of a
    block, where two blocks of 64x128 read it twice.  Where 128x256 tiles fill the GPU
    but M <= 64 (16-bit), the tile is 64x256: no consumer warpgroup on rows past M.
    Each choice was the fastest, or within a few percent of it, in the GPU-time sweep
    of every tile and split over a Llama-3-8B-sized model's products at 1, 16 and
    128 tokens (benchmarks/NOTES.md; `wgmma-splitk-run82a.json`).
    With ``K`` given and 16-bit inputs, the fast tile is 128x128 where N <= 128 (P @ V with
    a head dim of 128, which a 256-wide tile half wastes) and for batches whose K is at
    most 128 (Q @ K^T): faster than 128x256 at every attention size measured, or equal;
    a single matrix with a short K (the weight gradients) was not, so it keeps 128x256.
    Batches of at most 64 columns (P @ V at a head dim of 64) take 128x64: faster than
    128x128 on ViT-B/16's P @ V and P^T @ dO (benchmarks/NOTES.md).  Where the split above would be taken for 16-bit inputs of
    WGMMA_NARROW_MIN_M to WGMMA_NARROW_MAX_M rows, wgmma_narrow_tile's unsplit deep-ring
    tile replaces it where it applies: faster on every o and qkv product at 16 and 128
    tokens in the sweep of tiles, splits and rings."""
    big = cdiv(M, 128) * cdiv(N, 256) * batch
    if 2 * big >= sm_count:
        sixteen = K is not None and dtype != "tf32"
        bm = 64 if sixteen and M <= 64 else 128
        # 128 columns where a 256-wide tile would compute as many past N as in it (P @ V's head
        # dim), and for batches with at most two K-steps (attention's Q @ K^T); 64 for batches of
        # at most 64 columns (P @ V and its gradients at a head dim of 64).
        bn = (
            64
            if sixteen and batch > 1 and N <= 64
            else 128
            if sixteen and (N <= 128 or batch > 1 and K <= 128)
            else 256
        )
        return {"BM": bm, "BN": bn, "STAGES": wgmma_ring(bm, bn, K, batch, dtype), "CLUSTER": 1, "SPLITK": 1}
    bm = 128 if K is not None and dtype != "tf32" and 64 < M <= 128 else 64
    split = 1
    if K is not None:
        tm, tn = wgmma_tile({"BM": bm, "BN": 128}, dtype)
        k_steps = cdiv(max(K, 1), SWIZZLE_BYTES // element_bytes("float32" if dtype == "tf32" else dtype))
        split = wgmma_auto_split(cdiv(M, tm) * cdiv(N, tn) * batch, k_steps, sm_count)
        if split > 1 and dtype != "tf32" and WGMMA_NARROW_MIN_M <= M <= WGMMA_NARROW_MAX_M:
            narrow = wgmma_narrow_tile(M, N, K, sm_count, batch)
            if narrow is not None:
                return narrow
    return {"BM": bm, "BN": 128, "STAGES": wgmma_ring(bm, 128, K, batch, dtype), "CLUSTER": 1, "SPLITK": split}


# Each wgmma tile's share of the SM's 16-bit tensor peak at full occupancy, as the cost
# model takes it: rounded from H100 sweeps (benchmarks/NOTES.md);
# 64-row tiles have one consumer warpgroup, so less of the peak.  64 x 128's and 128 x 128's
# are those at 4 K-steps scaled by what their deeper rings (wgmma_ring) measured: the model's
# ring term, at a load latency of 1 us, barely tells 4 K-steps from 8.  128 x 192's is set a
# little under 128 x 256's, whose K-step it shares for three quarters of the multiply; with
# it wgmma_wave_choice ranks the two tiles as the H200 A/B measured them (a CPU test,
# test_wgmma_auto_ranks_its_wide_tiles_as_measured, holds it to that record).
WGMMA_TILE_EFFICIENCY = {
    (128, 256): 0.80,
    (128, 192): 0.78,
    (128, 128): 0.74,
    (128, 64): 0.60,
    (64, 256): 0.62,
    (64, 128): 0.64,
    (64, 64): 0.45,
}
# The tile wgmma_wave_choice weighs against the rules' 128 x 256 (16-bit inputs only).
WGMMA_WAVE_TILE = {"BM": 128, "BN": 192, "STAGES": 4, "CLUSTER": 1, "SPLITK": 1}


def wgmma_estimate(M: int, N: int, K: int, p: dict, sm_count: int, batch: int = 1, dtype: str = "bfloat16"):
    """The cost model's estimate (kernels/cost.py) of wgmma with tile parameters ``p``
    (16-bit inputs: 64 elements of K a step, one persistent block an SM)."""
    eb = element_bytes(dtype)
    tile = Tile(
        p["BM"],
        p["BN"],
        SWIZZLE_BYTES // eb,
        WGMMA_TILE_EFFICIENCY[(p["BM"], p["BN"])],
        splits=p.get("SPLITK", 1),
        ring_bytes=p["STAGES"] * (p["BM"] + p["BN"]) * SWIZZLE_BYTES,
        fixup=True,  # split-K's slices are added in the kernel (SPEC.launching.split_fixup)
        label=f"{p['BM']}x{p['BN']}x{p['STAGES']} stages",
    )
    return predict(M, N, K, tile, Machine(sm_count), batch=batch, in_bytes=eb, out_bytes=eb)


def _wgmma_candidates(M: int, N: int, K: int, sm_count: int, batch: int) -> list[dict]:
    """The configurations the cost model weighs for a 16-bit product: every tile shape
    at its ring (wgmma_ring), unsplit and split by wgmma_auto_split, and the narrow deep-ring
    tiles where their tiles fit in one round."""
    out = []
    k_steps = cdiv(max(K, 1), 64)
    for bm, bn in WGMMA_TILE_EFFICIENCY:
        base = {"BM": bm, "BN": bn, "STAGES": wgmma_ring(bm, bn, K, batch), "CLUSTER": 1, "SPLITK": 1}
        out.append(base)
        split = wgmma_auto_split(cdiv(M, bm) * cdiv(N, bn) * batch, k_steps, sm_count)
        if split > 1:
            out.append({**base, "SPLITK": split})
    for bn, stages in WGMMA_NARROW_TILES:
        narrow = {"BM": 64, "BN": bn, "STAGES": stages, "CLUSTER": 1, "SPLITK": 1}
        # (64 x 128's own ring is the narrow one where K is long: wgmma_ring)
        if cdiv(M, 64) * cdiv(N, bn) * batch <= sm_count and narrow not in out:
            out.append(narrow)
    return out


def wgmma_wave_choice(M: int, N: int, K: int, sm_count: int, rule: dict, dtype: str) -> tuple[dict, str]:
    """One 16-bit matrix whose 128 x 256 tiles fill the GPU: the rules' tile, or
    WGMMA_WAVE_TILE (128 x 192) where the cost model predicts it faster by more than its
    margin.  A persistent grid runs the tiles in rounds of one per SM, the last round
    possibly part-empty (wave quantisation).  128 x 192 tiles are a quarter smaller: where
    they take no more rounds than 128 x 256 tiles (4096 x 768 on 132 SMs: one round of
    128 tiles against one of 96), each round is shorter; where they take more, 128 x 256
    stays."""
    if (rule["BM"], rule["BN"], rule["SPLITK"]) != (128, 256, 1):
        return rule, "wgmma's tile rules"
    incumbent = wgmma_estimate(M, N, K, rule, sm_count, 1, dtype)
    wave = wgmma_estimate(M, N, K, WGMMA_WAVE_TILE, sm_count, 1, dtype)
    if best([wave], incumbent=incumbent) is incumbent:
        return rule, f"wgmma's tile rules, kept by the cost model against 128x192: {incumbent} against {wave}"
    return dict(WGMMA_WAVE_TILE), (
        f"cost model over wgmma's tile rules, 128x192 against their 128x256 "
        f"(the last round of tiles fuller): {wave} against {incumbent}"
    )


def wgmma_auto_choice(
    M: int, N: int, sm_count: int, batch: int = 1, K: int | None = None, dtype: str = "bfloat16"
) -> tuple[dict, str]:
    """wgmma's configuration for ``kernel="auto"`` and why.  The rules of
    wgmma_rule_params choose, except for 16-bit products (K known) whose 128 x 256
    tiles leave more than half of the SMs idle or that are batches: there every
    candidate of _wgmma_candidates is costed (kernels/cost.py) and one predicted
    faster than the rule's choice by more than the model's margin replaces it; and
    except for 16-bit single matrices (K known) whose 128 x 256 tiles fill the GPU,
    where wgmma_wave_choice weighs 128 x 192 against them, and nothing else.  Products
    of fewer than WGMMA_NARROW_MIN_M rows keep the rule (measured: split)."""
    rule = wgmma_rule_params(M, N, sm_count, batch, K, dtype)
    if K is None or dtype == "tf32" or M < WGMMA_NARROW_MIN_M:
        return rule, "wgmma's tile rules"
    if batch <= 1 and 2 * cdiv(M, 128) * cdiv(N, 256) >= sm_count:
        return wgmma_wave_choice(M, N, K, sm_count, rule, dtype)
    incumbent = wgmma_estimate(M, N, K, rule, sm_count, batch, dtype)
    chosen = best(
        [wgmma_estimate(M, N, K, p, sm_count, batch, dtype) for p in _wgmma_candidates(M, N, K, sm_count, batch)],
        incumbent=incumbent,
    )
    if chosen is incumbent:
        return rule, f"wgmma's tile rules, kept by the cost model: {incumbent}"
    t = chosen.tile
    params = {
        "BM": t.bm,
        "BN": t.bn,
        "STAGES": t.ring_bytes // ((t.bm + t.bn) * SWIZZLE_BYTES),
        "CLUSTER": 1,
        "SPLITK": t.splits,
    }
    return params, f"cost model over wgmma's tile rules: {chosen} against {incumbent}"


def _band_hook(params: dict, ask: Ask) -> dict:
    """The parameters of a band's top (planner.size_band) at one exact size of the band: where
    they are the wave choice's tiles (wgmma_wave_choice), wgmma_auto_choice at the exact size,
    since how full the last round of tiles is changes with the tile count; else the top's."""
    wave = (params["BM"], params["BN"], params["SPLITK"]) in ((128, 256, 1), (128, WGMMA_WAVE_TILE["BN"], 1))
    return wgmma_auto_choice(ask.M, ask.N, ask.sm_count, ask.batch, ask.K, ask.dtype)[0] if wave else params


def _auto_hook(ask: Ask) -> Offer:
    """16-bit and TF32 on sm_90a: wgmma_auto_choice's tiles (a whole batch in one launch,
    few tiles with a long K split over K)."""
    if ask.arch is None or not SPEC.builds_for(ask.arch):
        return Offer(None, f"wgmma runs on {WGMMA_SM90} only ({'no GPU known' if ask.arch is None else ask.arch})")
    return Offer(*wgmma_auto_choice(ask.M, ask.N, ask.sm_count, ask.batch, ask.K, ask.dtype))


# The staging copy (pack16) moves 2-byte elements from rows off the 16-byte grid: the model
# gives it this share of the DRAM bandwidth.
PACK16_EFFICIENCY = 0.6
# mma_pipelined on operands off the 16-byte grid runs this many times slower than the model's
# aligned estimate (its copies narrow to 2-4 bytes).  Refitted when its 16-bit loads came to be
# issued a K-step ahead: the value that chose best between staging and the fallback on the
# shapes suite's odd-aligned bf16 products, both ways timed on an H200 (benchmarks/NOTES.md,
# "mma_pipelined's 16-bit loads a K-step ahead").  A staged call's host work beyond its two
# launches fitted to 0 once its launches were kept per set of addresses.
UNALIGNED_FALLBACK_SLOWDOWN = 5.0


def wgmma_staging_choice(
    M: int, N: int, K: int, sm_count: int, batch: int, dtype: str, stage_bytes: int
) -> tuple[dict | None, str]:
    """Whether a 16-bit product whose operands TMA cannot read in place runs on wgmma after a
    staging copy of ``stage_bytes`` (the staging pre-pass's pack16, rows padded to 16 bytes), rather than on
    its fallback, mma_pipelined, reading them as they are: (wgmma's parameters, why) where the
    cost model predicts the copy and wgmma faster than the fallback by more than its margin, else
    (None, why not).  A long K on few output tiles pays (a vocabulary's dY @ W: wgmma splits K, the
    fallback cannot); a product that reads its operands about once does not (attention's P @ V)."""
    params, _ = wgmma_auto_choice(M, N, sm_count, batch, K, dtype)
    machine = Machine(sm_count)
    gemm = wgmma_estimate(M, N, K, params, sm_count, batch, dtype)
    copy = copy_time(stage_bytes, machine, PACK16_EFFICIENCY)
    staged = Estimate(
        gemm.seconds + copy,
        f"a copy of {stage_bytes / 2**20:.1f} MiB to the 16-byte grid ({copy * 1e6:.1f} us), then {gemm}",
    )
    large, small = sized_estimates(M, N, K, sm_count, batch)
    aligned = small if sized_params(M, N, K, sm_count, batch) else large
    # The model's tiles are mma_pipelined's on the 16-byte grid; off it, its cp.async copies
    # narrow to 2-4 bytes and the kernel runs several times slower than that estimate.
    # (Its launch costs what an aligned one does: the slowdown is the kernel's body's.)
    fallback = Estimate(
        machine.launch_s + (aligned.seconds - machine.launch_s) * UNALIGNED_FALLBACK_SLOWDOWN,
        f"{aligned.reason}, x{UNALIGNED_FALLBACK_SLOWDOWN:g} for copies narrower than 16 bytes",
        aligned.tile,
    )
    if best([staged], incumbent=fallback) is fallback:
        return None, f"staging for wgmma would take {staged}, no faster than mma_pipelined's {fallback}"
    return params, f"cost model: {staged} against mma_pipelined's {fallback} on the operands as they are"


def _staging_hook(ask: Ask, stage_bytes: int) -> tuple[dict | None, str]:
    """16-bit operands are staged where wgmma_staging_choice says it pays; TF32 (asked for by
    name) always copies what TMA cannot read, so there is nothing to weigh."""
    if ask.dtype not in ("float16", "bfloat16"):
        return None, ""
    return wgmma_staging_choice(ask.M, ask.N, ask.K, ask.sm_count, ask.batch, ask.dtype, stage_bytes)


def wgmma_auto_params(
    M: int, N: int, sm_count: int, batch: int = 1, K: int | None = None, dtype: str = "bfloat16"
) -> dict:
    """wgmma's tile for ``kernel="auto"``: see wgmma_auto_choice."""
    return wgmma_auto_choice(M, N, sm_count, batch, K, dtype)[0]


# -- launch arguments ------------------------------------------------------------------


def _batch_of(ops: Operands, stride: int) -> tuple[int, int]:
    """(matrices, element stride) of an operand's 3-D map: the whole batch, or one
    matrix where every member shares it (stride 0: a map cannot step by 0 bytes)."""
    return (ops.batch, stride) if ops.batch > 1 and stride != 0 else (1, 0)


def _c_stored_by_tma(pr, ops: Operands, beta) -> bool:
    """Whether the epilogue stores C through its tensor map: beta == 0 (C is only written)
    and C readable by TMA, each matrix of the batch too; else the kernel stores without
    TMA, 16-bit inputs through shared memory a warp's rows at a time, TF32 from the
    registers."""
    eb = element_bytes("float32" if pr.out_dtype in ("float32", "tf32") else pr.out_dtype)
    nz, sc = _batch_of(ops, ops.sc)
    if beta != 0 or not tma_readable(ops.C, pr.M, ops.ldc, eb, (sc,)):
        return False
    # A batch whose C has room between its matrices or rows (padded rows, gaps) is
    # stored without TMA: on an H100 the 3-D TMA store wrote zeros into that
    # room (benchmarks/NOTES.md; cause not found).  Dense batches keep it.
    return nz <= 1 or (ops.ldc == pr.N and sc == pr.M * ops.ldc)


def _c_map(pr, ops: Operands, beta, box_rows: int):
    """The map of C for the TMA-store epilogue, or None where the epilogue stores without
    it (_c_stored_by_tma; the map passed then is a placeholder it never reads)."""
    if not _c_stored_by_tma(pr, ops, beta):
        return None
    dtype = "float32" if pr.out_dtype in ("float32", "tf32") else pr.out_dtype
    nz, sc = _batch_of(ops, ops.sc)
    return tensor_map(
        ops.C, pr.M, pr.N, ops.ldc, dtype, box_rows, SWIZZLE_BYTES // element_bytes(dtype), batch=nz, batch_stride=sc
    )


def _stored(pr, ops: Operands) -> tuple[tuple, tuple]:
    """A and B of a launch as stored: (pointer, rows, columns, leading dimension, (matrices,
    batch stride)), a matrix the batch shares as a batch of one (_batch_of)."""
    one = ops.batch <= 1
    za, zb = _batch_of(ops, 0 if one else ops.sa), _batch_of(ops, 0 if one else ops.sb)
    a = (ops.A,) + ((pr.M, pr.K) if pr.op_a == "N" else (pr.K, pr.M)) + (ops.lda, za)
    b = (ops.B,) + ((pr.K, pr.N) if pr.op_b == "N" else (pr.N, pr.K)) + (ops.ldb, zb)
    return a, b


def _readable(x: tuple, eb: int) -> bool:
    """Whether TMA reads the stored operand ``x`` (see _stored) in place."""
    ptr, rows, _, ld, (_, stride) = x
    return tma_readable(ptr, rows, ld, eb, (stride,))


def wgmma_args(plan, ops: Operands, alpha, beta, stored=None) -> tuple:
    """The wgmma rung's arguments: the standard eleven, the batch strides (layout.cuh;
    of A and B the kernel asks only whether they are 0), the number of matrices, the
    tensor maps of A, B and C, whether the epilogue stores through C's map (beta ==
    0 and C aligned for TMA), SPLITK and its workspaces (ops.partials, ops.counters:
    wgmma_split_workspace), and the bias.  The whole batch of ``ops`` is one launch:
    each map is 3-D, the batch outermost, its stride the bytes between matrices
    (runtime.tma); an operand the matrices share (stride 0) is a batch of one.
    ``stored``: A and B as _stored gives them, where they are aligned copies
    (wgmma_staged_launches); by default the caller's, which TMA must read in place.

    16-bit inputs, each map over the operand as stored, boxes as 04_wgmma.cu's
    load_operand_tile copies them: a K-major operand (A 'N', stored M x K; B 'T', stored
    N x K) in boxes of its tile's rows (A: BM; B: BN / CLUSTER, each block of a cluster
    copies its share) x 64 K; an MN-major one (A 'T', stored K x M; B 'N', stored K x N)
    in 64 x 64 boxes (64 K-rows of 64 M or N).  C in 64-row boxes of 128 bytes.  TF32
    (NN only): the kernel computes C^T = B^T A^T, reading A in BN x 32 boxes and B as
    stored in 32 x 32 boxes, both through TFLOAT32 maps, so that the copy engine rounds
    them to TF32 on the way into shared memory; C in 32 x 32 boxes."""
    pr, p = plan.problem, plan.params
    one = ops.batch <= 1
    sa, sb = (0, 0) if one else (ops.sa, ops.sb)
    splits = p.get("SPLITK", 1)
    if splits > 1 and not (ops.partials and ops.counters):
        raise ValueError(f"{plan.describe()}: split over K, the kernel needs its partials and counters workspaces")
    sc = 0 if one else ops.sc
    args = standard_args(pr, ops, alpha, beta) + (np.int64(sa), np.int64(sb), np.int64(sc), np.int32(max(ops.batch, 1)))
    if pr.dtype not in ("float16", "bfloat16", "tf32"):
        raise TypeError(f"wgmma computes float16, bfloat16 and tf32, not {pr.dtype}")
    if stored is None:
        stored = _stored(pr, ops)
        if not all(_readable(x, element_bytes(pr.dtype)) for x in stored):
            raise ValueError(
                "wgmma: an operand TMA cannot read in place, and the plan did not ask for a "
                "staging copy (the planner stages or falls back instead)"
            )
    (pa, ra, ca, lda, (na, sta)), (pb, rb, cb, ldb, (nb, stb)) = stored
    if pr.dtype == "tf32":
        box_a, box_b, box_c = (wgmma_tile(p, "tf32")[0], 32), (32, 32), 32
    else:
        box_a = (p["BM"], 64) if pr.op_a == "N" else (64, 64)  # K-major M x K, or M-major K x M
        box_b = (64, 64) if pr.op_b == "N" else (p["BN"] // p["CLUSTER"], 64)  # N-major K x N, or K-major
        box_c = 64
    map_a = tensor_map(pa, ra, ca, lda, pr.dtype, *box_a, batch=na, batch_stride=sta)
    map_b = tensor_map(pb, rb, cb, ldb, pr.dtype, *box_b, batch=nb, batch_stride=stb)
    map_c = _c_map(pr, ops, beta, box_c)
    if ops.bias and not wgmma_epilogue_bias(plan, (ops.bias_rs, ops.bias_cs, ops.bias_zs)):
        raise ValueError(
            f"{plan.describe()} cannot add this bias in its epilogue (TF32, or strides "
            f"{ops.bias_rs, ops.bias_cs} neither of which is 0)"
        )
    return args + (
        map_a,
        map_b,
        map_c if map_c is not None else map_a,
        np.int32(map_c is not None),
        np.int32(splits),
        ops.partials,
        ops.counters,
        ops.bias,
        np.int64(ops.bias_rs),
        np.int64(ops.bias_cs),
        np.int64(ops.bias_zs),
    )


def wgmma_epilogue_bias(plan, strides) -> bool:
    """Launching.epilogue_bias: 16-bit inputs (TF32's epilogue writes C transposed), split
    or not (split, the tile's last slice runs the epilogue once, on the whole sum), and a
    bias whose values vary along the rows or the columns of a matrix, not both (a row:
    nn.Linear's; a column): the epilogue reads such a bias once per tile's column or row,
    not once per element."""
    rs, cs, _ = strides
    return plan.problem.dtype in ("float16", "bfloat16") and (rs == 0 or cs == 0)


def wgmma_kernel_args(plan, gpu, stream: int, ops: Operands, alpha, beta) -> tuple:
    """Launching.kernel_args: wgmma_args on the caller's operands, which TMA reads in place."""
    return wgmma_args(plan, ops, alpha, beta)


# -- the staging copy: operands TMA cannot read in place ---------------------------------------


def _to_stage(plan, ops: Operands) -> list[tuple]:
    """The stored operands (see _stored) of a launch that TMA cannot read in place: a base,
    row stride or batch stride off the 16-byte grid, or a negative batch stride."""
    eb = element_bytes(plan.problem.dtype)
    return [x for x in _stored(plan.problem, ops) if not _readable(x, eb)]


def _copy_bytes(x: tuple, eb: int) -> int:
    """Bytes of an aligned copy of the stored operand ``x``: every matrix, rows padded to 16 bytes."""
    _, rows, cols, _, (n, _) = x
    return eb * n * rows * padded_ld(cols, eb)


def staged_workspace_bytes(plan, ops: Operands, choice: int = 0) -> int:
    """PrePass.workspace_bytes of the staging copy: the copies of the operands TMA cannot
    read, one after the other (each a multiple of 16 bytes long)."""
    eb = element_bytes(plan.problem.dtype)
    return sum(_copy_bytes(x, eb) for x in _to_stage(plan, ops))


def wgmma_staged_launches(
    plan, gpu, ops: Operands, alpha, beta, choice: int, workspace: int, report: int = 0
) -> tuple[list, tuple]:
    """PrePass.build of the staging copy: the launches that copy each operand TMA cannot
    read in place into the workspace at ``workspace`` (tf32_pack.cu, every matrix of the
    batch one after the other, rows padded to 16 bytes: 16-bit elements bit for bit by
    pack16, both operands in one launch; float32 rounded to TF32 by tf32_pack, one launch
    an operand), and wgmma's arguments on the copies.
    Built once per set of addresses by executor.Launcher, which enqueues the copies, then
    the kernel, on the caller's stream."""
    from ...runtime import compile as rt_compile
    from ...runtime.launch import LaunchShape

    eb = element_bytes(plan.problem.dtype)
    stored = list(_stored(plan.problem, ops))
    launches, copies, at = [], [], int(workspace)
    for i, (ptr, rows, cols, ld, (n, stride)) in enumerate(stored):
        if _readable(stored[i], eb):
            continue
        ldd = padded_ld(cols, eb)
        if eb == 2:  # both operands' copies in one launch, below
            copies.append(PackCopy(rows, cols, ptr, ld, at, ldd, n, stride))
        else:
            kernel = rt_compile.load_kernel(TF32_PACK_SOURCE, TF32_PACK_KERNELS[0], gpu.arch)
            shape = LaunchShape(
                (cdiv(rows, TF32_PACK_TILE) * cdiv(cols, TF32_PACK_TILE), 1, n), (TF32_PACK_THREADS, 1, 1)
            )
            launches.append((kernel, shape, pack_args(rows, cols, ptr, ld, at, ldd, stride)))
        at_next = at + _copy_bytes(stored[i], eb)
        stored[i] = (at, rows, cols, ldd, (n, rows * ldd if n > 1 else 0))
        at = at_next
    if copies:
        kernel = rt_compile.load_kernel(TF32_PACK_SOURCE, PACK16_KERNEL, gpu.arch)
        launches.append(pack_rows_launch(kernel, eb, copies))
    return launches, wgmma_args(plan, ops, alpha, beta, tuple(stored))


STAGING_WHAT = "wgmma, for an aligned copy of an operand TMA cannot read in place,"


SPEC = KernelSpec(
    name="wgmma",
    rung=4,
    family="tensor",
    dtypes=TC_DTYPES,
    source="tensor/04_wgmma.cu",
    template="gemmlab::wgmma_gemm",
    description="Hopper: TMA copies into a swizzled shared-memory ring (mbarriers), a producer warpgroup "
    "and BM/64 consumer warpgroups issuing wgmma from shared memory, persistent grid",
    params=(
        TileParam(
            "BM",
            (64, 128),
            128,
            "rows of C per block: BM/64 consumer warpgroups of 64 rows (TF32, which computes C^T: columns)",
        ),
        TileParam(
            "BN",
            (64, 128, 192, 256),
            256,
            "columns of C per block, the N of every wgmma (BN/2 accumulators per consumer thread; TF32: rows)",
        ),
        TileParam(
            "STAGES", (3, 4, 5, 8, 12), 4, "K-steps of A and B tiles (128 bytes of K each) in the shared-memory ring"
        ),
        TileParam(
            "CLUSTER",
            (1, 2),
            1,
            "blocks per cluster: 2 takes two vertically adjacent tiles whose B tile is read once and multicast to both",
        ),
        TileParam(
            "SPLITK",
            SPLITK_VALUES,
            1,
            "slices of K (products with few tiles and a long K; >1: each tile's last slice "
            "adds the other slices' FP32 partial tiles, (SPLITK-1)*BM*BN floats per tile in "
            "a workspace, in the kernel, then stores C as unsplit)",
        ),
    ),
    constraints=(
        Constraint(
            "dynamic shared memory, STAGES*(BM+BN)*128 + (BM/64)*16384 + 16*STAGES + 1024 bytes, must "
            "fit in the 227 KiB a Hopper block can have",
            lambda p: wgmma_smem(p) <= WGMMA_SMEM_LIMIT,
        ),
        Constraint(
            "BN = 64 runs without clusters (CLUSTER = 1): a cluster shares whole 64-column boxes of B "
            "between its blocks",
            lambda p: p["BN"] != 64 or p["CLUSTER"] == 1,
        ),
        Constraint(
            "BN = 192 runs without clusters (CLUSTER = 1): its three 64-column boxes of B do not split "
            "evenly between the two blocks of a cluster",
            lambda p: p["BN"] != 192 or p["CLUSTER"] == 1,
        ),
        Constraint(
            "BN = 192 is for 16-bit inputs: TF32 has BN = 64, 128 or 256 (no m64n192 TF32 wgmma is wrapped)",
            lambda p: p["BN"] != 192,
            dtypes=("tf32",),
        ),
    ),
    template_args=_template_args,
    geometry=_geometry,
    variants=TC_VARIANTS,
    arches=(WGMMA_SM90,),
    needs=HOPPER_NEEDS,
    # 16-bit: every layout (each operand K- or MN-major in shared memory, as stored);
    # TF32: NN only, which _unusable says.
    layouts=LAYOUTS,
    unusable=_unusable,
    fallback="mma_pipelined",
    rules=Rules(offer=_auto_hook, band=_band_hook, stage=_staging_hook),
    # The persistent loop's work items are (matrix, slice of K, tile); the kernel adds the
    # slices up itself.
    split_k_param="SPLITK",
    launching=Launching(
        split_fixup=wgmma_split_workspace,
        kernel_args=wgmma_kernel_args,
        epilogue_bias=wgmma_epilogue_bias,
        # Operands TMA cannot read in place: copied to the 16-byte grid first (16-bit where the
        # plan stages them, TF32 always), on a workspace of the caller's stream.
        staging=PrePass(workspace_bytes=staged_workspace_bytes, build=wgmma_staged_launches, what=STAGING_WHAT),
        # One launch per batch (chunk): the persistent loop walks every matrix's tiles.
        batched_args=True,
    ),
)
