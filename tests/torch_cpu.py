"""CPU stand-ins for testing gemmlab.torch without a GPU: the operators'
CPU kernels replaced by a float64 product (counted), and a routing mode that
routes CPU tensors.  What is tested this way is everything around the kernel:
routing, shapes, autograd, torch.compile tracing and DTensor sharding."""

from __future__ import annotations

import contextlib

import torch

import gemmlab.torch as gt
from gemmlab.torch import ops

calls = {"mm": 0, "bmm": 0}


def _reference(name):
    def impl(a, b, kernel_name="auto", precision=""):
        # gemmlab.torch answers zero-element products itself; none may reach a kernel.
        assert a.numel() and b.numel(), f"a zero-element product reached the kernel: {a.shape} @ {b.shape}"
        calls[name] += 1
        return (a.double() @ b.double()).to(a.dtype)
    return impl


@contextlib.contextmanager
def cpu_kernels():
    """gemmlab::mm and bmm computed on the CPU (and counted) while inside."""
    saved = dict(ops.CPU_KERNELS)
    try:
        for name in calls:
            ops.CPU_KERNELS[name] = _reference(name)
        yield calls
    finally:
        ops.CPU_KERNELS.update(saved)


class CPURouting(gt.Routing):
    device_type = "cpu"
