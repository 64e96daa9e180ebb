"""Grouped products for mixture-of-experts layers: ``gemmlab.grouped_mm(a, b, offs)`` on
PyTorch float16 / bfloat16 CUDA tensors, run by the grouped rung (Hopper).

    out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g]     for each group g (offs[-1] = 0)

a is (T, K) row-major (the router's tokens sorted by expert), b (G, K, N) row-major or the
transpose of a row-major (G, N, K) (``W.transpose(-2, -1)``, as ``x @ W_e.t()`` multiplies),
offs G int32 cumulative ends on the same device, as torch._grouped_mm takes them.  One
launch for every group; the offsets are read on the GPU, never by the host.

Its own small path beside planner/executor, as FP8's (core/scaled.py): the checks
(validate_grouped, each error naming the operand and the rule, before anything is written),
the plan (planner.plan_grouped), and the launch on the caller's current stream, prepared
once per signature (GroupedPrepared, kept in PREPARED).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .arrays import allocator, stream_getter
from .executor import PreparedCache, _keep
from .planner import Plan, gpu_limits, plan_grouped, plan_grouped_wgrad
from ..kernels.tensor.grouped import GROUPED_ALIGN, GROUPED_DTYPES, GROUPED_MAX_GROUPS, GroupedOperands, grouped_args
from ..kernels.tensor.grouped_wgrad import WgradOperands, grouped_wgrad_args
from ..runtime.launch import PackedArgs

_tls = threading.local()


def last_grouped_plan() -> Plan | None:
    """The plan of this thread's last grouped call (gemmlab.last_plan() returns it too)."""
    return getattr(_tls, "last_plan", None)


# -- the checks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupedCall:
    """A grouped call, checked: sizes, type, B's layout and how every array is laid out
    (elements): a's rows lda apart, b's rows ldb and matrices sb apart, out's rows ldc apart
    (None: a new out)."""

    T: int
    N: int
    K: int
    G: int
    dtype: str
    op_b: str
    lda: int
    ldb: int
    sb: int
    ldc: int | None
    device: int


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "stride")


def _name(x) -> str:
    return str(x.dtype).replace("torch.", "")


