"""The gemmlab command line: list, inspect, and early refusal of bad bench arguments (no GPU)."""

import json

import pytest

import gemmlab
from gemmlab.tools.bench import models, overhead, suites
from gemmlab.tools.cli import main
from gemmlab.tools.inspect_kernels import find_disassembler
from gemmlab.kernels import registry
from gemmlab.runtime import device as rt_device

KERNELS = [
    "naive",
    "coalesced",
    "smem_tiled",
    "blocktile_1d",
    "blocktile_2d",
    "vectorized",
    "warptile",
    "pipelined",
    "wmma",
    "wmma_warptile",
    "mma_pipelined",
    "wgmma_tma",
    "wgmma_specialized",
    "wgmma_persistent",
    "wgmma",
    "wgmma_fp8",
    "grouped",
    "grouped_wgrad",
    "ec_wmma",
    "ec_wgmma",
    "gemv",
    "outer",
    "gemv_mma",
    "batched_small",
    "batched_small_mma",
]


def test_list_prints_every_kernel(capsys):
    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    heads = [ln for ln in lines if not ln.startswith(" ")]
    assert [h.split()[1] for h in heads] == KERNELS
    for name, entry in zip(KERNELS, gemmlab.kernels()):
        assert f"{entry['rung']}{entry['step']}. {name}" in out  # 4a. wgmma_tma: a step toward rung 4
        assert entry["description"] in out
    assert "tile  in [2, 4, 8, 16, 32] (default 32)" in out
    assert "rule: shared memory, 4*BK*(BM+BN) bytes, must fit in 48 KiB" in out
    assert (
        out.count("runs on: sm_90a only") == 8
    )  # wgmma's three steps, wgmma, wgmma_fp8, grouped, grouped_wgrad, ec_wgmma
    assert out.count("runs on: ") == len(KERNELS)
    assert err == ""


def test_list_json(capsys):
    assert main(["list", "--json"]) == 0
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert data == gemmlab.kernels()
    assert [k["name"] for k in data] == KERNELS


def _table_rows(out):
    """{name expression: (regs, smem, spill, FFMA or '-')} from inspect's table."""
    rows = {}
    for ln in out.splitlines():
        if ln.startswith("gemmlab::"):
            name, rest = ln.split(">", 1)
            cols = rest.split()
            rows[name + ">"] = (int(cols[0]), int(cols[1]), int(cols[2]), cols[3])
    return rows


