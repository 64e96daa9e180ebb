"""A/B, on a GPU: 16-bit x @ W.t() at a few rows (decode steps) on gemv_mma (kernel="auto")
beside gemv (rung 1, the rung auto took for up to 4 rows before gemv_mma), wgmma at the
tiles its auto rule gives (what auto took for more rows) and torch.matmul, in one process,
calls interleaved round after round, L2 flushed before every run; each product both through
the public call (host time included) and back to back (GPU time).  Each arm's output is
checked against FP64 first.

    python3 scripts/ab_gemv_mma.py --json OUT.json        # on the GPU
    python3 scripts/ab_gemv_mma.py --list                 # no GPU: the products
"""

import argparse
import json
import sys

# (N, K) of W: Llama 3 8B's up and down, Llama 3.2's and Qwen 2.5's lm_head, Llama 3.2 1B's
# down, Gemma 2 2B's up, a GQA k/v projection and a small one, GPT-2's lm_head.
WEIGHTS = [
    (4096, 4096),
    (14336, 4096),
    (4096, 14336),
    (128256, 3072),
    (2048, 8192),
    (9216, 2304),
    (1024, 4096),
    (512, 2048),
    (50257, 768),
    (151936, 3584),
]
ROWS = (1, 2, 4, 8, 16)
DTYPES = ("bfloat16", "float16")


def products():
    return [(dt, M, N, K) for dt in DTYPES for N, K in WEIGHTS for M in ROWS]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--list", action="store_true", help="print the products and exit (no GPU)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if args.list:
        for p in products():
            print(*p)
        return 0
    import torch

    import gemmlab
    from gemmlab.kernels import registry
    from gemmlab.kernels.tensor.wgmma import wgmma_auto_params
    from gemmlab.tools.bench.suites import bench_gpu
    from gemmlab.tools.bench.timing import time_rounds

    gpu = bench_gpu()
    rows = []
    for dt, M, N, K in products():
        t = getattr(torch, dt)
        x = torch.randn(M, K, device="cuda", dtype=t)
        w = torch.randn(N, K, device="cuda", dtype=t)
        out = torch.empty(M, N, device="cuda", dtype=t)
        mt = registry.get("gemv").rules.size(M, N, K, gpu.sm_count)["MT"]
        wg = wgmma_auto_params(M, N, gpu.sm_count, 1, K, dt)
        calls = {
            "torch": lambda: torch.matmul(x, w.t(), out=out),
            "auto": lambda: gemmlab.matmul(x, w.t(), out=out),
            "gemv": lambda: gemmlab.matmul(x, w.t(), out=out, kernel="gemv", MT=mt),
            "wgmma": lambda: gemmlab.matmul(x, w.t(), out=out, kernel="wgmma", **wg),
        }
        ref = x.double() @ w.double().t()
        plans, errors = {}, {}
        for name, fn in calls.items():
            out.fill_(float("nan"))
            fn()
            errors[name] = float((out.double() - ref).norm() / ref.norm())
            if name != "torch":
                plans[name] = gemmlab.last_plan().describe()
        row = {"dtype": dt, "M": M, "N": N, "K": K, "plans": plans, "rel_error": errors}
        for host in (True, False):
            timed = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=args.rounds, reps=5, budget_s=0.05, host=host)
            row["public_us" if host else "gpu_us"] = {k: v.ms * 1e3 for k, v in timed.items()}
        rows.append(row)
        p = row["public_us"]
        print(
            f"{dt:8} {M:3}x{N:6}x{K:6}  public us: torch {p['torch']:6.1f} auto {p['auto']:6.1f} "
            f"gemv {p['gemv']:6.1f} wgmma {p['wgmma']:6.1f}  ({plans['auto']})",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu.name, "records": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
