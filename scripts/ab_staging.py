"""A/B, on a GPU: odd-alignment and odd-batch 16-bit products, four ways in the same rounds --
torch.matmul, gemmlab's auto, wgmma on staging copies (forced, wherever wgmma can take the
product staged) and the fallback (mma_pipelined at its sized tile, forced by name) -- with what
the staging rule needs to be refitted from the timings (`--fit OUT.json`, no GPU).

    python3 scripts/ab_staging.py OUT.json BUDGET_S     # on the GPU
    python3 scripts/ab_staging.py --fit OUT.json        # anywhere: the fallback's slowdown refitted

The staged path is a prepared call built with the fallback's estimate made prohibitive, run as
the public call's fast path runs one (api._run_prepared), so that the auto and fallback calls
keep their own plans.
"""

import statistics
import time

gm = statistics.geometric_mean


def staged_call(a, b, c, gpu):
    """A function running a @ b into c on wgmma after staging copies (None where the plan does
    not stage even when staging costs nothing), and the plan."""
    from gemmlab.core import api, executor, planner
    from gemmlab.kernels.tensor import wgmma

    saved = wgmma.UNALIGNED_FALLBACK_SLOWDOWN
    wgmma.UNALIGNED_FALLBACK_SLOWDOWN = 1e9
    try:
        call = planner.validate(a, b, c, 1.0, 0.0, False, False, None, None)
        prepared = executor.PreparedCall(call, gpu, "auto", {}, None)
    finally:
        wgmma.UNALIGNED_FALLBACK_SLOWDOWN = saved
    if not prepared.plan.problem.stage:
        return None, prepared.plan
    pa, pb, pc = call.A.operand.ptr, call.B.operand.ptr, call.C.operand.ptr
    return (lambda: api._run_prepared(prepared, pa, pb, c, pc, 1.0, 0.0)), prepared.plan


def stage_bytes_of(a, b, c):
    from gemmlab.core import planner

    call = planner.validate(a, b, c, 1.0, 0.0, False, False, None, None)
    kv = planner.kernel_view(
        call, planner.result_side(call), {"A": call.A.operand.ptr, "B": call.B.operand.ptr, "C": call.C.operand.ptr}
    )
    return planner.tma_reading(call, kv, planner.batching(kv))[1]


