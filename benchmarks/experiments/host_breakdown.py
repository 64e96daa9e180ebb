"""Host time of each step of a repeated gemmlab.matmul call, measured alone (64^3
fp32, kernel="vectorized", PyTorch tensors), and of torch.library operator
variants around it.  Each step is timed over short bursts (100 calls, then a
synchronisation, outside the timing) so that a full launch queue never makes
the host wait for the GPU.
Usage: python3 benchmarks/experiments/host_breakdown.py"""

import torch
from host_costs import per_call_us

import gemmlab
from gemmlab import api, arrays, executor
from gemmlab.runtime.launch import launch_shaped


def row(name, fn):
    us = per_call_us(fn, n=100, reps=30, sync=torch.cuda.synchronize)
    print(f"{name:58s} {us:7.2f} us", flush=True)


t = torch.randn(64, 64, device="cuda")
o = torch.empty(64, 64, device="cuda")
tb = t.bfloat16()
row("torch.matmul fp32", lambda: torch.matmul(t, t))
row("torch.matmul fp32 out=", lambda: torch.matmul(t, t, out=o))
row("torch.mm bf16", lambda: torch.mm(tb, tb))
gemmlab.matmul(t, t, kernel="vectorized")
prepared = next(reversed(executor.CACHE._d.values()))
key = next(reversed(executor.CACHE._d.keys()))
pa = t.data_ptr()
stream = prepared.stream(0)
L = prepared.launcher
row("gemmlab.matmul fp32 vectorized", lambda: gemmlab.matmul(t, t, kernel="vectorized"))
row("gemmlab.matmul fp32 vectorized out=", lambda: gemmlab.matmul(t, t, out=o, kernel="vectorized"))
row("  signature of one tensor", lambda: arrays._torch_signature(t))
row("  CACHE.get(key)", lambda: executor.CACHE.get(key))
row("  prepared.stream(0)", lambda: prepared.stream(0))
row("  prepared.alloc() (torch.empty)", lambda: prepared.alloc())
row("  prepared.run (launch path only)", lambda: prepared.run(pa, pa, o.data_ptr(), 1.0, 0.0, stream))
row("  launcher.run", lambda: L.run(stream, pa, pa, o.data_ptr(), 1.0, 0.0))
M, N, K = L.args_mk
args = (M, N, K, executor.f32(1.0), pa, L.lda, pa, L.ldb, executor.f32(0.0), o.data_ptr(), L.ldc, L.sa, L.sb, L.sc)
shape = L.chunks[0][4]
row("  launch_shaped, prebuilt args", lambda: launch_shaped(L.kernel, shape, stream, args))
row("  api._run_prepared", lambda: api._run_prepared(prepared, pa, pa, None, 0, 1.0, 0.0))
dev = torch.device("cuda", 0)
row("  torch.empty((64, 64), dtype=, device=torch.device)", lambda: torch.empty((64, 64), dtype=torch.float32, device=dev))
row("  torch.empty(64, 64, dtype=, device=int)", lambda: torch.empty(64, 64, dtype=torch.float32, device=0))
row("  t.new_empty((64, 64))", lambda: t.new_empty((64, 64)))
row("  torch.empty_like(t)", lambda: torch.empty_like(t))
row("  torch.empty_strided((64, 64), (64, 1), dtype, device)", lambda: torch.empty_strided((64, 64), (64, 1), dtype=torch.float32, device=dev))
row("gemmlab.matmul bf16 (auto)", lambda: gemmlab.matmul(tb, tb))

# torch.library operator variants around the same call
lib = torch.library.Library("probe3", "DEF")
for name in ("plain", "autograd"):
    lib.define(f"{name}(Tensor a, Tensor b) -> Tensor")
    lib.impl(name, lambda a, b: gemmlab.matmul(a, b), "CUDA")
torch.library.register_autograd("probe3::autograd", lambda ctx, g: (g, g), lib=lib)
lib.define("manual(Tensor a, Tensor b) -> Tensor")
lib.impl("manual", lambda a, b: gemmlab.matmul(a, b), "CUDA")


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.probe3.manual.default(a, b)

    @staticmethod
    def backward(ctx, g):
        return g, g


def _manual_autograd(a, b):
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _Fn.apply(a, b)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.probe3.manual.default(a, b)


lib.impl("manual", _manual_autograd, "Autograd")
row("Library op, CUDA impl only (bf16)", lambda: torch.ops.probe3.plain(tb, tb))
row("Library op, CUDA impl only, .default (bf16)", lambda: torch.ops.probe3.plain.default(tb, tb))
row("Library op + hand-written Autograd kernel (bf16)", lambda: torch.ops.probe3.manual.default(tb, tb))
row("Library op + register_autograd (bf16)", lambda: torch.ops.probe3.autograd(tb, tb))
import gemmlab.torch  # noqa: E402,F401
row("torch.ops.gemmlab.mm (bf16)", lambda: torch.ops.gemmlab.mm(tb, tb))
with torch.no_grad():
    row("torch.ops.gemmlab.mm (bf16) under no_grad", lambda: torch.ops.gemmlab.mm(tb, tb))
