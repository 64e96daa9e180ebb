"""The integer constants Python shares with the CUDA sources: the values Python
uses equal the ``constexpr int NAME = VALUE;`` lines of the .cu / .cuh files
(gemmlab.kernels.cuda_constants.read_constants), so that the host can read them
from the sources instead of repeating them.  CPU only."""

import pytest

from gemmlab.core import methods
from gemmlab.lab import fragments
from gemmlab.tools.bench import wmma_ext as bench
from gemmlab.kernels import registry
from gemmlab.kernels.ec.ec_wgmma import EC_SPLIT_PACK_SOURCE
from gemmlab.kernels.ec.exponent_histogram import EXPONENT_HISTOGRAM_SOURCE
from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_SOURCE
from gemmlab.kernels.spec import EC_METHODS, TYPE_CODES
from gemmlab.kernels.tensor.wgmma import TF32_PACK_SOURCE
from gemmlab.kernels.cuda_constants import KERNEL_DIR, read_constants
from gemmlab.kernels.spec import Problem

TYPE_CODES_H = "include/gemmlab/type_codes.cuh"


def test_read_constants_reads_plain_lines_only(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(
        "namespace gemmlab {\n"
        "constexpr int A = 8192;     // a comment\n"
        "  constexpr int B_2 = -3;\n"
        "constexpr int HEX = 0x40;\n"
        "constexpr int ROWS = A / 32;   // an expression: not read\n"
        "static constexpr int S = 1;    // not a plain line\n"
        "constexpr int X = 1, Y = 2;    // two on a line: not read\n"
        "// constexpr int COMMENTED = 5;\n"
        "}\n"
    )
    assert read_constants(src) == {"A": 8192, "B_2": -3, "HEX": 64}
    assert read_constants(str(src)) == read_constants(src)


def test_read_constants_is_cached_and_returns_copies(tmp_path):
    src = tmp_path / "k.cuh"
    src.write_text("constexpr int A = 1;\n")
    first = read_constants(src)
    first["A"] = 99
    src.write_text("constexpr int A = 2;\n")  # cached per path: the file is read once
    assert read_constants(src) == {"A": 1}


def test_read_constants_refuses_two_values_for_one_name(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("constexpr int A = 1;\nconstexpr int A = 2;\n")
    with pytest.raises(ValueError, match="A is defined twice"):
        read_constants(src)


def test_paths_relative_to_the_kernels_folder():
    assert read_constants(TYPE_CODES_H) == read_constants(KERNEL_DIR / TYPE_CODES_H)


def test_type_codes():
    """The codes Python reads from type_codes.cuh, and the fragment tools' own lists in that order."""
    c = read_constants(TYPE_CODES_H)
    assert TYPE_CODES == {
        "float16": c["TYPE_FLOAT16"],
        "bfloat16": c["TYPE_BFLOAT16"],
        "tf32": c["TYPE_TF32"],
        "float32": c["TYPE_FLOAT32"],
    }
    assert sorted(TYPE_CODES.values()) == [0, 1, 2, 3]
    assert EC_METHODS == {"fp16_ec": c["METHOD_FP16_EC"], "tf32_ec": c["METHOD_TF32_EC"]}
    assert [c[f"USE_{u.upper()}"] for u in fragments.USES] == list(range(len(fragments.USES)))
    short = {"f16": "float16", "bf16": "bfloat16", "tf32": "tf32", "f32": "float32"}
    assert [c[f"TYPE_{short[d].upper()}"] for d in fragments.DTYPES] == list(range(len(fragments.DTYPES)))
    assert (c["LAYOUT_ROW"], c["LAYOUT_COL"]) == (0, 1)  # FragmentKind.template_args: int(layout == "col")


# Constants Python takes from the CUDA sources: (Python name, where the source defines it).
SHARED = [
    ("WGMMA_EPI_BYTES", "tensor/04_wgmma.cu"),
    ("EC_WGMMA_BM", "ec/02_ec_wgmma.cu"),
    ("EC_WGMMA_BN", "ec/02_ec_wgmma.cu"),
    ("EC_WGMMA_THREADS", "ec/02_ec_wgmma.cu"),
    ("TC_WARPS_PER_BLOCK", "tensor/01_wmma.cu"),
    ("SPLITK_REDUCE_THREADS", "simt/splitk_reduce.cu"),
    ("TF32_PACK_TILE", "tensor/tf32_pack.cu"),
    ("TF32_PACK_THREADS", "tensor/tf32_pack.cu"),
    ("EC_SPLIT_PACK_TILE", "ec/split_pack.cu"),
    ("EC_SPLIT_PACK_THREADS", "ec/split_pack.cu"),
    ("HISTOGRAM_THREADS", "ec/exponent_histogram.cu"),
    ("EXPONENT_BINS", "ec/exponent_histogram.cu"),
]


@pytest.mark.parametrize("name, source", SHARED, ids=[n for n, _ in SHARED])
def test_shared_constants_are_written_once_in_the_cuda_source(name, source):
    """The value comes from the source, and no Python module under kernels/ writes it as a number."""
    import re
    from gemmlab.kernels.ec import ec_wgmma, exponent_histogram
    from gemmlab.kernels.simt import splitk_reduce
    from gemmlab.kernels.tensor import wgmma, wmma

    value = next(
        getattr(m, name) for m in (wmma, wgmma, splitk_reduce, ec_wgmma, exponent_histogram) if hasattr(m, name)
    )
    assert value == read_constants(source)[name]
    literal = re.compile(rf"^\s*(?:\w+\s*,\s*)*{name}\b[^=\n]*=\s*[-\d(]", re.M)
    for py in KERNEL_DIR.rglob("*.py"):
        assert not literal.search(py.read_text()), f"{py.name} writes {name} as a number"


def test_launch_shapes_follow_the_constants():
    c = read_constants("ec/02_ec_wgmma.cu")
    spec = registry.get("ec_wgmma")
    geo = spec.launch(spec.defaults(), Problem(4096, 4096, 4096, True, "fp16_ec"))
    assert geo.block == (c["EC_WGMMA_THREADS"], 1, 1)
    c = read_constants("tensor/01_wmma.cu")
    spec = registry.get("wmma")
    geo = spec.launch(spec.defaults(), Problem(64, 64, 64, True, "float16"))
    assert geo.block == (32 * c["TC_WARPS_PER_BLOCK"], 1, 1)


def test_exponent_histogram():
    from gemmlab.kernels.ec import exponent_histogram

    c = read_constants("ec/exponent_histogram.cu")
    assert c["HISTOGRAM_THREADS"] == exponent_histogram.HISTOGRAM_THREADS
    import numpy as np

    assert c["EXPONENT_BINS"] == methods.ExponentStats.of(np.zeros(1, np.float32)).counts.size


def test_lab_constants():
    c = read_constants("lab/wmma_ext_bench.cu")
    assert c["BENCH_WARPS"] == bench.WARPS
    assert c["EC_BM"] == c["EC_BN"] == 64  # tools/bench/wmma_ext.py launches (n // 64) ** 2 blocks of ec_gemm


def test_sources_named_by_the_registry_hold_the_constants():
    """The files above are the ones the host compiles."""
    assert SPLITK_REDUCE_SOURCE == KERNEL_DIR / "simt" / "splitk_reduce.cu"
    assert TF32_PACK_SOURCE == KERNEL_DIR / "tensor" / "tf32_pack.cu"
    assert EC_SPLIT_PACK_SOURCE == KERNEL_DIR / "ec" / "split_pack.cu"
    assert EXPONENT_HISTOGRAM_SOURCE == KERNEL_DIR / "ec" / "exponent_histogram.cu"
    assert registry.get("wgmma").source_path == KERNEL_DIR / "tensor" / "04_wgmma.cu"
    assert registry.get("ec_wgmma").source_path == KERNEL_DIR / "ec" / "02_ec_wgmma.cu"


def test_the_method_choice_rules_are_read_from_choice_rules_cuh():
    """gemmlab.core.methods's rules and the kernels' (choice_rules.cuh) are one set of constants, and the
    choice record's fields and method codes are choice.cuh's and type_codes.cuh's."""
    c = read_constants("include/gemmlab/ec/choice_rules.cuh")
    assert (methods.FP16_TOP, methods.FP16_NORMAL_MIN, methods.MAX_SCALE_EXPONENT, methods.WIDE_BINADES) == (
        c["FP16_TOP"],
        c["FP16_NORMAL_MIN"],
        c["MAX_SCALE_EXPONENT"],
        c["WIDE_BINADES"],
    )
    assert methods.UNDERFLOW_LIMIT == c["UNDERFLOW_NUM"] / c["UNDERFLOW_DEN"]
    assert (
        read_constants("ec/choose_method.cu")["CHOOSE_THREADS"]
        == read_constants("ec/exponent_histogram.cu")["EXPONENT_BINS"]
    )
    assert "FP16_TOP" not in read_constants("ec/choose_method.cu")  # written once
    r = read_constants("include/gemmlab/ec/choice.cuh")
    assert methods.CHOICE == {k[len("CHOICE_") :].lower(): v for k, v in r.items() if k != "CHOICE_FIELDS"}
    assert max(methods.CHOICE.values()) < r["CHOICE_FIELDS"]
    t = read_constants(TYPE_CODES_H)
    assert methods.CHOICE_METHODS == {
        t["METHOD_FP16_EC"]: "fp16_ec",
        t["METHOD_FP16_EC_SCALED"]: "fp16_ec_scaled",
        t["METHOD_TF32_EC"]: "tf32_ec",
    }
