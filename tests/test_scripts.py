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


def test_kernel_times_adds_a_steps_kernels_by_count(monkeypatch):
    """scripts/kernel_times.py --models: every product of the step, each kernel's time over a
    step as the product's time times how often the step makes it."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import kernel_times

    products = kernel_times.step_products("gpt2")
    assert {p[-1] for p in products} == {"gpt2"}
    assert sum(p[-2] for p in products) == 12 * 18 + 3  # 4 linear and 2 attention products a layer, x3; the head
    recs = [
        {
            "product": "gpt2 x12 a step",
            "model": "gpt2",
            "count": 12,
            "torch": {"sgemm": 10.0},
            "gemmlab": {"ec": 4.0, "split": 1.0},
        },
        {"product": "gpt2 x1 a step", "model": "gpt2", "count": 1, "torch": {"sgemm": 100.0}, "gemmlab": {"ec": 50.0}},
    ]
    assert kernel_times.step_totals(recs) == {
        "gpt2": {"torch": {"sgemm": 0.22}, "gemmlab": {"ec": 0.098, "split": 0.012}}
    }
    with pytest.raises(SystemExit, match="unknown model 'gpt5'"):
        kernel_times.step_products("gpt5")
