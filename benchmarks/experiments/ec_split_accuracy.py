"""fp32_tc on ec_wgmma split over K (SPLITK 1, 3, 8) against cuBLAS SGEMM: relative Frobenius
error against FP64 at 256 x 256 x K, on `gemmlab accuracy`'s uniform and log_uniform input
sets (gemmlab.accuracy.make_inputs; they choose FP16 and TF32 parts).  `gemmlab accuracy`
itself runs 256 x 256 on ec_wmma, which auto takes there.

    python3 benchmarks/experiments/ec_split_accuracy.py
"""
import numpy as np
import torch

import gemmlab
from gemmlab.accuracy import make_inputs

torch.backends.cuda.matmul.allow_tf32 = False
rng = np.random.default_rng(0)
for kind in ("uniform", "log_uniform"):
    for K in (4096, 65536, 131072):
        a = torch.from_numpy(make_inputs(kind, 256, K, rng)).cuda()
        b = torch.from_numpy(make_inputs(kind, K, 256, rng)).cuda()
        ref = a.double() @ b.double()

        def err(c):
            return float((c.double() - ref).norm() / ref.norm())
        row = [f"{kind:12} K={K:6}", f"sgemm {err(a @ b):.2e}"]
        for s in (1, 3, 8):
            c = gemmlab.matmul(a, b, precision="fp32_tc", kernel="ec_wgmma", SPLITK=s)
            row.append(f"split{s} {err(c):.2e} [{gemmlab.last_plan().method}]")
        print("  ".join(row), flush=True)
