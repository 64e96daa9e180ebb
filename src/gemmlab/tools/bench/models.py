"""`gemmlab bench --suite models`: the products a transformer runs, through
``gemmlab.matmul`` beside ``torch.matmul`` on the same PyTorch views.

Cases (one list, :func:`select`, shared with ``gemmlab tune --suite models``):

- the linear layers of a Llama-3-8B-sized model (hidden 4096) at M tokens,
  each as the three products training runs: forward ``x @ W.t()`` (W stored
  out x in, so B is a transposed view), input gradient ``dY @ W`` and weight
  gradient ``dY.t() @ x`` (A a transposed view);
- attention's batched products at batch x heads BH and sequence S, head dim
  128: ``Q @ K.transpose(-1, -2)`` and ``P @ V``.

Every operand is exactly the view a PyTorch model hands to matmul (no copies).
Each (case, dtype) pair is timed with suites.time_size on the public path
(timing.time_gpu: CUDA events, L2 flushed, each run from an idle GPU so host
time counts), torch.matmul before and after gemmlab.matmul, both with ``out=``
into one NaN-poisoned output, TF32 off for float32 (cuBLAS SGEMM; fp32_tc is
compared with it too).  ``fp32_tc_mode`` is the one-line PyTorch form instead:
``torch.matmul(a, b)`` inside ``gemmlab.torch.fp32_tc()`` beside
``torch.matmul(a, b)`` outside it, each allocating its result.  Each result is checked against FP64 on a sample of
rows and columns (and batches), torch's beside it.  A total time budget spreads
the repeats over the pairs: a long product gets the fewest runs time_gpu takes.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from functools import partial

from ...core.api import last_plan, matmul
from ...core.errors import GemmlabError
from .report import _fmt, _pyplot, savefig
from .suites import Timer, _progress, bench_gpu, time_size, torch_tf32

HIDDEN = 4096
# (in features, out features) of each linear layer of a Llama-3-8B-sized model.
LINEAR_LAYERS = {
    "qkv": (HIDDEN, 6144),
    "o": (HIDDEN, HIDDEN),
    "gate_up": (HIDDEN, 28672),
    "down": (14336, HIDDEN),
    "lm_head": (HIDDEN, 128256),
}
ATTENTION = "attention"
DECODE = "decode"  # attention at one decoding step, against a cache of keys and values
DECODE_CACHE = "decode_cache"  # the same, against the first positions of a cache allocated for more
LAYERS = (*LINEAR_LAYERS, ATTENTION)
TOKENS = (1, 16, 128, 2048, 8192)
LINEAR_PRODUCTS = ("fwd", "dgrad", "wgrad")
ATTENTION_PRODUCTS = ("qk", "pv")
# Training's attention also makes the backward's P^T @ dO (and dS^T @ Q, the same shape): a TN
# batch, M the keys, K the queries.  Its dO @ V^T and dS @ K repeat qk's and pv's shapes and
# layouts.  The shapes suite times all three; the models suite and decode steps the first two.
TRAINING_ATTENTION_PRODUCTS = ATTENTION_PRODUCTS + ("dv",)
ATTENTION_BH = (32, 128)  # batch x heads
ATTENTION_SEQ = (512, 2048, 4096)
HEAD_DIM = 128
ONLY = ("linear", "attention")
# The suite's dtype names: (storage dtype of the tensors, gemmlab's precision=).
DTYPES = {
    "bf16": ("bfloat16", None),
    "fp16": ("float16", None),
    "fp32": ("float32", None),
    "fp32_tc": ("float32", "fp32_tc"),
    "fp32_tc_mode": ("float32", "fp32_tc"),
}
# Timed as a model runs under gemmlab.torch.fp32_tc(): torch.matmul(a, b) inside the
# mode beside torch.matmul(a, b) outside it (no out=: the mode routes no out= form).
THROUGH_MODE = {"fp32_tc_mode"}
# A result is wrong when its error against FP64 exceeds both this floor (about
# the output dtype's rounding) and ERROR_VS_TORCH times torch's own error.
ERROR_FLOOR = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 1e-5, "fp32_tc": 1e-5, "fp32_tc_mode": 1e-5}
ERROR_VS_TORCH = 4.0
SAMPLE_ROWS, SAMPLE_COLS, SAMPLE_BATCHES = 32, 256, 3
TIME_BUDGET_S = 300.0  # the default run's target for all timed repeats
SESSIONS_PER_PAIR = 3  # torch before, gemmlab, torch after (suites.time_size)
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
MEMORY_HEADROOM = 512 << 20  # left free beyond the estimate (cuBLAS, gemmlab's pools)
SMALL_WORKSPACE = 64 << 20  # split-K partial sums and similar, outside fp32_tc
# Rough throughput priors (TFLOPS of torch, of gemmlab) for the up-front
# estimate; the remaining time is re-estimated from the pairs measured so far.
PRIOR_TFLOPS = {
    "bf16": (500.0, 500.0),
    "fp16": (500.0, 500.0),
    "fp32": (45.0, 45.0),
    "fp32_tc": (45.0, 130.0),
    "fp32_tc_mode": (45.0, 130.0),
}
RUNS_PER_SESSION = 6  # time_gpu's fewest: untimed, estimate, warm-up, 3 timed
PAIR_OVERHEAD_S = 0.15  # data, reference sample, events, Python per pair


@dataclass(frozen=True)
class Case:
    """One product as a model makes it: ``batch`` products of op(A) M x K by op(B) K x N."""

    layer: str  # a key of LINEAR_LAYERS, or "attention"
    product: str  # fwd, dgrad, wgrad; qk, pv, dv
    tokens: int  # M tokens of a linear layer; the sequence length S of attention
    batch: int  # batch x heads for attention; 1 for a linear layer
    M: int
    N: int
    K: int
    ops: str  # how op(A), op(B) are stored: N row-major, T a transposed view
    expression: str  # the PyTorch expression that makes the operands
    stored: tuple  # the shape of each tensor allocated (contiguous), in expression order
    # Attention: the second tensor holds this many positions and the product reads its
    # first ``tokens`` (a cache allocated for the longest context: each matrix's stride is
    # the capacity, not the length); 0: it holds exactly ``tokens``.
    capacity: int = 0

    @property
    def name(self) -> str:
        return f"{self.layer}.{self.product}"

    @property
    def label(self) -> str:
        where = (
            f"M={self.tokens}"
            if self.layer not in (ATTENTION, DECODE, DECODE_CACHE)
            else f"BH={self.batch} S={self.tokens}"
        )
        return f"{self.name} {where}"

    @property
    def shape(self) -> str:
        return ("" if self.batch == 1 else f"{self.batch}x") + f"{self.M}x{self.N}x{self.K}"

    @property
    def out_shape(self) -> tuple:
        return (self.M, self.N) if self.batch == 1 else (self.batch, self.M, self.N)

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.M * self.N * self.K

    def operands(self, make):
        """(a, b) as the model hands them to matmul: ``make(shape)`` allocates
        each stored array (PyTorch, CuPy or NumPy), the views are taken here (W.t(),
        dY.t(), K.transpose(-1, -2): swapaxes, which all three have)."""
        first, second = (make(s) for s in self.stored)
        if self.capacity:  # k_cache[:, :S], v_cache[:, :S]
            second = second[:, : self.tokens]
        if self.product in ("fwd", "qk"):  # x @ W.t(), Q @ K.transpose(-1, -2)
            return first, second.swapaxes(-1, -2)
        if self.product in ("wgrad", "dv"):  # dY.t() @ x, P.transpose(-1, -2) @ dO
            return first.swapaxes(-1, -2), second
        if self.product == "fwd_t":  # x_t.t() @ W.t()
            return first.swapaxes(-1, -2), second.swapaxes(-1, -2)
        return first, second  # dY @ W, P @ V

    def stored_elements(self) -> int:
        return sum(math.prod(s) for s in self.stored)

    def tags(self) -> dict:
        """What a suite adds to the case's record (the shapes suite: model, kind, view)."""
        return {}


