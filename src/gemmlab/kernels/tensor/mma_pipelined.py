"""Tensor rung 3, 03_mma_pipelined.cu: mma.sync as inline PTX, ldmatrix from swizzled
shared memory, a STAGES-deep cp.async pipeline."""

from __future__ import annotations

from ..cost import Estimate, Machine, Tile, best, predict
from ..spec import LAYOUTS, Ask, Constraint, KernelSpec, Launch, Offer, Problem, Rules, TileParam, cdiv, tiles
from .wmma import TC_DTYPES, TC_MIN_ARCH, TC_VARIANTS, tc_type_args
from .wmma_warptile import tc_threads

MMA_SMEM_LIMIT = 160 * 1024

# Every tensor-core dtype pair, each with 16-byte copies (aligned operands) and
# with narrow ones (any alignment and leading dimension).
TC_VARIANTS_ALIGNED = TC_VARIANTS + tuple(Problem(1, 1, 1, False, p.dtype, p.out_dtype) for p in TC_VARIANTS)


# The two block shapes sized_params chooses between, as the cost model sees them: each
# tile's share of the SM's tensor peak at full occupancy (rounded from measurements,
# benchmarks/NOTES.md) and the blocks an SM holds (64 x 64: 4 blocks of 128 threads, by
# their registers; 128 x 256: one block of 256 threads at up to 255 registers).
SMALL_TILE = {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 4}
SMALL_COST = Tile(64, 64, 32, 0.30, blocks_per_sm=4, label="64x64")
LARGE_COST = Tile(128, 256, 64, 0.55, label="128x256")


def sized_estimates(M: int, N: int, K: int, sm_count: int, batch: int = 1) -> tuple[Estimate, Estimate]:
    """The cost model's estimates of the defaults (128 x 256) and of 64 x 64 tiles."""
    machine = Machine(sm_count)
    return (predict(M, N, K, LARGE_COST, machine, batch=batch), predict(M, N, K, SMALL_COST, machine, batch=batch))


def sized_choice(M: int, N: int, K: int, sm_count: int, batch: int = 1) -> tuple[dict, str]:
    """sized_params with the reason: the measured rule -- the defaults (128 x 256 x 64
    tiles) where they give at least half of the SMs a block, else 64 x 64 tiles, eight
    times as many (measured in FP16 on an H100: benchmarks/NOTES.md) -- unless the cost
    model predicts the other tile faster by more than its margin (kernels/cost.best).
    That happens on batches of small or odd matrices, where a 128 x 256 tile is mostly
    waste: attention's P @ V at 197 tokens and head dimension 64 uses 19% of two such
    tiles per matrix, and 77% of four 64 x 64 ones."""
    large, small = sized_estimates(M, N, K, sm_count, batch)
    rule = large if 2 * cdiv(M, LARGE_COST.bm) * cdiv(N, LARGE_COST.bn) * batch >= sm_count else small
    chosen = best((large, small), incumbent=rule)
    why = f"{chosen} against {large if chosen is small else small}"
    why = (
        f"cost model over the tile-count rule: {why}"
        if chosen is not rule
        else f"the tile-count rule, kept by the cost model: {why}"
    )
    return ({} if chosen is large else dict(SMALL_TILE)), why


def sized_params(M: int, N: int, K: int, sm_count: int, batch: int = 1) -> dict:
    """mma_pipelined's tiles for a problem (kernel="auto" and wgmma's fallback): see sized_choice."""
    return sized_choice(M, N, K, sm_count, batch)[0]


def _auto_hook(ask: Ask) -> Offer:
    """16-bit and TF32 where wgmma does not run: always takes the product, its tiles sized
    by sized_choice."""
    params, why = sized_choice(ask.M, ask.N, ask.K, ask.sm_count, ask.batch)
    return Offer(params, why)


def _unusable(prob: Problem) -> str | None:
    if prob.dtype == "tf32" and (prob.op_a, prob.op_b) != ("N", "N"):
        return (
            f"its TF32 path reads row-major a and b (NN) only, not {prob.op_a}{prob.op_b}: there is no "
            f"32-bit ldmatrix.trans to hand out the fragments of a transposed operand"
        )
    return None


