"""Benchmark output: a text table, JSON records and PNG plots."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _fmt(v, spec: str, none: str = "-") -> str:
    """``v`` formatted by ``spec``; a trailing "%" in spec is appended to the number."""
    if v is None:
        return none
    return format(v, spec[:-1]) + "%" if spec.endswith("%") else format(v, spec)


def label(rec: dict, with_params: bool = False) -> str:
    ops = rec.get("ops", "NN")
    return _label(rec, with_params) + ("" if ops == "NN" else f" {ops}")


def _label(rec: dict, with_params: bool) -> str:
    p = rec.get("params") or {}
    if rec["kernel"] == "auto" and rec.get("note", "").startswith("auto chose "):
        return "auto:" + rec["note"][len("auto chose ") :].split("(")[0]
    if rec["kernel"] == "smem_tiled" and "tile" in p:
        return f"smem_tiled[{p['tile']}]"
    if with_params and p:
        return rec["kernel"] + "[" + ",".join(str(v) for v in p.values()) + "]"
    return rec["kernel"]


# What each path's figures are (records without a "path" predate the public
# path and are kernel-only figures).
PATHS = {
    "public": (
        "gemmlab.matmul (public)",
        "public: gemmlab.matmul(a, b, out=c, ...) beside cupy/torch.matmul(a, b, out=c), each run "
        "started on an idle GPU (host time of the call included)",
    ),
    "kernel": (
        "kernel only (run_plan)",
        "kernel only: the plan that call ran, launched alone on raw pointers, back to back beside "
        "cuBLAS back to back (host time hidden)",
    ),
}


def path_of(rec: dict) -> str:
    return rec.get("path", "kernel")


def headline(records: list[dict]) -> tuple[list[dict], str]:
    """The records of the figure plots and summaries show: the public call's where
    it was timed, else the kernel-only one; and that path."""
    path = "public" if any(path_of(r) == "public" for r in records) else "kernel"
    return [r for r in records if path_of(r) == path], path


def table(records: list[dict]) -> str:
    """One row per kernel, size, layout and dtype (a dtype column where there are
    several); a group of columns per timed path, titled with what was timed (see
    PATHS), and the worst error of the paths."""
    # Show tile parameters when one kernel appears with several configurations.
    seen: dict[str, set] = {}
    for r in records:
        seen.setdefault(r["kernel"], set()).add(tuple(sorted((r.get("params") or {}).items())))
    multi = {k for k, v in seen.items() if len(v) > 1}
    rows: dict[tuple, dict[str, dict]] = {}
    for r in records:
        key = (label(r, r["kernel"] in multi), r["M"], r["N"], r["K"], r.get("dtype"))
        rows.setdefault(key, {})[path_of(r)] = r
    paths = [p for p in PATHS if any(p in by_path for by_path in rows.values())]
    peak = any(r.get("pct_peak") is not None for r in records)
    heads = [("ms", 10), ("TFLOPS", 8), ("%cuBLAS", 8)] + ([("%peak", 7)] if peak else [])
    group = sum(w for _, w in heads) + len(heads) - 1
    width = max([18] + [len(k[0]) for k in rows])
    dtypes = len({k[4] for k in rows}) > 1

    def where(M, N, K, dtype):
        return f"{M:>6} {N:>6} {K:>6}" + (f" {dtype:>8}" if dtypes else "")

    def cells(r):
        if r is None:
            return [f"{'-':>{w}s}" for _, w in heads]
        if r.get("skipped"):
            return [f"{'skipped':>{group}s}"]
        values = [
            _fmt(r["ms"], ".3f"),
            _fmt(r["tflops"], ".2f"),
            _fmt(r["pct_cublas"], ".1f%"),
            _fmt(r.get("pct_peak"), ".1f%"),
        ]
        return [f"{v:>{w}s}" for v, (_, w) in zip(values, heads)]

    titles = " | ".join(f"{PATHS[p][0]:^{group}s}" for p in paths)
    cols = " | ".join(" ".join(f"{h:>{w}s}" for h, w in heads) for _ in paths)
    lines = [
        f"{'':{width + len(where(0, 0, 0, '')) + 2}s}{titles}".rstrip(),
        f"{'kernel':{width}s} {where('M', 'N', 'K', 'dtype')} {cols} {'rel err':>9s}",
    ]
    lines.append("-" * len(lines[-1]))
    for (name, M, N, K, dtype), by_path in rows.items():
        errs = [r["rel_error"] for r in by_path.values() if r.get("rel_error") is not None]
        why = dict.fromkeys(r["skipped"] for r in by_path.values() if r.get("skipped"))
        groups = " | ".join(" ".join(cells(by_path.get(p))) for p in paths)
        lines.append(
            f"{name:{width}s} {where(M, N, K, dtype)} {groups} {_fmt(max(errs, default=None), '.1e'):>9s}"
            + (f"  (skipped: {'; '.join(why)})" if why else "")
        )
    return "\n".join(lines + [PATHS[p][1] for p in paths])


def read_models_file(path, option: str) -> list:
    """The non-empty list in the JSON file at ``path`` that ``option`` (--model-file,
    --config-file) names, else a ValueError saying what is wrong with it."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{option} {path}: {exc}") from None
    if not isinstance(data, list) or not data:
        raise ValueError(f"{option} {path}: give a list of models (objects)")
    return data


