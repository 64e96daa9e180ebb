"""The autotuner: ``gemmlab tune`` writes the tables gemmlab.core.tables reads.

``gemmlab tune`` (or :func:`tune`) takes each shape of a suite, runs every
candidate configuration of the chosen kernels once on poisoned output and
compares it with an FP64 reference -- a candidate that computes wrongly is
recorded as such and can never win -- then times the correct ones with the
benchmark harness, and keeps the fastest per kernel and overall.

Progress is saved as it goes (``<cache>/tuned/<gpu>.progress.json``), so an
interrupted run resumes where it stopped when started again with the same
command; the saved timings are dropped when a kernel source changes.  The
winners go to ``<cache>/tuned/<gpu>.json``.  The package ships a table measured
on an H100 (``gemmlab/data/tuned/``); a user's own table overrides it shape
by shape.  A table answers "which configuration for this shape" with the tuned
shape nearest to it (in log2 M, log2 N, log2 K).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from ..kernels import registry
from ..kernels.spec import KernelSpec
from ..core.tables import (
    TunedTable,
    _read_json,
    _write_json_atomic,
    progress_path,
    reload,
    shape_key,
    sources_digest,
    user_table_path,
)

DEFAULT_KERNELS = ("vectorized", "warptile", "pipelined")
DEFAULT_SIZES = [
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (16384, 4096, 4096),
    (4096, 4096, 256),
    (256, 4096, 4096),
    (8192, 64, 8192),
    (64, 8192, 8192),
]
SCREEN_REPS = 3  # timed runs per candidate in the first pass
FINAL_REPS = 4  # timed runs per round for the finalists
FINAL_ROUNDS = 3  # interleaved rounds over all finalists of a shape
CUBLAS_REPS = 10  # timed runs of cuBLAS per shape
FINALISTS = 4  # per kernel and shape
CUTOFF = 1.3  # a candidate this much slower than the best so far gets one timed run
TOLERANCE = 1e-5  # relative Frobenius error vs FP64 a candidate must meet


def candidate_key(kernel: str, params: dict) -> str:
    return kernel + ":" + ",".join(f"{k}={v}" for k, v in params.items())


# -- the search space ---------------------------------------------------------


def candidates(spec: KernelSpec, M: int, N: int, K: int, sm_count: int, batch: int = 1) -> list[dict]:
    """The configurations of ``spec`` worth timing at M x N x K: every legal tile
    configuration, and split-K factors only where they can help -- when the
    output (``batch`` products of it) has fewer tiles than the GPU has SMs, up to
    about two waves of blocks, with at least four K-steps per split."""
    out = []
    for cfg in spec.configurations():
        s = spec.splits(cfg)
        if s > 1:
            tiles = -(-M // cfg["BM"]) * -(-N // cfg["BN"]) * batch
            if tiles >= sm_count or tiles * s > 2 * sm_count + tiles or -(-K // cfg.get("BK", 64)) < 4 * s:
                continue
        out.append(cfg)
    return out


# Each shape is tuned in the layouts and batches it is used in: (ops, batch),
# ops "NN", "NT", "TN" or "TT" (T: that operand a transposed view).
DEFAULT_USES = (("NN", 1),)


def progress_key(M: int, N: int, K: int, uses=DEFAULT_USES) -> str:
    """The key of a shape's measurements: its table key, and the uses it was timed in."""
    uses = tuple(uses)
    if uses == DEFAULT_USES:
        return shape_key(M, N, K)
    return shape_key(M, N, K) + " " + ",".join(ops + (f"x{batch}" if batch > 1 else "") for ops, batch in uses)


# -- tables -------------------------------------------------------------------

# -- the tuner ----------------------------------------------------------------


class _Progress:
    """Measurements so far, saved at most once a second and on every exit."""

    def __init__(self, path: Path, gpu: str, fresh: bool):
        self.path = path
        self.digest = sources_digest()
        data = None if fresh else _read_json(path)
        self.resumed = 0
        if data and data.get("gpu") == gpu and data.get("sources") == self.digest:
            self.results = data.get("results", {})
            self.resumed = sum(len(v.get("candidates", {})) for v in self.results.values())
        else:
            self.results = {}
        self.gpu = gpu
        self._saved = 0.0

    def shape(self, key: str) -> dict:
        return self.results.setdefault(key, {"candidates": {}})

    def save(self, force: bool = False) -> None:
        if force or time.monotonic() - self._saved > 1.0:
            _write_json_atomic(self.path, {"gpu": self.gpu, "sources": self.digest, "results": self.results})
            self._saved = time.monotonic()


