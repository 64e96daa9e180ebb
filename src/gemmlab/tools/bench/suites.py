"""What the benchmarks run: the default ladder suite and the TILE_WIDTH sweep.

Each gemmlab figure is the public call a user makes, ``gemmlab.matmul(a, b,
out=c, kernel=..., precision=...)`` on CuPy arrays or PyTorch tensors, beside
cuBLAS called the same way (``cupy.matmul`` / ``torch.matmul`` with ``out=``),
each run started on an idle GPU so that the call's host time counts (path
"public", see timing.time_gpu).  On request the plan that call ran
(``gemmlab.last_plan()``) is also launched alone on raw pointers, back to back,
beside cuBLAS timed back to back (path "kernel": the kernel's own figure).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np

from ...core.api import last_plan, matmul
from ...core.executor import run_plan
from ...kernels import registry
from ...kernels.spec import EC_METHODS
from ..verify import compare, random_matrix, reference
from .timing import time_gpu

# Square sizes, a tall one, and skinny ones (short K; few output tiles with a long K).
DEFAULT_SIZES = [
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (16384, 4096, 4096),
    (4096, 4096, 256),
    (256, 4096, 4096),
    (8192, 64, 8192),
    (64, 8192, 8192),
]
SWEEP_SIZES = [(256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096)]
SWEEP_TILES = (2, 4, 8, 16, 32)


@dataclass
class Record:
    gpu: str
    kernel: str
    params: dict
    M: int
    N: int
    K: int
    dtype: str
    ms: float | None
    tflops: float | None
    cublas_ms: float | None
    cublas_tflops: float | None
    pct_cublas: float | None
    pct_peak: float | None
    rel_error: float | None
    reps: int
    skipped: str | None = None
    note: str = ""
    ops: str = "NN"  # how op(A) and op(B) were stored: N row-major, T column-major (a transposed view)
    path: str = "public"  # what was timed: "public" the gemmlab.matmul call, "kernel" its plan alone

    def as_dict(self) -> dict:
        return asdict(self)


def parse_size(text: str) -> tuple[int, int, int]:
    """'4096' -> (4096, 4096, 4096); '16384x4096x4096' -> (16384, 4096, 4096)."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"size {text!r} is not N or MxNxK") from None
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or min(dims) < 1:
        raise ValueError(f"size {text!r} must be N or MxNxK with positive integers")
    return tuple(dims)


def default_entries(dtype: str = "float32") -> list[tuple[str, dict]]:
    """Every rung of the ladder for the dtype (the FP32 ladder for float32, the
    tensor-core ladder's rungs of that dtype otherwise, but those with a call of their own, as
    grouped's; tuned configuration for the GPU if there is one, else its defaults), then what
    ``kernel="auto"`` picks."""
    family = "simt" if dtype == "float32" else "ec" if dtype in EC_METHODS else "tensor"
    rungs = registry.ladder(family)
    return [(s.name, {}) for s in rungs if dtype in s.dtypes and not s.own_call] + [("auto", {})]


def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _tflops(M, N, K, ms):
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12 if ms else None


# The bench's --dtype names; "tf32" is float32 storage on TF32 tensor cores.
DTYPE_ALIASES = {
    "fp32": "float32",
    "float32": "float32",
    "tf32": "tf32",
    "fp16": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16_ec": "fp16_ec",
    "tf32_ec": "tf32_ec",
}


# What gemmlab.matmul is asked for: TF32 and the error-corrected methods are
# precisions of float32 inputs.
PRECISION = {"tf32": "tf32", "fp16_ec": "fp16_ec", "tf32_ec": "tf32_ec"}


def timed_paths(kernel_only: bool) -> tuple[str, ...]:
    """The figures to time: the public call, and with --kernel-only its kernel alone too."""
    return ("public", "kernel") if kernel_only else ("public",)


def _fp32_storage(dtype: str) -> bool:
    """FP32 operands timed beside cuBLAS SGEMM: the CUDA-core ladder and the
    error-corrected kernels (at their unscaled methods)."""
    return dtype == "float32" or dtype in EC_METHODS


