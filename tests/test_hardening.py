"""What must hold under odd conditions: NaN and Inf propagate as IEEE says, a
result too big for the GPU is a clear error, sizes beyond 32-bit ints are
refused, and several threads on several streams get correct results."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.tools.verify import compare, random_matrix, reference
from threads import run_in_threads

KERNELS = [s.name for s in registry.ladder("simt")] + ["auto"]


def test_sizes_beyond_32_bit_ints_are_refused():
    # A (1, 2^31) view of a small buffer: nothing is read, the shape alone is refused.
    buf = np.zeros(8, np.float32)
    wide = np.lib.stride_tricks.as_strided(buf, shape=(1, 2**31), strides=(4 * 2**31, 4))
    with pytest.raises(ValueError, match=r"has shape \(1, 2147483648\) and leading dimension 2147483648: .*32-bit int"):
        gemmlab.matmul(wide, np.zeros((4, 4), np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_nan_and_inf_propagate(kernel):
    import cupy as cp

    rng = np.random.default_rng(3)
    M, N, K = 45, 70, 33
    a = random_matrix(M, K, "uniform", rng)
    b = random_matrix(K, N, "uniform", rng)
    a[7, 5] = np.nan  # row 7 of C: all NaN
    b[11, 20] = np.inf  # column 20 of C: +-Inf, or NaN where row 7 meets it
    c = cp.asnumpy(gemmlab.matmul(cp.asarray(a), cp.asarray(b), kernel=kernel))
    assert np.isnan(c[7]).all()
    col = np.delete(c[:, 20], 7)
    assert np.isinf(col).all() and (np.sign(col) == np.sign(np.delete(a[:, 11], 7))).all()
    rest = np.delete(np.delete(c, 7, axis=0), 20, axis=1)
    assert np.isfinite(rest).all()


@pytest.mark.gpu
def test_result_too_big_for_the_gpu_is_a_clear_error():
    import cupy as cp

    n = 400_000  # the result would need 596 GiB
    a, b = cp.ones((n, 1), np.float32), cp.ones((1, n), np.float32)
    with pytest.raises(MemoryError, match=r"the result \(400000 x 400000 float32\) needs 596\.05 GiB"):
        gemmlab.matmul(a, b)


@pytest.mark.gpu
def test_threads_on_their_own_streams_get_correct_results():
    import cupy as cp

    results = {}

    def work(i):
        rng = np.random.default_rng(i)
        M, N, K = 200 + 17 * i, 150 + 13 * i, 300 + 7 * i
        with cp.cuda.Stream(non_blocking=True) as s:
            a = cp.asarray(random_matrix(M, K, "uniform", rng))
            b = cp.asarray(random_matrix(K, N, "uniform", rng))
            for rep in range(5):
                c = gemmlab.matmul(a, b, kernel=KERNELS[(i + rep) % len(KERNELS)])
            s.synchronize()
            results[i] = compare(c, reference(a, b)).rel_fro

    errors = run_in_threads(work, 8)
    assert not errors, errors
    assert len(results) == 8 and max(results.values()) <= 1e-5, results
