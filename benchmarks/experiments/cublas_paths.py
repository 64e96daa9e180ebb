"""cuBLAS through CuPy and through PyTorch on the same float32 memory: cupy.matmul and
torch.matmul (TF32 off), GPU time back to back, for shapes and layouts of the models
suite.  The tuner reports its winners against one of them and the models suite against
torch.matmul, so where the two calls pick different cuBLAS kernels the figures differ.
Usage: python3 benchmarks/experiments/cublas_paths.py [--json FILE]"""

import argparse
import json

import cupy as cp
import torch

from gemmlab.bench.timing import time_gpu

L2 = 50 << 20
CASES = [(128, 6144, 4096, "NT"), (128, 4096, 4096, "NT"), (128, 4096, 4096, "NN"), (128, 28672, 4096, "NT"),
         (2048, 4096, 4096, "NT"), (2048, 4096, 4096, "NN"), (2048, 6144, 4096, "NT"), (4096, 4096, 4096, "NN"),
         (4096, 4096, 4096, "NT"), (8192, 4096, 4096, "NT")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for M, N, K, ops in CASES:
        a = cp.random.random((M, K) if ops[0] == "N" else (K, M), dtype=cp.float32)
        b = cp.random.random((K, N) if ops[1] == "N" else (N, K), dtype=cp.float32)
        a, b = (a if ops[0] == "N" else a.T), (b if ops[1] == "N" else b.T)
        c = cp.empty((M, N), cp.float32)
        ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (a, b, c))
        t_cp = time_gpu(lambda: cp.matmul(a, b, out=c), l2_bytes=L2, reps=20, budget_s=1.0).ms
        t_pt = time_gpu(lambda: torch.matmul(ta, tb, out=tc), l2_bytes=L2, reps=20, budget_s=1.0).ms
        rows.append({"M": M, "N": N, "K": K, "ops": ops, "cupy_ms": t_cp, "torch_ms": t_pt})
        print(f"{M}x{N}x{K} {ops}: cupy.matmul {t_cp * 1e3:9.1f} us   torch.matmul {t_pt * 1e3:9.1f} us   "
              f"cupy/torch {t_cp / t_pt:5.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
