"""The kernel registry itself: the listing, tile-parameter rules (resolve and
configurations) and name expressions (pure Python, no GPU, no compiler)."""

import numpy as np
import pytest

import gemmlab
from gemmlab.kernels import registry
from gemmlab.kernels.simt.pipelined import SPLITK_VALUES, c_through_smem
from gemmlab.kernels.spec import LAYOUTS, Problem

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
    "wgmma_tma",
    "wgmma_specialized",
    "wgmma_persistent",
    "wgmma",
    "wgmma_fp8",
    "grouped",
    "grouped_wgrad",
    "ec_wmma",
    "ec_wgmma",
    "gemv",
    "outer",
    "gemv_mma",
    "batched_small",
    "batched_small_mma",
]
SPECS = registry.ladder()
TILED_2D = ("blocktile_2d", "vectorized")


def spec_id(spec):
    return spec.name


# -- listing ------------------------------------------------------------------------


def test_kernels_lists_the_ladder_in_rung_order():
    ks = gemmlab.kernels()
    assert [k["name"] for k in ks] == LADDER
    assert [(k["family"], f"{k['rung']}{k['step']}") for k in ks] == (
        [("simt", str(r)) for r in range(1, 9)]
        + [("tensor", r) for r in ("1", "2", "3", "4a", "4b", "4c", "4", "5", "6", "7")]
        + [("ec", "1"), ("ec", "2")]
        + [("gemv", "1"), ("gemv", "2"), ("gemv", "3"), ("gemv", "4"), ("gemv", "5")]
    )
    # Tensor rung 4 is taught in steps: each a kernel of its own, before the rung's, which is the last.
    assert [s.label for s in registry.ladder("tensor") if s.rung == 4] == ["4a", "4b", "4c", "4"]


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
            "fp8": ["float8_e4m3fn", "float8_e5m2"],
            "grouped": ["float16", "bfloat16"],
            "hopper steps": ["float16", "bfloat16"],
            "thin on tensor cores": ["float16", "bfloat16"],
        }[
            {
                "wgmma_fp8": "fp8",
                "grouped": "grouped",
                "grouped_wgrad": "grouped",
                "gemv_mma": "thin on tensor cores",
                "batched_small_mma": "thin on tensor cores",
            }.get(entry["name"], "hopper steps" if entry["step"] else entry["family"])
        ]
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
        "wgmma_tma": ["BM", "BN", "STAGES"],
        "wgmma_specialized": ["BM", "BN", "STAGES"],
        "wgmma_persistent": ["BM", "BN", "STAGES", "CLUSTER"],
        "wgmma": ["BM", "BN", "STAGES", "CLUSTER", "SPLITK"],
        "wgmma_fp8": ["BM", "BN", "STAGES", "CLUSTER", "PROMOTE"],
        "grouped": ["BM", "BN", "STAGES"],
        "grouped_wgrad": ["BM", "BN", "STAGES"],
        "ec_wgmma": ["STAGES", "BN", "FOLD", "SPLITK"],
        "gemv": ["MT", "SPLITK", "LANES"],
        "outer": [],
        "gemv_mma": ["MT"],
        "batched_small": [],
        "batched_small_mma": [],
    }


