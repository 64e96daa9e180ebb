"""The SASS counters of `gemmlab inspect` against golden kernels (CPU, needs nvdisasm).

tests/golden_sass.cu holds small kernels whose instructions are known: so many
32- and 128-bit global and shared loads, stores, barriers, FFMAs, ldmatrix,
mma.sync, cp.async and wgmma.  They are compiled for every target gemmlab checks, and
the counts of gemmlab.tools.inspect_kernels.sass_facts must equal the known ones exactly.
The SASS forms differ by target (Turing's LDG.E.SYS and LDS.U.128, Ampere's
LDG.E and LDS.128; Hopper pads with never-executed ``@!PT LDS`` lines), so a
pattern that misses one form, or counts padding, fails here.
"""

from pathlib import Path

import pytest

from gemmlab.tools.inspect_kernels import SASS_FACTS, find_disassembler, opcodes, sass_facts
from gemmlab.kernels.spec import KNOWN_TARGETS, arch_cc
from gemmlab.runtime.compile import compile_module, module_sass

GOLDEN = Path(__file__).resolve().parent / "golden_sass.cu"
ARCHES = KNOWN_TARGETS + ("sm_103a",)

# Every counter of each golden kernel; a counter not named is 0.
EXPECTED = {
    "memory_ops": {"LDG.32": 2, "LDG.128": 1, "STS": 2, "BAR": 1, "LDS.32": 1, "LDS.128": 1, "STG.128": 1},
    "fma_chain": {"LDG.32": 3, "FFMA": 16},
    "tensor_ops": {"LDG.32": 4, "STS": 1, "BAR": 1, "LDSM": 2, "LDSM.T": 1, "HMMA": 1},
    "async_copy": {"LDGSTS": 1, "BAR": 1, "LDS.32": 1},  # cp.async: sm_80 and later
    "warpgroup_mma": {"HGMMA": 1},  # wgmma: sm_90a only
}

needs_nvdisasm = pytest.mark.skipif(
    find_disassembler() is None, reason="nvdisasm not found (pip install 'gemmlab[inspect]')"
)


def kernels_for(arch):
    return [
        k for k in EXPECTED if (k != "async_copy" or arch_cc(arch) >= 80) and (k != "warpgroup_mma" or arch == "sm_90a")
    ]


@needs_nvdisasm
@pytest.mark.parametrize("arch", ARCHES)
def test_golden_kernels_count_exactly(arch):
    names = kernels_for(arch)
    module = compile_module(GOLDEN, names, arch)
    sass = module_sass(module)
    for name in names:
        facts = sass_facts(sass[module.symbols[name]])
        want = {key: EXPECTED[name].get(key, 0) for key in SASS_FACTS}
        got = {key: facts[key] for key in SASS_FACTS}
        assert got == want, (arch, name, sass[module.symbols[name]])
        assert facts["instructions"] > sum(want.values())


@needs_nvdisasm
def test_sass_is_cached_beside_the_cubin(monkeypatch):
    """A second module_sass of the same module reads the cache: nvdisasm does not run."""
    from gemmlab.runtime import compile as rt_compile

    module = compile_module(GOLDEN, ["fma_chain"], "sm_86")
    first = module_sass(module)
    monkeypatch.setattr(rt_compile, "_nvdisasm", lambda cubin: pytest.fail("nvdisasm ran on a warm cache"))
    assert module_sass(compile_module(GOLDEN, ["fma_chain"], "sm_86")) == first
    assert rt_compile.is_cached(GOLDEN, ["fma_chain"], "sm_86", sass=True)


def test_opcodes_skip_never_executed_padding_and_keep_guards():
    text = """
        /*00b0*/              @!PT LDS RZ, [RZ] ;
        /*00c0*/                   LDS.U.128 R4, [R0] ;
        /*00d0*/               @P0 LDG.E.SYS R2, [R2] ;
        /*00e0*/              @!P1 LDG.E.128.CONSTANT R8, desc[UR4][R6.64] ;
        /*00f0*/                   FFMA.FTZ R1, R2, R3, R1 ;
        /*0100*/                   LDSM.16.MT88.4 R8, [R3] ;
    """
    assert opcodes(text) == ["LDS.U.128", "LDG.E.SYS", "LDG.E.128.CONSTANT", "FFMA.FTZ", "LDSM.16.MT88.4"]
    facts = sass_facts(text)
    assert (facts["LDS.128"], facts["LDS.32"], facts["LDG.32"], facts["LDG.128"]) == (1, 0, 1, 1)
    assert (facts["FFMA"], facts["LDSM"], facts["LDSM.T"], facts["instructions"]) == (1, 1, 1, 5)


def test_narrow_and_wide_accesses_are_not_32_bit():
    text = "\n".join(
        f"        /*{i:04x}*/                   {op} R2, [R4] ;"
        for i, op in enumerate(["LDS.U16", "LDG.E.64", "LDG.E.U8.CONSTANT", "LDS.64", "STS.U16", "STG.E.64"])
    )
    facts = sass_facts(text)
    assert facts["LDS.32"] == facts["LDG.32"] == facts["LDG.128"] == facts["STG.128"] == 0
    assert facts["STS"] == 1 and facts["instructions"] == 6
