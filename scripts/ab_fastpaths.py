"""A/B timing of kernel="auto"'s choices by the cost model (kernels/cost.py: tiles, splits,
a staging copy of operands TMA cannot read) on the products of other models that ran slow,
beside the choice the earlier rules made and torch.matmul, in one run on one GPU.

    python3 scripts/ab_fastpaths.py --json ab-fastpaths.json          # on the GPU
    python3 scripts/ab_fastpaths.py --plans                          # no GPU: the plans only

For each product (as PyTorch hands it over: W.t(), dY.t(), K.transpose views) and
dtype: gemmlab.matmul with kernel="auto" (the new choice), the same call with the
earlier rule's kernel and tile parameters named explicitly (where they differ: the
rules of wgmma.wgmma_rule_params and mma_pipelined's tile-count rule, computed here;
for a staged product, mma_pipelined on the operands as they are),
and torch.matmul on the same views; fp32 against PyTorch's SGEMM (TF32 off), fp32_tc
likewise (precision="fp32_tc").  Public-call figures: CUDA events around the call, L2
flushed, each run from an idle GPU, calls interleaved round after round, medians
(gemmlab.tools.bench.timing.time_rounds).  Each result is checked against FP64 first.
``--plans`` prints what auto would run on an H200 (sm_90a, 132 SMs) and the earlier
rule's choice, with the cost model's reasons, without a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

import gemmlab
from gemmlab.core import planner
from gemmlab.tools.bench import models
from gemmlab.kernels.tensor import mma_pipelined, wgmma

ALL = ("bf16", "fp16", "fp32", "fp32_tc")
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp32_tc": "float32"}


@dataclass(frozen=True)
class Product:
    kind: str
    expr: str  # x @ W.t(), dY @ W, dY.t() @ x, Q @ K^T, P @ V, P^T @ dO, a @ b
    stored: tuple  # the contiguous tensors the expression takes views of
    dtypes: tuple

    def views(self, first, second):
        if self.expr in ("x @ W.t()", "Q @ K^T"):
            return first, second.swapaxes(-1, -2)
        if self.expr in ("dY.t() @ x", "P^T @ dO"):
            return first.swapaxes(-1, -2), second
        return first, second

    @property
    def batch(self) -> int:
        return self.stored[0][0] if len(self.stored[0]) == 3 else 1

    def mnk(self) -> tuple[int, int, int]:
        a, b = self.views(*(np.broadcast_to(np.int8(0), s) for s in self.stored))  # shapes only
        return a.shape[-2], b.shape[-1], a.shape[-1]

    def label(self) -> str:
        M, N, K = self.mnk()
        return f"{self.expr} {'%dx' % self.batch if self.batch > 1 else ''}{M}x{N}x{K}"


S, D, BH = 197, 64, 384
PRODUCTS = (
    Product("row stride off the grid (vocabulary 50257)", "dY @ W", ((1024, 50257), (50257, 768)), ALL),
    Product("row stride off the grid, weight gradient", "dY.t() @ x", ((1024, 50257), (1024, 768)), ALL),
    Product("batched odd matrices (ViT-B/16 attention)", "P @ V", ((BH, S, S), (BH, S, D)), ALL),
    Product("batched odd matrices, dV", "P^T @ dO", ((BH, S, S), (BH, S, D)), ("bf16", "fp16")),
    Product("batched odd matrices, scores", "Q @ K^T", ((BH, S, D), (BH, S, D)), ("bf16", "fp16")),
    Product("few output tiles (GQA k/v projection)", "x @ W.t()", ((2048, 3584), (1024, 3584)), ALL),
    Product("small M (decode)", "x @ W.t()", ((4, 4096), (14336, 4096)), ALL),
    Product("small M (77 tokens)", "x @ W.t()", ((77, 768), (3072, 768)), ALL),
    Product("small M (16 tokens)", "x @ W.t()", ((16, 8192), (8192, 8192)), ("bf16",)),
    Product("small M, fp32", "x @ W.t()", ((37, 13824), (5120, 13824)), ("fp32",)),
    Product("small M, fp32", "x @ W.t()", ((128, 8192), (8192, 8192)), ("fp32",)),
    Product("fp32 NT", "x @ W.t()", ((4096, 4096), (4096, 4096)), ("fp32",)),
    Product("fp32 odd K", "a @ b", ((4000, 1001), (1001, 3000)), ("fp32",)),
)


def old_choice(p, product: Product, dtype: str, sm_count: int) -> tuple[str, dict] | None:
    """The kernel and tile parameters the rules before the cost model took, where they differ from
    plan ``p`` (None: the same choice)."""
    pr = p.problem
    big = 2 * -(-pr.M // 128) * -(-pr.N // 256) * product.batch >= sm_count
    if pr.stage:  # wgmma on staging copies; before: its fallback on the operands as they are
        return "mma_pipelined", mma_pipelined.SPEC.defaults() if big else dict(mma_pipelined.SMALL_TILE)
    if "cost model over" not in p.reason:
        return None
    if p.spec.name == "wgmma":
        return "wgmma", wgmma.wgmma_rule_params(pr.M, pr.N, sm_count, product.batch, pr.K, dtype)
    if p.spec.name == "mma_pipelined":
        return "mma_pipelined", mma_pipelined.SPEC.defaults() if big else dict(mma_pipelined.SMALL_TILE)
    if p.spec.name == "pipelined":  # FP32's old and new choice: scripts/ab_fp32_choice.py times those
        return None
    raise AssertionError(f"no earlier rule known for {p.spec.name}")


def _short(p) -> str:
    keys = ("BM", "BN", "STAGES", "SPLITK", "MT")
    return (
        f"{p.spec.name}{'+copy' if p.problem.stage else ''} "
        + "x".join(str(p.params[k]) for k in keys[:2] if k in p.params)
        + "".join(f" {k}={p.params[k]}" for k in keys[2:] if k in p.params and (k != "SPLITK" or p.params[k] > 1))
    )


# -- without a GPU: the plans ----------------------------------------------------------------------


def plans_on_cpu() -> None:
    from gemmlab.runtime.device import GPUInfo

    gpu = GPUInfo(0, "NVIDIA H200", (9, 0), "sm_90a", 132, 1980.0, 60 << 20, 227 * 1024)

    stored = models.planning_view  # shapes and strides only, no memory

    for product in PRODUCTS:
        for dtype in product.dtypes:
            if dtype == "fp32_tc":
                continue
            np_dt = np.dtype("float16" if dtype != "fp32" else "float32")
            a, b = product.views(*(stored(s, np_dt) for s in product.stored))
            call = planner.validate(a, b, None, 1.0, 0.0, False, False, None, None)
            if dtype == "bf16":
                call = dataclasses.replace(call, dtypes={"dtype": "bfloat16", "out_dtype": "bfloat16"})
            kv = planner.kernel_view(
                call, planner.result_side(call), {"A": call.A.operand.ptr, "B": call.B.operand.ptr, "C": 0}
            )
            p = planner.plan_call(call, kv, planner.batching(kv), gpu, "auto", {})
            old = old_choice(p, product, TORCH_DTYPE[dtype], gpu.sm_count)
            print(
                f"{product.label():32s} {dtype:5s} {kv.A.layout}{kv.B.layout} tma={p.problem.tma_aligned!s:5s} "
                f"auto: {_short(p)}" + (f"   (was {old[0]} {old[1]['BM']}x{old[1]['BN']})" if old else "")
            )
            if p.fallback_reason:
                print(f"    fallback: {p.fallback_reason.split(':')[0]}")
            if p.reason:
                print(f"    why: {p.reason}")


# -- on the GPU -----------------------------------------------------------------------------------


def run_gpu(args) -> list[dict]:
    import torch
    from gemmlab.tools.bench.suites import torch_tf32
    from gemmlab.tools.bench.timing import time_rounds
    from gemmlab.runtime.device import gpu_info

    gpu = gpu_info(0)
    records = []
    started = time.perf_counter()
    for product in PRODUCTS:
        for dtype in product.dtypes:
            if dtype not in args.dtypes:
                continue
            tdt = getattr(torch, TORCH_DTYPE[dtype])
            g = torch.Generator(device="cuda").manual_seed(len(records))
            first, second = (torch.randn(s, device="cuda", dtype=tdt, generator=g) for s in product.stored)
            a, b = product.views(first, second)
            precision = "fp32_tc" if dtype == "fp32_tc" else None
            err = models._Sample(a, b).error  # FP64 on sampled rows and columns; inf where not finite

            with torch_tf32(False):
                calls = {"torch": lambda: torch.matmul(a, b), "new": lambda: gemmlab.matmul(a, b, precision=precision)}
                out = gemmlab.matmul(a, b, precision=precision)
                torch.cuda.synchronize()
                p = gemmlab.last_plan()
                errs = {"new": err(out), "torch": err(torch.matmul(a, b))}
                old = old_choice(p, product, TORCH_DTYPE[dtype], gpu.sm_count) if precision is None else None
                if old is not None:
                    calls["old"] = lambda: gemmlab.matmul(a, b, kernel=old[0], **old[1])
                    errs["old"] = err(gemmlab.matmul(a, b, kernel=old[0], **old[1]))
                    old_plan = gemmlab.last_plan()
                del out
                timed = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=args.rounds, reps=3, budget_s=0.1)
            t_ms = timed["torch"].ms
            rec = {
                "kind": product.kind,
                "product": product.label(),
                "dtype": dtype,
                "batch": product.batch,
                "shape": list(product.mnk()),
                "torch_ms": t_ms,
                "errors": errs,
                "new": {
                    "plan": p.describe(),
                    "reason": p.reason,
                    "ms": timed["new"].ms,
                    "pct_of_torch": 100 * t_ms / timed["new"].ms,
                },
            }
            if old is not None:
                rec["old"] = {
                    "plan": old_plan.describe(),
                    "ms": timed["old"].ms,
                    "pct_of_torch": 100 * t_ms / timed["old"].ms,
                }
            records.append(rec)
            print(
                f"{product.label():34s} {dtype:7s} torch {t_ms * 1e3:8.1f} us | new {_short(p):28s} "
                f"{rec['new']['pct_of_torch']:6.1f}%"
                + (f" | old {_short(old_plan):24s} {rec['old']['pct_of_torch']:6.1f}%" if old else "")
                + f" | err {errs['new']:.1e}",
                flush=True,
            )
            first = second = a = b = err = calls = None  # free before the next product
            torch.cuda.empty_cache()
    print(f"({time.perf_counter() - started:.0f} s)")
    for dtype in args.dtypes:
        pcts = [r["new"]["pct_of_torch"] for r in records if r["dtype"] == dtype]
        olds = [r.get("old", r["new"])["pct_of_torch"] for r in records if r["dtype"] == dtype]
        if pcts:
            gm = statistics.geometric_mean
            print(
                f"{dtype}: geometric mean {gm(pcts):.1f}% of torch (the earlier choices: {gm(olds):.1f}%) "
                f"over {len(pcts)} products"
            )
    return records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", action="store_true", help="print the plans (no GPU needed) and exit")
    ap.add_argument("--json", help="write the records to this file")
    ap.add_argument("--dtypes", default=",".join(ALL), help=f"comma list of {', '.join(ALL)}")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per product (default 3)")
    args = ap.parse_args(argv)
    if args.plans:
        plans_on_cpu()
        return 0
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    unknown = set(args.dtypes) - set(ALL)
    if unknown:
        ap.error(f"unknown dtypes {sorted(unknown)}; choose from {', '.join(ALL)}")
    records = run_gpu(args)
    if args.json:
        from gemmlab.tools.bench import report
        from gemmlab.runtime.device import gpu_info

        report.write_run(args.json, gpu_info(0).name, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
