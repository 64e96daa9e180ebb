"""DTensor over NCCL with gemmlab's kernels: every sharding rule of mm and bmm,
forward and backward, and a tensor-parallel MLP under the routing context, on two
GPUs, in bfloat16 and in float32 with precision="fp32_tc", each against the
FP64 product of the whole matrices (tests/sharding_worker.py)."""

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

WORLD = 2


@pytest.mark.parametrize("dtype, precision, rtol", [("bfloat16", "", 2e-2), ("float32", "fp32_tc", 1e-6)])
def test_every_rule_over_two_gpus(tmp_path, dtype, precision, rtol):
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        pytest.skip("this PyTorch has no NCCL")
    if torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} GPUs, this machine has {torch.cuda.device_count()}")
    import torch.multiprocessing as mp

    from sharding_worker import run

    mp.start_processes(
        run, args=(WORLD, str(tmp_path / "init"), "cuda", dtype, precision, rtol), nprocs=WORLD, start_method="spawn"
    )
