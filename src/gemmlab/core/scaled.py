"""FP8 products with scales: ``gemmlab.matmul(a, b, scale_a=..., scale_b=..., out_dtype=...)``
on PyTorch float8 tensors, run by the wgmma_fp8 rung (Hopper).

Its own small path beside planner/executor: the checks (validate_scaled, each error naming
the operand and the rule, before anything touches the GPU), the plan (planner.plan_scaled:
the rung on sm_90a, or an error saying why not), and the launch on the caller's current
stream, prepared once per signature (_signature, ScaledPrepared, kept in PREPARED): a
repeated call fills in its addresses, alpha and beta by executor's mechanisms
(_address_moves, MapParams.rebound: the tensor maps pointed elsewhere, not encoded again)
and launches.  A bias is added after the product (_with_bias).  Not here: batches, operands TMA cannot
read in place (refused, not staged), CuPy and NumPy (neither has FP8 types).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .arrays import Operand, allocator, broadcasts, stream_getter
from . import executor
from .executor import PROBE_SHIFTS, PreparedCache, _address_moves, _keep, f32
from .planner import Plan, gpu_limits, plan_scaled
from ..kernels.tensor.wgmma_fp8 import (
    FP8_DTYPES,
    FP8_LAYOUT_WHY,
    FP8_OUT_DTYPES,
    Fp8Scales,
    fp8_scale_layout,
    wgmma_fp8_args,
)
from ..runtime.launch import PackedArgs
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


def validate_bias(bias, M: int, N: int, out_dtype: str, out=None) -> None:
    """An FP8 product's bias: a PyTorch tensor of the result's dtype,
    that broadcasts to the M x N result (core.arrays.broadcasts: a vector of N, torch._scaled_mm's,
    added to every row; a column (M, 1); a whole matrix), its memory apart from out's (their
    spans, Operand.meets); TypeError or ValueError naming the problem (its device:
    check_devices).  Attribute reads only: a repeated call checks its bias this way."""
    if not _is_tensor(bias):
        raise TypeError(f"bias must be a PyTorch tensor, as a and b; got {type(bias).__name__}")
    if _torch_name(bias) != out_dtype:
        raise TypeError(f"bias has dtype {_torch_name(bias)}; it must have the result's dtype, {out_dtype}")
    if not broadcasts(tuple(bias.shape), (M, N)):
        raise ValueError(f"bias has shape {tuple(bias.shape)}, which does not broadcast to the result's ({M}, {N})")
    if out is not None and _operand("bias", bias).meets(_operand("out", out)):
        raise ValueError("bias shares memory with out: the product would overwrite the bias while reading it")


def _operand(name: str, t) -> Operand:
    """A PyTorch tensor as core.arrays' Operand, from its attributes (no array interface read)."""
    return Operand(
        name, t, "torch", tuple(t.shape), tuple(t.stride()), _torch_name(t), t.device.index or 0, t.data_ptr()
    )


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


def check_devices(a, b, scale_a, scale_b, out=None, bias=None) -> None:
    """Every array of an FP8 call on one CUDA device (checked after validate_scaled, which
    reads only shapes, strides, dtypes and addresses)."""
    arrays = (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("out", out), ("bias", bias))
    for name, x in arrays:
        if x is not None and not x.is_cuda:
            raise ValueError(f"{name} is on the {x.device}; an FP8 product runs on a CUDA device")
    devices = {x.device.index for _, x in arrays if x is not None}
    if len(devices) > 1:
        raise ValueError(f"a, b, the scales, out and bias are on different devices ({sorted(devices)})")


# -- the call ----------------------------------------------------------------------------------

# What one signature of FP8 call runs (ScaledPrepared), by _signature's key: bounded, the
# oldest first out, apart from executor.CACHE (whose entries are PreparedCalls).
PREPARED = PreparedCache()
_TENSOR_TYPES: tuple = ()  # torch.Tensor and torch.nn.Parameter, once torch is imported


