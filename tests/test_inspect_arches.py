"""`gemmlab inspect` and `gemmlab fragments --analytic` with every option on every
target gemmlab checks (CPU: compiles, no GPU): the rungs that cannot target an
arch are listed with the reason and the rungs that can; a target below the
ladder is refused in one line; fragment kinds are matched exactly."""

import json

import pytest

from gemmlab.lab import fragments as fr
from gemmlab.tools.cli import main
from gemmlab.tools.inspect_kernels import find_disassembler, rungs_for
from gemmlab.kernels import registry
from gemmlab.kernels.spec import KNOWN_TARGETS


@pytest.mark.parametrize("arch", KNOWN_TARGETS)
def test_inspect_text_names_refused_rungs(arch, capsys):
    """Kernels given with commas and spaces; wgmma (sm_90a only; not compiled on sm_90a
    here, it is slow) is listed with the reason and the rungs that run there."""
    named = ["smem_tiled,coalesced"] + ([] if arch == "sm_90a" else ["wgmma"])
    assert main(["inspect", "--arch", arch, "--kernel", *named, "--ops", "NN,TN", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    rows = [ln.split()[0] for ln in out.splitlines() if ln.startswith("gemmlab::")]
    assert rows == ["gemmlab::smem_tiled<32,"] * 2 + ["gemmlab::coalesced<32,"] * 2
    if arch == "sm_90a":
        assert "does not run" not in out and "kernels that run" not in out
    else:
        assert f"wgmma: does not run on {arch}: it needs sm_90a" in out
        assert out.strip().splitlines()[-1] == f"kernels that run on {arch}: {', '.join(rungs_for(arch))}"
    assert ("no SASS columns" in out) == (find_disassembler() is None)


@pytest.mark.parametrize("arch", KNOWN_TARGETS)
def test_inspect_json_all_configs(arch, capsys):
    assert main(["inspect", "--arch", arch, "--kernels", "smem_tiled", "--all-configs", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data) == len(registry.get("smem_tiled").configurations())
    for r in data:
        assert r["arch"] == arch and r["spill_bytes"] == 0 and not r["refused"]
        if find_disassembler():
            assert r["sass"]["FFMA"] > 0 and r["sass"]["LDG.32"] > 0 and r["sass"]["BAR"] > 0, r


def test_every_rung_is_listed_on_every_arch():
    """Without --kernel, each rung appears: compiled, or refused with the reason."""
    from gemmlab.tools.inspect_kernels import _specs

    for arch in KNOWN_TARGETS:
        assert [s.name for s in _specs(arch, None)] == [s.name for s in registry.ladder()]
        assert rungs_for(arch) and set(rungs_for(arch)) <= {s.name for s in registry.ladder()}
    assert "wgmma" in rungs_for("sm_90a") and "wgmma" not in rungs_for("sm_86")
    assert "mma_pipelined" not in rungs_for("sm_75") and "ec_wmma" not in rungs_for("sm_75")


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["inspect", "--arch", "sm_70"],
            "gemmlab inspect: no kernel runs on sm_70: NVRTC 13 (CUDA 13) builds for sm_75 and later only",
        ),
        (["inspect", "--arch", "ampere"], "'ampere' is not an NVRTC target such as sm_80 or sm_90a"),
        (["inspect", "--kernel", "auto"], "'auto' is not one kernel"),
        (["inspect", "--kernel", "nosuch"], "unknown kernel 'nosuch'; known kernels: auto, naive"),
        (
            ["fragments", "--analytic", "--arch", "sm_75", "bf16"],
            "sm_75 has no bf16 fragments: BF16 and TF32 WMMA need sm_80",
        ),
        (["fragments", "--analytic", "--arch", "sm_70"], "no fragment maps for sm_70"),
        (["fragments", "--analytic", "matrix_c"], "no fragment kind matches matrix_c"),
        (["fragments", "--arch", "sm_80"], "--arch is for --analytic"),
    ],
)
def test_refusals_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("arch", fr.SUPPORTED_ARCHES)
def test_fragments_analytic_every_arch(arch, capsys, tmp_path):
    assert main(["fragments", "--analytic", "--arch", arch, "--out", str(tmp_path), "--no-plots"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("wrote ") and len(err.splitlines()) == 1, err  # the files written, no note
    kinds = fr.kinds_for(arch)
    assert len(out.splitlines()) == len(kinds) and out.count(" ok") == len(kinds)
    assert sorted(p.stem for p in tmp_path.glob("*.csv")) == sorted(kd.name for kd in kinds)


@pytest.mark.parametrize("arch", ["sm_75", "sm_86"])
def test_fragment_kinds_match_exactly(arch, capsys, tmp_path):
    """f16 names the f16 kinds only, never bf16 (on sm_75, which has no bf16, and on sm_86)."""
    assert (
        main(
            [
                "fragments",
                "--analytic",
                "--arch",
                arch,
                "--out",
                str(tmp_path),
                "--no-plots",
                "matrix_a.m16n16k16.f16.row",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.split()[0] == "matrix_a.m16n16k16.f16.row"
    assert [p.name for p in tmp_path.glob("*.csv")] == ["matrix_a.m16n16k16.f16.row.csv"]
    assert [kd.name for kd in fr.select(["f16.m16n16k16.matrix_b"])] == [
        "matrix_b.m16n16k16.f16.row",
        "matrix_b.m16n16k16.f16.col",
    ]
    assert all(kd.dtype == "bf16" for kd in fr.select(["bf16"]))
    assert {kd.dtype for kd in fr.select(["f16"])} == {"f16"}
