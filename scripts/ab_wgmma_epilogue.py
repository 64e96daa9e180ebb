"""A/B, on a GPU: wgmma's epilogue with four staging buffers a consumer (a whole 64 x 256
tile handed to the copy engine at once, the ring one stage shorter) against two (the ring of
four stages), on the 16-bit products of whole models -- the short K of a 768-wide model
(BERT-base, ViT-B/16, GPT-2), their long-K gradients, nn.Linear's bias in the epilogue --
beside torch.matmul / torch.addmm, in one process, calls interleaved round after round,
L2 flushed before every run.

    python3 scripts/ab_wgmma_epilogue.py --json OUT.json [--budget-s 300]   # on the GPU

Arms: "torch"; "r4": wgmma 128 x 256, a ring of 4 stages (2 staging buffers: the tile
rule's choice before this change); "r3": 128 x 256, 3 stages (4 buffers); "t128": 128 x 128,
4 stages (4 buffers); "auto": gemmlab.matmul as shipped.  Products with a bias run every
arm with it (torch.addmm for torch), and "nobias" is auto without it: the bias's own cost.
Each arm's output is checked against FP64 on a sample first (models._Sample, the bias
taken out in FP64).
"""

import argparse
import statistics
import sys
import time

# (label, M, N, K, ops, bias): ops as the layouts of op(A), op(B) ("N": stored as read,
# "T": a transposed view of a row-major array); bias: nn.Linear's, a vector of N.
PRODUCTS = [
    ("vit-b16 fc1 x @ W.t()", 12608, 3072, 768, "NT", True),
    ("vit-b16 qkv x @ W.t()", 12608, 2304, 768, "NT", True),
    ("vit-b16 fc2 x @ W.t()", 12608, 768, 3072, "NT", True),
    ("vit-b16 fc1 dY @ W", 12608, 768, 3072, "NN", False),
    ("vit-b16 fc2 dY @ W", 12608, 3072, 768, "NN", False),
    ("vit-b16 fc1 dY.t() @ x", 3072, 768, 12608, "TN", False),
    ("bert-base fc1 x @ W.t()", 4096, 3072, 768, "NT", True),
    ("bert-base o x @ W.t()", 4096, 768, 768, "NT", True),
    ("bert-base fc2 x @ W.t()", 4096, 768, 3072, "NT", True),
    ("bert-base fc2 dY @ W", 4096, 3072, 768, "NN", False),
    ("bert-base fc1 dY.t() @ x", 3072, 768, 4096, "TN", False),
    ("gpt2 fc1 x @ W.t(), 8 x 1024 tokens", 8192, 3072, 768, "NT", True),
    ("llama-3.2-1b gate_up x @ W.t(), 8192 tokens", 8192, 16384, 2048, "NT", False),
    ("llama-3.2-1b down dY @ W, 8192 tokens", 8192, 2048, 8192, "NN", False),
    ("square 4096", 4096, 4096, 4096, "NN", False),
    ("square 8192", 8192, 8192, 8192, "NN", False),
]
TILES = {
    "r4": {"BM": 128, "BN": 256, "STAGES": 4},
    "r3": {"BM": 128, "BN": 256, "STAGES": 3},
    "t128": {"BM": 128, "BN": 128, "STAGES": 4},
}


def arrays(M, N, K, ops, gen, dtype):
    import torch

    def make(shape):
        return torch.rand(shape, device="cuda", generator=gen, dtype=torch.float32).mul_(2).sub_(1).to(dtype)

    a = make((M, K)) if ops[0] == "N" else make((K, M)).t()
    b = make((K, N)) if ops[1] == "N" else make((N, K)).t()
    return a, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--budget-s", type=float, default=300.0, help="no product starts after this many seconds")
    args = ap.parse_args()

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
        f"gemmlab::wgmma_gemm<1, 1, {p['BM']}, {p['BN']}, {p['STAGES']}, 1, false, '{ops[0]}', '{ops[1]}'>"
        for *_, ops, _ in PRODUCTS
        for p in TILES.values()
    }
    print(
        f"compiled {rt_compile.precompile(sorted((str(spec.source_path), n) for n in names), gpu.arch)} "
        f"of {len(names)} instantiations ({time.time() - t0:.0f} s)",
        flush=True,
    )
    gen = torch.Generator(device="cuda").manual_seed(0)
    bf16 = torch.bfloat16
    recs = []
    for label, M, N, K, ops, with_bias in PRODUCTS:
        if time.time() - t0 > args.budget_s:
            print(f"budget spent: {label} and after not timed")
            break
        a, b = arrays(M, N, K, ops, gen, bf16)
        bias = (torch.rand(N, device="cuda", generator=gen) - 0.5).to(bf16) if with_bias else None
        c = torch.empty(M, N, device="cuda", dtype=bf16)
        ct = torch.empty(M, N, device="cuda", dtype=bf16)
        calls = {
            "torch": (lambda: torch.addmm(bias, a, b, out=ct)) if with_bias else (lambda: torch.matmul(a, b, out=ct))
        }
        for arm, p in TILES.items():
            calls[arm] = lambda p=p: gemmlab.matmul(a, b, out=c, bias=bias, kernel="wgmma", CLUSTER=1, SPLITK=1, **p)
        calls["auto"] = lambda: gemmlab.matmul(a, b, out=c, bias=bias)
        if with_bias:
            calls["nobias"] = lambda: gemmlab.matmul(a, b, out=c)
        sample = models._Sample(a, b)  # FP64 of op(a) @ op(b) on sampled rows and columns
        errors = {}
        for name, fn in calls.items():
            o = ct if name == "torch" else c
            o.fill_(float("nan"))
            fn()
            added = bias is not None and name != "nobias"
            errors[name] = sample.error(o.double() - bias.double() if added else o)
        auto_plan = (gemmlab.matmul(a, b, out=c, bias=bias), gemmlab.last_plan().describe())[1]
        ok = all(e <= max(4 * errors["torch"], 1e-2) for e in errors.values())
        t = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=5, reps=3, budget_s=0.05) if ok else {}
        flops = 2.0 * M * N * K
        r = {
            "product": label,
            "shape": [M, N, K],
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
                f"{label:44s} {M}x{N}x{K} {ops}{' +bias' if with_bias else '      '} torch "
                f"{r['torch_ms'] * 1e3:7.1f} us ({r['torch_tflops']:5.0f} TFLOPS)  {cells}\n      auto {auto_plan}",
                flush=True,
            )
        else:
            print(f"WRONG {label}: {errors}", flush=True)
        recs.append(r)
        a = b = c = ct = bias = calls = sample = None
    gm = statistics.geometric_mean
    good = [r for r in recs if r["ok"]]
    summary = {k: gm([r[f"pct_{k}"] for r in good]) for k in ("r4", "r3", "t128", "auto")} if good else {}
    print("geometric means, % of torch: " + ", ".join(f"{k} {v:.1f}" for k, v in summary.items()))
    if args.json:
        report.write_json(
            {
                "gpu": gpu.name,
                "date": time.strftime("%Y-%m-%d"),
                "command": " ".join(sys.argv),
                "summary": summary,
                "records": recs,
            },
            args.json,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