def _signature(a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, tile_params):
    """(key, (a, b, scale_a, scale_b, out addresses)) of a call whose arguments have exact types
    -- PyTorch tensors, alpha and beta float or int, a str kernel -- from attribute reads only:
    shapes, strides, dtypes, devices and 16-byte alignment of every tensor, out given or not,
    alpha == 0, beta == 0 and the other arguments; None for anything else (the full path)."""
    types = _TENSOR_TYPES
    if (
        type(a) not in types
        or type(b) not in types
        or type(scale_a) not in types
        or type(scale_b) not in types
        or not (type(alpha) is float or type(alpha) is int)
        or not (type(beta) is float or type(beta) is int)
        or trans_a is not False
        or trans_b is not False
        or type(kernel) is not str
        or not (out_dtype is None or type(out_dtype) is str or type(out_dtype).__name__ == "dtype")
    ):
        return None
    ptrs, key = [], ["fp8", alpha == 0, beta == 0, out_dtype, kernel]
    for x in (a, b, scale_a, scale_b, out):
        if x is None:
            ptrs.append(0)
            key.append(None)
            continue
        if type(x) not in types:
            return None
        p = x.data_ptr()
        ptrs.append(p)
        key.append((x.shape, x.stride(), x.dtype, x.get_device(), not p & 15))
    if tile_params:
        key.append(tuple((k, v, type(v)) for k, v in tile_params.items()))
    return tuple(key), ptrs


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
    bias=None,
    **tile_params,
):
    """out = alpha * (scale_a a) @ (scale_b b) + beta * out for PyTorch FP8 tensors a (M x K,
    row-major) and b (K x N, column-major: b.T of a row-major N x K), FP32 accumulation, the
    result bfloat16 (default) or float32 (``out_dtype``, or out's dtype).  The scales are
    float32 tensors on the same device, per tensor, per row of a / column of b, or 1 x 128
    (a) and 128 x 128 (b) blocks: their shapes say which (fp8_scale_shapes).  Runs on the
    caller's current PyTorch stream, on Hopper (sm_90a) only.  ``bias`` (the result's dtype,
    broadcast to M x N) is added to the result after the product (_with_bias).

    The first call of a signature (_signature) is checked and planned and what it launches
    is kept (PREPARED); later calls with the same signature fill in the addresses and launch."""
    if bias is not None:
        return _with_bias(
            a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, bias, tile_params
        )
    found = _signature(a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, tile_params)
    prepared = _prepared(found)
    if prepared is not None:
        return prepared.run(out, *found[1], alpha, beta)
    return _matmul_scaled_full(
        a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, tile_params, found
    )


def _prepared(found):
    """The prepared call of a signature (_signature's answer), or None: none, or not kept yet."""
    if found is None:
        return None
    try:
        return PREPARED.get(found[0])
    except TypeError:  # an unhashable tile parameter: the full path says what is wrong with it
        return None


def _with_bias(a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, bias, tile_params):
    """The product, then the bias added to it by PyTorch on the same stream,
    every check first, so that nothing is written on bad input: a, b, the scales and out as the
    call without a bias checks them (once per signature: a signature already prepared was
    checked when it was), then the bias (validate_bias, attribute reads).  A 16-bit result is
    rounded twice, the product's and the sum's, as an unfused addmm is: adding the bias in the
    kernel's epilogue, before its one rounding, is not built (the consumers' registers have no
    room for it in every tile), and adding it through C (out filled with the bias, beta = 1)
    measured 1.9x the product's time against this path's one pass over the result
    (benchmarks/NOTES.md)."""
    found = _signature(a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, tile_params)
    prepared = _prepared(found)
    call = (
        prepared.call
        if prepared is not None
        else validate_scaled(a, b, scale_a, scale_b, out, out_dtype, trans_a, trans_b)
    )
    validate_bias(bias, call.M, call.N, call.out_dtype, out)
    check_devices(a, b, scale_a, scale_b, out, bias)
    # the product as matmul_scaled runs it, from the signature already looked up
    if prepared is not None:
        result = prepared.run(out, *found[1], alpha, beta)
    else:
        result = _matmul_scaled_full(
            a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, tile_params, found
        )
    return result.add_(bias)


def _matmul_scaled_full(
    a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, tile_params, found
):
    """Check, plan and prepare a call (the first of its signature, or one that has none), run it."""
    global _TENSOR_TYPES
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
        **gpu_limits(gpu),
        kernel=kernel,
        **tile_params,
    )
    _tls.last_plan = p
    if not _TENSOR_TYPES:
        _TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
    if call.M == 0 or call.N == 0 or call.K == 0 or alpha == 0:
        if out is None:
            out = torch.empty((call.M, call.N), device=a.device, dtype=getattr(torch, call.out_dtype))
        if call.M == 0 or call.N == 0:
            return out
        # nothing to multiply (or scales to read): beta * out, as BLAS
        return out.zero_() if beta == 0 else out.mul_(beta)
    rt_device.make_current(gpu.ordinal)
    ldc = out.stride(0) if out is not None and call.M > 1 else call.N
    stream = stream_getter("torch")(call.device)
    prepared = ScaledPrepared(p, call, gpu, ldc, stream, new_result=out is None)
    if found is None:
        found = _signature(a, b, scale_a, scale_b, out, alpha, beta, out_dtype, trans_a, trans_b, kernel, tile_params)
    if found is not None:
        PREPARED.put(found[0], prepared)
    pc = out.data_ptr() if out is not None else 0
    return prepared.run(out, a.data_ptr(), b.data_ptr(), scale_a.data_ptr(), scale_b.data_ptr(), pc, alpha, beta)


