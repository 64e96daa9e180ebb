"""choose_method.cu's host side: precision="fp32_tc"'s method, chosen on the GPU.

A call's choice is three steps on the caller's stream, with no host
synchronisation (so the call can be captured in a CUDA graph): zero two
histograms, add every matrix of A into one and every matrix of B into the other
(exponent_histogram.cu, both in one launch), then choose_method.cu writes the choice record
(ec/choice.cuh) that the split pre-pass and the GEMMs read.  The rules'
constants are written once, in choose_method.cu, and read here for gemmlab.core.methods.
"""

from __future__ import annotations

import weakref

import numpy as np

from ...runtime.launch import LaunchShape, driver, driver_call, launch_shaped, zero_async
from ..spec import KERNEL_DIR
from ..cuda_constants import read_constants
from ..steps import Need
from .exponent_histogram import (
    EXPONENT_BINS,
    EXPONENT_HISTOGRAM_KERNEL,
    EXPONENT_HISTOGRAM_SOURCE,
    HISTOGRAM_THREADS,
    histogram_launches,
)

CHOOSE_SOURCE = KERNEL_DIR / "ec" / "choose_method.cu"
CHOOSE_KERNEL = "gemmlab::ec_choose_method"
CHOOSE_THREADS = read_constants("ec/choose_method.cu")["CHOOSE_THREADS"]
_C = read_constants("include/gemmlab/ec/choice_rules.cuh")
EXPONENT_BIAS = _C["EXPONENT_BIAS"]
FP16_TOP, FP16_NORMAL_MIN, MAX_SCALE_EXPONENT = _C["FP16_TOP"], _C["FP16_NORMAL_MIN"], _C["MAX_SCALE_EXPONENT"]
UNDERFLOW_NUM, UNDERFLOW_DEN, WIDE_BINADES = _C["UNDERFLOW_NUM"], _C["UNDERFLOW_DEN"], _C["WIDE_BINADES"]

# The record's fields (index of each long long) and its method codes.
CHOICE = {k[len("CHOICE_") :].lower(): v for k, v in read_constants("include/gemmlab/ec/choice.cuh").items()}
CHOICE_FIELDS = CHOICE.pop("fields")
_T = read_constants("include/gemmlab/type_codes.cuh")
CHOICE_METHODS = {
    _T["METHOD_FP16_EC"]: "fp16_ec",
    _T["METHOD_FP16_EC_SCALED"]: "fp16_ec_scaled",
    _T["METHOD_TF32_EC"]: "tf32_ec",
}

HIST_BYTES = EXPONENT_BINS * 8
RECORD_OFFSET = 2 * HIST_BYTES
# After the record: ec_wgmma's stream-K tail counters (02_ec_wgmma.cu), which the workspace's
# first zeroing and then each tail tile's last slice leave zero.
EC_WGMMA_TAIL_COUNTERS = read_constants("ec/02_ec_wgmma.cu")["EC_WGMMA_TAIL_COUNTERS"]
WORKSPACE_BYTES = RECORD_OFFSET + CHOICE_FIELDS * 8 + 4 * EC_WGMMA_TAIL_COUNTERS  # histograms, record, counters


class ChoiceLaunches:
    """The launches of one prepared call's choice, built once (kernels loaded,
    grids and arguments boxed): ``ops_a`` / ``ops_b`` as histogram_launches takes
    them, offsets from A's and B's addresses; ``scaled_only`` for
    precision="fp16_ec_scaled" (gemmlab.core.methods.scaled_choice)."""

    def __init__(self, gpu, ops_a, ops_b, scaled_only: bool):
        from ...runtime import compile as rt_compile

        self.gpu = gpu
        self.hist = rt_compile.load_kernel(EXPONENT_HISTOGRAM_SOURCE, EXPONENT_HISTOGRAM_KERNEL, gpu.arch)
        self.choose = rt_compile.load_kernel(CHOOSE_SOURCE, CHOOSE_KERNEL, gpu.arch)
        block = (HISTOGRAM_THREADS, 1, 1)
        self.hist_launches = [
            (LaunchShape(grid, block), off_a, off_b, shape_a, rest_a, shape_b, rest_b)
            for off_a, off_b, grid, shape_a, rest_a, shape_b, rest_b in histogram_launches(gpu, ops_a, ops_b)
        ]
        self.choose_shape = LaunchShape((1, 1, 1), (CHOOSE_THREADS, 1, 1))
        self.scaled_only = np.int32(1 if scaled_only else 0)

    def launches(self, A: int, B: int, ws: int, report: int = 0) -> tuple[list, int]:
        """The launches that count A's and B's exponents into the histograms at ``ws``
        and choose, [(kernel, shape, args), ...], and the record's address; the record
        also goes to ``report`` (0: nowhere).  Built only, nothing launched: a prepared
        call keeps them per set of addresses."""
        out = [
            (self.hist, shape, (*shape_a, A + off_a, *rest_a, ws, *shape_b, B + off_b, *rest_b, ws + HIST_BYTES))
            for shape, off_a, off_b, shape_a, rest_a, shape_b, rest_b in self.hist_launches
        ]
        record = ws + RECORD_OFFSET
        out.append((self.choose, self.choose_shape, (ws, ws + HIST_BYTES, self.scaled_only, record, report)))
        return out, record

    def enqueue(self, stream: int, A: int, B: int, ws: int, report: int = 0) -> int:
        """On ``stream``: zero the histograms at ``ws`` (WORKSPACE_BYTES), count
        A's and B's exponents, choose; the record also goes to ``report`` (0:
        nowhere).  Returns the record's address."""
        zero_workspace(stream, ws)
        launches, record = self.launches(A, B, ws, report)
        for kernel, shape, args in launches:
            launch_shaped(kernel, shape, stream, args)
        return record


