"""FP32 4096^3, NN then NT (x @ W.t()): rung 8 at its default tile (REG_TRANSPOSE as
given, default: both ways) and cuBLAS SGEMM (torch.matmul, TF32 off), each launched
once, for Nsight Compute to compare, e.g.

    ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \\
        --csv --page details python3 benchmarks/experiments/profile_nt.py [--reg-transpose 0,1]
"""

import argparse

import torch

import gemmlab

p = argparse.ArgumentParser()
p.add_argument("--reg-transpose", default="0,1", help="comma list of REG_TRANSPOSE values")
p.add_argument("--n", type=int, default=4096)
args = p.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
n = args.n
a = torch.rand(n, n, device="cuda") * 2 - 1
b = torch.rand(n, n, device="cuda") * 2 - 1
c = torch.empty(n, n, device="cuda")
for name, bb in (("NN", b), ("NT", b.t())):
    for rt in map(int, args.reg_transpose.split(",")):
        gemmlab.matmul(a, bb, out=c, kernel="pipelined", REG_TRANSPOSE=rt)
        torch.cuda.synchronize()
        print(name, gemmlab.last_plan().describe(), flush=True)
    torch.matmul(a, bb, out=c)
    torch.cuda.synchronize()
    print(name, "torch.matmul", flush=True)
