"""PyTorch's matrix products through gemmlab, switched on in one line.

    import gemmlab.torch as gt

    with gt.fp32_tc():                 # float32 products: FP32-accurate, on the tensor cores
        loss = model(x).sum()          # nn.Linear, @, bmm, einsum, ...
        loss.backward()                # ... and their gradients' products

    @gt.fp32_tc()                      # the same, as a decorator
    def step(x): ...

    gt.enable_fp32_tc()                # the same, from here on (this thread)
    gt.disable_fp32_tc()

    with gt.use_gemmlab(torch.bfloat16):   # bf16 products on gemmlab's own kernels (precision as the dtype's)
        ...

How: while a context is on, PyTorch's own CUDA kernels of the operators in
OPERATORS (mm, bmm, addmm, baddbmm, mv, addmv, with their out= and in-place forms)
hand the products of the routed dtypes to ``gemmlab.matmul``, and that of
torch._grouped_mm its calls the grouped rungs take (Hopper, float16 /
bfloat16): the 2-D x 3-D form with offs to gemmlab::grouped_mm's kernel (rung
6), the 2-D x 2-D form autograd's formula asks for as the weights' gradient to
grouped_wgrad (rung 7), and the 3-D x 3-D form (a batch) to gemmlab.matmul;
any other call of it goes to PyTorch's kernel.  Every matrix
product PyTorch makes reaches one of them -- ``@``, F.linear, einsum, and the
products autograd's own formulas make for gradients -- so nothing else pays:
no Python runs for torch calls that are not products, and gradients need no
Python autograd function.

- The routing state is kept in PyTorch's thread-local Python objects, which
  autograd copies into the threads that run a backward pass: gradients
  computed while the context is on (``loss.backward()`` inside it) are routed
  too; those computed after it ended are PyTorch's.
- The kernels are registered with torch.library the first time a context is
  entered and stay registered (entering is then a thread-local assignment);
  a product that is not routed goes to the kernel PyTorch had registered,
  which costs it a Python call.  ``unregister()`` gives PyTorch its own
  kernels back.
- Those of every operator but torch._grouped_mm are C++ where
  gemmlab.torch.native can build its library: a call repeated on the same
  addresses is enqueued from there without Python, and the calls it has not seen
  come here (_slow_kernel), which teaches it their launches.
- Under ``torch.compile``, enter the context outside the compiled function:
  the compiled code calls the same operators (Inductor's ``extern_kernels``
  use their out= forms), and they are routed when it runs, inside CUDA graphs
  too.

Routed calls give what PyTorch gives: the shapes, broadcasting and errors are
PyTorch's own (a product is routed only once PyTorch's operator has it, with
operands it accepts); addmm's ``beta * input + alpha * product`` applies the
input after the product (beta = 0: the input is not read).
"""

from __future__ import annotations

import ctypes
import functools
import threading
import warnings

import torch

from ..core.api import matmul, noted_plan
from ..core.arrays import broadcasts
from ..core.grouped import validate_grouped, validate_wgrad
from ..runtime.device import gpu_info
from ..runtime.launch import Recording, recording
from . import native
from .ops import _grouped_impl

__all__ = [
    "ROUTED",
    "NOT_ROUTED",
    "OPERATORS",
    "Routing",
    "fp32_tc",
    "use_gemmlab",
    "enable_fp32_tc",
    "disable_fp32_tc",
    "unregister",
]

