"""Compile-only kernel inspection (no GPU needed): registers, shared memory,
spills, and the SASS instruction facts that explain each rung's speed."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field

from ..kernels import registry
from ..runtime.compile import compile_module, parse_ptxas_log

# Instruction classes worth counting.  Each SASS line's opcode is split into its base
# and modifiers (LDG.E.128.CONSTANT.SYS -> LDG with E, 128, CONSTANT, SYS); a class is a
# base opcode, an access width where it matters, and modifiers it must carry.  The
# forms differ between targets (Turing writes LDS.U.128 and LDG.E.SYS, Ampere and later
# LDS.128 and LDG.E), so matching on base and width counts the same thing on every one;
# tests/test_sass_facts.py checks it against golden kernels on sm_75 .. sm_120.
# (base opcodes, width in bits or None for any, modifiers required)
SASS_FACTS = {
    "FFMA": (("FFMA",), None, ()),
    "LDG.128": (("LDG",), 128, ()),
    "LDG.32": (("LDG",), 32, ()),
    "LDS.128": (("LDS",), 128, ()),
    "LDS.32": (("LDS",), 32, ()),
    "STS": (("STS",), None, ()),
    "STG.128": (("STG",), 128, ()),
    "BAR": (("BAR",), None, ("SYNC",)),
    "LDL/STL (local)": (("LDL", "STL"), None, ()),
    "HMMA": (("HMMA",), None, ()),
    "LDSM": (("LDSM",), None, ()),  # ldmatrix
    "LDSM.T": (("LDSM",), None, ("MT88",)),  # ldmatrix .trans
    "LDGSTS": (("LDGSTS",), None, ()),  # cp.async
    "HGMMA": (("HGMMA",), None, ()),  # wgmma
    "QGMMA": (("QGMMA",), None, ()),  # wgmma with FP8 operands
}
# Width modifiers of loads and stores; an access without one moves 32 bits.
_WIDTHS = {"U8": 8, "S8": 8, "8": 8, "U16": 16, "S16": 16, "16": 16, "64": 64, "128": 128}
# One SASS instruction: its address comment, an optional guard predicate, the opcode.
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")


def find_disassembler() -> str | None:
    """nvdisasm from NVIDIA's wheel (cuda.pathfinder) or the PATH."""
    from ..runtime.compile import find_nvdisasm

    return find_nvdisasm()


def disassemble(cubin: bytes) -> dict[str, str]:
    """SASS text per mangled kernel name, or {} without nvdisasm."""
    from ..runtime.compile import disassemble_cubin

    return disassemble_cubin(cubin)


def opcodes(sass: str) -> list[str]:
    """The opcodes of the instructions in ``sass`` that can execute: those guarded by
    ``@!PT`` (never true; ptxas pads with them) are left out."""
    out = []
    for m in _INSTRUCTION.finditer(sass):
        if m.group(1) and m.group(1).strip() in ("@!PT", "@!UPT"):
            continue
        out.append(m.group(2))
    return out


def sass_facts(sass: str) -> dict[str, int]:
    """Counts of the SASS_FACTS classes, and of all instructions, in one kernel's SASS."""
    ops = opcodes(sass)
    counts = dict.fromkeys(SASS_FACTS, 0)
    for op in ops:
        base, *mods = op.split(".")
        width = next((_WIDTHS[m] for m in mods if m in _WIDTHS), 32)
        for key, (bases, want_width, required) in SASS_FACTS.items():
            if base in bases and (want_width is None or want_width == width) and all(r in mods for r in required):
                counts[key] += 1
    counts["instructions"] = len(ops)
    return counts


@dataclass
class KernelReport:
    kernel: str
    name_expression: str
    arch: str
    registers: int
    smem_bytes: int
    stack_bytes: int
    spill_bytes: int
    sass: dict = field(default_factory=dict)
    refused: str = ""  # why the kernel does not run on the target (nothing was compiled)

    def as_dict(self) -> dict:
        return asdict(self)


def rungs_for(arch: str) -> list[str]:
    """The rungs that run on ``arch``, in ladder order."""
    return [s.name for s in registry.ladder() if s.builds_for(arch)]


def _specs(arch: str, kernels) -> list:
    """The specs to inspect: those named (ValueError for an unknown name, with the list)
    or every rung; ValueError where no rung runs on ``arch`` at all."""
    from ..kernels.spec import arch_cc

    arch_cc(arch)  # ValueError for something that is not a target such as sm_86
    runs = rungs_for(arch)
    if not runs:
        why = registry.ladder()[0].why_not_on(arch)
        raise ValueError(
            f"no kernel runs on {arch}: {why}; the ladder targets sm_75 to sm_120 (e.g. --arch sm_86, sm_90a)"
        )
    if not kernels:
        return registry.ladder()
    names = [k.strip() for k in kernels if k.strip()]
    if "auto" in names:
        raise ValueError(
            "'auto' is not one kernel: matmul's kernel='auto' picks a rung per call; name "
            f"rungs ({', '.join(s.name for s in registry.ladder())}) or leave --kernel out "
            "for all of them"
        )
    return [registry.get(k) for k in dict.fromkeys(names)]