def validate_grouped(a, b, offs, out=None, out_dtype=None) -> GroupedCall:
    """Every check of a grouped call but where its arrays are (check_devices), in the order a
    caller wants to hear of problems; TypeError or ValueError naming the operand and the rule.
    Nothing here touches the GPU or writes anything."""
    for name, x in (("a", a), ("b", b), ("offs", offs)):
        if not _is_tensor(x):
            raise TypeError(f"grouped_mm takes PyTorch tensors; {name} is a {type(x).__name__}")
    if _name(a) not in GROUPED_DTYPES:
        raise TypeError(f"a has dtype {_name(a)}; grouped_mm multiplies {' or '.join(GROUPED_DTYPES)}")
    if b.dtype != a.dtype:
        raise TypeError(f"b has dtype {_name(b)} and a {_name(a)}: grouped_mm takes one dtype")
    if a.dim() != 2 or b.dim() != 3:
        raise ValueError(f"grouped_mm takes a 2-D a (T, K) and a 3-D b (G, K, N); a is {a.dim()}-D and b {b.dim()}-D")
    (T, K), (G, K2, N) = tuple(a.shape), tuple(b.shape)
    if K != K2:
        raise ValueError(f"a is {T} x {K} and b is {G} x {K2} x {N}: their inner dimensions differ")
    if _name(offs) != "int32" or offs.dim() != 1 or offs.shape[0] != G:
        raise ValueError(
            f"offs must be a 1-D int32 tensor of the {G} groups' cumulative row ends; it is "
            f"{offs.dim()}-D {_name(offs)} of shape {tuple(offs.shape)}"
        )
    if G > GROUPED_MAX_GROUPS:
        raise ValueError(f"grouped_mm takes at most {GROUPED_MAX_GROUPS} groups, not {G}")
    if K % GROUPED_ALIGN or N % GROUPED_ALIGN:
        raise ValueError(
            f"grouped_mm needs K and N multiples of {GROUPED_ALIGN} (TMA reads rows that start 16 bytes "
            f"apart); here K = {K}, N = {N}"
        )
    sa, sb_ = tuple(a.stride()), tuple(b.stride())
    if T > 0 and K > 0 and (sa[1] != 1 or (T > 1 and sa[0] < K)):
        raise ValueError(f"a ({T} x {K}, strides {sa}) must be row-major with unit column stride: pass a.contiguous()")
    lda = sa[0] if T > 1 else max(K, 1)
    if sb_[2] == 1 and (K <= 1 or sb_[1] >= N):
        op_b, ldb = "N", sb_[1] if K > 1 else max(N, 1)
    elif sb_[1] == 1 and (N <= 1 or sb_[2] >= K):
        op_b, ldb = "T", sb_[2] if N > 1 else max(K, 1)
    else:
        raise ValueError(
            f"b ({G} x {K} x {N}, strides {sb_}) is neither row-major (G, K, N) nor the transpose of a "
            "row-major (G, N, K) (W.transpose(-2, -1)): pass b.contiguous()"
        )
    sbatch = sb_[0] if G > 1 else 0
    if G > 1 and sbatch <= 0:
        raise ValueError(
            f"b's matrices must lie apart (its stride over G is {sbatch}: an expanded b is not read); "
            "pass b.contiguous()"
        )
    if T and N and K and G:  # operands TMA reads
        for name, x, ld, step in (("a", a, lda, 0), ("b", b, ldb, sbatch)):
            if x.data_ptr() % 16 or ld % GROUPED_ALIGN or step % GROUPED_ALIGN:
                raise ValueError(
                    f"{name}: TMA reads it at a 16-byte aligned address with rows (and b's matrices) a multiple "
                    f"of 16 bytes apart; here address {x.data_ptr():#x}, rows {ld} elements apart"
                    + (f", matrices {step}" if name == "b" else "")
                )
    if out_dtype is not None and str(out_dtype).replace("torch.", "") != _name(a):
        raise TypeError(f"grouped_mm writes its inputs' dtype ({_name(a)}), not {str(out_dtype).replace('torch.', '')}")
    ldc = None
    if out is not None:
        if not _is_tensor(out) or out.dtype != a.dtype:
            raise TypeError(f"out must be a {_name(a)} tensor, as a and b")
        if tuple(out.shape) != (T, N):
            raise ValueError(f"out has shape {tuple(out.shape)}; the product is {T} x {N}")
        so = tuple(out.stride())
        if T and N and (so[1] != 1 and N > 1 or T > 1 and so[0] < N):
            raise ValueError(f"out (strides {so}) must be row-major with unit column stride")
        ldc = so[0] if T > 1 else max(N, 1)
    return GroupedCall(T, N, K, G, _name(a), op_b, lda, ldb, sbatch, ldc, a.device.index or 0)


def check_devices(a, b, offs, out=None, names=("a", "b"), call="grouped_mm") -> None:
    """Every array of a grouped call on one CUDA device (checked after validate_grouped)."""
    for name, x in ((names[0], a), (names[1], b), ("offs", offs), ("out", out)):
        if x is not None and not x.is_cuda:
            raise ValueError(f"{name} is on the {x.device}; {call} runs on a CUDA device")
    devices = {x.device.index for x in (a, b, offs, out) if x is not None}
    if len(devices) > 1:
        raise ValueError(f"{names[0]}, {names[1]}, offs and out are on different devices ({sorted(devices)})")


# -- the call ----------------------------------------------------------------------------------

# What one signature of grouped call runs (GroupedPrepared), by _signature's key.
PREPARED = PreparedCache()


