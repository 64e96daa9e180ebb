"""`gemmlab bench --suite fp8`: the FP8 rung (wgmma_fp8, Hopper) beside torch._scaled_mm.

Each size is one product on e4m3 operands (a row-major M x K, b column-major K x N, as
torch._scaled_mm takes them), a bfloat16 result, timed through the public calls, host time
included (path "public", as suites.time_size): torch._scaled_mm with per-tensor scales
(use_fast_accum off, then on; its per-row scales where this PyTorch has them) as the
baseline, torch.matmul and gemmlab.matmul on bfloat16 copies of the operands, and
gemmlab.matmul(a, b, scale_a=, scale_b=) with per-tensor, per-row and 1 x 128 / 128 x 128
block scales for each kernel entry (default: ``auto``, and wgmma_fp8 with PROMOTE=0, the
fast accumulation; ``--kernels wgmma_fp8:BM=128,BN=256,STAGES=4,PROMOTE=1`` adds others).
With ``kernel_only`` each is also timed back to back (path "kernel": gemmlab's prepared
launch alone, torch's calls back to back).  Every result is checked against FP64 on the
dequantised operands.  On a GPU other than Hopper (sm_90a) the suite refuses, saying so.
"""

from __future__ import annotations

import time
from functools import partial


from .suites import Record, Timer, _progress, _tflops, bench_gpu, timed_paths

# Public FP8 shapes (M x N x K): square ones, and the linear layers of Llama-3-8B (hidden
# 4096, MLP 14336, 8 KV heads of 128) and Llama-3-70B (hidden 8192, MLP 28672, 8 KV heads
# of 128) at a few token counts M: fused QKV, attention output, gate or up, down.
SQUARE_SHAPES = [(4096, 4096, 4096), (8192, 8192, 4096), (8192, 8192, 8192), (2048, 7168, 4096)]
LLAMA_LAYERS = {
    "llama3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (14336, 4096), "down": (4096, 14336)},
    "llama3-70b": {"qkv": (10240, 8192), "o": (8192, 8192), "gate_up": (28672, 8192), "down": (8192, 28672)},
}
TOKENS = (2048, 4096, 8192)
SCALINGS = ("tensor", "row", "block")
# gemmlab's FP8 calls timed by default: auto, and the fast accumulation (no promotion).
DEFAULT_ENTRIES = [("auto", {}), ("wgmma_fp8", {"PROMOTE": 0})]
DTYPE = "float8_e4m3fn->bfloat16"


def fp8_shapes() -> list[tuple[int, int, int, str]]:
    """(M, N, K, where the shape comes from) of every product the suite times."""
    out = [(M, N, K, "square" if M == N == K else "public FP8 benchmark") for M, N, K in SQUARE_SHAPES]
    for model, layers in LLAMA_LAYERS.items():
        for tokens in TOKENS:
            for name, (N, K) in layers.items():
                if all((tokens, N, K) != shape[:3] for shape in out):  # square ones come once
                    out.append((tokens, N, K, f"{model} {name}, {tokens} tokens"))
    return out


