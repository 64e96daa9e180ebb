"""fp32_tc on ec_wgmma's FOLD with its pre-pass split_scaled.cu (a scale per row of op(A) and
column of op(B), the method chosen in the same pass) beside the same GEMM behind the passes it
replaced: precision="fp16_ec_scaled" runs the exponent histograms, choose_method.cu and
split_pack.cu (one scale per matrix) before the identical FOLD kernel.  Both through
gemmlab.matmul on the caller's arrays, beside cuBLAS SGEMM (torch.matmul, TF32 off), timed
interleaved (bench.timing.time_rounds).  Layouts: a @ b, and a @ w.t() (op(B) stored 'T').

    python benchmarks/experiments/ec_per_row.py [--sizes 4096,8192,16384x4096x4096] [--rounds 5]
"""

import sys

import numpy as np
import torch

import gemmlab
from gemmlab.bench.timing import time_rounds
from gemmlab.runtime.device import gpu_info

torch.backends.cuda.matmul.allow_tf32 = False
args = sys.argv[1:]
sizes = args[args.index("--sizes") + 1] if "--sizes" in args else "4096,8192,16384x4096x4096"
rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 5
g = gpu_info(0)
for size in sizes.split(","):
    M, N, K = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
    for layout in ("a @ b", "a @ w.t()"):
        a = torch.rand(M, K, device="cuda") * 2 - 1
        if layout == "a @ b":
            b = torch.rand(K, N, device="cuda") * 2 - 1
        else:
            b = (torch.rand(N, K, device="cuda") * 2 - 1).t()
        c = torch.empty(M, N, device="cuda")
        calls = {"SGEMM": lambda: torch.matmul(a, b, out=c),
                 "fp32_tc (per row)": lambda: gemmlab.matmul(a, b, out=c, precision="fp32_tc"),
                 "fp16_ec_scaled (per matrix)": lambda: gemmlab.matmul(a, b, out=c, precision="fp16_ec_scaled")}
        for name in calls:   # compiled, loaded, prepared
            calls[name]()
        plans = {"fp32_tc (per row)": None}
        calls["fp32_tc (per row)"]()
        plans["fp32_tc (per row)"] = gemmlab.last_plan().describe()
        times = time_rounds(calls, l2_bytes=g.l2_bytes, rounds=rounds)
        sg = times["SGEMM"].ms
        for name, t in times.items():
            print(f"{size:18} {layout:10} {name:28} median {t.ms:8.3f} ms  (quartiles "
                  f"{np.percentile(t.ms_all, 25):.3f} {np.percentile(t.ms_all, 75):.3f})  {sg / t.ms:5.2f}x SGEMM",
                  flush=True)
        print(f"{'':29} plan: {plans['fp32_tc (per row)']}", flush=True)
        if "8192" in size:
            break   # one layout at the largest size: the time goes to the other sizes
