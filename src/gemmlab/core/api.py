"""The public entry points: gemmlab.matmul, matmul_strided_batched, last_plan, kernels.

A call goes one way: the caller's arrays -> a signature of cheap attribute
reads -> a prepared call from gemmlab.core.executor's cache, launched (or, for operands
the kernels cannot take in place, a CopiedCall: their copies, then the call on them); or,
the first time a signature is seen (and for NumPy arrays), gemmlab.core.planner's full
validation and plan -> a new prepared call, stored -> launched.
"""

from __future__ import annotations

import dataclasses
import numbers
import math
import threading
import time

import numpy as np

from . import grouped, planner, scaled, tables
from .bias import BiasView, add_bias, bias_view
from .arrays import (
    ITEMSIZE,
    SIGNATURES,
    _is_out_of_memory,
    contiguous_copy,
    copy_into,
    read_operand,
    empty_like_kind,
    gpu_memory_error,
    need_cupy,
    stored_order,
)
from .executor import CACHE, Family, PreparedCall
from ..kernels import registry
from .planner import Plan, plan
from ..runtime import device as rt_device
from ..runtime.device import make_current
from ..runtime.launch import recording, spoil_recording

_tls = threading.local()
_now = time.monotonic_ns
# Where a call of this thread may have run after its last matmul call without Python: the C++
# routed kernels (gemmlab.torch.native) repeat calls.  Each is asked (the time of the last call
# here, CLOCK_MONOTONIC ns) and answers the plan of a repeat made later, or None.
later_plans: list = []


def note_plan(p) -> None:
    """This thread's last call ran ``p`` (a Plan, or what resolves to one)."""
    _tls.last_plan = p
    _tls.at = _now()


def noted_plan():
    """What this thread's last call through Python noted (not resolved)."""
    return getattr(_tls, "last_plan", None)


def last_plan() -> Plan | None:
    """The plan of this thread's last ``matmul`` call (or routed product): kernel,
    tile parameters, and for ``precision="fp32_tc"`` the method chosen and why.
    That method is chosen on the GPU during the call; it is read back only here
    (this waits for the GPU), as the call's latest run chose it (a replayed CUDA
    graph's too)."""
    p = getattr(_tls, "last_plan", None)
    if later_plans:
        at = getattr(_tls, "at", 0)
        for later in later_plans:
            q = later(at)
            if q is not None:
                p = q
    return p if p is None or type(p) is Plan else p.resolve()


def grouped_mm(a, b, offs, out=None, *, out_dtype=None, kernel: str = "auto", **tile_params):
    """The products of a mixture-of-experts layer in one launch: for every group g,
    ``out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g]`` (offs[-1] = 0), on PyTorch
    float16 / bfloat16 CUDA tensors -- a (T, K) row-major, b (G, K, N) row-major or
    ``W.transpose(-2, -1)`` of a row-major (G, N, K), offs G int32 cumulative ends on the
    GPU (torch._grouped_mm's) -- by the grouped rung on Hopper (sm_90a).  K and N must be
    multiples of 8.  Returns out (new where not given; rows past offs[G-1] are not written).
    See gemmlab.core.grouped and docs/tensor/06-grouped.md."""
    result = grouped.grouped_mm(a, b, offs, out=out, out_dtype=out_dtype, kernel=kernel, **tile_params)
    note_plan(grouped.last_grouped_plan())
    return result


def _plain(x) -> bool:
    """A value whose hash and equality say everything about it for a signature (a
    float 1.0 and an int 1 hash alike, so numbers are taken by exact type only)."""
    return x is None or type(x) is str


