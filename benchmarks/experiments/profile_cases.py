"""Public calls launched once each, gemmlab.matmul (kernel="auto") then torch.matmul on
the same views, for Nsight Compute to list every kernel each runs with its GPU time:
what a case's kernels cost on the GPU, split by kernel (split-K's GEMM and its
reduction, cuBLAS's own choice), apart from host time and launch gaps.

    ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size --csv \\
        python3 benchmarks/experiments/profile_cases.py --cases small-m
    ncu --section SpeedOfLight ... python3 benchmarks/experiments/profile_cases.py --cases bf16-8192

Case sets: ``small-m`` -- a Llama-3-8B-sized model's o and qkv layers at 1, 16 and 128
tokens in bf16, forward ``x @ W.t()`` and input gradient ``dY @ W`` (the models suite's
products below 90% of torch); ``bf16-8192`` -- 8192^3 bf16 NN and NT.  NVTX ranges name
each call (``--nvtx --nvtx-include`` in ncu selects them).
"""

import argparse

import torch

import gemmlab

LAYERS = {"qkv": (4096, 6144), "o": (4096, 4096)}   # (in features, out features)


def small_m(dt):
    for layer, (fin, fout) in LAYERS.items():
        w = torch.randn(fout, fin, device="cuda", dtype=dt) * 0.05
        for m in (1, 16, 128):
            yield f"{layer}.fwd M={m}", torch.randn(m, fin, device="cuda", dtype=dt), w.t()
            yield f"{layer}.dgrad M={m}", torch.randn(m, fout, device="cuda", dtype=dt), w


def big_layouts(dt, n=8192):
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    yield f"NN {n}", a, b
    yield f"NT {n}", a, b.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="small-m", choices=("small-m", "bf16-8192"))
    args = p.parse_args()
    dt = torch.bfloat16
    cases = small_m(dt) if args.cases == "small-m" else big_layouts(dt)
    for name, a, b in cases:
        out = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=dt)
        gemmlab.matmul(a, b, out=out)          # compile, load and prepare outside the profile
        torch.matmul(a, b, out=out)
        torch.cuda.synchronize()
        for who, fn in (("gemmlab", lambda: gemmlab.matmul(a, b, out=out)),
                        ("torch", lambda: torch.matmul(a, b, out=out))):
            torch.cuda.nvtx.range_push(f"{who} {name}")
            fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
        print(f"{name}: gemmlab ran {gemmlab.last_plan().describe()}", flush=True)


if __name__ == "__main__":
    main()
