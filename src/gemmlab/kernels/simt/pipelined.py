"""Rung 8, 08_pipelined.cu: rung 7 with STAGES-deep cp.async copies, and split-K.

Split-K's second half, the reduction of the partial products, is splitk_reduce.py.
"""

from __future__ import annotations

from ..cost import Estimate, Machine, best, copy_time
from ..spec import Ask, Constraint, KernelSpec, Launching, Launch, Offer, Problem, Rules, TileParam, cdiv, tiles
from .pipelined_cost import Shape, estimate
from .staging import PREPASS
from .vectorized import ALIGNED_VARIANTS
from .warptile import warptile_constraints, warptile_params, warptile_threads

# Split-K factors the rung may use; the launch shape, not the compiled code, changes.
SPLITK_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)
# Splits past SHALLOW_SPLIT_MAX pay off only on few tiles over a very long K (a small layer's
# weight gradient over 10^5 positions); where slices are a few hundred values of K long, the
# extra partial tiles cost more than the SMs they fill.  So auto takes them where every slice
# keeps DEEP_SPLIT_MIN_K values of K, on this rung only: wgmma's last slice adds the others one
# after another, and its and gemv's rules stop at SHALLOW_SPLIT_MAX (benchmarks/NOTES.md).
SHALLOW_SPLIT_MAX = 16
DEEP_SPLIT_MIN_K = 1024
# The splits offered by the rungs whose deeper splits have not run on a GPU (gemv, ec_wgmma).
SHALLOW_SPLITK_VALUES = tuple(s for s in SPLITK_VALUES if s <= SHALLOW_SPLIT_MAX)


def auto_may_split(splits: int, K: int) -> bool:
    """Whether auto may cut K into ``splits`` slices by the rule above (the K-step floors aside)."""
    return splits <= SHALLOW_SPLIT_MAX or K >= DEEP_SPLIT_MIN_K * splits


def fill_split(tiles: int, k_steps: int, sm_count: int, *, most: int, min_steps: int) -> int:
    """The split of K that fills the SMs with ``tiles`` blocks (or work items) of
    ``k_steps`` K-steps each: the largest of SPLITK_VALUES up to ``most`` that keeps
    tiles * split within ``sm_count`` and every slice at least ``min_steps`` K-steps
    long; 1 where none does.  The rules of rung 8 (planner) and of wgmma share it;
    when to split at all is theirs."""
    return max(s for s in SPLITK_VALUES if s == 1 or s <= most and tiles * s <= sm_count and k_steps >= min_steps * s)


# Dynamic shared memory a configuration may ask for: within every supported GPU's
# opt-in limit (sm_80: 163 KB, sm_90: 227 KB), and small enough for two blocks per
# SM on Hopper.
PIPELINED_SMEM_LIMIT = 96 * 1024


def pipelined_smem(p, prob: Problem | None = None) -> int:
    """Dynamic shared memory of 08_pipelined.cu: STAGES K-major tiles of A (rows
    padded by 4) and B (rows padded by 4 when B is column-major; without a
    problem, the larger size, which the legality rule uses)."""
    b_pad = 4 if prob is None or prob.op_b == "T" else 0
    return 4 * p["STAGES"] * (p["BK"] * (p["BM"] + 4) + p["BK"] * (p["BN"] + b_pad))


def off_grid(x: Problem | Ask) -> list[str]:
    """The operands, of "A" and "B", whose stored rows are not all on the 16-byte grid in whole
    groups of 4 floats (staging.on_grid's rule, asked of the problem instead of the pointers)."""
    width = {"A": x.K if x.op_a == "N" else x.M, "B": x.N if x.op_b == "N" else x.K}
    return [o for o in "AB" if not (x.aligned16 or x.rows_on_grid(o) and width[o] % 4 == 0)]


def reads_16_bytes(x: Problem | Ask) -> bool:
    """Whether the kernel reads A and B 16 bytes at a time (its VEC): copies of them on the
    16-byte grid (a Problem's ``stage``), or both on the grid (off_grid).  C does not count:
    the kernel checks its rows itself."""
    return getattr(x, "stage", False) or not off_grid(x)