def matmul(
    a,
    b,
    *,
    out=None,
    alpha=1.0,
    beta=0.0,
    bias=None,
    trans_a: bool = False,
    trans_b: bool = False,
    kernel: str = "auto",
    precision: str | None = None,
    out_dtype=None,
    scale_a=None,
    scale_b=None,
    **tile_params,
):
    """out = alpha * op(a) @ op(b) + bias + beta * out with one of gemmlab's kernels.

    op(a) is ``a``, or its transpose with ``trans_a=True`` (likewise ``b``);
    op(a) is (..., M, K) and op(b) (..., K, N).  Matrices are read in place
    from their strides: row-major, column-major (Fortran order, ``a.T``,
    ``tensor.t()``) and padded rows or columns all run without a copy, the
    layout going to the kernel as a compile-time flag.  An operand whose
    matrices have unit stride on neither side or a negative stride (``a[:, ::2]``,
    ``a[::-1]``) is copied once to a contiguous array first (as NumPy and
    cuBLAS users expect).  A column-major ``out`` is computed as
    out^T = op(b)^T @ op(a)^T, again without a copy.

    Shapes follow numpy.matmul.  A vector (1-D) ``a`` is read as a 1 x K
    matrix and a vector ``b`` as K x 1, and that 1 is left out of the result:
    (K,) @ (..., K, N) is (..., N), (..., M, K) @ (K,) is (..., M), and
    (K,) @ (K,) is the dot product, a 0-d array of the inputs' kind (a NumPy
    scalar for NumPy inputs, as numpy.matmul gives).  A vector is its own
    transpose: ``trans_a`` / ``trans_b`` leave it alone.  Leading (batch)
    dimensions broadcast (aligned from the right, equal or 1; a 2-D operand is
    used for every batch), any batch strides (0 and negative included) are read
    as they are.  Any dimension may be 0: an empty result (M, N or a batch of
    0) launches nothing; K = 0 gives ``beta * out`` (zeros without ``out``).
    Scalars (0-d), inner dimensions that differ and batches that do not
    broadcast are refused with ValueError, as numpy.matmul refuses them.

    ``a`` and ``b`` are CuPy arrays, PyTorch CUDA tensors (read in place) or
    NumPy arrays (copied to the GPU; the result comes back as NumPy) of
    float32 (CUDA cores; ``precision="tf32"`` asks for TF32 tensor cores
    instead, never chosen otherwise), float16 or bfloat16 (tensor cores, FP32
    accumulation); other dtypes are refused with TypeError.  Operands of two
    dtypes are promoted as torch.result_type and numpy.matmul promote them
    (float16 with bfloat16, or either with float32: float32): the narrower one
    is converted to float32 once, on the GPU, and the product is float32.  The
    result is ``out_dtype``: by default the (promoted) inputs' dtype; float32
    for 16-bit inputs on request.  Returns ``out`` if given, else a new
    C-ordered array of a's kind.  The kernels run on the caller's current stream
    (CuPy's or PyTorch's).  ``beta`` other than 0 needs ``out``.  With ``beta ==
    0``, ``out`` is never read; with ``alpha == 0`` or K == 0, neither ``a`` nor
    ``b`` is read and the result is ``beta * out`` (zeros when ``beta == 0``), as
    in BLAS.

    ``out`` must have the result's shape (numpy's, vectors' 1s left out) and
    elements that do not share memory with each other (a zero stride is
    refused).  Otherwise any ``out`` is taken, as numpy.matmul takes it: one
    with strides the kernels cannot write (negative, no unit stride), one of
    another float dtype than the result (numpy's ``casting="same_kind"``:
    float32 results go into a float16 ``out`` rounded), or one that shares
    memory with ``a`` or ``b`` (``matmul(a, a, out=a)``) gets the result
    computed in a new array (of the result's dtype, from a copy of ``out``
    where ``beta != 0``) and copied into it, after the product has read its
    inputs.  ``out_dtype`` names what the kernel writes and, with ``out``,
    must be out's dtype.  Everything is checked before any launch; on error
    nothing is written.

    ``bias`` (optional) is added to the product: an array of a's kind and device with
    the result's dtype that broadcasts to the result's shape, as in NumPy (nn.Linear's
    bias: a vector of N, added to every row; ``torch.addmm(bias, a, b)`` is
    ``matmul(a, b, bias=bias)``).  The wgmma rung adds it in its epilogue, in FP32
    before the result is rounded, so that it costs no second pass over the result;
    other rungs add it after the product.  It must not share memory with ``out``.

    The first call with a given signature (array kinds, shapes, strides, dtypes,
    devices and 16-byte alignment of a, b and out; out given or not; alpha == 0,
    beta == 0; trans flags; kernel, tile parameters, precision, out_dtype) is
    validated and planned, and what it runs is kept (gemmlab.core.executor.CACHE);
    later calls with the same signature only check that out does not overlap a
    or b (one that does takes the full path and its copy), fill in the
    addresses and launch.  Calls are asynchronous and can be
    captured in CUDA graphs (CuPy stream capture, ``torch.cuda.graph``),
    ``precision="fp32_tc"`` and ``"fp16_ec_scaled"`` included: they choose their
    method (and scales) from the data on the GPU, at every run of the call.

    FP8 (Hopper only): ``a`` and ``b`` PyTorch tensors of torch.float8_e4m3fn or
    torch.float8_e5m2 (each its own), ``a`` row-major M x K and ``b`` column-major K x N
    (``w.t()`` of a row-major N x K weight, as torch._scaled_mm takes it), with float32
    ``scale_a`` and ``scale_b``: out = alpha * (scale_a a) @ (scale_b b) + beta * out,
    the result bfloat16 (default) or float32.  The scales' shapes say how they apply: one
    value each (per tensor); (M, 1) and (1, N) (per row of a, per column of b); (M,
    ceil(K/128)) and (ceil(N/128), ceil(K/128)) (1 x 128 and 128 x 128 blocks).  See
    gemmlab.core.scaled and docs/tensor/05-wgmma-fp8.md; ``bias`` (the result's dtype, broadcast
    to M x N) is added after the product; no batch or precision yet.
    """
    if scale_a is not None or scale_b is not None:
        return _matmul_fp8(
            a, b, out, alpha, beta, bias, trans_a, trans_b, kernel, precision, out_dtype, scale_a, scale_b, tile_params
        )
    # The fast path: a signature from attribute reads, and a prepared call for it.
    found = _signature(a, b, out, alpha, beta, trans_a, trans_b, kernel, precision, out_dtype, tile_params, bias)
    if found is not None:
        key, pa, pb, pc, pbias = found
        try:
            prepared = CACHE.get(key)
        except TypeError:  # an unhashable tile parameter: the full path says what is wrong with it
            prepared = None
        if prepared is None:
            prepared = _family_member(key, a, pa, b, pb, out, pc)
        if prepared is not None:
            if type(prepared) is CopiedCall:
                result = prepared.run(a, pa, b, pb, out, pc, alpha, beta)
            else:
                result = _run_prepared(prepared, pa, pb, out, pc, alpha, beta, bias, pbias)
            if result is not None:
                return result
    return _matmul_full(a, b, out, alpha, beta, trans_a, trans_b, kernel, precision, out_dtype, tile_params, bias)


