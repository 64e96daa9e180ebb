"""exponent_histogram.cu's host launch: counts of A's and B's elements by FP32
exponent, the data the fp32_tc method is chosen from (on the GPU, by
choose_method.cu; gemmlab.core.methods holds the same rules for host-side counts).

The counting is here, beside its kernel; what to make of the counts (ExponentStats,
choose) is gemmlab.core.methods, which this layer does not import.
"""

from __future__ import annotations

import numpy as np

from ..spec import KERNEL_DIR
from ..cuda_constants import read_constants

EXPONENT_HISTOGRAM_SOURCE = KERNEL_DIR / "ec" / "exponent_histogram.cu"
EXPONENT_HISTOGRAM_KERNEL = "gemmlab::exponent_histogram"
_K = read_constants("ec/exponent_histogram.cu")
HISTOGRAM_THREADS = _K["HISTOGRAM_THREADS"]
HISTOGRAM_WARPS = HISTOGRAM_THREADS // 32  # a warp per row
EXPONENT_BINS = _K["EXPONENT_BINS"]  # one per value of the 8-bit exponent field
GRID_Y_MAX = 65535


def _operand_chunks(gpu, operands) -> list[tuple]:
    """One operand's launches' shares: [(offset, blocks, matrices, (rows, cols), (ld, stride,
    matrices)), ...] for ``operands`` as histogram_launches takes them (a batch of more
    than 65535 in chunks)."""
    out = []
    for off, rows, cols, ld, batch, stride in operands:
        if not (rows and cols and batch):
            continue
        for z0 in range(0, batch, GRID_Y_MAX):
            nz = min(GRID_Y_MAX, batch - z0)
            # A warp per row, at most 8 blocks per SM over the whole launch.
            blocks = max(1, min(-(-rows // HISTOGRAM_WARPS), 8 * gpu.sm_count // nz))
            out.append(
                (
                    off + z0 * stride * 4,
                    blocks,
                    nz,
                    (np.int32(rows), np.int32(cols)),
                    (np.int32(ld), np.int64(stride), np.int32(nz)),
                )
            )
    return out


# An operand with nothing to count in a launch: its blocks return at once.
_NOTHING = (0, 1, 1, (np.int32(0), np.int32(0)), (np.int32(0), np.int64(0), np.int32(0)))


def histogram_launches(gpu, operands_a, operands_b) -> list[tuple]:
    """The launches that add the exponent counts of every matrix of ``operands_a`` into
    one histogram and of ``operands_b`` into another, both operands in each launch
    (blockIdx.z: 0 for A, 1 for B); each list is [(offset, rows, cols, ld, batch,
    stride), ...] (device matrices at a base address + offset bytes, ``batch`` of them
    ``stride`` elements apart).  Returns [(offset into A, offset into B, grid, (rows,
    cols) of A, (ld, stride, matrices) of A, the same two of B), ...]: usually one
    launch, more where an operand has several parts or a batch of more than 65535."""
    a, b = _operand_chunks(gpu, operands_a), _operand_chunks(gpu, operands_b)
    out = []
    for i in range(max(len(a), len(b))):
        off_a, blocks_a, nz_a, shape_a, rest_a = a[i] if i < len(a) else _NOTHING
        off_b, blocks_b, nz_b, shape_b, rest_b = b[i] if i < len(b) else _NOTHING
        out.append((off_a, off_b, (max(blocks_a, blocks_b), max(nz_a, nz_b), 2), shape_a, rest_a, shape_b, rest_b))
    return out


def exponent_histograms(gpu, stream: int, operands) -> list[np.ndarray]:
    """Exponent histograms (EXPONENT_BINS int64 counts each) of device matrices
    ``operands`` = [(ptr, rows, cols, ld), ...], computed on the GPU on ``stream``
    (one pass over each, two a launch), then copied back (a host synchronisation: a
    tool for tests and benchmarks; matmul keeps its counts on the GPU)."""
    from cuda.bindings import driver

    from ...runtime import compile as rt_compile
    from ...runtime.device import make_current
    from ...runtime.launch import device_workspace, driver_call, launch

    make_current(gpu.ordinal)  # callable before any matmul on this thread
    kernel = rt_compile.load_kernel(EXPONENT_HISTOGRAM_SOURCE, EXPONENT_HISTOGRAM_KERNEL, gpu.arch)
    n = len(operands)
    buf = device_workspace(gpu, stream, n * EXPONENT_BINS * 8, "the exponent statistics of fp32_tc")
    try:
        base = int(buf.handle)
        driver_call(driver.cuMemsetD32Async(base, 0, n * EXPONENT_BINS * 2, stream), "cuMemsetD32Async")
        for i in range(0, n, 2):  # operands i and i + 1 in one launch (an odd last one alone)
            sides = [
                ([(0, rows, cols, ld, 1, 0)], ptr, base + (i + j) * EXPONENT_BINS * 8)
                for j, (ptr, rows, cols, ld) in enumerate(operands[i : i + 2])
            ]
            (ops_a, ptr_a, hist_a), (ops_b, ptr_b, hist_b) = (sides + [([], 0, 0)])[:2]
            for off_a, off_b, grid, shape_a, rest_a, shape_b, rest_b in histogram_launches(gpu, ops_a, ops_b):
                launch(
                    kernel,
                    grid,
                    (HISTOGRAM_THREADS, 1, 1),
                    0,
                    stream,
                    *shape_a,
                    ptr_a + off_a,
                    *rest_a,
                    hist_a,
                    *shape_b,
                    ptr_b + off_b,
                    *rest_b,
                    hist_b,
                )
        host = np.zeros(n * EXPONENT_BINS, dtype=np.uint64)
        driver_call(driver.cuMemcpyDtoHAsync(host.ctypes.data, base, host.nbytes, stream), "cuMemcpyDtoHAsync")
        driver_call(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
    finally:
        buf.close(stream)
    return [host[i * EXPONENT_BINS : (i + 1) * EXPONENT_BINS].astype(np.int64) for i in range(n)]
