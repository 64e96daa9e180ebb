"""How DTensor shards gemmlab's operators: torch.ops.gemmlab.mm, bmm, grouped_mm and
grouped_mm_weight_grad.

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

Grouped products (a mixture-of-experts layer): grouped_mm(self (T, K), mat2 (G, K, N),
offs) gives row block g of self times mat2[g], the blocks cut by offs, G cumulative row
ends that the router decides on the GPU.  Its rules are tensor parallelism inside every
expert, those of mm without the rows (a placement of mat2 is of its logical dims, so a
weight stored (G, N, K) and passed as w.transpose(-2, -1) is Shard(1) of w for Shard(2) of
mat2):

    self       mat2       offs       out
    Replicate  Replicate  Replicate  Replicate
    Replicate  Shard(2)   Replicate  Shard(1)    column-parallel: each GPU a share of N
    Shard(1)   Shard(1)   Replicate  Partial     row-parallel: each GPU a share of K

and those of the weights' gradient, grouped_mm_weight_grad(a (T, K), grad (T, N), offs,
transposed) -> (G, K, N), or (G, N, K) where transposed, which its backward pass calls
beside grouped_mm(grad, mat2^T) (so the backward of every rule above is sharded too):

    a          grad       offs       out (G, K, N)   out (G, N, K), transposed
    Replicate  Replicate  Replicate  Replicate       Replicate
    Shard(1)   Replicate  Replicate  Shard(1)        Shard(2)       a share of K
    Replicate  Shard(1)   Replicate  Shard(2)        Shard(1)       a share of N

The other forms of torch._grouped_mm have rules of their own: 2-D x 2-D (self (M, K) @
mat2 (K, N) -> (G, M, N), offs over K) shards M or N; 3-D x 2-D (self (G, M, K) @ mat2 (K, N)
-> (M, N), offs over N) shards M, or K to a Partial sum; 3-D x 3-D (a batch) takes bmm's.
The grouped dimension is never sharded (the offsets are global indices).

offs is Replicate in every rule (a sharded offs is gathered first), bias and out_dtype are
None (the operator refuses others, under DTensor too), and each GPU's share of K and N must
still be a multiple of 8 for the kernels.  No rule shards the tokens (dim 0 of self, a and
grad): the offsets are global row numbers, which a shard's rows do not start at.  Nor the
experts (dim 0 of mat2), which is what expert parallelism does: which tokens an expert
takes is data, decided by the router at run time, not a placement DTensor can propagate
through one operator; DTensor gathers experts sharded that way before the call.  Expert
parallelism is done on plain tensors, around the operator: every GPU holds G / world
experts' weights, sends each token to its expert's GPU by all-to-all (the counts first,
so that every GPU knows how many rows it receives for each of its experts), sorts the rows
it received by expert, calls grouped_mm on its local experts with the offsets of those
rows, and sends the results back by all-to-all (torch.distributed.nn.functional's
all_to_all_single carries the gradients back the same way); docs/usage.md shows it.
"""

from __future__ import annotations


import torch

__all__ = ["REGISTERED", "placements"]

# The placement tables, as (output, (a, b)) with dimension names of op(A) @ op(B)
# (m, k of A; k, n of B; b the batch of bmm).
_MM_RULES = (("R", ("R", "R")), ("m", ("m", "R")), ("n", ("R", "n")), ("P", ("k", "k")))
_BMM_RULES = _MM_RULES + (("b", ("b", "b")),)
# grouped_mm: self (t, k) @ mat2 (g, k, n) -> (t, n); grouped_mm_weight_grad: a (t, k), grad
# (t, n) -> (g, k, n), or (g, n, k) transposed.  No rule shards t (the offsets are global row
# indices) or g (which rows an expert takes is data, not a placement); offs is Replicate in all.
_GROUPED_RULES = (("R", ("R", "R")), ("n", ("R", "n")), ("P", ("k", "k")))
_WEIGHT_GRAD_RULES = (("R", ("R", "R")), ("k", ("k", "R")), ("n", ("R", "n")))
_DIMS = {
    "grouped_mm": {"a": {"t": 0, "k": 1}, "b": {"g": 0, "k": 1, "n": 2}, "out": {"t": 0, "n": 1}},
    "grouped_mm_weight_grad": {"a": {"t": 0, "k": 1}, "b": {"t": 0, "n": 1}, "out": {"g": 0, "k": 1, "n": 2}},
}
# grouped_mm's other forms (ops.grouped_form), each as (dims, rules).  2-D x 2-D: self (m, k) @
# mat2 (k, n) -> (g, m, n), offs over k (global indices: k is not sharded); 3-D x 2-D: self
# (g, m, k) @ mat2 (k, n) -> (m, n), offs over n (not sharded); 3-D x 3-D: a batch, bmm's rules.
_GROUPED_FORMS = {
    "2d2d": (
        {"a": {"m": 0, "k": 1}, "b": {"k": 0, "n": 1}, "out": {"g": 0, "m": 1, "n": 2}},
        (("R", ("R", "R")), ("m", ("m", "R")), ("n", ("R", "n"))),
    ),
    "3d2d": (
        {"a": {"g": 0, "m": 1, "k": 2}, "b": {"k": 0, "n": 1}, "out": {"m": 0, "n": 1}},
        (("R", ("R", "R")), ("m", ("m", "R")), ("P", ("k", "k"))),
    ),
    "3d3d": (
        {"a": {"b": 0, "m": 1, "k": 2}, "b": {"b": 0, "k": 1, "n": 2}, "out": {"b": 0, "m": 1, "n": 2}},
        _BMM_RULES,
    ),
}


