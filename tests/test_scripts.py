"""Every script under scripts/ says how to use it without a GPU (``--help``), and every shell
script parses (``bash -n``): what a newcomer tries first, checked on CPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_python_script_answers_help(script):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--help"], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 0, f"{script} --help: exit {r.returncode}\n{r.stderr[-2000:]}"
    assert r.stdout.strip(), f"{script} --help printed nothing"


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_shell_script_parses(script):
    r = subprocess.run(["bash", "-n", str(SCRIPTS / script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{script}: {r.stderr}"