ROUTED = {
    "matmul": "torch.matmul, Tensor.matmul, a @ b, Tensor.__rmatmul__ (any dimensions but 1-D @ 1-D)",
    "mm": "torch.mm, Tensor.mm (out= too)",
    "bmm": "torch.bmm, Tensor.bmm (out= too)",
    "addmm": "torch.addmm, Tensor.addmm, addmm_ (out= too)",
    "baddbmm": "torch.baddbmm, Tensor.baddbmm, baddbmm_ (out= too)",
    "addbmm": "torch.addbmm: PyTorch's loop of addmm_ over the batch, each routed",
    "mv": "torch.mv, and matmul of a matrix and a vector (out= too)",
    "addmv": "torch.addmv, Tensor.addmv, addmv_ (out= too)",
    "linear": "torch.nn.functional.linear, so nn.Linear (x @ W.t() + bias)",
    "einsum": "torch.einsum and anything else built on bmm or mm",
    "gradients": "the products of the backward pass, run while the context is on",
    "_grouped_mm": (
        "torch._grouped_mm, float16 / bfloat16 on Hopper: 2-D a x 3-D b with offs on the grouped rung, "
        "and its gradients' products (a's again 2-D x 3-D, b's 2-D x 2-D with offs: grouped_wgrad); "
        "3-D x 3-D without offs (a batch) as bmm"
    ),
}
# Products that stay PyTorch's, and why.
NOT_ROUTED = {
    "1-D @ 1-D": "a dot product, not a matrix product",
    "scaled_dot_product_attention": "fused attention kernels, no matrix product call",
    "inside torch.autocast": (
        "autocast casts float32 operands to its dtype first, so fp32_tc() leaves those products to "
        "PyTorch; use_gemmlab() of that dtype routes them, as any product of its dtype"
    ),
    "other dtypes and devices": "float64, integers, complex, CPU tensors, operands of two dtypes or devices",
    "zero-element products": "nothing to compute: PyTorch's answer, no kernel",
    "backward after the context": "gradients computed once the context has ended",
    "_grouped_mm's other calls": (
        "3-D x 2-D (gemmlab::grouped_mm runs it on the transposes, measured 2.4x slower than PyTorch's "
        "kernel), a bias, another out_dtype, float32, operands the grouped rungs refuse (K or N not a "
        "multiple of 8, a not row-major, more than 1024 groups), GPUs other than Hopper (3-D x 3-D goes "
        "to gemmlab.matmul on every GPU)"
    ),
}
OPERATORS = (
    "mm",
    "mm.out",
    "bmm",
    "bmm.out",
    "addmm",
    "addmm.out",
    "addmm_",
    "baddbmm",
    "baddbmm.out",
    "baddbmm_",
    "mv",
    "mv.out",
    "addmv",
    "addmv.out",
    "addmv_",
    "_grouped_mm",
)
PRECISIONS = ("fp32_tc", "fp16_ec", "fp16_ec_scaled", "tf32_ec", "tf32")
KEY = "gemmlab.torch.routing"  # the thread-local slot (PyTorch's, copied into autograd's threads)


# -- the routing state -------------------------------------------------------------------


class RouteState:
    """What the innermost context routes: (dispatch key, dtype) -> (kernel,
    precision), its own over those of the context it is inside."""

    __slots__ = ("routes",)

    def __init__(self, dispatch_key, dtypes, precision, kernel, outer: RouteState | None):
        self.routes = dict(outer.routes) if outer is not None else {}
        for d in dtypes:
            self.routes[dispatch_key, d] = (kernel, precision)


class _Slot:
    """A thread's routing state, in the thread-local slot KEY: one object per
    thread, changed in place.  PyTorch's binding stores it without taking a
    reference of its own, so one is added and the object is never released."""

    __slots__ = ("state",)

    def __init__(self):
        self.state = None


_local = threading.local()


def _slot() -> _Slot:
    slot = getattr(_local, "slot", None)
    if slot is None:
        if torch._C._is_key_in_tls(KEY):  # a thread autograd runs for a routed thread: that one's
            return torch._C._get_obj_in_tls(KEY)
        slot = _local.slot = _Slot()
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(slot))
        torch._C._stash_obj_in_tls(KEY, slot)
    return slot


def current() -> RouteState | None:
    """The innermost routing context's state on this thread (None: off): the slot this
    thread made (_slot), read as a Python attribute, else the one PyTorch copied into it
    (autograd's threads)."""
    slot = getattr(_local, "slot", None)
    if slot is not None:
        return slot.state
    return torch._C._get_obj_in_tls(KEY).state if torch._C._is_key_in_tls(KEY) else None


# -- the kernels ---------------------------------------------------------------------------