def planning_view(shape, dtype, offset: int = 0):
    """A C-ordered NumPy array of ``shape`` whose memory is never touched, for planning a
    product without a GPU (the planner reads shapes, strides and addresses only): a few
    bytes viewed with zero-copy strides, its base 256-byte aligned plus ``offset`` elements."""
    import numpy as np

    dt = np.dtype(dtype)
    buf = np.zeros(256 + 64, np.uint8)
    start = (-buf.ctypes.data) % 256 + offset * dt.itemsize
    strides, acc = [], dt.itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return np.lib.stride_tricks.as_strided(buf[start : start + 16].view(dt), tuple(shape), tuple(reversed(strides)))


def linear_case(layer: str, product: str, tokens: int, dims: tuple[int, int] | None = None) -> Case:
    """One of the three products of a linear layer (in, out features ``dims``,
    default LINEAR_LAYERS[layer]) at ``tokens`` rows."""
    fan_in, fan_out = dims or LINEAR_LAYERS[layer]
    if product == "fwd":
        return Case(
            layer, product, tokens, 1, tokens, fan_out, fan_in, "NT", "x @ W.t()", ((tokens, fan_in), (fan_out, fan_in))
        )
    if product == "dgrad":
        return Case(
            layer, product, tokens, 1, tokens, fan_in, fan_out, "NN", "dY @ W", ((tokens, fan_out), (fan_out, fan_in))
        )
    if product == "wgrad":
        return Case(
            layer,
            product,
            tokens,
            1,
            fan_out,
            fan_in,
            tokens,
            "TN",
            "dY.t() @ x",
            ((tokens, fan_out), (tokens, fan_in)),
        )
    if product == "fwd_t":  # the forward product on activations stored feature-major: both operands transposed
        return Case(
            layer,
            product,
            tokens,
            1,
            tokens,
            fan_out,
            fan_in,
            "TT",
            "x_t.t() @ W.t()",
            ((fan_in, tokens), (fan_out, fan_in)),
        )
    raise ValueError(f"unknown linear product {product!r}; choose from {', '.join(LINEAR_PRODUCTS)}")


