"""The routed products' kernels in C++ (csrc/routed.cpp), built at run time.

Why: a routed product that reaches a Python kernel from PyTorch's dispatcher pays about
9 µs to enter Python and about 10 more in gemmlab's prepared call, where cuBLAS's whole
call costs about 8 (benchmarks/NOTES.md).  In an eager step the GPU hides most of it;
under ``torch.compile``, whose other launches cost little host time, it is what the step
waits for.  The C++ kernels of aten::mm, bmm and mv (with their bias-adding, out= and
in-place forms: OPERATORS) enqueue a call they have seen -- the same signature on the same
addresses, as a model's step repeats its products -- without entering Python; every other
call goes to the Python kernels of gemmlab.torch.routing as before, which teach them the
call's launches and memsets where they were those of one prepared call (on kept
workspaces, whose locks the repeat takes).

The library is built once per source, PyTorch and compiler into gemmlab's cache folder
(runtime.compile.cache_dir, ``native/``) with the C++ compiler PyTorch's own extensions use
(``$CXX``, else ``c++``), about 20 s, under a lock so that parallel processes build it once.
Where it cannot be built or loaded -- no compiler, no PyTorch headers -- the Python kernels
route every call, and :func:`why_not` says why.  ``GEMMLAB_NATIVE=0`` keeps to Python.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import torch

from ..core import api, tables
from ..runtime import launch
from ..runtime.compile import cache_dir
from ..runtime.headers import find_cuda_headers

log = logging.getLogger("gemmlab")

SOURCE = Path(__file__).parent / "csrc" / "routed.cpp"
# The operators whose kernels the library replaces (torch._grouped_mm's stays Python's).
OPERATORS = (
    *("mm", "mm.out", "addmm", "addmm.out", "addmm_"),
    *("bmm", "bmm.out", "baddbmm", "baddbmm.out", "baddbmm_"),
    *("mv", "mv.out", "addmv", "addmv.out", "addmv_"),
)

_lock = threading.Lock()
_state: dict = {}  # "lib": the loaded library or None, "why": why not

# What the C++ kernels call for a call they have no launch for (its kernels: gemmlab.torch.routing).
SLOW_SCHEMA = "slow(int op, Tensor a, Tensor b, Tensor(a!) out, Tensor? bias, float alpha, float beta) -> int"


class _Library:
    """The loaded library's C entry points (ctypes)."""

    def __init__(self, path: Path):
        torch.ops.load_library(str(path))
        lib = ctypes.CDLL(str(path))
        c_int, c_void_p, c_i64p = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
        c_up = ctypes.POINTER(ctypes.c_uint)
        self.register = lib.gemmlab_register
        self.register.argtypes = [ctypes.c_char_p, ctypes.c_char_p, c_int]
        self.register.restype = c_int
        self.unregister = lib.gemmlab_unregister
        self.unregister.restype = None
        self.set_routes = lib.gemmlab_set_routes
        self.set_routes.argtypes = [c_void_p, c_int, c_i64p]
        self.set_routes.restype = None
        self.learn_launch = lib.gemmlab_learn_launch
        self.learn_launch.argtypes = [c_void_p, c_up, c_up, ctypes.c_uint, c_up, c_int, c_int, c_void_p, c_i64p]
        self.learn_launch.restype = None
        self.learn_memset = lib.gemmlab_learn_memset
        self.learn_memset.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
        self.learn_memset.restype = None
        self.learn_call = lib.gemmlab_learn_call
        self.learn_call.argtypes = [c_void_p, c_int, ctypes.POINTER(c_void_p), c_int, ctypes.c_double, ctypes.c_int64]
        self.learn_call.restype = c_int
        self.last_repeat = lib.gemmlab_last_repeat
        self.last_repeat.argtypes = [c_i64p]
        self.last_repeat.restype = None
        self.forget = lib.gemmlab_forget
        self.forget.restype = None
        self.counts = lib.gemmlab_counts
        self.counts.argtypes = [c_i64p]
        self.counts.restype = None
        self.path = path


def _compiler() -> str | None:
    cxx = os.environ.get("CXX") or "c++"
    return shutil.which(cxx)


def _command(cxx: str, out: Path) -> list[str]:
    """The compiler's command line: PyTorch's headers and libraries, its C++ ABI, and for a
    CUDA build of PyTorch its CUDA streams (c10_cuda, and the CUDA headers they include)."""
    base = Path(torch.__file__).parent
    cmd = [
        cxx,
        "-O2",
        "-std=c++20",
        "-shared",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{base / 'include'}",
        f"-I{base / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
        str(SOURCE),
        "-o",
        str(out),
        f"-L{base / 'lib'}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{base / 'lib'}",
    ]
    if torch.version.cuda is not None and (base / "lib" / "libc10_cuda.so").exists():
        headers = find_cuda_headers()
        cmd[6:6] = ["-DGEMMLAB_WITH_CUDA"] + [f"-I{d}" for d in headers.include_dirs]
        cmd.append("-lc10_cuda")
    return cmd


