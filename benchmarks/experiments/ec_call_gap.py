"""Where an error-corrected call's time goes beyond its kernels' GPU time: each
precision timed (a) from an idle GPU, one call between two events (the public
figure's method, without the L2 flush), and (b) back to back, 20 calls between two
events (host time hidden behind the GPU's work).  Compare (b) with the sum of the
call's kernels under Nsight Compute (profile_ec_call.py).
Usage: python3 benchmarks/experiments/ec_call_gap.py [N] [precisions]"""

import statistics
import sys

import torch

import gemmlab

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
precisions = sys.argv[2].split(",") if len(sys.argv) > 2 else ["fp16_ec", "fp32_tc"]
a = torch.rand(n, n, device="cuda") * 2 - 1
b = torch.rand(n, n, device="cuda") * 2 - 1
c = torch.empty(n, n, device="cuda")
torch.backends.cuda.matmul.allow_tf32 = False


def timed(fn, calls):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    e0.record()
    for _ in range(calls):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / calls


calls = {p: (lambda p=p: gemmlab.matmul(a, b, out=c, precision=p)) for p in precisions}
calls["torch.matmul (SGEMM)"] = lambda: torch.matmul(a, b, out=c)
for name, fn in calls.items():
    for _ in range(3):
        fn()
    idle = statistics.median(timed(fn, 1) for _ in range(15))
    back = statistics.median(timed(fn, 20) for _ in range(3))
    print(f"{name:22s} from idle {idle:8.3f} ms   back to back {back:8.3f} ms per call", flush=True)
