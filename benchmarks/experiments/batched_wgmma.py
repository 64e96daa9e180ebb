"""Batched 16-bit products through the public call: gemmlab.matmul (auto, and wgmma
and mma_pipelined by name) against torch.matmul on the same batched views, and the
per-matrix loop of gemmlab.matmul calls that a batch on wgmma used to cost (one
launch per matrix).  Kernel figures (runs enqueued back to back, L2 flushed before
each: gemmlab.bench.timing.time_gpu).
Usage: python3 benchmarks/experiments/batched_wgmma.py [--json FILE]"""

import json
import sys

import torch

import gemmlab
from gemmlab.bench.timing import time_gpu
from gemmlab.runtime.device import gpu_info

L2 = 50 << 20


def cases():
    bf = dict(device="cuda", dtype=torch.bfloat16)
    a, b = torch.randn(64, 512, 128, **bf), torch.randn(64, 128, 512, **bf)
    yield "64 x (512x128 @ 128x512)", a, b
    q, k = torch.randn(32, 2048, 128, **bf), torch.randn(32, 2048, 128, **bf)
    yield "(32,2048,128) @ k^T (32,128,2048)", q, k.transpose(-1, -2)
    p, v = torch.randn(32, 2048, 2048, **bf), torch.randn(32, 2048, 128, **bf)
    yield "(32,2048,2048) @ (32,2048,128)", p, v


def main():
    rows = []
    for name, a, b in cases():
        out = torch.matmul(a, b)
        flops = 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        ref = torch.matmul(a.double(), b.double())
        variants = {
            "torch.matmul": lambda: torch.matmul(a, b, out=out),
            "gemmlab auto": lambda: gemmlab.matmul(a, b, out=out),
            "gemmlab wgmma": lambda: gemmlab.matmul(a, b, out=out, kernel="wgmma"),
            "gemmlab mma_pipelined": lambda: gemmlab.matmul(a, b, out=out, kernel="mma_pipelined"),
            "gemmlab wgmma, a call per matrix": lambda: [gemmlab.matmul(a[i], b[i], out=out[i], kernel="wgmma")
                                                         for i in range(a.shape[0])],
        }
        for label, fn in variants.items():
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
            plan = gemmlab.last_plan().describe() if label.startswith("gemmlab") else ""
            t = time_gpu(fn, l2_bytes=L2)
            row = {"case": name, "variant": label, "ms": t.ms, "tflops": flops / t.ms / 1e9 if t.ms else None,
                   "rel_err": err, "plan": plan}
            rows.append(row)
            print(f"{name:36s} {label:34s} {t.ms:9.4f} ms {row['tflops']:7.1f} TFLOP/s err {err:.1e} {plan}",
                  flush=True)
    result = {"gpu": gpu_info(0).name, "rows": rows}
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
