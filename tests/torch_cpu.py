"""CPU stand-ins for testing gemmlab.torch without a GPU: the product gemmlab
would run replaced by a float64 product (counted), both for the operators'
CPU kernels and for the routing contexts, and a routing context that routes
CPU tensors.  What is tested this way is everything around the kernel:
routing, shapes, autograd, torch.compile and DTensor sharding."""

from __future__ import annotations

import contextlib


import gemmlab.torch as gt
from gemmlab.torch import ops, routing

calls = {"mm": 0, "bmm": 0}


def _reference(name):
    def impl(a, b, kernel_name="auto", precision=""):
        # gemmlab.torch answers zero-element products itself; none may reach a kernel.
        assert a.numel() and b.numel(), f"a zero-element product reached the kernel: {a.shape} @ {b.shape}"
        calls[name] += 1
        return (a.double() @ b.double()).to(a.dtype)

    return impl


def routed_reference(a, b, *, kernel="auto", precision=None, out=None, alpha=1.0, beta=0.0, bias=None):
    """What gemmlab.matmul gives a routed call (alpha * a @ b + bias + beta * out), in
    float64, counted as "mm" (matrices, and a matrix times a vector) or "bmm"."""
    assert a.numel() and b.numel(), f"a zero-element product was routed: {a.shape} @ {b.shape}"
    calls["bmm" if a.dim() == 3 else "mm"] += 1
    product = alpha * (a.double() @ b.double())
    if bias is not None:
        product = product + bias.double()
    if out is None:
        return product.to(a.dtype)
    out.copy_(product + beta * out.double() if beta != 0 else product)
    return out


@contextlib.contextmanager
def cpu_kernels(product=routed_reference):
    """gemmlab's products computed on the CPU (and counted) while inside: the
    operators' CPU kernels, and what the routing contexts run."""
    saved, saved_product = dict(ops.CPU_KERNELS), routing.PRODUCT["fn"]
    try:
        for name in calls:
            ops.CPU_KERNELS[name] = _reference(name)
        routing.PRODUCT["fn"] = product
        yield calls
    finally:
        ops.CPU_KERNELS.update(saved)
        routing.PRODUCT["fn"] = saved_product


class CPURouting(gt.Routing):
    dispatch_key = "CPU"
