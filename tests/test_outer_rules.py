"""The outer rung (products of a few K) without a GPU: kernel="auto"'s take on it and its
geometry.  On a GPU: test_outer.py."""

import pytest

import gemmlab
from gemmlab.core import choose
from gemmlab.kernels import registry
from gemmlab.kernels.spec import Problem


@pytest.mark.parametrize(
    "M, N, K, op_a, op_b",
    [(51865, 768, 1, "T", "N"), (768, 51865, 1, "N", "N"), (1024, 4096, 8, "N", "N"), (17, 5, 3, "T", "T")],
)
def test_auto_takes_outer_for_products_of_a_few_k(M, N, K, op_a, op_b):
    """kernel="auto": outer for float32 with K of 1..OUTER_MAX_K (M past gemv's rows), C's
    rows 16 bytes at a time where they start on the grid; pipelined above; 16-bit likewise
    (wgmma above), except a large C on Hopper; fp32_tc's thin products run it too."""
    from gemmlab.kernels.gemv.outer import OUTER_16BIT_MAX_OUTPUTS, OUTER_MAX_K

    def auto(k, **kw):
        return gemmlab.plan("auto", M, N, k, op_a=op_a, op_b=op_b, **{"arch": "sm_90a", **kw})

    for rows, wide in (("C", True), ("AB", False)):
        p = auto(K, aligned16=False, rows_aligned16=rows, gpu_slug="nvidia-h200")
        assert (
            p.spec.name == "outer"
            and p.params == {}
            and p.name_expression == f"gemmlab::outer<3, 3, {str(wide).lower()}, '{op_a}', '{op_b}'>"
        )
        assert p.passed_over[0].startswith("batched_small takes ")  # a batch rung, asked first
        assert p.passed_over[1].startswith("gemv takes 1..16 rows")
    assert auto(OUTER_MAX_K["float32"] + 1, gpu_slug="nvidia-h200").spec.name == "pipelined"
    for dt in ("bfloat16", "float16"):
        # Hopper: a large C whose operands TMA reads in place goes to wgmma, one that wgmma would
        # copy first stays on outer (OUTER_16BIT_MAX_OUTPUTS); sm_80 keeps outer for both.
        large = M * N > OUTER_16BIT_MAX_OUTPUTS
        assert auto(K, dtype=dt, out_dtype=dt).spec.name == ("gemv" if M <= 4 else "wgmma" if large else "outer")
        for arch, aligned in (("sm_90a", False), ("sm_80", True)):
            p = auto(K, dtype=dt, out_dtype=dt, arch=arch, aligned16=aligned, tma_aligned=aligned)
            assert p.spec.name == ("gemv" if M <= 4 else "outer")
        assert auto(OUTER_MAX_K[dt] + 1, dtype=dt, out_dtype=dt).spec.name == ("wgmma" if M > 4 else "gemv")
    p = gemmlab.plan("auto", M, N, K, dtype="fp16_ec", precision="fp32_tc", op_a=op_a, op_b=op_b, arch="sm_90a")
    assert (p.spec.name, p.method) == ("outer", "fp32")
    reason = registry.get("outer").rules.offer(choose.ask(choose.Product(M, N, 9), choose.GPU())).reason
    assert reason == "outer takes K = 1..8 of float32, not K = 9"


@pytest.mark.parametrize("out_dtype, cols", [("float32", 128), ("float16", 256), ("bfloat16", 256)])
def test_outer_geometry(out_dtype, cols):
    """A block of 256 threads per tile of 32 rows (8 warps of 4) x 32 lanes of 16 bytes of C,
    numbered along N first; the instantiation: type codes, then C's rows on the grid."""
    from gemmlab.kernels.gemv.outer import outer_columns

    spec = registry.get("outer")
    dtype = "float32" if out_dtype == "float32" else out_dtype
    for M, N in ((1, 1), (32, 128), (51865, 768), (33, 257)):
        prob = Problem(M, N, 1, False, dtype, out_dtype)
        assert outer_columns(prob) == cols
        geo = spec.launch({}, prob)
        assert geo.block == (256, 1, 1) and geo.grid == (-(-M // 32) * -(-N // cols), 1, 1) and geo.smem_bytes == 0
    fp32_out = Problem(9, 9, 9, True, "bfloat16", "float32")
    assert outer_columns(fp32_out) == 128
    assert spec.name_expression({}, fp32_out.with_layout("T", "N")) == "gemmlab::outer<1, 3, true, 'T', 'N'>"
    assert (
        spec.name_expression({}, Problem(9, 9, 9, False, rows_aligned16="AB"))
        == "gemmlab::outer<3, 3, false, 'N', 'N'>"
    )
