"""Every rung (batched_small on batches; and rung 8's, wgmma's and ec_wgmma's split-K, rung 8's 256-wide tiles and staging copies, wgmma's deep rings, mma_pipelined's
column-major layouts) at edge shapes, with both
the 16-byte and the scalar (unaligned) variants: the workload compute-sanitizer
runs (scripts/sanitize.sh).  Also checks each result against FP64, so a run that
the sanitizer passes but that computes wrongly still fails.

    compute-sanitizer --tool memcheck python3 scripts/sanitize.py
"""

import sys

if sys.argv[1:2] in (["-h"], ["--help"]):  # no arguments: the whole workload runs
    print(__doc__)
    sys.exit(0)

import cupy as cp  # noqa: E402
import numpy as np

import gemmlab
import gemmlab.runtime.device
from gemmlab.kernels import registry
from gemmlab.tools.verify import compare, random_matrix, reference

SHAPES = [(1, 1, 1), (7, 13, 5), (33, 65, 17), (129, 67, 33), (5, 300, 260)]
CASES = [(s.name, {}) for s in registry.ladder("simt")] + [
    ("pipelined", {"BM": 128, "BN": 256, "BK": 8, "WM": 64, "WN": 64, "WNITER": 4, "TM": 8, "STAGES": 4}),
    ("pipelined", {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4, "STAGES": 3, "SPLITK": 4}),
]

rng = np.random.default_rng(0)
bad = 0
for M, N, K in SHAPES:
    for misalign in (False, True):
        a = cp.asarray(random_matrix(M, K, "uniform", rng))
        if misalign:  # a view 4 bytes into its buffer: the scalar variants run
            a = cp.asarray(random_matrix(1, M * K + 1, "uniform", rng)).ravel()[1:].reshape(M, K)
        b = cp.asarray(random_matrix(K, N, "uniform", rng))
        c0 = cp.asarray(random_matrix(M, N, "uniform", rng))
        ref = reference(a, b, 0.5, 2.0, c0)
        for name, params in CASES:
            out = c0.copy()
            gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel=name, **params)
            err = compare(out, ref)
            if not err.ok(1e-5):
                bad += 1
                print(f"WRONG {name} {params} {M}x{N}x{K} misaligned={misalign}: {err}", flush=True)
# Rung 8's staging copy (pack32 then the 16-byte variant, split over K): a product whose A rows
# (K = 4099 floats) are off the 16-byte grid, which auto stages; and a batch of odd C (65 columns)
# stored through shared memory by the 4-byte variant, beta reading C back.
staged_calls = 0
for M, N, K, batch in ((64, 128, 4099, 1), (33, 65, 17, 3)):
    a = [random_matrix(M, K, "uniform", rng) for _ in range(batch)]
    b = [random_matrix(K, N, "uniform", rng) for _ in range(batch)]
    c0 = [random_matrix(M, N, "uniform", rng) for _ in range(batch)]
    out = cp.asarray(np.stack(c0) if batch > 1 else c0[0])
    gemmlab.matmul(cp.asarray(np.stack(a) if batch > 1 else a[0]), cp.asarray(np.stack(b) if batch > 1 else b[0]),
                   out=out, alpha=0.5, beta=2.0)  # fmt: skip
    staged_calls += 1
    if batch == 1 and not gemmlab.last_plan().problem.stage:
        bad += 1
        print(f"NOT STAGED {M}x{N}x{K}: {gemmlab.last_plan().describe()}", flush=True)
    for z, got in enumerate(out.reshape(batch, M, N)):
        err = compare(got, reference(a[z], b[z], 0.5, 2.0, c0[z]))
        if not err.ok(1e-5):
            bad += 1
            print(f"WRONG rung 8 {batch}x{M}x{N}x{K} matrix {z} (staged or shared-memory C): {err}", flush=True)
