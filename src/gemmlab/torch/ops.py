"""gemmlab's GEMM as PyTorch operators: ``torch.ops.gemmlab.mm`` and ``torch.ops.gemmlab.bmm``.

    import gemmlab.torch as gt                # registers the operators
    c = gt.mm(a, b)                           # a (M, K), b (K, N): CUDA tensors of one dtype
    c = gt.mm(a, b, kernel="pipelined")
    c = gt.bmm(a, b)                          # a (B, M, K), b (B, K, N)
    c = gt.mm(a, b, precision="fp32_tc")      # float32 on the tensor cores, FP32-accurate

float32 inputs run on the CUDA cores (or, with ``precision``, on the tensor
cores: "tf32", or the error-corrected "fp32_tc", "fp16_ec", "fp16_ec_scaled",
"tf32_ec"), float16 and bfloat16 on the tensor cores; the result has the
inputs' dtype.  A product with no elements in an operand (M, N, K or the batch
0) launches nothing: its result is empty, or zeros when only K is 0, as
torch.mm gives.

They are ``torch.library`` custom operators, so they work with autograd (the
backward pass runs gemmlab's kernels too, with the same kernel and precision:
grad_a = grad @ b^T, grad_b = a^T @ grad) and inside ``torch.compile`` without
graph breaks (fake implementations give the output's shape to the compiler),
and DTensor shards them (gemmlab.torch.sharding).  They run on the current
PyTorch stream.  Transposed views (``a.t()``, ``k.transpose(-1, -2)``, and the
transposes the backward pass multiplies with) are read in place, as
column-major operands, without a copy; only strides with no unit step
(``a[:, ::2]``) are copied first (see gemmlab.matmul).
"""

from __future__ import annotations

import torch

from ..core.api import matmul

