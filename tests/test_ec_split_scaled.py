"""fp32_tc's pre-pass on ec_wgmma's FOLD (kernels/ec/split_scaled.cu), on the GPU: a
scale per row of op(A) and column of op(B), the parts, and the method chosen in the
same pass, each against its NumPy model (gemmlab.core.methods.choose_per_row and FOLD's split),
in every layout, with K that takes one block (with a short chunk or a long one), a cluster, and a cluster whose blocks
read their share twice; a batch; a second launch on the same record (its sums were
zeroed by the first); Inf, NaN, zero rows, rows far apart in magnitude.  Then through
gemmlab.matmul: rows that a scale per matrix would send to TF32 stay on FP16 parts and
stay within 1.5x of SGEMM's error."""

import numpy as np
import pytest

import gemmlab
from gemmlab.core import methods
from gemmlab.tools.accuracy import make_inputs
from gemmlab.tools.verify import compare, reference

cp = pytest.importorskip("cupy")


def _gpu():
    from gemmlab.runtime.device import gpu_info

    try:
        return gpu_info(0)
    except Exception as exc:  # no GPU here
        pytest.skip(f"needs a GPU ({exc})")


@pytest.fixture(scope="module")
def hopper():
    gpu = _gpu()
    if gpu.arch != "sm_90a":
        pytest.skip("split_scaled.cu is ec_wgmma's (sm_90a)")
    return gpu


def _device_view(ptr: int, shape, dtype) -> "cp.ndarray":
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    mem = cp.cuda.UnownedMemory(ptr, n, owner=None)
    return cp.ndarray(shape, dtype, memptr=cp.cuda.MemoryPointer(mem, 0))


def _fold_split(x: np.ndarray, s: np.ndarray):
    """FOLD's parts (EcSplit<FP16>::split<true>) of each row of x scaled by 2^s[row]."""
    y = (x * np.exp2(s.astype(np.float32))[:, None]).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        hi = y.astype(np.float16)
        lo = np.where(np.isinf(hi), np.float16(0), (y - hi.astype(np.float32)).astype(np.float16))
    return hi, lo


def _stored(op: np.ndarray, layout: str, pad: int = 0) -> "cp.ndarray":
    """op (..., R, C) on the GPU stored as layout says: 'T' column-major (a transposed view);
    ``pad``: each stored row that many elements longer (a view of a wider array)."""
    stored = op if layout == "N" else np.swapaxes(op, -1, -2)
    wide = np.zeros(stored.shape[:-1] + (stored.shape[-1] + pad,), np.float32)
    wide[..., : stored.shape[-1]] = stored
    on_gpu = cp.asarray(wide)[..., : stored.shape[-1]]
    return on_gpu if layout == "N" else on_gpu.swapaxes(-1, -2)


def _run_split(gpu, op_a, op_b, layout_a, layout_b, record, kernel=None, pad=(0, 0)):
    """split_scaled.cu on op(A) (batch x M x K, or M x K) and op(B) (K x N, shared): the
    parts of A and B^T, the inverse scales, read back.  ``kernel``: a check of the problem
    and operands (which kernel they take); ``pad``: A's and B's stored rows that much longer."""
    from gemmlab.kernels.ec.ec_wgmma import ec_split_workspace
    from gemmlab.kernels.spec import Problem
    from gemmlab.runtime.tma import Operands

    batch = op_a.shape[0] if op_a.ndim == 3 else 1
    M, K = op_a.shape[-2:]
    N = op_b.shape[-1]
    a, b = _stored(op_a, layout_a, pad[0]), _stored(op_b, layout_b, pad[1])
    lda = (a.strides[-2] if layout_a == "N" else a.strides[-1]) // 4
    ldb = (b.strides[-2] if layout_b == "N" else b.strides[-1]) // 4
    sa = a.strides[0] // 4 if batch > 1 else 0
    ops = Operands(a.data.ptr, lda, b.data.ptr, ldb, 0, 0, batch, sa, 0, 0)
    stream = cp.cuda.get_current_stream()
    pr = Problem(M, N, K, True, "fp16_ec", op_a=layout_a, op_b=layout_b)
    if kernel is not None:
        kernel(pr, ops, batch)
    with ec_split_workspace(pr, gpu, stream.ptr, ops, choice=record.data.ptr, fold=1, per_row=True) as parts:
        a_hi, a_lo, b_hi, b_lo, kp, nz_a, nz_b, ua, ub = parts
        assert (nz_a, nz_b) == (batch, 1) and ua and ub
        got = {
            name: _device_view(ptr, (rows, kp), np.float16).get()[:, :K]
            for name, ptr, rows in (
                ("a_hi", a_hi, nz_a * M),
                ("a_lo", a_lo, nz_a * M),
                ("b_hi", b_hi, N),
                ("b_lo", b_lo, N),
            )
        }
        got["unscale_a"] = _device_view(ua, (nz_a * M,), np.float32).get()
        got["unscale_b"] = _device_view(ub, (N,), np.float32).get()
        stream.synchronize()
    return got


