"""Decode-sized products x @ W.t() (M = 1 to 16 tokens) through the public call:
gemmlab.matmul with kernel="auto" (gemv for M <= 16), the tiled rung auto took
before gemv existed (wgmma for 16-bit, pipelined for float32, named explicitly),
and torch.matmul, on the same views (W.t() a transposed view, out= given).
Public-call figures (time_gpu with host=True: each run from an idle GPU, host
time included).  Reported: ms, % of torch, and the bandwidth each reaches,
bytes of W, x and out over the time, against the GPU's HBM bandwidth.
Usage: python3 benchmarks/experiments/decode_gemv.py [--json FILE] [--hbm-gbs 3350]"""

import argparse
import json

import torch

import gemmlab
from gemmlab.bench.timing import time_gpu
from gemmlab.runtime.device import gpu_info

L2 = 50 << 20
# (in features K, out features N): a Llama-3-8B-sized model's layers.
LAYERS = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096),
          "lm_head": (4096, 128256)}
TILED = {torch.bfloat16: "wgmma", torch.float16: "wgmma", torch.float32: "pipelined"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--hbm-gbs", type=float, default=3350.0, help="the GPU's HBM bandwidth, GB/s (H100 SXM: 3350)")
    p.add_argument("--tokens", default="1,2,4,8,16")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        for layer, (K, N) in LAYERS.items():
            w = torch.randn(N, K, device="cuda", dtype=dtype)
            for M in (int(t) for t in args.tokens.split(",")):
                x = torch.randn(M, K, device="cuda", dtype=dtype)
                out = torch.empty(M, N, device="cuda", dtype=dtype)
                ref = (x.double() @ w.double().t())
                nbytes = (N * K + M * K + M * N) * w.element_size()
                calls = {"torch": lambda: torch.matmul(x, w.t(), out=out),
                         "gemmlab auto": lambda: gemmlab.matmul(x, w.t(), out=out),
                         f"gemmlab {TILED[dtype]}": lambda: gemmlab.matmul(x, w.t(), out=out, kernel=TILED[dtype])}
                res = {}
                for name, fn in calls.items():
                    out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = float((out.double() - ref).norm() / ref.norm())
                    plan = gemmlab.last_plan().spec.name if name.startswith("gemmlab") else "cuBLAS"
                    t = time_gpu(fn, l2_bytes=L2, reps=20, host=True, budget_s=1.0)
                    res[name] = dict(ms=t.ms, rel_error=err, ran=plan, gbs=nbytes / t.ms / 1e6)
                row = dict(dtype=str(dtype).split(".")[-1], layer=layer, M=M, N=N, K=K, bytes=nbytes, **{
                    f"{k}": v for k, v in res.items()})
                for name in res:
                    res[name]["pct_torch"] = 100 * res["torch"]["ms"] / res[name]["ms"]
                    res[name]["pct_hbm"] = 100 * res[name]["gbs"] / args.hbm_gbs
                rows.append(row)
                print(f"{row['dtype']:9} {layer:8} M={M:<3} " + "  ".join(
                    f"{k}: {v['ms']*1e3:8.1f} us {v['gbs']:6.0f} GB/s ({v['pct_hbm']:4.1f}% HBM, "
                    f"{v['pct_torch']:5.1f}% torch, {v['ran']}, err {v['rel_error']:.1e})" for k, v in res.items()),
                    flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=gpu_info().name, hbm_gbs=args.hbm_gbs, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
