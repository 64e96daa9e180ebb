"""Rung 8's block tiles and warp tilings on the shapes suite's float32 products, by layout, on a
GPU: each product whose auto plan is rung 8 (from MIN_GFLOP, with at least 132 tiles of 128 x 128)
at a list of forced configurations (SPLITK=1), kernel time from CUPTI (torch.profiler) with the
L2 flushed before each call, beside cuBLAS (TF32 off) and kernel="auto", in one process.  Every
configuration's output is checked against FP64 first (NaN-poisoned).

    python3 scripts/ab_fp32_tiles.py OUT.json [MIN_GFLOP] [MAX_PRODUCTS] [--ops TT]

``--ops`` lays every product out anew in one layout (op(A), op(B) of "NN", "NT", "TN", "TT"; each
size once): for the layouts the suite does not make, such as `a.T @ b.T`.

The record (benchmarks/results/nvidia-h200/ab-fp32-tiles-2026-12-01.json) set pipelined's
LAYOUT_TILING, its 128 x 128 tile and the cost model's layout shares (benchmarks/NOTES.md).
"""

import argparse
import dataclasses
import json
import time

import torch

import gemmlab
from gemmlab.core.planner import plan
from gemmlab.runtime.compile import precompile
from gemmlab.tools.bench import shapes
from gemmlab.tools.bench.suites import bench_gpu
from kernel_times import kernel_times  # scripts/kernel_times.py: CUPTI, L2 flushed

W = dict(BM=128, BN=256, BK=8, WM=64, WN=64)
Q = dict(BM=128, BN=128, BK=16, WM=32, WN=64, WNITER=2, TM=8, REG_TRANSPOSE=1)
CONFIGS = {
    "t4x8s4r0": dict(W, WNITER=4, TM=8, STAGES=4, REG_TRANSPOSE=0),
    "t4x8s2r1": dict(W, WNITER=4, TM=8, STAGES=2, REG_TRANSPOSE=1),
    "t4x8s3r1": dict(W, WNITER=4, TM=8, STAGES=3, REG_TRANSPOSE=1),
    "t2x4s2r1": dict(W, WNITER=2, TM=4, STAGES=2, REG_TRANSPOSE=1),
    "t2x4s2r0": dict(W, WNITER=2, TM=4, STAGES=2, REG_TRANSPOSE=0),
    "tile128": dict(BM=128, BN=128, BK=8, WM=64, WN=32, WNITER=4, TM=4, STAGES=4, REG_TRANSPOSE=1),
    "q128s2": dict(Q, STAGES=2),
    "q128s3": dict(Q, STAGES=3),
    "q128s4": dict(Q, STAGES=4),
    "q128x8s4": dict(Q, BK=8, STAGES=4),
    "r256x128": dict(BM=256, BN=128, BK=8, WM=64, WN=64, WNITER=2, TM=4, STAGES=2, REG_TRANSPOSE=1),
}


def _plan(p, gpu, kernel, **params):
    """The float32 plan of product ``p`` in its layout on ``gpu``."""
    return plan(
        kernel, p.M, p.N, p.K, dtype="float32", op_a=p.ops[0], op_b=p.ops[1], batch=p.batch,
        arch=gpu.arch, sm_count=gpu.sm_count, **params,
    )  # fmt: skip


