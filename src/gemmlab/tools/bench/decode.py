"""`gemmlab bench --suite decode`: token-by-token generation with a key/value cache, through
gemmlab.torch beside plain PyTorch.

The training suite's decoders (gemmlab.tools.bench.training: Llama-3.2-1B, Qwen2-0.5B and
GPT-2 sizes, Granite's mixture of experts) generate ``tokens`` tokens one at a time after a
cache of ``prompt`` positions, batch ``batch``.  Attention is written as products over the
cache read up to the current length -- ``q @ k.transpose(-1, -2)``, softmax, ``@ v``, each
key/value head's query heads as the rows of one product -- so every token brings a new N
(Q @ K^T) and a new K (P @ V), and each layer the same products at other addresses: a kind
of product no training step makes.  Caches: "static" (views of a buffer allocated for the
longest context) or "grown" (``torch.cat`` at every token: new contiguous tensors).

Setups as the training suite's (bf16 with and without ``use_gemmlab()``, fp32, TF32,
fp32_tc), each timed in alternating rounds at lengths no round met before, ms per token the
median of its rounds; each gemmlab setup beside the PyTorch setup it replaces, and its
logits at one token beside those of that setup from the same cache (largest difference
relative to the largest logit)."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from . import training
from .suites import _progress

CACHES = ("static", "grown")
PROMPT = 1024  # cached positions before the first timed token
TOKENS = 32  # timed tokens per round
WARMUP = 4  # untimed tokens before each round (new lengths: families, compilation)
ROUNDS = 3
DEFAULT_MODELS = ("llama-1b", "gpt2")
TIME_BUDGET_S = 600.0


def decoders() -> list[str]:
    return [name for name, cfg in training.CONFIGS.items() if cfg.kind == "decoder"]


@dataclass
class DecodeRecord:
    gpu: str
    model: str
    cache: str
    setup: str
    dtype: str
    batch: int
    prompt: int
    tokens: int  # timed tokens per round
    ms: float | None  # median over rounds of ms per token
    ms_all: list
    tokens_per_s: float | None
    baseline: str | None
    vs_baseline: float | None  # the baseline's ms / this setup's ms
    logits_diff: float | None  # max |logits - baseline's| / max |baseline's|, one token, same cache
    failed: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class Cache:
    """A layer's keys and values, (batch, kv heads, length, head dim): views of buffers of
    ``size`` positions (static), or tensors concatenated at every token (grown)."""

    def __init__(self, kind: str, k, v, size: int):
        self.kind, self.n = kind, k.shape[2]
        if kind == "static":
            B, H, _, D = k.shape
            self.k, self.v = k.new_empty(B, H, size, D), v.new_empty(B, H, size, D)
            self.k[:, :, : self.n], self.v[:, :, : self.n] = k, v
        else:
            self.k, self.v = k.clone(), v.clone()

    def append(self, k, v):
        """The cache with one more position (k, v: batch x kv heads x 1 x head dim), as read."""
        if self.kind == "static":
            self.k[:, :, self.n : self.n + 1], self.v[:, :, self.n : self.n + 1] = k, v
            self.n += 1
            return self.k[:, :, : self.n], self.v[:, :, : self.n]
        cat = training._torch().cat
        self.k, self.v = cat([self.k, k], 2), cat([self.v, v], 2)
        self.n += 1
        return self.k, self.v


def caches_for(cfg, kind: str, batch: int, prompt: int, size: int, like, generator) -> list[Cache]:
    """Each layer's cache of ``prompt`` random positions (what a prompt's keys and values
    would be, their values aside), room for ``size`` in all."""
    torch = training._torch()
    shape = (batch, cfg.kv_heads, prompt, cfg.head_dim)

    def rand():
        return torch.randn(shape, generator=generator, device=like.device).to(like.dtype)

    return [Cache(kind, rand(), rand(), size) for _ in range(cfg.layers)]


def step(model, caches: list[Cache], tokens, pos: int, rope):
    """The logits of the next token after ``tokens`` (batch x 1) at position ``pos``, each
    layer's cache one position longer."""
    cfg = model.cfg
    B, hd, h, kv = tokens.shape[0], cfg.head_dim, cfg.heads, cfg.kv_heads
    x = model.embed(tokens)
    if model.pos is not None:
        x = x + model.pos.weight[pos % cfg.seq]  # GPT-2's table ends at its context (a timing run)
    for block, cache in zip(model.blocks, caches):
        attn = block.attn
        y = block.norm1(x) if block.pre else x
        q, k, v = attn.qkv(y).view(B, 1, h + 2 * kv, hd).transpose(1, 2).split((h, kv, kv), dim=1)
        if rope is not None:
            cos, sin = rope[0][pos], rope[1][pos]
            q, k = training._rotate(q, cos, sin), training._rotate(k, cos, sin)
        keys, values = cache.append(k, v)
        q = q.reshape(B, kv, h // kv, hd)  # the query heads a key/value head serves, as rows
        scores = (q @ keys.transpose(-1, -2)) * hd**-0.5
        out = attn.o((scores.softmax(-1) @ values).reshape(B, 1, h * hd))
        if block.pre:
            x = x + out
            x = x + block.mlp(block.norm2(x))
        else:
            x = block.norm1(x + out)
            x = block.norm2(x + block.mlp(x))
    return model.head(model.norm(x))


def run(
    models=DEFAULT_MODELS,
    setups=("bf16", "bf16_gemmlab", "fp32", "tf32", "fp32_tc"),
    caches=CACHES,
    *,
    batch: int = 1,
    prompt: int = PROMPT,
    tokens: int = TOKENS,
    rounds: int = ROUNDS,
    num_layers: int | None = None,
    seed: int = 0,
    time_budget_s: float = TIME_BUDGET_S,
    quiet: bool = False,
) -> dict:
    """Each model x cache x setup timed (see the module's docstring); {"gpu", "torch",
    "records", "configs"}."""
    torch = training._torch()
    gpu = training._gpu_name()
    for name in models:
        if name not in training.CONFIGS or training.CONFIGS[name].kind != "decoder":
            raise ValueError(f"--models {name}: the decode suite runs the decoders {', '.join(decoders())}")
    for c in caches:
        if c not in CACHES:
            raise ValueError(f"cache {c!r}: one of {', '.join(CACHES)}")
    for s in setups:
        if s not in training.SETUPS:
            raise ValueError(f"setup {s!r}: one of {', '.join(training.SETUPS)}")
    if min(batch, prompt, tokens, rounds) < 1:
        raise ValueError("batch, prompt, tokens and rounds are 1 or more")
    size = prompt + rounds * (WARMUP + tokens) + 2
    start, records, cfgs = time.time(), [], {}

    def say(msg):
        _progress(f"[{time.time() - start:5.0f} s] {msg}", quiet)

    for name in models:
        cfg = cfgs[name] = training.configure(training.CONFIGS[name], batch=batch, num_layers=num_layers)
        for cache in caches:
            if records and time.time() - start > time_budget_s:
                say(f"{name} {cache}: skipped, the time budget ({time_budget_s:.0f} s) is spent")
                records += [
                    _record(gpu, cfg, cache, s, batch, prompt, tokens, failed="time budget spent") for s in setups
                ]
                continue
            say(f"{name} ({training.parameter_count(cfg) / 1e6:.0f}M parameters), {cache} cache: {', '.join(setups)}")
            records += _time_model(cfg, cache, setups, batch, prompt, tokens, rounds, size, seed, gpu, say)
            training._empty_cache()
    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "records": [r.as_dict() for r in records],
        "configs": {n: asdict(c) | {"params": training.parameter_count(c)} for n, c in cfgs.items()},
    }