def _attention_pair(
    layer: str,
    product: str,
    batch: int,
    rows: int,
    ctx: int,
    head_dim: int,
    expressions: tuple[str, str],
    capacity: int = 0,
) -> Case:
    """Q @ K^T (``product`` "qk"), P @ V ("pv") or, where ``expressions`` names it, P^T @ dO
    ("dv": M the ctx keys, K the rows) over ``batch`` matrices: ``rows`` query
    rows against ``ctx`` keys and values of ``head_dim``, K and V stored (batch, ctx, head dim),
    or (batch, capacity, head dim) of which the first ctx positions are read."""
    kv = (batch, capacity or ctx, head_dim)
    if product == "qk":
        return Case(
            layer,
            product,
            ctx,
            batch,
            rows,
            ctx,
            head_dim,
            "NT",
            expressions[0],
            ((batch, rows, head_dim), kv),
            capacity,
        )
    if product == "pv":
        return Case(
            layer, product, ctx, batch, rows, head_dim, ctx, "NN", expressions[1], ((batch, rows, ctx), kv), capacity
        )
    if product == "dv" and len(expressions) > 2:  # P^T @ dO: P (batch, rows, ctx), dO (batch, rows, head dim)
        stored = ((batch, rows, ctx), (batch, rows, head_dim))
        return Case(layer, product, ctx, batch, ctx, head_dim, rows, "TN", expressions[2], stored)
    known = ATTENTION_PRODUCTS + (("dv",) if len(expressions) > 2 else ())
    raise ValueError(f"unknown attention product {product!r}; choose from {', '.join(known)}")


def decode_case(product: str, bkv: int, rows: int, ctx: int, head_dim: int = HEAD_DIM) -> Case:
    """Attention at one decoding step: over ``bkv`` (batch x key/value heads) matrices, the
    ``rows`` query rows that share a key/value head (1 without grouped-query attention, heads /
    key/value heads with it, the query reshaped to (batch x kv heads, group, head dim)) against
    ``ctx`` cached positions."""
    return _attention_pair(DECODE, product, bkv, rows, ctx, head_dim, ("q @ k_cache.transpose(-1, -2)", "p @ v_cache"))


def decode_cache_case(product: str, bkv: int, rows: int, ctx: int, capacity: int, head_dim: int = HEAD_DIM) -> Case:
    """decode_case against the first ``ctx`` positions of a cache allocated for ``capacity``
    (how generation loops keep it: one buffer for the longest context, sliced each step)."""
    return _attention_pair(
        DECODE_CACHE,
        product,
        bkv,
        rows,
        ctx,
        head_dim,
        ("q @ k_cache[:, :S].transpose(-1, -2)", "p @ v_cache[:, :S]"),
        capacity,
    )


def attention_case(product: str, bh: int, seq: int, head_dim: int = HEAD_DIM) -> Case:
    """Q @ K^T, P @ V or the backward's P^T @ dO ("dv") over ``bh`` (batch x heads) matrices of
    sequence ``seq``."""
    expressions = ("Q @ K.transpose(-1, -2)", "P @ V", "P.transpose(-1, -2) @ dO")
    return _attention_pair(ATTENTION, product, bh, seq, seq, head_dim, expressions)


# -- options ------------------------------------------------------------------


