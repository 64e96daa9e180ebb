"""The choice of kernel: one function, :func:`choose`, from a product and a GPU to
the rung that runs it, its tile parameters and why.

``kernel="auto"`` asks the rungs in :data:`AUTO_RUNGS`' order (fastest first for
the product's dtype) through the hook on each rung's spec (KernelSpec.rules.offer):
whether it takes the product, with which parameters, and why (a rung's own rules
and cost model, kernels/cost.py); the first that takes it runs it, and why the
ones before it declined is kept.  For float32, a tuned table (gemmlab.core.tables)
answers for the tiled rungs where it measured the shape or one near it
(NEAR_TUNED); farther, the rung's rules.weigh (rung 8: its cost model) weighs the
answer against its other tiles and splits.  Then, whatever was asked
for: a rung that does not build for the GPU's target gives way to the highest of
its family that does; a rung that cannot read the operands hands them to its
fallback (or, for wgmma on 16-bit operands TMA cannot read, to a staging copy
where the cost model says it pays); a configuration beyond the GPU's shared
memory is replaced by the nearest that fits.

The planner validates names and parameters first and builds its Plan from the
:class:`Choice`; nothing here looks at arrays or launches anything.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import NamedTuple

from . import tables
from .arrays import ITEMSIZE
from ..kernels import registry
from ..kernels.cost import best
from ..kernels.gemv.batched_small import auto_takes as batched_small_takes
from ..kernels.ec.ec_wgmma import EC_WGMMA_UNSCALED_PARAMS, ec_wgmma_auto_split, ec_wgmma_pays
from ..kernels.simt.pipelined import MIN_K_STEPS_PER_SPLIT, SKINNY_M, SPLITK_VALUES, fill_split
from ..kernels.spec import Ask, KernelSpec, Offer, Problem
from ..runtime.device import ARCH_LIMITS, cc_of

log = logging.getLogger("gemmlab")

# The rungs kernel="auto" asks, in order, by what the kernel multiplies.  The rungs bound by
# memory first where they exist for the dtype: gemv_mma and gemv (a few rows are bound by one
# read of op(B); gemv_mma for 16-bit x @ W.t() on sm_80 and later), outer (a few K by one
# write of C) and the batch rungs (matrices that fit a block each).  batched_small comes
# first for float32, where gemv would take a batch of 16 x 16 matrices, far slower
# (benchmarks/NOTES.md, "Batches of small matrices"); batched_small_mma after the thin rungs,
# which do not take the 16-bit windows it is for.  The last of each list takes every product.
AUTO_RUNGS = {
    "float32": ("batched_small", "gemv", "outer", "pipelined"),
    "float16": ("gemv_mma", "gemv", "outer", "batched_small_mma", "wgmma", "mma_pipelined"),
    "bfloat16": ("gemv_mma", "gemv", "outer", "batched_small_mma", "wgmma", "mma_pipelined"),
    "tf32": ("wgmma", "mma_pipelined"),
    "fp16_ec": ("ec_wgmma", "ec_wmma"),
    "tf32_ec": ("ec_wgmma", "ec_wmma"),
}


@dataclass(frozen=True)
class Product:
    """What is to be computed: ``batch`` products op(A) (M x K) times op(B) (K x N).

    ``dtype`` is what the kernel multiplies (float32, tf32, float16, bfloat16, fp16_ec,
    tf32_ec), ``out_dtype`` what it writes; ``op_a`` / ``op_b`` how op(A) and op(B) are
    stored ("N" row-major, "T" column-major); ``aligned16`` whether every row and base
    allows 16-byte accesses (``rows_aligned16``: the operands, of "A", "B", "C", whose
    stored rows all start on the 16-byte grid, whatever their widths), ``tma_aligned``
    whether TMA can read a and b in place, and ``stage_bytes`` what a staging copy of the
    operands TMA cannot read would move (None: all of A and B).  ``kernel`` and
    ``tile_params`` are what the caller asked for; ``precision`` the caller's (fp16_ec takes
    ec_wgmma's four-set tile, fp32_tc on a thin product runs FP32 on the CUDA cores)."""

    M: int
    N: int
    K: int
    batch: int = 1
    dtype: str = "float32"
    out_dtype: str = "float32"
    op_a: str = "N"
    op_b: str = "N"
    aligned16: bool = True
    tma_aligned: bool = True
    stage_bytes: int | None = None
    kernel: str = "auto"
    tile_params: dict = field(default_factory=dict)
    precision: str | None = None
    rows_aligned16: str = ""


