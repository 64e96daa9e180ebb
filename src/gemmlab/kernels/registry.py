"""KernelSpec: what each kernel of the ladder is, which tile parameters it takes,
which combinations are legal, and how it is launched.

Every tool (matmul, bench, verify, inspect, tests) reads kernels from here, so a
new rung is one .cu file plus one entry below.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from ..runtime.compile import INCLUDE_DIR

KERNEL_DIR = Path(__file__).resolve().parent

# Every GEMM kernel's parameters; the last three are the batch strides (layout.cuh).
_SIGNATURE = ("(int M, int N, int K, float alpha, const T* A, int lda, const T* B, int ldb, float beta, "
              "O* C, int ldc, long long stride_a, long long stride_b, long long stride_c)")

# Operand layouts, BLAS's transa / transb: 'N' the logical matrix is stored
# row-major, 'T' column-major (its transpose is row-major).  Every GEMM kernel
# template ends with two of these (OPA, OPB); see include/gemmlab/layout.cuh.
LAYOUTS = (("N", "N"), ("T", "N"), ("N", "T"), ("T", "T"))


@dataclass(frozen=True)
class TileParam:
    name: str
    values: tuple[int, ...]
    default: int
    doc: str


@dataclass(frozen=True)
class Constraint:
    """A rule between tile parameters, with the sentence shown when it is broken."""

    rule: str
    holds: Callable[[Mapping[str, int]], bool]


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]          # in blocks
    block: tuple[int, int, int]
    smem_bytes: int = 0
    cluster: tuple[int, int, int] = (1, 1, 1)   # blocks per thread-block cluster (Hopper)
    # The grid is an upper bound that any smaller grid also serves (a persistent
    # kernel walks the tiles): run_plan lowers it to the clusters that fit at once.
    persistent: bool = False


@dataclass(frozen=True)
class Problem:
    """What a launch needs to know about the operands besides their shapes."""

    M: int
    N: int
    K: int
    aligned16: bool  # widths, leading dimensions and base addresses allow float4 access
    # What the kernel multiplies: float32, tf32 (float32 storage), float16,
    # bfloat16, or float32 split into two tensor-core parts (fp16_ec, tf32_ec).
    dtype: str = "float32"
    out_dtype: str = "float32"  # what it writes: float32, or the input's 16-bit type
    op_a: str = "N"             # how op(A) (M x K) is stored: "N" row-major, "T" column-major
    op_b: str = "N"             # how op(B) (K x N) is stored
    # A and B can be read through TMA tensor maps: 16-byte aligned base addresses,
    # leading dimensions whose byte size is a multiple of 16 (a matrix of one row
    # has no stride to check).  Only the wgmma rung (16-bit inputs) needs it.
    tma_aligned: bool = True
    sm_count: int = 132         # the GPU's multiprocessors, for persistent grids

    def with_layout(self, op_a: str, op_b: str) -> "Problem":
        return dataclasses.replace(self, op_a=op_a, op_b=op_b)


# Element-type codes of the tensor-core kernels' templates (wmma_types.cuh).
TYPE_CODES = {"float16": 0, "bfloat16": 1, "tf32": 2, "float32": 3}
# The error-corrected FP32 methods' codes (ec_split.cuh): which parts a value is split into.
EC_METHODS = {"fp16_ec": 0, "tf32_ec": 1}
# Dtypes whose result is always float32: FP32 storage in, FP32 out.
FLOAT32_RESULT = ("float32", "tf32", *EC_METHODS)


@dataclass(frozen=True)
class KernelSpec:
    name: str
    rung: int
    family: str
    dtypes: tuple[str, ...]
    source: str                     # path below kernels/
    template: str                   # C++ name of the kernel template
    description: str
    params: tuple[TileParam, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    # Template arguments, in order, built from the resolved parameters and the problem.
    template_args: Callable[[Mapping[str, int], Problem], tuple] = field(default=lambda p, prob: ())
    geometry: Callable[[Mapping[str, int], Problem], Launch] = field(default=None)
    # Template-argument sets a problem can select beyond the parameters (e.g. VEC).
    variants: tuple[Problem, ...] = (Problem(1, 1, 1, True),)
    # The tile parameter that splits K over gridDim.y blocks (partial products go
    # to a workspace that SPLITK_REDUCE adds into C), if the kernel has one.
    split_k_param: str | None = None
    # Float arguments after (..., C, ldc, stride_a, stride_b, stride_c) that the plan supplies (e.g. the error-corrected
    # kernels' scale_a, scale_b); each defaults to 1.0.
    extra_args: tuple[str, ...] = ()
    # NVRTC targets the kernel exists for (empty: every target gemmlab builds for).
    # A kernel with sm_90a instructions (wgmma, setmaxnreg) lists only "sm_90a".
    arches: tuple[str, ...] = ()
    # The operand layouts (op_a, op_b) the kernel reads; others are unusable (below).
    layouts: tuple[tuple[str, str], ...] = LAYOUTS
    # Why this kernel cannot take a problem's operands (None: it can), and the
    # kernel that runs instead (plan() falls back to it and says why).
    unusable: Callable[[Problem], str | None] | None = None
    fallback: str | None = None
    # Builds the kernel's arguments when they are more than the standard
    # (M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, strides): called by
    # api.run_plan as kernel_args(plan, gpu, stream, operands, alpha, beta) once
    # per matrix of a batch, it returns a context manager that yields the
    # argument tuple (e.g. with TMA tensor maps) and releases whatever it set up
    # (workspaces) once the kernel is enqueued.
    kernel_args: Callable | None = None
    # Whether kernel_args' arguments for a problem depend only on the addresses,
    # alpha and beta (no per-call pre-pass or workspace): a prepared call then
    # keeps them per set of addresses instead of building them at every call.
    reusable_args: Callable[[Problem], bool] | None = None
    # The launch first packs op(A) and op(B) into row-major workspaces (ec_wgmma's
    # split pre-pass), so the kernel reads every layout and is instantiated for
    # 'N', 'N' only.
    packed: bool = False

    def builds_for(self, arch: str) -> bool:
        """Whether this kernel exists for the NVRTC target ``arch`` (e.g. sm_80, sm_90a)."""
        return not self.arches or arch in self.arches

    def check_arch(self, arch: str, gpu_name: str = "this GPU") -> None:
        """Raise ValueError, naming both architectures, if the kernel cannot run on ``arch``."""
        if not self.builds_for(arch):
            raise ValueError(f"kernel {self.name!r} needs {' or '.join(self.arches)} (its instructions exist only "
                             f"there: Hopper, H100/H200); {gpu_name} is {arch}. Use another kernel, e.g. "
                             f"{self.fallback or 'auto'!r}")

    def why_unusable(self, problem: Problem) -> str | None:
        """Why this kernel cannot take the problem's operands, or None."""
        if (problem.op_a, problem.op_b) not in self.layouts:
            return (f"it reads {' or '.join(a + b for a, b in self.layouts)} operand layouts only, "
                    f"not {problem.op_a}{problem.op_b}")
        return self.unusable(problem) if self.unusable else None

    def splits(self, params: Mapping[str, int]) -> int:
        return int(params[self.split_k_param]) if self.split_k_param else 1

    @property
    def source_path(self) -> Path:
        return KERNEL_DIR / self.source

    # -- parameters ---------------------------------------------------------
    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}

    def resolve(self, given: Mapping[str, int] | None = None) -> dict[str, int]:
        """Fill in defaults and check every value and every rule; raise ValueError naming what is wrong."""
        given = dict(given or {})
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            legal = ", ".join(known) if known else "none"
            raise ValueError(
                f"kernel {self.name!r} has no tile parameter {', '.join(map(repr, unknown))}; "
                f"its tile parameters are: {legal}")
        resolved = self.defaults()
        for name, value in given.items():
            p = known[name]
            if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
                raise TypeError(f"tile parameter {name}={value!r} of kernel {self.name!r} must be an int")
            value = int(value)
            if value not in p.values:
                raise ValueError(
                    f"tile parameter {name}={value} is not legal for kernel {self.name!r}; "
                    f"legal values: {', '.join(map(str, p.values))}")
            resolved[name] = value
        broken = [c.rule for c in self.constraints if not c.holds(resolved)]
        if broken:
            desc = ", ".join(f"{k}={v}" for k, v in resolved.items())
            raise ValueError(
                f"tile parameters {desc} are not a legal combination for kernel {self.name!r}: "
                + "; ".join(broken))
        return resolved

    def configurations(self) -> list[dict[str, int]]:
        """Every legal combination of tile parameters."""
        names = [p.name for p in self.params]
        out = []
        for values in itertools.product(*(p.values for p in self.params)):
            cand = dict(zip(names, values))
            if all(c.holds(cand) for c in self.constraints):
                out.append(cand)
        return out

    # -- compilation and launch --------------------------------------------
    def check_dtypes(self, problem: Problem) -> None:
        """Raise TypeError if this kernel does not compute problem.dtype -> problem.out_dtype."""
        if problem.dtype not in self.dtypes:
            fits = [s.name for s in SPECS.values() if problem.dtype in s.dtypes]
            raise TypeError(f"kernel {self.name!r} computes {', '.join(self.dtypes)}, not {problem.dtype}; "
                            f"for {problem.dtype} use one of: {', '.join(fits) or 'none yet'}")
        allowed = ("float32",) if problem.dtype in FLOAT32_RESULT else ("float32", problem.dtype)
        if problem.out_dtype not in allowed:
            raise TypeError(f"{problem.dtype} inputs give a {' or '.join(allowed)} result, not {problem.out_dtype}")

    def name_expression(self, params: Mapping[str, int], problem: Problem) -> str:
        """The template instantiation: the spec's template arguments, then the layouts OPA, OPB."""
        if problem.op_a not in ("N", "T") or problem.op_b not in ("N", "T"):
            raise ValueError(f"operand layouts are 'N' or 'T', not {problem.op_a!r}, {problem.op_b!r}")
        args = self.template_args(params, problem)
        ops = ("N", "N") if self.packed else (problem.op_a, problem.op_b)
        text = "".join(("true" if a else "false") + ", " if isinstance(a, bool) else f"{a}, " for a in args)
        return f"{self.template}<{text}'{ops[0]}', '{ops[1]}'>"

    def instantiations(self, configs=None, layouts=LAYOUTS) -> list[tuple[dict, Problem]]:
        """(parameters, problem) for each configuration (default: every legal one) x
        each variant x each layout, one per distinct name expression."""
        seen: dict[str, tuple[dict, Problem]] = {}
        for params in (self.configurations() if configs is None else configs):
            for prob in self.variants:
                for op_a, op_b in layouts:
                    if (op_a, op_b) not in self.layouts:   # a kernel that reads fewer layouts
                        continue
                    p = prob.with_layout(op_a, op_b)
                    seen.setdefault(self.name_expression(params, p), (dict(params), p))
        return list(seen.values())

    def all_name_expressions(self, layouts=LAYOUTS) -> list[str]:
        """Every instantiation a call could need: each legal configuration x each variant x each layout."""
        return [self.name_expression(p, prob) for p, prob in self.instantiations(layouts=layouts)]

    def launch(self, params: Mapping[str, int], problem: Problem) -> Launch:
        return self.geometry(params, problem)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "rung": self.rung,
            "family": self.family,
            "dtypes": list(self.dtypes),
            "description": self.description,
            "source": self.source,
            "params": {p.name: {"values": list(p.values), "default": p.default, "doc": p.doc}
                       for p in self.params},
            "constraints": [c.rule for c in self.constraints],
            "arches": list(self.arches),
        }


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tiles(prob: Problem, bm: int, bn: int) -> int:
    return _cdiv(prob.M, bm) * _cdiv(prob.N, bn)


