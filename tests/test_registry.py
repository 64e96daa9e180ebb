"""The kernel registry: listing, tile-parameter rules, name expressions, the
auto choice and launch geometry (pure Python, no GPU, no compiler)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import gemmlab
from gemmlab.core import choose, tables
from gemmlab.kernels import registry
from gemmlab.kernels.gemv.gemv import GEMV_MAX_M, GEMV_ROWS_MAX_M, auto_takes as gemv_auto_takes
from gemmlab.kernels.simt.pipelined import PIPELINED_SMEM_LIMIT, SPLITK_VALUES, fill_split, pipelined_smem
from gemmlab.kernels.spec import EC_METHODS, LAYOUTS, Problem
from gemmlab.kernels.tensor.wgmma import WGMMA_MIN_K_STEPS_PER_SLICE, wgmma_narrow_tile
from gemmlab.kernels.simt import pipelined

LADDER = [
    "naive",
    "coalesced",
    "smem_tiled",
    "blocktile_1d",
    "blocktile_2d",
    "vectorized",
    "warptile",
    "pipelined",
    "wmma",
    "wmma_warptile",
    "mma_pipelined",
    "wgmma",
    "ec_wmma",
    "ec_wgmma",
    "gemv",
    "outer",
]
SPECS = registry.ladder()
TILED_2D = ("blocktile_2d", "vectorized")


def spec_id(spec):
    return spec.name


# -- listing ------------------------------------------------------------------------


def test_kernels_lists_the_ladder_in_rung_order():
    ks = gemmlab.kernels()
    assert [k["name"] for k in ks] == LADDER
    assert [(k["family"], k["rung"]) for k in ks] == (
        [("simt", r) for r in range(1, 9)]
        + [("tensor", r) for r in range(1, 5)]
        + [("ec", 1), ("ec", 2)]
        + [("gemv", 1), ("gemv", 2)]
    )


@pytest.mark.parametrize("entry", gemmlab.kernels(), ids=lambda k: k["name"])
def test_kernel_entry_fields(entry):
    """Each entry carries name, family, dtypes, description, params and constraints."""
    for key in ("name", "family", "dtypes", "description", "params", "constraints"):
        assert key in entry, key
    assert (
        entry["dtypes"]
        == {
            "simt": ["float32"],
            "tensor": ["float16", "bfloat16", "tf32"],
            "ec": ["fp16_ec", "tf32_ec"],
            "gemv": ["float32", "float16", "bfloat16"],
        }[entry["family"]]
    )
    assert isinstance(entry["description"], str) and entry["description"].strip()
    assert isinstance(entry["constraints"], list)
    assert all(isinstance(c, str) and c for c in entry["constraints"])
    for name, p in entry["params"].items():
        assert set(p) == {"values", "default", "doc"}, name
        assert p["values"] and all(isinstance(v, int) for v in p["values"])
        assert p["default"] in p["values"]
        assert isinstance(p["doc"], str) and p["doc"].strip()


def test_kernel_params_per_rung():
    params = {k["name"]: list(k["params"]) for k in gemmlab.kernels()}
    assert params == {
        "naive": [],
        "coalesced": [],
        "smem_tiled": ["tile"],
        "blocktile_1d": ["BM", "BN", "BK", "TM"],
        "blocktile_2d": ["BM", "BN", "BK", "TM", "TN"],
        "vectorized": ["BM", "BN", "BK", "TM", "TN"],
        "warptile": ["BM", "BN", "BK", "WM", "WN", "WNITER", "TM"],
        "pipelined": ["BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "STAGES", "REG_TRANSPOSE", "SPLITK"],
        "wmma": [],
        "wmma_warptile": ["BM", "BN", "BK", "WM", "WN"],
        "mma_pipelined": ["BM", "BN", "BK", "WM", "WN", "STAGES"],
        "ec_wmma": ["BM", "BN", "BK", "STAGES"],
        "wgmma": ["BM", "BN", "STAGES", "CLUSTER", "SPLITK"],
        "ec_wgmma": ["STAGES", "BN", "FOLD", "SPLITK"],
        "gemv": ["MT", "SPLITK", "LANES"],
        "outer": [],
    }


def test_ladder_family_filter():
    assert [s.name for s in registry.ladder("simt")] == LADDER[:8]
    assert [s.name for s in registry.ladder("tensor")] == ["wmma", "wmma_warptile", "mma_pipelined", "wgmma"]
    assert registry.ladder("no-such-family") == []


def test_source_files_exist():
    for spec in SPECS:
        assert spec.source_path.is_file(), spec.source_path


# -- resolve and configurations ---------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_defaults_resolve(spec):
    assert spec.resolve() == spec.defaults()
    assert spec.resolve({}) == spec.defaults()


def _independent_checks(name, p, smem=None, smem_limit=48 * 1024, staged=True):
    """The registry's rules, restated from the kernels' sources (not from the Constraint lambdas)."""
    if name == "smem_tiled":
        return p["tile"] ** 2 <= 1024
    if name == "blocktile_1d":
        threads = (p["BM"] // p["TM"]) * p["BN"]
        return (
            p["BM"] % p["TM"] == 0
            and 32 <= threads <= 512
            and (p["BM"] * p["BK"]) % threads == 0
            and (p["BK"] * p["BN"]) % threads == 0
            and 4 * p["BK"] * (p["BM"] + p["BN"]) <= 48 * 1024
        )
    if name in TILED_2D:
        threads = (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])
        per = 4 if name == "vectorized" else 1  # vectorized moves float4s
        ok = (
            p["BM"] % p["TM"] == 0
            and p["BN"] % p["TN"] == 0
            and 32 <= threads <= 512
            and (p["BM"] * p["BK"] // per) % threads == 0
            and (p["BK"] * p["BN"] // per) % threads == 0
            and p["BK"] * (p["BM"] + p["BN"]) <= 16 * threads
            and 4 * p["BK"] * (p["BM"] + p["BN"]) <= 48 * 1024
        )
        if name == "vectorized":
            ok = ok and p["TM"] % 4 == 0 and p["TN"] % 4 == 0 and p["BK"] % 4 == 0
        return ok
    if name == "pipelined":
        # 08_pipelined.cu: warptile's rules but no tile staging through registers (cp.async),
        # STAGES copies of transposed A (rows of BM + 4) and B in shared memory; 64 accumulators per
        # thread, or 128 in a block of 256 threads; 256-wide tiles only as 8 warps of 64 x 64, BK 8;
        # at least 128 threads.
        warp = {k: v for k, v in p.items() if k not in ("STAGES", "SPLITK")}
        smem = 4 * p["STAGES"] * p["BK"] * ((p["BM"] + 4) + p["BN"])
        threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32 if p["BM"] % p["WM"] == 0 else 0
        big_ok = max(p["BM"], p["BN"]) < 256 or (p["WM"] == p["WN"] == 64 and threads == 256 and p["BK"] == 8)
        return (
            _independent_checks("warptile", warp, smem=smem, smem_limit=96 * 1024, staged=False)
            and (p["WM"] * p["WN"] // 32 <= 64 or threads == 256)
            and big_ok
            and threads >= 128
            and p["WNITER"] in (2, 4)
            and p["SPLITK"] in (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
        )
    if name == "ec_wmma":
        # ec/01_ec_wmma.cu: warps of 32 x 32, at most 8; cp.async requests of 16 bytes
        # (and of 4 in the unaligned variant) split evenly over the threads.
        threads = (p["BM"] // 32) * (p["BN"] // 32) * 32
        return (
            threads <= 256
            and (threads == 256 or p["STAGES"] == 2)
            and (p["BM"] * p["BK"] // 4) % threads == 0
            and (p["BK"] * p["BN"] // 4) % threads == 0
        )
    if name == "wmma_warptile":
        # 02_wmma_warptile.cu: (BM/WM) x (BN/WN) warps, each tile load split evenly over the
        # threads, float (TF32) tiles with rows padded by 4 within 48 KiB.
        threads = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32 if p["BM"] % p["WM"] == 0 else 0
        return (
            p["BM"] % p["WM"] == 0
            and p["BN"] % p["WN"] == 0
            and 64 <= threads <= 512
            and (p["BM"] * p["BK"]) % threads == 0
            and (p["BK"] * p["BN"]) % threads == 0
            and 4 * (p["BM"] * (p["BK"] + 4) + p["BK"] * (p["BN"] + 4)) <= 48 * 1024
        )
    if name == "gemv":
        # 01_gemv.cu: MT, the rows of C a pass keeps in registers, any power of two up to 16;
        # SPLITK, blocks along K (a launch shape), any of split-K's factors; LANES, lanes along
        # a row of op(B), a divisor of the warp, below 32 only for at most 4 rows.
        return (
            set(p) == {"MT", "SPLITK", "LANES"}
            and p["MT"] in (1, 2, 4, 8, 16)
            and p["SPLITK"] in SPLITK_VALUES
            and p["LANES"] in (32, 8, 4)
            and (p["LANES"] == 32 or p["MT"] <= 4)
        )
    if name == "mma_pipelined":
        # 03_mma_pipelined.cu: square warp tiles; 64 x 64 ones in blocks of 8 warps (4 warps spill),
        # 32 x 32 ones only as the 4 warps of a 64 x 64 block; STAGES stages of BM rows and BN columns,
        # 2*BK bytes deep, within 160 KiB of dynamic shared memory.
        if p["BM"] % p["WM"] or p["BN"] % p["WN"] or p["WM"] != p["WN"]:
            return False
        warps = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"])
        return (p["WM"] == 64 and warps == 8 or p["WM"] == 32 and p["BM"] == p["BN"] == 64) and p["STAGES"] * 2 * p[
            "BK"
        ] * (p["BM"] + p["BN"]) <= 160 * 1024

    if name == "ec_wgmma":
        # ec/02_ec_wgmma.cu: STAGES x (two 16 KiB tiles of A, two of BN rows of 128 bytes of B^T), two
        # barriers a stage, 1 KiB of slack, within 227 KiB; 128 columns only with FOLD's three
        # accumulator sets (four sets of 64 would not fit the consumers' registers).
        stage = 2 * (128 + p["BN"]) * 128
        return (
            p["STAGES"] >= 2
            and p["STAGES"] * stage + 16 * p["STAGES"] + 1024 <= 227 * 1024
            and p["BN"] in (96, 128)
            and p["FOLD"] in (0, 1)
            and (p["BN"] == 96 or p["FOLD"] == 1)
        )
    if name == "wgmma":
        # 04_wgmma.cu: a ring of STAGES x (BM + BN) rows of 128 bytes, two 8 KiB epilogue staging
        # buffers per consumer warpgroup, two 8-byte barriers a stage and 1 KiB of alignment slack
        # within 227 KiB; BM in 64-row warpgroups, BN one wgmma N; clusters of 1 or 2 blocks, which
        # share B in 64-column boxes (BN = 64 and BN = 192, three boxes: no cluster).  (BN = 192 is
        # 16-bit only: test_wgmma_bn192_rules.)
        smem = p["STAGES"] * (p["BM"] + p["BN"]) * 128 + (p["BM"] // 64) * 2 * 8192 + 16 * p["STAGES"] + 1024
        return (
            p["BM"] in (64, 128)
            and p["BN"] in (64, 128, 192, 256)
            and p["STAGES"] >= 3
            and smem <= 227 * 1024
            and p["CLUSTER"] in (1, 2)
            and ((p["BN"] // 64) % 2 == 0 or p["CLUSTER"] == 1)
        )
    if name == "warptile":
        # 07_warptile.cu: threads = warps * 32, each thread WMITER x WNITER subtiles of TM x 4,
        # 32 threads' subtiles tile a WSUBM x WSUBN warp subtile.
        warps = (p["BM"] // p["WM"]) * (p["BN"] // p["WN"])
        threads = warps * 32
        if p["BM"] % p["WM"] or p["BN"] % p["WN"] or not 64 <= threads <= 512:
            return False
        outputs_per_thread = p["WM"] * p["WN"] // 32
        wmiter = outputs_per_thread // (p["TM"] * 4 * p["WNITER"])
        if wmiter * p["TM"] * 4 * p["WNITER"] != outputs_per_thread or wmiter == 0:
            return False
        wsubm, wsubn = p["WM"] / wmiter, p["WN"] / p["WNITER"]
        return (
            wsubm == int(wsubm)
            and wsubn == int(wsubn)
            and (wsubm / p["TM"]) * (wsubn / 4) == 32
            and wsubm % p["TM"] == 0
            and wsubn % 4 == 0
            and (p["BM"] * p["BK"] // 4) % threads == 0
            and (p["BK"] * p["BN"] // 4) % threads == 0
            and (not staged or p["BK"] * (p["BM"] + p["BN"]) <= 16 * threads)
            and (not staged or outputs_per_thread <= 64)  # rung 7: 128 accumulators spill
            and (smem if smem is not None else 4 * p["BK"] * (p["BM"] + p["BN"])) <= smem_limit
        )
    return p == {}


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_every_configuration_is_legal(spec):
    configs = spec.configurations()
    assert configs, "a kernel must have at least one legal configuration"
    assert spec.defaults() in configs
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs), "duplicates"
    for cfg in configs:
        for c in spec.constraints:
            assert c.holds(cfg) or c.dtypes, (cfg, c.rule)  # (a rule of some types only: below)
        assert _independent_checks(spec.name, cfg), cfg
        assert spec.resolve(cfg) == cfg
    # Each type's configurations: those its rules allow (Constraint.dtypes), resolved for it.
    for dtype in spec.dtypes:
        typed = spec.configurations(dtype)
        assert typed and set(map(str, typed)) <= set(map(str, configs)), dtype
        for cfg in typed:
            assert all(c.holds(cfg) for c in spec.constraints if c.binds(dtype)) and spec.resolve(cfg, dtype) == cfg


@pytest.mark.parametrize("spec", [s for s in SPECS if s.params], ids=spec_id)
def test_configurations_are_exactly_the_legal_product(spec):
    """Every value combination the independent rules allow is listed, and nothing else."""
    import itertools

    names = [p.name for p in spec.params]
    legal = [
        dict(zip(names, vals))
        for vals in itertools.product(*(p.values for p in spec.params))
        if _independent_checks(spec.name, dict(zip(names, vals)))
    ]
    assert spec.configurations() == legal


def test_smem_tiled_tiles():
    spec = registry.get("smem_tiled")
    assert [c["tile"] for c in spec.configurations()] == [2, 4, 8, 16, 32]
    assert spec.params[0].values == (2, 4, 8, 16, 32)
    for bad in (0, 1, 3, 64):
        with pytest.raises(ValueError, match=rf"tile={bad} is not legal for kernel 'smem_tiled'"):
            spec.resolve({"tile": bad})


@pytest.mark.parametrize(
    "kernel, params, rule",
    [
        (
            "vectorized",
            dict(BM=64, BN=64, BK=8, TM=4, TN=4),
            "the A tile BM*BK and the B tile BK*BN, in float4s, must split evenly over the threads",
        ),
        (
            "blocktile_2d",
            dict(BM=64, BN=64, BK=16, TM=8, TN=8),
            "each thread may stage at most 16 elements of A and B per K step",
        ),
        ("blocktile_1d", dict(BM=128, BN=128, TM=4), "threads per block, (BM/TM)*BN, must be between 32 and 512"),
        (
            "blocktile_1d",
            dict(BM=32, BN=128, BK=8, TM=8),
            "the A tile BM*BK and the B tile BK*BN must split evenly over the threads",
        ),
    ],
)
def test_illegal_combinations_refused(kernel, params, rule):
    spec = registry.get(kernel)
    with pytest.raises(ValueError, match=rf"not a legal combination for kernel '{kernel}': .*") as info:
        spec.resolve(params)
    assert rule in str(info.value)
    assert params not in spec.configurations()


def test_a_rule_of_some_types_binds_those_types_only():
    """Constraint.dtypes: resolve and configurations check it for those types (not without a
    type), and instantiations leave its configurations out of those types' variants."""
    from gemmlab.kernels.spec import Constraint, KernelSpec, TileParam

    spec = KernelSpec(
        name="typed",
        rung=0,
        family="simt",
        dtypes=("float16", "tf32"),
        source="",
        template="t",
        description="",
        params=(TileParam("BN", (1, 2), 1, ""),),
        constraints=(Constraint("BN = 2 is not for TF32", lambda p: p["BN"] != 2, dtypes=("tf32",)),),
        template_args=lambda p, prob: (p["BN"], prob.dtype == "tf32"),
        variants=(Problem(1, 1, 1, True, "float16"), Problem(1, 1, 1, True, "tf32")),
        layouts=(("N", "N"),),
    )
    assert spec.resolve({"BN": 2}) == spec.resolve({"BN": 2}, "float16") == {"BN": 2}
    with pytest.raises(ValueError, match=r"for kernel 'typed' with tf32 inputs: BN = 2 is not for TF32"):
        spec.resolve({"BN": 2}, "tf32")
    assert spec.configurations() == spec.configurations("float16") == [{"BN": 1}, {"BN": 2}]
    assert spec.configurations("tf32") == [{"BN": 1}]
    assert spec.all_name_expressions(layouts=[("N", "N")]) == [
        "t<1, false, 'N', 'N'>",
        "t<1, true, 'N', 'N'>",
        "t<2, false, 'N', 'N'>",
    ]


