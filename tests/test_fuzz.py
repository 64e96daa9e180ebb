"""A bounded fuzz on the GPU (hypothesis, derandomized): random shapes including
K = 0 and 1, padded leading dimensions, misaligned starts, alpha and beta from the
reference BLAS tester's set, every kernel; the result is compared with FP64 and a
guard band of memory around the output must stay untouched."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.tools.verify import random_matrix

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytestmark = pytest.mark.gpu
KERNELS = [s.name for s in registry.ladder("simt")] + ["auto"]
SCALARS = [0.0, 1.0, 0.7, -1.3]
GUARD = 12345.0


def _padded(cp, rows, cols, pad, misalign, rng):
    """A rows x cols float32 view with leading dimension cols + pad, starting one
    element into its buffer when misalign (so 16-byte loads are not allowed)."""
    ld = cols + pad
    start = 1 if misalign else 0
    buf = cp.asarray(random_matrix(1, start + rows * ld + 1, "uniform", rng)).ravel()
    return buf[start : start + rows * ld].reshape(rows, ld)[:, :cols]


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    M=st.integers(1, 260),
    N=st.integers(1, 260),
    K=st.integers(0, 300),
    pads=st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)),
    misalign=st.booleans(),
    alpha=st.sampled_from(SCALARS),
    beta=st.sampled_from(SCALARS),
    kernel=st.sampled_from(KERNELS),
)
def test_fuzz(M, N, K, pads, misalign, alpha, beta, kernel):
    import cupy as cp

    rng = np.random.default_rng(M * 100003 + N * 1009 + K)
    a = _padded(cp, M, K, pads[0], misalign, rng)
    b = _padded(cp, K, N, pads[1], False, rng)
    big = cp.full((M + 2, N + pads[2] + 2), GUARD, np.float32)  # guard rows and columns
    out = big[1 : M + 1, 1 : N + 1]
    c0 = cp.asarray(random_matrix(M, N, "uniform", rng))
    out[...] = c0
    gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel)
    cp.cuda.get_current_stream().synchronize()
    ref = alpha * (cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)) + beta * cp.asnumpy(c0).astype(
        np.float64
    )
    got = cp.asnumpy(out).astype(np.float64)
    scale = max(float(np.abs(ref).max()), 1.0)
    assert np.isfinite(got).all()
    assert float(np.abs(got - ref).max()) <= 1e-5 * scale * max(K, 1) ** 0.5, (kernel, M, N, K)
    guard = cp.asnumpy(big).copy()
    guard[1 : M + 1, 1 : N + 1] = GUARD
    assert (guard == GUARD).all(), "memory around the output was written"
