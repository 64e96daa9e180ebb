"""`gemmlab bench --suite moe`: the grouped rung (Hopper) on the expert layers of public
mixture-of-experts models, beside torch._grouped_mm and a loop of torch.matmul.

For each model and token count, the router sends every token to its top-k experts (seeded,
uniform or skewed: routing_counts), the rows are sorted by expert, and the two grouped
products of the expert MLPs are timed through the public calls, host time included (path
"public"): gate_up, x (rows, d) @ W1_e.t() with W1 stacked (E, 2 ffn, d), and down,
h (rows, ffn) @ W2_e.t() with W2 stacked (E, d, ffn) -- both with B the transpose of
row-major weights, as nn.Linear stores them.  Timed: torch._grouped_mm (where this PyTorch
has it and runs it here; otherwise the record says it was skipped), a Python loop of
torch.matmul over the non-empty groups, and gemmlab.grouped_mm.  Every result is checked
against FP64 per group, the output poisoned (NaN) first.  bfloat16 throughout; on a GPU
other than Hopper (sm_90a) the suite refuses, saying so.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from .suites import Record, Timer, _progress, _tflops, bench_gpu

# Public configurations (the models' config.json): experts, experts per token (top-k), hidden
# size d, an expert's intermediate size ffn.
MOE_MODELS = {
    "mixtral-8x7b": (8, 2, 4096, 14336),
    "qwen1.5-moe-a2.7b": (60, 4, 2048, 1408),
    "deepseek-v2-lite": (64, 6, 2048, 1408),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "granite-3.0-1b-a400m": (32, 8, 1024, 512),
}
TOKENS = (128, 1024, 8192)
ROUTINGS = ("uniform", "skewed")
# Skewed routing: expert e is chosen with probability proportional to 1 / (e + 1) ** SKEW
# (a Zipf law: a few experts take most of the tokens, some get none at small token counts).
SKEW = 1.2
DTYPE = "bfloat16"


def moe_shapes(tokens=None, models=None) -> list[dict]:
    """Every grouped product the suite times: model, product (gate_up, down), experts E,
    top-k, tokens, rows (tokens x top-k), N and K."""
    out = []
    for model, (experts, top_k, d, ffn) in MOE_MODELS.items():
        if models and model not in models:
            continue
        for t in tokens or TOKENS:
            for product, N, K in (("gate_up", 2 * ffn, d), ("down", d, ffn)):
                out.append(
                    dict(model=model, product=product, experts=experts, top_k=top_k, tokens=t, rows=t * top_k, N=N, K=K)
                )
    return out


def routing_counts(tokens: int, experts: int, top_k: int, kind: str, seed: int = 0) -> np.ndarray:
    """Rows each expert receives when ``tokens`` tokens each pick ``top_k`` distinct experts:
    uniformly, or "skewed" (SKEW's Zipf law), seeded; sums to tokens x top_k."""
    if kind not in ROUTINGS:
        raise ValueError(f"routing is one of {', '.join(ROUTINGS)}, not {kind!r}")
    rng = np.random.default_rng(seed)
    weights = np.ones(experts) if kind == "uniform" else 1.0 / np.arange(1, experts + 1) ** SKEW
    # Top-k without replacement per token: the k largest of Gumbel-perturbed log-weights.
    keys = np.log(weights)[None, :] + rng.gumbel(size=(tokens, experts))
    chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
    return np.bincount(chosen.ravel(), minlength=experts)


def require_hopper(gpu) -> None:
    """Refuse anything but Hopper: the grouped rung is built for sm_90a only."""
    if gpu.arch != "sm_90a":
        raise ValueError(
            f"--suite moe needs a Hopper GPU (sm_90a): gemmlab's grouped rung runs there only; "
            f"GPU {gpu.ordinal} is {gpu.name} ({gpu.arch})"
        )


class _MoeOperands:
    """One product's operands on the GPU: a (rows, K), the stacked weights W (E, N, K) and
    b = W.transpose(-2, -1), the offsets, an output, the groups' row ranges, and the FP64
    reference."""

    def __init__(self, counts: np.ndarray, N: int, K: int, seed: int):
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        rows, E = int(counts.sum()), len(counts)
        self.a = torch.randn(rows, K, device="cuda", generator=g).to(torch.bfloat16)
        self.w = (torch.randn(E, N, K, device="cuda", generator=g) / K**0.5).to(torch.bfloat16)
        self.b = self.w.transpose(-2, -1)
        ends = np.cumsum(counts)
        self.offs = torch.tensor(ends, dtype=torch.int32, device="cuda")
        self.bounds = [(int(e - c), int(e)) for c, e in zip(counts, ends)]
        self.c = torch.empty(rows, N, device="cuda", dtype=torch.bfloat16)
        self._ref = None

    def reference(self):
        import torch

        if self._ref is None:
            self._ref = torch.empty(self.c.shape, device="cuda", dtype=torch.float64)
            for e, (s, t) in enumerate(self.bounds):
                if t > s:
                    self._ref[s:t] = self.a[s:t].double() @ self.b[e].double()
        return self._ref

    def error(self, fn) -> float:
        import torch

        self.c.fill_(float("nan"))
        out = fn()
        out = self.c if out is None else out
        torch.cuda.synchronize()
        ref = self.reference()
        return float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))

    def loop(self):
        """A Python loop of torch.matmul over the non-empty groups, into c."""
        import torch

        for e, (s, t) in enumerate(self.bounds):
            if t > s:
                torch.matmul(self.a[s:t], self.b[e], out=self.c[s:t])