def test_ladder_family_filter():
    assert [s.name for s in registry.ladder("simt")] == LADDER[:8]
    assert [s.name for s in registry.ladder("tensor")] == [
        "wmma",
        "wmma_warptile",
        "mma_pipelined",
        "wgmma_tma",
        "wgmma_specialized",
        "wgmma_persistent",
        "wgmma",
        "wgmma_fp8",
        "grouped",
        "grouped_wgrad",
    ]
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
            and p["SPLITK"] in (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)
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
    if name == "gemv_mma":
        # 03_gemv_mma.cu: MT rows of x a pass, one or two n8 tiles of the mma.
        return set(p) == {"MT"} and p["MT"] in (8, 16)
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
        # barriers a stage, 1 KiB of slack, with FOLD the epilogue's 8 warps' 16 x 32 floats of C
        # (rows padded to 160 bytes), within 227 KiB; 128 columns only with FOLD's three
        # accumulator sets (four sets of 64 would not fit the consumers' registers).
        stage = 2 * (128 + p["BN"]) * 128
        staged_c = 8 * 16 * 160 * p["FOLD"]
        return (
            p["STAGES"] >= 2
            and p["STAGES"] * stage + 16 * p["STAGES"] + staged_c + 1024 <= 227 * 1024
            and p["BN"] in (96, 128)
            and p["FOLD"] in (0, 1)
            and (p["BN"] == 96 or p["FOLD"] == 1)
        )
    if name in ("wgmma_tma", "wgmma_specialized", "wgmma_persistent"):
        # 04a/04b/04c (tensor/04_wgmma_steps.cuh's StepRing): a ring of STAGES x (BM + BN) rows of
        # 128 bytes, two 8-byte barriers a stage and 1 KiB of alignment slack within 227 KiB; BM
        # in 64-row warpgroups, BN one wgmma N; step c's clusters of 1 or 2 blocks share B in
        # halves (BN / 2 K-major rows, or whole 64-column boxes).
        smem = p["STAGES"] * (p["BM"] + p["BN"]) * 128 + 16 * p["STAGES"] + 1024
        return (
            p["BM"] in (64, 128)
            and p["BN"] in (128, 256)
            and p["STAGES"] >= 3
            and smem <= 227 * 1024
            and p.get("CLUSTER", 1) in (1, 2)
            and ("CLUSTER" in p) == (name == "wgmma_persistent")
        )
    if name == "wgmma":
        # 04_wgmma.cu: a ring of STAGES x (BM + BN) rows of 128 bytes, two 8 KiB epilogue staging
        # buffers per consumer warpgroup, two 8-byte barriers a stage and 1 KiB of alignment slack
        # within 227 KiB; BM in 64-row warpgroups, BN one wgmma N; clusters of 1 or 2 blocks, which
        # share B in 64-column boxes (BN = 64 and BN = 192, three boxes: no cluster).  (BN = 192 is
        # 16-bit only: test_wgmma_bn192_rules, tests/test_wgmma_rules.py.)
        smem = p["STAGES"] * (p["BM"] + p["BN"]) * 128 + (p["BM"] // 64) * 2 * 8192 + 16 * p["STAGES"] + 1024
        return (
            p["BM"] in (64, 128)
            and p["BN"] in (64, 128, 192, 256)
            and p["STAGES"] >= 3
            and smem <= 227 * 1024
            and p["CLUSTER"] in (1, 2)
            and ((p["BN"] // 64) % 2 == 0 or p["CLUSTER"] == 1)
        )
    if name == "wgmma_fp8":
        # 05_wgmma_fp8.cu: a ring of STAGES x (BM + BN) rows of 128 bytes (128 FP8 values of K), a
        # 2560-byte staging buffer per consumer warp (4 a warpgroup), two 8-byte barriers a stage,
        # a stage's block scales (BM + 4 floats) and 1 KiB of alignment slack within 227 KiB; BM
        # in 64-row warpgroups, BN one wgmma N of at most 128 (twice BN / 2 registers a thread
        # while promoting) or 256 promoting every K-step or never; clusters of 1 or 2 blocks, B
        # K-major whatever BN; PROMOTE any of 0, 1, 2, 4 K-steps.
        smem = (
            p["STAGES"] * (p["BM"] + p["BN"]) * 128
            + (p["BM"] // 64) * 4 * 2560
            + 16 * p["STAGES"]
            + 4 * p["STAGES"] * (p["BM"] + 4)
            + 1024
        )
        return (
            p["BM"] in (64, 128)
            and p["BN"] in (64, 128, 256)
            and p["STAGES"] >= 4
            and smem <= 227 * 1024
            and p["CLUSTER"] in (1, 2)
            and p["PROMOTE"] in (0, 1, 2, 4)
            and (p["BN"] != 256 or p["PROMOTE"] in (0, 1))
        )
    if name == "grouped":
        # 06_grouped.cu: a ring of STAGES x (BM + BN) rows of 128 bytes, a 2304-byte staging
        # buffer per consumer warp (4 a warpgroup), two 8-byte barriers a stage, the work list
        # (4 bytes for each of 1024 groups) and 1 KiB of alignment slack within 227 KiB.
        smem = p["STAGES"] * (p["BM"] + p["BN"]) * 128 + (p["BM"] // 64) * 4 * 2304 + 16 * p["STAGES"] + 4096 + 1024
        return p["BM"] in (64, 128) and p["BN"] in (128, 256) and p["STAGES"] >= 4 and smem <= 227 * 1024
    if name == "grouped_wgrad":
        # 07_grouped_wgrad.cu: rung 6's ring, staging buffers and barriers, no work list.
        smem = p["STAGES"] * (p["BM"] + p["BN"]) * 128 + (p["BM"] // 64) * 4 * 2304 + 16 * p["STAGES"] + 1024
        return p["BM"] in (64, 128) and p["BN"] in (128, 256) and p["STAGES"] >= 4 and smem <= 227 * 1024
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
    layouts = [("N", "N")] if spec.launching.packed else spec.layouts
    # Every type reads NN, except FP8's (wgmma_fp8): its wgmma reads K-major operands only, NT;
    # and gemv_mma, which reads x @ W.t() only, NT.
    home = ("N", "T") if spec.name in ("wgmma_fp8", "gemv_mma") else ("N", "N")
    if spec.name == "grouped_wgrad":  # X_g^T and Y_g: TN only
        assert spec.layouts == (("T", "N"),) and nn_names == []
        assert len(names) == len(configs) * len(spec.variants)
        return
    if spec.name == "grouped":  # A row-major always, B either way: NN and NT, every variant in its own
        assert spec.layouts == (("N", "N"), ("N", "T"))
        assert len(names) == len(configs) * len(spec.variants) * 2 and len(nn_names) == len(configs) * len(
            spec.variants
        )
        return
    assert set(layouts) <= set(LAYOUTS) and home in layouts
    read = {la: sum(not spec.why_unusable(v.with_layout(*la)) for v in spec.variants) for la in layouts}
    assert read[home] == len(spec.variants)
    if spec.name == "gemv_mma":  # NT only, every variant
        assert nn_names == [] and len(names) == len(compiled) * len(spec.variants)
        return
    if spec.name == "wgmma_fp8":  # NT only; block scales promote every K-step whatever PROMOTE says
        assert nn_names == [] and len(names) == len(compiled) * len(spec.variants) - sum(
            c["PROMOTE"] != 1 for c in configs
        ) * sum(v.scaling == "block" for v in spec.variants)
        return
    # pipelined's REG_TRANSPOSE is a template argument only where it changes the code: in
    # the aligned variant of a layout with rows along K (op(A) row-major or op(B)
    # column-major); elsewhere both values share one instantiation.
    # Its variant of aligned copies beside an odd C is an instantiation of its own (STAGE_C) only
    # for the tiles that store such a C through shared memory; elsewhere the aligned variant's.
    both_ways = {la: 0 for la in LAYOUTS}
    stage_c = {la: 0 for la in LAYOUTS}
    if spec.name == "pipelined":
        tiles = {tuple(v for k, v in c.items() if k not in (spec.split_k_param, "REG_TRANSPOSE")): c for c in configs}
        compiled = set(tiles)
        both_ways.update({la: 1 for la in LAYOUTS if la != ("T", "N")})
        stage_c = {la: sum(c_through_smem(c, la[1]) for c in tiles.values()) * (1 + both_ways[la]) for la in LAYOUTS}
        read = {la: n - 1 for la, n in read.items()}  # the STAGE_C variant, counted in stage_c
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
    assert len(names) == sum(
        per_layout[la] * (read.get(la, 0) + both_ways[la]) + stage_c[la] - dropped[la] for la in LAYOUTS
    )
    assert all(n.startswith(spec.template + "<") and n.endswith(">") for n in names)
    for op_a, op_b in LAYOUTS:  # the layouts are the last two template arguments
        la = (op_a, op_b)
        expected = per_layout[la] * (read.get(la, 0) + both_ways[la]) + stage_c[la] - dropped[la]
        assert sum(n.endswith(f", '{op_a}', '{op_b}'>") for n in names) == expected
    assert (
        len(nn_names) == len(compiled) * (read["N", "N"] + both_ways["N", "N"]) + stage_c["N", "N"] - dropped["N", "N"]
    )


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_layouts_are_the_last_template_arguments(spec):
    d = spec.defaults()
    base = spec.name_expression(d, spec.variants[0])
    for op_a, op_b in LAYOUTS:
        name = spec.name_expression(d, spec.variants[0].with_layout(op_a, op_b))
        expected = base
        if spec.name == "pipelined" and (op_a, op_b) == ("T", "N"):  # no rows along K: REG_TRANSPOSE is moot
            assert d["REG_TRANSPOSE"] == 1 and base.endswith(", 1, true, false, 'N', 'N'>")
            expected = base.replace(", 1, true, false, 'N', 'N'>", ", 0, true, false, 'N', 'N'>")
        assert name == expected[: -len("'N', 'N'>")] + (
            "'N', 'N'>" if spec.launching.packed else f"'{op_a}', '{op_b}'>"
        )
    with pytest.raises(ValueError, match=r"operand layouts are 'N' or 'T', not 'C', 'N'"):
        spec.name_expression(d, spec.variants[0].with_layout("C", "N"))


def test_plan_name_expression_follows_alignment():
    assert gemmlab.plan("vectorized", 64, 64, 64, aligned16=False).name_expression.endswith(", false, 'N', 'N'>")
    assert gemmlab.plan("vectorized", 64, 64, 64, aligned16=True).name_expression.endswith(", true, 'N', 'N'>")


def test_plan_describe():
    assert gemmlab.plan("naive", 8, 8, 8).describe() == "naive"
    assert gemmlab.plan("smem_tiled", 8, 8, 8, tile=16).describe() == "smem_tiled(tile=16)"
