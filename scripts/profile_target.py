"""Run each rung of the FP32 ladder once at its default configuration, for Nsight Compute.

    ncu --clock-control none --kernel-name-base demangled -k regex:gemmlab:: --metrics ... python3 scripts/profile_target.py 4096
"""

import sys

import cupy as cp
import numpy as np

import gemmlab
from gemmlab.kernels import registry
from gemmlab.verify import random_matrix

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
rng = np.random.default_rng(0)
a = cp.asarray(random_matrix(n, n, "uniform", rng))
b = cp.asarray(random_matrix(n, n, "uniform", rng))
c = cp.empty((n, n), np.float32)
for spec in registry.ladder("simt"):
    gemmlab.matmul(a, b, out=c, kernel=spec.name)
cp.cuda.get_current_stream().synchronize()
print("profiled", [s.name for s in registry.ladder("simt")], "at", n)