def _time_model(cfg, cache, setups, batch, prompt, tokens, rounds, size, seed, gpu, say) -> list[DecodeRecord]:
    """One model and cache kind: a model per dtype, each setup's rounds alternating."""
    torch = training._torch()
    torch.manual_seed(seed)
    with torch.device(training.DEVICE):
        base = training.build(cfg).eval()
    dtypes = {getattr(torch, training.SETUPS[s][0]) for s in setups}
    models = {dt: (base if dt == torch.float32 else _copy(base, dt)) for dt in dtypes}
    gen = torch.Generator(device=training.DEVICE).manual_seed(seed)
    token = torch.randint(0, cfg.vocab, (batch, 1), generator=gen, device=training.DEVICE)
    state, times, logits = {}, {s: [] for s in setups}, {}
    for s in setups:
        m = models[getattr(torch, training.SETUPS[s][0])]
        rope = training._rope_tables(size, cfg.head_dim, m.embed.weight) if cfg.rope else None
        state[s] = (m, rope, caches_for(cfg, cache, batch, prompt, size, m.embed.weight, gen))
    failed = {}
    with torch.no_grad():
        # The logits beside the baseline's: one token from equal caches, before any timing.
        for s in setups:
            m, rope, _ = state[s]
            first = caches_for(
                cfg,
                cache,
                batch,
                prompt,
                prompt + 1,
                m.embed.weight,
                torch.Generator(device=training.DEVICE).manual_seed(seed + 1),
            )
            try:
                with training.routing(s):
                    logits[s] = step(m, first, token, prompt, rope).float()
            except Exception as exc:  # noqa: BLE001 -- reported in the record, the others run on
                failed[s] = training._why(exc)
        pos = prompt
        for r in range(rounds):
            for s in setups:
                if s in failed:
                    continue
                m, rope, layer_caches = state[s]
                at = pos  # every setup at the same new lengths, each its own cache
                try:
                    with training.routing(s):
                        for i in range(WARMUP):
                            step(m, layer_caches, token, at + i, rope)
                        seconds, _ = training._sync_time(
                            lambda: [step(m, layer_caches, token, at + WARMUP + i, rope) for i in range(tokens)]
                        )
                    times[s].append(seconds / tokens * 1e3)
                except Exception as exc:  # noqa: BLE001
                    failed[s] = training._why(exc)
            pos += WARMUP + tokens
    out = []
    for s in setups:
        ms = statistics.median(times[s]) if times[s] and s not in failed else None
        out.append(_record(gpu, cfg, cache, s, batch, prompt, tokens, ms=ms, ms_all=times[s], failed=failed.get(s)))
    for rec in out:
        b = training.BASELINE.get(rec.setup)
        ref = next((x for x in out if x.setup == b), None)
        if ref is None:
            continue
        rec.baseline = b
        if rec.ms and ref.ms:
            rec.vs_baseline = ref.ms / rec.ms
        if rec.setup in logits and b in logits:
            want = logits[b]
            rec.logits_diff = float((logits[rec.setup] - want).abs().max() / want.abs().max())
    for rec in out:
        say(f"  {rec.setup}: " + (f"{rec.ms:.2f} ms per token" if rec.ms else f"failed: {rec.failed}"))
    return out


