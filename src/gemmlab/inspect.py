"""Compile-only kernel inspection (no GPU needed): registers, shared memory,
spills, and the SASS instruction facts that explain each rung's speed."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .kernels import registry
from .runtime.compile import compile_module, parse_ptxas_log

# Instruction classes worth counting, by SASS opcode prefix.
SASS_FACTS = {
    "FFMA": r"FFMA\b",
    "LDG.128": r"LDG\.E\.128",
    "LDG.32": r"LDG\.E(?:\.CONSTANT)?\s",
    "LDS.128": r"LDS\.128",
    "LDS.32": r"LDS\s",
    "STS": r"STS",
    "STG.128": r"STG\.E\.128",
    "BAR": r"BAR\.SYNC",
    "LDL/STL (local)": r"\b(?:LDL|STL)\b",
    "HMMA": r"\bHMMA\b",
    "LDSM": r"\bLDSM\b",            # ldmatrix (.MT88: the transposing form)
    "LDSM.T": r"\bLDSM\.16\.MT88",
    "LDGSTS": r"\bLDGSTS\b",        # cp.async
    "HGMMA": r"\bHGMMA\b",
}


def find_disassembler() -> str | None:
    """nvdisasm from NVIDIA's wheel (cuda.pathfinder) or the PATH."""
    try:
        import cuda.pathfinder as pf
        found = pf.find_nvidia_binary_utility("nvdisasm")
        if found:
            return str(found)
    except Exception:
        pass
    return shutil.which("nvdisasm")


def disassemble(cubin: bytes) -> dict[str, str]:
    """SASS text per mangled kernel name, or {} without nvdisasm."""
    tool = find_disassembler()
    if tool is None:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        text = subprocess.run([tool, str(path)], capture_output=True, text=True, check=True).stdout
    parts = re.split(r"\.section\s+\.text\.([^,\s]+)", text)
    return {name: body for name, body in zip(parts[1::2], parts[2::2])}


def sass_facts(sass: str) -> dict[str, int]:
    code = [ln for ln in sass.splitlines() if "/*" in ln and ";" in ln]
    counts = Counter()
    for key, pattern in SASS_FACTS.items():
        rx = re.compile(pattern)
        counts[key] = sum(1 for ln in code if rx.search(ln))
    counts["instructions"] = len(code)
    return dict(counts)


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
    refused: str = ""     # why the kernel does not run on the target (nothing was compiled)

    def as_dict(self) -> dict:
        return asdict(self)


def inspect_kernels(arch: str = "sm_90a", kernels=None, all_configs: bool = False,
                    with_sass: bool = True, ops=("NN",)) -> list[KernelReport]:
    """Compile the chosen kernels (default tile parameters, or every legal
    configuration) in the operand layouts ``ops`` ("NN", "TN", "NT", "TT") for
    ``arch`` and report their resources and SASS facts.  A named kernel that
    does not run on ``arch`` gets a report saying why (``refused``), compiled not."""
    if kernels:
        specs = [registry.get(k) for k in kernels]
    else:   # every kernel that exists for the target (wgmma only for sm_90a)
        specs = [s for s in registry.ladder() if s.builds_for(arch)]
    reports = []
    for spec in specs:
        why = spec.why_not_on(arch)
        if why:
            reports.append(KernelReport(spec.name, "", arch, 0, 0, 0, 0, refused=why))
            continue
        configs = spec.configurations() if all_configs else [spec.defaults()]
        names = [spec.name_expression(p, inst) for p, inst in spec.instantiations(configs, layouts=list(ops), arch=arch)]
        names = list(dict.fromkeys(names))
        module = compile_module(spec.source_path, names, arch)
        res = parse_ptxas_log(module.log)
        sass = disassemble(module.cubin) if with_sass else {}
        for n in names:
            mangled = module.symbols[n]
            r = res[mangled]
            reports.append(KernelReport(spec.name, n, arch, r.registers, r.smem_bytes, r.stack_bytes,
                                        r.spill_bytes, sass_facts(sass[mangled]) if mangled in sass else {}))
    return reports


