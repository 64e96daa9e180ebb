"""NVRTC compilation of the ladder's .cu files, with a disk cache.

Kernels are compiled for the exact architecture of the GPU (``sm_90a`` on
Hopper) through cuda.core's ``Program``; templates are instantiated by name
expression (``gemmlab::vectorized<128, 128, 8, 8, 8, true>``).  Compiled cubins
go into cuda.core's ``FileStreamProgramCache`` (atomic writes) under
``$GEMMLAB_CACHE_DIR`` (default ``~/.cache/gemmlab``), keyed by cuda.core's
``make_program_cache_key`` -- source, options, arch, NVRTC version -- plus a
digest of the headers the source includes.  Two more entries beside each cubin
keep what the cubin itself does not carry: the name-expression -> mangled-name
map and the compiler log (registers, shared memory, spills); a third, written
when first asked for, keeps nvdisasm's SASS of the cubin (keyed by the
disassembler as well), so that ``gemmlab inspect`` on a warm cache runs no
tool at all.  A cache entry that cannot be read or loaded is dropped and
rebuilt, with a warning.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import NVRTC_HINT, CompileError, HeaderNotFoundError, MissingExtraError
from .headers import find_cuda_headers

# gemmlab's own device headers (kernels/include/gemmlab/*.cuh): a folder of the
# package, found by path, so that the runtime imports nothing above it.
INCLUDE_DIR = Path(__file__).resolve().parents[1] / "kernels" / "include"
PTXAS_OPTIONS = ("-v", "--warn-on-spills")
_lock = threading.RLock()


def cache_dir() -> Path:
    env = os.environ.get("GEMMLAB_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gemmlab"


_cache_by_dir: dict[str, object] = {}


def _disk_cache():
    """The FileStreamProgramCache for the current cache folder, or None if it is unusable."""
    folder = cache_dir()
    key = str(folder)
    if key not in _cache_by_dir:
        try:
            from cuda.core.utils import FileStreamProgramCache

            cache = FileStreamProgramCache(folder)
            probe = folder / "tmp" / f".probe-{os.getpid()}"
            probe.write_bytes(b"")  # a read-only folder fails here, not at the first store
            probe.unlink()
            _cache_by_dir[key] = cache
        except Exception as exc:
            warnings.warn(
                f"gemmlab: kernel cache folder {folder} is not usable ({exc}); "
                "kernels will be compiled in every process. Set GEMMLAB_CACHE_DIR "
                "to a writable folder.",
                RuntimeWarning,
                stacklevel=3,
            )
            _cache_by_dir[key] = None
    return _cache_by_dir[key]


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one kernel."""

    mangled_name: str
    registers: int
    smem_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Registers, shared memory, stack and spills per kernel from ``ptxas -v`` output."""
    out: dict[str, KernelResources] = {}
    # Each kernel's report starts at "Compiling entry function '<name>'".
    parts = re.split(r"Compiling entry function '([^']+)'", log)
    for name, body in zip(parts[1::2], parts[2::2]):

        def num(pattern: str) -> int:
            m = re.search(pattern, body)
            return int(m.group(1)) if m else 0

        out[name] = KernelResources(
            mangled_name=name,
            registers=num(r"Used (\d+) registers"),
            smem_bytes=num(r"(\d+) bytes smem"),
            stack_bytes=num(r"(\d+) bytes stack frame"),
            spill_store_bytes=num(r"(\d+) bytes spill stores"),
            spill_load_bytes=num(r"(\d+) bytes spill loads"),
        )
    return out


@dataclass
class CompiledModule:
    source: Path
    arch: str
    # repr=False: ObjectCode's repr can block on a machine without a driver,
    # and the cubin and log are long.
    object_code: object = field(repr=False)  # cuda.core ObjectCode
    symbols: dict[str, str] = field(repr=False)  # name expression -> mangled name
    log: str = field(repr=False)
    from_cache: bool = False
    cubin: bytes = field(repr=False, default=b"")
    cache_key: bytes | None = field(repr=False, default=None)

    def resources(self, name_expression: str) -> KernelResources | None:
        return parse_ptxas_log(self.log).get(self.symbols[name_expression])

    def kernel(self, name_expression: str):
        return self.object_code.get_kernel(name_expression)


@functools.lru_cache(maxsize=None)
def _headers_digest() -> bytes:
    """Fingerprint of every header a kernel can include: gemmlab's own (by
    content) and the CUDA folder in use (by path, size and date of the headers
    the search requires)."""
    from .headers import REQUIRED

    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(INCLUDE_DIR)).encode())
            h.update(path.read_bytes())
    found = find_cuda_headers()
    for name in REQUIRED:
        path = found.locate(name)
        try:
            st = path.stat()
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
        except (OSError, AttributeError):
            h.update(f"{name}:missing".encode())
    return h.digest()


def _options(source: Path, arch: str):
    from cuda.core import ProgramOptions

    include = [str(INCLUDE_DIR)] + [str(d) for d in find_cuda_headers().include_dirs]
    # no_cache: NVRTC 13's own compile cache returns hits with an empty log, which
    # would lose the ptxas report (registers, spills); gemmlab caches by itself.
    return ProgramOptions(
        name=source.name,
        arch=arch,
        std="c++17",
        lineinfo=True,
        no_cache=True,
        include_path=include,
        ptxas_options=list(PTXAS_OPTIONS),
    )


def _nvrtc_compile(code: str, source: Path, arch: str, names: tuple[str, ...]):
    from cuda.core import Program

    log = io.StringIO()
    try:
        oc = Program(code, "c++", _options(source, arch)).compile("cubin", name_expressions=names, logs=log)
    except Exception as exc:
        text = str(exc)
        if "libnvrtc" in text or type(exc).__name__ == "DynamicLibNotFoundError":
            raise MissingExtraError(NVRTC_HINT) from exc
        if "cannot open source file" in text:
            raise HeaderNotFoundError(
                f"compiling {source.name} for {arch}: a header was not found.\n{find_cuda_headers().report()}\n{text}"
            ) from exc
        raise CompileError(f"NVRTC failed to compile {source.name} for {arch}:\n{text}") from exc
    symbols = {n: (m.decode() if isinstance(m, bytes) else str(m)) for n, m in oc.symbol_mapping.items()}
    return bytes(oc.code), symbols, log.getvalue().replace("\x00", "")


def _cache_key(code: str, source: Path, arch: str, names: tuple[str, ...]) -> bytes:
    from cuda.core.utils import make_program_cache_key

    return make_program_cache_key(
        code=code,
        code_type="c++",
        options=_options(source, arch),
        target_type="cubin",
        name_expressions=names,
        extra_digest=_headers_digest(),
    )


def _evict(cache, key: bytes) -> None:
    for suffix in (b"", b"/symbols", b"/log", _sass_suffix()):
        try:
            del cache[key + suffix]
        except Exception:
            pass


def is_cached(source: Path, name_expressions, arch: str, *, sass: bool = False) -> bool:
    """Whether compile_module would find this module in the disk cache (and, with
    ``sass``, its SASS beside it, where nvdisasm is found)."""
    cache = _disk_cache()
    if cache is None:
        return False
    source = Path(source)
    key = _cache_key(source.read_text(), source, arch, tuple(dict.fromkeys(name_expressions)))
    suffixes = (b"", b"/symbols", b"/log") + ((_sass_suffix(),) if sass and find_nvdisasm() else ())
    try:
        return all(cache.get(key + suffix) is not None for suffix in suffixes)
    except Exception:
        return False


def compile_module(
    source: Path, name_expressions, arch: str, *, use_cache: bool = True, refresh: bool = False
) -> CompiledModule:
    """Compile ``source`` for ``arch`` with the given template instantiations.

    ``refresh`` skips reading the cache (the result is still stored).
    """
    from cuda.core import ObjectCode

    source = Path(source)
    names = tuple(dict.fromkeys(name_expressions))
    code = source.read_text()
    cache = _disk_cache() if use_cache else None
    key = None
    with _lock:
        if cache is not None:
            key = _cache_key(code, source, arch, names)
            if not refresh:
                try:
                    cubin = cache[key]
                    symbols = json.loads(cache[key + b"/symbols"].decode())
                    log = cache[key + b"/log"].decode()
                    if not cubin.startswith(b"\x7fELF") or set(symbols) != set(names):
                        raise ValueError("not a cubin, or symbols for other instantiations")
                    oc = ObjectCode.from_cubin(
                        cubin, name=source.name, symbol_mapping={n: m.encode() for n, m in symbols.items()}
                    )
                    return CompiledModule(source, arch, oc, symbols, log, True, cubin, key)
                except KeyError:
                    pass
                except OSError as exc:  # the folder itself broke after it was opened
                    warnings.warn(
                        f"gemmlab: kernel cache {cache_dir()} cannot be read ({exc}); recompiling",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                except Exception as exc:
                    warnings.warn(
                        f"gemmlab: dropping an unreadable cache entry for {source.name} "
                        f"({type(exc).__name__}: {exc}); recompiling",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    _evict(cache, key)
        cubin, symbols, log = _nvrtc_compile(code, source, arch, names)
        if cache is not None:
            try:
                cache[key] = cubin
                cache[key + b"/symbols"] = json.dumps(symbols).encode()
                cache[key + b"/log"] = log.encode()
            except Exception as exc:
                warnings.warn(
                    f"gemmlab: could not write the kernel cache ({exc}); continuing without it",
                    RuntimeWarning,
                    stacklevel=2,
                )
        oc = ObjectCode.from_cubin(cubin, name=source.name, symbol_mapping={n: m.encode() for n, m in symbols.items()})
        return CompiledModule(source, arch, oc, symbols, log, False, cubin, key)


# -- SASS (nvdisasm) ---------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def find_nvdisasm() -> str | None:
    """nvdisasm from NVIDIA's wheel (cuda.pathfinder; pip install 'gemmlab[inspect]') or the PATH."""
    try:
        import cuda.pathfinder as pf

        found = pf.find_nvidia_binary_utility("nvdisasm")
        if found:
            return str(found)
    except Exception:
        pass
    return shutil.which("nvdisasm")