@dataclass(frozen=True)
class GPU:
    """What the choice knows of the GPU: its NVRTC target (None: not known yet), SMs, the
    model's tuned-table name, its name for messages and the dynamic shared memory a block
    may opt in to (None: the table's figure for ``arch``, runtime.device.ARCH_LIMITS)."""

    arch: str | None = None
    sm_count: int = 132
    slug: str | None = None
    name: str = "this GPU"
    smem_limit: int | None = None


@dataclass(frozen=True)
class Choice:
    """The rung chosen for a product, its resolved tile parameters, and why.

    ``reason``: why these tiles, where a rule or cost model weighed them; ``fallbacks``:
    why the rung asked for (or first chosen) is not the one that runs, one sentence a
    hand-over; ``limit_reason``: why the configuration is not the default / tuned / auto
    one (the GPU's shared memory); ``passed_over``: why the rungs auto asked before this
    one declined; ``method`` and ``problem`` as the Plan takes them."""

    rung: str
    params: dict
    reason: str
    fallbacks: tuple[str, ...]
    problem: Problem
    limit_reason: str = ""
    passed_over: tuple[str, ...] = ()
    method: str = ""

    @property
    def spec(self) -> KernelSpec:
        return registry.get(self.rung)


def sized_choice(spec: KernelSpec, M: int, N: int, K: int, sm_count: int, batch: int = 1) -> tuple[dict, str]:
    """A rung's tiles sized to the problem (its spec's rules.size) and why, where the
    rung says (mma_pipelined: its cost model against the tile-count rule); ({}, "")
    for a rung without sized tiles."""
    rules = spec.rules
    if rules.size_choice:
        return rules.size_choice(M, N, K, sm_count, batch)
    return (rules.size(M, N, K, sm_count, batch) if rules.size else {}), ""


# fp32_tc runs IEEE FP32 on the CUDA cores where a side of the product is at most this long.
FP32_TC_CUDA_CORE_SIDE = 16


# Why fp32_tc runs FP32 on the CUDA cores where ec_wgmma cannot run the product as asked and
# ec_wmma would: on an H200 the FP32 rungs were faster than ec_wmma on 106 of the 108 such
# products of the shapes suite, at IEEE FP32's accuracy (benchmarks/NOTES.md, 2026-11-29).
FP32_OVER_EC_WMMA = (
    "IEEE FP32 on the CUDA cores: on this GPU ec_wgmma does not take this product, and the "
    "FP32 rungs run faster than ec_wmma at SGEMM's accuracy"
)


def fp32_tc_on_cuda_cores(M: int, N: int, K: int, batch: int = 1, sm_count: int = 132) -> str:
    """Why ``precision="fp32_tc"`` with ``kernel="auto"`` runs this product as plain FP32
    on the CUDA cores (the float32 rungs, gemv included), or "" where the tensor cores
    pay.  With a side of at most FP32_TC_CUDA_CORE_SIDE the product is a matrix-vector
    product in disguise: its time is one read of the large operand (or one write of C),
    which the error-corrected path makes three (exponent histogram, split into parts,
    the GEMM), with the tensor cores idle for want of work.  A batch of matrices small
    enough for batched_small is bound by memory the same way.  The result is IEEE FP32,
    as accurate as fp32_tc promises (measured: benchmarks/NOTES.md)."""
    if batched_small_takes(Ask(M, N, K, batch, sm_count=sm_count)):
        return (
            f"a batch of {batch} matrices of {M} x {N} x {K}: bound by memory, run as IEEE FP32 on the CUDA "
            f"cores (batched_small), where the error-corrected tensor-core path would read its operands three times"
        )
    side = min(M, N, K)
    if 0 < side <= FP32_TC_CUDA_CORE_SIDE:
        name = "M" if side == M else "N" if side == N else "K"
        return (
            f"{name} = {side} (at most {FP32_TC_CUDA_CORE_SIDE}): a memory-bound product, run as IEEE FP32 "
            f"on the CUDA cores, where the error-corrected tensor-core path would read its operands "
            f"three times"
        )
    return ""


