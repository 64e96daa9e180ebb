"""Compile-only checks (NVRTC, no GPU): every instantiation of every rung builds
without spills, the SASS has the instructions each rung is about, the disk
cache survives corruption and unusable folders, and the CUDA headers are found.

The instantiation matrix (every legal configuration for two architectures)
is marked compile_matrix: deselected by default, run by `pytest -m compile_matrix`.  Layouts multiply
the instantiations by four, so not all of them are compiled here: every legal
configuration in the row-major layout ('N', 'N'), and all four layouts for the
configurations calls actually get -- each rung's defaults, every configuration
a shipped tuned table names, and every configuration of the cheap rungs
(smem_tiled, wmma).  Other (configuration, layout) pairs compile
on first use like any kernel; the layout code they run is the shared loaders',
which these instantiations cover.

Every legal configuration is compiled for sm_90a (the GPUs the project measures
on).  For sm_80 the set is the layout set above (defaults, tuned
configurations, the cheap rungs): the whole cross product for both targets
(1,600 instantiations with the tensor-core rungs) would make the CPU suite the
slowest part of CI.  GEMMLAB_FULL_COMPILE_CHECK=1 compiles every configuration
for sm_80 too (every configuration was spill-free on both when last run:
benchmarks/NOTES.md).
"""

import json
import os
import re
import warnings
from pathlib import Path

import pytest

from gemmlab.core.errors import CompileError, HeaderNotFoundError
from gemmlab.tools.inspect_kernels import disassemble, find_disassembler, sass_facts
from gemmlab.kernels import registry
from gemmlab.kernels.ec.ec_wgmma import (
    EC_SCALED_SHORT_CHUNK,
    EC_SPLIT_PACK_KERNELS,
    EC_SPLIT_PACK_SOURCE,
    EC_SPLIT_SCALED_KERNELS,
    EC_SCALED_HELD_MAX_ROWS,
    EC_SPLIT_SCALED_SOURCE,
)
from gemmlab.kernels.ec.exponent_histogram import EXPONENT_HISTOGRAM_KERNEL, EXPONENT_HISTOGRAM_SOURCE
from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_KERNELS, SPLITK_REDUCE_SOURCE
from gemmlab.kernels.spec import KNOWN_TARGETS, LAYOUTS, Problem
from gemmlab.kernels.tensor.wgmma import TF32_PACK_KERNELS, TF32_PACK_SOURCE
from gemmlab.kernels.tensor.wmma import TC_VARIANTS
from gemmlab.runtime import compile as rt_compile
from gemmlab.runtime.compile import compile_module, module_sass, parse_ptxas_log
from gemmlab.runtime.headers import REQUIRED, find_cuda_headers
from gemmlab.core.tables import SHIPPED_DIR

ARCHES = ("sm_80", "sm_90a")
EVERY_CONFIG_ARCHES = ARCHES if os.environ.get("GEMMLAB_FULL_COMPILE_CHECK") == "1" else ("sm_90a",)
SPECS = registry.ladder()
# (gemv_mma reads one layout, NT: its every configuration, two, is compiled there.)
ALL_LAYOUTS_FOR_EVERY_CONFIG = ("smem_tiled", "wmma", "wgmma", "gemv_mma")


def _tuned_configs(spec) -> list[dict]:
    """Configurations of ``spec`` that the shipped tuned tables pick (split-K is a launch shape)."""
    found = []
    for path in sorted(SHIPPED_DIR.glob("*.json")):
        for entry in json.loads(path.read_text()).get("shapes", {}).values():
            for win in list(entry.get("kernels", {}).values()) + [entry.get("best") or {}]:
                if win.get("kernel") == spec.name:
                    found.append(spec.resolve({k: v for k, v in win["params"].items() if k != spec.split_k_param}))
    return found


def layout_configs(spec) -> list[dict]:
    """The configurations compiled in all four layouts (see the module docstring).  wgmma:
    every tile unsplit, and split-K (another instantiation: the fixup that adds the slices
    before the epilogue) on the tiles its auto rule splits; every tile split is compiled in
    'N', 'N'."""
    if spec.name == "wgmma":
        unsplit = [c for c in spec.configurations() if c["SPLITK"] == 1]
        return unsplit + [
            {**c, "SPLITK": 2}
            for c in unsplit
            if c["STAGES"] == 4 and c["CLUSTER"] == 1 and (c["BM"], c["BN"]) in ((64, 128), (128, 192), (128, 256))
        ]
    if spec.name in ALL_LAYOUTS_FOR_EVERY_CONFIG:
        return spec.configurations()
    both_transposes = [{**spec.defaults(), "REG_TRANSPOSE": t} for t in (0, 1)] if spec.name == "pipelined" else []
    unique = {tuple(sorted(c.items())): c for c in [spec.defaults()] + both_transposes + _tuned_configs(spec)}
    return list(unique.values())


def instantiations(spec, arch: str = "sm_90a") -> dict[str, tuple[dict, Problem]]:
    """name expression -> (parameters, problem) of everything compiled for ``spec`` and ``arch``."""
    out = {}
    every = spec.instantiations(layouts=[("N", "N")]) if arch in EVERY_CONFIG_ARCHES else []
    for params, prob in every + spec.instantiations(configs=layout_configs(spec), layouts=LAYOUTS):
        out.setdefault(spec.name_expression(params, prob), (params, prob))
    return out


# The exhaustive set (every instantiation below): `pytest -m compile_matrix`, which CI runs
# after the default `pytest`; test_arch_compile.py compiles every rung's defaults by default.
compile_matrix = pytest.mark.compile_matrix

needs_nvdisasm = pytest.mark.skipif(
    find_disassembler() is None, reason="nvdisasm not found (pip install 'gemmlab[inspect]')"
)


# The matrix compiles each rung's instantiations for a target in modules of at most this many,
# so that CI's two processes share the largest rungs: one module is one process's work, and
# wgmma's as one module kept the other process idle (benchmarks/NOTES.md).
MATRIX_CHUNK = 150


def matrix_chunks(spec, arch: str, size: int = MATRIX_CHUNK) -> list[list[str]]:
    """The name expressions of ``spec``'s instantiations for ``arch``, in modules of ``size``."""
    names = list(instantiations(spec, arch))
    return [names[i : i + size] for i in range(0, len(names), size)]


class ChunkedModule:
    """The modules of one rung and target (matrix_chunks) read as one: every instantiation's
    symbol, the ptxas logs end to end, each instantiation's resources, and the cubins."""

    def __init__(self, parts):
        self.cubins = [m.cubin for m in parts]
        self.log = "\n".join(m.log for m in parts)
        self.symbols = {name: mangled for m in parts for name, mangled in m.symbols.items()}
        self._part = {name: m for m in parts for name in m.symbols}

    def resources(self, name):
        return self._part[name].resources(name)


