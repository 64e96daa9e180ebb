"""The planner: every check a call makes, and the choice of kernel.

From the caller's arrays (described by gemmlab.core.arrays) to a :class:`Plan`:
validation in the order a user wants to hear about problems (:func:`validate`,
raising ValueError / TypeError that name the operands and the rule before
anything touches the GPU), the layouts and batch strides the kernels read
(:func:`kernel_view`), and the kernel with its tile parameters (:func:`plan`:
the names checked here, the choice made by gemmlab.core.choose).  Nothing here
launches anything: the executor turns a plan into launches.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import logging
import numbers
from dataclasses import dataclass, field, replace

import numpy as np

from . import methods, tables
from .arrays import ITEMSIZE, Operand, _c_strides, read_operand
from .choose import GPU, Product, choose
from ..kernels import registry
from ..kernels.spec import FLOAT32_RESULT, Ask, KernelSpec, Problem
from ..kernels.tensor.wgmma_fp8 import (
    FP8_DTYPES,
    FP8_LAYOUT,
    FP8_LAYOUT_WHY,
    FP8_OUT_DTYPES,
    WIDE_TILE_WAVES,
    fp8_auto_tile,
    wgmma_fp8_smem,
)
from ..kernels.tensor.grouped import (
    GROUPED_DTYPES,
    GROUPED_LAYOUTS,
    GROUPED_MAX_GROUPS,
    grouped_auto_tile,
    grouped_smem,
)
from ..kernels.tensor.grouped_wgrad import grouped_wgrad_auto_tile, grouped_wgrad_smem
from ..runtime.tma import tma_aligned, tma_readable

# Input dtypes: float32 for the CUDA-core ladder (and TF32 tensor cores on request),
# float16 and bfloat16 for the tensor-core ladder.
SUPPORTED_DTYPES = ("float32", "float16", "bfloat16")
# None: what the inputs' dtype means (FP32 on CUDA cores for float32); "tf32":
# one TF32 tensor-core pass; the error-corrected FP32 methods of gemmlab.core.methods.
PRECISIONS = (None, "fp32", "tf32", *methods.EC_PRECISIONS)

log = logging.getLogger("gemmlab")


@dataclass(frozen=True)
class Plan:
    """What a call will run: the kernel, its resolved tile parameters and launch shape."""

    spec: KernelSpec
    params: dict
    problem: Problem
    name_expression: str
    extra: dict = field(default_factory=dict)  # values of spec.launching.extra_args (default 1.0)
    method: str = ""  # error-corrected FP32: the method used
    reason: str = ""  # why this kernel or method, where a choice was made
    # Why the kernel asked for is not the one that runs (see KernelSpec.why_unusable), or "".
    fallback_reason: str = ""
    # Why the configuration is not the default / tuned / auto one: it did not fit the GPU's limits.
    limit_reason: str = ""
    # kernel="auto": why the rungs asked before this one declined (gemmlab.core.choose), fastest first.
    passed_over: tuple[str, ...] = ()

    def describe(self) -> str:
        p = ", ".join(f"{k}={v}" for k, v in self.params.items())
        text = f"{self.spec.name}({p})" if p else self.spec.name
        staged = "operands off the 16-byte grid copied onto it first" if self.problem.stage else ""
        notes = [n for n in (self.method, staged, self.fallback_reason, self.limit_reason) if n]
        return f"{text} [{'; '.join(notes)}]" if notes else text

    def explain(self) -> str:
        """describe(), then why this kernel and tiles (``reason``) and why the rungs
        ``kernel="auto"`` asked first declined (``passed_over``), a line each."""
        lines = [self.describe()]
        if self.reason:
            lines.append(f"why: {self.reason}")
        lines += [f"passed over: {why}" for why in self.passed_over]
        return "\n".join(lines)

    def extra_args(self) -> tuple:
        return tuple(np.float32(self.extra.get(name, 1.0)) for name in self.spec.launching.extra_args)

    @property
    def key(self) -> tuple:
        """Everything that makes two plans launch differently (hashable; Plan holds dicts)."""
        return (
            self.spec.name,
            self.name_expression,
            self.problem,
            tuple(sorted(self.params.items())),
            tuple(sorted(self.extra.items())),
        )


def scalar(value, name: str) -> np.float32:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    return np.float32(value)


INT32_MAX = 2**31 - 1  # the kernels take sizes and leading dimensions as 32-bit ints


def storage_itemsize(dtype: str) -> int:
    """Bytes per input element for a kernel dtype: TF32 and the error-corrected
    methods read float32 storage."""
    return ITEMSIZE["float32" if dtype in FLOAT32_RESULT else dtype]


def contiguous_tma_aligned(M: int, N: int, K: int, elem_bytes: int) -> bool:
    """Whether fresh contiguous M x K and K x N arrays allow TMA tensor maps
    (rows of a multiple of 16 bytes, or a single row)."""
    return tma_aligned(0, M, max(K, 1), 0, K, max(N, 1), elem_bytes)


def contiguous_rows_aligned16(
    M: int, N: int, K: int, op_a: str = "N", op_b: str = "N", dtype: str = "float32", out_dtype: str | None = None
) -> str:
    """The operands of fresh contiguous arrays (as contiguous_aligned16's) whose stored
    rows all start on the 16-byte grid (_Side.rows_aligned16): one stored row, or rows
    of a multiple of 16 bytes."""
    e = storage_itemsize(dtype)
    eo = ITEMSIZE[out_dtype or ("float32" if dtype in FLOAT32_RESULT else dtype)]
    stored = {
        "A": (M if op_a == "N" else K, (K if op_a == "N" else M) * e),
        "B": (K if op_b == "N" else N, (N if op_b == "N" else K) * e),
        "C": (M, N * eo),
    }
    return "".join(k for k, (rows, width) in stored.items() if rows <= 1 or width % 16 == 0)


def contiguous_aligned16(
    M: int, N: int, K: int, op_a: str = "N", op_b: str = "N", dtype: str = "float32", out_dtype: str | None = None
) -> bool:
    """Whether fresh contiguous (256-byte aligned) arrays -- op(A) M x K and op(B)
    K x N stored with layouts op_a / op_b, C M x N row-major -- allow the
    kernels' 16-byte accesses: every stored row a multiple of 16 bytes, each
    operand in its own element size (4 floats, or 8 16-bit elements)."""
    e = storage_itemsize(dtype)
    eo = ITEMSIZE[out_dtype or ("float32" if dtype in FLOAT32_RESULT else dtype)]
    widths = ((K if op_a == "N" else M) * e, (N if op_b == "N" else K) * e, N * eo)
    return all(w % 16 == 0 for w in widths)


# -- operand layouts and batches ------------------------------------------------


def matrix_layout(shape, strides, *, unit_column_major: bool = False) -> tuple[str, int] | None:
    """How the kernels read a rows x cols matrix with these element strides:
    ``("N", ld)`` row-major, ``("T", ld)`` column-major (a transposed view of a
    row-major array, or Fortran order), or None when neither side has unit
    stride (e.g. ``a[:, ::2]``) or a stride is negative -- then gemmlab makes
    one contiguous copy.  Rows (columns) of an input may overlap (a broadcast
    row has ld 0); an output is also checked by :func:`overlaps_itself`.
    ``unit_column_major`` (inputs): a single column of unit row stride (``dY.t()``
    of one token) is read column-major, one stored row of ``rows`` elements that
    16-byte copies can take, not ``rows`` stored rows of one element each."""
    rows, cols = shape
    rs, cs = strides
    if rows == 0 or cols == 0 or rows == 1 and cols == 1:
        return "N", max(cols, 1)
    if unit_column_major and cols == 1 and rs == 1:
        return "T", rows
    if (cols == 1 or cs == 1) and (rows == 1 or rs >= 0):
        return "N", rs if rows > 1 else cols
    if (rows == 1 or rs == 1) and (cols == 1 or cs >= 0):
        return "T", cs if cols > 1 else rows
    return None


def overlaps_itself(shape, strides) -> bool:
    """Whether two elements of an array may share memory (a zero or too small
    stride): each stride, smallest first, must step past everything the smaller
    ones span.  (Sufficient, not necessary: exotic interleavings count as overlap.)"""
    if any(n == 0 for n in shape):
        return False
    extent = 1
    for s, n in sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1):
        if s < extent:
            return True
        extent += (n - 1) * s
    return False


def _op_name(name: str, trans: bool) -> str:
    return f"{name}^T" if trans else name


@dataclass
class _Side:
    """One operand as the kernels see it: its logical matrix (after trans_a /
    trans_b), how that is stored, and its element strides over the batch."""

    operand: Operand
    name: str  # "a", "b", "out"; "a^T" when trans_a
    rows: int
    cols: int
    layout: str  # "N" row-major, "T" column-major
    ld: int
    batch: tuple[int, ...]  # element strides over the broadcast batch shape (0: broadcast)
    copy: bool  # a contiguous copy is made first (strides the kernels cannot read, a dtype
    # to convert, an out that overlaps an input or has another dtype)
    trans: bool = False
    cast: str | None = None  # the dtype that copy converts to (an input of a mixed-dtype product)

    def flipped(self) -> "_Side":
        """The same memory read as the transposed matrix."""
        return dataclasses.replace(self, rows=self.cols, cols=self.rows, layout="T" if self.layout == "N" else "N")

    @property
    def width(self) -> int:
        """Elements of one stored row (what 16-byte accesses run along)."""
        return self.cols if self.layout == "N" else self.rows

    def aligned16(self, itemsize: int, ptr: int) -> bool:
        return (
            ptr % 16 == 0
            and (self.ld * itemsize) % 16 == 0
            and (self.width * itemsize) % 16 == 0
            and all((s * itemsize) % 16 == 0 for s in self.batch)
        )

    def rows_aligned16(self, itemsize: int, ptr: int) -> bool:
        """Whether every stored row starts on the 16-byte grid, whatever the rows' width:
        base, batch strides and, where there is more than one stored row, the leading
        dimension (one row has no stride to check: a decode step's dY or logits of odd
        length)."""
        stored_rows = self.rows if self.layout == "N" else self.cols
        return (
            ptr % 16 == 0
            and (stored_rows <= 1 or (self.ld * itemsize) % 16 == 0)
            and all((s * itemsize) % 16 == 0 for s in self.batch)
        )


def _side(
    op: Operand,
    trans: bool,
    batch_shape,
    *,
    is_input: bool = True,
    copy: bool = False,
    cast: str | None = None,
    used: bool = True,
) -> _Side:
    """Resolve one operand: logical matrix, layout (or a copy), batch strides aligned to
    batch_shape.  ``copy``: a contiguous copy is wanted whatever the strides (``cast``:
    converted to that dtype).  An operand without elements, or not ``used`` (the
    inputs of an empty result), is never read or written: no copy, and its strides,
    which may be anything (NumPy gives an empty array 0), are taken as C order's."""
    shape, strides = list(op.shape), list(op.strides)
    if 0 in shape or not used:
        strides, copy, cast = list(_c_strides(op.shape)), False, None
    if trans:
        shape[-2:], strides[-2:] = shape[-1:-3:-1], strides[-1:-3:-1]
    rows, cols = shape[-2:]
    found = None if copy else matrix_layout((rows, cols), strides[-2:], unit_column_major=is_input)
    copy = found is None
    if copy:  # the contiguous copy's strides, read through the same op
        cstr = list(_c_strides(op.shape))
        if trans:
            cstr[-2:] = cstr[-1:-3:-1]
        strides = cstr
        found = matrix_layout((rows, cols), strides[-2:], unit_column_major=is_input)
    layout, ld = found
    nb = len(batch_shape) - (len(shape) - 2)
    batch = tuple(0 if i < nb or shape[i - nb] == 1 else strides[i - nb] for i in range(len(batch_shape)))
    return _Side(op, _op_name(op.name, trans), rows, cols, layout, ld, batch, copy, trans, cast)


def _broadcast_batch(A: Operand, B: Operand, oa: str, ob: str) -> tuple[int, ...]:
    """numpy.matmul's rule for the batch (leading) dimensions, with a message naming the clash."""
    ba, bb = A.shape[:-2], B.shape[:-2]
    n = max(len(ba), len(bb))
    pa, pb = (1,) * (n - len(ba)) + ba, (1,) * (n - len(bb)) + bb
    out = []
    for i, (x, y) in enumerate(zip(pa, pb)):
        if x != y and x != 1 and y != 1:
            raise ValueError(
                f"matmul: the batch dimensions of {A.label()} and {B.label()} do not broadcast: "
                f"{ba} against {bb} differ at dimension {i - n - 2} ({x} vs {y}); numpy.matmul's rule: "
                f"aligned from the right, each pair of batch dimensions must be equal or one of them 1"
            )
        out.append(max(x, y) if x and y else 0)
    return tuple(out)


def batch_groups(shape, *strides) -> list[tuple[int, tuple[int, ...]]]:
    """The batch dimensions with size > 1 as (size, (stride per operand)), adjacent
    ones merged where every operand steps through them as one (outer stride =
    inner stride x inner size): one gridDim.z launch covers a group."""
    dims = [(n, tuple(s[i] for s in strides)) for i, n in enumerate(shape) if n != 1]
    merged: list[tuple[int, tuple[int, ...]]] = []
    for n, st in dims:
        if merged:
            m, mst = merged[-1]
            if all(so == si * n for so, si in zip(mst, st)):
                merged[-1] = (m * n, st)
                continue
        merged.append((n, st))
    return merged


def _check_dtype(op: Operand) -> None:
    if op.dtype_name not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{op.label()}: dtype {op.dtype_name} is not supported; gemmlab's kernels take "
            f"{', '.join(SUPPORTED_DTYPES)} (convert with .astype(float32))"
        )
    if op.kind == "numpy" and not op.obj.dtype.isnative:
        raise TypeError(
            f"{op.label()} is stored in the other byte order ({op.obj.dtype.str}); gemmlab reads "
            f"the machine's own (convert with {op.name}.astype({op.dtype_name}))"
        )