def _is_fp8(x) -> bool:
    return "float8" in str(getattr(x, "dtype", ""))


def _matmul_fp8(
    a, b, out, alpha, beta, bias, trans_a, trans_b, kernel, precision, out_dtype, scale_a, scale_b, tile_params
):
    """An FP8 call (gemmlab.core.scaled): what it does not take is refused by name."""
    if precision is not None:
        raise ValueError(f"precision={precision!r} is for float32 inputs; FP8 products have none")
    result = scaled.matmul_scaled(
        a,
        b,
        scale_a,
        scale_b,
        out=out,
        alpha=alpha,
        beta=beta,
        out_dtype=out_dtype,
        trans_a=trans_a,
        trans_b=trans_b,
        kernel=kernel,
        bias=bias,
        **tile_params,
    )
    note_plan(scaled.last_scaled_plan())
    return result


def _signature(a, b, out, alpha, beta, trans_a, trans_b, kernel, precision, out_dtype, tile_params, bias=None):
    """(key, address of a, of b, of out, of bias) of a call whose arrays gemmlab can read by
    attributes (CuPy arrays, PyTorch tensors) and whose other arguments have exact
    types; None for anything else, which takes the full path every time."""
    sig_a, sig_b = SIGNATURES.get(type(a)), SIGNATURES.get(type(b))
    if (
        sig_a is None
        or sig_b is None
        or not (type(alpha) is float or type(alpha) is int)
        or not (type(beta) is float or type(beta) is int)
        or not (trans_a is False or trans_a is True)
        or not (trans_b is False or trans_b is True)
        or type(kernel) is not str
        or not _plain(precision)
        or not (_plain(out_dtype) or type(out_dtype).__name__ == "dtype")
    ):
        return None
    sig_o = None
    if out is not None:
        sig_o = SIGNATURES.get(type(out))
        if sig_o is None:
            return None
    tp = tuple((k, v, type(v)) for k, v in tile_params.items()) if tile_params else ()
    pa, ka = sig_a(a)
    pb, kb = sig_b(b)
    pc, kc = sig_o(out) if out is not None else (0, None)
    key = (ka, kb, kc, alpha == 0, beta == 0, trans_a, trans_b, kernel, precision, out_dtype, tp, tables.version)
    if bias is None:
        return key, pa, pb, pc, 0
    sig_bias = SIGNATURES.get(type(bias))
    if sig_bias is None:
        return None
    pbias, kbias = sig_bias(bias)
    return key + (kbias,), pa, pb, pc, pbias


