"""The kernels of one gemmlab.matmul call per error-corrected precision, for Nsight
Compute: warm-up calls first (compilation, workspaces), then one call of each
precision between cudaProfilerStart and cudaProfilerStop, so that
`ncu --profile-from-start off --metrics gpu__time_duration.sum` lists the GPU
time of every kernel the call launched (each alone: ncu serialises them).
Usage: ncu --profile-from-start off ... python3 benchmarks/experiments/profile_ec_call.py [N or MxNxK] [precisions]"""

import sys

import torch

import gemmlab

shape = [int(x) for x in sys.argv[1].split("x")] if len(sys.argv) > 1 else [8192]
m, n, k = shape if len(shape) == 3 else shape * 3
precisions = sys.argv[2].split(",") if len(sys.argv) > 2 else ["fp16_ec", "fp32_tc"]
a = torch.rand(m, k, device="cuda") * 2 - 1
b = torch.rand(k, n, device="cuda") * 2 - 1
c = torch.empty(m, n, device="cuda")
for p in precisions:
    for _ in range(2):
        gemmlab.matmul(a, b, out=c, precision=p)
torch.cuda.synchronize()
for p in precisions:
    torch.cuda.profiler.start()
    gemmlab.matmul(a, b, out=c, precision=p)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(p, gemmlab.last_plan().describe(), flush=True)
torch.cuda.profiler.start()
torch.matmul(a, b, out=c)   # cuBLAS SGEMM (TF32 off: PyTorch's default for matmul)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
