"""gemmlab's GEMM as a PyTorch operator: ``torch.ops.gemmlab.mm``.

    import gemmlab.torch                      # registers the operator
    c = gemmlab.torch.mm(a, b)                # a (M, K), b (K, N): float32 CUDA tensors
    c = gemmlab.torch.mm(a, b, kernel="pipelined")

It is a ``torch.library`` custom operator, so it works with autograd (the
backward pass runs gemmlab's kernels too: grad_a = grad @ b^T, grad_b = a^T @
grad) and inside ``torch.compile`` without graph breaks (a fake implementation
gives the output's shape to the compiler).  It runs on the current PyTorch
stream.  Transposed and other non-contiguous inputs are copied to contiguous
ones first (gemmlab's kernels read row-major operands).
"""

from __future__ import annotations

import torch

from .api import matmul

__all__ = ["mm"]


@torch.library.custom_op("gemmlab::mm", mutates_args=())
def mm(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto") -> torch.Tensor:
    """a @ b with gemmlab's ``kernel`` (any name gemmlab.matmul takes)."""
    out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)
    matmul(a.contiguous(), b.contiguous(), out=out, kernel=kernel)
    return out


@mm.register_fake
def _mm_fake(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto") -> torch.Tensor:
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "gemmlab::mm takes 2-D tensors")
    torch._check(a.shape[1] == b.shape[0],
                 lambda: f"gemmlab::mm: inner dimensions differ, {tuple(a.shape)} @ {tuple(b.shape)}")
    torch._check(a.dtype == torch.float32 and b.dtype == torch.float32,
                 lambda: "gemmlab::mm takes float32 tensors")
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup_context(ctx, inputs, output) -> None:
    a, b, kernel = inputs
    ctx.save_for_backward(a, b)
    ctx.kernel = kernel


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = mm(grad, b.t(), ctx.kernel) if ctx.needs_input_grad[0] else None
    grad_b = mm(a.t(), grad, ctx.kernel) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None


mm.register_autograd(_backward, setup_context=_setup_context)