def _family_key(key) -> tuple[tuple | None, int, int, int, tuple[bool, bool]]:
    """(the family key of a signature ``key``, op(a)'s rows M, op(b)'s columns N, op(a)'s
    columns K, whether (N, K) are banded) for executor.Family: two calls of one family differ
    only in the banded sizes (a signature holds every other fact of a, b and out, their
    strides included); (None, M, N, K, (False, False)) where nothing is banded.

    - One matrix each (a, b and an out, if given, 2-D, out of M rows): the rows of op(a) and of
      out replaced by their band's top (planner.size_band) where op(a) has at least
      planner.BAND_MIN rows, and K in a and b where K is a weight gradient's (planner.k_banded:
      K the outer stored axis of a and b, at least BAND_MIN, M and N at least K_BAND_MIN_SIDE).
    - A thin batch (a, b and out of one rank >= 3 with the same batch dimensions, more than one
      product of 1..THIN_MAX_ROWS - 1 rows: a decode step's Q @ K^T or P @ V over a cache): N in
      b and out, and K in a and b, replaced by their band's top where at least BAND_MIN
      (planner.n_banded, k_banded), with which of the alignment classes of Family's widths the
      exact size falls in (its lowest set bit, up to 16), so that a family's members are read
      and written alike; strides that follow the sizes (a contiguous array, or its transpose)
      are kept as their order (_at_top)."""
    ka, kb, kc = key[0], key[1], key[2]
    sa, sb = ka[1], kb[1]
    trans_a, trans_b = key[5], key[6]
    if len(sa) != len(sb) or len(sa) < 2:
        return None, 0, 0, 0, (False, False)
    m, k = (sa[-1], sa[-2]) if trans_a else sa[-2:]
    n = sb[-2] if trans_b else sb[-1]
    if (sb[-1] if trans_b else sb[-2]) != k:  # not a product: the full path says why
        return None, m, n, k, (False, False)
    if len(sa) > 2:
        return _thin_batch_key(key, m, n, k)
    # K banded: op(a) column-major, op(b) row-major -- the unit stride along M and N (the
    # planner checks the layouts it finds against this: Family.of)
    kband = (
        k >= planner.BAND_MIN
        and m >= planner.K_BAND_MIN_SIDE
        and n >= planner.K_BAND_MIN_SIDE
        and ka[2][trans_a] < ka[2][not trans_a]
        and kb[2][not trans_b] < kb[2][trans_b]
    )
    mband = m >= planner.BAND_MIN
    if not (mband or kband) or kc is not None and (len(kc[1]) != 2 or kc[1][0] != m):
        return None, m, n, k, (False, False)
    mt = planner.size_band(m)[1] if mband else m
    kt = planner.size_band(k)[1] if kband else k
    if kc is not None:
        kc = (kc[0], (mt, kc[1][1])) + kc[2:]
    ka = (ka[0], (kt, mt) if trans_a else (mt, kt)) + ka[2:]
    if kband:
        kb = (kb[0], (n, kt) if trans_b else (kt, n)) + kb[2:]
    return (ka, kb, kc) + key[3:], m, n, k, (False, kband)


def _thin_batch_key(key, m: int, n: int, k: int) -> tuple[tuple | None, int, int, int, tuple[bool, bool]]:
    """_family_key's thin batches."""
    ka, kb, kc = key[0], key[1], key[2]
    batch = ka[1][:-2]
    nband, kband = planner.n_banded(m, n, False), planner.k_banded(m, n, k, "", "", False)
    if (
        m < 1
        or not (nband or kband)
        or kb[1][:-2] != batch
        or math.prod(batch) < 2
        or kc is not None
        and kc[1] != batch + (m, n)
    ):
        return None, m, n, k, (False, False)
    nt = planner.size_band(n)[1] if nband else n
    kt = planner.size_band(k)[1] if kband else k
    ka = _at_top(ka, batch + ((kt, m) if key[5] else (m, kt)))
    kb = _at_top(kb, batch + ((nt, kt) if key[6] else (kt, nt)))
    if kc is not None:
        kc = _at_top(kc, batch + (m, nt))
    classes = tuple(min(x & -x, 16) if banded else 0 for x, banded in ((n, nband), (k, kband)))
    return (ka, kb, kc) + key[3:] + (classes,), m, n, k, (nband, kband)