# The tensor-core rungs, on 16-bit and TF32 inputs (bound: FP64 on the rounded
# inputs, as in tests/test_tensor.py).
MMA_SMALL = {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 4}
TENSOR = [(s.name, {}) for s in registry.ladder("tensor") if "float16" in s.dtypes] + [("mma_pipelined", MMA_SMALL)]
if registry.get("wgmma").builds_for(gemmlab.runtime.device.gpu_info().arch):  # the deep rings of few rows
    TENSOR += [("wgmma", {"BM": 64, "BN": 64, "STAGES": 12}), ("wgmma", {"BM": 64, "BN": 128, "STAGES": 8})]
TC_DTYPES = [(np.float16, "float32", None), (np.float16, "float16", None), (np.float32, "float32", "tf32")]
# 130 x 264 x 200: rows a multiple of 16 bytes, so mma_pipelined's 16-byte cp.async
# variant runs (with requests past the matrix edges: src-size 0).
TC_SHAPES = SHAPES + [(130, 264, 200)]
for M, N, K in TC_SHAPES:
    for dt, out_dt, precision in TC_DTYPES:
        a = cp.asarray(random_matrix(M, K, "uniform", rng)).astype(dt)
        b = cp.asarray(random_matrix(K, N, "uniform", rng)).astype(dt)
        c0 = cp.asarray(random_matrix(M, N, "uniform", rng)).astype(out_dt)
        ref = reference(a.astype(np.float64), b.astype(np.float64), 0.5, 2.0, c0.astype(np.float64))
        for name, params in TENSOR:
            out = c0.copy()
            gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel=name, precision=precision, **params)
            err = compare(out.astype(np.float64), ref)
            if not err.ok(3e-3 if precision else 2e-3):
                bad += 1
                print(f"WRONG {name} {params} {np.dtype(dt).name}->{out_dt} {M}x{N}x{K}: {err}", flush=True)
# The error-corrected FP32 rungs, every precision (fp32_tc and fp16_ec_scaled run
# the exponent histogram first), aligned and misaligned; ec_wgmma split over K too (with
# fp32_tc, each candidate's reduction reads the choice record).
EC = [(s.name, {}) for s in registry.ladder("ec")]
if registry.get("ec_wgmma").builds_for(gemmlab.runtime.device.gpu_info().arch):
    EC += [("ec_wgmma", {"SPLITK": 3}), ("ec_wgmma", {"BN": 96, "FOLD": 0, "STAGES": 4})]
EC_PRECISIONS = ("fp16_ec", "tf32_ec", "fp16_ec_scaled", "fp32_tc")
for M, N, K in SHAPES:
    for misalign in (False, True):
        a = cp.asarray(random_matrix(M, K, "uniform", rng))
        if misalign:
            a = cp.asarray(random_matrix(1, M * K + 1, "uniform", rng)).ravel()[1:].reshape(M, K)
        b = cp.asarray(random_matrix(K, N, "uniform", rng))
        c0 = cp.asarray(random_matrix(M, N, "uniform", rng))
        ref = reference(a, b, 0.5, 2.0, c0)
        for name, params in EC:
            for precision in EC_PRECISIONS:
                out = c0.copy()
                gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel=name, precision=precision, **params)
                err = compare(out, ref)
                if not err.ok(1e-6):
                    bad += 1
                    print(f"WRONG {name} {params} {precision} {M}x{N}x{K} misaligned={misalign}: {err}", flush=True)