def _check_rank(op: Operand) -> None:
    if len(op.shape) < 1:
        raise ValueError(
            f"{op.label()} is a scalar (0 dimensions); matmul takes vectors, matrices and stacks "
            f"of matrices (1 or more dimensions), as numpy.matmul does: multiply by a scalar instead"
        )


def _as_matrix(op: Operand, axis: int) -> Operand:
    """numpy.matmul's rule for vectors: ``op`` read with a dimension of 1 inserted at
    ``axis`` (-2: a vector a as a 1 x K matrix, or out's row of it; -1: b as K x 1),
    the same memory at the same address (a dimension of one element needs no stride)."""
    at = max(len(op.shape) + 1 + axis, 0)
    return dataclasses.replace(
        op,
        shape=op.shape[:at] + (1,) + op.shape[at:],
        strides=op.strides[:at] + (0,) + op.strides[at:],
        shown=op.shape if op.shown is None else op.shown,
    )


def _check_32bit(op: Operand) -> None:
    """The kernels take sizes and leading dimensions as 32-bit ints (batch strides are 64-bit)."""
    found = matrix_layout(op.shape[-2:], op.strides[-2:])
    ld = found[1] if found else op.shape[-1]  # a copy is C-ordered
    if max(*op.shape[-2:], ld) > INT32_MAX:
        raise ValueError(
            f"{op.label()} has shape {op.shape} and leading dimension {ld}: gemmlab's kernels "
            f"take each dimension and leading dimension as a 32-bit int (at most {INT32_MAX})"
        )


_UNTUNED_NOTED: set[str] = set()


