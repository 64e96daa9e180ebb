"""Launch goldens: every launch a broad set of public calls makes on the emulated GPU
(tests/emulated_gpu.py) -- kernel, grid, block, cluster, dynamic shared memory and every
argument -- recorded once and compared exactly, so that a change to how the executor
builds and enqueues launches is proven to launch the same.

Pointers are written relative to the arrays the test made or the memory the call took
(workspaces, results: named in the order they were taken), scalars by type and value,
tensor maps by their fields.  Workspaces taken and given back are recorded in order too.
Cases the emulator computes are checked against NumPy as well.  Regenerate only when
what is launched is meant to change:

    PYTHONPATH=src:tests python3 tests/test_launch_goldens.py   # writes tests/data/launch_goldens.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import emulated_gpu
import gemmlab
from gemmlab.core import executor
from gemmlab.kernels.ec import choose_method, ec_wgmma
from gemmlab.runtime import compile as rt_compile
from gemmlab.runtime import launch as rt_launch
from gemmlab.runtime import tma

GOLDENS = Path(__file__).resolve().parent / "data" / "launch_goldens.json"
torch = pytest.importorskip("torch")


class Ctx:
    """One case's memory and launches: arrays by name, every launch and workspace in order."""

    def __init__(self, emu, compute: bool):
        self.emu, self.compute = emu, compute
        self.raw_keep = emu.keep
        self.regions: list[tuple[int, int, str]] = []  # (lo, hi, label): the test's arrays first
        self.auto: list[tuple[int, int, str]] = []  # memory the call took
        self.log: list = []
        self.checks: list = []

    # -- memory ---------------------------------------------------------------------------
    def dev(self, name: str, x: np.ndarray) -> np.ndarray:
        """A copy of ``x`` in emulated device memory, 256-byte aligned (stable alignments)."""
        buf = self.raw_keep(np.empty(x.nbytes + 256, np.uint8))
        off = -buf.ctypes.data % 256
        view = buf[off : off + x.nbytes].view(x.dtype).reshape(x.shape)
        view[...] = x
        self.regions.append((view.ctypes.data, view.ctypes.data + max(1, x.nbytes), name))
        return view

    def tdev(self, name: str, t):
        """A PyTorch CPU tensor over device memory (dtypes NumPy lacks go as 16-bit words)."""
        raw = t.contiguous()
        if raw.dtype in (torch.bfloat16, torch.float16):
            host = raw.view(torch.int16).numpy()
        elif raw.element_size() == 1:
            host = raw.view(torch.uint8).numpy()
        else:
            host = raw.numpy()
        view = self.dev(name, host)
        return torch.from_numpy(view).view(raw.dtype)

    def kept(self, x: np.ndarray) -> None:
        base = x
        while isinstance(base.base, np.ndarray):
            base = base.base
        lo = base.ctypes.data
        if any(lo >= a and lo < b for a, b, _ in self.regions):
            return
        self.auto.append((lo, lo + max(1, base.nbytes), f"m{len(self.auto)}"))

    def label(self, x: int):
        for lo, hi, name in self.regions + self.auto:
            if lo <= x < hi:
                return f"@{name}+{x - lo}"
        return None

    # -- values ---------------------------------------------------------------------------
    def value(self, x):
        if isinstance(x, (bool, np.bool_)):
            return f"bool:{bool(x)}"
        if type(x) is int:
            at = self.label(x) if x > 4096 else None
            return at if at is not None else x
        if isinstance(x, np.generic):
            v = x.item()
            if isinstance(v, int) and v > 4096 and self.label(v) is not None:
                return f"{type(x).__name__}{self.label(v)}"
            return f"{type(x).__name__}:{v!r}"
        if isinstance(x, float):
            return f"float:{x!r}"
        if isinstance(x, emulated_gpu.FakeMap):
            d = dataclasses.asdict(x)
            d["ptr"] = self.label(x.ptr) or x.ptr
            return {"map": d}
        return f"{type(x).__name__}:{x!r}"

    def kernel_name(self, kernel) -> str:
        if hasattr(kernel, "name_expression"):
            return kernel.name_expression
        if isinstance(kernel, emulated_gpu.ReduceKernel):
            return f"reduce<{kernel.out_dtype}>"
        return str(kernel)

    def record_launch(self, kernel, grid, block, smem, args, cluster):
        self.log.append(
            {
                "kernel": self.kernel_name(kernel),
                "grid": list(grid),
                "block": list(block),
                "smem": int(smem),
                "cluster": list(cluster) if cluster is not None else None,
                "args": [self.value(a) for a in args],
            }
        )