@pytest.fixture(scope="module")
def ladder_module():
    """compile(arch, spec) -> the module with every instantiation of spec (a ChunkedModule),
    built once per module.  All of them are compiled first in parallel processes into the
    (test) kernel cache (each kernel for the targets it exists for: wgmma for sm_90a only)."""
    from gemmlab.runtime.compile import compile_in_processes

    compile_in_processes(
        [
            (spec.source_path, chunk, arch)
            for arch in ARCHES
            for spec in SPECS
            if spec.builds_for(arch)
            for chunk in matrix_chunks(spec, arch)
        ]
    )
    memo = {}

    def get(arch, spec):
        if (arch, spec.name) not in memo:
            memo[arch, spec.name] = ChunkedModule(
                [compile_module(spec.source_path, chunk, arch) for chunk in matrix_chunks(spec, arch)]
            )
        return memo[arch, spec.name]

    return get


@pytest.fixture(scope="module")
def ladder_sass(ladder_module):
    """sass(arch, spec) -> {mangled name: SASS text}."""
    memo = {}

    def get(arch, spec):
        if (arch, spec.name) not in memo:
            memo[arch, spec.name] = {
                k: v for cubin in ladder_module(arch, spec).cubins for k, v in disassemble(cubin).items()
            }
        return memo[arch, spec.name]

    return get


from gemmlab.kernels.gemv.gemv import GEMV_WARPS, gemv_row_chunk, gemv_row_columns, gemv_staged_k  # noqa: E402
from gemmlab.kernels.gemv.outer import OUTER_KC, OUTER_ROWS, outer_columns  # noqa: E402
from gemmlab.kernels.gemv.batched_small_mma import SMALL_MMA_LDK, SMALL_MMA_TILE  # noqa: E402

ELEM_BYTES = {"float16": 2, "bfloat16": 2, "tf32": 4}