def note_untuned(slug: str) -> None:
    """Log once per GPU model without a tuned table that kernel='auto' uses rules."""
    if slug in _UNTUNED_NOTED:
        return
    _UNTUNED_NOTED.add(slug)
    if tables.load_table(slug) is None:
        log.info(
            "no tuned table for %s: kernel='auto' uses rules written from its limits; "
            "`gemmlab tune` measures configurations fitted to it",
            slug,
        )


def plan(
    kernel: str,
    M: int,
    N: int,
    K: int,
    *,
    aligned16: bool = True,
    sm_count: int = 132,
    gpu_slug: str | None = None,
    dtype: str = "float32",
    out_dtype: str = "float32",
    op_a: str = "N",
    op_b: str = "N",
    batch: int = 1,
    arch: str | None = None,
    tma_aligned: bool = True,
    gpu_name: str = "this GPU",
    smem_limit: int | None = None,
    stage_bytes: int | None = None,
    precision: str | None = None,
    rows_aligned16: str | None = None,
    dtype_b: str | None = None,
    scaling: str | None = None,
    **tile_params,
) -> Plan:
    """Resolve a kernel name and tile parameters for a problem, raising on anything illegal.

    The names are checked here; the choice itself is gemmlab.core.choose's (:func:`choose`),
    which this describes.  Without tile parameters, a named kernel (and ``"auto"``) takes the
    configuration tuned for the nearest shape on this GPU model (``gpu_slug``,
    see gemmlab.tools.tune) if there is one; else the kernel's defaults (for
    ``"auto"``, each rung's ``rules.offer``, asked by gemmlab.core.choose).  ``dtype`` is what the
    kernel multiplies (float32, tf32, float16, bfloat16) and ``out_dtype`` what it
    writes; tuned tables are for float32 only so far.  ``op_a`` / ``op_b`` are
    the kernel-level layouts of op(A) and op(B) ("N" row-major, "T"
    column-major); every layout uses the table tuned for the shape.  ``batch``
    products launched together count as more tiles: a tuned or heuristic
    split-K is dropped when the batch alone fills the GPU.

    ``arch`` is the GPU's NVRTC target (None: not known yet, as when planning
    without a GPU).  A kernel that does not exist for it (wgmma off Hopper) is
    an error naming ``gpu_name``, what the kernel needs and which kernels run
    there; ``"auto"`` picks gemv for the few rows GEMV_MAX_M gives each dtype
    (x @ W.t(): op(B) column-major) or GEMV_ROWS_MAX_M (dY @ W: row-major, split
    over K), wgmma for 16-bit and TF32 inputs and ec_wgmma for
    the error-corrected methods on sm_90a (where ec_wgmma_pays; split over K by
    ec_wgmma_auto_split; fp32_tc weighs it against FP32 by the cost models), and elsewhere the highest rung of the
    family that runs on ``arch`` (see gemmlab.core.choose.runnable).
    ``tma_aligned`` says whether a and b allow TMA tensor maps (see
    runtime.tma.tma_aligned).  ``rows_aligned16``: the operands ("A", "B", "C") whose
    stored rows all start on the 16-byte grid whatever their widths (the kernels that
    take a row's end element by element read them 16 bytes at a time: gemv, outer);
    None: all three where ``aligned16``, else none.  A kernel that cannot take the operands
    (KernelSpec.why_unusable: a layout it does not read, operands TMA cannot
    map) is replaced by its fallback kernel at the fallback's defaults, with the
    reason in ``Plan.fallback_reason``, ``Plan.describe()`` and a debug message
    on the ``gemmlab`` logger.

    With ``"auto"``, a 16-bit product whose operands TMA cannot read in place may
    still run on wgmma, after a staging copy of those operands into an aligned
    workspace (``stage_bytes`` of them; None: all of A and B), where the cost model
    says the copy costs less than the fallback loses (wgmma_staging_choice; the
    plan's ``problem.stage`` and ``reason`` say so).

    ``smem_limit`` is the dynamic shared memory a block may have on the GPU
    (None: the table's figure for ``arch``, runtime.device.ARCH_LIMITS).  A
    default, tuned or auto configuration beyond it is replaced by the nearest
    one that fits (gemmlab.core.choose.fit_smem), with the reason in ``Plan.limit_reason``;
    tile parameters given by the caller that exceed it are an error.

    ``precision``: the caller's, where it changes the choice (see :func:`plan_call`).

    FP8 ``dtype`` (float8_e4m3fn, float8_e5m2; B's type ``dtype_b``, default the same) with
    scales of the kind ``scaling`` ("tensor" by default, "row", "block"): :func:`plan_scaled`,
    op(A) 'N' and op(B) 'T' only, one matrix.
    """
    if dtype in FP8_DTYPES or dtype_b in FP8_DTYPES:
        if (op_a, op_b) != FP8_LAYOUT:
            raise ValueError(f"FP8 operands in layout {op_a}{op_b}: {FP8_LAYOUT_WHY}")
        if batch != 1:
            raise ValueError("FP8 products take one matrix so far, not a batch")
        return plan_scaled(
            M,
            N,
            K,
            dtype,
            dtype_b,
            out_dtype,
            scaling or "tensor",
            arch=arch,
            sm_count=sm_count,
            gpu_name=gpu_name,
            smem_limit=smem_limit,
            kernel=kernel,
            **tile_params,
        )
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a kernel name (str); got {type(kernel).__name__}")
    if kernel == "auto" and tile_params:
        raise ValueError(f"tile parameters {sorted(tile_params)} need a named kernel, not kernel='auto'")
    if kernel != "auto":
        registry.get(kernel)  # an unknown name fails here, tuned table or not
    if gpu_slug:
        note_untuned(gpu_slug)
    if rows_aligned16 is None:
        rows_aligned16 = "ABC" if aligned16 else ""
    c = choose(
        Product(
            M,
            N,
            K,
            batch,
            dtype,
            out_dtype,
            op_a,
            op_b,
            aligned16,
            tma_aligned,
            stage_bytes,
            kernel,
            tile_params,
            precision,
            rows_aligned16,
        ),
        GPU(arch, sm_count, gpu_slug, gpu_name, smem_limit),
    )
    return Plan(
        c.spec,
        c.params,
        c.problem,
        c.spec.name_expression(c.params, c.problem),
        method=c.method,
        reason=c.reason,
        fallback_reason="; ".join(c.fallbacks),
        limit_reason=c.limit_reason,
        passed_over=c.passed_over,
    )


# FP8 products (core/scaled.py): one rung computes them.
FP8_KERNEL = "wgmma_fp8"


