"""Tuned-configuration tables: which kernel and tile parameters were fastest per
shape on a GPU model, as the planner reads them.

The package ships a table measured on an H100 (``gemmlab/data/tuned/``; the H200's
was retired when its rules measured faster, benchmarks/NOTES.md); a
user's own table from ``gemmlab tune`` (``<cache>/tuned/<gpu>.json``) overrides
them shape by shape.  A table answers "which configuration for this shape" with
the tuned shape nearest to it (in log2 M, log2 N, log2 K).  :data:`version`
changes whenever a table is (re)loaded, and is part of every prepared call's
key, so calls planned from an older table are planned again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..kernels import registry
from ..kernels.spec import KERNEL_DIR
from ..runtime.compile import cache_dir

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "tuned"
version = 0  # bumped by reload()
# Called by reload(): what keeps launches planned with the old tables outside the prepared
# calls' keys (the C++ routed kernels, gemmlab.torch.native).
on_reload: list = []


def shape_key(M: int, N: int, K: int) -> str:
    return f"{M}x{N}x{K}"


def parse_shape_key(key: str) -> tuple[int, int, int]:
    M, N, K = (int(v) for v in key.split("x"))
    return M, N, K


def sources_digest() -> str:
    """A digest of every kernel source and header: timings of other code are stale."""
    h = hashlib.sha256()
    for path in sorted(KERNEL_DIR.rglob("*")):
        if path.suffix in (".cu", ".cuh"):
            h.update(path.relative_to(KERNEL_DIR).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@dataclass
class TunedTable:
    """Winners per shape: ``shapes[shape_key] = {"best": {...}, "kernels": {name: {...}}}``,
    each winner ``{"kernel", "params", "ms", "tflops"}`` plus ``"cublas_ms"`` per shape."""

    gpu: str
    shapes: dict
    source: str = ""
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def lookup(self, kernel: str, M: int, N: int, K: int, ops: str = "NN") -> tuple[str, dict] | None:
        """(kernel, params) tuned for the nearest shape, among the shapes tuned in the
        layout ``ops`` (op(A), op(B): "NN", "NT", "TN" or "TT"; an entry without uses
        was tuned in NN); ``kernel="auto"`` takes the overall winner.  None if no tuned
        shape has that kernel in that layout: a layout's warp tiling and stages are not
        another's (pipelined.LAYOUT_TILING), so the rules answer there.  Memoised: this
        runs on every matmul call."""
        found = self.nearest(kernel, M, N, K, ops)
        return (found[0], found[1]) if found else None

    def nearest(
        self, kernel: str, M: int, N: int, K: int, ops: str = "NN", batch: int = 1
    ) -> tuple[str, dict, str, float] | None:
        """lookup's answer with the tuned shape that gave it and how far that shape is:
        (kernel, params, shape key, distance), the distance in doublings (log2 of M, N,
        K and the batch, summed; the batch against the nearest the entry was tuned in)."""
        key = (kernel, M, N, K, ops)
        if key not in self._memo:
            self._memo[key] = self._nearest(kernel, M, N, K, ops)
        found = self._memo[key]
        if not found:
            return None
        name, params, shape, d = found
        batches = [u.get("batch", 1) for u in self.shapes[shape].get("uses", [{}])]
        d += min(abs(math.log2(max(batch, 1) / b)) for b in batches)
        return name, dict(params), shape, d

    def measured_at(self, kernel: str, M: int, N: int, K: int, batch: int = 1, ops: str = "NN") -> bool:
        """Whether this very shape was tuned for ``kernel`` in a batch of this size and
        in this layout (an entry without uses: one matrix, NN); lookup's answer is then
        its own winner, split-K included, not a neighbour's."""
        entry = self.shapes.get(shape_key(M, N, K), {})
        uses = {(u.get("ops", "NN"), u.get("batch", 1)) for u in entry.get("uses", [{}])}
        won = entry.get("best") if kernel == "auto" else entry.get("kernels", {}).get(kernel)
        return bool(won) and (ops, max(batch, 1)) in uses

    def _nearest(self, kernel: str, M: int, N: int, K: int, ops: str) -> tuple[str, dict, str, float] | None:
        """The nearest shape's winner (L1 distance in log2 M, N, K) among the shapes tuned in
        the layout ``ops``: a configuration that won in another may be the wrong one here (a
        TN winner's tile for an NT product)."""
        best, best_d, best_key = None, math.inf, ""
        for key, entry in self.shapes.items():
            win = entry.get("best") if kernel == "auto" else entry.get("kernels", {}).get(kernel)
            if not win:
                continue
            if ops not in {u.get("ops", "NN") for u in entry.get("uses", [{"ops": "NN"}])}:
                continue
            m, n, k = parse_shape_key(key)
            d = abs(math.log2(M / m)) + abs(math.log2(N / n)) + abs(math.log2(K / k))
            if d < best_d:
                best, best_d, best_key = win, d, key
        return (best["kernel"], dict(best["params"]), best_key, best_d) if best else None

    def to_json(self) -> dict:
        return {"gpu": self.gpu, "gemmlab_sources": sources_digest(), "shapes": self.shapes}


def user_table_path(slug: str) -> Path:
    return cache_dir() / "tuned" / f"{slug}.json"


def progress_path(slug: str) -> Path:
    return cache_dir() / "tuned" / f"{slug}.progress.json"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        import warnings

        warnings.warn(f"gemmlab: ignoring unreadable tuning file {path} ({exc})", RuntimeWarning, stacklevel=3)
        return None


def _valid_winner(win) -> bool:
    """A stored winner whose kernel and parameters this version still accepts."""
    try:
        registry.get(win["kernel"]).resolve(win["params"])
        return True
    except (KeyError, TypeError, ValueError):
        return False


@functools.lru_cache(maxsize=None)
def load_table(slug: str) -> TunedTable | None:
    """The shipped table for this GPU model, overridden shape by shape by the
    user's own (from ``gemmlab tune``).  Entries this version cannot run are dropped.
    ``GEMMLAB_TUNED=off`` ignores every table: ``kernel="auto"`` then takes the
    rules a GPU without a table gets (to compare the two on a GPU that has one)."""
    if os.environ.get("GEMMLAB_TUNED", "").lower() == "off":
        return None
    shapes, sources = {}, []
    for path in (SHIPPED_DIR / f"{slug}.json", user_table_path(slug)):
        data = _read_json(path)
        if not data:
            continue
        sources.append(str(path))
        for key, entry in data.get("shapes", {}).items():
            entry = dict(entry)
            entry["kernels"] = {k: w for k, w in entry.get("kernels", {}).items() if _valid_winner(w)}
            if entry.get("best") and not _valid_winner(entry["best"]):
                entry.pop("best")
            shapes[key] = entry
    if not shapes:
        return None
    return TunedTable(slug, shapes, "; ".join(sources))


def _write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def reload() -> None:
    """Forget the loaded tables (after ``gemmlab tune`` wrote one): the next lookup
    reads them again, and calls prepared with the old ones are planned anew."""
    global version
    load_table.cache_clear()
    version += 1
    for forget in on_reload:
        forget()
