"""gemv's row-major path (op(B) row-major: the input gradient dY @ W of a linear
layer, W stored out x in) against torch.matmul and against the rung auto takes
without it, on a Llama-3-8B-sized model's linear layers, for a few tokens.

Through the public call (gemmlab.matmul on torch tensors, out= given): gemv with
the parameters auto gives it (gemv.auto_params: MT and the split of K), gemv with
twice that split (or 2 where auto does not split), the rung auto runs without
the row rule (planned with GEMV_ROWS_MAX_M set to 0 for the dtype, then named
with its parameters), and torch.matmul.  Timed as gemv_sweep.py times them:
``host=True`` (each call from an idle GPU) and ``host=False`` (back to back);
bandwidth is W's bytes over the back-to-back time.

Usage: python3 benchmarks/experiments/gemv_rows_sweep.py [--json FILE] [--dtypes fp32,bf16] [--tokens 1,4,16]"""

import argparse
import json

import torch

import gemmlab
from gemmlab.bench.timing import time_gpu
from gemmlab.kernels import registry
from gemmlab.runtime.device import gpu_info

L2 = 50 << 20
# (in features, out features): dY is M x out, W out x in, dY @ W is M x in.
LAYERS = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096),
          "lm_head": (4096, 128256)}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def without_rows(M, N, K, dtype, gpu):
    """(kernel, parameters) auto picks for this product were the row rule not there."""
    saved = dict(registry.GEMV_ROWS_MAX_M)
    registry.GEMV_ROWS_MAX_M[dtype] = 0
    try:
        p = gemmlab.plan("auto", M, N, K, dtype=dtype, out_dtype=dtype, op_b="N", arch=gpu.arch,
                         gpu_slug=gpu.slug, sm_count=gpu.sm_count)
    finally:
        registry.GEMV_ROWS_MAX_M.update(saved)
    return p.spec.name, dict(p.params)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--tokens", default="1,4,16")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--budget-s", type=float, default=0.1, help="time_gpu's budget per figure")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = gpu_info()
    rows = []
    for dname in args.dtypes.split(","):
        dt = DTYPES[dname]
        dtype = str(dt).split(".")[-1]
        for layer in args.layers.split(","):
            fan_in, fan_out = LAYERS[layer]
            N, K = fan_in, fan_out
            w = torch.randn(K, N, device="cuda", dtype=dt)
            for M in (int(t) for t in args.tokens.split(",")):
                x = torch.randn(M, K, device="cuda", dtype=dt)
                out = torch.empty(M, N, device="cuda", dtype=dt)
                ref = x.double() @ w.double()
                gp = registry.gemv_auto_params(M, N, K, gpu.sm_count, dtype=dtype, op_b="N")
                more = {**gp, "SPLITK": min(16, 2 * gp["SPLITK"])}
                other, other_params = without_rows(M, N, K, dtype, gpu)
                calls = {"gemv": lambda: gemmlab.matmul(x, w, out=out, kernel="gemv", **gp),
                         "gemv_2x_split": lambda: gemmlab.matmul(x, w, out=out, kernel="gemv", **more),
                         "other": lambda: gemmlab.matmul(x, w, out=out, kernel=other, **other_params),
                         "torch": lambda: torch.matmul(x, w, out=out)}
                row = dict(dtype=dtype, layer=layer, M=M, N=N, K=K, w_bytes=N * K * w.element_size(), gemv=gp,
                           gemv_2x=more, other_rung=f"{other} {other_params}")
                for name, fn in calls.items():
                    out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = float((out.double() - ref).norm() / ref.norm())
                    public = time_gpu(fn, l2_bytes=L2, reps=20, host=True, budget_s=args.budget_s)
                    back = time_gpu(fn, l2_bytes=L2, reps=20, host=False, budget_s=args.budget_s)
                    row[name] = dict(us=public.ms * 1e3, us_back_to_back=back.ms * 1e3, rel_error=err,
                                     gbs=row["w_bytes"] / back.ms / 1e6)
                for name in calls:
                    row[name]["pct_torch"] = 100 * row["torch"]["us"] / row[name]["us"]
                rows.append(row)
                print(f"{dtype:9} {layer:8} M={M:<3} gemv {gp} " + "  ".join(
                    f"{k}: {row[k]['us']:7.1f} us ({row[k]['us_back_to_back']:7.1f} b2b, {row[k]['gbs']:5.0f} GB/s, "
                    f"{row[k]['pct_torch']:5.1f}% torch, err {row[k]['rel_error']:.1e})" for k in calls)
                    + f"  [other = {row['other_rung']}]", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=gpu.name, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