def plan_scaled(
    M: int,
    N: int,
    K: int,
    dtype: str,
    dtype_b: str | None = None,
    out_dtype: str = "bfloat16",
    scaling: str = "tensor",
    *,
    arch: str | None = None,
    sm_count: int = 132,
    gpu_name: str = "this GPU",
    smem_limit: int | None = None,
    kernel: str = "auto",
    **tile_params,
) -> Plan:
    """The plan of an M x N x K FP8 product (A ``dtype``, B ``dtype_b``, default the same) with
    scales of the kind ``scaling`` ("tensor", "row", "block"), writing ``out_dtype``.  Only the
    wgmma_fp8 rung computes FP8: ``kernel`` is "auto" or "wgmma_fp8"; on another
    architecture than sm_90a (``arch``; None: not known yet) it is a ValueError naming the
    GPU and what the rung needs."""
    dtype_b = dtype_b or dtype
    for name, d in (("a", dtype), ("b", dtype_b)):
        if d not in FP8_DTYPES:
            raise TypeError(f"{name}: FP8 products take {' or '.join(FP8_DTYPES)}, not {d}")
    if out_dtype not in FP8_OUT_DTYPES:
        raise TypeError(f"FP8 products write {' or '.join(FP8_OUT_DTYPES)}, not {out_dtype}")
    if scaling not in ("tensor", "row", "block"):
        raise ValueError(f"scaling is 'tensor', 'row' or 'block', not {scaling!r}")
    if kernel not in ("auto", FP8_KERNEL):
        raise ValueError(f"FP8 inputs run on {FP8_KERNEL!r} only (or 'auto'), not {kernel!r}")
    tiles = sorted(set(tile_params) - {"PROMOTE"})
    if kernel == "auto" and tiles:
        raise ValueError(
            f"tile parameters {tiles} need a named kernel, not kernel='auto' (auto takes PROMOTE alone: "
            "how often the FP32 sums are promoted, 0 for never, as torch._scaled_mm's use_fast_accum)"
        )
    spec = registry.get(FP8_KERNEL)
    if arch is not None:
        spec.check_arch(arch, gpu_name, dtype)
    wide = fp8_auto_tile(M, N, sm_count) if kernel == "auto" else {}
    params = spec.resolve({**wide, **tile_params} if kernel == "auto" else tile_params, dtype)
    if smem_limit is not None and wgmma_fp8_smem(params) > smem_limit:
        raise ValueError(
            f"{FP8_KERNEL} with {params} needs {wgmma_fp8_smem(params)} bytes of shared memory per block; "
            f"{gpu_name} allows {smem_limit}"
        )
    problem = Problem(M, N, K, True, dtype, out_dtype, "N", "T", sm_count=sm_count, dtype_b=dtype_b, scaling=scaling)
    why = "FP8 inputs: the only rung that multiplies them" if kernel == "auto" else ""
    if wide:
        why += f"; 128 x 256 tiles: they fill {WIDE_TILE_WAVES} waves of the SMs or more"
    elif kernel == "auto":
        why += "; its default tile (too few tiles for 128 x 256; no tuned table for FP8 yet)"
    if kernel == "auto":
        promote = params["PROMOTE"]
        every = "never" if promote == 0 else "every K-step" if promote == 1 else f"every {promote} K-steps"
        why += f", promoting {every}" + (" as asked" if "PROMOTE" in tile_params else "")
    return Plan(spec, params, problem, spec.name_expression(params, problem), reason=why)


def gpu_limits(gpu) -> dict:
    """What plan_scaled, plan_grouped and plan_grouped_wgrad read of a GPU (runtime.device's
    GPUInfo), as their keyword arguments."""
    return {
        "arch": gpu.arch,
        "sm_count": gpu.sm_count,
        "gpu_name": gpu.name,
        "smem_limit": gpu.max_smem_per_block_optin,
    }


# Grouped products (core/grouped.py): one rung computes them.
GROUPED_KERNEL = "grouped"


def plan_grouped(
    T: int,
    N: int,
    K: int,
    groups: int,
    dtype: str,
    op_b: str = "T",
    *,
    arch: str | None = None,
    sm_count: int = 132,
    gpu_name: str = "this GPU",
    smem_limit: int | None = None,
    kernel: str = "auto",
    **tile_params,
) -> Plan:
    """The plan of a grouped product: ``groups`` groups of the T rows of an (T, K) A, each
    times its own K x N matrix of B, stored (G, K, N) (``op_b`` 'N') or (G, N, K) ('T').  Only
    the grouped rung computes it: ``kernel`` is "auto" or "grouped"; on another architecture
    than sm_90a (``arch``; None: not known yet) it is a ValueError naming the GPU and what
    the rung needs."""
    if ("N", op_b) not in GROUPED_LAYOUTS:
        raise ValueError(f"op_b is 'N' (b stored (G, K, N)) or 'T' (stored (G, N, K)), not {op_b!r}")
    spec, params, why = _grouped_rung(
        GROUPED_KERNEL,
        "grouped products",
        kernel,
        tile_params,
        dtype,
        groups,
        arch,
        gpu_name,
        smem_limit,
        grouped_smem,
        lambda: grouped_auto_tile(T, N, groups, sm_count),
    )
    problem = Problem(T, N, K, True, dtype, dtype, "N", op_b, sm_count=sm_count, groups=max(groups, 1))
    return Plan(spec, params, problem, spec.name_expression(params, problem), reason=why)


GROUPED_WGRAD_KERNEL = "grouped_wgrad"


def _grouped_rung(name, what, kernel, tile_params, dtype, groups, arch, gpu_name, smem_limit, smem, auto_tile):
    """(spec, parameters, why) of the one rung ``name`` that computes ``what``: ``kernel`` "auto"
    (its tiles from ``auto_tile()``: (params, why)) or ``name`` with ``tile_params``; refused for
    a dtype or a number of groups the grouped rungs do not take, by name on another
    architecture than the rung's own, or where ``smem(params)`` exceeds ``smem_limit``."""
    if dtype not in GROUPED_DTYPES:
        raise TypeError(f"grouped products take {' or '.join(GROUPED_DTYPES)}, not {dtype}")
    if not 0 <= groups <= GROUPED_MAX_GROUPS:
        raise ValueError(f"a grouped product takes at most {GROUPED_MAX_GROUPS} groups, not {groups}")
    if kernel not in ("auto", name):
        raise ValueError(f"{what} run on {name!r} only (or 'auto'), not {kernel!r}")
    if kernel == "auto" and tile_params:
        raise ValueError(f"tile parameters {sorted(tile_params)} need a named kernel, not kernel='auto'")
    spec = registry.get(name)
    if arch is not None:
        spec.check_arch(arch, gpu_name, dtype)
    why = ""
    if kernel == "auto":
        tile_params, why = auto_tile()
    params = spec.resolve(tile_params, dtype)
    if smem_limit is not None and smem(params) > smem_limit:
        raise ValueError(
            f"{name} with {params} needs {smem(params)} bytes of shared memory per block; {gpu_name} allows {smem_limit}"
        )
    return spec, params, why


def plan_grouped_wgrad(
    P: int,
    Q: int,
    T: int,
    groups: int,
    dtype: str,
    *,
    arch: str | None = None,
    sm_count: int = 132,
    gpu_name: str = "this GPU",
    smem_limit: int | None = None,
    kernel: str = "auto",
    **tile_params,
) -> Plan:
    """The plan of a grouped product's weight gradient: C_g = X_g^T @ Y_g (P x Q) for ``groups``
    groups of the T rows of X (T, P) and Y (T, Q).  Only the grouped_wgrad rung computes it;
    refusals as plan_grouped's."""
    spec, params, why = _grouped_rung(
        GROUPED_WGRAD_KERNEL,
        "grouped weight gradients",
        kernel,
        tile_params,
        dtype,
        groups,
        arch,
        gpu_name,
        smem_limit,
        grouped_wgrad_smem,
        lambda: grouped_wgrad_auto_tile(P, Q, groups, sm_count),
    )
    problem = Problem(P, Q, T, True, dtype, dtype, "T", "N", sm_count=sm_count, groups=max(groups, 1))
    return Plan(spec, params, problem, spec.name_expression(params, problem), reason=why)


def _dtype_arg(value, name: str) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(getattr(value, "name", value)).replace("torch.", "")
    if text not in ("float32", "float16", "bfloat16"):
        raise TypeError(f"{name}={value!r} is not one of float32, float16, bfloat16")
    return text


def promoted(da: str, db: str) -> str:
    """The dtype a product of ``da`` and ``db`` operands is computed in (torch.result_type's
    rule among float16, bfloat16 and float32; NumPy's among the first and last)."""
    return da if da == db else "float32"


