"""The grouped rungs compiled for sm_90a (NVRTC, no GPU): grouped (rung 6) and grouped_wgrad (rung
7, its weights' gradient).  Every instantiation builds without spills or ptxas's serialisation
warning, and its SASS multiplies with the 16-bit wgmma (HGMMA.64xBNx16, four a K-step of 64
values, no HMMA), loads through TMA (3-D copies) and waits on mbarriers, with the registers moved
between the roles (setmaxnreg honoured), and stores C from the threads (no TMA store).

By default: each rung's defaults in every variant and layout, and every other configuration in
bfloat16 (grouped: with B transposed, a MoE layer's x @ W_e.t()); the whole matrix (grouped:
every configuration x both types x both layouts, 36 instantiations; grouped_wgrad: x both types,
18) with `pytest -m compile_matrix`."""

import re

import pytest

from gemmlab.kernels import registry
from gemmlab.runtime.compile import compile_in_processes, compile_module, module_sass
from gemmlab.tools.inspect_kernels import find_disassembler, opcodes

SPECS = [registry.get("grouped"), registry.get("grouped_wgrad")]
ARCH = "sm_90a"
SASS_TYPE = {"float16": "", "bfloat16": ".BF16"}  # HGMMA names BF16 operands only

needs_nvdisasm = pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not found")


def _sample(spec) -> dict:
    """name expression -> (params, problem): the default set (module docstring)."""
    out = {}
    for params, prob in spec.instantiations(configs=[spec.defaults()], layouts=spec.layouts):
        out[spec.name_expression(params, prob)] = (params, prob)
    for params, prob in spec.instantiations(layouts=spec.layouts[-1:]):
        if prob.dtype == "bfloat16":
            out.setdefault(spec.name_expression(params, prob), (params, prob))
    return out


def _every(spec) -> dict:
    return {spec.name_expression(p, prob): (p, prob) for p, prob in spec.instantiations(layouts=spec.layouts)}


def _check(spec, found: dict) -> None:
    groups: dict = {}
    for name, (params, prob) in found.items():
        groups.setdefault((prob.dtype, prob.op_b), {})[name] = (params, prob)
    # compiled and disassembled side by side first, into the kernel cache
    compile_in_processes(
        [(spec.source_path, list(g), ARCH) for g in groups.values()], sass=find_disassembler() is not None
    )
    for group in groups.values():
        _check_module(spec, group)


def _check_module(spec, found: dict) -> None:
    module = compile_module(spec.source_path, list(found), ARCH)
    sass = module_sass(module) if find_disassembler() is not None else {}
    # setmaxnreg honoured (C7508), and no wgmma serialised for a wait on a divergent path (C7518).
    assert "C7508" not in module.log and "C7518" not in module.log, module.log
    for name, (params, prob) in found.items():
        res = module.resources(name)
        assert res is not None and res.spill_store_bytes == 0 and res.spill_load_bytes == 0, (name, res)
        if not sass:
            continue
        text = sass[module.symbols[name]]
        assert re.search(r"UTMALDG\.3D", text) and "SYNCS.PHASECHK" in text, name
        assert "USETMAXREG.DEALLOC" in text and "USETMAXREG.TRY_ALLOC" in text, name
        assert "HMMA" not in opcodes(text), name
        want = f"HGMMA.64x{params['BN']}x16.F32{SASS_TYPE[prob.dtype]}"
        gmma = re.findall(r"\b[A-Z]GMMA\.[0-9x]+\.[A-Z0-9.]+", text)
        assert gmma and all(op == want for op in gmma), (name, sorted(set(gmma)))
        assert len(gmma) % 4 == 0, (name, len(gmma))  # one K-step: 4 wgmmas of K = 16, unrolled
        # No TMA store: C goes out through the threads' masked stores (STG), never UTMASTG.
        assert "UTMASTG" not in text and "STG" in text, name


def test_every_instantiation_count():
    grouped, wgrad = SPECS
    assert len(_every(grouped)) == len(grouped.configurations()) * 2 * 2 == 36
    assert len(_sample(grouped)) == 4 + len(grouped.configurations()) - 1
    assert len(_every(wgrad)) == len(wgrad.configurations()) * 2 == 18
    assert len(_sample(wgrad)) == 2 + len(wgrad.configurations()) - 1


@needs_nvdisasm
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_sample_compiles_to_hgmma(spec):
    _check(spec, _sample(spec))


@pytest.mark.compile_matrix
@needs_nvdisasm
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_instantiation_compiles_to_hgmma(spec):
    _check(spec, _every(spec))