def static_smem(spec, p, prob=None):
    """Bytes of __shared__ arrays each kernel declares (see the .cu files)."""
    if spec.name == "wmma_warptile":  # A and B tiles of the input type, rows padded by 16 bytes
        e = ELEM_BYTES[prob.dtype]
        return e * (p["BM"] * (p["BK"] + 16 // e) + p["BK"] * (p["BN"] + 16 // e))
    if spec.name in ("naive", "coalesced"):
        return 0
    if spec.name == "smem_tiled":
        return 2 * 4 * p["tile"] ** 2
    if spec.name in ("pipelined", "mma_pipelined", "ec_wmma", "ec_wgmma", "batched_small"):  # dynamic shared memory
        return 0
    if spec.family == "tensor":  # rung 1 fills its fragments from global memory
        return 0
    if spec.name == "gemv":  # a chunk of op(A) staged; row-major also the warps' sums, 4 rows of C at a time
        if prob.op_b == "T":
            return 4 * p["MT"] * gemv_staged_k(prob, p["MT"])
        # (once whatever the output type: a split launch is the float32-output instantiation's)
        lanes = p["LANES"]
        return 4 * p["MT"] * gemv_row_chunk(prob, p["MT"], lanes) + 4 * GEMV_WARPS * min(p["MT"], 4) * gemv_row_columns(
            prob, p["MT"], lanes
        )
    if spec.name == "gemv_mma":  # the 8 warps' sums of 16 rows of W by MT rows of x
        return 4 * 8 * 16 * p["MT"]
    if spec.name == "batched_small_mma":  # op(A) and op(B)^T, 64 rows of SMALL_MMA_LDK 16-bit elements each
        return 2 * 2 * SMALL_MMA_TILE * SMALL_MMA_LDK
    if spec.name == "outer":  # a chunk of K of the tile's rows of op(A) and columns of op(B), in FP32
        return 4 * OUTER_KC * (OUTER_ROWS + outer_columns(prob))
    return 4 * p["BK"] * (p["BM"] + p["BN"])


# -- every instantiation ----------------------------------------------------------------


@compile_matrix
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_instantiation_compiles_without_spills(arch, spec, ladder_module):
    if not spec.builds_for(arch):
        pytest.skip(f"{spec.name} exists only for {', '.join(spec.arches)} (its instructions are not in {arch})")
    module = ladder_module(arch, spec)
    insts = instantiations(spec, arch)
    assert set(module.symbols) == set(insts)
    if arch in EVERY_CONFIG_ARCHES:
        assert set(spec.all_name_expressions(layouts=[("N", "N")])) <= set(insts)
    assert all(cubin[:4] == b"\x7fELF" for cubin in module.cubins)
    res = parse_ptxas_log(module.log)
    assert len(res) == len(insts), "ptxas reported a different number of kernels"
    for name, (p, prob) in insts.items():
        mangled = module.symbols[name]
        assert mangled in res, f"{name} ({mangled}) missing from the ptxas log"
        r = res[mangled]
        assert r.spill_bytes == 0, f"{name} spills {r.spill_bytes} bytes on {arch}"
        assert r.stack_bytes == 0, f"{name} uses a {r.stack_bytes}-byte stack frame on {arch}"
        assert 0 < r.registers <= 255, name
        assert r.smem_bytes == static_smem(spec, p, prob), name
        assert module.resources(name) == r


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_defaults_and_tuned_configurations_compile_in_every_layout(spec):
    """What the spill test above covers beyond the row-major layout."""
    insts = instantiations(spec)
    configs = layout_configs(spec)
    assert spec.defaults() in configs
    for p in configs:
        for prob in spec.variants:
            if not all(c.holds(p) for c in spec.constraints if c.binds(prob.dtype)):
                continue  # a rule of the type refuses them (wgmma: BN = 192 is not for TF32)
            for op_a, op_b in spec.layouts:  # the layouts the kernel reads
                if not spec.why_unusable(prob.with_layout(op_a, op_b)):  # (wgmma: TF32 NN only)
                    assert spec.name_expression(p, prob.with_layout(op_a, op_b)) in insts
    if spec.name == "pipelined":  # both tables' winners, each in 4 layouts x 2 variants
        assert len(configs) > 3


@pytest.mark.parametrize("arch", ARCHES)
def test_exponent_histogram_compiles_without_spills(arch):
    """A 256-bin histogram of 4-byte counters per warp, 8 warps, in shared memory;
    registers for its 16-byte loads in flight and no more (8 blocks of 256 threads an SM)."""
    module = compile_module(EXPONENT_HISTOGRAM_SOURCE, (EXPONENT_HISTOGRAM_KERNEL,), arch)
    r = parse_ptxas_log(module.log)[module.symbols[EXPONENT_HISTOGRAM_KERNEL]]
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.smem_bytes == 8 * 4 * 256 and r.registers <= 32, r


@pytest.mark.parametrize("arch", ARCHES)
def test_choose_method_compiles_without_spills(arch):
    """fp32_tc's choice on the GPU: one block, shared memory for its sums (8 warps x 6
    counts) and the two largest exponents only."""
    from gemmlab.kernels.ec.choose_method import CHOOSE_KERNEL, CHOOSE_SOURCE

    module = compile_module(CHOOSE_SOURCE, (CHOOSE_KERNEL,), arch)
    r = parse_ptxas_log(module.log)[module.symbols[CHOOSE_KERNEL]]
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.smem_bytes <= 8 * 8 * (2 + 6) + 8, r


@pytest.mark.parametrize("arch", ARCHES)
def test_splitk_reduce_compiles_without_spills(arch):
    """The reduction of split-K's partial products, one per output dtype (FP32, FP16, BF16)."""
    module = compile_module(SPLITK_REDUCE_SOURCE, SPLITK_REDUCE_KERNELS, arch)
    assert len(SPLITK_REDUCE_KERNELS) == 3
    for name in SPLITK_REDUCE_KERNELS:
        r = parse_ptxas_log(module.log)[module.symbols[name]]
        assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.smem_bytes == 0, name


# -- SASS facts ----------------------------------------------------------------------------


def _default_sass(arch, spec, aligned, ladder_module, ladder_sass, op_a="N", op_b="N"):
    name = spec.name_expression(spec.defaults(), Problem(1024, 1024, 1024, aligned, op_a=op_a, op_b=op_b))
    sass = ladder_sass(arch, spec)
    mangled = ladder_module(arch, spec).symbols[name]
    assert mangled in sass, f"nvdisasm output has no section for {name}"
    return name, sass_facts(sass[mangled])


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
def test_vectorized_uses_128_bit_loads(arch, ladder_module, ladder_sass):
    spec = registry.get("vectorized")
    name, facts = _default_sass(arch, spec, True, ladder_module, ladder_sass)
    assert name.startswith("gemmlab::vectorized<") and name.endswith(", true, 'N', 'N'>")
    assert facts["LDG.128"] > 0, facts
    assert facts["LDS.128"] > 0, facts
    assert facts["STG.128"] > 0, facts
    assert facts["LDL/STL (local)"] == 0, facts


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
def test_vectorized_scalar_variant_has_no_128_bit_global_loads(arch, ladder_module, ladder_sass):
    spec = registry.get("vectorized")
    name, facts = _default_sass(arch, spec, False, ladder_module, ladder_sass)
    assert name.startswith("gemmlab::vectorized<") and name.endswith(", false, 'N', 'N'>")
    assert facts["LDG.128"] == 0, facts
    assert facts["STG.128"] == 0, facts
    assert facts["LDG.32"] > 0, facts
    assert facts["LDS.128"] > 0, facts  # shared fragments stay 128-bit


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("op_a, op_b", LAYOUTS)
@pytest.mark.parametrize("kernel", ["vectorized", "warptile"])
def test_transposed_operands_keep_128_bit_loads(arch, kernel, op_a, op_b, ladder_module, ladder_sass):
    """Rungs 6 and 7 read every layout with 16-byte global loads (a transposed tile
    is scattered into shared memory instead) and keep their 16-byte shared reads."""
    _, facts = _default_sass(arch, registry.get(kernel), True, ladder_module, ladder_sass, op_a, op_b)
    assert facts["LDG.128"] > 0 and facts["LDG.32"] == 0, facts
    assert facts["LDS.128"] > 0 and facts["LDL/STL (local)"] == 0, facts


def _cp_async_widths(sass: str) -> tuple[int, int]:
    """(16-byte, 4-byte) cp.async copies (LDGSTS) in a kernel's SASS."""
    ops = re.findall(r"\bLDGSTS\S*", sass)
    wide = sum(op.endswith(".128") for op in ops)
    return wide, len(ops) - wide


def _global_loads_128(sass: str) -> int:
    """16-byte loads of the operands into registers in a kernel's SASS: LDG.E.128.CONSTANT,
    the read-only path their const __restrict__ pointers take (the epilogue's reads of C
    for beta are plain LDG.E.128)."""
    return len(re.findall(r"\bLDG\.E\.128\.CONSTANT\b", sass))


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("reg_transpose", [0, 1])
def test_pipelined_transposes_rows_along_k_as_configured(arch, reg_transpose, ladder_module, ladder_sass):
    """Rung 8 keeps both tiles K-major.  A column-major A (a transposed view) and a
    row-major B are straight 16-byte copies.  A row-major A and a column-major B are
    transposed: with REG_TRANSPOSE 0 by 4-byte copies, with 1 by 16-byte loads into
    registers (no 4-byte copy left, and no copy at all for NT)."""
    spec = registry.get("pipelined")
    sass, module = ladder_sass(arch, spec), ladder_module(arch, spec)
    params = {**spec.defaults(), "REG_TRANSPOSE": reg_transpose}

    def widths(op_a, op_b):
        name = spec.name_expression(params, Problem(1024, 1024, 1024, True, op_a=op_a, op_b=op_b))
        code = sass[module.symbols[name]]
        return _cp_async_widths(code) + (_global_loads_128(code),)

    nn, tn, nt, tt = widths("N", "N"), widths("T", "N"), widths("N", "T"), widths("T", "T")
    assert tn[0] > 0 and tn[1] == 0 and tn[2] == 0, tn  # both 16-byte copies
    if reg_transpose == 0:
        assert nn[0] > 0 and nn[1] > 0, nn  # B 16-byte, A 4-byte
        assert nt[0] == 0 and nt[1] > 0, nt  # both 4-byte
        assert tt[0] > 0 and tt[1] > 0, tt  # A 16-byte, B 4-byte
        assert nn[2] == nt[2] == tt[2] == 0
    else:
        assert nn[0] > 0 and nn[1] == 0 and nn[2] > 0, nn  # B copied, A through registers
        assert nt[0] == nt[1] == 0 and nt[2] > 0, nt  # both through registers
        assert tt[0] > 0 and tt[1] == 0 and tt[2] > 0, tt  # A copied, B through registers


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("kernel", ["blocktile_2d", "vectorized", "warptile", "pipelined"])
def test_register_tiled_kernels_use_ffma(arch, kernel, ladder_module, ladder_sass):
    spec = registry.get(kernel)
    for aligned in {True, False} if len(spec.variants) > 1 else {True}:
        _, facts = _default_sass(arch, spec, aligned, ladder_module, ladder_sass)
        p = spec.defaults()
        # The unrolled inner loop alone is BK x (outputs per thread) fused multiply-adds.
        outputs = p["WM"] * p["WN"] // 32 if "WM" in p else p["TM"] * p["TN"]
        assert facts["FFMA"] >= p["BK"] * outputs, facts


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
def test_tensor_rungs_use_the_tensor_cores(arch, ladder_module, ladder_sass):
    """Every instantiation of a WMMA-based rung (error-corrected ones included) has
    HMMA instructions in its SASS.  The Hopper-only rungs (spec.arches) use warpgroup
    MMA instead and are checked in their own files (test_wgmma_steps_compile.py,
    test_wgmma_fp8_compile.py, test_grouped_compile.py and below)."""
    for spec in registry.ladder("tensor") + registry.ladder("ec"):
        if spec.arches:
            continue
        sass = ladder_sass(arch, spec)
        for name, mangled in ladder_module(arch, spec).symbols.items():
            assert "HMMA" in sass[mangled], f"{name} on {arch} has no HMMA"


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
def test_gemv_mma_loads_16_bytes_and_multiplies_on_the_tensor_cores(arch, ladder_module, ladder_sass):
    """gemv_mma's idea in its SASS: W and x read 16 bytes a load, the products on HMMA, and
    no local memory (its two groups of loads in flight fill the 128 registers of two blocks
    an SM)."""
    spec = registry.get("gemv_mma")
    sass = ladder_sass(arch, spec)
    for name, mangled in ladder_module(arch, spec).symbols.items():
        text = sass[mangled]
        assert "HMMA" in text and _global_loads_128(text) > 0, name
        assert not re.search(r"\b(LDL|STL)\b", text), f"{name}: local memory on {arch}"


def hopper_path_sass(name, ladder_module, ladder_sass):
    """(instantiation, SASS, SASS facts) of every instantiation of a Hopper rung, after
    the checks they all share: HGMMA (warpgroup MMA from shared memory; a kernel with
    HMMA is on the older, slower path), TMA loads (UTMALDG), mbarrier waits, and
    setmaxnreg honoured (USETMAXREG: ptxas drops it, with warning C7508, when the
    kernel has no register cap or the roles are not one if/else).  (Both rungs' copies
    are 3-D, the batch outermost.)"""
    spec = registry.get(name)
    module = ladder_module("sm_90a", spec)
    sass = ladder_sass("sm_90a", spec)
    assert "C7508" not in module.log and "setmaxnreg" not in module.log.lower(), module.log
    out = []
    for inst, mangled in module.symbols.items():
        text = sass[mangled]
        facts = sass_facts(text)
        assert facts["HGMMA"] >= 4 and facts["HMMA"] == 0, f"{inst}: {facts}"
        assert re.search(r"UTMALDG\.[23]D", text) and "SYNCS.PHASECHK" in text, inst
        assert "USETMAXREG.DEALLOC" in text and "USETMAXREG.TRY_ALLOC" in text, inst
        out.append((inst, text, facts))
    return out


@compile_matrix
@needs_nvdisasm
def test_wgmma_uses_warpgroup_mma_tma_and_register_reallocation(ladder_module, ladder_sass):
    """Every instantiation of the wgmma rung runs on the Hopper path (hopper_path_sass),
    BK / MMA_K = 4 HGMMA per stage unrolled, of the instantiation's type, in every layout
    it reads (16-bit: all four; TF32: NN).  A 16-bit operand stored MN-major (A 'T': K x M;
    B 'N': K x N) is read through the transpose bit, a K-major one (A 'N', B 'T') without.
    Split over K (SPLIT true) or not, C leaves through the TMA store (or the threads' stores);
    split, the fixup's signals are there (split_fixup_sass), unsplit none of them."""
    seen, splits = set(), set()
    for name, text, facts in hopper_path_sass("wgmma", ladder_module, ladder_sass):
        # nvdisasm writes FP16 as the default (no type suffix): HGMMA.64x256x16.F32
        dt = int(name.split("<")[1].split(",")[0])
        op_a, op_b = re.findall(r"'([NT])'", name)
        split = ", true, " in name
        seen.add((dt, op_a + op_b))
        splits.add((dt, op_a + op_b, split))
        expect = {0: r"HGMMA\.64x\d+x16\.F32", 1: r"HGMMA\.64x\d+x16\.F32\.BF16", 2: r"HGMMA\.64x\d+x8\.F32\.TF32"}[dt]
        assert re.search(expect + r"[ .]", text), f"{name}: no {expect}"
        assert facts["HGMMA"] == 4, f"{name}: {facts}"
        # A batch is one launch: every copy names its matrix (3-D maps, the batch outermost).
        assert "UTMALDG.3D" in text and "UTMALDG.2D" not in text and "UTMASTG.3D" in text, name
        split_fixup_sass(name, text, split)
        if dt != 2:
            assert (".tnspA" in text) == (op_a == "T"), name
            assert (".tnspB" in text) == (op_b == "N"), name
        else:
            assert (op_a, op_b) == ("N", "N") and ".tnsp" not in text, name
    assert seen == {(dt, ops) for dt in (0, 1) for ops in ("NN", "TN", "NT", "TT")} | {(2, "NN")}, seen
    assert splits == {(dt, ops, s) for dt, ops in seen for s in (False, True)}, splits


def split_fixup_sass(name: str, text: str, split: bool) -> None:
    """Split-K's fixup in the SASS of a split wgmma instantiation (tensor/04_wgmma_work.cuh), and
    none of it unsplit: the release add on the counter (REDG, GPU scope), the owner's sleeping
    wait, the partials as 16-byte stores and loads at GPU scope (st/ld.global.cg), the fence."""
    facts = {
        "REDG.E.ADD.STRONG.GPU": "REDG.E.ADD.STRONG.GPU" in text,
        "NANOSLEEP": "NANOSLEEP" in text,
        "STG.E.128.STRONG.GPU": "STG.E.128.STRONG.GPU" in text,
        "LDG.E.128.STRONG.GPU": "LDG.E.128.STRONG.GPU" in text,
        "MEMBAR.SC.GPU": "MEMBAR.SC.GPU" in text,
    }
    assert all(facts.values()) if split else not any(facts.values()), (name, facts)


def wgmma_128x192_instantiations(every: bool) -> list[str]:
    """The 128 x 192 tile's instantiations (16-bit only, CLUSTER = 1, 4 stages: what auto
    picks).  ``every``: both types in every layout, unsplit and split, each with a 16-bit
    and an FP32 result; else a sample in which each type appears once in each layout, split
    in one type and unsplit in the other, the result 16-bit in two layouts and FP32 in the
    others."""
    wg = registry.get("wgmma")
    out = []
    for i, (op_a, op_b) in enumerate(LAYOUTS):
        for j, dtype in enumerate(("bfloat16", "float16")):
            for splits, out_dtype in ((1, dtype), (1, "float32"), (2, dtype), (2, "float32")):
                if every or (splits > 1) == bool((i + j) % 2) and (out_dtype == dtype) == (i < 2):
                    prob = Problem(1, 1, 1, True, dtype, out_dtype, op_a, op_b)
                    params = wg.resolve({"BM": 128, "BN": 192, "STAGES": 4, "SPLITK": splits}, dtype)
                    out.append(wg.name_expression(params, prob))
    return out


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=compile_matrix)], ids=["sample", "every"])
def test_wgmma_128x192_compiles_without_spills(every, request):
    """The m64n192 instantiations compile for sm_90a with no local memory (ptxas: no spills, no
    stack; SASS: no LDL / STL), within the registers of 384 threads, on the Hopper path: 4
    HGMMA.64x192x16 a K-step of the right type, the transpose bits of the layout, the TMA store,
    split-K's fixup where split.  The sample by default, compiled here; every one in the compile
    matrix, read from the ladder's modules, which hold them all (no second compile)."""
    spec = registry.get("wgmma")
    names = wgmma_128x192_instantiations(every)
    assert len(names) == (32 if every else 8) and len(set(names)) == len(names)
    disassembler = find_disassembler()
    if every:
        module = request.getfixturevalue("ladder_module")("sm_90a", spec)
        assert set(names) <= set(module.symbols)
        sass = request.getfixturevalue("ladder_sass")("sm_90a", spec) if disassembler else {}
        parts = [(module, names)]
    else:
        from gemmlab.runtime.compile import compile_in_processes

        groups = [names[0::2], names[1::2]]  # two modules, compiled side by side
        compile_in_processes([(spec.source_path, g, "sm_90a") for g in groups], sass=disassembler is not None)
        parts = [(compile_module(spec.source_path, g, "sm_90a"), g) for g in groups]
        sass = {k: v for m, _ in parts for k, v in module_sass(m).items()} if disassembler else {}
    for module, group in parts:
        # setmaxnreg honoured: no C7508 warning in a module of these alone (the sample); in the
        # ladder's modules, none that names one of them
        warned = [line for line in module.log.splitlines() if "C7508" in line]
        assert not (warned if not every else [w for w in warned if any(module.symbols[n] in w for n in group)]), warned
        for name in group:
            mangled = module.symbols[name]
            r = module.resources(name)
            assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.smem_bytes == 0, (name, r)
            assert 0 < r.registers <= 65536 // 384, (name, r)
            if not disassembler:
                continue
            text, facts = sass[mangled], sass_facts(sass[mangled])
            assert not re.search(r"\b(LDL|STL)\b", text), f"{name}: local memory"
            bf16 = name.startswith("gemmlab::wgmma_gemm<1,")
            assert re.search(r"HGMMA\.64x192x16\.F32" + (r"\.BF16" if bf16 else "") + "[ .]", text), name
            assert facts["HGMMA"] == 4 and facts["HMMA"] == 0, (name, facts)
            op_a, op_b = re.findall(r"'([NT])'", name)
            assert (".tnspA" in text) == (op_a == "T") and (".tnspB" in text) == (op_b == "N"), name
            assert "UTMASTG" in text and "UTMALDG.3D" in text, name
            split_fixup_sass(name, text, ", true, '" in name)