class _RecordedWorkspace(emulated_gpu._Workspace):
    def __init__(self, ctx, emu, nbytes, zero_new, slot):
        super().__init__(emu, nbytes, zero_new)
        self.ctx, self.slot = ctx, slot
        ctx.log.append(["take", slot, int(nbytes), bool(zero_new), ctx.label(self.handle)])

    def close(self, stream=None):
        self.ctx.log.append(["close", self.slot, self.ctx.label(self.handle)])


def _patch_everywhere(monkeypatch, original, value) -> None:
    """Replace ``original`` in every gemmlab module that holds it under its own name."""
    name = original.__name__
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("gemmlab") and getattr(mod, name, None) is original:
            monkeypatch.setattr(mod, name, value)


def _install(monkeypatch, compute: bool, direct: bool) -> Ctx:
    emu = emulated_gpu.install(monkeypatch)
    ctx = Ctx(emu, compute)
    # Tables of their own: a process that ran other tests holds their kernels and maps.
    monkeypatch.setattr(ec_wgmma, "_split_launches", {})
    monkeypatch.setattr(tma, "_cache", OrderedDict())
    keep = emu.keep

    def kept(x):
        keep(x)
        ctx.kept(x)
        return x

    emu.keep = kept
    real_tensor = emulated_gpu.emulated_tensor

    def emulated_tensor(emu_, x):  # a result: named from its data, not its buffer's start
        t = real_tensor(emu_, x)
        ptr = t.data_ptr()
        ctx.auto = [(ptr if lo <= ptr < hi else lo, hi, name) for lo, hi, name in ctx.auto]
        return t

    monkeypatch.setattr(emulated_gpu, "emulated_tensor", emulated_tensor)
    real_launch = emu.launch

    def launch(kernel, grid, block, smem, stream, *args, cluster=None):
        ctx.record_launch(kernel, grid, block, smem, args, cluster)
        if compute:
            real_launch(kernel, grid, block, smem, stream, *args, cluster=cluster)

    emu.launch = launch
    monkeypatch.setattr(rt_launch, "launch", lambda *a, **k: emu.launch(*a, **k))

    def stream_workspace(gpu, stream, nbytes, what, hint="", slot="scratch", zero_new=False, capturing=None):
        return _RecordedWorkspace(ctx, emu, nbytes, zero_new, slot)

    _patch_everywhere(monkeypatch, rt_launch.stream_workspace, stream_workspace)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("gemmlab") and hasattr(mod, "stream_workspace"):
            if mod is not rt_launch:
                monkeypatch.setattr(mod, "stream_workspace", stream_workspace)
    monkeypatch.setattr(
        rt_launch,
        "device_workspace",
        lambda gpu, stream, nbytes, what, hint="": _RecordedWorkspace(ctx, emu, nbytes, False, "device"),
    )
    real_load = rt_compile.load_kernel

    def load_kernel(source, name, arch):
        try:
            return real_load(source, name, arch)
        except KeyError:
            return name

    monkeypatch.setattr(rt_compile, "load_kernel", load_kernel)
    report = ctx.dev("report", np.zeros(choose_method.CHOICE_FIELDS, np.int64))

    def report_init(self, gpu, stream):
        self.gpu, self.ptr = gpu, report.ctypes.data

    monkeypatch.setattr(choose_method.Report, "__init__", report_init)
    _patch_everywhere(
        monkeypatch, rt_launch.zero_async, lambda ptr, nbytes, stream: ctx.log.append(["zero", ctx.label(ptr), nbytes])
    )
    if direct:
        monkeypatch.setattr(executor.Launcher, "direct", REAL_DIRECT)
    return ctx


REAL_DIRECT = executor.Launcher.direct


# -- the cases -----------------------------------------------------------------------------------