def _resolve_dtypes(A: Operand, B: Operand, O: Operand | None, precision, out_dtype) -> tuple[str, str]:
    """(what the kernel multiplies, what it writes) from the operands and the options."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision={precision!r} is not one of {', '.join(repr(p) for p in PRECISIONS if p)} (or None)"
        )
    dtype = promoted(A.dtype_name, B.dtype_name)
    if precision is not None and dtype != "float32":
        raise ValueError(f"precision={precision!r} is for float32 inputs; a and b are {dtype}")
    if precision == "tf32":
        dtype = "tf32"
    elif precision in methods.EC_PRECISIONS:
        # The kernel's dtype; fp32_tc settles its method once the data's exponents are known.
        dtype = "tf32_ec" if precision == "tf32_ec" else "fp16_ec"
    out_dt = _dtype_arg(out_dtype, "out_dtype")
    if O is not None and out_dt is not None and O.dtype_name != out_dt:
        raise TypeError(f"{O.label()} does not have out_dtype={out_dt}")
    allowed = ("float32",) if dtype in FLOAT32_RESULT else ("float32", dtype)
    if out_dt is None:
        # An out the kernels can write is written; any other float out gets the result
        # in float32, cast into it (numpy.matmul's casting="same_kind").
        out_dt = (
            O.dtype_name
            if O is not None and O.dtype_name in allowed
            else "float32"
            if O is not None or dtype in FLOAT32_RESULT
            else dtype
        )
    if out_dt not in allowed:
        inputs = dtype if A.dtype_name == B.dtype_name else f"{A.dtype_name} and {B.dtype_name} (promoted to {dtype})"
        raise TypeError(f"{inputs} inputs give a {' or '.join(allowed)} result, not {out_dt}")
    return dtype, out_dt


@dataclass
class Call:
    """A validated call, before any GPU access: the operands as the kernels see them."""

    A: _Side
    B: _Side
    C: _Side | None  # None: a new result
    K: int
    batch_shape: tuple[int, ...]
    result_shape: tuple[int, ...]  # what the caller gets (numpy.matmul's: a vector's 1 removed)
    alpha: np.float32
    beta: np.float32
    dtypes: dict
    device: int
    on_gpu: bool

    @property
    def product_shape(self) -> tuple[int, ...]:
        """The result as the kernels write it: batch_shape + (M, N)."""
        return self.batch_shape + (self.A.rows, self.B.cols)


def validate(a, b, out, alpha, beta, trans_a, trans_b, precision, out_dtype) -> Call:
    """Every check matmul makes, in the order a user would want to hear about them.

    numpy.matmul's semantics: a vector (1-D) operand is a 1 x K (a) or K x 1 (b)
    matrix whose 1 leaves the result; batch dimensions broadcast; an empty
    operand is never read.  Where the kernels cannot write ``out`` in place --
    strides they cannot write, another dtype than the result's, memory shared
    with a or b -- its side is marked for a copy (the result is computed in a
    new array and copied into out); an input of the other dtype of a
    mixed-dtype product is marked for a converted copy."""
    A, B = read_operand(a, "a"), read_operand(b, "b")
    O = read_operand(out, "out") if out is not None else None
    alpha, beta = scalar(alpha, "alpha"), scalar(beta, "beta")
    for flag, name in ((trans_a, "trans_a"), (trans_b, "trans_b")):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False (use the transpose of the operand); got {flag!r}")
    for X in (A, B):
        _check_rank(X)
    for X in (A, B) + ((O,) if O is not None else ()):
        _check_dtype(X)
    # A vector is its own transpose (as a.T is in NumPy): trans_a / trans_b leave it alone.
    vec_a, vec_b = len(A.shape) == 1, len(B.shape) == 1
    trans_a, trans_b = bool(trans_a) and not vec_a, bool(trans_b) and not vec_b
    MA = _as_matrix(A, -2) if vec_a else A
    MB = _as_matrix(B, -1) if vec_b else B
    for X in (MA, MB):
        _check_32bit(X)
    oa, ob = _op_name("a", trans_a), _op_name("b", trans_b)
    la = MA.shape[:-2] + ((MA.shape[-1], MA.shape[-2]) if trans_a else MA.shape[-2:])
    lb = MB.shape[:-2] + ((MB.shape[-1], MB.shape[-2]) if trans_b else MB.shape[-2:])
    (M, K), (K2, N) = la[-2:], lb[-2:]
    if K != K2:
        sa, sb = (A.shape if vec_a else la), (B.shape if vec_b else lb)
        rule = f"{oa}.shape[-1] == {ob}.shape[{0 if vec_b else -2}]"
        raise ValueError(
            f"matmul: inner dimensions differ: {oa} has shape {sa} (K={K}) but {ob} has shape "
            f"{sb} (K={K2}); {oa} @ {ob} needs {rule}"
        )
    if A.on_gpu != B.on_gpu:
        raise TypeError(
            f"{A.label()} and {B.label()} are not on the same side: pass both as NumPy arrays or both on the same GPU"
        )
    if A.on_gpu and A.device != B.device:
        raise ValueError(f"{A.label()} and {B.label()} are on different devices")
    batch_shape = _broadcast_batch(MA, MB, oa, ob)
    result_shape = batch_shape + (() if vec_a else (M,)) + (() if vec_b else (N,))
    empty = 0 in batch_shape or M == 0 or N == 0
    dtype, out_dt = _resolve_dtypes(A, B, O, precision, out_dtype)
    SC = None
    if O is not None:
        if O.shape != result_shape:
            shapes = f"{oa} {A.shape if vec_a else la}, {ob} {B.shape if vec_b else lb}"
            raise ValueError(
                f"{O.label()} has the wrong shape: {oa} @ {ob} is {result_shape} "
                f"({shapes}; out must have the full broadcast shape)"
            )
        if O.on_gpu != A.on_gpu or (O.on_gpu and O.device != A.device):
            raise ValueError(f"{O.label()} must be where a and b are ({A.where()})")
        if O.kind == "numpy" and not O.obj.flags.writeable:
            raise ValueError(f"{O.label()} is read-only")
        if overlaps_itself(O.shape, O.strides):
            raise ValueError(
                f"{O.label()} has element strides {O.strides}: some of its elements share "
                "memory (a zero or too small stride), so results would overwrite each other"
            )
        MO = _as_matrix(O, -2) if vec_a else O
        MO = _as_matrix(MO, -1) if vec_b else MO
        _check_32bit(MO)
        # Memory shared with an input (out is a, or a view of b, ...): numpy's way, a
        # new array for the result, copied into out once the inputs are read.
        shared = O.meets(A) or O.meets(B)
        SC = _side(MO, False, batch_shape, is_input=False, copy=not empty and (shared or O.dtype_name != out_dt))
    elif beta != 0:
        raise ValueError(f"beta={float(beta)} scales an existing output, so it needs out=; pass out= or leave beta=0")
    # A mixed-dtype product: the other operand converted once (never an empty one: not read).
    kernel_in = "float32" if dtype in FLOAT32_RESULT else dtype
    SA, SB = (
        _side(
            X,
            t,
            batch_shape,
            copy=X.dtype_name != kernel_in,
            cast=kernel_in if X.dtype_name != kernel_in else None,
            used=not empty,
        )
        for X, t in ((MA, trans_a), (MB, trans_b))
    )
    for S in (SA, SB, SC):
        if S is not None and S.copy and S.operand.kind == "cuda":
            raise TypeError(
                f"{S.operand.label()} would have to be copied (element strides {S.operand.strides} "
                "that gemmlab's kernels cannot read: no unit stride in its matrices, or a negative "
                "one; or a dtype other than the product's; or memory shared with an input), and "
                "gemmlab copies only CuPy arrays and PyTorch tensors: pass a contiguous array"
            )
    return Call(
        SA,
        SB,
        SC,
        K,
        batch_shape,
        result_shape,
        alpha,
        beta,
        {"dtype": dtype, "out_dtype": out_dt},
        A.device if A.on_gpu else 0,
        A.on_gpu,
    )


def family_call(call: Call) -> bool:
    """Whether other sizes of ``call`` can be prepared from it (with_size): one matrix each
    (a and b 2-D), op(a) of at least BAND_MIN rows or K banded (k_banded), nothing copied, a
    non-empty result written in place, in row-major order."""
    return (
        call.batch_shape == ()
        and len(call.A.operand.shape) == 2
        and len(call.B.operand.shape) == 2
        and (call.A.rows >= BAND_MIN or k_banded(call.A.rows, call.B.cols, call.K, call.A.layout, call.B.layout))
        and call.B.cols > 0
        and not (call.A.copy or call.B.copy)
        and (call.C is None or not call.C.copy and call.C.layout == "N")
    )


def thin_batch_call(call: Call) -> bool:
    """Whether other cache lengths of ``call`` can be derived from it (executor.Family): a
    batch of more than one thin product (op(a) of 1..THIN_MAX_ROWS - 1 rows), a, b and out (if
    given) of the batch's rank with its batch dimensions (nothing broadcast), N or K banded
    (n_banded, k_banded), K not 0, nothing copied, out row-major -- a decode step's Q @ K^T
    or P @ V over a cache."""
    nd, bs = len(call.batch_shape) + 2, call.batch_shape
    M, N, K = call.A.rows, call.B.cols, call.K
    return (
        math.prod(bs) > 1
        and 0 < M < THIN_MAX_ROWS
        and K > 0
        and (n_banded(M, N, False) or k_banded(M, N, K, call.A.layout, call.B.layout, False))
        and all(len(S.operand.shape) == nd and S.operand.shape[:-2] == bs for S in (call.A, call.B))
        and not (call.A.copy or call.B.copy)
        and (call.C is None or not call.C.copy and call.C.layout == "N" and call.C.operand.shape[:-2] == bs)
    )


def banded(call: Call) -> tuple[bool, bool]:
    """Whether N and K of ``call``'s family are banded (gemmlab.core.api's family key says it
    of the signature, and the two must agree): a thin batch's (thin_batch_call) by n_banded
    and k_banded, one matrix's K by k_banded."""
    M, N, K = call.A.rows, call.B.cols, call.K
    if thin_batch_call(call):
        return n_banded(M, N, False), k_banded(M, N, K, call.A.layout, call.B.layout, False)
    return False, k_banded(M, N, K, call.A.layout, call.B.layout)


