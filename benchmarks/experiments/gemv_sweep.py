"""gemv against torch.matmul and against the rung auto takes without gemv, on a
Llama-3-8B-sized model's linear layers (x @ W.t(), W stored N x K), for M = 1 to
16 tokens: where GEMV_MAX_M should end for each dtype.

Through the public call (gemmlab.matmul on torch tensors, out= given): gemv
with MT sized as auto sizes it (kernel="gemv", MT named), the rung auto runs
where it does not take gemv (planned with GEMV_MAX_M set to 0 for the dtype,
then named with its parameters), and torch.matmul.  Each is timed twice with
gemmlab.bench.timing.time_gpu after an L2 flush: ``host=True`` (each call from an
idle GPU, host time included: what decode_gemv.py reports) and ``host=False``
(calls back to back: the GPU's time where it exceeds the host's).  Bandwidth is
W's bytes over the back-to-back time.

Usage: python3 benchmarks/experiments/gemv_sweep.py [--json FILE] [--dtypes bf16,fp16,fp32] [--tokens 1,2,4,8,16]"""

import argparse
import json

import torch

import gemmlab
from gemmlab.bench.timing import time_gpu
from gemmlab.kernels import registry
from gemmlab.runtime.device import gpu_info

L2 = 50 << 20
LAYERS = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096),
          "lm_head": (4096, 128256)}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def auto_without(table, op_b, M, N, K, dtype, gpu):
    """(kernel, parameters) auto picks for this product (op(B) stored ``op_b``) were
    gemv's rule ``table`` (registry.GEMV_MAX_M, GEMV_ROWS_MAX_M) not there."""
    saved = dict(table)
    table[dtype] = 0
    try:
        p = gemmlab.plan("auto", M, N, K, dtype=dtype, out_dtype=dtype, op_b=op_b, arch=gpu.arch,
                         gpu_slug=gpu.slug, sm_count=gpu.sm_count)
    finally:
        table.update(saved)
    return p.spec.name, dict(p.params)


def time_calls(calls, row, out, ref, budget_s):
    """Each call's error against ``ref`` (out poisoned first), its time per call from an
    idle GPU (host included) and back to back, W's GB/s back to back, and % of torch's
    per-call time, into ``row`` by name."""
    for name, fn in calls.items():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = float((out.double() - ref).norm() / ref.norm())
        public = time_gpu(fn, l2_bytes=L2, reps=20, host=True, budget_s=budget_s)
        back = time_gpu(fn, l2_bytes=L2, reps=20, host=False, budget_s=budget_s)
        row[name] = dict(us=public.ms * 1e3, us_back_to_back=back.ms * 1e3, rel_error=err,
                         gbs=row["w_bytes"] / back.ms / 1e6)
    for name in calls:
        row[name]["pct_torch"] = 100 * row["torch"]["us"] / row[name]["us"]


def report(head, row, calls):
    print(head + "  ".join(
        f"{k}: {row[k]['us']:7.1f} us ({row[k]['us_back_to_back']:7.1f} b2b, {row[k]['gbs']:5.0f} GB/s, "
        f"{row[k]['pct_torch']:5.1f}% torch, err {row[k]['rel_error']:.1e})" for k in calls)
        + f"  [other = {row['other_rung']}]", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--dtypes", default="bf16,fp16,fp32")
    ap.add_argument("--tokens", default="1,2,4,8,16")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--budget-s", type=float, default=0.3, help="time_gpu's budget per figure")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = gpu_info()
    rows = []
    for dname in args.dtypes.split(","):
        dt = DTYPES[dname]
        dtype = str(dt).split(".")[-1]
        for layer in args.layers.split(","):
            K, N = LAYERS[layer]
            w = torch.randn(N, K, device="cuda", dtype=dt)
            for M in (int(t) for t in args.tokens.split(",")):
                x = torch.randn(M, K, device="cuda", dtype=dt)
                out = torch.empty(M, N, device="cuda", dtype=dt)
                ref = x.double() @ w.double().t()
                mt = registry.get("gemv").sized_params(M, N, K, gpu.sm_count)["MT"]
                other, other_params = auto_without(registry.GEMV_MAX_M, "T", M, N, K, dtype, gpu)
                calls = {"gemv": lambda: gemmlab.matmul(x, w.t(), out=out, kernel="gemv", MT=mt),
                         "other": lambda: gemmlab.matmul(x, w.t(), out=out, kernel=other, **other_params),
                         "torch": lambda: torch.matmul(x, w.t(), out=out)}
                row = dict(dtype=dtype, layer=layer, M=M, N=N, K=K, w_bytes=N * K * w.element_size(), MT=mt,
                           other_rung=f"{other} {other_params}")
                time_calls(calls, row, out, ref, args.budget_s)
                rows.append(row)
                report(f"{dtype:9} {layer:8} M={M:<3} MT={mt:<3} ", row, calls)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=gpu.name, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
