"""Turn a tuner progress file into the compact record kept under benchmarks/results/.

    python3 scripts/compact_tuning.py <gpu>.progress.json <run number> out.json

One row per candidate and shape: [candidate, status, first timing ms, finalist
timing ms, relative error vs FP64], fastest first.
"""

import argparse
import json

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("src", help="the tuner's <gpu>.progress.json")
ap.add_argument("run", type=int, help="the run's number, kept in the record")
ap.add_argument("out", help="write the compact record here")
args = ap.parse_args()
src, run, dst = args.src, args.run, args.out
d = json.load(open(src))
out = {
    "gpu": d["gpu"],
    "sources": d["sources"],
    "run": run,
    "columns": ["candidate", "status", "screen_ms", "final_ms", "rel_error"],
    "shapes": {},
}
for shape, r in d["results"].items():
    rows = [
        [
            k,
            v.get("status"),
            v.get("ms") and round(v["ms"], 5),
            v.get("final_ms") and round(v["final_ms"], 5),
            v.get("rel_error") and float(f"{v['rel_error']:.3g}"),
        ]
        for k, v in r["candidates"].items()
    ]
    rows.sort(key=lambda x: x[3] or x[2] or 1e9)
    out["shapes"][shape] = {"cublas_ms": r.get("cublas_ms"), "candidates": rows}
text = json.dumps(out, separators=(",", ":")).replace('],["', '],\n["')
open(dst, "w").write(text + "\n")
print(f"wrote {dst}: {sum(len(s['candidates']) for s in out['shapes'].values())} candidates")
