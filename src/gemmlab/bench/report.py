"""Benchmark output: a text table, JSON records and PNG plots."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _fmt(v, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def label(rec: dict, with_params: bool = False) -> str:
    ops = rec.get("ops", "NN")
    return _label(rec, with_params) + ("" if ops == "NN" else f" {ops}")


def _label(rec: dict, with_params: bool) -> str:
    p = rec.get("params") or {}
    if rec["kernel"] == "auto" and rec.get("note", "").startswith("auto chose "):
        return "auto:" + rec["note"][len("auto chose "):].split("(")[0]
    if rec["kernel"] == "smem_tiled" and "tile" in p:
        return f"smem_tiled[{p['tile']}]"
    if with_params and p:
        return rec["kernel"] + "[" + ",".join(str(v) for v in p.values()) + "]"
    return rec["kernel"]


def table(records: list[dict]) -> str:
    # Show tile parameters when one kernel appears with several configurations.
    seen: dict[str, set] = {}
    for r in records:
        seen.setdefault(r["kernel"], set()).add(tuple(sorted((r.get("params") or {}).items())))
    multi = {k for k, v in seen.items() if len(v) > 1}
    width = max([18] + [len(label(r, r["kernel"] in multi)) for r in records])
    head = f"{'kernel':{width}s} {'M':>6s} {'N':>6s} {'K':>6s} {'ms':>10s} {'TFLOPS':>8s} {'%cuBLAS':>8s} {'%peak':>6s} {'rel err':>9s}"
    lines = [head, "-" * len(head)]
    for r in records:
        if r.get("skipped"):
            lines.append(f"{label(r, r['kernel'] in multi):{width}s} {r['M']:6d} {r['N']:6d} {r['K']:6d}  skipped: {r['skipped']}")
            continue
        lines.append(f"{label(r, r['kernel'] in multi):{width}s} {r['M']:6d} {r['N']:6d} {r['K']:6d} {_fmt(r['ms'], '10.3f')} "
                     f"{_fmt(r['tflops'], '8.2f')} {_fmt(r['pct_cublas'], '7.1f')}% {_fmt(r['pct_peak'], '5.1f')}% "
                     f"{_fmt(r['rel_error'], '9.1e')}")
    return "\n".join(lines)


def write_json(records: list[dict], path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(records, indent=1) + "\n")
    os.replace(tmp, path)


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError as exc:
        raise ImportError("plots need matplotlib: pip install 'gemmlab[plot]'") from exc


def plot_ladder(records: list[dict], path, title: str | None = None) -> None:
    """Grouped bars: TFLOPS of each kernel at each size, cuBLAS included."""
    plt = _pyplot()
    sizes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in records))
    kernels = list(dict.fromkeys(label(r) for r in records))
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(sizes) * len(kernels) / 4), 5))
    width = 0.8 / max(len(kernels), 1)
    for i, k in enumerate(kernels):
        ys = []
        for s in sizes:
            hit = [r for r in records if label(r) == k and (r["M"], r["N"], r["K"]) == s]
            ys.append(hit[0]["tflops"] or 0.0 if hit else 0.0)
        ax.bar([j + i * width for j in range(len(sizes))], ys, width, label=k)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sizes))])
    ax.set_xticklabels(["x".join(map(str, s)) for s in sizes])
    ax.set_ylabel("TFLOPS (2MNK / time)")
    ax.set_title(title or f"gemmlab FP32 ladder vs cuBLAS on {records[0]['gpu']}")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_sweep(records: list[dict], path) -> None:
    """TFLOPS against TILE for each size, with naive as a dashed line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in records))
    for s in sizes:
        pts = sorted((r["params"]["tile"], r["tflops"]) for r in records
                     if r["kernel"] == "smem_tiled" and (r["M"], r["N"], r["K"]) == s and r["tflops"])
        if pts:
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{s[0]}^3 tiled")
            nv = [r["tflops"] for r in records if r["kernel"] == "naive" and (r["M"], r["N"], r["K"]) == s and r["tflops"]]
            if nv:
                ax.axhline(nv[0], color=line.get_color(), ls="--", lw=1, label=f"{s[0]}^3 naive")
    ax.set_xscale("log", base=2)
    tiles = sorted({r["params"]["tile"] for r in records if r["kernel"] == "smem_tiled"})
    ax.set_xticks(tiles)
    ax.set_xticklabels([str(t) for t in tiles])
    ax.set_xlabel("TILE (threads per block = TILE^2)")
    ax.set_ylabel("TFLOPS")
    ax.set_title(f"TILE_WIDTH sweep, smem_tiled vs naive, {records[0]['gpu']}")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sweep_speedups(records: list[dict]) -> list[str]:
    """naive -> best tiled speedup at each size."""
    out = []
    for s in dict.fromkeys((r["M"], r["N"], r["K"]) for r in records):
        nv = [r for r in records if r["kernel"] == "naive" and (r["M"], r["N"], r["K"]) == s and r["ms"]]
        tiled = [r for r in records if r["kernel"] == "smem_tiled" and (r["M"], r["N"], r["K"]) == s and r["ms"]]
        if nv and tiled:
            best = min(tiled, key=lambda r: r["ms"])
            out.append(f"{'x'.join(map(str, s))}: naive {nv[0]['ms']:.3f} ms -> smem_tiled[{best['params']['tile']}] "
                       f"{best['ms']:.3f} ms = {nv[0]['ms'] / best['ms']:.1f}x")
    return out
