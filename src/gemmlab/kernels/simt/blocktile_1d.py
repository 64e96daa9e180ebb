"""Rung 4, 04_blocktile_1d.cu: BM x BN block tiles, TM outputs of a column per thread.

The first rung whose tiles (4*BK*(BM+BN) bytes of float) must fit in the 48 KiB of
static shared memory; the 2-D rungs reuse that rule.
"""

from __future__ import annotations

from ..spec import Constraint, KernelSpec, Launch, TileParam, tiles


def smem_fits(p) -> bool:
    return 4 * p["BK"] * (p["BM"] + p["BN"]) <= 48 * 1024


SMEM_RULE = Constraint("shared memory, 4*BK*(BM+BN) bytes, must fit in 48 KiB", smem_fits)


def _threads(p) -> int:
    return (p["BM"] // p["TM"]) * p["BN"]


SPEC = KernelSpec(
    name="blocktile_1d",
    rung=4,
    family="simt",
    dtypes=("float32",),
    source="simt/04_blocktile_1d.cu",
    template="gemmlab::blocktile_1d",
    description="each thread computes TM outputs of a column, reusing one shared B value TM times",
    params=(
        TileParam("BM", (32, 64, 128), 32, "rows of C per block"),
        TileParam("BN", (32, 64, 128), 64, "columns of C per block"),
        TileParam("BK", (8, 16), 16, "depth of the K slice staged in shared memory per step"),
        TileParam("TM", (4, 8), 8, "rows of C per thread"),
    ),
    constraints=(
        Constraint("TM must divide BM", lambda p: p["BM"] % p["TM"] == 0),
        Constraint(
            "threads per block, (BM/TM)*BN, must be between 32 and 512 (1024 caps registers at 64)",
            lambda p: 32 <= _threads(p) <= 512,
        ),
        Constraint(
            "the A tile BM*BK and the B tile BK*BN must split evenly over the threads",
            lambda p: (p["BM"] * p["BK"]) % _threads(p) == 0 and (p["BK"] * p["BN"]) % _threads(p) == 0,
        ),
        SMEM_RULE,
    ),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["TM"]),
    geometry=lambda p, prob: Launch(grid=(tiles(prob, p["BM"], p["BN"]), 1, 1), block=(_threads(p), 1, 1)),
)
