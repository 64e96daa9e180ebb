"""TMA tensor maps (Hopper): encoding and caching.

A tensor map (CUtensorMap, 128 opaque bytes) tells the copy engine where a
matrix is (base address, sizes, row stride) and which box one copy moves, with
which shared-memory swizzle.  A batch of matrices is one 3-D map: the batch is
the outermost dimension, its stride the bytes from one matrix to the next.  It is
built on the host by the driver's ``cuTensorMapEncodeTiled`` (through
cuda.bindings) and passed to the kernel by value (``const __grid_constant__``);
runtime.launch packs it into the launch's arguments.

A model's step brings new addresses whenever the allocator hands out other
blocks, so a map is encoded per new address and that must stay cheap: the
driver's call takes a few microseconds, where cuda.core's ``as_tensor_map``
(which looks the address up first, and cannot see memory a CUDA graph being
captured allocated) took many times that (benchmarks/NOTES.md).  Maps are also
cached by everything they encode (address, sizes, stride, box), so repeated
calls on the same arrays skip even that.

What a kernel passes in which maps (its launch arguments) is the kernel's own
host code, beside its .cu file: kernels/tensor/wgmma.py, kernels/ec/ec_wgmma.py.
"""

from __future__ import annotations

import ctypes
import threading
import types
from collections import OrderedDict
from dataclasses import dataclass

from .launch import driver