@functools.lru_cache(maxsize=None)
def _sass_suffix() -> bytes:
    """The cache entry suffix of SASS text: names the disassembler (path, size, date),
    so that another nvdisasm writes entries of its own."""
    tool = find_nvdisasm()
    try:
        st = os.stat(tool) if tool else None
        ident = f"{tool}:{st.st_size}:{st.st_mtime_ns}" if st else "none"
    except OSError:
        ident = str(tool)
    return b"/sass-" + hashlib.sha256(ident.encode()).hexdigest()[:16].encode()


def split_sass(text: str) -> dict[str, str]:
    """nvdisasm's output -> SASS text per mangled kernel name."""
    parts = re.split(r"\.section\s+\.text\.([^,\s]+)", text)
    return {name: body for name, body in zip(parts[1::2], parts[2::2])}


def _nvdisasm(cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        return subprocess.run([find_nvdisasm(), str(path)], capture_output=True, text=True, check=True).stdout


def disassemble_cubin(cubin: bytes) -> dict[str, str]:
    """SASS text per mangled kernel name (nvdisasm, run now), or {} without nvdisasm."""
    return split_sass(_nvdisasm(cubin)) if find_nvdisasm() else {}


def module_sass(module: CompiledModule) -> dict[str, str]:
    """SASS text per mangled kernel name of a compiled module, or {} without nvdisasm:
    read from beside the cubin in the disk cache, else disassembled and stored there."""
    if find_nvdisasm() is None:
        return {}
    cache = _disk_cache() if module.cache_key is not None else None
    key = module.cache_key + _sass_suffix() if cache is not None else None
    if cache is not None:
        try:
            return split_sass(cache[key].decode())
        except KeyError:
            pass
        except Exception as exc:  # unreadable: disassemble again below, and overwrite it
            warnings.warn(
                f"gemmlab: dropping an unreadable SASS cache entry for {module.source.name} "
                f"({type(exc).__name__}: {exc})",
                RuntimeWarning,
                stacklevel=2,
            )
    text = _nvdisasm(module.cubin)
    if cache is not None:
        try:
            cache[key] = text.encode()
        except Exception as exc:
            warnings.warn(
                f"gemmlab: could not write the kernel cache ({exc}); continuing without it",
                RuntimeWarning,
                stacklevel=2,
            )
    return split_sass(text)


_kernels: dict[tuple[str, str, str], object] = {}


def load_kernel(source: Path, name_expression: str, arch: str):
    """The launchable cuda.core Kernel for one instantiation (memoised per process).

    Needs a current CUDA context (the caller's device).  A cached cubin that the
    driver refuses is treated as corrupt: evicted, recompiled, loaded again.
    """
    memo_key = (str(source), name_expression, arch)
    kernel = _kernels.get(memo_key)
    if kernel is not None:
        return kernel
    with _lock:
        kernel = _kernels.get(memo_key)
        if kernel is not None:
            return kernel
        module = compile_module(source, (name_expression,), arch)
        try:
            kernel = module.kernel(name_expression)
        except Exception as exc:
            if not module.from_cache:
                raise
            warnings.warn(
                f"gemmlab: cached cubin for {name_expression} could not be loaded ({exc}); recompiling",
                RuntimeWarning,
                stacklevel=2,
            )
            module = compile_module(source, (name_expression,), arch, refresh=True)
            kernel = module.kernel(name_expression)
        _kernels[memo_key] = kernel
        return kernel


def _compile_job(source: str, names: tuple[str, ...], arch: str, sass: bool = False) -> int:
    module = compile_module(Path(source), names, arch)
    if sass:
        module_sass(module)
    return len(names)


def compile_in_processes(modules, *, jobs: int | None = None, log=None, sass: bool = False) -> int:
    """Compile (source, name expressions, arch) modules into the disk cache,
    ``jobs`` processes at a time (default: one per CPU; NVRTC does not run two
    compiles of one process at once), largest first; returns how many
    instantiations were compiled.  compile_module and load_kernel then find them
    in the cache.  ``sass``: store each module's SASS beside it too (module_sass)."""
    modules = sorted(((str(src), tuple(names), arch) for src, names, arch in modules), key=lambda m: -len(m[1]))
    if not modules or _disk_cache() is None:  # without the cache, what workers compile is lost
        return 0
    import multiprocessing
    import sys
    from concurrent.futures import ProcessPoolExecutor

    jobs = max(1, min(jobs or os.cpu_count() or 1, len(modules)))
    total, done = sum(len(m[1]) for m in modules), 0
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if jobs == 1 or (main_file and not os.path.exists(main_file)):
        # One job, or a main program that spawned processes cannot import again
        # (a script read from stdin): compile here, one module after another.
        for m in modules:
            done += _compile_job(*m, sass)
            if log:
                log(f"  compiled {done}/{total}")
        return done
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for n in pool.map(_compile_job, *zip(*modules), [sass] * len(modules)):
            done += n
            if log:
                log(f"  compiled {done}/{total}")
    return done


def precompile(items, arch: str, *, jobs: int | None = None, log=None) -> int:
    """Compile (source, name expression) pairs into the disk cache, one module
    per instantiation (as load_kernel asks for them), in parallel processes,
    skipping those already cached; returns how many were compiled."""
    cache = _disk_cache()
    if cache is None:
        return 0
    missing = []
    for source, name in items:
        key = _cache_key(Path(source).read_text(), Path(source), arch, (name,))
        try:
            cache[key]
        except KeyError:
            missing.append((str(source), (name,), arch))
    return compile_in_processes(missing, jobs=jobs, log=log)
