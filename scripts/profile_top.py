"""Run cuBLAS SGEMM and gemmlab kernels once each at one shape, for Nsight Compute.

    ncu --set full --kernel-name-base demangled -k regex:gemm python3 scripts/profile_top.py 4096 warptile pipelined:STAGES=2
    python3 scripts/profile_top.py 4096 --ladder      # every rung of the FP32 ladder (scripts/profile_ladder.sh)
    python3 scripts/profile_top.py 4096 --tensor bf16 # every tensor-core rung (scripts/profile_tensor.sh)
    python3 scripts/profile_top.py 4096 --ec          # the error-corrected rungs, fp16_ec

Kernels named without tile parameters run the configuration gemmlab would pick
(the tuned one for this GPU, if any).
"""

import sys

import cupy as cp
import numpy as np

import gemmlab
from gemmlab.tools.bench.suites import parse_size
from gemmlab.tools.cli import _kernel_entries
from gemmlab.kernels import registry
from gemmlab.tools.verify import random_matrix

if sys.argv[1:2] in (["-h"], ["--help"]):
    print(__doc__)
    sys.exit(0)
M, N, K = parse_size(sys.argv[1] if len(sys.argv) > 1 else "4096")
args = sys.argv[2:]
if args[:1] == ["--tensor"] or args == ["--ec"]:
    # The tensor-core ladder in one dtype (PyTorch tensors: CuPy has no bfloat16), or
    # the error-corrected rungs on float32 inputs; each kernel once, at its defaults.
    import torch

    ec = args == ["--ec"]
    dtype = "float32" if ec else {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32"}[args[1]]
    g = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.rand(M, K, device="cuda", generator=g) * 2 - 1).to(getattr(torch, dtype))
    b = (torch.rand(K, N, device="cuda", generator=g) * 2 - 1).to(getattr(torch, dtype))
    family = "ec" if ec else "tensor"
    precision = "fp16_ec" if ec else ("tf32" if args[1:] == ["tf32"] else None)
    for spec in registry.ladder(family):
        from gemmlab.runtime.device import gpu_info

        if not spec.builds_for(gpu_info(0).arch):
            continue
        gemmlab.matmul(a, b, kernel=spec.name, precision=precision)
    torch.cuda.synchronize()
    print("profiled the", family, "rungs", dtype, precision or "", "at", (M, N, K))
    sys.exit(0)
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