def _at_top(k, shape):
    """An operand's signature ``k`` at its band's top ``shape``, its strides as their stored
    order (arrays.stored_order) where they are one with nothing between the elements (a cache
    grown by concatenation, a new contiguous array each step, keeps one key), else with the
    strides of axes of one element as 0 (nothing steps along them, and PyTorch's views give
    them what follows the sizes: a query's one row, a score row in ``torch.matmul``)."""
    shape0, strides = k[1], k[2]
    form = stored_order(shape0, strides, 1 if k[0] == "torch" else k[3].itemsize)
    if form is None:
        form = tuple(0 if n == 1 else s for n, s in zip(shape0, strides))
    return (k[0], shape, form) + k[3:]


def _family_member(key, a, pa: int, b, pb: int, out, pc: int) -> PreparedCall | None:
    """A signature not in the cache whose family is (executor.Family): its prepared call,
    made from the family's without validation or a choice, and kept under its own key too;
    None where there is no family, or the exact size needs the full path."""
    fkey, m, n, k, _ = _family_key(key)
    try:
        family = CACHE.family(fkey) if fkey is not None else None
    except TypeError:  # an unhashable tile parameter: the full path says what is wrong with it
        return None
    if family is None:
        return None
    prepared = family.member(m, n, k, a, pa, b, pb, out, pc)
    if prepared is not None:
        CACHE.put(key, prepared)
    return prepared


def _run_prepared(prepared: PreparedCall, pa: int, pb: int, out, pc: int, alpha, beta, bias=None, pbias: int = 0):
    """Launch a prepared call on these arrays, with ``bias`` (at ``pbias``) added in the
    kernel's epilogue where the prepared call can (PreparedCall.fuses_bias), else after the
    product; None where the full path must run instead (out overlaps an input or the
    bias: the full path names the problem)."""
    dev = prepared.device
    make_current(dev)
    if out is None:
        out, pc = prepared.alloc()
        if pc & 15:  # allocators align far beyond this; never seen, but the plan assumed it
            return None
    elif prepared.spans is not None and (
        prepared.overlaps(pa, pb, pc) or bias is not None and prepared.bias_overlaps(pbias, pc)
    ):
        return None
    fused = bias is not None and prepared.fuses_bias and alpha != 0
    rec = recording()
    if rec is not None:  # the C++ routed kernels may repeat this call's launches (gemmlab.torch.native)
        rec.prepared += 1
    _tls.last_plan = prepared.run(pa, pb, pc, alpha, beta, prepared.stream(dev), pbias if fused else 0)
    _tls.at = _now()
    if bias is None or fused:
        return out
    if rec is not None:
        rec.added(1.0)  # the C++ routed kernels add it after a repeat too
    return add_bias(out, bias)


def _matmul_full(a, b, out, alpha, beta, trans_a, trans_b, kernel, precision, out_dtype, tile_params, bias=None):
    """Validate, plan and prepare (the first call of a signature), then run."""
    spoil_recording()  # copies, staging and checks no repeat of its launches would make
    if _is_fp8(a) or _is_fp8(b):  # FP8 without scales: the FP8 path says what is missing
        return _matmul_fp8(
            a, b, out, alpha, beta, bias, trans_a, trans_b, kernel, precision, out_dtype, None, None, tile_params
        )
    call = planner.validate(a, b, out, alpha, beta, trans_a, trans_b, precision, out_dtype)
    bv = bias_view(bias, call, call.C.operand if call.C is not None else None) if bias is not None else None
    # After validation every array type gemmlab reads by attributes is known, so the
    # first call of a signature is kept too.
    found = _signature(a, b, out, alpha, beta, trans_a, trans_b, kernel, precision, out_dtype, tile_params, bias)
    key = found[0] if found is not None else None
    # Resolve a named kernel and its parameters before touching the GPU, so that naming
    # errors need no GPU.  "auto" names nothing: its plan is made once, with the GPU's facts.
    if kernel != "auto" or tile_params or not call.on_gpu:
        kv = planner.kernel_view(call)
        plan(
            kernel,
            kv.M,
            kv.N,
            call.K,
            aligned16=kv.aligned16(),
            rows_aligned16=kv.rows_aligned16(),
            op_a=kv.A.layout,
            op_b=kv.B.layout,
            batch=kv.launch_batch(),
            **call.dtypes,
            **tile_params,
        )
    gpu = rt_device.gpu_info(call.device)
    # Kernels that exist only for some GPUs (wgmma: sm_90a) are refused before any copy.
    if kernel != "auto":
        registry.get(kernel).check_arch(gpu.arch, gpu.name, call.dtypes["dtype"])
    if not call.on_gpu:
        return _matmul_host(call, a, b, out, trans_a, trans_b, kernel, precision, tile_params, key, bv)
    return _matmul_gpu(call, gpu, kernel, tile_params, precision, out, key, bv)


