"""Train a small transformer language model four ways and compare them:
IEEE float32, TF32, bfloat16 autocast, and float32 under gemmlab.torch.fp32_tc().

    python examples/train_fp32_tc.py --json train.json --plot train.png
    python examples/train_fp32_tc.py --replot train.json --plot train.png   # the plot again, no GPU

The data is made here, no downloads: token sequences from a fixed random
second-order Markov chain (each token drawn from a distribution that depends
on the two before it), so that the loss has somewhere to go.  Every run starts
from the same weights and sees the same batches in the same order.

Recorded per run: the loss at every step, the median time per step (after the
first steps), and how far the weights have drifted from the IEEE float32
run's at the same step (relative Frobenius norm of the difference over all
parameters).  Expected: fp32_tc's loss curve on top of float32's and its weights
close to them; TF32's and bfloat16's visibly further; fp32_tc's step faster
than float32's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

try:
    import torch
except ModuleNotFoundError:
    print(f"{__file__.rsplit('/', 1)[-1]}: this example needs PyTorch: pip install 'gemmlab[torch]'", file=sys.stderr)
    sys.exit(2)
import torch.nn as nn
import torch.nn.functional as F


def need_cuda(script: str) -> None:
    """Stop with one line (exit code 2) where PyTorch cannot reach a CUDA GPU."""
    import gemmlab.torch as gt

    why = gt.cuda_missing()
    if why:
        print(f"{script}: this example needs a CUDA GPU; {why}", file=sys.stderr)
        sys.exit(2)


RUNS = ("fp32", "tf32", "bf16_autocast", "fp32_tc")


class Block(nn.Module):
    """Pre-norm attention and MLP.  Attention is written out (q @ k^T, softmax,
    @ v) so that its products are matrix products the routing context sees."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, causal_mask):
        B, S, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D // self.heads)
        attn = scores.masked_fill(causal_mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(B, S, D))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class LM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1), persistent=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask[: tokens.shape[1], : tokens.shape[1]])
        return self.head(self.norm(x))


def markov_batches(steps: int, batch: int, seq: int, vocab: int, seed: int = 0):
    """Token sequences of a fixed random second-order Markov chain (made on the GPU)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    # Sharp next-token distributions (a few likely tokens per context), so the loss can fall well below log(vocab).
    logits = torch.randn(vocab, vocab, vocab, device="cuda", generator=g) * 3.0
    probs = logits.softmax(-1)
    out = []
    for _ in range(steps):
        seqs = torch.empty(batch, seq + 1, dtype=torch.long, device="cuda")
        seqs[:, :2] = torch.randint(vocab, (batch, 2), device="cuda", generator=g)
        for t in range(2, seq + 1):
            seqs[:, t] = torch.multinomial(probs[seqs[:, t - 2], seqs[:, t - 1]], 1, generator=g).squeeze(1)
        out.append(seqs)
    return out


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])


def train(run: str, args, batches, init_state, reference=None) -> tuple[dict, dict]:
    import gemmlab.torch as gt

    torch.backends.cuda.matmul.allow_tf32 = run == "tf32"
    torch.backends.cudnn.allow_tf32 = run == "tf32"
    model = LM(args.vocab, args.d_model, args.layers, args.heads, args.seq).cuda()
    model.load_state_dict(init_state)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses, times, drift, snapshots = [], [], {}, {}
    for step, seqs in enumerate(batches):
        torch.cuda.synchronize()
        start = time.perf_counter()
        if run == "bf16_autocast":
            ctx = torch.autocast("cuda", dtype=torch.bfloat16)
        elif run == "fp32_tc":
            ctx = gt.fp32_tc()
        else:
            ctx = torch.autocast("cuda", enabled=False)
        with ctx:
            logits = model(seqs[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), seqs[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
        if (step + 1) % args.every == 0 or step + 1 == len(batches):
            params = flat_params(model)
            if reference is None:
                snapshots[step + 1] = params
            else:
                ref = reference[step + 1]
                drift[step + 1] = float(torch.linalg.norm(params - ref) / torch.linalg.norm(ref))
        if (step + 1) % 50 == 0:
            print(f"  {run:14} step {step + 1:4d}  loss {losses[-1]:.4f}", flush=True)
    warm = min(10, len(times) // 2)
    result = dict(
        run=run,
        loss=losses,
        ms_per_step=1e3 * sorted(times[warm:])[len(times[warm:]) // 2],
        drift_from_fp32={str(k): v for k, v in drift.items()},
    )
    return result, snapshots


def plot(results: dict, path: str) -> None:
    try:
        import matplotlib
    except ModuleNotFoundError:
        print("train_fp32_tc.py: --plot needs matplotlib: pip install 'gemmlab[plot]'", file=sys.stderr)
        sys.exit(2)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.5))
    color = {run: f"C{i}" for i, run in enumerate(RUNS)}  # one color a run in every panel
    for r in results["runs"]:
        ax1.plot(range(1, len(r["loss"]) + 1), r["loss"], label=r["run"], lw=1, color=color[r["run"]])
        if r["drift_from_fp32"]:
            steps = [int(s) for s in r["drift_from_fp32"]]
            ax2.semilogy(steps, list(r["drift_from_fp32"].values()), "o-", label=r["run"], ms=3, color=color[r["run"]])
    ax1.set(xlabel="step", ylabel="training loss", title="Loss")
    ax1.legend()
    ax2.set(xlabel="step", ylabel="||W - W_fp32|| / ||W_fp32||", title="Weight drift from the IEEE float32 run")
    ax2.legend()
    names = [r["run"] for r in results["runs"]]
    ax3.bar(names, [r["ms_per_step"] for r in results["runs"]], color=[color[n] for n in names])
    ax3.set(ylabel="ms per step (median)", title="Time per step")
    fig.suptitle(f"{results['config']}, {results['gpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--every", type=int, default=25, help="weight drift measured every this many steps")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma list of {', '.join(RUNS)} (fp32 always runs first)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write the plot here (PNG; needs matplotlib)")
    p.add_argument("--replot", help="a --json file to plot again (no training)")
    args = p.parse_args()
    if args.replot:
        if not args.plot:
            p.error("--replot needs --plot PATH.png")
        with open(args.replot) as f:
            plot(json.load(f), args.plot)
        return
    runs = [r for r in args.runs.split(",") if r]
    unknown = set(runs) - set(RUNS)
    if unknown:
        p.error(f"unknown runs {sorted(unknown)}; choose from {', '.join(RUNS)}")
    runs = ["fp32"] + [r for r in runs if r != "fp32"]
    need_cuda("train_fp32_tc.py")
    torch.manual_seed(0)
    init_state = LM(args.vocab, args.d_model, args.layers, args.heads, args.seq).cuda().state_dict()
    init_state = {k: v.clone() for k, v in init_state.items()}
    batches = markov_batches(args.steps, args.batch, args.seq, args.vocab)
    config = (
        f"{args.layers} layers, d_model {args.d_model}, {args.heads} heads, seq {args.seq}, batch {args.batch}, "
        f"vocab {args.vocab}, AdamW lr {args.lr}, {args.steps} steps"
    )
    print(config)
    results = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, config=config, runs=[])
    reference = None
    for run in runs:
        result, snapshots = train(run, args, batches, init_state, reference)
        if run == "fp32":
            reference = snapshots
        results["runs"].append(result)
        print(
            f"{run:14} final loss {result['loss'][-1]:.4f}  {result['ms_per_step']:.1f} ms/step  "
            f"drift {list(result['drift_from_fp32'].values())[-1:] or '-'}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