@compile_matrix
@needs_nvdisasm
def test_ec_wgmma_uses_warpgroup_mma_tma_and_register_reallocation(ladder_module, ladder_sass):
    """ec_wgmma, like the wgmma rung, runs on the Hopper path (hopper_path_sass); per stage
    3 x (BK / MMA_K) = 12 wgmma of 64 x BN (the main product and two corrections; BN 96, or
    128 with FOLD), both operands K-major (no .tnspB); a batch is one launch: every copy of
    a part names its matrix (3-D maps over the parts of the whole batch)."""
    for name, text, facts in hopper_path_sass("ec_wgmma", ladder_module, ladder_sass):
        assert facts["HGMMA"] == 12, f"{name}: {facts}"
        method, _, bn = (int(x) for x in name.split("<")[1].split(",")[:3])
        k = "16" if method == 0 else "8\\.F32\\.TF32"  # FP16 or TF32 parts
        assert re.search(rf"HGMMA\.64x{bn}x{k}", text) and ".tnspB" not in text, name  # both K-major
        assert "UTMALDG.3D" in text and "UTMALDG.2D" not in text, name


@pytest.mark.parametrize("arch", ARCHES)
def test_ec_split_pack_compiles_without_spills(arch):
    module = compile_module(EC_SPLIT_PACK_SOURCE, EC_SPLIT_PACK_KERNELS, arch)
    res = parse_ptxas_log(module.log)
    assert len(EC_SPLIT_PACK_KERNELS) == 16  # 2 methods x FOLD 0, 1 x 4 layouts
    for name in EC_SPLIT_PACK_KERNELS:
        r = res[module.symbols[name]]
        assert r.spill_bytes == 0 and r.stack_bytes == 0, name
        assert r.smem_bytes == 4 * 2 * 32 * 33, name  # two 32 x 33 float tiles in flight


