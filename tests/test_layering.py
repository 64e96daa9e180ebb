"""The import graph of src/gemmlab points one way (CPU only, no imports executed).

Every module is parsed with ast; every import counts, at module level or inside
a function (a lazy import is still a dependency), relative or absolute.  The
layers, bottom to top:

    errors, arrays                       nothing of gemmlab (arrays: errors only)
    runtime/*                            compile, launch, device, tensor maps
    kernels/*                            spec, each rung beside its .cu, registry
    ec, tuned                            the fp32_tc method choice, tuned tables
    choose                               the choice of kernel (asks the rungs' hooks)
    planner -> executor -> api -> torch  validation and plan, launches, the public call
    tools                                cli, bench/*, tuning, verify, accuracy, inspect,
                                         fragments, wmma_ext

A module imports only its own layer and those below it; a tool is imported
only by other tools and by the package __init__ (which re-exports the public
API).  On top of that: no cycles at all, no kernel module imports the registry
(the registry imports the rungs), and a rung imports only rungs before it in
the ladder.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "gemmlab"

TOOLS = {"gemmlab.cli", "gemmlab.__main__", "gemmlab.tuning", "gemmlab.verify", "gemmlab.accuracy", "gemmlab.inspect",
         "gemmlab.fragments", "gemmlab.wmma_ext"}

# What each layer may import (besides itself); "tools" and the package may import anything.
BELOW = {
    "errors": set(),
    "arrays": {"errors"},
    "runtime": {"errors"},
    "kernels": {"runtime", "errors"},
    "ec/tuned": {"kernels", "runtime", "errors", "arrays"},
    "choose": {"ec/tuned", "kernels", "runtime", "errors", "arrays"},
    "planner": {"choose", "ec/tuned", "kernels", "runtime", "errors", "arrays"},
    "executor": {"planner", "choose", "ec/tuned", "kernels", "runtime", "errors", "arrays"},
    "api": {"executor", "planner", "choose", "ec/tuned", "kernels", "runtime", "errors", "arrays"},
    "torch": {"api", "executor", "planner", "choose", "ec/tuned", "kernels", "runtime", "errors", "arrays"},
}


def layer(module: str) -> str:
    """The layer of a gemmlab module; a module no rule places fails the test (place it here)."""
    parts = module.split(".")
    if module == "gemmlab":
        return "package"
    if module in TOOLS or parts[1] == "bench":
        return "tools"
    if parts[1] in ("runtime", "kernels"):
        return parts[1]
    if parts[1] in ("ec", "tuned"):
        return "ec/tuned"
    if parts[1] == "torch":             # the package gemmlab.torch and its modules
        return "torch"
    if len(parts) == 2 and parts[1] in BELOW:
        return parts[1]
    raise AssertionError(f"{module} is in no layer: add it to tests/test_layering.py")


def may_import(importer: str, imported: str) -> bool:
    a, b = layer(importer), layer(imported)
    if a in ("package", "tools"):
        return True
    return a == b or b in BELOW[a]


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    where: str          # file:line
    lazy: bool          # inside a function

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
        lazy_lines = {n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(f) if hasattr(n, "lineno")}
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


def test_the_parser_sees_module_level_and_lazy_imports():
    """Guards the other tests against passing on an empty graph."""
    pairs = {(e.importer, e.imported): e for e in EDGES}
    assert ("gemmlab.executor", "gemmlab.planner") in pairs                    # from .planner import ...
    assert ("gemmlab.api", "gemmlab.kernels.registry") in pairs                # from .kernels import registry
    assert pairs[("gemmlab.verify", "gemmlab.api")].lazy                       # inside a function
    assert ("gemmlab.kernels.registry", "gemmlab.kernels.simt.naive") in pairs  # from .simt import (..., naive, ...)
    assert ("gemmlab.kernels.tensor.wgmma", "gemmlab.runtime.tma") in pairs     # from ...runtime.tma import ...


def test_layers_import_only_downward():
    wrong = [e for e in EDGES if not may_import(e.importer, e.imported)]
    assert not wrong, "imports against the layering (layer of importer -> layer of imported):\n" + "\n".join(
        f"  [{layer(e.importer)} -> {layer(e.imported)}] {e}" for e in wrong)


def test_tools_are_imported_only_by_tools_and_the_package():
    wrong = [e for e in EDGES if layer(e.imported) == "tools" and layer(e.importer) not in ("tools", "package")]
    assert not wrong, "a tool imported from below:\n" + "\n".join(f"  {e}" for e in wrong)


def test_no_kernel_module_imports_the_registry():
    wrong = [e for e in EDGES if e.imported == "gemmlab.kernels.registry" and layer(e.importer) == "kernels"]
    assert not wrong, "the registry indexes the rungs, not the other way round:\n" + "\n".join(
        f"  {e}" for e in wrong)


def test_rungs_import_only_earlier_rungs():
    from gemmlab.kernels import registry
    order = {r.__name__: i for i, r in enumerate(registry.RUNGS)}
    wrong = [e for e in EDGES if e.importer in order and e.imported in order
             and order[e.imported] >= order[e.importer]]
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
        "  " + " -> ".join(c) + "\n" + "\n".join(f"      {a} -> {b}  ({where.get((a, b), '?')})"
                                                 for a, b in zip(c, c[1:]))
        for c in cycles)


@pytest.mark.parametrize("edges, cycle", [
    ([("a", "b"), ("b", "c"), ("c", "a")], ["a", "b", "c", "a"]),
    ([("a", "b"), ("b", "a"), ("b", "c")], ["a", "b", "a"]),
    ([("a", "b"), ("b", "c")], None),
])
def test_cycle_finder(edges, cycle):
    found = _cycles([Edge(a, b, "", False) for a, b in edges])
    assert found == ([cycle] if cycle else [])
