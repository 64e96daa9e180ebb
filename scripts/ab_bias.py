"""A/B, on a GPU: whole bf16 training steps (the training suite's models, eager) three ways in
the same interleaved rounds -- plain PyTorch, gemmlab.torch.use_gemmlab() with nn.Linear's bias
added in wgmma's epilogue (as shipped), and the same with the bias added after each product
(the routed addmm before matmul took a bias) -- so that the epilogue's gain is read within one
run, beside PyTorch.

    python3 scripts/ab_bias.py OUT.json [MODELS]      # MODELS: comma list, default bert-base,vit-b16,gpt2
"""

import contextlib
import json
import statistics
import sys

ROUNDS, STEPS, WARMUP = 5, 6, 3


@contextlib.contextmanager
def bias_after_the_product():
    """Routed products get their bias added after the kernel, as before the epilogue took it."""
    from gemmlab.torch import routing

    product = routing.PRODUCT["fn"]

    def unfused(a, b, *, bias=None, **kw):
        out = product(a, b, **kw)
        if bias is not None:
            out.add_(bias)
        return out

    routing.PRODUCT["fn"] = unfused
    try:
        yield
    finally:
        routing.PRODUCT["fn"] = product


def main(out_path: str, names: list[str]) -> None:
    import torch
    from gemmlab.runtime.device import gpu_info
    from gemmlab.tools.bench import training as T

    records = []
    for name in names:
        cfg = T.CONFIGS[name]
        torch.manual_seed(0)
        with torch.device("cuda"):
            init = {k: v.detach().clone().to(torch.bfloat16) for k, v in T.build(cfg).state_dict().items()}
        T._precompile(cfg, ["bf16_gemmlab"], lambda *a: None)
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs, targets = T.make_batch(cfg, cfg.batch, cfg.seq, "cuda", gen)
        x = inputs.to(torch.bfloat16) if cfg.kind == "vision" else inputs
        ways = {
            "torch": (T._Instance(cfg, "bf16", "eager", init), contextlib.nullcontext),
            "epilogue": (T._Instance(cfg, "bf16_gemmlab", "eager", init), contextlib.nullcontext),
            "after": (T._Instance(cfg, "bf16_gemmlab", "eager", init), bias_after_the_product),
        }
        times = {w: [] for w in ways}
        for w, (inst, ctx) in ways.items():
            with ctx():
                for _ in range(WARMUP):
                    inst.step(x, targets)
        torch.cuda.synchronize()
        for _ in range(ROUNDS):
            for w, (inst, ctx) in ways.items():
                with ctx():
                    seconds, _ = T._sync_time(lambda: [inst.step(x, targets) for _ in range(STEPS)])
                times[w].append(seconds * 1e3 / STEPS)
        ms = {w: statistics.median(v) for w, v in times.items()}
        rec = {
            "gpu": gpu_info(0).name,
            "model": name,
            "mode": "eager",
            "ms": ms,
            "pct_torch": {w: 100 * ms["torch"] / ms[w] for w in ("epilogue", "after")},
            "rounds": ROUNDS,
            "steps": STEPS,
        }
        records.append(rec)
        print(
            f"{name:10s} torch {ms['torch']:6.2f} ms  epilogue {ms['epilogue']:6.2f} ms "
            f"({rec['pct_torch']['epilogue']:5.1f}%)  after {ms['after']:6.2f} ms ({rec['pct_torch']['after']:5.1f}%)",
            flush=True,
        )
        del ways
        torch.cuda.empty_cache()
    with open(out_path, "w") as f:
        json.dump({"records": records, "command": " ".join(sys.argv)}, f, indent=1)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="write the records here (JSON)")
    ap.add_argument(
        "models", nargs="?", default="bert-base,vit-b16,gpt2", help="comma list of the training suite's models"
    )
    args = ap.parse_args()
    main(args.out, args.models.split(","))
