"""gemmlab's kernels on several GPUs, through PyTorch's distributed tensors.

    torchrun --nproc-per-node 2 examples/tensor_parallel.py --json tp.json

Each process drives one GPU.  Two workloads, each timed with gemmlab's
operators and with PyTorch's own (torch.mm / nn.Linear as they are) in the
same run, on one GPU and sharded over all of them:

1. One large product C = A @ B (default 32768 x 32768 x 32768 in bf16), as
   DTensors: A's rows sharded and B replicated (no communication), and K
   sharded (each GPU a partial sum, then an all-reduce by PyTorch).
2. A tensor-parallel MLP block, Linear(h, f) -> GELU -> Linear(f, h) with the
   up-projection column-parallel and the down-projection row-parallel
   (torch.distributed.tensor.parallel), one training step (forward and
   backward) under gemmlab.torch.use_gemmlab() -- or, with --dtype fp32_tc,
   float32 under gemmlab.torch.fp32_tc() beside IEEE float32.

The one-GPU figure is the same work unsharded on each GPU at once (every rank
runs it on its own GPU; they do not share anything); scaling efficiency is
t(1 GPU) / (GPUs x t(sharded)).  Each result is checked against the one-GPU
result.  Rank 0 prints a table and writes --json.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time

try:
    import torch
except ModuleNotFoundError:
    print(f"{__file__.rsplit('/', 1)[-1]}: this example needs PyTorch: pip install 'gemmlab[torch]'", file=sys.stderr)
    sys.exit(2)
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import gemmlab.torch as gt


def need_cuda(script: str) -> None:
    """Stop with one line (exit code 2) where PyTorch cannot reach a CUDA GPU."""
    why = gt.cuda_missing()
    if why:
        print(f"{script}: this example needs a CUDA GPU; {why}", file=sys.stderr)
        sys.exit(2)


def timed(fn, reps: int) -> float:
    """Median ms of ``reps`` calls, every GPU starting together (a barrier before each)."""
    fn()  # warm: compiles, plans, allocator
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    slowest = torch.tensor(sorted(times)[len(times) // 2], device="cuda")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a sharded step is as fast as its slowest GPU
    return float(slowest)


def rel_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.norm((x.detach() - ref).float()) / torch.linalg.norm(ref.float()))


def big_product(mesh, size: int, dtype, precision: str, reps: int) -> list[dict]:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.rand(size, size, device="cuda", generator=g) * 2 - 1).to(dtype)
    b = (torch.rand(size, size, device="cuda", generator=g) * 2 - 1).to(dtype)
    gemmlab_mm = lambda x, y: gt.mm(x, y, precision=precision or None)  # noqa: E731
    ours = {"gemmlab": gemmlab_mm, "torch": torch.mm}
    one = {name: timed(lambda f=f: f(a, b), reps) for name, f in ours.items()}
    ref = gemmlab_mm(a, b)
    rows = []
    for layout, (pa, pb) in {
        "rows of A sharded": (Shard(0), Replicate()),
        "K sharded, all-reduce": (Shard(1), Shard(0)),
    }.items():
        da, db = distribute_tensor(a, mesh, [pa]), distribute_tensor(b, mesh, [pb])
        for name, f in ours.items():

            def step(f=f):
                c = f(da, db)
                return c.redistribute(mesh, [Replicate()]) if c.placements[0] == Partial() else c

            ms = timed(step, reps)
            err = rel_error(step().full_tensor(), ref)
            flops = 2 * size**3
            rows.append(
                dict(
                    workload=f"{size}^3 product, {layout}",
                    impl=name,
                    ms_1gpu=one[name],
                    ms=ms,
                    tflops=flops / ms / 1e9,
                    speedup=one[name] / ms,
                    efficiency=one[name] / (mesh.size() * ms),
                    rel_error_vs_1gpu=err,
                )
            )
    return rows


def mlp_step(mesh, tokens: int, hidden: int, ffn: int, dtype, precision: str, reps: int) -> list[dict]:
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(hidden, ffn), torch.nn.GELU(), torch.nn.Linear(ffn, hidden))
    base = base.to("cuda", dtype)
    x = (torch.rand(tokens, hidden, device="cuda") * 2 - 1).to(dtype)
    routing = (lambda: gt.fp32_tc()) if precision else (lambda: gt.use_gemmlab(dtype))
    flops = 3 * 2 * 2 * tokens * hidden * ffn  # two layers, forward and two backward products each
    rows = []
    single = {}
    for name in ("gemmlab", "torch"):
        model = base
        for sharded in (False, True):
            if sharded:
                model = parallelize_module(copy.deepcopy(base), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

            def step(model=model, name=name):
                model.zero_grad(set_to_none=True)
                if name == "gemmlab":
                    with routing():
                        y = model(x)
                        y.float().square().mean().backward()
                else:
                    y = model(x)
                    y.float().square().mean().backward()
                return y

            ms = timed(step, reps)
            if not sharded:
                single[name] = (ms, step().detach())
                continue
            out = step()
            err = rel_error(out.full_tensor() if hasattr(out, "full_tensor") else out, single["gemmlab"][1])
            rows.append(
                dict(
                    workload=f"MLP step, {tokens} tokens, {hidden}->{ffn}->{hidden}",
                    impl=name,
                    ms_1gpu=single[name][0],
                    ms=ms,
                    tflops=flops / ms / 1e9,
                    speedup=single[name][0] / ms,
                    efficiency=single[name][0] / (mesh.size() * ms),
                    rel_error_vs_1gpu=err,
                )
            )
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--dtype",
        default="bf16",
        choices=("bf16", "fp16", "fp32_tc"),
        help="bf16/fp16 on gemmlab's own kernels; fp32_tc: float32 FP32-accurate on the tensor cores",
    )
    p.add_argument("--size", type=int, help="the large product's size (default 32768; 16384 for fp32_tc)")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--ffn", type=int, default=28672)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", help="write the rows here (rank 0)")
    args = p.parse_args()

    need_cuda("tensor_parallel.py")
    rank = int(os.environ.get("RANK", 0))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32_tc": torch.float32}[args.dtype]
    precision = "fp32_tc" if args.dtype == "fp32_tc" else ""
    if args.dtype == "fp32_tc":
        torch.backends.cuda.matmul.allow_tf32 = False  # torch's side is IEEE SGEMM
    size = args.size or (16384 if precision else 32768)

    rows = big_product(mesh, size, dtype, precision, args.reps)
    rows += mlp_step(mesh, args.tokens, args.hidden, args.ffn, dtype, precision, args.reps)
    if rank == 0:
        gpus = dist.get_world_size()
        print(f"{gpus} x {torch.cuda.get_device_name()}, {args.dtype}")
        print(
            f"{'workload':58} {'impl':8} {'1 GPU ms':>9} {f'{gpus} GPUs ms':>10} {'TFLOPS':>8} {'speedup':>8} "
            f"{'eff.':>6} {'rel.err':>8}"
        )
        for r in rows:
            print(
                f"{r['workload']:58} {r['impl']:8} {r['ms_1gpu']:9.2f} {r['ms']:10.2f} {r['tflops']:8.0f} "
                f"{r['speedup']:8.2f} {r['efficiency']:6.1%} {r['rel_error_vs_1gpu']:8.1e}"
            )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(
                    dict(
                        gpu=torch.cuda.get_device_name(),
                        gpus=gpus,
                        dtype=args.dtype,
                        torch=torch.__version__,
                        rows=rows,
                    ),
                    f,
                    indent=1,
                )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