# The product a routed call runs: gemmlab.matmul (the CPU tests stand a float64
# product in; looked up at each call).
PRODUCT = {"fn": matmul}


def _product(a, b, route, **kw):
    kernel, precision = route
    return PRODUCT["fn"](a, b, kernel=kernel, precision=precision, **kw)


def _route(key, device_type, a, b, *others):
    """(kernel, precision) where the operands have one dtype routed for dispatch
    key ``key`` (devices of ``device_type``), one device, elements to multiply, and
    autocast is off; else None."""
    state = current()
    if state is None:
        return None
    dtype = a.dtype
    route = state.routes.get((key, dtype))
    if route is None or b.dtype is not dtype or not (a.numel() and b.numel()):
        return None
    dev = a.get_device()
    if b.get_device() != dev:
        return None
    for t in others:
        if t.dtype is not dtype or t.get_device() != dev:
            return None
    if torch.is_autocast_enabled(device_type):
        return None
    return route


def _same_view(x, y) -> bool:
    return x.data_ptr() == y.data_ptr() and x.shape == y.shape and x.stride() == y.stride()


def _shares_storage(x, y) -> bool:
    return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def _product_into(a, b, route, bias, out, alpha, beta) -> bool:
    """out = beta * bias + alpha * a @ b (addmm's and baddbmm's out= forms): the bias in the
    product's epilogue where the rung can (beta = 1, nn.Linear's), out read by the kernel where
    it is the bias itself, else added after the product.  False where out is another view of
    the bias's memory (PyTorch's kernel takes the call)."""
    if _same_view(out, bias):  # beta * out, read by the kernel
        _product(a, b, route, out=out, alpha=alpha, beta=beta)
        return True
    if _shares_storage(out, bias):
        return False
    if beta == 1:
        _product(a, b, route, out=out, alpha=alpha, bias=bias)
        return True
    _product(a, b, route, out=out, alpha=alpha)
    if beta != 0:
        rec = recording()
        if rec is not None:
            rec.added(beta)  # the C++ routed kernels add it after a repeat too
        out.add_(bias, alpha=beta)
    return True


def _fits_mm(a, b) -> bool:
    return a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0]


def _fits_bmm(a, b) -> bool:
    return a.dim() == 3 and b.dim() == 3 and a.shape[2] == b.shape[1] and a.shape[0] == b.shape[0]


def _fits_mv(a, v) -> bool:
    return a.dim() == 2 and v.dim() == 1 and a.shape[1] == v.shape[0]


def _kernels(fits, key: str):
    """Makers (PyTorch's kernel -> gemmlab's) of a product's functional, out=, addmm-like,
    addmm-like out= and in-place kernels, for operands that ``fits`` takes (mm's, bmm's or
    mv's: the result's shape is a's but the last, then b's last but for a vector)."""
    device_type = key.lower()  # "CUDA" -> "cuda": read once, not from each tensor

    def result(a, b):
        return (*a.shape[:-1], b.shape[-1]) if b.dim() > 1 else tuple(a.shape[:-1])

    def plain(orig):
        def kernel(keyset, a, b):
            route = _route(key, device_type, a, b)
            if route is not None and fits(a, b):
                return _product(a, b, route)
            return orig.call_boxed(keyset, a, b)

        return kernel

    def into(orig):
        def kernel(keyset, a, b, *, out):
            route = _route(key, device_type, a, b, out)
            if route is not None and fits(a, b) and out.shape == result(a, b):
                _product(a, b, route, out=out)
                return out
            return orig.call_boxed(keyset, a, b, out=out)

        return kernel

    def scaled(orig):
        def kernel(keyset, bias, a, b, *, beta=1, alpha=1):
            route = _route(key, device_type, a, b, bias)
            if route is not None and fits(a, b) and broadcasts(bias.shape, result(a, b)):
                if beta == 1:  # nn.Linear's: the bias goes into the product's epilogue where the rung can
                    return _product(a, b, route, alpha=alpha, bias=bias)
                out = _product(a, b, route, alpha=alpha)
                if beta != 0:
                    out.add_(bias, alpha=beta)
                return out
            return orig.call_boxed(keyset, bias, a, b, beta=beta, alpha=alpha)

        return kernel

    def scaled_into(orig):
        def kernel(keyset, bias, a, b, *, beta=1, alpha=1, out):
            route = _route(key, device_type, a, b, bias, out)
            shape = result(a, b)
            if route is not None and fits(a, b) and out.shape == shape and broadcasts(bias.shape, shape):
                if _product_into(a, b, route, bias, out, alpha, beta):
                    return out
            return orig.call_boxed(keyset, bias, a, b, beta=beta, alpha=alpha, out=out)

        return kernel

    def in_place(orig):
        def kernel(keyset, acc, a, b, *, beta=1, alpha=1):
            route = _route(key, device_type, a, b, acc)
            if route is not None and fits(a, b) and acc.shape == result(a, b):
                _product(a, b, route, out=acc, alpha=alpha, beta=beta)
                return acc
            return orig.call_boxed(keyset, acc, a, b, beta=beta, alpha=alpha)

        return kernel

    return plain, into, scaled, scaled_into, in_place


