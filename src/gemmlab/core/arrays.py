"""Reading caller arrays (CuPy, PyTorch, NumPy, any DLPack / CUDA Array Interface
object) without copying, and making outputs of the caller's kind."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Operand:
    """What gemmlab needs to know about one array argument."""

    name: str  # "a", "b" or "out", for error messages
    obj: object
    kind: str  # "numpy", "cupy", "torch" or "cuda" (another GPU array)
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: np.dtype | str | None  # a NumPy dtype, or a name NumPy lacks (PyTorch's "bfloat16")
    device: int  # -1 for host memory
    ptr: int
    # The caller's shape, where this describes a view of it with other dimensions (a
    # vector read as a 1 x n or n x 1 matrix): messages name what the caller passed.
    shown: tuple[int, ...] | None = None

    @property
    def dtype_name(self) -> str | None:
        """float32, float16, bfloat16, ...: one spelling for NumPy, CuPy and PyTorch dtypes."""
        if self.dtype is None:
            return None
        if isinstance(self.dtype, str):
            return self.dtype
        name = _DTYPE_NAMES.get(self.dtype)
        if name is None:  # NumPy's name lookup takes microseconds: once per dtype
            name = _DTYPE_NAMES[self.dtype] = np.dtype(self.dtype).name
        return name

    @property
    def on_gpu(self) -> bool:
        return self.device >= 0

    def where(self) -> str:
        return "host memory" if self.device < 0 else f"GPU {self.device}"

    def label(self) -> str:
        kinds = {"numpy": "NumPy array", "cupy": "CuPy array", "torch": "PyTorch tensor", "cuda": "GPU array"}
        shape = self.shape if self.shown is None else self.shown
        return f"{self.name} ({kinds[self.kind]}, shape {shape}, {self.dtype}, on {self.where()})"

    @property
    def itemsize(self) -> int:
        return ITEMSIZE.get(self.dtype_name, 1)

    def span(self) -> tuple[int, int]:
        """[first, last) byte addresses the array can touch (negative strides too)."""
        lo, hi = self.reach(self.shape)
        return (self.ptr + lo, self.ptr + hi)

    def reach(self, shape, strides=None) -> tuple[int, int]:
        """[first, last) bytes, from its address, that an array of ``shape`` with these strides
        (or ``strides``) can touch (the array's own shape, or another size of it:
        executor.Family)."""
        lo = hi = 0
        for n, s in zip(shape, self.strides if strides is None else strides):
            if n == 0:
                return (0, 0)
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
        item = self.itemsize
        return (lo * item, (hi + 1) * item)

    def meets(self, other: "Operand") -> bool:
        """Whether the memory this array can touch meets ``other``'s."""
        (lo, hi), (olo, ohi) = self.span(), other.span()
        return lo < ohi and olo < hi


ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
_DTYPE_NAMES: dict = {}  # NumPy dtype -> its name (Operand.dtype_name)


def _stored_axes(nd: int, form: str):
    """The axes of an array of ``nd`` dimensions stored in ``form``, innermost first: "C" C
    order, "T" C order with the last two axes swapped (a transposed view, ``k.transpose(-1, -2)``)."""
    return range(nd - 1, -1, -1) if form == "C" else (nd - 2, nd - 1, *range(nd - 3, -1, -1))


def stored_order(shape, strides, unit: int = 1) -> str | None:
    """ "C" or "T" (_stored_axes) where ``strides`` (in units of ``unit``: 1 for elements, the
    itemsize for bytes) are that order's for ``shape`` with nothing between the elements,
    else None.  Axes of one element are not looked at: nothing steps along them."""
    nd = len(shape)
    for form in ("C", "T") if nd >= 2 else ("C",):
        expect = unit
        for i in _stored_axes(nd, form):
            if shape[i] != 1 and strides[i] != expect:
                break
            expect *= shape[i]
        else:
            return form
    return None


def ordered_strides(shape, form: str) -> tuple[int, ...]:
    """The element strides of an array of ``shape`` stored in ``form`` (stored_order's)."""
    strides, acc = [0] * len(shape), 1
    for i in _stored_axes(len(shape), form):
        strides[i] = acc
        acc *= max(shape[i], 1)
    return tuple(strides)


def _c_strides(shape) -> tuple[int, ...]:
    return ordered_strides(shape, "C")


def _is_torch(obj) -> bool:
    t = type(obj)
    return t.__module__.startswith("torch") and hasattr(obj, "is_cuda")


def _is_cupy(obj) -> bool:
    return type(obj).__module__.startswith("cupy")


def broadcasts(shape, result_shape) -> bool:
    """Whether an array of ``shape`` broadcasts to ``result_shape`` as NumPy broadcasts: read
    from the sizes (torch.broadcast_shapes, a Python function, costs microseconds a call)."""
    return len(shape) <= len(result_shape) and all(
        s == 1 or s == n for s, n in zip(reversed(shape), reversed(result_shape))
    )