def test_inspect_vectorized(capsys):
    """Compile-only: the table lists both VEC variants of the default tile, without spills."""
    assert main(["inspect", "--kernel", "vectorized"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("CUDA headers: ")
    header = next(ln for ln in out.splitlines() if ln.startswith("kernel instantiation"))
    assert header.split()[2:6] == ["regs", "smem", "spill", "FFMA"]
    d = registry.get("vectorized").defaults()
    args = f"{d['BM']}, {d['BN']}, {d['BK']}, {d['TM']}, {d['TN']}"
    rows = _table_rows(out)
    assert list(rows) == [
        f"gemmlab::vectorized<{args}, true, 'N', 'N'>",
        f"gemmlab::vectorized<{args}, false, 'N', 'N'>",
    ]
    assert f"vectorized<{args}, true, 'N', 'N'>" in out
    for regs, smem, spill, ffma in rows.values():
        assert 0 < regs <= 255 and smem == 4 * d["BK"] * (d["BM"] + d["BN"]) and spill == 0
        if find_disassembler() is not None:
            assert int(ffma) >= d["BK"] * d["TM"] * d["TN"]


def test_inspect_vectorized_all_configs(capsys):
    """--all-configs lists every legal tile, e.g. the 128x128x8 / 8x8 one."""
    assert main(["inspect", "--kernel", "vectorized", "--all-configs"]) == 0
    out, _ = capsys.readouterr()
    assert "vectorized<128, 128, 8, 8, 8, true, 'N', 'N'>" in out
    rows = _table_rows(out)
    assert set(rows) == set(registry.get("vectorized").all_name_expressions(layouts=[("N", "N")]))
    assert all(spill == 0 for _, _, spill, _ in rows.values())


def test_inspect_json(capsys):
    assert main(["inspect", "--kernel", "smem_tiled", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["name_expression"] for r in data] == ["gemmlab::smem_tiled<32, 'N', 'N'>"]


def test_inspect_layouts(capsys):
    assert main(["inspect", "--kernel", "smem_tiled", "--ops", "TN,NT", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["name_expression"] for r in data] == [
        "gemmlab::smem_tiled<32, 'T', 'N'>",
        "gemmlab::smem_tiled<32, 'N', 'T'>",
    ]
    assert all(r["spill_bytes"] == 0 for r in data)
    assert data[0]["arch"] == "sm_90a" and data[0]["spill_bytes"] == 0


def test_inspect_unknown_kernel(capsys):
    assert main(["inspect", "--kernel", "nosuch"]) == 2
    _, err = capsys.readouterr()
    assert "gemmlab inspect: unknown kernel 'nosuch'" in err


@pytest.fixture
def no_gpu_allowed(monkeypatch):
    """Make any attempt to reach the GPU or run the suite fail the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the GPU was touched")

    monkeypatch.setattr(suites, "run_suite", forbidden)
    monkeypatch.setattr(overhead, "run", forbidden)
    monkeypatch.setattr(models, "run", forbidden)
    monkeypatch.setattr(rt_device, "gpu_info", forbidden)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["bench", "--kernels", "nosuch"],
            "gemmlab bench: unknown kernel 'nosuch'; known kernels: auto, naive, coalesced, smem_tiled, "
            "blocktile_1d, blocktile_2d, vectorized, warptile, pipelined",
        ),
        (
            ["bench", "--kernels", "naive", "smem_tiled:tile=3"],
            "gemmlab bench: tile parameter tile=3 is not legal for kernel 'smem_tiled'",
        ),
        (
            ["bench", "--kernels", "vectorized:BM=64,BN=64,BK=8,TM=4,TN=4"],
            "in float4s, must split evenly over the threads",
        ),
        (["bench", "--kernels", "naive", "--sizes", "abc"], "gemmlab bench: size 'abc' is not N or MxNxK"),
        (
            ["bench", "--dtype", "fp16", "--kernels", "vectorized"],
            "gemmlab bench: kernel 'vectorized' computes float32, not float16; for float16 use one of: wmma",
        ),
        (
            ["bench", "--dtype", "bf16", "--kernels", "wmma_warptile:WM=64"],
            "gemmlab bench: tile parameter WM=64 is not legal for kernel 'wmma_warptile'",
        ),
        (
            ["bench", "--kernels", "smem_tiled:tile=big"],
            "gemmlab bench: tile parameter 'tile=big' of 'smem_tiled' must be NAME=INTEGER",
        ),
        (
            ["bench", "--kernels", "pipelined", "--ops", "NN,TX"],
            "gemmlab bench: --ops 'NN,TX': give layouts of op(A) and op(B) as NN, TN, NT or TT",
        ),
        # options a suite does not take are refused, not ignored
        (
            ["bench", "--suite", "overhead", "--kernels", "wgmma"],
            "gemmlab bench: --kernels is for --suite ladder or fp8, not --suite overhead",
        ),
        (
            ["bench", "--suite", "overhead", "--dtype", "bf16"],
            "--dtype is for --suite ladder or models or shapes, not --suite overhead",
        ),
        (["bench", "--suite", "overhead", "--ops", "TN"], "--ops is for --suite ladder, not --suite overhead"),
        (["bench", "--suite", "ec", "--all-configs"], "--all-configs is for --suite ladder, not --suite ec"),
        (
            ["bench", "--suite", "wmma_ext", "--kernel-only"],
            "--kernel-only is for --suite ladder or ec or overhead or fp8, not --suite wmma_ext",
        ),
        (["bench", "--suite", "wmma_ext", "--plot", "x.png"], "--plot is for --suite ladder or ec or overhead"),
        (["bench", "--calls", "10"], "--calls is for --suite overhead, not --suite ladder"),
        (["bench", "--suite", "ec", "--host-shape", "64"], "--host-shape is for --suite overhead, not --suite ec"),
        (["bench", "--suite", "overhead", "--calls", "0"], "--calls 0: give at least 1 call per round"),
        (["bench", "--suite", "overhead", "--host-shape", "64x64"], "size '64x64' must be N or MxNxK"),
        (["bench", "--suite", "overhead", "--sizes", "big"], "size 'big' is not N or MxNxK"),
        # the models suite's options
        (
            ["bench", "--suite", "models", "--dtype", "tf32"],
            "--dtype 'tf32': give a comma list of bf16, fp16, fp32, fp32_tc",
        ),
        (["bench", "--suite", "models", "--tokens", "0"], "--tokens '0': give a comma list of positive token counts"),
        (["bench", "--suite", "models", "--layers", "mlp"], "--layers 'mlp': give a comma list of qkv, o, gate_up"),
        (
            ["bench", "--suite", "models", "--products", "bwd"],
            "--products 'bwd': give a comma list of fwd, dgrad, wgrad",
        ),
        (["bench", "--suite", "models", "--layers", "qkv", "--only", "linear"], "give --layers or --only, not both"),
        (["bench", "--suite", "models", "--only", "attention", "--tokens", "16"], "the selection has none"),
        (["bench", "--suite", "models", "--time-budget-s", "-1"], "--time-budget-s -1.0: give a number of seconds"),
        (
            ["bench", "--suite", "models", "--sizes", "64"],
            "--sizes is for --suite ladder or ec or overhead or fp8, not --suite models",
        ),
        (["bench", "--suite", "models", "--kernel-only"], "--kernel-only is for --suite ladder or ec or overhead"),
        (["bench", "--suite", "models", "--ops", "TN"], "--ops is for --suite ladder, not --suite models"),
        (["bench", "--tokens", "16"], "--tokens is for --suite models or moe, not --suite ladder"),
        (["bench", "--suite", "ec", "--only", "linear"], "--only is for --suite models, not --suite ec"),
        (["bench", "--time-budget-s", "10"], "--time-budget-s is for --suite models"),
        (["bench", "--suite", "ec", "--compile-only"], "--compile-only is for --suite models or shapes"),
        (["bench", "--dtype", "fp32_tc"], "--dtype 'fp32_tc': the ladder takes one of fp32, tf32, fp16, bf16"),
        (["tune", "--suite", "models", "--sizes", "64"], "--sizes and --ops are not for --suite models"),
        (["tune", "--tokens", "16"], "--tokens: for --suite models"),
        (["tune", "--suite", "models", "--layers", "mlp"], "--layers 'mlp'"),
        (["tune", "--suite", "models", "--ops", "NT"], "--sizes and --ops are not for --suite models"),
        (["tune", "--ops", "NX"], "--ops 'NX': give layouts of op(A) and op(B)"),
    ],
)
def test_bench_refuses_bad_arguments_before_the_gpu(capsys, no_gpu_allowed, argv, message):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert message in err
    assert out == ""


@pytest.mark.skipif(rt_device.gpu_available(), reason="checks the message on a machine without a GPU")
@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--kernels", "naive", "--sizes", "64"],
        ["sweep", "--sizes", "64"],
        ["tune", "--kernels", "vectorized", "--sizes", "64"],
    ],
)
def test_gpu_commands_without_a_gpu_say_so(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gemmlab {argv[0]}: ") and "GPU" in err and "Traceback" not in err


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_tune_ops_time_each_shape_in_every_layout_given():
    """`gemmlab tune --ops NN,NT`: each shape's uses are the layouts, one matrix each."""
    from gemmlab.tools.cli import build_parser, tune_shapes

    args = build_parser().parse_args(["tune", "--sizes", "64,128x256x512", "--ops", "NN,nt,NN"])
    sizes, uses = tune_shapes(args)
    assert sizes == [(64, 64, 64), (128, 256, 512)]
    assert uses == {(64, 64, 64): (("NN", 1), ("NT", 1)), (128, 256, 512): (("NN", 1), ("NT", 1))}
    assert tune_shapes(build_parser().parse_args(["tune", "--sizes", "64"]))[1] is None


def test_ops_parse_layout_pairs():
    from gemmlab.tools.cli import _ops

    assert _ops("NN,tn, NT,TT") == ["NN", "TN", "NT", "TT"]


def test_bench_passes_the_layouts_on(monkeypatch, capsys):
    """--ops reaches run_suite; each record carries its layout, shown in the table."""
    seen = {}

    def fake_run_suite(entries, sizes, **kw):
        seen.update(kw)
        return [
            suites.Record("GPU", "pipelined", {}, 64, 64, 64, "float32", 1.0, 1.0, 1.0, 1.0, 100.0, None, 0.0, 1, ops=o)
            for o in kw["ops"]
        ]

    monkeypatch.setattr(suites, "run_suite", fake_run_suite)
    assert main(["bench", "--kernels", "pipelined", "--sizes", "64", "--ops", "NN,TN"]) == 0
    assert seen["ops"] == ["NN", "TN"] and seen["kernel_only"] is False
    rows = [ln.split()[:2] for ln in capsys.readouterr().out.splitlines()[3:5]]
    assert rows == [["pipelined", "64"], ["pipelined", "TN"]]


def test_bench_switches_parse():
    from gemmlab.tools.cli import build_parser

    args = build_parser().parse_args(
        [
            "bench",
            "--suite",
            "overhead",
            "--kernel-only",
            "--calls",
            "50",
            "--host-shape",
            "128x64x32",
            "--json",
            "o.json",
            "--plot",
            "o.png",
        ]
    )
    assert (args.suite, args.kernel_only, args.calls, args.host_shape) == ("overhead", True, 50, "128x64x32")
    args = build_parser().parse_args(["bench"])
    assert (args.suite, args.kernel_only, args.dtype, args.ops, args.calls) == ("ladder", False, None, None, None)
    assert build_parser().parse_args(["sweep", "--kernel-only"]).kernel_only


@pytest.mark.parametrize(
    "argv",
    [["bench", "--kernels", "auto", "--sizes", "64", "--kernel-only"], ["sweep", "--sizes", "64", "--kernel-only"]],
)
def test_kernel_only_reaches_the_suite(monkeypatch, capsys, argv):
    """--kernel-only adds the kernel's own figure: run_suite is asked for both paths,
    and the table has a group of columns for each, titled with what was timed."""
    seen = {}

    def fake_run_suite(entries, sizes, **got):
        seen.update(got)
        return [
            suites.Record(
                "GPU",
                "auto",
                {},
                64,
                64,
                64,
                "float32",
                ms,
                1.0,
                1.0,
                1.0,
                100.0 / ms,
                None,
                0.0,
                3,
                note="auto chose vectorized",
                path=path,
            )
            for path, ms in (("public", 2.0), ("kernel", 1.0))
        ]

    monkeypatch.setattr(suites, "run_suite", fake_run_suite)
    assert main(argv) == 0
    assert seen["kernel_only"] is True
    out = capsys.readouterr().out.splitlines()
    assert "gemmlab.matmul (public)" in out[0] and "kernel only (run_plan)" in out[0]
    row = next(ln for ln in out if ln.startswith("auto:vectorized"))
    assert "50.0%" in row and "100.0%" in row


def test_kernel_entries_parse_names_and_parameters():
    from gemmlab.tools.cli import _kernel_entries

    assert _kernel_entries(["vectorized:BM=64,BN=128", "smem_tiled:tile=16", "naive"], list) == [
        ("vectorized", {"BM": 64, "BN": 128}),
        ("smem_tiled", {"tile": 16}),
        ("naive", {}),
    ]
    assert _kernel_entries(None, lambda: [("x", {})]) == [("x", {})]


@pytest.mark.parametrize(
    "methods, message",
    [
        ("sgemm_cublas,fp64", "unknown method 'fp64'"),
        ("fp32_tc:pipelined", "unknown method 'fp32_tc:pipelined'"),  # not an error-corrected kernel
        ("tf32:ec_wgmma", "unknown method 'tf32:ec_wgmma'"),  # not an error-corrected precision
    ],
)
def test_accuracy_rejects_unknown_methods_before_any_gpu_work(capsys, methods, message):
    assert main(["accuracy", "--methods", methods, "--ks", "64"]) == 2
    err = capsys.readouterr().err
    assert message in err and "precision:kernel" in err and "ec_wmma, ec_wgmma" in err


@pytest.mark.parametrize(
    "command",
    [[], ["list"], ["bench"], ["accuracy"], ["fragments"], ["sweep"], ["tune"], ["verify"], ["inspect"]],
    ids=lambda c: c[0] if c else "gemmlab",
)
def test_every_help_text_prints(command, capsys):
    """argparse formats help strings with %: a bare '%' in one broke `gemmlab bench -h`."""
    with pytest.raises(SystemExit) as done:
        main(command + ["-h"])
    assert done.value.code == 0 and "usage: gemmlab" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, names",
    [
        (["naive,coalesced"], ["naive", "coalesced"]),
        (["naive", "coalesced"], ["naive", "coalesced"]),
        (
            ["naive, vectorized:BM=64,BN=64", "smem_tiled:tile=16,wmma"],
            ["naive", "vectorized:BM=64,BN=64", "smem_tiled:tile=16", "wmma"],
        ),
    ],
)
def test_kernel_lists_take_commas_and_spaces(argv, names):
    from gemmlab.tools.cli import _kernel_items

    assert _kernel_items(argv) == names
    assert _kernel_items(["naive,coalesced", "wmma"]) == ["naive", "coalesced", "wmma"]


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--kernels", "naive,coalesced", "--sizes", "64"],
        ["bench", "--kernels", "naive", "coalesced", "--sizes", "64"],
    ],
)
def test_bench_takes_commas_and_spaces(monkeypatch, capsys, argv):
    seen = {}

    def fake_run_suite(entries, sizes, **kw):
        seen["entries"] = entries
        return []

    monkeypatch.setattr(suites, "run_suite", fake_run_suite)
    assert main(argv) == 0
    assert seen["entries"] == [("naive", {}), ("coalesced", {})]


def test_tune_and_verify_take_commas_and_spaces(capsys, no_gpu_allowed):
    assert main(["tune", "--kernels", "vectorized,nosuch"]) == 2
    assert "unknown kernel 'nosuch'" in capsys.readouterr().err
    assert main(["verify", "--kernels", "naive", "nosuch,wmma"]) == 2
    assert "unknown kernel 'nosuch'" in capsys.readouterr().err


def test_inspect_progress_when_compiling(capsys, monkeypatch, tmp_path):
    """A cold cache with several modules to compile: progress lines on stderr; none when warm."""
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path))
    argv = ["inspect", "--arch", "sm_80", "--kernel", "naive,coalesced", "--jobs", "2"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "gemmlab inspect: compiling 2 kernels in 2 modules for sm_80"
    assert err.splitlines()[-1] == "gemmlab inspect: compiled 2/2"
    assert main(argv) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.gpu
def test_verify_default_covers_every_rung_the_gpu_runs(capsys):
    """`gemmlab verify` with no --kernels: every rung of this GPU's target, each in its
    dtype, against FP64 on fresh inputs (output poisoned with NaN), odd shapes."""
    from gemmlab.tools.verify import verify_dtype

    arch = rt_device.gpu_info(0).arch
    assert main(["verify", "--shapes", "33x65x17,127x129x255,7x13x4099"]) == 0
    out = capsys.readouterr().out.splitlines()
    # (FP8's and grouped's rungs have their own tests: tests/test_wgmma_fp8.py, tests/test_grouped.py.)
    rungs = [s for s in registry.ladder() if s.builds_for(arch) and s.name != "wgmma_fp8" and not s.own_call]
    rows = [ln.split() for ln in out if ln.startswith(("ok", "FAIL"))]
    assert [(r[1], r[2]) for r in rows] == [(s.name, verify_dtype(s, arch)) for s in rungs for _ in range(3)]
    assert all(r[0] == "ok" for r in rows) and out[-1] == f"{len(rows)} passed, 0 failed"


@pytest.mark.gpu
def test_verify_fails_a_kernel_that_writes_nothing(capsys, monkeypatch):
    """The negative control: a matmul that leaves the NaN-poisoned output as it is fails."""
    import gemmlab.core.api

    monkeypatch.setattr(gemmlab.core.api, "matmul", lambda *args, **kwargs: None)
    assert main(["verify", "--kernels", "naive,wmma", "--shapes", "33x65x17"]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL") == 2 and "non-finite" in out and out.strip().endswith("0 passed, 2 failed")


def test_inspect_from_a_script_read_on_stdin(tmp_path):
    """A main program that spawned processes cannot import again (python - < script)
    compiles in its own process instead of breaking the process pool."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "from gemmlab.tools.inspect_kernels import inspect_kernels\n"
        "print(len(inspect_kernels('sm_80', ['naive', 'coalesced'], with_sass=False)))\n"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(
        os.environ, GEMMLAB_CACHE_DIR=str(tmp_path), PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "2", done.stderr
    assert "Traceback" not in done.stderr


# -- the fp8 suite: its shapes, and its refusals before any GPU work ------------------------------


def test_fp8_suite_shapes():
    from gemmlab.tools.bench import fp8

    shapes = fp8.fp8_shapes()
    got = {(M, N, K) for M, N, K, _ in shapes}
    assert {(4096, 4096, 4096), (8192, 8192, 4096), (8192, 8192, 8192), (4096, 14336, 4096)} <= got
    assert {(2048, 28672, 8192), (8192, 28672, 8192), (8192, 8192, 28672), (2048, 6144, 4096)} <= got
    assert len(got) == len(shapes)  # no product twice
    for M, N, K, origin in shapes:
        assert K % 128 == 0 and N % 128 == 0 and origin  # TMA rows and whole 128-wide scale blocks
    assert fp8.scale_shapes("block", 4096, 14336, 4096) == ((4096, 32), (112, 32))
    assert fp8.scale_shapes("row", 8, 16, 128) == ((8, 1), (1, 16))


def test_fp8_suite_refuses_without_hopper(monkeypatch, capsys):
    from gemmlab.tools.bench import fp8

    class Ampere:
        ordinal, name, arch, l2_bytes = 0, "NVIDIA A100", "sm_80", 40 << 20

    monkeypatch.setattr(fp8, "bench_gpu", lambda: Ampere())
    assert main(["bench", "--suite", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "gemmlab bench: --suite fp8 needs a Hopper GPU (sm_90a): gemmlab's FP8 rung (wgmma_fp8) runs there "
        "only; GPU 0 is NVIDIA A100 (sm_80)"
    )


@pytest.mark.skipif(rt_device.gpu_available(), reason="a GPU is present")
def test_fp8_suite_refuses_without_a_gpu(capsys):
    assert main(["bench", "--suite", "fp8", "--sizes", "4096"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gemmlab bench: ") and len(err.strip().splitlines()) == 1


def test_fp8_suite_checks_its_kernels_before_the_gpu(capsys):
    assert main(["bench", "--suite", "fp8", "--kernels", "wgmma"]) == 2
    assert "FP8 inputs run on 'wgmma_fp8' only" in capsys.readouterr().err
    assert main(["bench", "--suite", "fp8", "--kernels", "wgmma_fp8:BN=256"]) == 2
    assert "BN = 256 promotes every K-step or never" in capsys.readouterr().err
    assert main(["bench", "--suite", "fp8", "--dtype", "bf16"]) == 2
    assert "--dtype is for --suite" in capsys.readouterr().err


# -- the moe suite: its shapes and routing, and its refusals before any GPU work -----------------


def test_moe_suite_shapes_and_routing():
    from gemmlab.kernels.tensor.grouped import GROUPED_ALIGN, GROUPED_MAX_GROUPS
    from gemmlab.tools.bench import moe

    shapes = moe.moe_shapes()
    assert len(shapes) == len(moe.MOE_MODELS) * len(moe.TOKENS) * 2
    mixtral = [s for s in shapes if s["model"] == "mixtral-8x7b" and s["tokens"] == 1024]
    assert [(s["product"], s["rows"], s["N"], s["K"], s["experts"]) for s in mixtral] == [
        ("gate_up", 2048, 28672, 4096, 8),
        ("down", 2048, 4096, 14336, 8),
    ]
    granite = moe.moe_shapes(tokens=[16], models=["granite-3.0-1b-a400m"])
    assert [(s["rows"], s["N"], s["K"], s["experts"], s["top_k"]) for s in granite] == [
        (128, 1024, 1024, 32, 8),
        (128, 1024, 512, 32, 8),
    ]
    for s in shapes:  # what grouped_mm takes
        assert s["N"] % GROUPED_ALIGN == 0 and s["K"] % GROUPED_ALIGN == 0 and s["experts"] <= GROUPED_MAX_GROUPS
    for kind in moe.ROUTINGS:
        counts = moe.routing_counts(1000, 64, 6, kind, seed=3)
        assert counts.shape == (64,) and counts.sum() == 6000
        assert (counts == moe.routing_counts(1000, 64, 6, kind, seed=3)).all()  # seeded
    uniform, skewed = moe.routing_counts(4000, 8, 2, "uniform"), moe.routing_counts(4000, 8, 2, "skewed")
    assert uniform.max() < 1.2 * 1000 and skewed[0] > 2 * skewed[-1]
    # A token picks distinct experts: with top-k = experts every expert gets every token.
    assert (moe.routing_counts(50, 4, 4, "skewed") == 50).all()
    assert (moe.routing_counts(64, 128, 8, "skewed") == 0).any()  # small token counts: empty groups
    with pytest.raises(ValueError, match="routing is one of uniform, skewed"):
        moe.routing_counts(10, 4, 2, "zipf")


def test_moe_suite_refuses_without_hopper(monkeypatch, capsys):
    from gemmlab.tools.bench import moe

    class Ampere:
        ordinal, name, arch, l2_bytes = 0, "NVIDIA A100", "sm_80", 40 << 20

    monkeypatch.setattr(moe, "bench_gpu", lambda: Ampere())
    assert main(["bench", "--suite", "moe"]) == 2
    assert capsys.readouterr().err.strip() == (
        "gemmlab bench: --suite moe needs a Hopper GPU (sm_90a): gemmlab's grouped rung runs there only; "
        "GPU 0 is NVIDIA A100 (sm_80)"
    )


@pytest.mark.skipif(rt_device.gpu_available(), reason="a GPU is present")
def test_moe_suite_refuses_without_a_gpu(capsys):
    assert main(["bench", "--suite", "moe", "--tokens", "128"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gemmlab bench: ") and len(err.strip().splitlines()) == 1


def test_moe_suite_checks_its_options_before_the_gpu(capsys):
    assert main(["bench", "--suite", "moe", "--models", "mixtral-8x7b,gpt-5"]) == 2
    assert "--models gpt-5: --suite moe knows mixtral-8x7b" in capsys.readouterr().err
    assert main(["bench", "--suite", "moe", "--kernel-only"]) == 2
    assert "--kernel-only is for --suite" in capsys.readouterr().err
    assert main(["bench", "--suite", "moe", "--tokens", "0"]) == 2
    assert "positive token counts" in capsys.readouterr().err


@pytest.mark.parametrize("suite", ["models", "shapes"])
def test_bench_compile_only_compiles_and_times_nothing(monkeypatch, capsys, no_gpu_allowed, suite):
    """--compile-only hands the selected products and dtypes to models.compile_only and
    neither times nor writes a table."""
    seen = []
    monkeypatch.setattr(models, "compile_only", lambda cases, dtypes, quiet=False: seen.append((len(cases), dtypes)))
    monkeypatch.setattr(models, "measure", lambda *a, **k: pytest.fail("timed"))
    extra = ["--limit", "5"] if suite == "shapes" else ["--layers", "qkv"]
    assert main(["bench", "--suite", suite, "--dtype", "bf16,fp32", "--compile-only", *extra]) == 0
    assert seen and seen[0][1] == ["bf16", "fp32"] and seen[0][0] > 0
    assert capsys.readouterr().out == ""
