"""`gemmlab bench --suite ec`: the error-corrected FP32 methods beside cuBLAS SGEMM.

Each method runs through the public ``gemmlab.matmul(..., precision=...)``, so
``fp32_tc`` and ``fp16_ec_scaled`` include their pass over A and B for the
exponent statistics, as a user's call does.  gemmlab's fastest CUDA-core GEMM
(``kernel="auto"``, FP32) is timed beside them.
"""

from __future__ import annotations

import time

import numpy as np

from .. import api
from ..verify import compare, random_matrix, reference
from .suites import Record, _progress, _tflops
from .timing import time_gpu

PRECISIONS = ("fp16_ec", "fp16_ec_scaled", "tf32_ec", "fp32_tc")
DEFAULT_SIZES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096)]


def run(sizes=None, *, dist: str = "uniform", reps: int = 20, flush: bool = True, max_run_s: float = 3.0,
        budget_s: float = 2.0, quiet: bool = False, seed: int = 0) -> list[Record]:
    import cupy as cp
    from ..runtime.device import gpu_info
    gpu_info(0)
    gpu = gpu_info(cp.cuda.Device().id)
    rng = np.random.default_rng(seed)
    sizes = sizes or DEFAULT_SIZES
    # auto is ec_wgmma on Hopper, ec_wmma elsewhere; the WMMA implementation's
    # methods are timed beside it where the two differ.
    entries = [("auto", None)] + [("auto", p) for p in PRECISIONS]
    if api.plan("auto", 64, 64, 64, dtype="fp16_ec", arch=gpu.arch).spec.name != "ec_wmma":
        entries += [("ec_wmma", p) for p in ("fp16_ec", "tf32_ec", "fp32_tc")]
    records: list[Record] = []
    t0 = time.time()
    for M, N, K in sizes:
        a = cp.asarray(random_matrix(M, K, dist, rng))
        b = cp.asarray(random_matrix(K, N, dist, rng))
        c = cp.full((M, N), np.nan, dtype=np.float32)
        ref = reference(a, b, keep_on_gpu=True)
        cb = time_gpu(lambda: cp.matmul(a, b, out=c), l2_bytes=gpu.l2_bytes, reps=reps, flush=flush,
                      max_run_s=max_run_s, budget_s=budget_s)
        cb_err = compare(c, ref).rel_fro
        _progress(f"cuBLAS SGEMM {M}x{N}x{K}: {cb.ms:.3f} ms, {_tflops(M, N, K, cb.ms):.1f} TFLOPS, "
                  f"err {cb_err:.1e}", quiet)
        # The pass over A and B that fp32_tc and fp16_ec_scaled make first, alone
        # (launches, the histogram copy back and the stream synchronisation included).
        from ..ec import exponent_stats
        stream = cp.cuda.get_current_stream().ptr
        st = time_gpu(lambda: exponent_stats(gpu, stream, [(a.data.ptr, M, K, K), (b.data.ptr, K, N, N)]),
                      l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s, budget_s=budget_s)
        _progress(f"  exponent statistics of A and B: {st.ms:.3f} ms", quiet)
        records.append(Record(gpu.name, "exponent_stats", {}, M, N, K, "float32", st.ms, None, None, None, None,
                              None, None, len(st.ms_all), note="the pass fp32_tc and fp16_ec_scaled make first"))
        # ec_wgmma's split of A and B into their parts, alone (part of every ec_wgmma time below).
        if api.plan("auto", M, N, K, dtype="fp16_ec", arch=gpu.arch).spec.name == "ec_wgmma":
            from ..kernels.registry import Problem
            from ..kernels.ec.ec_wgmma import ec_split_workspace
            from ..runtime.tma import Operands
            for method in ("fp16_ec", "tf32_ec"):
                def split():
                    with ec_split_workspace(Problem(M, N, K, True, method), gpu, stream,
                                            Operands(a.data.ptr, K, b.data.ptr, N, 0, 0)):
                        pass
                sp = time_gpu(split, l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s,
                              budget_s=budget_s)
                _progress(f"  split pre-pass of ec_wgmma ({method} parts): {sp.ms:.3f} ms", quiet)
                records.append(Record(gpu.name, "ec_split_pack", {"precision": method}, M, N, K, "float32", sp.ms,
                                      None, None, None, None, None, None, len(sp.ms_all),
                                      note="ec_wgmma's split of A and B into hi and lo parts, alone"))
        rows = []
        for kernel, precision in entries:
            def ours():
                api.matmul(a, b, out=c, kernel=kernel, precision=precision)
            t = time_gpu(ours, l2_bytes=gpu.l2_bytes, reps=reps, flush=flush, max_run_s=max_run_s,
                         budget_s=budget_s)
            c.fill(np.nan)
            ours()
            p = api.last_plan()
            err = compare(c, ref).rel_fro
            rows.append((precision or "fp32", p, t, err))
            tf = _tflops(M, N, K, t.ms)
            _progress(f"  {precision or 'fp32':15s} {p.describe():48s} {t.ms:.3f} ms, {tf:.1f} TFLOPS, "
                      f"{cb.ms / t.ms:.2f}x cuBLAS SGEMM, err {err:.1e}  ({time.time() - t0:.0f} s)", quiet)
        cb_tf = _tflops(M, N, K, cb.ms)
        records.append(Record(gpu.name, "cublas", {}, M, N, K, "float32", cb.ms, cb_tf, cb.ms, cb_tf, 100.0, None,
                              cb_err, len(cb.ms_all), note="CuPy matmul -> cuBLAS SGEMM, TF32 off"))
        for precision, p, t, err in rows:
            tf = _tflops(M, N, K, t.ms)
            records.append(Record(
                gpu.name, p.spec.name, {"precision": precision, **p.params}, M, N, K, "float32", t.ms, tf,
                cb.ms, cb_tf, 100.0 * cb.ms / t.ms if t.ms else None, None, err, len(t.ms_all), t.skipped,
                note=f"method {p.method}: {p.reason}" if p.method else f"auto chose {p.describe()}"))
        del a, b, c, ref
        cp.get_default_memory_pool().free_all_blocks()
    return records
