"""What the benchmarks run: the default ladder suite and the TILE_WIDTH sweep."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..api import Plan, contiguous_aligned16, contiguous_tma_aligned, plan, run_plan
from ..kernels import registry
from ..verify import compare, random_matrix, reference
from .timing import time_gpu

# Square sizes, a tall one, and skinny ones (short K; few output tiles with a long K).
DEFAULT_SIZES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                 (16384, 4096, 4096), (4096, 4096, 256), (256, 4096, 4096), (8192, 64, 8192),
                 (64, 8192, 8192)]
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
    ops: str = "NN"       # how op(A) and op(B) were stored: N row-major, T column-major (a transposed view)

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
    tensor-core ladder otherwise; tuned configuration for the GPU if there is
    one, else its defaults), then what ``kernel="auto"`` picks."""
    family = "simt" if dtype == "float32" else "ec" if dtype in registry.EC_METHODS else "tensor"
    return [(s.name, {}) for s in registry.ladder(family)] + [("auto", {})]


def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _tflops(M, N, K, ms):
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12 if ms else None


# The bench's --dtype names; "tf32" is float32 storage on TF32 tensor cores.
DTYPE_ALIASES = {"fp32": "float32", "float32": "float32", "tf32": "tf32", "fp16": "float16",
                 "float16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16",
                 "fp16_ec": "fp16_ec", "tf32_ec": "tf32_ec"}


def _fp32_storage(dtype: str) -> bool:
    """FP32 operands timed beside cuBLAS SGEMM: the CUDA-core ladder and the
    error-corrected kernels (at their unscaled methods)."""
    return dtype == "float32" or dtype in registry.EC_METHODS


class _Operands:
    """A, B and C of one size for one dtype, and cuBLAS on them: CuPy and cuBLAS
    SGEMM (TF32 off) for float32; PyTorch tensors and torch.matmul (cuBLAS in the
    same dtype, TF32 allowed only for "tf32") for the tensor-core dtypes.  With
    ``ops`` "TN", "NT" or "TT", op(A) / op(B) are transposed views of contiguous
    K x M / N x K arrays (column-major operands), for gemmlab and cuBLAS alike."""

    def __init__(self, M, N, K, dtype, dist, rng, ops: str = "NN"):
        self.dtype, self.ops = dtype, ops
        a = random_matrix(M, K, dist, rng)
        b = random_matrix(K, N, dist, rng)
        a = a.T.copy().T if ops[0] == "T" else a      # column-major: stored K x M
        b = b.T.copy().T if ops[1] == "T" else b
        self.lda = M if ops[0] == "T" else K
        self.ldb = K if ops[1] == "T" else N
        if _fp32_storage(dtype):
            import cupy as cp
            def dev(x):   # a Fortran-ordered array stays column-major on the GPU
                return cp.asarray(np.ascontiguousarray(x.T)).T if not x.flags.c_contiguous else cp.asarray(x)
            self.a, self.b = dev(a), dev(b)
            self.c = cp.full((M, N), np.nan, dtype=np.float32)
            self.ptrs = (self.a.data.ptr, self.b.data.ptr, self.c.data.ptr)
            self.ref = reference(self.a, self.b)
            self.note = "CuPy matmul -> cuBLAS SGEMM, TF32 off" + ("" if ops == "NN" else f", {ops}")
            return
        import torch
        t = torch.float32 if dtype == "tf32" else getattr(torch, dtype)

        def dev(x):   # a Fortran-ordered array stays column-major on the GPU
            return torch.from_numpy(x.T.copy()).cuda().to(t).t() if not x.flags.c_contiguous \
                else torch.from_numpy(x).cuda().to(t)
        self.a, self.b = dev(a), dev(b)
        self.c = torch.full((M, N), float("nan"), device="cuda", dtype=t)
        self.ptrs = (self.a.data_ptr(), self.b.data_ptr(), self.c.data_ptr())
        self.ref = self.a.double() @ self.b.double()      # FP64 on the inputs as stored
        self.note = f"torch.matmul -> cuBLAS in {dtype}" + (" (TF32 allowed)" if dtype == "tf32" else "") \
            + ("" if ops == "NN" else f", {ops}")

    def cublas(self):
        if _fp32_storage(self.dtype):
            import cupy as cp
            cp.matmul(self.a, self.b, out=self.c)
            return
        import torch
        flag = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.dtype == "tf32"
        try:
            torch.matmul(self.a, self.b, out=self.c)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = flag

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


