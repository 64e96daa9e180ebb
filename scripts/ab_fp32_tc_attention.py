"""A/B, on a GPU: fp32_tc's batched attention products (Q @ K^T, P @ V and their gradients'
layouts) on ec_wgmma, on ec_wmma and as kernel="auto" ships them, beside cuBLAS SGEMM and
TF32 (torch.matmul), in one process, calls interleaved round after round, L2 flushed before
every run.  Each arm's output is checked against FP64 on a sample first.

    python3 scripts/ab_fp32_tc_attention.py --json OUT.json [--budget-s 120]
"""

import argparse
import statistics
import sys
import time

# (label, S, head dim, batch of heads, which product): float32, rows of S floats (S odd: off
# the 16-byte grid, as attention's scores are at 197 tokens).
PRODUCTS = [
    (f"{kind} S={S} d={d}", S, d, heads, kind)
    for S, d, heads in ((77, 64, 2048), (197, 64, 768), (257, 64, 512), (512, 64, 96), (577, 64, 96), (1024, 64, 48))
    for kind in ("q @ k^T", "P @ v", "P^T @ dO", "dS @ k")
]


def operands(kind, S, d, heads, gen):
    import torch

    def rand(*shape):
        return torch.rand(heads, *shape, device="cuda", generator=gen).mul_(2).sub_(1)

    if kind == "q @ k^T":  # S x d times (S x d)^T
        return rand(S, d), rand(S, d).transpose(-1, -2)
    if kind == "P @ v":  # S x S times S x d
        return rand(S, S), rand(S, d)
    if kind == "P^T @ dO":  # (S x S)^T times S x d
        return rand(S, S).transpose(-1, -2), rand(S, d)
    return rand(S, S), rand(S, d)  # dS @ k


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--budget-s", type=float, default=120.0, help="no product starts after this many seconds")
    args = ap.parse_args()

    import torch
    import gemmlab
    from gemmlab.runtime.device import gpu_info
    from gemmlab.tools.bench import models, report
    from gemmlab.tools.bench.timing import time_rounds

    t0 = time.time()
    gpu = gpu_info(0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    recs = []

    def torch_mm(a, b, out, tf32):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.matmul(a, b, out=out)
        torch.backends.cuda.matmul.allow_tf32 = False

    for label, S, d, heads, kind in PRODUCTS:
        if time.time() - t0 > args.budget_s:
            print(f"budget spent: {label} and after not timed")
            break
        a, b = operands(kind, S, d, heads, gen)
        M, K, N = a.shape[1], a.shape[2], b.shape[2]
        c = torch.empty(heads, M, N, device="cuda")
        ct = torch.empty(heads, M, N, device="cuda")
        calls = {
            "sgemm": lambda: torch_mm(a, b, ct, False),
            "tf32": lambda: torch_mm(a, b, ct, True),
            "auto": lambda: gemmlab.matmul(a, b, out=c, precision="fp32_tc"),
            "ec_wgmma": lambda: gemmlab.matmul(a, b, out=c, precision="fp32_tc", kernel="ec_wgmma"),
            "ec_wmma": lambda: gemmlab.matmul(a, b, out=c, precision="fp32_tc", kernel="ec_wmma"),
        }
        sample = models._Sample(a[0], b[0])
        errors, plans = {}, {}
        for name, fn in list(calls.items()):
            o = ct if name in ("sgemm", "tf32") else c
            o.fill_(float("nan"))
            try:
                fn()
            except Exception as e:  # an arm that cannot take the product is reported, not timed
                print(f"  {label}: {name} refused: {e}")
                del calls[name]
                continue
            errors[name] = sample.error(o[0])
            if name not in ("sgemm", "tf32"):
                plans[name] = gemmlab.last_plan().describe()
        ok = {n: e <= max(4 * errors["sgemm"], 1e-5) for n, e in errors.items() if n != "tf32"}
        timed = {n: f for n, f in calls.items() if n == "tf32" or ok.get(n)}
        t = time_rounds(timed, l2_bytes=gpu.l2_bytes, rounds=5, reps=3, budget_s=0.05)
        r = {
            "product": label,
            "shape": [M, N, K],
            "batch": heads,
            "kind": kind,
            "plans": plans,
            "errors": errors,
            "ok": ok,
            **{f"{k}_ms": v.ms for k, v in t.items()},
        }
        r.update({f"x_sgemm_{k}": r["sgemm_ms"] / r[f"{k}_ms"] for k in t if k != "sgemm"})
        cells = "  ".join(f"{k} {r[f'x_sgemm_{k}']:5.2f}x" for k in t if k != "sgemm")
        wrong = [n for n, good in ok.items() if not good]
        print(
            f"{label:26s} {heads} x {M}x{N}x{K}  sgemm {r['sgemm_ms'] * 1e3:7.1f} us  {cells}"
            f"{'  WRONG: ' + ','.join(wrong) if wrong else ''}\n      auto {plans.get('auto', '')}",
            flush=True,
        )
        recs.append(r)
    gm = statistics.geometric_mean
    summary = {
        k: gm(v)
        for k in ("tf32", "auto", "ec_wgmma", "ec_wmma")
        if (v := [r[f"x_sgemm_{k}"] for r in recs if f"x_sgemm_{k}" in r])
    }
    print("geometric means, x SGEMM: " + ", ".join(f"{k} {v:.2f}" for k, v in summary.items()))
    if args.json:
        report.write_run(args.json, gpu.name, recs, summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
