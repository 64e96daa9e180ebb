"""FP8 products with scales: ``gemmlab.matmul(a, b, scale_a=..., scale_b=..., out_dtype=...)``
on PyTorch float8 tensors, run by the wgmma_fp8 rung (Hopper).

Its own small path beside planner/executor: the checks (validate_scaled, each error naming
the operand and the rule, before anything touches the GPU), the plan (planner.plan_scaled:
the rung on sm_90a, or an error saying why not), and one launch on the caller's current
stream (matmul_scaled).  Not yet here: prepared calls kept per signature (every call plans and
builds its two tensor maps; the maps are cached by address in runtime.tma), batches, a
bias, operands TMA cannot read in place (refused, not staged), CuPy and NumPy (neither has
FP8 types).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .planner import Plan, plan_scaled
from ..kernels.tensor.wgmma_fp8 import (
    FP8_DTYPES,
    FP8_LAYOUT_WHY,
    FP8_OUT_DTYPES,
    Fp8Scales,
    fp8_scale_layout,
    wgmma_fp8_args,
)
from ..runtime.tma import Operands

_tls = threading.local()


def last_scaled_plan() -> Plan | None:
    """The plan of this thread's last FP8 call (gemmlab.last_plan() returns it too)."""
    return getattr(_tls, "last_plan", None)


# -- the checks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaledCall:
    """An FP8 call, checked: sizes, types, the scaling and where everything is."""

    M: int
    N: int
    K: int
    dtype: str
    dtype_b: str
    out_dtype: str
    scaling: str
    scale_strides: tuple  # (a_m, a_k, b_n, b_k), Fp8Scales'
    lda: int
    ldb: int
    device: int


def _torch_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "stride")


def _dtype_name(x) -> str | None:
    """A dtype argument as gemmlab names it: None, a string, or a torch / NumPy dtype."""
    if x is None:
        return None
    if isinstance(x, str):
        return x
    text = str(x)
    return text.replace("torch.", "") if text.startswith("torch.") else str(np.dtype(x))


def validate_scaled(a, b, scale_a, scale_b, out=None, out_dtype=None, trans_a=False, trans_b=False) -> ScaledCall:
    """Every check of an FP8 call but where its arrays are (check_devices), in the order a caller
    wants to hear of problems; TypeError or ValueError naming the operand and the rule.
    Nothing here touches the GPU."""
    for name, x in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if x is None:
            raise ValueError(
                "an FP8 product needs both scale_a and scale_b (float32 tensors; ones for unscaled operands)"
            )
        if not _is_tensor(x):
            raise TypeError(
                f"{name} must be a PyTorch tensor for an FP8 product (NumPy and CuPy have no FP8 types); "
                f"got {type(x).__name__}"
            )
    if trans_a or trans_b:
        raise ValueError("FP8 products take trans_a=False, trans_b=False: pass a.t() or b.t() themselves")
    for name, x in (("a", a), ("b", b)):
        if _torch_name(x) not in FP8_DTYPES:
            raise TypeError(
                f"{name} has dtype {_torch_name(x)}; with scale_a / scale_b both operands are FP8 "
                f"({', '.join('torch.' + d for d in FP8_DTYPES)})"
            )
        if x.dim() != 2:
            raise ValueError(f"{name} has {x.dim()} dimensions; FP8 products take matrices (2-D) only so far")
    (M, K), (K2, N) = tuple(a.shape), tuple(b.shape)
    if K != K2:
        raise ValueError(f"a is {M} x {K} and b is {K2} x {N}: their inner dimensions differ")
    for name, x in (("scale_a", scale_a), ("scale_b", scale_b)):
        if _torch_name(x) != "float32":
            raise TypeError(f"{name} has dtype {_torch_name(x)}; scales are float32")
    # Layouts: K contiguous in both (A stored M x K, B stored N x K).
    sa, sb = tuple(a.stride()), tuple(b.stride())
    a_ok = (K <= 1 or sa[1] == 1) and (M <= 1 or sa[0] >= max(K, 1))
    b_ok = (K <= 1 or sb[0] == 1) and (N <= 1 or sb[1] >= max(K, 1))
    if not a_ok:
        raise ValueError(
            f"a ({M} x {K}, strides {sa}) is not row-major with K contiguous (layout 'N'); {FP8_LAYOUT_WHY}. "
            "Pass a.contiguous()"
        )
    if not b_ok:
        raise ValueError(
            f"b ({K} x {N}, strides {sb}) is not column-major with K contiguous (layout 'T'); {FP8_LAYOUT_WHY}. "
            "A row-major K x N b is layout 'N': pass b.t().contiguous().t()"
        )
    lda = sa[0] if M > 1 else max(K, 1)
    ldb = sb[1] if N > 1 else max(K, 1)
    for name, x, ld, rows in (("a", a, lda, M), ("b", b, ldb, N)) if M and N and K else ():  # empty: nothing read
        if x.data_ptr() % 16 or (rows > 1 and ld % 16):
            raise ValueError(
                f"{name}: TMA reads FP8 operands at 16-byte aligned addresses with rows a multiple of 16 "
                f"bytes apart (here address {x.data_ptr():#x}, rows {ld} bytes apart: K or the padded row a "
                "multiple of 16); a staging copy of FP8 operands is not built yet"
            )
    scaling, strides = fp8_scale_layout(
        M, N, K, tuple(scale_a.shape), tuple(scale_a.stride()), tuple(scale_b.shape), tuple(scale_b.stride())
    )
    want = _dtype_name(out_dtype)
    if out is not None:
        have = _torch_name(out)
        if want is not None and want != have:
            raise TypeError(f"out_dtype {want} differs from out's dtype {have}")
        want = have
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out has shape {tuple(out.shape)}; the product is {M} x {N}")
        if N > 1 and out.stride(1) != 1 or M > 1 and out.stride(0) < N:
            raise ValueError(f"out (strides {tuple(out.stride())}) must be row-major with unit column stride")
    want = want or "bfloat16"
    if want not in FP8_OUT_DTYPES:
        raise TypeError(f"FP8 products write {' or '.join(FP8_OUT_DTYPES)}, not {want}")
    return ScaledCall(M, N, K, _torch_name(a), _torch_name(b), want, scaling, strides, lda, ldb, a.device.index or 0)


