"""fp32_tc's exponent histogram, shipped kernel (launched by its own rule,
histogram_launches) beside the variants of ab_histogram.cu (a block per row),
on one matrix of float32 (GPU time, CUDA events, median of the repeats; each
matrix is larger than L2, so every repeat reads it from DRAM).  Checks that every
variant's counts equal the shipped kernel's.  Reports ms and GB/s read.
Usage: python3 benchmarks/experiments/ab_histogram.py [--json FILE] [--reps 20]"""

import argparse
import json
import pathlib

import cupy as cp
import numpy as np

from gemmlab.kernels.ec.exponent_histogram import histogram_launches
from gemmlab.runtime.device import gpu_info

HERE = pathlib.Path(__file__).resolve().parent
SHIPPED = HERE.parents[1] / "src" / "gemmlab" / "kernels" / "ec" / "exponent_histogram.cu"
BINS, THREADS = 256, 256


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    sm = cp.cuda.Device().attributes["MultiProcessorCount"]
    shipped = cp.RawModule(code=SHIPPED.read_text(), options=("-std=c++17",),
                           name_expressions=["gemmlab::exponent_histogram"])
    ab = cp.RawModule(code=(HERE / "ab_histogram.cu").read_text(), options=("-std=c++17",))
    kernels = {"shipped": shipped.get_function("gemmlab::exponent_histogram"),
               "block_match": ab.get_function("block_match"), "vec_match": ab.get_function("hist_vec_match"), "vec_atomic": ab.get_function("hist_vec_atomic"),
               "read_only": ab.get_function("read_only")}
    rows_out = []
    rng = cp.random.default_rng(0)
    for n in (4096, 8192):
        for dist in ("uniform", "wide"):
            x = rng.random((n, n), dtype=cp.float32) * 2 - 1
            if dist == "wide":   # log-uniform magnitudes over 2^-20 .. 2^20: bins spread out
                x = cp.sign(x) * cp.exp2(rng.random((n, n), dtype=cp.float32) * 40 - 20)
            hist = cp.zeros(BINS, cp.uint64)
            launches = histogram_launches(gpu_info(0), [(0, n, n, n, 1, 0)], [])
            ref = None
            for name, k in kernels.items():
                blocks = launches[0][2][0] if name == "shipped" else min(n, 8 * sm)
                # The shipped kernel's batch stride and matrices, and its second operand
                # (none: gridDim.z of 1 never reaches it).
                extra = (np.int64(0), np.int32(1)) if name == "shipped" else ()
                second = (np.int32(0), np.int32(0), x, np.int32(0), np.int64(0), np.int32(0), hist) \
                    if name == "shipped" else ()

                def go():
                    k((blocks, 1, 1), (THREADS, 1, 1), (np.int32(n), np.int32(n), x, np.int32(n), *extra, hist,
                                                        *second))
                hist.fill(0)
                go()
                counts = hist.get()
                if name == "shipped":
                    ref = counts
                ok = None if name == "read_only" else bool((counts == ref).all())
                go()
                start, end = cp.cuda.Event(), cp.cuda.Event()
                times = []
                for _ in range(args.reps):
                    start.record()
                    go()
                    end.record()
                    end.synchronize()
                    times.append(cp.cuda.get_elapsed_time(start, end))
                ms = float(np.median(times))
                gbs = n * n * 4 / (ms * 1e-3) / 1e9
                rows_out.append({"n": n, "dist": dist, "kernel": name, "ms": ms, "gbs": gbs, "counts_equal": ok})
                print(f"{n}^2 {dist:8s} {name:10s} {ms:.4f} ms  {gbs:7.0f} GB/s  counts equal: {ok}", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                                       "rows": rows_out}, indent=1))


if __name__ == "__main__":
    main()