def run(out_path: str, budget_s: float) -> None:
    import torch
    import gemmlab
    from gemmlab.tools.bench import models, report, shapes
    from gemmlab.tools.bench.timing import time_rounds
    from gemmlab.kernels.tensor import mma_pipelined
    from gemmlab.runtime.device import gpu_info

    gpu = gpu_info(0)
    prods = shapes.select(kinds=["odd_align", "batched_odd"])
    recs, t0 = [], time.time()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for pr in prods:
        if time.time() - t0 > budget_s:
            break
        make = lambda s: torch.rand(s, device="cuda", dtype=torch.bfloat16, generator=gen).mul_(2).sub_(1)  # noqa: E731
        a, b = pr.operands(make)
        c = torch.empty(pr.out_shape, device="cuda", dtype=torch.bfloat16)
        sample = models._Sample(a, b)  # FP64 on a sample of rows and columns; inf where not finite
        c.fill_(float("nan"))
        gemmlab.matmul(a, b, out=c)
        p = gemmlab.last_plan()
        err = {"auto": sample.error(c)}
        fb = mma_pipelined.sized_params(pr.M, pr.N, pr.K, gpu.sm_count, pr.batch)
        c.fill_(float("nan"))
        gemmlab.matmul(a, b, out=c, kernel="mma_pipelined", **fb)
        pf = gemmlab.last_plan()
        err["fallback"] = sample.error(c)
        calls = {
            "torch": lambda: torch.matmul(a, b, out=c),
            "auto": lambda: gemmlab.matmul(a, b, out=c),
            "fallback": lambda: gemmlab.matmul(a, b, out=c, kernel="mma_pipelined", **fb),
        }
        staged, ps = staged_call(a, b, c, gpu)
        if staged is not None:
            c.fill_(float("nan"))
            staged()
            err["staged"] = sample.error(c)
            calls["staged"] = staged
        t = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=3, reps=3, budget_s=0.05)
        r = {
            "product": pr.label,
            "kind": pr.kind,
            "shape": [pr.batch, pr.M, pr.N, pr.K],
            "ops": pr.ops,
            "stage_bytes": stage_bytes_of(a, b, c),
            "sm_count": gpu.sm_count,
            "auto_plan": p.describe(),
            "fallback_plan": pf.describe(),
            "staged_plan": ps.describe(),
            "errors": err,
            **{k: v.ms for k, v in t.items()},
        }
        recs.append(r)
        st = f"staged {100 * r['torch'] / r['staged']:6.1f}%" if "staged" in r else "staged     -"
        print(
            f"{pr.label:48s} {pr.kind:11s} torch {r['torch'] * 1e3:8.1f} us  auto {100 * r['torch'] / r['auto']:6.1f}% "
            f"[{p.spec.name}{'+copy' if p.problem.stage else ''}]  fallback "
            f"{100 * r['torch'] / r['fallback']:6.1f}%  {st}",
            flush=True,
        )
    for kind in ("odd_align", "batched_odd"):
        rs = [r for r in recs if r["kind"] == kind]
        if rs:
            oracle = gm([100 * r["torch"] / min(r["fallback"], r.get("staged", r["fallback"])) for r in rs])
            print(
                f"{kind}: auto {gm([100 * r['torch'] / r['auto'] for r in rs]):.1f}%  fallback "
                f"{gm([100 * r['torch'] / r['fallback'] for r in rs]):.1f}%  oracle {oracle:.1f}% of torch over "
                f"{len(rs)}"
            )
    report.write_json(recs, out_path)


def fit(path: str) -> None:
    """The staging rule refitted to a run's timings: for each slowdown of the fallback off the
    16-byte grid (wgmma.UNALIGNED_FALLBACK_SLOWDOWN), the products wgmma_staging_choice would
    stage, and the geometric mean of % of torch.matmul that choice gives."""
    import json
    from gemmlab.kernels.tensor import wgmma

    recs = [r for r in json.load(open(path)) if "staged" in r]

    def score(slowdown):
        saved, wgmma.UNALIGNED_FALLBACK_SLOWDOWN = wgmma.UNALIGNED_FALLBACK_SLOWDOWN, slowdown
        try:
            pct = []
            for r in recs:
                nz, M, N, K = r["shape"]
                params, _ = wgmma.wgmma_staging_choice(M, N, K, r["sm_count"], nz, "bfloat16", r["stage_bytes"])
                pct.append(100 * r["torch"] / (r["staged"] if params else r["fallback"]))
            return gm(pct)
        finally:
            wgmma.UNALIGNED_FALLBACK_SLOWDOWN = saved

    oracle = gm([100 * r["torch"] / min(r["fallback"], r["staged"]) for r in recs])
    print(
        f"{len(recs)} products wgmma can take staged: oracle {oracle:.1f}% of torch.matmul, the current "
        f"slowdown ({wgmma.UNALIGNED_FALLBACK_SLOWDOWN:g}) {score(wgmma.UNALIGNED_FALLBACK_SLOWDOWN):.1f}%"
    )
    for slowdown in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8):
        print(f"  slowdown {slowdown:4g}: {score(slowdown):.1f}%")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", metavar="OUT.json", help="refit the fallback's slowdown from these records (no GPU)")
    ap.add_argument("out", nargs="?", help="on the GPU: write the records here")
    ap.add_argument("budget_s", nargs="?", type=float, help="on the GPU: seconds for the timed rounds")
    args = ap.parse_args()
    if args.fit:
        fit(args.fit)
    elif args.out is None or args.budget_s is None:
        ap.error("give OUT.json BUDGET_S (on a GPU) or --fit OUT.json")
    else:
        run(args.out, args.budget_s)
