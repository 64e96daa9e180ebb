"""`gemmlab bench --suite ec`: the error-corrected FP32 methods beside cuBLAS SGEMM.

Each method runs through the public ``gemmlab.matmul(..., precision=...)``
(timed as suites.time_size does, host time included), so ``fp32_tc`` and
``fp16_ec_scaled`` include their choice on the GPU (a pass over A and B for the
exponent histograms, the choose kernel) and, for fp32_tc, the launches of the
candidate not chosen, as a user's call does; both are also timed alone.  With
``kernel_only`` the plan each call ran is also timed alone.  gemmlab's fastest CUDA-core GEMM (``kernel="auto"``,
FP32) is timed beside them.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from ...core import api
from .suites import Record, Timer, _Operands, _progress, bench_gpu, time_size, timed_paths

PRECISIONS = ("fp16_ec", "fp16_ec_scaled", "tf32_ec", "fp32_tc")
DEFAULT_SIZES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096)]


def _row(precision, p):
    """The record's kernel, params and note for one method's call."""
    note = f"method {p.method}: {p.reason}" if p.method else f"auto chose {p.describe()}"
    return p.spec.name, {"precision": precision or "fp32", **p.params}, note


def run(
    sizes=None,
    *,
    dist: str = "uniform",
    reps: int = 20,
    flush: bool = True,
    max_run_s: float = 3.0,
    budget_s: float = 2.0,
    quiet: bool = False,
    seed: int = 0,
    kernel_only: bool = False,
) -> list[Record]:
    import cupy as cp
    from ...core import executor
    from ...kernels.ec.choose_method import CHOICE, CHOICE_FIELDS, CHOICE_METHODS, WORKSPACE_BYTES, ChoiceLaunches

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
        # The choice that fp32_tc and fp16_ec_scaled make first, alone: the histograms
        # of A and B and the choose kernel, all on the GPU.
        choice = ChoiceLaunches(gpu, [(0, M, K, K, 1, 0)], [(0, K, N, N, 1, 0)], False)
        ws = cp.empty(WORKSPACE_BYTES, cp.uint8)
        st = timer(lambda: choice.enqueue(stream, a.data.ptr, b.data.ptr, ws.data.ptr))
        say(f"fp32_tc's choice on the GPU (histograms, choose), {M}x{N}x{K}: {st.ms:.3f} ms")
        records.append(
            Record(
                gpu.name,
                "ec_device_choice",
                {},
                M,
                N,
                K,
                "float32",
                st.ms,
                None,
                None,
                None,
                None,
                None,
                None,
                len(st.ms_all),
                note="the choice fp32_tc and fp16_ec_scaled make first",
                path="kernel",
            )
        )
        # The candidate fp32_tc launches but did not choose (TF32 parts when FP16 was chosen):
        # its pre-pass and GEMM read the record and return.
        record = cp.zeros(CHOICE_FIELDS, cp.int64)
        record[CHOICE["method"]] = next(code for code, m in CHOICE_METHODS.items() if m == "fp16_ec")
        tf32 = api.plan("auto", M, N, K, dtype="tf32_ec", arch=gpu.arch, sm_count=gpu.sm_count)
        out = cp.empty((M, N), cp.float32)
        skipped = executor.launcher(tf32, gpu, (K, N, N))
        pt = timer(lambda: skipped.run(stream, a.data.ptr, b.data.ptr, out.data.ptr, 1.0, 0.0, record.data.ptr))
        say(f"{tf32.spec.name} (tf32_ec) launched and not chosen, {M}x{N}x{K}: {pt.ms:.3f} ms")
        records.append(
            Record(
                gpu.name,
                "ec_not_chosen",
                {"precision": "tf32_ec", **tf32.params},
                M,
                N,
                K,
                "float32",
                pt.ms,
                None,
                None,
                None,
                None,
                None,
                None,
                len(pt.ms_all),
                note=f"{tf32.spec.name}'s launches when the record chose FP16 parts",
                path="kernel",
            )
        )
        del ws, record, out
        # ec_wgmma's split of A and B into their parts, alone (part of every ec_wgmma time below).
        if api.plan("auto", M, N, K, dtype="fp16_ec", arch=gpu.arch).spec.name == "ec_wgmma":
            from ...kernels.spec import Problem
            from ...kernels.ec.ec_wgmma import ec_split_workspace
            from ...runtime.tma import Operands

            for method in ("fp16_ec", "tf32_ec"):

                def split():
                    with ec_split_workspace(
                        Problem(M, N, K, True, method), gpu, stream, Operands(a.data.ptr, K, b.data.ptr, N, 0, 0)
                    ):
                        pass

                sp = timer(split)
                say(f"split pre-pass of ec_wgmma ({method} parts): {sp.ms:.3f} ms")
                records.append(
                    Record(
                        gpu.name,
                        "ec_split_pack",
                        {"precision": method},
                        M,
                        N,
                        K,
                        "float32",
                        sp.ms,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        len(sp.ms_all),
                        note="ec_wgmma's split of A and B into hi and lo parts, alone",
                        path="kernel",
                    )
                )
            # fp32_tc's pre-pass on FOLD: scales per row and column, the choice made in the same pass
            # (each launch zeroes the record's sums again when it is done).
            record = cp.zeros(CHOICE_FIELDS, cp.int64)

            def split_scaled():
                with ec_split_workspace(
                    Problem(M, N, K, True, "fp16_ec"),
                    gpu,
                    stream,
                    Operands(a.data.ptr, K, b.data.ptr, N, 0, 0),
                    choice=record.data.ptr,
                    fold=1,
                    per_row=True,
                ):
                    pass

            sp = timer(split_scaled)
            say(f"fp32_tc's split pre-pass of ec_wgmma (scales per row, choice made in it): {sp.ms:.3f} ms")
            records.append(
                Record(
                    gpu.name,
                    "ec_split_scaled",
                    {"precision": "fp32_tc"},
                    M,
                    N,
                    K,
                    "float32",
                    sp.ms,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    len(sp.ms_all),
                    note="fp32_tc's split of A and B with a scale per row and column and the "
                    "method chosen in the same pass, alone",
                    path="kernel",
                )
            )
            del record
        calls = [
            (precision or "fp32", ops_.public(kernel, {}, precision), partial(_row, precision))
            for kernel, precision in entries
        ]
        records += time_size(ops_, calls, paths=timed_paths(kernel_only), timer=timer, gpu=gpu, say=say)
        del ops_, a, b, calls
        cp.get_default_memory_pool().free_all_blocks()
    return records
