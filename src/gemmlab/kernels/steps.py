"""Step builders: what a prepared call launches besides a plan's own kernel.

A step builder builds launches, (kernel, LaunchShape, arguments) triples, and names the
stream-ordered workspaces and memsets they need; it enqueues nothing, so that the executor
(gemmlab.core.executor) can keep what it builds per set of addresses and only enqueue it.
A rung supplies its builders through its KernelSpec's hooks (prepass, staging,
split_fixup, gpu_choice); :class:`Reduction` serves every rung that splits K without
adding the slices up itself, and every empty product (BLAS's quick return);
:func:`pack_rows_launch` is the launch of every staging copy (wgmma's, rung 8's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime import compile as rt_compile
from ..runtime.launch import LaunchShape
from .cuda_constants import read_constants
from .simt.splitk_reduce import SPLITK_REDUCE_SOURCE, SPLITK_REDUCE_THREADS, splitk_reduce_kernel
from .spec import EC_METHODS, cdiv

_ZERO, _ZERO32 = np.float32(0.0), np.int32(0)


# Threads per block of the staging copies (gemmlab/pack_rows.cuh), and their blocks per matrix
# at most: enough to keep every SM busy on one matrix; the threads then walk the groups.
PACK_ROWS_THREADS = read_constants("include/gemmlab/pack_rows.cuh")["PACK_ROWS_THREADS"]
PACK_ROWS_MAX_BLOCKS = 1024


def pack_args(rows: int, cols: int, src: int, ld: int, dst: int, ldd: int, src_stride: int = 0) -> tuple:
    """The arguments every copy to the 16-byte grid takes (pack16, pack32, tf32_pack): ``rows`` x
    ``cols`` at ``src`` (rows ``ld`` apart, matrices ``src_stride`` apart) to ``dst`` (rows ``ldd``
    apart, matrices one after the other)."""
    return (
        np.int32(rows),
        np.int32(cols),
        src,
        np.int32(ld),
        dst,
        np.int32(ldd),
        np.int64(src_stride),
        np.int64(rows * ldd),
    )


@dataclass(frozen=True)
class PackCopy:
    """One operand's staging copy (pack_rows.cuh): ``n`` matrices of ``rows`` x ``cols`` at
    ``src`` (rows ``ld`` apart, matrices ``src_stride`` apart) to ``dst`` (rows ``ldd`` apart,
    matrices one after the other)."""

    rows: int
    cols: int
    src: int
    ld: int
    dst: int
    ldd: int
    n: int = 1
    src_stride: int = 0


def pack_rows_launch(kernel, elem_bytes: int, copies: list[PackCopy]):
    """(kernel, LaunchShape, arguments) of the staging copies (pack_rows.cuh: wgmma's pack16,
    rung 8's pack32) of one or both operands in one launch: one 16-byte group of a row per
    thread (at most PACK_ROWS_MAX_BLOCKS blocks, the threads then walk the groups), gridDim.y
    the copies, gridDim.z their matrices (the most of either)."""
    assert 1 <= len(copies) <= 2, copies
    groups = max(max(c.rows, 1) * cdiv(max(c.cols, 1), 16 // elem_bytes) for c in copies)
    blocks = max(1, min(cdiv(groups, PACK_ROWS_THREADS), PACK_ROWS_MAX_BLOCKS))
    shape = LaunchShape((blocks, len(copies), max(c.n for c in copies)), (PACK_ROWS_THREADS, 1, 1))
    args = ()
    for c in list(copies) + [PackCopy(0, 0, 0, 0, 0, 0, 0)] * (2 - len(copies)):  # an empty second copy
        args += pack_args(c.rows, c.cols, c.src, c.ld, c.dst, c.ldd, c.src_stride) + (np.int32(c.n),)
    return kernel, shape, args


@dataclass(frozen=True)
class Need:
    """A workspace that steps take from the caller's stream (runtime.launch.stream_workspace)."""

    nbytes: int
    what: str  # what it is for, for an out-of-memory message
    slot: str = "scratch"
    zero_new: bool = False
    hint: str = ""


def fixup_needs(fixup_bytes: tuple[int, int], nz: int, what: str) -> tuple[Need, Need]:
    """The workspaces of a split the kernel adds up itself (Launching.split_fixup's bytes
    per matrix), for ``nz`` matrices: the partial tiles (nothing in them is read before it
    is written; the slot Reduction's slices take) and the counters (zeroed when allocated:
    every launch leaves them zero, so kept per stream), taken in this order."""
    partials, counters = fixup_bytes
    hint = "use a smaller SPLITK"
    return (
        Need(partials * nz, what, "splitk", hint=hint),
        Need(counters * nz, what, "splitk_counters", zero_new=True, hint=hint),
    )


class Reduction:
    """splitk_reduce.cu's launches for one launcher (``M`` x ``N`` matrices of ``out_dtype``
    at ``ldc``, ``sc`` elements apart, ``chunks`` matrices per launch): C = alpha * (the sum
    of ``splits`` FP32 slices in a workspace) + beta * C, and with no slices BLAS's quick
    return, C = beta * C without reading A or B.  ``dtype``: the GEMM's, whose method a
    choice record names (a reduction given a record adds only if that method was chosen)."""

    SLOT = "splitk"

    def __init__(self, arch: str, dtype: str, out_dtype: str, M: int, N: int, splits: int, ldc, sc, chunks):
        self.arch, self.out_dtype = arch, out_dtype
        self.M32, self.N32, self.ldc, self.sc = np.int32(M), np.int32(N), ldc, sc
        self.splits32 = np.int32(splits)
        self.method32 = np.int32(EC_METHODS.get(dtype, 0))
        threads = SPLITK_REDUCE_THREADS
        self.shapes = [LaunchShape((-(-M * N // threads), nz, 1), (threads, 1, 1)) for nz in chunks]
        # Where the GEMM writes its slices: rows N apart, matrices splits * M * N apart.
        self.slice_elems = splits * M * N
        self.ldw, self.slice_stride = np.int32(N), np.int64(splits * M * N)
        self._kernel = None

    def kernel(self):
        if self._kernel is None:
            name = splitk_reduce_kernel(self.out_dtype)
            self._kernel = rt_compile.load_kernel(SPLITK_REDUCE_SOURCE, name, self.arch)
        return self._kernel

    def need(self, nz: int, what: str) -> Need:
        """The slices' workspace for ``nz`` matrices."""
        return Need(4 * self.slice_elems * nz, what, self.SLOT, hint="use a smaller SPLITK")

    def reduce_args(self, w: int, c: int, alpha32, beta32, choice: int = 0) -> tuple:
        """The reduction's arguments: the slices at ``w`` into C at ``c``."""
        args = (self.M32, self.N32, self.splits32, w, alpha32, beta32, c, self.ldc, self.sc, choice)
        return args + (self.method32 if choice else _ZERO32,)

    def reduce(self, chunk: int, w: int, c: int, alpha32, beta32, choice: int = 0) -> tuple:
        """The reduction of batch chunk ``chunk``'s slices at ``w`` into C at ``c``."""
        return self.kernel(), self.shapes[chunk], self.reduce_args(w, c, alpha32, beta32, choice)

    def quick_return(self, chunk: int, c: int, beta32) -> tuple:
        """C = beta * C for batch chunk ``chunk`` at ``c``: a reduction of no slices."""
        args = (self.M32, self.N32, _ZERO32, 0, _ZERO, beta32, c, self.ldc, self.sc, 0, _ZERO32)
        return self.kernel(), self.shapes[chunk], args


class Step:
    """One launch of a prepared call: ``kernel`` with ``shape``, its arguments filled in per
    call by ``fill(A, B, C, alpha32, beta32, w, choice)`` from the call's addresses, its
    scalars as float32, the address ``w`` of the chunk's workspace (0 without one) and a
    choice record's (0 without one); everything else is bound when the step is built."""

    __slots__ = ("kernel", "shape", "fill")

    def __init__(self, kernel, shape: LaunchShape, fill):
        self.kernel, self.shape, self.fill = kernel, shape, fill


_ONE = np.float32(1.0)


def standard_steps(kernel, chunks, mnk, lds, strides, extra: tuple, reduction: Reduction | None, what: str) -> tuple:
    """The steps of a kernel with the standard arguments (M, N, K, alpha, A, lda, B, ldb,
    beta, C, ldc, stride_a, stride_b, stride_c, then ``extra``, a choice record's address
    last where the kernel reads one), per batch chunk ((byte offsets of its A, B, C, its
    matrices, its launch shape), ...): ((the chunk's workspace Need or None, its steps),
    ...).  Split over K by a ``reduction``: the kernel writes the slices to the workspace
    (alpha 1, beta 0), then the reduction adds them into C."""
    M, N, K = mnk
    lda, ldb, ldc = lds
    sa, sb, sc = strides
    out = []
    for i, (da, db, dc, nz, shape) in enumerate(chunks):
        if reduction is None:

            def gemm(A, B, C, a32, b32, w, choice, da=da, db=db, dc=dc):
                tail = extra[:-1] + (choice,) if choice else extra
                return (M, N, K, a32, A + da, lda, B + db, ldb, b32, C + dc, ldc, sa, sb, sc) + tail

            out.append((None, (Step(kernel, shape, gemm),)))
            continue
        ldw, stride_w = reduction.ldw, reduction.slice_stride

        def slices(A, B, C, a32, b32, w, choice, da=da, db=db):
            return (M, N, K, _ONE, A + da, lda, B + db, ldb, _ZERO, w, ldw, sa, sb, stride_w)

        def reduce(A, B, C, a32, b32, w, choice, dc=dc):
            return reduction.reduce_args(w, C + dc, a32, b32)

        step_r = Step(reduction.kernel(), reduction.shapes[i], reduce)
        out.append((reduction.need(nz, what), (Step(kernel, shape, slices), step_r)))
    return tuple(out)
