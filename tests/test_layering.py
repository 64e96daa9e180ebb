"""The import graph of src/gemmlab points one way (CPU only, no imports executed).

Every module is parsed with ast; every import counts, at module level or inside
a function (a lazy import is still a dependency), relative or absolute.  Each
folder holds one layer, except core/: it holds the bottom of the stack (errors,
arrays) and the layers above the kernels (the method choice and the tables, the
choice of kernel, the plan, the launches, the public call), each module of it a
layer of its own.  The layers, bottom to top:

    core/errors, core/arrays             nothing of gemmlab (arrays: errors only)
    runtime/*                            compile, launch, device, tensor maps
    kernels/*                            spec, steps, each rung beside its .cu, registry
    core/methods, core/tables            the fp32_tc method choice, tuned tables
    core/choose                          the choice of kernel (asks the rungs' hooks)
    core/planner -> core/executor        validation and plan, launches,
      -> core/scaled -> core/api         FP8 products with scales (their own checks, plan, launch)
      -> core/grouped -> core/api        grouped products (the same, for mixture-of-experts)
      -> core/api -> torch/*             the public call, PyTorch's operators
    core/bias (arrays only) -> core/api  matmul's bias: its checks, the add after a product
    tools/*, lab/*                       cli, bench/*, tune, verify, accuracy,
                                         inspect_kernels; fragments, wmma_ext

A module imports only its own layer and those below it; tools and lab are
imported only by each other and by the package __init__ (which re-exports the
public API) and __main__.  No module sits in src/gemmlab itself besides those
two.  On top of that: no cycles at all, no kernel module imports the registry
(the registry imports the rungs), nothing reads a name through the registry
that the registry does not define (its __all__: a rung's names come from the
rung), and a rung imports only rungs before it in the ladder.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "gemmlab"

FOLDERS = ("core", "runtime", "kernels", "torch", "tools", "lab")
TOP = ("tools", "lab")  # may import anything; imported only by each other and the package

# What each layer may import (besides itself); the top layers and the package may import anything.
BELOW = {
    "errors": set(),
    "arrays": {"errors"},
    "runtime": {"errors"},
    "kernels": {"runtime", "errors"},
    "methods/tables": {"kernels", "runtime", "errors", "arrays"},
    "choose": {"methods/tables", "kernels", "runtime", "errors", "arrays"},
    "planner": {"choose", "methods/tables", "kernels", "runtime", "errors", "arrays"},
    "executor": {"planner", "choose", "methods/tables", "kernels", "runtime", "errors", "arrays"},
    "bias": {"errors", "arrays"},
    "scaled": {"executor", "planner", "choose", "methods/tables", "kernels", "runtime", "errors", "arrays"},
    "grouped": {"executor", "planner", "choose", "methods/tables", "kernels", "runtime", "errors", "arrays"},
    "api": {
        "scaled",
        "grouped",
        "executor",
        "planner",
        "bias",
        "choose",
        "methods/tables",
        "kernels",
        "runtime",
        "errors",
        "arrays",
    },
    "torch": {
        "api",
        "scaled",
        "grouped",
        "executor",
        "planner",
        "bias",
        "choose",
        "methods/tables",
        "kernels",
        "runtime",
        "errors",
        "arrays",
    },
}


def layer(module: str) -> str:
    """The layer of a gemmlab module; a module no rule places fails the test (place it here)."""
    parts = module.split(".")
    if module in ("gemmlab", "gemmlab.__main__"):
        return "package"
    if parts[1] in TOP or parts[1] in ("runtime", "kernels", "torch"):
        return parts[1]
    if parts[1] == "core":
        if len(parts) == 2:  # core/__init__.py: a docstring, no imports
            return "errors"
        if parts[2] in ("methods", "tables"):
            return "methods/tables"
        if len(parts) == 3 and parts[2] in BELOW:
            return parts[2]
    raise AssertionError(f"{module} is in no layer: add it to tests/test_layering.py")


def may_import(importer: str, imported: str) -> bool:
    a, b = layer(importer), layer(imported)
    if a == "package" or a in TOP:
        return True
    return a == b or b in BELOW[a]


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    where: str  # file:line
    lazy: bool  # inside a function

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported}  ({self.where}{', inside a function' if self.lazy else ''})"


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _targets(mods, module: str, path: Path, node) -> list[str]:
    """The gemmlab modules an import statement reaches."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods or a.name.startswith("gemmlab.")]
    if node.level:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if base != "gemmlab" and not base.startswith("gemmlab."):
        return []
    # `from pkg import name`: the submodule pkg.name if there is one, else pkg itself.
    found = {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names}
    return sorted(found)


