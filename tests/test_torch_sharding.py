"""DTensor's sharding rules for gemmlab's operators (gemmlab.torch.sharding).

On the CPU: the placement tables, and two processes over gloo that shard the
operators every way the rules allow, forward and backward, and a
tensor-parallel MLP (column- then row-parallel nn.Linear) under the routing
mode -- each result against the one-process product (tests/sharding_worker.py);
the grouped operators likewise, in bfloat16 with both layouts of the weights,
placements no rule takes (DTensor gathers them first), and expert parallelism
done by hand (all-to-all, then grouped_mm on each process's own experts).
The operators' kernels are float64 stand-ins there (tests/torch_cpu.py);
tests/test_torch_sharding_gpu.py runs the real ones over NCCL on two GPUs."""

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this PyTorch has no torch.distributed", allow_module_level=True)

import gemmlab.torch as gt  # noqa: E402
from torch.distributed.tensor import Partial, Replicate, Shard  # noqa: E402

WORLD = 2


def test_rules_are_registered():
    from torch.distributed.tensor import DTensor

    assert gt.sharding.REGISTERED
    propagator = DTensor._op_dispatcher.sharding_propagator
    for name in ("mm", "bmm", "grouped_mm", "grouped_mm_weight_grad"):
        assert getattr(torch.ops.gemmlab, name).default in propagator.op_strategy_funcs, name
    # DTensor's cache of sharding decisions keys on the weight gradient's `transposed` (the
    # output's layout; an int in the schema, since the cache keys on ints, not bools): the two
    # processes' run of both layouts fails without it.
    op = torch.ops.gemmlab.grouped_mm_weight_grad.default
    assert propagator.op_to_schema_info[op].static_argnum <= 3


def test_mm_placements_are_pytorchs():
    assert gt.sharding.placements("mm") == [
        ([Replicate()], [Replicate(), Replicate()]),
        ([Shard(0)], [Shard(0), Replicate()]),
        ([Shard(1)], [Replicate(), Shard(1)]),
        ([Partial()], [Shard(1), Shard(0)]),
    ]


def test_bmm_placements_shift_by_the_batch():
    rules = gt.sharding.placements("bmm")
    assert ([Shard(0)], [Shard(0), Shard(0)]) in rules
    assert ([Partial()], [Shard(2), Shard(1)]) in rules
    assert ([Shard(1)], [Shard(1), Replicate()]) in rules
    assert ([Shard(2)], [Replicate(), Shard(2)]) in rules


def test_every_rule_over_two_processes(tmp_path):
    import torch.multiprocessing as mp

    from sharding_worker import run

    mp.start_processes(
        run, args=(WORLD, str(tmp_path / "init"), "cpu", "float32", "fp32_tc", 1e-6), nprocs=WORLD, start_method="spawn"
    )


def test_grouped_placements():
    assert gt.sharding.placements("grouped_mm") == [
        ([Replicate()], [Replicate(), Replicate(), Replicate()]),
        ([Shard(1)], [Replicate(), Shard(2), Replicate()]),  # column-parallel: N of every expert
        ([Partial()], [Shard(1), Shard(1), Replicate()]),  # row-parallel: K of every expert
    ]
    assert gt.sharding.placements("grouped_mm_weight_grad") == [
        ([Replicate()], [Replicate(), Replicate(), Replicate()]),
        ([Shard(1)], [Shard(1), Replicate(), Replicate()]),
        ([Shard(2)], [Replicate(), Shard(1), Replicate()]),
    ]
    assert gt.sharding.placements("grouped_mm_weight_grad", transposed=True) == [
        ([Replicate()], [Replicate(), Replicate(), Replicate()]),
        ([Shard(2)], [Shard(1), Replicate(), Replicate()]),
        ([Shard(1)], [Replicate(), Shard(1), Replicate()]),
    ]
    # The other forms: the grouped dimension (K of 2-D x 2-D, N of 3-D x 2-D) is never sharded.
    assert gt.sharding.placements("grouped_mm", form="2d2d") == [
        ([Replicate()], [Replicate(), Replicate(), Replicate()]),
        ([Shard(1)], [Shard(0), Replicate(), Replicate()]),  # M
        ([Shard(2)], [Replicate(), Shard(1), Replicate()]),  # N
    ]
    assert gt.sharding.placements("grouped_mm", form="3d2d") == [
        ([Replicate()], [Replicate(), Replicate(), Replicate()]),
        ([Shard(0)], [Shard(1), Replicate(), Replicate()]),  # M
        ([Partial()], [Shard(2), Shard(0), Replicate()]),  # K
    ]
    assert gt.sharding.placements("grouped_mm", form="3d3d") == gt.sharding.placements("bmm")
    for op in ("grouped_mm", "grouped_mm_weight_grad"):  # neither tokens nor experts are sharded
        for _, (a, b, offs) in gt.sharding.placements(op):
            assert a != Shard(0) and b != Shard(0) and offs == Replicate()


def test_grouped_rules_and_expert_parallelism_over_two_processes(tmp_path):
    import torch.multiprocessing as mp

    from sharding_worker import run_grouped

    mp.start_processes(
        run_grouped, args=(WORLD, str(tmp_path / "init"), "cpu", 2e-2), nprocs=WORLD, start_method="spawn"
    )