# Element bytes of each input dtype as the copy engine sees it.
# 16-bit types are described as uint16: the copy engine only moves bits, and its
# zero fill of out-of-range elements is +0.0 in FP16 and BF16 alike.  "tf32" is
# FP32 storage described to the copy engine as TFLOAT32: it rounds every value to
# TF32 (to nearest) as it copies it into shared memory, which is what the wgmma
# rung's TF32 path relies on; "float32" maps copy the bits unchanged (C's map).
# FP8 types (wgmma_fp8) are bytes to it (UINT8): a 128-byte box row is 128 values of K.
_ELEM = {"float16": 2, "bfloat16": 2, "tf32": 4, "float32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1}
SWIZZLE_BYTES = 128  # 04_wgmma.cu's shared-memory layout
_CACHE_SIZE = 8192  # maps kept by address: every operand of a model's step (a few hundred each)
_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()


@dataclass(frozen=True)
class Operands:
    """Raw device pointers and leading dimensions (in elements) of one launch: the
    first matrices of a batch of ``batch``, the next ones ``sa``, ``sb``, ``sc``
    elements further (0: every matrix of the batch is the same one).  ``bias``: the
    address of a bias the epilogue adds (0: none), element (z, m, n) at bias_zs * z +
    bias_rs * m + bias_cs * n (Launching.epilogue_bias).  ``partials``, ``counters``: the
    workspaces of a split of K that the kernel adds up itself (Launching.split_fixup; 0:
    none)."""

    A: int
    lda: int
    B: int
    ldb: int
    C: int
    ldc: int
    batch: int = 1
    sa: int = 0
    sb: int = 0
    sc: int = 0
    bias: int = 0
    bias_rs: int = 0
    bias_cs: int = 0
    bias_zs: int = 0
    partials: int = 0
    counters: int = 0


def element_bytes(dtype: str) -> int:
    """Bytes of one element of ``dtype`` as a tensor map moves it."""
    return _ELEM[dtype]


def tma_aligned(a_ptr: int, a_rows: int, lda: int, b_ptr: int, b_rows: int, ldb: int, elem_bytes: int) -> bool:
    """Whether A and B can be read through tensor maps: 16-byte aligned bases and
    row strides that are multiples of 16 bytes (a one-row matrix has no stride)."""

    def ok(ptr, rows, ld):
        return ptr % 16 == 0 and (rows <= 1 or (ld * elem_bytes) % 16 == 0)

    return ok(a_ptr, a_rows, lda) and ok(b_ptr, b_rows, ldb)


def tma_readable(ptr: int, rows: int, ld: int, elem_bytes: int, batch_strides=()) -> bool:
    """Whether one operand can be read through a tensor map in place: its base and row
    stride on the 16-byte grid (tma_aligned) and each batch stride (elements) too, and
    not negative (the copy engine steps forward only)."""
    return tma_aligned(ptr, rows, ld, 0, 0, 0, elem_bytes) and all(
        s >= 0 and (s * elem_bytes) % 16 == 0 for s in batch_strides
    )


def padded_ld(cols: int, elem_bytes: int) -> int:
    """The leading dimension of a copy of rows of ``cols`` elements padded to a multiple
    of 16 bytes (what a tensor map's row stride must be)."""
    per = 16 // elem_bytes
    return -(-max(cols, 1) // per) * per


def _encode_driver(ptr, rows, cols, ld, dtype, box_rows, box_cols, batch=None, bstride=0):
    eb = _ELEM[dtype]
    dims, strides, box = (cols, rows), (ld * eb,), (box_cols, box_rows)
    if batch is not None:  # the batch: the outermost dimension
        dims, strides, box = dims + (batch,), strides + (bstride,), box + (1,)
    enc = _encoding()
    kind = "tf32" if dtype == "tf32" else eb
    c = _entries()
    if c:  # the driver's entry point itself
        u64, u32, rank = ctypes.c_uint64, ctypes.c_uint32, len(dims)
        tmap = driver().CUtensorMap()
        err = c.encode(
            tmap.getPtr(),
            enc.type_codes[kind],
            rank,
            ptr,
            (u64 * rank)(*dims),
            (u64 * (rank - 1))(*strides),
            (u32 * rank)(*box),
            (u32 * rank)(*(1,) * rank),
            *enc.mode_codes,
        )
        if err:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {err}")
        return tmap
    d = driver()
    err, tmap = d.cuTensorMapEncodeTiled(
        enc.types[kind],
        len(dims),
        ptr,
        [d.cuuint64_t(x) for x in dims],
        [d.cuuint64_t(x) for x in strides],
        [d.cuuint32_t(x) for x in box],
        [d.cuuint32_t(1)] * len(dims),
        *enc.modes,
    )
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err.name}")
    return tmap


class _Encoding:
    """The binding's enum values every map is encoded with, read once: the data type by
    element bytes ("tf32" for TF32), and the interleave, swizzle, L2 and fill modes;
    ``*_codes``: the same as the ints the driver's entry point takes."""

    def __init__(self):
        d = driver()
        T = d.CUtensorMapDataType
        self.types = {
            1: T.CU_TENSOR_MAP_DATA_TYPE_UINT8,
            2: T.CU_TENSOR_MAP_DATA_TYPE_UINT16,
            "tf32": T.CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
            4: T.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        }
        self.modes = (
            d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        self.type_codes = {k: int(v) for k, v in self.types.items()}
        self.mode_codes = tuple(map(int, self.modes))


_encoding_read = None


def _encoding() -> _Encoding:
    global _encoding_read
    if _encoding_read is None:
        _encoding_read = _Encoding()
    return _encoding_read


_encode = _encode_driver  # the one encoder (tests stand fakes in)


def replace_address(map_address: int, address: int) -> None:
    """Point the tensor map stored at host address ``map_address`` at the global address
    ``address`` (cuTensorMapReplaceAddress: the sizes, strides and box stay): how a launch
    prepared for one set of arrays is made for another of the same shapes
    (launch.MapParams.rebound), without encoding the maps again.  ``address`` must be
    16-byte aligned, as the map's first one was."""
    c = _entries()
    if c:
        err = c.replace(map_address, address)
        if err:
            raise RuntimeError(f"cuTensorMapReplaceAddress failed: CUresult {err}")
        return
    d = driver()
    (err,) = d.cuTensorMapReplaceAddress(d.CUtensorMap(_ptr=map_address), address)
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapReplaceAddress failed: {err.name}")


_c = None  # the driver's entry points through ctypes, looked up once (False: not found)


def _c_entries():
    """cuTensorMapEncodeTiled and cuTensorMapReplaceAddress called straight from the driver
    library the process has loaded (ctypes): a call on new addresses or of a new size makes
    up to three maps, and the binding's calls wrap each argument and the result in objects
    that cost more than the driver's work.  False where the library is not found by its
    Linux name: the binding's calls are used."""
    global _c
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        encode, replace = lib.cuTensorMapEncodeTiled, lib.cuTensorMapReplaceAddress
    except (OSError, AttributeError):
        _c = False
        return _c
    p, u32, i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int
    encode.argtypes = (p, i32, u32, p, p, p, p, p, i32, i32, i32, i32)
    replace.argtypes = (p, ctypes.c_uint64)
    encode.restype = replace.restype = i32
    _c = types.SimpleNamespace(encode=encode, replace=replace)
    return _c


def _entries():
    """_c_entries', looked up at the first call."""
    return _c if _c is not None else _c_entries()


def moved_map(tmap, address: int):
    """A copy of the tensor map ``tmap`` pointed at ``address`` (replace_address on a copy)."""
    moved = driver().CUtensorMap()
    ctypes.memmove(moved.getPtr(), tmap.getPtr(), 128)
    replace_address(moved.getPtr(), address)
    return moved


def tensor_map(
    ptr: int,
    rows: int,
    cols: int,
    ld: int,
    dtype: str,
    box_rows: int,
    box_cols: int,
    *,
    batch: int | None = None,
    batch_stride: int = 0,
):
    """A tensor map of the row-major rows x cols matrix at ``ptr`` (leading
    dimension ``ld`` elements), copied in box_rows x box_cols boxes into
    128-byte-swizzled shared memory; elements outside the matrix read as zero.
    With ``batch``: a 3-D map of that many matrices ``batch_stride`` elements
    apart, the batch outermost (a box is one matrix's; coordinates past a
    matrix's rows read zero, never the next matrix).  cuTensorMapEncodeTiled
    documents strides as multiples of 16 bytes, each including the one before;
    a stride of 0 is outside that contract, so a matrix every member of a batch
    shares (numpy.matmul broadcasting) is a batch of one, read at coordinate 0."""
    eb = _ELEM[dtype]
    if box_cols * eb != SWIZZLE_BYTES:
        raise ValueError(f"a box row must be {SWIZZLE_BYTES} bytes for the 128-byte swizzle, not {box_cols * eb}")
    rows, cols = max(rows, 1), max(cols, 1)  # K = 0: nothing is copied, but a map needs sizes >= 1
    if rows == 1:  # no second row: any stride the copy engine accepts will do
        ld = padded_ld(cols, eb)
    bstride = 0
    if batch is not None:
        if batch > 1 and (batch_stride <= 0 or (batch_stride * eb) % 16):
            raise ValueError(
                f"a batch of tensor maps needs a positive stride of a multiple of 16 bytes, not {batch_stride * eb}"
            )
        # A batch of one has no second matrix: any stride the copy engine accepts will do.
        bstride = batch_stride * eb if batch > 1 else -(-rows * ld * eb // 16) * 16
    key = (ptr, rows, cols, ld, dtype if dtype == "tf32" else eb, box_rows, box_cols, batch, bstride)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    found = _encode(ptr, rows, cols, ld, dtype, box_rows, box_cols, batch, bstride)
    with _lock:
        _cache[key] = found
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return found