# -- the FP32 ladder -----------------------------------------------------------

_BLOCK32 = 32  # naive and coalesced: 32 x 32 threads, one output each


def _threads_2d(p) -> int:
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def _smem_fits(p) -> bool:
    return 4 * p["BK"] * (p["BM"] + p["BN"]) <= 48 * 1024


def _tile_2d_params(bm, bn, bk, tm, tn) -> tuple[TileParam, ...]:
    """The 2-D block-tile parameters, with a rung's own defaults (chosen by
    `gemmlab bench --all-configs` on an H200; see benchmarks/NOTES.md)."""
    return (
        TileParam("BM", (64, 128), bm, "rows of C per block"),
        TileParam("BN", (64, 128), bn, "columns of C per block"),
        TileParam("BK", (8, 16), bk, "depth of the K slice staged in shared memory per step"),
        TileParam("TM", (4, 8), tm, "rows of C per thread"),
        TileParam("TN", (4, 8), tn, "columns of C per thread"),
    )


def _constraints_2d(vec: bool) -> tuple[Constraint, ...]:
    per = 4 if vec else 1
    return (
        Constraint("TM must divide BM and TN must divide BN",
                   lambda p: p["BM"] % p["TM"] == 0 and p["BN"] % p["TN"] == 0),
        Constraint("threads per block, (BM/TM)*(BN/TN), must be between 32 and 512 (1024 caps registers "
                   "at 64, which the batch's pointers push into spills)",
                   lambda p: 32 <= _threads_2d(p) <= 512),
        Constraint(("the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads"
                    if vec else
                    "the A tile BM*BK and the B tile BK*BN must split evenly over the threads"),
                   lambda p: (p["BM"] * p["BK"] // per) % _threads_2d(p) == 0
                   and (p["BK"] * p["BN"] // per) % _threads_2d(p) == 0),
        Constraint("each thread may stage at most 16 elements of A and B per K step, "
                   "(BM*BK + BK*BN)/threads <= 16 (more runs out of registers)",
                   lambda p: p["BK"] * (p["BM"] + p["BN"]) <= 16 * _threads_2d(p)),
        Constraint("shared memory, 4*BK*(BM+BN) bytes, must fit in 48 KiB", _smem_fits),
    )


def _geometry_2d(p, prob):
    return Launch(grid=(_tiles(prob, p["BM"], p["BN"]), 1, 1), block=(_threads_2d(p), 1, 1))


def _threads_1d(p) -> int:
    return (p["BM"] // p["TM"]) * p["BN"]


SPECS: dict[str, KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    if spec.name in SPECS:
        raise ValueError(f"kernel {spec.name!r} registered twice")
    SPECS[spec.name] = spec
    return spec


def _untiled(name: str, rung: int, description: str) -> KernelSpec:
    """Rungs 1 and 2: 32 x 32 threads per block, one output each, no tile parameters."""
    return KernelSpec(
        name=name, rung=rung, family="simt", dtypes=("float32",), source=f"simt/0{rung}_{name}.cu",
        template=f"gemmlab::{name}", description=description,
        template_args=lambda p, prob: (_BLOCK32,),
        geometry=lambda p, prob: Launch(grid=(_tiles(prob, _BLOCK32, _BLOCK32), 1, 1),
                                        block=(_BLOCK32, _BLOCK32, 1)),
    )


register(_untiled("naive", 1, "one thread per output; threadIdx.x walks M, so warps read uncoalesced rows"))
register(_untiled("coalesced", 2, "one thread per output; threadIdx.x walks N, so a warp reads contiguous memory"))

register(KernelSpec(
    name="smem_tiled", rung=3, family="simt", dtypes=("float32",), source="simt/03_smem_tiled.cu",
    template="gemmlab::smem_tiled",
    description="square TILE x TILE tiles of A and B staged in shared memory",
    params=(TileParam("tile", (2, 4, 8, 16, 32), 32, "edge of the square tile (threads per block = tile^2)"),),
    template_args=lambda p, prob: (p["tile"],),
    geometry=lambda p, prob: Launch(grid=(_tiles(prob, p["tile"], p["tile"]), 1, 1),
                                    block=(p["tile"], p["tile"], 1)),
))

register(KernelSpec(
    name="blocktile_1d", rung=4, family="simt", dtypes=("float32",), source="simt/04_blocktile_1d.cu",
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
        Constraint("threads per block, (BM/TM)*BN, must be between 32 and 512 (1024 caps registers at 64)",
                   lambda p: 32 <= _threads_1d(p) <= 512),
        Constraint("the A tile BM*BK and the B tile BK*BN must split evenly over the threads",
                   lambda p: (p["BM"] * p["BK"]) % _threads_1d(p) == 0
                   and (p["BK"] * p["BN"]) % _threads_1d(p) == 0),
        Constraint("shared memory, 4*BK*(BM+BN) bytes, must fit in 48 KiB", _smem_fits),
    ),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["TM"]),
    geometry=lambda p, prob: Launch(grid=(_tiles(prob, p["BM"], p["BN"]), 1, 1), block=(_threads_1d(p), 1, 1)),
))

register(KernelSpec(
    name="blocktile_2d", rung=5, family="simt", dtypes=("float32",), source="simt/05_blocktile_2d.cu",
    template="gemmlab::blocktile_2d",
    description="each thread computes a TM x TN register tile as outer products of shared-memory fragments",
    params=_tile_2d_params(128, 64, 16, 8, 4),
    constraints=_constraints_2d(vec=False),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["TM"], p["TN"]),
    geometry=_geometry_2d,
))

register(KernelSpec(
    name="vectorized", rung=6, family="simt", dtypes=("float32",), source="simt/06_vectorized.cu",
    template="gemmlab::vectorized",
    description="2-D block tile with float4 global loads, A transposed in shared memory, 128-bit shared loads",
    params=_tile_2d_params(64, 128, 16, 8, 4),
    constraints=_constraints_2d(vec=True) + (
        Constraint("TM and TN must be multiples of 4 (fragments are read as float4)",
                   lambda p: p["TM"] % 4 == 0 and p["TN"] % 4 == 0),
        Constraint("BK must be a multiple of 4 (float4 loads along K)", lambda p: p["BK"] % 4 == 0),
    ),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["TM"], p["TN"], prob.aligned16),
    geometry=_geometry_2d,
    variants=(Problem(1, 1, 1, True), Problem(1, 1, 1, False)),
))


def _warptile_shape(p) -> tuple[int, int, int, int] | None:
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


def _warptile_threads(p) -> int:
    return (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32


def _warptile_params(stages: bool, d: dict) -> tuple[TileParam, ...]:
    """Tile parameters of the warp-tiled rungs; ``d`` holds the rung's defaults.
    Rung 8 also takes 256-row/column block tiles: its copies need no staging
    registers, so one block of 256 threads can hold 128 accumulators each."""
    edges = (64, 128, 256) if stages else (64, 128)
    params = (
        TileParam("BM", edges, d["BM"], "rows of C per block"),
        TileParam("BN", edges, d["BN"], "columns of C per block"),
        TileParam("BK", (8, 16), d["BK"], "depth of the K slice staged in shared memory per step"),
        TileParam("WM", (32, 64), d["WM"], "rows of C per warp"),
        TileParam("WN", (32, 64), d["WN"], "columns of C per warp"),
        TileParam("WNITER", (1, 2, 4) if not stages else (2, 4), d["WNITER"],
                  "warp subtiles along N (WMITER follows from the rest)"),
        TileParam("TM", (4, 8), d["TM"], "rows per thread subtile (its width is 4: one float4)"),
    )
    if stages:
        params += (
            TileParam("STAGES", (2, 3, 4), d["STAGES"], "K-steps of tiles in shared memory (cp.async in flight)"),
            TileParam("SPLITK", SPLITK_VALUES, d["SPLITK"],
                      "blocks per output tile, each summing a slice of K (split-K, for skinny outputs "
                      "with long K; >1 adds a reduction kernel and a workspace of SPLITK*M*N floats)"),
        )
    return params


# Split-K factors rung 8 may use; the launch shape, not the compiled code, changes.
SPLITK_VALUES = (1, 2, 3, 4, 6, 8, 12, 16)


def _warptile_constraints(smem_bytes, smem_rule: str, smem_limit: int = 48 * 1024,
                          staged_registers: bool = True) -> tuple[Constraint, ...]:
    rules = (
        Constraint("WM must divide BM and WN must divide BN",
                   lambda p: p["BM"] % p["WM"] == 0 and p["BN"] % p["WN"] == 0),
        Constraint("threads per block, (BM/WM)*(BN/WN)*32, must be between 64 and 512",
                   lambda p: 64 <= _warptile_threads(p) <= 512),
        Constraint("a warp tile must split into WMITER x WNITER subtiles of 32 threads' TM x 4 tiles: "
                   "WM*WN divisible by 32*TM*4*WNITER, and (WSUBM/TM)*(WSUBN/4) == 32",
                   lambda p: (sh := _warptile_shape(p)) is not None
                   and sh[2] % p["TM"] == 0 and sh[3] % 4 == 0
                   and (sh[2] // p["TM"]) * (sh[3] // 4) == 32),
        Constraint("the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads",
                   lambda p: (p["BM"] * p["BK"] // 4) % _warptile_threads(p) == 0
                   and (p["BK"] * p["BN"] // 4) % _warptile_threads(p) == 0),
        Constraint(smem_rule, lambda p: smem_bytes(p) <= smem_limit),
    )
    if staged_registers:   # tiles pass through registers on their way to shared memory
        rules += (Constraint("each thread may stage at most 16 elements of A and B per K step, "
                             "(BM*BK + BK*BN)/threads <= 16 (more runs out of registers)",
                             lambda p: p["BK"] * (p["BM"] + p["BN"]) <= 16 * _warptile_threads(p)),)
    return rules


register(KernelSpec(
    name="warptile", rung=7, family="simt", dtypes=("float32",), source="simt/07_warptile.cu",
    template="gemmlab::warptile",
    description="block tile -> warp tiles -> per-thread TM x 4 subtiles; conflict-free shared reads",
    # Defaults: the fastest of the 71 configurations then legal at 4096^3 on an H200.
    params=_warptile_params(False, dict(BM=128, BN=128, BK=16, WM=64, WN=32, WNITER=4, TM=4)),
    constraints=_warptile_constraints(lambda p: 4 * p["BK"] * (p["BM"] + p["BN"]),
                                      "shared memory, 4*BK*(BM+BN) bytes, must fit in 48 KiB") + (
        Constraint("at most 64 accumulators per thread, WM*WN/32 <= 64 (with 128, the scalar variant's "
                   "staged copies and the batch pointers outgrow 255 registers)",
                   lambda p: p["WM"] * p["WN"] <= 2048),),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["WM"], p["WN"], p["WNITER"], p["TM"],
                                   prob.aligned16),
    geometry=lambda p, prob: Launch(grid=(_tiles(prob, p["BM"], p["BN"]), 1, 1),
                                    block=(_warptile_threads(p), 1, 1)),
    variants=(Problem(1, 1, 1, True), Problem(1, 1, 1, False)),
))

def _pipelined_smem(p, prob: Problem | None = None) -> int:
    """Dynamic shared memory of 08_pipelined.cu: STAGES K-major tiles of A (rows
    padded by 4) and B (rows padded by 4 when B is column-major; without a
    problem, the larger size, which the legality rule uses)."""
    b_pad = 4 if prob is None or prob.op_b == "T" else 0
    return 4 * p["STAGES"] * (p["BK"] * (p["BM"] + 4) + p["BK"] * (p["BN"] + b_pad))


# Dynamic shared memory a configuration may ask for: within every supported GPU's
# opt-in limit (sm_80: 163 KB, sm_90: 227 KB), and small enough for two blocks per
# SM on Hopper.
PIPELINED_SMEM_LIMIT = 96 * 1024

register(KernelSpec(
    name="pipelined", rung=8, family="simt", dtypes=("float32",), source="simt/08_pipelined.cu",
    template="gemmlab::pipelined",
    description="warptile with STAGES-deep cp.async global->shared copies overlapping the math",
    # Defaults (used where no tuned table applies): the tuner's winner at 4096^3,
    # 8192^3 and 16384x4096x4096 on both an H200 (run 30) and an H100 (run 33).
    params=_warptile_params(True, dict(BM=128, BN=256, BK=8, WM=64, WN=64, WNITER=4, TM=8, STAGES=4,
                                       SPLITK=1)),
    constraints=_warptile_constraints(
        _pipelined_smem, "dynamic shared memory, 4*STAGES*BK*(BM+4 + BN+4) bytes, must fit in 96 KiB",
        PIPELINED_SMEM_LIMIT, staged_registers=False) + (
        Constraint("at most 64 accumulators per thread, WM*WN/32 <= 64, except with 256 threads "
                   "and 64 x 64 warp tiles (128: one such block fills the register file, and its 8 warps "
                   "keep the SM busy)",
                   lambda p: p["WM"] * p["WN"] <= 2048 or _warptile_threads(p) == 256),
        Constraint("at least 128 threads per block (with 64, a block's copies and fragments of "
                   "4 stages outgrow the registers of its unaligned-input variant)",
                   lambda p: _warptile_threads(p) >= 128),
        Constraint("a block tile with 256 rows or columns needs 256 threads (8 warps of 64 x 64; "
                   "others fall short of the registers or the warps) and BK = 8 (at BK = 16 its variant "
                   "for unaligned inputs, which copies 4 bytes at a time, runs out of registers)",
                   lambda p: max(p["BM"], p["BN"]) < 256
                   or (p["WM"] == p["WN"] == 64 and _warptile_threads(p) == 256 and p["BK"] == 8)),),
    template_args=lambda p, prob: (p["BM"], p["BN"], p["BK"], p["WM"], p["WN"], p["WNITER"], p["TM"],
                                   p["STAGES"], prob.aligned16),
    geometry=lambda p, prob: Launch(grid=(_tiles(prob, p["BM"], p["BN"]), p["SPLITK"], 1),
                                    block=(_warptile_threads(p), 1, 1), smem_bytes=_pipelined_smem(p, prob)),
    variants=(Problem(1, 1, 1, True), Problem(1, 1, 1, False)),
    split_k_param="SPLITK",
))

# The second half of split-K: adds the SPLITK partial products into C.
SPLITK_REDUCE_SOURCE = KERNEL_DIR / "simt" / "splitk_reduce.cu"
SPLITK_REDUCE_KERNEL = "gemmlab::splitk_reduce"
SPLITK_REDUCE_THREADS = 256


# -- the tensor-core ladder ------------------------------------------------------

_TC_VARIANTS = tuple(Problem(1, 1, 1, True, dt, odt) for dt, odt in (
    ("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"),
    ("tf32", "float32")))
TC_WARPS_PER_BLOCK = 4   # tensor_common.cuh


def _tc_type_args(prob: Problem) -> tuple[int, int]:
    return TYPE_CODES[prob.dtype], TYPE_CODES[prob.out_dtype]


register(KernelSpec(
    name="wmma", rung=1, family="tensor", dtypes=("float16", "bfloat16", "tf32"), source="tensor/01_wmma.cu",
    template="gemmlab::wmma_tile",
    description="WMMA: one warp per 16x16 tile of C, fragments filled straight from global memory",
    template_args=lambda p, prob: _tc_type_args(prob),
    geometry=lambda p, prob: Launch(grid=(_cdiv(_tiles(prob, 16, 16), TC_WARPS_PER_BLOCK), 1, 1),
                                    block=(32 * TC_WARPS_PER_BLOCK, 1, 1)),
    variants=_TC_VARIANTS,
))


def _tc_threads(p) -> int:
    return (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32


def _tc_smem(p, elem_bytes: int) -> int:
    """Static shared memory of 02_wmma_warptile.cu: A and B tiles, rows padded by 16 bytes."""
    pad = 16 // elem_bytes
    return elem_bytes * (p["BM"] * (p["BK"] + pad) + p["BK"] * (p["BN"] + pad))


register(KernelSpec(
    name="wmma_warptile", rung=2, family="tensor", dtypes=("float16", "bfloat16", "tf32"),
    source="tensor/02_wmma_warptile.cu", template="gemmlab::wmma_warptile",
    description="WMMA with tiles staged in shared memory and each warp computing a grid of fragments",
    params=(
        TileParam("BM", (64, 128), 128, "rows of C per block"),
        TileParam("BN", (64, 128), 128, "columns of C per block"),
        TileParam("BK", (16,), 16, "depth of the K slice staged in shared memory per step"),
        TileParam("WM", (32,), 32, "rows of C per warp (WM/16 fragments)"),
        TileParam("WN", (32,), 32, "columns of C per warp (WN/16 fragments)"),
    ),
    constraints=(
        Constraint("WM must divide BM and WN must divide BN",
                   lambda p: p["BM"] % p["WM"] == 0 and p["BN"] % p["WN"] == 0),
        Constraint("threads per block, (BM/WM)*(BN/WN)*32, must be between 64 and 512",
                   lambda p: 64 <= _tc_threads(p) <= 512),
        Constraint("the A tile BM*BK and the B tile BK*BN must split evenly over the threads",
                   lambda p: (p["BM"] * p["BK"]) % _tc_threads(p) == 0
                   and (p["BK"] * p["BN"]) % _tc_threads(p) == 0),
        Constraint("shared memory for float (TF32) tiles, 4*(BM*(BK+4) + BK*(BN+4)) bytes, must fit in 48 KiB",
                   lambda p: _tc_smem(p, 4) <= 48 * 1024),
    ),
    template_args=lambda p, prob: _tc_type_args(prob) + (p["BM"], p["BN"], p["BK"], p["WM"], p["WN"]),
    geometry=lambda p, prob: Launch(grid=(_tiles(prob, p["BM"], p["BN"]), 1, 1), block=(_tc_threads(p), 1, 1)),
    variants=_TC_VARIANTS,
))


def _mma_smem(p) -> int:
    """Dynamic shared memory of 03_mma_pipelined.cu: STAGES stages of an A tile
    (BM rows of 2*BK bytes) and a B tile (2*BK bytes of K, BN columns)."""
    return p["STAGES"] * 2 * p["BK"] * (p["BM"] + p["BN"])


MMA_SMEM_LIMIT = 160 * 1024

# Every tensor-core dtype pair, each with 16-byte copies (aligned operands) and
# with narrow ones (any alignment and leading dimension).
_TC_VARIANTS_ALIGNED = _TC_VARIANTS + tuple(Problem(1, 1, 1, False, p.dtype, p.out_dtype) for p in _TC_VARIANTS)

register(KernelSpec(
    name="mma_pipelined", rung=3, family="tensor", dtypes=("float16", "bfloat16", "tf32"),
    source="tensor/03_mma_pipelined.cu", template="gemmlab::mma_pipelined",
    description="mma.sync m16n8k16/m16n8k8 as inline PTX, ldmatrix from XOR-swizzled shared memory, "
                "STAGES-deep cp.async pipeline",
    params=(
        TileParam("BM", (64, 128, 256), 128, "rows of C per block"),
        TileParam("BN", (64, 128, 256), 256, "columns of C per block"),
        TileParam("BK", (32, 64), 64, "depth of a stage in 16-bit elements (TF32: BK/2 floats, the same 2*BK "
                                       "bytes per row of A)"),
        TileParam("WM", (32, 64), 64, "rows of C per warp (WM/16 MMA tiles)"),
        TileParam("WN", (32, 64), 64, "columns of C per warp (WN/8 MMA tiles)"),
        TileParam("STAGES", (3, 4), 3, "K-steps of tiles in shared memory (cp.async in flight)"),
    ),
    constraints=(
        Constraint("WM must divide BM and WN must divide BN",
                   lambda p: p["BM"] % p["WM"] == 0 and p["BN"] % p["WN"] == 0),
        Constraint("square warp tiles, WM == WN: for a number of accumulators, the square tile loads the "
                   "fewest fragments per MMA",
                   lambda p: p["WM"] == p["WN"]),
        Constraint("64 x 64 warp tiles in blocks of 8 warps, (BM/64)*(BN/64) == 8: with 4 warps each thread "
                   "issues 8 copies per stage, whose addresses do not fit beside 128 accumulators and two "
                   "K-steps of fragments (spills)",
                   lambda p: p["WM"] != 64 or _tc_threads(p) == 256),
        Constraint("32 x 32 warp tiles only in a 64 x 64 block of 4 warps (they load twice the fragments per "
                   "MMA of 64 x 64 ones; the small block is for problems with too few tiles to fill the GPU)",
                   lambda p: p["WM"] != 32 or p["BM"] == p["BN"] == 64),
        Constraint("dynamic shared memory, STAGES*2*BK*(BM+BN) bytes, must fit in 160 KiB (an A100 "
                   "gives a block up to 163 KiB)",
                   lambda p: _mma_smem(p) <= MMA_SMEM_LIMIT),
    ),
    # Defaults: the fastest at 4096^3 and beyond of the configurations measured on an H100 (run M2,
    # benchmarks/NOTES.md); 256 x 128 x 64 was within 2% of it.
    template_args=lambda p, prob: _tc_type_args(prob) + (p["BM"], p["BN"], p["BK"], p["WM"], p["WN"], p["STAGES"],
                                                          prob.aligned16),
    geometry=lambda p, prob: Launch(grid=(_tiles(prob, p["BM"], p["BN"]), 1, 1), block=(_tc_threads(p), 1, 1),
                                    smem_bytes=_mma_smem(p)),
    variants=_TC_VARIANTS_ALIGNED,
    layouts=(("N", "N"),),       # its copies and ldmatrix read row-major A and B only so far
    fallback="wmma_warptile",
))



# -- rung 4: wgmma (Hopper) ------------------------------------------------------------

# Shared memory a block of 04_wgmma.cu may ask for: the opt-in limit of an H100/H200
# (227 KiB); the ring, the epilogue's staging buffers, the barriers and 1 KiB to align
# the tiles to the swizzle atom.
WGMMA_SMEM_LIMIT = 227 * 1024
WGMMA_SM90 = "sm_90a"
WGMMA_EPI_BYTES = 8192      # one staging buffer of the TMA-store epilogue; two per consumer warpgroup


def _wgmma_smem(p) -> int:
    """Dynamic shared memory of 04_wgmma.cu: STAGES x (A tile + B tile, (BM + BN) x 128 B),
    2 x 8 KiB of epilogue staging per consumer warpgroup, two 8-byte barriers per stage,
    1024 bytes of alignment slack."""
    return (p["STAGES"] * (p["BM"] + p["BN"]) * 128 + (p["BM"] // 64) * 2 * WGMMA_EPI_BYTES
            + 16 * p["STAGES"] + 1024)


def wgmma_tile(p, dtype: str) -> tuple[int, int]:
    """The block's tile of C, rows x columns: BM x BN, except in TF32, where the kernel
    computes C^T = B^T A^T and the tile is BN x BM (the wgmma's N runs along C's rows)."""
    return (p["BN"], p["BM"]) if dtype == "tf32" else (p["BM"], p["BN"])


def _wgmma_threads(p) -> int:
    return 128 * (p["BM"] // 64 + 1)   # one producer warpgroup + BM/64 consumers


def _wgmma_geometry(p, prob: Problem) -> Launch:
    """Persistent: no more blocks than SMs (one block fills an SM's shared memory), in whole
    clusters; a cluster takes CLUSTER vertically adjacent tiles at a time."""
    cl = p["CLUSTER"]
    tm, tn = wgmma_tile(p, prob.dtype)
    cluster_tiles = _cdiv(_cdiv(prob.M, tm), cl) * _cdiv(prob.N, tn)
    blocks = cl * max(1, min(cluster_tiles, prob.sm_count // cl))
    return Launch(grid=(blocks, 1, 1), block=(_wgmma_threads(p), 1, 1), smem_bytes=_wgmma_smem(p),
                  cluster=(cl, 1, 1), persistent=True)


def _wgmma_unusable(prob: Problem) -> str | None:
    if prob.dtype in ("float16", "bfloat16") and not prob.tma_aligned:
        return ("TMA needs a and b at 16-byte aligned addresses with leading dimensions whose byte size "
                "is a multiple of 16 (for 16-bit elements: a multiple of 8 elements)")
    return None


def _wgmma_kernel_args(plan, gpu, stream, operands, alpha, beta):
    from ..runtime.tma import wgmma_kernel_args   # needs the driver: imported at launch only
    return wgmma_kernel_args(plan, gpu, stream, operands, alpha, beta)


register(KernelSpec(
    name="wgmma", rung=4, family="tensor", dtypes=("float16", "bfloat16", "tf32"),
    source="tensor/04_wgmma.cu", template="gemmlab::wgmma_gemm",
    description="Hopper: TMA copies into a swizzled shared-memory ring (mbarriers), a producer warpgroup "
                "and BM/64 consumer warpgroups issuing wgmma from shared memory, persistent grid",
    params=(
        TileParam("BM", (64, 128), 128, "rows of C per block: BM/64 consumer warpgroups of 64 rows "
                                        "(TF32, which computes C^T: columns)"),
        TileParam("BN", (128, 256), 256, "columns of C per block, the N of every wgmma (BN/2 accumulators "
                                         "per consumer thread; TF32: rows)"),
        TileParam("STAGES", (3, 4, 5), 4, "K-steps of A and B tiles (128 bytes of K each) in the "
                                          "shared-memory ring"),
        TileParam("CLUSTER", (1, 2), 1, "blocks per cluster: 2 takes two vertically adjacent tiles "
                                        "whose B tile is read once and multicast to both"),
    ),
    constraints=(
        Constraint("dynamic shared memory, STAGES*(BM+BN)*128 + (BM/64)*16384 + 16*STAGES + 1024 bytes, must "
                   "fit in the 227 KiB a Hopper block can have",
                   lambda p: _wgmma_smem(p) <= WGMMA_SMEM_LIMIT),
    ),
    template_args=lambda p, prob: _tc_type_args(prob) + (p["BM"], p["BN"], p["STAGES"], p["CLUSTER"]),
    geometry=_wgmma_geometry,
    variants=_TC_VARIANTS,
    arches=(WGMMA_SM90,),
    layouts=(("N", "N"),),
    unusable=_wgmma_unusable,
    fallback="wmma_warptile",
    kernel_args=_wgmma_kernel_args,
    # The tensor maps (and for TF32 no rounded copy: TMA rounds) when TMA reads a and b in place.
    reusable_args=lambda prob: prob.tma_aligned,
))

# The TF32 pre-pass of the wgmma rung (rounds A and packs B^T, K-major).
TF32_PACK_SOURCE = KERNEL_DIR / "tensor" / "tf32_pack.cu"
TF32_PACK_KERNELS = ("gemmlab::tf32_pack<false>", "gemmlab::tf32_pack<true>")
TF32_PACK_TILE, TF32_PACK_THREADS = 32, 256


def wgmma_auto_params(M: int, N: int, sm_count: int) -> dict:
    """wgmma's tile for ``kernel="auto"``: 128x256 (the fastest per tile) unless its tiles
    would fill fewer than half the SMs; then 64x128, four times as many tiles.  Measured on
    an H100 (132 SMs), BF16: at 1024^3 (32 tiles of 128x256) 64x128 reached 82% of cuBLAS
    where 128x256 reached 48%; at 2048^3 (128 tiles) 128x256 reached 81% where 128x128
    (256 tiles, two rounds) reached 71%."""
    big = _cdiv(M, 128) * _cdiv(N, 256)
    bm, bn = (128, 256) if 2 * big >= sm_count else (64, 128)
    return {"BM": bm, "BN": bn, "STAGES": 4, "CLUSTER": 1}



# -- FP32-accurate GEMM on tensor cores (error correction) -------------------------

_EC_VARIANTS = tuple(Problem(1, 1, 1, vec, method) for method in EC_METHODS for vec in (True, False))


def _ec_threads(p) -> int:
    return (p["BM"] // 32) * (p["BN"] // 32) * 32


def _ec_smem(p) -> int:
    """Dynamic shared memory of ec/01_ec_wmma.cu: STAGES FP32 tiles of A and B, rows padded by 4 floats."""
    return 4 * p["STAGES"] * (p["BM"] * (p["BK"] + 4) + p["BK"] * (p["BN"] + 4))


register(KernelSpec(
    name="ec_wmma", rung=1, family="ec", dtypes=tuple(EC_METHODS), source="ec/01_ec_wmma.cu",
    template="gemmlab::ec_wmma",
    description="FP32-accurate GEMM on FP16 or TF32 tensor cores: each value split into a high and a low "
                "part at fragment load, three products, the main one accumulated in FP32 outside the "
                "tensor core",
    params=(
        # Defaults: the fastest at 4096^3 for fp16_ec on an H100 (run 41, benchmarks/NOTES.md;
        # 64x64 with 2, 3 or 4 stages were within 1% of each other).
        TileParam("BM", (64, 128), 64, "rows of C per block"),
        TileParam("BN", (64, 128), 64, "columns of C per block"),
        TileParam("BK", (16,), 16, "depth of the K slice staged in shared memory per step (at 32, the "
                                   "variant for unaligned inputs spills)"),
        TileParam("STAGES", (2, 3, 4), 2, "K slices in flight (cp.async)"),
    ),
    constraints=(
        Constraint("at most 8 warps of 32 x 32 per block, (BM/32)*(BN/32) <= 8 (each thread holds two "
                   "accumulators per element, the main product and the corrections: 16 warps spill)",
                   lambda p: (p["BM"] // 32) * (p["BN"] // 32) <= 8),
        Constraint("64 x 64 blocks take at most 2 stages (with 3 or 4, the variant for unaligned TF32 inputs "
                   "spills: its 4 warps each issue twice the copies of a 256-thread block)",
                   lambda p: p["BM"] * p["BN"] > 64 * 64 or p["STAGES"] == 2),
        Constraint("the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads",
                   lambda p: (p["BM"] * p["BK"] // 4) % _ec_threads(p) == 0
                   and (p["BK"] * p["BN"] // 4) % _ec_threads(p) == 0),
    ),
    template_args=lambda p, prob: (EC_METHODS[prob.dtype], p["BM"], p["BN"], p["BK"], 32, 32, p["STAGES"],
                                   prob.aligned16),
    geometry=lambda p, prob: Launch(grid=(_tiles(prob, p["BM"], p["BN"]), 1, 1), block=(_ec_threads(p), 1, 1),
                                    smem_bytes=_ec_smem(p)),
    variants=_EC_VARIANTS,
    extra_args=("scale_a", "scale_b"),
))

# ec/02_ec_wgmma.cu: 128 x 96 tiles (two consumer warpgroups of 64 x 96, four sets of
# accumulators each); a ring stage holds hi and lo of A (128 rows of 128 bytes) and of B^T (96 rows).
EC_WGMMA_BM, EC_WGMMA_BN = 128, 96


def _ec_wgmma_smem(p) -> int:
    """STAGES x 2 x (128 + 96) rows of 128 bytes, two barriers per stage, 1 KiB to align the ring."""
    return p["STAGES"] * 2 * (EC_WGMMA_BM + EC_WGMMA_BN) * 128 + 16 * p["STAGES"] + 1024


def _ec_wgmma_geometry(p, prob: Problem) -> Launch:
    """Persistent: one block per SM (the ring fills its shared memory), at most one per tile."""
    tiles = _cdiv(prob.M, EC_WGMMA_BM) * _cdiv(prob.N, EC_WGMMA_BN)
    return Launch(grid=(max(1, min(tiles, prob.sm_count)), 1, 1), block=(384, 1, 1), smem_bytes=_ec_wgmma_smem(p),
                  persistent=True)


def _ec_wgmma_kernel_args(plan, gpu, stream, operands, alpha, beta):
    from ..runtime.tma import ec_wgmma_kernel_args   # needs the driver: imported at launch only
    return ec_wgmma_kernel_args(plan, gpu, stream, operands, alpha, beta)


register(KernelSpec(
    name="ec_wgmma", rung=2, family="ec", dtypes=tuple(EC_METHODS), source="ec/02_ec_wgmma.cu",
    template="gemmlab::ec_wgmma",
    description="Hopper: A and B split once into their two parts by a pre-pass, then wgmma from a TMA ring "
                "of four tiles a stage; each stage's main product added outside the tensor core into blocked "
                "FP32 accumulators",
    params=(
        TileParam("STAGES", (2, 3, 4), 4, "stages of the ring, each 56 KiB: hi and lo tiles of A (128 rows) "
                                          "and of B^T (96 rows), 128 bytes of K"),
    ),
    constraints=(
        Constraint("dynamic shared memory, STAGES*56 KiB + 16*STAGES + 1024 bytes, must fit in the 227 KiB a "
                   "Hopper block can have", lambda p: _ec_wgmma_smem(p) <= WGMMA_SMEM_LIMIT),
    ),
    template_args=lambda p, prob: (EC_METHODS[prob.dtype], p["STAGES"]),
    geometry=_ec_wgmma_geometry,
    variants=tuple(Problem(1, 1, 1, True, method) for method in EC_METHODS),
    arches=(WGMMA_SM90,),
    fallback="ec_wmma",
    extra_args=("scale_a", "scale_b"),
    kernel_args=_ec_wgmma_kernel_args,
    packed=True,
))

# The split pre-pass of ec_wgmma: (METHOD, stored layout, transposed output).
EC_SPLIT_PACK_SOURCE = KERNEL_DIR / "ec" / "split_pack.cu"
EC_SPLIT_PACK_TILE, EC_SPLIT_PACK_THREADS = 32, 256


def ec_split_pack_kernel(method: str, op: str, transpose: bool) -> str:
    return f"gemmlab::ec_split_pack<{EC_METHODS[method]}, '{op}', {'true' if transpose else 'false'}>"


EC_SPLIT_PACK_KERNELS = tuple(ec_split_pack_kernel(m, op, t) for m in EC_METHODS for op in "NT"
                              for t in (False, True))

# precision="fp32_tc" picks its method from the exponents of A and B (gemmlab.ec).
EXPONENT_HISTOGRAM_SOURCE = KERNEL_DIR / "ec" / "exponent_histogram.cu"
EXPONENT_HISTOGRAM_KERNEL = "gemmlab::exponent_histogram"


def get(name: str) -> KernelSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(
            f"unknown kernel {name!r}; known kernels: {', '.join(['auto', *SPECS])}") from None


# The families in teaching order: CUDA cores, tensor cores, FP32-accurate tensor cores.
FAMILIES = ("simt", "tensor", "ec")


def ladder(family: str | None = None) -> list[KernelSpec]:
    specs = sorted(SPECS.values(), key=lambda s: (FAMILIES.index(s.family), s.rung))
    return [s for s in specs if family is None or s.family == family]
