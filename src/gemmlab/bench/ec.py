"""`gemmlab bench --suite ec`: the error-corrected FP32 methods beside cuBLAS SGEMM.

Each method runs through the public ``gemmlab.matmul(..., precision=...)``
(timed as suites.time_size does, host time included), so ``fp32_tc`` and
``fp16_ec_scaled`` include their pass over A and B for the exponent
statistics, as a user's call does; with ``kernel_only`` the plan each call ran
is also timed alone.  gemmlab's fastest CUDA-core GEMM (``kernel="auto"``,
FP32) is timed beside them.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from .. import api
from .suites import Record, Timer, _Operands, _progress, bench_gpu, time_size, timed_paths

PRECISIONS = ("fp16_ec", "fp16_ec_scaled", "tf32_ec", "fp32_tc")
DEFAULT_SIZES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096)]


def _row(precision, p):
    """The record's kernel, params and note for one method's call."""
    note = f"method {p.method}: {p.reason}" if p.method else f"auto chose {p.describe()}"
    return p.spec.name, {"precision": precision or "fp32", **p.params}, note


def run(sizes=None, *, dist: str = "uniform", reps: int = 20, flush: bool = True, max_run_s: float = 3.0,
        budget_s: float = 2.0, quiet: bool = False, seed: int = 0, kernel_only: bool = False) -> list[Record]:
    import cupy as cp
    from ..ec import exponent_stats
    gpu = bench_gpu()
    timer = Timer(gpu.l2_bytes, reps, flush, max_run_s, budget_s)
    rng = np.random.default_rng(seed)
    sizes = sizes or DEFAULT_SIZES
    # auto is ec_wgmma on Hopper, ec_wmma elsewhere; the WMMA implementation's
    # methods are timed beside it where the two differ.
    entries = [("auto", None)] + [("auto", p) for p in PRECISIONS]
    if api.plan("auto", 64, 64, 64, dtype="fp16_ec", arch=gpu.arch).spec.name != "ec_wmma":
        entries += [("ec_wmma", p) for p in ("fp16_ec", "tf32_ec", "fp32_tc")]
    records: list[Record] = []
    t0 = time.time()

    def say(msg):
        _progress(f"  {msg}  ({time.time() - t0:.0f} s)", quiet)

    for M, N, K in sizes:
        ops_ = _Operands(M, N, K, "float32", dist, rng)
        a, b = ops_.a, ops_.b
        stream = cp.cuda.get_current_stream().ptr
        # The pass over A and B that fp32_tc and fp16_ec_scaled make first, alone
        # (launches, the histogram copy back and the stream synchronisation included).
        st = timer(lambda: exponent_stats(gpu, stream, [(a.data.ptr, M, K, K), (b.data.ptr, K, N, N)]))
        say(f"exponent statistics of A and B, {M}x{N}x{K}: {st.ms:.3f} ms")
        records.append(Record(gpu.name, "exponent_stats", {}, M, N, K, "float32", st.ms, None, None, None, None,
                              None, None, len(st.ms_all), note="the pass fp32_tc and fp16_ec_scaled make first",
                              path="kernel"))
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
                sp = timer(split)
                say(f"split pre-pass of ec_wgmma ({method} parts): {sp.ms:.3f} ms")
                records.append(Record(gpu.name, "ec_split_pack", {"precision": method}, M, N, K, "float32", sp.ms,
                                      None, None, None, None, None, None, len(sp.ms_all),
                                      note="ec_wgmma's split of A and B into hi and lo parts, alone", path="kernel"))
        calls = [(precision or "fp32", ops_.public(kernel, {}, precision), partial(_row, precision))
                 for kernel, precision in entries]
        records += time_size(ops_, calls, paths=timed_paths(kernel_only), timer=timer, gpu=gpu, say=say)
        del ops_, a, b, calls
        cp.get_default_memory_pool().free_all_blocks()
    return records
