"""gemmlab.matmul: validation, kernel choice and launch."""

from __future__ import annotations

import numbers
import threading
from dataclasses import dataclass

import numpy as np

from .arrays import (Operand, _is_out_of_memory, current_stream, describe, empty_like_kind,
                     gpu_memory_error, need_cupy)
from . import tuning
from .kernels import registry
from .kernels.registry import KernelSpec, Problem
from .runtime import compile as rt_compile
from .runtime import device as rt_device
from .runtime.launch import DEFAULT_DYNAMIC_SMEM, allow_dynamic_smem, launch, stream_from_handle

# Input dtypes: float32 for the CUDA-core ladder (and TF32 tensor cores on request),
# float16 and bfloat16 for the tensor-core ladder.
SUPPORTED_DTYPES = ("float32", "float16", "bfloat16")
PRECISIONS = (None, "fp32", "tf32")


@dataclass(frozen=True)
class Plan:
    """What a call will run: the kernel, its resolved tile parameters and launch shape."""

    spec: KernelSpec
    params: dict
    problem: Problem
    name_expression: str

    def describe(self) -> str:
        p = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.spec.name}({p})" if p else self.spec.name


def _scalar(value, name: str) -> np.float32:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    return np.float32(value)


INT32_MAX = 2**31 - 1   # the kernels take sizes and leading dimensions as 32-bit ints


def _check_matrix(op: Operand) -> int:
    """Check one operand's rank, dtype and layout; return its leading dimension."""
    if len(op.shape) != 2:
        raise ValueError(f"{op.label()} must be a 2-D matrix; it has {len(op.shape)} dimension(s)")
    if op.dtype_name not in SUPPORTED_DTYPES:
        raise TypeError(f"{op.label()}: dtype {op.dtype_name} is not supported; gemmlab's kernels take "
                        f"{', '.join(SUPPORTED_DTYPES)} (convert with .astype(float32))")
    rows, cols = op.shape
    rs, cs = op.strides
    if rows == 0 or cols == 0:
        return max(cols, 1)
    if cols > 1 and cs != 1 or rows > 1 and rs < max(cols, 1):
        raise ValueError(
            f"{op.label()} has element strides {op.strides}: gemmlab reads row-major matrices "
            f"(unit column stride, row stride >= columns); a column-major array or a transposed "
            f"view must be copied first (numpy.ascontiguousarray / cupy.ascontiguousarray / "
            f".contiguous())")
    ld = rs if rows > 1 else max(cols, 1)
    if max(rows, cols, ld) > INT32_MAX:
        raise ValueError(f"{op.label()} has shape {op.shape} and leading dimension {ld}: gemmlab's kernels "
                         f"take each dimension and leading dimension as a 32-bit int (at most {INT32_MAX})")
    return ld