def _string_imports(node) -> list[str]:
    """importlib.import_module("gemmlab...") / __import__("gemmlab...") with a literal name."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return []
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    arg = node.args[0].value
    if name in ("import_module", "__import__") and isinstance(arg, str) and arg.startswith("gemmlab"):
        return [arg]
    return []


def import_edges() -> list[Edge]:
    mods = modules()
    edges = []
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        lazy_lines = {
            n.lineno
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
            if hasattr(n, "lineno")
        }
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets = _targets(mods, module, path, node)
            else:
                targets = _string_imports(node)
            where = f"{path.relative_to(SRC.parent)}:{getattr(node, 'lineno', 0)}"
            for t in targets:
                if t != module:
                    edges.append(Edge(module, t, where, getattr(node, "lineno", 0) in lazy_lines))
    return edges


EDGES = import_edges()


def test_every_module_has_a_layer():
    for module in modules():
        layer(module)
    assert not [e for e in EDGES if e.imported not in modules()], "an import of a gemmlab module that does not exist"


def test_every_module_sits_in_a_layer_folder():
    loose = sorted(p.name for p in ROOT.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"], f"modules outside the layer folders {FOLDERS}: {loose}"
    assert {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} == set(FOLDERS)


def test_the_parser_sees_module_level_and_lazy_imports():
    """Guards the other tests against passing on an empty graph."""
    pairs = {(e.importer, e.imported): e for e in EDGES}
    assert ("gemmlab.core.executor", "gemmlab.core.planner") in pairs  # from .planner import ...
    assert ("gemmlab.core.api", "gemmlab.kernels.registry") in pairs  # from ..kernels import registry
    assert pairs[("gemmlab.tools.verify", "gemmlab.core.api")].lazy  # inside a function
    assert ("gemmlab.kernels.registry", "gemmlab.kernels.simt.naive") in pairs  # from .simt import (..., naive, ...)
    assert ("gemmlab.kernels.tensor.wgmma", "gemmlab.runtime.tma") in pairs  # from ...runtime.tma import ...
    assert ("gemmlab.runtime.compile", "gemmlab.core.errors") in pairs  # from ..core.errors import ...


def test_layers_import_only_downward():
    wrong = [e for e in EDGES if not may_import(e.importer, e.imported)]
    assert not wrong, "imports against the layering (layer of importer -> layer of imported):\n" + "\n".join(
        f"  [{layer(e.importer)} -> {layer(e.imported)}] {e}" for e in wrong
    )


def test_tools_and_lab_are_imported_only_by_each_other_and_the_package():
    wrong = [e for e in EDGES if layer(e.imported) in TOP and layer(e.importer) not in (*TOP, "package")]
    assert not wrong, "a tool or lab module imported from below:\n" + "\n".join(f"  {e}" for e in wrong)


def test_no_kernel_module_imports_the_registry():
    wrong = [e for e in EDGES if e.imported == "gemmlab.kernels.registry" and layer(e.importer) == "kernels"]
    assert not wrong, "the registry indexes the rungs, not the other way round:\n" + "\n".join(f"  {e}" for e in wrong)


def _registry_reads(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every name read through the registry in one file: ``registry.X``
    (the registry imported under any name) and ``from ...kernels.registry import X``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases, reads = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.endswith("kernels.registry"):
                reads += [(node.lineno, a.name) for a in node.names]
            elif node.module.endswith("kernels") or node.module == "kernels":
                aliases |= {a.asname or a.name for a in node.names if a.name == "registry"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            reads.append((node.lineno, node.attr))
    return reads


def test_the_registry_is_read_only_for_its_own_names():
    """The registry is the ladder and its lookup (its __all__); what a rung or spec.py
    defines is imported from there, not through the registry."""
    from gemmlab.kernels import registry

    files = [p for d in ("src", "tests", "scripts", "examples") for p in sorted((SRC.parent / d).rglob("*.py"))]
    wrong = [
        f"  {p.relative_to(SRC.parent)}:{line}: registry.{name}"
        for p in files
        for line, name in _registry_reads(p)
        if name not in registry.__all__ and not name.startswith("__")
    ]
    assert not wrong, "names read through the registry that it does not define:\n" + "\n".join(wrong)


def test_rungs_import_only_earlier_rungs():
    from gemmlab.kernels import registry

    order = {r.__name__: i for i, r in enumerate(registry.RUNGS)}
    wrong = [e for e in EDGES if e.importer in order and e.imported in order and order[e.imported] >= order[e.importer]]
    assert not wrong, "a rung importing a later rung of the ladder:\n" + "\n".join(f"  {e}" for e in wrong)


def _cycles(edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a cycle path."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.imported)
        graph.setdefault(e.imported, set())
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(_path_through(graph, set(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _path_through(graph, comp: set[str]) -> list[str]:
    """One cycle inside a strongly connected component: a -> b -> ... -> a."""
    start = min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)


def test_no_cycles():
    cycles = _cycles(EDGES)
    where = {(e.importer, e.imported): e.where for e in EDGES}
    assert not cycles, "import cycles:\n" + "\n".join(
        "  "
        + " -> ".join(c)
        + "\n"
        + "\n".join(f"      {a} -> {b}  ({where.get((a, b), '?')})" for a, b in zip(c, c[1:]))
        for c in cycles
    )


@pytest.mark.parametrize(
    "edges, cycle",
    [
        ([("a", "b"), ("b", "c"), ("c", "a")], ["a", "b", "c", "a"]),
        ([("a", "b"), ("b", "a"), ("b", "c")], ["a", "b", "a"]),
        ([("a", "b"), ("b", "c")], None),
    ],
)
def test_cycle_finder(edges, cycle):
    found = _cycles([Edge(a, b, "", False) for a, b in edges])
    assert found == ([cycle] if cycle else [])


def test_the_executor_names_no_rung():
    """The executor launches what the rungs' specs and their step builders describe
    (pre-passes, staging, batched arguments, kernels/steps.py): no rung, no precision's
    method and no helper kernel appears in it by name, in code or comments, and of the
    kernels layer it imports only the step builders' vocabulary."""
    import re

    from gemmlab.core.methods import EC_PRECISIONS
    from gemmlab.kernels import registry

    text = (ROOT / "core" / "executor.py").read_text()
    words = [s.name for s in registry.ladder()] + list(EC_PRECISIONS)
    words += ["splitk_reduce", "choose_method", "exponent_histogram"]
    named = [w for w in words if re.search(rf"\b{re.escape(w)}\b", text)]
    assert not named, f"core/executor.py names {named}: describe it through the spec instead"
    kernels = {e.imported for e in EDGES if e.importer == "gemmlab.core.executor" and layer(e.imported) == "kernels"}
    assert kernels == {"gemmlab.kernels.steps"}, kernels


