"""Short-K products (attention's Q @ K^T at K = 128, a 128-token weight gradient) and 4096^3 on
each ec_wgmma configuration (four sets 128 x 96; FOLD 128 x 96, 128 x 128 with 3 or 2 stages),
public fp32_tc calls beside cuBLAS SGEMM, interleaved (bench.timing.time_rounds: 4 rounds, the
order rotating, each turn 3 runs after an L2 flush from an idle GPU).

    python3 benchmarks/experiments/ec_short_k.py
"""
import numpy as np
import torch

import gemmlab
from gemmlab.bench.timing import time_rounds
from gemmlab.runtime.device import gpu_info

g = gpu_info(0)
CFG = {"four-set 96 S4": dict(BN=96, FOLD=0, STAGES=4), "FOLD 96 S4": dict(BN=96, FOLD=1, STAGES=4),
       "FOLD 128 S3": dict(BN=128, FOLD=1, STAGES=3), "FOLD 128 S2": dict(BN=128, FOLD=1, STAGES=2)}
cases = {"qk BH32 S2048": lambda: (torch.rand(32, 2048, 128, device="cuda"),
                                   torch.rand(32, 2048, 128, device="cuda").transpose(1, 2)),
         "wgrad 6144x4096x128": lambda: (torch.rand(128, 6144, device="cuda").t(), torch.rand(128, 4096, device="cuda")),
         "4096^3": lambda: (torch.rand(4096, 4096, device="cuda"), torch.rand(4096, 4096, device="cuda"))}
for name, make in cases.items():
    a, b = make()
    c = torch.matmul(a, b)
    calls = {"SGEMM": lambda: torch.matmul(a, b, out=c)}
    for k, p in CFG.items():
        calls[k] = lambda p=p: gemmlab.matmul(a, b, out=c, precision="fp32_tc", kernel="ec_wgmma", **p)
    t = time_rounds(calls, l2_bytes=g.l2_bytes, rounds=4)
    sg = t["SGEMM"].ms
    print(name, "  ".join(f"{k}: {v.ms:.3f} ms ({sg / v.ms * 100:.0f}%)" for k, v in t.items()), flush=True)
