"""A/B timing of experimental kernel variants beside the shipped rungs, in one run.

    python3 scripts/ab_variants.py benchmarks/experiments/ab_coalesced_smem.cu 4096 [out.json]

The experiment file names what to compare in comment lines:

    // ab-variant: <name expression> block=<X>[x<Y>] tile=<rows>x<cols> [smem=<dynamic bytes>]
    // ab-shipped: <kernel>[:PARAM=V;PARAM=V]

Each variant is compiled through gemmlab's runtime, checked against FP64 and
timed by the harness (L2 flushed, median), in two interleaved passes with the
shipped kernels and cuBLAS; the spread between passes is the noise.
"""

import json
import re
import sys
from pathlib import Path

import cupy as cp
import numpy as np

import gemmlab
from gemmlab.api import _make_current, plan, run_plan
from gemmlab.bench.timing import time_gpu
from gemmlab.runtime.compile import compile_module
from gemmlab.runtime.device import gpu_info
from gemmlab.runtime.launch import allow_dynamic_smem, launch
from gemmlab.verify import compare, random_matrix, reference

src = Path(sys.argv[1])
VARIANTS = {}   # name expression -> (block, output tile (rows, cols))
SHIPPED = []
for line in src.read_text().splitlines():
    m = re.match(r"//\s*ab-variant:\s*(.+?)\s+block=([\dx]+)\s+tile=(\d+)x(\d+)(?:\s+smem=(\d+))?", line)
    if m:
        block = tuple(int(v) for v in m.group(2).split("x")) + (1, 1)
        VARIANTS[m.group(1)] = (block[:3], (int(m.group(3)), int(m.group(4))), int(m.group(5) or 0))
    m = re.match(r"//\s*ab-shipped:\s*(\w+)(?::(\S+))?", line)
    if m:
        params = dict(kv.split("=") for kv in filter(None, (m.group(2) or "").split(";")))
        SHIPPED.append((m.group(1), {k: int(v) for k, v in params.items()}))

n = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
out_path = sys.argv[3] if len(sys.argv) > 3 else None
gpu = gpu_info(0)
_make_current(0)
module = compile_module(src, tuple(VARIANTS), gpu.arch)
rng = np.random.default_rng(1)
a = cp.asarray(random_matrix(n, n, "uniform", rng))
b = cp.asarray(random_matrix(n, n, "uniform", rng))
c = cp.empty((n, n), np.float32)
ref = reference(a, b)
stream = cp.cuda.get_current_stream().ptr
args = (np.int32(n), np.int32(n), np.int32(n), np.float32(1), a.data.ptr, np.int32(n), b.data.ptr,
        np.int32(n), np.float32(0), c.data.ptr, np.int32(n))


def variant_fn(name):
    kernel = module.kernel(name)
    block, (tm, tn), smem = VARIANTS[name]
    allow_dynamic_smem(kernel, smem, gpu.ordinal)
    grid = (-(-n // tm) * -(-n // tn), 1, 1)
    return lambda: launch(kernel, grid, block, smem, stream, *args)


def shipped_fn(kname, params):
    p = plan(kname, n, n, n, **params)
    return lambda: run_plan(p, gpu, stream, a.data.ptr, n, b.data.ptr, n, c.data.ptr, n, 1.0, 0.0)


rows = []
order = [("cublas", lambda: cp.matmul(a, b, out=c))]
for kname, params in SHIPPED:
    order.append((plan(kname, n, n, n, **params).describe(), shipped_fn(kname, params)))
for name in VARIANTS:
    order.append((name, variant_fn(name)))
for rep in range(2):          # two passes: the spread between them is the noise
    for name, fn in order:
        t = time_gpu(fn, l2_bytes=gpu.l2_bytes, reps=10, budget_s=1.5)
        c.fill(np.nan)
        fn()
        err = compare(c, ref).rel_fro
        tf = 2 * n ** 3 / (t.ms * 1e-3) / 1e12
        rows.append({"pass": rep, "kernel": name, "n": n, "ms": t.ms, "tflops": tf, "rel_error": err, "gpu": gpu.name})
        print(f"pass {rep} {name:48s} {t.ms:8.3f} ms {tf:6.2f} TFLOPS err {err:.1e}", flush=True)
cub = np.median([r["ms"] for r in rows if r["kernel"] == "cublas"])
print("\nmedian over passes, % of cuBLAS:")
for name, _ in order:
    ms = np.median([r["ms"] for r in rows if r["kernel"] == name])
    print(f"  {name:48s} {ms:8.3f} ms  {100 * cub / ms:5.1f}%")
if out_path:
    Path(out_path).write_text(json.dumps(rows, indent=1))
