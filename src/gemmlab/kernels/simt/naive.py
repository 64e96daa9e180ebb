"""Rung 1, 01_naive.cu: one thread per output, threadIdx.x walking M.

Rungs 1 and 2 differ only in which thread index walks which dimension of C, so
their spec is built by one function (coalesced.py reuses it).
"""

from __future__ import annotations

from ..spec import KernelSpec, Launch, tiles

BLOCK32 = 32  # 32 x 32 threads per block, one output each


def untiled_spec(name: str, rung: int, description: str) -> KernelSpec:
    """Rungs 1 and 2: 32 x 32 threads per block, one output each, no tile parameters."""
    return KernelSpec(
        name=name,
        rung=rung,
        family="simt",
        dtypes=("float32",),
        source=f"simt/0{rung}_{name}.cu",
        template=f"gemmlab::{name}",
        description=description,
        template_args=lambda p, prob: (BLOCK32,),
        geometry=lambda p, prob: Launch(grid=(tiles(prob, BLOCK32, BLOCK32), 1, 1), block=(BLOCK32, BLOCK32, 1)),
    )


SPEC = untiled_spec("naive", 1, "one thread per output; threadIdx.x walks M, so warps read uncoalesced rows")
