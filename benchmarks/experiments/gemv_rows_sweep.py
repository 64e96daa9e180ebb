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
from gemmlab.kernels import registry
from gemmlab.runtime.device import gpu_info
# LAYERS: (in features, out features); dY is M x out, W out x in, dY @ W is M x in.
from gemv_sweep import DTYPES, LAYERS, auto_without, report, time_calls


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
                other, other_params = auto_without(registry.GEMV_ROWS_MAX_M, "N", M, N, K, dtype, gpu)
                calls = {"gemv": lambda: gemmlab.matmul(x, w, out=out, kernel="gemv", **gp),
                         "gemv_2x_split": lambda: gemmlab.matmul(x, w, out=out, kernel="gemv", **more),
                         "other": lambda: gemmlab.matmul(x, w, out=out, kernel=other, **other_params),
                         "torch": lambda: torch.matmul(x, w, out=out)}
                row = dict(dtype=dtype, layer=layer, M=M, N=N, K=K, w_bytes=N * K * w.element_size(), gemv=gp,
                           gemv_2x=more, other_rung=f"{other} {other_params}")
                time_calls(calls, row, out, ref, args.budget_s)
                rows.append(row)
                report(f"{dtype:9} {layer:8} M={M:<3} gemv {gp} ", row, calls)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=gpu.name, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
