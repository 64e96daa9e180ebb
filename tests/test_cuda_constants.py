"""The integer constants Python shares with the CUDA sources: the values Python
uses equal the ``constexpr int NAME = VALUE;`` lines of the .cu / .cuh files
(gemmlab.kernels.cuda_constants.read_constants), so that the host can read them
from the sources instead of repeating them.  CPU only."""

import pytest

from gemmlab import ec, fragments
from gemmlab.bench import wmma_ext as bench
from gemmlab.kernels import registry
from gemmlab.kernels.cuda_constants import KERNEL_DIR, read_constants
from gemmlab.kernels.registry import Problem

TYPE_CODES_H = "include/gemmlab/type_codes.cuh"


def test_read_constants_reads_plain_lines_only(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("namespace gemmlab {\n"
                   "constexpr int A = 8192;     // a comment\n"
                   "  constexpr int B_2 = -3;\n"
                   "constexpr int HEX = 0x40;\n"
                   "constexpr int ROWS = A / 32;   // an expression: not read\n"
                   "static constexpr int S = 1;    // not a plain line\n"
                   "constexpr int X = 1, Y = 2;    // two on a line: not read\n"
                   "// constexpr int COMMENTED = 5;\n"
                   "}\n")
    assert read_constants(src) == {"A": 8192, "B_2": -3, "HEX": 64}
    assert read_constants(str(src)) == read_constants(src)


def test_read_constants_is_cached_and_returns_copies(tmp_path):
    src = tmp_path / "k.cuh"
    src.write_text("constexpr int A = 1;\n")
    first = read_constants(src)
    first["A"] = 99
    src.write_text("constexpr int A = 2;\n")     # cached per path: the file is read once
    assert read_constants(src) == {"A": 1}


def test_read_constants_refuses_two_values_for_one_name(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("constexpr int A = 1;\nconstexpr int A = 2;\n")
    with pytest.raises(ValueError, match="A is defined twice"):
        read_constants(src)


def test_paths_relative_to_the_kernels_folder():
    assert read_constants(TYPE_CODES_H) == read_constants(KERNEL_DIR / TYPE_CODES_H)


def test_type_codes():
    c = read_constants(TYPE_CODES_H)
    assert {name: c[f"TYPE_{name.upper()}"] for name in registry.TYPE_CODES} == registry.TYPE_CODES
    assert {m: c[f"METHOD_{m.upper()}"] for m in registry.EC_METHODS} == registry.EC_METHODS
    assert [c[f"USE_{u.upper()}"] for u in fragments.USES] == list(range(len(fragments.USES)))
    short = {"f16": "float16", "bf16": "bfloat16", "tf32": "tf32", "f32": "float32"}
    assert [c[f"TYPE_{short[d].upper()}"] for d in fragments.DTYPES] == list(range(len(fragments.DTYPES)))
    assert (c["LAYOUT_ROW"], c["LAYOUT_COL"]) == (0, 1)   # FragmentKind.template_args: int(layout == "col")


def test_wgmma_constants():
    c = read_constants("tensor/04_wgmma.cu")
    assert c["WGMMA_EPI_BYTES"] == registry.WGMMA_EPI_BYTES


def test_ec_wgmma_constants():
    c = read_constants("ec/02_ec_wgmma.cu")
    assert (c["EC_WGMMA_BM"], c["EC_WGMMA_BN"]) == (registry.EC_WGMMA_BM, registry.EC_WGMMA_BN)
    spec = registry.get("ec_wgmma")
    geo = spec.launch(spec.defaults(), Problem(4096, 4096, 4096, True, "fp16_ec"))
    assert geo.block == (c["EC_WGMMA_THREADS"], 1, 1)


def test_wmma_warps_per_block():
    c = read_constants("tensor/01_wmma.cu")
    assert c["TC_WARPS_PER_BLOCK"] == registry.TC_WARPS_PER_BLOCK
    spec = registry.get("wmma")
    geo = spec.launch(spec.defaults(), Problem(64, 64, 64, True, "float16"))
    assert geo.block == (32 * c["TC_WARPS_PER_BLOCK"], 1, 1)


def test_helper_kernel_block_sizes():
    assert read_constants("simt/splitk_reduce.cu")["SPLITK_REDUCE_THREADS"] == registry.SPLITK_REDUCE_THREADS
    c = read_constants("tensor/tf32_pack.cu")
    assert (c["TF32_PACK_TILE"], c["TF32_PACK_THREADS"]) == (registry.TF32_PACK_TILE, registry.TF32_PACK_THREADS)
    c = read_constants("ec/split_pack.cu")
    assert ((c["EC_SPLIT_PACK_TILE"], c["EC_SPLIT_PACK_THREADS"])
            == (registry.EC_SPLIT_PACK_TILE, registry.EC_SPLIT_PACK_THREADS))


def test_exponent_histogram():
    c = read_constants("ec/exponent_histogram.cu")
    assert c["HISTOGRAM_THREADS"] == ec.HISTOGRAM_THREADS
    import numpy as np
    assert c["EXPONENT_BINS"] == ec.ExponentStats.of(np.zeros(1, np.float32)).counts.size


def test_lab_constants():
    c = read_constants("lab/wmma_ext_bench.cu")
    assert c["BENCH_WARPS"] == bench.WARPS
    assert c["EC_BM"] == c["EC_BN"] == 64      # bench/wmma_ext.py launches (n // 64) ** 2 blocks of ec_gemm


def test_sources_named_by_the_registry_hold_the_constants():
    """The files above are the ones the host compiles."""
    assert registry.SPLITK_REDUCE_SOURCE == KERNEL_DIR / "simt" / "splitk_reduce.cu"
    assert registry.TF32_PACK_SOURCE == KERNEL_DIR / "tensor" / "tf32_pack.cu"
    assert registry.EC_SPLIT_PACK_SOURCE == KERNEL_DIR / "ec" / "split_pack.cu"
    assert registry.EXPONENT_HISTOGRAM_SOURCE == KERNEL_DIR / "ec" / "exponent_histogram.cu"
    assert registry.get("wgmma").source_path == KERNEL_DIR / "tensor" / "04_wgmma.cu"
    assert registry.get("ec_wgmma").source_path == KERNEL_DIR / "ec" / "02_ec_wgmma.cu"