# -- grouped products: torch._grouped_mm on the grouped rungs --------------------------------


def _grouped_forward(a, b, offs):
    """a (T, K) x b (G, K, N) by groups: gemmlab::grouped_mm's CUDA implementation (rung 6)."""
    return _grouped_impl(a, b, offs)


def _grouped_weight_grad(a, b, offs):
    """torch._grouped_mm's 2-D x 2-D form, a (P, T) x b (T, Q) with offs over T: out[g] =
    a[:, group g] @ b[group g], (G, P, Q) -- a grouped product's weight gradient, as autograd
    asks for it (a = x.t() of a row-major x): one launch of grouped_wgrad (rung 7), through
    gemmlab::grouped_mm's CUDA implementation as the forward."""
    return _grouped_impl(a, b, offs)


_HOPPER: dict[int, bool] = {}


def _on_hopper(device: int) -> bool:
    """Whether CUDA device ``device`` runs the grouped rungs (sm_90a); asked once a device."""
    ok = _HOPPER.get(device)
    if ok is None:
        try:
            ok = gpu_info(device).arch == "sm_90a"
        except Exception:  # no driver, no such device: PyTorch's, which will say so
            ok = False
        _HOPPER[device] = ok
    return ok


# What a routed torch._grouped_mm runs: the CPU tests stand float64 products and a yes in for
# the GPU's (tests/torch_cpu.py); looked up at each call.
GROUPED = {"mm": _grouped_forward, "weight_grad": _grouped_weight_grad, "arch": _on_hopper}
_GROUPED_DTYPES = (torch.float16, torch.bfloat16)


def _grouped_takes(a, b, offs):
    """GROUPED's function for this torch._grouped_mm call with offs (no bias, the inputs'
    dtype out), or None where the grouped rungs refuse it: core.grouped's own checks, which read
    shapes, strides and addresses only (the offsets stay on the GPU)."""
    if a.dtype not in _GROUPED_DTYPES or offs.get_device() != a.get_device():
        return None
    if not GROUPED["arch"](a.get_device()):
        return None
    try:
        if a.dim() == 2 and b.dim() == 3:
            validate_grouped(a, b, offs)
            return GROUPED["mm"]
        if a.dim() == 2 and b.dim() == 2:
            validate_wgrad(a.t(), b, offs)
            return GROUPED["weight_grad"]
    except (TypeError, ValueError):  # a refusal: PyTorch's kernel takes the call
        pass
    return None


def _grouped(key: str, orig):
    device_type = key.lower()

    def kernel(keyset, a, b, offs=None, bias=None, out_dtype=None):
        route = _route(key, device_type, a, b)
        if route is not None and bias is None and out_dtype in (None, a.dtype):
            if offs is None:  # the 3-D x 3-D form: a batch, as bmm routes it
                if _fits_bmm(a, b) and a.shape[0] == b.shape[0] and a.dtype in _GROUPED_DTYPES:
                    return _product(a, b, route)
            else:
                fn = _grouped_takes(a, b, offs)
                if fn is not None:
                    return fn(a, b, offs)
        return orig.call_boxed(keyset, a, b, offs, bias, out_dtype)

    return kernel


