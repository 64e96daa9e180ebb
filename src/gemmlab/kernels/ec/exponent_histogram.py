"""exponent_histogram.cu's host launch: counts of A's and B's elements by FP32
exponent, the data the fp32_tc method is chosen from (on the GPU, by
choose_method.cu; gemmlab.ec holds the same rules for host-side counts).

The counting is here, beside its kernel; what to make of the counts (ExponentStats,
choose) is gemmlab.ec, which this layer does not import.
"""

from __future__ import annotations

import numpy as np

from ..spec import KERNEL_DIR
from ..cuda_constants import read_constants

EXPONENT_HISTOGRAM_SOURCE = KERNEL_DIR / "ec" / "exponent_histogram.cu"
EXPONENT_HISTOGRAM_KERNEL = "gemmlab::exponent_histogram"
_K = read_constants("ec/exponent_histogram.cu")
HISTOGRAM_THREADS = _K["HISTOGRAM_THREADS"]
HISTOGRAM_WARPS = HISTOGRAM_THREADS // 32   # a warp per row
EXPONENT_BINS = _K["EXPONENT_BINS"]   # one per value of the 8-bit exponent field
GRID_Y_MAX = 65535


def histogram_launches(gpu, operands) -> list[tuple]:
    """The launches that add the exponent counts of every matrix of ``operands`` =
    [(offset, rows, cols, ld, batch, stride), ...] (device matrices at a base
    address + offset bytes, ``batch`` of them ``stride`` elements apart) into one
    histogram: [(offset, grid, args after the pointer: rows, cols, ld, stride), ...]
    (a batch of more than 65535 in chunks)."""
    out = []
    for off, rows, cols, ld, batch, stride in operands:
        if not (rows and cols and batch):
            continue
        for z0 in range(0, batch, GRID_Y_MAX):
            nz = min(GRID_Y_MAX, batch - z0)
            # A warp per row, at most 8 blocks per SM over the whole launch.
            blocks = max(1, min(-(-rows // HISTOGRAM_WARPS), 8 * gpu.sm_count // nz))
            out.append((off + z0 * stride * 4, (blocks, nz, 1),
                        (np.int32(rows), np.int32(cols), np.int32(ld), np.int64(stride))))
    return out


def exponent_histograms(gpu, stream: int, operands) -> list[np.ndarray]:
    """Exponent histograms (EXPONENT_BINS int64 counts each) of device matrices
    ``operands`` = [(ptr, rows, cols, ld), ...], computed on the GPU on ``stream``
    (one pass over each), then copied back (a host synchronisation: a tool for
    tests and benchmarks; matmul keeps its counts on the GPU)."""
    from cuda.bindings import driver

    from ...runtime import compile as rt_compile
    from ...runtime.device import make_current
    from ...runtime.launch import device_workspace, driver_call, launch

    make_current(gpu.ordinal)   # callable before any matmul on this thread
    kernel = rt_compile.load_kernel(EXPONENT_HISTOGRAM_SOURCE, EXPONENT_HISTOGRAM_KERNEL, gpu.arch)
    n = len(operands)
    buf = device_workspace(gpu, stream, n * EXPONENT_BINS * 8, "the exponent statistics of fp32_tc")
    try:
        base = int(buf.handle)
        driver_call(driver.cuMemsetD32Async(base, 0, n * EXPONENT_BINS * 2, stream), "cuMemsetD32Async")
        for i, (ptr, rows, cols, ld) in enumerate(operands):
            for off, grid, (r, c, l, s) in histogram_launches(gpu, [(0, rows, cols, ld, 1, 0)]):
                launch(kernel, grid, (HISTOGRAM_THREADS, 1, 1), 0, stream, r, c, ptr + off, l, s,
                       base + i * EXPONENT_BINS * 8)
        host = np.zeros(n * EXPONENT_BINS, dtype=np.uint64)
        driver_call(driver.cuMemcpyDtoHAsync(host.ctypes.data, base, host.nbytes, stream), "cuMemcpyDtoHAsync")
        driver_call(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
    finally:
        buf.close(stream)
    return [host[i * EXPONENT_BINS:(i + 1) * EXPONENT_BINS].astype(np.int64) for i in range(n)]