class GPUChoice:
    """The steps of a method chosen on the GPU among ``plans`` (the candidates' plans, the
    first the FP16 one), in stream order, so that a call never waits for the host: a small
    workspace of its own (:attr:`need`, zeroed when new), then either the exponent histograms
    of every matrix of A and of B and the choice record (``ops_a`` / ``ops_b``:
    ChoiceLaunches), or nothing where the first candidate's pre-pass chooses as it splits
    (spec.PrePass.chooses); every candidate then reads the record, and runs only if chosen.
    The choice is also copied to a small report buffer (:meth:`report`), read when asked.
    Supplied by the error-corrected rungs (Launching.gpu_choice); builds, never launches."""

    def __init__(self, gpu, plans, ops_a, ops_b, scaled_only: bool):
        self.gpu, self.scaled_only = gpu, scaled_only
        first = plans[0].spec.launching.prepass
        self.per_row = first is not None and first.chooses(plans[0])
        self.choice = None if self.per_row else ChoiceLaunches(gpu, ops_a, ops_b, scaled_only)
        self.builds_launches = not self.per_row  # whether steps() builds launches of its own
        # A slot of its own: a candidate's pre-pass holds the stream's "scratch" one (and
        # split-K its "splitk" one) while the record is still in use.  Zeroed when new: every
        # choice leaves the record's sums zero again (the choosing pre-pass's last block, or
        # the choose kernel writing every field).
        self.need = Need(WORKSPACE_BYTES, "the fp32_tc method choice", slot="choice", zero_new=True)
        self._report = None

    def report(self, stream: int) -> int:
        """The report buffer's address, allocated at the first call, on its stream."""
        if self._report is None:
            self._report = Report(self.gpu, stream)
        return self._report.ptr

    def steps(self, A: int, B: int, ws: int) -> tuple[tuple, tuple, int]:
        """For A and B at these addresses and the workspace at ``ws``: the memsets before
        the launches ((address, bytes), ...), the launches, and the record's address."""
        if self.per_row:  # the FP16 candidate's split fills the record's sums and chooses
            return (), (), ws + RECORD_OFFSET
        launches, record = self.choice.launches(A, B, ws, self._report.ptr)
        return (histograms(ws),), tuple(launches), record

    def candidate_report(self, i: int) -> int:
        """Where candidate ``i``'s pre-pass copies the record (0: nowhere): the first
        candidate's where it chooses (its last block)."""
        return self._report.ptr if self.per_row and i == 0 else 0

    def record(self):
        """The record last written (a synchronisation), or None before any call."""
        return self._report.read() if self._report is not None else None


def histograms(ws: int) -> tuple[int, int]:
    """(address, bytes) of the histograms in the choice workspace at ``ws``: zeroed before
    every choice, since the histogram launches add into them.  The record needs no zeroing
    per call: the workspace starts zeroed (stream_workspace's zero_new) and every choice
    leaves its sums zero (choose_method.cu writes every field, split_scaled.cu's last block
    zeroes them)."""
    return ws, RECORD_OFFSET


def zero_workspace(stream: int, ws: int) -> None:
    """On ``stream``: zero the histograms of the choice workspace at ``ws``."""
    zero_async(*histograms(ws), stream)


class Report:
    """A small device buffer a prepared call's choices are also written to, read
    when gemmlab.last_plan() asks (after a synchronisation).  Until a choice has
    run (a captured call not yet replayed) its method reads -1."""

    def __init__(self, gpu, stream: int):
        d = driver()
        self.gpu = gpu
        # The buffer outlives any graph, so it is a plain allocation; one made while a
        # graph is captured is allowed in relaxed capture mode (as PyTorch's allocator does).
        previous = driver_call(
            d.cuThreadExchangeStreamCaptureMode(d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
            "cuThreadExchangeStreamCaptureMode",
        )
        try:
            self.ptr = int(driver_call(d.cuMemAlloc(CHOICE_FIELDS * 8), "cuMemAlloc of the fp32_tc choice report"))
        finally:
            driver_call(d.cuThreadExchangeStreamCaptureMode(previous), "cuThreadExchangeStreamCaptureMode")
        # In stream order (a graph being captured records it), so no synchronisation here.
        driver_call(d.cuMemsetD32Async(self.ptr, 0xFFFFFFFF, CHOICE_FIELDS * 2, d.CUstream(stream)), "cuMemsetD32Async")
        weakref.finalize(self, _free, self.ptr)

    def read(self) -> np.ndarray:
        """The record last written (CHOICE_FIELDS int64): waits for the device."""
        from ...runtime.device import make_current

        d = driver()
        make_current(self.gpu.ordinal)
        host = np.zeros(CHOICE_FIELDS, np.int64)
        driver_call(d.cuCtxSynchronize(), "waiting to read the fp32_tc choice report")
        driver_call(d.cuMemcpyDtoH(host.ctypes.data, self.ptr, host.nbytes), "reading the fp32_tc choice report")
        return host


def _free(ptr: int) -> None:
    try:
        driver().cuMemFree(ptr)
    except Exception:  # at interpreter exit the driver may be gone already
        pass