def _names(text: str, known, option: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise ValueError(f"{option} {text!r}: give a comma list of {', '.join(known)}")
    return list(dict.fromkeys(names))


def parse_dtypes(text: str) -> list[str]:
    return _names(text, DTYPES, "--dtype")


def parse_layers(text: str) -> list[str]:
    return _names(text, LAYERS, "--layers")


def parse_products(text: str) -> list[str]:
    return _names(text, LINEAR_PRODUCTS, "--products")


def parse_tokens(text: str) -> list[int]:
    try:
        tokens = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        tokens = []
    if not tokens or min(tokens) < 1:
        raise ValueError(f"--tokens {text!r}: give a comma list of positive token counts (M)")
    return list(dict.fromkeys(tokens))


def select(*, layers=None, only: str | None = None, tokens=None, products=None) -> list[Case]:
    """The suite's cases: every linear layer at each of ``tokens`` with each of
    ``products``, then attention's products; ``layers`` (names of LAYERS) or
    ``only`` ("linear" / "attention") narrow it."""
    if layers is not None and only is not None:
        raise ValueError("give --layers or --only, not both")
    if only is not None and only not in ONLY:
        raise ValueError(f"--only {only!r}: choose linear or attention")
    if layers is None:
        layers = [n for n in LAYERS if only is None or (n == ATTENTION) == (only == "attention")]
    linear = [n for n in layers if n != ATTENTION]
    if not linear and (tokens is not None or products is not None):
        raise ValueError("--tokens and --products choose the linear layers' products; the selection has none")
    cases = [
        linear_case(layer, product, m)
        for layer in linear
        for m in (tokens or TOKENS)
        for product in (products or LINEAR_PRODUCTS)
    ]
    if ATTENTION in layers:
        cases += [
            attention_case(product, bh, seq)
            for bh in ATTENTION_BH
            for seq in ATTENTION_SEQ
            for product in ATTENTION_PRODUCTS
        ]
    return cases


def tune_shapes(cases) -> dict[tuple[int, int, int], list[tuple[str, int]]]:
    """{(M, N, K): [(ops, batch), ...]}: each distinct shape of ``cases`` and the
    layouts and batches the suite runs it in (what ``gemmlab tune`` times)."""
    shapes: dict[tuple[int, int, int], list[tuple[str, int]]] = {}
    for c in cases:
        uses = shapes.setdefault((c.M, c.N, c.K), [])
        if (c.ops, c.batch) not in uses:
            uses.append((c.ops, c.batch))
    return shapes


# -- memory ---------------------------------------------------------------------


def memory_needed(case: Case, dtype: str) -> int:
    """Bytes a pair allocates at once: the stored operands, one output, and
    gemmlab's workspaces (fp32_tc: the split parts of A and B, up to twice the
    inputs)."""
    storage, precision = DTYPES[dtype]
    item = ITEMSIZE[storage]
    inputs = case.stored_elements() * item
    workspace = 2 * inputs if precision else SMALL_WORKSPACE
    # Through the mode each call allocates its result while the last one is still held.
    outputs = 3 if dtype in THROUGH_MODE else 1
    return inputs + outputs * math.prod(case.out_shape) * item + workspace


def too_big(case: Case, dtype: str, free_bytes: int) -> str | None:
    need = memory_needed(case, dtype)
    if need + MEMORY_HEADROOM <= free_bytes:
        return None
    return f"needs about {need / 2**30:.1f} GiB of GPU memory, {free_bytes / 2**30:.1f} GiB free"


# -- records and their summary --------------------------------------------------


@dataclass
class ModelRecord:
    gpu: str
    case: str  # layer.product
    layer: str
    product: str
    expression: str
    tokens: int  # M tokens (linear), S (attention)
    batch: int
    M: int
    N: int
    K: int
    ops: str
    dtype: str  # bf16, fp16, fp32, fp32_tc, fp32_tc_mode
    rung: str | None  # the kernel gemmlab.last_plan() names
    plan: str  # its describe(): tile parameters, method, fallback
    params: dict
    method: str | None  # fp32_tc's choice (fp16_ec, tf32_ec, ...)
    fallback: str  # why the rung auto wanted could not take the operands, if so
    ms: float | None
    torch_ms: float | None
    pct_torch: float | None  # 100 * torch_ms / ms
    tflops: float | None
    torch_tflops: float | None
    rel_error: float | None  # against FP64 on the sample
    torch_rel_error: float | None
    ok: bool | None  # rel_error within the bound (ERROR_FLOOR, ERROR_VS_TORCH)
    reps: int
    torch_reps: int
    skipped: str | None = None
    note: str = ""
    path: str = "public"
    tags: dict = field(default_factory=dict)  # Case.tags(): what a suite adds (model, kind, view)

    def as_dict(self) -> dict:
        return asdict(self)


def label(rec: dict) -> str:
    where = f"M={rec['tokens']}" if rec["layer"] != ATTENTION else f"BH={rec['batch']} S={rec['tokens']}"
    return f"{rec['case']} {where}"


def error_ok(dtype: str, rel_error: float | None, torch_error: float | None) -> bool:
    if rel_error is None or not math.isfinite(rel_error):
        return False
    return rel_error <= max(ERROR_FLOOR[dtype], ERROR_VS_TORCH * (torch_error or 0.0))


def skipped_record(gpu: str, case: Case, dtype: str, why: str, ok: bool | None = None) -> ModelRecord:
    return ModelRecord(
        gpu,
        case.name,
        case.layer,
        case.product,
        case.expression,
        case.tokens,
        case.batch,
        case.M,
        case.N,
        case.K,
        case.ops,
        dtype,
        None,
        "",
        {},
        None,
        "",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        ok,
        0,
        0,
        skipped=why,
        tags=case.tags(),
    )


def pct_stats(records: list[dict]) -> tuple[list[dict], float | None, dict | None]:
    """(the records timed beside torch, the geometric mean of their % of torch, the slowest
    of them); None for both where none was timed.  The models and shapes suites' summaries."""
    timed = [r for r in records if r.get("pct_torch")]
    if not timed:
        return timed, None, None
    return timed, statistics.geometric_mean(r["pct_torch"] for r in timed), min(timed, key=lambda r: r["pct_torch"])


def summary(records: list[dict]) -> dict[str, dict]:
    """Per dtype: the geometric mean of % of torch over the timed cases, the
    worst case, and how many were skipped or failed their check."""
    out = {}
    for dtype in dict.fromkeys(r["dtype"] for r in records):
        mine = [r for r in records if r["dtype"] == dtype]
        timed, geomean, worst = pct_stats(mine)
        out[dtype] = {
            "cases": len(timed),
            "skipped": sum(bool(r.get("skipped")) for r in mine),
            "failed": sum(r.get("ok") is False for r in mine),
            "geomean_pct": geomean,
            "worst_pct": worst["pct_torch"] if worst else None,
            "worst_case": label(worst) if worst else None,
        }
    return out


def table(data: dict) -> str:
    records = data["records"]
    width = max([20] + [len(label(r)) for r in records])
    ran_w = max([12] + [len(ran(r)) for r in records])
    head = (
        f"{'case':{width}s} {'dtype':7s} {'shape [BHx]MxNxK':>22s} {'ops':3s} {'gemmlab ran':{ran_w}s} "
        f"{'gemmlab ms':>10s} {'torch ms':>9s} {'% torch':>8s} {'rel err':>8s}"
    )
    lines = [head, "-" * len(head)]
    shape = {}
    for r in records:
        shape[id(r)] = ("" if r["batch"] == 1 else f"{r['batch']}x") + f"{r['M']}x{r['N']}x{r['K']}"
    for r in sorted(records, key=lambda r: list(DTYPES).index(r["dtype"]) if r["dtype"] in DTYPES else 0):
        row = f"{label(r):{width}s} {r['dtype']:7s} {shape[id(r)]:>22s} {r['ops']:3s} "
        if r.get("skipped"):
            lines.append(row + f"skipped: {r['skipped']}")
            continue
        flag = "" if r.get("ok") else f"  << WRONG: over {ERROR_VS_TORCH:g}x torch's error and the floor"
        lines.append(
            row + f"{ran(r):{ran_w}s} {_fmt(r['ms'], '.3f'):>10s} {_fmt(r['torch_ms'], '.3f'):>9s} "
            f"{_fmt(r['pct_torch'], '.1f%'):>8s} {_fmt(r['rel_error'], '.1e'):>8s}{flag}"
        )
    lines.append("")
    for dtype, s in data["summary"].items():
        lines.append(
            f"{dtype:7s} geomean {_fmt(s['geomean_pct'], '.1f%')} of torch.matmul over {s['cases']} "
            f"cases; worst {_fmt(s['worst_pct'], '.1f%')} ({s['worst_case'] or '-'})"
            + (f"; {s['skipped']} skipped" if s["skipped"] else "")
            + (f"; {s['failed']} WRONG" if s["failed"] else "")
        )
    if any(r.get("fallback") for r in records):
        lines.append("* the rung auto wanted could not take these operands (the record's fallback says why)")
    lines.append(
        "each figure: gemmlab.matmul(a, b, out=c) beside torch.matmul(a, b, out=c) on the same views, "
        "each run started on an idle GPU (host time included); fp32 and fp32_tc beside cuBLAS SGEMM "
        "(TF32 off); fp32_tc_mode: torch.matmul(a, b) inside gemmlab.torch.fp32_tc() beside "
        "torch.matmul(a, b); rel err against FP64 on a sample of the output"
    )
    return "\n".join(lines)


def plot(data: dict, path) -> None:
    """% of torch.matmul per case, a bar per dtype in each case's group; a line at
    100%, each dtype's geometric mean dashed in its colour, its worst case circled."""
    plt = _pyplot()
    records = [r for r in data["records"] if r.get("pct_torch")]
    cases = list(dict.fromkeys(label(r) for r in data["records"]))
    dtypes = list(dict.fromkeys(r["dtype"] for r in data["records"]))
    fig, ax = plt.subplots(figsize=(max(10.0, 0.32 * len(cases) * max(1, len(dtypes)) / 2), 6))
    width = 0.8 / max(len(dtypes), 1)
    where = {c: i for i, c in enumerate(cases)}
    for j, dtype in enumerate(dtypes):
        mine = [r for r in records if r["dtype"] == dtype]
        xs = [where[label(r)] + (j - (len(dtypes) - 1) / 2) * width for r in mine]
        bars = ax.bar(xs, [r["pct_torch"] for r in mine], width, label=dtype, color=f"C{j}")
        s = data["summary"].get(dtype, {})
        if s.get("geomean_pct"):
            ax.axhline(
                s["geomean_pct"],
                color=bars.patches[0].get_facecolor() if mine else f"C{j}",
                ls="--",
                lw=1,
                label=f"{dtype} geomean {s['geomean_pct']:.1f}%",
            )
        if s.get("worst_case"):
            w = next(r for r, x in zip(mine, xs) if label(r) == s["worst_case"])
            ax.plot([xs[mine.index(w)]], [w["pct_torch"]], "o", mfc="none", mec="red", ms=9)
            ax.annotate(
                f"worst {dtype}: {w['pct_torch']:.0f}%",
                (xs[mine.index(w)], w["pct_torch"]),
                textcoords="offset points",
                xytext=(0, -14),
                ha="center",
                fontsize=7,
                color="red",
            )
    ax.axhline(100, color="black", lw=1)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=90, fontsize=7)
    ax.set_ylabel("% of torch.matmul (same dtype, same views)")
    gpu = data["records"][0]["gpu"] if data["records"] else "GPU"
    ax.set_title(f"gemmlab.matmul vs torch.matmul on a transformer's products, {gpu}")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    savefig(fig, path)


