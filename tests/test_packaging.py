"""Install metadata (CPU): the Apache-2.0 LICENSE and its SPDX expression,
classifiers, the extras the error messages name, and a wheel built from this
tree that pip accepts on every Python from 3.10 to 3.13 found on the machine
(pyenv's versions, or python3.X on the PATH)."""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gemmlab.core import errors

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_file_and_spdx_expression():
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 170  # the full text
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # the expression says it


def test_classifiers_name_every_supported_python():
    project = pyproject()["project"]
    assert project["requires-python"] == ">=3.10"
    for v in PYTHONS:
        assert f"Programming Language :: Python :: {v}" in project["classifiers"]


def test_extras_the_messages_name_exist():
    """Every `pip install 'gemmlab[...]'` an error message suggests names a real extra,
    and [all] brings every extra a user runs (CUDA 13 flavour)."""
    extras = pyproject()["project"]["optional-dependencies"]
    hints = " ".join(install for _, install in errors.EXTRAS.values()) + errors.NVRTC_HINT
    named = set(re.findall(r"gemmlab\[([a-z0-9_]+)\]", hints)) | {"inspect"}
    assert named <= set(extras), named - set(extras)
    assert extras["all"] == ["gemmlab[cu13,inspect,plot,torch]"]


def _pythons():
    """(version, interpreter) for each of PYTHONS found."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    for v in PYTHONS:
        candidates = sorted(root.glob(f"{v}.*/bin/python{v}")) + [Path(p) for p in [shutil.which(f"python{v}")] if p]
        for exe in candidates:
            done = subprocess.run(
                [str(exe), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
            )
            if done.returncode == 0:
                found.append((v, str(exe)))
                break
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    import setuptools

    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__}: the license expression needs 77 or later")
    out = tmp_path_factory.mktemp("wheel")
    tree = tmp_path_factory.mktemp("tree")  # a copy: the build leaves build/ and egg-info behind
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(tree)],
        check=True,
        capture_output=True,
        text=True,
    )
    return next(out.glob("gemmlab-*.whl"))


def test_wheel_carries_license_metadata_and_every_kernel_source(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Provides-Extra: all" in meta and "Requires-Python: >=3.10" in meta
    src = ROOT / "src"
    needed = {
        str(p.relative_to(src))
        for p in (src / "gemmlab").rglob("*")
        if p.suffix in (".cu", ".cuh", ".cpp", ".json") and "__pycache__" not in p.parts
    }
    assert needed and needed <= names, sorted(needed - names)[:5]
    assert "gemmlab/__main__.py" in names


def test_wheel_installs_on_python_3_10_to_3_13(wheel):
    found = _pythons()
    if not found:
        pytest.skip("no Python 3.10-3.13 interpreter found besides this one")
    for v, exe in found:
        done = subprocess.run(
            [exe, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--no-index", str(wheel)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0 and "Would install gemmlab-" in done.stdout, (v, done.stdout, done.stderr)
    missing = sorted(set(PYTHONS) - {v for v, _ in found})
    if missing:
        pytest.skip(f"checked {', '.join(v for v, _ in found)}; no interpreter for {', '.join(missing)}")
