"""A/B, on a GPU: the shapes suite's float32 products, kernel="auto" (rung 8's tiles and split
from its cost model, kernels/simt/pipelined_cost.py) against the choice before it forced by
name (the rung-8 parameters each product's record of shapes-2026-11-29.json ran with) and
torch.matmul (TF32 off), in one process, calls interleaved round after round, L2 flushed.

    python3 scripts/ab_fp32_choice.py OUT.json BUDGET_S [--dtype fp32,fp32_tc]   # on the GPU
    python3 scripts/ab_fp32_choice.py --plans                                   # no GPU: what changes

The kernels every product needs are compiled first, in parallel; then the products whose
plan changed are timed, then the rest (old = new there), until BUDGET_S (from the start,
compilation included) is spent.  fp32_tc (``--dtype fp32_tc``): its products on the CUDA
cores against shapes-fp32_tc-2026-11-29.json's, the rest (ec_wgmma) against torch only.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import gemmlab
from gemmlab.core import planner
from gemmlab.tools.bench import models, shapes
from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_KERNEL, SPLITK_REDUCE_SOURCE

T0 = time.time()  # BUDGET_S counts from here: torch's import, compilation and timing

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "nvidia-h200"
RECORDS = {"fp32": "shapes-2026-11-29.json", "fp32_tc": "shapes-fp32_tc-2026-11-29.json"}
PRECISION = {"fp32": None, "fp32_tc": "fp32_tc"}
RESERVE_S = 8.0  # no product starts later than this before BUDGET_S (the largest takes about 3 s)


def old_params(dtype: str) -> dict:
    """(case, batch, M, N, K, ops) -> the rung-8 parameters the product ran with before the cost
    model (its record, H200, 2026-11-29); products that ran another rung are absent."""
    recs = json.loads((RESULTS / RECORDS[dtype]).read_text())["records"]
    return {
        (r["case"], r["batch"], r["M"], r["N"], r["K"], r["ops"]): r["params"]
        for r in recs
        if r["dtype"] == dtype and r["rung"] == "pipelined"
    }


def _views(pr):
    """The product's operands as PyTorch hands them over, as NumPy views of a few bytes."""
    return pr.operands(lambda shape: models.planning_view(shape, np.float32))


def plans(gpu, dtypes):
    """[(product, dtype, new plan, old parameters or None where the plan did not change)],
    the changed first, and the (source, name) of every kernel they run."""
    out, items = [], {(str(SPLITK_REDUCE_SOURCE), SPLITK_REDUCE_KERNEL)}
    for dtype in dtypes:
        olds = old_params(dtype)
        for pr in shapes.select():
            call = planner.validate(*_views(pr), None, 1.0, 0.0, False, False, PRECISION[dtype], None)
            kv = planner.kernel_view(
                call, planner.result_side(call), {"A": call.A.operand.ptr, "B": call.B.operand.ptr, "C": 0}
            )
            new = planner.plan_call(call, kv, planner.batching(kv), gpu, "auto", {}, PRECISION[dtype])
            old = olds.get((pr.name, pr.batch, pr.M, pr.N, pr.K, pr.ops))
            changed = old is not None and (new.spec.name, new.params) != ("pipelined", old)
            for p in [new] + (
                [
                    planner.plan(  # the old choice as gemmlab.matmul(kernel="pipelined") plans it
                        "pipelined",
                        new.problem.M,
                        new.problem.N,
                        new.problem.K,
                        aligned16=new.problem.aligned16,
                        op_a=new.problem.op_a,
                        op_b=new.problem.op_b,
                        arch=gpu.arch,
                        **old,
                    )
                ]
                if changed
                else []
            ):
                if p.spec.family in ("simt", "gemv"):
                    items.add((str(p.spec.source_path), p.name_expression))
            out.append((pr, dtype, new, old if changed else None))
    return sorted(out, key=lambda x: x[3] is None), items


def _tile(params: dict) -> str:
    """128x256/8: rung 8's tile and split of K."""
    return f"{params['BM']}x{params['BN']}" + (f"/{params['SPLITK']}" if params["SPLITK"] > 1 else "")


def _ran(plan) -> str:
    return _tile(plan.params) if plan.spec.name == "pipelined" else plan.spec.name


def plans_on_cpu() -> None:
    from gemmlab.runtime.device import GPUInfo

    gpu = GPUInfo(0, "NVIDIA H200", (9, 0), "sm_90a", 132, 1980.0, 60 << 20, 227 * 1024)
    todo, items = plans(gpu, ("fp32", "fp32_tc"))
    for pr, dtype, new, old in todo:
        if old is not None:
            print(f"{dtype:7s} {pr.kind:11s} {pr.label:56s} {_tile(old):>9s} -> {_ran(new)}")
    for dtype in ("fp32", "fp32_tc"):
        print(
            f"{dtype}: {sum(d == dtype and o is not None for _, d, _, o in todo)} of "
            f"{sum(d == dtype for _, d, _, _ in todo)} plans change"
        )
    print(f"{len(items)} instantiations to compile")


