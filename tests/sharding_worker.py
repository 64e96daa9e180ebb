"""One process of a DTensor run over gemmlab's operators (used by
tests/test_torch_sharding.py on the CPU over gloo, with the operators'
float64 stand-ins, and by tests/test_torch_sharding_gpu.py on GPUs over NCCL,
with gemmlab's kernels): every rule of mm and bmm as DTensor placements,
forward and backward, then a tensor-parallel MLP (column- then row-parallel
nn.Linear) under the routing context, each against the one-process result."""

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