# -- the run --------------------------------------------------------------------


class _CaseOperands:
    """One case's tensors in one dtype, shaped for suites.time_size: ``cublas``
    is torch.matmul on the same views into the same ``out``; ``error`` compares
    a sample of ``out`` with FP64 on the inputs as stored."""

    raw = ()  # no kernel-only path: the public call only

    def __init__(self, case: Case, dtype: str, a, b, c, sample):
        import torch

        self.case, self.dtype, self.ops, self.shape = case, dtype, case.ops, (case.M, case.N, case.K)
        self.batch = case.batch
        self.a, self.b, self.c, self.sample = a, b, c, sample
        self.cublas = partial(torch.matmul, a, b, out=c)
        self.note = f"torch.matmul -> cuBLAS in {DTYPES[dtype][0]}" + (", TF32 off" if dtype.startswith("fp32") else "")

    def error(self) -> float:
        return self.sample.error(self.c)

    def checked(self, fn) -> float:
        self.c.fill_(float("nan"))
        fn()
        return self.error()


class _ModeOperands(_CaseOperands):
    """A case as a PyTorch model runs it under ``gemmlab.torch.fp32_tc()``:
    ``torch.matmul(a, b)`` inside the mode (so through gemmlab's operator and
    its prepared call) beside ``torch.matmul(a, b)`` outside it; each call
    allocates its result, as a model's does."""

    def __init__(self, case: Case, dtype: str, a, b, c, sample):
        import gemmlab.torch as gtorch

        super().__init__(case, dtype, a, b, c, sample)
        self.out, self.mode = c, gtorch.fp32_tc()
        self.cublas = self.outside_mode
        self.note = "torch.matmul(a, b) -> cuBLAS in float32, TF32 off"

    def outside_mode(self) -> None:
        import torch

        self.out = torch.matmul(self.a, self.b)

    def inside_mode(self) -> None:
        import torch

        with self.mode:
            self.out = torch.matmul(self.a, self.b)

    def error(self) -> float:
        return self.sample.error(self.out)

    def checked(self, fn) -> float:
        # The result is a new tensor: poison the block PyTorch's allocator hands
        # out next (the one this NaN tensor frees), so an unwritten result shows.
        import torch

        shape, self.out = self.out.shape, None
        torch.full(shape, float("nan"), device=self.a.device, dtype=self.a.dtype)
        fn()
        return self.error()


