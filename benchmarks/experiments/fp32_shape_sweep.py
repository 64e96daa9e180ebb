"""Which pipelined configuration suits the FP32 shapes the tuned table is far
from: few rows (M = 128 tokens), narrow outputs (attention's P @ V, N = 128) and
their batches.  Every candidate tile with every split-K factor that leaves the
split slices at least 4 K-steps long, through the public call (gemmlab.matmul
on PyTorch views, as `gemmlab bench --suite models` makes them), beside
torch.matmul on the same views; the plan `auto` takes now is timed too.

    python3 benchmarks/experiments/fp32_shape_sweep.py out.json
    python3 benchmarks/experiments/fp32_shape_sweep.py out.json k1   # K = 1 weight gradients, auto only
    python3 benchmarks/experiments/fp32_shape_sweep.py out.json compile   # only compile (in parallel)

Kernel-only timing (L2 flushed, median of a few runs): for ranking configurations.
"""

import json
import sys
import time

import torch

import gemmlab
from gemmlab.api import last_plan, plan
from gemmlab.bench.timing import time_gpu
from gemmlab.planner import MIN_K_STEPS_PER_SPLIT
from gemmlab.runtime.compile import precompile
from gemmlab.runtime.device import gpu_info

# (label, M, N, K, batch, ops): ops as the models suite stores them.
CASES = [
    ("o.fwd", 128, 4096, 4096, 1, "NT"), ("o.dgrad", 128, 4096, 4096, 1, "NN"),
    ("qkv.fwd", 128, 6144, 4096, 1, "NT"), ("down.fwd", 128, 4096, 14336, 1, "NT"),
    ("down.dgrad", 128, 14336, 4096, 1, "NN"), ("gate_up.dgrad", 128, 4096, 28672, 1, "NN"),
    ("gate_up.fwd", 128, 28672, 4096, 1, "NT"),
    ("attention.pv", 2048, 128, 2048, 32, "NN"), ("attention.pv", 4096, 128, 4096, 32, "NN"),
    ("attention.pv", 2048, 128, 2048, 1, "NN"),
]
# Weight gradients of one token (K = 1, an outer product): dY.t() @ x.
K1_CASES = [("o.wgrad", 4096, 4096, 1, 1, "TN"), ("qkv.wgrad", 6144, 4096, 1, 1, "TN"),
            ("down.wgrad", 4096, 14336, 1, 1, "TN")]
TILES = {
    "128x256x8": dict(BM=128, BN=256, BK=8, WM=64, WN=64, WNITER=4, TM=8, STAGES=4),
    "256x128x8": dict(BM=256, BN=128, BK=8, WM=64, WN=64, WNITER=4, TM=4, STAGES=3),
    "128x128x16": dict(BM=128, BN=128, BK=16, WM=32, WN=64, WNITER=2, TM=4, STAGES=3),
    "128x128x8": dict(BM=128, BN=128, BK=8, WM=32, WN=64, WNITER=2, TM=8, STAGES=4),
    "128x64x16": dict(BM=128, BN=64, BK=16, WM=32, WN=64, WNITER=2, TM=8, STAGES=3),
    "64x128x16": dict(BM=64, BN=128, BK=16, WM=64, WN=32, WNITER=4, TM=4, STAGES=3),
    "64x128x16b": dict(BM=64, BN=128, BK=16, WM=32, WN=64, WNITER=2, TM=8, STAGES=2),
    "64x64x16": dict(BM=64, BN=64, BK=16, WM=32, WN=32, WNITER=2, TM=4, STAGES=3),
}
SPLITS = (1, 2, 4, 8)


def operands(M, N, K, batch, ops):
    def r(*shape):
        return torch.rand(shape, device="cuda").mul_(2).sub_(1)
    lead = (batch,) if batch > 1 else ()
    a = r(*lead, K, M).transpose(-1, -2) if ops[0] == "T" else r(*lead, M, K)
    b = r(*lead, N, K).transpose(-1, -2) if ops[1] == "T" else r(*lead, K, N)
    return a, b


def main(path, which="sweep"):
    gpu = gpu_info(0)
    cases, tiles = (K1_CASES, {}) if which == "k1" else (CASES, TILES)   # which == "compile": no timing
    items = set()
    for _, M, N, K, batch, ops in cases:
        for kernel, params in [("auto", {})] + [("pipelined", t) for t in tiles.values()]:
            p = plan(kernel, M, N, K, op_a=ops[0], op_b=ops[1], batch=batch, arch=gpu.arch,
                     gpu_slug=gpu.slug, sm_count=gpu.sm_count, **params)
            items.add((str(p.spec.source_path), p.name_expression))
    t0 = time.time()
    precompile(sorted(items), gpu.arch, log=print)
    print(f"compiled {len(items)} instantiations in {time.time() - t0:.1f} s", flush=True)
    if which == "compile":
        return
    records = []
    for label, M, N, K, batch, ops in cases:
        a, b = operands(M, N, K, batch, ops)
        c = torch.empty(*((batch,) if batch > 1 else ()), M, N, device="cuda")
        ref = torch.matmul(a, b)
        timing = dict(l2_bytes=gpu.l2_bytes, reps=8, budget_s=0.15)
        torch_ms = time_gpu(lambda: torch.matmul(a, b, out=c), **timing).ms
        flops = 2.0 * M * N * K * batch
        cands = [("auto", {})]
        for name, tile in tiles.items():
            steps = -(-K // tile["BK"])
            for s in SPLITS if batch == 1 else (1,):
                if s == 1 or steps >= MIN_K_STEPS_PER_SPLIT * s:
                    cands.append((name, {**tile, "SPLITK": s}))
        for name, params in cands:
            kw = {"kernel": "pipelined", **params} if params else {}
            gemmlab.matmul(a, b, out=c, **kw)
            err = float((c - ref).norm() / ref.norm())
            chosen = last_plan().describe()
            ms = time_gpu(lambda: gemmlab.matmul(a, b, out=c, **kw), **timing).ms
            rec = dict(case=label, M=M, N=N, K=K, batch=batch, ops=ops, config=name,
                       params=params or None, plan=chosen, ms=ms, torch_ms=torch_ms,
                       pct_torch=100 * torch_ms / ms, tflops=flops / ms / 1e9, rel_err_vs_torch=err)
            records.append(rec)
        mine = [r for r in records if (r["case"], r["M"], r["K"], r["batch"], r["ops"]) == (label, M, K, batch, ops)]
        best = min(mine, key=lambda r: r["ms"])
        auto = next(r for r in mine if r["config"] == "auto")
        print(f"{label} {M}x{N}x{K} b{batch} {ops}: torch {torch_ms:.4f} ms; auto {auto['pct_torch']:.1f}% "
              f"({auto['plan']}); best {best['config']} split {best['params'] and best['params']['SPLITK']} "
              f"{best['pct_torch']:.1f}%", flush=True)
        del a, b, c, ref
    json.dump({"gpu": gpu.name, "records": records}, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:3])