def placements(op: str, transposed: bool = False, form: str = "2d3d"):
    """The rules of ``op`` ("mm", "bmm", "grouped_mm" or "grouped_mm_weight_grad") as DTensor
    placements: [([out], [a, b]), ...] for mm and bmm, [([out], [self, mat2, offs]), ...] for
    grouped_mm ([([out], [self, mat2]), ...] for its 3-D x 3-D ``form``, which takes no offs),
    [([out], [a, grad, offs]), ...] for grouped_mm_weight_grad (whose output is (G, N, K) where
    ``transposed``)."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    if op == "grouped_mm" and form != "2d3d":
        dims, rules = _GROUPED_FORMS[form]
        offs = [] if form == "3d3d" else [Replicate()]
    elif op in ("mm", "bmm"):
        batch = 1 if op == "bmm" else 0
        dims = {
            "a": {"m": batch, "k": batch + 1, "b": 0},
            "b": {"k": batch, "n": batch + 1, "b": 0},
            "out": {"m": batch, "n": batch + 1, "b": 0},
        }
        rules, offs = (_BMM_RULES if op == "bmm" else _MM_RULES), []
    else:
        dims = _DIMS[op]
        if transposed:
            dims = {**dims, "out": {"g": 0, "n": 1, "k": 2}}
        rules = _GROUPED_RULES if op == "grouped_mm" else _WEIGHT_GRAD_RULES
        offs = [Replicate()]

    def place(side: str, name: str):
        if name == "R":
            return Replicate()
        if name == "P":
            return Partial()
        return Shard(dims[side][name])

    return [([place("out", out)], [place("a", a), place("b", b), *offs]) for out, (a, b) in rules]


def _register() -> bool:
    """Registers the rules with DTensor; False where this PyTorch has no
    torch.distributed or no register_sharding (before 2.5)."""
    if not torch.distributed.is_available():
        return False
    try:
        from torch.distributed.tensor import Replicate
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

    by_form = {form: placements("grouped_mm", form=form) for form in ("2d3d", "2d2d", "3d2d", "3d3d")}

    def grouped_strategy(self, mat2, offs=None, bias=None, out_dtype=None):
        # One entry per tensor the call passes, None for those it does not and for out_dtype.
        # A tensor argument left without a placement would fail DTensor's count of inputs, so
        # a bias gets Replicate like offs (and offs like this where the form takes none): the
        # operator then refuses the call with its own message.  A call of no form gets the
        # 2-D x 3-D rules, for the same reason.
        rules = by_form.get(f"{self.ndim}d{mat2.ndim}d", by_form["2d3d"])
        extra = [Replicate() if bias is not None else None, None]
        return [(out, ins[:2] + [Replicate() if offs is not None else None] + extra) for out, ins in rules]

    register_sharding(torch.ops.gemmlab.grouped_mm.default)(grouped_strategy)

    by_layout = {t: placements("grouped_mm_weight_grad", t) for t in (False, True)}

    def weight_grad_strategy(a, grad, offs, transposed):
        return [(out, ins + [None]) for out, ins in by_layout[bool(transposed)]]

    register_sharding(torch.ops.gemmlab.grouped_mm_weight_grad.default)(weight_grad_strategy)
    return True


REGISTERED = _register()
