"""Rung 6, 06_vectorized.cu: rung 5's tiles read with float4s, A transposed in shared memory.

Two variants per configuration: 16-byte copies for aligned operands, narrow ones otherwise.
"""

from __future__ import annotations

from ..spec import Constraint, KernelSpec, Problem
from .blocktile_2d import constraints_2d, geometry_2d, tile_2d_params

# The two template-argument sets of the float4 rungs (6-8): aligned16 true and false.
ALIGNED_VARIANTS = (Problem(1, 1, 1, True), Problem(1, 1, 1, False))

SPEC = KernelSpec(
    name="vectorized",
    rung=6,
    family="simt",
    dtypes=("float32",),
    source="simt/06_vectorized.cu",
    template="gemmlab::vectorized",
    description="2-D block tile with float4 global loads, A transposed in shared memory, 128-bit shared loads",
    params=tile_2d_params(64, 128, 16, 8, 4),
    constraints=constraints_2d(vec=True)
    + (
        Constraint(
            "TM and TN must be multiples of 4 (fragments are read as float4)",
            lambda p: p["TM"] % 4 == 0 and p["TN"] % 4 == 0,
        ),
        Constraint("BK must be a multiple of 4 (float4 loads along K)", lambda p: p["BK"] % 4 == 0),
    ),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["TM"], p["TN"], prob.aligned16),
    geometry=geometry_2d,
    variants=ALIGNED_VARIANTS,
)