__all__ = ["mm", "bmm", "scaled_mm", "grouped_mm"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def mm(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto", precision: str | None = None) -> torch.Tensor:
    """a @ b for 2-D a and b with gemmlab's ``kernel`` (any name gemmlab.matmul
    takes) and ``precision`` (as gemmlab.matmul's; None: the dtype's own)."""
    return _mm(a, b, kernel, precision or "")


def bmm(a: torch.Tensor, b: torch.Tensor, kernel: str = "auto", precision: str | None = None) -> torch.Tensor:
    """a @ b for 3-D a (B, M, K) and b (B, K, N): one gemmlab call over the batch."""
    return _bmm(a, b, kernel, precision or "")


# Defined with torch.library's low-level API rather than @custom_op, with their
# own Autograd kernel rather than register_autograd: on an H100's host the
# decorator's and register_autograd's Python wrappers cost 10-15 us per call
# more (benchmarks/NOTES.md, host costs).  The third argument is not called
# "kernel": Inductor passes an operator's arguments on by keyword to a function
# that has its own "kernel" parameter (FallbackKernel.create), which then fails
# under torch.compile.  precision "" is the dtype's default (a schema string
# cannot default to None and stay a plain str).
_lib = torch.library.Library("gemmlab", "DEF")
_lib.define("mm(Tensor a, Tensor b, str kernel_name='auto', str precision='') -> Tensor")
_lib.define("bmm(Tensor a, Tensor b, str kernel_name='auto', str precision='') -> Tensor")
_NDIM = {"mm": 2, "bmm": 3}


def _impl_and_fake(name: str):
    ndim = _NDIM[name]

    def impl(a: torch.Tensor, b: torch.Tensor, kernel_name: str = "auto", precision: str = "") -> torch.Tensor:
        if a.dim() != ndim or b.dim() != ndim:
            raise ValueError(f"gemmlab::{name} takes {ndim}-D tensors; got {a.dim()}-D and {b.dim()}-D")
        if ndim == 3 and a.shape[0] != b.shape[0]:
            raise ValueError(f"gemmlab::bmm: batch sizes differ, {tuple(a.shape)} @ {tuple(b.shape)}")
        if not (a.numel() and b.numel()):
            return _empty_product(name, a, b)
        return matmul(a, b, kernel=kernel_name, precision=precision or None)

    def fake(a: torch.Tensor, b: torch.Tensor, kernel_name: str = "auto", precision: str = "") -> torch.Tensor:
        torch._check(a.dim() == ndim and b.dim() == ndim, lambda: f"gemmlab::{name} takes {ndim}-D tensors")
        torch._check(
            a.shape[-1] == b.shape[-2],
            lambda: f"gemmlab::{name}: inner dimensions differ, {tuple(a.shape)} @ {tuple(b.shape)}",
        )
        if ndim == 3:
            torch._check(
                a.shape[0] == b.shape[0],
                lambda: f"gemmlab::bmm: batch sizes differ, {tuple(a.shape)} @ {tuple(b.shape)}",
            )
        torch._check(
            a.dtype == b.dtype and a.dtype in _DTYPES,
            lambda: (
                f"gemmlab::{name} takes two float32, float16 or bfloat16 tensors of one dtype, "
                f"not {a.dtype} and {b.dtype}"
            ),
        )
        return a.new_empty((*a.shape[:-1], b.shape[-1]))

    return impl, fake


def _empty_product(name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The product when a or b has no elements (M, N, K or the batch is 0): empty,
    or zeros when only K is 0, as torch.mm gives; no kernel runs.  The operands
    are checked as the kernels' path checks them."""
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"gemmlab::{name}: inner dimensions differ, {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in _DTYPES:
        raise TypeError(
            f"gemmlab::{name} takes two float32, float16 or bfloat16 tensors of one dtype, not {a.dtype} and {b.dtype}"
        )
    if a.device != b.device:
        raise ValueError(f"gemmlab::{name}: the operands are on different devices, {a.device} and {b.device}")
    return a.new_zeros((*a.shape[:-1], b.shape[-1]))


def _cpu_kernel(name: str):
    # Looked up at each call, so that tests without a GPU can stand a CPU product
    # in for gemmlab's kernels (tests/torch_cpu.py) and exercise all around them.
    # Zero-element products take the CUDA implementation's own checks and
    # answer (no kernel), so that those tests exercise them too.
    def kernel(a, b, kernel_name="auto", precision=""):
        if not (a.numel() and b.numel()):
            return _IMPLS[name](a, b, kernel_name, precision)
        return CPU_KERNELS[name](a, b, kernel_name, precision)

    return kernel


_IMPLS = {}
for _name in _NDIM:
    _impl, _fake = _impl_and_fake(_name)
    _IMPLS[_name] = _impl
    _lib.impl(_name, _impl, "CUDA")
    _lib.impl(_name, _cpu_kernel(_name), "CPU")
    torch.library.register_fake(f"gemmlab::{_name}", _fake, lib=_lib)
# On the CPU, gemmlab's own message (it reads CUDA tensors) rather than PyTorch's "no kernel".
CPU_KERNELS = dict(_IMPLS)
_mm = torch.ops.gemmlab.mm.default
_bmm = torch.ops.gemmlab.bmm.default


def _product_function(op):
    """The product with its gradients: grad_a = grad @ b^T, grad_b = a^T @ grad,
    each again gemmlab's operator with the same kernel and precision (transposed
    views are read in place)."""

    class Product(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, kernel_name, precision):
            with torch._C._AutoDispatchBelowAutograd():
                out = op(a, b, kernel_name, precision)
            ctx.save_for_backward(a, b)
            ctx.kernel_name, ctx.precision = kernel_name, precision
            return out

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            kernel_name, precision = ctx.kernel_name, ctx.precision
            grad_a = op(grad, b.transpose(-1, -2), kernel_name, precision) if ctx.needs_input_grad[0] else None
            grad_b = op(a.transpose(-1, -2), grad, kernel_name, precision) if ctx.needs_input_grad[1] else None
            return grad_a, grad_b, None, None

    return Product


def _autograd_kernel(name: str):
    op, impl = getattr(torch.ops.gemmlab, name).default, _IMPLS[name]
    product = _product_function(op)

    def kernel(a: torch.Tensor, b: torch.Tensor, kernel_name: str = "auto", precision: str = "") -> torch.Tensor:
        """The operator's Autograd kernel.  With a gradient to record, the
        autograd Function; without one, plain CUDA tensors and no dispatch mode active, straight to
        the CUDA implementation (the redispatch below autograd would cost a second
        trip through the dispatcher); anything else (fake or functional tensors
        while compiling, DTensors, a TorchDispatchMode) is redispatched below
        autograd as usual."""
        if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
            return product.apply(a, b, kernel_name, precision)
        if type(a) is torch.Tensor and type(b) is torch.Tensor and a.is_cuda and not _dispatch_modes():
            return impl(a, b, kernel_name, precision)
        with torch._C._AutoDispatchBelowAutograd():
            return op(a, b, kernel_name, precision)

    return kernel


_dispatch_modes = torch._C._len_torch_dispatch_stack
for _name in _NDIM:
    _lib.impl(_name, _autograd_kernel(_name), "Autograd")


# -- FP8 with scales: torch._scaled_mm's contract where gemmlab's FP8 rung meets it ---------------

_lib.define(
    "scaled_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
    "Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor"
)
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_FP8_OUT = (torch.bfloat16, torch.float32)


def scaled_mm(
    self: torch.Tensor,
    mat2: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale_result: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    use_fast_accum: bool = False,
) -> torch.Tensor:
    """torch._scaled_mm's call on gemmlab's FP8 rung (wgmma_fp8, Hopper): ``self`` (M x K,
    row-major) and ``mat2`` (K x N, column-major) of float8_e4m3fn / float8_e5m2, float32
    scales per tensor, per row of ``self`` / column of ``mat2`` ((M, 1), (1, N)), or 1 x 128 /
    128 x 128 blocks; ``out_dtype`` bfloat16 or float32; ``bias`` a vector of N in
    ``out_dtype``, added to every row after the product (gemmlab.core.scaled).  Where the
    contracts part: ``out_dtype`` must be given (torch's default, an FP8 result, is not
    built), and ``scale_result`` must be None.  ``use_fast_accum=True`` leaves the whole K to the
    tensor cores' sums (PROMOTE = 0); False promotes them into FP32 registers every few
    K-steps (the rung's default).  No autograd: FP8 products here are inference's."""
    return torch.ops.gemmlab.scaled_mm.default(
        self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum
    )


def _scaled_mm_refusals(bias, scale_result, out_dtype) -> None:
    if bias is not None and (bias.dim() != 1 or bias.dtype != out_dtype):
        raise ValueError(
            f"gemmlab::scaled_mm adds a bias of N values in out_dtype ({out_dtype}), as torch._scaled_mm; "
            f"got a {bias.dim()}-D {bias.dtype} tensor"
        )
    if scale_result is not None:
        raise ValueError("gemmlab::scaled_mm writes bfloat16 or float32, so it takes no scale_result (an FP8 result's)")
    if out_dtype not in _FP8_OUT:
        raise TypeError(
            f"gemmlab::scaled_mm writes torch.bfloat16 or torch.float32 (out_dtype), not {out_dtype}"
            + (" (torch._scaled_mm's default, an FP8 result, is not built)" if out_dtype is None else "")
        )


def _scaled_mm_impl(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    _scaled_mm_refusals(bias, scale_result, out_dtype)
    fast = {"PROMOTE": 0} if use_fast_accum else {}  # auto's tile, without promotion
    return matmul(self, mat2, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, bias=bias, **fast)


def _scaled_mm_fake(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    torch._check(self.dim() == 2 and mat2.dim() == 2, lambda: "gemmlab::scaled_mm takes 2-D tensors")
    torch._check(
        self.shape[1] == mat2.shape[0],
        lambda: f"gemmlab::scaled_mm: inner dimensions differ, {tuple(self.shape)} @ {tuple(mat2.shape)}",
    )
    torch._check(
        self.dtype in _FP8 and mat2.dtype in _FP8,
        lambda: f"gemmlab::scaled_mm takes float8_e4m3fn / float8_e5m2 tensors, not {self.dtype} and {mat2.dtype}",
    )
    _scaled_mm_refusals(bias, scale_result, out_dtype)
    return self.new_empty((self.shape[0], mat2.shape[1]), dtype=out_dtype)


_lib.impl("scaled_mm", _scaled_mm_impl, "CUDA")
torch.library.register_fake("gemmlab::scaled_mm", _scaled_mm_fake, lib=_lib)


# -- grouped products: torch._grouped_mm's contract for a mixture-of-experts layer --------------

_lib.define(
    "grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor"
)
_GROUPED = (torch.float16, torch.bfloat16)


def grouped_mm(
    self: torch.Tensor,
    mat2: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """torch._grouped_mm's call on gemmlab's grouped rungs (Hopper), in each of its four forms
    (``grouped_form``), float16 / bfloat16 CUDA tensors of one dtype, ``offs`` G int32 cumulative
    ends of the groups:

    * self (T, K) x mat2 (G, K, N) -> (T, N): row block g of self times mat2[g] (rung 6; the
      mixture-of-experts layer's product; mat2 row-major or the transpose of a row-major
      (G, N, K));
    * self (M, K) x mat2 (K, N), offs over K -> (G, M, N): matrix g is self's column block g
      times mat2's row block g (rung 7, grouped_wgrad: the weights' gradient);
    * self (G, M, K) x mat2 (K, N), offs over N -> (M, N): column block g is self[g] times
      mat2's column block g (rung 6 on the transposes: out^T's row block g = mat2's column
      block g^T @ self[g]^T; mat2's transpose is copied to row-major where it is not, and the
      result to (M, N) row-major: 2.4x PyTorch's kernel's time where measured, benchmarks/NOTES.md);
    * self (G, M, K) x mat2 (G, K, N), no offs -> (G, M, N): a batch (gemmlab's batched rung).

    Rows (or columns) in no group are not written, as PyTorch leaves them; an empty group's
    matrix in the 2-D x 2-D form is zeros.  ``bias`` must be None and ``out_dtype`` None or
    the inputs' dtype (PyTorch refuses the others for 16-bit inputs too); the grouped rungs
    read rows 16 bytes apart, so the widths they read (K and N; M too on the transposes) must
    be multiples of 8.  Autograd: every gradient is again one of the four forms, one launch
    each.  DTensor shards each form (gemmlab.torch.sharding)."""
    return torch.ops.gemmlab.grouped_mm.default(self, mat2, offs, bias, out_dtype)


def grouped_form(self, mat2, offs) -> str:
    """Which of torch._grouped_mm's forms a call is, by its operands' dimensions: "2d3d",
    "2d2d" and "3d2d" take offs, "3d3d" (a batch) does not; ValueError for any other call."""
    form = f"{self.dim()}d{mat2.dim()}d"
    if form not in ("2d3d", "2d2d", "3d2d", "3d3d"):
        raise ValueError(
            f"gemmlab::grouped_mm takes a 2-D or 3-D self and mat2 (torch._grouped_mm's forms); got "
            f"{self.dim()}-D and {mat2.dim()}-D"
        )
    if (offs is None) != (form == "3d3d"):
        raise ValueError(
            "gemmlab::grouped_mm: a 3-D self and 3-D mat2 are a batch and take no offs"
            if form == "3d3d"
            else f"gemmlab::grouped_mm: the {form[:2]} x {form[2:]} form needs offs, the groups' cumulative ends"
        )
    return form


def _grouped_refusals(self, mat2, offs, bias, out_dtype) -> str:
    form = grouped_form(self, mat2, offs)
    if bias is not None:
        raise ValueError("gemmlab::grouped_mm adds no bias (nor does torch._grouped_mm): pass bias=None")
    if out_dtype is not None and out_dtype != self.dtype:
        raise TypeError(f"gemmlab::grouped_mm writes its inputs' dtype ({self.dtype}), not out_dtype {out_dtype}")
    return form


# What each form's offs cut, and the product's shape, from the operands' shapes.
_GROUPED_SHAPES = {
    "2d3d": ("self's rows", lambda a, b: (a.shape[0], b.shape[2])),
    "2d2d": ("K", lambda a, b: (None, a.shape[0], b.shape[1])),
    "3d2d": ("mat2's columns", lambda a, b: (a.shape[1], b.shape[1])),
    "3d3d": ("", lambda a, b: (a.shape[0], a.shape[1], b.shape[2])),
}


def _grouped_shape(form, self, mat2, offs) -> tuple:
    shape = _GROUPED_SHAPES[form][1](self, mat2)
    return (offs.shape[0], *shape[1:]) if form == "2d2d" else shape


def _grouped_impl(self, mat2, offs=None, bias=None, out_dtype=None):
    form = _grouped_refusals(self, mat2, offs, bias, out_dtype)
    if form == "2d3d":
        return _grouped_mm_call(self if self.stride(-1) == 1 else _readable(self), mat2, offs)
    if form == "2d2d":
        return _weight_grad_impl(self.t(), mat2, offs, False)
    if form == "3d2d":
        # out^T (N, M): row block g = mat2[:, group g]^T @ self[g]^T, the 2-D x 3-D form.
        at, bt = _readable(mat2.t()), _readable(self).transpose(-2, -1)
        return _grouped_mm_call(at, bt, offs).t().contiguous()
    _batch_checks(self, mat2)
    return matmul(self, mat2)


def _readable(x: torch.Tensor) -> torch.Tensor:
    """x row-major (contiguous) at a 16-byte aligned address, as the grouped rungs read an
    operand they take row-major: x itself where it is, else a copy."""
    if not x.is_contiguous():
        x = x.contiguous()
    return x if x.data_ptr() % 16 == 0 else x.clone()


def _batch_checks(self, mat2) -> None:
    if self.shape[0] != mat2.shape[0] or self.shape[2] != mat2.shape[1]:
        raise ValueError(
            f"gemmlab::grouped_mm: a batch of {tuple(self.shape)} @ {tuple(mat2.shape)} needs the same G and inner dimension"
        )
    if self.dtype not in _GROUPED or mat2.dtype != self.dtype:
        raise TypeError(
            f"gemmlab::grouped_mm takes float16 or bfloat16 tensors of one dtype, not {self.dtype} and {mat2.dtype}"
        )


def _grouped_fake(self, mat2, offs=None, bias=None, out_dtype=None):
    form = _grouped_refusals(self, mat2, offs, bias, out_dtype)
    inner = {"2d3d": (1, 1), "2d2d": (1, 0), "3d2d": (2, 0), "3d3d": (2, 1)}[form]
    torch._check(
        self.shape[inner[0]] == mat2.shape[inner[1]],
        lambda: f"gemmlab::grouped_mm: inner dimensions differ, {tuple(self.shape)} @ {tuple(mat2.shape)}",
    )
    torch._check(
        self.dtype in _GROUPED and mat2.dtype == self.dtype,
        lambda: (
            f"gemmlab::grouped_mm takes float16 or bfloat16 tensors of one dtype, not {self.dtype} and {mat2.dtype}"
        ),
    )
    if form == "3d3d":
        torch._check(
            self.shape[0] == mat2.shape[0],
            lambda: f"gemmlab::grouped_mm: a batch of {tuple(self.shape)} @ {tuple(mat2.shape)} needs the same G",
        )
    else:
        groups = mat2.shape[0] if form == "2d3d" else self.shape[0] if form == "3d2d" else None
        torch._check(
            offs.dtype == torch.int32 and offs.dim() == 1 and (groups is None or offs.shape[0] == groups),
            lambda: (
                f"gemmlab::grouped_mm: offs must be {'' if groups is None else groups} int32 ends of groups of "
                f"{_GROUPED_SHAPES[form][0]}, not {offs.dtype} {tuple(offs.shape)}"
            ),
        )
    return self.new_empty(_grouped_shape(form, self, mat2, offs))


def _grouped_cpu(self, mat2, offs=None, bias=None, out_dtype=None):
    # Looked up at each call, so that tests without a GPU can stand a CPU product in.
    return CPU_KERNELS["grouped_mm"](self, mat2, offs, bias, out_dtype)


CPU_KERNELS["grouped_mm"] = _grouped_impl  # on the CPU: gemmlab's own message (it reads CUDA tensors)
_lib.impl("grouped_mm", _grouped_impl, "CUDA")
_lib.impl("grouped_mm", _grouped_cpu, "CPU")
torch.library.register_fake("gemmlab::grouped_mm", _grouped_fake, lib=_lib)
_grouped_op = torch.ops.gemmlab.grouped_mm.default


def _grouped_mm_call(a, b, offs):
    from ..core.api import grouped_mm as call

    return call(a, b, offs)


def group_bounds(offs: torch.Tensor, rows: int) -> list[tuple[int, int]]:
    """Each group's rows [start, end) as the kernel reads offs (06_grouped.cuh's group_rows:
    clamped into [0, rows], a group ending before its start empty, the next starting at that
    end: decreasing offsets give overlapping groups); reads offs on the host."""
    bounds, prev = [], 0
    for end in offs.tolist():
        start = min(max(prev, 0), rows)
        bounds.append((start, min(max(end, start), rows)))
        prev = end
    return bounds


# ``transposed`` is an int, not a bool: DTensor keys its cache of sharding decisions on int
# arguments (and tensors), so the two layouts get decisions of their own (gemmlab.torch.sharding).
_lib.define("grouped_mm_weight_grad(Tensor a, Tensor grad, Tensor offs, int transposed) -> Tensor")


def _weight_grad_impl(a, grad, offs, transposed):
    """The gradient of a grouped product's weights: matrix g is a_g^T @ grad_g over group g's
    rows (zeros for an empty group), (G, K, N); ``transposed``: its transpose grad_g^T @ a_g,
    (G, N, K) contiguous, for a weight stored (G, N, K).  One launch of the grouped_wgrad rung
    (gemmlab.core.grouped.grouped_weight_grad); the offsets stay on the GPU."""
    from ..core.grouped import grouped_weight_grad

    x, y = (grad, a) if transposed else (a, grad)
    return grouped_weight_grad(x.contiguous(), y.contiguous(), offs)


def _weight_grad_cpu(a, grad, offs, transposed):
    """The CPU's answer (the tests' reference, without a GPU): the offsets read on the host,
    one float64 product per non-empty group."""
    G, K, N = offs.shape[0], a.shape[1], grad.shape[1]
    out = a.new_zeros((G, N, K) if transposed else (G, K, N))
    for g, (s, e) in enumerate(group_bounds(offs, a.shape[0])):
        if e <= s:
            continue
        x, y = (grad[s:e].t(), a[s:e]) if transposed else (a[s:e].t(), grad[s:e])
        out[g] = (x.double() @ y.double()).to(out.dtype)
    return out


def _weight_grad_fake(a, grad, offs, transposed):
    G, K, N = offs.shape[0], a.shape[1], grad.shape[1]
    return a.new_empty((G, N, K) if transposed else (G, K, N))


_lib.impl("grouped_mm_weight_grad", _weight_grad_impl, "CUDA")
_lib.impl("grouped_mm_weight_grad", _weight_grad_cpu, "CPU")
torch.library.register_fake("gemmlab::grouped_mm_weight_grad", _weight_grad_fake, lib=_lib)
_weight_grad = torch.ops.gemmlab.grouped_mm_weight_grad.default


def _rows_in_groups(offs: torch.Tensor, rows: int, device) -> torch.Tensor:
    """A (rows, 1) mask of the rows some group holds (those before offs[-1], clamped), on
    the GPU without reading offs on the host."""
    last = offs[-1:].clamp(0, rows) if offs.numel() else offs.new_zeros(1)
    index = torch.arange(rows, device=device)
    if type(offs) is not torch.Tensor and hasattr(offs, "device_mesh"):
        # A DTensor's offsets (sharding.py): the row numbers replicated beside them, as DTensor
        # refuses to mix in a plain tensor.
        from torch.distributed.tensor import DTensor, Replicate

        mesh = offs.device_mesh
        index = DTensor.from_local(index, mesh, [Replicate()] * mesh.ndim, run_check=False)
    return (index < last).unsqueeze(1)


def _in_groups(x: torch.Tensor, offs: torch.Tensor, dim: int) -> torch.Tensor:
    """``x`` with the rows (dim 0) or columns (dim 1) that no group holds set to zero: the
    grouped rungs leave them unwritten, and their gradient is zero."""
    mask = _rows_in_groups(offs, x.shape[dim], x.device)
    return torch.where(mask if dim == 0 else mask.t(), x, 0)


def _grouped_grads(form, a, b, offs, grad, needs):
    """The gradients of a grouped product of ``form`` (each one of the four forms again, one
    launch), those not needed None."""
    op = _grouped_op
    grad_a = grad_b = None
    if form == "2d3d":  # out[rows g] = a[rows g] @ b[g]
        if needs[0]:
            grad_a = _in_groups(op(grad, b.transpose(-2, -1), offs, None, None), offs, 0)
        if needs[1]:
            # One launch (grouped_wgrad), laid out as b is: a transposed (G, N, K) weight gets a
            # transposed gradient.
            transposed = b.stride(1) == 1 and b.stride(2) != 1
            grad_b = _weight_grad(a, grad, offs, int(transposed))
            grad_b = grad_b.transpose(-2, -1) if transposed else grad_b
    elif form == "2d2d":  # out[g] = a[:, cols g] @ b[rows g]
        if needs[0]:
            grad_a = _in_groups(op(grad, b.t(), offs, None, None), offs, 1)
        if needs[1]:
            grad_b = _in_groups(op(a.t().contiguous(), grad, offs, None, None), offs, 0)
    elif form == "3d2d":  # out[:, cols g] = a[g] @ b[:, cols g]
        if needs[0]:
            grad_a = op(grad, b.t(), offs, None, None)
        if needs[1]:
            grad_b = _in_groups(op(a.transpose(-2, -1), grad, offs, None, None), offs, 1)
    else:  # a batch
        if needs[0]:
            grad_a = op(grad, b.transpose(-2, -1), None, None, None)
        if needs[1]:
            grad_b = op(a.transpose(-2, -1), grad, None, None, None)
    return grad_a, grad_b


class _GroupedProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, offs, bias, out_dtype):
        with torch._C._AutoDispatchBelowAutograd():
            out = _grouped_op(a, b, offs, bias, out_dtype)
        ctx.form = grouped_form(a, b, offs)
        ctx.save_for_backward(a, b, offs)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, offs = ctx.saved_tensors
        grad_a, grad_b = _grouped_grads(ctx.form, a, b, offs, grad.contiguous(), ctx.needs_input_grad[:2])
        return grad_a, grad_b, None, None, None


def _grouped_autograd(self, mat2, offs=None, bias=None, out_dtype=None):
    if torch.is_grad_enabled() and (self.requires_grad or mat2.requires_grad):
        return _GroupedProduct.apply(self, mat2, offs, bias, out_dtype)
    with torch._C._AutoDispatchBelowAutograd():
        return _grouped_op(self, mat2, offs, bias, out_dtype)


_lib.impl("grouped_mm", _grouped_autograd, "Autograd")
