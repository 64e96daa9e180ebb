"""How DTensor shards gemmlab's operators: torch.ops.gemmlab.mm and bmm.

With these rules registered, a DTensor program (and so the column- and
row-parallel ``nn.Linear`` styles of torch.distributed.tensor.parallel) runs
gemmlab's kernels on each GPU's shards, and PyTorch's collectives between
them: DTensor picks one of the placements below for the operands (moving data
where the inputs are placed otherwise), calls the operator on the local
shards, and leaves a Partial result to be reduced where the program asks.

The rules are those PyTorch declares for aten.mm and aten.bmm (its einsum
strategies "mk,kn->mn" and "bmk,bkn->bmn"), one mesh dimension at a time;
DTensor extends them to every dimension of the mesh.  For C = A @ B:

    A          B          C
    Replicate  Replicate  Replicate
    Shard(m)   Replicate  Shard(m)    rows of A: rows of C
    Replicate  Shard(n)   Shard(n)    columns of B: columns of C
    Shard(k)   Shard(k)   Partial     each GPU a share of K: a sum to reduce
    Shard(b)   Shard(b)   Shard(b)    bmm only: the batch

The backward pass is made of the same operators (grad_a = grad @ b^T,
grad_b = a^T @ grad), so it is sharded by the same rules.
"""

from __future__ import annotations

import torch

__all__ = ["REGISTERED", "placements"]

# The placement table, as (output, (a, b)) with dimension names of op(A) @ op(B)
# (m, k of A; k, n of B; b the batch of bmm).
_MM_RULES = (("R", ("R", "R")), ("m", ("m", "R")), ("n", ("R", "n")), ("P", ("k", "k")))
_BMM_RULES = _MM_RULES + (("b", ("b", "b")),)


def placements(op: str):
    """The rules of ``op`` ("mm" or "bmm") as DTensor placements:
    [([out], [a, b]), ...]."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    batch = 1 if op == "bmm" else 0
    dims = {
        "a": {"m": batch, "k": batch + 1, "b": 0},
        "b": {"k": batch, "n": batch + 1, "b": 0},
        "out": {"m": batch, "n": batch + 1, "b": 0},
    }

    def place(side: str, name: str):
        if name == "R":
            return Replicate()
        if name == "P":
            return Partial()
        return Shard(dims[side][name])

    rules = _BMM_RULES if op == "bmm" else _MM_RULES
    return [([place("out", out)], [place("a", a), place("b", b)]) for out, (a, b) in rules]


def _register() -> bool:
    """Registers the rules with DTensor; False where this PyTorch has no
    torch.distributed or no register_sharding (before 2.5)."""
    if not torch.distributed.is_available():
        return False
    try:
        from torch.distributed.tensor.experimental import register_sharding
    except ImportError:
        return False
    for name in ("mm", "bmm"):
        rules = placements(name)

        def strategy(a, b, *options, rules=rules):
            # One entry per argument: the two tensors' placements, None for kernel_name and precision.
            none = [None] * len(options)
            return [(out, ins + none) for out, ins in rules]

        register_sharding(getattr(torch.ops.gemmlab, name).default)(strategy)
    return True


REGISTERED = _register()
