"""fp32_tc on batches, ec_wgmma (one launch of each pass for the whole batch) against
ec_wmma (one launch along gridDim.z) and batched cuBLAS SGEMM (torch.matmul, TF32 off),
through the public call on the same tensors (out= given; time_gpu with host=True: each
run from an idle GPU, host time included).  Cases: attention's products at a few
sizes, small batches on both sides of planner.ec_wgmma_pays's threshold, and the
models suite's 128-token products.
Reported: ms, % of SGEMM, which kernel auto takes.
Usage: python3 benchmarks/experiments/ec_batches.py [--json FILE] [--budget-s 0.4] [--cases M=128,qk]"""

import argparse
import json

import torch

import gemmlab
from gemmlab.bench.timing import time_gpu
from gemmlab.planner import ec_wgmma_pays
from gemmlab.runtime.device import gpu_info

L2 = 50 << 20
# (name, batch, M, N, K, b transposed)
CASES = [("qk BH=32 S=512", 32, 512, 512, 128, True), ("pv BH=32 S=512", 32, 512, 128, 512, False),
         ("qk BH=128 S=512", 128, 512, 512, 128, True), ("pv BH=128 S=512", 128, 512, 128, 512, False),
         ("qk BH=32 S=2048", 32, 2048, 2048, 128, True), ("pv BH=32 S=2048", 32, 2048, 128, 2048, False),
         ("small 64 tiles", 16, 256, 192, 256, False), ("small 72 tiles", 18, 256, 192, 256, False),
         ("tiny 128 tiles", 128, 64, 64, 64, False), ("tiny 1024 tiles", 1024, 64, 64, 64, False),
         ("one-tile 48", 48, 128, 96, 128, False), ("one-tile 200", 200, 128, 96, 128, False),
         ("512^3 x4", 4, 512, 512, 512, False), ("1024^3 x8", 8, 1024, 1024, 1024, False),
         # the models suite's 128-token products (one matrix), which auto gives ec_wmma
         # (one row of 128 x 96 tiles gives fewer than half the SMs a block; run 86b: 40-49%)
         ("o.fwd M=128", 1, 128, 4096, 4096, True), ("o.dgrad M=128", 1, 128, 4096, 4096, False),
         ("qkv.fwd M=128", 1, 128, 6144, 4096, True), ("down.fwd M=128", 1, 128, 4096, 14336, True),
         ("gate_up.dgrad M=128", 1, 128, 4096, 28672, False)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--budget-s", type=float, default=0.4)
    p.add_argument("--cases", help="comma list of substrings: only the cases whose name holds one")
    args = p.parse_args()
    wanted = args.cases.split(",") if args.cases else None
    torch.backends.cuda.matmul.allow_tf32 = False
    sm = gpu_info(0).sm_count
    rows = []
    for name, nb, M, N, K, tb in CASES:
        if wanted and not any(w in name for w in wanted):
            continue
        a = torch.randn(nb, M, K, device="cuda")
        b = torch.randn(nb, N, K, device="cuda").transpose(1, 2) if tb else torch.randn(nb, K, N, device="cuda")
        out = torch.empty(nb, M, N, device="cuda")
        ref = torch.matmul(a.double(), b.double())
        calls = {"sgemm": lambda: torch.matmul(a, b, out=out)}
        for k in ("ec_wgmma", "ec_wmma"):
            calls[k] = lambda k=k: gemmlab.matmul(a, b, out=out, precision="fp32_tc", kernel=k)
        row = dict(case=name, batch=nb, M=M, N=N, K=K, auto="ec_wgmma" if ec_wgmma_pays(M, N, K, nb, sm) else "ec_wmma")
        for k, fn in calls.items():
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = float((out.double() - ref).norm() / ref.norm())
            t = time_gpu(fn, l2_bytes=L2, reps=20, host=True, budget_s=args.budget_s)
            row[k] = dict(ms=t.ms, rel_error=err)
        for k in ("ec_wgmma", "ec_wmma"):
            row[k]["pct_sgemm"] = 100 * row["sgemm"]["ms"] / row[k]["ms"]
        rows.append(row)
        print(f"{name:16} {nb:5}x{M}x{N}x{K}  sgemm {row['sgemm']['ms']:.3f} ms  ec_wgmma {row['ec_wgmma']['ms']:.3f} "
              f"({row['ec_wgmma']['pct_sgemm']:.1f}%, err {row['ec_wgmma']['rel_error']:.1e})  ec_wmma "
              f"{row['ec_wmma']['ms']:.3f} ({row['ec_wmma']['pct_sgemm']:.1f}%)  auto: {row['auto']}", flush=True)
        del a, b, out, ref
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu_info(0).name, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
