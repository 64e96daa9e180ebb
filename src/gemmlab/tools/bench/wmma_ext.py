"""`gemmlab bench --suite wmma_ext`: the experiments behind gemmlab/wmma_ext.cuh,
on the current GPU (kernels/lab/wmma_ext_bench.cu says what each kernel does).

- vector:   batched v_i^T B, 16-element FP16 vectors, batch 2^14..2^20:
            load_vector_sync/store_vector_sync vs a zero-padded tile in shared memory.
- identity: Y_t = alpha_t X_t^T for 16x16 tiles (batch 2^12..2^18 tiles):
            make_identity vs alpha_t I staged in shared memory.
- ec_gemm:  FP32 C = A B from FP16 tensor cores with the hi/lo split, n = 2^7..2^15:
            load_matrix_with_op_sync vs a second pass writing FP16 tiles.
- skew:     fragment loads from a bank-conflicting shared tile, with and without the skew
            (and wmma::load_matrix_sync, which uses ldmatrix, for scale).

Each record: gpu, experiment, variant, size, ms (median), speedup (baseline ms /
this ms, baseline = the variant without the extension), rel_error (checked with
NumPy), reps, note, ms_min and ms_max (the spread of the repeats).  Timing: CUDA events, one untimed run first, then repeats
within a time budget (at least one); no L2 flush (both variants see the same cache).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).resolve().parents[2] / "kernels" / "lab" / "wmma_ext_bench.cu"
WARPS = 4  # BENCH_WARPS in the .cu file
VECTOR_BATCHES = [2**p for p in range(14, 21)]
IDENTITY_BATCHES = [2**p for p in range(12, 19)]  # 16x16 tiles: 2^18 tiles = 64 Mi elements
EC_SIZES = [2**p for p in range(7, 16)]
SKEW_ITERS = 4096


@dataclass
class WmmaExtRecord:
    gpu: str
    experiment: str
    variant: str
    size: int
    ms: float | None
    speedup: float | None
    rel_error: float | None
    reps: int
    note: str = ""
    ms_min: float | None = None
    ms_max: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def kernel_names() -> list[str]:
    names = [
        f"gemmlab::lab::{k}<{v}>" for k in ("vec_product", "scaled_transpose", "ec_gemm") for v in ("true", "false")
    ]
    return names + [f"gemmlab::lab::smem_load<{m}>" for m in (0, 1, 2)]


def _time(fn, reps: int, budget_s: float) -> tuple[float, int, float, float]:
    """(median ms, repeats, min ms, max ms)."""
    import cupy as cp

    stream = cp.cuda.get_current_stream()
    fn()  # untimed: module load, clocks up
    stream.synchronize()
    times = []
    t0 = time.time()
    while len(times) < reps and (not times or time.time() - t0 < budget_s):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record(stream)
        fn()
        e.record(stream)
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e))
    return statistics.median(times), len(times), min(times), max(times)


def _rel(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300))


def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def run(
    *, reps: int = 10, budget_s: float = 1.0, quiet: bool = False, quick: bool = False, seed: int = 0
) -> list[WmmaExtRecord]:
    """All four experiments; ``quick`` keeps the two smallest sizes of each (tests)."""
    from ...lab.fragments import arch_family
    from ...runtime.compile import compile_module
    from ...runtime.device import gpu_info
    from ...runtime.launch import launch

    gpu_info(0)  # NoGPUError with the reason, before CuPy touches the driver
    import cupy as cp

    gpu = gpu_info(cp.cuda.Device().id)
    arch_family(gpu.arch)
    module = compile_module(SOURCE, kernel_names(), gpu.arch)
    k = {n.split("::")[-1]: module.kernel(n) for n in kernel_names()}
    stream = cp.cuda.get_current_stream().ptr
    rng = np.random.default_rng(seed)
    blocks = gpu.sm_count * 8
    out: list[WmmaExtRecord] = []

    def pick(sizes):
        return sizes[:2] if quick else sizes

    def pair(experiment, size, run_ext, run_base, check, note=""):
        ms_e, n_e, lo_e, hi_e = _time(run_ext, reps, budget_s)
        err_e = check()
        ms_b, n_b, lo_b, hi_b = _time(run_base, reps, budget_s)
        err_b = check()
        out.append(
            WmmaExtRecord(gpu.name, experiment, "wmma_ext", size, ms_e, ms_b / ms_e, err_e, n_e, note, lo_e, hi_e)
        )
        out.append(WmmaExtRecord(gpu.name, experiment, "staged", size, ms_b, 1.0, err_b, n_b, note, lo_b, hi_b))
        _progress(
            f"{experiment:9s} {size:>8d}: wmma_ext {ms_e:.4f} ms ({lo_e:.4f}-{hi_e:.4f}), staged {ms_b:.4f} ms "
            f"({lo_b:.4f}-{hi_b:.4f}), speedup {ms_b / ms_e:.3f}x, err {err_e:.1e}/{err_b:.1e}",
            quiet,
        )

    # -- vector -> fragment --------------------------------------------------------------
    Bh = rng.uniform(-1, 1, (16, 16)).astype(np.float16)
    B = cp.asarray(Bh)
    for batch in pick(VECTOR_BATCHES):
        vh = rng.uniform(-1, 1, (batch, 16)).astype(np.float16)
        v = cp.asarray(vh)
        o = cp.empty((batch, 16), cp.float32)
        grid = min(blocks, -(-batch // WARPS))
        ref = vh.astype(np.float64) @ Bh.astype(np.float64)

        def go(name):
            return lambda: launch(
                k[name],
                (grid, 1, 1),
                (32 * WARPS, 1, 1),
                0,
                stream,
                v.data.ptr,
                B.data.ptr,
                o.data.ptr,
                np.int32(batch),
            )

        def check():
            res = cp.asnumpy(o)
            o.fill(np.nan)  # poison for the next variant
            return _rel(res, ref)

        o.fill(np.nan)
        pair(
            "vector",
            batch,
            go("vec_product<true>"),
            go("vec_product<false>"),
            check,
            "v_i^T B, 16-element FP16 vectors",
        )
        del v, o

    # -- identity ---------------------------------------------------------------------------
    for tiles in pick(IDENTITY_BATCHES):
        xh = rng.uniform(-1, 1, (tiles, 16, 16)).astype(np.float16)
        al = rng.choice(np.array([0.5, 1.0, 2.0, -1.0, 0.25], np.float32), tiles)
        X, alpha = cp.asarray(xh), cp.asarray(al)
        Y = cp.empty((tiles, 16, 16), cp.float32)
        grid = min(blocks, -(-tiles // WARPS))
        ref = al[:, None, None].astype(np.float64) * np.transpose(xh, (0, 2, 1)).astype(np.float64)

        def go(name):
            return lambda: launch(
                k[name],
                (grid, 1, 1),
                (32 * WARPS, 1, 1),
                0,
                stream,
                X.data.ptr,
                alpha.data.ptr,
                Y.data.ptr,
                np.int32(tiles),
            )

        def check():
            res = cp.asnumpy(Y)
            Y.fill(np.nan)
            return _rel(res, ref)

        Y.fill(np.nan)
        pair(
            "identity",
            tiles,
            go("scaled_transpose<true>"),
            go("scaled_transpose<false>"),
            check,
            "alpha_t X_t^T via (alpha_t I) x X_t^T, 16x16 FP16 tiles",
        )
        del X, Y, alpha

    # -- error-corrected GEMM ------------------------------------------------------------------
    for n in pick(EC_SIZES):
        A = cp.random.uniform(-1, 1, (n, n), dtype=cp.float32)
        Bm = cp.random.uniform(-1, 1, (n, n), dtype=cp.float32)
        C = cp.empty((n, n), cp.float32)
        rows = rng.integers(0, n, 64)
        cols = rng.integers(0, n, 64)
        a_rows = cp.asnumpy(A[cp.asarray(rows)]).astype(np.float64)
        b_cols = cp.asnumpy(Bm[:, cp.asarray(cols)]).astype(np.float64)
        ref = np.einsum("ik,ki->i", a_rows, b_cols)  # 64 sampled entries, FP64
        grid = (n // 64) ** 2

        def go(name):
            return lambda: launch(
                k[name], (grid, 1, 1), (128, 1, 1), 0, stream, np.int32(n), A.data.ptr, Bm.data.ptr, C.data.ptr
            )

        def check():
            res = cp.asnumpy(C[cp.asarray(rows), cp.asarray(cols)])
            C.fill(np.nan)
            return _rel(res, ref)

        C.fill(np.nan)
        pair(
            "ec_gemm",
            n,
            go("ec_gemm<true>"),
            go("ec_gemm<false>"),
            check,
            "n x n x n FP32 via FP16 hi/lo split (3 products); error at 64 sampled entries vs FP64",
        )
        del A, Bm, C
        cp.get_default_memory_pool().free_all_blocks()

    # -- skew ------------------------------------------------------------------------------------
    src_h = rng.uniform(-1, 1, (2, 16, 16)).astype(np.float16)
    src = cp.asarray(src_h)
    o = cp.empty((blocks * WARPS, 16, 16), cp.float32)
    iters = SKEW_ITERS
    a64 = src_h.astype(np.float64)
    # acc = sum over iterations of tile[it & 1] @ tile[0]
    ref_one = ((iters + 1) // 2) * a64[0] @ a64[0] + (iters // 2) * a64[1] @ a64[0]
    times = {}
    for mode, label in ((0, "no_skew"), (1, "skew"), (2, "load_matrix_sync")):
        o.fill(np.nan)
        ms, nrep, lo, hi = _time(
            lambda: launch(
                k[f"smem_load<{mode}>"],
                (blocks, 1, 1),
                (32 * WARPS, 1, 1),
                0,
                stream,
                src.data.ptr,
                o.data.ptr,
                np.int32(iters),
            ),
            reps,
            budget_s,
        )
        err = _rel(cp.asnumpy(o), np.broadcast_to(ref_one, o.shape))
        times[label] = ms
        out.append(
            WmmaExtRecord(
                gpu.name,
                "skew",
                label,
                iters,
                ms,
                None,
                err,
                nrep,
                f"{blocks * WARPS} warps x {iters} FP16 16x16 loads from a shared tile with ldm 16",
                lo,
                hi,
            )
        )
    for r in out[-3:]:
        r.speedup = times["no_skew"] / r.ms
        _progress(
            f"skew      {r.variant:16s}: {r.ms:.4f} ms ({r.ms_min:.4f}-{r.ms_max:.4f}), {r.speedup:.3f}x of no_skew, err {r.rel_error:.1e}",
            quiet,
        )
    return out


def table(records: list[dict]) -> str:
    head = (
        f"{'experiment':10s} {'variant':16s} {'size':>8s} {'ms':>10s} {'speedup':>8s} {'rel err':>9s} {'reps':>4s}"
        f" {'min-max ms':>21s}"
    )
    lines = [head, "-" * len(head)]
    for r in records:
        ms = "-" if r["ms"] is None else f"{r['ms']:10.4f}"
        sp = "-" if r["speedup"] is None else f"{r['speedup']:7.3f}x"
        err = "-" if r["rel_error"] is None else f"{r['rel_error']:9.1e}"
        spread = "-" if r.get("ms_min") is None or r.get("ms_max") is None else f"{r['ms_min']:.4f}-{r['ms_max']:.4f}"
        lines.append(
            f"{r['experiment']:10s} {r['variant']:16s} {r['size']:8d} {ms:>10s} {sp:>8s} {err:>9s} "
            f"{r['reps']:4d} {spread:>21s}"
        )
    return "\n".join(lines)
