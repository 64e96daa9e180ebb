"""The examples under examples/: the training comparison's plot from a results
file (CPU), and each example run small on a GPU (two GPUs for torchrun)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_training_plot_from_results(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    runs = [
        dict(
            run=r,
            loss=[5.5 - 0.01 * i for i in range(30)],
            ms_per_step=10.0 + k,
            drift_from_fp32={} if r == "fp32" else {"10": 1e-6 * (k + 1), "30": 1e-5 * (k + 1)},
        )
        for k, r in enumerate(("fp32", "tf32", "bf16_autocast", "fp32_tc"))
    ]
    results = tmp_path / "train.json"
    results.write_text(json.dumps(dict(gpu="test", torch="x", config="tiny", runs=runs)))
    png = tmp_path / "train.png"
    subprocess.run(
        [sys.executable, str(EXAMPLES / "train_fp32_tc.py"), "--replot", str(results), "--plot", str(png)], check=True
    )
    assert png.stat().st_size > 10_000


def test_training_rejects_unknown_runs():
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "train_fp32_tc.py"), "--runs", "fp64"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "unknown runs" in done.stderr


@pytest.mark.gpu
def test_training_example_runs_small(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "train.json"
    subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "train_fp32_tc.py"),
            "--steps",
            "6",
            "--batch",
            "2",
            "--seq",
            "64",
            "--d-model",
            "128",
            "--heads",
            "4",
            "--layers",
            "2",
            "--every",
            "3",
            "--json",
            str(out),
        ],
        check=True,
    )
    runs = {r["run"]: r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == {"fp32", "tf32", "bf16_autocast", "fp32_tc"}
    # fp32_tc stays closer to IEEE float32 than bf16 does.
    assert runs["fp32_tc"]["drift_from_fp32"]["6"] < runs["bf16_autocast"]["drift_from_fp32"]["6"]


@pytest.mark.gpu
def test_tensor_parallel_example_on_two_gpus(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    out = tmp_path / "tp.json"
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            str(EXAMPLES / "tensor_parallel.py"),
            "--size",
            "2048",
            "--tokens",
            "256",
            "--hidden",
            "512",
            "--ffn",
            "1024",
            "--reps",
            "2",
            "--json",
            str(out),
        ],
        check=True,
        env=env,
    )
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 6 and all(r["rel_error_vs_1gpu"] < 2e-2 for r in rows)