# ec_wgmma's FOLD sums NaN elements again from A and B (ec_dot_again): Inf in a
# batch of transposed A, B row-major, split over K, each stored layout's indexing read.
fold_calls = 0
if registry.get("ec_wgmma").builds_for(gemmlab.runtime.device.gpu_info().arch):
    for ta, tb in ((True, False), (False, True)):
        nb, M, N, K = 2, 70, 40, 300
        a = random_matrix(nb * M, K, "uniform", rng).reshape(nb, M, K)
        b = random_matrix(nb * K, N, "uniform", rng).reshape(nb, K, N)
        b[:, :, :4] = np.round(b[:, :, :4] * 64) / 64  # exact in FP16: lo = 0, so Inf * 0 in the parts
        a[1, 5, 7] = np.inf
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        da = cp.asarray(np.ascontiguousarray(a.transpose(0, 2, 1))).transpose(0, 2, 1) if ta else cp.asarray(a)
        db = cp.asarray(np.ascontiguousarray(b.transpose(0, 2, 1))).transpose(0, 2, 1) if tb else cp.asarray(b)
        out = gemmlab.matmul(da, db, precision="fp32_tc", kernel="ec_wgmma", SPLITK=3).get()
        fold_calls += 1
        same = (np.isnan(out) == np.isnan(ref)).all() and (np.isinf(out) == np.isinf(ref)).all()
        fin = np.isfinite(ref)
        if not same or np.abs(out[fin] - ref[fin]).max() > 1e-5:
            bad += 1
            print(f"WRONG ec_wgmma FOLD non-finite T{int(ta)}{int(tb)}", flush=True)
# gemv in every layout (op(B) column-major: its 16-byte path along K; row-major:
# shared-memory sums), 16-bit and FP32, aligned (K, N multiples of 8) and not,
# more rows than one pass holds (M = 33 > MT); the row path's narrow blocks at M <= 4;
# 16 rows aligned (float32: two 16-byte loads a column, a chunk of 256 and a partial one).
GEMV_SHAPES = [(1, 13, 5), (3, 264, 200), (33, 65, 17), (16, 130, 264), (16, 136, 264)]
GEMV_DTYPES = [(np.float32, 1e-5), (np.float16, 2e-3)]
gemv_calls = 0
for M, N, K in GEMV_SHAPES:
    for dt, tol in GEMV_DTYPES:
        for ta, tb in ((False, False), (False, True), (True, False), (True, True)):
            a = cp.asarray(random_matrix(K, M, "uniform", rng) if ta else random_matrix(M, K, "uniform", rng)).astype(
                dt
            )
            b = cp.asarray(random_matrix(N, K, "uniform", rng) if tb else random_matrix(K, N, "uniform", rng)).astype(
                dt
            )
            a_op, b_op = (a.T if ta else a), (b.T if tb else b)
            c0 = cp.asarray(random_matrix(M, N, "uniform", rng)).astype(dt)
            ref = reference(a_op.astype(np.float64), b_op.astype(np.float64), 0.5, 2.0, c0.astype(np.float64))
            out = c0.copy()
            gemmlab.matmul(a_op, b_op, out=out, alpha=0.5, beta=2.0, kernel="gemv")
            gemv_calls += 1
            err = compare(out.astype(np.float64), ref)
            if not err.ok(tol):
                bad += 1
                print(f"WRONG gemv {np.dtype(dt).name} {M}x{N}x{K} T{int(ta)}{int(tb)}: {err}", flush=True)
            # op(B) row-major with narrow blocks (a warp across 4 or 8 rows, shuffled sums), split or not
            if tb or M > 4:
                continue
            for lanes in (8, 4):
                for split in (1, 3):
                    out = c0.copy()
                    gemmlab.matmul(
                        a_op,
                        b_op,
                        out=out,
                        alpha=0.5,
                        beta=2.0,
                        kernel="gemv",
                        MT=1 << (M - 1).bit_length(),
                        LANES=lanes,
                        SPLITK=split,
                    )
                    gemv_calls += 1
                    err = compare(out.astype(np.float64), ref)
                    if not err.ok(tol):
                        bad += 1
                        print(
                            f"WRONG gemv LANES={lanes} SPLITK={split} {np.dtype(dt).name} {M}x{N}x{K} "
                            f"T{int(ta)}0: {err}",
                            flush=True,
                        )