def scale_shapes(kind: str, M: int, N: int, K: int) -> tuple[tuple, tuple]:
    """The shapes of scale_a and scale_b for scaling ``kind`` (gemmlab.core.scaled's)."""
    kb, nb = -(-K // 128), -(-N // 128)
    return {"tensor": ((), ()), "row": ((M, 1), (1, N)), "block": ((M, kb), (nb, kb))}[kind]


def require_hopper(gpu) -> None:
    """Refuse anything but Hopper: the FP8 rung is built for sm_90a only."""
    if gpu.arch != "sm_90a":
        raise ValueError(
            f"--suite fp8 needs a Hopper GPU (sm_90a): gemmlab's FP8 rung (wgmma_fp8) runs there only; "
            f"GPU {gpu.ordinal} is {gpu.name} ({gpu.arch})"
        )


class _Fp8Operands:
    """One size's e4m3 operands, their bfloat16 copies, scales of each kind (powers of two near
    the values' spread), an output poisoned with NaN before each checked run, and the FP64
    reference of each kind of scaling."""

    def __init__(self, M, N, K, seed: int):
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        self.shape = (M, N, K)
        self.a = (torch.randn(M, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        self.b = (torch.randn(N, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()
        self.a16, self.b16 = self.a.to(torch.bfloat16), self.b.to(torch.bfloat16)
        self.c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        self.scales = {}
        for kind in SCALINGS:
            sa, sb = scale_shapes(kind, M, N, K)
            self.scales[kind] = tuple(
                torch.exp2(torch.randint(-2, 3, s, device="cuda", generator=g).float()) for s in (sa, sb)
            )
        self._ref = {}

    def reference(self, kind: str):
        """FP64 of the dequantised operands with scales of ``kind`` (None: unscaled)."""
        import torch

        if kind not in self._ref:
            a, b = self.a.double(), self.b.double()
            if kind is None:
                ref = a @ b
            elif kind == "block":
                sa, sb = (s.double() for s in self.scales[kind])
                M, N, K = self.shape
                ref = torch.zeros(M, N, device="cuda", dtype=torch.float64)
                for k in range(-(-K // 128)):
                    ks = slice(128 * k, 128 * k + 128)
                    ref += (a[:, ks] @ b[ks, :]) * sa[:, k : k + 1] * sb[:, k].repeat_interleave(128)[:N][None, :]
            else:
                sa, sb = (s.double() for s in self.scales[kind])
                ref = (sa.reshape(-1, 1) * a) @ (b * sb.reshape(1, -1))
            self._ref[kind] = ref
        return self._ref[kind]

    def error(self, fn, kind) -> float:
        """Relative Frobenius error of ``fn()``'s result (into c or returned) against FP64."""
        import torch

        self.c.fill_(float("nan"))
        out = fn()
        out = self.c if out is None else out
        torch.cuda.synchronize()
        ref = self.reference(kind)
        return float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))


def _torch_scaled_mm(ops: _Fp8Operands, kind: str, fast: bool):
    import torch

    sa, sb = ops.scales[kind]
    return partial(torch._scaled_mm, ops.a, ops.b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)


def _gemmlab_kernel_only(ops: _Fp8Operands, kind: str, gpu):
    """gemmlab's last FP8 plan launched alone: a prepared launch (arguments built once)."""
    import torch

    from ...core import scaled

    sa, sb = ops.scales[kind]
    p = scaled.last_scaled_plan()
    call = scaled.validate_scaled(ops.a, ops.b, sa, sb, out_dtype="bfloat16")
    stream = torch.cuda.current_stream().cuda_stream
    prepared = scaled.ScaledPrepared(p, call, gpu, ops.shape[1], stream)
    ptrs = (ops.a.data_ptr(), ops.b.data_ptr(), ops.c.data_ptr(), sa.data_ptr(), sb.data_ptr())
    return partial(prepared.launch, stream, *ptrs, 1.0, 0.0)


def run(
    shapes=None,
    *,
    entries=None,
    reps: int = 20,
    flush: bool = True,
    max_run_s: float = 3.0,
    budget_s: float = 1.0,
    quiet: bool = False,
    seed: int = 0,
    kernel_only: bool = False,
) -> list[Record]:
    """Time every shape (``shapes``: (M, N, K) or (M, N, K, origin); default fp8_shapes()) as
    the module docstring says; ``entries``: gemmlab's FP8 kernels, [(kernel, tile params)]."""
    import torch

    from ...core import api

    gpu = bench_gpu()
    require_hopper(gpu)
    entries = entries or DEFAULT_ENTRIES
    timer = Timer(gpu.l2_bytes, reps, flush, max_run_s, budget_s)
    paths = timed_paths(kernel_only)
    shapes = [tuple(s) + ("",) * (4 - len(s)) for s in (shapes or fp8_shapes())]
    records: list[Record] = []
    t0 = time.time()

    def say(msg):
        _progress(f"  {msg}  ({time.time() - t0:.0f} s)", quiet)

    for M, N, K, origin in shapes:
        if K % 16:
            raise ValueError(f"{M}x{N}x{K}: FP8 operands need K a multiple of 16 (TMA's 16-byte rows)")
        ops = _Fp8Operands(M, N, K, seed)
        tflops = partial(_tflops, M, N, K)
        # (kernel, params, note, public call, kernel-only call or None (the same, back to back),
        # scaling of the reference)
        rows = [
            ("torch._scaled_mm", {"scaling": "tensor"}, "use_fast_accum=False", _torch_scaled_mm(ops, "tensor", False))
            + (None, "tensor"),
            ("torch._scaled_mm", {"scaling": "tensor", "fast_accum": 1}, "use_fast_accum=True")
            + (_torch_scaled_mm(ops, "tensor", True), None, "tensor"),
            ("torch._scaled_mm", {"scaling": "row"}, "use_fast_accum=False", _torch_scaled_mm(ops, "row", False))
            + (None, "row"),
            ("torch.matmul", {"dtype": "bfloat16"}, "cuBLAS on bfloat16 copies")
            + (partial(torch.matmul, ops.a16, ops.b16, out=ops.c), None, None),
            ("gemmlab bf16", {"dtype": "bfloat16"}, "gemmlab.matmul, auto, on bfloat16 copies")
            + (partial(api.matmul, ops.a16, ops.b16, out=ops.c), None, None),
        ]
        for kind in SCALINGS:
            sa, sb = ops.scales[kind]
            for kernel, params in entries:
                call = partial(api.matmul, ops.a, ops.b, scale_a=sa, scale_b=sb, out=ops.c, kernel=kernel, **params)
                rows.append((f"gemmlab fp8 {kernel}", {"scaling": kind, **params}, "", call, "gemmlab", kind))
        baseline = {}
        for kernel, params, note, public, alone, kind in rows:
            timed, errs = {}, {}
            for path in paths:
                fn = public
                if path == "kernel" and alone == "gemmlab":
                    public()  # the plan this call runs, for the prepared launch alone
                    fn = _gemmlab_kernel_only(ops, kind, gpu)
                try:
                    t = timer(fn, path)
                    errs[path] = None if t.skipped else ops.error(fn, kind)
                except RuntimeError as exc:  # a scaling this PyTorch's _scaled_mm does not take
                    t = None
                    errs[path] = str(exc).splitlines()[0][:200]
                timed[path] = t
            if alone == "gemmlab":
                p = api.last_plan()
                note = f"{p.describe()}" + (f"; {p.reason}" if p.reason else "")
            for path in paths:
                t = timed[path]
                if t is not None and not t.skipped and kernel == "torch._scaled_mm" and params == {"scaling": "tensor"}:
                    baseline[path] = t.ms
                ms = None if t is None or t.skipped else t.ms
                base = baseline.get(path)
                skipped = (t.skipped if t is not None else f"not run: {errs[path]}") if ms is None else None
                records.append(
                    Record(
                        gpu.name,
                        kernel,
                        params,
                        M,
                        N,
                        K,
                        DTYPE,
                        ms,
                        tflops(ms),
                        base,
                        tflops(base),
                        100.0 * base / ms if (ms and base) else None,
                        None,
                        errs[path] if ms is not None else None,
                        len(t.ms_all) if t is not None else 0,
                        skipped,
                        note=(origin + "; " if origin else "") + note,
                        ops="NT",
                        path=path,
                    )
                )
                say(
                    f"{kernel} {params} {M}x{N}x{K} {path}: "
                    + (f"{ms:.3f} ms, {tflops(ms):.0f} TFLOPS, err {errs[path]:.1e}" if ms else f"skipped: {skipped}")
                )
        del ops
        torch.cuda.empty_cache()
    return records