def read_operand(obj, name: str) -> Operand:
    """An Operand for ``obj``, or TypeError if it is not an array gemmlab can read."""
    if isinstance(obj, np.ndarray):
        item = obj.dtype.itemsize
        return Operand(
            name, obj, "numpy", tuple(obj.shape), tuple(s // item for s in obj.strides), obj.dtype, -1, obj.ctypes.data
        )
    source = obj
    if _is_torch(obj):
        if not obj.is_cuda:
            raise TypeError(
                f"{name} is a PyTorch tensor on the {obj.device}; gemmlab reads PyTorch "
                f"tensors on a CUDA device (move it with {name}.cuda()) or NumPy arrays"
            )
        if obj.requires_grad:  # same memory; PyTorch refuses to export tensors that require grad
            source = obj.detach()
    # Look the protocols up on the type: evaluating them can raise (PyTorch does).
    elif not (hasattr(type(obj), "__cuda_array_interface__") or hasattr(type(obj), "__dlpack__")):
        raise TypeError(
            f"{name} must be a CuPy array, a PyTorch CUDA tensor, a NumPy array or "
            f"another DLPack / CUDA Array Interface array; got {type(obj).__name__}"
        )
    from cuda.core.utils import StridedMemoryView

    try:
        view = StridedMemoryView.from_any_interface(source, stream_ptr=-1)
    except Exception as exc:
        raise TypeError(f"{name} ({type(obj).__name__}) could not be read as an array: {exc}") from exc
    shape = tuple(view.shape)
    strides = tuple(view.strides) if view.strides is not None else _c_strides(shape)
    # CuPy's and PyTorch's own strides: signed (a reversed CuPy array's negative stride
    # has come through the interfaces read as unsigned).
    if _is_cupy(obj) and hasattr(obj, "strides") and hasattr(obj, "itemsize"):
        strides = tuple(s // obj.itemsize for s in obj.strides)
    elif _is_torch(obj):
        strides = tuple(obj.stride())
    elif hasattr(type(obj), "__cuda_array_interface__"):  # another library's: the interface's byte strides
        strides = _cai_strides(obj, strides)
    try:
        dtype = np.dtype(view.dtype) if view.dtype is not None else None
    except TypeError:
        dtype = None
    if _is_torch(obj):
        kind, dtype = "torch", dtype if dtype is not None else _torch_dtype_name(obj)
    elif _is_cupy(obj):
        kind = "cupy"
    else:
        kind = "cuda"
    device = view.device_id if view.is_device_accessible else -1
    if kind != "numpy" and device < 0:
        raise TypeError(
            f"{name} ({type(obj).__name__}) lives in host memory; pass a NumPy array or an array on a CUDA device"
        )
    _learn_type(obj, kind)
    return Operand(name, obj, kind, shape, strides, dtype, device, view.ptr)


def _cai_strides(obj, fallback: tuple) -> tuple:
    """Element strides from a CUDA Array Interface (signed byte strides; None: C order)."""
    try:
        cai = obj.__cuda_array_interface__
        item = np.dtype(cai["typestr"]).itemsize
        shape = tuple(cai["shape"])
        return tuple(s // item for s in cai["strides"]) if cai.get("strides") else _c_strides(shape)
    except Exception:  # an interface we cannot read this way: the view's strides stand
        return fallback


def _torch_dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def current_stream(op: Operand) -> int:
    """The caller's current stream on op's device, as a cudaStream_t handle."""
    return stream_getter(op.kind)(max(op.device, 0))


# -- the prepared-call fast path: cheap reads of the array types gemmlab knows -----------------
#
# A repeated call is recognised by a signature of each array: its kind, shape,
# strides, dtype, device and whether its address is 16-byte aligned -- the
# facts every check and every choice of gemmlab.core.planner depends on, read
# straight off the object (a fraction of a microsecond each) instead of through
# a StridedMemoryView.  Only exact types are listed (subclasses such as DTensor
# may answer these attributes differently): everything else takes the full path.


def _torch_signature(t):
    p = t.data_ptr()
    return p, ("torch", t.shape, t.stride(), t.dtype, t.get_device(), not p & 15)


def _cupy_signature(x):
    p = x.data.ptr
    return p, ("cupy", x.shape, x.strides, x.dtype, x.device.id, not p & 15)


SIGNATURES: dict = {}  # array type -> signature reader, filled as read_operand() meets the types


def _learn_type(obj, kind: str) -> None:
    t = type(obj)
    if t in SIGNATURES:
        return
    if kind == "torch":
        import torch

        if t is torch.Tensor or t is torch.nn.Parameter:
            SIGNATURES[t] = _torch_signature
    elif kind == "cupy":
        import cupy

        if t is cupy.ndarray:
            SIGNATURES[t] = _cupy_signature


_stream_getters: dict = {}


def stream_getter(kind: str):
    """A function device -> the caller's current stream there (cudaStream_t), for
    arrays of ``kind``: PyTorch's current stream for tensors, CuPy's for the rest."""
    found = _stream_getters.get(kind)
    if found is not None:
        return found
    if kind == "torch":
        import torch

        # The raw handle without building a torch.cuda.Stream (5 us on an H100's host).
        found = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda device: torch.cuda.current_stream(device).cuda_stream
        )
    else:
        import cupy

        def found(device):
            with cupy.cuda.Device(device):
                return cupy.cuda.get_current_stream().ptr

        try:  # CuPy 13+ takes the device directly
            cupy.cuda.get_current_stream(0)
            found = lambda device: cupy.cuda.get_current_stream(device).ptr  # noqa: E731
        except TypeError:
            pass
    _stream_getters[kind] = found
    return found


def allocator(kind: str, shape, device: int, dtype: str):
    """A function () -> (new C-ordered array, its address) for results of
    ``kind`` (PyTorch for tensors, CuPy otherwise), on the caller's current stream."""
    if kind == "torch":
        import torch

        # empty_strided with the C-order strides and the device as an int: the
        # fewest arguments for PyTorch to parse (about 2 us less than
        # empty(shape, device=torch.device) on an H100's host).
        tdt, strides = getattr(torch, dtype), _c_strides(shape)

        def alloc():
            try:
                t = torch.empty_strided(shape, strides, dtype=tdt, device=device)
            except Exception as exc:
                raise _result_error(exc, shape, device, dtype)
            return t, t.data_ptr()

        return alloc
    import cupy

    ndt = np.dtype(dtype)

    def alloc():
        try:
            if cupy.cuda.runtime.getDevice() == device:
                x = cupy.empty(shape, ndt)
            else:
                with cupy.cuda.Device(device):
                    x = cupy.empty(shape, ndt)
        except Exception as exc:
            raise _result_error(exc, shape, device, dtype)
        return x, x.data.ptr

    return alloc


def _result_error(exc, shape, device, dtype):
    if _is_out_of_memory(exc):
        return gpu_memory_error(
            f"the result ({' x '.join(map(str, shape))} {dtype})", ITEMSIZE[dtype] * int(np.prod(shape)), device, exc
        )
    return exc


def _is_out_of_memory(exc: BaseException) -> bool:
    """CuPy's OutOfMemoryError, PyTorch's torch.cuda.OutOfMemoryError, a driver's
    CUDA_ERROR_OUT_OF_MEMORY: whatever the array library raised when memory ran out."""
    return (
        isinstance(exc, MemoryError)
        or "OutOfMemory" in type(exc).__name__
        or "out of memory" in str(exc).lower()
        or "OUT_OF_MEMORY" in str(exc)
    )


def gpu_memory_error(what: str, nbytes: int, device: int, exc: BaseException) -> MemoryError:
    """A MemoryError that says what did not fit, how big it is and how much is free."""
    free = ""
    try:
        from cuda.bindings import runtime

        err, free_b, total_b = runtime.cudaMemGetInfo()
        if int(err) == 0:
            free = f" ({free_b / 2**30:.1f} GiB of {total_b / 2**30:.1f} GiB free)"
    except Exception:  # the report is a courtesy; the error stands without it
        pass
    return MemoryError(
        f"{what} needs {nbytes / 2**30:.2f} GiB on GPU {device}, which does not have it"
        f"{free}: {type(exc).__name__}: {exc}"
    )


def empty_like_kind(op: Operand, shape, device: int, dtype: str = "float32"):
    """A new C-ordered ``dtype`` array of ``shape`` of op's kind on ``device`` (CuPy for foreign GPU arrays)."""
    try:
        if op.kind == "torch":
            import torch

            return torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{device}")
        import cupy

        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=np.dtype(dtype))
    except Exception as exc:
        if _is_out_of_memory(exc):
            raise gpu_memory_error(
                f"the result ({' x '.join(map(str, shape))} {dtype})",
                ITEMSIZE[dtype] * int(np.prod(shape)),
                device,
                exc,
            ) from exc
        raise


def contiguous_copy(op: Operand, device: int, dtype: str | None = None):
    """A new C-ordered copy of a GPU operand (always new memory, even of a
    contiguous one: an out that shares memory with an input is computed in it),
    made on the caller's current stream (CuPy or PyTorch), converted to
    ``dtype`` on the way where given (an operand of a mixed-dtype product)."""
    try:
        if op.kind == "torch":
            import torch

            x = op.obj.detach()
            return x.to(
                dtype=getattr(torch, dtype) if dtype is not None else x.dtype,
                memory_format=torch.contiguous_format,
                copy=True,
            )
        import cupy

        with cupy.cuda.Device(device):
            return cupy.array(op.obj, dtype=np.dtype(dtype) if dtype is not None else None, order="C", copy=True)
    except Exception as exc:
        if _is_out_of_memory(exc):
            nbytes = ITEMSIZE.get(dtype, op.itemsize) * int(np.prod(op.shape))
            raise gpu_memory_error(f"a contiguous copy of {op.label()}", nbytes, device, exc) from exc
        raise


def copy_into(dst: Operand, src) -> None:
    """dst[...] = src on the caller's current stream (CuPy or PyTorch)."""
    if dst.kind == "torch":
        dst.obj.copy_(src)
    else:
        dst.obj[...] = src


def need_cupy(what: str):
    try:
        import cupy

        return cupy
    except ImportError as exc:
        from .errors import EXTRAS, MissingExtraError

        raise MissingExtraError(f"{what} needs CuPy: {EXTRAS['cupy'][1]}") from exc