def _built() -> Path:
    """The library's path, built first where this source, PyTorch and compiler have none."""
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError(f"no C++ compiler ({os.environ.get('CXX') or 'c++'}) on PATH")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    tag = hashlib.sha256(
        SOURCE.read_bytes() + repr((torch.__version__, torch.version.cuda, sys.version_info[:2], version)).encode()
    ).hexdigest()[:16]
    folder = cache_dir() / "native"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"routed-{tag}.so"
    if path.exists():
        return path
    with open(folder / f"routed-{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it
        if path.exists():
            return path
        log.warning("gemmlab: building the routed products' C++ kernels (once, about 20 s)")
        tmp = folder / f"routed-{tag}.{os.getpid()}.so"
        done = subprocess.run(_command(cxx, tmp), capture_output=True, text=True)
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise RuntimeError("the C++ build failed:\n" + (done.stderr or done.stdout)[-3000:])
        os.replace(tmp, path)
    return path


def library() -> _Library | None:
    """The C++ library, built and loaded at the first call; None where it cannot be (why_not)."""
    if "lib" in _state:
        return _state["lib"]
    with _lock:
        if "lib" not in _state:
            lib, why = None, None
            if os.environ.get("GEMMLAB_NATIVE", "1") == "0":
                why = "GEMMLAB_NATIVE=0"
            else:
                try:
                    lib = _Library(_built())
                    _state["def"] = torch.library.Library("gemmlab_routed", "DEF")
                    _state["def"].define(SLOW_SCHEMA)
                    tables.on_reload.append(forget)
                    launch.on_workspace_replaced.append(forget)
                    api.later_plans.append(_later_plan)
                except Exception as exc:  # noqa: BLE001 -- any failure leaves the Python kernels
                    why = str(exc)
                    log.warning("gemmlab: routed products stay on the Python kernels: %s", why)
            _state["why"], _state["lib"] = why, lib
    return _state["lib"]


def why_not() -> str | None:
    """Why the C++ kernels are not in use (None: they are, or were not asked for yet)."""
    return _state.get("why")


def register(dispatch_key: str) -> int | None:
    """Replace PyTorch's kernels of OPERATORS for ``dispatch_key`` by the library's: the key's
    number, or None where the library is missing or refuses (the Python kernels then take
    them)."""
    if dispatch_key == "CUDA" and torch.version.cuda is None:  # a CPU build of PyTorch: no CUDA kernels to replace
        return None
    lib = library()
    if lib is None:
        return None
    error = ctypes.create_string_buffer(512)
    code = lib.register(dispatch_key.encode(), error, len(error))
    if code < 0:
        why = error.value.decode().splitlines()[0] if error.value else "unknown"
        log.warning("gemmlab: C++ routed kernels not registered for %s: %s", dispatch_key, why)
        return None
    return code


def unregister() -> None:
    lib = _state.get("lib")
    if lib is not None:
        lib.unregister()


def set_routes(slot, triples) -> None:
    """Tell the library the routes of a thread's slot object (gemmlab.torch.routing): (dispatch
    key's number, dtype, route id) triples; none: it routes nothing."""
    lib = _state.get("lib")
    if lib is None:
        return
    flat = [x for key, dtype, rid in triples for x in (key, _SCALAR_TYPE[dtype], rid)]
    lib.set_routes(id(slot), len(triples), (ctypes.c_int64 * max(1, len(flat)))(*flat))


# c10::ScalarType's numbers of the routed dtypes
_SCALAR_TYPE = {torch.float16: 5, torch.float32: 6, torch.bfloat16: 15}


# The plans of the learned calls by token (the plan's id: a prepared call returns the same plan
# object at every call), which gemmlab.last_plan asks for after a repeat.
_plans: dict[int, object] = {}
PLANS_KEPT = 65536  # more plans than the library keeps calls: start again


def _later_plan(at_ns: int):
    """The plan of this thread's last repeat where it was made after ``at_ns`` (api.later_plans)."""
    lib = _state.get("lib")
    if lib is None:
        return None
    out = (ctypes.c_int64 * 2)()
    lib.last_repeat(out)
    return _plans.get(out[0]) if out[1] > at_ns else None


def learn(steps, stream: int | None, locks, add_after: float | None, plan=None) -> bool:
    """Hand the library what the call it gave Python did (runtime.launch.Recording): its
    ``steps`` -- launches (a CUfunction's address, 0 for a test's; the shape; the address of
    the kernelParams array; each argument's bytes) and memsets -- the kept workspaces' ``locks``
    taken on ``stream``, the multiple of the bias added after (None: none), and the ``plan``
    it ran (what gemmlab.last_plan answers after a repeat)."""
    lib = _state.get("lib")
    if lib is None:
        return False
    u3 = ctypes.c_uint * 3
    for step in steps:
        if step[0] == launch.LAUNCH:
            _, kernel, shape, holder, sizes = step
            n = len(sizes)
            lib.learn_launch(
                int(kernel.handle),
                u3(*shape.grid),
                u3(*shape.block),
                shape.smem_bytes,
                u3(*shape.cluster),
                int(shape.pdl),
                n,
                holder.ptr,
                (ctypes.c_int64 * max(1, n))(*sizes),
            )
        else:
            _, address, nbytes = step
            lib.learn_memset(address, nbytes)
    held = (ctypes.c_void_p * max(1, len(locks)))(*locks)
    adds = add_after is not None
    token = 0
    if plan is not None:
        if len(_plans) >= PLANS_KEPT:
            _plans.clear()
        token = id(plan)
        _plans[token] = plan  # kept, so that its id is not another's
    return lib.learn_call(stream or 0, len(locks), held, int(adds), float(add_after) if adds else 0.0, token) == 0


def forget() -> None:
    """Drop every learned call (gemmlab's prepared calls were cleared, or a kept workspace
    replaced)."""
    lib = _state.get("lib")
    if lib is not None:
        lib.forget()
    _plans.clear()


def counts() -> dict:
    """The library's counters: calls launched from a learned launch, calls handed to Python,
    launches learned, test records hit, and the launches kept now."""
    lib = _state.get("lib")
    out = (ctypes.c_int64 * 5)()
    if lib is not None:
        lib.counts(out)
    return dict(zip(("hits", "to_python", "learned", "test_hits", "kept"), out))
