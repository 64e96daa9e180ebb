"""A/B, on a GPU: products with a thin side -- a few rows (gemv) or a few K (outer) -- the
choice before this change forced against kernel="auto" now, beside torch.matmul, in one
process, calls interleaved round after round, L2 flushed before every run.

    python3 scripts/ab_gemv.py --json OUT.json [--budget-s 400]   # on the GPU
    python3 scripts/ab_gemv.py --plans                            # no GPU: old and new plans

The products: a one-token lm_head with a vocabulary of odd length (whisper's 51865 x 768:
x @ W.t(), dY @ W and dY.t() @ x) and neighbours -- 1 to 8 rows or K, N and K from 768
to 256000, float32, bfloat16 and float16, the layouts a model hands over and the others
where they change the plan.  "old" is a prepared call planned with the rules before this
change put back for its planning (a stored row's leading dimension and width and C's rows
counted in gemv's alignment, gemv's row path narrowest-first split, no outer); "new" the
same for today's rules; "auto" the public call gemmlab.matmul (new plus the signature
lookup); for 16-bit products of a few K, which auto leaves to wgmma, "outer" forces the
new rung by name.  Each arm's output is checked against FP64 on a sample first.
"""

import argparse
import contextlib
import statistics
import sys
import time


V, D = 51865, 768  # whisper-small's vocabulary and width

# (label, M, N, K, ops, dtype): ops as the layouts of op(A), op(B) the arrays below give
# ("N": stored as read, "T": a transposed view of a row-major array; a single row or
# column is read in whichever layout reads it along its length, so K = 1 is always TN).
PRODUCTS = [
    # the three products of the report (shapes-2026-11-29-2.json)
    ("whisper lm_head dY @ W", 1, D, V, "NN", "fp32"),
    ("whisper lm_head x @ W.t()", 1, V, D, "NT", "bf16"),
    ("whisper lm_head x @ W.t()", 1, V, D, "NT", "fp32"),
    ("whisper lm_head dY.t() @ x", V, D, 1, "TN", "fp32"),
    # a few rows: logits (C) or dY (op(A)) with rows of odd length
    ("whisper lm_head x @ W.t()", 1, V, D, "NT", "fp16"),
    ("whisper lm_head x @ W.t() 2 tokens", 2, V, D, "NT", "bf16"),
    ("whisper lm_head x @ W.t() 4 tokens", 4, V, D, "NT", "bf16"),
    ("whisper lm_head x @ W.t() 4 tokens", 4, V, D, "NT", "fp32"),
    ("whisper lm_head x @ W.t() 8 tokens", 8, V, D, "NT", "fp32"),
    ("whisper lm_head dY @ W 2 tokens", 2, D, V, "NN", "fp32"),
    ("whisper lm_head dY @ W 4 tokens", 4, D, V, "NN", "fp32"),
    ("whisper lm_head dY @ W 8 tokens", 8, D, V, "NN", "fp32"),
    ("whisper lm_head dY^T.t() @ W 4 tokens", 4, D, V, "TN", "fp32"),
    ("whisper lm_head x^T.t() @ W.t() 3 tokens", 3, V, D, "TT", "fp32"),
    ("whisper lm_head x^T.t() @ W.t() 3 tokens", 3, V, D, "TT", "bf16"),
    ("gpt2 lm_head x @ W.t()", 1, 50257, 768, "NT", "fp32"),
    ("gpt2 lm_head dY @ W", 1, 768, 50257, "NN", "fp32"),
    # a few rows, aligned: the row path's split (LANES x SPLITK) rule, and unchanged ones
    ("gemma-2-2b lm_head dY @ W", 1, 2304, 256000, "NN", "fp32"),
    ("llama-3.2-1b lm_head dY @ W", 1, 2048, 128256, "NN", "fp32"),
    ("llama-3.2-3b lm_head dY @ W 4 tokens", 4, 3072, 128256, "NN", "fp32"),
    ("llama-3.2-1b lm_head x @ W.t()", 1, 128256, 2048, "NT", "bf16"),
    ("llama-3.2-1b up dY @ W", 1, 2048, 8192, "NN", "fp32"),
    # a few K: weight gradients at a token or a few (outer for float32)
    ("whisper lm_head dY.t() @ x", V, D, 1, "TN", "bf16"),
    ("whisper lm_head x.t() @ dY, C rows of odd length", D, V, 1, "TN", "fp32"),
    ("whisper lm_head dY.t() @ x, out^T", V, D, 1, "TN", "fp32"),
    ("whisper lm_head dY.t() @ x 4 tokens", V, D, 4, "TN", "fp32"),
    ("whisper lm_head dY.t() @ x 4 tokens, dY stored V x 4", V, D, 4, "NN", "fp32"),
    ("whisper lm_head dY.t() @ x 4 tokens, x stored D x 4", V, D, 4, "TT", "fp32"),
    ("whisper lm_head dY.t() @ x 4 tokens, both stored so", V, D, 4, "NT", "fp32"),
    ("llama-3.2-1b lm_head dY.t() @ x", 128256, 2048, 1, "TN", "fp32"),
    ("llama-3.2-1b lm_head dY.t() @ x", 128256, 2048, 1, "TN", "bf16"),
    ("llama-3.2-3b lm_head dY.t() @ x 4 tokens", 128256, 3072, 4, "TN", "fp32"),
    ("mixtral router dY @ W", 512, 4096, 8, "NN", "fp32"),
    ("vit-b16 head dY.t() @ x", 1000, 768, 1, "TN", "fp32"),
    ("llama-3.2-1b q dY.t() @ x", 2048, 2048, 1, "TN", "fp32"),
    ("phi-3-mini lm_head dY.t() @ x 4 tokens", 32064, 3072, 4, "TN", "fp32"),
    ("llama-3-8b up dY.t() @ x 16 tokens", 14336, 4096, 16, "TN", "fp32"),  # K = 16: pipelined both
]
# 16-bit products of a few K, where auto runs wgmma: the "outer" arm says up to which K
# outer would win (--only "16-bit K").
PRODUCTS += [
    (f"16-bit K sweep {name}", M, N, K, "TN", dt)
    for name, M, N in (
        ("whisper lm_head", V, D),
        ("llama-3.2-1b q", 2048, 2048),
        ("llama-3-8b up", 14336, 4096),
        ("vit-b16 head", 1000, 768),
    )
    for K in (1, 2, 4, 8, 16)
    for dt in ("bf16",)
] + [("16-bit K sweep whisper lm_head", V, D, K, "TN", "fp16") for K in (1, 4, 8)]
TORCH_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
ERROR_KEY = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}