KERNEL_HEADER_LINES = 12  # comment lines a CUDA source may open with before its code


def test_kernel_sources_open_with_a_short_header():
    """Every .cu and .cuh file opens with at most KERNEL_HEADER_LINES comment lines: what
    the file is and why; history and figures live in benchmarks/NOTES.md."""
    long = {}
    for path in sorted((ROOT / "kernels").rglob("*.cu*")):
        lines = 0
        for line in path.read_text().splitlines():
            if line.strip().startswith("//"):
                lines += 1
            elif line.strip():
                break
        if lines > KERNEL_HEADER_LINES:
            long[str(path.relative_to(ROOT))] = lines
    assert not long, f"comment lines before the code (at most {KERNEL_HEADER_LINES}): {long}"


def test_kernel_sources_have_no_generic_lambdas():
    """No lambda with an ``auto`` parameter in a .cu or .cuh file: NVRTC 12 (the GPU machines'
    and many users') compiles an unannotated generic lambda in device code as a host function
    and refuses the module, where this machine's NVRTC 13 takes it (benchmarks/NOTES.md, "The
    batch rungs on NVRTC 12").  A functor with a templated __device__ operator() does the same."""
    import re

    generic = re.compile(r"\]\s*\(\s*(const\s+)?auto\b")
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in sorted((ROOT / "kernels").rglob("*.cu*"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if generic.search(line)
    ]
    assert not found, f"generic lambdas in device code: {found}"