ITEMSIZE = {"float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2}


def contiguous_aligned16(M: int, N: int, K: int, dtype: str = "float32", out_dtype: str | None = None) -> bool:
    """Whether fresh contiguous (256-byte aligned) M x K, K x N and M x N arrays
    allow the kernels' 16-byte accesses (see _aligned16): for float32, K and N
    multiples of 4; for the tensor-core dtypes, rows of a multiple of 16 bytes."""
    if dtype == "float32":
        return K % 4 == 0 and N % 4 == 0
    e, eo = ITEMSIZE[dtype], ITEMSIZE[out_dtype or ("float32" if dtype == "tf32" else dtype)]
    return (K * e) % 16 == 0 and (N * e) % 16 == 0 and (N * eo) % 16 == 0


def _aligned16(ops: list[Operand], lds: list[int], widths: list[int], dtype: str = "float32") -> bool:
    """Whether every operand allows 16-byte accesses.  float32 (the CUDA-core
    rungs' float4 loads): 16-byte aligned bases, leading dimensions and widths
    (K, N) multiples of 4, so that a float4 starting inside a row ends inside it.
    The tensor-core dtypes (mma_pipelined's 16-byte copies clip ragged rows
    themselves): 16-byte aligned bases and rows a multiple of 16 bytes apart,
    each operand in its own element size."""
    if not all(o.ptr % 16 == 0 for o in ops):
        return False
    if dtype == "float32":
        return all(ld % 4 == 0 for ld in lds) and all(w % 4 == 0 for w in widths)
    return all((ld * ITEMSIZE[o.dtype_name]) % 16 == 0 for o, ld in zip(ops, lds))


def auto_params(M: int, N: int, K: int, sm_count: int) -> tuple[str, dict]:
    """The heuristic ``kernel="auto"`` falls back to on a GPU without a tuned table.

    warptile (128x128 block tiles) when its grid fills every SM at least once;
    below that, vectorized with 64x64 tiles, which makes four times as many
    blocks; when even those leave SMs idle and K is long, pipelined 64x64 with
    split-K over enough blocks to fill the GPU.  On an H200: warptile 83.0% of
    cuBLAS at 2048^3 and 83.1% at 4096^3 (vectorized 58.6% and 74.2% in the
    same run); at 1024^3, 64 blocks of warptile reach 44.8% where vectorized
    64x64 reaches 72.7%.
    """
    if -(-M // 128) * -(-N // 128) >= sm_count:
        return "warptile", {}
    tiles64 = -(-M // 64) * -(-N // 64)
    splits = max(s for s in registry.SPLITK_VALUES if s == 1 or s * tiles64 <= 2 * sm_count and K >= 256 * s)
    if tiles64 >= sm_count or splits == 1:
        return "vectorized", {"BM": 64, "BN": 64, "BK": 16, "TM": 8, "TN": 4}
    return "pipelined", {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "WNITER": 2, "TM": 4,
                         "STAGES": 3, "SPLITK": splits}


def auto_tensor_params(M: int, N: int, K: int, sm_count: int) -> tuple[str, dict]:
    """What ``kernel="auto"`` runs for 16-bit and TF32 inputs: the one place
    that chooses among the tensor-core rungs.

    mma_pipelined at its defaults (128 x 256 x 64 tiles) when they give at
    least half of the SMs a block; below that, its 64 x 64 tiles, which make
    eight times as many.  On an H100 (run M2, FP16): at 2048^3 (128 tiles for
    132 SMs) the defaults reach 410 TFLOPS and 64 x 64 255; at 1024^3 (32
    tiles) the defaults 91 and 64 x 64 152.
    """
    if 2 * -(-M // 128) * -(-N // 256) >= sm_count:
        return "mma_pipelined", {}
    return "mma_pipelined", {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 4}


def plan(kernel: str, M: int, N: int, K: int, *, aligned16: bool = True, sm_count: int = 132,
         gpu_slug: str | None = None, dtype: str = "float32", out_dtype: str = "float32",
         **tile_params) -> Plan:
    """Resolve a kernel name and tile parameters for a problem, raising on anything illegal.

    Without tile parameters, a named kernel (and ``"auto"``) takes the
    configuration tuned for the nearest shape on this GPU model (``gpu_slug``,
    see gemmlab.tuning) if there is one; else the kernel's defaults (for
    ``"auto"``, the heuristic of :func:`auto_params`).  ``dtype`` is what the
    kernel multiplies (float32, tf32, float16, bfloat16) and ``out_dtype`` what it
    writes; tuned tables are for float32 only so far.
    """
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a kernel name (str); got {type(kernel).__name__}")
    if kernel == "auto" and tile_params:
        raise ValueError(f"tile parameters {sorted(tile_params)} need a named kernel, not kernel='auto'")
    if kernel != "auto":
        registry.get(kernel)          # an unknown name fails here, tuned table or not
    if not tile_params and gpu_slug and M and N and dtype == "float32":
        table = tuning.load_table(gpu_slug)
        tuned = table.lookup(kernel, M, N, max(K, 1)) if table else None
        if tuned:
            kernel, tile_params = tuned
    if kernel == "auto":
        kernel, tile_params = auto_params(M, N, K, sm_count) if dtype == "float32" else \
            auto_tensor_params(M, N, K, sm_count)
    spec = registry.get(kernel)
    params = spec.resolve(tile_params)
    problem = Problem(M, N, K, aligned16, dtype, out_dtype)
    spec.check_dtypes(problem)
    return Plan(spec, params, problem, spec.name_expression(params, problem))


_tls = threading.local()


def _make_current(device: int) -> None:
    """Make ``device``'s primary context current on this thread (once per thread and device)."""
    if getattr(_tls, "device", None) != device:
        from cuda.core import Device
        Device(device).set_current()
        _tls.device = device


def run_plan(p: Plan, gpu: rt_device.GPUInfo, stream: int, A_ptr: int, lda: int, B_ptr: int, ldb: int,
             C_ptr: int, ldc: int, alpha, beta) -> None:
    """Launch an already validated plan on raw device pointers (the harness uses this too)."""
    _make_current(gpu.ordinal)
    kernel = rt_compile.load_kernel(p.spec.source_path, p.name_expression, gpu.arch)
    geo = p.spec.launch(p.params, p.problem)
    if geo.smem_bytes > DEFAULT_DYNAMIC_SMEM:
        if geo.smem_bytes > gpu.max_smem_per_block_optin:
            raise ValueError(f"{p.describe()} needs {geo.smem_bytes} bytes of shared memory per block; "
                             f"{gpu.name} allows {gpu.max_smem_per_block_optin}")
        allow_dynamic_smem(kernel, geo.smem_bytes, gpu.ordinal)
    pr = p.problem
    if (alpha == 0 or pr.K == 0) and pr.out_dtype == "float32":
        # BLAS quick return: the product is empty, so C = beta * C without reading
        # A or B (NaN or Inf in them must not reach C); the reduction kernel with
        # no slices does exactly that.  (The tensor-core kernels, which may write
        # 16-bit C, skip their K loop themselves when alpha == 0.)
        reduce = rt_compile.load_kernel(registry.SPLITK_REDUCE_SOURCE, registry.SPLITK_REDUCE_KERNEL, gpu.arch)
        threads = registry.SPLITK_REDUCE_THREADS
        launch(reduce, (-(-pr.M * pr.N // threads), 1, 1), (threads, 1, 1), 0, stream,
               np.int32(pr.M), np.int32(pr.N), np.int32(0), 0, np.float32(0.0), np.float32(beta),
               C_ptr, np.int32(ldc))
        return
    splits = p.spec.splits(p.params)
    if splits == 1:
        launch(kernel, geo.grid, geo.block, geo.smem_bytes, stream,
               np.int32(pr.M), np.int32(pr.N), np.int32(pr.K), np.float32(alpha),
               A_ptr, np.int32(lda), B_ptr, np.int32(ldb), np.float32(beta), C_ptr, np.int32(ldc))
        return
    # Split-K: the partial products go to a workspace on the caller's stream
    # (stream-ordered, so concurrent calls on other streams get their own), then
    # one more kernel adds them into C with alpha and beta.
    reduce = rt_compile.load_kernel(registry.SPLITK_REDUCE_SOURCE, registry.SPLITK_REDUCE_KERNEL, gpu.arch)
    ws = _workspace(gpu, stream, 4 * splits * pr.M * pr.N, p)
    try:
        launch(kernel, geo.grid, geo.block, geo.smem_bytes, stream,
               np.int32(pr.M), np.int32(pr.N), np.int32(pr.K), np.float32(1.0),
               A_ptr, np.int32(lda), B_ptr, np.int32(ldb), np.float32(0.0), int(ws.handle), np.int32(pr.N))
        threads = registry.SPLITK_REDUCE_THREADS
        launch(reduce, (-(-pr.M * pr.N // threads), 1, 1), (threads, 1, 1), 0, stream,
               np.int32(pr.M), np.int32(pr.N), np.int32(splits), int(ws.handle), np.float32(alpha),
               np.float32(beta), C_ptr, np.int32(ldc))
    finally:
        ws.close(stream_from_handle(stream))   # freed in stream order, after the reduction


def _workspace(gpu: rt_device.GPUInfo, stream: int, nbytes: int, p: Plan):
    """A stream-ordered device allocation of ``nbytes`` (the split-K partial products)."""
    from cuda.core import Device
    try:
        return Device(gpu.ordinal).allocate(nbytes, stream=stream_from_handle(stream))
    except Exception as exc:
        raise MemoryError(f"{p.describe()} needs a split-K workspace of {nbytes / 2**20:.1f} MiB on "
                          f"{gpu.name} and could not get it ({exc}); use a smaller SPLITK") from exc


def _dtype_arg(value, name: str) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(getattr(value, "name", value)).replace("torch.", "")
    if text not in ("float32", "float16", "bfloat16"):
        raise TypeError(f"{name}={value!r} is not one of float32, float16, bfloat16")
    return text


def _resolve_dtypes(A: Operand, B: Operand, O: Operand | None, precision, out_dtype) -> tuple[str, str]:
    """(what the kernel multiplies, what it writes) from the operands and the options."""
    if A.dtype_name != B.dtype_name:
        raise TypeError(f"{A.label()} and {B.label()} differ in dtype; both operands must have one dtype")
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of 'fp32', 'tf32' (or None)")
    dtype = A.dtype_name
    if precision == "tf32":
        if dtype != "float32":
            raise ValueError(f"precision='tf32' is for float32 inputs; a and b are {dtype}")
        dtype = "tf32"
    elif precision == "fp32" and dtype != "float32":
        raise ValueError(f"precision='fp32' is for float32 inputs; a and b are {dtype}")
    out_dt = _dtype_arg(out_dtype, "out_dtype")
    if O is not None:
        if out_dt is not None and O.dtype_name != out_dt:
            raise TypeError(f"{O.label()} does not have out_dtype={out_dt}")
        out_dt = O.dtype_name
    if out_dt is None:    # as numpy / torch: the inputs' dtype (float32 for TF32)
        out_dt = "float32" if dtype == "tf32" else dtype
    allowed = ("float32",) if dtype in ("float32", "tf32") else ("float32", dtype)
    if out_dt not in allowed:
        raise TypeError(f"{dtype} inputs give a {' or '.join(allowed)} result, not {out_dt}")
    return dtype, out_dt


def matmul(a, b, *, out=None, alpha=1.0, beta=0.0, kernel: str = "auto", precision: str | None = None,
           out_dtype=None, **tile_params):
    """out = alpha * a @ b + beta * out with one of gemmlab's kernels.

    ``a`` (M, K) and ``b`` (K, N) are CuPy arrays, PyTorch CUDA tensors (read
    in place, no copy) or NumPy arrays (copied to the GPU; the result comes back
    as NumPy), of one dtype: float32 (CUDA cores; ``precision="tf32"`` asks for
    TF32 tensor cores instead, never chosen otherwise), float16 or bfloat16
    (tensor cores, FP32 accumulation).  The result is ``out_dtype``: by default
    the inputs' dtype; float32 for 16-bit inputs on request.  Returns ``out`` if
    given, else a new array of a's kind.  The kernel runs on the caller's
    current stream (CuPy's or PyTorch's).  ``beta`` other than 0 needs ``out``.
    With ``beta == 0``, ``out`` is never read; with ``alpha == 0`` or K == 0,
    neither ``a`` nor ``b`` is read and the result is ``beta * out`` (zeros when
    ``beta == 0``), as in BLAS.  Everything is checked before any launch; on
    error nothing is written.
    """
    A, B = describe(a, "a"), describe(b, "b")
    O = describe(out, "out") if out is not None else None
    alpha, beta = _scalar(alpha, "alpha"), _scalar(beta, "beta")
    lda, ldb = _check_matrix(A), _check_matrix(B)
    (M, K), (K2, N) = A.shape, B.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: a has shape {A.shape} (K={K}) but b has shape "
                         f"{B.shape} (K={K2}); a @ b needs a.shape[1] == b.shape[0]")
    if A.on_gpu != B.on_gpu:
        raise TypeError(f"{A.label()} and {B.label()} are not on the same side: pass both as "
                        "NumPy arrays or both on the same GPU")
    if A.on_gpu and A.device != B.device:
        raise ValueError(f"{A.label()} and {B.label()} are on different devices")
    ldc = N
    if O is not None:
        ldc = _check_matrix(O)
        if O.shape != (M, N):
            raise ValueError(f"{O.label()} has the wrong shape: a @ b is ({M}, {N})")
        if O.on_gpu != A.on_gpu or (O.on_gpu and O.device != A.device):
            raise ValueError(f"{O.label()} must be where a and b are ({A.where()})")
        if O.kind == "numpy" and not O.obj.flags.writeable:
            raise ValueError(f"{O.label()} is read-only")
        for X in (A, B):
            lo, hi = O.span()
            xlo, xhi = X.span()
            if lo < xhi and xlo < hi:
                raise ValueError(f"{O.label()} overlaps {X.label()} in memory; the result would "
                                 "overwrite inputs still being read")
    elif beta != 0:
        raise ValueError(f"beta={float(beta)} scales an existing output, so it needs out=; "
                         "pass out= or leave beta=0")
    dtype, out_dt = _resolve_dtypes(A, B, O, precision, out_dtype)
    dtypes = {"dtype": dtype, "out_dtype": out_dt}
    if A.on_gpu:
        aligned = _aligned16([A, B] + ([O] if O is not None else []), [lda, ldb, ldc], [K, N], dtype)
        if O is None and dtype != "float32":   # the fresh output: 256-byte aligned, rows N elements apart
            aligned = aligned and (N * ITEMSIZE[out_dt]) % 16 == 0
    else:   # NumPy inputs run on fresh contiguous (256-byte aligned) GPU copies
        aligned = contiguous_aligned16(M, N, K, dtype, out_dt)
    # Resolve the kernel before touching the GPU, so that naming errors need no GPU.
    plan(kernel, M, N, K, aligned16=aligned, **dtypes, **tile_params)
    device = A.device if A.on_gpu else 0
    gpu = rt_device.gpu_info(device)
    # Now with the GPU's model and SM count: tuned configurations, or auto's heuristic.
    p = plan(kernel, M, N, K, aligned16=aligned, sm_count=gpu.sm_count, gpu_slug=gpu.slug, **dtypes,
             **tile_params)

    if A.on_gpu:
        result = out if out is not None else empty_like_kind(A, (M, N), device, out_dt)
        C = O if O is not None else describe(result, "out")
        if M and N:
            run_plan(p, gpu, current_stream(A), A.ptr, lda, B.ptr, ldb, C.ptr, ldc, alpha, beta)
        return result

    # NumPy in, NumPy out: stage through CuPy arrays on GPU 0.
    cp = need_cupy("NumPy inputs")
    with cp.cuda.Device(device):
        try:
            da, db = cp.asarray(np.ascontiguousarray(a)), cp.asarray(np.ascontiguousarray(b))
            dc = cp.asarray(np.ascontiguousarray(out)) if out is not None and beta != 0 \
                else cp.empty((M, N), np.dtype(out_dt))
        except Exception as exc:
            if _is_out_of_memory(exc):
                raise gpu_memory_error(f"copying a ({M} x {K}), b ({K} x {N}) and the result ({M} x {N}) "
                                       "to the GPU", 4 * (M * K + K * N + M * N), device, exc) from exc
            raise
        if M and N:
            run_plan(p, gpu, cp.cuda.get_current_stream().ptr, da.data.ptr, max(K, 1), db.data.ptr,
                     max(N, 1), dc.data.ptr, max(N, 1), alpha, beta)
        host = cp.asnumpy(dc)
    if out is not None:
        out[...] = host
        return out
    return host


def kernels() -> list[dict]:
    """The registry: every kernel with its family, dtypes, tile parameters, rules and description."""
    return [s.describe() for s in registry.ladder()]
