"""The tensor-core ladder against an FP64 reference computed from the same
(rounded) inputs, on odd shapes, with the output poisoned first."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.verify import random_matrix

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SHAPES = [(1, 1, 1), (7, 13, 5), (33, 65, 17), (127, 129, 255), (300, 70, 1000), (16, 16, 4096)]
TENSOR = [s.name for s in registry.ladder("tensor")] + ["auto"]
# Bounds on the relative Frobenius error against FP64 on the rounded inputs, so
# that only the accumulation and the output rounding count: the tensor cores'
# FP32 accumulation does not round to nearest, so allow 1e-4 at K up to 4096
# (a wrong element or tile gives errors near 1); a 16-bit output adds its own
# rounding (2^-11 for FP16, 2^-8 for BF16, relative).
BOUND = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}


def _inputs(M, N, K, dtype, rng):
    a = torch.from_numpy(random_matrix(M, K, "uniform", rng)).cuda()
    b = torch.from_numpy(random_matrix(K, N, "uniform", rng)).cuda()
    if dtype == "tf32":
        return a, b, a.double(), b.double()
    t = getattr(torch, dtype)
    a, b = a.to(t), b.to(t)
    return a, b, a.double(), b.double()


def _tf32_round(x):
    """x rounded to TF32 (10 mantissa bits), as the tensor cores see it."""
    bits = x.float().view(torch.int32)
    bits = (bits + 0x1000) & ~0x1FFF
    return bits.view(torch.float32).double()


@pytest.mark.parametrize("kernel", TENSOR)
@pytest.mark.parametrize("dtype, out_dtype", [("float16", "float32"), ("float16", "float16"),
                                              ("bfloat16", "float32"), ("bfloat16", "bfloat16"),
                                              ("tf32", "float32")])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_tensor_kernel_matches_fp64(kernel, dtype, out_dtype, shape, alpha, beta):
    M, N, K = shape
    rng = np.random.default_rng(M * 7 + N * 3 + K)
    a, b, a64, b64 = _inputs(M, N, K, dtype, rng)
    if dtype == "tf32":
        a64, b64 = _tf32_round(a), _tf32_round(b)
    ot = getattr(torch, out_dtype)
    c0 = torch.from_numpy(random_matrix(M, N, "uniform", rng)).cuda().to(ot) if beta else \
        torch.full((M, N), float("nan"), device="cuda", dtype=ot)
    out = c0.clone()
    kw = {"precision": "tf32"} if dtype == "tf32" else {}
    gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel, **kw)
    torch.cuda.synchronize()
    ref = alpha * (a64 @ b64) + (beta * c0.double() if beta else 0)
    assert not torch.isnan(out).any(), "elements unwritten or NaN"
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"


def test_default_result_dtype_is_the_inputs():
    a = torch.rand((40, 30), device="cuda", dtype=torch.float16)
    b = torch.rand((30, 20), device="cuda", dtype=torch.float16)
    assert gemmlab.matmul(a, b).dtype == torch.float16
    assert gemmlab.matmul(a, b, out_dtype="float32").dtype == torch.float32
    f = torch.rand((40, 30), device="cuda")
    assert gemmlab.matmul(f, f.t().contiguous(), precision="tf32").dtype == torch.float32


def test_alpha_zero_reads_neither_a_nor_b_in_16_bit():
    a = torch.full((33, 17), float("nan"), device="cuda", dtype=torch.float16)
    b = torch.full((17, 40), float("nan"), device="cuda", dtype=torch.float16)
    c0 = torch.rand((33, 40), device="cuda", dtype=torch.float16)
    out = c0.clone()
    gemmlab.matmul(a, b, out=out, alpha=0.0, beta=0.5)
    assert torch.equal(out, (c0.float() * 0.5).half())
