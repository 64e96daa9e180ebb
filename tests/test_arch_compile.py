"""Compile-only checks of each rung's defaults on every target.

One instantiation per dtype (row-major operands, 16-byte aligned, FP32 result),
compiled in parallel processes.  Each must have no spills, fit the target's
registers per block, and show the instructions its rung is about: HMMA on the
tensor-core rungs, LDGSTS (cp.async) only from sm_80, HGMMA on sm_90a only.

sm_90a, the target the project measures on, runs by default: the smoke compile
of every rung.  The other targets belong to the full compile matrix
(`pytest -m compile_matrix`, which CI runs after the default `pytest`), as do
test_compile.py's exhaustive instantiations.  scripts/compile_facts.py records
the wider portable set (and auto's choices) in benchmarks/results/compile-facts.json.
"""

import pytest

from gemmlab.tools.inspect_kernels import EXPECTED_SASS, find_disassembler, sass_facts
from gemmlab.kernels import registry
from gemmlab.kernels.spec import arch_cc
from gemmlab.runtime.compile import compile_in_processes, compile_module, module_sass, parse_ptxas_log
from gemmlab.runtime.device import arch_limits

SMOKE_ARCH = "sm_90a"
MATRIX_ARCHES = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_100a", "sm_120")
ARCHES = [SMOKE_ARCH] + [pytest.param(a, marks=pytest.mark.compile_matrix) for a in MATRIX_ARCHES]


def default_instantiations(spec, arch):
    """(params, problem) per dtype that runs on ``arch``: aligned operands, FP32 result, the rung's
    home layout (NN, or NT for the rungs that read only x @ W.t()-shaped operands)."""
    params, seen = spec.defaults(), {}
    for p, prob in spec.instantiations([params], layouts=[spec.home_layout], arch=arch):
        if prob.aligned16 and prob.out_dtype == "float32":
            seen.setdefault(prob.dtype, (p, prob))
    return list(seen.values())


@pytest.fixture(scope="module")
def modules():
    """arch -> {rung name: module of its default instantiations}, compiled once per target asked for."""
    memo = {}

    def get(arch):
        if arch not in memo:
            jobs = [
                (spec, [spec.name_expression(p, prob) for p, prob in default_instantiations(spec, arch)])
                for spec in registry.ladder()
                if spec.builds_for(arch)
            ]
            compile_in_processes(  # compiled and disassembled side by side, into the kernel cache
                [(spec.source_path, names, arch) for spec, names in jobs], sass=find_disassembler() is not None
            )
            memo[arch] = {spec.name: compile_module(spec.source_path, names, arch) for spec, names in jobs}
        return memo[arch]

    return get


@pytest.mark.parametrize("arch", ARCHES)
def test_defaults_compile_without_spills_and_fit_the_registers(arch, modules):
    regs_per_block = arch_limits(arch).regs_per_block
    built = modules(arch)
    for spec in registry.ladder():
        if not spec.builds_for(arch):
            assert spec.name not in built
            continue
        module = built[spec.name]
        res = parse_ptxas_log(module.log)
        for p, prob in default_instantiations(spec, arch):
            r = res[module.symbols[spec.name_expression(p, prob)]]
            threads = spec.launch(p, prob).block[0]
            assert r.spill_bytes == 0 and r.stack_bytes == 0, (spec.name, arch)
            assert r.registers * threads <= regs_per_block, (spec.name, arch, r.registers, threads)


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not found (pip install 'gemmlab[inspect]')")
@pytest.mark.parametrize("arch", ARCHES)
def test_defaults_have_the_instructions_of_their_rung(arch, modules):
    cp_async = arch_cc(arch) >= 80
    built = modules(arch)
    for spec in registry.ladder():
        if not spec.builds_for(arch):
            continue
        module = built[spec.name]
        sass = module_sass(module)
        # the rungs that exist on sm_90a only: warpgroup MMA (QGMMA for FP8)
        hopper = bool({"HGMMA", "QGMMA"} & set(EXPECTED_SASS.get(spec.name, ())))
        for p, prob in default_instantiations(spec, arch):
            facts = sass_facts(sass[module.symbols[spec.name_expression(p, prob)]])
            assert (facts["HGMMA"] + facts.get("QGMMA", 0) > 0) == hopper, (spec.name, arch, facts)
            for op in EXPECTED_SASS.get(spec.name, ()):
                assert (facts[op] > 0) == (op != "LDGSTS" or cp_async), (spec.name, arch, prob.dtype, op, facts)
            if spec.family in ("tensor", "ec") and not hopper:
                assert facts["HMMA"] > 0, (spec.name, arch)