def runnable(spec: KernelSpec, arch: str, dtype: str, gpu_name: str) -> str:
    """The highest rung of ``spec``'s family that runs on ``arch`` for ``dtype``
    (what ``auto`` takes where its first choice cannot run there; never a step toward a
    rung, KernelSpec.step: those are named kernels only); raises ``spec``'s refusal,
    naming what it needs, where none does."""
    fits = [s for s in registry.ladder(spec.family) if not s.step and dtype in s.dtypes and s.builds_for(arch, dtype)]
    if not fits:
        spec.check_arch(arch, gpu_name, dtype)
    log.debug("%s does not run on %s (%s); auto takes %s", spec.name, gpu_name, arch, fits[-1].name)
    return fits[-1].name


def smem_limit_for(arch: str | None) -> int | None:
    """Dynamic shared memory a block may opt in to on an NVRTC target, from the
    table of known limits (runtime.device.ARCH_LIMITS); None where unknown."""
    if arch is None:
        return None
    found = ARCH_LIMITS.get(cc_of(arch))
    return found.smem_per_block_optin if found else None


def fit_smem(
    spec: KernelSpec, params: dict, problem: Problem, limit: int | None, gpu_name: str = "this GPU"
) -> tuple[dict, str]:
    """``params``, or where their dynamic shared memory exceeds ``limit`` the legal
    configuration that fits and keeps the most of them (then the most shared memory,
    i.e. the deepest pipeline), with the reason; ValueError if none fits."""
    need = spec.launch(params, problem).smem_bytes
    if limit is None or need <= limit:
        return params, ""
    fits = [c for c in spec.configurations(problem.dtype) if spec.launch(c, problem).smem_bytes <= limit]
    if not fits:
        raise ValueError(
            f"kernel {spec.name!r} has no configuration within the {limit} bytes of shared memory "
            f"per block of {gpu_name}"
        )
    best = max(fits, key=lambda c: (sum(c[k] == params[k] for k in c), spec.launch(c, problem).smem_bytes))
    if spec.split_k_param:
        best[spec.split_k_param] = params[spec.split_k_param]
    desc = ", ".join(f"{k}={v}" for k, v in params.items())
    why = (
        f"{spec.name}({desc}) needs {need} bytes of shared memory per block, {gpu_name} allows {limit}: "
        f"took the nearest configuration that fits"
    )
    log.debug("%s", why)
    return best, why


MAX_FILL_SPLIT = 8  # the largest split _fit_nearest takes (the most the run-82 sweep measured)