def _signature(a, b, offs, out, kernel, tile_params):
    """The key of a call from attribute reads only: shapes, strides, dtypes, devices and
    16-byte alignment of every tensor, out given or not, the kernel and tile parameters; None
    where an argument is not a plain tensor (the full path checks it)."""
    import torch

    key = ["grouped", kernel]
    for x in (a, b, offs, out):
        if x is None:
            key.append(None)
            continue
        if type(x) is not torch.Tensor:
            return None
        key.append((x.shape, x.stride(), x.dtype, x.get_device(), not x.data_ptr() & 15))
    if tile_params:
        key.append(tuple((k, v, type(v)) for k, v in tile_params.items()))
    return tuple(key)


def grouped_mm(a, b, offs, *, out=None, out_dtype=None, kernel: str = "auto", **tile_params):
    """out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g] for every group g (offs[-1] = 0), in
    one launch (module docstring); returns out, new where not given.  Rows past offs[G-1] are
    not written.  The offsets are not checked (that would wait for the GPU): each is clamped
    into [0, T], a group ending before it starts is empty and the next one starts at that
    end (group_bounds), so that no offset makes the kernel touch memory outside a, b and out;
    offsets that decrease give overlapping groups, whose shared rows hold either product.  Runs on the caller's current PyTorch stream,
    on Hopper (sm_90a) only."""
    key = _signature(a, b, offs, out, kernel, tile_params)
    prepared = None
    if key is not None:
        try:
            prepared = PREPARED.get(key)
        except TypeError:  # an unhashable tile parameter: the full path says what is wrong with it
            key = None
    if prepared is None:
        prepared = _prepare(a, b, offs, out, out_dtype, kernel, tile_params)
        if prepared is None:
            return _nothing_to_multiply(a, b, out)
        if key is not None:
            PREPARED.put(key, prepared)
    elif out_dtype is not None:
        validate_grouped(a, b, offs, out, out_dtype)
    return prepared.run(out, a.data_ptr(), b.data_ptr(), offs.data_ptr(), out.data_ptr() if out is not None else 0)


def _prepare(a, b, offs, out, out_dtype, kernel, tile_params):
    """Check and plan a call, and make it ready (GroupedPrepared); None where it launches
    nothing (no rows, columns or groups; K = 0)."""
    from ..runtime import device as rt_device

    call = validate_grouped(a, b, offs, out, out_dtype)
    check_devices(a, b, offs, out)
    gpu = rt_device.gpu_info(call.device)
    p = plan_grouped(
        call.T,
        call.N,
        call.K,
        call.G,
        call.dtype,
        call.op_b,
        **gpu_limits(gpu),
        kernel=kernel,
        **tile_params,
    )
    _tls.last_plan = p
    if call.T == 0 or call.N == 0 or call.K == 0 or call.G == 0:
        return None
    rt_device.make_current(gpu.ordinal)
    ldc = call.ldc if call.ldc is not None else call.N

    def build(A, B, C, offs):
        return grouped_args(p, GroupedOperands(A, call.lda, B, call.ldb, call.sb, C, ldc, offs))

    return GroupedPrepared(p, gpu, call.device, (call.T, call.N), call.dtype, build)


def _nothing_to_multiply(a, b, out):
    """A call without a product to launch: no rows or columns (an empty out), no groups (out
    as it is: rows in no group are not written), or K = 0 (zeros, as a sum of nothing)."""
    import torch

    T, K, N, G = a.shape[0], a.shape[1], b.shape[2], b.shape[0]
    if out is None:
        out = torch.empty((T, N), dtype=a.dtype, device=a.device)
    if K == 0 and G and T and N:
        out.zero_()
    return out


