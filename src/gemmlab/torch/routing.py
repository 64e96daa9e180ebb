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
ROUTED and sends the matrix products whose tensors are all CUDA tensors of a
routed dtype to the operators torch.ops.gemmlab.mm / bmm (gemmlab.torch.ops)
with the mode's precision; everything else (other dtypes, CPU tensors,
autocast regions, functions not listed) runs as PyTorch would run it.  The
operators carry their own gradients, so the backward pass multiplies through
gemmlab too, whether or not the mode is still on.  Shapes are handled as
torch.matmul handles them (1-D operands, batch broadcasting, a 2-D right
operand folded into the rows); a bias and alpha/beta of addmm and baddbmm are
applied by PyTorch after the product.  Transposed views are read in place.

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

# The functions the mode routes, by what they compute.
_MATMUL = (torch.matmul, Tensor.matmul, Tensor.__matmul__)   # a @ b arrives as Tensor.matmul
_RMATMUL = (Tensor.__rmatmul__,)
_MM = (torch.mm, Tensor.mm)
_BMM = (torch.bmm, Tensor.bmm)
_ADDMM = (torch.addmm, Tensor.addmm)
_BADDBMM = (torch.baddbmm, Tensor.baddbmm)
_LINEAR = (F.linear,)

ROUTED = {
    "matmul": "torch.matmul, Tensor.matmul, a @ b (any dimensions but 1-D @ 1-D, with broadcasting)",
    "mm": "torch.mm, Tensor.mm",
    "bmm": "torch.bmm, Tensor.bmm",
    "addmm": "torch.addmm, Tensor.addmm (beta * input + alpha * a @ b)",
    "baddbmm": "torch.baddbmm, Tensor.baddbmm",
    "linear": "torch.nn.functional.linear, so nn.Linear (x @ W.t() + bias)",
}
# Products that stay PyTorch's under the mode, and why.
NOT_ROUTED = {
    "1-D @ 1-D": "a dot product, not a matrix product",
    "out= and in-place forms (addmm_, baddbmm_)": "they write into the caller's tensor: PyTorch's own kernels",
    "einsum, tensordot, mv, addmv": "not among the routed functions",
    "scaled_dot_product_attention": "fused attention kernels, no matrix product call",
    "inside torch.autocast": "autocast chooses the dtype; its products stay PyTorch's",
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

    def _routes(self, *tensors) -> bool:
        for t in tensors:
            if not isinstance(t, Tensor) or t.device.type != self.device_type or t.dtype not in self.dtypes:
                return False
        return not torch.is_autocast_enabled(self.device_type)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kwargs.get("out") is not None:
            return func(*args, **kwargs)
        if func in _MATMUL or func in _RMATMUL:
            a, b = _arguments(args, kwargs, ("input", "other"))
            if func in _RMATMUL:
                a, b = b, a
            if self._routes(a, b) and a.dim() and b.dim() and not (a.dim() == 1 and b.dim() == 1):
                return self._matmul(a, b)
        elif func in _MM or func in _BMM:
            a, b = _arguments(args, kwargs, ("input", "mat2"))
            if self._routes(a, b):
                return (_mm if func in _MM else _bmm)(a, b, self.kernel, self.precision)
        elif func in _LINEAR:
            x, w, bias = _arguments(args, kwargs, ("input", "weight", "bias"))
            if self._routes(x, w) and (bias is None or self._routes(bias)) and x.dim() and w.dim() == 2:
                y = self._matmul(x, w.t())
                return y if bias is None else y + bias
        elif func in _ADDMM or func in _BADDBMM:
            names = ("input", "mat1", "mat2") if func in _ADDMM else ("input", "batch1", "batch2")
            bias, a, b = _arguments(args, kwargs, names)
            if self._routes(bias, a, b):
                product = (_mm if func in _ADDMM else _bmm)(a, b, self.kernel, self.precision)
                return _scaled_sum(product, bias, kwargs.get("beta", 1), kwargs.get("alpha", 1))
        return func(*args, **kwargs)

    def _matmul(self, a: Tensor, b: Tensor) -> Tensor:
        """torch.matmul's shape rules over the mm and bmm operators."""
        vector_a, vector_b = a.dim() == 1, b.dim() == 1
        if vector_a:
            a = a.unsqueeze(0)
        if vector_b:
            b = b.unsqueeze(-1)
        M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
        if b.dim() == 2:
            # The batch of a folds into its rows (a view where a's rows are evenly spaced).
            out = _mm(a.reshape(-1, K), b, self.kernel, self.precision).reshape(*a.shape[:-1], N) \
                if a.dim() > 2 else _mm(a, b, self.kernel, self.precision)
        else:
            batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            a3 = a.expand(*batch, M, K).reshape(-1, M, K)
            b3 = b.expand(*batch, K, N).reshape(-1, K, N)
            out = _bmm(a3, b3, self.kernel, self.precision).reshape(*batch, M, N)
        if vector_a:
            out = out.squeeze(-2)
        if vector_b:
            out = out.squeeze(-1)
        return out


def _arguments(args, kwargs, names):
    """The values of parameters ``names``, given by position or by keyword (None where absent)."""
    return tuple(args[i] if i < len(args) else kwargs.get(name) for i, name in enumerate(names))


def _scaled_sum(product: Tensor, bias: Tensor, beta, alpha) -> Tensor:
    """beta * bias + alpha * product, as addmm defines it (beta = 0: bias not read)."""
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product.add(bias, alpha=beta)


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
