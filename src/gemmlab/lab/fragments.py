"""WMMA fragment maps: which tile element each lane's ``x[k]`` holds.

- ``KINDS``: every fragment kind the lab covers (matrix_a / matrix_b / accumulator;
  16x16x16, 32x8x16, 8x32x16 for FP16 and BF16; 16x16x8 for TF32; row- and
  column-major; FP32 and FP16 accumulators).
- ``analytic_map(kind, arch)``: the map as a (32, num_elements, 2) array of
  (row, col), from the mma.sync m16n8k16 / m16n8k8 fragment layouts that WMMA
  is built from on sm_80 and sm_90 (no GPU needed).
- ``dump(kinds)``: the map measured on the current GPU (kernels/lab/fragment_dump.cu).
- ``write_outputs``: the per-lane table as CSV and JSON, and a picture per kind.
- ``measured_files()``: maps measured earlier and stored with the package
  (``gemmlab/data/fragment_maps_<gpu>.json``).

The bit formulas are written out in gemmlab/wmma_ext.cuh, which uses the same maps.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..kernels.spec import FRAGMENT_MAPS, arch_cc

SOURCE = Path(__file__).resolve().parents[1] / "kernels" / "lab" / "fragment_dump.cu"
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
USES = ("matrix_a", "matrix_b", "accumulator")
DTYPES = ("f16", "bf16", "tf32", "f32")  # template codes 0..3 in wmma_types.cuh
# Targets with known maps (kernels/spec.py FRAGMENT_MAPS says which were measured).
SUPPORTED_ARCHES = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120", "sm_120a")


@dataclass(frozen=True)
class FragmentKind:
    use: str  # matrix_a, matrix_b, accumulator
    m: int
    n: int
    k: int
    dtype: str  # f16, bf16, tf32 (matrix_a/b); f16, f32 (accumulator)
    layout: str  # row or col: the fragment's layout, or the accumulator's load layout

    @property
    def name(self) -> str:
        return f"{self.use}.m{self.m}n{self.n}k{self.k}.{self.dtype}.{self.layout}"

    @property
    def rows(self) -> int:
        return self.k if self.use == "matrix_b" else self.m

    @property
    def cols(self) -> int:
        return self.k if self.use == "matrix_a" else self.n

    @property
    def unique(self) -> int:
        """Elements per lane: rows * cols / 32."""
        return self.rows * self.cols // 32

    @property
    def num_elements(self) -> int:
        """Slots per lane (x[0..num_elements-1]); FP16 matrix_a/matrix_b fragments keep 16."""
        if self.use != "accumulator" and self.dtype == "f16":
            return 16
        return self.unique

    @property
    def elem_bytes(self) -> int:
        return 4 if self.dtype in ("tf32", "f32") else 2

    @property
    def template_args(self) -> tuple[int, int, int, int, int, int]:
        return (USES.index(self.use), self.m, self.n, self.k, DTYPES.index(self.dtype), int(self.layout == "col"))

    def name_expression(self, template: str = "gemmlab::lab::fragment_dump") -> str:
        return f"{template}<{', '.join(map(str, self.template_args))}>"


def _kinds() -> tuple[FragmentKind, ...]:
    out = []
    shapes16 = ((16, 16, 16), (32, 8, 16), (8, 32, 16))
    for use in ("matrix_a", "matrix_b"):
        for m, n, k in shapes16:
            for dt in ("f16", "bf16"):
                for lay in ("row", "col"):
                    out.append(FragmentKind(use, m, n, k, dt, lay))
        for lay in ("row", "col"):
            out.append(FragmentKind(use, 16, 16, 8, "tf32", lay))
    for m, n, k in shapes16 + ((16, 16, 8),):
        for dt in ("f32", "f16") if k == 16 else ("f32",):
            for lay in ("row", "col"):
                out.append(FragmentKind("accumulator", m, n, k, dt, lay))
    return tuple(out)


KINDS = _kinds()
_BY_NAME = {kd.name: kd for kd in KINDS}


def kind(name: str) -> FragmentKind:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown fragment kind {name!r}; known: {', '.join(_BY_NAME)}") from None


def select(patterns: list[str] | None, among=None) -> list[FragmentKind]:
    """Kinds (of ``among``, default all of KINDS) that a pattern names: a pattern is a
    full kind name or dot-separated parts each equal to a part of the name
    (``matrix_a``, ``m32n8k16.bf16``; ``f16`` is not ``bf16``); all kinds for None/empty."""
    among = tuple(KINDS if among is None else among)
    if not patterns:
        return list(among)

    def named(kd: FragmentKind, pattern: str) -> bool:
        parts = kd.name.split(".")
        return pattern == kd.name or all(p in parts for p in pattern.split("."))

    chosen = [kd for kd in among if any(named(kd, pat) for pat in patterns)]
    if not chosen:
        raise ValueError(
            f"no fragment kind matches {' '.join(patterns)}; kinds are "
            "use.shape.dtype.layout, e.g. matrix_a.m16n16k16.f16.row (matrix_a, matrix_b or "
            "accumulator; m16n16k16, m32n8k16, m8n32k16, m16n16k8; f16, bf16, tf32, f32; row, col)"
        )
    return chosen


# -- analytic maps ----------------------------------------------------------------------


def arch_family(arch: str) -> str:
    """'sm80' for the architectures whose maps are the mma.sync-based ones."""
    if arch not in SUPPORTED_ARCHES:
        raise ValueError(
            f"no fragment maps for {arch}: the analytic maps cover {', '.join(SUPPORTED_ARCHES)} "
            "(sm_70 uses other layouts; other targets are not derived yet)"
        )
    return "sm80"


def kinds_for(arch: str) -> tuple[FragmentKind, ...]:
    """The kinds ``arch`` has: all of KINDS from sm_80; on sm_75 the FP16 ones
    (FP16 inputs, FP16/FP32 accumulators of the k = 16 shapes), no BF16 or TF32."""
    arch_family(arch)
    if arch_cc(arch) >= 80:
        return KINDS
    return tuple(kd for kd in KINDS if kd.dtype in ("f16", "f32") and kd.k == 16)


def provenance(arch: str) -> str:
    """Where the map of ``arch`` comes from: measured on a GPU, or derived from SASS."""
    arch_family(arch)
    return FRAGMENT_MAPS[arch_cc(arch)]


def element(kd: FragmentKind, lane, k):
    """(row, col) of x[k] in ``lane`` (NumPy arrays or ints) for sm_80/sm_90."""
    lane = np.asarray(lane)
    e = np.asarray(k) % kd.unique  # slot k repeats slot k % unique
    g, t = lane >> 2, lane & 3
    b0, b1, b2, b3 = e & 1, (e >> 1) & 1, (e >> 2) & 1, (e >> 3) & 1
    u, m, n = kd.use, kd.m, kd.n
    if u == "matrix_a":
        if kd.dtype == "tf32":
            return g + 8 * b0, t + 4 * b1
        if m == 16:
            return g + 8 * b1, 2 * t + b0 + 8 * b2
        if m == 32:
            return g + 8 * b1 + 16 * b3, 2 * t + b0 + 8 * b2
        return g + 0 * e, 2 * t + b0 + 8 * b1  # m == 8
    if u == "matrix_b":
        if kd.dtype == "tf32":
            return t + 4 * b0, g + 8 * b1
        if n == 16:
            return 2 * t + b0 + 8 * b1, g + 8 * b2
        if n == 8:
            return 2 * t + b0 + 8 * b1, g + 0 * e
        return 2 * t + b0 + 8 * b2, g + 8 * b1 + 16 * b3  # n == 32
    if m == 32:
        return g + 8 * b1 + 16 * b2, 2 * t + b0
    if m == 8:
        return 2 * t + b0, g + 8 * b1 + 16 * b2
    return g + 8 * b1, 2 * t + b0 + 8 * b2  # 16 x 16


def analytic_map(kd: FragmentKind, arch: str = "sm_90a") -> np.ndarray:
    """int array (32, num_elements, 2): (row, col) held by x[k] of each lane."""
    if kd not in kinds_for(arch):
        raise ValueError(f"{arch} has no {kd.name} fragments (BF16 and TF32 WMMA need sm_80)")
    lanes, ks = np.meshgrid(np.arange(32), np.arange(kd.num_elements), indexing="ij")
    r, c = element(kd, lanes, ks)
    return np.stack([r, c], axis=-1).astype(np.int64)


def check_map(kd: FragmentKind, fmap: np.ndarray) -> list[str]:
    """Problems with a map: shape, out-of-range cells, tile elements held by no lane."""
    problems = []
    if fmap.shape != (32, kd.num_elements, 2):
        return [f"{kd.name}: shape {fmap.shape}, expected {(32, kd.num_elements, 2)}"]
    valid = (fmap[..., 0] >= 0) & (fmap[..., 0] < kd.rows) & (fmap[..., 1] >= 0) & (fmap[..., 1] < kd.cols)
    if not valid.all():
        problems.append(f"{kd.name}: {int((~valid).sum())} slots hold no element of the tile")
    held = np.zeros((kd.rows, kd.cols), dtype=np.int64)
    for r, c in fmap[valid]:
        held[r, c] += 1
    if (held == 0).any():
        problems.append(f"{kd.name}: {int((held == 0).sum())} tile elements are held by no slot")
    return problems


def owners(kd: FragmentKind, fmap: np.ndarray) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(row, col) -> [(lane, k), ...] of every slot holding it."""
    out: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for lane in range(fmap.shape[0]):
        for k in range(fmap.shape[1]):
            r, c = (int(v) for v in fmap[lane, k])
            if r >= 0:
                out.setdefault((r, c), []).append((lane, k))
    return out


