"""On a GPU: each kernel's time in a product, gemmlab.matmul beside torch.matmul on the
same views (torch.profiler, L2 flushed before each run, 10 runs averaged): which launches
a call makes and what each costs, where a public-call figure only gives their sum.

    python3 scripts/kernel_times.py [--dtype bf16|fp16|fp32|fp32_tc] [--models gpt2,...] [--json OUT.json]

--models takes every product of those models' training steps (the training suite's
models, training.matmul_products) instead of the few-tile list below, and adds up each
kernel's time over a step (each product as many times as a step makes it).  fp32_tc is
gemmlab's precision="fp32_tc" beside cuBLAS SGEMM (TF32 off).
"""

import argparse
import json
import sys

# (label, M, N, K, ops): few-tile products of models' layers and odd-aligned random ones.
PRODUCTS = [
    ("llama-3.2-3b q.fwd, 512 tokens", 512, 3072, 3072, "NT"),
    ("mixtral kv.fwd, 512 tokens", 512, 1024, 4096, "NT"),
    ("whisper-small up.dgrad, 1500 frames", 1500, 768, 3072, "NN"),
    ("gpt2 o.wgrad, 4 x 1024 tokens", 768, 768, 4096, "TN"),
    ("gpt2 down.fwd, 1024 tokens", 1024, 768, 3072, "NT"),
    ("qwen2.5-7b kv.fwd, 2048 tokens", 2048, 512, 3584, "NT"),
    ("clip-vit-l14 o.wgrad", 1024, 1024, 8224, "TN"),
    ("vit-b16 up.dgrad, 197 tokens", 197, 768, 3072, "NN"),
    ("gemma-2-2b down.fwd, 512 tokens", 512, 2304, 9216, "NT"),
    ("odd 361 x 57 x 445", 361, 57, 445, "NT"),
    ("odd 199 x 127 x 3947", 199, 127, 3947, "NT"),
    ("odd 5655 x 543 x 61", 5655, 543, 61, "TN"),
    ("odd 681 x 2795 x 35", 681, 2795, 35, "TN"),
    ("odd 199 x 3947 x 127", 199, 3947, 127, "NN"),
]


def operands(M, N, K, ops, dtype, batch=1):
    """op(A) (M x K) and op(B) (K x N), stored transposed where ``ops`` says 'T'; a leading
    batch dimension where ``batch`` > 1."""
    import torch

    lead = (batch,) if batch > 1 else ()
    a = (
        torch.randn(*lead, M, K, device="cuda", dtype=dtype)
        if ops[0] == "N"
        else torch.randn(*lead, K, M, device="cuda", dtype=dtype).transpose(-1, -2)
    )
    b = (
        torch.randn(*lead, K, N, device="cuda", dtype=dtype)
        if ops[1] == "N"
        else torch.randn(*lead, N, K, device="cuda", dtype=dtype).transpose(-1, -2)
    )
    return a, b


def kernel_times(fn, flush, runs=10) -> dict:
    """Kernel name -> mean GPU time (us) per call of ``fn``, L2 flushed before each run."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    per = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "elementwise" not in e.name and "Memset" not in e.name:
            per[e.name[:90]] = per.get(e.name[:90], 0.0) + e.device_time / runs
    return per


def step_products(models: str) -> list[tuple]:
    """(label, M, N, K, ops, batch, count, model) of every product of each model's training step."""
    from gemmlab.tools.bench import training

    out = []
    for name in models.split(","):
        if name not in training.CONFIGS:
            raise SystemExit(f"--models: unknown model {name!r}; known: {', '.join(training.CONFIGS)}")
        for M, N, K, ops, batch, count in training.matmul_products(training.CONFIGS[name]):
            out.append((f"{name} x{count} a step", M, N, K, ops, batch, count, name))
    return out


def step_totals(recs: list[dict]) -> dict:
    """Per model: each kernel's time over a step, ms (a product's kernels times its count)."""
    totals: dict[str, dict[str, dict[str, float]]] = {}
    for r in recs:
        for who in ("torch", "gemmlab"):
            per = totals.setdefault(r["model"], {}).setdefault(who, {})
            for name, us in r[who].items():
                per[name] = per.get(name, 0.0) + us * r["count"] / 1e3
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32", "fp32_tc"))
    ap.add_argument("--models", help="the products of these models' training steps (comma list)")
    ap.add_argument("--json", help="write the records here")
    args = ap.parse_args()

    import torch
    import gemmlab

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp32_tc": torch.float32}[args.dtype]
    precision = "fp32_tc" if args.dtype == "fp32_tc" else None
    products = step_products(args.models) if args.models else [(*p, 1, 1, None) for p in PRODUCTS]
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    recs = []
    for label, M, N, K, ops, batch, count, model in products:
        a, b = operands(M, N, K, ops, dt, batch)
        c = torch.empty(*((batch,) if batch > 1 else ()), M, N, device="cuda", dtype=dt)
        t = kernel_times(lambda: torch.matmul(a, b, out=c), flush)
        g = kernel_times(lambda: gemmlab.matmul(a, b, out=c, precision=precision), flush)
        plan = gemmlab.last_plan().describe()
        tt, gt = sum(t.values()), sum(g.values())
        shape = f"{batch} x {M}x{N}x{K}" if batch > 1 else f"{M}x{N}x{K}"
        print(f"== {label} {shape} {ops}: kernels torch {tt:.1f} us, gemmlab {gt:.1f} us ({100 * tt / gt:.0f}%)")
        print(f"   gemmlab: {plan}")
        for who, ks in (("torch", t), ("gemmlab", g)):
            for name, us in ks.items():
                print(f"     {who:8s} {us:7.1f} us  {name}")
        recs.append(
            {"product": label, "model": model, "shape": [M, N, K], "ops": ops, "batch": batch, "count": count}
            | {"plan": plan}
            | {"torch": t, "gemmlab": g}
        )
    totals = step_totals(recs) if args.models else {}
    for model, by in totals.items():
        print(f"== {model}: kernels over a step, ms (a product's kernels times its count; launches that")
        print("   overlap under programmatic dependent launch are counted in full)")
        for who, per in by.items():
            print(f"   {who}: {sum(per.values()):.2f} ms")
            for name, ms in sorted(per.items(), key=lambda kv: -kv[1])[:8]:
                print(f"     {ms:8.2f}  {name}")
    if args.json:
        with open(args.json, "w") as f:
            out = {"dtype": args.dtype, "gpu": torch.cuda.get_device_name(), "records": recs, "step_totals": totals}
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