# -- the portable set: what runs on each target ------------------------------------------

# Shapes (M, N, K, batch) over which portable_configs asks kernel="auto" for its choice.
AUTO_SHAPES = tuple((m, n, k, b) for m in (64, 1000, 4096) for n in (64, 2048, 8192) for k in (64, 4096)
                    for b in (1, 8))
AUTO_DTYPES = (("float32", "float32"), ("float16", "float16"), ("bfloat16", "float32"), ("tf32", "float32"),
               ("fp16_ec", "float32"), ("tf32_ec", "float32"))
# The instruction family each rung is about, by SASS opcode (see SASS_FACTS), and
# whether it appears only where the target has it: LDGSTS is cp.async (sm_80+),
# HGMMA wgmma (sm_90a).
EXPECTED_SASS = {"wmma": ("HMMA",), "wmma_warptile": ("HMMA",), "mma_pipelined": ("HMMA", "LDSM", "LDGSTS"),
                 "wgmma": ("HGMMA",), "ec_wmma": ("HMMA", "LDGSTS"), "ec_wgmma": ("HGMMA",),
                 "pipelined": ("LDGSTS",), "gemv": ("FFMA",)}


def portable_configs(arch: str, sm_count: int = 84) -> dict[str, list[dict]]:
    """Per kernel that runs on ``arch``: its defaults and every configuration
    ``kernel="auto"`` picks there over AUTO_SHAPES x AUTO_DTYPES (fitted to the
    target's shared memory by the planner), without split-K where it is a launch shape
    (rung 8); wgmma's split is an instantiation of its own, kept."""
    from . import planner
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
            except ValueError:      # no rung for this dtype here (e.g. 16-bit on sm_75)
                continue
            add(p.spec, p.params)
    return {name: list(configs.values()) for name, configs in out.items()}


def portable_reports(arch: str, jobs: int | None = None) -> list[KernelReport]:
    """Compile the portable set of ``arch`` (row-major layouts, every dtype variant),
    the modules in parallel processes, and report each instantiation."""
    from .runtime.compile import compile_in_processes
    sets = []
    for name, configs in portable_configs(arch).items():
        spec = registry.get(name)
        names = list(dict.fromkeys(spec.name_expression(p, inst)
                                   for p, inst in spec.instantiations(configs, layouts=[("N", "N")], arch=arch)))
        sets.append((spec, names))
    compile_in_processes([(spec.source_path, names, arch) for spec, names in sets], jobs=jobs)
    reports = []
    for spec, names in sets:
        module = compile_module(spec.source_path, names, arch)
        res = parse_ptxas_log(module.log)
        sass = disassemble(module.cubin)
        for n in names:
            r = res[module.symbols[n]]
            facts = sass_facts(sass[module.symbols[n]]) if module.symbols[n] in sass else {}
            reports.append(KernelReport(spec.name, n, arch, r.registers, r.smem_bytes, r.stack_bytes,
                                        r.spill_bytes, facts))
    return reports


def format_reports(reports: list[KernelReport]) -> str:
    cols = ["FFMA", "LDG.128", "LDG.32", "LDS.128", "LDS.32", "STG.128", "LDL/STL (local)"]
    head = f"{'kernel instantiation':58s} {'regs':>4s} {'smem':>6s} {'spill':>5s} " + " ".join(f"{c[:7]:>7s}" for c in cols)
    lines = [head, "-" * len(head)]
    for r in reports:
        if r.refused:
            lines.append(f"{r.kernel}: does not run on {r.arch}: {r.refused}")
            continue
        facts = " ".join(f"{r.sass.get(c, '-'):>7}" for c in cols)
        lines.append(f"{r.name_expression[:58]:58s} {r.registers:4d} {r.smem_bytes:6d} {r.spill_bytes:5d} {facts}")
    if any(not r.refused and not r.sass for r in reports):
        lines.append("(no SASS columns: nvdisasm not found; pip install 'gemmlab[inspect]')")
    return "\n".join(lines)
