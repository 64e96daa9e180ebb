"""Markdown table of a `gemmlab bench --json` file: one row per kernel, one column per size.

python3 scripts/ladder_table.py benchmarks/results/nvidia-h200/ladder.json
"""

import json
import sys

from gemmlab.tools.bench.report import label

records = json.load(open(sys.argv[1]))
sizes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in records))
kernels = list(dict.fromkeys(label(r) for r in records))
gpu = records[0]["gpu"]
head = "| kernel | " + " | ".join("x".join(map(str, s)) for s in sizes) + " |"
print(f"TFLOPS and % of cuBLAS SGEMM (same run), {gpu}:\n")
print(head)
print("|" + "---|" * (len(sizes) + 1))
for k in kernels:
    cells = []
    for s in sizes:
        hit = [r for r in records if label(r) == k and (r["M"], r["N"], r["K"]) == s]
        if not hit:
            cells.append("")
        elif hit[0].get("skipped"):
            cells.append("skipped")
        elif k == "cublas":
            cells.append(f"{hit[0]['tflops']:.1f}")
        else:
            cells.append(f"{hit[0]['tflops']:.1f} ({hit[0]['pct_cublas']:.0f}%)")
    print(f"| {k} | " + " | ".join(cells) + " |")