def _copy(model, dtype):
    import copy

    return copy.deepcopy(model).to(dtype)


def _record(gpu, cfg, cache, setup, batch, prompt, tokens, ms=None, ms_all=(), failed=None) -> DecodeRecord:
    return DecodeRecord(
        gpu,
        cfg.name,
        cache,
        setup,
        training.SETUPS[setup][0],
        batch,
        prompt,
        tokens,
        ms,
        list(ms_all),
        1e3 * batch / ms if ms else None,
        None,
        None,
        None,
        failed,
    )


def table(data: dict) -> str:
    """One line per model, cache and setup; each gemmlab setup beside its baseline."""
    head = f"{'model':16s} {'cache':7s} {'setup':13s} {'ms/token':>9s} {'tokens/s':>10s} {'vs PyTorch':>14s} {'logits diff':>12s}"
    lines = [head, "-" * len(head)]
    for r in data["records"]:
        ms = f"{r['ms']:9.2f}" if r["ms"] else f"{'-':>9s}"
        tps = f"{r['tokens_per_s']:10,.0f}" if r["tokens_per_s"] else f"{'-':>10s}"
        vs = f"{r['vs_baseline']:.2f}x {r['baseline']}" if r["vs_baseline"] else "-"
        diff = f"{r['logits_diff']:.1e}" if r["logits_diff"] is not None else "-"
        note = f"  {r['failed']}" if r["failed"] else ""
        lines.append(f"{r['model']:16s} {r['cache']:7s} {r['setup']:13s} {ms} {tps} {vs:>14s} {diff:>12s}{note}")
    lines.append(
        "ms/token: median over rounds of the timed tokens, each round at cache lengths no round met before; "
        "logits diff: one token from equal caches, max |logits - the baseline's| / max |the baseline's|"
    )
    return "\n".join(lines)


def plot(data: dict, path) -> None:
    """ms per token by model and cache, one bar per setup."""
    from .report import _pyplot, savefig

    plt = _pyplot()
    recs = [r for r in data["records"] if r["ms"]]
    groups = list(dict.fromkeys((r["model"], r["cache"]) for r in recs))
    setups = list(dict.fromkeys(r["setup"] for r in recs))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4))
    width = 0.8 / max(1, len(setups))
    for i, s in enumerate(setups):
        xs = [g for g, key in enumerate(groups) for r in recs if (r["model"], r["cache"]) == key and r["setup"] == s]
        ys = [r["ms"] for key in groups for r in recs if (r["model"], r["cache"]) == key and r["setup"] == s]
        ax.bar([x + i * width for x in xs], ys, width, label=s)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))], [f"{m}\n{c}" for m, c in groups])
    ax.set_ylabel("ms per token")
    ax.set_title(f"decode steps, {data['gpu']}")
    ax.legend(fontsize=8)
    savefig(fig, path)