def _matmul_gpu(
    call: planner.Call, gpu, kernel: str, tile_params: dict, precision, out, key, bv: BiasView | None = None
):
    """A validated call on GPU arrays: prepare it (and keep it under ``key``), run it."""
    if any(S is not None and S.copy for S in (call.A, call.B, call.C)):
        copied = CopiedCall.of(call, kernel, precision, tile_params) if key is not None and bv is None else None
        if copied is not None:
            CACHE.put(key, copied)
        result = _matmul_copied(call, out, call.A.trans, call.B.trans, kernel, precision, tile_params)
        return result if bv is None else add_bias(result, bv.operand.obj)
    prepared = PreparedCall(call, gpu, kernel, tile_params, precision, bv)
    if key is not None:
        CACHE.put(key, prepared)
        fkey, _, _, _, banded = _family_key(key)
        family = Family.of(call, gpu, kernel, tile_params, precision, bv, prepared) if fkey is not None else None
        if family is not None and banded == planner.banded(call):
            CACHE.put_family(fkey, family)
    A, B = call.A.operand, call.B.operand
    pc = call.C.operand.ptr if call.C is not None else 0
    bias, pbias = (bv.operand.obj, bv.operand.ptr) if bv is not None else (None, 0)
    result = _run_prepared(prepared, A.ptr, B.ptr, out, pc, call.alpha, call.beta, bias, pbias)
    if result is None:  # a result allocated off the 16-byte grid: plan for it as it is
        result = empty_like_kind(A, call.result_shape, call.device, call.dtypes["out_dtype"])
        return _matmul_gpu(
            planner.validate(
                A.obj,
                B.obj,
                result,
                call.alpha,
                call.beta,
                call.A.trans,
                call.B.trans,
                precision,
                call.dtypes["out_dtype"],
            ),
            gpu,
            kernel,
            tile_params,
            precision,
            result,
            None,
            bv,
        )
    return result


def _matmul_copied(call: planner.Call, out, trans_a, trans_b, kernel, precision, tile_params):
    """Operands the kernels cannot read in place (no unit stride, or a negative
    one) or that have the other dtype of a mixed-dtype product: one contiguous
    copy each (converted), made on the caller's stream, then the call on the
    copies.  An out the kernels cannot write in place (such strides, another
    dtype than the result's, memory shared with a or b) gets the result in a
    new array, copied (cast) into it after the product, as numpy.matmul does."""
    a, b = (contiguous_copy(S.operand, call.device, S.cast) if S.copy else S.operand.obj for S in (call.A, call.B))
    target = out
    out_dt = call.dtypes["out_dtype"]
    if call.C is not None and call.C.copy:
        C = call.C.operand
        target = (
            contiguous_copy(C, call.device, None if C.dtype_name == out_dt else out_dt)
            if call.beta != 0
            else empty_like_kind(C, call.result_shape, call.device, out_dt)
        )
    result = matmul(
        a,
        b,
        out=target,
        alpha=float(call.alpha),
        beta=float(call.beta),
        trans_a=trans_a,
        trans_b=trans_b,
        kernel=kernel,
        precision=precision,
        out_dtype=out_dt,
        **tile_params,
    )
    if target is not out:
        copy_into(call.C.operand, target)
        return out
    return result


