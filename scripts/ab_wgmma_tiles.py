"""A/B, on a GPU: wgmma's tiles against each other and against what ``kernel="auto"``
ships, on 16-bit products of whole models (the suites' and others'), beside torch.matmul /
torch.addmm, in one process, calls interleaved round after round, L2 flushed before every run.

    python3 scripts/ab_wgmma_tiles.py --json OUT.json [--arms t256=128x256x4,t192=128x192x4]
        [--batched-arms t128=128x128x4,t64=128x64x4,s64=64x64x8] [--budget-s 300]

Arms: "torch"; each ``name=BMxBNxSTAGES`` of --arms for the single products, of
--batched-arms for the batched ones (attention's, 197 tokens: rows of 394 bytes, which
wgmma reads after a staging copy; here they are padded to 400 bytes, so that every arm runs
wgmma on them in place) (wgmma unsplit, no cluster); "auto": gemmlab.matmul as shipped.  Products with a bias (nn.Linear's) run every arm with it
(torch.addmm for torch).  Each arm's output is checked against FP64 on a sample first
(models._Sample, the bias taken out in FP64).
"""

import argparse
import statistics
import sys
import time

# (label, M, N, K, ops, bias[, batch]): ops as the layouts of op(A), op(B) ("N": stored as
# read, "T": a transposed view of a row-major array); bias: nn.Linear's, a vector of N.
PRODUCTS = [
    ("vit-b16 attention q @ k^T, 64 x 12 heads", 197, 197, 64, "NT", False, 768),
    ("vit-b16 attention P @ v, 64 x 12 heads (P's rows padded to 400 B)", 197, 64, 197, "NN", False, 768),
    ("vit-b16 attention P^T @ dO, 64 x 12 heads (P's rows padded to 400 B)", 197, 64, 197, "TN", False, 768),
    ("clip-text attention q @ k^T, 256 x 8 heads, 77 tokens", 77, 77, 64, "NT", False, 2048),
    ("vit-b16 fc2 x @ W.t()", 12608, 768, 3072, "NT", True),
    ("vit-b16 proj x @ W.t()", 12608, 768, 768, "NT", True),
    ("vit-b16 fc1 dY @ W", 12608, 768, 3072, "NN", False),
    ("vit-b16 qkv x @ W.t()", 12608, 2304, 768, "NT", True),
    ("vit-b16 fc1 x @ W.t()", 12608, 3072, 768, "NT", True),
    ("bert-base o x @ W.t()", 4096, 768, 768, "NT", True),
    ("bert-base fc2 x @ W.t()", 4096, 768, 3072, "NT", True),
    ("bert-base fc1 dY @ W", 4096, 768, 3072, "NN", False),
    ("bert-base qkv x @ W.t()", 4096, 2304, 768, "NT", True),
    ("bert-base fc1 x @ W.t()", 4096, 3072, 768, "NT", True),
    ("gpt2 fc2 x @ W.t(), 4 x 1024 tokens", 4096, 768, 3072, "NT", True),
    ("deit-s fc2 x @ W.t(), 128 x 197 tokens", 25216, 384, 1536, "NT", True),
    ("deit-s fc1 x @ W.t(), 128 x 197 tokens", 25216, 1536, 384, "NT", True),
    ("whisper-base fc2 x @ W.t(), 16 x 1500 frames", 24000, 512, 2048, "NT", True),
    ("phi-2 fc1 x @ W.t(), 4096 tokens", 4096, 10240, 2560, "NT", True),
    ("phi-2 fc2 dY @ W, 4096 tokens", 4096, 10240, 2560, "NN", False),
    ("mistral-7b kv x @ W.t(), 4096 tokens", 4096, 1024, 4096, "NT", False),
    ("mistral-7b down x @ W.t(), 4096 tokens", 4096, 4096, 14336, "NT", False),
    ("gemma-2b gate x @ W.t(), 4096 tokens", 4096, 16384, 2048, "NT", False),
    ("odd 4000 x 1000 x 1000", 4000, 1000, 1000, "NN", False),
    ("square 4096", 4096, 4096, 4096, "NN", False),
    ("square 8192", 8192, 8192, 8192, "NN", False),
]

