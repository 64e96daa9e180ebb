"""`gemmlab accuracy`: relative error against FP64 of every way gemmlab (and
cuBLAS) can multiply FP32 matrices, over K and over input distributions.

Rows: cuBLAS SGEMM (CuPy, TF32 off), gemmlab's CUDA-core FP32 GEMM, one TF32
tensor-core pass, one FP16 pass (inputs rounded to FP16, FP32 accumulation),
and each error-corrected method (fp16_ec, fp16_ec_scaled, tf32_ec, and
fp32_tc with the method it chose).  The error is the relative Frobenius norm
||C - C64|| / ||C64||, C64 computed in FP64 from the same FP32 inputs.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

import numpy as np

KS = (1024, 4096, 16384, 65536, 131072)
# name -> (description, function of a NumPy generator and a shape giving float64 values)
INPUT_SETS = {
    "uniform": "U(-1, 1)",
    "uniform_small": "U(-1, 1) * 2^-12",
    "uniform_large": "U(-1, 1) * 2^12",
    "normal": "N(0, 1)",
    "log_uniform": "random signs, magnitudes log-uniform over 2^-20 .. 2^20",
}
# "precision:kernel" runs that precision on a named kernel (default: auto, which at the
# default 256 x 256 is ec_wmma everywhere, ec_wgmma taking the products that fill a Hopper
# GPU); fp32_tc:ec_wmma names the WMMA implementation, and on a GPU that builds ec_wgmma
# the default list adds fp32_tc:ec_wgmma (default_methods), the kernel large products get.
METHODS = ("sgemm_cublas", "fp32", "tf32", "fp16", "fp16_ec", "fp16_ec_scaled", "tf32_ec", "fp32_tc", "fp32_tc:ec_wmma")


def default_methods(arch: str) -> list[str]:
    """METHODS, and fp32_tc on ec_wgmma where the target ``arch`` builds it (sm_90a)."""
    from ..kernels import registry

    return list(METHODS) + (["fp32_tc:ec_wgmma"] if registry.get("ec_wgmma").builds_for(arch) else [])


def make_inputs(name: str, rows: int, cols: int, rng) -> np.ndarray:
    if name == "uniform":
        x = rng.uniform(-1, 1, (rows, cols))
    elif name == "uniform_small":
        x = rng.uniform(-1, 1, (rows, cols)) * 2.0**-12
    elif name == "uniform_large":
        x = rng.uniform(-1, 1, (rows, cols)) * 2.0**12
    elif name == "normal":
        x = rng.standard_normal((rows, cols))
    elif name == "log_uniform":
        x = np.exp2(rng.uniform(-20, 20, (rows, cols))) * rng.choice([-1.0, 1.0], (rows, cols))
    else:
        raise ValueError(f"unknown input set {name!r}; choose from {', '.join(INPUT_SETS)}")
    return x.astype(np.float32)


@dataclass
class Point:
    gpu: str
    inputs: str
    M: int
    N: int
    K: int
    method: str
    rel_error: float
    note: str = ""


def _one(method: str, a, b):
    """The product by one method, and a note (fp32_tc: the method it chose)."""
    import cupy as cp
    from ..core import api

    if method == "sgemm_cublas":
        return a @ b, "CuPy matmul -> cuBLAS SGEMM, TF32 off"
    if method == "fp32":
        return api.matmul(a, b), api.last_plan().describe()
    if method == "tf32":
        return api.matmul(a, b, precision="tf32"), api.last_plan().describe()
    if method == "fp16":
        return api.matmul(
            a.astype(cp.float16), b.astype(cp.float16), out_dtype="float32"
        ), "inputs rounded to FP16, " + api.last_plan().describe()
    precision, _, kernel = method.partition(":")
    out = api.matmul(a, b, precision=precision, kernel=kernel or "auto")
    p = api.last_plan()
    return out, (f"{p.method}: {p.reason} ({p.spec.name})" if precision == "fp32_tc" else p.describe())


def run(
    ks=KS, inputs=tuple(INPUT_SETS), methods=METHODS, *, M: int = 256, N: int = 256, seed: int = 0, quiet: bool = False
) -> list[Point]:
    import cupy as cp
    from ..runtime.device import gpu_info
    from .verify import compare, reference

    gpu_info(0)
    gpu = gpu_info(cp.cuda.Device().id)
    rng = np.random.default_rng(seed)
    points = []
    total, done = len(ks) * len(inputs), 0
    for name in inputs:
        for K in ks:
            a = cp.asarray(make_inputs(name, M, K, rng))
            b = cp.asarray(make_inputs(name, K, N, rng))
            ref = reference(a, b, keep_on_gpu=True)
            for method in methods:
                c, note = _one(method, a, b)
                points.append(Point(gpu.name, name, M, N, K, method, compare(c, ref).rel_fro, note))
            done += 1
            if not quiet:
                print(
                    f"[{done}/{total}] {name} K={K}: "
                    + ", ".join(f"{p.method} {p.rel_error:.1e}" for p in points[-len(methods) :]),
                    file=sys.stderr,
                    flush=True,
                )
            del a, b, ref
            cp.get_default_memory_pool().free_all_blocks()
    return points


def table(points: list[dict]) -> str:
    """One block per input set: rows = methods, columns = K."""
    lines = []
    for name in dict.fromkeys(p["inputs"] for p in points):
        sub = [p for p in points if p["inputs"] == name]
        ks = sorted({p["K"] for p in sub})
        methods = list(dict.fromkeys(p["method"] for p in sub))
        lines.append(f"{name}: {INPUT_SETS.get(name, '')}")
        lines.append(f"  {'method':16s}" + "".join(f"{'K=' + str(k):>16s}" for k in ks))
        for m in methods:
            errs = {p["K"]: p["rel_error"] for p in sub if p["method"] == m}
            lines.append(f"  {m:16s}" + "".join(f"{errs[k]:16.2e}" if k in errs else f"{'-':>16s}" for k in ks))
        chosen = {p["K"]: p["note"].split(":")[0] for p in sub if p["method"] == "fp32_tc"}
        if chosen:
            lines.append(f"  {'fp32_tc chose':16s}" + "".join(f"{chosen.get(k, '-'):>16s}" for k in ks))
        lines.append("")
    return "\n".join(lines)


def plot(points: list[dict], path) -> None:
    from .bench.report import _pyplot

    plt = _pyplot()
    names = list(dict.fromkeys(p["inputs"] for p in points))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.2), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], names):
        sub = [p for p in points if p["inputs"] == name]
        for m in dict.fromkeys(p["method"] for p in sub):
            pts = sorted((p["K"], p["rel_error"]) for p in sub if p["method"] == m)
            ax.loglog([k for k, _ in pts], [max(e, 1e-12) for _, e in pts], marker="o", label=m)
        ax.set_title(INPUT_SETS.get(name, name), fontsize=9)
        ax.set_xlabel("K")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("relative Frobenius error vs FP64")
    axes[0][-1].legend(fontsize=7)
    gpu = points[0]["gpu"] if points else ""
    fig.suptitle(f"FP32 GEMM accuracy by method, {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def as_dicts(points: list[Point]) -> list[dict]:
    return [asdict(p) for p in points]
