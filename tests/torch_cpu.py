"""CPU stand-ins for testing gemmlab.torch without a GPU: the product gemmlab
would run replaced by a float64 product (counted), both for the operators'
CPU kernels and for the routing contexts, and a routing context that routes
CPU tensors.  What is tested this way is everything around the kernel:
routing, shapes, autograd, torch.compile and DTensor sharding."""

from __future__ import annotations

import contextlib
import math

import torch

import gemmlab.torch as gt
from gemmlab.torch import ops, routing

calls = {"mm": 0, "bmm": 0}
# Routed torch._grouped_mm calls: "grouped" (2-D x 3-D, rung 6), "weight_grad" (2-D x 2-D, rung 7);
# a 3-D x 3-D call is counted as "bmm" in calls.
grouped_calls = {"grouped": 0, "weight_grad": 0}
# Calls of torch.ops.gemmlab.grouped_mm's CPU kernel.
grouped_op_calls = {"grouped_mm": 0}


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


def _grouped_product(a, b, offs):
    """The grouped rung's answer in float64 products per group, rows in no group NaN (the
    kernel leaves them unwritten)."""
    out = torch.full((a.shape[0], b.shape[2]), math.nan, dtype=a.dtype)
    for g, (s, e) in enumerate(ops.group_bounds(offs, a.shape[0])):
        out[s:e] = (a[s:e].double() @ b[g].double()).to(a.dtype)
    return out


def grouped_reference(a, b, offs):
    """What the grouped rung gives a routed torch._grouped_mm (2-D x 3-D): float64 products per
    group, rows in no group NaN (the kernel leaves them unwritten); counted as "grouped"."""
    assert a.dim() == 2 and b.dim() == 3 and offs.dtype == torch.int32
    grouped_calls["grouped"] += 1
    return _grouped_product(a, b, offs)


def _grouped_columns(a, b, offs):
    """The 3-D x 2-D form in float64 products per group: column block g of the (M, N) result is
    a[g] @ b[:, group g], columns in no group NaN (the kernel leaves them unwritten)."""
    out = torch.full((a.shape[1], b.shape[1]), math.nan, dtype=a.dtype)
    for g, (s, e) in enumerate(ops.group_bounds(offs, b.shape[1])):
        out[:, s:e] = (a[g].double() @ b[:, s:e].double()).to(a.dtype)
    return out


def grouped_forms_product(a, b, offs):
    """What the grouped rungs give each of torch._grouped_mm's forms, in float64 products."""
    form = ops.grouped_form(a, b, offs)
    if form == "2d3d":
        return _grouped_product(a, b, offs)
    if form == "2d2d":
        return ops._weight_grad_cpu(a.t(), b, offs, False)
    if form == "3d2d":
        return _grouped_columns(a, b, offs)
    return (a.double() @ b.double()).to(a.dtype)


def grouped_op_reference(a, b, offs, bias=None, out_dtype=None):
    """torch.ops.gemmlab.grouped_mm's CPU kernel: the operator's refusals, then the grouped
    rungs' stand-in for the call's form; counted in grouped_op_calls."""
    ops._grouped_refusals(a, b, offs, bias, out_dtype)
    grouped_op_calls["grouped_mm"] += 1
    return grouped_forms_product(a, b, offs)


def weight_grad_reference(a, b, offs):
    """What grouped_wgrad gives a routed torch._grouped_mm of the 2-D x 2-D form, a (P, T) x
    b (T, Q): out[g] = a[:, group g] @ b[group g], zeros for an empty group; counted."""
    assert a.dim() == 2 and b.dim() == 2 and a.stride(0) == 1, "autograd's a is x.t() of a row-major x"
    grouped_calls["weight_grad"] += 1
    return ops._weight_grad_cpu(a.t(), b, offs, False)


@contextlib.contextmanager
def cpu_kernels(product=routed_reference):
    """gemmlab's products computed on the CPU (and counted) while inside: the
    operators' CPU kernels (grouped_mm's too), and what the routing contexts run
    (torch._grouped_mm's too, on any device: the Hopper check answers yes)."""
    saved, saved_product, saved_grouped = dict(ops.CPU_KERNELS), routing.PRODUCT["fn"], dict(routing.GROUPED)
    try:
        for name in calls:
            ops.CPU_KERNELS[name] = _reference(name)
        ops.CPU_KERNELS["grouped_mm"] = grouped_op_reference
        routing.PRODUCT["fn"] = product
        routing.GROUPED.update(
            mm=grouped_reference,
            weight_grad=weight_grad_reference,
            arch=lambda device: True,
        )
        yield calls
    finally:
        ops.CPU_KERNELS.update(saved)
        routing.PRODUCT["fn"] = saved_product
        routing.GROUPED.update(saved_grouped)


class CPURouting(gt.Routing):
    dispatch_key = "CPU"
