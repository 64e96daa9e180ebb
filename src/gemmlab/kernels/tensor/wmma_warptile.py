"""Tensor rung 2, 02_wmma_warptile.cu: tiles staged in shared memory, a grid of
fragments per warp (the warp count formula is shared with rung 3)."""

from __future__ import annotations

from ..spec import Constraint, KernelSpec, Launch, TileParam, tiles
from .wmma import TC_DTYPES, TC_VARIANTS, WMMA_MIN_ARCH, WMMA_NEEDS, tc_type_args


def tc_threads(p) -> int:
    return (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32


def tc_smem(p, elem_bytes: int) -> int:
    """Static shared memory of 02_wmma_warptile.cu: A and B tiles, rows padded by 16 bytes."""
    pad = 16 // elem_bytes
    return elem_bytes * (p["BM"] * (p["BK"] + pad) + p["BK"] * (p["BN"] + pad))


SPEC = KernelSpec(
    name="wmma_warptile",
    rung=2,
    family="tensor",
    dtypes=TC_DTYPES,
    source="tensor/02_wmma_warptile.cu",
    template="gemmlab::wmma_warptile",
    description="WMMA with tiles staged in shared memory and each warp computing a grid of fragments",
    params=(
        TileParam("BM", (64, 128), 128, "rows of C per block"),
        TileParam("BN", (64, 128), 128, "columns of C per block"),
        TileParam("BK", (16,), 16, "depth of the K slice staged in shared memory per step"),
        TileParam("WM", (32,), 32, "rows of C per warp (WM/16 fragments)"),
        TileParam("WN", (32,), 32, "columns of C per warp (WN/16 fragments)"),
    ),
    constraints=(
        Constraint(
            "WM must divide BM and WN must divide BN", lambda p: p["BM"] % p["WM"] == 0 and p["BN"] % p["WN"] == 0
        ),
        Constraint(
            "threads per block, (BM/WM)*(BN/WN)*32, must be between 64 and 512", lambda p: 64 <= tc_threads(p) <= 512
        ),
        Constraint(
            "the A tile BM*BK and the B tile BK*BN must split evenly over the threads",
            lambda p: (p["BM"] * p["BK"]) % tc_threads(p) == 0 and (p["BK"] * p["BN"]) % tc_threads(p) == 0,
        ),
        Constraint(
            "shared memory for float (TF32) tiles, 4*(BM*(BK+4) + BK*(BN+4)) bytes, must fit in 48 KiB",
            lambda p: tc_smem(p, 4) <= 48 * 1024,
        ),
    ),
    template_args=lambda p, prob: tc_type_args(prob) + (p["BM"], p["BN"], p["BK"], p["WM"], p["WN"]),
    geometry=lambda p, prob: Launch(grid=(tiles(prob, p["BM"], p["BN"]), 1, 1), block=(tc_threads(p), 1, 1)),
    variants=TC_VARIANTS,
    min_arch=WMMA_MIN_ARCH,
    needs=WMMA_NEEDS,
    fragment_maps=True,
)
