"""What the benchmarks run: the default ladder suite and the TILE_WIDTH sweep."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..api import Plan, contiguous_aligned16, plan, run_plan
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


def default_entries() -> list[tuple[str, dict]]:
    """Every rung of the FP32 ladder (tuned configuration for the GPU if there is
    one, else its defaults), then what ``kernel="auto"`` picks."""
    return [(s.name, {}) for s in registry.ladder("simt")] + [("auto", {})]


def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _tflops(M, N, K, ms):
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12 if ms else None


def run_suite(entries, sizes, *, dist: str = "uniform", reps: int = 20, flush: bool = True,
              max_run_s: float = 3.0, budget_s: float = 2.0, quiet: bool = False, seed: int = 0) -> list[Record]:
    """Time each (kernel, tile params) at each size beside cuBLAS SGEMM, and check
    each kernel's output against an FP64 reference on the same inputs."""
    import cupy as cp
    from ..runtime.device import gpu_info
    if os.environ.get("CUPY_TF32", "0") != "0":
        raise RuntimeError("CUPY_TF32 is set: cuBLAS would use TF32 tensor cores, not FP32. Unset it.")
    gpu_info(0)   # without a GPU: gemmlab's NoGPUError, before CuPy touches the driver
    gpu = gpu_info(cp.cuda.Device().id)
    peak = gpu.fp32_peak_tflops
    rng = np.random.default_rng(seed)
    records: list[Record] = []
    total = len(sizes) * (len(entries) + 1)
    done = 0
    t_start = time.time()
    for (M, N, K) in sizes:
        a = cp.asarray(random_matrix(M, K, dist, rng))
        b = cp.asarray(random_matrix(K, N, dist, rng))
        c = cp.full((M, N), np.nan, dtype=np.float32)
        ref = reference(a, b)
        stream = cp.cuda.get_current_stream().ptr

        def cublas():
            cp.matmul(a, b, out=c)

        cb = time_gpu(cublas, l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s, budget_s=budget_s)
        cb_err = compare(c, ref).rel_fro
        done += 1
        _progress(f"[{done:3d}/{total}] cuBLAS SGEMM     {M}x{N}x{K}: {cb.ms:.3f} ms, "
                  f"{_tflops(M, N, K, cb.ms):.1f} TFLOPS  ({time.time() - t_start:.0f} s)", quiet)
        rows = []
        for name, params in entries:
            p: Plan = plan(name, M, N, K, aligned16=contiguous_aligned16(M, N, K), sm_count=gpu.sm_count,
                           gpu_slug=gpu.slug, **params)
            c.fill(np.nan)

            def ours():
                run_plan(p, gpu, stream, a.data.ptr, K, b.data.ptr, N, c.data.ptr, N, 1.0, 0.0)

            t = time_gpu(ours, l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s, budget_s=budget_s)
            err = None
            if t.skipped is None:
                c.fill(np.nan)   # poison, then one more run for the error check
                ours()
                err = compare(c, ref).rel_fro
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
        cb2 = time_gpu(cublas, l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s, budget_s=budget_s)
        cb_ms = float(np.median(cb.ms_all + cb2.ms_all))
        cb_tf = _tflops(M, N, K, cb_ms)
        records.append(Record(gpu.name, "cublas", {}, M, N, K, "float32", cb_ms, cb_tf, cb_ms, cb_tf, 100.0,
                              100.0 * cb_tf / peak if peak else None, cb_err, len(cb.ms_all) + len(cb2.ms_all),
                              note="CuPy matmul -> cuBLAS SGEMM, TF32 off"))
        for name, p, t, tf, err in rows:
            records.append(Record(
                gpu.name, "auto" if name == "auto" else p.spec.name, dict(p.params), M, N, K, "float32",
                t.ms, tf, cb_ms, cb_tf, 100.0 * cb_ms / t.ms if t.ms else None,
                100.0 * tf / peak if (peak and tf) else None, err, len(t.ms_all), t.skipped,
                note=f"auto chose {p.describe()}" if name == "auto" else ""))
        del a, b, c
        cp.get_default_memory_pool().free_all_blocks()
    return records


def sweep_entries() -> list[tuple[str, dict]]:
    return [("naive", {})] + [("smem_tiled", {"tile": t}) for t in SWEEP_TILES]