def _makers(key: str) -> dict:
    """Operator name -> a maker (PyTorch's kernel -> gemmlab's) for dispatch key ``key``."""
    return (
        dict(zip(("mm", "mm.out", "addmm", "addmm.out", "addmm_"), _kernels(_fits_mm, key)))
        | dict(zip(("bmm", "bmm.out", "baddbmm", "baddbmm.out", "baddbmm_"), _kernels(_fits_bmm, key)))
        | dict(zip(("mv", "mv.out", "addmv", "addmv.out", "addmv_"), _kernels(_fits_mv, key)))
        | {"_grouped_mm": functools.partial(_grouped, key)}
    )


# -- registration --------------------------------------------------------------------------

_libs: dict[str, torch.library.Library] = {}  # dispatch key -> the registered kernels
_native_keys: dict[str, int] = {}  # dispatch key -> its number, where the C++ kernels took OPERATORS' first ones
_slow_libs: dict[str, torch.library.Library] = {}  # dispatch key -> gemmlab_routed::slow's kernel
_lock = threading.Lock()
_active = [0]  # contexts entered and not left, all threads


def _register(dispatch_key: str) -> None:
    with _lock:
        if dispatch_key in _libs:
            return
        taken = ()
        code = native.register(dispatch_key)
        if code is not None:
            if dispatch_key not in _slow_libs:
                slow = torch.library.Library("gemmlab_routed", "IMPL")
                slow.impl("slow", _slow_kernel(dispatch_key), dispatch_key)
                _slow_libs[dispatch_key] = slow
            _native_keys[dispatch_key], taken = code, native.OPERATORS
        lib, makers = torch.library.Library("aten", "IMPL"), _makers(dispatch_key)
        with warnings.catch_warnings():  # "overriding a previously registered kernel": that is the point
            warnings.simplefilter("ignore")
            for name in OPERATORS:
                if name in taken:
                    continue
                try:
                    orig = torch.library.get_kernel(f"aten::{name}", dispatch_key)
                except RuntimeError:  # none for this key (a PyTorch built without CUDA): nothing to replace
                    continue
                lib.impl(name, makers[name](orig), dispatch_key, with_keyset=True)
        _libs[dispatch_key] = lib
        slot = getattr(_local, "slot", None)
        if slot is not None:
            _tell_native(slot)


def unregister() -> None:
    """PyTorch's own kernels back for every operator gemmlab registered (no
    context may be on, in any thread); the next context registers them again."""
    with _lock:
        if _active[0]:
            raise RuntimeError(f"gemmlab.torch.unregister: {_active[0]} routing context(s) still on")
        native.unregister()
        _native_keys.clear()
        for lib in _libs.values():
            lib._destroy()
        _libs.clear()


# -- the C++ kernels' side (gemmlab.torch.native) ------------------------------------------

_route_ids: dict[tuple, int] = {}  # (kernel, precision) -> its number for the C++ kernels (>= 1)


def _route_id(route) -> int:
    rid = _route_ids.get(route)
    if rid is None:
        with _lock:
            rid = _route_ids.setdefault(route, len(_route_ids) + 1)
    return rid


def _tell_native(slot: _Slot) -> None:
    """Tell the C++ kernels what ``slot``'s state routes for the keys they serve."""
    if not _native_keys:
        return
    state = slot.state
    triples = []
    if state is not None:
        for (key, dtype), route in state.routes.items():
            code = _native_keys.get(key)
            if code is not None:
                triples.append((code, dtype, _route_id(route)))
    native.set_routes(slot, triples)