def _fit_nearest(spec: KernelSpec, params: dict, M: int, N: int, K: int, sm_count: int, batch: int) -> dict:
    """pipelined's configuration from the nearest tuned shape, fitted to this one.
    The tuned split-K factor was right for that shape's number of tiles, not for
    this one's: M = 128 tokens answered from 256x4096x4096 (split 4 of 32 tiles)
    left 64 blocks of 16 tiles on 132 SMs.  So the split is chosen again by the
    rule auto_params follows, up to MAX_FILL_SPLIT: the largest that keeps the
    blocks within the SMs where the tiles alone leave more than half of them idle,
    each slice at least MIN_K_STEPS_PER_SPLIT K-steps long, else none.  An output
    of 65-128 columns (attention's P @ V, N = 128) takes 64 x 128 tiles
    (SKINNY_M) instead of a wider or narrower tuned one (the measurements behind
    both: benchmarks/NOTES.md)."""
    if spec.name != "pipelined":
        return params
    params = dict(params)
    if 64 < N <= 128 and params["BN"] != 128:
        params.update(SKINNY_M)
    tiles = -(-M // params["BM"]) * -(-N // params["BN"]) * batch
    steps = -(-max(K, 1) // params["BK"])
    params["SPLITK"] = 1
    if 2 * tiles < sm_count:
        params["SPLITK"] = fill_split(tiles, steps, sm_count, most=MAX_FILL_SPLIT, min_steps=MIN_K_STEPS_PER_SPLIT)
    return params


def _fit_split_k(spec: KernelSpec, params: dict, K: int) -> dict:
    """A tuned configuration taken from the nearest tuned shape, with its split-K
    factor lowered until each slice of this K has MIN_K_STEPS_PER_SPLIT K-steps (the
    tuner never tries more splits than that; at K = 64 a split of 4 is only extra
    launches)."""
    if not spec.split_k_param or spec.split_k_param not in params:
        return params
    steps = -(-max(K, 1) // params.get("BK", 1))
    splits = params[spec.split_k_param]
    while splits > 1 and steps < MIN_K_STEPS_PER_SPLIT * splits:
        splits = max(s for s in SPLITK_VALUES if s < splits)
    return {**params, spec.split_k_param: splits}


# How near a tuned shape must be for its winner to stand without the cost model, in
# doublings of M, N, K and the batch summed (tables.TunedTable.nearest): one side twice or
# half the tuned one's.  Farther, pipelined's cost model weighs it against other tiles and
# splits (its spec's rules.weigh, pipelined.auto_choice): a table of ten large shapes (the H200's, since
# retired) answered 128 x 768 x 30522 with 128 x 256 tiles, 3 of them on 132 SMs.
NEAR_TUNED = 1.0


class _Tuned(NamedTuple):
    """A tuned table's answer for a product."""

    name: str
    params: dict  # fitted to the product where the entry is another shape's
    shape: str  # the tuned shape that answered
    distance: float  # how far that shape is, in doublings (tables.TunedTable.nearest)
    measured: bool  # tuned at this very shape, batch and layout


def _tuned(kernel: str, pr: Product, gpu: GPU) -> _Tuned | None:
    """The tuned table's answer for ``kernel`` at this shape (float32 only so far), fitted
    to it where the table's entry is another shape's; None where no table answers."""
    if not (gpu.slug and pr.M and pr.N and pr.dtype == "float32"):
        return None
    table = tables.load_table(gpu.slug)
    found = table.nearest(kernel, pr.M, pr.N, max(pr.K, 1), pr.op_a + pr.op_b, pr.batch) if table else None
    if not found:
        return None
    name, params, shape, distance = found
    measured = table.measured_at(kernel, pr.M, pr.N, max(pr.K, 1), pr.batch, pr.op_a + pr.op_b)
    if not measured:
        params = _fit_nearest(registry.get(name), params, pr.M, pr.N, pr.K, gpu.sm_count, pr.batch)
    return _Tuned(name, _fit_split_k(registry.get(name), params, pr.K), shape, distance, measured)


def _from_table(found: _Tuned, q: Ask) -> tuple[str, dict, str]:
    """kernel="auto" where a tuned table answers: its winner where measured here or near
    (NEAR_TUNED), else what pipelined's cost model makes of it; with why."""
    if found.measured:
        return found.name, found.params, f"the tuned table's winner at this shape ({found.shape})"
    where = f"the tuned table's nearest entry ({found.shape}, {found.distance:.1f} doublings away)"
    weigh = registry.get(found.name).rules.weigh
    if found.distance <= NEAR_TUNED or weigh is None:
        return found.name, found.params, where
    params, why = weigh(q, found.params, where)
    return found.name, params, why


def ask(pr: Product, gpu: GPU) -> Ask:
    """What the rungs' hooks are told of a product."""
    return Ask(
        pr.M,
        pr.N,
        pr.K,
        pr.batch,
        pr.dtype,
        pr.op_a,
        pr.op_b,
        pr.aligned16,
        pr.tma_aligned,
        gpu.sm_count,
        gpu.arch,
        pr.rows_aligned16,
    )


def _auto(pr: Product, gpu: GPU) -> tuple[str, dict, str, tuple[str, ...]]:
    """kernel="auto": (rung, tile parameters, why, why the rungs before it declined)."""
    q = ask(pr, gpu)
    passed: list[str] = []
    for i, name in enumerate(AUTO_RUNGS[pr.dtype]):
        spec = registry.get(name)
        if spec.family != "gemv" and (found := _tuned("auto", pr, gpu)):
            # The tuned table, where it answers, stands in for the tiled rungs' rules.
            return (*_from_table(found, q), tuple(passed))
        offer: Offer = spec.rules.offer(q)
        if not offer.takes:
            passed.append(offer.reason)
            continue
        # gemv's own parameters are its rule's, not a weighed choice: no reason given.
        why = offer.reason if spec.family != "gemv" else ""
        if gpu.arch is not None and not spec.builds_for(gpu.arch, pr.dtype):
            # A rung that does not run here: the highest of its family that does, at its defaults.
            # (The reason stays the one the rung gave for its own tiles.)
            return runnable(spec, gpu.arch, pr.dtype, gpu.name), {}, why, tuple(passed)
        return name, dict(offer.params), why, tuple(passed)
    raise AssertionError(f"no rung took a {pr.dtype} product: the last of AUTO_RUNGS must take every one")


def _staging(spec: KernelSpec, problem: Problem, pr: Product, gpu: GPU) -> tuple[dict | None, str]:
    """(the rung's parameters, why) where ``spec``, given operands off the 16-byte grid that it
    cannot read in place (wgmma: TMA's rules) or reads slowly (rung 8), should run on staging
    copies of them (its rules.stage); (None, why not), or (None, "") where staging does not
    apply (no hook, or another refusal)."""
    staged = dataclasses.replace(problem, stage=True)
    if spec.rules.stage is None or not spec.launching.staging.applies(staged) or spec.why_unusable(staged):
        return None, ""
    stage_bytes = pr.stage_bytes
    if stage_bytes is None:
        stage_bytes = (pr.M * pr.K + pr.K * pr.N) * ITEMSIZE.get(problem.dtype, 4) * max(pr.batch, 1)  # tf32: 4
    return spec.rules.stage(ask(pr, gpu), stage_bytes)


def _choose(pr: Product, gpu: GPU) -> Choice:
    M, N, K, batch, dtype = pr.M, pr.N, pr.K, pr.batch, pr.dtype
    kernel, tile_params = pr.kernel, dict(pr.tile_params)
    explicit = bool(tile_params)  # the caller's own SPLITK is kept, batch or not
    auto = kernel == "auto"
    smem_limit = gpu.smem_limit if gpu.smem_limit is not None else smem_limit_for(gpu.arch)
    auto_why, passed = "", ()
    if auto:
        kernel, tile_params, auto_why, passed = _auto(pr, gpu)
    elif not tile_params and (found := _tuned(kernel, pr, gpu)):
        kernel, tile_params = found.name, found.params
    spec = registry.get(kernel)
    if gpu.arch is not None:
        spec.check_arch(gpu.arch, gpu.name, dtype if dtype in spec.dtypes else None)
    params = spec.resolve(tile_params, dtype)
    # A batch that fills the GPU by itself needs no split of K (one the caller gave stands).
    if (
        batch > 1
        and not explicit
        and spec.splits(params) > 1
        and "BM" in params
        and -(-M // params["BM"]) * -(-N // params["BN"]) * batch >= gpu.sm_count
    ):
        params[spec.split_k_param] = 1
    problem = Problem(
        M,
        N,
        K,
        pr.aligned16,
        dtype,
        pr.out_dtype,
        pr.op_a,
        pr.op_b,
        tma_aligned=pr.tma_aligned,
        sm_count=gpu.sm_count,
        rows_aligned16=pr.rows_aligned16,
    )
    spec.check_dtypes(problem)
    # A kernel that cannot read these operands hands them to its fallback, which may
    # hand them on (wgmma -> mma_pipelined, which copies any alignment with narrow
    # copies -> wmma_warptile, which reads every layout).
    whys = []
    reason = spec.why_unusable(problem)
    if auto and (reason or spec.rules.stage is not None):  # on aligned copies of the operands, where the copy pays
        staged, stage_why = _staging(spec, problem, pr, gpu)
        if staged is not None:
            try:  # a GPU whose shared memory holds none of its configurations falls back instead
                fit_smem(spec, spec.resolve(staged), dataclasses.replace(problem, stage=True), smem_limit, gpu.name)
            except ValueError as exc:
                staged, stage_why = None, f"no staging for {spec.name}: {exc}"
        if staged is not None:
            problem, params, auto_why, reason = (
                dataclasses.replace(problem, stage=True),
                spec.resolve(staged),
                stage_why,
                None,
            )
        elif stage_why and reason:
            whys.append(stage_why)
        elif stage_why:  # the rung reads them as they are (rung 8): why it did not copy them
            auto_why = f"{auto_why}; {stage_why}" if auto_why else stage_why
    while reason:
        fallback = registry.get(spec.fallback)
        whys.append(f"{spec.name} cannot take these operands: {reason}; running {fallback.name} instead")
        log.debug("%s", whys[-1])
        sized, auto_why = sized_choice(fallback, M, N, K, gpu.sm_count, batch)
        spec, params = fallback, fallback.resolve(sized)
        spec.check_dtypes(problem)
        reason = spec.why_unusable(problem)
    if explicit and not whys and smem_limit is not None and spec.launch(params, problem).smem_bytes > smem_limit:
        raise ValueError(
            f"kernel {spec.name!r} with these tile parameters needs "
            f"{spec.launch(params, problem).smem_bytes} bytes of shared memory per block; "
            f"{gpu.name} ({gpu.arch or 'this target'}) allows {smem_limit}"
        )
    params, limit_why = fit_smem(spec, params, problem, smem_limit, gpu.name)
    return Choice(spec.name, params, auto_why, tuple(whys), problem, limit_why, passed)


# fp32_tc leaves the measured rule's method only for one predicted this much faster or more.
FP32_TC_MARGIN = 0.8


def _as_fp32(pr: Product, gpu: GPU) -> Choice:
    """The float32 choice for fp32_tc's product: IEEE FP32 on the CUDA cores."""
    return _choose(dataclasses.replace(pr, dtype="float32", precision=None), gpu)


def predicted_time(c: Choice, pr: Product, gpu: GPU):
    """The chosen rung's predicted time for the product (kernels.cost.Estimate, its rules.time),
    or None where the rung has no cost model."""
    time = c.spec.rules.time
    if time is None:
        return None
    return time(ask(dataclasses.replace(pr, dtype=c.problem.dtype), gpu), c.params, c.problem.stage)


def _fp32_tc_weighed(pr: Product, gpu: GPU) -> Choice:
    """fp32_tc with kernel="auto" where ec_wgmma builds: ec_wgmma (its split over K by
    ec_wgmma_auto_split) or IEEE FP32 on the CUDA cores, both as accurate as SGEMM, whichever
    the rungs' cost models predict faster (kernels/ec/ec_wgmma_cost.py against
    kernels/simt/pipelined_cost.py): the split pass and fixed cost that the tensor cores must
    repay lose on short, thin and small products."""
    c32 = _as_fp32(pr, gpu)
    split = ec_wgmma_auto_split(pr.M, pr.N, pr.K, gpu.sm_count, pr.batch)
    ec = _choose(dataclasses.replace(pr, kernel="ec_wgmma", tile_params={"SPLITK": split}), gpu)
    if ec.rung != "ec_wgmma":
        return dataclasses.replace(c32, method="fp32", reason=FP32_OVER_EC_WMMA)
    t_ec, t32 = predicted_time(ec, pr, gpu), predicted_time(c32, pr, gpu)
    if t32 is None:  # a float32 rung without a cost model: the tensor cores
        return ec
    # The measured rule's choice (ec_wgmma_pays) stands unless the models predict the other
    # faster by more than FP32_TC_MARGIN: each model is within about 15% of a call's time.
    incumbent = t_ec if ec_wgmma_pays(pr.M, pr.N, pr.K, pr.batch, gpu.sm_count) else t32

    def kept(this: str, other: str) -> str:
        return f"{this}, the measured rule's choice, kept: {other} is not predicted {1 - FP32_TC_MARGIN:.0%} faster"

    if best([t_ec, t32], incumbent=incumbent, margin=FP32_TC_MARGIN) is t_ec:
        why = "ec_wgmma predicted faster than IEEE FP32 on the CUDA cores"
        why = why if t_ec.seconds <= t32.seconds else kept("ec_wgmma", "IEEE FP32 on the CUDA cores")
        return dataclasses.replace(ec, reason=f"{why}: {t_ec} against {t32}")
    why = "IEEE FP32 on the CUDA cores, as accurate and predicted faster"
    why = why if t32.seconds <= t_ec.seconds else kept("IEEE FP32 on the CUDA cores", "ec_wgmma")
    return dataclasses.replace(
        c32,
        method="fp32",
        reason=f"{why}: {t32} against ec_wgmma's {t_ec}",
        passed_over=(f"ec_wgmma predicted {'slower' if t_ec.seconds > t32.seconds else 'not enough faster'}: {t_ec}",)
        + c32.passed_over,
    )


def choose(pr: Product, gpu: GPU) -> Choice:
    """The rung that runs ``pr`` on ``gpu``, its parameters and why (see the module's text).

    Raises ValueError / TypeError where what was asked for cannot run: a kernel that does
    not exist for the GPU's target, illegal tile parameters, a dtype the kernel does not
    compute, parameters beyond the GPU's shared memory."""
    fp32_tc_auto = pr.precision == "fp32_tc" and pr.kernel == "auto"
    why = fp32_tc_on_cuda_cores(pr.M, pr.N, pr.K, pr.batch, gpu.sm_count) if fp32_tc_auto else ""
    if why:  # a product too thin for the tensor cores: IEEE FP32, as accurate
        return dataclasses.replace(_as_fp32(pr, gpu), method="fp32", reason=why)
    if fp32_tc_auto and gpu.arch is not None and registry.get("ec_wgmma").builds_for(gpu.arch):
        return _fp32_tc_weighed(pr, gpu)
    c = _choose(pr, gpu)
    if pr.precision != "fp16_ec" or c.rung != "ec_wgmma" or {"BN", "FOLD"} & set(pr.tile_params):
        return c
    # fp16_ec (FP16 parts as they are, no scale): ec_wgmma's four-set kernel, whose lo keeps
    # its 2^11; auto's choice of ec_wgmma stands, its split is the four-set tile's.
    params = {**EC_WGMMA_UNSCALED_PARAMS, **pr.tile_params}
    if pr.kernel == "auto":
        params["SPLITK"] = ec_wgmma_auto_split(pr.M, pr.N, pr.K, gpu.sm_count, pr.batch, bn=params["BN"])
    return _choose(dataclasses.replace(pr, kernel="ec_wgmma", tile_params=params), gpu)
