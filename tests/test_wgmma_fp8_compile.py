"""The FP8 rung compiled for sm_90a (NVRTC, no GPU): every instantiation builds without spills
and its SASS multiplies with the FP8 wgmma of its types (QGMMA.64xBNx32.F32.<A>.<B>: the FP8
form of HGMMA), four a K-step of 128 values, and with no 16-bit HGMMA.

By default: every tile in two variants (e4m3 x e4m3 -> bfloat16, outer and block scales), at
the default promotion and without promotion, every promotion at the default tile, and every
variant at the defaults.  `pytest -m compile_matrix`: every configuration in the four variants of
e4m3 x e4m3 (each output type, each scaling kind) -- the other pairs of FP8 types change only the
wgmma's type suffix (the same registers, no spills, where compared: benchmarks/NOTES.md) and are
compiled at the defaults; GEMMLAB_FULL_COMPILE_CHECK=1 compiles every configuration x every
variant (736 instantiations)."""

import os
import re

import pytest

from gemmlab.kernels import registry
from gemmlab.runtime.compile import compile_in_processes, compile_module, module_sass
from gemmlab.tools.inspect_kernels import find_disassembler, opcodes

SPEC = registry.get("wgmma_fp8")
CHUNK = 40  # instantiations a module at most (the row-scaled variant's 72 configurations: two)
ARCH = "sm_90a"
SASS_TYPE = {"float8_e4m3fn": "E4M3", "float8_e5m2": "E5M2"}

needs_nvdisasm = pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not found")


def _sample() -> dict:
    """name expression -> (params, problem): the default set (module docstring)."""
    out = {}
    d = SPEC.defaults()
    home = [v for v in SPEC.variants if (v.dtype, v.dtype_b, v.out_dtype) == ("float8_e4m3fn",) * 2 + ("bfloat16",)]
    for params in SPEC.configurations():
        tile = all(params[k] == d[k] for k in params if k != "PROMOTE")
        for prob in home:  # every tile at the default promotion and at none; every promotion at the default tile
            if tile or params["PROMOTE"] in (0, d["PROMOTE"]):
                out.setdefault(SPEC.name_expression(params, prob), (params, prob))
    for prob in SPEC.variants:
        out.setdefault(SPEC.name_expression(d, prob), (d, prob))
    return out


def _every() -> dict:
    return {SPEC.name_expression(p, prob): (p, prob) for p, prob in SPEC.instantiations()}


def _matrix() -> dict:
    """The compile matrix's set (module docstring): the sample, and every configuration of the
    e4m3 x e4m3 variants; with GEMMLAB_FULL_COMPILE_CHECK=1 every instantiation."""
    if os.environ.get("GEMMLAB_FULL_COMPILE_CHECK") == "1":
        return _every()
    e4m3 = {n: pp for n, pp in _every().items() if pp[1].dtype == pp[1].dtype_b == "float8_e4m3fn"}
    return {**_sample(), **e4m3}


def _check(found: dict) -> None:
    # One module per variant, compiled (and its SASS read) in parallel processes first, into the
    # kernel cache.
    groups: dict = {}
    for name, (params, prob) in found.items():
        groups.setdefault(prob, {})[name] = (params, prob)
    # modules of at most CHUNK, so that the processes get alike shares
    groups = {
        (prob, i): dict(list(g.items())[i : i + CHUNK]) for prob, g in groups.items() for i in range(0, len(g), CHUNK)
    }
    compile_in_processes(
        [(SPEC.source_path, list(g), ARCH) for g in groups.values()], sass=find_disassembler() is not None
    )
    for group in groups.values():
        _check_module(group)


def _check_module(found: dict) -> None:
    names = list(found)
    module = compile_module(SPEC.source_path, names, ARCH)
    sass = module_sass(module) if find_disassembler() is not None else {}
    # setmaxnreg honoured: ptxas drops it, with warning C7508, where the roles are not one if/else.
    assert "C7508" not in module.log and "setmaxnreg" not in module.log.lower(), module.log
    for name, (params, prob) in found.items():
        res = module.resources(name)
        assert res is not None and res.spill_store_bytes == 0 and res.spill_load_bytes == 0, (name, res)
        if not sass:
            continue
        text = sass[module.symbols[name]]
        # The wgmma rung's Hopper path: TMA loads, mbarrier waits, registers moved between roles.
        assert re.search(r"UTMALDG\.3D", text) and "SYNCS.PHASECHK" in text, name
        assert "USETMAXREG.DEALLOC" in text and "USETMAXREG.TRY_ALLOC" in text, name
        assert "HMMA" not in opcodes(text), name
        # A 256-wide tile that promotes runs two wgmma groups of N = 128 a K-step.
        halves = params["BN"] == 256 and (params["PROMOTE"] > 0 or prob.scaling == "block")
        wn = params["BN"] // 2 if halves else params["BN"]
        want = f"QGMMA.64x{wn}x32.F32.{SASS_TYPE[prob.dtype]}.{SASS_TYPE[prob.dtype_b]}"
        gmma = re.findall(r"\b[A-Z]GMMA\.[0-9x]+\.[A-Z0-9.]+", text)
        assert gmma and all(op == want for op in gmma), (name, sorted(set(gmma)))
        # One K-step of 128 values: 4 wgmmas of K = 32, unrolled.
        assert len(gmma) % 4 == 0, (name, len(gmma))


def test_every_instantiation_count():
    """Every configuration x every variant, less the block-scaled ones that differ only in
    PROMOTE (block scales promote at every K-step)."""
    configs = SPEC.configurations()
    blocks = len({tuple(v for k, v in c.items() if k != "PROMOTE") for c in configs})
    assert len(_every()) == len(configs) * 8 + blocks * 8 == 736


@needs_nvdisasm
def test_sample_compiles_to_fp8_wgmma():
    _check(_sample())


@pytest.mark.compile_matrix
@needs_nvdisasm
def test_the_matrix_compiles_to_fp8_wgmma():
    _check(_matrix())