SPLIT_FROM = 16  # a kernel's instantiations from which they compile as several modules


def _modules_of(names: list, jobs: int | None) -> list[list]:
    """``names`` (one kernel's instantiations) as the modules to compile: one, or for
    SPLIT_FROM or more as many modules of alike size as processes, so that every process has
    a share (``--all-configs``: a hundred or more instantiations of one kernel)."""
    procs = jobs or os.cpu_count() or 1
    if len(names) < SPLIT_FROM or procs < 2:
        return [names]
    size = -(-len(names) // procs)
    return [names[i : i + size] for i in range(0, len(names), size)]


def inspect_kernels(
    arch: str = "sm_90a",
    kernels=None,
    all_configs: bool = False,
    with_sass: bool = True,
    ops=("NN",),
    jobs: int | None = None,
    progress=None,
) -> list[KernelReport]:
    """Compile the chosen kernels (default: every rung; tile parameters the defaults,
    or every legal configuration) in the operand layouts ``ops`` ("NN", "TN", "NT",
    "TT") for ``arch`` and report their resources and SASS facts.  A kernel that does
    not run on ``arch`` gets a report saying why (``refused``), compiled not.

    Modules missing from the disk cache compile in ``jobs`` processes (default one per
    CPU), their SASS stored beside them; ``progress(message)`` hears how far it got."""
    from ..runtime.compile import compile_in_processes, is_cached, module_sass

    reports: list[KernelReport] = []
    specs = _specs(arch, kernels)
    sets = []  # (spec, name expressions) of each module to compile
    for spec in specs:
        why = spec.why_not_on(arch)
        if why:
            continue
        configs = spec.configurations() if all_configs else [spec.defaults()]
        names = [
            spec.name_expression(p, inst) for p, inst in spec.instantiations(configs, layouts=list(ops), arch=arch)
        ]
        sets += [(spec, chunk) for chunk in _modules_of(list(dict.fromkeys(names)), jobs)]
    missing = [
        (spec.source_path, names, arch)
        for spec, names in sets
        if not is_cached(spec.source_path, names, arch, sass=with_sass)
    ]
    count = sum(len(n) for _, n, _ in missing)
    if progress and (len(missing) > 1 or count > 4):  # a few kernels take a second or two: no line
        progress(
            f"compiling {count} kernel{'s' * (count > 1)} in {len(missing)} module{'s' * (len(missing) > 1)} for {arch}"
        )
    if len(missing) > 1:  # one module compiles in this process, below
        compile_in_processes(missing, jobs=jobs, log=progress, sass=with_sass)
    by_name = {spec.name: [] for spec, _ in sets}
    for spec, names in sets:
        module = compile_module(spec.source_path, names, arch)
        res = parse_ptxas_log(module.log)
        sass = module_sass(module) if with_sass else {}
        for n in names:
            mangled = module.symbols[n]
            r = res[mangled]
            by_name[spec.name].append(
                KernelReport(
                    spec.name,
                    n,
                    arch,
                    r.registers,
                    r.smem_bytes,
                    r.stack_bytes,
                    r.spill_bytes,
                    sass_facts(sass[mangled]) if mangled in sass else {},
                )
            )
    for spec in specs:  # ladder (or the caller's) order, refusals in place
        why = spec.why_not_on(arch)
        if why:
            reports.append(KernelReport(spec.name, "", arch, 0, 0, 0, 0, refused=why))
        else:
            reports.extend(by_name[spec.name])
    return reports


# -- the portable set: what runs on each target ------------------------------------------

# Shapes (M, N, K, batch) over which portable_configs asks kernel="auto" for its choice.
AUTO_SHAPES = tuple(
    (m, n, k, b) for m in (64, 1000, 4096) for n in (64, 2048, 8192) for k in (64, 4096) for b in (1, 8)
)
AUTO_DTYPES = (
    ("float32", "float32"),
    ("float16", "float16"),
    ("bfloat16", "float32"),
    ("tf32", "float32"),
    ("fp16_ec", "float32"),
    ("tf32_ec", "float32"),
)
# The instruction family each rung is about, by SASS opcode (see SASS_FACTS), and
# whether it appears only where the target has it: LDGSTS is cp.async (sm_80+),
# HGMMA wgmma (sm_90a), QGMMA its FP8 form.
EXPECTED_SASS = {
    "wmma": ("HMMA",),
    "wmma_warptile": ("HMMA",),
    "mma_pipelined": ("HMMA", "LDSM", "LDGSTS"),
    "wgmma_tma": ("HGMMA",),
    "wgmma_specialized": ("HGMMA",),
    "wgmma_persistent": ("HGMMA",),
    "wgmma": ("HGMMA",),
    "wgmma_fp8": ("QGMMA",),
    "grouped": ("HGMMA",),
    "grouped_wgrad": ("HGMMA",),
    "ec_wmma": ("HMMA", "LDGSTS"),
    "ec_wgmma": ("HGMMA",),
    "pipelined": ("LDGSTS",),
    "gemv": ("FFMA",),
    "outer": ("STG.128",),
    "gemv_mma": ("HMMA", "LDG.128"),
    "batched_small": ("FFMA", "LDS.128"),
    "batched_small_mma": ("HMMA",),
}


def portable_configs(arch: str, sm_count: int = 84) -> dict[str, list[dict]]:
    """Per kernel that runs on ``arch``: its defaults and every configuration
    ``kernel="auto"`` picks there over AUTO_SHAPES x AUTO_DTYPES (fitted to the
    target's shared memory by the planner), without split-K where it is a launch shape
    (rung 8); wgmma's split is an instantiation of its own, kept."""
    from ..core import planner

    out: dict[str, dict] = {s.name: {} for s in registry.ladder() if s.builds_for(arch)}

    def add(spec, params):
        full = spec.resolve(params)
        plain = spec.resolve({k: v for k, v in params.items() if k != spec.split_k_param})
        probe = spec.variants[0]
        if spec.name_expression(plain, probe) != spec.name_expression(full, probe):
            plain = full
        out[spec.name].setdefault(spec.name_expression(plain, probe), plain)

    for name in out:
        add(registry.get(name), registry.get(name).defaults())
    for m, n, k, b in AUTO_SHAPES:
        for dt, odt in AUTO_DTYPES:
            try:
                p = planner.plan("auto", m, n, k, dtype=dt, out_dtype=odt, arch=arch, sm_count=sm_count, batch=b)
            except ValueError:  # no rung for this dtype here (e.g. 16-bit on sm_75)
                continue
            add(p.spec, p.params)
    return {name: list(configs.values()) for name, configs in out.items()}


def portable_reports(arch: str, jobs: int | None = None) -> list[KernelReport]:
    """Compile the portable set of ``arch`` (each rung's home layout, every dtype variant),
    the modules in parallel processes, and report each instantiation."""
    from ..runtime.compile import compile_in_processes, module_sass

    sets = []
    for name, configs in portable_configs(arch).items():
        spec = registry.get(name)
        names = list(
            dict.fromkeys(
                spec.name_expression(p, inst)
                for p, inst in spec.instantiations(configs, layouts=[spec.home_layout], arch=arch)
            )
        )
        sets.append((spec, names))
    compile_in_processes([(spec.source_path, names, arch) for spec, names in sets], jobs=jobs, sass=True)
    reports = []
    for spec, names in sets:
        module = compile_module(spec.source_path, names, arch)
        res = parse_ptxas_log(module.log)
        sass = module_sass(module)
        for n in names:
            r = res[module.symbols[n]]
            facts = sass_facts(sass[module.symbols[n]]) if module.symbols[n] in sass else {}
            reports.append(
                KernelReport(spec.name, n, arch, r.registers, r.smem_bytes, r.stack_bytes, r.spill_bytes, facts)
            )
    return reports


def format_reports(reports: list[KernelReport]) -> str:
    cols = ["FFMA", "LDG.128", "LDG.32", "LDS.128", "LDS.32", "STG.128", "LDL/STL (local)"]
    head = f"{'kernel instantiation':58s} {'regs':>4s} {'smem':>6s} {'spill':>5s} " + " ".join(
        f"{c[:7]:>7s}" for c in cols
    )
    lines = [head, "-" * len(head)]
    for r in reports:
        if r.refused:
            lines.append(f"{r.kernel}: does not run on {r.arch}: {r.refused}")
            continue
        facts = " ".join(f"{r.sass.get(c, '-'):>7}" for c in cols)
        lines.append(f"{r.name_expression[:58]:58s} {r.registers:4d} {r.smem_bytes:6d} {r.spill_bytes:5d} {facts}")
    if any(r.refused for r in reports):
        arch = reports[0].arch
        lines.append(f"kernels that run on {arch}: {', '.join(rungs_for(arch))}")
    if any(not r.refused and not r.sass for r in reports):
        lines.append("(no SASS columns: nvdisasm not found; pip install 'gemmlab[inspect]')")
    return "\n".join(lines)