def _rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def _check(ctx, got, want, tol):
    if ctx.compute:
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def _mm(ctx, M, N, K, dtype=np.float32, ta=False, tb=False, out=None, beta=0.0, alpha=1.0, batch=(), tol=None, **kw):
    tol = tol or (1e-4 if np.dtype(dtype) == np.float32 and kw.get("precision") is None else 3e-2)
    a = _rand(batch + ((K, M) if ta else (M, K)), dtype, 1)
    b = _rand(batch + ((N, K) if tb else (K, N)), dtype, 2)
    a, b = ctx.dev("a", a), ctx.dev("b", b)
    opa = np.swapaxes(a, -1, -2) if ta else a
    opb = np.swapaxes(b, -1, -2) if tb else b
    want = alpha * (opa.astype(np.float64) @ opb.astype(np.float64))
    if out == "col":
        o = np.swapaxes(ctx.dev("out", _rand(batch + (N, M), np.dtype(dtype), 3)), -1, -2)
    elif out == "row":
        o = ctx.dev("out", _rand(batch + (M, N), np.dtype(kw.get("out_dtype", dtype)), 3))
    else:
        o = None
    if o is not None and beta:
        want = want + beta * o.astype(np.float64)
    r = gemmlab.matmul(opa, opb, out=o, alpha=alpha, beta=beta, **kw) if o is not None or beta == 0 else None
    if r is not None:
        _check(ctx, r, want, tol)
    return a, b, o


def _repeat(ctx, M, N, K, dtype=np.float32, **kw):
    """The same signature three times: twice on the same arrays, once on new ones."""
    a, b, o = _mm(ctx, M, N, K, dtype, out="row", **kw)
    r = gemmlab.matmul(a, b, out=o, **kw)
    _check(ctx, r, a.astype(np.float64) @ b.astype(np.float64), 2e-2)
    a2, b2 = ctx.dev("a2", _rand((M, K), dtype, 5)), ctx.dev("b2", _rand((K, N), dtype, 6))
    o2 = ctx.dev("out2", np.zeros((M, N), dtype))
    gemmlab.matmul(a2, b2, out=o2, **kw)
    _check(ctx, o2, a2.astype(np.float64) @ b2.astype(np.float64), 2e-2)


def _bias_mm(ctx, M, N, K, dtype, bias, ta=False, tb=False, out=False, batch=(), **kw):
    a = ctx.dev("a", _rand(batch + ((K, M) if ta else (M, K)), dtype, 1))
    b = ctx.dev("b", _rand((N, K) if tb else (K, N), dtype, 2))
    a, b = (a.T if ta else a), (b.T if tb else b)
    bv = ctx.dev("bias", _rand(bias, dtype, 3))
    for _ in range(2):
        o = ctx.dev("out", np.zeros(batch + (M, N), dtype)) if out else None
        r = gemmlab.matmul(a, b, out=o, bias=bv, **kw)
        _check(ctx, r, a.astype(np.float64) @ b.astype(np.float64) + bv, 3e-2)