def run_suite(entries, sizes, *, dist: str = "uniform", reps: int = 20, flush: bool = True,
              max_run_s: float = 3.0, budget_s: float = 2.0, quiet: bool = False, seed: int = 0,
              dtype: str = "float32", ops=("NN",)) -> list[Record]:
    """Time each (kernel, tile params) at each size beside cuBLAS in the same dtype
    (SGEMM for float32), and check each kernel's output against an FP64 reference
    on the same inputs.  ``ops``: the operand layouts to time at each size ("NN",
    "TN", "NT", "TT": T is a transposed view, a column-major operand)."""
    import cupy as cp
    from ..runtime.device import gpu_info
    if os.environ.get("CUPY_TF32", "0") != "0":
        raise RuntimeError("CUPY_TF32 is set: cuBLAS would use TF32 tensor cores, not FP32. Unset it.")
    gpu_info(0)   # without a GPU: gemmlab's NoGPUError, before CuPy touches the driver
    gpu = gpu_info(cp.cuda.Device().id)
    peak = gpu.fp32_peak_tflops if dtype == "float32" else None   # no tensor-core peak table yet
    rng = np.random.default_rng(seed)
    records: list[Record] = []
    total = len(sizes) * len(ops) * (len(entries) + 1)
    done = 0
    t_start = time.time()
    for (M, N, K), layout in ((s, o) for s in sizes for o in ops):
        ops_ = _Operands(M, N, K, dtype, dist, rng, layout)
        a_ptr, b_ptr, c_ptr = ops_.ptrs
        op_a, op_b = layout
        stream = cp.cuda.get_current_stream().ptr

        cb = time_gpu(ops_.cublas, l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s,
                      budget_s=budget_s)
        cb_err = ops_.error()
        done += 1
        _progress(f"[{done:3d}/{total}] cuBLAS ({dtype:8s}) {M}x{N}x{K}: {cb.ms:.3f} ms, "
                  f"{_tflops(M, N, K, cb.ms):.1f} TFLOPS  ({time.time() - t_start:.0f} s)", quiet)
        rows = []
        for name, params in entries:
            p: Plan = plan(name, M, N, K, aligned16=contiguous_aligned16(M, N, K, op_a, op_b, dtype,
                                                                   "float32" if dtype in registry.FLOAT32_RESULT else dtype),
                           sm_count=gpu.sm_count, gpu_slug=gpu.slug, dtype=dtype,
                           out_dtype="float32" if dtype in registry.FLOAT32_RESULT else dtype, op_a=op_a, op_b=op_b,
                           arch=gpu.arch, tma_aligned=contiguous_tma_aligned(M, N, K, 2 if dtype in ("float16", "bfloat16") else 4),
                           **params)
            ops_.poison()

            def ours():
                run_plan(p, gpu, stream, a_ptr, ops_.lda, b_ptr, ops_.ldb, c_ptr, N, 1.0, 0.0)

            t = time_gpu(ours, l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s, budget_s=budget_s)
            err = None
            if t.skipped is None:
                ops_.poison()   # poison, then one more run for the error check
                ours()
                err = ops_.error()
            done += 1
            tf = _tflops(M, N, K, t.ms)
            rows.append((name, p, t, tf, err))
            what = f"auto={p.describe()}" if name == "auto" else p.describe() if params else p.spec.name
            if t.skipped:
                _progress(f"[{done:3d}/{total}] {what:16s} {M}x{N}x{K}: skipped, {t.skipped}", quiet)
            else:
                _progress(f"[{done:3d}/{total}] {what:16s} {M}x{N}x{K}: {t.ms:.3f} ms, {tf:.1f} TFLOPS, "
                          f"{100 * cb.ms / t.ms:.0f}% of cuBLAS, err {err:.1e}  "
                          f"({time.time() - t_start:.0f} s)", quiet)
        # cuBLAS once more after the kernels: both samples count, so slow clock drift
        # during the size's runs does not favour either side.
        cb2 = time_gpu(ops_.cublas, l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s,
                       budget_s=budget_s)
        cb_ms = float(np.median(cb.ms_all + cb2.ms_all))
        cb_tf = _tflops(M, N, K, cb_ms)
        records.append(Record(gpu.name, "cublas", {}, M, N, K, dtype, cb_ms, cb_tf, cb_ms, cb_tf, 100.0,
                              100.0 * cb_tf / peak if peak else None, cb_err, len(cb.ms_all) + len(cb2.ms_all),
                              note=ops_.note, ops=layout))
        for name, p, t, tf, err in rows:
            records.append(Record(
                gpu.name, "auto" if name == "auto" else p.spec.name, dict(p.params), M, N, K, dtype,
                t.ms, tf, cb_ms, cb_tf, 100.0 * cb_ms / t.ms if t.ms else None,
                100.0 * tf / peak if (peak and tf) else None, err, len(t.ms_all), t.skipped,
                note=f"auto chose {p.describe()}" if name == "auto" else p.fallback_reason, ops=layout))
        del ops_
        cp.get_default_memory_pool().free_all_blocks()
    return records


def sweep_entries() -> list[tuple[str, dict]]:
    return [("naive", {})] + [("smem_tiled", {"tile": t}) for t in SWEEP_TILES]
