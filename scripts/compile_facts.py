"""Compile-only facts per target: registers, static shared memory, spills and the
SASS instruction families of every instantiation in each target's portable set
(each rung's defaults and every configuration kernel="auto" picks there, see
gemmlab.tools.inspect_kernels.portable_configs), written to benchmarks/results/compile-facts.json
(one entry per target; a run for some targets replaces theirs and keeps the others).

    PYTHONPATH=src python3 scripts/compile_facts.py [sm_86 ...]   # default: every known target
"""

import json
import time
from pathlib import Path

from gemmlab.tools.inspect_kernels import portable_reports
from gemmlab.kernels.spec import KNOWN_TARGETS
from cuda.bindings import nvrtc

KEEP = ("HMMA", "LDSM", "LDGSTS", "HGMMA", "LDL/STL (local)", "instructions")
PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "compile-facts.json"
WHAT = (
    "compile-only (NVRTC + ptxas, no GPU): each rung's defaults and every configuration kernel='auto' "
    "picks on this target, row-major layouts"
)


def main(arches):
    doc = json.loads(PATH.read_text()) if PATH.exists() else {"what": WHAT, "targets": {}}
    doc["what"] = WHAT
    for arch in arches:
        t = time.time()
        reports = portable_reports(arch)
        doc["targets"][arch] = {
            "nvrtc": "%d.%d" % nvrtc.nvrtcVersion()[1:],
            "kernels": [
                {
                    "kernel": r.kernel,
                    "name_expression": r.name_expression,
                    "registers": r.registers,
                    "static_smem_bytes": r.smem_bytes,
                    "stack_bytes": r.stack_bytes,
                    "spill_bytes": r.spill_bytes,
                    "sass": {k: r.sass.get(k, 0) for k in KEEP},
                }
                for r in reports
            ],
        }
        PATH.write_text(json.dumps(doc, indent=1) + "\n")
        spills = sum(1 for r in reports if r.spill_bytes)
        print(f"{arch}: {len(reports)} instantiations, {spills} with spills, {time.time() - t:.1f} s -> {PATH.name}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("arches", nargs="*", metavar="ARCH", help="targets such as sm_86 (default: every known target)")
    main(ap.parse_args().arches or KNOWN_TARGETS)
