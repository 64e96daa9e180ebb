"""What a kernel of the ladder is: KernelSpec and the pieces it is made of.

Each rung's spec is built in the module beside its .cu file
(kernels/<family>/<rung>.py) from these types; kernels/registry.py indexes them.
Nothing here knows any particular kernel.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping
from .cuda_constants import read_constants

KERNEL_DIR = Path(__file__).resolve().parent

# -- architectures ------------------------------------------------------------------
# The lowest target NVRTC 13 (CUDA 13) builds for: it dropped sm_70 and sm_72 (Volta).
LOWEST_TARGET = 75
# The targets gemmlab checks every rung against (CI compiles them; docs/usage.md's table):
# Turing, Ampere (A100; RTX 30, A10), Ada (RTX 40, L4, L40S), Hopper, Blackwell (B200; RTX 50).
KNOWN_TARGETS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120")
# Where the WMMA fragment maps of wmma_ext.cuh (which the tensor and error-corrected
# rungs use) come from, per compute capability: measured on a GPU by `gemmlab
# fragments`, or derived from the SASS ptxas emits for the dump kernel, run on the CPU
# by tests/sass_warp.py (test_fragments.py).  Any other target is refused: its maps
# are unknown.
FRAGMENT_MAPS = {
    75: "derived from SASS, not measured (FP16 only: sm_75 has no BF16/TF32 WMMA)",
    80: "derived from SASS, not measured",
    86: "derived from SASS, not measured",
    89: "derived from SASS, not measured",
    90: "measured (H100, H200)",
    100: "derived from SASS, not measured",
    120: "derived from SASS, not measured",
}


def arch_cc(arch: str) -> int:
    """The compute capability of an NVRTC target as a number: sm_86 -> 86, sm_90a -> 90."""
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    if not m:
        raise ValueError(f"{arch!r} is not an NVRTC target such as sm_80 or sm_90a")
    return int(m.group(1))


# Every GEMM kernel's parameters; the last three are the batch strides (layout.cuh).
_SIGNATURE = (
    "(int M, int N, int K, float alpha, const T* A, int lda, const T* B, int ldb, float beta, "
    "O* C, int ldc, long long stride_a, long long stride_b, long long stride_c)"
)

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
    """A rule between tile parameters, with the sentence shown when it is broken.
    ``dtypes``: the input types it binds, where it holds for some only (wgmma: no TF32
    instruction for BN = 192); empty, every type."""

    rule: str
    holds: Callable[[Mapping[str, int]], bool]
    dtypes: tuple[str, ...] = ()

    def binds(self, dtype: str | None) -> bool:
        """Whether the rule applies to products of ``dtype`` (None: any product, so only
        the rules of every type)."""
        return not self.dtypes or dtype in self.dtypes


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]  # in blocks
    block: tuple[int, int, int]
    smem_bytes: int = 0
    cluster: tuple[int, int, int] = (1, 1, 1)  # blocks per thread-block cluster (Hopper)
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
    op_a: str = "N"  # how op(A) (M x K) is stored: "N" row-major, "T" column-major
    op_b: str = "N"  # how op(B) (K x N) is stored
    # A and B can be read through TMA tensor maps: 16-byte aligned base addresses,
    # leading dimensions whose byte size is a multiple of 16 (a matrix of one row
    # has no stride to check).  Only the wgmma rung (16-bit inputs) needs it.
    tma_aligned: bool = True
    sm_count: int = 132  # the GPU's multiprocessors, for persistent grids
    # Operands the kernel cannot read in place (wgmma, 16-bit: TMA's rules) or reads slowly
    # (rung 8: rows off the 16-byte grid) are first copied into an aligned workspace, where
    # the choice's cost model says the copy pays.
    stage: bool = False
    # The operands ("A", "B", "C") each stored row of which starts on the 16-byte grid
    # (base address, leading dimension where there is more than one row, batch strides),
    # whatever the rows' widths: what a kernel needs that takes a row's last partial
    # 16 bytes element by element (gemv, outer).  aligned16 implies every operand.
    rows_aligned16: str = ""
    # FP8 products (wgmma_fp8): B's element type where it differs from A's ("": dtype), and
    # how the scales apply: "tensor", "row" (per row of A / column of B) or "block" (1 x 128
    # of A, 128 x 128 of B); "" for products without scales.
    dtype_b: str = ""
    scaling: str = ""
    # Grouped products (tensor rung 6, grouped): the number of groups G of A's rows, each
    # multiplied by its own B; M is then the rows of all of them (T).  0: one product.
    groups: int = 0

    def with_layout(self, op_a: str, op_b: str) -> "Problem":
        return dataclasses.replace(self, op_a=op_a, op_b=op_b)

    def rows_on_grid(self, operand: str) -> bool:
        """Whether every stored row of ``operand`` ("A", "B" or "C") starts on the 16-byte grid."""
        return self.aligned16 or operand in self.rows_aligned16


@dataclass(frozen=True)
class Ask:
    """What gemmlab.core.choose asks a rung's ``Rules.offer`` about a product: its sizes, batch,
    dtype, layouts and alignment, and the GPU's facts the rung's rules read
    (``arch`` None: not known yet, as when planning without a GPU)."""

    M: int
    N: int
    K: int
    batch: int = 1
    dtype: str = "float32"
    op_a: str = "N"
    op_b: str = "N"
    aligned16: bool = True
    tma_aligned: bool = True
    sm_count: int = 132
    arch: str | None = None
    rows_aligned16: str = ""  # as Problem's

    def rows_on_grid(self, operand: str) -> bool:
        """Whether every stored row of ``operand`` ("A", "B" or "C") starts on the 16-byte grid."""
        return self.aligned16 or operand in self.rows_aligned16


@dataclass(frozen=True)
class Offer:
    """A rung's answer to an Ask: the tile parameters it would run the product with
    (None: it declines) and why -- what a cost model weighed, or why it declines."""

    params: dict | None
    reason: str = ""

    @property
    def takes(self) -> bool:
        return self.params is not None


@dataclass(frozen=True)
class Rules:
    """How a rung sizes its tiles and answers ``kernel="auto"`` (gemmlab.core.choose asks them);
    each is optional.

    - ``offer(Ask) -> Offer``: whether auto runs this rung on a product, with which tile
      parameters and why; choose asks the rungs in AUTO_RUNGS' order, fastest first.
    - ``size(M, N, K, sm_count, batch) -> params``: tiles for a problem's size where the plan
      brings none of its own (auto, or this rung taking over as a fallback); None: the defaults.
    - ``size_choice(M, N, K, sm_count, batch) -> (params, why)``: the same with the reason, for
      a rung whose sizing weighs options (a cost model); None: ``size``, no reason.
    - ``stage(Ask, bytes copied) -> (params, why)``: auto on operands the rung cannot read in
      place but could read from aligned staging copies (the problem's ``stage``): (params, why)
      where the copy pays, (None, why not) where not, (None, "") where staging does not apply.
    - ``band(the top's params, Ask at the exact size) -> params``: auto on a size of a band
      (gemmlab.core.planner.size_band) planned for the band's top: the rung's own rule at the
      exact size where that rule decides by it (wgmma's wave choice counts tiles), else the
      top's; None: the top's hold for every size.
    - ``weigh(Ask, params, what chose them) -> (params, why)``: auto where a configuration comes
      from elsewhere (a tuned table's entry for another shape): those parameters or others of
      the rung's that it predicts faster; None: taken as they are.
    - ``time(Ask, params, staged) -> kernels.cost.Estimate``: the call's predicted time with these
      parameters (``staged``: on aligned copies of the operands, the copy included), by the
      rung's cost model, host time left out; what choose weighs one rung against another by
      (fp32_tc: ec_wgmma against the FP32 rung).  None: the rung has no model.
    """

    offer: Callable[[Ask], Offer] | None = None
    size: Callable[[int, int, int, int, int], dict] | None = None
    size_choice: Callable[[int, int, int, int, int], tuple[dict, str]] | None = None
    stage: Callable[[Ask, int], tuple[dict | None, str]] | None = None
    band: Callable[[dict, Ask], dict] | None = None
    weigh: Callable[[Ask, dict, str], tuple[dict, str]] | None = None
    time: Callable[[Ask, dict, bool], object] | None = None


# Element-type codes of the tensor-core kernels' templates (wmma_types.cuh).
_CODES = read_constants("include/gemmlab/type_codes.cuh")
TYPE_CODES = {
    "float16": _CODES["TYPE_FLOAT16"],
    "bfloat16": _CODES["TYPE_BFLOAT16"],
    "tf32": _CODES["TYPE_TF32"],
    "float32": _CODES["TYPE_FLOAT32"],
}
# The error-corrected FP32 methods' codes (type_codes.cuh; ec/01_ec_wmma.cuh splits by them): which parts a value is split into.
EC_METHODS = {"fp16_ec": _CODES["METHOD_FP16_EC"], "tf32_ec": _CODES["METHOD_TF32_EC"]}
# Dtypes whose result is always float32: FP32 storage in, FP32 out.
FLOAT32_RESULT = ("float32", "tf32", *EC_METHODS)


@dataclass(frozen=True)
class PrePass:
    """A kernel launched after a pre-pass that writes a stream-ordered workspace it
    reads (ec_wgmma: A and B split into their parts), described in two steps that
    launch nothing, so that a prepared call can keep what the second builds per set of
    addresses (executor.Launcher) and only enqueue it:

    ``workspace_bytes(plan, operands, choice)``: the bytes of workspace the launch
    needs (``choice``: whether a method chosen on the GPU is read);
    ``build(plan, gpu, operands, alpha, beta, choice, workspace, report)``: the
    pre-pass's launches [(kernel, LaunchShape, args), ...] and the kernel's argument
    tuple, for the workspace at address ``workspace`` (``choice``: the record's address
    or 0; ``report``: where a choice record is copied, or 0);
    ``chooses(plan)``: whether, given a choice record, the pre-pass makes the method
    choice from the data itself (ec_wgmma's FOLD: split_scaled.cu), so that the
    executor launches no separate statistics for it;
    ``applies(problem)``, for a staging pre-pass (Launching.staging): whether a launch on
    ``problem`` runs it -- by default where TMA cannot read the operands in place (wgmma);
    rung 8, which can read any operand, only where the choice staged them (Problem.stage).
    """

    workspace_bytes: Callable
    build: Callable
    what: str  # what the workspace is for, for an out-of-memory message
    chooses: Callable = lambda plan: False
    applies: Callable = lambda problem: not problem.tma_aligned


@dataclass(frozen=True)
class Launching:
    """How the executor launches a rung where the standard is not enough: the standard being
    its arguments (M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, strides) on the plan's grid,
    one launch a matrix of a batch.  Each is optional.

    - ``kernel_args(plan, gpu, stream, operands, alpha, beta) -> args``: the kernel's arguments
      where they are more than the standard (e.g. with TMA tensor maps), once per matrix of a
      batch (or once per launch: ``batched_args``).  It may depend only on the addresses, alpha
      and beta: a prepared call keeps it per set of them.
    - ``prepass``: instead of ``kernel_args``, a kernel with a pre-pass (PrePass): its arguments
      built on a workspace the executor takes from the caller's stream.
    - ``staging``: the pre-pass of a problem whose operands the kernel cannot read in place
      (wgmma: Problem.tma_aligned false) or reads slowly (rung 8: Problem.stage): aligned copies
      of them, then the kernel (PrePass.applies says which problems).
    - ``batched_args``: ``kernel_args`` (or the pre-pass) takes a whole batch (Operands.batch
      matrices, Operands.sa/sb/sc elements apart) and the kernel walks all of it in one launch
      (wgmma: its persistent loop); its geometry then takes the batch: geometry(params,
      problem, batch).
    - ``batch_workspace(problem) -> bytes``: workspace the pre-pass needs per matrix of a batch
      it takes in one launch (ec_wgmma: the split parts); executor.Launcher chunks batches so
      that a launch's stays under BATCH_WORKSPACE_LIMIT.  None: none that grows with the batch.
    - ``packed``: the launch first packs op(A) and op(B) into row-major workspaces (ec_wgmma's
      split pre-pass), so the kernel reads every layout and is instantiated for 'N', 'N' only.
    - ``gpu_choice(gpu, plans, ops_a, ops_b, scaled_only)``: a method chosen on the GPU among
      candidate plans of this rung (precision="fp32_tc"): the choice's step builder
      (kernels/ec/choose_method.GPUChoice), whose record the kernels read (``reads_choice``).
    - ``reads_choice``: the kernel's last argument is the address of that choice's record
      (ec/choice.cuh), 0 for none; a pre-pass's functions take it as their argument.
    - ``extra_args``: float arguments after (..., C, ldc, stride_a, stride_b, stride_c) that the
      plan supplies (the error-corrected kernels' scale_a, scale_b); each defaults to 1.0.
    - ``split_fixup(params, problem) -> (bytes of partial tiles, bytes of counters)``: the
      kernel adds its slices of K itself and writes C as unsplit (wgmma: each tile's last slice
      waits for the others' partial tiles); the executor passes the workspaces as
      Operands.partials and .counters, the counters zeroed when first allocated (the kernel
      leaves them zero).  No reduction kernel runs.
    - ``epilogue_bias(plan, strides) -> bool``: whether the kernel adds a bias of these element
      strides (rows, columns, matrices) in its epilogue (Operands.bias, read by kernel_args), so
      that C = alpha * A @ B + bias costs no second pass over C (gemmlab.matmul's ``bias``);
      None: never (the bias is added after the product).
    """

    kernel_args: Callable | None = None
    prepass: PrePass | None = None
    staging: PrePass | None = None
    batched_args: bool = False
    batch_workspace: Callable[[Problem], int] | None = None
    packed: bool = False
    gpu_choice: Callable | None = None
    reads_choice: bool = False
    extra_args: tuple[str, ...] = ()
    split_fixup: Callable[[Mapping[str, int], Problem], tuple[int, int]] | None = None
    epilogue_bias: Callable[[object, tuple], bool] | None = None


@dataclass(frozen=True)
class KernelSpec:
    name: str
    rung: int
    family: str
    dtypes: tuple[str, ...]
    source: str  # path below kernels/
    template: str  # C++ name of the kernel template
    description: str
    params: tuple[TileParam, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    # Template arguments, in order, built from the resolved parameters and the problem.
    template_args: Callable[[Mapping[str, int], Problem], tuple] = field(default=lambda p, prob: ())
    geometry: Callable[[Mapping[str, int], Problem], Launch] = field(default=None)
    # Template-argument sets a problem can select beyond the parameters (e.g. VEC).
    variants: tuple[Problem, ...] = (Problem(1, 1, 1, True),)
    # The tile parameter that splits K (rung 8: over gridDim.y blocks; wgmma: over the
    # persistent loop's work items), if the kernel has one.  The partial products go to a
    # workspace that splitk_reduce adds into C, unless split_fixup is set.
    split_k_param: str | None = None
    # NVRTC targets the kernel exists for (empty: every target gemmlab builds for).
    # A kernel with sm_90a instructions (wgmma, setmaxnreg) lists only "sm_90a".
    arches: tuple[str, ...] = ()
    # The operand layouts (op_a, op_b) the kernel reads; others are unusable (below).
    layouts: tuple[tuple[str, str], ...] = LAYOUTS
    # Why this kernel cannot take a problem's operands (None: it can), and the
    # kernel that runs instead (plan() falls back to it and says why).
    unusable: Callable[[Problem], str | None] | None = None
    fallback: str | None = None
    # How kernel="auto" asks this rung about a product and how it sizes its tiles (Rules);
    # the default asks nothing: a rung that is only ever named.
    rules: Rules = Rules()
    # How the executor launches it where the standard arguments and grid are not enough
    # (Launching); the default: the standard, one launch a matrix of a batch.
    launching: Launching = Launching()
    # The lowest compute capability (86 for sm_86) each dtype runs on (absent: any target
    # NVRTC builds for), and what the kernel needs there, in words, for messages and docs.
    min_arch: Mapping[str, int] = field(default_factory=dict)
    needs: str = ""
    # Reads WMMA fragments element by element (wmma_ext.cuh): only targets in FRAGMENT_MAPS.
    fragment_maps: bool = False
    # The result types the kernel writes whatever its inputs (wgmma_fp8: bfloat16, float32);
    # empty: float32, or the input's own type (FLOAT32_RESULT: float32 only).
    out_dtypes: tuple[str, ...] = ()
    # The public call that runs this kernel where gemmlab.matmul does not (grouped:
    # "gemmlab.grouped_mm"); "" for matmul's rungs.  Tools that run matmul over the ladder
    # (verify, bench's ladder) and the kernels an error message suggests leave it out.
    own_call: str = ""
    # A step toward the rung ("a", "b", ...): a rung taught one idea at a time is a kernel per
    # idea, each a named kernel of its own (kernel="auto" never picks one), listed before the
    # rung's own kernel, which is its last step (tensor rung 4: 4a, 4b, 4c, then wgmma).
    # "": the rung itself.
    step: str = ""

    @property
    def label(self) -> str:
        """The rung's number as the ladder shows it: '4' for the rung, '4a' for a step toward it."""
        return f"{self.rung}{self.step}"

    @property
    def home_layout(self) -> tuple[str, str]:
        """The layout a rung's single-layout checks compile it in: row-major A and B where it
        reads them, else the first it reads (wgmma_fp8 and gemv_mma: NT)."""
        return ("N", "N") if ("N", "N") in self.layouts else self.layouts[0]

    @property
    def ladder_key(self) -> tuple:
        """Where the kernel sits in its family's ladder: by rung, a rung's steps in order before the rung."""
        return (self.rung, 0 if self.step else 1, self.step)

    def why_not_on(self, arch: str, dtype: str | None = None) -> str | None:
        """Why this kernel cannot run on the NVRTC target ``arch`` (for ``dtype``, or for
        any of its dtypes), or None where it can.  Checked before anything compiles."""
        cc = arch_cc(arch)
        if cc < LOWEST_TARGET:
            return f"NVRTC 13 (CUDA 13) builds for sm_{LOWEST_TARGET} and later only"
        if self.arches and arch not in self.arches:
            return f"it needs {' or '.join(self.arches)}: {self.needs}"
        low = self.min_arch.get(dtype, 0) if dtype else min(self.min_arch.values(), default=0)
        if cc < low:
            return f"it needs sm_{low} or later{' for ' + dtype if dtype else ''}: {self.needs}"
        if self.fragment_maps and cc not in FRAGMENT_MAPS:
            return (
                f"its WMMA fragment maps (wmma_ext.cuh) are known for "
                f"{', '.join(f'sm_{c}' for c in FRAGMENT_MAPS)} only, neither measured nor derived "
                f"from SASS for sm_{cc}"
            )
        return None

    def builds_for(self, arch: str, dtype: str | None = None) -> bool:
        """Whether this kernel runs on the NVRTC target ``arch`` (e.g. sm_80, sm_90a)."""
        return self.why_not_on(arch, dtype) is None

    def check_arch(self, arch: str, gpu_name: str = "this GPU", dtype: str | None = None) -> None:
        """Raise ValueError naming the GPU, its target, what the kernel needs and which kernels run there."""
        why = self.why_not_on(arch, dtype)
        if why:
            runs = [
                s.name
                for s in SPECS.values()
                if s.builds_for(arch, dtype) and (dtype is None or dtype in s.dtypes) and not s.own_call and not s.step
            ]
            what = f" for {dtype}" if dtype else ""
            raise ValueError(
                f"kernel {self.name!r} does not run on {gpu_name} ({arch}): {why}. Kernels that run "
                f"there{what}: {', '.join(runs) or 'none'}"
            )

    def arch_range(self) -> str:
        """Where the kernel runs, in words: e.g. 'sm_80 and later (...)' or 'sm_90a only'."""
        if self.arches:
            return f"{' or '.join(self.arches)} only"
        low = max(LOWEST_TARGET, min(self.min_arch.values(), default=0))
        text = f"sm_{low} and later"
        if self.fragment_maps:
            text += f" with known fragment maps ({', '.join(f'sm_{c}' for c in FRAGMENT_MAPS)})"
        by_dtype = {d: v for d, v in self.min_arch.items() if v > low}
        if by_dtype:
            text += "; " + ", ".join(f"{d} sm_{v}+" for d, v in by_dtype.items())
        return text

    def why_unusable(self, problem: Problem) -> str | None:
        """Why this kernel cannot take the problem's operands, or None."""
        if (problem.op_a, problem.op_b) not in self.layouts:
            return (
                f"it reads {' or '.join(a + b for a, b in self.layouts)} operand layouts only, "
                f"not {problem.op_a}{problem.op_b}"
            )
        return self.unusable(problem) if self.unusable else None

    def pre_pass(self, problem: Problem) -> PrePass | None:
        """The pre-pass a launch on ``problem`` runs: the rung's own, or aligned copies of
        operands it cannot read in place (staging); None for none."""
        run = self.launching
        return run.prepass or (run.staging if run.staging is not None and run.staging.applies(problem) else None)

    def splits(self, params: Mapping[str, int]) -> int:
        return int(params[self.split_k_param]) if self.split_k_param else 1

    @property
    def source_path(self) -> Path:
        return KERNEL_DIR / self.source

    # -- parameters ---------------------------------------------------------
    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}

    def resolve(self, given: Mapping[str, int] | None = None, dtype: str | None = None) -> dict[str, int]:
        """Fill in defaults and check every value and every rule (with ``dtype``, that type's
        rules too: Constraint.dtypes); raise ValueError naming what is wrong."""
        given = dict(given or {})
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            legal = ", ".join(known) if known else "none"
            raise ValueError(
                f"kernel {self.name!r} has no tile parameter {', '.join(map(repr, unknown))}; "
                f"its tile parameters are: {legal}"
            )
        resolved = self.defaults()
        for name, value in given.items():
            p = known[name]
            if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
                raise TypeError(f"tile parameter {name}={value!r} of kernel {self.name!r} must be an int")
            value = int(value)
            if value not in p.values:
                raise ValueError(
                    f"tile parameter {name}={value} is not legal for kernel {self.name!r}; "
                    f"legal values: {', '.join(map(str, p.values))}"
                )
            resolved[name] = value
        broken = [c for c in self.constraints if c.binds(dtype) and not c.holds(resolved)]
        if broken:
            desc = ", ".join(f"{k}={v}" for k, v in resolved.items())
            raise ValueError(
                f"tile parameters {desc} are not a legal combination for kernel {self.name!r}"
                + (f" with {dtype} inputs" if any(c.dtypes for c in broken) else "")
                + ": "
                + "; ".join(c.rule for c in broken)
            )
        return resolved

    def configurations(self, dtype: str | None = None) -> list[dict[str, int]]:
        """Every legal combination of tile parameters (with ``dtype``: for that input type)."""
        names = [p.name for p in self.params]
        out = []
        for values in itertools.product(*(p.values for p in self.params)):
            cand = dict(zip(names, values))
            if all(c.holds(cand) for c in self.constraints if c.binds(dtype)):
                out.append(cand)
        return out

    # -- compilation and launch --------------------------------------------
    def check_dtypes(self, problem: Problem) -> None:
        """Raise TypeError if this kernel does not compute problem.dtype -> problem.out_dtype."""
        if problem.dtype not in self.dtypes:
            fits = [s.name for s in SPECS.values() if problem.dtype in s.dtypes and not s.own_call and not s.step]
            raise TypeError(
                f"kernel {self.name!r} computes {', '.join(self.dtypes)}, not {problem.dtype}; "
                f"for {problem.dtype} use one of: {', '.join(fits) or 'none yet'}"
            )
        allowed = self.out_dtypes or (("float32",) if problem.dtype in FLOAT32_RESULT else ("float32", problem.dtype))
        if problem.out_dtype not in allowed:
            raise TypeError(f"{problem.dtype} inputs give a {' or '.join(allowed)} result, not {problem.out_dtype}")

    def name_expression(self, params: Mapping[str, int], problem: Problem) -> str:
        """The template instantiation: the spec's template arguments, then the layouts OPA, OPB."""
        if problem.op_a not in ("N", "T") or problem.op_b not in ("N", "T"):
            raise ValueError(f"operand layouts are 'N' or 'T', not {problem.op_a!r}, {problem.op_b!r}")
        args = self.template_args(params, problem)
        ops = ("N", "N") if self.launching.packed else (problem.op_a, problem.op_b)
        text = "".join(("true" if a else "false") + ", " if isinstance(a, bool) else f"{a}, " for a in args)
        return f"{self.template}<{text}'{ops[0]}', '{ops[1]}'>"

    def instantiations(self, configs=None, layouts=LAYOUTS, arch: str | None = None) -> list[tuple[dict, Problem]]:
        """(parameters, problem) for each configuration (default: every legal one) x
        each variant x each layout, one per distinct name expression; with ``arch``,
        only the variants whose dtype runs there (sm_75: FP16 WMMA, not BF16/TF32)."""
        seen: dict[str, tuple[dict, Problem]] = {}
        variants = [v for v in self.variants if arch is None or self.builds_for(arch, v.dtype)]
        for params in self.configurations() if configs is None else configs:
            for prob in variants:
                # a rule of some types only (Constraint.dtypes) that these parameters break
                if not all(c.holds(params) for c in self.constraints if c.dtypes and c.binds(prob.dtype)):
                    continue
                for op_a, op_b in layouts:
                    p = prob.with_layout(op_a, op_b)
                    # a kernel that reads fewer layouts, or some only in some types (wgmma: TF32 NN)
                    if self.why_unusable(p):
                        continue
                    seen.setdefault(self.name_expression(params, p), (dict(params), p))
        return list(seen.values())

    def all_name_expressions(self, layouts=LAYOUTS) -> list[str]:
        """Every instantiation a call could need: each legal configuration x each variant x each layout."""
        return [self.name_expression(p, prob) for p, prob in self.instantiations(layouts=layouts)]

    def launch(self, params: Mapping[str, int], problem: Problem, batch: int = 1) -> Launch:
        """The launch shape; ``batch``: the matrices one launch of a batched_args kernel takes."""
        if self.launching.batched_args and batch != 1:
            return self.geometry(params, problem, batch)
        return self.geometry(params, problem)

    def as_record(self) -> dict:
        return {
            "name": self.name,
            "rung": self.rung,
            "step": self.step,
            "family": self.family,
            "dtypes": list(self.dtypes),
            "description": self.description,
            "source": self.source,
            "params": {p.name: {"values": list(p.values), "default": p.default, "doc": p.doc} for p in self.params},
            "constraints": [c.rule for c in self.constraints],
            "arches": list(self.arches),
            "min_arch": dict(self.min_arch),
            "needs": self.needs,
            "arch_range": self.arch_range(),
            "runs_on": [a for a in KNOWN_TARGETS if self.builds_for(a)],
        }


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tiles(prob: Problem, bm: int, bn: int) -> int:
    """Blocks of a grid that gives each BM x BN tile of C one block."""
    return cdiv(prob.M, bm) * cdiv(prob.N, bn)


# Every spec by name, in ladder order; filled by registry.register as it indexes the rungs
# (kept here so that KernelSpec can name the kernels that take a dtype).
SPECS: dict[str, KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    if spec.name in SPECS:
        raise ValueError(f"kernel {spec.name!r} registered twice")
    SPECS[spec.name] = spec
    return spec
