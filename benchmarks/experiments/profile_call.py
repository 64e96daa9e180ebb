"""Where the host time of a repeated gemmlab.matmul call goes: cProfile over
many calls of each case, the top functions by own time.
Without --profile: host µs per call, 500 calls at a time at most (fewer than the launch
queue holds, so that a product of tens of µs on the GPU does not make the host wait).
Usage: python3 benchmarks/experiments/profile_call.py [N [--profile] [case-substrings]]"""

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
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(min(N // 5, 500)):   # below the launch queue's depth: the host never waits
            fn()
        runs.append((time.perf_counter() - t0) / min(N // 5, 500) * 1e6)
        torch.cuda.synchronize()
    us = sorted(runs)[2]
    if not PROFILE:
        p = gemmlab.last_plan()
        print(f"{name:32s} {us:7.1f} us per call   {p.describe() if p and 'gemmlab' in name or 'torch' not in name else ''}")
        return
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


import cupy as cp  # noqa: E402

import gemmlab.torch  # noqa: E402,F401

t32 = torch.randn(64, 64, device="cuda")
tbf = t32.bfloat16()
tb16 = torch.randn(16, 64, 64, device="cuda").bfloat16()
t16f = torch.randn(16, 64, 64, device="cuda")
o32 = torch.empty(64, 64, device="cuda")
t1k = torch.randn(1024, 1024, device="cuda")
c32 = cp.random.rand(64, 64, dtype=cp.float32)
# a decode step's input gradient, dY @ W with one token (gemv's row path), and its forward
w_o = torch.randn(4096, 4096, device="cuda")
dy1, x1, o1 = torch.randn(1, 4096, device="cuda"), torch.randn(1, 4096, device="cuda"), torch.empty(1, 4096, device="cuda")
w_o16, dy16, o16 = w_o.half(), dy1.half(), o1.half()
PROFILE = "--profile" in sys.argv
cases = [
    ("torch.matmul fp32", lambda: torch.matmul(t32, t32)),
    ("torch.matmul bf16", lambda: torch.matmul(tbf, tbf)),
    ("torch.matmul bf16 batch 16", lambda: torch.matmul(tb16, tb16)),
    ("torch.mm fp32", lambda: torch.mm(t32, t32)),
    ("fp32 64^3 (auto)", lambda: gemmlab.matmul(t32, t32)),
    ("fp32 64^3 out=", lambda: gemmlab.matmul(t32, t32, out=o32)),
    ("fp32 64^3 cupy", lambda: gemmlab.matmul(c32, c32)),
    ("fp32 64^3 kernel=vectorized", lambda: gemmlab.matmul(t32, t32, kernel="vectorized")),
    ("bf16 64^3 (auto: wgmma)", lambda: gemmlab.matmul(tbf, tbf)),
    ("bf16 64^3 x.t()", lambda: gemmlab.matmul(tbf, tbf.t())),
    ("bf16 batch 16", lambda: gemmlab.matmul(tb16, tb16)),
    ("tf32 64^3", lambda: gemmlab.matmul(t32, t32, precision="tf32")),
    ("fp16_ec 64^3", lambda: gemmlab.matmul(t32, t32, precision="fp16_ec")),
    ("fp16_ec 64^3 ec_wgmma", lambda: gemmlab.matmul(t32, t32, precision="fp16_ec", kernel="ec_wgmma")),
    ("fp32_tc 64^3", lambda: gemmlab.matmul(t32, t32, precision="fp32_tc")),
    ("fp32_tc 64^3 ec_wgmma", lambda: gemmlab.matmul(t32, t32, precision="fp32_tc", kernel="ec_wgmma")),
    ("fp32_tc 64^3 ec_wmma", lambda: gemmlab.matmul(t32, t32, precision="fp32_tc", kernel="ec_wmma")),
    ("fp32_tc 64^3 out= ec_wgmma", lambda: gemmlab.matmul(t32, t32, out=o32, precision="fp32_tc",
                                                         kernel="ec_wgmma")),
    ("fp32_tc batch 16", lambda: gemmlab.matmul(t16f, t16f, precision="fp32_tc")),
    # a product of some tens of µs of GPU time, where fp32_tc's host time still shows
    ("fp32_tc 1024^3 ec_wgmma", lambda: gemmlab.matmul(t1k, t1k, precision="fp32_tc", kernel="ec_wgmma")),
    ("torch o.dgrad M=1 fp32 out=", lambda: torch.matmul(dy1, w_o, out=o1)),
    ("gemmlab o.dgrad M=1 fp32 out=", lambda: gemmlab.matmul(dy1, w_o, out=o1)),
    ("torch o.fwd M=1 fp32 out=", lambda: torch.matmul(x1, w_o.t(), out=o1)),
    ("gemmlab o.fwd M=1 fp32 out=", lambda: gemmlab.matmul(x1, w_o.t(), out=o1)),
    ("torch o.dgrad M=1 fp16 out=", lambda: torch.matmul(dy16, w_o16, out=o16)),
    ("gemmlab o.dgrad M=1 fp16 out=", lambda: gemmlab.matmul(dy16, w_o16, out=o16)),
    ("torch.ops.gemmlab.mm fp32", lambda: torch.ops.gemmlab.mm(t32, t32)),
    ("torch.ops.gemmlab.mm bf16", lambda: torch.ops.gemmlab.mm(tbf, tbf)),
]
only = [a for a in sys.argv[2:] if not a.startswith("--")]
for name, fn in cases:
    if not only or any(o in name for o in only):
        case(name, fn)