# -- measuring on the GPU -----------------------------------------------------------------


def tile_codes(kd: FragmentKind) -> tuple[np.ndarray, int]:
    """The tile the dump kernel loads, in memory order, and its leading dimension:
    element (i, j) holds i * cols + j + 1 (raw bits for 16-bit types, as a float
    value for 32-bit ones, which tf32 keeps exactly)."""
    idx = np.arange(kd.rows * kd.cols).reshape(kd.rows, kd.cols) + 1
    mem = idx.T if kd.layout == "col" else idx
    ld = mem.shape[1]
    if kd.elem_bytes == 4:
        return np.ascontiguousarray(mem.astype(np.float32)), ld
    return np.ascontiguousarray(mem.astype(np.uint16)), ld


def decode(kd: FragmentKind, raw: np.ndarray) -> np.ndarray:
    """Raw x[k] bits (32 * num_elements uint32) -> (32, num_elements, 2); -1 where not a code."""
    raw = np.asarray(raw, dtype=np.uint32).reshape(32, kd.num_elements)
    if kd.elem_bytes == 4:
        vals = raw.view(np.float32).astype(np.float64)
        ok = np.isfinite(vals) & (vals == np.round(vals))
        idx = np.where(ok, vals, 0).astype(np.int64) - 1
    else:
        idx = (raw & 0xFFFF).astype(np.int64) - 1
        ok = (raw >> 16) == 0
    ok &= (idx >= 0) & (idx < kd.rows * kd.cols)
    out = np.stack([idx // kd.cols, idx % kd.cols], axis=-1)
    out[~ok] = -1
    return out


def dump(kinds=None, device: int = 0) -> dict[str, np.ndarray]:
    """Measure the maps of ``kinds`` (default: all) on GPU ``device``."""
    import cupy as cp
    from ..runtime.compile import compile_module
    from ..runtime.device import gpu_info
    from ..runtime.launch import launch

    gpu = gpu_info(device)
    kinds = list(kinds or kinds_for(gpu.arch))
    names = [kd.name_expression() for kd in kinds]
    with cp.cuda.Device(device):
        module = compile_module(SOURCE, names, gpu.arch)
        stream = cp.cuda.get_current_stream()
        out = {}
        for kd, name in zip(kinds, names):
            host, ld = tile_codes(kd)
            tile = cp.asarray(host)
            raw = cp.full(32 * kd.num_elements, 0xFFFFFFFF, dtype=cp.uint32)  # poisoned
            launch(module.kernel(name), (1, 1, 1), (32, 1, 1), 0, stream.ptr, tile.data.ptr, np.int32(ld), raw.data.ptr)
            stream.synchronize()
            out[kd.name] = decode(kd, cp.asnumpy(raw))
    return out


# -- outputs --------------------------------------------------------------------------------


def to_record(kd: FragmentKind, fmap: np.ndarray) -> dict:
    return {
        "kind": kd.name,
        "use": kd.use,
        "m": kd.m,
        "n": kd.n,
        "k": kd.k,
        "dtype": kd.dtype,
        "layout": kd.layout,
        "rows": kd.rows,
        "cols": kd.cols,
        "num_elements": kd.num_elements,
        "map": fmap.tolist(),
    }


def csv_text(kd: FragmentKind, fmap: np.ndarray) -> str:
    lines = ["lane,k,row,col"]
    for lane in range(32):
        for k in range(kd.num_elements):
            lines.append(f"{lane},{k},{int(fmap[lane, k, 0])},{int(fmap[lane, k, 1])}")
    return "\n".join(lines) + "\n"


def plot_map(kd: FragmentKind, fmap: np.ndarray, path, title: str | None = None) -> None:
    """The tile, each cell coloured by its owning lane and labelled 'lane:k'
    (cells held by several slots list them; several lanes are hatched)."""
    from ..tools.bench.report import _pyplot

    plt = _pyplot()
    held = owners(kd, fmap)
    fig, ax = plt.subplots(figsize=(max(4, 0.75 * kd.cols + 1), max(3, 0.5 * kd.rows + 1)))
    cmap = plt.get_cmap("hsv")
    for (r, c), slots in held.items():
        lanes = sorted({lane for lane, _ in slots})
        colour = cmap(lanes[0] / 32.0)
        ax.add_patch(
            plt.Rectangle(
                (c, r),
                1,
                1,
                facecolor=colour,
                alpha=0.45,
                edgecolor="grey",
                lw=0.3,
                hatch="//" if len(lanes) > 1 else None,
            )
        )
        ks = "/".join(str(k) for _, k in slots[:2]) + ("/..." if len(slots) > 2 else "")
        label = f"{lanes[0]}:{ks}" if len(lanes) == 1 else f"{len(lanes)} lanes"
        ax.text(c + 0.5, r + 0.5, label, ha="center", va="center", fontsize=5)
    ax.set_xlim(0, kd.cols)
    ax.set_ylim(kd.rows, 0)
    ax.set_aspect("equal")
    ax.set_xticks(range(0, kd.cols, 4))
    ax.set_yticks(range(0, kd.rows, 4))
    ax.set_xlabel("col")
    ax.set_ylabel("row")
    ax.set_title(title or kd.name, fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write_outputs(maps: dict[str, np.ndarray], folder, *, gpu: str, arch: str, plots: bool = True) -> Path:
    """CSV (and PNG) per kind under ``folder``, and fragment_maps_<gpu slug>.json
    holding every kind; returns the JSON's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, fmap in maps.items():
        kd = kind(name)
        (folder / f"{name}.csv").write_text(csv_text(kd, fmap))
        if plots:
            plot_map(kd, fmap, folder / f"{name}.png", title=f"{name} on {gpu}")
    slug = "-".join(gpu.lower().replace("_", " ").split())
    path = folder / f"fragment_maps_{slug}.json"
    doc = {
        "gpu": gpu,
        "arch": arch,
        "source": "measured by gemmlab fragments (kernels/lab/fragment_dump.cu)",
        "kinds": [to_record(kind(n), m) for n, m in maps.items()],
    }
    path.write_text(json.dumps(doc) + "\n")
    return path


def measured_files(folder: Path | None = None) -> list[Path]:
    """Stored measured maps: gemmlab/data/fragment_maps_*.json."""
    return sorted(Path(folder or DATA_DIR).glob("fragment_maps_*.json"))


def load_measured(path) -> tuple[dict, dict[str, np.ndarray]]:
    doc = json.loads(Path(path).read_text())
    maps = {rec["kind"]: np.asarray(rec["map"], dtype=np.int64) for rec in doc["kinds"]}
    return {k: v for k, v in doc.items() if k != "kinds"}, maps


def compare(kd: FragmentKind, got: np.ndarray, expected: np.ndarray, limit: int = 8) -> list[str]:
    """Slots where two maps differ, as readable lines (empty when equal)."""
    if got.shape != expected.shape:
        return [f"{kd.name}: shape {got.shape} != {expected.shape}"]
    bad = np.argwhere((got != expected).any(axis=-1))
    lines = [
        f"{kd.name}: lane {l} x[{k}] holds {tuple(got[l, k])}, analytic {tuple(expected[l, k])}" for l, k in bad[:limit]
    ]
    if len(bad) > limit:
        lines.append(f"{kd.name}: ... {len(bad)} slots differ in all")
    return lines


def half_bits(x: float) -> int:
    """Raw FP16 bits of x (used by tests)."""
    return struct.unpack("<H", struct.pack("<e", x))[0]
