"""ec_wgmma with FOLD (lo in hi's units, one accumulator set for the three products of a
stage; BN 96 or 128) beside the four-set kernel: error against FP64 on `gemmlab accuracy`'s
input sets, and the public fp32_tc call's time beside cuBLAS SGEMM (TF32 off), configurations
interleaved (bench.timing.time_rounds) so that the GPU's clock and power state fall on each alike.

    python3 benchmarks/experiments/ec_fold.py [accuracy] [speed] [--sizes 4096,8192,16384x4096x4096]
"""
import sys

import numpy as np
import torch

import gemmlab
from gemmlab.accuracy import make_inputs
from gemmlab.bench.timing import time_rounds
from gemmlab.runtime.device import gpu_info

torch.backends.cuda.matmul.allow_tf32 = False
CONFIGS = {"four sets, 128x96": dict(BN=96, FOLD=0, STAGES=4),
           "FOLD, 128x96": dict(BN=96, FOLD=1, STAGES=4),
           "FOLD, 128x128": dict(BN=128, FOLD=1, STAGES=3)}
args = sys.argv[1:]
sizes = "4096,8192,16384x4096x4096"
if "--sizes" in args:
    sizes = args[args.index("--sizes") + 1]
parts = [a for a in args if a in ("accuracy", "speed")] or ["accuracy", "speed"]


def err(c, ref):
    return float((c.double() - ref).norm() / ref.norm())


if "accuracy" in parts:
    rng = np.random.default_rng(0)
    for kind in ("uniform", "uniform_small", "uniform_large", "normal", "log_uniform"):
        for K in (1024, 16384, 131072):
            a = torch.from_numpy(make_inputs(kind, 256, K, rng)).cuda()
            b = torch.from_numpy(make_inputs(kind, K, 256, rng)).cuda()
            ref = a.double() @ b.double()
            row = [f"{kind:13} K={K:6}", f"sgemm {err(a @ b, ref):.2e}"]
            for name, p in CONFIGS.items():
                c = torch.full((256, 256), float("nan"), device="cuda")
                gemmlab.matmul(a, b, out=c, precision="fp32_tc", kernel="ec_wgmma", **p)
                row.append(f"{name}: {err(c, ref):.2e} [{gemmlab.last_plan().method}]")
            print("  ".join(row), flush=True)
    # odd shapes, a batch, split K, explicit methods, alpha/beta: every config against FP64
    for (M, N, K, nb, split) in ((129, 67, 4099, 1, 1), (300, 257, 1000, 3, 1), (200, 300, 9000, 1, 3)):
        a = torch.rand(nb, M, K, device="cuda") * 2 - 1
        b = torch.rand(nb, K, N, device="cuda") * 2 - 1
        c0 = torch.rand(nb, M, N, device="cuda")
        ref = 0.7 * (a.double() @ b.double()) - 1.3 * c0.double()
        sg = err(0.7 * (a @ b) - 1.3 * c0, ref)
        for prec in ("fp32_tc", "fp16_ec", "fp16_ec_scaled", "tf32_ec"):
            row = [f"{M}x{N}x{K} batch {nb} split {split} {prec:14} sgemm {sg:.2e}"]
            for name, p in CONFIGS.items():
                c = c0.clone()
                gemmlab.matmul(a, b, out=c, alpha=0.7, beta=-1.3, precision=prec, kernel="ec_wgmma", SPLITK=split,
                               **p)
                row.append(f"{name}: {err(c, ref):.2e}")
            print("  ".join(row), flush=True)
    # Inf and NaN: the four-set kernel gives IEEE's answer; FOLD's corrections meet Inf * 0
    a = torch.rand(200, 512, device="cuda") * 2 - 1
    b = torch.rand(512, 150, device="cuda") * 2 - 1
    b[:, :8] = torch.round(b[:, :8] * 64) / 64     # exactly representable in FP16: lo = 0
    a[3, 5] = float("inf")
    a[7, 9] = float("nan")
    ref = a @ b
    for name, p in CONFIGS.items():
        for prec in ("fp32_tc", "fp16_ec", "tf32_ec"):
            c = gemmlab.matmul(a, b, precision=prec, kernel="ec_wgmma", **p)
            same = torch.equal(torch.isnan(c), torch.isnan(ref)) and torch.equal(torch.isinf(c), torch.isinf(ref))
            print(f"non-finite {name:18} {prec:8} NaN {int(torch.isnan(c).sum())} (SGEMM {int(torch.isnan(ref).sum())}) "
                  f"Inf {int(torch.isinf(c).sum())} (SGEMM {int(torch.isinf(ref).sum())}) same pattern {same}",
                  flush=True)

if "speed" in parts:
    # Configurations in turn, the order rotating from round to round (bench.timing.time_rounds):
    # at the GPU's power limit a configuration timed after another runs on a warmer GPU, so
    # rounds of one configuration at a time favour whichever runs first.
    g = gpu_info(0)
    for size in sizes.split(","):
        M, N, K = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
        a = torch.rand(M, K, device="cuda") * 2 - 1
        b = torch.rand(K, N, device="cuda") * 2 - 1
        c = torch.empty(M, N, device="cuda")
        calls = {"SGEMM": lambda: torch.matmul(a, b, out=c)}
        for name, p in CONFIGS.items():
            calls[f"fp32_tc {name}"] = lambda p=p: gemmlab.matmul(a, b, out=c, precision="fp32_tc", kernel="ec_wgmma",
                                                                  **p)
        times = time_rounds(calls, l2_bytes=g.l2_bytes, rounds=5)
        sg = times["SGEMM"].ms
        for name, t in times.items():
            print(f"{size:18} {name:28} median {t.ms:8.3f} ms  (quartiles {np.percentile(t.ms_all, 25):.3f} "
                  f"{np.percentile(t.ms_all, 75):.3f})  {sg / t.ms:5.2f}x SGEMM", flush=True)
