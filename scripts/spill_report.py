"""Every legal configuration of every rung, compiled for sm_80 and sm_90a with the
NVRTC installed here: prints the instantiations that spill or use a stack frame."""

import sys

if sys.argv[1:2] in (["-h"], ["--help"]):  # no arguments: every rung, both targets
    print(__doc__)
    sys.exit(0)

from gemmlab.kernels import registry  # noqa: E402
from gemmlab.runtime.compile import compile_module, parse_ptxas_log  # noqa: E402
import cuda.bindings.nvrtc as nvrtc  # noqa: E402

print("NVRTC", nvrtc.nvrtcVersion()[1:])
bad = 0
for arch in ("sm_80", "sm_90a"):
    for spec in registry.ladder():
        if not spec.builds_for(arch):  # wgmma: sm_90a only
            continue
        m = compile_module(spec.source_path, spec.all_name_expressions(), arch, use_cache=False)
        res = parse_ptxas_log(m.log)
        for name, mangled in m.symbols.items():
            r = res[mangled]
            if r.spill_bytes or r.stack_bytes:
                bad += 1
                print(f"{arch} {name}: {r.registers} registers, {r.spill_bytes} spill bytes, {r.stack_bytes} stack")
print(f"{bad} instantiations spill or use a stack frame")