def _ec_split_scaled_sample() -> list[str]:
    """Of the 35: each layout's smallest and largest cluster and its short K's chunk, the
    whole-rows kernel's fewest and most rows, and the kernel with an operand by whole rows at
    its fewest and most rows in each of its two layouts (18)."""
    ends = ("<1>", "<16>", ", 1, 512>", ", 8, 512>", f", 1, {EC_SCALED_SHORT_CHUNK}>", "8, 512, 16>", "2, 512, 1>")
    return [n for n in EC_SPLIT_SCALED_KERNELS if n.endswith(ends)]


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=compile_matrix)], ids=["sample", "every"])
def test_ec_split_scaled_compiles_for_two_blocks_an_sm(every):
    """fp32_tc's pre-pass on FOLD (Hopper only: clusters, distributed shared memory): every
    layout and cluster size within the 128 registers that let two blocks share an SM (64 and
    four blocks with a short K's chunk; 85 and three in TN, whose sides both hold their K in
    shared memory), the whole-rows kernel (ec_split_scaled_rows, 1 to 16 float4 a row) and the
    clustered kernel with one operand by whole rows (NN and TT, ROWS 1 to 16) likewise.  At
    most 32 bytes of spills (the whole rows at one float4 a row; the short chunk beside a side
    split by columns).  Static shared memory beside the largest column tile within a block's 227
    KB.  By default a sample (_ec_split_scaled_sample); all 35 in
    the compile matrix."""
    from gemmlab.runtime.compile import compile_in_processes

    # 4 layouts x (clusters of 1, 2, 4, 8; a short K's chunk), 5 of the whole-rows kernel, 2 x 5 half rows
    assert len(EC_SPLIT_SCALED_KERNELS) == 35 and len(_ec_split_scaled_sample()) == 18
    kernels = list(EC_SPLIT_SCALED_KERNELS) if every else _ec_split_scaled_sample()
    groups = [kernels[0::2], kernels[1::2]]  # side by side
    compile_in_processes([(EC_SPLIT_SCALED_SOURCE, g, "sm_90a") for g in groups])
    module = ChunkedModule([compile_module(EC_SPLIT_SCALED_SOURCE, g, "sm_90a") for g in groups])
    res = parse_ptxas_log(module.log)
    for name in kernels:
        r = res[module.symbols[name]]
        short = name.endswith(f", {EC_SCALED_SHORT_CHUNK}>")
        tn = "<'T', 'N'" in name
        assert r.registers <= (85 if tn else 64 if short else 128), (name, r)
        assert r.spill_store_bytes <= 32 and r.stack_bytes <= 32, (name, r)
        # static (the maxima, scales and counts) beside the largest column tile: within a Hopper block's 227 KB
        assert r.smem_bytes + 128 * EC_SCALED_HELD_MAX_ROWS <= 227 * 1024, (name, r)


