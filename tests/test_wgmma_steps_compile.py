"""wgmma's steps compiled for sm_90a (NVRTC, no GPU): every instantiation builds without
spills, fits the registers of its block, and its SASS shows its step's idea and nothing of
a later step's:

  all three   HGMMA.64xBNx16 of the instantiation's type (transpose bits as the layout
              says), 4 a K-step, no HMMA; TMA loads (UTMALDG) and mbarrier waits; C stored
              from the registers (STG), no TMA store (UTMASTG: the rung's own epilogue)
  4a          no setmaxnreg (every warpgroup computes), no cluster multicast
  4b          setmaxnreg honoured (USETMAXREG, the producer's and the consumers'), no multicast
  4c          as 4b, and TMA multicast of B with CLUSTER = 2 only

By default: each step's defaults in every variant (row-major), and in every layout for one
variant, and step c's clusters of two; the whole matrix (every configuration x variant x
layout, 640 instantiations) with `pytest -m compile_matrix`."""

import re

import pytest

from gemmlab.kernels import registry
from gemmlab.kernels.spec import LAYOUTS, Problem
from gemmlab.runtime.compile import compile_in_processes, compile_module, module_sass
from gemmlab.runtime.device import arch_limits
from gemmlab.tools.inspect_kernels import find_disassembler, sass_facts

ARCH = "sm_90a"
STEPS = ("wgmma_tma", "wgmma_specialized", "wgmma_persistent")
SASS_TYPE = {"float16": "", "bfloat16": ".BF16"}


def _sample(spec) -> dict:
    """name expression -> (params, problem): the default set (module docstring)."""
    d = spec.defaults()
    out = {}
    for prob in spec.variants:
        out.setdefault(spec.name_expression(d, prob), (d, prob))
    home = next(v for v in spec.variants if (v.dtype, v.out_dtype) == ("bfloat16", "bfloat16"))
    configs = [d] + ([{**d, "CLUSTER": 2}] if "CLUSTER" in d else [])
    for p in configs:
        for op_a, op_b in LAYOUTS:
            prob = home.with_layout(op_a, op_b)
            out.setdefault(spec.name_expression(p, prob), (p, prob))
    return out


def _every(spec) -> dict:
    return {spec.name_expression(p, prob): (p, prob) for p, prob in spec.instantiations()}


def _check(pick, ladder_modules: bool = False) -> None:
    """Compile what ``pick(spec)`` names for each step (in parallel processes first, into the
    kernel cache; a module per step and variant) and check each instantiation.
    ``ladder_modules``: those that test_compile.py's matrix compiles too go in its modules
    (matrix_chunks), which the kernel cache then hands back rather than compiling them twice."""
    groups: dict = {}
    for name in STEPS:
        spec = registry.get(name)
        picked = pick(spec)
        if ladder_modules:
            from test_compile import matrix_chunks

            for i, chunk in enumerate(matrix_chunks(spec, ARCH)):
                groups[name, "ladder", i] = {expr: picked.pop(expr) for expr in chunk}
        for expr, (params, prob) in picked.items():
            groups.setdefault((name, prob.dtype, prob.out_dtype), {})[expr] = (params, prob)
    compile_in_processes(
        [(registry.get(k[0]).source_path, list(g), ARCH) for k, g in groups.items()],
        sass=find_disassembler() is not None,  # the SASS read too, side by side
    )
    for (name, _, _), group in groups.items():
        _check_module(registry.get(name), group)


def _check_module(spec, found: dict) -> None:
    module = compile_module(spec.source_path, list(found), ARCH)
    # No ptxas warning: setmaxnreg honoured (C7508 where the roles are not one if / else), no
    # wgmma serialised.
    assert "warning" not in module.log.lower(), module.log
    sass = module_sass(module) if find_disassembler() is not None else {}
    regs_per_block = arch_limits(ARCH).regs_per_block
    for name, (p, prob) in found.items():
        res = module.resources(name)
        threads = spec.launch(p, prob).block[0]
        assert res is not None and res.spill_bytes == 0 and res.stack_bytes == 0 and res.smem_bytes == 0, (name, res)
        assert 0 < res.registers <= 255 and res.registers * threads <= regs_per_block, (name, res.registers, threads)
        if not sass:
            continue
        text = sass[module.symbols[name]]
        facts = sass_facts(text)
        want = f"HGMMA.64x{p['BN']}x16.F32{SASS_TYPE[prob.dtype]}"
        gmma = re.findall(r"\bHGMMA\.[0-9x]+\.[A-Z0-9.]+", text)
        assert gmma and set(gmma) == {want} and len(gmma) % 4 == 0 and facts["HMMA"] == 0, (name, sorted(set(gmma)))
        # an MN-major operand through the transpose bit: A 'T', B 'N'
        lines = [ln for ln in text.splitlines() if "HGMMA" in ln]
        assert all(("tnspA" in ln) == (prob.op_a == "T") and ("tnspB" in ln) == (prob.op_b == "N") for ln in lines)
        assert re.search(r"UTMALDG\.3D", text) and "SYNCS.PHASECHK" in text, name
        assert "UTMASTG" not in text and re.search(r"\bSTG\.E", text) and facts["LDL/STL (local)"] == 0, name
        specialised = spec.name != "wgmma_tma"
        assert ("USETMAXREG.DEALLOC" in text and "USETMAXREG.TRY_ALLOC" in text) == specialised, name
        assert ("USETMAXREG" in text) == specialised, name
        assert ("MULTICAST" in text) == (p.get("CLUSTER", 1) == 2), name


def test_sample_size():
    """Per step: 4 variants at the defaults, 3 more layouts of one; step c's clusters of two in 4."""
    assert [len(_sample(registry.get(n))) for n in STEPS] == [7, 7, 11]
    assert sum(len(_every(registry.get(n))) for n in STEPS) == 640


def test_defaults_compile_to_their_step():
    _check(_sample)


@pytest.mark.compile_matrix
def test_every_instantiation_compiles_to_its_step():
    _check(_every, ladder_modules=True)


def test_default_ring_fits_as_the_rung_does():
    """The steps' default ring is the rung's (4 x (128 + 256) rows of 128 bytes): 193 KiB of
    shared memory a block, 1 block an SM, beside the rung's 32 KiB of epilogue staging."""
    from gemmlab.kernels.tensor.wgmma import wgmma_smem

    smem = {
        n: registry.get(n).launch(registry.get(n).defaults(), Problem(4096, 4096, 4096, True)).smem_bytes for n in STEPS
    }
    assert set(smem.values()) == {4 * 384 * 128 + 64 + 1024}
    assert wgmma_smem(registry.get("wgmma").defaults()) - smem["wgmma_tma"] == 2 * 2 * 8192
