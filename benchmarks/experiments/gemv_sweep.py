"""gemv against torch.matmul and against the rung auto takes without gemv, on a
Llama-3-8B-sized model's linear layers, for a few tokens: where GEMV_MAX_M and
GEMV_ROWS_MAX_M should end for each dtype.

--op-b T (default): x @ W.t() (W stored N x K: op(B) column-major), gemv with MT
sized as auto sizes it (kernel="gemv", MT named).  --op-b N: dY @ W (W stored
out x in: op(B) row-major, gemv's row path), gemv with the parameters auto gives
it (gemv.auto_params: MT and the split of K) and with twice that split (or 2
where auto does not split).  Beside them, through the public call (gemmlab.matmul
on torch tensors, out= given): the rung auto runs where it does not take gemv
(planned with that layout's limit set to 0 for the dtype, then named with its
parameters), and torch.matmul.  Each is timed twice with
gemmlab.bench.timing.time_gpu after an L2 flush: ``host=True`` (each call from an
idle GPU, host time included: what decode_gemv.py reports) and ``host=False``
(calls back to back: the GPU's time where it exceeds the host's).  Bandwidth is
W's bytes over the back-to-back time.

With --op-b N, --lanes 32,8,4 --splits 1,2,4 also times the row path named with each
LANES (lanes along a row of W: fewer make narrower blocks, so more of them) and SPLITK.

Usage: python3 benchmarks/experiments/gemv_sweep.py [--op-b T|N] [--json FILE] [--dtypes bf16,fp16,fp32]
       [--tokens 1,2,4,8,16] [--layers qkv,...] [--budget-s 0.3] [--lanes 32,8,4 --splits 1,2,4]"""

import argparse
import json

import torch

import gemmlab
from gemmlab.bench.timing import time_gpu
from gemmlab.kernels import registry
from gemmlab.runtime.device import gpu_info

L2 = 50 << 20
# (in features, out features) of each linear layer.
LAYERS = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096),
          "lm_head": (4096, 128256)}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def auto_without(table, op_b, M, N, K, dtype, gpu):
    """(kernel, parameters) auto picks for this product (op(B) stored ``op_b``) were
    gemv's rule ``table`` (registry.GEMV_MAX_M, GEMV_ROWS_MAX_M) not there."""
    saved = dict(table)
    table[dtype] = 0
    try:
        p = gemmlab.plan("auto", M, N, K, dtype=dtype, out_dtype=dtype, op_b=op_b, arch=gpu.arch,
                         gpu_slug=gpu.slug, sm_count=gpu.sm_count)
    finally:
        table.update(saved)
    return p.spec.name, dict(p.params)


def time_calls(calls, row, out, ref, budget_s):
    """Each call's error against ``ref`` (out poisoned first), its time per call from an
    idle GPU (host included) and back to back, W's GB/s back to back, and % of torch's
    per-call time, into ``row`` by name."""
    for name, fn in calls.items():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = float((out.double() - ref).norm() / ref.norm())
        public = time_gpu(fn, l2_bytes=L2, reps=20, host=True, budget_s=budget_s)
        back = time_gpu(fn, l2_bytes=L2, reps=20, host=False, budget_s=budget_s)
        row[name] = dict(us=public.ms * 1e3, us_back_to_back=back.ms * 1e3, rel_error=err,
                         gbs=row["w_bytes"] / back.ms / 1e6)
    for name in calls:
        row[name]["pct_torch"] = 100 * row["torch"]["us"] / row[name]["us"]


def report(head, row, calls):
    print(head + "  ".join(
        f"{k}: {row[k]['us']:7.1f} us ({row[k]['us_back_to_back']:7.1f} b2b, {row[k]['gbs']:5.0f} GB/s, "
        f"{row[k]['pct_torch']:5.1f}% torch, err {row[k]['rel_error']:.1e})" for k in calls)
        + f"  [other = {row['other_rung']}]", flush=True)


def cases(op_b, M, N, K, dt, dtype, gpu, grid=()):
    """(W, op(B) as the model hands it, the calls to time, the row's extra fields) of one product."""
    if op_b == "T":    # x @ W.t(): W is N x K
        w = torch.randn(N, K, device="cuda", dtype=dt)
        wt = w.t()
        mt = registry.get("gemv").sized_params(M, N, K, gpu.sm_count)["MT"]
        gemv = {"gemv": dict(MT=mt)}
        extra = dict(MT=mt)
        table = registry.GEMV_MAX_M
    else:              # dY @ W: W is K x N
        wt = torch.randn(K, N, device="cuda", dtype=dt)
        gp = registry.gemv_auto_params(M, N, K, gpu.sm_count, dtype=dtype, op_b="N")
        more = {**gp, "SPLITK": min(16, 2 * gp["SPLITK"])}
        gemv = {"gemv": gp, "gemv_2x_split": more}
        for lanes, split in grid:   # --lanes x --splits: named row-path configurations
            if lanes == 32 or gp["MT"] <= 4:
                gemv[f"gemv_l{lanes}_s{split}"] = {**gp, "LANES": lanes, "SPLITK": split}
        extra = dict(gemv=gp, gemv_2x=more)
        table = registry.GEMV_ROWS_MAX_M
    x = torch.randn(M, K, device="cuda", dtype=dt)
    out = torch.empty(M, N, device="cuda", dtype=dt)
    other, other_params = auto_without(table, op_b, M, N, K, dtype, gpu)
    calls = {name: (lambda p=p: gemmlab.matmul(x, wt, out=out, kernel="gemv", **p)) for name, p in gemv.items()}
    calls["other"] = lambda: gemmlab.matmul(x, wt, out=out, kernel=other, **other_params)
    calls["torch"] = lambda: torch.matmul(x, wt, out=out)
    return x, wt, out, calls, dict(extra, other_rung=f"{other} {other_params}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op-b", choices=("T", "N"), default="T",
                    help="T: x @ W.t() (gemv's column path); N: dY @ W (its row path)")
    ap.add_argument("--json")
    ap.add_argument("--dtypes", default="bf16,fp16,fp32")
    ap.add_argument("--tokens", default="1,2,4,8,16")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--budget-s", type=float, default=0.3, help="time_gpu's budget per figure")
    ap.add_argument("--lanes", default="", help="--op-b N: also time gemv with each of these LANES ...")
    ap.add_argument("--splits", default="1", help="... and each of these SPLITK")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = gpu_info()
    rows = []
    for dname in args.dtypes.split(","):
        dt = DTYPES[dname]
        dtype = str(dt).split(".")[-1]
        for layer in args.layers.split(","):
            fan_in, fan_out = LAYERS[layer]
            # x @ W.t(): K = in, N = out; dY @ W: K = out, N = in.
            K, N = (fan_in, fan_out) if args.op_b == "T" else (fan_out, fan_in)
            for M in (int(t) for t in args.tokens.split(",")):
                grid = [(int(lanes), int(split)) for lanes in args.lanes.split(",") if lanes
                        for split in args.splits.split(",")]
                x, wt, out, calls, extra = cases(args.op_b, M, N, K, dt, dtype, gpu, grid)
                ref = x.double() @ wt.double()
                row = dict(dtype=dtype, layer=layer, M=M, N=N, K=K, w_bytes=N * K * wt.element_size(), **extra)
                time_calls(calls, row, out, ref, args.budget_s)
                rows.append(row)
                report(f"{dtype:9} {layer:8} M={M:<3} {extra.get('MT', extra.get('gemv'))} ", row, calls)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(gpu=gpu.name, op_b=args.op_b, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