# wgmma with a batch in one launch (sm_90a only): a dense batch (TMA-store epilogue)
# and one whose C has gaps between its matrices (stores from registers).
wgmma_calls = 0
if registry.get("wgmma").builds_for(gemmlab.runtime.device.gpu_info().arch):
    for nb, M, N, K in ((3, 7, 13, 8), (4, 130, 264, 200)):
        a = cp.asarray(rng.uniform(-1, 1, (nb, M, K))).astype(np.float16)
        b = cp.asarray(rng.uniform(-1, 1, (nb, K, N))).astype(np.float16)
        ref = cp.matmul(a.astype(np.float64), b.astype(np.float64))
        for gap in (0, 8):
            buf = cp.full((nb, M + gap, N), np.nan, dtype=np.float16)
            out = buf[:, :M, :]
            gemmlab.matmul(a, b, out=out, kernel="wgmma")
            wgmma_calls += 1
            err = compare(out.astype(np.float64), ref)
            if not err.ok(2e-3) or (gap and not bool(cp.isnan(buf[:, M:, :]).all())):
                bad += 1
                print(f"WRONG wgmma batch of {nb} {M}x{N}x{K} gap={gap}: {err}", flush=True)


# mma_pipelined in the column-major layouts (ldmatrix / .trans on tiles copied as
# stored), 16-byte rows and misaligned views (narrow copies); wgmma split over K,
# with a slice that ends inside a K-step and 16-bit outputs through the reduction.
def stored(rows, cols, off):
    """A rows x cols float16 array `off` elements into its buffer (1: a misaligned view)."""
    flat = cp.asarray(random_matrix(1, rows * cols + off, "uniform", rng)).astype(np.float16)
    return flat.ravel()[off:].reshape(rows, cols)


layout_calls = 0
for M, N, K, off in ((33, 65, 17, 0), (130, 264, 200, 0), (130, 264, 200, 1)):
    for ta, tb in ((True, False), (False, True), (True, True)):
        a = stored(K, M, off).T if ta else stored(M, K, off)
        b = stored(N, K, off).T if tb else stored(K, N, off)
        c0 = cp.asarray(random_matrix(M, N, "uniform", rng)).astype(np.float16)
        ref = reference(a.astype(np.float64), b.astype(np.float64), 0.5, 2.0, c0.astype(np.float64))
        for name, params in (("mma_pipelined", {}), ("mma_pipelined", MMA_SMALL)):
            out = c0.copy()
            gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel=name, **params)
            layout_calls += 1
            err = compare(out.astype(np.float64), ref)
            if not err.ok(2e-3):
                bad += 1
                print(f"WRONG {name} {params} T{int(ta)}{int(tb)} {M}x{N}x{K} offset={off}: {err}", flush=True)
if registry.get("wgmma").builds_for(gemmlab.runtime.device.gpu_info().arch):
    for M, N, K, splits in ((7, 13, 200, 3), (130, 264, 1000, 4)):
        a = cp.asarray(random_matrix(M, K, "uniform", rng)).astype(np.float16)
        b = cp.asarray(random_matrix(K, N, "uniform", rng)).astype(np.float16)
        c0 = cp.asarray(random_matrix(M, N, "uniform", rng)).astype(np.float16)
        ref = reference(a.astype(np.float64), b.astype(np.float64), 0.5, 2.0, c0.astype(np.float64))
        out = c0.copy()
        gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel="wgmma", BM=64, BN=128, SPLITK=splits)
        layout_calls += 2  # the GEMM and the reduction
        err = compare(out.astype(np.float64), ref)
        if not err.ok(2e-3):
            bad += 1
            print(f"WRONG wgmma SPLITK={splits} {M}x{N}x{K}: {err}", flush=True)
