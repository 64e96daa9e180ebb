"""Short-K products (attention's Q @ K^T at K = 128, a 128-token weight gradient) and 4096^3 on
each ec_wgmma configuration (four sets 128 x 96; FOLD 128 x 96, 128 x 128 with 3 or 2 stages),
public fp32_tc calls beside cuBLAS SGEMM, interleaved: one call of each per round after an L2
flush, from an idle GPU, medians of 12 rounds.

    python3 benchmarks/experiments/ec_short_k.py
"""
import numpy as np
import torch

import gemmlab
from gemmlab.runtime.device import gpu_info
g = gpu_info(0)
flush = torch.empty(2 * g.l2_bytes // 4, device="cuda")
CFG = {"four-set 96 S4": dict(BN=96, FOLD=0, STAGES=4), "FOLD 96 S4": dict(BN=96, FOLD=1, STAGES=4),
       "FOLD 128 S3": dict(BN=128, FOLD=1, STAGES=3), "FOLD 128 S2": dict(BN=128, FOLD=1, STAGES=2)}
cases = {"qk BH32 S2048": lambda: (torch.rand(32, 2048, 128, device="cuda"), torch.rand(32, 2048, 128, device="cuda").transpose(1, 2)),
         "wgrad 6144x4096x128": lambda: (torch.rand(128, 6144, device="cuda").t(), torch.rand(128, 4096, device="cuda")),
         "4096^3": lambda: (torch.rand(4096, 4096, device="cuda"), torch.rand(4096, 4096, device="cuda"))}
for name, make in cases.items():
    a, b = make()
    c = torch.matmul(a, b)
    calls = {"SGEMM": lambda: torch.matmul(a, b, out=c)}
    for k, p in CFG.items():
        calls[k] = lambda p=p: gemmlab.matmul(a, b, out=c, precision="fp32_tc", kernel="ec_wgmma", **p)
    for f in calls.values(): f()
    t = {k: [] for k in calls}; names = list(calls)
    for r in range(12):
        for k in names[r % len(names):] + names[:r % len(names)]:
            flush.fill_(0); torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); calls[k](); e1.record(); e1.synchronize(); t[k].append(e0.elapsed_time(e1))
    sg = np.median(t["SGEMM"])
    print(name, "  ".join(f"{k}: {np.median(v):.3f} ms ({sg / np.median(v) * 100:.0f}%)" for k, v in t.items()), flush=True)
