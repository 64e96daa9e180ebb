"""Rung 5, 05_blocktile_2d.cu: a TM x TN register tile per thread.

Its tile parameters, rules and launch shape are shared with rung 6 (vectorized.py),
which reads the same tiles with float4s.
"""

from __future__ import annotations

from ..spec import Constraint, KernelSpec, Launch, TileParam, tiles
from .blocktile_1d import SMEM_RULE


def threads_2d(p) -> int:
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def tile_2d_params(bm, bn, bk, tm, tn) -> tuple[TileParam, ...]:
    """The 2-D block-tile parameters, with a rung's own defaults (chosen by
    `gemmlab bench --all-configs` on an H200; see benchmarks/NOTES.md)."""
    return (
        TileParam("BM", (64, 128), bm, "rows of C per block"),
        TileParam("BN", (64, 128), bn, "columns of C per block"),
        TileParam("BK", (8, 16), bk, "depth of the K slice staged in shared memory per step"),
        TileParam("TM", (4, 8), tm, "rows of C per thread"),
        TileParam("TN", (4, 8), tn, "columns of C per thread"),
    )


def constraints_2d(vec: bool) -> tuple[Constraint, ...]:
    """The 2-D rungs' rules; ``vec``: tiles are copied in float4s (rung 6)."""
    per = 4 if vec else 1
    return (
        Constraint(
            "TM must divide BM and TN must divide BN", lambda p: p["BM"] % p["TM"] == 0 and p["BN"] % p["TN"] == 0
        ),
        Constraint(
            "threads per block, (BM/TM)*(BN/TN), must be between 32 and 512 (1024 caps registers "
            "at 64, which the batch's pointers push into spills)",
            lambda p: 32 <= threads_2d(p) <= 512,
        ),
        Constraint(
            (
                "the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads"
                if vec
                else "the A tile BM*BK and the B tile BK*BN must split evenly over the threads"
            ),
            lambda p: (
                (p["BM"] * p["BK"] // per) % threads_2d(p) == 0 and (p["BK"] * p["BN"] // per) % threads_2d(p) == 0
            ),
        ),
        Constraint(
            "each thread may stage at most 16 elements of A and B per K step, "
            "(BM*BK + BK*BN)/threads <= 16 (more runs out of registers)",
            lambda p: p["BK"] * (p["BM"] + p["BN"]) <= 16 * threads_2d(p),
        ),
        SMEM_RULE,
    )


def geometry_2d(p, prob):
    return Launch(grid=(tiles(prob, p["BM"], p["BN"]), 1, 1), block=(threads_2d(p), 1, 1))


SPEC = KernelSpec(
    name="blocktile_2d",
    rung=5,
    family="simt",
    dtypes=("float32",),
    source="simt/05_blocktile_2d.cu",
    template="gemmlab::blocktile_2d",
    description="each thread computes a TM x TN register tile as outer products of shared-memory fragments",
    params=tile_2d_params(64, 64, 16, 8, 4),
    constraints=constraints_2d(vec=False),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]),
    geometry=geometry_2d,
)