def c_on_grid(x: Problem | Ask) -> bool:
    """Whether C's rows are on the 16-byte grid (the kernel's 16-byte stores): aligned16 says so
    of every operand, widths included."""
    return x.aligned16 or x.rows_on_grid("C") and x.N % 4 == 0


def c_through_smem(p, op_b: str = "N") -> bool:
    """Whether tile ``p`` stores a C off the grid through shared memory (08_pipelined.cu: where
    the warps' subtiles fit in the ring, and not for the 128-thread tiles of 64 x 128 elements,
    already at 255 registers), else 4 bytes at a time from the registers."""
    threads = warptile_threads(p)
    wmiter = p["WM"] * p["WN"] // (32 * p["TM"] * 4 * p["WNITER"])
    region = (p["WM"] // wmiter) * (p["WN"] // p["WNITER"] + 1)
    ring = p["STAGES"] * p["BK"] * (p["BM"] + 4 + p["BN"] + (4 if op_b == "T" else 0))
    room = not (threads == 128 and p["BM"] * p["BN"] == 64 * 128)
    return room and threads // 32 * region <= ring


def stage_c(p, prob: Problem | Ask) -> bool:
    """The kernel's STAGE_C: the 16-byte variant (reads_16_bytes) with C off the grid stores C
    through shared memory where the tile has room for it (c_through_smem), as the 4-byte
    variant does; compiled only into the instantiations that need it."""
    return reads_16_bytes(prob) and not c_on_grid(prob) and c_through_smem(p, prob.op_b)


def _reg_transpose(p, prob: Problem) -> int:
    """REG_TRANSPOSE where it changes the code (an aligned operand whose rows run
    along K), else 0: one instantiation, not two of the same code."""
    along_k = prob.op_a == "N" or prob.op_b == "T"
    return p["REG_TRANSPOSE"] if reads_16_bytes(prob) and along_k else 0


def _params(d: dict) -> tuple[TileParam, ...]:
    """Rung 7's parameters plus stages and split-K.  256-row/column block tiles too:
    the copies need no staging registers, so one block of 256 threads can hold 128
    accumulators each."""
    return warptile_params(d, edges=(64, 128, 256), wniter=(2, 4)) + (
        TileParam("STAGES", (2, 3, 4), d["STAGES"], "K-steps of tiles in shared memory (cp.async in flight)"),
        TileParam(
            "REG_TRANSPOSE",
            (0, 1),
            d["REG_TRANSPOSE"],
            "how a tile whose rows run along K (row-major A, column-major B) is transposed into "
            "shared memory: 0, a 4-byte cp.async per element; 1, 16-byte loads through registers, "
            "stored after the K-step's math (16-byte aligned operands; else as 0)",
        ),
        TileParam(
            "SPLITK",
            SPLITK_VALUES,
            d["SPLITK"],
            "blocks per output tile, each summing a slice of K (split-K, for skinny outputs "
            "with long K; >1 adds a reduction kernel and a workspace of SPLITK*M*N floats)",
        ),
    )


# The 128 x 256 tile's warp tiling and stages by layout, over the defaults (TN): a row-major A
# transposed on its way in (NN) runs fastest with 2 stages, and with B column-major (NT, TT) with
# a thread's 8 x 16 outputs taken as 16 x 8 (WNITER = 2, TM = 4) over 2 stages.  Measured by
# kernel time on an H200's products of the shapes suite (benchmarks/NOTES.md, 2026-12-01).
_B_ALONG_K = {"WNITER": 2, "TM": 4, "STAGES": 2}
LAYOUT_TILING = {"NN": {"STAGES": 2}, "NT": _B_ALONG_K, "TT": _B_ALONG_K}


def layout_defaults(op_a: str = "N", op_b: str = "N") -> dict:
    """The spec's defaults with LAYOUT_TILING's changes for the layout op(A), op(B)."""
    return {**SPEC.defaults(), **LAYOUT_TILING.get(op_a + op_b, {})}


# pipelined's tiles for a side of at most 64: the H100 table's winners at 8192x64x8192 and 64x8192x8192,
# with rows along K transposed through registers (faster in NN and NT on an H100: benchmarks/NOTES.md).
SKINNY_N = {"BM": 128, "BN": 64, "BK": 16, "WM": 32, "WN": 64, "WNITER": 2, "TM": 8, "STAGES": 3, "REG_TRANSPOSE": 1}
SKINNY_M = {"BM": 64, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 4, "TM": 4, "STAGES": 3, "REG_TRANSPOSE": 1}
MIN_K_STEPS_PER_SPLIT = 4  # the tuner's rule: a split-K slice has at least 4 K-steps


def auto_params(
    M: int, N: int, K: int, sm_count: int, batch: int = 1, op_a: str = "N", op_b: str = "N"
) -> tuple[str, dict]:
    """The tile-count rule: what ``kernel="auto"`` took for FP32 on a GPU without a
    tuned table before the cost model, and the incumbent it weighs (auto_choice).

    Rung 8, pipelined, at its defaults for the layout (128 x 256 tiles: the tuner's winner at
    every shape from 2048^3 up on an H100 and an H200; 128 x 64 or 64 x 128 where
    a side is at most 64), split over K where its
    tiles leave more than half of the SMs idle: the largest split of at most 4
    that keeps the blocks within the SMs and every slice at least 4 K-steps long
    (the tuned tables split by 4 at 1024^3 and 256x4096x4096).  The earlier rule
    (warptile, or vectorized 64x64) was slower on every shape measured
    (benchmarks/NOTES.md).  A batch of
    ``batch`` products counts as that many times the tiles.
    """
    params = layout_defaults(op_a, op_b)
    if min(M, N) <= 64:  # a skinny side: a tile 64 wide there (the tuned tables' choice for 8192x64x8192)
        params.update(SKINNY_N if N <= M else SKINNY_M)
    tiles = -(-M // params["BM"]) * -(-N // params["BN"]) * batch
    steps = -(-max(K, 1) // params["BK"])
    if 2 * tiles < sm_count:
        params["SPLITK"] = fill_split(tiles, steps, sm_count, most=4, min_steps=MIN_K_STEPS_PER_SPLIT)
    return "pipelined", params


# The block tiles the cost model weighs besides the incumbent's (each at every split of
# SPLITK_VALUES whose slices keep MIN_K_STEPS_PER_SPLIT K-steps): the layout's defaults, the
# skinny tiles, a 128 x 128 tile 16 deep (the H100 table's winner at its TN weight gradients;
# on an H200's products of the shapes suite faster than the 8-deep 128 x 128 tile in every
# layout, benchmarks/NOTES.md), and tune-run32.json's fastest 64 x 64 configuration on an H200
# (at 512^3, 1024^3 and 256x4096x4096), with rows along K through registers (faster for
# 16-deep and 64-row tiles, benchmarks/NOTES.md run 87a).
TILE_128 = {"BM": 128, "BN": 128, "BK": 16, "WM": 32, "WN": 64, "WNITER": 2, "TM": 8, "STAGES": 4, "REG_TRANSPOSE": 1}
TILE_64 = {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4, "STAGES": 4, "REG_TRANSPOSE": 1}
SIZED_TILES = ({}, TILE_128, SKINNY_N, SKINNY_M, TILE_64)


def _estimate(ask: Ask, p: dict, staged: bool = False):
    # The loads as the operands allow; a C off the grid through shared memory where the tile has
    # room, in either variant (the 16-byte one compiled with STAGE_C).
    smem_c = c_through_smem(p, ask.op_b)
    return estimate(
        ask.M,
        ask.N,
        ask.K,
        p["BM"],
        p["BN"],
        p["BK"],
        p["SPLITK"],
        ask.sm_count,
        Shape(ask.batch, staged or reads_16_bytes(ask), ask.op_b == "T", c_on_grid(ask), ask.op_a == "T", smem_c),
    )


def _splits(ask: Ask, p: dict) -> list[int]:
    """The splits of K a tile may take: slices of at least MIN_K_STEPS_PER_SPLIT K-steps, more
    than SHALLOW_SPLIT_MAX only as auto_may_split allows, and none for a batch whose tiles fill
    the SMs by themselves (choose() would undo it)."""
    if ask.batch > 1 and cdiv(ask.M, p["BM"]) * cdiv(ask.N, p["BN"]) * ask.batch >= ask.sm_count:
        return [1]
    steps = cdiv(max(ask.K, 1), p["BK"])
    return [s for s in SPLITK_VALUES if s == 1 or steps >= MIN_K_STEPS_PER_SPLIT * s and auto_may_split(s, ask.K)]


def auto_choice(
    ask: Ask, incumbent: dict | None = None, what: str = "the tile-count rule", staged: bool = False
) -> tuple[dict, str]:
    """Rung 8's tiles and split of K for ``kernel="auto"``, with why: ``incumbent`` (``what``
    chose it: the tuned table's nearest entry; default auto_params' rule) unless the cost
    model (pipelined_cost) predicts another tile or split faster by more than its margin
    (kernels/cost.best).  That happens where a few large tiles leave most SMs idle: 128 x
    768 x 30522 on 128 x 256 tiles is 3 tiles (24 blocks split 8) on 132 SMs, where 64 x 64
    tiles split 16 give 384 blocks.  ``staged``: as if A and B were read from copies on the
    16-byte grid (staging_choice)."""
    if incumbent is not None:
        rule = dict(incumbent)
    else:
        rule = auto_params(ask.M, ask.N, ask.K, ask.sm_count, ask.batch, ask.op_a, ask.op_b)[1]
    if not (ask.M and ask.N and ask.batch):
        return rule, ""
    full = SPEC.resolve(rule)
    kept = _estimate(ask, full, staged)
    options = []
    for tile in SIZED_TILES:
        base = {**layout_defaults(ask.op_a, ask.op_b), **tile}
        if (base["BM"], base["BN"]) == (full["BM"], full["BN"]):
            base = full  # the incumbent's own tile: its configuration, other splits
        options += [
            (_estimate(ask, p, staged), p) for p in ({**base, "SPLITK": s} for s in _splits(ask, base)) if p != full
        ]
    if not options:
        return rule, ""
    fastest, params = min(options, key=lambda o: o[0].seconds)
    if best([fastest], incumbent=kept) is kept:
        return rule, f"{what}, kept by the cost model: {kept} against {fastest}"
    return params, f"cost model over {what}: {fastest} against {kept}"


# pack32's share of the DRAM bandwidth (its loads are 4 bytes, its stores 16), as wgmma's
# pack16 is given.
PACK32_EFFICIENCY = 0.6


def _staged_estimate(ask: Ask, params: dict) -> Estimate:
    """The product on copies of its operands off the 16-byte grid (by rung 8's rule, a width
    off it too, which TMA's rules behind a plan's ``stage_bytes`` allow), the copy included."""
    stage_bytes = sum(4 * ask.K * (ask.M if o == "A" else ask.N) for o in off_grid(ask))
    copy = copy_time(stage_bytes, Machine(ask.sm_count), PACK32_EFFICIENCY)
    gemm = _estimate(ask, params, staged=True)
    return Estimate(
        gemm.seconds + copy,
        lambda: f"a copy of {stage_bytes / 2**20:.1f} MiB to the 16-byte grid ({copy * 1e6:.1f} us), then {gemm}",
    )


def predicted_time(ask: Ask, params: dict, staged: bool = False) -> Estimate:
    """Rules.time: the call's predicted time with these (resolved) parameters."""
    return _staged_estimate(ask, params) if staged else _estimate(ask, params)


def staging_choice(ask: Ask, stage_bytes: int) -> tuple[dict | None, str]:
    """Rules.stage: whether a float32 product whose A or B the kernel would read 4
    bytes at a time runs faster on copies of them on the 16-byte grid (staging.py's pack32) by
    the cost model: (the tiles for the copies, why), or (None, why not); (None, "") where the
    kernel reads them 16 bytes at a time already.  A batch is not staged (one launch a matrix).
    The bytes copied are counted here by rung 8's rule; ``stage_bytes`` (TMA's) is not used."""
    if ask.dtype != "float32" or reads_16_bytes(ask) or not (ask.M and ask.N and ask.K):
        return None, ""
    if ask.batch > 1:
        return None, "rung 8 stages one matrix a launch, so a batch reads its operands as they are"
    here, _ = auto_choice(ask)
    as_they_are = _estimate(ask, SPEC.resolve(here))
    params, _ = auto_choice(ask, staged=True)
    staged = _staged_estimate(ask, SPEC.resolve(params))
    if best([staged], incumbent=as_they_are) is as_they_are:
        return None, f"staging would take {staged}, no faster than {as_they_are} on the operands as they are"
    return params, f"cost model: {staged} against {as_they_are} on the operands as they are"


def _auto_hook(ask: Ask) -> Offer:
    """FP32 (no tuned table answering): always takes the product, its tiles and split by
    auto_choice."""
    return Offer(*auto_choice(ask))


SPEC = KernelSpec(
    name="pipelined",
    rung=8,
    family="simt",
    dtypes=("float32",),
    source="simt/08_pipelined.cu",
    template="gemmlab::pipelined",
    description="warptile with STAGES-deep cp.async global->shared copies overlapping the math",
    # Defaults: the tuner's winner at 4096^3, 8192^3 and 16384x4096x4096 on both an H200 and
    # an H100, with REG_TRANSPOSE 1 (benchmarks/NOTES.md); kernel="auto" changes their warp
    # tiling and stages by layout (LAYOUT_TILING).
    params=_params(dict(BM=128, BN=256, BK=8, WM=64, WN=64, WNITER=4, TM=8, STAGES=4, REG_TRANSPOSE=1, SPLITK=1)),
    constraints=warptile_constraints(
        pipelined_smem,
        "dynamic shared memory, 4*STAGES*BK*(BM+4 + BN+4) bytes, must fit in 96 KiB",
        PIPELINED_SMEM_LIMIT,
        staged_registers=False,
    )
    + (
        Constraint(
            "at most 64 accumulators per thread, WM*WN/32 <= 64, except with 256 threads "
            "and 64 x 64 warp tiles (128: one such block fills the register file, and its 8 warps "
            "keep the SM busy)",
            lambda p: p["WM"] * p["WN"] <= 2048 or warptile_threads(p) == 256,
        ),
        Constraint(
            "at least 128 threads per block (with 64, a block's copies and fragments of "
            "4 stages outgrow the registers of its unaligned-input variant)",
            lambda p: warptile_threads(p) >= 128,
        ),
        Constraint(
            "a block tile with 256 rows or columns needs 256 threads (8 warps of 64 x 64; "
            "others fall short of the registers or the warps) and BK = 8 (at BK = 16 its variant "
            "for unaligned inputs, which copies 4 bytes at a time, runs out of registers)",
            lambda p: (
                max(p["BM"], p["BN"]) < 256
                or (p["WM"] == p["WN"] == 64 and warptile_threads(p) == 256 and p["BK"] == 8)
            ),
        ),
    ),
    template_args=lambda p, prob: (
        p["BM"],
        p["BN"],
        p["BK"],
        p["WM"],
        p["WN"],
        p["WNITER"],
        p["TM"],
        p["STAGES"],
        _reg_transpose(p, prob),
        reads_16_bytes(prob),
        stage_c(p, prob),
    ),
    geometry=lambda p, prob: Launch(
        grid=(tiles(prob, p["BM"], p["BN"]), p["SPLITK"], 1),
        block=(warptile_threads(p), 1, 1),
        smem_bytes=pipelined_smem(p, prob),
    ),
    # ALIGNED_VARIANTS, and operands copied to the grid beside a C off it (STAGE_C).
    variants=ALIGNED_VARIANTS + (Problem(4, 1, 4, False, stage=True),),
    split_k_param="SPLITK",
    rules=Rules(offer=_auto_hook, weigh=auto_choice, stage=staging_choice, time=predicted_time),
    # cuda_pipeline.h's copies are cp.async from sm_80; on sm_75 they pass through registers.
    needs="cp.async (sm_80) for asynchronous copies; on sm_75 the copies are synchronous",
    launching=Launching(staging=PREPASS),
)