class _Operands:
    """A, B and C of one size for one dtype, and cuBLAS on them: CuPy and cuBLAS
    SGEMM (TF32 off) for float32; PyTorch tensors and torch.matmul (cuBLAS in the
    same dtype, TF32 allowed only for "tf32", see :func:`torch_tf32`) for the
    tensor-core dtypes.  With ``ops`` "TN", "NT" or "TT", op(A) / op(B) are
    transposed views of contiguous K x M / N x K arrays (column-major operands),
    for gemmlab and cuBLAS alike."""

    batch = 1  # products per call (time_size counts their FLOPs)

    def __init__(self, M, N, K, dtype, dist, rng, ops: str = "NN"):
        import cupy as cp

        self.dtype, self.ops, self.shape = dtype, ops, (M, N, K)
        a = random_matrix(M, K, dist, rng)
        b = random_matrix(K, N, dist, rng)
        a = a.T.copy().T if ops[0] == "T" else a  # column-major: stored K x M
        b = b.T.copy().T if ops[1] == "T" else b
        lda = M if ops[0] == "T" else K
        ldb = K if ops[1] == "T" else N
        if _fp32_storage(dtype):

            def dev(x):  # a Fortran-ordered array stays column-major on the GPU
                return cp.asarray(np.ascontiguousarray(x.T)).T if not x.flags.c_contiguous else cp.asarray(x)

            self.a, self.b = dev(a), dev(b)
            self.c = cp.full((M, N), np.nan, dtype=np.float32)
            ptrs = (self.a.data.ptr, self.b.data.ptr, self.c.data.ptr)
            self.ref = reference(self.a, self.b, keep_on_gpu=True)
            self.cublas = partial(cp.matmul, self.a, self.b, out=self.c)
            self.note = "CuPy matmul -> cuBLAS SGEMM, TF32 off" + ("" if ops == "NN" else f", {ops}")
        else:
            import torch

            t = torch.float32 if dtype == "tf32" else getattr(torch, dtype)

            def dev(x):  # a Fortran-ordered array stays column-major on the GPU
                return (
                    torch.from_numpy(x.T.copy()).cuda().to(t).t()
                    if not x.flags.c_contiguous
                    else torch.from_numpy(x).cuda().to(t)
                )

            self.a, self.b = dev(a), dev(b)
            self.c = torch.full((M, N), float("nan"), device="cuda", dtype=t)
            ptrs = (self.a.data_ptr(), self.b.data_ptr(), self.c.data_ptr())
            self.ref = self.a.double() @ self.b.double()  # FP64 on the inputs as stored
            self.cublas = partial(torch.matmul, self.a, self.b, out=self.c)
            self.note = (
                f"torch.matmul -> cuBLAS in {dtype}"
                + (" (TF32 allowed)" if dtype == "tf32" else "")
                + ("" if ops == "NN" else f", {ops}")
            )
        # run_plan's arguments after the plan and GPU: the stream, and the operands as raw pointers.
        self.raw = (cp.cuda.get_current_stream().ptr, ptrs[0], lda, ptrs[1], ldb, ptrs[2], N, 1.0, 0.0)

    def public(self, kernel: str, params: dict, precision: str | None):
        """The call a user makes: gemmlab.matmul on these arrays into c."""
        return partial(matmul, self.a, self.b, out=self.c, kernel=kernel, precision=precision, **params)

    def poison(self):
        if _fp32_storage(self.dtype):
            self.c.fill(np.nan)
        else:
            self.c.fill_(float("nan"))

    def error(self) -> float:
        if _fp32_storage(self.dtype):
            return compare(self.c, self.ref).rel_fro
        import torch

        if torch.isnan(self.c).any():
            return float("inf")
        return float(torch.linalg.norm(self.c.double() - self.ref) / torch.linalg.norm(self.ref))

    def checked(self, fn) -> float:
        """fn's error against FP64, on output poisoned first (an element never written shows)."""
        self.poison()
        fn()
        return self.error()


@contextmanager
def torch_tf32(allowed: bool):
    """torch.matmul on float32 may use TF32 tensor cores only where ``allowed``
    (PyTorch's global flag, restored after; nothing to do without PyTorch)."""
    try:
        import torch
    except ImportError:
        yield
        return
    flag = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = flag


@dataclass
class Timer:
    """time_gpu with one run's settings; the "public" path counts the call's host time."""

    l2_bytes: int
    reps: int = 20
    flush: bool = True
    max_run_s: float = 3.0
    budget_s: float = 2.0

    def __call__(self, fn, path: str = "kernel"):
        return time_gpu(
            fn,
            l2_bytes=self.l2_bytes,
            reps=self.reps,
            flush=self.flush,
            max_run_s=self.max_run_s,
            budget_s=self.budget_s,
            host=path == "public",
        )


def _pct(cb_ms, ms):
    return 100.0 * cb_ms / ms if ms else None


