"""Every import statement in the package resolves, those inside functions too: a name
moved between modules breaks a GPU-only path (a lazy import in a launch or a pre-pass)
that no CPU test executes, so each is checked here by reading the source."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _imports():
    """(file, line, module, name or None) for every gemmlab import in the package."""
    for path in sorted((SRC / "gemmlab").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        package = parts if path.name == "__init__.py" else parts[:-1]
        package = package[:-1] if package[-1] == "__init__" else package
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = list(package[: len(package) - node.level + 1]) if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                if module.split(".")[0] == "gemmlab":
                    for alias in node.names:
                        yield path.relative_to(SRC), node.lineno, module, alias.name
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "gemmlab":
                        yield path.relative_to(SRC), node.lineno, alias.name, None


def test_every_gemmlab_import_resolves():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("gemmlab.torch's imports need PyTorch")
    unresolved, seen = [], 0
    for where, line, module, name in _imports():
        seen += 1
        try:
            found = importlib.import_module(module)
        except ImportError as exc:
            unresolved.append(f"{where}:{line}: {module} ({exc})")
            continue
        if name not in (None, "*") and not hasattr(found, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                unresolved.append(f"{where}:{line}: {module} has no {name}")
    assert seen > 100, seen  # the walk found the package's imports
    assert not unresolved, "\n".join(unresolved)
