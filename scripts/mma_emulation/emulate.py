"""Run tensor rung 3 (03_mma_pipelined.cu) on the CPU, without a GPU.

The kernel's real source and headers are compiled as host C++ (g++, C++20);
only the PTX wrappers (ldmatrix, mma.sync, ld.shared, cvt.rna.tf32,
cp.async, st.shared) and the CUDA built-ins are replaced by the models in
emu_rt.h: one std::thread per CUDA thread, std::barrier for __syncthreads and
__syncwarp, warp-wide instructions by exchange through a per-warp buffer,
mma.sync computed from the PTX ISA's fragment layouts (TF32 operands
truncated to 19 bits, as the tensor cores do), cp.async landing at the
__pipeline_wait_prior that allows it (as late as possible), shared memory
filled with NaN, operand padding with NaN.  Each case is compared with an
FP64 product of the same (rounded) inputs, and C's row padding must stay
untouched.  What it checks: indexing, swizzle, fragment loads, the pipeline's
stage bookkeeping, edges, the epilogue.  What it cannot: timing, real races
between warps (threads interleave as the OS schedules them), hardware
behaviour beyond the PTX ISA's description.

    python3 scripts/mma_emulation/emulate.py            # 109 cases (minutes)
    python3 scripts/mma_emulation/emulate.py --full     # 601: every configuration x dtype pair x variant
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "src"))

from gemmlab.kernels import registry  # noqa: E402
from gemmlab.kernels.tensor.wmma import TC_VARIANTS  # noqa: E402
from gemmlab.runtime.compile import INCLUDE_DIR  # noqa: E402
from gemmlab.kernels.spec import TYPE_CODES  # noqa: E402
from gemmlab.runtime.headers import find_cuda_headers  # noqa: E402

INC = INCLUDE_DIR / "gemmlab"
EMULATED = {  # header -> functions emu_rt.h provides instead
    "tensor/03_mma_pipelined.cuh": ("cp_async16", "cp_async4", "st_shared_v4"),
    "mma_sync.cuh": ("ldmatrix_x4", "ldmatrix_x4_trans", "lds32", "to_tf32", "to_tf32_half_ulp", "mma_16n8"),
}


def _drop_function(text: str, name: str) -> str:
    """Remove a __device__ function (and a template line just before it) up to its closing '}'."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if re.search(r"\b" + re.escape(name) + r"\(", lines[i]) and "__device__" in lines[i]:
            if out and out[-1].startswith("template <"):
                out.pop()
            while lines[i] != "}":
                i += 1
            i += 1
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def _strip(text: str) -> str:
    return "\n".join(ln for ln in text.split("\n") if not ln.startswith(("#include", "#pragma once")))


def translation_unit() -> str:
    parts = {}
    # The rung's include chain without tensor rungs 1-2 (WMMA headers do not exist on
    # the host): of rung 1's header only the conversions the epilogue uses.
    for name in ("type_codes.cuh", "layout.cuh", "tile_order.cuh", "mma_sync.cuh", "tensor/03_mma_pipelined.cuh"):
        text = (INC / name).read_text()
        for fn in EMULATED.get(name, ()):
            text = _drop_function(text, fn)
        parts[name] = _strip(text)
    tc = (INC / "tensor" / "01_wmma.cuh").read_text()
    to_float = "\n".join(ln for ln in tc.split("\n") if ln.startswith("__device__ __forceinline__ float to_float"))
    from_float = re.search(
        r"(template <class O> __device__ __forceinline__ O from_float.*?__float2bfloat16_rn\(v\);\n})", tc, re.S
    ).group(1)
    kernel = _strip(registry.get("mma_pipelined").source_path.read_text()).replace(
        "extern __shared__ __align__(128) unsigned char smem[];", "unsigned char* smem = emu::smem_base();"
    )
    return f"""#include "emu_rt.h"
{parts["type_codes.cuh"]}
namespace gemmlab {{ namespace wmma_types {{
template <int DT> struct Storage;
template <> struct Storage<TYPE_FLOAT16> {{ using type = __half; }};
template <> struct Storage<TYPE_BFLOAT16> {{ using type = __nv_bfloat16; }};
template <> struct Storage<TYPE_TF32> {{ using type = float; }};
template <> struct Storage<TYPE_FLOAT32> {{ using type = float; }};
}} }}
{parts["layout.cuh"]}
{parts["tile_order.cuh"]}
namespace gemmlab {{
{to_float}
{from_float}
}}
{parts["mma_sync.cuh"]}
{parts["tensor/03_mma_pipelined.cuh"]}
{kernel}
#include "emu_main.h"
"""


def cases(full: bool) -> list[str]:
    spec = registry.get("mma_pipelined")
    pairs = [(v.dtype, v.out_dtype) for v in TC_VARIANTS]
    out, seed = [], 0
    for p in spec.configurations():
        small = p["BM"] * p["BN"] <= 64 * 64
        if not full and p["STAGES"] != 3:
            continue
        shapes = [(33, 65, 17), (127, 129, 255), (130, 260, 200)] if full or small else [(33, 65, 17), (130, 260, 200)]
        for dt, odt in pairs if full or small else pairs[::2]:
            for vec in ("true", "false"):
                for M, N, K in shapes:
                    for alpha, beta in ((1.0, 0.0), (0.5, 2.0)):
                        seed += 1
                        if not full and seed % 2:  # the quick set alternates beta = 0 and beta != 0
                            continue
                        args = [
                            TYPE_CODES[dt],
                            TYPE_CODES[odt],
                            p["BM"],
                            p["BN"],
                            p["BK"],
                            p["WM"],
                            p["WN"],
                            p["STAGES"],
                        ]
                        out.append(
                            f"fails += run_case<{', '.join(map(str, args))}, {vec}>"
                            f"({M}, {N}, {K}, {alpha}f, {beta}f, {seed});"
                        )
    out.append("fails += run_case<0, 0, 64, 64, 32, 32, 32, 4, true>(33, 65, 17, 0.0f, 0.5f, 1);")  # alpha = 0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="every configuration, dtype pair and variant")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "emu.cpp").write_text(translation_unit())
        (tmp / "cases.h").write_text("\n".join(cases(args.full)) + "\n")
        cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-I", str(tmp), "-I", str(HERE)]
        for d in find_cuda_headers().include_dirs:
            cmd += ["-I", str(d)]
        r = subprocess.run(cmd + [str(tmp / "emu.cpp"), "-o", str(tmp / "emu")], capture_output=True, text=True)
        if r.returncode:
            print(r.stderr[-8000:], file=sys.stderr)
            return r.returncode
        return subprocess.run([str(tmp / "emu")]).returncode


if __name__ == "__main__":
    sys.exit(main())
