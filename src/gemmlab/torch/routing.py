"""PyTorch's matrix products through gemmlab, switched on in one line.

    import gemmlab.torch as gt

    with gt.fp32_tc():                 # float32 products: FP32-accurate, on the tensor cores
        loss = model(x).sum()          # nn.Linear, @, bmm, addmm, baddbmm, ...
        loss.backward()                # ... and their gradients' products

    @gt.fp32_tc()                      # the same, as a decorator
    def step(x): ...

    gt.enable_fp32_tc()                # the same, from here on (this thread)
    gt.disable_fp32_tc()

    with gt.use_gemmlab(torch.bfloat16):   # bf16 products on gemmlab's own kernels (precision as the dtype's)
        ...

A ``torch.overrides.TorchFunctionMode`` sees each call of the functions in
ROUTED (torch.matmul and ``@``, mm, bmm, addmm, baddbmm, addbmm, F.linear)
and sends the matrix products whose tensors are all CUDA tensors of one routed
dtype to the operators torch.ops.gemmlab.mm / bmm (gemmlab.torch.ops) with the
mode's precision; everything else (other or mixed dtypes, CPU tensors,
autocast regions, ``out=``, functions not listed) runs as PyTorch would run it
(NOT_ROUTED).  The operators carry their own gradients, so the backward pass
multiplies through gemmlab too, whether or not the mode is still on.

Routed calls give what PyTorch gives, gradients included:

- shapes as torch.matmul's: 1-D operands (a 1 put in and taken out again; 1-D
  @ 1-D, a dot product, stays PyTorch's), batch broadcasting, a 2-D right
  operand folded into the rows;
- zero-element shapes (M, N, K or a batch of 0): an empty result, or zeros
  when only K is 0, with no kernel launched;
- addmm, baddbmm and addbmm: ``beta * input + alpha * product``, the input
  broadcast, applied by PyTorch after the product (beta = 0: the input's values
  are not read, its gradient is zeros); addbmm's sum over the batch is one
  product over B * K;
- operands PyTorch refuses (shapes that do not match, a bias that does not
  broadcast) are passed to PyTorch, which raises its own error.

Transposed views are read in place.

The mode is a Python function mode, so torch.compile (Dynamo) traces through
it: the compiled graph holds the gemmlab operators.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from .ops import _bmm, _mm

__all__ = ["ROUTED", "NOT_ROUTED", "Routing", "fp32_tc", "use_gemmlab", "enable_fp32_tc", "disable_fp32_tc"]

Tensor = torch.Tensor

# The functions the mode routes, each to what it computes (one dictionary look-up
# per call of any function under the mode).
_MATMUL, _RMATMUL, _MM, _BMM, _ADDMM, _BADDBMM, _ADDBMM, _LINEAR = range(8)
_KINDS = {
    torch.matmul: _MATMUL, Tensor.matmul: _MATMUL, Tensor.__matmul__: _MATMUL,   # a @ b: Tensor.__matmul__
    Tensor.__rmatmul__: _RMATMUL,
    torch.mm: _MM, Tensor.mm: _MM,
    torch.bmm: _BMM, Tensor.bmm: _BMM,
    torch.addmm: _ADDMM, Tensor.addmm: _ADDMM,
    torch.baddbmm: _BADDBMM, Tensor.baddbmm: _BADDBMM,
    torch.addbmm: _ADDBMM, Tensor.addbmm: _ADDBMM,
    F.linear: _LINEAR,
}

ROUTED = {
    "matmul": "torch.matmul, Tensor.matmul, a @ b, Tensor.__rmatmul__ (any dimensions but 1-D @ 1-D, "
              "with broadcasting)",
    "mm": "torch.mm, Tensor.mm",
    "bmm": "torch.bmm, Tensor.bmm",
    "addmm": "torch.addmm, Tensor.addmm (beta * input + alpha * a @ b)",
    "baddbmm": "torch.baddbmm, Tensor.baddbmm",
    "addbmm": "torch.addbmm, Tensor.addbmm (the sum over the batch as one product over B * K)",
    "linear": "torch.nn.functional.linear with a 2-D weight, so nn.Linear (x @ W.t() + bias)",
}
# Products that stay PyTorch's under the mode, and why.
NOT_ROUTED = {
    "1-D @ 1-D": "a dot product, not a matrix product",
    "linear with a 1-D weight": "a matrix-vector product",
    "out= and in-place forms (addmm_, baddbmm_)": "they write into the caller's tensor: PyTorch's own kernels",
    "einsum, tensordot, mv, addmv": "not among the routed functions",
    "scaled_dot_product_attention": "fused attention kernels, no matrix product call",
    "inside torch.autocast": "autocast chooses the dtype; its products stay PyTorch's",
    "operands PyTorch refuses": "mixed dtypes or devices, 0-D tensors, shapes that do not match: "
                                "PyTorch raises its own error",
}

PRECISIONS = ("fp32_tc", "fp16_ec", "fp16_ec_scaled", "tf32_ec", "tf32")


class Routing(TorchFunctionMode, contextlib.ContextDecorator):
    """Routes the matrix products of tensors of ``dtypes`` on CUDA devices to
    gemmlab's operators with ``precision`` (None: each dtype's own) and
    ``kernel``.  A context manager and a decorator."""

    def __init__(self, dtypes=(torch.float32,), precision: str | None = None, kernel: str = "auto"):
        super().__init__()
        dtypes = (dtypes,) if isinstance(dtypes, torch.dtype) else tuple(dtypes)
        bad = [d for d in dtypes if d not in (torch.float32, torch.float16, torch.bfloat16)]
        if bad or not dtypes:
            raise ValueError(f"gemmlab routes float32, float16 and bfloat16 products, not {bad or 'none'}")
        if precision is not None:
            if precision not in PRECISIONS:
                raise ValueError(f"precision must be one of {', '.join(PRECISIONS)} or None, not {precision!r}")
            if dtypes != (torch.float32,):
                raise ValueError(f"precision={precision!r} is for float32 products; route other dtypes "
                                 "with precision=None")
        self.dtypes, self.precision, self.kernel = dtypes, precision or "", kernel

    device_type = "cuda"   # gemmlab reads CUDA tensors

    def _routes(self, a, b, c=None) -> bool:
        """a, b (and c, if given) are tensors of one routed dtype on one device of
        the mode's type, outside autocast.  (Read by attributes: building a
        torch.device per tensor would cost more than the rest of the check.)"""
        if not (isinstance(a, Tensor) and isinstance(b, Tensor) and (c is None or isinstance(c, Tensor))):
            return False
        dtype = a.dtype
        if dtype not in self.dtypes or b.dtype is not dtype or (c is not None and c.dtype is not dtype):
            return False
        if self.device_type == "cuda":
            index = a.get_device()
            if not (a.is_cuda and b.is_cuda and b.get_device() == index
                    and (c is None or (c.is_cuda and c.get_device() == index))):
                return False
        elif a.device.type != self.device_type or b.device != a.device or (c is not None and c.device != a.device):
            return False
        return not torch.is_autocast_enabled(self.device_type)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kind = _KINDS.get(func)
        if kind is not None and (not kwargs or kwargs.get("out") is None):
            out = self._route(kind, args, kwargs or {})
            if out is not None:
                return out
        return func(*args, **(kwargs or {}))

    def _route(self, kind: int, args, kwargs):
        """The routed call's result, or None where PyTorch should run the call
        (what gemmlab does not route, and what PyTorch refuses: it raises its own error)."""
        if kind <= _RMATMUL:
            a, b = _arguments(args, kwargs, ("input", "other"))
            if kind == _RMATMUL:
                a, b = b, a
            if self._routes(a, b) and a.dim() and b.dim() and (a.dim() > 1 or b.dim() > 1):
                return self._matmul(a, b)
        elif kind <= _BMM:
            a, b = _arguments(args, kwargs, ("input", "mat2"))
            ndim = 2 if kind == _MM else 3
            if self._routes(a, b) and a.dim() == ndim and b.dim() == ndim:
                return (_mm if kind == _MM else _bmm)(a, b, self.kernel, self.precision)
        elif kind == _LINEAR:
            x, w, bias = _arguments(args, kwargs, ("input", "weight", "bias"))
            if self._routes(x, w, bias) and x.dim() and w.dim() == 2:
                y = self._matmul(x, w.t())
                if y is None or bias is None:
                    return y
                out = y + bias
                return out if out.shape == y.shape else None
        else:
            names = ("input", "batch1", "batch2") if kind != _ADDMM else ("input", "mat1", "mat2")
            bias, a, b = _arguments(args, kwargs, names)
            ndim = 2 if kind == _ADDMM else 3
            if bias is not None and self._routes(a, b, bias) and a.dim() == ndim and b.dim() == ndim:
                if kind == _ADDMM:
                    product = _mm(a, b, self.kernel, self.precision)
                elif kind == _BADDBMM:
                    product = _bmm(a, b, self.kernel, self.precision)
                else:
                    product = self._addbmm_product(a, b)
                    if product is None:
                        return None
                return _scaled_sum(product, bias, kwargs.get("beta", 1), kwargs.get("alpha", 1))
        return None

    def _matmul(self, a: Tensor, b: Tensor) -> Tensor | None:
        """torch.matmul's shape rules over the mm and bmm operators (None: the
        inner dimensions differ, PyTorch's error to raise).  Sizes are given
        explicitly, never as -1, so that zero-element shapes reshape too."""
        vector_a, vector_b = a.dim() == 1, b.dim() == 1
        if vector_a:
            a = a.unsqueeze(0)
        if vector_b:
            b = b.unsqueeze(-1)
        M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
        if b.shape[-2] != K:
            return None
        if b.dim() == 2:
            # The batch of a folds into its rows (a view where a's rows are evenly spaced).
            out = _mm(a.flatten(0, -2), b, self.kernel, self.precision).reshape(*a.shape[:-1], N) \
                if a.dim() > 2 else _mm(a, b, self.kernel, self.precision)
        else:
            batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            a3 = a.expand(*batch, M, K).flatten(0, -3)
            b3 = b.expand(*batch, K, N).flatten(0, -3)
            out = _bmm(a3, b3, self.kernel, self.precision).reshape(*batch, M, N)
        if vector_a:
            out = out.squeeze(-2)
        if vector_b:
            out = out.squeeze(-1)
        return out

    def _addbmm_product(self, a: Tensor, b: Tensor) -> Tensor | None:
        """sum_i a[i] @ b[i] as one product: (M, B * K) @ (B * K, N), a's batch
        moved beside its columns (a copy), b's batch folded into its rows."""
        B, M, K = a.shape
        if b.shape[0] != B or b.shape[1] != K:
            return None
        N = b.shape[2]
        return _mm(a.transpose(0, 1).reshape(M, B * K), b.reshape(B * K, N), self.kernel, self.precision)


