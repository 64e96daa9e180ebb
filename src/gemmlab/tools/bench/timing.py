"""GPU timing with CUDA events: warm-up, L2 flushed before every timed run, median;
for the public-call figure each run starts on an idle GPU, so the call's host time counts."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

_flush = {}


def _flush_buffer(l2_bytes: int):
    """A buffer of twice the L2 (at least 256 MiB); filling it evicts what a run left in L2."""
    import cupy as cp

    dev = cp.cuda.Device().id
    if dev not in _flush:
        n = max(2 * l2_bytes, 256 << 20) // 4
        _flush[dev] = cp.empty(n, dtype=cp.float32)
    return _flush[dev]


@dataclass
class Timing:
    ms: float | None  # median of the timed runs
    ms_all: list[float] = field(default_factory=list)
    skipped: str | None = None  # why it was not timed

    @property
    def ms_min(self) -> float | None:
        return min(self.ms_all) if self.ms_all else None


def time_gpu(
    fn,
    *,
    l2_bytes: int,
    reps: int = 20,
    warmup: int = 2,
    flush: bool = True,
    max_run_s: float = 3.0,
    budget_s: float = 3.0,
    cutoff_ms: float | None = None,
    host: bool = False,
) -> Timing:
    """Time ``fn`` (which enqueues GPU work on the current stream) with CUDA events.

    One untimed call first (compilation, module load), then one timed call to
    estimate the cost.  A kernel whose single run exceeds ``max_run_s`` is
    skipped with the reason; otherwise it is repeated up to ``reps`` times
    within ``budget_s`` (at least 3), each after an L2 flush, and the median
    is reported.  With ``cutoff_ms`` (the tuner's), a run slower than that is
    reported after its one timed run: it is out of the race anyway.

    ``host=False``: the runs are enqueued back to back, so fn's host work
    overlaps the GPU's previous run and the events measure its GPU work (the
    kernel-only figure).  ``host=True`` (the public-call figure): after the
    flush the stream is synchronised, so each run starts on an idle GPU and the
    events, recorded around the call, take in its host time (checks, planning,
    launch) as well as its GPU work: what a caller who waits for the result
    gets per call.  CuPy's current stream and PyTorch's default stream are the
    same legacy default stream, so this holds for calls on either's arrays.
    """
    import cupy as cp

    stream = cp.cuda.get_current_stream()
    buf = _flush_buffer(l2_bytes) if flush else None

    def timed_run():
        if buf is not None:
            buf.fill(0)
        if host:
            stream.synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        fn()
        end.record(stream)
        return start, end

    fn()
    stream.synchronize()
    start, end = timed_run()
    end.synchronize()
    first = cp.cuda.get_elapsed_time(start, end)
    if first / 1e3 > max_run_s:
        return Timing(None, [first], skipped=f"one run takes {first / 1e3:.1f} s (> {max_run_s:g} s)")
    if cutoff_ms is not None and first > cutoff_ms:
        return Timing(first, [first])
    n = max(3, min(reps, int(budget_s * 1e3 / max(first, 1e-3))))
    for _ in range(max(0, warmup - 1)):
        fn()
    events = [timed_run() for _ in range(n)]
    events[-1][1].synchronize()
    times = [cp.cuda.get_elapsed_time(s, e) for s, e in events]
    return Timing(statistics.median(times), times)


def time_rounds(
    calls: dict, *, l2_bytes: int, rounds: int, reps: int = 3, budget_s: float = 0.3, host: bool = True
) -> dict:
    """Several calls (name -> fn) timed by time_gpu in turn, round after round, the order
    rotating from round to round, each call's runs pooled into one median: at a GPU's
    power limit a call timed in one block runs on whatever state the calls before it
    left, and interleaved every call meets the same mix (benchmarks/NOTES.md).
    ``host``: time_gpu's (default: the public-call figure)."""
    names = list(calls)
    pooled = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            pooled[name] += time_gpu(
                calls[name], l2_bytes=l2_bytes, reps=reps, warmup=1, budget_s=budget_s, host=host
            ).ms_all
    return {name: Timing(statistics.median(ms), ms) for name, ms in pooled.items()}