def without_objects(call: Call) -> Call:
    """``call`` with its operands' objects left out (what a family keeps: no array of the caller's)."""

    def bare(S):
        return None if S is None else dataclasses.replace(S, operand=dataclasses.replace(S.operand, obj=None))

    return dataclasses.replace(call, A=bare(call.A), B=bare(call.B), C=bare(call.C))


def with_size(call: Call, M: int, K: int, a, pa: int, b, pb: int, out, pc: int) -> Call | None:
    """A call of the family of ``call`` (family_call) with op(a) of M rows and K columns:
    ``a`` at ``pa``, ``b`` at ``pb``, ``out`` at ``pc`` (or None: a new result), every other
    argument's signature equal to ``call``'s but for those sizes (gemmlab.core.api's family
    key).  What validate decides from the sizes is decided again -- the layouts and leading
    dimensions of a, of b where K changes and of out (_side) -- and the rest is what the
    signature already vouched for: dtypes, devices, strides, out's shape (its rows are a's,
    checked by the key); out's overlap with a or b is checked at every call
    (PreparedCall.overlaps).  None where the exact size would need a copy (the full path
    makes it)."""
    A, B = call.A, call.B
    shape = (K, M) if A.trans else (M, K)
    SA = _side(dataclasses.replace(A.operand, obj=a, shape=shape, ptr=pa), A.trans, ())
    SB = B
    if K != call.K:
        shape = (B.operand.shape[0], K) if B.trans else (K, B.operand.shape[1])
        SB = _side(dataclasses.replace(B.operand, obj=b, shape=shape, ptr=pb), B.trans, ())
    else:
        SB = dataclasses.replace(B, operand=dataclasses.replace(B.operand, obj=b, ptr=pb))
    SC = None
    if call.C is not None:
        C = call.C
        SC = _side(dataclasses.replace(C.operand, obj=out, shape=(M, C.cols), ptr=pc), False, (), is_input=False)
    if SA.copy or SB.copy or SC is not None and (SC.copy or SC.layout != "N"):
        return None
    return dataclasses.replace(call, A=SA, B=SB, C=SC, K=K, result_shape=(M, call.result_shape[-1]))


@dataclass
class KernelView:
    """The product as launched: C row-major.  A column-major out is computed as
    out^T = op(b)^T op(a)^T: operands swapped, each read as its transpose."""

    M: int
    N: int
    A: _Side
    B: _Side
    C: _Side | None
    ptrs: dict  # side name -> device pointer (0 where not known yet: a copy, a new result)
    itemsize: dict
    batch_shape: tuple[int, ...]

    def aligned16(self) -> bool:
        return all(s.aligned16(self.itemsize[k], self.ptrs.get(k, 0)) for k, s in self._sides())

    def rows_aligned16(self) -> str:
        """The operands ("A", "B", "C": a new result's rows always) whose stored rows all
        start on the 16-byte grid (_Side.rows_aligned16)."""
        return "".join(k for k, s in self._sides() if s.rows_aligned16(self.itemsize[k], self.ptrs.get(k, 0))) + (
            "C" if self.C is None else ""
        )

    def _sides(self) -> list:
        return [("A", self.A), ("B", self.B)] + ([("C", self.C)] if self.C is not None else [])

    def launch_batch(self) -> int:
        """Products per launch: the largest group of batch dimensions (see batch_groups)."""
        sides = [self.A.batch, self.B.batch] + ([self.C.batch] if self.C is not None else [])
        return max((n for n, _ in batch_groups(self.batch_shape, *sides)), default=1)


def kernel_view(call: Call, C: _Side | None = None, ptrs: dict | None = None) -> KernelView:
    A, B, C = call.A, call.B, C if C is not None else call.C
    M, N = A.rows, B.cols
    item_in = storage_itemsize(call.dtypes["dtype"])
    itemsize = {"A": item_in, "B": item_in, "C": ITEMSIZE[call.dtypes["out_dtype"]]}
    if ptrs is None:  # where the operands are now (a copy, not made yet, will be freshly allocated)
        ptrs = {k: 0 if S.copy else S.operand.ptr for k, S in (("A", A), ("B", B), ("C", C)) if S is not None}
    ptrs = dict(ptrs)
    if C is not None and C.layout == "T" and not C.copy:
        A, B, C, M, N = B.flipped(), A.flipped(), C.flipped(), N, M
        ptrs["A"], ptrs["B"] = ptrs.get("B", 0), ptrs.get("A", 0)
    return KernelView(M, N, A, B, C, ptrs, itemsize, call.batch_shape)


def result_side(call: Call) -> _Side:
    """The side of a new result: a C-ordered array of the result shape (allocators
    give addresses aligned far beyond 16 bytes)."""
    strides = _c_strides(call.product_shape)
    rows, cols = call.product_shape[-2:]
    nb = len(call.batch_shape)
    batch = tuple(0 if call.batch_shape[i] == 1 else strides[i] for i in range(nb))
    return _Side(None, "out", rows, cols, "N", max(cols, 1), batch, False)


@dataclass(frozen=True)
class Batching:
    """How a call's batch is launched: ``nz`` products per launch along gridDim.z,
    ``strides`` (A, B, C elements) between them, and element offsets (A, B, C) of
    each launch over the remaining batch dimensions."""

    nz: int
    strides: tuple[int, int, int]
    offsets: tuple[tuple[int, int, int], ...]


def batching(kv: KernelView) -> Batching:
    """The largest group of batch dimensions goes to gridDim.z; the others are
    looped over on the host (see batch_groups)."""
    groups = batch_groups(kv.batch_shape, kv.A.batch, kv.B.batch, kv.C.batch)
    z = max(range(len(groups)), key=lambda i: groups[i][0], default=None)
    nz, zstr = groups[z] if z is not None else (1, (0, 0, 0))
    outer = [g for i, g in enumerate(groups) if i != z]
    offsets = tuple(
        tuple(sum(i * st[k] for i, (_, st) in zip(idx, outer)) for k in range(3))
        for idx in itertools.product(*(range(n) for n, _ in outer))
    )
    return Batching(nz, tuple(zstr), offsets)


