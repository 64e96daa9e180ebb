"""The error-corrected FP32 methods' arithmetic and method choice, on the CPU
(NumPy models of ec/01_ec_wmma.cuh's split and gemmlab.core.methods.choose)."""

import numpy as np
import pytest

import gemmlab
from gemmlab.core import methods
from gemmlab.tools.accuracy import INPUT_SETS, make_inputs


def fp16_split(x):
    """ec/01_ec_wmma.cuh's FP16 split: hi = fp16(x), lo = fp16((x - hi) * 2^11)."""
    x = x.astype(np.float32)
    hi = x.astype(np.float16)
    lo = ((x - hi.astype(np.float32)) * np.float32(2048)).astype(np.float16)
    return hi, lo


def tf32_round(x):
    """Round float32 to TF32 (10 mantissa bits), to nearest with ties away (cvt.rna)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32).view(np.float32)


def test_fp16_split_reproduces_x_to_2_pow_minus_22():
    rng = np.random.default_rng(1)
    # FP16's normal range with room for the low part: |x| in [2^-14, 2^15).
    x = (np.exp2(rng.uniform(-14, 15, 100000)) * rng.choice([-1, 1], 100000)).astype(np.float32)
    hi, lo = fp16_split(x)
    back = hi.astype(np.float64) + lo.astype(np.float64) * 2.0**-11
    rel = np.abs(back - x) / np.abs(x)
    assert rel.max() <= 2.0**-22
    # Without the 2^11 the low part of small values falls into FP16's subnormals.
    small = x[np.abs(x) < 2**-8]
    hi_s = small.astype(np.float16)
    unscaled = hi_s.astype(np.float64) + (small - hi_s.astype(np.float32)).astype(np.float16).astype(np.float64)
    assert (np.abs(unscaled - small) / np.abs(small)).max() > 2.0**-18


def test_tf32_split_reproduces_x_to_2_pow_minus_21():
    rng = np.random.default_rng(2)
    x = (np.exp2(rng.uniform(-100, 100, 100000)) * rng.choice([-1, 1], 100000)).astype(np.float32)
    big = tf32_round(x)
    small = tf32_round(x - big)
    rel = np.abs(big.astype(np.float64) + small - x) / np.abs(x)
    assert rel.max() <= 2.0**-21
    assert np.abs(big.astype(np.float64) - x).max() > 0  # one TF32 part alone is not enough


def test_exponent_stats_counts_by_exponent():
    x = np.array([0.0, 1.0, 1.5, -2.0, 0.25, np.inf, np.nan, 1e-45], dtype=np.float32)
    s = methods.ExponentStats.of(x)
    assert s.counts.sum() == 8
    assert s.counts[0] == 2  # zero and a subnormal
    assert s.counts[255] == 2  # Inf and NaN
    assert s.counts[127] == 2 and s.counts[128] == 1 and s.counts[125] == 1
    assert s.nonzero == 4 and s.max_exponent == 1
    assert s.fraction_below(0) == 0.25


@pytest.mark.parametrize(
    "name, method",
    [
        ("uniform", "fp16_ec"),
        ("normal", "fp16_ec"),
        ("uniform_large", "fp16_ec"),
        ("uniform_small", "fp16_ec_scaled"),
        ("log_uniform", "tf32_ec"),
    ],
)
def test_choice_per_input_set(name, method):
    rng = np.random.default_rng(3)
    a, b = make_inputs(name, 200, 300, rng), make_inputs(name, 300, 100, rng)
    choice = methods.choose(methods.ExponentStats.of(a), methods.ExponentStats.of(b))
    assert choice.method == method, choice.reason
    if method == "fp16_ec_scaled":  # the largest magnitude lands just below 2^15
        assert np.abs(a).max() * 2.0**choice.scale_a_exp < 2**15
        assert np.abs(a).max() * 2.0**choice.scale_a_exp >= 2**14
    assert choice.kernel_dtype == ("tf32_ec" if method == "tf32_ec" else "fp16_ec")


def test_choice_on_crafted_statistics():
    def stats(bins):
        counts = np.zeros(256, np.int64)
        for exponent, n in bins.items():
            counts[exponent + 127] = n
        return methods.ExponentStats(counts)

    ok = stats({0: 1000, -5: 1000})
    assert methods.choose(ok, ok).method == "fp16_ec"
    # Largest value 2^20: too large for FP16 as it is, fine after scaling by 2^-6.
    big = stats({20: 10, 10: 1000})
    c = methods.choose(big, ok)
    assert (c.method, c.scale_a_exp, c.scale_b_exp) == ("fp16_ec_scaled", -6, 14)
    # 10% of the values 2^30 below the largest: beyond FP16's 28-binade reach.
    wide = stats({0: 900, -30: 100})
    assert methods.choose(wide, ok).method == "tf32_ec"
    # Up to the limit of elements below the range stays on FP16; twice as many do not.
    edge = stats({0: 100000, -30: int(100000 * methods.UNDERFLOW_LIMIT)})
    assert methods.choose(edge, ok).method == "fp16_ec"
    over = stats({0: 100000, -30: int(200000 * methods.UNDERFLOW_LIMIT)})
    assert methods.choose(over, ok).method == "tf32_ec"
    # All-zero (or all Inf/NaN) matrices: nothing to scale.
    zero = methods.ExponentStats(np.zeros(256, np.int64))
    assert methods.choose(zero, zero).method == "fp16_ec"
    # A scale that would exceed 2^64 is clamped, and then the data does not fit: TF32.
    tiny = stats({-100: 10})
    assert methods.fp16_scale_exponent(tiny) == methods.MAX_SCALE_EXPONENT
    assert methods.choose(tiny, ok).method == "tf32_ec"


def test_precision_names_and_their_dtypes():
    for precision, dtype in [
        ("fp16_ec", "fp16_ec"),
        ("fp16_ec_scaled", "fp16_ec"),
        ("fp32_tc", "fp16_ec"),
        ("tf32_ec", "tf32_ec"),
    ]:
        p = gemmlab.plan("auto", 100, 100, 100, dtype=dtype)
        assert p.spec.name == "ec_wmma" and p.problem.out_dtype == "float32", precision
        # On Hopper, auto runs the wgmma implementation where its tiles fill at least half the
        # SMs (its pre-pass adds a launch); elsewhere the WMMA one.
        assert gemmlab.plan("auto", 2048, 2048, 100, dtype=dtype, arch="sm_90a").spec.name == "ec_wgmma"
        assert gemmlab.plan("auto", 100, 100, 100, dtype=dtype, arch="sm_90a").spec.name == "ec_wmma"
        assert gemmlab.plan("auto", 100, 100, 100, dtype=dtype, arch="sm_80").spec.name == "ec_wmma"
    with pytest.raises(
        TypeError, match="kernel 'pipelined' computes float32, not fp16_ec; for fp16_ec use one of: ec_wmma, ec_wgmma"
    ):
        gemmlab.plan("pipelined", 64, 64, 64, dtype="fp16_ec")


def test_ec_precisions_need_float32_inputs():
    a = np.ones((4, 4), np.float16)
    with pytest.raises(ValueError, match="precision='fp32_tc' is for float32 inputs; a and b are float16"):
        gemmlab.matmul(a, a, precision="fp32_tc")
    with pytest.raises(ValueError, match="precision='fp64' is not one of 'fp32', 'tf32', 'fp32_tc'"):
        gemmlab.matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), precision="fp64")


def test_input_sets_are_what_they_say():
    rng = np.random.default_rng(4)
    assert set(INPUT_SETS) == {"uniform", "uniform_small", "uniform_large", "normal", "log_uniform"}
    assert np.abs(make_inputs("uniform_small", 100, 100, rng)).max() <= 2.0**-12
    x = np.abs(make_inputs("log_uniform", 100, 100, rng))
    assert x.min() >= 2.0**-20 and x.max() <= 2.0**20 and x.max() / x.min() > 2.0**30


@pytest.mark.parametrize("precision", ["fp16_ec", "fp16_ec_scaled", "tf32_ec", "fp32_tc"])
def test_ec_precisions_are_planned_without_a_gpu(precision, monkeypatch):
    """Everything up to the GPU works for every precision (layouts and batches
    included); the first thing that needs the GPU is what fails without one."""
    from gemmlab.core.errors import NoGPUError
    from gemmlab.runtime import device as rt_device

    if rt_device.gpu_available():
        pytest.skip("checks the path up to the GPU on a machine without one")
    a = np.ones((2, 5, 4), np.float32)
    with pytest.raises(NoGPUError):
        gemmlab.matmul(a, np.ones((4, 3), np.float32).T.copy().T, precision=precision)


def test_fp32_tc_runs_thin_products_on_the_cuda_cores():
    """A side of at most 16 makes fp32_tc (with kernel="auto") plain FP32: the reason names the
    side; anything wider keeps the tensor cores."""
    from gemmlab.core.choose import FP32_TC_CUDA_CORE_SIDE, fp32_tc_on_cuda_cores

    assert FP32_TC_CUDA_CORE_SIDE == 16
    assert fp32_tc_on_cuda_cores(1, 4096, 4096).startswith("M = 1 (at most 16)")
    assert fp32_tc_on_cuda_cores(4096, 16, 4096).startswith("N = 16 ")
    assert fp32_tc_on_cuda_cores(6144, 4096, 7).startswith("K = 7 ")
    assert fp32_tc_on_cuda_cores(17, 4096, 4096) == ""
    assert fp32_tc_on_cuda_cores(0, 4096, 4096) == ""  # an empty result: nothing to run either way
    # a batch of small matrices (Swin's windows), bound by memory: batched_small's rule
    assert fp32_tc_on_cuda_cores(49, 49, 32, 6144).startswith("a batch of 6144 matrices of 49 x 49 x 32")
    assert fp32_tc_on_cuda_cores(49, 49, 32, 512) == ""
    assert fp32_tc_on_cuda_cores(49, 49, 32, 512, sm_count=66).startswith("a batch of 512")


def test_ec_batches_go_to_ec_wgmma_where_it_measured_faster():
    """ec_wgmma takes a batch in one launch of each pass; auto gives it a batch whose tiles fill
    half the GPU, with 2^31 multiply-adds in all and 192 per element of A and B in each matrix
    (M N / (M + N) >= 192): attention's Q @ K^T from S = 2048 (and at S = 512 with 128 heads),
    not its P @ V (S x S times S x 128: the pre-pass would move P twice more) nor small batches,
    which ec_wmma ran faster (NOTES, run 85b).  A single product keeps the tile rule alone."""
    from gemmlab.kernels.ec.ec_wgmma import EC_WGMMA_BATCH_MIN_INTENSITY, EC_WGMMA_BATCH_MIN_MACS, ec_wgmma_pays

    assert (EC_WGMMA_BATCH_MIN_MACS, EC_WGMMA_BATCH_MIN_INTENSITY) == (2**31, 192)
    kw = dict(dtype="fp16_ec", arch="sm_90a", sm_count=132)

    def auto(M, N, K, batch):
        return gemmlab.plan("auto", M, N, K, batch=batch, **kw).spec.name

    for bh in (32, 128):
        for s in (2048, 4096):
            assert auto(s, s, 128, bh) == "ec_wgmma" and auto(s, 128, s, bh) == "ec_wmma", (bh, s)
    assert auto(512, 512, 128, 128) == "ec_wgmma" and auto(512, 512, 128, 32) == "ec_wmma"  # 2^33 / 2^30 MACs
    assert auto(512, 128, 512, 128) == "ec_wmma"
    assert auto(1024, 1024, 1024, 8) == "ec_wgmma" and auto(512, 512, 512, 4) == "ec_wmma"
    assert auto(1024, 1024, 128, 16) == "ec_wgmma"  # 2^31 MACs exactly (tests/test_ec.py's auto case)
    assert auto(64, 64, 64, 1024) == "ec_wmma" and auto(128, 96, 128, 200) == "ec_wmma"
    # The thresholds: M N / (M + N) = 192 at M = N = 384; 2^31 MACs; half the SMs' worth of tiles.
    assert ec_wgmma_pays(384, 384, 128, 200, 132) and not ec_wgmma_pays(383, 384, 128, 200, 132)
    assert ec_wgmma_pays(1024, 1024, 128, 16, 132) and not ec_wgmma_pays(1024, 1024, 127, 16, 132)
    # A single product: the tiles alone (8 x 9 of them take ec_wgmma, 8 x 8 do not), P @ V-shaped too.
    assert auto(2048, 2048, 128, 1) == "ec_wgmma" and auto(8192, 128, 8192, 1) == "ec_wgmma"
    # ... down to a quarter of them with K >= 4096: the 128-token products (one row of 43 tiles).
    assert auto(128, 4096, 4096, 1) == "ec_wgmma" and auto(128, 4096, 4095, 1) == "ec_wmma"
    assert auto(128, 3073, 4096, 1) == "ec_wgmma" and auto(128, 3072, 4096, 1) == "ec_wmma"  # 33 / 32 tiles
    assert auto(1024, 96 * 9, 64, 1) == "ec_wgmma" and auto(1024, 96 * 8, 64, 1) == "ec_wmma"
    # Elsewhere ec_wmma, batch or not.
    assert gemmlab.plan("auto", 2048, 2048, 128, batch=32, dtype="fp16_ec", arch="sm_80").spec.name == "ec_wmma"


def test_auto_splits_ec_wgmma_where_its_tiles_leave_most_sms_idle():
    """kernel="auto" splits ec_wgmma over K where its 128 x 128 tiles (of every matrix) leave
    more than half of the SMs idle: fill_split's largest split of at most 8 that keeps the
    work items within the SMs, each slice at least 8 steps of 64 of K; the same for FP16 and
    TF32 parts (both candidates of fp32_tc's choice on the GPU write one workspace).  The
    rule is not yet measured (planner; ec_wgmma_auto_split)."""
    from gemmlab.kernels.ec.ec_wgmma import EC_WGMMA_DEFAULT_BN
    from gemmlab.kernels.spec import EC_METHODS
    from gemmlab.kernels.ec.ec_wgmma import (
        EC_WGMMA_MAX_SPLIT,
        EC_WGMMA_MIN_K_STEPS_PER_SLICE,
        EC_WGMMA_SPLIT_STEP,
        ec_wgmma_auto_split,
    )

    assert (EC_WGMMA_MAX_SPLIT, EC_WGMMA_MIN_K_STEPS_PER_SLICE, EC_WGMMA_SPLIT_STEP) == (8, 8, 64)

    def split(M, N, K):
        splits = set()
        for dtype in EC_METHODS:
            p = gemmlab.plan("auto", M, N, K, dtype=dtype, arch="sm_90a", sm_count=132)
            assert p.spec.name == "ec_wgmma", p.describe()
            assert p.name_expression == f"gemmlab::ec_wgmma<{EC_METHODS[dtype]}, 3, 128, 1, 'N', 'N'>"
            splits.add(p.params["SPLITK"])
        assert len(splits) == 1, splits  # alike for either part type
        return splits.pop()

    assert EC_WGMMA_DEFAULT_BN == 128
    # The 128-token products of a Llama-3-8B-sized layer: one row of 32 or 48 tiles.
    assert split(128, 4096, 4096) == 4 and split(128, 6144, 4096) == 2 and split(128, 4096, 14336) == 4
    assert split(128, 14336, 4096) == 1 and split(4096, 4096, 4096) == 1  # 112 / 1024 tiles: no split
    # The boundary: 65 tiles split (130 of 132 SMs idle otherwise half), 66 do not.
    assert split(128, 128 * 65, 4096) == 2 and split(128, 128 * 66, 4096) == 1
    # A batch counts all its matrices' tiles (one launch takes them all).  (auto gives ec_wgmma
    # no batch this few tiles: ec_wgmma_pays.)
    assert ec_wgmma_auto_split(128, 4096, 4096, 132, 3) == 1 and ec_wgmma_auto_split(128, 1024, 8192, 132, 2) == 8
    for M, N, K, batch in [(128, 4096, 4096, 1), (128, 1024, 8192, 2), (100, 500, 100000, 1), (128, 4096, 1000, 1)]:
        tiles = -(-M // 128) * -(-N // 128) * batch
        s = ec_wgmma_auto_split(M, N, K, 132, batch)
        assert 1 < s <= 8 and tiles * s <= 132 and -(-K // 64) >= 8 * s, (M, N, K, s)
    # Slices of at least 8 steps: K = 1000 (16 steps) splits 2 ways, K = 500 (8 steps) not.
    assert ec_wgmma_auto_split(128, 4096, 1000, 132) == 2 and ec_wgmma_auto_split(128, 4096, 500, 132) == 1
    assert ec_wgmma_auto_split(128, 4096, 4096, 114) == 3  # fewer SMs (H100 PCIe): 32 x 3 of 114
    # A named kernel keeps its defaults (no split), and a caller's SPLITK is kept.
    assert gemmlab.plan("ec_wgmma", 128, 4096, 4096, dtype="fp16_ec", arch="sm_90a").params["SPLITK"] == 1
    assert gemmlab.plan("ec_wgmma", 128, 4096, 4096, dtype="fp16_ec", arch="sm_90a", SPLITK=7).params["SPLITK"] == 7


def test_accuracy_defaults_add_ec_wgmma_where_it_builds():
    """`gemmlab accuracy` without --methods: the default list, and on a target that builds
    ec_wgmma (sm_90a) fp32_tc on it too -- at the default 256 x 256 auto runs ec_wmma there,
    while the products that fill a Hopper GPU get ec_wgmma."""
    from gemmlab.tools.accuracy import METHODS, default_methods

    assert default_methods("sm_90a") == list(METHODS) + ["fp32_tc:ec_wgmma"]
    assert default_methods("sm_80") == default_methods("sm_89") == list(METHODS)
    assert gemmlab.plan("auto", 256, 256, 1024, dtype="fp16_ec", arch="sm_90a").spec.name == "ec_wmma"