def mma_smem(p) -> int:
    """Dynamic shared memory of 03_mma_pipelined.cu: STAGES stages of an A tile
    (BM rows of 2*BK bytes) and a B tile (2*BK bytes of K, BN columns)."""
    return p["STAGES"] * 2 * p["BK"] * (p["BM"] + p["BN"])


SPEC = KernelSpec(
    name="mma_pipelined",
    rung=3,
    family="tensor",
    dtypes=TC_DTYPES,
    source="tensor/03_mma_pipelined.cu",
    template="gemmlab::mma_pipelined",
    description="mma.sync m16n8k16/m16n8k8 as inline PTX, ldmatrix from XOR-swizzled shared memory, "
    "STAGES-deep cp.async pipeline",
    params=(
        TileParam("BM", (64, 128, 256), 128, "rows of C per block"),
        TileParam("BN", (64, 128, 256), 256, "columns of C per block"),
        TileParam(
            "BK",
            (32, 64),
            64,
            "depth of a stage in 16-bit elements (TF32: BK/2 floats, the same 2*BK bytes per row of A)",
        ),
        TileParam("WM", (32, 64), 64, "rows of C per warp (WM/16 MMA tiles)"),
        TileParam("WN", (32, 64), 64, "columns of C per warp (WN/8 MMA tiles)"),
        TileParam("STAGES", (3, 4), 3, "K-steps of tiles in shared memory (cp.async in flight)"),
    ),
    constraints=(
        Constraint(
            "WM must divide BM and WN must divide BN", lambda p: p["BM"] % p["WM"] == 0 and p["BN"] % p["WN"] == 0
        ),
        Constraint(
            "square warp tiles, WM == WN: for a number of accumulators, the square tile loads the "
            "fewest fragments per MMA",
            lambda p: p["WM"] == p["WN"],
        ),
        Constraint(
            "64 x 64 warp tiles in blocks of 8 warps, (BM/64)*(BN/64) == 8: with 4 warps each thread "
            "issues 8 copies per stage, whose addresses do not fit beside 128 accumulators and two "
            "K-steps of fragments (spills)",
            lambda p: p["WM"] != 64 or tc_threads(p) == 256,
        ),
        Constraint(
            "32 x 32 warp tiles only in a 64 x 64 block of 4 warps (they load twice the fragments per "
            "MMA of 64 x 64 ones; the small block is for problems with too few tiles to fill the GPU)",
            lambda p: p["WM"] != 32 or p["BM"] == p["BN"] == 64,
        ),
        Constraint(
            "dynamic shared memory, STAGES*2*BK*(BM+BN) bytes, must fit in 160 KiB (an A100 "
            "gives a block up to 163 KiB)",
            lambda p: mma_smem(p) <= MMA_SMEM_LIMIT,
        ),
    ),
    # Defaults: the fastest at 4096^3 and beyond of the configurations measured on an H100
    # (benchmarks/NOTES.md); 256 x 128 x 64 came close.
    template_args=lambda p, prob: (
        tc_type_args(prob) + (p["BM"], p["BN"], p["BK"], p["WM"], p["WN"], p["STAGES"], prob.aligned16)
    ),
    geometry=lambda p, prob: Launch(
        grid=(tiles(prob, p["BM"], p["BN"]), 1, 1), block=(tc_threads(p), 1, 1), smem_bytes=mma_smem(p)
    ),
    variants=TC_VARIANTS_ALIGNED,
    # 16-bit: every layout, as stored (ldmatrix or ldmatrix.trans); TF32: NN only, which _unusable says.
    layouts=LAYOUTS,
    unusable=_unusable,
    fallback="wmma_warptile",
    rules=Rules(offer=_auto_hook, size=sized_params, size_choice=sized_choice),
    min_arch=TC_MIN_ARCH,
    fragment_maps=True,
    needs="mma.sync m16n8k16 (FP16, BF16) and m16n8k8 (TF32), and cp.async: sm_80; ldmatrix: sm_75",
)