def check_devices(a, b, scale_a, scale_b, out=None) -> None:
    """Every array of an FP8 call on one CUDA device (checked after validate_scaled, which
    reads only shapes, strides, dtypes and addresses)."""
    for name, x in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("out", out)):
        if x is not None and not x.is_cuda:
            raise ValueError(f"{name} is on the {x.device}; an FP8 product runs on a CUDA device")
    devices = {x.device.index for x in (a, b, scale_a, scale_b, out) if x is not None}
    if len(devices) > 1:
        raise ValueError(f"a, b, the scales and out are on different devices ({sorted(devices)})")


# -- the call ----------------------------------------------------------------------------------


def matmul_scaled(
    a,
    b,
    scale_a,
    scale_b,
    *,
    out=None,
    alpha=1.0,
    beta=0.0,
    out_dtype=None,
    trans_a=False,
    trans_b=False,
    kernel: str = "auto",
    **tile_params,
):
    """out = alpha * (scale_a a) @ (scale_b b) + beta * out for PyTorch FP8 tensors a (M x K,
    row-major) and b (K x N, column-major: b.T of a row-major N x K), FP32 accumulation, the
    result bfloat16 (default) or float32 (``out_dtype``, or out's dtype).  The scales are
    float32 tensors on the same device, per tensor, per row of a / column of b, or 1 x 128
    (a) and 128 x 128 (b) blocks: their shapes say which (fp8_scale_shapes).  Runs on the
    caller's current PyTorch stream, on Hopper (sm_90a) only."""
    import torch

    from ..runtime import device as rt_device

    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise TypeError(f"alpha must be a real number; got {type(alpha).__name__}")
    if not isinstance(beta, (int, float)) or isinstance(beta, bool):
        raise TypeError(f"beta must be a real number; got {type(beta).__name__}")
    if beta != 0 and out is None:
        raise ValueError("beta != 0 needs out (the C it scales)")
    call = validate_scaled(a, b, scale_a, scale_b, out, out_dtype, trans_a, trans_b)
    check_devices(a, b, scale_a, scale_b, out)
    gpu = rt_device.gpu_info(call.device)
    p = plan_scaled(
        call.M,
        call.N,
        call.K,
        call.dtype,
        call.dtype_b,
        call.out_dtype,
        call.scaling,
        arch=gpu.arch,
        sm_count=gpu.sm_count,
        gpu_name=gpu.name,
        smem_limit=gpu.max_smem_per_block_optin,
        kernel=kernel,
        **tile_params,
    )
    _tls.last_plan = p
    if out is None:
        out = torch.empty((call.M, call.N), device=a.device, dtype=getattr(torch, call.out_dtype))
    if call.M == 0 or call.N == 0:
        return out
    if call.K == 0 or alpha == 0:  # nothing to multiply (or scales to read): beta * out, as BLAS
        return out.zero_() if beta == 0 else out.mul_(beta)
    rt_device.make_current(gpu.ordinal)
    stream = torch.cuda.current_stream(a.device).cuda_stream
    launch_scaled(
        p,
        call,
        gpu,
        stream,
        a.data_ptr(),
        b.data_ptr(),
        out.data_ptr(),
        out.stride(0) if call.M > 1 else call.N,
        scale_a.data_ptr(),
        scale_b.data_ptr(),
        alpha,
        beta,
    )
    return out


def launch_scaled(
    p: Plan,
    call: ScaledCall,
    gpu,
    stream: int,
    A: int,
    B: int,
    C: int,
    ldc: int,
    scale_a: int,
    scale_b: int,
    alpha,
    beta,
) -> None:
    """Enqueue plan ``p`` of a checked call on ``stream``: the kernel (compiled for the GPU's
    target), its shared memory raised, a persistent grid of the clusters that fit at once,
    and its arguments (the tensor maps of A and B, the scales' addresses and strides)."""
    from ..runtime import compile as rt_compile
    from ..runtime.launch import LaunchShape, PackedArgs, allow_dynamic_smem, clusters_that_fit, launch_shaped

    spec = p.spec
    kernel = rt_compile.load_kernel(spec.source_path, p.name_expression, gpu.arch)
    geo = spec.launch(p.params, p.problem)
    allow_dynamic_smem(kernel, geo.smem_bytes, gpu.ordinal)
    grid = geo.grid
    if geo.cluster != (1, 1, 1):
        fit = clusters_that_fit(kernel, grid, geo.block, geo.smem_bytes, geo.cluster, stream)
        if fit < 1:
            raise RuntimeError(f"{p.describe()}: no cluster of {geo.cluster} blocks fits on {gpu.name}")
        grid = (min(grid[0], fit * geo.cluster[0]), 1, 1)
    am, ak, bn, bk = call.scale_strides
    args = wgmma_fp8_args(
        p, Operands(A, call.lda, B, call.ldb, C, ldc), alpha, beta, Fp8Scales(scale_a, am, ak, scale_b, bn, bk)
    )
    # PackedArgs: tensor maps are packed by runtime.launch.MapParams (cuda.core's packer takes none).
    launch_shaped(kernel, LaunchShape(grid, geo.block, geo.smem_bytes, geo.cluster), stream, PackedArgs(args))