class _Sample:
    """Rows, columns and batches of the output, and FP64 of op(A) @ op(B) there
    (gathered by index: nothing the size of an operand is copied)."""

    def __init__(self, a, b):
        import torch

        a3, b3 = (x if x.dim() == 3 else x.unsqueeze(0) for x in (a, b))

        def spread(n, k):
            return torch.linspace(0, n - 1, min(n, k), device=a.device).round().long().unique()

        self.batches = spread(a3.shape[0], SAMPLE_BATCHES)[:, None]
        self.rows, self.cols = spread(a3.shape[1], SAMPLE_ROWS)[None, :], spread(b3.shape[2], SAMPLE_COLS)[None, :]
        a_rows = a3[self.batches, self.rows].double()  # nb x rows x K
        b_cols = b3.transpose(1, 2)[self.batches, self.cols].double().transpose(1, 2)  # nb x K x cols
        self.ref = a_rows @ b_cols

    def error(self, c) -> float:
        import torch

        c3 = c if c.dim() == 3 else c.unsqueeze(0)
        got = c3[self.batches, self.rows][:, :, self.cols[0]].double()
        if not torch.isfinite(got).all():
            return float("inf")
        return float(torch.linalg.norm(got - self.ref) / torch.linalg.norm(self.ref))


class _Clock:
    """Progress with the time left: each pair's cost is estimated from the
    priors, scaled by what the pairs measured so far took against their estimate."""

    def __init__(self, pairs, budget_s: float, quiet: bool):
        self.estimates = [estimate_s(case, dtype) for case, dtype in pairs]
        self.budget_s, self.quiet = budget_s, quiet
        self.start, self.done = time.time(), 0
        _progress(
            f"{len(pairs)} products; estimated {sum(self.estimates):.0f} s of timing "
            f"(budget {budget_s:.0f} s, compilation not included)",
            quiet,
        )

    def elapsed(self) -> float:
        return time.time() - self.start

    def left_s(self) -> float:
        ahead = sum(self.estimates[self.done :])
        spent = sum(self.estimates[: self.done])
        return ahead * (self.elapsed() / spent if spent else 1.0)

    def session_budget_s(self) -> float:
        """time_gpu's budget for one session of the next pair: the budget left,
        shared over the pairs left in proportion to their estimates."""
        ahead = sum(self.estimates[self.done :]) or 1.0
        share = max(0.0, self.budget_s - self.elapsed()) * self.estimates[self.done] / ahead
        return share / SESSIONS_PER_PAIR

    def say(self, msg: str) -> None:
        _progress(
            f"[{self.done + 1}/{len(self.estimates)}] {msg}  ({self.elapsed():.0f} s, about "
            f"{self.left_s():.0f} s left)",
            self.quiet,
        )

    def next(self) -> None:
        self.done += 1