@pytest.mark.parametrize("arch", [a for a in ARCHES if a != "sm_90a"])
def test_wgmma_is_not_built_for_other_targets(arch):
    """Compiling the rung for another target is refused by its header, naming sm_90a."""
    spec = registry.get("wgmma")
    assert not spec.builds_for(arch) and spec.builds_for("sm_90a")
    name = spec.name_expression(spec.defaults(), TC_VARIANTS[0])
    with pytest.raises(CompileError, match=r"hopper\.cuh needs sm_90a"):
        compile_module(spec.source_path, (name,), arch, use_cache=False)


def test_tf32_pack_compiles_without_spills():
    module = compile_module(TF32_PACK_SOURCE, TF32_PACK_KERNELS, "sm_90a")
    res = parse_ptxas_log(module.log)
    for name in TF32_PACK_KERNELS:
        r = res[module.symbols[name]]
        assert r.spill_bytes == 0 and r.stack_bytes == 0, name
        assert r.smem_bytes == 4 * 32 * 33, name


def test_staging_copies_compile_without_spills():
    """wgmma's pack16 (sm_90a, beside tf32_pack) and rung 8's pack32 (every target rung 8 runs
    on): one body, gemmlab/pack_rows.cuh; no local or shared memory."""
    from gemmlab.kernels.simt.staging import PACK32_KERNEL, PACK32_SOURCE
    from gemmlab.kernels.tensor.wgmma import PACK16_KERNEL

    builds = [(TF32_PACK_SOURCE, PACK16_KERNEL, "sm_90a")]
    builds += [(PACK32_SOURCE, PACK32_KERNEL, a) for a in KNOWN_TARGETS if registry.get("pipelined").builds_for(a)]
    for source, name, arch in builds:
        module = compile_module(source, (name,), arch)
        r = parse_ptxas_log(module.log)[module.symbols[name]]
        assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.smem_bytes == 0, (name, arch, r)


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
def test_mma_pipelined_sass(arch, ladder_module, ladder_sass):
    """Every instantiation of mma_pipelined: the unrolled K-step's (BK/16) x (WM/16) x (WN/8)
    mma.sync (HMMA); 16-bit fragments by ldmatrix (LDSM) where K runs along the stored rows (A 'N',
    B 'T') and by ldmatrix.trans where it runs down them (A 'T', B 'N'); TF32 (NN only) A by
    ldmatrix, B by 32-bit shared loads (no .trans for 32-bit elements); cp.async (LDGSTS) wherever it
    can move the elements: 16-byte copies for aligned operands, 4-byte ones for unaligned TF32,
    none for unaligned 16-bit types (cp.async moves at least 4 bytes)."""
    spec = registry.get("mma_pipelined")
    sass = ladder_sass(arch, spec)
    symbols = ladder_module(arch, spec).symbols
    for name, (p, prob) in instantiations(spec, arch).items():  # what was compiled for this target
        f = sass_facts(sass[symbols[name]])
        per_stage = (p["BK"] // 16) * (p["WM"] // 16) * (p["WN"] // 8)
        assert f["HMMA"] >= per_stage and f["HMMA"] % per_stage == 0, (name, f)
        plain, trans = f["LDSM"] - f["LDSM.T"], f["LDSM.T"]
        if prob.dtype == "tf32":
            assert plain > 0 and trans == 0 and f["LDS.32"] > 0, (name, f)
        else:
            assert (plain > 0) == (prob.op_a == "N" or prob.op_b == "T"), (name, f)
            assert (trans > 0) == (prob.op_a == "T" or prob.op_b == "N"), (name, f)
        assert (f["LDGSTS"] > 0) == (prob.aligned16 or prob.dtype == "tf32"), (name, f)
        assert f["STG.128"] > 0 if prob.aligned16 else f["STG.128"] == 0, (name, f)


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
def test_outer_stores_c_16_bytes_at_a_time_where_its_rows_allow(arch, ladder_module, ladder_sass):
    """outer: one 16-byte store a row where C's rows start on the 16-byte grid (ALIGNED),
    none without; op(A) and op(B) read element by element in every layout (the 16-byte
    loads left are of C, for beta)."""
    spec = registry.get("outer")
    sass, module = ladder_sass(arch, spec), ladder_module(arch, spec)
    for name, mangled in module.symbols.items():
        facts = sass_facts(sass[mangled])
        wide = ", true, '" in name
        assert (facts["STG.128"] > 0) == wide and (facts["LDG.128"] > 0) == wide, (name, facts)
        assert _global_loads_128(sass[mangled]) == 0 and facts["LDL/STL (local)"] == 0, (name, facts)


@compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
def test_no_local_memory_anywhere(arch, ladder_module, ladder_sass):
    """No instantiation touches local memory (the SASS side of 'no spills, no stack')."""
    for spec in SPECS:
        if not spec.builds_for(arch):
            continue
        sass = ladder_sass(arch, spec)
        module = ladder_module(arch, spec)
        for name, mangled in module.symbols.items():
            assert sass_facts(sass[mangled])["LDL/STL (local)"] == 0, name


# -- the disk cache ---------------------------------------------------------------------------

NAIVE = registry.get("naive")
NAIVE_NAMES = ["gemmlab::naive<32, 'N', 'N'>"]
NAIVE_MANGLED = "_ZN7gemmlab5naiveILi32ELc78ELc78EEEviiifPKfiS2_ifPfixxx"  # 'N' is char 78; xxx: the batch strides
ARCH = "sm_90a"


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache folder that compile_module will use (and forget afterwards)."""
    folder = tmp_path / "kernel-cache"
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(folder))
    monkeypatch.setattr(rt_compile, "_cache_by_dir", {})
    return folder


def entry_files(folder: Path) -> list[Path]:
    return sorted(p for p in (folder / "entries").rglob("*") if p.is_file())


def compile_naive(**kw):
    return compile_module(NAIVE.source_path, NAIVE_NAMES, ARCH, **kw)


def compile_quietly(**kw):
    """compile_naive, failing the test on any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return compile_naive(**kw)


def test_second_compile_comes_from_cache(fresh_cache):
    first = compile_quietly()
    assert not first.from_cache
    assert first.cache_key is not None
    assert len(entry_files(fresh_cache)) == 3  # cubin, symbol map, log
    second = compile_quietly()
    assert second.from_cache
    assert second.cubin == first.cubin
    assert second.symbols == first.symbols == {NAIVE_NAMES[0]: NAIVE_MANGLED}
    assert second.log == first.log
    assert second.cache_key == first.cache_key
    assert parse_ptxas_log(second.log).keys() == parse_ptxas_log(first.log).keys()


def test_refresh_and_no_cache_skip_reading(fresh_cache):
    first = compile_quietly()
    assert not compile_quietly(refresh=True).from_cache
    uncached = compile_quietly(use_cache=False)
    assert not uncached.from_cache and uncached.cache_key is None
    assert uncached.cubin == first.cubin
    assert len(entry_files(fresh_cache)) == 3


def test_different_instantiations_are_different_entries(fresh_cache):
    compile_quietly()
    other = compile_module(registry.get("smem_tiled").source_path, ["gemmlab::smem_tiled<16, 'N', 'N'>"], ARCH)
    assert not other.from_cache
    assert len(entry_files(fresh_cache)) == 6
    assert compile_quietly().from_cache


@pytest.mark.parametrize("damage", ["garbage", "empty"])
def test_corrupt_cache_is_rebuilt(fresh_cache, damage):
    """Every entry overwritten with junk or truncated: dropped with a warning, recompiled, re-stored."""
    first = compile_quietly()
    files = entry_files(fresh_cache)
    assert len(files) == 3
    for f in files:
        f.write_bytes(b"\xff\xfe\x00garbage\x80" * 7 if damage == "garbage" else b"")
    with pytest.warns(RuntimeWarning, match=r"dropping an unreadable cache entry for 01_naive\.cu"):
        rebuilt = compile_naive()
    assert not rebuilt.from_cache
    assert rebuilt.cubin == first.cubin
    assert rebuilt.symbols == first.symbols
    assert parse_ptxas_log(rebuilt.log).keys() == {first.symbols[NAIVE_NAMES[0]]}
    again = compile_quietly()
    assert again.from_cache and again.cubin == first.cubin


def _find_entry(folder: Path, content: bytes) -> Path:
    matches = [f for f in entry_files(folder) if f.read_bytes() == content]
    assert len(matches) == 1, "expected exactly one cache file with that content"
    return matches[0]


@pytest.mark.parametrize(
    "piece, new_content",
    [
        ("symbols", b""),
        ("symbols", b"\xff\xfe\xfd"),
        ("symbols", b"{not json"),
        ("symbols", json.dumps({"gemmlab::naive<16, 'N', 'N'>": "_Z1x"}).encode()),  # a different instantiation
        ("cubin", b""),
        ("cubin", b"not an ELF file, but not empty either"),
    ],
)
def test_damaged_piece_triggers_recompile(fresh_cache, piece, new_content):
    first = compile_quietly()
    content = first.cubin if piece == "cubin" else json.dumps(first.symbols).encode()
    _find_entry(fresh_cache, content).write_bytes(new_content)
    with pytest.warns(RuntimeWarning, match=r"dropping an unreadable cache entry"):
        rebuilt = compile_naive()
    assert not rebuilt.from_cache
    assert rebuilt.symbols == first.symbols and rebuilt.cubin == first.cubin
    assert compile_quietly().from_cache


def test_missing_piece_is_a_plain_miss(fresh_cache):
    """A deleted log entry is a cache miss: recompiled and re-stored, no warning."""
    first = compile_quietly()
    _find_entry(fresh_cache, first.log.encode()).unlink()
    rebuilt = compile_quietly()
    assert not rebuilt.from_cache and rebuilt.cubin == first.cubin
    assert parse_ptxas_log(rebuilt.log) == parse_ptxas_log(first.log)  # the log also carries timings
    assert compile_quietly().from_cache


def test_read_only_cache_folder_degrades_to_compiling(tmp_path, monkeypatch):
    folder = tmp_path / "read-only-cache"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("chmod 0o500 does not stop this user from writing (running as root)")
        monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(folder))
        monkeypatch.setattr(rt_compile, "_cache_by_dir", {})
        with pytest.warns(RuntimeWarning, match=r"kernel cache folder .*read-only-cache is not usable"):
            module = compile_naive()
        assert not module.from_cache and module.cache_key is None
        assert module.cubin[:4] == b"\x7fELF"
        assert list(folder.iterdir()) == []
        assert not compile_naive().from_cache
    finally:
        folder.chmod(0o700)


