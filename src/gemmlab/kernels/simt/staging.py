"""Rung 8's staging pre-pass (pack32.cu): A and B, where 08_pipelined.cu would read them 4 bytes
at a time, copied first to rows on the 16-byte grid so that it reads them 16 bytes at a time.

Which operands: those whose stored rows are not all on the 16-byte grid in whole groups of 4
floats (base, leading dimension, width).  The copies' padding is zeros, so the kernel's
16-byte loads may run past K into it.  One launch copies A, B or both; one matrix (pipelined.py
declines to stage a batch).  Whether to stage at all is the cost model's (pipelined.py, staging_choice).
"""

from __future__ import annotations

import numpy as np

from ...runtime.tma import Operands, padded_ld
from ..spec import KERNEL_DIR, PrePass
from ..steps import PackCopy, pack_rows_launch

PACK32_SOURCE = KERNEL_DIR / "simt" / "pack32.cu"
PACK32_KERNEL = "gemmlab::pack32"


def stored(pr, ops: Operands) -> tuple[tuple, tuple]:
    """A and B of a launch as stored: (pointer, rows, columns, leading dimension)."""
    a = (ops.A,) + ((pr.M, pr.K) if pr.op_a == "N" else (pr.K, pr.M)) + (ops.lda,)
    b = (ops.B,) + ((pr.K, pr.N) if pr.op_b == "N" else (pr.N, pr.K)) + (ops.ldb,)
    return a, b


def on_grid(x: tuple) -> bool:
    """Whether the kernel reads the stored operand ``x`` 16 bytes at a time in place: base and
    (for more than one row) leading dimension on the 16-byte grid, and rows of whole 16 bytes
    (a partial group past the end of a row would be read as data)."""
    ptr, rows, cols, ld = x
    return ptr % 16 == 0 and (rows <= 1 or ld % 4 == 0) and cols % 4 == 0


def _copy_bytes(x: tuple) -> int:
    _, rows, cols, _ = x
    return 4 * rows * padded_ld(cols, 4)


def workspace_bytes(plan, ops: Operands, choice: int = 0) -> int:
    """PrePass.workspace_bytes: the copies of the operands off the grid, one after the other
    (each a multiple of 16 bytes long)."""
    return sum(_copy_bytes(x) for x in stored(plan.problem, ops) if not on_grid(x))


def launches(plan, gpu, ops: Operands, alpha, beta, choice: int, workspace: int, report: int = 0) -> tuple[list, tuple]:
    """PrePass.build: pack32's launch, copying the operands off the grid (one or both), into the workspace at
    ``workspace``, and the kernel's standard arguments on the copies (the others in place)."""
    from ...runtime import compile as rt_compile

    if ops.batch > 1:
        raise ValueError(f"{plan.describe()}: rung 8 stages one matrix a launch, not {ops.batch}")
    pr = plan.problem
    copies, at, where = [], int(workspace), []
    for x in stored(pr, ops):
        ptr, rows, cols, ld = x
        if on_grid(x):
            where.append((ptr, ld))
            continue
        ldd = padded_ld(cols, 4)
        copies.append(PackCopy(rows, cols, ptr, ld, at, ldd))
        where.append((at, ldd))
        at += _copy_bytes(x)
    out = []
    if copies:  # both operands' copies in one launch
        kernel = rt_compile.load_kernel(PACK32_SOURCE, PACK32_KERNEL, gpu.arch)
        out.append(pack_rows_launch(kernel, 4, copies))
    (a, lda), (b, ldb) = where
    args = (
        np.int32(pr.M),
        np.int32(pr.N),
        np.int32(pr.K),
        np.float32(alpha),
        a,
        np.int32(lda),
        b,
        np.int32(ldb),
        np.float32(beta),
        ops.C,
        np.int32(ops.ldc),
        np.int64(0),
        np.int64(0),
        np.int64(ops.sc),
    )
    return out, args


PREPASS = PrePass(
    workspace_bytes=workspace_bytes,
    build=launches,
    what="rung 8 (pipelined), for copies of A and B on the 16-byte grid,",
    applies=lambda problem: problem.stage,
)
