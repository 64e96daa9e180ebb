"""The wgmma rung's staged epilogue (kernels/include/gemmlab/tensor/04_wgmma_store.cuh) on
the CPU: tests/wgmma_store_check.cpp compiles the header as the kernel includes it with
g++ (__syncwarp a barrier of 32 threads, one per lane) and runs one warp's epilogue for
every output type and tile width, rows and columns that end inside a chunk, odd and even
leading dimensions, C on and off a 2-element boundary (so with and without paired
stores), beta = 0 and 0.5, no bias, a row and a column: C bit for bit as one rounding
of alpha * acc + bias (+ beta * C), nothing else written; and StagedChunk's pitch free
of bank conflicts for the accumulator writes.  What it cannot check: the kernel around
it (tests/test_wgmma.py's GPU tests do)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from gemmlab.core.errors import HeaderNotFoundError
from gemmlab.runtime.compile import INCLUDE_DIR
from gemmlab.runtime.headers import find_cuda_headers

CHECK = Path(__file__).with_name("wgmma_store_check.cpp")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_staged_epilogue_on_the_cpu(tmp_path):
    try:
        cuda_include = find_cuda_headers().include_dirs
    except HeaderNotFoundError as e:
        pytest.skip(f"needs the CUDA headers (cuda_fp16.h, cuda_bf16.h): {e}")
    exe = tmp_path / "wgmma_store_check"
    cmd = ["g++", "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-I", str(INCLUDE_DIR)]
    for d in cuda_include:
        cmd += ["-I", str(d)]
    built = subprocess.run(cmd + [str(CHECK), "-o", str(exe)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-4000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert ran.stdout.strip().endswith(", 0 failed"), ran.stdout[-2000:]
