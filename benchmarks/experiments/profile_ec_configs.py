"""One fp16_ec call per ec_wgmma configuration (four sets 128 x 96; FOLD 128 x 96 and
128 x 128) between cudaProfilerStart and cudaProfilerStop, for Nsight Compute:

    ncu --profile-from-start off --clock-control none --metrics ... \\
        python3 benchmarks/experiments/profile_ec_configs.py [N or MxNxK]
"""
import sys

import torch

import gemmlab

sh = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "4096").split("x")]
m, n, k = sh if len(sh) == 3 else sh * 3
a = torch.rand(m, k, device="cuda") * 2 - 1
b = torch.rand(k, n, device="cuda") * 2 - 1
c = torch.empty(m, n, device="cuda")
configs = [dict(BN=96, FOLD=0, STAGES=4), dict(BN=96, FOLD=1, STAGES=4), dict(BN=128, FOLD=1, STAGES=3)]
for p in configs:
    gemmlab.matmul(a, b, out=c, precision="fp16_ec", kernel="ec_wgmma", **p)
torch.cuda.synchronize()
for p in configs:
    torch.cuda.profiler.start()
    gemmlab.matmul(a, b, out=c, precision="fp16_ec", kernel="ec_wgmma", **p)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(p, gemmlab.last_plan().describe(), flush=True)