def _fp8(ctx, M, N, K, kind, out_dtype="bfloat16"):
    g = torch.Generator().manual_seed(0)
    e4 = torch.float8_e4m3fn
    a = (torch.randn(M, K, generator=g) * 4).to(e4)
    bt = (torch.randn(N, K, generator=g) * 4).to(e4)
    kb, nb = -(-K // 128), -(-N // 128)
    shapes = {"tensor": ((), ()), "row": ((M, 1), (1, N)), "block": ((M, kb), (nb, kb))}[kind]
    sa, sb = (torch.exp2(torch.randint(-3, 4, s, generator=g).float()) for s in shapes)
    a_d, bt_d = ctx.tdev("a", a), ctx.tdev("b", bt)
    sa_d, sb_d = ctx.tdev("sa", sa), ctx.tdev("sb", sb)
    for _ in range(2):
        gemmlab.matmul(a_d, bt_d.t(), scale_a=sa_d, scale_b=sb_d, out_dtype=out_dtype)
    o = ctx.tdev("out", torch.zeros(M, N))
    gemmlab.matmul(a_d, bt_d.t(), scale_a=sa_d, scale_b=sb_d, out=o, alpha=0.5, beta=1.0)


def _grouped(ctx, T, K, N, ends, op_b, wgrad=False):
    g = torch.Generator().manual_seed(0)
    dt = torch.bfloat16
    offs = ctx.tdev("offs", torch.tensor(ends, dtype=torch.int32))
    G = len(ends)
    if wgrad:
        x = ctx.tdev("x", torch.randn(T, K, generator=g).to(dt))
        y = ctx.tdev("y", torch.randn(T, N, generator=g).to(dt))
        from gemmlab.core import grouped

        for _ in range(2):
            grouped.grouped_weight_grad(x, y, offs)
        return
    a = ctx.tdev("a", torch.randn(T, K, generator=g).to(dt))
    w = ctx.tdev(
        "w", torch.randn(G, N, K, generator=g).to(dt) if op_b == "T" else torch.randn(G, K, N, generator=g).to(dt)
    )
    b = w.transpose(-2, -1) if op_b == "T" else w
    for _ in range(2):
        gemmlab.grouped_mm(a, b, offs)
    o = ctx.tdev("out", torch.zeros(T, N, dtype=dt))
    gemmlab.grouped_mm(a, b, offs, out=o)


def _family(ctx, dtype=np.float32, **kw):
    """Sizes of one band of rows: the family's first call, then members of new M."""
    big_a = ctx.dev("a", _rand((1200, 256), dtype, 1))
    b = ctx.dev("b", _rand((256, 192), dtype, 2))
    for m in (1100, 1050, 1100, 1180):
        o = ctx.dev(f"out{m}", np.zeros((m, 192), dtype))
        gemmlab.matmul(big_a[:m], b, out=o, **kw)
        _check(ctx, o, big_a[:m].astype(np.float64) @ b.astype(np.float64), 2e-2)


def _ec(ctx, M, N, K, precision, kernel="auto", batch=(), ta=False, alpha=1.0, beta=0.0, **kw):
    a = ctx.dev("a", _rand(batch + ((K, M) if ta else (M, K)), np.float32, 1))
    b = ctx.dev("b", _rand(batch + (K, N), np.float32, 2))
    opa = np.swapaxes(a, -1, -2) if ta else a
    o = ctx.dev("out", np.zeros(batch + (M, N), np.float32))
    for _ in range(2):
        gemmlab.matmul(opa, b, out=o, precision=precision, kernel=kernel, alpha=alpha, beta=beta, **kw)
    a2 = ctx.dev("a2", _rand(batch + ((K, M) if ta else (M, K)), np.float32, 3))
    gemmlab.matmul(
        np.swapaxes(a2, -1, -2) if ta else a2,
        b,
        out=o,
        precision=precision,
        kernel=kernel,
        alpha=alpha,
        beta=beta,
        **kw,
    )
    gemmlab.matmul(opa, b, precision=precision, kernel=kernel, **kw)


F32, F16 = np.float32, np.float16
BF16, TF16 = "bf16", "f16"

# name -> (function, computed by the emulator)
CASES = {
    # FP32 on the CUDA cores, every rung, odd and aligned sizes
    **{
        f"simt_{k}": (lambda c, k=k: _mm(c, 37, 29, 53, kernel=k), True)
        for k in ("naive", "coalesced", "smem_tiled", "blocktile_1d", "blocktile_2d", "vectorized", "warptile")
    },
    **{
        f"simt_{k}_aligned": (lambda c, k=k: _mm(c, 64, 128, 96, out="row", beta=0.5, kernel=k), True)
        for k in ("blocktile_2d", "vectorized", "warptile", "pipelined")
    },
    "auto_f32_small": (lambda c: _repeat(c, 64, 64, 64), True),
    "auto_f32_odd": (lambda c: _mm(c, 100, 77, 33), True),
    "auto_f32_trans": (lambda c: _mm(c, 96, 80, 72, ta=True, tb=True), True),
    "auto_f32_colout": (lambda c: _mm(c, 96, 80, 72, out="col", beta=2.0), True),
    "auto_f32_alpha0": (lambda c: _mm(c, 64, 64, 64, out="row", alpha=0.0, beta=0.5), True),
    "auto_f32_k0": (lambda c: _mm(c, 64, 48, 0, out="row", beta=0.5), True),
    "auto_f32_batched": (lambda c: _mm(c, 64, 48, 80, batch=(3,), out="row", beta=1.0), True),
    "auto_f32_broadcast": (
        lambda c: gemmlab.matmul(c.dev("a", _rand((2, 1, 40, 24))), c.dev("b", _rand((3, 24, 56)))),
        True,
    ),
    "auto_f32_broadcast2d": (
        lambda c: gemmlab.matmul(c.dev("a", _rand((4, 40, 24))), c.dev("b", _rand((24, 56)))),
        True,
    ),
    "pipelined_splitk": (lambda c: _mm(c, 32, 32, 4096, kernel="pipelined", SPLITK=4, out="row", beta=0.5), True),
    "pipelined_splitk_batched": (lambda c: _mm(c, 32, 64, 2048, batch=(3,), kernel="pipelined", SPLITK=2), True),
    "auto_f32_few_tiles_large_k": (lambda c: _mm(c, 16, 16, 65536, tol=1e-3), True),
    "gemv_row": (lambda c: _mm(c, 1, 512, 256, kernel="gemv"), True),
    "gemv_col": (lambda c: _mm(c, 512, 1, 256, kernel="gemv"), True),
    "gemv_auto": (lambda c: _mm(c, 4, 2048, 1024, tol=1e-3), True),
    "outer": (lambda c: _mm(c, 64, 80, 1, kernel="outer"), True),
    "f16_auto": (lambda c: _repeat(c, 64, 64, 64, F16), True),
    "f16_odd": (lambda c: _mm(c, 100, 72, 40, F16, tol=2e-2), True),
    "f16_wmma": (lambda c: _mm(c, 64, 64, 64, F16, kernel="wmma", tol=2e-2), True),
    "f16_wmma_warptile": (lambda c: _mm(c, 128, 128, 64, F16, kernel="wmma_warptile", tol=2e-2), True),
    "f16_mma_pipelined": (lambda c: _mm(c, 128, 128, 64, F16, kernel="mma_pipelined", tol=2e-2), True),
    "f16_wgmma": (lambda c: _repeat(c, 256, 256, 128, F16, kernel="wgmma"), True),
    "f16_wgmma_trans": (lambda c: _mm(c, 192, 256, 128, F16, ta=True, tb=True, kernel="wgmma", tol=2e-2), True),
    "f16_wgmma_colout": (lambda c: _mm(c, 192, 256, 128, F16, out="col", beta=1.0, kernel="wgmma", tol=2e-2), True),
    "f16_wgmma_batched": (lambda c: _mm(c, 128, 128, 64, F16, batch=(3,), kernel="wgmma", tol=2e-2), True),
    "f16_wgmma_splitk": (
        lambda c: _mm(c, 128, 128, 4096, F16, kernel="wgmma", SPLITK=4, out="row", beta=0.5, tol=2e-2),
        True,
    ),
    "f16_wgmma_unaligned": (lambda c: _mm(c, 100, 90, 70, F16, kernel="wgmma", tol=2e-2), True),
    "f16_wgmma_k0": (lambda c: _mm(c, 128, 128, 0, F16, kernel="wgmma", out="row", beta=0.5), True),
    "f16_wgmma_alpha0": (lambda c: _mm(c, 128, 128, 64, F16, kernel="wgmma", out="row", alpha=0.0, beta=0.5), True),
    "f16_auto_large": (lambda c: _mm(c, 1024, 1024, 1024, F16, tol=3e-2), True),
    "f16_auto_few_tiles_large_k": (lambda c: _mm(c, 128, 128, 16384, F16, tol=3e-2), True),
    "f16_family": (lambda c: _family(c, F16), True),
    "f32_family": (lambda c: _family(c, F32), True),
    "f16_bias_row": (lambda c: _bias_mm(c, 256, 192, 128, F16, (192,)), True),
    "f16_bias_col": (lambda c: _bias_mm(c, 256, 192, 128, F16, (256, 1), ta=True, tb=True, out=True), True),
    "f16_bias_matrix": (lambda c: _bias_mm(c, 64, 64, 64, F16, (64, 64), out=True), True),
    "f16_bias_batched": (lambda c: _bias_mm(c, 40, 72, 64, F16, (3, 1, 72), batch=(3,), kernel="wgmma"), True),
    "f32_bias": (lambda c: _bias_mm(c, 64, 80, 48, F32, (80,)), True),
    "f16_bias_splitk": (lambda c: _bias_mm(c, 40, 72, 1024, F16, (72,), kernel="wgmma", SPLITK=4), True),
    "tf32_auto": (lambda c: _mm(c, 256, 256, 128, precision="tf32", tol=1e-2), True),
    "tf32_wgmma": (lambda c: _mm(c, 256, 256, 128, kernel="wgmma", precision="tf32", tol=1e-2), True),
    "tf32_wgmma_unaligned": (lambda c: _mm(c, 100, 90, 70, kernel="wgmma", precision="tf32", tol=1e-2), True),
    "tf32_wgmma_trans": (lambda c: _mm(c, 128, 192, 96, ta=True, kernel="wgmma", precision="tf32", tol=1e-2), True),
    **{
        f"wgmma_step_{k}": (lambda c, k=k: _repeat(c, 256, 256, 128, F16, kernel=k), False)
        for k in ("wgmma_tma", "wgmma_specialized", "wgmma_persistent")
    },
    # batches over more launches than one: gridDim.z's limit, split-K's workspace limit
    "f32_batch_over_grid_z": (
        lambda c: gemmlab.matmul(c.dev("a", _rand((65537, 2, 3))), c.dev("b", _rand((3, 2))), kernel="naive"),
        False,
    ),
    "pipelined_splitk_batch_chunks": (
        lambda c: _mm(c, 512, 512, 64, batch=(70,), kernel="pipelined", SPLITK=4, out="row", beta=0.5),
        False,
    ),
    # the error-corrected methods: pre-passes, the choice on the GPU, split-K
    "fp32_tc_auto": (lambda c: _ec(c, 256, 256, 128, "fp32_tc"), False),
    "fp32_tc_small": (lambda c: _ec(c, 64, 64, 64, "fp32_tc"), False),
    "fp32_tc_thin": (lambda c: _ec(c, 4, 512, 256, "fp32_tc"), False),
    "fp32_tc_ec_wgmma": (lambda c: _ec(c, 200, 136, 96, "fp32_tc", kernel="ec_wgmma"), False),
    "fp32_tc_ec_wgmma_trans": (lambda c: _ec(c, 200, 136, 96, "fp32_tc", kernel="ec_wgmma", ta=True), False),
    "fp32_tc_ec_wgmma_batched": (lambda c: _ec(c, 128, 128, 64, "fp32_tc", kernel="ec_wgmma", batch=(3,)), False),
    "fp32_tc_ec_wgmma_splitk": (lambda c: _ec(c, 128, 128, 8192, "fp32_tc", kernel="ec_wgmma", beta=0.5), False),
    "fp32_tc_ec_wmma": (lambda c: _ec(c, 128, 128, 64, "fp32_tc", kernel="ec_wmma"), False),
    "fp32_tc_ec_wmma_batched": (lambda c: _ec(c, 64, 64, 64, "fp32_tc", kernel="ec_wmma", batch=(2,)), False),
    "fp16_ec_scaled": (lambda c: _ec(c, 200, 136, 96, "fp16_ec_scaled"), False),
    "fp16_ec_scaled_long_k": (lambda c: _ec(c, 128, 128, 8192, "fp16_ec_scaled"), False),
    "fp16_ec": (lambda c: _ec(c, 200, 136, 96, "fp16_ec"), False),
    "tf32_ec": (lambda c: _ec(c, 200, 136, 96, "tf32_ec", alpha=2.0, beta=1.0), False),
    "fp16_ec_wmma": (lambda c: _ec(c, 128, 128, 64, "fp16_ec", kernel="ec_wmma"), False),
    "tf32_ec_splitk": (lambda c: _ec(c, 64, 64, 16384, "tf32_ec", kernel="ec_wgmma"), False),
    "fp32_tc_alpha0": (lambda c: _ec(c, 64, 64, 64, "fp32_tc", alpha=0.0, beta=0.5), False),
    "fp32_tc_family": (lambda c: _family(c, F32, precision="fp32_tc"), False),
    # FP8 with scales, grouped products
    "fp8_tensor": (lambda c: _fp8(c, 200, 300, 512, "tensor"), True),
    "fp8_row": (lambda c: _fp8(c, 130, 260, 384, "row"), True),
    "fp8_block": (lambda c: _fp8(c, 130, 260, 384, "block", out_dtype="float32"), True),
    "grouped_T": (lambda c: _grouped(c, 61, 40, 24, [10, 10, 35, 58], "T"), True),
    "grouped_N": (lambda c: _grouped(c, 61, 40, 24, [20, 40, 61], "N"), True),
    "grouped_wgrad": (lambda c: _grouped(c, 70, 64, 48, [10, 40, 70], "N", wgrad=True), True),
}


def _run_case(monkeypatch, name: str, direct: bool) -> list:
    fn, compute = CASES[name]
    ctx = _install(monkeypatch, compute, direct)
    fn(ctx)
    return json.loads(json.dumps(ctx.log))


def _goldens() -> dict:
    return json.loads(GOLDENS.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_launches_match_goldens(monkeypatch, name):
    want = _goldens()[name]
    assert _run_case(monkeypatch, name, direct=False) == want


@pytest.mark.parametrize("name", sorted(CASES))
def test_direct_launches_match_goldens(monkeypatch, name):
    """With the prepared calls' closures (Launcher.direct) in place, as on a GPU."""
    want = _goldens()[name]
    assert _run_case(monkeypatch, name, direct=True) == want


def main() -> None:
    out = {}
    for name in sorted(CASES):
        with pytest.MonkeyPatch.context() as mp:
            out[name] = _run_case(mp, name, direct=False)
        print(name, len(out[name]), file=sys.stderr)
    GOLDENS.parent.mkdir(exist_ok=True)
    GOLDENS.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
