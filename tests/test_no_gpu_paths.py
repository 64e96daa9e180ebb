"""Every command and example as a newcomer meets them on a machine without a GPU
(CPU only): each either works (list, inspect, fragments --analytic) or stops with
one line on stderr, exit code 2, that says what is missing and how to get it --
never a traceback.  The same with each optional extra missing in turn (CuPy,
PyTorch, matplotlib, NVRTC, nvdisasm): the line names the extra to install.

Without a GPU here, "past the GPU check" is reached by a stand-in GPUInfo (an
H200's figures): the command then meets the missing package, or CuPy's own
refusal of the machine, and must still answer in one line.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from gemmlab.tools.cli import main
from gemmlab.runtime import compile as rt_compile
from gemmlab.runtime import device as rt_device

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))

no_gpu_here = pytest.mark.skipif(rt_device.gpu_available(), reason="checks the paths of a machine without a GPU")

# Every subcommand, and the options that lead somewhere else, small enough to stop early.
COMMANDS = [
    ["list"],
    ["list", "--json"],
    ["bench", "--kernels", "naive,coalesced", "--sizes", "64"],
    ["bench", "--kernels", "naive", "vectorized:BM=64,BN=64", "--sizes", "64", "--all-configs"],
    ["bench", "--dtype", "bf16", "--sizes", "64"],
    ["bench", "--suite", "ec", "--sizes", "64"],
    ["bench", "--suite", "overhead", "--sizes", "64"],
    ["bench", "--suite", "wmma_ext"],
    ["bench", "--suite", "models", "--tokens", "16", "--layers", "qkv"],
    ["accuracy", "--ks", "64"],
    ["accuracy", "--ks", "64", "--methods", "fp32,tf32"],
    ["fragments"],
    ["fragments", "matrix_a.m16n16k16.f16.row"],
    ["fragments", "--analytic", "--arch", "sm_75", "matrix_a.m16n16k16.f16.row"],
    ["sweep", "--sizes", "64"],
    ["tune", "--kernels", "vectorized", "--sizes", "64"],
    ["tune", "--suite", "models", "--tokens", "16", "--layers", "o"],
    ["verify"],
    ["verify", "--kernels", "naive", "wmma", "--shapes", "8"],
    ["verify", "--kernels", "nope"],
    ["verify", "--kernels", "auto", "--dtype", "tf32", "--shapes", "8"],
    ["inspect", "--arch", "sm_86", "--kernel", "naive"],
    ["inspect", "--arch", "sm_70"],
    ["inspect", "--kernel", "auto"],
    ["inspect", "--arch", "sm_75", "--kernel", "naive", "mma_pipelined"],
]
GPU_COMMANDS = ("bench", "accuracy", "sweep", "tune", "verify")
WORK_WITHOUT_A_GPU = [
    ["list"],
    ["list", "--json"],
    ["fragments", "--analytic", "--arch", "sm_75", "matrix_a.m16n16k16.f16.row"],
    ["inspect", "--arch", "sm_86", "--kernel", "naive"],
    ["inspect", "--arch", "sm_75", "--kernel", "naive", "mma_pipelined"],
]


def fake_h200(ordinal=0):
    return rt_device.GPUInfo(
        ordinal, "NVIDIA H200", (9, 0), "sm_90a", 132, 1980.0, 60 * 2**20, 227 * 1024, 228 * 1024, 65536, 65536, 2048
    )


def run_cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_refusal(command, code, out, err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    assert len(lines) == 1 and lines[0].startswith(f"gemmlab {command}: "), err


@no_gpu_here
@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_command_without_a_gpu(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(argv, capsys)
    assert "Traceback" not in out + err
    if argv in WORK_WITHOUT_A_GPU:
        assert code == 0, err
        return
    assert_one_line_refusal(argv[0], code, out, err)
    if argv[0] in GPU_COMMANDS + ("fragments",) and "nope" not in argv and "--analytic" not in argv:
        assert "NVIDIA driver" in err or "GPU" in err, err


def test_help_of_every_command_says_whether_it_needs_a_gpu(capsys):
    from gemmlab.tools.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        text = parser.format_help()
        assert "GPU" in text.split("options:")[0], name
    with pytest.raises(SystemExit):
        main(["-h"])
    listing = capsys.readouterr().out
    for name in sub.choices:
        assert name in listing


def test_every_option_has_help_and_shows_its_default():
    """Walk the argparse tree: every option of every command has help text, and the
    help shows a default wherever the option has one."""
    import argparse
    from gemmlab.tools.cli import build_parser

    missing = []
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not (action.help or "").strip():
                missing.append(f"{where}: no help")
                continue
            shown = formatter._get_help_string(action)
            if action.option_strings and action.default not in (None, False) and "default" not in shown:
                missing.append(f"{where}: default {action.default!r} not shown")
    assert not missing, "\n".join(missing)


def test_version_and_python_dash_m():
    import gemmlab

    done = subprocess.run([sys.executable, "-m", "gemmlab", "--version"], capture_output=True, text=True, env=_env())
    assert done.returncode == 0 and done.stdout.strip() == f"gemmlab {gemmlab.__version__}"
    done = subprocess.run([sys.executable, "-m", "gemmlab"], capture_output=True, text=True, env=_env())
    assert done.returncode == 2 and "usage: gemmlab" in done.stderr and "Traceback" not in done.stderr


def _env():
    import os

    return dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))


# -- each extra missing in turn ------------------------------------------------------------------


def block(monkeypatch, *modules):
    """Make ``import m`` fail as it does where the package is not installed."""
    for m in modules:
        for name in [n for n in sys.modules if n == m or n.startswith(m + ".")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, m, None)


CU13 = "pip install 'gemmlab[cu13]'"


@pytest.mark.parametrize(
    "argv",
    [
        ["verify", "--kernels", "naive", "--shapes", "8"],
        ["bench", "--kernels", "naive", "--sizes", "64"],
        ["sweep", "--sizes", "64"],
        ["fragments"],
    ],
    ids=" ".join,
)
def test_without_cupy(argv, capsys, monkeypatch):
    monkeypatch.setattr(rt_device, "gpu_info", fake_h200)
    block(monkeypatch, "cupy", "cupy_backends")
    code, out, err = run_cli(argv, capsys)
    assert_one_line_refusal(argv[0], code, out, err)
    assert "CuPy" in err and CU13 in err


def test_with_cupy_but_no_usable_gpu(capsys, monkeypatch):
    """Past gemmlab's own check (a stand-in GPU), CuPy's refusal is one line too."""
    pytest.importorskip("cupy")
    if rt_device.gpu_available():
        pytest.skip("checks CuPy's refusal on a machine without a GPU")
    monkeypatch.setattr(rt_device, "gpu_info", fake_h200)
    code, out, err = run_cli(["verify", "--kernels", "naive", "--shapes", "8"], capsys)
    assert_one_line_refusal("verify", code, out, err)
    assert "CuPy could not use the GPU" in err


def test_without_matplotlib(capsys, monkeypatch, tmp_path):
    block(monkeypatch, "matplotlib")
    code, out, err = run_cli(
        ["fragments", "--analytic", "--arch", "sm_80", "--out", str(tmp_path), "matrix_a.m16n16k16.f16.row"], capsys
    )
    assert_one_line_refusal("fragments", code, out, err)
    assert "pip install 'gemmlab[plot]'" in err


HIDE_NVRTC = """
import sys
import cuda.pathfinder as pf
from cuda.pathfinder._dynamic_libs.load_dl_common import DynamicLibNotFoundError
found = pf.load_nvidia_dynamic_lib