def _torch_grouped(ops: _MoeOperands):
    """torch._grouped_mm on the operands, or why it cannot run here."""
    import torch

    fn = getattr(torch, "_grouped_mm", None)
    if fn is None:
        return None, f"this PyTorch ({torch.__version__}) has no torch._grouped_mm"
    call = partial(fn, ops.a, ops.b, offs=ops.offs, out_dtype=torch.bfloat16)
    try:
        call()
        torch.cuda.synchronize()
    except RuntimeError as exc:
        return None, "torch._grouped_mm: " + str(exc).splitlines()[0][:200]
    return call, ""


def run(
    tokens=None,
    *,
    models=None,
    routings=ROUTINGS,
    reps: int = 20,
    flush: bool = True,
    max_run_s: float = 3.0,
    budget_s: float = 1.0,
    quiet: bool = False,
    seed: int = 0,
) -> list[Record]:
    """Time every product of moe_shapes(tokens, models) under each routing (module docstring)."""
    import torch

    from ...core import api

    gpu = bench_gpu()
    require_hopper(gpu)
    timer = Timer(gpu.l2_bytes, reps, flush, max_run_s, budget_s)
    records: list[Record] = []
    t0 = time.time()

    def say(msg):
        _progress(f"  {msg}  ({time.time() - t0:.0f} s)", quiet)

    for shape in moe_shapes(tokens, models):
        for routing in routings:
            counts = routing_counts(shape["tokens"], shape["experts"], shape["top_k"], routing, seed)
            ops = _MoeOperands(counts, shape["N"], shape["K"], seed)
            M, N, K = shape["rows"], shape["N"], shape["K"]
            params = {
                "model": shape["model"],
                "product": shape["product"],
                "experts": shape["experts"],
                "top_k": shape["top_k"],
                "tokens": shape["tokens"],
                "routing": routing,
            }
            origin = (
                f"{shape['model']} {shape['product']}, {shape['tokens']} tokens, {routing} routing: "
                f"{int((counts == 0).sum())} empty groups, largest {int(counts.max())} rows"
            )
            torch_call, why_not = _torch_grouped(ops)
            rows = [
                ("torch._grouped_mm", torch_call, why_not),
                ("torch.matmul loop", ops.loop, ""),
                ("gemmlab.grouped_mm", partial(api.grouped_mm, ops.a, ops.b, ops.offs, out=ops.c), ""),
            ]
            base = None
            for name, fn, why in rows:
                t = None if fn is None else timer(fn, "public")
                ms = None if t is None or t.skipped else t.ms
                err = ops.error(fn) if ms is not None else None
                if name == "torch._grouped_mm" and ms is not None:
                    base = ms
                note = origin
                if name == "gemmlab.grouped_mm" and ms is not None:
                    p = api.last_plan()
                    note += f"; {p.describe()}" + (f"; {p.reason}" if p.reason else "")
                skipped = None if ms is not None else (why or (t.skipped if t is not None else "not run"))
                records.append(
                    Record(
                        gpu.name,
                        name,
                        params,
                        M,
                        N,
                        K,
                        DTYPE,
                        ms,
                        _tflops(M, N, K, ms),
                        base,
                        _tflops(M, N, K, base),
                        100.0 * base / ms if (ms and base) else None,
                        None,
                        err,
                        len(t.ms_all) if t is not None else 0,
                        skipped,
                        note=note,
                        ops="NT",
                        path="public",
                    )
                )
                say(
                    f"{name} {params} {M}x{N}x{K}: "
                    + (
                        f"{ms:.3f} ms, {_tflops(M, N, K, ms):.0f} TFLOPS, err {err:.1e}"
                        if ms
                        else f"skipped: {skipped}"
                    )
                )
            del ops
            torch.cuda.empty_cache()
    return records