def tma_reading(call: Call, kv: KernelView, bt: Batching, sizes=None) -> tuple[bool, int]:
    """(whether TMA reads both operands of ``kv`` in place, the bytes a staging copy of those it
    cannot read would move at ``sizes`` (M, N, K: a band's top; default the call's)): base,
    rows and every batch stride on the 16-byte grid, batch strides >= 0 (TMA steps forward
    only); the copy takes every matrix of a launch (a matrix the batch shares, stride 0,
    once)."""
    ia = kv.itemsize["A"]
    batch_strides = [bt.strides[:2]] + [off[:2] for off in bt.offsets]
    readable = [
        tma_readable(kv.ptrs[k], rows, side.ld, ia, [st[i] for st in batch_strides])
        for i, (k, side, rows) in enumerate(
            (("A", kv.A, kv.M if kv.A.layout == "N" else call.K), ("B", kv.B, call.K if kv.B.layout == "N" else kv.N))
        )
    ]
    M, N, K = sizes if sizes is not None else (kv.M, kv.N, call.K)
    stage_bytes = sum(
        rows * cols * ia * (bt.nz if stride else 1)
        for ok, rows, cols, stride in (
            (readable[0], M, K, bt.strides[0]),
            (readable[1], K, N, bt.strides[1]),
        )
        if not ok
    )
    return all(readable), stage_bytes


# -- sizes in bands ----------------------------------------------------------------------------
#
# A mixture of experts multiplies each expert's share of the tokens: a new row count M at
# almost every call of the forward pass and of dX = dY @ W, a new K at every weight gradient
# dW = dY^T @ x.  From BAND_MIN up, the choice is made once per band of sizes -- each octave
# [2^p, 2^(p+1)) split into 8, a size rounded up to a multiple of 2^(p-3) -- for the band's
# largest size, and applied to each exact size: the problem, the grid, the tensor maps and the
# arguments are the exact size's.
#
# M is banded in every call.  A tile or split chosen for the band's top is legal for any M
# below it (tiles cover any M; a split is of K; the kernels take M at run time).  The rules
# on small sizes (gemv, outer, wgmma's narrow tiles, fp32_tc's thin products) decide below
# 256; a rule that decides by the exact size above it -- wgmma's wave choice, which counts
# tiles -- says so through its spec's rules.band, and a size it would tile otherwise than the
# top is planned for itself (band_holds).
#
# K is banded where it is the tokens of a weight gradient (k_banded): op(a) column-major and
# op(b) row-major (K the outer stored axis of both, a token slice of dY and of x), one matrix,
# M and N above K_BAND_MIN_SIDE.  Every rung takes K at run time and cuts any K into its
# split's slices (wgmma, ec_wgmma: slices of whole K-steps, the last ones shorter or empty;
# pipelined and gemv: the same, an empty slice writing zeros for the reduction), so a split
# chosen for the top is legal for any K of the band; the workspaces' sizes depend on M and N
# only.  What decides by K -- split counts, the cost models, ec_wgmma's tail, the tuned
# tables' nearest entries -- is then the top's decision; the rules that decide by a small K
# (outer, gemv's short columns, fp32_tc's thin products) never see K >= 256, and those that
# decide by a small M or N (gemv's rows, fp32_tc's thin side, wgmma's narrow tiles below
# WGMMA_NARROW_MIN_M) are left out by K_BAND_MIN_SIDE or do not change legality.
#
# A decode step's attention over a growing key/value cache is a batch of thin products (op(a)
# of fewer than THIN_MAX_ROWS rows: one query row, or a few of a group or of a speculative
# step) whose cache length is N in Q @ K^T and K in P @ V: a new size at every token.  There
# N and K are banded from BAND_MIN up (n_banded, k_banded), whatever the layouts: the rows of
# op(a) are not banded (below BAND_MIN, where gemv's and the thin rules decide by the exact
# M), tiles cover any N below the top, and every rung takes K at run time as above.  Whether a
# stored row's width is on the 16-byte grid can change with N or K (scores' rows in Q @ K^T,
# P's in P @ V): the plan is made with the exact size's alignment (KernelView), so only the
# choice is the top's.
#
# A shape a tuned table measured (tables.TunedTable.measured_at) keeps its own entry: banding
# stops there (an H100's 128 x 4096 x 128256 would otherwise be chosen for K = 131072).  The
# bands depend on the sizes only: the plan a call gets does not depend on which came before.
BAND_MIN = 256
K_BAND_MIN_SIDE = 17  # M and N above every rule on a thin side (gemv's rows, fp32_tc's 16)
THIN_MAX_ROWS = K_BAND_MIN_SIDE  # a batch of products of fewer rows bands its N and K (decode)


