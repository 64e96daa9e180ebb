"""Attention's batched products on the wgmma rung at several tiles: Q @ K^T ('NT', K = 128:
two K-steps a tile, the time is writing S x S scores) and P @ V ('NN', N = 128: a 256-wide
tile computes 128 columns past N), batch x heads 32 and 128, sequence 512, 2048 and 4096,
head dim 128, 16-bit; with --wgrad, the linear layers' weight gradients dY.t() @ x at 16 and
128 tokens instead ('TN', K = the tokens: short K too).  Each through gemmlab.matmul (kernel="auto" and named tiles) beside
torch.matmul on the same views (out= given), two figures per point: GPU time (runs back
to back) and the public call (each run from an idle GPU, host time included).
Usage: python3 benchmarks/experiments/attention_tiles.py [--json FILE] [--dtype bf16]"""

import argparse
import json

import torch

import gemmlab
from gemmlab.bench.timing import time_gpu

L2 = 50 << 20
TILES = [{"BM": 128, "BN": 256}, {"BM": 128, "BN": 128}, {"BM": 64, "BN": 256}, {"BM": 128, "BN": 128, "STAGES": 5},
         {"BM": 64, "BN": 128, "STAGES": 8}, {"BM": 128, "BN": 64, "STAGES": 8}]


def attention(dt):
    """(product, batch x heads, sequence, a, b) of attention's two products."""
    for bh in (32, 128):
        for s in (512, 2048, 4096):
            q = torch.randn(bh, s, 128, device="cuda", dtype=dt)
            k = torch.randn(bh, s, 128, device="cuda", dtype=dt)
            yield "qk", bh, s, q, k.transpose(-1, -2)
            yield "pv", bh, s, torch.softmax(torch.randn(bh, s, s, device="cuda", dtype=dt), -1), k


def wgrads(dt):
    """(layer.wgrad, 1, tokens, dY.t(), x) of a Llama-3-8B-sized model's linear layers."""
    for layer, (fin, fout) in {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672),
                               "down": (14336, 4096)}.items():
        for m in (16, 128):
            yield f"{layer}.wgrad", 1, m, torch.randn(m, fout, device="cuda", dtype=dt).t(), \
                torch.randn(m, fin, device="cuda", dtype=dt)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--budget-s", type=float, default=0.3)
    p.add_argument("--wgrad", action="store_true", help="the weight gradients instead of attention")
    args = p.parse_args()
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    rows = []
    for product, bh, s, a, b in (wgrads(dt) if args.wgrad else attention(dt)):
        out = torch.empty(*a.shape[:-2], a.shape[-2], b.shape[-1], device="cuda", dtype=dt)
        torch.matmul(a, b, out=out)
        ref = out.float()
        points = [("torch", {})] + [("auto", {})] + [("wgmma", t) for t in TILES]
        for kernel, params in points:
            if kernel == "torch":
                fn = lambda: torch.matmul(a, b, out=out)   # noqa: E731
                desc = "torch"
            else:
                fn = lambda: gemmlab.matmul(a, b, out=out, kernel=kernel, **params)   # noqa: E731
                out.fill_(float("nan"))
                fn()
                desc = gemmlab.last_plan().describe()
            err = float(torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref))
            gpu = time_gpu(fn, l2_bytes=L2, reps=10, budget_s=args.budget_s)
            pub = time_gpu(fn, l2_bytes=L2, reps=10, budget_s=args.budget_s, host=True)
            rows.append({"product": product, "batch": bh, "S": s, "M": a.shape[-2], "N": b.shape[-1],
                         "K": a.shape[-1], "kernel": kernel, "plan": desc, "gpu_ms": gpu.ms,
                         "public_ms": pub.ms, "rel_err_vs_torch": err})
        base = rows[-len(points)]
        for r in rows[-len(points):]:
            print(f"{product} B={bh} S/M={s}: {r['plan'][:60]:60s} gpu {r['gpu_ms'] * 1e3:8.1f} us "
                  f"({100 * base['gpu_ms'] / r['gpu_ms']:5.1f}%)  public {r['public_ms'] * 1e3:8.1f} us "
                  f"({100 * base['public_ms'] / r['public_ms']:5.1f}%)  err {r['rel_err_vs_torch']:.1e}",
                  flush=True)
        del a, b, out, ref
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "dtype": args.dtype, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
