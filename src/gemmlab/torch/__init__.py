"""gemmlab from PyTorch.

- ``gemmlab.torch.mm`` / ``bmm``: the operators torch.ops.gemmlab.mm / bmm, with
  autograd, torch.compile and the current stream (gemmlab.torch.ops).
- ``gemmlab.torch.scaled_mm``: torch.ops.gemmlab.scaled_mm, FP8 with scales on Hopper,
  torch._scaled_mm's schema (no autograd; compiled and inspected only so far).
- ``gemmlab.torch.fp32_tc()``: float32 products of a model, forward and
  backward, FP32-accurate on the tensor cores in one line; ``use_gemmlab()``
  for gemmlab's kernels at each dtype's own precision; PyTorch's own mm, bmm,
  addmm, baddbmm and mv hand their products to gemmlab while one is on, and
  _grouped_mm the calls the grouped rungs take (gemmlab.torch.routing).
- ``gemmlab.torch.grouped_mm``: torch.ops.gemmlab.grouped_mm, a mixture-of-experts
  layer's grouped products on Hopper, torch._grouped_mm's schema (2-D x 3-D with offs),
  with autograd, the weights' gradient in one launch too (compiled and emulated only so far).
- DTensor sharding rules for the operators, registered where
  torch.distributed is available (gemmlab.torch.sharding).
"""

try:
    import torch  # noqa: F401
except ModuleNotFoundError as exc:  # the [torch] extra: say how to get it, not only that it is missing
    from ..core.errors import EXTRAS, MissingExtraError

    raise MissingExtraError(f"gemmlab.torch needs PyTorch: {EXTRAS['torch'][1]}") from exc

from .ops import bmm, grouped_mm, mm, scaled_mm  # noqa: E402
from .routing import (
    NOT_ROUTED,
    ROUTED,
    Routing,
    disable_fp32_tc,
    enable_fp32_tc,
    fp32_tc,  # noqa: E402
    unregister,
    use_gemmlab,
)
from . import sharding  # noqa: F401, E402  (registers the DTensor rules)


def cuda_missing() -> str | None:
    """Why PyTorch cannot reach a CUDA GPU here, in words (None where it can): what a
    script prints before it stops, rather than a traceback from deep inside."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return "this PyTorch is a CPU build: install a CUDA build (https://pytorch.org)"
    return "PyTorch sees no CUDA GPU or driver on this machine"


__all__ = [
    "cuda_missing",
    "mm",
    "bmm",
    "scaled_mm",
    "grouped_mm",
    "fp32_tc",
    "use_gemmlab",
    "enable_fp32_tc",
    "disable_fp32_tc",
    "unregister",
    "Routing",
    "ROUTED",
    "NOT_ROUTED",
]
