"""Host cost, in microseconds, of each step a GEMM call may take on the host:
reading a tensor's attributes, finding the current stream, allocating the
result, launching a kernel (cuda.core and the bare driver), a torch.library
operator's dispatch.  Measures what the prepared-call fast path is built from.
Usage: python3 benchmarks/experiments/host_costs.py [--json FILE]"""

import json
import statistics
import sys
import time

import numpy as np


def per_call_us(fn, n=2000, reps=7, sync=None):
    """Median over ``reps`` rounds of ``n`` back-to-back calls, µs per call; with
    ``sync``, called after each round outside the timing (short rounds then never
    fill the launch queue, so the host never waits for the GPU)."""
    for _ in range(min(n, 200)):
        fn()
    if sync:
        sync()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
        if sync:
            sync()
    return statistics.median(out)


def main():
    import cupy as cp
    import torch
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch, Stream
    from cuda.bindings import driver

    rows = {}

    def row(name, fn, **kw):
        us = per_call_us(fn, **kw)
        rows[name] = us
        print(f"{name:60s} {us:8.2f} us", flush=True)

    t = torch.randn(64, 64, device="cuda")
    tb = t.bfloat16()
    ct = torch.empty(64, 64, device="cuda")
    row("torch: t.shape", lambda: t.shape)
    row("torch: t.stride()", lambda: t.stride())
    row("torch: t.dtype", lambda: t.dtype)
    row("torch: t.data_ptr()", lambda: t.data_ptr())
    row("torch: t.device", lambda: t.device)
    row("torch: t.get_device()", lambda: t.get_device())
    row("torch: t.is_cuda", lambda: t.is_cuda)
    row("torch: t.requires_grad", lambda: t.requires_grad)
    row("torch: type(t)", lambda: type(t))
    row("torch: current_stream().cuda_stream", lambda: torch.cuda.current_stream().cuda_stream)
    row("torch: _C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0))
    row("torch: is_current_stream_capturing()", lambda: torch.cuda.is_current_stream_capturing())
    dev = torch.device("cuda", 0)
    row("torch: empty((64,64), float32, device obj)", lambda: torch.empty((64, 64), dtype=torch.float32, device=dev))
    row("torch: empty((64,64), float32, device='cuda:0')", lambda: torch.empty((64, 64), dtype=torch.float32, device="cuda:0"))
    row("torch: matmul fp32", lambda: torch.matmul(t, t))
    row("torch: matmul bf16", lambda: torch.matmul(tb, tb))
    row("torch: matmul fp32 out=", lambda: torch.matmul(t, t, out=ct))
    row("torch: mm fp32", lambda: torch.mm(t, t))

    @torch.library.custom_op("probe::copy_op", mutates_args=())
    def copy_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)

    @copy_op.register_fake
    def _(a, b):
        return a.new_empty((a.shape[0], b.shape[1]))
    row("torch: custom_op (empty inside), call via torch.ops", lambda: torch.ops.probe.copy_op(t, t))
    copy_op.register_autograd(lambda ctx, g: (g, g), setup_context=lambda ctx, inputs, output: None)
    row("torch: custom_op with autograd, via torch.ops", lambda: torch.ops.probe.copy_op(t, t))

    lib = torch.library.Library("probe2", "DEF")
    lib.define("mm(Tensor a, Tensor b) -> Tensor")

    def impl(a, b):
        return torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    lib.impl("mm", impl, "CUDA")
    row("torch: Library.impl CUDA (empty inside)", lambda: torch.ops.probe2.mm(t, t))
    op = torch.ops.probe2.mm.default
    row("torch: Library.impl via OpOverload .default", lambda: op(t, t))

    a = cp.random.rand(64, 64, dtype=cp.float32)
    row("cupy: a.shape", lambda: a.shape)
    row("cupy: a.strides", lambda: a.strides)
    row("cupy: a.dtype", lambda: a.dtype)
    row("cupy: a.dtype.char", lambda: a.dtype.char)
    row("cupy: a.data.ptr", lambda: a.data.ptr)
    row("cupy: a.device.id", lambda: a.device.id)
    row("cupy: get_current_stream().ptr", lambda: cp.cuda.get_current_stream().ptr)
    try:
        row("cupy: get_current_stream(0).ptr", lambda: cp.cuda.get_current_stream(0).ptr)
    except Exception as exc:
        print("cupy get_current_stream(0):", exc)
    row("cupy: runtime.getDevice()", lambda: cp.cuda.runtime.getDevice())
    row("cupy: Device().id", lambda: cp.cuda.Device().id)
    row("cupy: with Device(0)", lambda: cp.cuda.Device(0).__enter__() and None)
    row("cupy: empty((64,64), float32)", lambda: cp.empty((64, 64), dtype=np.float32))
    ca = cp.empty((64, 64), dtype=cp.float32)
    row("cupy: matmul fp32", lambda: cp.matmul(a, a))
    row("cupy: matmul fp32 out=", lambda: cp.matmul(a, a, out=ca))
    row("np.float32(1.5)", lambda: np.float32(1.5))
    row("isinstance(x, float)", lambda: isinstance(1.5, float))

    d = Device(0)
    d.set_current()
    src = r"""extern "C" __global__ void k(int M, int N, int K, float alpha, const float* A, int lda,
        const float* B, int ldb, float beta, float* C, int ldc, long long sa, long long sb, long long sc) {
        if (threadIdx.x == 0 && M < 0) C[0] = alpha + A[0] + B[0]; }"""
    mod = Program(src, "c++", ProgramOptions(arch=f"sm_{d.compute_capability.major}{d.compute_capability.minor}")).compile("cubin")
    kern = mod.get_kernel("k")
    cfg = LaunchConfig(grid=(1, 1, 1), block=(32, 1, 1), shmem_size=0)
    s = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    args = (np.int32(64), np.int32(64), np.int32(64), np.float32(1), a.data.ptr, np.int32(64), a.data.ptr,
            np.int32(64), np.float32(0), ca.data.ptr, np.int32(64), np.int64(0), np.int64(0), np.int64(0))
    row("cuda.core: launch, prebuilt config and args", lambda: launch(s, cfg, kern, *args))
    row("cuda.core: LaunchConfig(...) built", lambda: LaunchConfig(grid=(1, 1, 1), block=(32, 1, 1), shmem_size=0))
    # the driver with a prebuilt kernelParams array
    vals = [np.array([x]) if isinstance(x, np.generic) else np.array([x], dtype=np.uint64) for x in args]
    ptrs = np.array([v.ctypes.data for v in vals], dtype=np.uint64)
    h = kern.handle
    err, func = driver.cuKernelGetFunction(h) if hasattr(driver, "cuKernelGetFunction") else (None, None)
    st = driver.CUstream(s.handle)
    pp = ptrs.ctypes.data
    row("driver: cuLaunchKernel prebuilt params (CUkernel)",
        lambda: driver.cuLaunchKernel(h, 1, 1, 1, 32, 1, 1, 0, st, pp, 0))
    if func is not None:
        row("driver: cuLaunchKernel prebuilt params (CUfunction)",
            lambda: driver.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, st, pp, 0))
    row("driver: cuLaunchKernel, CUstream built per call",
        lambda: driver.cuLaunchKernel(h, 1, 1, 1, 32, 1, 1, 0, driver.CUstream(s.handle), pp, 0))
    v4 = vals[4]
    row("numpy: param slot write (v[0] = ptr)", lambda: v4.__setitem__(0, 12345))
    row("driver: cuStreamIsCapturing", lambda: driver.cuStreamIsCapturing(st))
    torch.cuda.synchronize()

    import gemmlab
    import gemmlab.torch as gt
    tt = torch.randn(64, 64, device="cuda")
    tbf = tt.bfloat16()
    tout = torch.empty(64, 64, device="cuda")
    tb16 = torch.randn(16, 64, 64, device="cuda").bfloat16()
    ca2 = cp.random.rand(64, 64, dtype=cp.float32)
    cout = cp.empty((64, 64), cp.float32)
    row("gemmlab.matmul torch fp32", lambda: gemmlab.matmul(tt, tt))
    row("gemmlab.matmul torch fp32 out=", lambda: gemmlab.matmul(tt, tt, out=tout))
    row("gemmlab.matmul torch bf16", lambda: gemmlab.matmul(tbf, tbf))
    row("gemmlab.matmul torch bf16 x.t()", lambda: gemmlab.matmul(tbf, tbf.t()))
    row("gemmlab.matmul torch bf16 batch 16", lambda: gemmlab.matmul(tb16, tb16))
    row("torch.matmul bf16 batch 16", lambda: torch.matmul(tb16, tb16))
    row("gemmlab.matmul torch tf32", lambda: gemmlab.matmul(tt, tt, precision="tf32"))
    row("gemmlab.matmul cupy fp32", lambda: gemmlab.matmul(ca2, ca2))
    row("gemmlab.matmul cupy fp32 out=", lambda: gemmlab.matmul(ca2, ca2, out=cout))
    row("gemmlab.torch.mm fp32", lambda: gt.mm(tt, tt))
    row("torch.ops.gemmlab.mm bf16", lambda: torch.ops.gemmlab.mm(tbf, tbf))
    row("gemmlab.matmul torch fp32_tc (syncs)", lambda: gemmlab.matmul(tt, tt, precision="fp32_tc"), n=300)
    row("gemmlab.matmul torch fp16_ec", lambda: gemmlab.matmul(tt, tt, precision="fp16_ec"))
    torch.cuda.synchronize()
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "us_per_call": rows}, f, indent=1)


if __name__ == "__main__":
    main()