def test_resolve_fills_defaults_for_missing_params():
    spec = registry.get("vectorized")
    other_bn = 64 if spec.defaults()["BN"] == 128 else 128
    expected = {**spec.defaults(), "BN": other_bn}
    assert expected in spec.configurations(), "pick a legal one-parameter change"
    resolved = spec.resolve({"BN": other_bn})
    assert resolved == expected
    assert list(resolved) == ["BM", "BN", "BK", "TM", "TN"]  # declaration order


@pytest.mark.parametrize("value", [True, 16.0, "16"])
def test_resolve_refuses_non_int_values(value):
    with pytest.raises(TypeError, match=r"tile parameter tile=.* of kernel 'smem_tiled' must be an int"):
        registry.get("smem_tiled").resolve({"tile": value})


def test_resolve_accepts_numpy_ints():
    assert registry.get("smem_tiled").resolve({"tile": np.int64(16)}) == {"tile": 16}


def test_get_unknown_kernel():
    with pytest.raises(ValueError, match=r"unknown kernel 'gemm'; known kernels: auto, naive, "):
        registry.get("gemm")


# -- name expressions ----------------------------------------------------------------------


def test_name_expression_vectorized():
    """The template arguments in order, with the VEC flag from the problem's alignment."""
    spec = registry.get("vectorized")
    p = {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}
    assert (
        spec.name_expression(p, Problem(256, 256, 256, True))
        == "gemmlab::vectorized<128, 128, 8, 8, 8, true, 'N', 'N'>"
    )
    assert (
        spec.name_expression(p, Problem(256, 256, 256, False))
        == "gemmlab::vectorized<128, 128, 8, 8, 8, false, 'N', 'N'>"
    )
    p = {"BM": 64, "BN": 128, "BK": 16, "TM": 8, "TN": 4}
    assert spec.name_expression(p, Problem(8, 8, 8, True)) == "gemmlab::vectorized<64, 128, 16, 8, 4, true, 'N', 'N'>"


def test_name_expression_vectorized_defaults():
    spec = registry.get("vectorized")
    d = spec.defaults()
    args = f"{d['BM']}, {d['BN']}, {d['BK']}, {d['TM']}, {d['TN']}"
    assert spec.name_expression(d, Problem(256, 256, 256, True)) == f"gemmlab::vectorized<{args}, true, 'N', 'N'>"
    assert spec.name_expression(d, Problem(256, 256, 256, False)) == f"gemmlab::vectorized<{args}, false, 'N', 'N'>"