def run_gpu(out_path: str, budget_s: float, dtypes) -> None:
    import torch
    from gemmlab.tools.bench import models, report
    from gemmlab.tools.bench.timing import time_rounds
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime.device import gpu_info

    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = gpu_info(0)
    todo, items = plans(gpu, dtypes)
    print(
        f"{sum(o is not None for *_, o in todo)} of {len(todo)} plans change; compiled "
        f"{rt_compile.precompile(sorted(items), gpu.arch)} of {len(items)} kernels ({time.time() - T0:.0f} s)",
        flush=True,
    )
    gen = torch.Generator(device="cuda").manual_seed(0)
    recs, left = [], 0
    for pr, dtype, plan, old in todo:
        if time.time() - T0 > budget_s - RESERVE_S:
            left += 1
            continue
        a, b = pr.operands(lambda s: torch.rand(s, device="cuda", generator=gen).mul_(2).sub_(1))
        c = torch.empty(pr.out_shape, device="cuda")
        sample, prec = models._Sample(a, b), PRECISION[dtype]  # FP64 on a sample of rows and columns
        calls = {"torch": lambda: torch.matmul(a, b, out=c), "new": lambda: gemmlab.matmul(a, b, out=c, precision=prec)}
        if old is not None:
            calls["old"] = lambda: gemmlab.matmul(a, b, out=c, kernel="pipelined", **old)
        errors, ran = {}, {}
        for name, fn in calls.items():
            fn()
            errors[name] = sample.error(c)
            ran[name] = gemmlab.last_plan().describe() if name != "torch" else "torch.matmul"
        ok = all(models.error_ok(dtype, errors[k], errors["torch"]) for k in calls if k != "torch")
        t = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=3, reps=3, budget_s=0.05) if ok else {}
        r = {
            "product": pr.label,
            "kind": pr.kind,
            "dtype": dtype,
            "shape": [pr.batch, pr.M, pr.N, pr.K],
            "ops": pr.ops,
            "plans": ran,
            "reason": plan.reason,
            "errors": errors,
            "ok": ok,
            **{k: v.ms for k, v in t.items()},
        }
        if ok:
            r["old"] = r.get("old", r["new"])
            r["pct_new"], r["pct_old"] = 100 * r["torch"] / r["new"], 100 * r["torch"] / r["old"]
        recs.append(r)
        print(
            f"{dtype:7s} {pr.label:56s} "
            + (
                f"torch {r['torch'] * 1e3:8.1f} us  new {r['pct_new']:6.1f}% "
                f"[{_ran(plan)}]  old {r['pct_old']:6.1f}%" + (f" [{_tile(old)}]" if old else "")
                if ok
                else f"WRONG {errors}"
            ),
            flush=True,
        )
        a = b = c = sample = calls = None  # freed before the next product's operands
    gm = statistics.geometric_mean
    summary = {}
    print(
        f"timed {len(recs)} products, {left} left by the budget ({time.time() - T0:.0f} s); "
        "geometric mean % of torch.matmul (SGEMM): new / old (n; n changed)"
    )
    for dtype in dtypes:
        for kind in [*shapes.KINDS, "all", "changed"]:
            rs = [
                r
                for r in recs
                if r["dtype"] == dtype
                and r["ok"]
                and (kind == "all" or r["kind"] == kind or kind == "changed" and "old" in r["plans"])
            ]
            if rs:
                s = summary.setdefault(dtype, {})[kind] = {
                    "n": len(rs),
                    "new": gm([r["pct_new"] for r in rs]),
                    "old": gm([r["pct_old"] for r in rs]),
                    "changed": sum("old" in r["plans"] for r in rs),
                }
                print(f"{dtype:7s} {kind:12s} {s['new']:6.1f} / {s['old']:6.1f}  ({s['n']}; {s['changed']})")
    bad = [r["product"] for r in recs if not r["ok"]]
    if bad:
        print(f"{len(bad)} WRONG against FP64: {bad}")
    report.write_run(out_path, gpu.name, recs, summary=summary)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="the JSON to write")
    ap.add_argument("budget_s", nargs="?", type=float, help="seconds for the whole run, compilation included")
    ap.add_argument("--dtype", default="fp32", help="fp32, fp32_tc or both (comma list)")
    ap.add_argument("--plans", action="store_true", help="print what changes (no GPU) and exit")
    args = ap.parse_args()
    if args.plans:
        plans_on_cpu()
        return 0
    if args.out is None or args.budget_s is None:
        ap.error("give OUT.json and BUDGET_S (or --plans)")
    dtypes = [d for d in args.dtype.split(",") if d]
    if set(dtypes) - set(RECORDS):
        ap.error(f"--dtype: {', '.join(RECORDS)}")
    run_gpu(args.out, args.budget_s, dtypes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