class GroupedPrepared:
    """Plan ``p`` made ready on ``gpu``: the kernel loaded, its shared memory raised, its launch
    shape; a result of ``out_shape`` allocated where the call brings no out; ``build(A, B, C,
    offs)``, the kernel's arguments on those addresses (grouped_args, grouped_wgrad_args),
    kept per set of addresses (at most executor.ARGS_KEPT; the tensor maps are encoded once
    per address: runtime.tma's cache)."""

    def __init__(self, p: Plan, gpu, device: int, out_shape: tuple, dtype: str, build):
        from ..runtime import compile as rt_compile
        from ..runtime import device as rt_device
        from ..runtime import launch as rt_launch

        self.plan, self.gpu, self.device, self.build = p, gpu, device, build
        self.kernel = rt_compile.load_kernel(p.spec.source_path, p.name_expression, gpu.arch)
        geo = p.spec.launch(p.params, p.problem)
        rt_launch.allow_dynamic_smem(self.kernel, geo.smem_bytes, gpu.ordinal)
        self.shape = rt_launch.LaunchShape(geo.grid, geo.block, geo.smem_bytes, geo.cluster)
        self._launch, self._make_current = rt_launch.launch_shaped, rt_device.make_current
        self.stream = stream_getter("torch")
        self.alloc = allocator("torch", out_shape, device, dtype)
        self._args = {}

    def args(self, A: int, B: int, C: int, offs: int) -> PackedArgs:
        key = (A, B, C, offs)
        args = self._args.get(key)
        if args is None:
            args = PackedArgs(self.build(A, B, C, offs))
            _keep(self._args, key, args)
        return args

    def run(self, out, A: int, B: int, offs: int, C: int):
        """The call on these tensors (out None: a new result, allocated here; C: out's
        address), on the caller's current stream; returns the result."""
        dev = self.device
        self._make_current(dev)
        if out is None:
            out, C = self.alloc()
        self._launch(self.kernel, self.shape, self.stream(dev), self.args(A, B, C, offs))
        _tls.last_plan = self.plan
        return out


# -- the weights' gradient: C_g = X_g^T @ Y_g (the grouped_wgrad rung) ---------------------------


@dataclass(frozen=True)
class WgradCall:
    """A weight-gradient call, checked: X (T, P) rows ldx apart, Y (T, Q) rows ldy apart, G
    groups, out (G, P, Q) rows ldc and matrices sc apart (None: a new out)."""

    T: int
    P: int
    Q: int
    G: int
    dtype: str
    ldx: int
    ldy: int
    ldc: int | None
    sc: int | None
    device: int


