"""Public calls launched once each, gemmlab.matmul (kernel="auto") then torch.matmul on
the same views, for Nsight Compute to list every kernel each runs with its GPU time:
what a case's kernels cost on the GPU, split by kernel (split-K's GEMM and its
reduction, cuBLAS's own choice), apart from host time and launch gaps.

    ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size --csv \\
        python3 benchmarks/experiments/profile_cases.py --cases small-m
    ncu --section SpeedOfLight ... python3 benchmarks/experiments/profile_cases.py --cases bf16-8192

Case sets: ``small-m`` -- a Llama-3-8B-sized model's o and qkv layers at 1, 16 and 128
tokens in bf16, forward ``x @ W.t()`` and input gradient ``dY @ W`` (the models suite's
products below 90% of torch); ``bf16-8192`` -- 8192^3 bf16 NN and NT; ``narrow-m1`` -- o's
input gradient at 1 and 16 tokens on the 64x64 deep-ring wgmma tile, named (unsplit at
one row it was no faster than split, at 16 rows it was: why is the question); ``decode`` --
the products of a few rows that stream a weight matrix and read under 90% of torch:
o's and qkv's input gradient at one token in float32 and bf16 (auto's rung, and gemv's row
path named for bf16), lm_head's and gate_up's forward at 16 tokens in float32 (gemv's
column path); ``short`` -- one product of each kind that read under 90% of torch in
the models suite of run 89g and had no profile of its own: float32 `x @ W.t()` at 2048
tokens on rung 8 (o), float32 `dY @ W` and `x @ W.t()` at 128 tokens split over K (o,
down), float32 `P @ V` at S = 4096, bf16 `Q @ K^T` at BH = 128, S = 4096 and bf16
gate_up's weight gradient at 8192 tokens; ``fp16`` -- the fp16 products under 90% in run 90e
that ``short`` and ``decode`` do not hold: gate_up's input gradient at 8192 tokens, qkv's at 16
and o's and qkv's at one token.  NVTX
ranges name each call (``--nvtx`` in ncu shows them).
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


def narrow_m1(dt):
    w = torch.randn(4096, 4096, device="cuda", dtype=dt) * 0.05
    for m in (1, 16):
        yield f"o.dgrad M={m}", torch.randn(m, 4096, device="cuda", dtype=dt), w


def decode(_dt):
    for layer, (fin, fout) in LAYERS.items():
        for dt, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            w = torch.randn(fout, fin, device="cuda", dtype=dt) * 0.05
            yield f"{layer}.dgrad M=1 {tag}", torch.randn(1, fout, device="cuda", dtype=dt), w, {}
            if dt == torch.bfloat16:
                yield f"{layer}.dgrad M=1 {tag} gemv", torch.randn(1, fout, device="cuda", dtype=dt), w, {"kernel": "gemv"}
    for fin, fout, layer in ((4096, 128256, "lm_head"), (4096, 28672, "gate_up")):
        w = torch.randn(fout, fin, device="cuda", dtype=torch.float32) * 0.05
        yield f"{layer}.fwd M=16 fp32", torch.randn(16, fin, device="cuda", dtype=torch.float32), w.t(), {}


def short(_dt):
    f32, b16 = torch.float32, torch.bfloat16
    w_o = torch.randn(4096, 4096, device="cuda", dtype=f32) * 0.05
    w_down = torch.randn(4096, 14336, device="cuda", dtype=f32) * 0.05
    yield "o.fwd M=2048 fp32", torch.randn(2048, 4096, device="cuda", dtype=f32), w_o.t(), {}
    yield "o.dgrad M=128 fp32", torch.randn(128, 4096, device="cuda", dtype=f32), w_o, {}
    yield "down.fwd M=128 fp32", torch.randn(128, 14336, device="cuda", dtype=f32), w_down.t(), {}
    p = torch.rand(32, 4096, 4096, device="cuda", dtype=f32)
    yield "attention.pv BH=32 S=4096 fp32", p, torch.randn(32, 4096, 128, device="cuda", dtype=f32), {}
    del p
    k = torch.randn(128, 4096, 128, device="cuda", dtype=b16)
    yield "attention.qk BH=128 S=4096 bf16", torch.randn(128, 4096, 128, device="cuda", dtype=b16), \
        k.transpose(-1, -2), {}
    del k
    dy = torch.randn(8192, 28672, device="cuda", dtype=b16)
    yield "gate_up.wgrad M=8192 bf16", dy.t(), torch.randn(8192, 4096, device="cuda", dtype=b16), {}


def fp16(_dt):
    h = torch.float16
    w_gate_up = torch.randn(28672, 4096, device="cuda", dtype=h) * 0.05
    yield "gate_up.dgrad M=8192 fp16", torch.randn(8192, 28672, device="cuda", dtype=h), w_gate_up, {}
    del w_gate_up
    for layer, (fin, fout) in LAYERS.items():
        w = torch.randn(fout, fin, device="cuda", dtype=h) * 0.05
        for m in (1, 16):
            yield f"{layer}.dgrad M={m} fp16", torch.randn(m, fout, device="cuda", dtype=h), w, {}


def big_layouts(dt, n=8192):
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    yield f"NN {n}", a, b
    yield f"NT {n}", a, b.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="small-m", choices=("small-m", "bf16-8192", "narrow-m1", "decode", "short", "fp16"))
    args = p.parse_args()
    dt = torch.bfloat16
    cases = {"small-m": small_m, "bf16-8192": big_layouts, "narrow-m1": narrow_m1, "decode": decode,
             "short": short, "fp16": fp16}[args.cases](dt)
    for name, a, b, *case_named in cases:
        named = case_named[0] if case_named else (
            {"kernel": "wgmma", "BM": 64, "BN": 64, "STAGES": 12} if args.cases == "narrow-m1" else {})
        out = torch.empty(*a.shape[:-1], b.shape[-1], device="cuda", dtype=a.dtype)
        gemmlab.matmul(a, b, out=out, **named)   # compile, load and prepare outside the profile
        torch.matmul(a, b, out=out)
        torch.cuda.synchronize()
        for who, fn in (("gemmlab", lambda: gemmlab.matmul(a, b, out=out, **named)),
                        ("torch", lambda: torch.matmul(a, b, out=out))):
            torch.cuda.nvtx.range_push(f"{who} {name}")
            fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
        print(f"{name}: gemmlab ran {gemmlab.last_plan().describe()}", flush=True)


if __name__ == "__main__":
    main()
