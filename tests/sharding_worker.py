"""One process of a DTensor run over gemmlab's operators (used by
tests/test_torch_sharding.py on the CPU over gloo, with the operators'
float64 stand-ins, and by tests/test_torch_sharding_gpu.py on GPUs over NCCL,
with gemmlab's kernels): every rule of mm and bmm as DTensor placements,
forward and backward, then a tensor-parallel MLP (column- then row-parallel
nn.Linear) under the routing context, each against the one-process result (run);
every rule of grouped_mm and grouped_mm_weight_grad and expert parallelism by
all-to-all (run_grouped)."""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import warnings


def run(rank: int, world: int, init_file: str, device: str, dtype_name: str, precision: str, rtol: float):
    warnings.simplefilter("ignore")
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import gemmlab.torch as gt
    from torch_cpu import CPURouting, cpu_kernels

    dtype = getattr(torch, dtype_name)
    if device == "cuda":
        torch.cuda.set_device(rank)
        kernels, Routing = contextlib.nullcontext({"mm": None, "bmm": None}), gt.Routing
    else:
        kernels, Routing = cpu_kernels(), CPURouting
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )

    def close(x, ref, what):
        err = float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))
        assert err <= rtol, f"{what}: relative error {err:.2e} > {rtol:.0e}"

    try:
        mesh = init_device_mesh(device, (world,))
        with kernels as calls:
            for name, shapes in (("mm", ((96, 200), (200, 64))), ("bmm", ((4, 96, 200), (4, 200, 64)))):
                op = getattr(torch.ops.gemmlab, name).default
                for out_place, (pa, pb) in gt.sharding.placements(name):
                    what = f"{name} {dtype_name} {pa} x {pb}"
                    g = torch.Generator().manual_seed(7)
                    a = (torch.rand(shapes[0], generator=g) * 2 - 1).to(device, dtype)
                    b = (torch.rand(shapes[1], generator=g) * 2 - 1).to(device, dtype)
                    w = torch.rand((*shapes[0][:-1], shapes[1][-1]), generator=g).to(device, dtype)
                    da = distribute_tensor(a, mesh, [pa]).requires_grad_()
                    db = distribute_tensor(b, mesh, [pb]).requires_grad_()
                    before = calls[name]
                    out = op(da, db, "auto", precision)
                    assert before is None or calls[name] == before + 1, f"{what}: the local operator did not run"
                    assert list(out.placements) == out_place, f"{what}: placed {out.placements}"
                    (out.full_tensor() * w).sum().backward()
                    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
                    ((a64 @ b64) * w.double()).sum().backward()
                    close(out.full_tensor(), (a64 @ b64).detach(), what)
                    close(da.grad.full_tensor(), a64.grad, what + ", grad a")
                    close(db.grad.full_tensor(), b64.grad, what + ", grad b")

            torch.manual_seed(0)
            mlp = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 128))
            mlp = mlp.to(device, dtype)
            ref_mlp = copy.deepcopy(mlp).double()
            x = (torch.rand(40, 128, generator=torch.Generator().manual_seed(1)) * 2 - 1).to(device, dtype)
            parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
            before = calls["mm"]
            with Routing((dtype,), precision or None):
                y = mlp(x)
            assert before is None or calls["mm"] == before + 2, "both layers' products ran on gemmlab's operator"
            y.sum().backward()
            ref = ref_mlp(x.double())
            ref.sum().backward()
            close(y, ref.detach(), f"MLP {dtype_name}")
            for (name, p), (_, r) in zip(mlp.named_parameters(), ref_mlp.named_parameters()):
                close(p.grad.full_tensor(), r.grad, f"MLP {dtype_name} grad {name}")
        dist.barrier()  # both done before either tears the group down
    finally:
        dist.destroy_process_group()
    # Every check passed (a failure raised above, and the process exits non-zero).  Leave
    # without the interpreter's teardown: on a loaded 2-core machine, gloo's threads
    # sometimes abort there ("terminate called without an active exception", SIGABRT)
    # after the work is done, which would fail a test whose results were right.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_grouped(rank: int, world: int, init_file: str, device: str, rtol: float):
    """grouped_mm and grouped_mm_weight_grad in bfloat16: every rule of each as DTensor
    placements (both layouts of the weights), forward and backward, placements no rule
    takes (DTensor moves the data first), then expert parallelism by hand: each process
    multiplies its own experts' tokens, exchanged by all-to-all, on plain local tensors;
    each against float64 products of the whole problem."""
    warnings.simplefilter("ignore")
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import gemmlab.torch as gt
    from torch_cpu import cpu_kernels, grouped_op_calls

    if device == "cuda":
        torch.cuda.set_device(rank)
        kernels, counted = contextlib.nullcontext(), None
    else:
        kernels, counted = cpu_kernels(), grouped_op_calls
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    bf16 = torch.bfloat16

    def close(x, ref, what):
        err = float(torch.linalg.norm(x.double().cpu() - ref.cpu()) / torch.linalg.norm(ref))
        assert err <= rtol, f"{what}: relative error {err:.2e} > {rtol:.0e}"

    def rand(*shape, g):
        return (torch.rand(shape, generator=g) * 2 - 1).to(device, bf16)

    # 40 tokens in 4 groups of 5, 0, 25 and 6 rows; the last 4 tokens in no group.
    T, K, N, ends = 40, 32, 48, (5, 5, 30, 36)
    rows, G = ends[-1], len(ends)
    bounds = list(zip((0,) + ends[:-1], ends))

    def loop(a, w, transposed, up):
        """The product and the gradients of sum(out[:rows] * up), in float64 on the CPU."""
        a64, w64 = a.detach().cpu().double().requires_grad_(), w.detach().cpu().double().requires_grad_()
        b64 = w64.transpose(-2, -1) if transposed else w64
        out = torch.cat([a64[s:e] @ b64[i] for i, (s, e) in enumerate(bounds)])
        (out * up.cpu().double()).sum().backward()
        return out.detach(), a64.grad, w64.grad

    def weight_place(p, transposed):
        # mat2's placement as the weight's: mat2 = w.transpose(-2, -1) swaps w's dims 1 and 2.
        return Shard(3 - p.dim) if transposed and isinstance(p, Shard) and p.dim else p

    try:
        mesh = init_device_mesh(device, (world,))
        with kernels:
            count = (lambda: None) if counted is None else (lambda: counted["grouped_mm"])
            offs = torch.tensor(ends, dtype=torch.int32, device=device)
            cases = [(out, ins, True) for out, ins in gt.sharding.placements("grouped_mm")]
            # Placements no rule takes: DTensor moves the data to one that does (tokens or
            # experts sharded: replicated; offs sharded: gathered) and the result is still right.
            cases += [
                (None, [Shard(0), Replicate(), Replicate()], False),
                (None, [Replicate(), Shard(0), Replicate()], False),
                (None, [Shard(1), Shard(1), Shard(0)], False),
            ]
            for transposed in (False, True):
                for out_place, (pa, pb, po), ruled in cases:
                    what = f"grouped_mm{' (G, N, K)' if transposed else ''} {pa} x {pb}, offs {po}"
                    g = torch.Generator().manual_seed(7)
                    a = rand(T, K, g=g)
                    w = rand(G, N, K, g=g) if transposed else rand(G, K, N, g=g)
                    up = rand(rows, N, g=g)
                    da = distribute_tensor(a, mesh, [pa]).requires_grad_()
                    dw = distribute_tensor(w, mesh, [weight_place(pb, transposed)]).requires_grad_()
                    doffs = distribute_tensor(offs, mesh, [po])
                    before = count()
                    out = gt.grouped_mm(da, dw.transpose(-2, -1) if transposed else dw, doffs)
                    assert before is None or count() == before + 1, f"{what}: the local operator did not run"
                    if ruled:
                        assert list(out.placements) == out_place, f"{what}: placed {out.placements}"
                    full = out.full_tensor()[:rows]
                    (full * up).sum().backward()
                    ref, grad_a, grad_w = loop(a, w, transposed, up)
                    close(full, ref, what)
                    close(da.grad.full_tensor()[:rows], grad_a[:rows], what + ", grad self")
                    assert not da.grad.full_tensor()[rows:].any(), f"{what}: grad of rows in no group"
                    close(dw.grad.full_tensor(), grad_w, what + ", grad mat2")
                    assert list(dw.grad.placements) == list(dw.placements) or not ruled, what

            # The weights' gradient by itself, both layouts in turn with the same placements
            # (DTensor's cache of sharding decisions must tell them apart).
            op = torch.ops.gemmlab.grouped_mm_weight_grad.default
            placed = [ins for _, ins in gt.sharding.placements("grouped_mm_weight_grad")]
            placed.append([Shard(0), Shard(0), Replicate()])  # tokens split: no rule (gathered first)
            for pa, pg, po in placed:
                for transposed in (False, True):
                    what = f"grouped_mm_weight_grad{' transposed' if transposed else ''} {pa} x {pg}"
                    rules = gt.sharding.placements("grouped_mm_weight_grad", transposed)
                    expected = [o for o, ins in rules if ins == [pa, pg, po]]
                    g = torch.Generator().manual_seed(9)
                    a, grad = rand(T, K, g=g), rand(T, N, g=g)
                    da, dg = distribute_tensor(a, mesh, [pa]), distribute_tensor(grad, mesh, [pg])
                    out = op(da, dg, distribute_tensor(offs, mesh, [po]), transposed)
                    assert not expected or list(out.placements) == expected[0], f"{what}: placed {out.placements}"
                    ref = torch.stack([a[s:e].cpu().double().t() @ grad[s:e].cpu().double() for s, e in bounds])
                    close(out.full_tensor(), ref.transpose(-2, -1) if transposed else ref, what)

            # torch._grouped_mm's other three forms, every rule of each, forward and backward
            # (the gradients are those forms again); the grouped dimension is T's 40, 36 covered.
            def form_product(form, a, b):
                if form == "2d2d":  # (N, T) @ (T, K) -> (G, N, K)
                    return torch.stack([a[:, s:e] @ b[s:e] for s, e in bounds])
                if form == "3d2d":  # (G, N, K) @ (K, T) -> (N, T), the covered columns
                    return torch.cat([a[i] @ b[:, s:e] for i, (s, e) in enumerate(bounds)], dim=1)
                return a @ b

            shapes = {"2d2d": ((N, T), (T, K)), "3d2d": ((G, N, K), (K, T)), "3d3d": ((G, N, K), (G, K, 16))}
            for form, (sa, sb) in shapes.items():
                for out_place, ins in gt.sharding.placements("grouped_mm", form=form):
                    what = f"grouped_mm {form} {ins[0]} x {ins[1]}"
                    g = torch.Generator().manual_seed(13)
                    a, b = rand(*sa, g=g), rand(*sb, g=g)
                    da = distribute_tensor(a, mesh, [ins[0]]).requires_grad_()
                    db = distribute_tensor(b, mesh, [ins[1]]).requires_grad_()
                    doffs = distribute_tensor(offs, mesh, [ins[2]]) if form != "3d3d" else None
                    out = gt.grouped_mm(da, db, doffs)
                    assert list(out.placements) == out_place, f"{what}: placed {out.placements}"
                    full = out.full_tensor()
                    covered = full[:, :rows] if form == "3d2d" else full
                    up = rand(*covered.shape, g=g)
                    (covered * up).sum().backward()
                    a64, b64 = a.cpu().double().requires_grad_(), b.cpu().double().requires_grad_()
                    ref = form_product(form, a64, b64)
                    (ref * up.cpu().double()).sum().backward()
                    close(covered, ref.detach(), what)
                    close(da.grad.full_tensor(), a64.grad, what + ", grad self")
                    close(db.grad.full_tensor(), b64.grad, what + ", grad mat2")

            # bias is refused under DTensor too, with the operator's message (DTensor's sharding
            # propagation runs the fake kernel, and says so around it in a RuntimeError).
            try:
                gt.grouped_mm(
                    distribute_tensor(rand(T, K, g=torch.Generator()), mesh, [Replicate()]),
                    distribute_tensor(rand(G, K, N, g=torch.Generator()), mesh, [Replicate()]),
                    distribute_tensor(offs, mesh, [Replicate()]),
                    bias=distribute_tensor(rand(N, g=torch.Generator()), mesh, [Replicate()]),
                )
            except (ValueError, RuntimeError) as exc:
                assert "adds no bias" in str(exc), exc
            else:
                raise AssertionError("a bias was not refused under DTensor")

            _expert_parallel(rank, world, device, gt, count, rand, close)
        dist.barrier()  # both done before either tears the group down
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _expert_parallel(rank, world, device, gt, count, rand, close):
    """Expert parallelism as gemmlab does it: every process owns G / world experts' weights and
    its own tokens; the tokens go to their experts' process by all-to-all, each process calls
    grouped_mm on plain local tensors (its experts, offsets of the rows it received), and the
    results come back by all-to-all -- forward and backward (the all-to-alls of
    torch.distributed.nn.functional carry gradients).  Checked against float64 products of
    every process's tokens with the whole weight stack."""
    import torch
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_to_all_single

    G, K, N = 4 * world, 32, 48
    per = G // world
    g = torch.Generator().manual_seed(11)
    W = rand(G, N, K, g=g)  # every expert's nn.Linear weight, (N, K) each; the same on every process
    sizes = [24 + 8 * r for r in range(world)]  # each process's tokens
    xs = [rand(t, K, g=g) for t in sizes]
    experts = [torch.randint(0, G - 1, (t,), generator=g) for t in sizes]  # the last expert gets no token
    ups = [rand(t, N, g=g) for t in sizes]

    x = xs[rank].clone().requires_grad_()
    w = W[rank * per : (rank + 1) * per].clone().requires_grad_()  # this process's experts
    e = experts[rank].to(device)
    # Dispatch: this process's tokens sorted by expert, the counts exchanged, then the tokens.
    order = torch.argsort(e, stable=True)
    counts = torch.bincount(e, minlength=G)
    got = torch.empty_like(counts)
    dist.all_to_all_single(got, counts)  # got[s * per + j]: tokens from process s for local expert j
    send, recv = counts.view(world, per).sum(1).tolist(), got.view(world, per).sum(1).tolist()
    x_recv = all_to_all_single(x.new_empty(sum(recv), K), x[order], recv, send)
    # The rows arrive by process, then expert; grouped_mm wants them by expert.
    expert_of_row = torch.arange(per, device=device).repeat(world).repeat_interleave(got, output_size=sum(recv))
    by_expert = torch.argsort(expert_of_row, stable=True)
    offs = got.view(world, per).sum(0).cumsum(0).to(torch.int32)
    before = count()
    y_local = gt.grouped_mm(x_recv[by_expert], w.transpose(-2, -1), offs)  # plain tensors, local experts
    assert before is None or count() == before + 1, "expert parallel: the local operator did not run"
    y_recv = y_local[torch.argsort(by_expert)]
    y = all_to_all_single(y_recv.new_empty(sizes[rank], N), y_recv, send, recv)[torch.argsort(order)]
    (y * ups[rank]).sum().backward()

    # float64 references: every process's tokens times their experts' weights.
    W64 = W.double().cpu().requires_grad_()
    loss, mine = 0, None
    for r in range(world):
        x64 = xs[r].double().cpu().requires_grad_()
        y64 = torch.einsum("tk,tnk->tn", x64, W64[experts[r]])
        loss = loss + (y64 * ups[r].double().cpu()).sum()
        if r == rank:
            mine = (x64, y64.detach())
    loss.backward()
    close(y, mine[1], "expert parallel")
    close(x.grad, mine[0].grad, "expert parallel, grad of the tokens")
    close(w.grad, W64.grad[rank * per : (rank + 1) * per], "expert parallel, grad of the local experts")
    # The same tokens through one process's grouped_mm with every expert.
    x_all, e_all = torch.cat(xs), torch.cat(experts).to(device)
    order_all = torch.argsort(e_all, stable=True)
    offs_all = torch.bincount(e_all, minlength=G).cumsum(0).to(torch.int32)
    y_all = gt.grouped_mm(x_all[order_all], W.transpose(-2, -1), offs_all)[torch.argsort(order_all)]
    start = sum(sizes[:rank])
    close(y, y_all[start : start + sizes[rank]].double(), "expert parallel against one process")
