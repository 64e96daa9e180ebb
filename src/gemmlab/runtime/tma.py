"""TMA tensor maps (Hopper): encoding and caching.

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

What a kernel passes in which maps (its launch arguments) is the kernel's own
host code, beside its .cu file: kernels/tensor/wgmma.py, kernels/ec/ec_wgmma.py.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

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


def element_bytes(dtype: str) -> int:
    """Bytes of one element of ``dtype`` as a tensor map moves it."""
    return _ELEM[dtype][0]


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
