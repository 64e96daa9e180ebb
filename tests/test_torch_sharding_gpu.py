"""DTensor over NCCL with gemmlab's kernels: every sharding rule of mm and bmm,
forward and backward, and a tensor-parallel MLP under the routing context, on two
GPUs, in bfloat16 and in float32 with precision="fp32_tc", each against the
FP64 product of the whole matrices; every rule of grouped_mm and
grouped_mm_weight_grad and expert parallelism by all-to-all, in bfloat16 on two
Hopper GPUs (tests/sharding_worker.py)."""

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


def test_grouped_rules_and_expert_parallelism_over_two_gpus(tmp_path):
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        pytest.skip("this PyTorch has no NCCL")
    if torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} GPUs, this machine has {torch.cuda.device_count()}")
    if any(torch.cuda.get_device_capability(i) != (9, 0) for i in range(WORLD)):
        pytest.skip("the grouped rungs need Hopper GPUs (sm_90a)")
    import torch.multiprocessing as mp

    from sharding_worker import run_grouped

    mp.start_processes(
        run_grouped, args=(WORLD, str(tmp_path / "init"), "cuda", 2e-2), nprocs=WORLD, start_method="spawn"
    )