def _check(gpu, op_a, op_b, layout_a, layout_b, kernel=None, pad=(0, 0)):
    from gemmlab.kernels.ec.choose_method import CHOICE_FIELDS

    record = cp.zeros(CHOICE_FIELDS, cp.int64)
    want = methods.choose_per_row(op_a, op_b)
    rows_a = op_a.reshape(-1, op_a.shape[-1])
    rows_b = np.ascontiguousarray(op_b.T)
    for launch in range(2):  # the second on the record the first left (its sums zeroed again)
        got = _run_split(gpu, op_a, op_b, layout_a, layout_b, record, kernel, pad)
        r = record.get()
        choice = methods.choice_of_record(r, False)
        assert choice.per_row and choice.method == want.choice.method, (choice.reason, want.choice.reason)
        assert {k: int(r[methods.CHOICE[k]]) for k in want.counts} == want.counts
        assert all(r[i] == 0 for name, i in methods.CHOICE.items() if name.startswith("sum_")), r
        np.testing.assert_array_equal(got["unscale_a"], np.exp2(-want.scale_a.astype(np.float64)).astype(np.float32))
        np.testing.assert_array_equal(got["unscale_b"], np.exp2(-want.scale_b.astype(np.float64)).astype(np.float32))
        for side, rows, s in (("a", rows_a, want.scale_a), ("b", rows_b, want.scale_b)):
            hi, lo = _fold_split(rows, s)
            np.testing.assert_array_equal(got[f"{side}_hi"], hi, err_msg=f"{side} hi, launch {launch}")
            np.testing.assert_array_equal(got[f"{side}_lo"], lo, err_msg=f"{side} lo, launch {launch}")


# K: one block with the short chunk (K <= 128), one block (K <= 512), a cluster of 2, of 4,
# of 8, and of 8 whose blocks hold 2 chunks each; NT (rows along K in both, 16-byte aligned):
# the whole-rows kernel with 1, 2, 4, 8 float4 a row, and at K = 2050 (rows of 8200 bytes) the
# clustered kernel; NN and TT (one operand's rows along K): that one by whole rows inside the
# clustered kernel where its rows are 16-byte aligned (K = 700, 1500, 3000, 5000).
@pytest.mark.parametrize("K", [37, 128, 129, 700, 1500, 2050, 3000, 5000])
@pytest.mark.parametrize("layouts", ["NN", "NT", "TN", "TT"])
def test_split_scaled_matches_its_model(hopper, layouts, K):
    rng = np.random.default_rng(K)
    M, N = 70, 45
    a = make_inputs("uniform", M, K, rng)
    a *= np.exp2(rng.integers(-30, 30, M)).astype(np.float32)[:, None]  # rows far apart
    b = make_inputs("normal", K, N, rng)
    _check(hopper, a, b, layouts[0], layouts[1])


@pytest.mark.parametrize("layouts, K, nb", [("NN", 1500, 3), ("NN", 4096, 1), ("TT", 3000, 1), ("TT", 700, 2)])
def test_half_rows_split_matches_its_model(hopper, layouts, K, nb):
    """NN and TT with the operand stored along K 16-byte aligned: the clustered kernel splits that
    one by whole rows (its ROWS; a batch of A in NN, whose matrices are split as rows too) and
    only the other in clusters; every part, scale and the record's counts as its model."""
    from gemmlab.kernels.ec.ec_wgmma import ec_scaled_half_rows, ec_scaled_rows_chunks

    rng = np.random.default_rng(K + nb)
    M, N = 70, 45
    a = (
        np.stack([make_inputs("uniform", M, K, rng) for _ in range(nb)])
        if nb > 1
        else make_inputs("uniform", M, K, rng)
    )
    a *= np.exp2(rng.integers(-30, 30, a.shape[:-1])).astype(np.float32)[..., None]  # rows far apart
    b = make_inputs("normal", K, N, rng) * np.exp2(rng.integers(-30, 30, N)).astype(np.float32)  # and columns

    def half_rows(pr, ops, batch):
        assert ec_scaled_rows_chunks(pr, ops, batch, 1) == 0
        assert ec_scaled_half_rows(pr, ops, batch, 1) == next(c for c in (1, 2, 4, 8, 16) if K <= 1024 * c)

    _check(hopper, a, b, layouts[0], layouts[1], half_rows)