# --set few: single products whose 128 x 256 tiles leave most SMs idle (a few hundred to
# two thousand tokens, narrow projections, weight gradients), from models the suites name
# and others.
FEW_TILES = [
    ("llama-3.2-3b q x @ W.t(), 512 tokens", 512, 3072, 3072, "NT", False),
    ("llama-3.2-1b o x @ W.t(), 512 tokens", 512, 2048, 2048, "NT", False),
    ("mixtral kv x @ W.t(), 512 tokens", 512, 1024, 4096, "NT", False),
    ("mistral-7b kv x @ W.t(), 1024 tokens", 1024, 1024, 4096, "NT", False),
    ("qwen2.5-7b kv x @ W.t(), 2048 tokens", 2048, 512, 3584, "NT", True),
    ("gemma-2-2b down x @ W.t(), 512 tokens", 512, 2304, 9216, "NT", False),
    ("phi-3-mini down x @ W.t(), 1024 tokens", 1024, 3072, 8192, "NT", False),
    ("llama-3-8b q x @ W.t(), 256 tokens", 256, 4096, 4096, "NT", False),
    ("bert-base o x @ W.t(), 512 tokens", 512, 768, 768, "NT", True),
    ("gpt2 fc2 x @ W.t(), 1024 tokens", 1024, 768, 3072, "NT", True),
    ("whisper-small fc1 dY @ W, 1500 frames", 1500, 768, 3072, "NN", False),
    ("vit-b16 fc1 dY @ W, 197 tokens", 197, 768, 3072, "NN", False),
    ("gpt2 o dY^T @ x, 4 x 1024 tokens", 768, 768, 4096, "TN", False),
    ("clip-vit-l14 o dY^T @ x, 32 x 257 tokens", 1024, 1024, 8224, "TN", False),
]

