"""Rung 3, 03_smem_tiled.cu: square tiles of A and B staged in shared memory."""

from __future__ import annotations

from ..spec import KernelSpec, Launch, TileParam, tiles

SPEC = KernelSpec(
    name="smem_tiled",
    rung=3,
    family="simt",
    dtypes=("float32",),
    source="simt/03_smem_tiled.cu",
    template="gemmlab::smem_tiled",
    description="square TILE x TILE tiles of A and B staged in shared memory",
    params=(TileParam("tile", (2, 4, 8, 16, 32), 32, "edge of the square tile (threads per block = tile^2)"),),
    template_args=lambda p, prob: (p["tile"],),
    geometry=lambda p, prob: Launch(grid=(tiles(prob, p["tile"], p["tile"]), 1, 1), block=(p["tile"], p["tile"], 1)),
)