def validate_wgrad(x, y, offs, out=None) -> WgradCall:
    """Every check of grouped_weight_grad but the devices', each error naming the operand and
    the rule, before anything is written."""
    for name, t in (("x", x), ("y", y), ("offs", offs)):
        if not _is_tensor(t):
            raise TypeError(f"grouped_weight_grad takes PyTorch tensors; {name} is a {type(t).__name__}")
    if _name(x) not in GROUPED_DTYPES or y.dtype != x.dtype:
        raise TypeError(f"grouped_weight_grad takes two {' or '.join(GROUPED_DTYPES)} tensors of one dtype")
    if x.dim() != 2 or y.dim() != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(
            f"grouped_weight_grad takes x (T, P) and y (T, Q) with the same rows; got {tuple(x.shape)} and "
            f"{tuple(y.shape)}"
        )
    (T, P), Q = tuple(x.shape), y.shape[1]
    if _name(offs) != "int32" or offs.dim() != 1:
        raise ValueError(f"offs must be a 1-D int32 tensor of cumulative row ends, not {offs.dim()}-D {_name(offs)}")
    G = offs.shape[0]
    if G > GROUPED_MAX_GROUPS:
        raise ValueError(f"grouped_weight_grad takes at most {GROUPED_MAX_GROUPS} groups, not {G}")
    if P % GROUPED_ALIGN or Q % GROUPED_ALIGN:
        raise ValueError(
            f"grouped_weight_grad needs P and Q multiples of {GROUPED_ALIGN} (TMA reads rows that start 16 "
            f"bytes apart); here P = {P}, Q = {Q}"
        )
    lds = []
    for name, t, cols in (("x", x, P), ("y", y, Q)):
        st = tuple(t.stride())
        if T > 0 and cols > 0 and (st[1] != 1 or (T > 1 and st[0] < cols)):
            raise ValueError(f"{name} (strides {st}) must be row-major with unit column stride: pass .contiguous()")
        ld = st[0] if T > 1 else max(cols, 1)
        if T and P and Q and (t.data_ptr() % 16 or ld % GROUPED_ALIGN):
            raise ValueError(
                f"{name}: TMA reads it at a 16-byte aligned address with rows a multiple of 16 bytes apart; "
                f"here address {t.data_ptr():#x}, rows {ld} elements apart"
            )
        lds.append(ld)
    ldc = sc = None
    if out is not None:
        if not _is_tensor(out) or out.dtype != x.dtype:
            raise TypeError(f"out must be a {_name(x)} tensor, as x and y")
        if tuple(out.shape) != (G, P, Q):
            raise ValueError(f"out has shape {tuple(out.shape)}; the gradient is {G} x {P} x {Q}")
        so = tuple(out.stride())
        if P and Q and (so[2] != 1 and Q > 1 or P > 1 and so[1] < Q or G > 1 and so[0] < P * Q):
            raise ValueError(f"out (strides {so}) must hold G row-major P x Q matrices apart")
        ldc, sc = (so[1] if P > 1 else Q), so[0]
    return WgradCall(T, P, Q, G, _name(x), lds[0], lds[1], ldc, sc, x.device.index or 0)


def grouped_weight_grad(x, y, offs, *, out=None, kernel: str = "auto", **tile_params):
    """out[g] = x[offs[g-1]:offs[g]]^T @ y[offs[g-1]:offs[g]] for every group g (offs[-1] = 0), a
    (G, P, Q) result, in one launch (the grouped_wgrad rung, Hopper): a grouped product's weight
    gradient.  x (T, P) and y (T, Q) row-major float16 / bfloat16 CUDA tensors of one dtype, P
    and Q multiples of 8; an empty group's matrix is zeros.  Offsets as grouped_mm's (clamped,
    never read on the host)."""
    import torch

    key = _signature(x, y, offs, out, ("wgrad", kernel), tile_params)
    prepared = None
    if key is not None:
        try:
            prepared = PREPARED.get(key)
        except TypeError:
            key = None
    if prepared is None:
        from ..runtime import device as rt_device

        call = validate_wgrad(x, y, offs, out)
        check_devices(x, y, offs, out, ("x", "y"), "grouped_weight_grad")
        gpu = rt_device.gpu_info(call.device)
        p = plan_grouped_wgrad(
            call.P,
            call.Q,
            call.T,
            call.G,
            call.dtype,
            **gpu_limits(gpu),
            kernel=kernel,
            **tile_params,
        )
        _tls.last_plan = p
        if call.G == 0 or call.P == 0 or call.Q == 0 or call.T == 0:  # nothing to launch: empty, or zeros
            if out is None:
                out = torch.empty((call.G, call.P, call.Q), dtype=x.dtype, device=x.device)
            return out.zero_()
        rt_device.make_current(gpu.ordinal)
        ldc = call.ldc if call.ldc is not None else call.Q
        sc = call.sc if call.sc is not None else call.P * call.Q

        def build(X, Y, C, offs_ptr):
            return grouped_wgrad_args(p, WgradOperands(X, call.ldx, Y, call.ldy, C, ldc, sc, offs_ptr))

        prepared = GroupedPrepared(p, gpu, call.device, (call.G, call.P, call.Q), call.dtype, build)
        if key is not None:
            PREPARED.put(key, prepared)
    return prepared.run(out, x.data_ptr(), y.data_ptr(), offs.data_ptr(), out.data_ptr() if out is not None else 0)
