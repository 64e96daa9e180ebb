"""matmul's ``bias``: result = alpha * op(a) @ op(b) + bias (+ beta * out).

A bias broadcasts to the result as NumPy broadcasts (nn.Linear's is a vector of N,
added to every row).  Where the rung adds it in its epilogue (Launching.epilogue_bias)
it costs the result no second pass through memory; elsewhere it is added after the
product by the arrays' own library, on the same stream.  Validation here, before any
launch: a bias that cannot be added is refused and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from .arrays import Operand, broadcasts, read_operand


@dataclass(frozen=True)
class BiasView:
    """A validated bias: its operand, and its element strides in the kernels' view of
    the product, (along rows, along columns, between the matrices of the batch) --
    None where the epilogue cannot take it (a vector operand's dropped dimension, or
    batch dimensions that are not one uniform stride)."""

    operand: Operand
    strides: tuple[int, int, int] | None

    def span_from_ptr(self) -> tuple[int, int]:
        """[first, last) bytes the bias can touch, relative to its address."""
        lo, hi = self.operand.span()
        return lo - self.operand.ptr, hi - self.operand.ptr


def bias_view(bias, call, out_operand: Operand | None) -> BiasView:
    """Check ``bias`` against a validated call (planner.Call) and its out; TypeError or
    ValueError naming the problem."""
    X = read_operand(bias, "bias")
    A = call.A.operand
    if X.kind != A.kind:
        raise TypeError(f"{X.label()} must be the same kind of array as a ({A.label()})")
    if X.on_gpu != call.on_gpu or (X.on_gpu and X.device != call.device):
        raise ValueError(f"{X.label()} is not on the device of a ({A.label()})")
    out_dtype = call.dtypes["out_dtype"]
    if X.dtype_name != out_dtype:
        raise TypeError(f"{X.label()} must have the result's dtype, {out_dtype}")
    shape = call.result_shape
    if not broadcasts(X.shape, shape):
        raise ValueError(f"{X.label()} does not broadcast to the result's shape {shape}")
    if out_operand is not None and X.on_gpu == out_operand.on_gpu and X.meets(out_operand):
        raise ValueError(
            f"{X.label()} shares memory with {out_operand.label()}: the product would "
            "overwrite the bias while reading it; pass a copy"
        )
    return BiasView(X, _epilogue_strides(X, call))


def _epilogue_strides(X: Operand, call) -> tuple[int, int, int] | None:
    """(rows, columns, matrices) strides of the bias over the product's batch x M x N,
    broadcast dimensions 0; None where no such three describe it."""
    shape = call.product_shape
    if tuple(call.result_shape) != tuple(shape) or len(shape) < 2:
        return None  # a vector operand's 1 left the result
    pad = len(shape) - len(X.shape)
    full = (0,) * pad + tuple(0 if n == 1 else s for n, s in zip(X.shape, X.strides))
    dims = [(n, s) for n, s in zip(shape[:-2], full[:-2]) if n != 1]
    if all(s == 0 for _, s in dims):
        zs = 0
    elif all(dims[i][1] == dims[i + 1][1] * dims[i + 1][0] for i in range(len(dims) - 1)):
        zs = dims[-1][1]  # the batch flattened in C order steps the bias by one stride
    else:
        return None
    return full[-2], full[-1], zs


def add_bias(result, bias):
    """result += bias by the arrays' own library (the rungs without the epilogue); returns
    the result (a new value for NumPy's 0-d result of vector @ vector)."""
    if type(result).__module__ == "numpy" and getattr(result, "ndim", 0) == 0:
        return (result + bias).astype(result.dtype)[()]
    if hasattr(result, "add_"):  # PyTorch
        result.add_(bias)
        return result
    result += bias
    return result
