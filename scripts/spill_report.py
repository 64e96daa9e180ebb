"""Every legal configuration of every rung, compiled for sm_80 and sm_90a with the
NVRTC installed here: prints the instantiations that spill or use a stack frame."""

from gemmlab.kernels import registry
from gemmlab.runtime.compile import compile_module, parse_ptxas_log
import cuda.bindings.nvrtc as nvrtc

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