class ScaledPrepared:
    """Plan ``p`` of a checked call made ready on ``gpu``: the kernel loaded (compiled for the
    GPU's target), its shared memory raised, its launch shape (a persistent grid of the
    clusters that fit at once), C's leading dimension ``ldc``; without out (``new_result``),
    how to allocate the result.  Its arguments are built once, at the first call's addresses,
    and once more with the addresses moved (executor._address_moves) to learn where they
    sit; other addresses, alpha and beta get a copy of the first with them replaced
    (MapParams.rebound: the tensor maps pointed elsewhere, not encoded again), kept per
    (addresses, alpha, beta) (at most executor.ARGS_KEPT)."""

    def __init__(self, p: Plan, call: ScaledCall, gpu, ldc: int, stream: int, new_result: bool = False):
        from ..runtime import compile as rt_compile
        from ..runtime import device as rt_device
        from ..runtime import launch as rt_launch

        self.plan, self.call, self.gpu, self.ldc, self.device = p, call, gpu, int(ldc), call.device
        spec = p.spec
        self.kernel = rt_compile.load_kernel(spec.source_path, p.name_expression, gpu.arch)
        geo = spec.launch(p.params, p.problem)
        rt_launch.allow_dynamic_smem(self.kernel, geo.smem_bytes, gpu.ordinal)
        grid = geo.grid
        if geo.cluster != (1, 1, 1):
            fit = rt_launch.clusters_that_fit(self.kernel, grid, geo.block, geo.smem_bytes, geo.cluster, stream)
            if fit < 1:
                raise RuntimeError(f"{p.describe()}: no cluster of {geo.cluster} blocks fits on {gpu.name}")
            grid = (min(grid[0], fit * geo.cluster[0]), 1, 1)
        self.shape = rt_launch.LaunchShape(grid, geo.block, geo.smem_bytes, geo.cluster)
        # Bound now, so that a call does not look them up (and tests may replace them).
        self._launch, self._make_current = rt_launch.launch_shaped, rt_device.make_current
        self.stream = stream_getter("torch")
        self.alloc = allocator("torch", (call.M, call.N), call.device, call.out_dtype) if new_result else None
        self._args = {}  # (A, B, C, scale_a, scale_b, alpha, beta) -> the packed arguments
        # The first build and where it holds the addresses (_address_moves), or None where a
        # copy cannot follow them (every new set is built then).
        self._first = self._moves = None

    def build(self, A: int, B: int, C: int, scale_a: int, scale_b: int, alpha, beta) -> PackedArgs:
        """05_wgmma_fp8.cu's arguments for these addresses, built from nothing (wgmma_fp8_args)."""
        call = self.call
        am, ak, bn, bk = call.scale_strides
        ops = Operands(A, call.lda, B, call.ldb, C, self.ldc)
        return PackedArgs(wgmma_fp8_args(self.plan, ops, alpha, beta, Fp8Scales(scale_a, am, ak, scale_b, bn, bk)))

    def args(self, A: int, B: int, C: int, scale_a: int, scale_b: int, alpha, beta) -> PackedArgs:
        """The launch's arguments on these addresses: kept, moved from the first build, or built."""
        key = (A, B, C, scale_a, scale_b, alpha, beta)
        args = self._args.get(key)
        if args is not None:
            return args
        addresses = key[:5]
        if self._moves:
            args = self._moved(addresses, alpha, beta)
        else:
            args = self.build(*key)
            if self._first is None:  # the first build: where do the addresses sit?
                self._first = args
                shifted = tuple(x + d for x, d in zip(addresses, PROBE_SHIFTS))
                probe = self.build(*shifted, alpha, beta)
                at = _address_moves(((), args, self.shape), ((), probe, self.shape), addresses)
                self._moves = executor.Moves(((), args, self.shape), at) if at is not None else False
        _keep(self._args, key, args)
        return args

    def _moved(self, addresses, alpha, beta) -> PackedArgs:
        """The first build with ``addresses`` (A, B, C, scale_a, scale_b), alpha and beta
        (standard_args' positions 3 and 8) put in (executor._moved)."""
        scalars = ((_ALPHA_AT, f32(alpha)), (_BETA_AT, f32(beta)))
        return executor._moved(self._moves, addresses, scalars)[1]

    def launch(self, stream: int, A: int, B: int, C: int, scale_a: int, scale_b: int, alpha, beta) -> None:
        """Enqueue the product on ``stream`` (a, b, out, the scales at these addresses)."""
        self._launch(self.kernel, self.shape, stream, self.args(A, B, C, scale_a, scale_b, alpha, beta))

    def run(self, out, A: int, B: int, scale_a: int, scale_b: int, C: int, alpha, beta):
        """The call on these tensors (out None: a new result, allocated here; C: out's address),
        on the caller's current stream; returns the result."""
        dev = self.device
        self._make_current(dev)
        if out is None:
            out, C = self.alloc()
        self.launch(self.stream(dev), A, B, C, scale_a, scale_b, alpha, beta)
        _tls.last_plan = self.plan
        return out


# Where standard_args puts alpha and beta (M, N, K, alpha, A, lda, B, ldb, beta, C, ...).
_ALPHA_AT, _BETA_AT = 3, 8


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
    """Enqueue plan ``p`` of a checked call on ``stream``, once (ScaledPrepared, not kept): the
    harness's kernel-only path and the tests' emulated launch."""
    prepared = ScaledPrepared(p, call, gpu, ldc, stream)
    prepared._launch(prepared.kernel, prepared.shape, stream, prepared.build(A, B, C, scale_a, scale_b, alpha, beta))