def _finalists(name: str, results: dict) -> list[str]:
    """The FINALISTS fastest correct candidates of kernel ``name`` by their first timing."""
    mine = sorted((r["ms"], ck) for ck, r in results.items() if ck.split(":", 1)[0] == name and r.get("status") == "ok")
    return [ck for _, ck in mine[:FINALISTS]]


def _winners(kernels, shape: dict) -> dict:
    """Fastest finalist per kernel (by its second, longer timing) and overall."""
    per_kernel = {}
    results = shape["candidates"]
    for name in kernels:
        timed = [(results[ck].get("final_ms") or results[ck]["ms"], ck) for ck in _finalists(name, results)]
        if timed:
            ms, ck = min(timed)
            per_kernel[name] = {"kernel": name, "params": results[ck]["params"], "ms": ms}
    out = {"kernels": per_kernel}
    if per_kernel:
        out["best"] = min(per_kernel.values(), key=lambda w: w["ms"])
    return out


class _Use:
    """One use of a shape on the GPU: ``batch`` products with op(A), op(B)
    stored as ``ops`` says (a 'T' operand is a transposed view of a contiguous
    array), C row-major; the FP64 reference kept on the GPU."""

    def __init__(self, M: int, N: int, K: int, ops: str, batch: int, rs):
        import cupy as cp

        def stored(rows, cols, op):  # op(X) rows x cols; its layout in memory
            shape = (batch, rows, cols) if op == "N" else (batch, cols, rows)
            x = rs.random_sample(shape, dtype=cp.float32)
            x *= 2
            x -= 1
            return x, (x if op == "N" else x.transpose(0, 2, 1)), shape[2]

        self.ops, self.batch = ops, batch
        self.a_mem, a, lda = stored(M, K, ops[0])
        self.b_mem, b, ldb = stored(K, N, ops[1])
        self.c = cp.empty((batch, M, N), cp.float32)
        # The FP64 reference of the first, middle and last matrices only: a wrong
        # candidate is wrong in every matrix's tiles, and a whole batch's reference can
        # outgrow the GPU (attention's 128 x 4096 x 4096 products: 17 GB).
        self.checked = sorted({0, batch // 2, batch - 1})
        self.ref = cp.matmul(a[self.checked].astype(cp.float64), b[self.checked].astype(cp.float64))
        self.views = (a, b)
        self.lds = (lda, ldb, N)
        self.strides = (M * K, K * N, M * N) if batch > 1 else (0, 0, 0)

    def run(self, p, gpu, stream) -> None:
        from ..core.executor import run_plan

        lda, ldb, ldc = self.lds
        run_plan(
            p,
            gpu,
            stream,
            self.a_mem.data.ptr,
            lda,
            self.b_mem.data.ptr,
            ldb,
            self.c.data.ptr,
            ldc,
            1.0,
            0.0,
            batch=self.batch,
            strides=self.strides,
        )

    def cublas(self) -> None:
        import cupy as cp

        a, b = self.views
        if self.batch == 1:  # a single product as users call it, 2-D views (3-D ones read slow: benchmarks/NOTES.md)
            cp.matmul(a[0], b[0], out=self.c[0])
        else:
            cp.matmul(a, b, out=self.c)


def tune(
    kernels=DEFAULT_KERNELS,
    sizes=DEFAULT_SIZES,
    *,
    uses: dict | None = None,
    fresh: bool = False,
    jobs: int | None = None,
    output: str | Path | None = None,
    quiet: bool = False,
    seed: int = 0,
) -> TunedTable:
    """Tune ``kernels`` at each of ``sizes`` on GPU 0 and write the winners.

    ``uses`` maps a shape (M, N, K) to the (ops, batch) pairs it is used in
    (default: row-major operands, one product); a candidate's time is the sum
    over them, so the table's one entry for the shape serves the uses together.
    Returns the table of this run's shapes.  Interrupting (Ctrl-C) keeps every
    measurement so far; calling again with the same arguments resumes.
    """
    import cupy as cp
    import numpy as np

    from ..core.planner import contiguous_aligned16, plan
    from ..runtime.device import make_current
    from .bench.timing import time_gpu
    from ..runtime.compile import precompile
    from ..runtime.device import gpu_info
    from .verify import compare

    specs = [registry.get(k) for k in kernels]
    gpu_info(0)  # without a GPU: gemmlab's NoGPUError, before CuPy touches the driver
    gpu = gpu_info(cp.cuda.Device().id)
    make_current(gpu.ordinal)
    log = (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    prog = _Progress(progress_path(gpu.slug), gpu.name, fresh)
    if prog.resumed:
        log(f"resuming: {prog.resumed} measurements from {prog.path}")
    uses = (
        {tuple(s): tuple(uses.get(tuple(s), DEFAULT_USES)) for s in sizes}
        if uses
        else {tuple(s): DEFAULT_USES for s in sizes}
    )

    def plans_for(name: str, M: int, N: int, K: int, params: dict) -> tuple:
        """The candidate planned for each use of the shape (a batch that fills the GPU drops split-K)."""
        return tuple(
            plan(
                name,
                M,
                N,
                K,
                aligned16=contiguous_aligned16(M, N, K, ops[0], ops[1]),
                op_a=ops[0],
                op_b=ops[1],
                batch=batch,
                sm_count=gpu.sm_count,
                **params,
            )
            for ops, batch in uses[(M, N, K)]
        )

    def same_launches(plans: tuple) -> tuple:
        """What a candidate runs: its code and launch shape in each use.  A parameter
        that changes neither there (REG_TRANSPOSE of a layout without rows along K) gives
        a duplicate, timed once: the one with the kernel's default value, so that the
        table does not carry a moot choice to the other layouts it answers for."""
        return tuple((p.name_expression, p.spec.launch(p.params, p.problem)) for p in plans)

    def defaults_kept(plans: tuple) -> int:
        d = plans[0].spec.defaults()
        return sum(plans[0].params.get(k) == v for k, v in d.items())

    plan_sets = {}
    for M, N, K in sizes:
        fewest = min(batch for _, batch in uses[(M, N, K)])
        distinct = {}
        for s in specs:
            for cfg in candidates(s, M, N, K, gpu.sm_count, fewest):
                plans = plans_for(s.name, M, N, K, cfg)
                key = same_launches(plans)
                if key not in distinct or defaults_kept(plans) > defaults_kept(distinct[key]):
                    distinct[key] = plans
        plan_sets[(M, N, K)] = list(distinct.values())
    todo = {(p.spec.source_path, p.name_expression) for ps in plan_sets.values() for pl in ps for p in pl}
    log(
        f"tuning {', '.join(kernels)} on {gpu.name}: {sum(map(len, plan_sets.values()))} candidates "
        f"over {len(sizes)} shapes; compiling {len(todo)} instantiations"
    )
    precompile(sorted(todo), gpu.arch, jobs=jobs, log=log)

    rs = cp.random.RandomState(seed)
    stream = cp.cuda.get_current_stream().ptr
    t0 = time.time()
    try:
        for si, ((M, N, K), candidates_) in enumerate(plan_sets.items(), 1):
            key = progress_key(M, N, K, uses[(M, N, K)])
            shape = prog.shape(key)
            results = shape["candidates"]
            pending = [pl for pl in candidates_ if candidate_key(pl[0].spec.name, pl[0].params) not in results]
            if not pending and "final_done" in shape:
                log(f"[shape {si}/{len(sizes)}] {key}: done earlier")
                continue
            on_gpu = [_Use(M, N, K, ops, batch, rs) for ops, batch in uses[(M, N, K)]]

            def runner(plans):
                return lambda: [u.run(p, gpu, stream) for p, u in zip(plans, on_gpu)]

            for i, plans in enumerate(pending, 1):
                ckey = candidate_key(plans[0].spec.name, plans[0].params)
                try:
                    errs = []
                    for p, u in zip(plans, on_gpu):
                        u.c.fill(np.nan)
                        u.run(p, gpu, stream)
                        e = compare(u.c[u.checked], u.ref)  # and every matrix written, finite:
                        unwritten = int(u.c.size - cp.count_nonzero(cp.isfinite(u.c)))
                        errs.append(dataclasses.replace(e, nonfinite=max(e.nonfinite, unwritten)))
                    err = max(errs, key=lambda e: (e.nonfinite, e.rel_fro))
                except Exception as exc:  # a launch the GPU refuses: record it, go on
                    results[ckey] = {"params": plans[0].params, "status": f"error: {type(exc).__name__}: {exc}"}
                    continue
                if not err.ok(TOLERANCE):
                    results[ckey] = {
                        "params": plans[0].params,
                        "status": "wrong",
                        "rel_error": err.rel_fro,
                        "nonfinite": err.nonfinite,
                    }
                    log(f"  WRONG {ckey} at {key}: rel error {err.rel_fro:.2e}, {err.nonfinite} non-finite")
                    continue
                best = min((r["ms"] for r in results.values() if r.get("ms")), default=None)
                t = time_gpu(
                    runner(plans),
                    l2_bytes=gpu.l2_bytes,
                    reps=SCREEN_REPS,
                    warmup=1,
                    budget_s=0.3,
                    cutoff_ms=CUTOFF * best if best else None,
                )
                results[ckey] = {"params": plans[0].params, "status": "ok", "rel_error": err.rel_fro, "ms": t.ms}
                prog.save()
                if i % 25 == 0 or i == len(pending):
                    log(f"[shape {si}/{len(sizes)}] {key}: {i}/{len(pending)} candidates ({time.time() - t0:.0f} s)")
            # Finalists: the best few per kernel, timed again in interleaved rounds, so
            # that a slow spell of the GPU (clocks, a neighbour) hits them all alike --
            # cuBLAS too.  (Timed once before the candidates, on a GPU that had idled while
            # the operands were built, cuBLAS read slow on short products: benchmarks/NOTES.md.)
            finalists = [ck for spec in specs for ck in _finalists(spec.name, results) if "final_ms" not in results[ck]]
            samples = {ck: [] for ck in finalists}
            reference = []
            for _ in range(FINAL_ROUNDS):
                reference += time_gpu(
                    lambda: [u.cublas() for u in on_gpu], l2_bytes=gpu.l2_bytes, reps=CUBLAS_REPS, budget_s=0.3
                ).ms_all
                for ck in finalists:
                    plans = plans_for(ck.split(":", 1)[0], M, N, K, results[ck]["params"])
                    samples[ck] += time_gpu(runner(plans), l2_bytes=gpu.l2_bytes, reps=FINAL_REPS, budget_s=0.3).ms_all
            for ck in finalists:
                results[ck]["final_ms"] = float(np.median(samples[ck]))
            shape["cublas_ms"] = float(np.median(reference))
            shape["final_done"] = True
            shape.update(_winners(kernels, shape))
            prog.save(force=True)
            best = shape.get("best")
            if best:
                log(
                    f"[shape {si}/{len(sizes)}] {key}: best {candidate_key(best['kernel'], best['params'])} "
                    f"{best['ms']:.3f} ms = {100 * shape['cublas_ms'] / best['ms']:.1f}% of cuBLAS"
                )
            del on_gpu
            cp.get_default_memory_pool().free_all_blocks()
    except KeyboardInterrupt:
        prog.save(force=True)
        log(f"interrupted: measurements saved in {prog.path}; run the same command again to resume")
        raise
    prog.save(force=True)

    shapes = {}
    for M, N, K in sizes:
        s = prog.results[progress_key(M, N, K, uses[(M, N, K)])]
        entry = {"cublas_ms": s.get("cublas_ms"), **_winners(kernels, s)}
        flops = 2.0 * M * N * K * sum(batch for _, batch in uses[(M, N, K)])
        for w in [entry.get("best"), *entry["kernels"].values()]:
            if w:
                w["tflops"] = flops / (w["ms"] * 1e-3) / 1e12
        if uses[(M, N, K)] != DEFAULT_USES:
            entry["uses"] = [{"ops": ops, "batch": batch} for ops, batch in uses[(M, N, K)]]
        shapes[shape_key(M, N, K)] = entry
    table = TunedTable(gpu.name, shapes)
    target = Path(output) if output else user_table_path(gpu.slug)
    merged = (_read_json(target) or {}).get("shapes", {}) if not output else {}
    merged.update(shapes)
    _write_json_atomic(target, {**table.to_json(), "gpu": gpu.name, "shapes": merged})
    reload()
    log(f"wrote {target}")
    return table
