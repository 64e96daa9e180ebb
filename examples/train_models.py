"""Train a model at published sizes a few steps with PyTorch's matrix products,
then the same steps through gemmlab.torch, and print ms per step and the loss.

    python examples/train_models.py --model gpt2 --precision bf16
    python examples/train_models.py --model vit-b16 --precision fp32_tc --steps 10

The models (Llama-3.2-1B, Qwen2-0.5B, Granite-3.0-1B-A400M (experts: a loop, or grouped
products, granite-moe-1b-grouped, bf16 only), GPT-2 small, BERT-base,
BERT-large (in nn.TransformerEncoderLayer), ViT-B/16 and Swin-T's first stage sizes) are those
of `gemmlab bench --suite training`, written with torch.nn; the data is random.
The one change to a training loop is the ``with`` line around the forward and
backward passes:

    with gt.use_gemmlab((torch.bfloat16,)):   # bf16 products on gemmlab's kernels
    with gt.fp32_tc():                       # float32 products, FP32-accurate on tensor cores

bf16 keeps weights, gradients and AdamW's state in bfloat16; fp32_tc is
compared with float32 on cuBLAS SGEMM (TF32 off).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time

try:
    import torch
except ModuleNotFoundError:
    print(f"{__file__.rsplit('/', 1)[-1]}: this example needs PyTorch: pip install 'gemmlab[torch]'", file=sys.stderr)
    sys.exit(2)


def train(cfg, init, dtype, steps: int, routed) -> tuple[list[float], list[float]]:
    """``steps`` AdamW steps from ``init`` inside ``routed()``; (ms per step, losses)."""
    from gemmlab.tools.bench.training import build, loss_of, make_batch

    with torch.device("cuda"):
        model = build(cfg).to(dtype)
    model.load_state_dict(init)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = make_batch(cfg, cfg.batch, cfg.seq, "cuda", torch.Generator("cuda").manual_seed(0))
    if cfg.kind == "vision":
        inputs = inputs.to(dtype)
    times, losses = [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with routed():
            loss = loss_of(model, inputs, targets)
            loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - start))
        losses.append(float(loss.detach()))
    return times, losses


def main() -> int:
    from gemmlab.tools.bench.training import CONFIGS, build, configure

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2", choices=list(CONFIGS))
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp32_tc"))
    p.add_argument("--steps", type=int, default=12, help="steps per run; the first 2 are not timed")
    p.add_argument("--batch", type=int, help="default: the model's own")
    p.add_argument("--layers", type=int, help="default: the published count")
    args = p.parse_args()
    import gemmlab.torch as gt

    why = gt.cuda_missing()
    if why:
        print(f"train_models.py: this example needs a CUDA GPU; {why}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 on PyTorch's side is SGEMM
    cfg = configure(CONFIGS[args.model], batch=args.batch, num_layers=args.layers)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    torch.manual_seed(0)
    with torch.device("cuda"):
        init = {k: v.to(dtype) for k, v in build(cfg).state_dict().items()}
    gemmlab_mode = (lambda: gt.use_gemmlab((torch.bfloat16,))) if args.precision == "bf16" else gt.fp32_tc
    print(f"{cfg.name}: {cfg.layers} layers, batch {cfg.batch}, {args.precision}, {args.steps} AdamW steps")
    for name, routed in (("PyTorch", contextlib.nullcontext), ("gemmlab", gemmlab_mode)):
        times, losses = train(cfg, init, dtype, args.steps, routed)
        ms = statistics.median(times[2:] or times)
        print(
            f"{name:8s} {ms:8.1f} ms per step, {cfg.items_per_step() / ms * 1e3:12,.0f} {cfg.items}/s, "
            f"loss {losses[0]:.4f} -> {losses[-1]:.4f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