def test_cache_path_that_is_a_file_degrades_to_compiling(tmp_path, monkeypatch):
    """Same degradation, reachable as root too: GEMMLAB_CACHE_DIR names a regular file."""
    not_a_folder = tmp_path / "cache-file"
    not_a_folder.write_bytes(b"not a folder")
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(not_a_folder))
    monkeypatch.setattr(rt_compile, "_cache_by_dir", {})
    with pytest.warns(RuntimeWarning, match=r"kernel cache folder .*cache-file is not usable.*GEMMLAB_CACHE_DIR"):
        module = compile_naive()
    assert not module.from_cache and module.cache_key is None
    assert module.symbols == {NAIVE_NAMES[0]: NAIVE_MANGLED}
    assert not_a_folder.read_bytes() == b"not a folder"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per folder, not per compile
        assert not compile_naive().from_cache


def test_cache_that_breaks_after_opening_still_compiles(fresh_cache):
    """entries/ replaced by a file after the cache opened: writes fail with a warning, the module is fine."""
    first = compile_quietly()
    for f in entry_files(fresh_cache):
        f.unlink()
    for d in sorted((fresh_cache / "entries").iterdir(), reverse=True):
        d.rmdir()
    (fresh_cache / "entries").rmdir()
    (fresh_cache / "entries").write_bytes(b"")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = compile_naive()
    assert all(w.category is RuntimeWarning for w in caught), [str(w.message) for w in caught]
    assert any("could not write the kernel cache" in str(w.message) for w in caught)
    assert not module.from_cache
    assert module.cubin == first.cubin and module.symbols == first.symbols