def arrays(label, M, N, K, ops, make):
    """(a, b, out) with op(a) M x K and op(b) K x N stored as ``ops`` says, out M x N
    (column-major for an "out^T" product: the kernel computes out^T = op(b)^T op(a)^T);
    make(shape) allocates."""
    a = make((M, K)) if ops[0] == "N" else make((K, M)).swapaxes(-1, -2)
    b = make((K, N)) if ops[1] == "N" else make((N, K)).swapaxes(-1, -2)
    out = make((N, M)).swapaxes(-1, -2) if label.endswith("out^T") else make((M, N))
    return a, b, out


def _old_gemv_auto_params(M, N, K, sm_count, batch=1, *, dtype="float32", op_b="T", aligned16=True):
    """gemv.auto_params before this change: where no width fills the SMs unsplit, the
    narrowest allowed one, split."""
    from gemmlab.kernels.gemv import gemv as g
    from gemmlab.kernels.simt.pipelined import SHALLOW_SPLIT_MAX, fill_split
    from gemmlab.kernels.spec import Problem, cdiv

    mt = g._mt(M)
    params = {"MT": mt, "SPLITK": 1, "LANES": 32}
    if op_b != "N":
        return params
    prob = Problem(M, N, K, aligned16, dtype, op_b="N")
    itemsize = g._ITEMSIZE[dtype]
    widths = (32, 8, 4) if mt <= 4 else (32,)
    small = K * N * itemsize <= g.GEMV_SHORT_SEGMENT_MAX_BYTES
    usable = [w for w in widths if small or g.gemv_row_columns(prob, mt, w) * itemsize >= 128 or w == 32]
    blocks = {w: cdiv(N, g.gemv_row_columns(prob, mt, w)) * max(batch, 1) for w in usable}
    filled = [w for w in usable if blocks[w] >= g.GEMV_ROW_FILL * sm_count]
    lanes = filled[0] if filled else usable[-1]
    params["LANES"] = lanes
    if not filled:
        params["SPLITK"] = fill_split(
            blocks[lanes],
            cdiv(max(K, 1), g.gemv_row_chunk(prob, mt, lanes)),
            sm_count,
            most=SHALLOW_SPLIT_MAX,
            min_steps=4,
        )
    return params