def write_json(records: list[dict], path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(records, indent=1) + "\n")
    os.replace(tmp, path)


def write_run(path, gpu: str, records: list[dict], **fields) -> None:
    """An A/B script's record (scripts/ab_*.py): the GPU, the date, the command that ran,
    the script's own ``fields`` (arms, summary, ...), then the records."""
    import sys
    import time

    write_json(
        {"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), **fields, "records": records},
        path,
    )


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError as exc:
        raise ImportError("plots need matplotlib: pip install 'gemmlab[plot]'") from exc


def savefig(fig, path) -> None:
    plt = _pyplot()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_ladder(records: list[dict], path, title: str | None = None) -> None:
    """Grouped bars: TFLOPS of each kernel at each size, cuBLAS included (the headline path)."""
    plt = _pyplot()
    records, timed = headline(records)
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
    ax.set_title(title or f"gemmlab {records[0]['dtype']} vs cuBLAS on {records[0]['gpu']}, {PATHS[timed][0]}")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    savefig(fig, path)


def plot_sweep(records: list[dict], path) -> None:
    """TFLOPS against TILE for each size, with naive as a dashed line (the headline path)."""
    plt = _pyplot()
    records, timed = headline(records)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in records))
    for s in sizes:
        pts = sorted(
            (r["params"]["tile"], r["tflops"])
            for r in records
            if r["kernel"] == "smem_tiled" and (r["M"], r["N"], r["K"]) == s and r["tflops"]
        )
        if pts:
            (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{s[0]}^3 tiled")
            nv = [
                r["tflops"] for r in records if r["kernel"] == "naive" and (r["M"], r["N"], r["K"]) == s and r["tflops"]
            ]
            if nv:
                ax.axhline(nv[0], color=line.get_color(), ls="--", lw=1, label=f"{s[0]}^3 naive")
    ax.set_xscale("log", base=2)
    tiles = sorted({r["params"]["tile"] for r in records if r["kernel"] == "smem_tiled"})
    ax.set_xticks(tiles)
    ax.set_xticklabels([str(t) for t in tiles])
    ax.set_xlabel("TILE (threads per block = TILE^2)")
    ax.set_ylabel("TFLOPS")
    ax.set_title(f"TILE_WIDTH sweep, smem_tiled vs naive, {records[0]['gpu']}, {PATHS[timed][0]}")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    savefig(fig, path)


def sweep_speedups(records: list[dict]) -> list[str]:
    """naive -> best tiled speedup at each size (the headline path)."""
    records, _ = headline(records)
    out = []
    for s in dict.fromkeys((r["M"], r["N"], r["K"]) for r in records):
        nv = [r for r in records if r["kernel"] == "naive" and (r["M"], r["N"], r["K"]) == s and r["ms"]]
        tiled = [r for r in records if r["kernel"] == "smem_tiled" and (r["M"], r["N"], r["K"]) == s and r["ms"]]
        if nv and tiled:
            best = min(tiled, key=lambda r: r["ms"])
            out.append(
                f"{'x'.join(map(str, s))}: naive {nv[0]['ms']:.3f} ms -> smem_tiled[{best['params']['tile']}] "
                f"{best['ms']:.3f} ms = {nv[0]['ms'] / best['ms']:.1f}x"
            )
    return out