# -- compiler errors -------------------------------------------------------------------------


def test_missing_header_is_header_not_found(tmp_path):
    src = tmp_path / "needs_header.cu"
    src.write_text('#include <gemmlab_no_such_header.h>\nextern "C" __global__ void k() {}\n')
    with pytest.raises(
        HeaderNotFoundError,
        match=r"(?s)needs_header\.cu for sm_90a: a header was not found"
        r".*CUDA headers: .*gemmlab_no_such_header\.h",
    ):
        compile_module(src, (), "sm_90a", use_cache=False)


def test_syntax_error_is_compile_error(tmp_path):
    src = tmp_path / "broken.cu"
    src.write_text('extern "C" __global__ void k(float* p) { p[0] = undeclared_thing; }\n')
    with pytest.raises(CompileError, match=r"(?s)NVRTC failed to compile broken\.cu for sm_90a.*undeclared_thing"):
        compile_module(src, (), "sm_90a", use_cache=False)


# -- CUDA header discovery ---------------------------------------------------------------------


@pytest.fixture
def fresh_header_search():
    """find_cuda_headers forgets its answer before and after the test."""
    find_cuda_headers.cache_clear()
    yield
    find_cuda_headers.cache_clear()


def test_cuda_headers_found():
    found = find_cuda_headers()
    assert found.include_dir is not None, found.report()
    for header in ("mma.h", "crt/mma.h", "cuda_pipeline.h", *REQUIRED):
        assert (found.include_dir / header).is_file(), header
    assert found.report().splitlines()[0] == f"CUDA headers: {found.include_dir} ({found.found_via})"


TINY = """\
#include <mma.h>
#include <cuda_pipeline.h>

template <int N>
__global__ void tiny(float* out) {
    __shared__ float s[N];
    __pipeline_memcpy_async(&s[threadIdx.x], &out[threadIdx.x], sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
    out[threadIdx.x] = s[threadIdx.x] + float(sizeof(Acc));
}
"""


def test_source_using_mma_and_pipeline_headers_compiles(tmp_path):
    src = tmp_path / "tiny.cu"
    src.write_text(TINY)
    module = compile_module(src, ["tiny<32>"], "sm_90a", use_cache=False)
    assert module.cubin[:4] == b"\x7fELF"
    mangled = module.symbols["tiny<32>"]
    res = parse_ptxas_log(module.log)
    assert mangled in res and res[mangled].smem_bytes == 4 * 32


@pytest.mark.parametrize(
    "present, lacking",
    [
        (("mma.h", "cuda_pipeline.h"), "cuda_runtime.h, crt/mma.h, cuda_fp16.h"),
        (("mma.h", "cuda_pipeline.h", "cuda_runtime.h", "cuda_fp16.h"), "crt/mma.h"),  # like CuPy's folder
    ],
    ids=["only-mma-and-pipeline", "all-but-crt"],
)
def test_folder_without_crt_mma_is_passed_over(tmp_path, monkeypatch, fresh_header_search, present, lacking):
    real = find_cuda_headers().include_dir
    assert real is not None
    find_cuda_headers.cache_clear()
    fake = tmp_path / "fake-include"
    fake.mkdir()
    for name in present:
        (fake / name).write_text("// fake\n")
    monkeypatch.setenv("GEMMLAB_CUDA_INCLUDE", str(fake))
    found = find_cuda_headers()
    assert found.include_dir == real
    assert found.found_via != "GEMMLAB_CUDA_INCLUDE"
    assert (str(fake), f"lacks {lacking}") in found.rejected
    assert f"  passed over {fake}: lacks {lacking}" in found.report().splitlines()


def test_env_folder_with_every_header_wins(monkeypatch, fresh_header_search):
    real = find_cuda_headers().include_dir
    find_cuda_headers.cache_clear()
    monkeypatch.setenv("GEMMLAB_CUDA_INCLUDE", str(real))
    found = find_cuda_headers()
    assert found.include_dir == real
    assert found.found_via == "GEMMLAB_CUDA_INCLUDE"
    assert found.rejected == ()


def test_env_folder_that_does_not_exist_is_reported(tmp_path, monkeypatch, fresh_header_search):
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("GEMMLAB_CUDA_INCLUDE", str(missing))
    found = find_cuda_headers()
    assert found.include_dir is not None
    assert (str(missing), "no such folder") in found.rejected


def test_headers_split_over_two_folders_are_found_together(tmp_path, monkeypatch, fresh_header_search):
    """CUDA 12's wheels keep crt/ beside nvcc, away from the runtime headers: a
    candidate of two folders that together hold every header is accepted, and
    both go on the include path."""
    runtime, nvcc = tmp_path / "cuda_runtime" / "include", tmp_path / "cuda_nvcc" / "include"
    (nvcc / "crt").mkdir(parents=True)
    runtime.mkdir(parents=True)
    for name in ("cuda_runtime.h", "mma.h", "cuda_pipeline.h", "cuda_fp16.h"):
        (runtime / name).write_text("// fake\n")
    (nvcc / "crt" / "mma.h").write_text("// fake\n")
    monkeypatch.setenv("GEMMLAB_CUDA_INCLUDE", f"{runtime}{os.pathsep}{nvcc}")
    found = find_cuda_headers()
    assert found.found_via == "GEMMLAB_CUDA_INCLUDE"
    assert found.include_dirs == (runtime, nvcc)
    assert found.include_dir == runtime
    assert found.locate("crt/mma.h") == nvcc / "crt" / "mma.h"
    assert found.report().splitlines()[0] == f"CUDA headers: {runtime} + {nvcc} (GEMMLAB_CUDA_INCLUDE)"
    # Either folder alone is refused, naming what it lacks.
    find_cuda_headers.cache_clear()
    monkeypatch.setenv("GEMMLAB_CUDA_INCLUDE", str(runtime))
    assert (str(runtime), "lacks crt/mma.h") in find_cuda_headers().rejected