@pytest.mark.parametrize(
    "kernel, params, expected",
    [
        ("naive", {}, "gemmlab::naive<32, 'N', 'N'>"),
        ("coalesced", {}, "gemmlab::coalesced<32, 'N', 'N'>"),
        ("smem_tiled", {"tile": 16}, "gemmlab::smem_tiled<16, 'N', 'N'>"),
        ("blocktile_1d", {"BM": 64, "BN": 32, "BK": 16, "TM": 4}, "gemmlab::blocktile_1d<64, 32, 16, 4, 'N', 'N'>"),
        (
            "blocktile_2d",
            {"BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 4},
            "gemmlab::blocktile_2d<128, 64, 16, 8, 4, 'N', 'N'>",
        ),
    ],
    ids=["naive", "coalesced", "smem_tiled", "blocktile_1d", "blocktile_2d"],
)
def test_name_expression_without_vec_variant(kernel, params, expected):
    """Kernels without a VEC variant give the same name whatever the alignment."""
    spec = registry.get(kernel)
    params = spec.resolve(params)
    for aligned in (True, False):
        assert spec.name_expression(params, Problem(100, 100, 100, aligned)) == expected


@pytest.mark.parametrize(
    "spec",
    [s for s in SPECS if s.family == "simt" and s.name not in ("vectorized", "warptile", "pipelined")],
    ids=spec_id,
)
def test_name_expression_defaults(spec):
    """Default instantiations list the defaults in declaration order (naive/coalesced: the 32 block)."""
    args = ", ".join(str(v) for v in spec.defaults().values()) or "32"
    assert spec.name_expression(spec.defaults(), Problem(100, 100, 100, True)) == f"{spec.template}<{args}, 'N', 'N'>"


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_all_name_expressions(spec):
    names = spec.all_name_expressions()
    assert len(names) == len(set(names))
    configs = spec.configurations()
    nn_names = spec.all_name_expressions(layouts=[("N", "N")])
    if spec.name == "wgmma":  # split or not is a template argument (test_wgmma_name_expressions): unsplit here
        names, nn_names = ([n for n in x if ", false, '" in n] for x in (names, nn_names))
        configs = [c for c in configs if c["SPLITK"] == 1]
    # The split-K factor is a launch shape, not a template argument: one instantiation serves all.
    compiled = {tuple(v for k, v in c.items() if k != spec.split_k_param) for c in configs}
    # Every layout, except for kernels that read fewer, or some in some types only (wgmma:
    # TF32 NN only), and those whose launch packs the operands row-major first (ec_wgmma:
    # one instantiation, NN, serves every layout).
    layouts = [("N", "N")] if spec.packed else spec.layouts
    assert set(layouts) <= set(LAYOUTS) and ("N", "N") in layouts
    read = {la: sum(not spec.why_unusable(v.with_layout(*la)) for v in spec.variants) for la in layouts}
    assert read[("N", "N")] == len(spec.variants)  # every type reads NN
    # pipelined's REG_TRANSPOSE is a template argument only where it changes the code: in
    # the aligned variant of a layout with rows along K (op(A) row-major or op(B)
    # column-major); elsewhere both values share one instantiation.
    both_ways = {la: 0 for la in LAYOUTS}
    if spec.name == "pipelined":
        compiled = {tuple(v for k, v in c.items() if k not in (spec.split_k_param, "REG_TRANSPOSE")) for c in configs}
        both_ways.update({la: 1 for la in LAYOUTS if la != ("T", "N")})
    # gemv's LANES is a template argument only where op(B) is row-major (its row path).
    per_layout = {la: len(compiled) for la in LAYOUTS}
    if spec.name == "gemv":
        per_layout.update({la: len({c["MT"] for c in configs}) for la in LAYOUTS if la[1] == "T"})
    # Configurations a rule of some types only leaves out of a type's instantiations in each
    # layout it reads (Constraint.dtypes: wgmma's BN = 192 is not for TF32); none elsewhere.
    dropped = {
        la: sum(
            not all(r.holds(c) for r in spec.constraints if r.dtypes and r.binds(v.dtype))
            for v in spec.variants
            if not spec.why_unusable(v.with_layout(*la))
            for c in configs
        )
        for la in LAYOUTS
    }
    assert len(names) == sum(per_layout[la] * (read.get(la, 0) + both_ways[la]) - dropped[la] for la in LAYOUTS)
    assert all(n.startswith(spec.template + "<") and n.endswith(">") for n in names)
    for op_a, op_b in LAYOUTS:  # the layouts are the last two template arguments
        expected = per_layout[op_a, op_b] * (read.get((op_a, op_b), 0) + both_ways[op_a, op_b]) - dropped[op_a, op_b]
        assert sum(n.endswith(f", '{op_a}', '{op_b}'>") for n in names) == expected
    assert len(nn_names) == len(compiled) * (len(spec.variants) + both_ways["N", "N"]) - dropped["N", "N"]


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_layouts_are_the_last_template_arguments(spec):
    d = spec.defaults()
    base = spec.name_expression(d, spec.variants[0])
    for op_a, op_b in LAYOUTS:
        name = spec.name_expression(d, spec.variants[0].with_layout(op_a, op_b))
        expected = base
        if spec.name == "pipelined" and (op_a, op_b) == ("T", "N"):  # no rows along K: REG_TRANSPOSE is moot
            assert d["REG_TRANSPOSE"] == 1 and base.endswith(", 1, true, 'N', 'N'>")
            expected = base.replace(", 1, true, 'N', 'N'>", ", 0, true, 'N', 'N'>")
        assert name == expected[: -len("'N', 'N'>")] + ("'N', 'N'>" if spec.packed else f"'{op_a}', '{op_b}'>")
    with pytest.raises(ValueError, match=r"operand layouts are 'N' or 'T', not 'C', 'N'"):
        spec.name_expression(d, spec.variants[0].with_layout("C", "N"))


def test_pipelined_pads_the_b_tile_only_when_b_is_transposed():
    """Rung 8 copies a column-major B tile transposed into rows padded by 4 floats
    (as it does A's); the legality rule counts the padded size."""
    spec = registry.get("pipelined")
    d = spec.defaults()
    nn = spec.launch(d, Problem(4096, 4096, 4096, True)).smem_bytes
    nt = spec.launch(d, Problem(4096, 4096, 4096, True, op_b="T")).smem_bytes
    assert nn == 4 * d["STAGES"] * d["BK"] * (d["BM"] + 4 + d["BN"])
    assert nt == nn + 4 * d["STAGES"] * d["BK"] * 4
    assert spec.launch(d, Problem(4096, 4096, 4096, True, op_a="T")).smem_bytes == nn
    assert all(pipelined_smem(c) <= PIPELINED_SMEM_LIMIT for c in spec.configurations())


def test_plan_name_expression_follows_alignment():
    assert gemmlab.plan("vectorized", 64, 64, 64, aligned16=False).name_expression.endswith(", false, 'N', 'N'>")
    assert gemmlab.plan("vectorized", 64, 64, 64, aligned16=True).name_expression.endswith(", true, 'N', 'N'>")


# -- kernel="auto" -------------------------------------------------------------------------

# pipelined.auto_params, the tile-count rule (kernel="auto" on a GPU without a tuned table
# weighs it against rung 8's cost model: tests/test_fp32_choice.py): pipelined at its
# defaults (128 x 256 tiles), split over K where ceil(M/128) * ceil(N/256) tiles leave more
# than half the SMs idle: the largest split s <= 4 (of 1, 2, 3, 4) with s * tiles <= SMs and
# at least 4 K-steps (BK = 8) per slice.
PIPE_DEFAULTS = registry.get("pipelined").defaults()


def _rule(M, N, K, sm_count, batch=1):
    name, params = pipelined.auto_params(M, N, K, sm_count, batch)
    assert name == "pipelined"
    return registry.get("pipelined").resolve(params)


@pytest.mark.parametrize(
    "M, N, K, sm_count, splits",
    [
        (4096, 4096, 4096, 132, 1),  # 32 * 16 = 512 tiles
        (2048, 2048, 512, 132, 1),  # 16 * 8 = 128 tiles: more than half the SMs
        (1152, 2048, 512, 132, 1),  # 9 * 8 = 72 tiles >= 66
        (1024, 1024, 1024, 132, 4),  # 8 * 4 = 32 tiles: 4 * 32 = 128 <= 132
        (256, 4096, 4096, 132, 4),  # 2 * 16 = 32 tiles
        (1024, 2048, 4096, 132, 2),  # 8 * 8 = 64 tiles < 66: 2 * 64 = 128 <= 132
        (100, 100, 100000, 132, 4),  # one tile: split at most 4
        (100, 100, 96, 132, 3),  # 12 K-steps: 3 slices of 4
        (100, 100, 64, 132, 2),  # 8 K-steps
        (65, 65, 64, 132, 2),
        (65, 65, 31, 132, 1),  # 4 K-steps: no split
        (128, 256, 4096, 1, 1),  # one tile fills the one SM
    ],
)
def test_auto_heuristic(M, N, K, sm_count, splits):
    assert _rule(M, N, K, sm_count) == {**PIPE_DEFAULTS, "SPLITK": splits}


@pytest.mark.parametrize(
    "M, N, K, sm_count",
    [
        (4096, 4096, 4096, 132),
        (2048, 2048, 512, 132),
        (1024, 1024, 1024, 132),
        (256, 4096, 4096, 132),
        (1024, 2048, 4096, 132),
        (128, 256, 4096, 1),
    ],
)
def test_auto_keeps_the_rule_where_the_cost_model_agrees(M, N, K, sm_count):
    p = gemmlab.plan("auto", M, N, K, sm_count=sm_count)
    assert p.spec.name == "pipelined" and p.params == _rule(M, N, K, sm_count)
    assert p.reason.startswith("the tile-count rule, kept by the cost model: ")


@pytest.mark.parametrize(
    "M, N, tile, splits",
    [
        (8192, 64, pipelined.SKINNY_N, 2),  # 64 tiles of 128 x 64: 2 * 64 <= 132
        (64, 8192, pipelined.SKINNY_M, 2),
        (64, 64, pipelined.SKINNY_N, 4),  # one tile
        (8192, 48, pipelined.SKINNY_N, 2),
    ],
)
def test_auto_heuristic_for_a_skinny_side(M, N, tile, splits):
    p = _rule(M, N, 8192, 132)
    assert p == {**PIPE_DEFAULTS, **tile, "SPLITK": splits}
    assert p in registry.get("pipelined").configurations()


def test_auto_choices_are_legal_configurations():
    for splits in (1, 2, 3, 4):
        assert {**PIPE_DEFAULTS, "SPLITK": splits} in registry.get("pipelined").configurations()


def test_auto_follows_alignment():
    assert gemmlab.plan("auto", 4096, 4096, 4096, aligned16=False).name_expression.endswith(", false, 'N', 'N'>")


@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
def test_auto_honours_layouts(op_a, op_b):
    for M, N, K in [(4096, 4096, 4096), (1024, 1024, 512), (100, 100, 100000)]:
        p = gemmlab.plan("auto", M, N, K, op_a=op_a, op_b=op_b)
        assert (p.problem.op_a, p.problem.op_b) == (op_a, op_b)
        assert p.name_expression.endswith(f", '{op_a}', '{op_b}'>")
        assert p.params == gemmlab.plan("auto", M, N, K).params  # the same choice for every layout


@pytest.mark.parametrize(
    "M, N, K, batch, splits",
    [
        (4096, 4096, 4096, 7, 1),
        (96, 96, 4096, 1, 4),  # one tile: split-K
        (96, 96, 4096, 33, 4),  # 33 tiles x 4 = 132
        (96, 96, 4096, 34, 3),  # 34 x 4 > 132: 3
        (96, 96, 4096, 66, 1),  # 66 tiles in the batch: half the SMs, no split
    ],
)
def test_auto_counts_a_batch_as_tiles(M, N, K, batch, splits):
    assert _rule(M, N, K, 132, batch) == {**PIPE_DEFAULTS, "SPLITK": splits}
    if batch > 1:  # what auto runs: a split only where the batch's tiles leave SMs idle
        p = gemmlab.plan("auto", M, N, K, sm_count=132, batch=batch)
        tiles = -(-M // p.params["BM"]) * -(-N // p.params["BN"]) * batch
        assert p.params["SPLITK"] == 1 or tiles < 132


# The shipped H100 table at shapes it was not tuned for (choose._fit_nearest): the nearest
# tuned shape's tile, its split-K chosen again for this shape's tiles.
H100 = "nvidia-h100-80gb-hbm3"
H200 = "nvidia-h200"


@pytest.mark.parametrize(
    "M, N, K, splits",
    [
        (128, 4096, 4096, 8),  # 16 tiles of 128 x 256 (nearest 256x4096x4096 split 4: 64 blocks)
        (128, 4096, 28672, 8),
        (128, 6144, 4096, 5),  # 24 tiles: 5 x 24 = 120 <= 132 < 6 x 24
        (128, 14336, 4096, 2),  # 56 tiles: 2 x 56 = 112
        (128, 28672, 4096, 1),  # 112 tiles fill more than half the SMs
        (128, 4096, 96, 3),  # 12 K-steps: 3 slices of 4
    ],
)
def test_nearest_tuned_shape_has_its_split_k_fitted(M, N, K, splits):
    """The table's answer as fitted (what kernel="auto" runs where the cost model keeps it:
    all but the last, whose 12 K-steps the model gives to 64 x 64 tiles unsplit)."""
    found = choose._tuned("auto", choose.Product(M, N, K), choose.GPU("sm_90a", 132, H100))
    params = registry.get("pipelined").resolve(found.params)
    assert found.name == "pipelined" and (params["BM"], params["BN"]) == (128, 256)
    assert params["SPLITK"] == splits
    assert params in registry.get("pipelined").configurations()
    p = gemmlab.plan("auto", M, N, K, sm_count=132, gpu_slug=H100, arch="sm_90a")
    assert (p.params == params) == (K != 96), p.reason


def test_an_output_128_wide_takes_64_x_128_tiles():
    """Attention's P @ V (N = 128): a 128 x 256 tile from the nearest tuned shape
    (2048^3 in the H200's table) would compute half zeros; 64 x 128 tiles, split for a
    single product.  The H100's table has P @ V's own shapes (tuned in batches of 32
    and 128): their winners, and for a single product the split chosen again."""
    for batch, splits in ((32, 1), (128, 1), (1, 4)):
        p = gemmlab.plan("auto", 2048, 128, 2048, sm_count=132, gpu_slug=H200, arch="sm_90a", batch=batch)
        assert p.params == {**PIPE_DEFAULTS, **pipelined.SKINNY_M, "SPLITK": splits}
        p = gemmlab.plan("auto", 2048, 128, 2048, sm_count=132, gpu_slug=H100, arch="sm_90a", batch=batch)
        own = tables.load_table(H100).shapes["2048x128x2048"]["best"]["params"]
        assert p.params == {**own, "SPLITK": splits}
    for slug in (H100, H200):
        p = gemmlab.plan("auto", 4096, 128, 4096, sm_count=132, gpu_slug=slug, arch="sm_90a", batch=32)
        assert (p.params["BM"], p.params["BN"]) == (64, 128)  # not a neighbour's 128 x 64
    # A tuned tile already 128 wide stays (512^3's, for 512x128x512).
    square = gemmlab.plan("auto", 512, 512, 512, sm_count=132, gpu_slug=H200, arch="sm_90a").params
    p = gemmlab.plan("auto", 512, 128, 512, sm_count=132, gpu_slug=H200, arch="sm_90a", batch=32)
    assert p.params == {**square, "SPLITK": 1}


@pytest.mark.parametrize("shape", ["256x4096x4096", "8192x64x8192", "1024x1024x1024"])
def test_a_tuned_shape_keeps_its_own_winner(shape):
    from gemmlab.core import tables

    M, N, K = tables.parse_shape_key(shape)
    p = gemmlab.plan("auto", M, N, K, sm_count=132, gpu_slug=H100, arch="sm_90a")
    assert p.params == p.spec.resolve(tables.load_table(H100).shapes[shape]["best"]["params"])


def test_tuned_split_k_is_dropped_when_the_batch_fills_the_gpu():
    """The shipped H200 table picks split-K for 8192x64x8192; a batch of 64 such products does not need it."""
    one = gemmlab.plan("auto", 8192, 64, 8192, sm_count=132, gpu_slug="nvidia-h200")
    assert one.spec.splits(one.params) > 1
    many = gemmlab.plan("auto", 8192, 64, 8192, sm_count=132, gpu_slug="nvidia-h200", batch=64)
    assert many.spec.name == one.spec.name and many.spec.splits(many.params) == 1
    assert {k: v for k, v in many.params.items() if k != "SPLITK"} == {
        k: v for k, v in one.params.items() if k != "SPLITK"
    }
    # An explicit SPLITK is the caller's choice and stays.
    p = gemmlab.plan("pipelined", 64, 64, 4096, sm_count=132, batch=1000, SPLITK=4)
    assert p.params["SPLITK"] == 4


def test_auto_refuses_tile_params():
    with pytest.raises(ValueError, match=r"need a named kernel, not kernel='auto'"):
        gemmlab.plan("auto", 64, 64, 64, BM=64)


def test_plan_describe():
    assert gemmlab.plan("naive", 8, 8, 8).describe() == "naive"
    assert gemmlab.plan("smem_tiled", 8, 8, 8, tile=16).describe() == "smem_tiled(tile=16)"


# -- launch geometry --------------------------------------------------------------------------

COLUMN_MAJOR_TILES = ("naive", "coalesced")  # the untiled rungs number tiles down the columns
SIZES = [(1, 1), (7, 13), (31, 33), (64, 64), (127, 129), (128, 128), (129, 257), (1000, 1000), (4097, 31), (17, 4099)]


def block_tile(spec, p):
    """(BM, BN, outputs per thread) of one block, as the kernel sources define them."""
    if spec.name in ("naive", "coalesced"):
        return 32, 32, 1
    if spec.name == "smem_tiled":
        return p["tile"], p["tile"], 1
    if spec.name == "blocktile_1d":
        return p["BM"], p["BN"], p["TM"]
    if spec.name in ("warptile", "pipelined", "wmma_warptile", "mma_pipelined"):
        return p["BM"], p["BN"], p["WM"] * p["WN"] // 32
    if spec.name == "ec_wmma":  # warps of 32 x 32
        return p["BM"], p["BN"], 32
    return p["BM"], p["BN"], p["TM"] * p["TN"]


def expected_block(spec, p):
    if spec.name in ("naive", "coalesced"):
        return (32, 32, 1)
    if spec.name == "smem_tiled":
        return (p["tile"], p["tile"], 1)
    if spec.name == "blocktile_1d":
        return ((p["BM"] // p["TM"]) * p["BN"], 1, 1)
    if spec.name in ("warptile", "pipelined", "wmma_warptile", "mma_pipelined"):
        return ((p["BM"] // p["WM"]) * (p["BN"] // p["WN"]) * 32, 1, 1)
    if spec.name == "ec_wmma":
        return ((p["BM"] // 32) * (p["BN"] // 32) * 32, 1, 1)
    return ((p["BM"] // p["TM"]) * (p["BN"] // p["TN"]), 1, 1)


def _cases():
    # wmma numbers warp tiles (test_wmma_geometry); wgmma and ec_wgmma are persistent
    # (test_wgmma_geometry, test_ec_wgmma_geometry); gemv and outer have no tile parameters
    # (test_gemv_geometry, test_outer_geometry).
    for spec in [s for s in SPECS if s.name not in ("wmma", "wgmma", "ec_wgmma") and s.family != "gemv"]:
        configs = spec.configurations()
        if spec.split_k_param:  # every tile shape unsplit, and the defaults with each split
            configs = [p for p in configs if p[spec.split_k_param] == 1] + [
                {**spec.defaults(), spec.split_k_param: s} for s in SPLITK_VALUES if s > 1
            ]
        for p in configs:
            yield pytest.param(spec, p, id=spec.name + "".join(f"-{k}{v}" for k, v in p.items()))


@pytest.mark.parametrize("spec, p", list(_cases()))
def test_launch_covers_every_output(spec, p):
    """The 1-D grid, numbered over tiles as tile_order.cuh's block_tile_origin (row-major)
    or block_tile_origin_colmajor does, hits every BM x BN tile of C once, and no
    block starts outside C."""
    BM, BN, per_thread = block_tile(spec, p)
    for M, N in SIZES:
        for aligned in (True, False):
            geo = spec.launch(p, Problem(M, N, 64, aligned))
            assert geo.block == expected_block(spec, p)
            threads = math.prod(geo.block)
            assert 0 < threads <= 1024
            assert threads * per_thread == BM * BN, "threads x outputs per thread must fill the tile"
            assert geo.grid[1:] == (spec.splits(p), 1)  # gridDim.y: blocks per tile (split-K)
            blocks = geo.grid[0]
            tiles_m, tiles_n = -(-M // BM), -(-N // BN)
            bid = np.arange(blocks)
            if spec.name in COLUMN_MAJOR_TILES:  # block_tile_origin_colmajor
                rows0, cols0 = (bid % tiles_m) * BM, (bid // tiles_m) * BN
            else:  # block_tile_origin
                rows0, cols0 = (bid // tiles_n) * BM, (bid % tiles_n) * BN
            assert (rows0 < M).all() and (cols0 < N).all(), "a block starts outside C"
            origins = set(zip(rows0.tolist(), cols0.tolist()))
            assert len(origins) == blocks, "two blocks share a tile"
            assert blocks == math.ceil(M / BM) * math.ceil(N / BN), (M, N, blocks)
            if aligned and blocks <= 5000:  # direct check, where cheap
                covered = np.zeros((M, N), dtype=np.int32)
                for r, c in origins:
                    covered[r : r + BM, c : c + BN] += 1
                assert (covered == 1).all(), (M, N)


def test_launch_geometry_examples():
    v = registry.get("vectorized")
    geo = v.launch({"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}, Problem(4096, 4096, 4096, True))
    assert geo.grid == (32 * 32, 1, 1) and geo.block == (256, 1, 1)
    geo = v.launch({"BM": 64, "BN": 128, "BK": 16, "TM": 8, "TN": 4}, Problem(4096, 1000, 4096, False))
    assert geo.grid == (64 * 8, 1, 1) and geo.block == (8 * 32, 1, 1)
    n = registry.get("naive")
    geo = n.launch({}, Problem(33, 65, 1, True))
    assert geo.grid == (2 * 3, 1, 1) and geo.block == (32, 32, 1)


def test_pipelined_asks_for_its_dynamic_shared_memory():
    """08_pipelined.cu keeps STAGES tiles of transposed A (rows of BM + 4) and B in dynamic shared memory."""
    spec = registry.get("pipelined")
    for p in spec.configurations():
        geo = spec.launch(p, Problem(300, 300, 300, True))
        assert geo.smem_bytes == 4 * p["STAGES"] * p["BK"] * (p["BM"] + 4 + p["BN"])
        assert geo.smem_bytes <= 96 * 1024
    assert max(spec.launch(p, Problem(1, 1, 1, True)).smem_bytes for p in spec.configurations()) > 48 * 1024


# -- the tensor-core ladder ------------------------------------------------------------------


def test_wmma_name_expressions_follow_the_dtypes():
    spec = registry.get("wmma")
    codes = {"float16": 0, "bfloat16": 1, "tf32": 2, "float32": 3}
    for dt, odt in [
        ("float16", "float32"),
        ("float16", "float16"),
        ("bfloat16", "float32"),
        ("bfloat16", "bfloat16"),
        ("tf32", "float32"),
    ]:
        prob = Problem(10, 10, 10, True, dt, odt)
        spec.check_dtypes(prob)
        assert spec.name_expression({}, prob) == f"gemmlab::wmma_tile<{codes[dt]}, {codes[odt]}, 'N', 'N'>"
    assert len(spec.all_name_expressions()) == 5 * 4  # x 4 layouts
    for dt, odt in [("float16", "bfloat16"), ("tf32", "float16"), ("float32", "float32")]:
        with pytest.raises(TypeError):
            spec.check_dtypes(Problem(10, 10, 10, True, dt, odt))


@pytest.mark.parametrize("M, N", [(1, 1), (16, 16), (17, 33), (1000, 70), (64, 4097)])
def test_wmma_geometry(M, N):
    """01_wmma.cu: warp w of the grid owns the 16x16 tile w (row-major over tiles); 4 warps
    per block; every tile has a warp, the spare warps of the last block start outside C."""
    geo = registry.get("wmma").launch({}, Problem(M, N, 8, True, "float16", "float32"))
    assert geo.block == (128, 1, 1) and geo.grid[1:] == (1, 1)
    tiles_n, tiles = -(-N // 16), -(-M // 16) * -(-N // 16)
    warps = np.arange(geo.grid[0] * 4)
    rows0, cols0 = (warps // tiles_n) * 16, (warps % tiles_n) * 16
    inside = rows0 < M
    assert inside.sum() == tiles and (cols0 < N).all()
    assert geo.grid[0] == -(-tiles // 4)


# -- mma_pipelined ---------------------------------------------------------------------------

MMA_SMALL = {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 4}


def test_mma_pipelined_configurations():
    """The legal set: 64 x 64 blocks of 4 warps (32 x 32), and 128 x 256 / 256 x 128 blocks of
    8 warps (64 x 64), each with 3 or 4 stages of BK = 32, or 64 where 160 KiB allow."""
    got = {(c["BM"], c["BN"], c["BK"], c["WM"], c["STAGES"]) for c in registry.get("mma_pipelined").configurations()}
    assert got == {(64, 64, bk, 32, st) for bk in (32, 64) for st in (3, 4)} | {
        (bm, bn, 32, 64, st) for bm, bn in ((128, 256), (256, 128)) for st in (3, 4)
    } | {(128, 256, 64, 64, 3), (256, 128, 64, 64, 3)}


@pytest.mark.parametrize(
    "params, rule",
    [
        (dict(BM=128, BN=128), "64 x 64 warp tiles in blocks of 8 warps"),
        (dict(BM=128, BN=128, WM=32, WN=32), "32 x 32 warp tiles only in a 64 x 64 block"),
        (dict(WN=32), "square warp tiles, WM == WN"),
        (dict(BK=64, STAGES=4), "must fit in 160 KiB"),
    ],
)
def test_mma_pipelined_illegal_combinations(params, rule):
    spec = registry.get("mma_pipelined")
    with pytest.raises(ValueError, match=r"not a legal combination for kernel 'mma_pipelined'") as info:
        spec.resolve(params)
    assert rule in str(info.value)


def test_mma_pipelined_shared_memory_and_geometry():
    """STAGES stages of an A tile (BM rows of 2*BK bytes) and a B tile (2*BK bytes of K, BN columns),
    the same bytes for every dtype; one block per BM x BN tile."""
    spec = registry.get("mma_pipelined")
    for p in spec.configurations():
        for prob in spec.variants:
            geo = spec.launch(p, Problem(1000, 700, 300, prob.aligned16, prob.dtype, prob.out_dtype))
            assert geo.smem_bytes == p["STAGES"] * 2 * p["BK"] * (p["BM"] + p["BN"]) <= 160 * 1024
            assert geo.grid == (-(-1000 // p["BM"]) * -(-700 // p["BN"]), 1, 1)
    assert spec.launch(spec.defaults(), Problem(1, 1, 1, True)).smem_bytes == 3 * 128 * 384


def test_mma_pipelined_name_expressions():
    """Template arguments: dtype codes, the tile parameters, then the 16-byte-copy flag."""
    spec = registry.get("mma_pipelined")
    d = spec.defaults()
    assert (
        spec.name_expression(d, Problem(9, 9, 9, True, "float16", "float16"))
        == "gemmlab::mma_pipelined<0, 0, 128, 256, 64, 64, 64, 3, true, 'N', 'N'>"
    )
    assert (
        spec.name_expression(d, Problem(9, 9, 9, False, "tf32", "float32"))
        == "gemmlab::mma_pipelined<2, 3, 128, 256, 64, 64, 64, 3, false, 'N', 'N'>"
    )
    assert len(spec.variants) == 10
    assert {(v.dtype, v.out_dtype, v.aligned16) for v in spec.variants} == {
        (dt, odt, al)
        for dt, odt in [
            ("float16", "float32"),
            ("float16", "float16"),
            ("bfloat16", "float32"),
            ("bfloat16", "bfloat16"),
            ("tf32", "float32"),
        ]
        for al in (True, False)
    }


# kernel="auto" for 16-bit and TF32 (mma_pipelined's sized_params, through choose.sized_choice): mma_pipelined at its defaults
# when 2 * ceil(M/128) * ceil(N/256) >= sm_count (half of the SMs busy), else its 64 x 64 tiles,
# unless the cost model predicts the other clearly faster (mma_pipelined.sized_choice).
@pytest.mark.parametrize(
    "M, N, K, sm_count, big",
    [
        (4096, 4096, 4096, 132, True),  # 32 * 16 = 512 tiles
        (2048, 2048, 2048, 132, True),  # 16 * 8 = 128 >= 66
        (1024, 1024, 1024, 132, False),  # 8 * 4 = 32 < 66
        (1281, 1536, 64, 132, True),  # 11 * 6 = 66 (ceiling of 1281 / 128): exactly half
        (1280, 1536, 64, 132, False),  # 10 * 6 = 60
        (17, 1, 9, 132, False),  # more rows than gemv takes, more K than outer takes
        # One tile keeps half of 2 SMs busy, but a 128 x 256 tile over a 17 x 1 output is all
        # waste: the cost model takes 64 x 64.
        (17, 1, 9, 2, False),
    ],
)
@pytest.mark.parametrize("dtype, out_dtype", [("float16", "float16"), ("bfloat16", "float32"), ("tf32", "float32")])
def test_auto_for_tensor_dtypes(M, N, K, sm_count, big, dtype, out_dtype):
    p = gemmlab.plan("auto", M, N, K, sm_count=sm_count, dtype=dtype, out_dtype=out_dtype)
    spec = registry.get("mma_pipelined")
    assert p.spec is spec
    assert p.params == (spec.defaults() if big else MMA_SMALL)
    assert p.problem.dtype == dtype and p.problem.out_dtype == out_dtype
    assert MMA_SMALL in spec.configurations()


def test_auto_for_tensor_dtypes_follows_alignment():
    assert gemmlab.plan(
        "auto", 64, 64, 64, aligned16=False, dtype="float16", out_dtype="float16"
    ).name_expression.endswith(", false, 'N', 'N'>")
    assert gemmlab.plan(
        "auto", 64, 64, 64, aligned16=True, dtype="float16", out_dtype="float16"
    ).name_expression.endswith(", true, 'N', 'N'>")


@pytest.mark.parametrize(
    "M, N, K, dtype, out_dtype, aligned",
    [
        (10, 16, 8, "float16", "float16", True),  # rows of 16 and 32 bytes
        (10, 12, 8, "float16", "float16", False),  # B and C rows of 24 bytes
        (10, 8, 8, "float16", "float32", True),
        (10, 16, 12, "bfloat16", "float32", False),  # A rows of 24 bytes
        (10, 4, 4, "tf32", "float32", True),
        (10, 6, 4, "tf32", "float32", False),
        (10, 8, 6, "float32", "float32", False),  # float32: K and N multiples of 4, as before
        (10, 8, 4, "float32", "float32", True),
    ],
)
def test_contiguous_alignment_counts_bytes(M, N, K, dtype, out_dtype, aligned):
    """16-byte accesses need 16-byte rows: 4 floats, or 8 16-bit elements; each operand in its
    own element size (a float32 output of 16-bit inputs has wider rows)."""
    from gemmlab.core.planner import contiguous_aligned16

    assert contiguous_aligned16(M, N, K, dtype=dtype, out_dtype=out_dtype) is aligned


# -- the wgmma rung (Hopper) -------------------------------------------------------------------

WGMMA = registry.get("wgmma")


def test_wgmma_exists_only_for_sm90a():
    assert WGMMA.arches == ("sm_90a",)
    assert WGMMA.builds_for("sm_90a") and not WGMMA.builds_for("sm_80") and not WGMMA.builds_for("sm_90")
    assert all(s.builds_for("sm_80") for s in SPECS if s.name not in ("wgmma", "ec_wgmma"))
    assert [k["arches"] for k in gemmlab.kernels() if k["name"] == "wgmma"] == [["sm_90a"]]
    with pytest.raises(ValueError, match=r"kernel 'wgmma' does not run on NVIDIA A100 \(sm_80\): it needs sm_90a"):
        WGMMA.check_arch("sm_80", "NVIDIA A100")


def test_plan_refuses_wgmma_on_other_architectures():
    with pytest.raises(
        ValueError,
        match=r"kernel 'wgmma' does not run on .*sm_80.*needs sm_90a.*run there for bfloat16: wmma, wmma_warptile, mma_pipelined",
    ):
        gemmlab.plan("wgmma", 256, 256, 256, dtype="bfloat16", out_dtype="bfloat16", arch="sm_80")
    # Without an architecture (planning before the GPU is known) the name is accepted.
    assert gemmlab.plan("wgmma", 256, 256, 256, dtype="bfloat16", out_dtype="bfloat16").spec.name == "wgmma"


@pytest.mark.parametrize("dtype, out_dtype", [("float16", "float16"), ("bfloat16", "float32"), ("tf32", "float32")])
def test_auto_picks_wgmma_on_hopper_only(dtype, out_dtype):
    kw = dict(dtype=dtype, out_dtype=out_dtype)
    assert gemmlab.plan("auto", 4096, 4096, 4096, arch="sm_90a", **kw).spec.name == "wgmma"
    assert gemmlab.plan("auto", 4096, 4096, 4096, arch="sm_80", **kw).spec.name == "mma_pipelined"
    assert gemmlab.plan("auto", 4096, 4096, 4096, **kw).spec.name == "mma_pipelined"
    assert gemmlab.plan("auto", 4096, 4096, 4096, arch="sm_90a").spec.family == "simt"  # float32


@pytest.mark.parametrize(
    "M, N, sm_count, tile",
    [
        (4096, 4096, 132, (128, 256)),  # 32 x 16 = 512 tiles
        (2048, 2048, 132, (128, 256)),  # 128 tiles: at least half the SMs
        (1024, 2048, 132, (64, 128)),  # 64 tiles: 2 * 64 = 128 < 132
        (1024, 1024, 132, (64, 128)),  # 32 tiles of 128x256; 128 of 64x128
        (1152, 2048, 132, (128, 256)),  # 9 x 8 = 72 tiles
        (17, 1, 132, (64, 128)),
        (300, 300, 8, (128, 256)),  # 8 SMs: 3 x 2 = 6 tiles of 128x256
    ],
)
def test_wgmma_auto_tile(M, N, sm_count, tile):
    p = gemmlab.plan("auto", M, N, 512, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", sm_count=sm_count)
    assert (p.params["BM"], p.params["BN"]) == tile
    assert p.params in WGMMA.configurations()


@pytest.mark.parametrize(
    "M, N, K, ops, batch, tile, splits",
    [
        (2, 4096, 128256, "NN", 1, (64, 128), 4),  # lm_head's dY @ W at two tokens: 32 tiles of 64x128 (one: gemv)
        (16, 4096, 14336, "NN", 1, (64, 128), 4),  # down's x @ W.t() at 16 tokens: 224 K-steps, 56 a slice
        (2, 4096, 1024, "NN", 1, (64, 128), 1),  # 16 K-steps: too short to split
        (2, 4096, 2048, "NN", 1, (64, 128), 2),  # 32 K-steps: two slices of 16
        (128, 4096, 128256, "NN", 1, (128, 128), 4),  # 64 < M <= 128: one tile-row of 128x128, 32 tiles
        (128, 4096, 28672, "NN", 1, (128, 128), 4),
        (128, 6144, 16384, "NT", 1, (128, 128), 2),  # 48 tiles; the narrow tile's 96 too few for 256 K-steps
        (128, 14336, 4096, "NN", 1, (128, 128), 1),  # 112 tiles: more than half the SMs
        (300, 1000, 4096, "NN", 1, (64, 128), 3),  # 5 x 8 tiles of 64x128: 3 x 40 <= 132
        (16, 28672, 4096, "NT", 1, (64, 256), 1),  # 128x256 tiles fill the GPU; M <= 64: 64x256
        (4096, 4096, 4096, "NN", 1, (128, 256), 1),  # 512 tiles of 128x256
        (2048, 2048, 8192, "NN", 1, (128, 256), 1),  # 128 tiles: enough
        (16, 4096, 4096, "NN", 8, (64, 256), 1),  # a batch of 8 x 16 tiles of 128x256 fills the GPU
        (4, 4096, 4096, "NN", 2, (64, 128), 2),  # 2 x 32 tiles; 4 rows: no narrow tile
    ],
)
def test_wgmma_auto_splits_k_where_tiles_leave_sms_idle(M, N, K, ops, batch, tile, splits):
    """kernel="auto" on Hopper (16-bit): SPLITK fills the SMs the tiles leave idle, each slice
    WGMMA_MIN_K_STEPS_PER_SLICE K-steps or more, one round of work items at most."""
    p = gemmlab.plan(
        "auto",
        M,
        N,
        K,
        dtype="bfloat16",
        out_dtype="bfloat16",
        arch="sm_90a",
        sm_count=132,
        op_a=ops[0],
        op_b=ops[1],
        batch=batch,
    )
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == tile, p.describe()
    assert p.params["SPLITK"] == splits, p.describe()
    tiles = -(-M // p.params["BM"]) * -(-N // p.params["BN"]) * batch
    assert tiles * splits <= 132 or splits == 1
    assert -(-K // 64) >= WGMMA_MIN_K_STEPS_PER_SLICE * splits
    assert p.params in WGMMA.configurations()
    # The split instantiation writes FP32 partial products; the plan's output stays bf16.
    assert (", true, '" in p.name_expression) == (splits > 1) and p.problem.out_dtype == "bfloat16"


@pytest.mark.parametrize(
    "M, N, K, ops, batch, tile",
    [
        (16, 4096, 4096, "NT", 1, (64, 64, 12)),  # o's x @ W.t() at 16 tokens: 64 tiles of 64x64, 64 K-steps
        (16, 4096, 6144, "NN", 1, (64, 64, 12)),  # qkv's dY @ W: 96 K-steps
        (128, 4096, 4096, "NN", 1, (64, 64, 12)),  # 2 x 64 tiles: one round
        (128, 6144, 4096, "NT", 1, (64, 128, 8)),  # 2 x 96 tiles of 64x64: two rounds; 2 x 48 of 64x128
        (128, 4096, 14336, "NT", 1, (64, 64, 12)),  # down's x @ W.t(): 128 tiles, 224 K-steps
        (5, 4096, 4096, "TT", 1, (64, 64, 12)),
        (16, 4096, 4096, "NN", 2, (64, 64, 12)),  # 2 x 64 tiles
    ],
)
def test_wgmma_auto_narrow_tile_replaces_split_k(M, N, K, ops, batch, tile):
    """Products of 5 to 128 rows (16-bit) that split-K would serve run unsplit on 64 x 64
    (or 64 x 128) tiles with the deepest ring that fits (wgmma_narrow_tile, run 88c)."""
    p = gemmlab.plan(
        "auto",
        M,
        N,
        K,
        dtype="bfloat16",
        out_dtype="bfloat16",
        arch="sm_90a",
        sm_count=132,
        op_a=ops[0],
        op_b=ops[1],
        batch=batch,
    )
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"], p.params["STAGES"]) == tile, p.describe()
    assert p.params["SPLITK"] == 1 and p.params in WGMMA.configurations()
    assert wgmma_narrow_tile(M, N, K, 132, batch) == {**p.params, "CLUSTER": 1}


@pytest.mark.parametrize(
    "M, N, K, ops, batch, tile",
    [
        (4096, 128, 4096, "NN", 128, (128, 128)),  # P @ V, head dim 128: a 256-wide tile is half past N
        (512, 100, 512, "NN", 32, (128, 128)),
        (2048, 2048, 128, "NT", 32, (128, 128)),  # Q @ K^T: a batch with two K-steps
        (4096, 4096, 128, "TN", 1, (128, 256)),  # one matrix with a short K (a weight gradient)
        (4096, 4096, 4096, "NN", 1, (128, 256)),
        (4096, 4096, 256, "NT", 8, (128, 256)),  # four K-steps
    ],
)
def test_wgmma_auto_128_columns_for_short_k_batches_and_narrow_n(M, N, K, ops, batch, tile):
    p = gemmlab.plan(
        "auto",
        M,
        N,
        K,
        dtype="bfloat16",
        out_dtype="bfloat16",
        arch="sm_90a",
        sm_count=132,
        op_a=ops[0],
        op_b=ops[1],
        batch=batch,
    )
    assert (p.params["BM"], p.params["BN"], p.params["SPLITK"]) == tile + (1,), p.describe()


@pytest.mark.parametrize(
    "M, N, K, ops, tile",
    [
        (4096, 768, 3072, "NT", (128, 192)),  # 96 tiles of 128x256: 0.73 of a round; 128 of 128x192: one
        (12608, 768, 3072, "NT", (128, 192)),  # 297 tiles: 3 rounds, the last a quarter full; 396: 3 full ones
        (12608, 768, 768, "NN", (128, 192)),
        (4096, 2304, 768, "TN", (128, 192)),  # 288 tiles: 3 rounds; 384: 3
        (12608, 3072, 768, "NN", (128, 256)),  # 1188 tiles: 9 full rounds; 1584 would take 12
        (4096, 3072, 768, "NT", (128, 256)),  # 384 tiles: 3 rounds; 512 would take 4
        (4096, 4096, 4096, "NN", (128, 256)),
        (8192, 8192, 8192, "NN", (128, 256)),
    ],
)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_wgmma_auto_128x192_where_the_last_round_is_part_empty(M, N, K, ops, tile, dtype):
    """A 16-bit matrix whose 128 x 256 tiles fill the 132 SMs: 128 x 192 where the cost model
    predicts it faster (wgmma_wave_choice: as many rounds or nearly, each a quarter shorter),
    else 128 x 256; the reason names the comparison either way."""
    p = gemmlab.plan(
        "auto", M, N, K, dtype=dtype, out_dtype=dtype, arch="sm_90a", sm_count=132, op_a=ops[0], op_b=ops[1]
    )
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"], p.params["SPLITK"]) == tile + (1,), p.describe()
    assert p.params in WGMMA.configurations(dtype) and p.params["STAGES"] == 4 and p.params["CLUSTER"] == 1
    took = tile == (128, 192)
    assert p.reason.startswith(
        "cost model over wgmma's tile rules, 128x192 against their 128x256"
        if took
        else "wgmma's tile rules, kept by the cost model against 128x192"
    ), p.reason
    assert "128x192x4 stages" in p.reason and "128x256x4 stages" in p.reason
    assert "why: " + p.reason in p.explain()
    if took:
        assert (
            p.name_expression.startswith("gemmlab::wgmma_gemm<") and ", 128, 192, 4, 1, false, '" in p.name_expression
        )


def _hopper_plan(M, N, K, dtype="bfloat16", ops="NN", batch=1):
    """kernel="auto"'s plan for a product on an sm_90a GPU of 132 SMs (an H100 / H200)."""
    return gemmlab.plan(
        "auto",
        M,
        N,
        K,
        dtype=dtype,
        out_dtype=dtype,
        arch="sm_90a",
        sm_count=132,
        op_a=ops[0],
        op_b=ops[1],
        batch=batch,
    )


AB_TILES = Path(__file__).resolve().parents[1] / "benchmarks/results/nvidia-h200/ab-wgmma-tiles-2026-11-29.json"


def _measured_tile_pairs():
    """(product, M, N, K, % of torch with 128 x 256, with 128 x 192) of the single products
    scripts/ab_wgmma_tiles.py timed with both tiles forced on an H200."""
    runs = json.loads(AB_TILES.read_text())["runs"]["models"]["records"]
    return [
        (r["product"], *r["shape"], r["pct_t256"], r["pct_t192"]) for r in runs if r.get("batch", 1) == 1 and r["ok"]
    ]


@pytest.mark.parametrize("product, M, N, K, t256, t192", _measured_tile_pairs())
def test_wgmma_auto_ranks_its_wide_tiles_as_measured(product, M, N, K, t256, t192):
    """The cost model against the recorded measurement: where one of 128 x 256 and 128 x 192
    ran more than 5% faster than the other on the H200, auto (132 SMs) takes that one; closer
    than that, either may be taken."""
    p = _hopper_plan(M, N, K)
    faster = 192 if t192 > t256 else 256
    if max(t192, t256) > 1.05 * min(t192, t256):
        assert p.params["BN"] == faster, f"{product}: {p.describe()} ({t256:.1f}% with 256, {t192:.1f}% with 192)"


@pytest.mark.parametrize(
    "M, N, K, ops, batch, bn",
    [
        (197, 64, 197, "NN", 768, 64),  # ViT-B/16's P @ V (head dim 64)
        (197, 64, 197, "TN", 768, 64),  # its P^T @ dO
        (1024, 64, 1024, "NN", 96, 64),
        (197, 197, 64, "NT", 768, 128),  # Q @ K^T: N = 197, two K-steps
        (1024, 128, 1024, "NN", 64, 128),  # P @ V at a head dim of 128
        (8192, 64, 4096, "NN", 1, 128),  # a single matrix keeps the rules' 64 x 128
    ],
)
def test_wgmma_auto_batches_of_64_columns_take_128x64(M, N, K, ops, batch, bn):
    """16-bit batches of at most 64 columns (P @ V at a head dim of 64) take 128 x 64, which
    computes nothing past N, where 128 x 128 computes as much past it as in it."""
    p = _hopper_plan(M, N, K, ops=ops, batch=batch)
    assert p.spec.name == "wgmma" and p.params["BN"] == bn and p.params["SPLITK"] == 1, p.describe()
    assert p.params in WGMMA.configurations("bfloat16")


@pytest.mark.parametrize(
    "M, N, K, batch, sm_count",
    [
        (4096, 768, 3072, 1, 132),
        (12608, 768, 768, 1, 132),
        (4096, 2304, 768, 1, 132),
        (1024, 768, 50257, 1, 132),
        (256, 4096, 4096, 1, 114),
        (1024, 768, 3072, 4, 132),
    ],
)
def test_wgmma_auto_never_gives_tf32_128x192(M, N, K, batch, sm_count):
    """TF32 keeps its rules (no m64n192 TF32 wgmma): never BN = 192, where 16-bit takes it."""
    bf16 = gemmlab.plan(
        "auto", M, N, K, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", sm_count=sm_count, batch=batch
    )
    assert bf16.params["BN"] == 192, bf16.describe()
    p = gemmlab.plan("auto", M, N, K, dtype="tf32", arch="sm_90a", sm_count=sm_count, batch=batch)
    assert p.spec.name == "wgmma" and p.params["BN"] != 192 and p.reason == "wgmma's tile rules", p.describe()


@pytest.mark.parametrize(
    "M, N, K, ops, why",
    [
        (4, 4096, 4096, "NN", "fewer rows than WGMMA_NARROW_MIN_M: split"),
        (16, 4096, 14336, "NN", "64 tiles and 224 K-steps: split"),
        (16, 4096, 28672, "NN", "448 K-steps: split"),
        (300, 1000, 4096, "NN", "more rows than WGMMA_NARROW_MAX_M"),
        (16, 14336, 4096, "NN", "112 tiles of 64x128: no split to replace"),
    ],
)
def test_wgmma_auto_keeps_split_or_wide_tiles_elsewhere(M, N, K, ops, why):
    p = gemmlab.plan(
        "auto", M, N, K, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", sm_count=132, op_a=ops[0], op_b=ops[1]
    )
    assert p.params["BN"] != 64 and p.params["STAGES"] == 4, (why, p.describe())


def test_wgmma_auto_tf32_keeps_its_tiles_and_splits():
    """TF32 (its tile is BN x BM: C^T) keeps the 64x128 parameters where tiles are few, split too."""
    p = gemmlab.plan("auto", 16, 4096, 8192, dtype="tf32", out_dtype="float32", arch="sm_90a", sm_count=132)
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == (64, 128), p.describe()
    # 16 x 4096 in 128 x 64 tiles: 64 of them; 256 K-steps of 32
    assert p.params["SPLITK"] == 2


def test_wgmma_auto_split_off_hopper_and_when_named():
    """A named wgmma keeps its defaults (no split) unless SPLITK is given; off Hopper auto runs
    mma_pipelined, which has no split."""
    assert gemmlab.plan("wgmma", 1, 4096, 128256, dtype="bfloat16", out_dtype="bfloat16").params["SPLITK"] == 1
    assert (
        gemmlab.plan("wgmma", 1, 4096, 128256, dtype="bfloat16", out_dtype="bfloat16", SPLITK=8).params["SPLITK"] == 8
    )
    assert (
        gemmlab.plan("auto", 2, 4096, 128256, dtype="bfloat16", out_dtype="bfloat16", op_b="N", arch="sm_80").spec.name
        == "mma_pipelined"
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_falls_back_when_tma_cannot_read_the_operands(dtype, caplog):
    import logging

    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        p = gemmlab.plan(
            "wgmma", 4097, 4095, 513, dtype=dtype, out_dtype=dtype, arch="sm_90a", tma_aligned=False, BN=128
        )
    # mma_pipelined reads any alignment (its narrow-copy variant): the next rung down, not two
    assert p.spec.name == "mma_pipelined" and p.params == registry.get("mma_pipelined").defaults()
    assert "wgmma cannot take these operands: TMA needs" in p.fallback_reason
    assert p.describe().startswith("mma_pipelined(") and "[wgmma cannot take these operands" in p.describe()
    assert any("running mma_pipelined instead" in r.getMessage() for r in caplog.records)
    # auto copies the operands to the 16-byte grid first where the cost model says that pays
    auto = gemmlab.plan("auto", 4097, 4095, 513, dtype=dtype, out_dtype=dtype, arch="sm_90a", tma_aligned=False)
    assert auto.spec.name == "wgmma" and auto.problem.stage, auto.describe()


@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wgmma_reads_every_16bit_layout(dtype, op_a, op_b):
    """x @ W.t() (NT), x.t() @ W (TN), TT: 16-bit wgmma reads each operand as stored
    (K- or MN-major in shared memory), so auto and a named wgmma run it, no fallback."""
    for kernel in ("auto", "wgmma"):
        p = gemmlab.plan(kernel, 4096, 4096, 4096, dtype=dtype, out_dtype=dtype, arch="sm_90a", op_a=op_a, op_b=op_b)
        assert p.spec.name == "wgmma" and p.fallback_reason == "", p.describe()
        assert p.name_expression.endswith(f", '{op_a}', '{op_b}'>")


@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_misaligned_16bit_operands_fall_back_to_mma_pipelined_in_every_layout(dtype, op_a, op_b):
    """x @ W.t() and the other layouts with rows TMA cannot read: wgmma falls back for the
    alignment to mma_pipelined, which reads every 16-bit layout (ldmatrix or .trans); auto
    stages such operands at this size instead (test_fastpaths.py)."""
    p = gemmlab.plan(
        "wgmma", 4096, 4096, 4096, dtype=dtype, out_dtype=dtype, arch="sm_90a", op_a=op_a, op_b=op_b, tma_aligned=False
    )
    assert p.spec.name == "mma_pipelined" and p.fallback_reason.count("cannot take these operands") == 1
    assert "TMA needs" in p.fallback_reason
    assert p.name_expression.endswith(f", '{op_a}', '{op_b}'>")


def test_tf32_fallbacks_chain_down_to_a_kernel_that_reads_the_layout():
    """TF32 x @ W.t(): wgmma's and mma_pipelined's TF32 paths read NN only, so wmma_warptile,
    with both reasons."""
    p = gemmlab.plan("auto", 4096, 4096, 4096, dtype="tf32", arch="sm_90a", op_b="T")
    assert p.spec.name == "wmma_warptile"
    assert p.fallback_reason.count("cannot take these operands") == 2
    assert "running mma_pipelined instead" in p.fallback_reason and "running wmma_warptile instead" in p.fallback_reason
    assert "no 32-bit ldmatrix.trans" in p.fallback_reason


@pytest.mark.parametrize("op_a, op_b", [("T", "N"), ("N", "T"), ("T", "T")])
def test_wgmma_tf32_reads_nn_only(op_a, op_b):
    """TF32 computes C^T = B^T A^T (its wgmma has no transpose bit): other layouts fall back,
    and the reason says so."""
    p = gemmlab.plan("wgmma", 4096, 4096, 4096, dtype="tf32", arch="sm_90a", op_a=op_a, op_b=op_b)
    assert p.spec.name != "wgmma"
    assert f"reads row-major a and b (NN) only, not {op_a}{op_b}" in p.fallback_reason


def test_wgmma_tf32_never_falls_back():
    """TF32 inputs are packed into an aligned workspace first, so any layout will do."""
    p = gemmlab.plan("wgmma", 4097, 4095, 513, dtype="tf32", arch="sm_90a", tma_aligned=False)
    assert p.spec.name == "wgmma" and p.fallback_reason == "" and p.describe().startswith("wgmma(BM=128, BN=256, ")


@pytest.mark.parametrize(
    "a_ptr, a_rows, lda, b_ptr, b_rows, ldb, eb, ok",
    [
        (256, 100, 64, 512, 64, 128, 2, True),
        (256, 100, 60, 512, 64, 128, 2, False),  # 120-byte rows
        (256, 100, 64, 512, 64, 132, 2, False),
        (258, 100, 64, 512, 64, 128, 2, False),  # base 2 bytes off
        (256, 100, 64, 520, 64, 128, 2, False),  # 8 bytes off
        (256, 1, 5, 512, 1, 3, 2, True),  # single rows: no stride to check
        (256, 100, 4, 512, 64, 4, 4, True),  # 16-byte float rows
        (256, 100, 6, 512, 64, 4, 4, False),
    ],
)
def test_tma_alignment_rule(a_ptr, a_rows, lda, b_ptr, b_rows, ldb, eb, ok):
    from gemmlab.runtime.tma import tma_aligned

    assert tma_aligned(a_ptr, a_rows, lda, b_ptr, b_rows, ldb, eb) is ok


def test_contiguous_tma_alignment():
    from gemmlab.core.planner import contiguous_tma_aligned

    assert contiguous_tma_aligned(4096, 4096, 4096, 2)
    assert not contiguous_tma_aligned(4097, 4095, 513, 2)  # a's rows: 1026 bytes
    assert not contiguous_tma_aligned(64, 100, 64, 2)  # b's rows: 200 bytes
    assert contiguous_tma_aligned(1, 1, 1, 2)  # one-row a and b
    assert contiguous_tma_aligned(1000, 12, 4, 4)  # 16-byte float rows


@pytest.mark.parametrize(
    "M, N, sm_count",
    [
        (1, 1, 132),
        (4096, 4096, 132),
        (128, 256, 132),
        (129, 257, 132),
        (300, 5000, 132),
        (4096, 4096, 114),
        (1000, 1000, 8),
        (100, 9000, 7),
    ],
)
def test_wgmma_geometry(M, N, sm_count):
    """04_wgmma.cu: a persistent grid of whole clusters, at most one block per SM; cluster c
    takes cluster tiles c, c + clusters, ... (CLUSTER vertically adjacent tiles each, in grouped
    order of GROUP_M = 8 cluster-rows), its block of rank r the tile in row CLUSTER * row + r.
    Together they cover every tile exactly once (rows past M are masked). One producer
    warpgroup plus BM/64 consumers; the shared-memory ring as dynamic shared memory."""
    for p in WGMMA.configurations():
        cl = p["CLUSTER"]
        geo = WGMMA.launch(p, Problem(M, N, 64, True, "bfloat16", "bfloat16", tma_aligned=True, sm_count=sm_count))
        tiles_m, tiles_n = -(-M // p["BM"]), -(-N // p["BN"])
        tiles_mc = -(-tiles_m // cl)
        # split over K: SPLITK work items per cluster tile (each slice of K of it)
        assert geo.grid[0] == cl * min(tiles_mc * tiles_n * p["SPLITK"], sm_count // cl)
        assert geo.grid[0] <= sm_count
        if p["SPLITK"] > 1:
            continue
        clusters = min(tiles_mc * tiles_n, sm_count // cl)
        assert geo.grid == (cl * clusters, 1, 1) and geo.cluster == (cl, 1, 1) and geo.persistent
        assert geo.block == (128 * (p["BM"] // 64 + 1), 1, 1)
        # the ring, two 8 KiB epilogue staging buffers per consumer, barriers, alignment slack
        assert geo.smem_bytes == (
            p["STAGES"] * (p["BM"] + p["BN"]) * 128 + (p["BM"] // 64) * 2 * 8192 + 16 * p["STAGES"] + 1024
        )
        seen = []
        for block in range(geo.grid[0]):
            rank = block % cl
            for t in range(block // cl, tiles_mc * tiles_n, clusters):  # grouped_tile() in 04_wgmma.cu
                first = (t // (8 * tiles_n)) * 8
                rows = min(tiles_mc - first, 8)
                r = t % (8 * tiles_n)
                tm, tn = (first + r % rows) * cl + rank, r // rows
                if tm < tiles_m:
                    seen.append((tm, tn))
        assert sorted(seen) == [(i, j) for i in range(tiles_m) for j in range(tiles_n)]


def test_wgmma_shared_memory_rule():
    assert {"BM": 128, "BN": 256, "STAGES": 5, "CLUSTER": 1} not in WGMMA.configurations()
    with pytest.raises(ValueError, match=r"must fit in the 227 KiB"):
        WGMMA.resolve({"BM": 128, "BN": 256, "STAGES": 5})
    assert len(WGMMA.configurations()) == 38 * len(SPLITK_VALUES)
    with pytest.raises(ValueError, match=r"BN = 64 runs without clusters"):
        WGMMA.resolve({"BM": 64, "BN": 64, "CLUSTER": 2})
    assert max(WGMMA.launch(p, Problem(1, 1, 1, True)).smem_bytes for p in WGMMA.configurations()) <= 227 * 1024


def test_wgmma_bn192_rules():
    """BN = 192 (m64n192, hopper.cuh: 16-bit only): no clusters (its three 64-column boxes of
    B 'N' do not split between two blocks), no TF32 (a rule of that type only,
    Constraint.dtypes: refused when resolved for TF32, left out of its configurations and
    instantiations), and at BM = 128 at most 4 stages (ring and epilogue staging in 227 KiB)."""
    tile = {"BM": 128, "BN": 192, "STAGES": 4, "CLUSTER": 1, "SPLITK": 1}
    for dtype in ("float16", "bfloat16"):
        assert tile in WGMMA.configurations(dtype) and WGMMA.resolve({"BN": 192}, dtype) == tile
    assert tile in WGMMA.configurations()  # (any type: the rules of every type)
    assert [c for c in WGMMA.configurations("tf32") if c["BN"] == 192] == []
    assert sorted({c["STAGES"] for c in WGMMA.configurations() if c["BN"] == 192 and c["BM"] == 128}) == [3, 4]
    with pytest.raises(ValueError, match=r"for kernel 'wgmma': BN = 192 runs without clusters \(CLUSTER = 1\)"):
        WGMMA.resolve({"BN": 192, "CLUSTER": 2})
    with pytest.raises(ValueError, match=r"for kernel 'wgmma' with tf32 inputs: BN = 192 is for 16-bit inputs"):
        WGMMA.resolve({"BN": 192}, "tf32")
    with pytest.raises(ValueError, match=r"with tf32 inputs: BN = 192 is for 16-bit inputs"):
        gemmlab.plan("wgmma", 4096, 768, 3072, dtype="tf32", arch="sm_90a", BN=192)
    with pytest.raises(ValueError, match=r"BN = 192 runs without clusters"):
        gemmlab.plan("wgmma", 4096, 768, 3072, dtype="bfloat16", out_dtype="bfloat16", BN=192, CLUSTER=2)
    p = gemmlab.plan("wgmma", 4096, 768, 3072, dtype="bfloat16", out_dtype="bfloat16", arch="sm_90a", op_b="T", BN=192)
    assert p.name_expression == "gemmlab::wgmma_gemm<1, 1, 128, 192, 4, 1, false, 'N', 'T'>"
    assert p.spec.launch(p.params, p.problem).smem_bytes <= 227 * 1024
    names = WGMMA.all_name_expressions()
    assert not any(n.startswith("gemmlab::wgmma_gemm<2, 3, 128, 192,") for n in names)  # TF32: none
    assert {n[-9:] for n in names if ", 128, 192, 4, 1, true," in n} == {
        "'N', 'N'>",
        "'N', 'T'>",
        "'T', 'N'>",
        "'T', 'T'>",
    }
    assert any(
        r["constraints"][-1].startswith("BN = 192 is for 16-bit inputs")
        for r in gemmlab.kernels()
        if r["name"] == "wgmma"
    )


def test_wgmma_name_expressions():
    prob = Problem(10, 10, 10, True, "bfloat16", "bfloat16")
    d = WGMMA.defaults()
    assert WGMMA.name_expression(d, prob) == f"gemmlab::wgmma_gemm<1, 1, 128, 256, 4, {d['CLUSTER']}, false, 'N', 'N'>"
    assert (
        WGMMA.name_expression(
            {"BM": 64, "BN": 128, "STAGES": 3, "CLUSTER": 2, "SPLITK": 1}, Problem(1, 1, 1, True, "tf32")
        )
        == "gemmlab::wgmma_gemm<2, 3, 64, 128, 3, 2, false, 'N', 'N'>"
    )
    # Split over K: one instantiation for every SPLITK > 1, writing C in its own dtype (the
    # kernel adds its slices itself before the epilogue).
    for splits in (2, 16):
        assert (
            WGMMA.name_expression({**d, "SPLITK": splits}, prob)
            == f"gemmlab::wgmma_gemm<1, 1, 128, 256, 4, {d['CLUSTER']}, true, 'N', 'N'>"
        )
    # Unsplit and split alike: 16-bit (4 type pairs) in every layout, TF32 in NN only.  38
    # tiles, of which TF32 has 33 (no BN = 192).
    assert len(WGMMA.all_name_expressions()) == 2 * (38 * 4 * 4 + 33)
    assert (
        WGMMA.name_expression(d, prob.with_layout("N", "T"))
        == f"gemmlab::wgmma_gemm<1, 1, 128, 256, 4, {d['CLUSTER']}, false, 'N', 'T'>"
    )


# -- ec_wgmma (Hopper, error-corrected) ------------------------------------------------------

EC_WGMMA = registry.get("ec_wgmma")


def test_ec_wgmma_exists_only_for_sm90a_and_falls_back_to_ec_wmma():
    assert EC_WGMMA.arches == ("sm_90a",) and EC_WGMMA.fallback == "ec_wmma"
    with pytest.raises(
        ValueError, match=r"kernel 'ec_wgmma' does not run on .*sm_80.*needs sm_90a.*run there for fp16_ec: ec_wmma"
    ):
        gemmlab.plan("ec_wgmma", 256, 256, 256, dtype="fp16_ec", arch="sm_80")


@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
@pytest.mark.parametrize("dtype", list(EC_METHODS))
def test_ec_wgmma_takes_every_layout_and_alignment(op_a, op_b, dtype):
    """The split pre-pass reads op(A) and op(B) as stored and writes aligned row-major
    parts, so no layout or alignment falls back, and one instantiation serves them all."""
    p = gemmlab.plan(
        "ec_wgmma",
        4097,
        4095,
        513,
        dtype=dtype,
        op_a=op_a,
        op_b=op_b,
        arch="sm_90a",
        aligned16=False,
        tma_aligned=False,
    )
    assert p.spec.name == "ec_wgmma" and not p.fallback_reason
    assert p.name_expression == f"gemmlab::ec_wgmma<{EC_METHODS[dtype]}, 3, 128, 1, 'N', 'N'>"
    assert p.spec.extra_args == ("scale_a", "scale_b")


@pytest.mark.parametrize(
    "M, N, sm_count",
    [(1, 1, 132), (128, 128, 132), (129, 257, 132), (4096, 4096, 132), (2000, 1900, 114), (100, 9000, 7)],
)
def test_ec_wgmma_geometry(M, N, sm_count):
    """A persistent grid of at most one block per SM (the ring fills its shared memory), one
    producer and two consumer warpgroups; block b takes work items b, b + grid, ... -- the
    128 x BN tiles in grouped order (tensor/04_wgmma.cuh), each SPLITK times (a slice of K
    each) -- together all of them once."""
    configs = EC_WGMMA.configurations()
    assert {p["SPLITK"] for p in configs} == set(SPLITK_VALUES)
    for p in configs:
        geo = EC_WGMMA.launch(p, Problem(M, N, 64, True, "fp16_ec", sm_count=sm_count))
        items = -(-M // 128) * -(-N // p["BN"]) * p["SPLITK"]
        assert geo.grid == (min(items, sm_count), 1, 1) and geo.persistent and geo.block == (384, 1, 1)
        stage = {96: 57344, 128: 65536}[p["BN"]]  # hi and lo of 128 rows of A and BN of B^T, 128 bytes each
        staged = 2 * p["BN"] * 4 * p["FOLD"]  # FOLD: each consumer's BN column scales (split_scaled.cu's)
        tail = 16  # the consumers' flags of the stream-K tail
        assert geo.smem_bytes == p["STAGES"] * stage + 16 * p["STAGES"] + tail + staged + 1024 <= 227 * 1024
        # A batch is one launch: the work items of every matrix share the persistent grid.
        for batch in (2, 40):
            geo = EC_WGMMA.launch(p, Problem(M, N, 64, True, "fp16_ec", sm_count=sm_count), batch)
            assert geo.grid == (min(items * batch, sm_count), 1, 1), (batch, geo.grid)


@pytest.mark.parametrize("dtype", list(EC_METHODS))
def test_ec_wgmma_split_is_the_unsplit_instantiation(dtype):
    """Split over K, ec_wgmma writes FP32 partial tiles, as it writes C: one instantiation
    serves every SPLITK (the split is a kernel argument), and the plan carries the split."""
    names = set()
    for splits in SPLITK_VALUES:
        p = gemmlab.plan("ec_wgmma", 130, 200, 1000, dtype=dtype, arch="sm_90a", SPLITK=splits)
        assert p.spec.splits(p.params) == splits and EC_WGMMA.split_k_param == "SPLITK"
        names.add(p.name_expression)
    assert names == {f"gemmlab::ec_wgmma<{EC_METHODS[dtype]}, 3, 128, 1, 'N', 'N'>"}
    # METHOD x (STAGES 2-4 at BN 96 without and with FOLD, 2-3 at BN 128 with FOLD), whatever the split
    assert len(EC_WGMMA.all_name_expressions()) == 2 * (3 + 3 + 2)


def test_ec_wgmma_takes_a_batch_and_sizes_its_parts():
    """One launch per batch (chunk); the parts of a matrix, the executor's chunking unit: hi
    and lo of A (M x K) and B^T (N x K), K padded to 8, 4 bytes an element (the layout for
    either part type)."""
    from gemmlab.core.executor import BATCH_WORKSPACE_LIMIT
    from gemmlab.kernels.ec.ec_wgmma import ec_parts_bytes

    assert EC_WGMMA.batched_args and EC_WGMMA.batch_workspace is ec_parts_bytes
    assert ec_parts_bytes(Problem(2048, 128, 2048, True, "fp16_ec")) == 2 * (2048 + 128) * 2048 * 4
    assert ec_parts_bytes(Problem(7, 5, 9, True, "tf32_ec")) == 2 * 12 * 16 * 4
    # P @ V at S = 4096 (132 MiB of parts a matrix): seven matrices a launch.
    assert BATCH_WORKSPACE_LIMIT // ec_parts_bytes(Problem(4096, 128, 4096, True, "fp16_ec")) == 7


# -- gemv: products of a few rows --------------------------------------------------


@pytest.mark.parametrize(
    "op_b, aligned, dtype, vec, per_block, chunk",
    [
        ("T", True, "float32", 4, 32, None),
        ("T", True, "bfloat16", 8, 32, None),
        ("T", False, "float16", 1, 32, None),
        ("N", True, "float32", 4, 128, 64),
        ("N", True, "bfloat16", 4, 128, 64),
        ("N", False, "bfloat16", 1, 32, 64),
        ("N", False, "float32", 1, 32, 64),
    ],
)
def test_gemv_geometry(op_b, aligned, dtype, vec, per_block, chunk):
    """op(B) column-major: a warp (of 8 a block) per 4 columns, 16-byte loads along K;
    row-major (at the default MT = 8): 32 lanes along N with 4 elements each (16 or 8
    bytes), 32 * VEC columns a block, SPLITK blocks along K, chunks of 8 warps x 8 rows."""
    from gemmlab.kernels.gemv.gemv import gemv_row_chunk, gemv_vec

    spec = registry.get("gemv")
    for N in (1, 7, 8, 9, 4096, 128256):
        prob = Problem(3, N, 100, aligned, dtype, dtype).with_layout("N", op_b)
        assert gemv_vec(prob, spec.defaults()["MT"]) == vec
        geo = spec.launch(spec.defaults(), prob)
        assert geo.block == (256, 1, 1) and geo.grid == (-(-N // per_block), 1, 1)
        assert spec.name_expression(spec.defaults(), prob).endswith(f", {str(aligned).lower()}, 32, 'N', '{op_b}'>")
        if op_b == "N":
            assert gemv_row_chunk(prob, spec.defaults()["MT"], 32) == chunk
            assert spec.launch({**spec.defaults(), "SPLITK": 6}, prob).grid == (-(-N // per_block), 6, 1)
            # split: the float32-output instantiation (FP32 partial products, whatever C's dtype)
            fp32_out = Problem(3, N, 100, aligned, dtype, "float32").with_layout("N", op_b)
            assert spec.name_expression({**spec.defaults(), "SPLITK": 6}, prob) == spec.name_expression(
                spec.defaults(), fp32_out
            )
        else:
            for name, value in (("SPLITK", 2), ("LANES", 8)):
                with pytest.raises(ValueError, match=f"gemv's {name} applies where op.B. is row-major"):
                    spec.launch({**spec.defaults(), "MT": 4, name: value}, prob)
            # the column path has one instantiation whatever LANES says
            assert spec.name_expression({**spec.defaults(), "MT": 4, "LANES": 8}, prob) == spec.name_expression(
                {**spec.defaults(), "MT": 4}, prob
            )


@pytest.mark.parametrize(
    "dtype, mt, lanes, vec, per_block, chunk",
    [
        ("float32", 1, 8, 4, 32, 256),
        ("float32", 4, 4, 4, 16, 512),
        ("bfloat16", 1, 8, 8, 64, 256),
        ("bfloat16", 4, 4, 8, 32, 512),
        ("bfloat16", 8, 32, 4, 128, 64),
        ("float16", 2, 32, 8, 256, 64),
    ],
)
def test_gemv_narrow_row_blocks(dtype, mt, lanes, vec, per_block, chunk):
    """Row-major op(B): LANES lanes along a row, each VEC columns (16 bytes of 16-bit
    elements up to 4 rows of C), so a block takes LANES * VEC columns and a chunk 8 warps x
    32 / LANES row groups x 8 rows; narrow blocks only for MT <= 4."""
    from gemmlab.kernels.gemv.gemv import gemv_row_chunk, gemv_row_columns, gemv_vec

    spec = registry.get("gemv")
    prob = Problem(mt, 4096, 4096, True, dtype, dtype).with_layout("N", "N")
    params = {"MT": mt, "SPLITK": 1, "LANES": lanes}
    assert gemv_vec(prob, mt) == vec and gemv_row_columns(prob, mt, lanes) == per_block
    assert gemv_row_chunk(prob, mt, lanes) == chunk
    assert spec.launch(params, prob).grid == (4096 // per_block, 1, 1)
    assert spec.name_expression(params, prob).endswith(f", true, {lanes}, 'N', 'N'>")
    with pytest.raises(ValueError, match="LANES < 32 .* MT <= 4"):
        gemmlab.plan("gemv", 8, 4096, 4096, op_b="N", MT=8, LANES=8)


@pytest.mark.parametrize("M, mt", [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8), (13, 16), (16, 16)])
@pytest.mark.parametrize("dtype, out", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float32")])
def test_auto_takes_gemv_for_a_few_rows(M, mt, dtype, out):
    """x @ W.t() (op(B) column-major) with at most GEMV_MAX_M[dtype] rows: 16 for
    float32, 4 for the 16-bit types (run 82)."""
    plan = lambda M, op_b="T", dtype=dtype: gemmlab.plan(  # noqa: E731
        "auto",
        M,
        8192,
        8192,
        dtype=dtype,
        out_dtype=out if dtype != "tf32" else "float32",
        op_b=op_b,
        arch="sm_90a",
        gpu_slug="nvidia-h100-80gb-hbm3",
    )
    takes = M <= GEMV_MAX_M[dtype]
    assert (plan(M).spec.name == "gemv") == takes
    if takes:
        assert plan(M).params == {"MT": mt, "SPLITK": 1, "LANES": 32}
    # op(B) row-major: gemv where GEMV_ROWS_MAX_M takes it (16-bit: W of 128 MiB here, over the
    # 64 MiB gemv takes in 16-bit), else the tiled rungs
    assert (plan(M, "N").spec.name == "gemv") == (M <= GEMV_ROWS_MAX_M[dtype] and dtype == "float32")
    assert plan(GEMV_MAX_M[dtype] + 1).spec.name != "gemv"
    assert plan(GEMV_ROWS_MAX_M[dtype] + 1, "N").spec.name != "gemv"
    assert plan(M, dtype="tf32").spec.name != "gemv"


@pytest.mark.parametrize(
    "M, N, K, batch, aligned, split, lanes",
    [
        (1, 4096, 4096, 1, True, 1, 8),  # 32-column blocks: 128 of them fill 132 SMs unsplit
        (4, 4096, 128256, 1, True, 1, 8),
        (16, 4096, 4096, 1, True, 4, 32),  # 16 rows: 128-column blocks only, 32 of them split by 4
        (16, 4096, 128256, 1, True, 4, 32),
        (4, 14336, 4096, 1, True, 1, 32),  # 112 column blocks fill most of the 132 SMs already
        (16, 14336, 4096, 1, True, 1, 32),
        (16, 4096, 512, 1, True, 2, 32),  # 8 chunks of 64 rows: slices of at least 4
        (16, 4096, 4096, 4, True, 1, 32),  # a batch of 4 fills the SMs
        (1, 2048, 4096, 1, True, 1, 4),  # 64 blocks of 32 columns too few: 16 columns (64-byte rows)
        (1, 2048, 131072, 1, True, 2, 8),  # ... but over 256 MiB of W, 32 columns split over K
        (1, 331, 1037, 1, False, 1, 4),  # one element a lane: 83 blocks of 4 columns, 3 chunks of 512 rows
        # none fills unsplit: 48 blocks of 16 columns split by 2 keep 96 SMs busy, 24 of 32
        # columns split by 5 keep 120 (a one-token dY @ W of a vocabulary-long K)
        (1, 768, 51865, 1, True, 5, 8),
        (1, 768, 51865, 1, False, 1, 4),  # (one element a lane: 192 blocks of 4 columns fill it)
        (1, 2304, 256000, 1, True, 7, 32),  # over 256 MiB: 18 blocks of 128 columns split by 7, not 72 of 32
    ],
)
def test_gemv_auto_row_major_b_blocks_and_split(M, N, K, batch, aligned, split, lanes):
    """float32 dY @ W: MT as sized_params; the widest blocks (LANES) that fill 3/4 of 132 SMs
    unsplit, else the width whose split (fill_split) keeps the most SMs busy, the smaller split
    where two keep as many."""
    p = gemmlab.plan(
        "auto", M, N, K, op_b="N", batch=batch, aligned16=aligned, arch="sm_90a", gpu_slug="nvidia-h100-80gb-hbm3"
    )
    assert p.spec.name == "gemv" and p.params == {
        "MT": min(16, 1 << (M - 1).bit_length()),
        "SPLITK": split,
        "LANES": lanes,
    }
    assert p.spec.splits(p.params) == split
    # x @ W.t() (op(B) column-major) is never split
    assert gemmlab.plan("auto", M, N, K, op_b="T", batch=batch, aligned16=aligned, arch="sm_90a").params["SPLITK"] == 1


@pytest.mark.parametrize(
    "N, K, lanes, split",
    [
        (4096, 4096, 4, 1),  # o's dY @ W at one token: 16-byte loads, 32-column blocks, 128 of them
        (4096, 6144, 4, 1),
        (4096, 8192, 4, 1),  # 64 MiB of W: the largest gemv takes
        (14336, 4096, None, None),  # down's: 117 MB, wgmma's ring
        (4096, 128256, None, None),
    ],
)
def test_gemv_auto_takes_one_row_16_bit_dy_w_up_to_64_mib(N, K, lanes, split):
    """16-bit dY @ W at one row runs gemv's row path where W is at most 64 MiB (run 89c);
    at two rows, or on a larger W, wgmma."""
    for dtype in ("bfloat16", "float16"):
        p = gemmlab.plan("auto", 1, N, K, dtype=dtype, out_dtype=dtype, op_b="N", arch="sm_90a", sm_count=132)
        if lanes is None:
            assert p.spec.name == "wgmma"
        else:
            assert p.spec.name == "gemv" and p.params == {"MT": 1, "SPLITK": split, "LANES": lanes}
        assert (
            gemmlab.plan("auto", 2, N, K, dtype=dtype, out_dtype=dtype, op_b="N", arch="sm_90a", sm_count=132).spec.name
            == "wgmma"
        )
    assert gemv_auto_takes(1, "bfloat16", "N", 4096, 8192)
    assert not gemv_auto_takes(1, "bfloat16", "N", 4096, 8193)
    assert gemv_auto_takes(1, "float32", "N", 4096, 128256)  # float32: any size


def test_gemv_aligned_is_about_the_rows_it_reads_16_bytes_at_a_time():
    """ALIGNED (gemv_aligned): op(B)'s stored rows start on the 16-byte grid, and where op(B)
    is column-major (the column path stages op(A) 16 bytes at a time) a row-major op(A)'s;
    C's never matter (stored element by element), nor op(A)'s in the row path (checked in
    the kernel) or a column-major op(A)'s (staged element by element)."""
    from gemmlab.kernels.gemv.gemv import gemv_aligned

    spec = registry.get("gemv")
    for op_a, op_b, rows, aligned in [
        ("N", "T", "AB", True),
        ("N", "T", "B", False),
        ("T", "T", "B", True),
        ("N", "N", "B", True),
        ("T", "N", "B", True),
        ("N", "N", "AC", False),
        ("N", "T", "ABC", True),
        ("N", "N", "", False),
    ]:
        prob = Problem(1, 51865, 768, False, "bfloat16", "bfloat16", op_a, op_b, rows_aligned16=rows)
        assert gemv_aligned(prob) == aligned, (op_a, op_b, rows)
        assert spec.name_expression({**spec.defaults(), "MT": 1}, prob).endswith(
            f", {str(aligned).lower()}, 32, '{op_a}', '{op_b}'>"
        )
    assert gemv_aligned(Problem(1, 1, 1, True, op_a="N", op_b="T"))  # aligned16: every operand's rows


def test_rows_on_the_16_byte_grid_ignore_the_width_and_a_single_rows_stride():
    """planner's _Side.rows_aligned16: base, batch strides and, for more than one stored
    row, the leading dimension; aligned16 also wants every row's width a multiple of 16
    bytes.  The three products of a one-token step with an odd vocabulary (51865)."""
    from gemmlab.core import planner

    V, D = 51865, 768
    W, x, dY = np.zeros((V, D), np.float32), np.zeros((1, D), np.float32), np.zeros((1, V), np.float32)
    for a, b, M, N, K, rows in [
        (x, W.T, 1, V, D, "ABC"),
        (dY, W, 1, D, V, "ABC"),
        (dY.T, x, V, D, 1, "ABC"),
        (np.zeros((3, V), np.float32), W, 3, D, V, "BC"),
        (np.zeros((3, D), np.float32), W.T, 3, V, D, "AB"),
    ]:
        call = planner.validate(a, b, None, 1.0, 0.0, False, False, None, None)
        kv = planner.kernel_view(
            call, planner.result_side(call), {"A": a.ctypes.data - a.ctypes.data % 16, "B": 0, "C": 0}
        )
        assert (kv.M, kv.N, call.K) == (M, N, K)
        assert kv.rows_aligned16() == rows and not kv.aligned16()
    # the shapes suite's contiguous operands say the same
    assert planner.contiguous_rows_aligned16(1, V, D, "N", "T") == "ABC"
    assert planner.contiguous_rows_aligned16(V, D, 1, "T", "N") == "ABC"
    assert planner.contiguous_rows_aligned16(3, D, V, "N", "N") == "BC"
    assert planner.contiguous_rows_aligned16(3, V, D, "N", "T", "bfloat16") == "AB"


@pytest.mark.parametrize(
    "M, N, K, op_a, op_b",
    [(51865, 768, 1, "T", "N"), (768, 51865, 1, "N", "N"), (1024, 4096, 8, "N", "N"), (17, 5, 3, "T", "T")],
)
def test_auto_takes_outer_for_products_of_a_few_k(M, N, K, op_a, op_b):
    """kernel="auto": outer for float32 with K of 1..OUTER_MAX_K (M past gemv's rows), C's
    rows 16 bytes at a time where they start on the grid; pipelined above; 16-bit likewise
    (wgmma above); fp32_tc's thin products run it too."""
    from gemmlab.kernels.gemv.outer import OUTER_MAX_K

    for rows, wide in (("C", True), ("AB", False)):
        p = gemmlab.plan(
            "auto",
            M,
            N,
            K,
            op_a=op_a,
            op_b=op_b,
            aligned16=False,
            rows_aligned16=rows,
            arch="sm_90a",
            gpu_slug="nvidia-h200",
        )
        assert (
            p.spec.name == "outer"
            and p.params == {}
            and p.name_expression == f"gemmlab::outer<3, 3, {str(wide).lower()}, '{op_a}', '{op_b}'>"
        )
        assert p.passed_over[0].startswith("gemv takes 1..16 rows")
    assert (
        gemmlab.plan(
            "auto", M, N, OUTER_MAX_K["float32"] + 1, op_a=op_a, op_b=op_b, arch="sm_90a", gpu_slug="nvidia-h200"
        ).spec.name
        == "pipelined"
    )
    for dt in ("bfloat16", "float16"):
        assert gemmlab.plan("auto", M, N, K, dtype=dt, out_dtype=dt, op_a=op_a, op_b=op_b, arch="sm_90a").spec.name == (
            "outer" if M > 4 else "gemv"
        )
        assert gemmlab.plan(
            "auto", M, N, OUTER_MAX_K[dt] + 1, dtype=dt, out_dtype=dt, op_a=op_a, op_b=op_b, arch="sm_90a"
        ).spec.name == ("wgmma" if M > 4 else "gemv")
    p = gemmlab.plan("auto", M, N, K, dtype="fp16_ec", precision="fp32_tc", op_a=op_a, op_b=op_b, arch="sm_90a")
    assert (p.spec.name, p.method) == ("outer", "fp32")
    reason = registry.get("outer").auto_hook(choose.ask(choose.Product(M, N, 9), choose.GPU())).reason
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


def test_fill_split_is_the_split_rule_of_rung_8_and_wgmma():
    """One rule behind auto_params, the fitted tuned configuration and wgmma_auto_split: the
    largest allowed split whose blocks fit the SMs with slices of at least min_steps K-steps."""
    assert fill_split(32, 1000, 132, most=4, min_steps=4) == 4
    assert fill_split(32, 1000, 132, most=16, min_steps=16) == 4  # 32 x 6 > 132
    assert fill_split(8, 1000, 132, most=16, min_steps=16) == 16
    assert fill_split(8, 40, 132, most=16, min_steps=16) == 2  # slices of 16 K-steps
    assert fill_split(100, 1000, 132, most=8, min_steps=4) == 1  # 200 > 132
