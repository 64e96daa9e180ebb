"""`gemmlab bench --suite overhead`: what a call costs on the host, and what
that does to % of cuBLAS where the GPU work is small.

Host µs per call: on tiny operands (64 x 64 x 64 by default), ``calls``
back-to-back calls timed with time.perf_counter after a warm-up, without
synchronising inside the loop (the clock stops when the last call returns; the
device is synchronised after, outside the timing), the median over rounds in
which every row takes its turn (so drift of the CPU's clock hits all rows
alike).  A few hundred calls of a few µs of GPU work each stay well inside the
launch queue, so the host is never held up by the GPU and the figure is the
host's alone.  Rows: torch.matmul, cupy.matmul and gemmlab.matmul on PyTorch
and CuPy arrays for each dtype (float32, TF32, fp32_tc, float16, bfloat16),
with and without ``out=``, a batch, ``gemmlab.torch.mm`` beside ``torch.mm``,
``torch.matmul`` inside ``gemmlab.torch.fp32_tc()`` beside it outside, bf16
``torch.mm`` (with and without ``out=``) and ``F.linear`` inside
``gemmlab.torch.use_gemmlab()`` beside the same calls outside, the
bare launch of a prepared plan (``run_plan``), calls on arrays at new
addresses (each call takes the next of NEW_ARRAYS operand sets, more than a
prepared call keeps launches for: what a model pays when its activations move),
and calls of a new number of rows each time (the next of NEW_ROWS sizes, more
signatures than the prepared-call cache keeps: a mixture of experts' products,
whose rows follow the router).  Each gemmlab row is
compared with torch.matmul's (torch.mm's) row of the same dtype, shape and
``out=``: the project's target is a host time no larger; rows above it are
flagged.

% of cuBLAS: ``kernel="auto"`` through the public call (suites.run_suite) at
64^3 .. 2048^3 for float32, bfloat16 and float16.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Callable

from ...core.api import last_plan, matmul
from ...core.executor import run_plan
from .report import _fmt, _pyplot, path_of, savefig, table as size_table
from .suites import _progress, bench_gpu, run_suite, torch_tf32

HOST_SHAPE = (64, 64, 64)
BATCH = 16
SIZES = [(n, n, n) for n in (64, 128, 256, 512, 1024, 2048)]
SIZE_DTYPES = ("float32", "bfloat16", "float16")
CALLS, ROUNDS, WARMUP = 300, 15, 20
NEW_ARRAYS = 2048  # operand sets the "new addresses" rows cycle through (> executor.ARGS_KEPT)
NEW_ROWS = 4608  # row counts the "new rows" rows cycle through (> executor.CACHE's size)
NEW_ROWS_BANDED = 1024  # the first row count (K) of the "new rows (K) in bands" rows (all >= planner.BAND_MIN)
# A decode step's attention over a growing key/value cache: batch x heads of one query row,
# head dimension, and the first cached length; each call reads one more cached position.
DECODE_BH, DECODE_HEAD, DECODE_FIRST = 32, 128, 1024
# The host rows' dtypes: what the arrays hold, and the precision gemmlab is asked for.
HOST_DTYPES = {
    "float32": ("float32", None),
    "tf32": ("float32", "tf32"),
    "fp32_tc": ("float32", "fp32_tc"),
    "float16": ("float16", None),
    "bfloat16": ("bfloat16", None),
}


@dataclass
class HostRecord:
    gpu: str
    call: str  # the expression timed
    library: str  # gemmlab, torch or cupy
    arrays: str  # torch or cupy
    dtype: str  # float32, tf32, fp32_tc, float16, bfloat16
    out: bool  # out= given
    shape: str  # MxNxK, BxMxNxK for a batch
    host_us: float  # median over the rounds of (round's time / calls)
    us_all: list[float]
    calls: int
    torch_us: float | None = None  # torch.matmul's (torch.mm's) host µs, same dtype, shape and out=
    over_torch: bool = False  # a gemmlab row slower on the host than torch: the target missed

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Case:
    call: str
    library: str
    arrays: str
    dtype: str
    out: bool
    shape: str
    fn: Callable
    tf32: bool = False  # torch.matmul on float32 may use TF32 (the "tf32" rows)
    key: tuple = field(default=())  # rows of one key are compared with torch's row of that key


def _operands(arrays: str, storage: str, a_shape, b_shape, c_shape):
    """Random a and b and an empty c on the GPU, as PyTorch tensors or CuPy arrays."""
    if arrays == "torch":
        import torch

        t = getattr(torch, storage)
        return (
            torch.rand(a_shape, device="cuda", dtype=t),
            torch.rand(b_shape, device="cuda", dtype=t),
            torch.empty(c_shape, device="cuda", dtype=t),
        )
    import cupy as cp

    return (
        cp.random.random(a_shape).astype(storage),
        cp.random.random(b_shape).astype(storage),
        cp.empty(c_shape, dtype=storage),
    )


def _cases(M: int, N: int, K: int, gpu) -> list[_Case]:
    """Every host row, each gemmlab row after the torch row it is compared with."""
    import cupy as cp
    import torch
    import gemmlab.torch as gtorch

    stream = cp.cuda.get_current_stream().ptr
    libs = {"torch": torch.matmul, "cupy": cp.matmul}
    cases = []

    def add(call, library, arrays, dtype, out, shape, fn, key):
        cases.append(_Case(call, library, arrays, dtype, out, shape, fn, library == "torch" and dtype == "tf32", key))

    for batch in (None, BATCH):
        lead = (batch,) if batch else ()
        shape = "x".join(map(str, lead + (M, N, K)))
        for dtype, (storage, precision) in HOST_DTYPES.items():
            if batch and dtype != "bfloat16":  # one batched row: bfloat16, as in training
                continue
            prec = f", precision={precision!r}" if precision else ""
            for arrays in ("torch", "cupy"):
                if arrays == "cupy" and storage == "bfloat16":  # CuPy has no bfloat16
                    continue
                a, b, c = _operands(arrays, storage, lead + (M, K), lead + (K, N), lead + (M, N))
                for out in (False, True):
                    args = "a, b, out=c" if out else "a, b"
                    kw = {"out": c} if out else {}
                    key = ("matmul", dtype, out, shape)
                    if arrays == "torch" or precision is None:  # cupy.matmul has no TF32 or fp32_tc switch
                        add(
                            f"{arrays}.matmul({args})",
                            arrays,
                            arrays,
                            dtype,
                            out,
                            shape,
                            partial(libs[arrays], a, b, **kw),
                            key,
                        )
                    add(
                        f"gemmlab.matmul({args}{prec})",
                        "gemmlab",
                        arrays,
                        dtype,
                        out,
                        shape,
                        partial(matmul, a, b, precision=precision, **kw),
                        key,
                    )
                if arrays == "torch" and not batch:  # the prepared plan's launch alone: the floor
                    matmul(a, b, out=c, precision=precision)
                    ptrs = (a.data_ptr(), K, b.data_ptr(), N, c.data_ptr(), N, 1.0, 0.0)
                    add(
                        "run_plan(last_plan(), raw pointers)",
                        "gemmlab",
                        arrays,
                        dtype,
                        True,
                        shape,
                        partial(run_plan, last_plan(), gpu, stream, *ptrs),
                        ("matmul", dtype, True, shape),
                    )
    shape = f"{M}x{N}x{K}"
    for dtype in ("float32", "fp32_tc", "bfloat16"):
        storage, precision = HOST_DTYPES[dtype]
        sets = [_operands("torch", storage, (M, K), (K, N), (M, N)) for _ in range(NEW_ARRAYS)]
        key = ("matmul, new addresses", dtype, True, shape)
        prec = f", precision={precision!r}" if precision else ""
        add(
            "torch.matmul(a, b, out=c), new addresses",
            "torch",
            "torch",
            dtype,
            True,
            shape,
            _cycling(torch.matmul, sets),
            key,
        )
        add(
            f"gemmlab.matmul(a, b, out=c{prec}), new addresses",
            "gemmlab",
            "torch",
            dtype,
            True,
            shape,
            _cycling(partial(matmul, precision=precision), sets),
            key,
        )
        # Row slices of one operand pair: a new size at each call, not a new allocation.  From
        # M rows (most of them in bands: a family's prepared call, executor.Family), and from
        # NEW_ROWS_BANDED, every size in a band (planner.size_band) whose family is known.
        for first, what in ((M, "new rows"), (NEW_ROWS_BANDED, "new rows in bands")):
            big_a, b, big_c = _operands("torch", storage, (first + NEW_ROWS, K), (K, N), (first + NEW_ROWS, N))
            sets = [(big_a[: first + i], b, big_c[: first + i]) for i in range(NEW_ROWS)]
            rows = f"{first}..{first + NEW_ROWS - 1}x{N}x{K}"
            key = (f"matmul, {what}", dtype, True, rows)
            add(
                f"torch.matmul(a, b, out=c), {what}",
                "torch",
                "torch",
                dtype,
                True,
                rows,
                _cycling(torch.matmul, sets),
                key,
            )
            add(
                f"gemmlab.matmul(a, b, out=c{prec}), {what}",
                "gemmlab",
                "torch",
                dtype,
                True,
                rows,
                _cycling(partial(matmul, precision=precision), sets),
                key,
            )
        # A weight gradient dY^T @ x on token slices: a new K at each call, from NEW_ROWS_BANDED
        # (planner.k_banded: every K in a band whose family is known).
        first = NEW_ROWS_BANDED
        big_dy, big_x, c = _operands("torch", storage, (first + NEW_ROWS, M), (first + NEW_ROWS, N), (M, N))
        sets = [(big_dy[: first + i].t(), big_x[: first + i], c) for i in range(NEW_ROWS)]
        ks = f"{M}x{N}x{first}..{first + NEW_ROWS - 1}"
        key = ("matmul, new K in bands", dtype, True, ks)
        add("torch.matmul(dY.t(), x, out=c), new K in bands", "torch", "torch", dtype, True, ks,
            _cycling(torch.matmul, sets), key)  # fmt: skip
        add(f"gemmlab.matmul(dY.t(), x, out=c{prec}), new K in bands", "gemmlab", "torch", dtype, True, ks,
            _cycling(partial(matmul, precision=precision), sets), key)  # fmt: skip
    # A decode step's attention as explicit products over a cache allocated for the longest
    # context (k_cache[:, :n]): Q @ K^T gets a new N, and P @ V a new K, at every call -- a
    # new signature each time, derived from its band's family (planner.thin_batch_call).
    for dtype in ("bfloat16", "float32"):
        bh, d, n0 = DECODE_BH, DECODE_HEAD, DECODE_FIRST
        q, k_cache, scores = _operands("torch", dtype, (bh, 1, d), (bh, n0 + NEW_ROWS, d), (bh, 1, n0 + NEW_ROWS))
        p_cache, v_cache, out = _operands("torch", dtype, (bh, 1, n0 + NEW_ROWS), (bh, n0 + NEW_ROWS, d), (bh, 1, d))
        lengths = f"{bh}x1x{n0}..{n0 + NEW_ROWS - 1}"
        for what, sets in (
            ("Q @ K^T", [(q, k_cache[:, : n0 + i].transpose(-1, -2), scores[..., : n0 + i]) for i in range(NEW_ROWS)]),
            ("P @ V", [(p_cache[..., : n0 + i], v_cache[:, : n0 + i], out) for i in range(NEW_ROWS)]),
        ):
            key = (f"decode {what}, a longer cache each call", dtype, True, lengths)
            for library, fn in (("torch", torch.matmul), ("gemmlab", matmul)):
                add(f"{library}.matmul({what}), a longer cache each call", library, "torch", dtype, True, lengths,
                    _cycling(fn, sets), key)  # fmt: skip
    for dtype in ("float32", "bfloat16"):
        a, b, _ = _operands("torch", dtype, (M, K), (K, N), (M, N))
        key = ("mm", dtype, False, shape)
        add("torch.mm(a, b)", "torch", "torch", dtype, False, shape, partial(torch.mm, a, b), key)
        add("gemmlab.torch.mm(a, b)", "gemmlab", "torch", dtype, False, shape, partial(gtorch.mm, a, b), key)
    # bf16 products routed by use_gemmlab() as a model makes them -- mm, mm into out=
    # (Inductor's), F.linear with a bias (addmm) -- the context entered around each call (a
    # model enters it once: this is the upper bound), beside the same call outside it.
    a, b, c = _operands("torch", "bfloat16", (M, K), (K, N), (M, N))
    w, bias = b.t().contiguous(), c[0].clone()  # nn.Linear's (N, K) weight and its bias
    routed = gtorch.use_gemmlab(torch.bfloat16)
    for call, fn, out, key in (
        ("torch.mm(a, b)", partial(torch.mm, a, b), False, ("mm", "bfloat16", False, shape)),
        ("torch.mm(a, b, out=c)", partial(torch.mm, a, b, out=c), True, ("mm", "bfloat16", True, shape)),
        ("F.linear(a, w, bias)", partial(torch.nn.functional.linear, a, w, bias), False, ("linear", "bfloat16")),
    ):
        if call != "torch.mm(a, b)":  # that one's row is above
            add(call, "torch", "torch", "bfloat16", out, shape, fn, key)
        add(
            f"with use_gemmlab(): {call}", "gemmlab", "torch", "bfloat16", out, shape, partial(_inside, routed, fn), key
        )
    # The one-line PyTorch form, the mode entered around each call (a model enters
    # it once: this is the upper bound), beside torch.matmul on float32 (IEEE).
    a, b, _ = _operands("torch", "float32", (M, K), (K, N), (M, N))
    add(
        "with gemmlab.torch.fp32_tc(): torch.matmul(a, b)",
        "gemmlab",
        "torch",
        "fp32_tc",
        False,
        shape,
        partial(_inside, gtorch.fp32_tc(), torch.matmul, a, b),
        ("matmul", "fp32_tc", False, shape),
    )
    return cases


def _cycling(fn, sets):
    """A call of ``fn(a, b, out=c)`` on the next operand set of ``sets`` each time."""
    following = itertools.cycle(sets).__next__

    def call():
        a, b, c = following()
        return fn(a, b, out=c)

    return call


def _inside(mode, fn, *args):
    with mode:
        return fn(*args)


def _host_us(cases: list[_Case], calls: int, rounds: int) -> list[list[float]]:
    """Each case's host µs per call, one figure per round (see the module's docstring)."""
    import cupy as cp

    sync = cp.cuda.Device().synchronize
    for case in cases:  # compilation, allocator pools, caches
        with torch_tf32(case.tf32):
            for _ in range(WARMUP):
                case.fn()
    samples = [[] for _ in cases]
    for _ in range(rounds):
        for case, us in zip(cases, samples):
            with torch_tf32(case.tf32):
                fn = case.fn
                sync()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                us.append((time.perf_counter() - t0) / calls * 1e6)
    sync()
    return samples


def host_records(shape=HOST_SHAPE, calls: int = CALLS, rounds: int = ROUNDS, quiet: bool = False) -> list[HostRecord]:
    import statistics

    try:
        import torch  # noqa: F401  (the rows' reference)
    except ImportError:
        raise ImportError("the overhead suite compares gemmlab with torch.matmul: install PyTorch") from None
    gpu = bench_gpu()
    cases = _cases(*shape, gpu)
    _progress(
        f"host µs per call at {'x'.join(map(str, shape))}: {len(cases)} rows, {rounds} rounds of {calls} calls each",
        quiet,
    )
    samples = _host_us(cases, calls, rounds)
    records, torch_us = [], {}
    for case, us in zip(cases, samples):
        med = statistics.median(us)
        if case.library == "torch":
            torch_us[case.key] = med
        base = torch_us.get(case.key)
        records.append(
            HostRecord(
                gpu.name,
                case.call,
                case.library,
                case.arrays,
                case.dtype,
                case.out,
                case.shape,
                med,
                us,
                calls,
                base,
                case.library == "gemmlab" and base is not None and med > base,
            )
        )
    return records


def run(
    *, shape=HOST_SHAPE, calls: int = CALLS, sizes=None, kernel_only: bool = False, quiet: bool = False, **timing
) -> dict:
    """{"host": host µs rows, "sizes": % of cuBLAS records} as dicts; ``timing``
    goes to run_suite (reps, budget_s, max_run_s, flush, dist)."""
    host = [r.as_dict() for r in host_records(shape, calls, quiet=quiet)]
    sizes = [
        r.as_dict()
        for dtype in SIZE_DTYPES
        for r in run_suite([("auto", {})], sizes or SIZES, dtype=dtype, kernel_only=kernel_only, quiet=quiet, **timing)
    ]
    return {"host": host, "sizes": sizes}


def host_table(rows: list[dict]) -> str:
    """The host rows, gemmlab's beside torch's; rows over torch.matmul's host time flagged."""
    width = max([24] + [len(r["call"]) for r in rows])
    head = (
        f"{'call':{width}s} {'arrays':6s} {'dtype':8s} {'shape':>13s} {'host µs':>8s} {'torch µs':>9s} {'vs torch':>8s}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio = r["host_us"] / r["torch_us"] if r["torch_us"] and r["library"] != "torch" else None
        flag = "  << over torch.matmul's host time" if r["over_torch"] else ""
        lines.append(
            f"{r['call']:{width}s} {r['arrays']:6s} {r['dtype']:8s} {r['shape']:>13s} "
            f"{r['host_us']:8.2f} {_fmt(r['torch_us'] if ratio else None, '.2f'):>9s} "
            f"{_fmt(ratio, '.2f'):>7s}{'x' if ratio else ' '}{flag}"
        )
    ours = [r for r in rows if r["library"] == "gemmlab" and r["torch_us"]]
    over = sum(r["over_torch"] for r in ours)
    lines.append(f"{over} of {len(ours)} gemmlab rows over torch.matmul's host time (target: none)")
    return "\n".join(lines)


def table(data: dict) -> str:
    host = data["host"]
    calls = host[0]["calls"] if host else 0
    return (
        f"Host µs per call (median of rounds of {calls} back-to-back calls, no synchronisation in the loop)\n"
        + host_table(host)
        + '\n\n% of cuBLAS, kernel="auto", by size\n'
        + size_table(data["sizes"])
    )


def plot(data: dict, path) -> None:
    """Left: host µs per call, one bar per row (flagged rows edged in red);
    right: % of cuBLAS against size, a line per dtype and timed path."""
    plt = _pyplot()
    host, sizes = data["host"], data["sizes"]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(16, max(6, 0.22 * len(host))), gridspec_kw={"width_ratios": [3, 2]}
    )
    colors = {"gemmlab": "C0", "torch": "C1", "cupy": "C2"}
    ys = range(len(host))
    left.barh(
        ys,
        [r["host_us"] for r in host],
        color=[colors[r["library"]] for r in host],
        edgecolor=["red" if r["over_torch"] else "none" for r in host],
        linewidth=1.5,
    )
    for y, r in zip(ys, host):
        if r["over_torch"]:
            left.text(r["host_us"], y, " > torch", va="center", fontsize=6, color="red")
    left.set_yticks(list(ys))
    left.set_yticklabels([f"{r['call']} [{r['arrays']}, {r['dtype']}, {r['shape']}]" for r in host], fontsize=6)
    left.invert_yaxis()
    from matplotlib.patches import Patch

    left.legend(handles=[Patch(color=c, label=name) for name, c in colors.items()], fontsize=8)
    left.set_xlabel("host µs per call (steady state)")
    left.set_title("host time per call; red edge: gemmlab over torch.matmul")
    left.grid(axis="x", alpha=0.3)
    for dtype, timed in dict.fromkeys((r["dtype"], path_of(r)) for r in sizes):
        pts = sorted(
            (r["M"], r["pct_cublas"])
            for r in sizes
            if r["kernel"] != "cublas" and r["dtype"] == dtype and path_of(r) == timed and r["pct_cublas"]
        )
        right.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            "-" if timed == "public" else "--",
            marker="o",
            label=f"{dtype}, {timed}",
        )
    right.axhline(100, color="gray", lw=1)
    right.set_xscale("log", base=2)
    ticks = sorted({r["M"] for r in sizes})
    right.set_xticks(ticks)
    right.set_xticklabels([str(t) for t in ticks])
    right.set_xlabel("M = N = K")
    right.set_ylabel("% of cuBLAS (same call path)")
    right.set_title('gemmlab.matmul(kernel="auto") vs cuBLAS')
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    fig.suptitle(f"gemmlab call overhead on {(host or sizes)[0]['gpu']}")
    savefig(fig, path)
