"""A/B, on a GPU: odd-alignment and odd-batch 16-bit products, auto (staging where the model says)
against the fallback forced (mma_pipelined at its sized tile) and torch.matmul, one run.

    python3 scripts/ab_staging.py OUT.json BUDGET_S
"""
import statistics
import sys
import time

import torch
import gemmlab
from gemmlab.bench import models, report, shapes
from gemmlab.bench.timing import time_rounds
from gemmlab.kernels.tensor import mma_pipelined
from gemmlab.runtime.device import gpu_info

gpu = gpu_info(0)
prods = shapes.select(kinds=["odd_align", "batched_odd"])
recs, t0 = [], time.time()
gen = torch.Generator(device="cuda").manual_seed(0)
for pr in prods:
    if time.time() - t0 > float(sys.argv[2]):
        break
    make = lambda s: torch.rand(s, device="cuda", dtype=torch.bfloat16, generator=gen).mul_(2).sub_(1)
    a, b = pr.operands(make)
    c = torch.empty(pr.out_shape, device="cuda", dtype=torch.bfloat16)
    sample = models._Sample(a, b)   # FP64 on a sample of rows and columns; inf where not finite
    gemmlab.matmul(a, b, out=c)
    p = gemmlab.last_plan()
    err = {"auto": sample.error(c)}
    fb = mma_pipelined.sized_params(pr.M, pr.N, pr.K, gpu.sm_count, pr.batch)
    gemmlab.matmul(a, b, out=c, kernel="mma_pipelined", **fb)
    pf = gemmlab.last_plan()
    err["fallback"] = sample.error(c)
    calls = {"torch": lambda: torch.matmul(a, b, out=c), "auto": lambda: gemmlab.matmul(a, b, out=c),
             "fallback": lambda: gemmlab.matmul(a, b, out=c, kernel="mma_pipelined", **fb)}
    t = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=3, reps=3, budget_s=0.05)
    r = {"product": pr.label, "kind": pr.kind, "shape": [pr.batch, pr.M, pr.N, pr.K], "ops": pr.ops,
         "auto_plan": p.describe(), "fallback_plan": pf.describe(), "errors": err,
         **{k: v.ms for k, v in t.items()}}
    recs.append(r)
    print(f"{pr.label:48s} {pr.kind:11s} torch {r['torch']*1e3:8.1f} us  auto {100*r['torch']/r['auto']:6.1f}% "
          f"[{p.spec.name}{'+copy' if p.problem.stage else ''}]  fallback {100*r['torch']/r['fallback']:6.1f}%", flush=True)
gm = statistics.geometric_mean
for kind in ("odd_align", "batched_odd"):
    rs = [r for r in recs if r["kind"] == kind]
    if rs:
        print(f"{kind}: auto {gm([100*r['torch']/r['auto'] for r in rs]):.1f}%  fallback "
              f"{gm([100*r['torch']/r['fallback'] for r in rs]):.1f}% of torch over {len(rs)}")
report.write_json(recs, sys.argv[1])