def estimate_s(case: Case, dtype: str) -> float:
    """A prior for one pair's wall time at time_gpu's fewest runs."""
    torch_tf, ours_tf = PRIOR_TFLOPS[dtype]
    runs = RUNS_PER_SESSION * case.flops / 1e12
    return PAIR_OVERHEAD_S + (SESSIONS_PER_PAIR - 1) * runs / torch_tf + runs / ours_tf


def _precompile(pairs, gpu, say) -> None:
    """Compile the kernels the pairs' plans name, in parallel processes, before timing."""
    from ...core.api import plan
    from ...core.planner import contiguous_aligned16, contiguous_rows_aligned16, contiguous_tma_aligned
    from ...kernels.spec import FLOAT32_RESULT
    from ...runtime.compile import precompile

    items = set()
    for case, dtype in pairs:
        storage, precision = DTYPES[dtype]
        for kernel_dtype in ("fp16_ec", "tf32_ec") if precision else (storage,):
            try:
                p = plan(
                    "auto",
                    case.M,
                    case.N,
                    case.K,
                    dtype=kernel_dtype,
                    out_dtype="float32" if kernel_dtype in FLOAT32_RESULT else kernel_dtype,
                    op_a=case.ops[0],
                    op_b=case.ops[1],
                    batch=case.batch,
                    arch=gpu.arch,
                    sm_count=gpu.sm_count,
                    gpu_slug=gpu.slug,
                    gpu_name=gpu.name,
                    smem_limit=gpu.max_smem_per_block_optin,
                    aligned16=contiguous_aligned16(case.M, case.N, case.K, case.ops[0], case.ops[1], storage),
                    rows_aligned16=contiguous_rows_aligned16(case.M, case.N, case.K, case.ops[0], case.ops[1], storage),
                    tma_aligned=contiguous_tma_aligned(case.M, case.N, case.K, ITEMSIZE[storage]),
                )
            except (GemmlabError, ValueError):  # the timed call reports it
                continue
            items.add((str(p.spec.source_path), p.name_expression))
    n = precompile(sorted(items), gpu.arch, log=say)
    say(f"compiled {n} of the {len(items)} kernel instantiations the products plan")


def compile_only(cases, dtypes, *, quiet: bool = False) -> None:
    """Compile the kernels the pairs' plans name into the cache and time nothing (``gemmlab
    bench --compile-only``): on a fresh machine the shapes suite's 200 or so instantiations
    take minutes, which a first command can spend before the timed one."""
    _precompile([(case, dtype) for case in cases for dtype in dtypes], bench_gpu(), lambda msg: _progress(msg, quiet))


def run(cases, dtypes, **timing) -> dict:
    """Time every case in every dtype on the GPU (:func:`measure`);
    {"records": [...], "summary": {...}} as dicts."""
    dicts = measure(cases, dtypes, **timing)
    return {"records": dicts, "summary": summary(dicts)}