# --set qk: attention's Q @ K^T over sequence lengths (head dims 64 and 128), a few
# million outputs each: which tile a batch of small odd matrices wants.
QK_SWEEP = [
    (f"q @ k^T, S = {S}, head dim {d}", S, S, d, "NT", False, max(1, (1 << 25) // (S * S)))
    for d in (64, 128)
    for S in (77, 100, 128, 197, 257, 320, 577, 1025)
]


def arrays(M, N, K, ops, gen, dtype, batch=None):
    import torch

    lead = () if batch is None else (batch,)

    def make(shape):  # rows padded to a multiple of 8 elements (16 bytes)
        padded = shape[:-1] + (-(-shape[-1] // 8) * 8,)
        x = torch.rand(lead + padded, device="cuda", generator=gen, dtype=torch.float32).mul_(2).sub_(1).to(dtype)
        return x[..., : shape[-1]]

    a = make((M, K)) if ops[0] == "N" else make((K, M)).transpose(-1, -2)
    b = make((K, N)) if ops[1] == "N" else make((N, K)).transpose(-1, -2)
    return a, b


def parse_arms(text: str) -> dict:
    """name=BMxBNxSTAGES[xCLUSTER[xSPLITK]],...: CLUSTER and SPLITK default to 1."""
    arms = {}
    for item in text.split(","):
        name, tile = item.split("=")
        bm, bn, stages, cluster, splitk = ([int(v) for v in tile.split("x")] + [1, 1])[:5]
        arms[name] = {"BM": bm, "BN": bn, "STAGES": stages, "CLUSTER": cluster, "SPLITK": splitk}
    return arms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--arms", default="t256=128x256x4,t192=128x192x4", help="name=BMxBNxSTAGES[xCLUSTER[xSPLITK]],...")
    ap.add_argument(
        "--batched-arms",
        default="t128=128x128x4,t64=128x64x4,s64=64x64x8",
        help="name=BMxBNxSTAGES[xCLUSTER[xSPLITK]],...",
    )
    ap.add_argument(
        "--set",
        choices=("models", "qk", "few"),
        default="models",
        help="models: the products above; qk: Q @ K^T over sequence lengths; few: products of few tiles",
    )
    ap.add_argument("--budget-s", type=float, default=300.0, help="no product starts after this many seconds")
    args = ap.parse_args()
    tiles, batched_tiles = parse_arms(args.arms), parse_arms(args.batched_arms)
    products = {"qk": QK_SWEEP, "few": FEW_TILES, "models": PRODUCTS}[args.set]

    import torch
    import gemmlab
    from gemmlab.kernels import registry
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime.device import gpu_info
    from gemmlab.tools.bench import models, report
    from gemmlab.tools.bench.timing import time_rounds

    t0 = time.time()
    gpu = gpu_info(0)
    spec = registry.get("wgmma")
    names = {
        f"gemmlab::wgmma_gemm<1, {3 if p['SPLITK'] > 1 else 1}, {p['BM']}, {p['BN']}, {p['STAGES']}, "
        f"{p['CLUSTER']}, {'true' if p['SPLITK'] > 1 else 'false'}, '{ops[0]}', '{ops[1]}'>"
        for _, _, _, _, ops, *rest in products
        for p in (batched_tiles if rest[1:] else tiles).values()
    }
    print(
        f"compiled {rt_compile.precompile(sorted((str(spec.source_path), n) for n in names), gpu.arch)} "
        f"of {len(names)} instantiations ({time.time() - t0:.0f} s)",
        flush=True,
    )
    gen = torch.Generator(device="cuda").manual_seed(0)
    bf16 = torch.bfloat16
    recs = []
    for label, M, N, K, ops, with_bias, *rest in products:
        if time.time() - t0 > args.budget_s:
            print(f"budget spent: {label} and after not timed")
            break
        batch = rest[0] if rest else None
        arms = batched_tiles if batch else tiles
        a, b = arrays(M, N, K, ops, gen, bf16, batch)
        bias = (torch.rand(N, device="cuda", generator=gen) - 0.5).to(bf16) if with_bias else None
        shape = (M, N) if batch is None else (batch, M, N)
        c = torch.empty(shape, device="cuda", dtype=bf16)
        ct = torch.empty(shape, device="cuda", dtype=bf16)
        calls = {
            "torch": (lambda: torch.addmm(bias, a, b, out=ct)) if with_bias else (lambda: torch.matmul(a, b, out=ct))
        }
        for arm, p in arms.items():
            calls[arm] = lambda p=p: gemmlab.matmul(a, b, out=c, bias=bias, kernel="wgmma", **p)
        calls["auto"] = lambda: gemmlab.matmul(a, b, out=c, bias=bias)
        sample = (
            models._Sample(a, b) if batch is None else models._Sample(a[0], b[0])
        )  # FP64 of op(a) @ op(b) on sampled rows and columns
        errors = {}
        for name, fn in calls.items():
            o = ct if name == "torch" else c
            o.fill_(float("nan"))
            fn()
            o = o if batch is None else o[0]
            errors[name] = sample.error(o.double() - bias.double() if bias is not None else o)
        auto_plan = (gemmlab.matmul(a, b, out=c, bias=bias), gemmlab.last_plan().describe())[1]
        ok = all(e <= max(4 * errors["torch"], 1e-2) for e in errors.values())
        t = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=5, reps=3, budget_s=0.05) if ok else {}
        flops = 2.0 * M * N * K * (batch or 1)
        r = {
            "product": label,
            "shape": [M, N, K],
            "batch": batch or 1,
            "ops": ops,
            "bias": with_bias,
            "auto_plan": auto_plan,
            "errors": errors,
            "ok": ok,
            **{f"{k}_ms": v.ms for k, v in t.items()},
        }
        if ok:
            r.update({f"pct_{k}": 100 * r["torch_ms"] / r[f"{k}_ms"] for k in calls if k != "torch"})
            r["torch_tflops"] = flops / r["torch_ms"] / 1e9
            cells = "  ".join(f"{k} {r[f'pct_{k}']:6.1f}%" for k in calls if k != "torch")
            print(
                f"{label:44s} {f'{batch} x ' if batch else ''}{M}x{N}x{K} {ops}{' +bias' if with_bias else '      '} torch "
                f"{r['torch_ms'] * 1e3:7.1f} us ({r['torch_tflops']:5.0f} TFLOPS)  {cells}\n      auto {auto_plan}",
                flush=True,
            )
        else:
            print(f"WRONG {label}: {errors}", flush=True)
        recs.append(r)
        a = b = c = ct = bias = calls = sample = None
    gm = statistics.geometric_mean
    good = [r for r in recs if r["ok"]]
    summary = {
        k: gm(pcts)
        for k in (*tiles, *batched_tiles, "auto")
        if (pcts := [r[f"pct_{k}"] for r in good if f"pct_{k}" in r])
    }
    print("geometric means, % of torch: " + ", ".join(f"{k} {v:.1f}" for k, v in summary.items()))
    if args.json:
        report.write_run(args.json, gpu.name, recs, arms=tiles, batched_arms=batched_tiles, summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