def size_band(n: int) -> tuple[int, int]:
    """(the smallest, the largest) size of ``n``'s band: (n, n) below BAND_MIN; else ``n``
    rounded up to a multiple of 2^(bit_length(n) - 4) is the top, and the band holds every
    size that rounds up to it (a power of two also takes the top of the octave below)."""
    if n < BAND_MIN:
        return n, n
    step = 1 << (n.bit_length() - 4)
    hi = -(-n // step) * step
    return max(BAND_MIN, hi - (1 << ((hi - 1).bit_length() - 4)) + 1), hi


def k_banded(M: int, N: int, K: int, op_a: str, op_b: str, single: bool = True) -> bool:
    """Whether K is chosen by band (see above): K >= BAND_MIN, and either a weight gradient's
    layout (op(a) column-major, op(b) row-major), one matrix, M and N >= K_BAND_MIN_SIDE, or a
    batch of thin products (thin_batch: P @ V over a cache)."""
    if K < BAND_MIN:
        return False
    if single:
        return op_a == "T" and op_b == "N" and M >= K_BAND_MIN_SIDE and N >= K_BAND_MIN_SIDE
    return M < THIN_MAX_ROWS


def n_banded(M: int, N: int, single: bool) -> bool:
    """Whether N is chosen by band (see above): a batch of thin products, N >= BAND_MIN (Q @ K^T
    over a cache)."""
    return not single and M < THIN_MAX_ROWS and N >= BAND_MIN


def for_size(p: Plan, M: int, N: int, K: int, bands: str) -> Plan:
    """``p``, chosen for its problem's sizes (a band's top), applied to a product of M x N
    over K (the problem and the instantiation are the exact size's); ``bands`` says which
    bands the choice was made for, appended to the reason."""
    if M == p.problem.M and N == p.problem.N and K == p.problem.K:
        return p
    problem = replace(p.problem, M=M, N=N, K=K)
    return replace(
        p,
        problem=problem,
        name_expression=p.spec.name_expression(p.params, problem),
        reason=with_bands(p.reason, bands),
    )


def with_bands(reason: str, bands: str) -> str:
    """A plan's reason with the bands its choice was made for (``bands``: _bands' words)."""
    if not bands:
        return reason
    return f"{reason}; chosen for {bands}" if reason else f"chosen for {bands}"


def bands_of(problem: Problem, single: bool = True) -> str:
    """The bands a plan of ``problem`` was chosen for, in words ("" where for its own sizes)."""
    return _bands(problem.M, problem.N, problem.K, problem.op_a, problem.op_b, single)[3]


def _bands(M: int, N: int, K: int, op_a: str, op_b: str, single: bool, measured=None) -> tuple[int, int, int, str]:
    """(M's band top, N's where N is banded, else N, K's where K is banded, else K, the bands
    in words where they differ from the sizes); the sizes themselves where ``measured(M, N,
    K)`` says a tuned table measured this shape."""
    lo, hi = size_band(M)
    nt, kt, words = N, K, [f"rows {lo}..{hi}"] if hi != M else []
    if n_banded(M, N, single):
        nlo, nt = size_band(N)
        if nt != N:
            words.append(f"N {nlo}..{nt}")
    if k_banded(M, N, K, op_a, op_b, single):
        klo, kt = size_band(K)
        if kt != K:
            words.append(f"K {klo}..{kt}")
    if words and measured is not None and measured(M, N, K):
        return M, N, K, ""
    return hi, nt, kt, ", ".join(words)


def measured_shape(gpu, kernel: str, dtype: str, ops: str, batch: int):
    """A function (M, N, K) -> whether the tuned table of ``gpu`` measured that shape for
    ``kernel`` (float32: the only tables so far) in this layout and batch; None where no table
    can answer."""
    if dtype != "float32" or not gpu.slug:
        return None
    table = tables.load_table(gpu.slug)
    if table is None:
        return None
    return lambda M, N, K: table.measured_at(kernel, M, N, K, batch, ops)


def plan_call(
    call: Call, kv: KernelView, bt: Batching, gpu, kernel: str, tile_params: dict, precision: str | None = None
) -> Plan:
    """The plan for a validated call on ``gpu``, with every pointer of ``kv``
    known: 16-byte alignment and TMA's rules are checked on every matrix of the
    batch.  ``precision`` goes to the choice (gemmlab.core.choose): fp16_ec (FP16 parts
    as they are, no scale) runs ec_wgmma's four-set kernel unless the caller named
    BN or FOLD, and fp32_tc with kernel="auto" on a product too thin for the tensor
    cores runs FP32 on the CUDA cores (the plan's ``method`` is then "fp32").
    Rows from BAND_MIN up, a weight gradient's K and a thin batch's N and K (k_banded,
    n_banded) are chosen for their band's top (size_band) and the plan applied to the exact
    sizes (for_size)."""
    single = bt.nz == 1 and len(bt.offsets) == 1
    measured = measured_shape(gpu, kernel, call.dtypes["dtype"], kv.A.layout + kv.B.layout, bt.nz)
    M, N, K, bands = _bands(kv.M, kv.N, call.K, kv.A.layout, kv.B.layout, single, measured)
    # A staging copy is priced at the bands' tops too: the choice is the band's.
    tma_ok, stage_bytes = tma_reading(call, kv, bt, (M, N, K))
    try:
        key = (
            kernel,
            M,
            N,
            K,
            kv.aligned16(),
            kv.rows_aligned16(),
            kv.A.layout,
            kv.B.layout,
            bt.nz,
            tma_ok,
            stage_bytes,
            precision,
            tuple(call.dtypes.items()),
            tuple((k, v, type(v)) for k, v in tile_params.items()),
            gpu.sm_count,
            gpu.slug,
            gpu.arch,
            gpu.name,
            gpu.max_smem_per_block_optin,
            tables.version,
        )
        found = CALL_PLANS.get(key)
    except TypeError:  # a tile parameter that cannot be hashed: planned, not kept
        key = found = None
    if found is None:
        found = _plan_kept(call, kv, bt, gpu, kernel, tile_params, precision, M, N, K, tma_ok, stage_bytes, key)
    if bands and not band_holds(found, kv.M, kv.N, call.K, bt.nz, kernel, tile_params):
        # The rung's own rule decides by the exact size here: chosen for it, kept by it.
        exact_key = None if key is None else (*key, "exact", kv.M, kv.N, call.K)
        found = CALL_PLANS.get(exact_key) if exact_key is not None else None
        if found is None:
            exact_bytes = tma_reading(call, kv, bt)[1]  # (its staging copy's bytes too)
            found = _plan_kept(
                call, kv, bt, gpu, kernel, tile_params, precision, kv.M, kv.N, call.K, tma_ok, exact_bytes, exact_key
            )
        return found
    return for_size(found, kv.M, kv.N, call.K, bands)


def _plan_kept(call, kv, bt, gpu, kernel, tile_params, precision, M, N, K, tma_ok, stage_bytes, key) -> Plan:
    """plan_call's plan for M x N over K (a band's top or the exact sizes), kept in CALL_PLANS
    under ``key`` (None: not kept)."""
    found = plan(
        kernel,
        M,
        N,
        K,
        aligned16=kv.aligned16(),
        rows_aligned16=kv.rows_aligned16(),
        sm_count=gpu.sm_count,
        gpu_slug=gpu.slug,
        op_a=kv.A.layout,
        op_b=kv.B.layout,
        batch=bt.nz,
        arch=gpu.arch,
        tma_aligned=tma_ok,
        gpu_name=gpu.name,
        smem_limit=gpu.max_smem_per_block_optin,
        stage_bytes=stage_bytes,
        precision=precision,
        **call.dtypes,
        **tile_params,
    )
    if key is not None:
        if len(CALL_PLANS) >= CALL_PLANS_KEPT:
            CALL_PLANS.clear()
        CALL_PLANS[key] = found
    return found


def band_holds(p: Plan, M: int, N: int, K: int, batch: int, kernel: str, tile_params: dict) -> bool:
    """Whether ``p``, chosen with kernel="auto" for a band's top, is also what its rung's own
    rule gives at M x N over K (KernelSpec.rules.band: wgmma's wave choice counts tiles); True
    for a rung without a hook, a kernel named or parameters given."""
    hook = p.spec.rules.band
    if hook is None or kernel != "auto" or tile_params:
        return True
    pr = p.problem
    ask = Ask(M=M, N=N, K=K, batch=batch, dtype=pr.dtype, op_a=pr.op_a, op_b=pr.op_b, sm_count=pr.sm_count)
    return hook(p.params, ask) == p.params


# Plans of calls by everything plan() decides from, sizes by band (size_band, k_banded, n_banded):
# a signature that left executor.CACHE (a mixture of experts meets more sizes than it keeps),
# another signature of the same problem (other strides of the same layouts, out given or not) or
# another size of the same bands is planned without a choice.
CALL_PLANS: dict = {}
CALL_PLANS_KEPT = 8192


def plan_for_choice(p: Plan, choice: "methods.MethodChoice", gpu, kernel: str, tile_params: dict, batch: int) -> Plan:
    """``p`` (an error-corrected plan) for the method the data asked for: the
    kernel instantiated for that method's parts, with its scales (the other method's
    kernel chosen, as ``p`` was, for the band of its rows: plan_call)."""
    if choice.kernel_dtype != p.problem.dtype:
        pr = p.problem
        measured = measured_shape(gpu, kernel, "float32", pr.op_a + pr.op_b, batch)
        M, N, K, bands = _bands(pr.M, pr.N, pr.K, pr.op_a, pr.op_b, batch == 1, measured)
        try:
            key = (
                kernel,
                M,
                N,
                K,
                pr.aligned16,
                pr.rows_aligned16,
                choice.kernel_dtype,
                pr.out_dtype,
                pr.op_a,
                pr.op_b,
                batch,
                pr.tma_aligned,
                tuple((k, v, type(v)) for k, v in tile_params.items()),
                gpu.sm_count,
                gpu.slug,
                gpu.arch,
                gpu.name,
                gpu.max_smem_per_block_optin,
                tables.version,
            )
            found = CHOICE_PLANS.get(key)
        except TypeError:  # a tile parameter that cannot be hashed: planned, not kept
            key = found = None
        if found is None:
            found = plan(
                kernel,
                M,
                N,
                K,
                aligned16=pr.aligned16,
                rows_aligned16=pr.rows_aligned16,
                sm_count=gpu.sm_count,
                gpu_slug=gpu.slug,
                dtype=choice.kernel_dtype,
                out_dtype=pr.out_dtype,
                op_a=pr.op_a,
                op_b=pr.op_b,
                batch=batch,
                arch=gpu.arch,
                tma_aligned=pr.tma_aligned,
                gpu_name=gpu.name,
                smem_limit=gpu.max_smem_per_block_optin,
                **tile_params,
            )
            if key is not None:
                if len(CHOICE_PLANS) >= CALL_PLANS_KEPT:
                    CHOICE_PLANS.clear()
                CHOICE_PLANS[key] = found
        p = for_size(found, pr.M, pr.N, pr.K, bands)
    log.debug("error-corrected method: %s (%s)", choice.method, choice.reason)
    return replace(
        p, extra=choice.extra, method=choice.method, reason=with_bands(choice.reason, bands_of(p.problem, batch == 1))
    )


# The other method's plans of error-corrected calls (plan_for_choice), as CALL_PLANS.
CHOICE_PLANS: dict = {}