def measure(
    cases,
    dtypes,
    *,
    reps: int = 20,
    flush: bool = True,
    max_run_s: float = 3.0,
    budget_s: float = 2.0,
    time_budget_s: float = TIME_BUDGET_S,
    quiet: bool = False,
    seed: int = 0,
) -> list[dict]:
    """Each case in each dtype timed on the GPU (:func:`time_cases`), the records
    as dicts.  ``budget_s`` caps one timing session, ``time_budget_s`` all of them."""
    import torch

    gpu = bench_gpu()
    pairs = [(case, dtype) for case in cases for dtype in dtypes]
    _precompile(pairs, gpu, lambda msg: _progress(msg, quiet))
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def maker(storage):  # U(-1, 1), drawn on the GPU in the storage dtype
        t = getattr(torch, storage)
        return lambda shape: torch.rand(shape, device="cuda", dtype=t, generator=gen).mul_(2).sub_(1)

    def free_bytes():
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info()[0]

    records = time_cases(
        cases,
        dtypes,
        gpu,
        _Clock(pairs, time_budget_s, quiet),
        maker=maker,
        timer_for=lambda share: Timer(gpu.l2_bytes, reps, flush, max_run_s, min(budget_s, share)),
        free_bytes=free_bytes,
    )
    return [r.as_dict() for r in records]


def time_cases(cases, dtypes, gpu, clock, *, maker, timer_for, free_bytes) -> list[ModelRecord]:
    """Each case in each dtype: skipped where its memory exceeds ``free_bytes()``,
    else its operands from ``maker(storage)(shape)`` and suites.time_size with
    ``timer_for(share of the time budget)``."""
    import torch

    records: list[ModelRecord] = []
    for case in cases:
        # fp32 and fp32_tc share one set of float32 tensors.
        for storage in dict.fromkeys(DTYPES[d][0] for d in dtypes):
            free, fits = free_bytes(), []
            for dtype in (d for d in dtypes if DTYPES[d][0] == storage):
                why = too_big(case, dtype, free)
                if why:
                    clock.say(f"{case.label} {dtype}: skipped, {why}")
                    records.append(skipped_record(gpu.name, case, dtype, why))
                    clock.next()
                else:
                    fits.append(dtype)
            if not fits:
                continue
            a, b = case.operands(maker(storage))
            c = torch.full(case.out_shape, float("nan"), device=a.device, dtype=a.dtype)
            sample = _Sample(a, b)
            for dtype in fits:
                if dtype in THROUGH_MODE:
                    ops_ = _ModeOperands(case, dtype, a, b, c, sample)
                    call = ops_.inside_mode
                else:
                    ops_ = _CaseOperands(case, dtype, a, b, c, sample)
                    call = partial(matmul, a, b, out=c, precision=DTYPES[dtype][1])
                try:
                    with torch_tf32(False):
                        pub_torch, pub_ours = time_size(
                            ops_,
                            [(dtype, call, _row)],
                            paths=("public",),
                            timer=timer_for(clock.session_budget_s()),
                            gpu=gpu,
                            say=lambda m: clock.say(f"{case.label}: {m}"),
                        )
                    records.append(_record(case, dtype, gpu.name, pub_torch, pub_ours, last_plan()))
                except (GemmlabError, MemoryError, torch.cuda.OutOfMemoryError) as exc:
                    why = f"failed: {type(exc).__name__}: {exc}"
                    clock.say(f"{case.label} {dtype}: {why}")
                    records.append(skipped_record(gpu.name, case, dtype, why, ok=False))
                clock.next()
            del a, b, c, sample, ops_, call  # before the next case's tensors are made
    return records


def _row(p):
    return p.spec.name, dict(p.params), p.describe()


def ran(rec: dict) -> str:
    """The rung gemmlab ran, with the error-corrected method; "*" marks a fallback."""
    return (
        (rec["rung"] or "-")
        + (f" [{rec['method']}]" if rec.get("method") else "")
        + ("*" if rec.get("fallback") else "")
    )


def _record(case: Case, dtype: str, gpu: str, torch_rec, ours, plan) -> ModelRecord:
    """One ModelRecord from time_size's torch and gemmlab records of a pair."""

    def tflops(ms):
        return case.flops / (ms * 1e-3) / 1e12 if ms else None

    return ModelRecord(
        gpu,
        case.name,
        case.layer,
        case.product,
        case.expression,
        case.tokens,
        case.batch,
        case.M,
        case.N,
        case.K,
        case.ops,
        dtype,
        ours.kernel,
        ours.note,
        ours.params,
        plan.method,
        plan.fallback_reason,
        ours.ms,
        torch_rec.ms,
        ours.pct_cublas,
        tflops(ours.ms),
        tflops(torch_rec.ms),
        ours.rel_error,
        torch_rec.rel_error,
        None if ours.skipped else error_ok(dtype, ours.rel_error, torch_rec.rel_error),
        ours.reps,
        torch_rec.reps,
        ours.skipped,
        note=torch_rec.note,
        tags=case.tags(),
    )