def _arguments(args, kwargs, names):
    """The values of parameters ``names``, given by position or by keyword (None where absent)."""
    n = len(names)
    if not kwargs:
        return args[:n] if len(args) >= n else args + (None,) * (n - len(args))
    return tuple(args[i] if i < len(args) else kwargs.get(name) for i, name in enumerate(names))


def _scaled_sum(product: Tensor, bias: Tensor, beta, alpha) -> Tensor | None:
    """beta * bias + alpha * product, as addmm defines it; None where the bias
    does not broadcast to the product's shape (PyTorch's error to raise).
    beta = 0: the bias's values are not read (its NaN and inf do not reach the
    result); where it needs a gradient, that gradient is zeros, as PyTorch gives."""
    if alpha != 1:
        product = product * alpha
    if beta != 0:
        out = product.add(bias, alpha=beta)
    elif bias.requires_grad and torch.is_grad_enabled():
        out = product + bias.nan_to_num().mul(0)
    else:
        out = product if _broadcasts_to(bias.shape, product.shape) else None
    return out if out is not None and out.shape == product.shape else None


def _broadcasts_to(shape, target) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == target
    except RuntimeError:
        return False


def fp32_tc(precision: str = "fp32_tc", kernel: str = "auto") -> Routing:
    """float32 products on the tensor cores, FP32-accurate (gemmlab's
    precision="fp32_tc"; or another of its float32 precisions)."""
    return Routing((torch.float32,), precision, kernel)


def use_gemmlab(dtypes=(torch.float32, torch.float16, torch.bfloat16), kernel: str = "auto") -> Routing:
    """The products of ``dtypes`` on gemmlab's kernels at each dtype's own precision."""
    return Routing(dtypes, None, kernel)


_global = fp32_tc()


def enable_fp32_tc() -> None:
    """fp32_tc() from here on, on this thread (PyTorch's function modes are per
    thread; the backward pass of what ran under it multiplies through gemmlab
    wherever it runs)."""
    if _global not in _get_current_function_mode_stack():
        _global.__enter__()


def disable_fp32_tc() -> None:
    """Ends enable_fp32_tc()."""
    stack = _get_current_function_mode_stack()
    if _global in stack:
        if stack[-1] is not _global:
            raise RuntimeError("disable_fp32_tc: another function mode was entered after enable_fp32_tc() "
                               "and is still active; leave it first")
        _global.__exit__(None, None, None)