class CopiedCall:
    """What a signature whose operands the kernels cannot take in place runs at each call
    (_matmul_copied's steps, decided once): which of a and b are copied (and converted), and
    whether out is written in place or through a new array -- from a copy of out where beta,
    rounded to float32, is not 0 -- copied into it after the product.  Kept in CACHE under the
    signature, so that a repeated call (a reversed or strided view, a mixed-dtype pair, an out
    of another dtype) skips validation; the product on the copies is a call of its own
    (prepared: it checks out against the inputs it is given, uncopied ones included, so memory
    out shares with a or b at these addresses takes its full path there).  An out copied at
    the first call because it shared memory with a or b is not kept (CopiedCall.of).  The
    operands' descriptions are kept without the first call's arrays."""

    __slots__ = ("a", "b", "out", "copy_a", "copy_b", "out_copied", "out_dt", "result_shape", "args")

    def __init__(self, call: planner.Call, kernel: str, precision, tile_params: dict):
        C = call.C
        self.a = dataclasses.replace(call.A.operand, obj=None)
        self.b = dataclasses.replace(call.B.operand, obj=None)
        self.out = dataclasses.replace(C.operand, obj=None) if C is not None else None
        self.copy_a = (call.A.cast,) if call.A.copy else None
        self.copy_b = (call.B.cast,) if call.B.copy else None
        self.out_copied = C is not None and C.copy
        self.out_dt, self.result_shape = call.dtypes["out_dtype"], call.result_shape
        self.args = {
            "trans_a": call.A.trans,
            "trans_b": call.B.trans,
            "kernel": kernel,
            "precision": precision,
            "out_dtype": self.out_dt,
            **tile_params,
        }

    @classmethod
    def of(cls, call: planner.Call, kernel: str, precision, tile_params: dict) -> "CopiedCall | None":
        """The CopiedCall of a validated call that needs copies, or None where out's copy
        comes from memory it shares with a or b at these addresses (not the signature's)."""
        C = call.C
        if C is not None and C.copy and (C.operand.meets(call.A.operand) or C.operand.meets(call.B.operand)):
            return None
        return cls(call, kernel, precision, tile_params)

    def run(self, a, pa: int, b, pb: int, out, pc: int, alpha, beta):
        """The call on these arrays: the copies, the product on them, out filled."""
        spoil_recording()  # copies no repeat of its launches would make
        alpha32, beta32 = np.float32(alpha), np.float32(beta)  # as validation rounds them
        dev = self.a.device
        a2 = contiguous_copy(dataclasses.replace(self.a, obj=a, ptr=pa), dev, self.copy_a[0]) if self.copy_a else a
        b2 = contiguous_copy(dataclasses.replace(self.b, obj=b, ptr=pb), dev, self.copy_b[0]) if self.copy_b else b
        target = out
        if self.out_copied:
            O = dataclasses.replace(self.out, obj=out, ptr=pc)
            if beta32 != 0:
                target = contiguous_copy(O, dev, None if O.dtype_name == self.out_dt else self.out_dt)
            else:
                target = empty_like_kind(O, self.result_shape, dev, self.out_dt)
        result = matmul(a2, b2, out=target, alpha=float(alpha32), beta=float(beta32), **self.args)
        if target is not out:
            copy_into(O, target)
            return out
        return result


def _matmul_host(
    call: planner.Call,
    a,
    b,
    out,
    trans_a,
    trans_b,
    kernel,
    precision,
    tile_params,
    key=None,
    bv: BiasView | None = None,
):
    """NumPy in, NumPy out: stage through CuPy arrays on GPU 0 and run the GPU path
    (``key`` is unused: host arrays are not prepared, their copies are); a bias is added
    on the host after the product."""
    result = _host_product(call, a, b, out, trans_a, trans_b, kernel, precision, tile_params)
    return result if bv is None else add_bias(result, bv.operand.obj)


def _host_product(call: planner.Call, a, b, out, trans_a, trans_b, kernel, precision, tile_params):
    cp = need_cupy("NumPy inputs")

    def staged(x):  # C- and F-ordered arrays keep their layout; others become C-ordered on the host
        return cp.asarray(x if x.flags.c_contiguous or x.flags.f_contiguous else np.ascontiguousarray(x))

    with cp.cuda.Device(call.device):
        try:
            da, db = staged(a), staged(b)
            dc = (
                staged(out)
                if out is not None and call.beta != 0
                else cp.empty(call.result_shape, np.dtype(call.dtypes["out_dtype"]))
            )
        except Exception as exc:
            if _is_out_of_memory(exc):
                nbytes = sum(x.nbytes for x in (a, b)) + ITEMSIZE[call.dtypes["out_dtype"]] * int(
                    np.prod(call.result_shape)
                )
                raise gpu_memory_error(
                    f"copying a {a.shape}, b {b.shape} and the result {call.result_shape} to the GPU",
                    nbytes,
                    call.device,
                    exc,
                ) from exc
            raise
        matmul(
            da,
            db,
            out=dc,
            alpha=float(call.alpha),
            beta=float(call.beta),
            trans_a=trans_a,
            trans_b=trans_b,
            kernel=kernel,
            precision=precision,
            **tile_params,
        )
        host = cp.asnumpy(dc)
    if out is not None:
        out[...] = host
        return out
    return host[()] if host.ndim == 0 else host  # vector @ vector: a scalar, as numpy.matmul gives


