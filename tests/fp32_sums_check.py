"""The FP64 check of the CUDA-core thin rungs (gemv, outer, the batch rungs): each output element
an FP32 sum of K products (with alpha and beta * C), rounded once to the output type; and the
operands those tests build (test helper)."""

import pytest

# The (storage, output) types the CUDA-core thin and batch rungs take, and the four layouts.
THIN_DTYPES = [
    ("float32", "float32"),
    ("float16", "float16"),
    ("float16", "float32"),
    ("bfloat16", "bfloat16"),
    ("bfloat16", "float32"),
]
LAYOUTS = [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")]

# The output type's relative rounding, and the spacing of its subnormals: where a result
# rounds into them, its error is bounded by that spacing, not by a fraction of its size.
OUT_EPS = {"float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}
OUT_TINY = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}


def check_fp32_sums(out, a64, b64, c0, alpha, beta, K, out_dtype, plan):
    """Fail naming the first wrong element of ``out`` (a torch tensor) against
    alpha * a64 @ b64 + beta * c0 in FP64; a NaN left in ``out`` (never written) is wrong."""
    ref = alpha * (a64 @ b64) + (beta * c0.double() if beta else 0)
    scale = abs(alpha) * (a64.abs() @ b64.abs()) + (abs(beta) * c0.double().abs() if beta else 0)
    tol = 4 * (K + 8) * 2.0**-24 * scale + OUT_EPS[out_dtype] * ref.abs() + OUT_TINY[out_dtype]
    bad = out.isnan() | ((out.double() - ref).abs() > tol)
    if bad.any():
        idx = [int(i) for i in bad.nonzero()[0]]
        M, N = out.shape[-2:]
        pytest.fail(
            f"{plan.name_expression} {M}x{N}x{K}: {int(bad.sum())} of {bad.numel()} wrong; first at {idx}: "
            f"{float(out[tuple(idx)])} vs {float(ref[tuple(idx)])}"
        )


def operand(rows, cols, dtype, stored, gen, batch=None, offset=0):
    """A rows x cols operand as the product reads it (``batch`` of them; None: one matrix),
    stored row-major ('N') or as the transpose of a row-major array ('T'), ``offset`` elements
    into a fresh CUDA buffer of U(-1, 1) values; and its FP64 copy."""
    import torch

    lead = () if batch is None else (batch,)
    shape = (*lead, rows, cols) if stored == "N" else (*lead, cols, rows)
    n = (batch or 1) * rows * cols
    base = torch.empty(n + offset, device="cuda", dtype=torch.float64).uniform_(-1, 1, generator=gen)
    x = base.to(getattr(torch, dtype))[offset:].view(shape)
    x64 = x.double()
    return (x, x64) if stored == "N" else (x.transpose(-1, -2), x64.transpose(-1, -2))
