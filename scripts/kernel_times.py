"""On a GPU: each kernel's time in a product, gemmlab.matmul beside torch.matmul on the
same views (torch.profiler, L2 flushed before each run, 10 runs averaged): which launches
a call makes and what each costs, where a public-call figure only gives their sum.

    python3 scripts/kernel_times.py [--dtype bf16|fp16|fp32] [--json OUT.json]
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


def operands(M, N, K, ops, dtype):
    import torch

    a = (
        torch.randn(M, K, device="cuda", dtype=dtype)
        if ops[0] == "N"
        else torch.randn(K, M, device="cuda", dtype=dtype).t()
    )
    b = (
        torch.randn(K, N, device="cuda", dtype=dtype)
        if ops[1] == "N"
        else torch.randn(N, K, device="cuda", dtype=dtype).t()
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--json", help="write the records here")
    args = ap.parse_args()

    import torch
    import gemmlab

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    recs = []
    for label, M, N, K, ops in PRODUCTS:
        a, b = operands(M, N, K, ops, dt)
        c = torch.empty(M, N, device="cuda", dtype=dt)
        t = kernel_times(lambda: torch.matmul(a, b, out=c), flush)
        g = kernel_times(lambda: gemmlab.matmul(a, b, out=c), flush)
        plan = gemmlab.last_plan().describe()
        tt, gt = sum(t.values()), sum(g.values())
        print(f"== {label} {M}x{N}x{K} {ops}: kernels torch {tt:.1f} us, gemmlab {gt:.1f} us ({100 * tt / gt:.0f}%)")
        print(f"   gemmlab: {plan}")
        for who, ks in (("torch", t), ("gemmlab", g)):
            for name, us in ks.items():
                print(f"     {who:8s} {us:7.1f} us  {name}")
        recs.append({"product": label, "shape": [M, N, K], "ops": ops, "plan": plan, "torch": t, "gemmlab": g})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dtype": args.dtype, "gpu": torch.cuda.get_device_name(), "records": recs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