# wgmma's staging copy of both operands in one pack16 launch (stored rows of 681 and 2795, and of
# 3947, elements: off the 16-byte grid), auto's choice; and gemv_mma at a few rows, its rows of x
# and W padded to the 16-byte grid, K ending inside a step.
if registry.get("wgmma").builds_for(gemmlab.runtime.device.gpu_info().arch):
    for M, N, K, ta, tb in ((681, 2795, 35, True, False), (199, 127, 3947, False, True)):
        a = stored(K, M, 0).T if ta else stored(M, K, 0)
        b = stored(N, K, 0).T if tb else stored(K, N, 0)
        c0 = cp.asarray(random_matrix(M, N, "uniform", rng)).astype(np.float16)
        ref = reference(a.astype(np.float64), b.astype(np.float64), 0.5, 2.0, c0.astype(np.float64))
        out = c0.copy()
        gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0)
        layout_calls += 2  # the copies (one launch) and the GEMM
        plan = gemmlab.last_plan()
        err = compare(out.astype(np.float64), ref)
        if plan.spec.name != "wgmma" or not plan.problem.stage or not err.ok(2e-3):
            bad += 1
            print(f"WRONG staged wgmma T{int(ta)}{int(tb)} {M}x{N}x{K} ({plan.describe()}): {err}", flush=True)
if registry.get("gemv_mma").builds_for(gemmlab.runtime.device.gpu_info().arch):
    for M, N, K in ((5, 331, 1037), (13, 200, 4104), (20, 17, 520)):
        padded = -(-K // 8) * 8  # rows on the 16-byte grid, K ending inside them
        a, b = stored(M, padded, 0)[:, :K], stored(N, padded, 0)[:, :K].T
        c0 = cp.asarray(random_matrix(M, N, "uniform", rng)).astype(np.float16)
        ref = reference(a.astype(np.float64), b.astype(np.float64), 0.5, 2.0, c0.astype(np.float64))
        out = c0.copy()
        gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel="gemv_mma", MT=8 if M <= 8 else 16)
        layout_calls += 1
        err = compare(out.astype(np.float64), ref)
        if not err.ok(2e-3):
            bad += 1
            print(f"WRONG gemv_mma {M}x{N}x{K}: {err}", flush=True)
# batched_small (and, in 16-bit, batched_small_mma): batches of small matrices, each a block's (C within one tile, and past it:
# two blocks a matrix), K of one element and past one staged chunk, one operand misaligned.
small_calls = 0
for M, N, K, off in ((49, 49, 32, 0), (7, 65, 33, 1), (64, 3, 1, 0)):
    for dt in (np.float32, np.float16):
        flat = cp.asarray(random_matrix(1, 3 * M * K + off, "uniform", rng)).astype(dt)
        a = flat.ravel()[off:].reshape(3, M, K)
        b = cp.asarray(random_matrix(3 * K, N, "uniform", rng)).astype(dt).reshape(3, K, N)
        c0 = cp.asarray(random_matrix(3 * M, N, "uniform", rng)).astype(dt).reshape(3, M, N)
        ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + 2.0 * c0.astype(np.float64)
        mma = dt == np.float16 and registry.get("batched_small_mma").builds_for(gemmlab.runtime.device.gpu_info().arch)
        for kernel in ("batched_small", "batched_small_mma") if mma else ("batched_small",):
            out = c0.copy()
            gemmlab.matmul(a, b, out=out, alpha=0.5, beta=2.0, kernel=kernel)
            small_calls += 1
            err = compare(out.astype(np.float64), cp.asnumpy(ref))
            if not err.ok(1e-5 if dt == np.float32 else 2e-3):
                bad += 1
                print(f"WRONG {kernel} {dt.__name__} 3x{M}x{N}x{K}: {err}", flush=True)
cp.cuda.runtime.deviceSynchronize()
launches = (
    len(SHAPES) * 2 * len(CASES)
    + len(TC_SHAPES) * len(TC_DTYPES) * len(TENSOR)
    + len(SHAPES) * 2 * len(EC) * len(EC_PRECISIONS)
    + gemv_calls
    + wgmma_calls
    + layout_calls
    + fold_calls
    + staged_calls
    + small_calls
)
print(f"{launches} launches, {bad} wrong", flush=True)
sys.exit(1 if bad else 0)
