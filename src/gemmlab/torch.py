"""gemmlab's GEMM as a PyTorch operator: ``torch.ops.gemmlab.mm``.

    import gemmlab.torch                      # registers the operator
    c = gemmlab.torch.mm(a, b)                # a (M, K), b (K, N): CUDA tensors of one dtype
    c = gemmlab.torch.mm(a, b, kernel="pipelined")

float32 inputs run on the CUDA cores, float16 and bfloat16 on the tensor cores;
the result has the inputs' dtype.

It is a ``torch.library`` custom operator, so it works with autograd (the
backward pass runs gemmlab's kernels too: grad_a = grad @ b^T, grad_b = a^T @
grad) and inside ``torch.compile`` without graph breaks (a fake implementation
gives the output's shape to the compiler).  It runs on the current PyTorch
stream.  Transposed views (``a.t()``, and the transposes the backward pass
multiplies with) are read in place, as column-major operands, without a copy;
only strides with no unit step (``a[:, ::2]``) are copied first (see
gemmlab.matmul).
"""

from __future__ import annotations

import torch

from .api import matmul

__all__ = ["mm"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def mm(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto") -> torch.Tensor:
    """a @ b with gemmlab's ``kernel`` (any name gemmlab.matmul takes)."""
    return _op(a, b, kernel)


# Defined with torch.library's low-level API rather than @custom_op, with its own
# Autograd kernel rather than register_autograd: on an H100's host the
# decorator's and register_autograd's Python wrappers cost 10-15 us per call
# more (benchmarks/NOTES.md, host costs).  The operator's third
# argument is not called "kernel": Inductor passes an operator's arguments on by
# keyword to a function that has its own "kernel" parameter
# (FallbackKernel.create), which then fails under torch.compile.
_lib = torch.library.Library("gemmlab", "DEF")
_lib.define("mm(Tensor a, Tensor b, str kernel_name='auto') -> Tensor")


def _mm_impl(a: torch.Tensor, b: torch.Tensor, kernel_name: str = "auto") -> torch.Tensor:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"gemmlab::mm takes 2-D tensors; got {a.dim()}-D and {b.dim()}-D")
    return matmul(a, b, kernel=kernel_name)


# CPU too, so that a CPU tensor gets gemmlab's own message (it reads CUDA tensors).
for _key in ("CUDA", "CPU"):
    _lib.impl("mm", _mm_impl, _key)
_op = torch.ops.gemmlab.mm.default


@torch.library.register_fake("gemmlab::mm", lib=_lib)
def _mm_fake(a: torch.Tensor, b: torch.Tensor, kernel_name: str = "auto") -> torch.Tensor:
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "gemmlab::mm takes 2-D tensors")
    torch._check(a.shape[1] == b.shape[0],
                 lambda: f"gemmlab::mm: inner dimensions differ, {tuple(a.shape)} @ {tuple(b.shape)}")
    torch._check(a.dtype == b.dtype and a.dtype in _DTYPES,
                 lambda: f"gemmlab::mm takes two float32, float16 or bfloat16 tensors of one dtype, "
                         f"not {a.dtype} and {b.dtype}")
    return a.new_empty((a.shape[0], b.shape[1]))


class _MM(torch.autograd.Function):
    """The product with its gradients: grad_a = grad @ b^T, grad_b = a^T @ grad,
    each again gemmlab's operator (transposed views are read in place)."""

    @staticmethod
    def forward(ctx, a, b, kernel_name):
        with torch._C._AutoDispatchBelowAutograd():
            out = _op(a, b, kernel_name)
        ctx.save_for_backward(a, b)
        ctx.kernel_name = kernel_name
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = _op(grad, b.t(), ctx.kernel_name) if ctx.needs_input_grad[0] else None
        grad_b = _op(a.t(), grad, ctx.kernel_name) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b, None


def _mm_autograd(a: torch.Tensor, b: torch.Tensor, kernel_name: str = "auto") -> torch.Tensor:
    """The operator's Autograd kernel.  With a gradient to record, _MM; without
    one, plain CUDA tensors and no dispatch mode active, straight to the CUDA
    implementation (the redispatch below autograd would cost a second trip
    through the dispatcher); anything else (fake or functional tensors while
    compiling, a TorchDispatchMode) is redispatched below autograd as usual."""
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _MM.apply(a, b, kernel_name)
    if type(a) is torch.Tensor and type(b) is torch.Tensor and a.is_cuda and not _dispatch_modes():
        return _mm_impl(a, b, kernel_name)
    with torch._C._AutoDispatchBelowAutograd():
        return _op(a, b, kernel_name)


_dispatch_modes = torch._C._len_torch_dispatch_stack
_lib.impl("mm", _mm_autograd, "Autograd")
