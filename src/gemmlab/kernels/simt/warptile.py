"""Rung 7, 07_warptile.cu: block tile -> warp tiles -> per-thread TM x 4 subtiles.

The warp-tile parameters and rules are shared with rung 8 (pipelined.py), which
adds stages, split-K and its own shared-memory formula.
"""

from __future__ import annotations

from ..spec import Constraint, KernelSpec, Launch, TileParam, tiles
from .vectorized import ALIGNED_VARIANTS


def warptile_shape(p) -> tuple[int, int, int, int] | None:
    """(threads, WMITER, WSUBM, WSUBN) for warptile parameters, or None if they do not divide."""
    tn = 4
    threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32
    per_iter = 32 * p["TM"] * tn * p["WNITER"]
    if (p["WM"] * p["WN"]) % per_iter:
        return None
    wmiter = p["WM"] * p["WN"] // per_iter
    if wmiter == 0 or p["WM"] % wmiter or p["WN"] % p["WNITER"]:
        return None
    return threads, wmiter, p["WM"] // wmiter, p["WN"] // p["WNITER"]


def warptile_threads(p) -> int:
    return (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32


def warptile_params(d: dict, edges=(64, 128), wniter=(1, 2, 4)) -> tuple[TileParam, ...]:
    """Tile parameters of the warp-tiled rungs; ``d`` holds the rung's defaults,
    ``edges`` the block-tile sizes and ``wniter`` the subtile counts it takes."""
    return (
        TileParam("BM", edges, d["BM"], "rows of C per block"),
        TileParam("BN", edges, d["BN"], "columns of C per block"),
        TileParam("BK", (8, 16), d["BK"], "depth of the K slice staged in shared memory per step"),
        TileParam("WM", (32, 64), d["WM"], "rows of C per warp"),
        TileParam("WN", (32, 64), d["WN"], "columns of C per warp"),
        TileParam("WNITER", wniter, d["WNITER"], "warp subtiles along N (WMITER follows from the rest)"),
        TileParam("TM", (4, 8), d["TM"], "rows per thread subtile (its width is 4: one float4)"),
    )


def warptile_constraints(
    smem_bytes, smem_rule: str, smem_limit: int = 48 * 1024, staged_registers: bool = True
) -> tuple[Constraint, ...]:
    """The warp-tiled rungs' rules; ``smem_bytes(p)`` is the rung's shared memory, which
    must stay within ``smem_limit`` (``smem_rule`` says so in words)."""
    rules = (
        Constraint(
            "WM must divide BM and WN must divide BN", lambda p: p["BM"] % p["WM"] == 0 and p["BN"] % p["WN"] == 0
        ),
        Constraint(
            "threads per block, (BM/WM)*(BN/WN)*32, must be between 64 and 512",
            lambda p: 64 <= warptile_threads(p) <= 512,
        ),
        Constraint(
            "a warp tile must split into WMITER x WNITER subtiles of 32 threads' TM x 4 tiles: "
            "WM*WN divisible by 32*TM*4*WNITER, and (WSUBM/TM)*(WSUBN/4) == 32",
            lambda p: (
                (sh := warptile_shape(p)) is not None
                and sh[2] % p["TM"] == 0
                and sh[3] % 4 == 0
                and (sh[2] // p["TM"]) * (sh[3] // 4) == 32
            ),
        ),
        Constraint(
            "the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads",
            lambda p: (
                (p["BM"] * p["BK"] // 4) % warptile_threads(p) == 0
                and (p["BK"] * p["BN"] // 4) % warptile_threads(p) == 0
            ),
        ),
        Constraint(smem_rule, lambda p: smem_bytes(p) <= smem_limit),
    )
    if staged_registers:  # tiles pass through registers on their way to shared memory
        rules += (
            Constraint(
                "each thread may stage at most 16 elements of A and B per K step, "
                "(BM*BK + BK*BN)/threads <= 16 (more runs out of registers)",
                lambda p: p["BK"] * (p["BM"] + p["BN"]) <= 16 * warptile_threads(p),
            ),
        )
    return rules


SPEC = KernelSpec(
    name="warptile",
    rung=7,
    family="simt",
    dtypes=("float32",),
    source="simt/07_warptile.cu",
    template="gemmlab::warptile",
    description="block tile -> warp tiles -> per-thread TM x 4 subtiles; conflict-free shared reads",
    # Defaults: the fastest of the 71 configurations then legal at 4096^3 on an H200.
    params=warptile_params(dict(BM=128, BN=128, BK=16, WM=64, WN=32, WNITER=4, TM=4)),
    constraints=warptile_constraints(
        lambda p: 4 * p["BK"] * (p["BM"] + p["BN"]), "shared memory, 4*BK*(BM+BN) bytes, must fit in 48 KiB"
    )
    + (
        Constraint(
            "at most 64 accumulators per thread, WM*WN/32 <= 64 (with 128, the scalar variant's "
            "staged copies and the batch pointers outgrow 255 registers)",
            lambda p: p["WM"] * p["WN"] <= 2048,
        ),
    ),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["WM"], p["WN"], p["WNITER"], p["TM"], prob.aligned16),
    geometry=lambda p, prob: Launch(grid=(tiles(prob, p["BM"], p["BN"]), 1, 1), block=(warptile_threads(p), 1, 1)),
    variants=ALIGNED_VARIANTS,
)
