"""Which rung runs on which GPU (KernelSpec.why_not_on), checked before anything
compiles: every rung x every known target, the refusal messages, kernel="auto" off
Hopper, `gemmlab list` and `gemmlab inspect --arch` (CPU only)."""

import pytest

from gemmlab.core import planner
from gemmlab.tools.cli import main
from gemmlab.tools.inspect_kernels import inspect_kernels
from gemmlab.kernels import registry
from gemmlab.kernels.spec import FRAGMENT_MAPS, KNOWN_TARGETS, arch_cc

# Rungs of plain CUDA-core arithmetic run on every target: the FP32 ladder, gemv, outer and batched_small.
SIMT = [s.name for s in registry.ladder("simt")] + ["gemv", "outer", "batched_small"]
# Where each other rung runs, by target.
EXPECTED = {
    "wmma": {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"},
    "wmma_warptile": {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"},
    "mma_pipelined": {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"},
    "gemv_mma": {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"},
    "batched_small_mma": {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"},
    "ec_wmma": {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"},
    "wgmma_tma": {"sm_90a"},
    "wgmma_specialized": {"sm_90a"},
    "wgmma_persistent": {"sm_90a"},
    "wgmma": {"sm_90a"},
    "wgmma_fp8": {"sm_90a"},
    "grouped": {"sm_90a"},
    "grouped_wgrad": {"sm_90a"},
    "ec_wgmma": {"sm_90a"},
}


@pytest.mark.parametrize("spec", registry.ladder(), ids=lambda s: s.name)
def test_every_rung_on_every_target(spec):
    runs = {a for a in KNOWN_TARGETS if spec.builds_for(a)}
    assert runs == (set(KNOWN_TARGETS) if spec.name in SIMT else EXPECTED[spec.name])
    for arch in KNOWN_TARGETS:
        for dt in spec.dtypes:
            turing_fp16 = arch != "sm_75" or dt == "float16" or spec.name in SIMT
            assert spec.builds_for(arch, dt) == (arch in runs and turing_fp16), (arch, dt)
    assert spec.as_record()["runs_on"] == [a for a in KNOWN_TARGETS if a in runs]


def test_targets_nvrtc_dropped_and_unknown_maps_are_refused():
    wmma = registry.get("wmma")
    assert "NVRTC 13" in registry.get("naive").why_not_on("sm_70")
    assert "fragment maps" in wmma.why_not_on("sm_87") and "sm_87" in wmma.why_not_on("sm_87")
    assert wmma.builds_for("sm_120a") and wmma.builds_for("sm_90")
    assert set(FRAGMENT_MAPS) == {75, 80, 86, 89, 90, 100, 120} and arch_cc("sm_100a") == 100


def test_refusal_names_gpu_arch_needs_and_what_runs():
    with pytest.raises(ValueError) as e:
        registry.get("mma_pipelined").check_arch("sm_75", "Tesla T4", "float16")
    text = str(e.value)
    assert "Tesla T4 (sm_75)" in text and "sm_80" in text and "cp.async" in text
    assert text.endswith("Kernels that run there for float16: wmma, wmma_warptile, gemv, outer, batched_small")
    with pytest.raises(
        ValueError,
        match=r"NVIDIA L4 \(sm_89\).*sm_90a.*run there: naive, .*ec_wmma, gemv, outer, gemv_mma, batched_small, batched_small_mma$",
    ):
        registry.get("ec_wgmma").check_arch("sm_89", "NVIDIA L4")


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_100a", "sm_120"])
def test_auto_off_hopper_picks_rungs_that_run(arch):
    for dtype, out in (("float16", "float16"), ("bfloat16", "float32"), ("tf32", "float32")):
        p = planner.plan("auto", 2048, 2048, 2048, dtype=dtype, out_dtype=out, arch=arch, sm_count=84)
        assert p.spec.name == "mma_pipelined"
    assert planner.plan("auto", 2048, 2048, 2048, dtype="fp16_ec", arch=arch, sm_count=84).spec.name == "ec_wmma"


def test_auto_on_turing():
    """FP16: the highest tensor rung that runs there (mma_pipelined needs sm_80); BF16 and TF32 refused."""
    assert planner.plan("auto", 2048, 2048, 2048, arch="sm_75", sm_count=40).spec.family == "simt"
    for out in ("float16", "float32"):
        p = planner.plan("auto", 4096, 4096, 4096, dtype="float16", out_dtype=out, arch="sm_75", sm_count=40)
        assert p.spec.name == "wmma_warptile"
    for dtype, out in (("bfloat16", "bfloat16"), ("tf32", "float32")):
        runs = "gemv, outer, batched_small" if dtype == "bfloat16" else "none"  # products with a thin side only
        with pytest.raises(
            ValueError,
            match=rf"Tesla T4 \(sm_75\): it needs sm_80 or later for {dtype}.*"
            rf"run there for {dtype}: {runs}$",
        ):
            planner.plan(
                "auto", 256, 256, 256, dtype=dtype, out_dtype=out, arch="sm_75", sm_count=40, gpu_name="Tesla T4"
            )


def test_named_rung_outside_its_range():
    with pytest.raises(ValueError, match=r"'wmma' does not run on this GPU \(sm_75\): it needs sm_80 .* bfloat16"):
        planner.plan("wmma", 256, 256, 256, dtype="bfloat16", out_dtype="bfloat16", arch="sm_75")
    assert planner.plan("wmma", 256, 256, 256, dtype="float16", out_dtype="float16", arch="sm_75").spec.name == "wmma"


def test_list_shows_the_range(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "runs on: sm_90a only" in out and "runs on: sm_75 and later" in out


def test_inspect_reports_a_refused_rung_as_one_line(capsys):
    reports = inspect_kernels("sm_75", ["naive", "mma_pipelined"], with_sass=False)
    assert [r.kernel for r in reports] == ["naive", "mma_pipelined"]
    assert not reports[0].refused and "sm_80" in reports[1].refused
    assert main(["inspect", "--arch", "sm_75", "--kernel", "naive,wgmma"]) == 0
    out = capsys.readouterr().out
    assert "wgmma: does not run on sm_75: it needs sm_90a" in out


# -- per-arch limits ------------------------------------------------------------------

import logging  # noqa: E402

from gemmlab.runtime.device import ARCH_LIMITS, GPUInfo, arch_limits, cc_of  # noqa: E402

SHAPES = [(m, n, k, b) for m in (64, 1000, 4096) for n in (64, 2048, 8192) for k in (64, 4096) for b in (1, 8)]
DTYPES = [
    ("float32", "float32"),
    ("float16", "float16"),
    ("bfloat16", "float32"),
    ("tf32", "float32"),
    ("fp16_ec", "float32"),
    ("tf32_ec", "float32"),
]


def auto_plans(arch, sm_count):
    for m, n, k, b in SHAPES:
        for dt, out in DTYPES:
            # (gemv, outer and batched_small, which run everywhere, take only thin or small products)
            if not any(s.builds_for(arch, dt) for s in registry.ladder() if dt in s.dtypes and s.family != "gemv"):
                continue
            yield planner.plan("auto", m, n, k, dtype=dt, out_dtype=out, arch=arch, sm_count=sm_count, batch=b)


@pytest.mark.parametrize("arch", KNOWN_TARGETS)
def test_every_auto_choice_fits_the_arch(arch):
    """Shared memory per block and per SM, threads per block and per SM, for every
    configuration auto picks over a grid of shapes, dtypes and batches."""
    lim = arch_limits(arch)
    seen = set()
    for p in auto_plans(arch, 84):
        geo = p.spec.launch(p.params, p.problem)
        threads = geo.block[0] * geo.block[1] * geo.block[2]
        assert geo.smem_bytes <= lim.smem_per_block_optin <= lim.smem_per_sm, p.describe()
        assert threads <= min(lim.threads_per_block, lim.threads_per_sm), p.describe()
        assert p.spec.builds_for(arch, p.problem.dtype)
        seen.add(p.spec.name)
    assert "pipelined" in seen and ("wmma_warptile" if arch == "sm_75" else "ec_wmma") in seen


def test_defaults_that_do_not_fit_are_replaced_with_the_reason():
    p = planner.plan(
        "mma_pipelined",
        4096,
        4096,
        4096,
        dtype="float16",
        out_dtype="float16",
        arch="sm_86",
        gpu_name="NVIDIA GeForce RTX 3060",
    )
    assert p.spec.launch(p.params, p.problem).smem_bytes <= 99 * 1024
    assert "147456 bytes" in p.limit_reason and "RTX 3060 allows 101376" in p.describe()
    assert (
        planner.plan("mma_pipelined", 4096, 4096, 4096, dtype="float16", out_dtype="float16", arch="sm_80").limit_reason
        == ""
    )
    with pytest.raises(ValueError, match=r"needs 147456 bytes .* \(sm_89\) allows 101376"):
        planner.plan("mma_pipelined", 64, 64, 64, dtype="float16", out_dtype="float16", arch="sm_89", STAGES=3)
    # a GPU's own figure takes precedence over the table's
    p = planner.plan("pipelined", 4096, 4096, 4096, arch="sm_90a", smem_limit=48 * 1024)
    assert p.spec.launch(p.params, p.problem).smem_bytes <= 48 * 1024 and p.limit_reason


def test_limits_table_and_gpu_info():
    assert arch_limits("sm_86").smem_per_block_optin == 99 * 1024 and arch_limits("sm_75").smem_per_sm == 64 * 1024
    assert arch_limits("sm_80").smem_per_block_optin == 163 * 1024 and cc_of("sm_120a") == (12, 0)
    assert all(cc_of(a) in ARCH_LIMITS for a in KNOWN_TARGETS)
    with pytest.raises(ValueError, match="no limits known"):
        arch_limits("sm_61")
    gpu = GPUInfo(0, "NVIDIA L4", (8, 9), "sm_89", 58, 2040.0, 48 << 20, 99 * 1024)
    assert gpu.limits.smem_per_sm == 100 * 1024 and gpu.limits.threads_per_sm == 1536


def test_a_gpu_without_a_table_is_logged_once(caplog, capsys):
    planner._UNTUNED_NOTED.discard("nvidia-geforce-rtx-3060")
    with caplog.at_level(logging.INFO, logger="gemmlab"):
        for _ in range(3):
            planner.plan("auto", 512, 512, 512, arch="sm_86", gpu_slug="nvidia-geforce-rtx-3060")
    notes = [r for r in caplog.records if "gemmlab tune" in r.getMessage()]
    assert len(notes) == 1 and "nvidia-geforce-rtx-3060" in notes[0].getMessage()
    assert capsys.readouterr().out == ""