def time_size(ops_: _Operands, calls, *, paths, timer: Timer, gpu, say, peak=None) -> list[Record]:
    """cuBLAS and each of ``calls`` on one size's operands, on each path.

    ``calls``: (name, the public call, row) with row(plan) -> the record's
    (kernel, params, note).  "public" times the call; "kernel" the plan that
    call ran (gemmlab.last_plan()) launched alone by run_plan on raw pointers.
    Each is checked against FP64 on poisoned output.  cuBLAS is timed before
    and after gemmlab's calls, and both samples count, so slow clock drift
    during the size's runs favours neither side.
    """
    M, N, K = ops_.shape
    tflops = partial(_tflops, M * ops_.batch, N, K)  # every product of a batched call
    cb_first = {path: timer(ops_.cublas, path) for path in paths}
    cb_err = ops_.error()
    say(
        f"cuBLAS ({ops_.dtype}) {M}x{N}x{K}: "
        + ", ".join(f"{path} {t.ms:.3f} ms, {tflops(t.ms):.1f} TFLOPS" for path, t in cb_first.items())
    )
    rows = []
    for name, public, row in calls:
        t = timer(public, "public")
        p = last_plan()  # what the timed calls ran
        runs = {"public": public, "kernel": partial(run_plan, p, gpu, *ops_.raw)}
        timed = {"public": t} | {path: timer(runs[path], path) for path in paths if path != "public"}
        errs = {path: None if t.skipped else ops_.checked(runs[path]) for path, t in timed.items()}
        rows.append((row(p), timed, errs))
        say(
            f"{name} -> {p.describe()} {M}x{N}x{K}: "
            + "; ".join(
                f"{path} skipped, {t.skipped}"
                if t.skipped
                else f"{path} {t.ms:.3f} ms, {tflops(t.ms):.1f} TFLOPS, "
                f"{_pct(cb_first[path].ms, t.ms):.0f}% of cuBLAS, err {errs[path]:.1e}"
                for path, t in timed.items()
            )
        )
    records = []
    for path in paths:
        cb_all = cb_first[path].ms_all + timer(ops_.cublas, path).ms_all
        cb_ms = float(np.median(cb_all))
        cb_tf = tflops(cb_ms)
        records.append(
            Record(
                gpu.name,
                "cublas",
                {},
                M,
                N,
                K,
                ops_.dtype,
                cb_ms,
                cb_tf,
                cb_ms,
                cb_tf,
                100.0,
                100.0 * cb_tf / peak if peak else None,
                cb_err,
                len(cb_all),
                note=ops_.note,
                ops=ops_.ops,
                path=path,
            )
        )
        for (kernel, params, note), timed, errs in rows:
            t = timed[path]
            tf = tflops(t.ms)
            records.append(
                Record(
                    gpu.name,
                    kernel,
                    params,
                    M,
                    N,
                    K,
                    ops_.dtype,
                    t.ms,
                    tf,
                    cb_ms,
                    cb_tf,
                    _pct(cb_ms, t.ms),
                    100.0 * tf / peak if (peak and tf) else None,
                    errs[path],
                    len(t.ms_all),
                    t.skipped,
                    note=note,
                    ops=ops_.ops,
                    path=path,
                )
            )
    return records


def bench_gpu():
    """GPU 0's facts, refusing a cuBLAS that would use TF32 for SGEMM."""
    import cupy as cp
    from ...runtime.device import gpu_info

    if os.environ.get("CUPY_TF32", "0") != "0":
        raise RuntimeError("CUPY_TF32 is set: cuBLAS would use TF32 tensor cores, not FP32. Unset it.")
    gpu_info(0)  # without a GPU: gemmlab's NoGPUError, before CuPy touches the driver
    return gpu_info(cp.cuda.Device().id)


def run_suite(
    entries,
    sizes,
    *,
    dist: str = "uniform",
    reps: int = 20,
    flush: bool = True,
    max_run_s: float = 3.0,
    budget_s: float = 2.0,
    quiet: bool = False,
    seed: int = 0,
    dtype: str = "float32",
    ops=("NN",),
    kernel_only: bool = False,
) -> list[Record]:
    """Time each (kernel, tile params) at each size through gemmlab.matmul beside
    cuBLAS in the same dtype (SGEMM for float32), and with ``kernel_only`` each
    kernel alone too (see :func:`time_size`).  ``ops``: the operand layouts to
    time at each size ("NN", "TN", "NT", "TT": T is a transposed view, a
    column-major operand)."""
    import cupy as cp

    gpu = bench_gpu()
    peak = gpu.fp32_peak_tflops if dtype == "float32" else None  # no tensor-core peak table yet
    timer = Timer(gpu.l2_bytes, reps, flush, max_run_s, budget_s)
    rng = np.random.default_rng(seed)
    total = len(sizes) * len(ops) * (len(entries) + 1)
    count, t_start = itertools.count(1), time.time()

    def say(msg):
        _progress(f"[{next(count):3d}/{total}] {msg}  ({time.time() - t_start:.0f} s)", quiet)

    def row(name, p):
        if name == "auto":
            return "auto", dict(p.params), f"auto chose {p.describe()}"
        return p.spec.name, dict(p.params), p.fallback_reason

    records: list[Record] = []
    with torch_tf32(dtype == "tf32"):
        for (M, N, K), layout in ((s, o) for s in sizes for o in ops):
            ops_ = _Operands(M, N, K, dtype, dist, rng, layout)
            calls = [
                (name, ops_.public(name, params, PRECISION.get(dtype)), partial(row, name)) for name, params in entries
            ]
            records += time_size(ops_, calls, paths=timed_paths(kernel_only), timer=timer, gpu=gpu, say=say, peak=peak)
            del ops_, calls
            cp.get_default_memory_pool().free_all_blocks()
    return records


def sweep_entries() -> list[tuple[str, dict]]:
    return [("naive", {})] + [("smem_tiled", {"tile": t}) for t in SWEEP_TILES]
