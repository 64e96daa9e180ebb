"""The wgmma rung's work items and split-K's fixup (kernels/include/gemmlab/tensor/04_wgmma_work.cuh)
on the CPU: tests/wgmma_work_check.cpp compiles the header as the kernel includes it with g++
and walks the launches below as the kernel's blocks would -- the grids the spec's geometry
gives, smaller ones whose blocks take several rounds of items, clusters, one and two consumer
warpgroups, slices without K-steps, consumers whose rows lie past M.  Each region of the
partials must be written once and read once, by a later item (an item waits only on lower
item indices: no deadlock while every block is resident), the counters counted up as far as
their owners wait, every index inside the workspaces wgmma_split_workspace sizes; and on the
small launches the protocol runs on threads (one per GPU thread, C++ atomics for the counters,
a barrier per warpgroup): every owner's sum right, the counters zero after each of two
launches.  What it cannot check: the GPU's memory model and the kernel around the header
(tests/test_wgmma.py's split-K tests do)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from gemmlab.kernels import registry
from gemmlab.kernels.spec import Problem, cdiv
from gemmlab.kernels.tensor.wgmma import wgmma_split_workspace, wgmma_tile
from gemmlab.runtime.compile import INCLUDE_DIR

CHECK = Path(__file__).with_name("wgmma_work_check.cpp")
WGMMA = registry.get("wgmma")


def _case(M, N, K, splits, batch=1, BM=64, BN=128, CLUSTER=1, dtype="bfloat16", grid=None) -> list[int]:
    """The check's 10 integers for a split launch of wgmma, its workspaces as the host sizes them."""
    p = WGMMA.resolve({"BM": BM, "BN": BN, "CLUSTER": CLUSTER, "SPLITK": splits}, dtype)
    prob = Problem(M, N, K, True, dtype, dtype)
    tm, tn = wgmma_tile(p, dtype)
    consumers = BM // 64
    partial_bytes, counter_bytes = wgmma_split_workspace(p, prob)
    host_tiles = batch * counter_bytes // (4 * consumers)
    assert batch * partial_bytes == host_tiles * (splits - 1) * BM * BN * 4
    if grid is None:
        grid = WGMMA.launch(p, prob, batch).grid[0]
    k_steps = cdiv(K, 64 if dtype != "tf32" else 32)
    return [cdiv(cdiv(M, tm), CLUSTER), cdiv(N, tn), batch, splits, k_steps, CLUSTER, consumers, grid, M, host_tiles]


# The spec's grids (one round or several), clusters (odd tile-rows: a cluster's block past M),
# slices without K-steps (K shorter than the split), rows past M for the second consumer, and
# grids cut short so that blocks take many items.
SCHEDULES = [
    _case(1, 4096, 8192, 4),
    _case(16, 4096, 14336, 8, BM=128, BN=256),
    _case(128, 4096, 28672, 4, BM=128, BN=128),
    _case(300, 333, 2100, 16, BM=128, BN=256, CLUSTER=2),
    _case(300, 333, 2100, 2, BM=64, BN=128, CLUSTER=2),
    _case(7, 13, 5, 3),
    _case(7, 13, 5, 16, BM=128),
    _case(129, 257, 520, 3, batch=5),
    _case(100, 200, 700, 4, batch=6, grid=7),
    _case(517, 389, 2100, 3, BM=128, BN=192),
    _case(2000, 2000, 4096, 16, BM=128, BN=256),  # more items than SMs: several rounds
    _case(300, 333, 2100, 16, BM=128, BN=256, CLUSTER=2, grid=6),
    _case(1, 1, 1, 2),
    _case(300, 333, 2100, 5, dtype="tf32"),
]
# Small enough for a thread per GPU thread: every block, both consumers, several rounds.
THREADED = [
    _case(200, 300, 700, 3, BM=128, grid=4),
    _case(100, 300, 300, 4, BM=128, CLUSTER=2, grid=4),
    _case(70, 150, 130, 5, batch=2, grid=3),  # 3 K-steps in 5 slices: two empty
    _case(130, 150, 1000, 2, BM=128, batch=2, grid=2),
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_split_k_fixup_on_the_cpu(tmp_path):
    exe = tmp_path / "wgmma_work_check"
    cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-Wno-unknown-pragmas", "-I", str(INCLUDE_DIR)]
    built = subprocess.run(cmd + [str(CHECK), "-o", str(exe)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-4000:]
    args = [str(x) for case in SCHEDULES for x in case] + ["--"] + [str(x) for case in THREADED for x in case]
    ran = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert ran.stdout.strip().endswith(f"{len(SCHEDULES) + len(THREADED)} cases, {len(THREADED)} on threads, 0 failed")
