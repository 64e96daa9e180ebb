"""EC rung 1, ec/01_ec_wmma.cu: FP32-accurate GEMM on FP16 or TF32 tensor cores, each
value split into a high and a low part at fragment load."""

from __future__ import annotations

from .choose_method import GPUChoice
from ..spec import EC_METHODS, Ask, Constraint, KernelSpec, Launching, Launch, Offer, Problem, Rules, TileParam, tiles

_VARIANTS = tuple(Problem(1, 1, 1, vec, method) for method in EC_METHODS for vec in (True, False))


def _threads(p) -> int:
    return (p["BM"] // 32) * (p["BN"] // 32) * 32


def ec_smem(p) -> int:
    """Dynamic shared memory of ec/01_ec_wmma.cu: STAGES FP32 tiles of A and B, rows padded by 4 floats."""
    return 4 * p["STAGES"] * (p["BM"] * (p["BK"] + 4) + p["BK"] * (p["BN"] + 4))


def _auto_hook(ask: Ask) -> Offer:
    """The error-corrected methods where ec_wgmma does not pay or run: always takes them,
    at its defaults."""
    return Offer({})


SPEC = KernelSpec(
    name="ec_wmma",
    rung=1,
    family="ec",
    dtypes=tuple(EC_METHODS),
    source="ec/01_ec_wmma.cu",
    template="gemmlab::ec_wmma",
    description="FP32-accurate GEMM on FP16 or TF32 tensor cores: each value split into a high and a low "
    "part at fragment load, three products, the main one accumulated in FP32 outside the "
    "tensor core",
    params=(
        # Defaults: the fastest at 4096^3 for fp16_ec on an H100 (benchmarks/NOTES.md; 64x64 with
        # 2, 3 or 4 stages were about as fast).
        TileParam("BM", (64, 128), 64, "rows of C per block"),
        TileParam("BN", (64, 128), 64, "columns of C per block"),
        TileParam(
            "BK",
            (16,),
            16,
            "depth of the K slice staged in shared memory per step (at 32, the variant for unaligned inputs spills)",
        ),
        TileParam("STAGES", (2, 3, 4), 2, "K slices in flight (cp.async)"),
    ),
    constraints=(
        Constraint(
            "at most 8 warps of 32 x 32 per block, (BM/32)*(BN/32) <= 8 (each thread holds two "
            "accumulators per element, the main product and the corrections: 16 warps spill)",
            lambda p: (p["BM"] // 32) * (p["BN"] // 32) <= 8,
        ),
        Constraint(
            "64 x 64 blocks take at most 2 stages (with 3 or 4, the variant for unaligned TF32 inputs "
            "spills: its 4 warps each issue twice the copies of a 256-thread block)",
            lambda p: p["BM"] * p["BN"] > 64 * 64 or p["STAGES"] == 2,
        ),
        Constraint(
            "the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads",
            lambda p: (p["BM"] * p["BK"] // 4) % _threads(p) == 0 and (p["BK"] * p["BN"] // 4) % _threads(p) == 0,
        ),
    ),
    template_args=lambda p, prob: (
        EC_METHODS[prob.dtype],
        p["BM"],
        p["BN"],
        p["BK"],
        32,
        32,
        p["STAGES"],
        prob.aligned16,
    ),
    geometry=lambda p, prob: Launch(
        grid=(tiles(prob, p["BM"], p["BN"]), 1, 1), block=(_threads(p), 1, 1), smem_bytes=ec_smem(p)
    ),
    variants=_VARIANTS,
    rules=Rules(offer=_auto_hook),
    min_arch={m: 80 for m in EC_METHODS},
    fragment_maps=True,
    needs="FP16 and TF32 WMMA (TF32 from sm_80) and cp.async (sm_80)",
    launching=Launching(
        extra_args=("scale_a", "scale_b"),
        reads_choice=True,
        gpu_choice=GPUChoice,
    ),
)