def _slow_kernel(key: str):
    """gemmlab_routed::slow's kernel for dispatch key ``key``: a call the C++ kernels have
    no launch for, with its result ``out`` (allocated there for a functional form); 1 where
    gemmlab ran it, 0 where it is not routed (the C++ kernel runs PyTorch's).  The call's
    launches and memsets are recorded, and where they were those of one prepared call the
    C++ kernels keep them, with its plan, for this signature and these addresses
    (native.learn)."""
    device_type = key.lower()

    def slow(op: int, a, b, out, bias, alpha: float, beta: float) -> int:
        route = _route(key, device_type, a, b, out) if bias is None else _route(key, device_type, a, b, bias, out)
        if route is None:
            return 0
        with Recording() as rec:
            if bias is None:
                _product(a, b, route, out=out)
            elif not _product_into(a, b, route, bias, out, alpha, beta):
                return 0
        steps = rec.repeatable()
        fn = PRODUCT["fn"]  # a stand-in or a wrapper (tests) sees every call, unless it says otherwise
        if steps is not None and (fn is matmul or getattr(fn, "learnable", False)):
            native.learn(steps, rec.stream, rec.locks, rec.add_after, noted_plan())
        return 1

    return slow


# -- the contexts ------------------------------------------------------------------------


class Routing:
    """Routes the matrix products of tensors of ``dtypes`` on CUDA devices to
    gemmlab with ``precision`` (None: each dtype's own) and ``kernel``.  A
    context manager and a decorator; contexts nest (the inner one's dtypes
    over the outer's)."""

    dispatch_key = "CUDA"  # the devices whose kernels are replaced

    def __init__(self, dtypes=(torch.float32,), precision: str | None = None, kernel: str = "auto"):
        dtypes = (dtypes,) if isinstance(dtypes, torch.dtype) else tuple(dtypes)
        bad = [d for d in dtypes if d not in (torch.float32, torch.float16, torch.bfloat16)]
        if bad or not dtypes:
            raise ValueError(f"gemmlab routes float32, float16 and bfloat16 products, not {bad or 'none'}")
        if precision is not None:
            if precision not in PRECISIONS:
                raise ValueError(f"precision must be one of {', '.join(PRECISIONS)} or None, not {precision!r}")
            if dtypes != (torch.float32,):
                raise ValueError(
                    f"precision={precision!r} is for float32 products; route other dtypes with precision=None"
                )
        self.dtypes, self.precision, self.kernel = dtypes, precision, kernel
        self._saved = threading.local()

    def __enter__(self):
        if self.dispatch_key not in _libs:
            _register(self.dispatch_key)
        slot = _slot()
        mine = RouteState(self.dispatch_key, self.dtypes, self.precision, self.kernel, slot.state)
        self._saved.__dict__.setdefault("stack", []).append((slot.state, mine))
        slot.state = mine
        if _native_keys:
            _tell_native(slot)
        with _lock:
            _active[0] += 1
        return self

    def __exit__(self, *exc):
        slot = _slot()
        slot.state = self._saved.stack.pop()[0]
        if _native_keys:
            _tell_native(slot)
        with _lock:
            _active[0] -= 1
        return False

    def entered(self) -> bool:
        """Whether this context is on in this thread."""
        return bool(getattr(self._saved, "stack", None))

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapped


def fp32_tc(precision: str = "fp32_tc", kernel: str = "auto") -> Routing:
    """float32 products on the tensor cores, FP32-accurate (gemmlab's
    precision="fp32_tc"; or another of its float32 precisions)."""
    return Routing((torch.float32,), precision, kernel)


def use_gemmlab(dtypes=(torch.float32, torch.float16, torch.bfloat16), kernel: str = "auto") -> Routing:
    """The products of ``dtypes`` on gemmlab's kernels at each dtype's own precision."""
    return Routing(dtypes, None, kernel)


_global = fp32_tc()


def enable_fp32_tc() -> None:
    """fp32_tc() from here on, on this thread (and the backward passes it starts)."""
    if not _global.entered():
        _global.__enter__()


def disable_fp32_tc() -> None:
    """Ends enable_fp32_tc() (a context entered after it must have ended first)."""
    if _global.entered():
        if current() is not _global._saved.stack[-1][1]:
            raise RuntimeError("disable_fp32_tc: a context entered after enable_fp32_tc() is still on; leave it first")
        _global.__exit__(None, None, None)