def test_split_scaled_batch_and_edge_rows(hopper):
    """A batch of A (B shared): zero rows, a row with Inf and NaN, subnormal rows, a row
    2^70 above the rest, rows 2^60 apart; and a matrix wide enough for TF32."""
    rng = np.random.default_rng(5)
    nb, M, K, N = 3, 40, 600, 33
    a = np.stack([make_inputs("uniform", M, K, rng) for _ in range(nb)])
    a[0, 1] = 0
    a[0, 2, 5], a[0, 2, 9] = np.inf, np.nan
    a[1, 3] *= np.float32(2.0**-130)  # subnormals only
    a[1, 4] *= np.float32(2.0**70)
    a[2, ::2] *= np.float32(2.0**60)
    b = make_inputs("uniform", K, N, rng)
    b[:, 7] = -np.inf
    assert methods.choose_per_row(a, b).choice.method == "fp16_ec_scaled"
    _check(hopper, a, b, "N", "T")
    wide = make_inputs("log_uniform", K, N, rng)
    assert methods.choose_per_row(a, wide).choice.method == "tf32_ec"
    _check(hopper, a, wide, "T", "N")


@pytest.mark.parametrize("K", [15000, 4000])
def test_split_by_columns_edges(hopper, K):
    """Both operands split by columns (op(A) stored 'T', op(B) stored 'N': segments across the
    stored rows, brought into shared memory): A's rows of 70 (off the 16-byte grid: 4-byte
    copies), B's rows of 48 holding 45 columns (16-byte copies, the last one partial); at K =
    15000 a block's share (1888 rows) is more than its tile holds, so it is read twice.  A column
    2^100 above the rest (its scale clamped, hi infinite: the value-by-value split), columns with
    Inf (the maxima scanned again without it) and NaN, a zero column, subnormals."""
    from gemmlab.kernels.ec.ec_wgmma import EC_SCALED_HELD_MAX_ROWS, ec_scaled_cluster

    rng = np.random.default_rng(K)
    M, N = 70, 45
    a = make_inputs("uniform", M, K, rng) * np.exp2(rng.integers(-30, 30, M)).astype(np.float32)[:, None]
    a[3] = rng.uniform(0.5, 1, K).astype(np.float32) * np.float32(2.0**100)
    a[5, K - 1], a[6, 7] = np.inf, np.nan
    a[8] = 0
    b = make_inputs("normal", K, N, rng)
    b[K // 2, 40] = -np.inf
    b[:, 44] *= np.float32(2.0**-140)  # subnormals only
    assert (-(-K // (32 * ec_scaled_cluster(K))) * 32 > EC_SCALED_HELD_MAX_ROWS) == (K == 15000)
    _check(hopper, a, b, "T", "N", pad=(0, 3))
    a[3] *= np.float32(2.0**-100)  # and without the clamp: FP16 parts, the two-at-a-time split
    assert methods.choose_per_row(a, b).choice.method == "fp16_ec_scaled"
    _check(hopper, a, b, "T", "N", pad=(0, 3))


def test_split_scaled_clusters_take_several_groups(hopper):
    """A batch of 40 matrices of 700 rows (22 groups of 32 each) with K = 700 (clusters of
    2): fewer clusters than groups (ec_scaled_grid), each taking several in turn; every
    part, scale and the record's counts as before."""
    from gemmlab.kernels.ec.ec_wgmma import ec_scaled_grid

    rng = np.random.default_rng(21)
    nb, M, K, N = 40, 700, 700, 50
    grid, _ = ec_scaled_grid(M, N, K, nb, 1, hopper.sm_count)
    assert grid[0] // 2 < -(-M // 32), grid  # clusters loop
    rows = np.exp2(rng.integers(-20, 20, (nb, M, 1))).astype(np.float32)
    a = rng.uniform(-1, 1, (nb, M, K)).astype(np.float32) * rows
    b = make_inputs("normal", K, N, rng)
    _check(hopper, a, b, "T", "N")


def test_rows_far_apart_stay_on_fp16_parts(hopper):
    """Rows of A 2^±40 apart and columns of B likewise: one scale per matrix would need
    TF32 parts; a scale per row keeps FP16 parts, and fp32_tc's error stays within 1.5x
    of SGEMM's, out poisoned first, in every layout."""
    rng = np.random.default_rng(11)
    M, N, K = 300, 260, 1000
    a = make_inputs("uniform", M, K, rng) * np.exp2(rng.integers(-40, 41, M)).astype(np.float32)[:, None]
    b = make_inputs("uniform", K, N, rng) * np.exp2(rng.integers(-40, 41, N)).astype(np.float32)[None, :]
    assert methods.choose(methods.ExponentStats.of(a), methods.ExponentStats.of(b)).method == "tf32_ec"
    ref = reference(a, b)
    for la in "NT":
        for lb in "NT":
            da, db = _stored(a, la), _stored(b, lb)
            out = cp.full((M, N), cp.nan, cp.float32)
            gemmlab.matmul(da, db, out=out, precision="fp32_tc", kernel="ec_wgmma")
            p = gemmlab.last_plan()
            assert p.method == "fp16_ec_scaled" and "per row" in p.reason, p.reason
            sgemm = compare(cp.matmul(da, db), ref).rel_fro
            err = compare(out, ref)
            assert err.nonfinite == 0 and err.rel_fro <= 1.5 * sgemm, (la, lb, err.rel_fro, sgemm)