@contextlib.contextmanager
def old_rules():
    """Planning as before this change: an operand's rows count as on the 16-byte grid only
    where aligned16 holds (every row's width too, C's included), gemv's old split rule,
    and no outer among float32's auto rungs."""
    from gemmlab.core import choose, planner
    from gemmlab.kernels.gemv import gemv

    saved = (planner.KernelView.rows_aligned16, choose.AUTO_RUNGS["float32"], gemv.auto_params)
    planner.KernelView.rows_aligned16 = lambda self: "ABC" if self.aligned16() else ""
    choose.AUTO_RUNGS["float32"] = tuple(r for r in saved[1] if r != "outer")
    gemv.auto_params = _old_gemv_auto_params
    try:
        yield
    finally:
        planner.KernelView.rows_aligned16, choose.AUTO_RUNGS["float32"], gemv.auto_params = saved


def plan_of(a, b, out, gpu, kernel="auto"):
    from gemmlab.core import planner

    call = planner.validate(a, b, out, 1.0, 0.0, False, False, None, None)
    kv = planner.kernel_view(call, call.C, {"A": call.A.operand.ptr, "B": call.B.operand.ptr, "C": call.C.operand.ptr})
    return planner.plan_call(call, kv, planner.batching(kv), gpu, kernel, {}, None)


def cpu_plans(gpu):
    """[(product, old plan, new plan, forced outer plan or None)] planned on views of a few
    bytes at the addresses fresh allocations have (NumPy has no bfloat16: float16 plans the
    same, two bytes an element)."""
    from gemmlab.tools.bench.models import planning_view

    out = []
    for pr in PRODUCTS:
        label, M, N, K, ops, dt = pr
        a, b, c = arrays(label, M, N, K, ops, lambda s: planning_view(s, "float32" if dt == "fp32" else "float16"))
        with old_rules():
            old = plan_of(a, b, c, gpu)
        new = plan_of(a, b, c, gpu)
        outer = plan_of(a, b, c, gpu, "outer") if dt != "fp32" and K <= 16 else None
        out.append((pr, old, new, outer))
    return out


def plans_on_cpu() -> None:
    from gemmlab.runtime.device import GPUInfo

    gpu = GPUInfo(0, "NVIDIA H200", (9, 0), "sm_90a", 132, 1980.0, 60 << 20, 227 * 1024)
    for (label, M, N, K, ops, dt), old, new, _ in cpu_plans(gpu):
        mark = "  " if old.name_expression == new.name_expression and old.params == new.params else "* "
        print(
            f"{mark}{dt:4s} {label:44s} {M}x{N}x{K} {ops}\n      old {old.describe()}  {old.name_expression}\n"
            f"      new {new.describe()}  {new.name_expression}"
        )


def precompile(gpu) -> str:
    """The CUDA-core kernels every arm runs, compiled in parallel processes first."""
    from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_KERNELS, SPLITK_REDUCE_SOURCE
    from gemmlab.runtime import compile as rt_compile

    items = {(str(SPLITK_REDUCE_SOURCE), k) for k in SPLITK_REDUCE_KERNELS}
    for _, *plans in cpu_plans(gpu):
        items |= {
            (str(p.spec.source_path), p.name_expression)
            for p in plans
            if p is not None and p.spec.family in ("simt", "gemv")
        }
    return f"compiled {rt_compile.precompile(sorted(items), gpu.arch)} of {len(items)} kernels"