def matmul_strided_batched(a, b, batch: int, stride_a: int, stride_b: int, *, out=None, stride_out=None, **kwargs):
    """cuBLAS's gemmStridedBatched: for i in range(batch),
    out_i = alpha * op(a_i) @ op(b_i) + beta * out_i, where a_i is the matrix
    ``a`` (2-D, the first of the batch, any layout matmul reads) moved
    ``i * stride_a`` elements on (0: the same matrix for every i), likewise b_i
    and out_i (``stride_out``, needed with ``out``).  The strides are in
    elements, as in cuBLAS, and the batch must lie inside each array's
    allocation (checked for NumPy, CuPy and PyTorch).  Other keywords are
    matmul's (alpha, beta, trans_a, trans_b, kernel, ...).  Returns the
    (batch, M, N) result: a view of out's memory if ``out`` is given, else a new
    array.  The same call as ``matmul`` on 3-D strided views of the buffers.
    """
    for value, name in ((batch, "batch"), (stride_a, "stride_a"), (stride_b, "stride_b")) + (
        ((stride_out, "stride_out"),) if stride_out is not None else ()
    ):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"matmul_strided_batched: {name} must be an int >= 0; got {value!r}")
    if (out is None) != (stride_out is None):
        raise ValueError(
            "matmul_strided_batched: out= and stride_out= go together (stride_out is the "
            "element stride between consecutive matrices of out)"
        )
    views = [_batch_view(x, name, batch, st) for x, name, st in ((a, "a", stride_a), (b, "b", stride_b))]
    if out is not None:
        out = _batch_view(out, "out", batch, stride_out)
    return matmul(*views, out=out, **kwargs)


# NumPy 2 moved byte_bounds to numpy.lib.array_utils.
_byte_bounds = getattr(getattr(np.lib, "array_utils", np), "byte_bounds")


def _batch_view(x, name: str, batch: int, stride: int):
    """x (a 2-D array) repeated ``batch`` times, ``stride`` elements apart, as a 3-D view of the same memory."""
    X = read_operand(x, name)
    if len(X.shape) != 2:
        raise ValueError(f"matmul_strided_batched: {X.label()} must be the first matrix of the batch (2-D)")
    shape, strides = (batch,) + X.shape, (stride,) + X.strides
    view = dataclasses.replace(X, shape=shape, strides=strides)
    lo, hi = view.span()
    if X.kind == "numpy":
        root, node = x, x
        while getattr(node, "base", None) is not None:  # through as_strided's wrappers too
            node = node.base
            if isinstance(node, np.ndarray):
                root = node
        start, end = _byte_bounds(root)
        make = lambda: np.lib.stride_tricks.as_strided(  # noqa: E731
            x, shape, tuple(s * x.itemsize for s in strides), writeable=name == "out"
        )
    elif X.kind == "cupy":
        start, end = x.data.mem.ptr, x.data.mem.ptr + x.data.mem.size
        import cupy

        make = lambda: cupy.lib.stride_tricks.as_strided(x, shape, tuple(s * x.itemsize for s in strides))  # noqa: E731
    elif X.kind == "torch":
        storage = x.untyped_storage()
        start, end = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
        make = lambda: x.as_strided(shape, strides, x.storage_offset())  # noqa: E731
    else:
        raise TypeError(
            f"matmul_strided_batched takes NumPy, CuPy or PyTorch arrays; {X.label()} is not one: "
            "pass a 3-D view to matmul instead"
        )
    if batch and not (start <= lo and hi <= end):
        raise ValueError(
            f"matmul_strided_batched: {batch} matrices of {X.label()}, {stride} elements apart, "
            f"reach past its allocation ({hi - end} bytes beyond it)"
            if hi > end
            else f"matmul_strided_batched: {X.label()} lies outside its allocation"
        )
    return make()


def kernels() -> list[dict]:
    """The registry: every kernel with its family, dtypes, tile parameters, rules and description."""
    return [s.as_record() for s in registry.ladder()]
