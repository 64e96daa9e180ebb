"""Calls of several steps repeated from their recording (runtime.launch.Replay, through
PreparedCall.run) on the GPU: a staged wgmma product (the copy, then the kernel), rung 8 split
over K (its slices, then their sum) and fp32_tc (the split pre-pass and its candidates), each
called again and again on the same arrays with new values in them, the output NaN-poisoned
before each call, every result against FP64.  A replay that repeated the first call's work
instead of enqueueing it again, or that read a stale workspace, fails here."""

import pytest

import gemmlab
from gemmlab.runtime import device as rt_device
from gemmlab.runtime import launch
from fp32_sums_check import check_fp32_sums, operand

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
pytestmark = pytest.mark.gpu

CALLS = 5  # the first in full, the second recorded, the rest replayed

CASES = [
    # (M, N, K, layouts, dtype, precision), plans as an H200 makes them: rows of 5655 and 543
    # bf16 off the 16-byte grid (copied, then wgmma); float32 split over K (16 slices, then
    # their sum); float32 off the grid and split (copies, slices, sum); fp32_tc on ec_wgmma.
    pytest.param(5655, 543, 61, ("T", "N"), "bfloat16", None, id="bf16-staged-TN"),
    pytest.param(755, 95, 4009, ("N", "T"), "float32", None, id="fp32-split-NT"),
    pytest.param(999, 157, 2131, ("N", "N"), "float32", None, id="fp32-staged-split-NN"),
    pytest.param(1024, 1024, 1000, ("N", "T"), "float32", "fp32_tc", id="fp32_tc"),
]


@pytest.mark.parametrize("precision", [None, "fp32_tc"])
def test_repeated_batched_calls_compute_each_call(precision):
    """A batch whose steps may take a kept workspace once per matrix or chunk (then no replay:
    its locks cannot be held at once) or once for the whole batch (replayed): either way every
    repeated call computes its own inputs, against FP64, out NaN-poisoned before each."""
    if rt_device.gpu_info().arch != "sm_90a":
        pytest.skip("the plans named are an H200's (sm_90a)")
    gen = torch.Generator(device="cuda").manual_seed(2)
    batch, M, N, K = 3, 129, 257, 1001
    a = torch.empty(batch, M, K, device="cuda")
    b = torch.empty(batch, K, N, device="cuda")
    out = torch.empty(batch, M, N, device="cuda")
    for _ in range(CALLS):
        a.uniform_(-1, 1, generator=gen), b.uniform_(-1, 1, generator=gen), out.fill_(float("nan"))
        gemmlab.matmul(a, b, out=out, precision=precision)
        torch.cuda.synchronize()
        check_fp32_sums(out, a.double(), b.double(), out, 1.0, 0.0, K, "float32", gemmlab.last_plan())


@pytest.mark.parametrize("M, N, K, layout, dtype, precision", CASES)
def test_repeated_calls_compute_each_call(M, N, K, layout, dtype, precision, monkeypatch):
    if rt_device.gpu_info().arch != "sm_90a":
        pytest.skip("the plans named are an H200's (sm_90a): staged wgmma, ec_wgmma")
    replayed = []
    enqueue = launch.Replay.enqueue

    def counting(self, stream):
        done = enqueue(self, stream)
        replayed.append(done)
        return done

    monkeypatch.setattr(launch.Replay, "enqueue", counting)
    gen = torch.Generator(device="cuda").manual_seed(1)
    a, _ = operand(M, K, dtype, layout[0], gen)
    b, _ = operand(K, N, dtype, layout[1], gen)
    out = torch.empty(M, N, device="cuda", dtype=getattr(torch, dtype))
    for i in range(CALLS):
        fresh_a, a64 = operand(M, K, dtype, layout[0], gen)
        fresh_b, b64 = operand(K, N, dtype, layout[1], gen)
        a.copy_(fresh_a), b.copy_(fresh_b), out.fill_(float("nan"))
        gemmlab.matmul(a, b, out=out, precision=precision)
        torch.cuda.synchronize()
        plan = gemmlab.last_plan()
        check_fp32_sums(out, a64, b64, out, 1.0, 0.0, K, dtype, plan)
    assert replayed == [True] * (CALLS - 2), f"{plan.describe()}: replays {replayed}"
