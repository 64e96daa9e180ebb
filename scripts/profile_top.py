"""Run cuBLAS SGEMM and gemmlab kernels once each at one shape, for Nsight Compute.

    ncu --set full --kernel-name-base demangled -k regex:gemm python3 scripts/profile_top.py 4096 warptile pipelined:STAGES=2
    python3 scripts/profile_top.py 4096 --ladder      # every rung of the FP32 ladder (scripts/profile_ladder.sh)

Kernels named without tile parameters run the configuration gemmlab would pick
(the tuned one for this GPU, if any).
"""

import sys

import cupy as cp
import numpy as np

import gemmlab
from gemmlab.bench.suites import parse_size
from gemmlab.cli import _kernel_entries
from gemmlab.kernels import registry
from gemmlab.verify import random_matrix

M, N, K = parse_size(sys.argv[1] if len(sys.argv) > 1 else "4096")
args = sys.argv[2:]
if args == ["--ladder"]:
    entries = [(s.name, {}) for s in registry.ladder("simt")]
else:
    entries = _kernel_entries(args, lambda: [("warptile", {}), ("pipelined", {})])
rng = np.random.default_rng(0)
a = cp.asarray(random_matrix(M, K, "uniform", rng))
b = cp.asarray(random_matrix(K, N, "uniform", rng))
c = cp.empty((M, N), np.float32)
cp.matmul(a, b, out=c)
for name, params in entries:
    gemmlab.matmul(a, b, out=c, kernel=name, **params)
cp.cuda.get_current_stream().synchronize()
print("profiled cuBLAS and", entries, "at", (M, N, K))
