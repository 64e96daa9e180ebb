"""Split-K on the wgmma rung: a transformer's linear-layer products with few tiles
(M = 1, 16, 128 tokens; forward x @ W.t() 'NT' and input gradient dY @ W 'NN', a
Llama-3-8B-sized model), each through gemmlab.matmul with kernel="wgmma" at
several tiles x SPLITK, with kernel="auto", and torch.matmul, on the same views
(out= given).  GPU-time figures (time_gpu with host=False: runs back to back, L2
flushed before each), so the GEMM + reduction cost is compared without host time.
Reported per point: ms, % of torch, and op(B)'s bytes (K x N) over the time in
GB/s (against the H100's ~3350).  Each result is checked against torch's (relative
Frobenius error).
Usage: python3 benchmarks/experiments/wgmma_splitk.py [--json FILE] [--tokens 1,16,128]"""

import argparse
import json
import time

import torch

import gemmlab
from gemmlab.kernels import registry
from gemmlab.bench.timing import time_gpu

L2 = 50 << 20
LAYERS = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096),
          "lm_head": (4096, 128256)}
SPLITS = {(64, 64): (1, 2, 4), (128, 64): (1, 2, 4), (64, 128): (1, 2, 3, 4, 6, 8), (128, 128): (1, 2, 4),
          (64, 256): (1, 2, 4, 8), (128, 256): (1, 2, 4)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--tokens", default="1,16,128")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--layers", default=",".join(LAYERS), help="comma list of " + ", ".join(LAYERS))
    p.add_argument("--stages", default="4", help="comma list of STAGES values, each tile and split at each")
    p.add_argument("--budget-s", type=float, default=0.5, help="timing budget per point")
    args = p.parse_args()
    rows = []
    dt = torch.bfloat16
    t0 = time.time()
    for layer in args.layers.split(","):
        fin, fout = LAYERS[layer]
        w = torch.randn(fout, fin, device="cuda", dtype=dt) * 0.05
        for M in (int(t) for t in args.tokens.split(",")):
            for product in ("fwd", "dgrad"):
                if product == "fwd":
                    a, b, ops = torch.randn(M, fin, device="cuda", dtype=dt), w.t(), "NT"
                else:
                    a, b, ops = torch.randn(M, fout, device="cuda", dtype=dt), w, "NN"
                N, K = b.shape[1], b.shape[0]
                out = torch.empty(M, N, device="cuda", dtype=dt)
                torch.matmul(a, b, out=out)
                ref = out.double().clone()
                tt = time_gpu(lambda: torch.matmul(a, b, out=out), l2_bytes=L2, reps=args.reps, budget_s=args.budget_s)
                entries = [("torch", None, tt.ms, 0.0)]
                spec = registry.get("wgmma")
                configs = [("auto", {})] + [("wgmma", c) for (bm, bn), ss in SPLITS.items() for s in ss
                                            for st in args.stages.split(",")
                                            for c in ({"BM": bm, "BN": bn, "STAGES": int(st), "SPLITK": s},)
                                            if all(r.holds({**spec.defaults(), **c}) for r in spec.constraints)]
                for kernel, params in configs:
                    out.fill_(float("nan"))
                    gemmlab.matmul(a, b, out=out, kernel=kernel, **params)
                    plan = gemmlab.last_plan()
                    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
                    tg = time_gpu(lambda: gemmlab.matmul(a, b, out=out, kernel=kernel, **params), l2_bytes=L2,
                                  reps=args.reps, budget_s=args.budget_s)
                    entries.append((kernel, plan.describe(), tg.ms, err))
                for kernel, desc, ms, err in entries:
                    rows.append({"layer": layer, "product": product, "M": M, "N": N, "K": K, "ops": ops,
                                 "kernel": kernel, "plan": desc, "ms": ms, "pct_torch": 100 * tt.ms / ms,
                                 "b_gbs": 2 * K * N / ms / 1e6, "rel_err_vs_torch": err})
                best = min((e for e in entries if e[0] == "wgmma"), key=lambda e: e[2])
                auto = entries[1]
                print(f"{layer}.{product} M={M} ({M}x{N}x{K} {ops}): torch {tt.ms * 1e3:.1f} us "
                      f"({2 * K * N / tt.ms / 1e6:.0f} GB/s); auto {auto[1]} {auto[2] * 1e3:.1f} us "
                      f"({100 * tt.ms / auto[2]:.0f}%); best {best[1]} {best[2] * 1e3:.1f} us "
                      f"({100 * tt.ms / best[2]:.0f}%, {2 * K * N / best[2] / 1e6:.0f} GB/s); "
                      f"max err {max(e[3] for e in entries):.1e}", flush=True)
    print(f"{len(rows)} points in {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