def load(name, *args, **kwargs):
    if name == "nvrtc":
        raise DynamicLibNotFoundError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12": not found')
    return found(name, *args, **kwargs)

pf.load_nvidia_dynamic_lib = load
from gemmlab.tools.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_nvrtc(tmp_path):
    """NVRTC missing (cuda.pathfinder finds no libnvrtc; a fresh process, so that
    nothing loaded it before): inspect names the extra."""
    env = dict(_env(), GEMMLAB_CACHE_DIR=str(tmp_path / "cache"))  # nothing compiled yet
    done = subprocess.run(
        [sys.executable, "-c", HIDE_NVRTC, "inspect", "--arch", "sm_86", "--kernel", "naive"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert_one_line_refusal("inspect", done.returncode, done.stdout, done.stderr)
    assert "libnvrtc" in done.stderr and CU13 in done.stderr


def test_without_nvdisasm(capsys, monkeypatch):
    monkeypatch.setattr(rt_compile, "find_nvdisasm", lambda: None)
    code, out, err = run_cli(["inspect", "--arch", "sm_86", "--kernel", "naive"], capsys)
    assert code == 0 and "Traceback" not in out + err
    assert "(no SASS columns: nvdisasm not found; pip install 'gemmlab[inspect]')" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("gemmlab::naive"))
    assert row.split()[-7:] == ["-"] * 7


# -- the examples ----------------------------------------------------------------------------------

BLOCK_AND_RUN = (
    "import runpy, sys; [sys.modules.__setitem__(m, None) for m in sys.argv[1].split(',') if m]; "
    "path = sys.argv[2]; sys.argv = sys.argv[2:]; runpy.run_path(path, run_name='__main__')"
)


def run_example(path, *args, blocked=()):
    return subprocess.run(
        [sys.executable, "-c", BLOCK_AND_RUN, ",".join(blocked), str(path), *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_help_needs_nothing(path):
    done = run_example(path, "--help")
    assert done.returncode == 0 and "usage:" in done.stdout and "Traceback" not in done.stderr


@no_gpu_here
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_says_it_needs_a_cuda_gpu(path):
    pytest.importorskip("torch")
    done = run_example(path)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout, done.stderr
    assert lines == [f"{path.name}: this example needs a CUDA GPU; " + lines[0].split("; ", 1)[1]], done.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_without_torch(path):
    done = run_example(path, blocked=("torch",))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"{path.name}: this example needs PyTorch: pip install 'gemmlab[torch]'"


def test_training_replot_without_matplotlib(tmp_path):
    pytest.importorskip("torch")
    results = tmp_path / "r.json"
    results.write_text('{"gpu": "x", "torch": "x", "config": "x", "runs": []}')
    done = run_example(
        ROOT / "examples" / "train_fp32_tc.py",
        "--replot",
        str(results),
        "--plot",
        str(tmp_path / "p.png"),
        blocked=("matplotlib",),
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "pip install 'gemmlab[plot]'" in done.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["verify", "--kernels", "naive", "--dtype", "float16"], "kernel 'naive' computes float32, not float16"),
        (["verify", "--kernels", "wgmma"], "kernel 'wgmma' does not run on"),
    ],
)
def test_verify_refuses_a_kernel_the_gpu_or_dtype_cannot_take(argv, message, capsys, monkeypatch):
    """Past the GPU check (a stand-in Ampere GPU), before any array is made."""

    def ampere(ordinal=0):
        return rt_device.GPUInfo(ordinal, "NVIDIA A10", (8, 6), "sm_86", 72, 1695.0, 6 * 2**20, 99 * 1024)

    monkeypatch.setattr(rt_device, "gpu_info", ampere)
    block(monkeypatch, "cupy", "cupy_backends")  # any array work would show as a CuPy message
    code, out, err = run_cli(argv, capsys)
    assert_one_line_refusal("verify", code, out, err)
    assert message in err and "CuPy" not in err


def test_gemmlab_torch_without_torch_names_the_extra():
    """`import gemmlab.torch` where PyTorch is missing: gemmlab's ImportError with the install line."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "try:\n    import gemmlab.torch\nexcept ImportError as e:\n    print(type(e).__name__, e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.stdout.strip() == "MissingExtraError gemmlab.torch needs PyTorch: pip install 'gemmlab[torch]'", (
        done.stdout + done.stderr
    )