def _operands(p, gen):
    """op(A) and op(B) of the product in its layout p.ops, stored as that layout says (a "T" operand
    is the transpose of a row-major tensor), uniform in [-0.5, 0.5)."""

    def one(rows, cols, op):
        lead = (p.batch,) if p.batch > 1 else ()
        shape = lead + ((cols, rows) if op == "T" else (rows, cols))
        x = torch.rand(shape, device="cuda", dtype=torch.float32, generator=gen).sub_(0.5)
        return x.transpose(-1, -2) if op == "T" else x

    return one(p.M, p.K, p.ops[0]), one(p.K, p.N, p.ops[1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the JSON record to write")
    ap.add_argument("min_gflop", nargs="?", type=float, default=2.0, help="smallest product timed, GFLOP")
    ap.add_argument("most", nargs="?", type=int, default=400, help="at most this many products")
    ap.add_argument("--ops", choices=("NN", "NT", "TN", "TT"), help="every product in this layout instead")
    args = ap.parse_args(argv)
    gpu = bench_gpu()
    out_path, min_gflop, most = args.out, args.min_gflop, args.most
    prods, sizes = [], set()
    for p in shapes.generate():
        if args.ops:  # the product's sizes in the layout asked for, each size once
            if (p.batch, p.M, p.N, p.K) in sizes:
                continue
            sizes.add((p.batch, p.M, p.N, p.K))
            p = dataclasses.replace(p, ops=args.ops)
        gf = 2 * p.M * p.N * p.K * p.batch / 1e9
        if gf < min_gflop or p.M * p.N * p.batch < 132 * 128 * 128:
            continue
        try:
            if _plan(p, gpu, "auto").spec.name == "pipelined":
                prods.append(p)
        except ValueError:
            continue
    prods = prods[:most]
    print(len(prods), "products", flush=True)
    items = set()
    for p in prods:
        for name, cfg in CONFIGS.items():
            try:
                pl = _plan(p, gpu, "pipelined", SPLITK=1, **cfg)
                items.add((str(pl.spec.source_path), pl.name_expression))
            except ValueError as exc:
                print("plan", name, repr(exc)[:100])
    t0 = time.time()
    print("compiled", precompile(sorted(items), gpu.arch, log=None), round(time.time() - t0), "s", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = torch.empty(64 << 20, device="cuda", dtype=torch.float32)
    for p in prods:
        a, b = _operands(p, gen)
        c = torch.empty(p.out_shape, device="cuda", dtype=torch.float32)
        ref = torch.matmul(a.double(), b.double())
        rn = ref.norm()
        gf = 2 * p.M * p.N * p.K * p.batch / 1e9
        n = 3 if gf > 200 else 5

        def t(fn):  # µs of GPU time a call, every kernel it launches (the flush's excluded)
            return sum(kernel_times(fn, flush, runs=n).values())

        row = {
            "name": p.label,
            "kind": p.kind,
            "ops": p.ops,
            "M": p.M,
            "N": p.N,
            "K": p.K,
            "batch": p.batch,
            "gflop": gf,
            "torch": t(lambda: torch.matmul(a, b, out=c)),
        }
        gemmlab.matmul(a, b, out=c)
        row["auto_plan"] = gemmlab.last_plan().describe()
        row["auto"] = t(lambda: gemmlab.matmul(a, b, out=c))
        row["cfg"] = {}
        for name, cfg in CONFIGS.items():
            kw = dict(kernel="pipelined", SPLITK=1, **cfg)
            try:
                c.fill_(float("nan"))
                gemmlab.matmul(a, b, out=c, **kw)
                err = float((c.double() - ref).norm() / rn)
                if not err < 1e-5:
                    row["cfg"][name] = f"bad {err}"
                    continue
                row["cfg"][name] = t(lambda: gemmlab.matmul(a, b, out=c, **kw))
            except Exception as exc:  # noqa
                row["cfg"][name] = repr(exc)[:80]
        good = {k: v for k, v in row["cfg"].items() if isinstance(v, float)}
        best = min(good, key=good.get)
        rows.append(row)
        print(
            f"{row['name'][:40]:40} {p.ops} torch {row['torch']:8.1f} auto {row['torch'] / row['auto'] * 100:5.1f}% "
            + " ".join(f"{k}:{row['torch'] / v * 100:5.1f}" for k, v in good.items())
            + f" best {best}",
            flush=True,
        )
        a = b = c = ref = None  # freed before the next product's operands
        json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