def run_gpu(out_path: str | None, budget_s: float, only: str | None = None) -> None:
    import torch
    import gemmlab
    from gemmlab.core import api, executor, planner
    from gemmlab.tools.bench import models, report
    from gemmlab.tools.bench.timing import time_rounds
    from gemmlab.runtime.device import gpu_info

    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = gpu_info(0)
    print(f"{precompile(gpu)} ({time.time() - t0:.0f} s)", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    recs = []
    for label, M, N, K, ops, dt in PRODUCTS:
        if only and only not in label:
            continue
        if time.time() - t0 > budget_s:
            print(f"budget spent: {label} {M}x{N}x{K} {ops} {dt} and after not timed")
            break
        tdt = getattr(torch, TORCH_DTYPE[dt])
        a, b, c = arrays(
            label,
            M,
            N,
            K,
            ops,
            lambda s: torch.rand(s, device="cuda", generator=gen, dtype=torch.float32).mul_(2).sub_(1).to(tdt),
        )
        ct = torch.empty(M, N, device="cuda", dtype=tdt)  # torch's own (row-major) output
        call = planner.validate(a, b, c, 1.0, 0.0, False, False, None, None)
        with old_rules():
            old = executor.PreparedCall(call, gpu, "auto", {}, None)
        new = executor.PreparedCall(call, gpu, "auto", {}, None)
        pa, pb, pc = call.A.operand.ptr, call.B.operand.ptr, call.C.operand.ptr
        calls = {
            "torch": lambda: torch.matmul(a, b, out=ct),
            "old": lambda: api._run_prepared(old, pa, pb, c, pc, 1.0, 0.0),
            "new": lambda: api._run_prepared(new, pa, pb, c, pc, 1.0, 0.0),
            "auto": lambda: gemmlab.matmul(a, b, out=c),
        }
        plans = {"old": old.plan.describe(), "new": new.plan.describe()}
        if dt != "fp32" and K <= 16:
            forced = executor.PreparedCall(call, gpu, "outer", {}, None)
            calls["outer"] = lambda: api._run_prepared(forced, pa, pb, c, pc, 1.0, 0.0)
            plans["outer"] = forced.plan.describe()
        sample = models._Sample(a, b)
        errors = {}
        for name, fn in calls.items():
            o = ct if name == "torch" else c
            o.fill_(float("nan"))
            fn()
            errors[name] = sample.error(o)
        ok = all(models.error_ok(ERROR_KEY[dt], errors[k], errors["torch"]) for k in calls if k != "torch")
        t = time_rounds(calls, l2_bytes=gpu.l2_bytes, rounds=5, reps=3, budget_s=0.05) if ok else {}
        r = {
            "product": label,
            "dtype": dt,
            "shape": [M, N, K],
            "ops": ops,
            "plans": plans,
            "names": {"old": old.plan.name_expression, "new": new.plan.name_expression},
            "changed": old.plan.name_expression != new.plan.name_expression or old.plan.params != new.plan.params,
            "errors": errors,
            "ok": ok,
            **{f"{k}_ms": v.ms for k, v in t.items()},
        }
        if ok:
            r.update({f"pct_{k}": 100 * r["torch_ms"] / r[f"{k}_ms"] for k in calls if k != "torch"})
        recs.append(r)
        if ok:
            extra = f"  outer {r['pct_outer']:6.1f}%" if "outer" in calls else ""
            print(
                f"{'*' if r['changed'] else ' '} {dt:4s} {label:42s} {M}x{N}x{K} {ops}  torch "
                f"{r['torch_ms'] * 1e3:7.1f} us  old {r['pct_old']:6.1f}%  new {r['pct_new']:6.1f}%  auto "
                f"{r['pct_auto']:6.1f}%{extra}\n      old {plans['old']}\n      new {plans['new']}",
                flush=True,
            )
        else:
            print(f"WRONG {dt} {label} {M}x{N}x{K} {ops}: {errors}", flush=True)
        a = b = c = ct = sample = calls = old = new = None
    gm = statistics.geometric_mean
    changed = [r for r in recs if r["ok"] and r["changed"]]
    summary = {}
    if changed:
        summary = {
            "changed": len(changed),
            "old": gm([r["pct_old"] for r in changed]),
            "new": gm([r["pct_new"] for r in changed]),
            "auto": gm([r["pct_auto"] for r in changed]),
        }
        print(
            f"{len(changed)} changed plans: geometric mean % of torch.matmul old {summary['old']:.1f}, "
            f"new {summary['new']:.1f}, public call {summary['auto']:.1f}"
        )
    bad = [r["product"] for r in recs if not r["ok"]]
    if bad:
        print(f"{len(bad)} WRONG against FP64: {bad}")
    if out_path:
        report.write_run(out_path, gpu.name, recs, summary=summary)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--budget-s", type=float, default=400.0, help="no product starts after this many seconds")
    ap.add_argument("--plans", action="store_true", help="print the old and new plans (no GPU) and exit")
    ap.add_argument("--only", help="time only the products whose label holds this text")
    args = ap.parse_args()
    if args.plans:
        plans_on_cpu()
        return 0
    run_gpu(args.json, args.budget_s, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
