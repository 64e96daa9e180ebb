"""TMA tensor maps and the launch arguments of the wgmma rung (Hopper).

A tensor map (CUtensorMap, 128 opaque bytes) tells the copy engine where a
matrix is (base address, sizes, row stride) and which box one copy moves, with
which shared-memory swizzle.  It is built on the host and passed to the kernel
by value (``const __grid_constant__``).

Two ways to build one, the first that works is kept for the process:
  * cuda.core: ``StridedMemoryView.as_tensor_map`` gives a
    ``TensorMapDescriptor``, which ``cuda.core.launch`` passes as an argument;
  * the driver: ``cuTensorMapEncodeTiled`` gives a ``CUtensorMap``, which
    runtime.launch passes through ``cuLaunchKernel`` (cuda.core's launch takes
    no raw structs).
``GEMMLAB_TMA=driver`` (or ``cuda.core``) forces one.  Maps are cached by
everything they encode (address, sizes, stride, box), so repeated calls on the
same arrays skip the encoding.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("gemmlab")

# Element bytes and the array-interface type each input dtype is described as.
# 16-bit types are described as uint16: the copy engine only moves bits, and its
# zero fill of out-of-range elements is +0.0 in FP16 and BF16 alike.  "tf32" is
# FP32 storage described to the copy engine as TFLOAT32: it rounds every value to
# TF32 (to nearest) as it copies it into shared memory, which is what the wgmma
# rung's TF32 path relies on; "float32" maps copy the bits unchanged (C's map).
_ELEM = {"float16": (2, "<u2"), "bfloat16": (2, "<u2"), "tf32": (4, "<f4"), "float32": (4, "<f4")}
SWIZZLE_BYTES = 128          # 04_wgmma.cu's shared-memory layout
_CACHE_SIZE = 256
_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()
_backend: str | None = None   # "cuda.core" or "driver", once one has worked


@dataclass(frozen=True)
class Operands:
    """Raw device pointers and leading dimensions (in elements) of one call."""

    A: int
    lda: int
    B: int
    ldb: int
    C: int
    ldc: int


def tma_aligned(a_ptr: int, a_rows: int, lda: int, b_ptr: int, b_rows: int, ldb: int, elem_bytes: int) -> bool:
    """Whether A and B can be read through tensor maps: 16-byte aligned bases and
    row strides that are multiples of 16 bytes (a one-row matrix has no stride)."""
    def ok(ptr, rows, ld):
        return ptr % 16 == 0 and (rows <= 1 or (ld * elem_bytes) % 16 == 0)
    return ok(a_ptr, a_rows, lda) and ok(b_ptr, b_rows, ldb)


class _ArrayInterface:
    """__cuda_array_interface__ of a row-major rows x cols matrix at ``ptr``."""

    def __init__(self, ptr: int, rows: int, cols: int, ld: int, typestr: str, elem_bytes: int):
        self.__cuda_array_interface__ = {"shape": (rows, cols), "typestr": typestr, "data": (ptr, True),
                                         "strides": (ld * elem_bytes, elem_bytes), "version": 3,
                                         "stream": None}


def _encode_cuda_core(ptr, rows, cols, ld, dtype, box_rows, box_cols):
    from cuda.core.utils import StridedMemoryView
    from cuda.core._tensor_map import TensorMapL2Promotion, TensorMapSwizzle
    eb, typestr = _ELEM[dtype]
    view = StridedMemoryView.from_any_interface(_ArrayInterface(ptr, rows, cols, ld, typestr, eb), stream_ptr=-1)
    extra = {}
    if dtype == "tf32":
        from cuda.core._tensor_map import TensorMapDataType
        extra["data_type"] = TensorMapDataType.TFLOAT32
    return view.as_tensor_map(box_dim=(box_rows, box_cols), swizzle=TensorMapSwizzle.SWIZZLE_128B,
                              l2_promotion=TensorMapL2Promotion.L2_256B, **extra)


def _encode_driver(ptr, rows, cols, ld, dtype, box_rows, box_cols):
    from cuda.bindings import driver as d
    eb, _ = _ELEM[dtype]
    dt = (d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16 if eb == 2
          else d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 if dtype == "tf32"
          else d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32)
    err, tmap = d.cuTensorMapEncodeTiled(
        dt, 2, ptr, [d.cuuint64_t(cols), d.cuuint64_t(rows)], [d.cuuint64_t(ld * eb)],
        [d.cuuint32_t(box_cols), d.cuuint32_t(box_rows)], [d.cuuint32_t(1), d.cuuint32_t(1)],
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err.name}")
    return tmap


_ENCODERS = {"cuda.core": _encode_cuda_core, "driver": _encode_driver}


def _encode(*args, backend: str | None = None):
    global _backend
    forced = backend or os.environ.get("GEMMLAB_TMA")
    if forced:
        if forced not in _ENCODERS:
            raise ValueError(f"GEMMLAB_TMA={forced!r} is not one of {', '.join(_ENCODERS)}")
        return _ENCODERS[forced](*args)
    if _backend is not None:
        return _ENCODERS[_backend](*args)
    try:
        result = _encode_cuda_core(*args)
        _backend = "cuda.core"
    except (ImportError, AttributeError, TypeError) as exc:   # an API this cuda.core lacks
        log.debug("gemmlab: cuda.core cannot build tensor maps here (%s); using cuTensorMapEncodeTiled", exc)
        result = _encode_driver(*args)
        _backend = "driver"
    return result


def tensor_map(ptr: int, rows: int, cols: int, ld: int, dtype: str, box_rows: int, box_cols: int,
               backend: str | None = None):
    """A tensor map of the row-major rows x cols matrix at ``ptr`` (leading
    dimension ``ld`` elements), copied in box_rows x box_cols boxes into
    128-byte-swizzled shared memory; elements outside the matrix read as zero.
    ``backend="driver"`` asks for cuTensorMapEncodeTiled, which does not look the
    address up: the only encoder that takes memory a CUDA graph being captured
    allocated (see maps_backend)."""
    eb, _ = _ELEM[dtype]
    if box_cols * eb != SWIZZLE_BYTES:
        raise ValueError(f"a box row must be {SWIZZLE_BYTES} bytes for the 128-byte swizzle, not {box_cols * eb}")
    rows, cols = max(rows, 1), max(cols, 1)   # K = 0: nothing is copied, but a map needs sizes >= 1
    if rows == 1:   # no second row: any stride the copy engine accepts will do
        ld = -(-max(cols, 1) * eb // 16) * 16 // eb
    key = (ptr, rows, cols, ld, dtype if dtype == "tf32" else eb, box_rows, box_cols, backend)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    found = _encode(ptr, rows, cols, ld, dtype, box_rows, box_cols, backend=backend)
    with _lock:
        _cache[key] = found
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return found


def maps_backend(stream: int) -> str | None:
    """The encoder for maps of memory allocated during this call: under CUDA-graph
    capture such memory is the graph's own, which cuda.core's encoder cannot look
    up, so every map of that launch comes from the driver (launched through
    cuLaunchKernel); otherwise the default."""
    from .launch import stream_is_capturing
    return "driver" if stream_is_capturing(stream) else None


def _standard_args(pr, ops: Operands, alpha, beta) -> tuple:
    return (np.int32(pr.M), np.int32(pr.N), np.int32(pr.K), np.float32(alpha), ops.A, np.int32(ops.lda), ops.B,
            np.int32(ops.ldb), np.float32(beta), ops.C, np.int32(ops.ldc))


def _c_map(pr, ops: Operands, beta, box_rows: int, backend: str | None = None):
    """The map of C for the TMA-store epilogue, and whether to use it: beta == 0 (C is only
    written) and C readable by TMA; else the kernel stores from registers (the map passed
    then is a placeholder it never reads)."""
    dtype = "float32" if pr.out_dtype in ("float32", "tf32") else pr.out_dtype
    eb = _ELEM[dtype][0]
    if beta != 0 or not tma_aligned(ops.C, pr.M, ops.ldc, 0, 0, 0, eb):
        return None
    return tensor_map(ops.C, pr.M, pr.N, ops.ldc, dtype, box_rows, SWIZZLE_BYTES // eb, backend)


@contextmanager
def wgmma_kernel_args(plan, gpu, stream: int, ops: Operands, alpha, beta):
    """The wgmma rung's arguments: the standard eleven, the tensor maps of A, B and C,
    and whether the epilogue stores through C's map (beta == 0 and C aligned for TMA).

    16-bit inputs: A in BM x 64 boxes, B as stored in 64 x 64 boxes (64 columns of 64
    K-rows); C in 64-row boxes of 128 bytes.  TF32: the kernel computes C^T = B^T A^T,
    reading A in BN x 32 boxes and B as stored in 32 x 32 boxes, both through TFLOAT32
    maps, so that the copy engine rounds them to TF32 on the way into shared memory;
    C in 32 x 32 boxes.  An operand TMA cannot read in place (unaligned base or row
    stride) is first copied, rounded, by tensor/tf32_pack.cu into a stream-ordered
    workspace with rows padded to 16 bytes; the workspace is freed in stream order
    once the kernel is enqueued."""
    from ..kernels import registry
    pr, p = plan.problem, plan.params
    args = _standard_args(pr, ops, alpha, beta)
    if pr.dtype in ("float16", "bfloat16"):
        map_a = tensor_map(ops.A, pr.M, pr.K, ops.lda, pr.dtype, p["BM"], 64)
        map_c = _c_map(pr, ops, beta, 64)
        yield args + (map_a, tensor_map(ops.B, pr.K, pr.N, ops.ldb, pr.dtype, 64, 64),
                      map_c if map_c is not None else map_a, np.int32(map_c is not None))
        return
    if pr.dtype != "tf32":
        raise TypeError(f"wgmma computes float16, bfloat16 and tf32, not {pr.dtype}")
    tm = registry.wgmma_tile(p, "tf32")[0]
    pack_a = not tma_aligned(ops.A, pr.M, ops.lda, 0, 0, 0, 4)
    pack_b = not tma_aligned(ops.B, pr.K, ops.ldb, 0, 0, 0, 4)
    map_c = _c_map(pr, ops, beta, 32)
    if not (pack_a or pack_b):
        map_a = tensor_map(ops.A, pr.M, pr.K, ops.lda, "tf32", tm, 32)
        yield args + (map_a, tensor_map(ops.B, pr.K, pr.N, ops.ldb, "tf32", 32, 32),
                      map_c if map_c is not None else map_a, np.int32(map_c is not None))
        return
    from . import compile as rt_compile
    from .launch import device_workspace, launch, stream_from_handle
    kp, np_ = -(-pr.K // 4) * 4, -(-pr.N // 4) * 4          # rows of 16-byte multiples
    nbytes = 4 * ((pr.M * kp if pack_a else 0) + (pr.K * np_ if pack_b else 0))
    ws = device_workspace(gpu, stream, nbytes, "wgmma (TF32), for a TF32-rounded copy of an operand TMA cannot "
                                               "read in place,")
    try:
        a_src, lda, b_src, ldb = ops.A, ops.lda, ops.B, ops.ldb
        jobs, at = [], int(ws.handle)
        if pack_a:
            a_src, lda = at, kp
            jobs.append((pr.M, pr.K, ops.A, ops.lda, a_src, kp))
            at += 4 * pr.M * kp
        if pack_b:
            b_src, ldb = at, np_
            jobs.append((pr.K, pr.N, ops.B, ops.ldb, b_src, np_))
        tile, threads = registry.TF32_PACK_TILE, registry.TF32_PACK_THREADS
        kernel = rt_compile.load_kernel(registry.TF32_PACK_SOURCE, registry.TF32_PACK_KERNELS[0], gpu.arch)
        for rows, cols, src, ld, dst, ldd in jobs:
            blocks = -(-rows // tile) * -(-cols // tile)
            launch(kernel, (blocks, 1, 1), (threads, 1, 1), 0, stream, np.int32(rows), np.int32(cols), src,
                   np.int32(ld), dst, np.int32(ldd))
        be = maps_backend(stream)
        map_a = tensor_map(a_src, pr.M, pr.K, lda, "tf32", tm, 32, be)
        map_c = _c_map(pr, ops, beta, 32, be)
        yield args + (map_a, tensor_map(b_src, pr.K, pr.N, ldb, "tf32", 32, 32, be),
                      map_c if map_c is not None else map_a, np.int32(map_c is not None))
    finally:
        ws.close(stream)


@contextmanager
def ec_split_workspace(pr, gpu, stream: int, ops: Operands, scale_a: float = 1.0, scale_b: float = 1.0):
    """Split op(A) and op(B) of problem ``pr`` (dtype fp16_ec or tf32_ec) into their
    hi and lo parts with ec/split_pack.cu, into one stream-ordered workspace; yields
    (a_hi, a_lo, b_hi, b_lo, kp): device pointers of A's parts (M x K) and of B's,
    transposed (N x K), all with rows of kp elements (K padded to 16 bytes).  Any
    layout and alignment of A and B is read as stored.  The scaled FP16 method's
    scales (powers of two) are applied here.  Freed in stream order on exit."""
    from ..kernels import registry
    from . import compile as rt_compile
    from .launch import launch, stream_workspace
    if pr.dtype not in registry.EC_METHODS:
        raise TypeError(f"the split pre-pass is for {', '.join(registry.EC_METHODS)}, not {pr.dtype}")
    eb = 4 if pr.dtype == "tf32_ec" else 2
    kp = -(-pr.K // (16 // eb)) * (16 // eb)
    a_part, b_part = pr.M * kp * eb, pr.N * kp * eb
    nbytes = 2 * (a_part + b_part)
    ws = stream_workspace(gpu, stream, nbytes, "ec_wgmma, for the split parts of a and b,")
    try:
        base = int(ws.handle)
        a_hi, a_lo = base, base + a_part
        b_hi, b_lo = base + 2 * a_part, base + 2 * a_part + b_part
        tile, threads = registry.EC_SPLIT_PACK_TILE, registry.EC_SPLIT_PACK_THREADS
        jobs = [(pr.op_a, False, pr.M, pr.K, ops.A, ops.lda, scale_a, a_hi, a_lo),
                (pr.op_b, True, pr.K, pr.N, ops.B, ops.ldb, scale_b, b_hi, b_lo)]
        for op, transpose, rows, cols, src, ld, scale, hi, lo in jobs:
            name = registry.ec_split_pack_kernel(pr.dtype, op, transpose)
            kernel = rt_compile.load_kernel(registry.EC_SPLIT_PACK_SOURCE, name, gpu.arch)
            blocks = -(-rows // tile) * -(-cols // tile)
            launch(kernel, (blocks, 1, 1), (threads, 1, 1), 0, stream, np.int32(rows), np.int32(cols), src,
                   np.int32(ld), np.float32(scale), hi, lo, np.int32(kp))
        yield a_hi, a_lo, b_hi, b_lo, kp
    finally:
        ws.close(stream)


@contextmanager
def ec_wgmma_kernel_args(plan, gpu, stream: int, ops: Operands, alpha, beta):
    """ec_wgmma's arguments: the standard eleven, the tensor maps of the four
    parts (hi and lo of A, hi and lo of B^T: ec_split_workspace), then scale_a and
    scale_b (the kernel divides them out).  Both operands are K-major, the layout
    TF32 wgmma needs and FP16 wgmma reads without its transpose bit; A's parts in
    128-row boxes, B^T's in 96-row boxes, 128 bytes of K each."""
    from ..kernels import registry
    pr = plan.problem
    scale_a, scale_b = (float(x) for x in plan.extra_args())
    part, eb = ("tf32", 4) if pr.dtype == "tf32_ec" else ("float16", 2)
    with ec_split_workspace(pr, gpu, stream, ops, scale_a, scale_b) as (a_hi, a_lo, b_hi, b_lo, kp):
        box_k, bm, bn = 128 // eb, registry.EC_WGMMA_BM, registry.EC_WGMMA_BN
        be = maps_backend(stream)
        maps = tuple(tensor_map(ptr, rows, pr.K, kp, part, box_rows, box_k, be)
                     for ptr, rows, box_rows in ((a_hi, pr.M, bm), (a_lo, pr.M, bm), (b_hi, pr.N, bn), (b_lo, pr.N, bn)))
        yield _standard_args(pr, ops, alpha, beta) + maps + plan.extra_args()
