"""Where the host time of a repeated gemmlab.matmul call goes: cProfile over
many calls of each case, the top functions by own time.
Usage: python3 benchmarks/experiments/profile_call.py [N]"""

import cProfile
import io
import pstats
import sys
import time

import torch

import gemmlab

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000


def case(name, fn):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(N):
        fn()
    us = (time.perf_counter() - t0) / N * 1e6
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(N):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print(f"===== {name}: {us:.1f} us per call (last plan: {gemmlab.last_plan().describe()})")
    print("\n".join(s.getvalue().splitlines()[6:26]))


t32 = torch.randn(64, 64, device="cuda")
tbf = t32.bfloat16()
case("fp32 64^3", lambda: gemmlab.matmul(t32, t32))
case("bf16 64^3 (wgmma)", lambda: gemmlab.matmul(tbf, tbf))
case("bf16 64^3 x.t()", lambda: gemmlab.matmul(tbf, tbf.t()))
case("fp32 64^3 kernel=vectorized", lambda: gemmlab.matmul(t32, t32, kernel="vectorized"))
