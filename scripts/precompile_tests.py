"""Compile, in parallel processes, the kernel instantiations the GPU tests launch
(into $GEMMLAB_CACHE_DIR), so that a test run on a fresh GPU machine does not
compile them one at a time: the level-3 tester's families in every layout, the
configurations tests/test_gpu_correctness.py names, the tensor-core variants (wgmma's
steps as tests/test_wgmma_steps.py runs them), and every configuration the GPU's tuned
table can pick (kernel="auto").

    python3 scripts/precompile_tests.py            # on the GPU machine, before pytest
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import blas3_harness  # noqa: E402
import test_gpu_correctness  # noqa: E402
import test_wgmma_steps  # noqa: E402

from gemmlab.core import api, tables  # noqa: E402
from gemmlab.kernels import registry  # noqa: E402
from gemmlab.kernels.ec.ec_wgmma import (
    EC_SPLIT_PACK_KERNELS,
    EC_SPLIT_PACK_SOURCE,
    EC_SPLIT_SCALED_KERNELS,  # noqa: E402
    EC_SPLIT_SCALED_SOURCE,
)
from gemmlab.kernels.ec.exponent_histogram import EXPONENT_HISTOGRAM_KERNEL, EXPONENT_HISTOGRAM_SOURCE  # noqa: E402
from gemmlab.runtime import compile as rt_compile  # noqa: E402
from gemmlab.runtime.device import gpu_info  # noqa: E402


def main() -> int:
    if sys.argv[1:2] in (["-h"], ["--help"]):  # no arguments: everything the GPU tests launch
        print(__doc__)
        return 0
    t0 = time.time()
    gpu = gpu_info(0)
    items = set(blas3_harness.instantiations(blas3_harness.FAMILIES + blas3_harness.TMA_FAMILIES, gpu.arch))
    named = [c for c in test_gpu_correctness._cases() if c[0] != "auto"]
    table = tables.load_table(gpu.slug)
    if table:
        for entry in table.shapes.values():
            for win in entry.get("kernels", {}).values():
                named.append((win["kernel"], dict(win["params"])))
    named += [(s.name, {}) for s in registry.ladder("simt")]
    named += [("auto", {}), ("vectorized", {"BM": 64, "BN": 64, "BK": 16, "TM": 8, "TN": 4})]
    for kernel, params in named:
        for aligned in (True, False):
            p = api.plan(kernel, 64, 64, 64, aligned16=aligned, **params)
            items.add((str(p.spec.source_path), p.name_expression))
    for kernel, params in test_gpu_correctness.PIPELINED_CASES:  # with a column-major op(B)
        for op_a in ("N", "T"):
            for aligned in (True, False):
                p = api.plan(kernel, 64, 64, 64, aligned16=aligned, op_a=op_a, op_b="T", **params)
                items.add((str(p.spec.source_path), p.name_expression))
    for spec in registry.ladder("tensor"):
        if not spec.builds_for(gpu.arch):
            continue
        for params, prob in spec.instantiations([spec.defaults()], layouts=[("N", "N")]):
            items.add((str(spec.source_path), spec.name_expression(params, prob)))
    for spec in registry.ladder("ec"):  # tests/test_ec*.py, test_graphs.py: defaults in every layout
        if spec.builds_for(gpu.arch):
            configs = spec.configurations() if spec.name == "ec_wgmma" else [spec.defaults()]
            items |= {
                (str(spec.source_path), spec.name_expression(params, prob))
                for params, prob in spec.instantiations(configs)
            }
            items |= {(str(EC_SPLIT_PACK_SOURCE), n) for n in EC_SPLIT_PACK_KERNELS}
            if spec.name == "ec_wgmma":
                items |= {(str(EC_SPLIT_SCALED_SOURCE), n) for n in EC_SPLIT_SCALED_KERNELS}
    from gemmlab.kernels.ec.choose_method import CHOOSE_KERNEL, CHOOSE_SOURCE

    items |= {(str(EXPONENT_HISTOGRAM_SOURCE), EXPONENT_HISTOGRAM_KERNEL), (str(CHOOSE_SOURCE), CHOOSE_KERNEL)}
    if registry.get("wgmma").builds_for(gpu.arch):  # tests/test_wgmma.py: every configuration, every layout
        wg = registry.get("wgmma")
        # Split over K (one instantiation for every SPLITK > 1): the tiles at 4 stages, as the tests split them.
        # (128 x 192 included: test_wgmma.py's and test_bias.py's BN = 192 tests, unsplit and split.)
        configs = [c for c in wg.configurations() if c["SPLITK"] == 1 or c["SPLITK"] == 2 and c["STAGES"] == 4]
        items |= {
            (str(wg.source_path), wg.name_expression(params, prob)) for params, prob in wg.instantiations(configs)
        }
    if registry.get("wgmma_tma").builds_for(gpu.arch):  # tests/test_wgmma_steps.py: wgmma's steps
        items |= test_wgmma_steps.instantiations()
    fp8 = registry.get("wgmma_fp8")
    if fp8.builds_for(gpu.arch):  # tests/test_wgmma_fp8.py: every configuration and variant (fast to build)
        items |= {(str(fp8.source_path), fp8.name_expression(params, prob)) for params, prob in fp8.instantiations()}
    n = rt_compile.precompile(sorted(items), gpu.arch)
    print(f"precompiled {n} of {len(items)} instantiations for {gpu.arch} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
