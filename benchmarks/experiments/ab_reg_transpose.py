"""Rung 8's two ways to transpose a tile whose rows run along K (a row-major A, a
column-major B: NN's A, both of NT's operands): one 4-byte cp.async per element
(REG_TRANSPOSE=0) against 16-byte loads through registers stored after the K-step's
math (REG_TRANSPOSE=1).  Same tile, same shapes, the two interleaved over rounds,
through the public call (gemmlab.matmul on PyTorch views, host time included, each
run from an idle GPU) beside torch.matmul (cuBLAS SGEMM, TF32 off) on the same views.

    python3 benchmarks/experiments/ab_reg_transpose.py out.json [--quick]

Reported per case and tile: ms for 0 and 1, % of torch for each, and the relative
error of each against torch's float64 product.
"""

import argparse
import json
import time

import torch

import gemmlab
from gemmlab.api import last_plan, plan
from gemmlab.runtime.compile import precompile
from gemmlab.bench.timing import time_gpu
from gemmlab.runtime.device import gpu_info

from fp32_shape_sweep import operands   # the models suite's views (this folder is on sys.path)

# (label, M, N, K, batch, ops): ops as stored, "T" a transposed view.
SQUARES = [(f"{n}^3 {ops}", n, n, n, 1, ops) for n in (4096, 8192) for ops in ("NN", "NT", "TN", "TT")]
MODELS = [("qkv.fwd M=2048", 2048, 6144, 4096, 1, "NT"), ("o.fwd M=2048", 2048, 4096, 4096, 1, "NT"),
          ("down.fwd M=2048", 2048, 4096, 14336, 1, "NT"), ("o.fwd M=128", 128, 4096, 4096, 1, "NT"),
          ("qkv.dgrad M=2048", 2048, 4096, 6144, 1, "NN"), ("o.dgrad M=128", 128, 4096, 4096, 1, "NN"),
          ("attention.qk S=2048", 2048, 2048, 128, 32, "NT"), ("attention.pv S=2048", 2048, 128, 2048, 32, "NN")]
TILES = {
    "128x256x8": dict(BM=128, BN=256, BK=8, WM=64, WN=64, WNITER=4, TM=8, STAGES=4),
    "256x128x8": dict(BM=256, BN=128, BK=8, WM=64, WN=64, WNITER=4, TM=4, STAGES=3),
    "128x128x16": dict(BM=128, BN=128, BK=16, WM=32, WN=64, WNITER=2, TM=4, STAGES=3),
    "64x128x16": dict(BM=64, BN=128, BK=16, WM=64, WN=32, WNITER=4, TM=4, STAGES=3),
}
ROUNDS = 3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("json")
    p.add_argument("--quick", action="store_true", help="the default tile only")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = gpu_info(0)
    tiles = {"128x256x8": TILES["128x256x8"]} if args.quick else TILES
    cases = SQUARES + MODELS
    items = {(str(q.spec.source_path), q.name_expression)
             for _, M, N, K, batch, ops in cases for tile in tiles.values() for rt in (0, 1)
             for q in [plan("pipelined", M, N, K, op_a=ops[0], op_b=ops[1], batch=batch, arch=gpu.arch,
                            gpu_slug=gpu.slug, sm_count=gpu.sm_count, **tile, REG_TRANSPOSE=rt)]}
    t0 = time.time()
    precompile(sorted(items), gpu.arch)
    print(f"compiled {len(items)} instantiations in {time.time() - t0:.0f} s", flush=True)
    records = []
    for label, M, N, K, batch, ops in cases:
        a, b = operands(M, N, K, batch, ops)
        c = torch.empty(*((batch,) if batch > 1 else ()), M, N, device="cuda")
        ref = torch.matmul(a.double(), b.double())
        timing = dict(l2_bytes=gpu.l2_bytes, reps=5, budget_s=0.2, host=True)
        for tile_name, tile in tiles.items():
            runs = {0: [], 1: []}
            errs = {}
            torch_ms = []
            for _ in range(ROUNDS):
                torch_ms += time_gpu(lambda: torch.matmul(a, b, out=c), **timing).ms_all
                for rt in (0, 1):
                    kw = dict(kernel="pipelined", **tile, REG_TRANSPOSE=rt)
                    if rt not in errs:
                        c.fill_(float("nan"))
                        gemmlab.matmul(a, b, out=c, **kw)
                        errs[rt] = float((c.double() - ref).norm() / ref.norm())
                    runs[rt] += time_gpu(lambda: gemmlab.matmul(a, b, out=c, **kw), **timing).ms_all
            med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
            tms = med(torch_ms)
            rec = dict(case=label, M=M, N=N, K=K, batch=batch, ops=ops, tile=tile_name, torch_ms=tms,
                       plan=last_plan().describe())
            for rt in (0, 1):
                rec[f"ms_{rt}"] = med(runs[rt])
                rec[f"pct_torch_{rt}"] = 100 * tms / rec[f"ms_{rt}"]
                rec[f"rel_err_{rt}"] = errs[rt]
            records.append(rec)
            print(f"{label:22s} {tile_name:10s} torch {tms:8.3f} ms | cp.async {rec['pct_torch_0']:6.1f}% "
                  f"| registers {rec['pct_torch_1']:6.1f}% | err {errs[0]:.1e} {errs[1]:.1e} "
                  f"({time.time() - t0:.0f} s)", flush=True)
        del a, b, c, ref
        torch.cuda.empty_cache()
    json.dump({"gpu": gpu.name, "records": records}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
