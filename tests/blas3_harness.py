"""The level-3 tester's machinery, shared by tests/test_blas3.py (on the GPU, CuPy
arrays) and tests/test_semantics.py (on the CPU, NumPy arrays and an emulated
launch; see emulated_gpu.py).  A Backend makes and reads "device" arrays."""

from __future__ import annotations

import itertools

import numpy as np

import gemmlab
from gemmlab.core import api
from gemmlab.kernels import registry
from gemmlab.kernels.ec.ec_wgmma import EC_WGMMA_UNSCALED_PARAMS
from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_KERNELS, SPLITK_REDUCE_SOURCE
from gemmlab.kernels.spec import EC_METHODS, LAYOUTS

DIMS = (0, 1, 7, 33)
SCALARS = (0.0, 1.0, 0.7, -1.3)
OPS = list(itertools.product((False, True), repeat=2))
U32 = 2.0**-24
SENTINEL = {"float32": (np.uint32, 0x7FC1DEAD), "float16": (np.uint16, 0x7E5A)}


class Backend:
    """Where the arrays live: ``asarray`` copies a host array to the device,
    ``get`` copies back, ``as_strided`` makes a view with element strides."""

    def __init__(self, xp, get, name):
        self.xp, self._get, self.name = xp, get, name

    def asarray(self, host):
        return self.xp.asarray(host) if self.xp is not np else np.array(host, copy=True)

    def get(self, dev) -> np.ndarray:
        return self._get(dev)

    def as_strided(self, dev, shape, strides):
        return self.xp.lib.stride_tricks.as_strided(dev, shape, tuple(s * dev.itemsize for s in strides))


def family(name, dtype, **params):
    """(test id, kernel, tile parameters, input dtype, precision, out dtype), at the
    kernel's defaults (explicit, so that no tuned table changes them)."""
    full = {**registry.get(name).defaults(), **params}
    if dtype == "tf32":
        return (f"{name}-tf32", name, full, "float32", "tf32", "float32")
    if dtype == "float16":
        return (f"{name}-fp16", name, full, "float16", None, "float16")
    if dtype in EC_METHODS:  # FP32 in and out, split into two tensor-core parts
        return (f"{name}-{dtype}", name, full, "float32", dtype, "float32")
    return (name + "".join(f"-{k}{v}" for k, v in params.items()), name, full, "float32", None, "float32")


FAMILIES = [family(s.name, "float32") for s in registry.ladder("simt")] + [
    family("pipelined", "float32", SPLITK=3),
    family("wmma", "float16"),
    family("wmma", "tf32"),
    family("wmma_warptile", "float16"),
    family("wmma_warptile", "tf32"),
    family("mma_pipelined", "float16"),
    (
        "mma_pipelined-fp16-64x64",
        "mma_pipelined",
        {**registry.get("mma_pipelined").defaults(), "BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 4},
        "float16",
        None,
        "float16",
    ),
    family("ec_wmma", "fp16_ec"),
    family("ec_wgmma", "tf32_ec"),
    # fp16_ec (parts as they are) on ec_wgmma's four-set kernel, as precision="fp16_ec" runs it;
    # FOLD (the default) with FP16 parts under the scale chosen on the GPU (fp16_ec_scaled).
    family("ec_wgmma", "fp16_ec", **EC_WGMMA_UNSCALED_PARAMS),
    (
        "ec_wgmma-fp16_ec_scaled",
        "ec_wgmma",
        registry.get("ec_wgmma").defaults(),
        "float32",
        "fp16_ec_scaled",
        "float32",
    ),
    # Split over K: with K <= 33 (one K-step) every slice past the first is empty.
    (
        "ec_wgmma-fp16_ec-SPLITK3",
        "ec_wgmma",
        {**registry.get("ec_wgmma").defaults(), **EC_WGMMA_UNSCALED_PARAMS, "SPLITK": 3},
        "float32",
        "fp16_ec",
        "float32",
    ),
    (
        "ec_wgmma-fp16_ec_scaled-SPLITK3",
        "ec_wgmma",
        {**registry.get("ec_wgmma").defaults(), "SPLITK": 3},
        "float32",
        "fp16_ec_scaled",
        "float32",
    ),
    (
        "ec_wgmma-tf32_ec-SPLITK2",
        "ec_wgmma",
        {**registry.get("ec_wgmma").defaults(), "SPLITK": 2},
        "float32",
        "tf32_ec",
        "float32",
    ),
    family("wgmma", "float16"),
    (
        "wgmma-fp16-SPLITK3",
        "wgmma",
        {**registry.get("wgmma").defaults(), "BM": 64, "BN": 128, "SPLITK": 3},
        "float16",
        None,
        "float16",
    ),
    family("gemv", "float32"),
    family("gemv", "float16"),
    family("outer", "float32"),
    family("outer", "float16"),
]
# The TMA rung on operands TMA reads (level3 with TMA_DIMS, TMA_PAD, TMA_GUARD): every
# stored row a multiple of 16 bytes and every base 16-byte aligned, so that wgmma itself
# runs in each layout (the rung that ran is asserted); its 128 x 256 default and a
# cluster of two 64 x 128 blocks (B multicast).  264 > 256: several tiles of M, N, K.
TMA_FAMILIES = [
    family("wgmma", "float16"),
    (
        "wgmma-fp16-cluster2",
        "wgmma",
        {**registry.get("wgmma").defaults(), "BM": 64, "BN": 128, "CLUSTER": 2},
        "float16",
        None,
        "float16",
    ),
    (
        "wgmma-fp16-SPLITK3",
        "wgmma",
        {**registry.get("wgmma").defaults(), "BM": 64, "BN": 128, "SPLITK": 3},
        "float16",
        None,
        "float16",
    ),
]
TMA_DIMS, TMA_PAD, TMA_GUARD = (0, 8, 40, 264), 8, 8


def runs_on(fam, arch: str) -> bool:
    """Whether the family's kernel exists for the GPU's architecture (wgmma: Hopper only)."""
    return fam[1] == "auto" or registry.get(fam[1]).builds_for(arch)


def kernel_family(fam) -> str:
    """simt or tensor (for the error bound); "auto" picks by dtype."""
    _, kernel, _, in_dt, precision, _ = fam
    if kernel == "auto":
        return "simt" if in_dt == "float32" and precision is None else "tensor"
    return registry.get(kernel).family


def kernel_dtype(fam) -> str:
    _, _, _, in_dt, precision, _ = fam
    if precision == "fp16_ec_scaled":  # FP16 parts, scaled by the choice made on the GPU
        return "fp16_ec"
    return precision if precision in ("tf32", *EC_METHODS) else in_dt


def instantiations(families, arch: str | None = None) -> set[tuple[str, str]]:
    """(source, name expression) of everything the tester launches: each family in
    each layout, aligned and not, TMA-aligned and not, and the split-K reduction
    (``arch``: only the families that run there)."""
    items = {(str(SPLITK_REDUCE_SOURCE), k) for k in SPLITK_REDUCE_KERNELS}
    for fam in families:
        if arch is not None and not runs_on(fam, arch):
            continue
        _, kernel, params, _, _, out_dt = fam
        for (op_a, op_b), aligned in itertools.product(LAYOUTS, (True, False)):
            p = api.plan(
                kernel,
                64,
                64,
                64,
                aligned16=aligned,
                dtype=kernel_dtype(fam),
                out_dtype=out_dt,
                op_a=op_a,
                op_b=op_b,
                tma_aligned=aligned,
                arch=arch,
                **params,
            )
            items.add((str(p.spec.source_path), p.name_expression))
    return items


def tf32(x):
    """x rounded to TF32 (10 mantissa bits, ties away from zero), as the tensor cores round it."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def values(shape, dtype, precision, rng):
    """Fresh uniform(-1, 1) values, exactly representable in what the kernel multiplies."""
    x = rng.uniform(-1.0, 1.0, size=shape)
    if dtype == "float16":
        return x.astype(np.float16)
    x = x.astype(np.float32)
    return tf32(x) if precision == "tf32" else x


def sentinel_buffer(shape, dtype):
    utype, bits = SENTINEL[dtype]
    return np.full(shape, bits, utype).view(np.dtype(dtype))


def bits_of(x):
    return x.view(SENTINEL[str(x.dtype)][0])


class Embedded:
    """A rows x cols matrix stored row-major, or column-major (``colmajor``), inside
    a device buffer with ``pad`` unused elements per leading dimension and
    ``guard`` elements of sentinel on every side; ``host`` is the buffer as written."""

    def __init__(self, be: Backend, vals, colmajor, pad, guard):
        stored = vals.T if colmajor else vals
        r, c = stored.shape
        host = sentinel_buffer((r + 2 * guard, c + pad + 2 * guard), str(vals.dtype))
        host[guard : guard + r, guard : guard + c] = stored
        self.be, self.host = be, host
        self.buf = be.asarray(host)
        view = self.buf[guard : guard + r, guard : guard + c]
        self.view = view.T if colmajor else view

    def unchanged(self) -> bool:
        return bits_of(self.be.get(self.buf)).tobytes() == bits_of(self.host).tobytes()


def bound(K, out_dtype, kernel_family, mag, ref):
    """The rounding-error bound of out = alpha * (K-term dot product) + beta * c:
    gamma_K with u = 2^-24 for FP32 accumulation (K + 20 terms: alpha, beta and
    up to 16 split-K partial sums), 2K + 20 for the tensor cores (their FP32
    accumulation may truncate: 2u per addition), 14K + 20 for the error-corrected
    methods (each operand is hi + lo to 4u, and the dropped lo * lo is up to 4u of
    a product: 12u a product, then the tensor cores' 2u), plus the FP16 result's own
    rounding (2^-11 relative, 2^-25 absolute below FP16's normal range)."""
    terms = {"tensor": 2 * K + 20, "ec": 14 * K + 20}.get(kernel_family, K + 20)
    b = terms * U32 * mag
    if out_dtype == "float16":
        b = b + 2.0**-11 * (np.abs(ref) + b) + 2.0**-25
    return b


def check(got, ref, mag, K, out_dtype, kernel_family, case, failures):
    """Append to ``failures`` what is wrong with ``got`` (FP64 values) against ``ref``."""
    if not np.isfinite(got).all():
        failures.append((case, f"{int((~np.isfinite(got)).sum())} non-finite"))
        return
    b = bound(K, out_dtype, kernel_family, mag, ref)
    err = np.abs(got - ref)
    if not (err <= b).all():
        i = np.unravel_index(np.argmax(err - b), err.shape)
        failures.append((case, f"error {err[i]:.3e} > bound {b[i]:.3e} at {tuple(map(int, i))}"))


def level3(be: Backend, fam, trans_a, trans_b, dims=DIMS, scalars=SCALARS, pad=3, guard=1, seed=0, expect=None):
    """The tester over dims^3 x scalars^2 for one family and op pair; returns the failures
    (``expect``: the kernel every non-empty product must have run on, no fallback)."""
    _, kernel, params, in_dt, precision, out_dt = fam
    kfam = kernel_family(fam)
    rng = np.random.default_rng(seed)
    utype, bits = SENTINEL[out_dt]
    pairs = list(itertools.product(scalars, scalars))
    failures = []
    for M, N, K in itertools.product(dims, repeat=3):
        colmajor_out = dims.index(K) % 2 == 1  # out^T = b^T a^T for every other K
        va, vb = values((M, K), in_dt, precision, rng), values((K, N), in_dt, precision, rng)
        A = Embedded(be, va, trans_a, pad, guard)  # op(a) = a^T: a is stored K x M
        B = Embedded(be, vb, trans_b, pad, guard)
        a_arg = A.view.T if trans_a else A.view  # the array passed; trans_a makes it op(a)
        b_arg = B.view.T if trans_b else B.view
        c0 = values((M, N), out_dt, None, rng)
        sr, sc = (N, M) if colmajor_out else (M, N)  # out as stored
        slots = sentinel_buffer((len(pairs), sr + 2 * guard, sc + pad + 2 * guard), out_dt)
        inside = np.zeros(slots.shape[1:], bool)
        inside[guard : guard + sr, guard : guard + sc] = True
        for i, (alpha, beta) in enumerate(pairs):
            if beta:  # beta == 0: out keeps its NaN sentinel (never read, every element written)
                slots[i][guard : guard + sr, guard : guard + sc] = c0.T if colmajor_out else c0
        dev = be.asarray(slots)
        for i, (alpha, beta) in enumerate(pairs):
            o = dev[i, guard : guard + sr, guard : guard + sc]
            out = o.T if colmajor_out else o
            ret = gemmlab.matmul(
                a_arg,
                b_arg,
                out=out,
                alpha=alpha,
                beta=beta,
                trans_a=trans_a,
                trans_b=trans_b,
                kernel=kernel,
                precision=precision,
                **params,
            )
            assert ret is out
            ran = gemmlab.last_plan()
            if expect and M and N and K and (ran is None or ran.spec.name != expect):
                failures.append(((M, N, K, alpha, beta), f"ran {ran.describe() if ran else None}, not {expect}"))
        got_all = be.get(dev)
        prod = va.astype(np.float64) @ vb.astype(np.float64)
        absprod = np.abs(va.astype(np.float64)) @ np.abs(vb.astype(np.float64))
        for i, (alpha, beta) in enumerate(pairs):
            a32, b32 = float(np.float32(alpha)), float(np.float32(beta))
            ref = a32 * prod + (b32 * c0.astype(np.float64) if beta else 0.0)
            mag = abs(a32) * absprod + (abs(b32) * np.abs(c0.astype(np.float64)) if beta else 0.0)
            got = got_all[i][guard : guard + sr, guard : guard + sc].astype(np.float64)
            case = (M, N, K, alpha, beta, "F" if colmajor_out else "C")
            check(got.T if colmajor_out else got, ref, mag, K, out_dt, kfam, case, failures)
            guards = got_all[i].view(utype)[~inside]
            if not (guards == bits).all():
                failures.append((case, f"{int((guards != bits).sum())} guard/padding elements of out changed"))
        if not (A.unchanged() and B.unchanged()):
            failures.append(((M, N, K), "an input buffer changed"))
    return failures


# -- batches ----------------------------------------------------------------------


def stacked(be: Backend, vals, gap, colmajor):
    """A batch of matrices (vals: (..., r, c)) in one flat device buffer, each matrix
    row-major (or column-major) with ``gap`` sentinel elements after it and a
    padded leading dimension; returns (view with the batch's shape, buffer, host buffer)."""
    *bshape, r, c = vals.shape
    sr, sc = (c, r) if colmajor else (r, c)
    ld = sc + 1
    per = sr * ld + gap
    nb = int(np.prod(bshape)) if bshape else 1
    host = sentinel_buffer((nb * per + 1,), str(vals.dtype))
    flat = vals.reshape((nb, r, c))
    for i in range(nb):
        m = flat[i].T if colmajor else flat[i]
        host[i * per : i * per + sr * ld].reshape(sr, ld)[:, :sc] = m
    buf = be.asarray(host)
    bstrides = tuple(int(np.prod(bshape[j + 1 :])) * per for j in range(len(bshape)))
    if colmajor:
        view = be.as_strided(buf, tuple(bshape) + (r, c), bstrides + (1, ld))
    else:
        view = be.as_strided(buf, tuple(bshape) + (r, c), bstrides + (ld, 1))
    return view, buf, host


def batched(
    be: Backend,
    fam,
    a_shape,
    b_shape,
    *,
    trans_a=False,
    trans_b=False,
    colmajor_in=(False, False),
    out="C",
    alpha=0.7,
    beta=-1.3,
    seed=0,
    gap=5,
):
    """op(a) @ op(b) for batched a and b (numpy.matmul broadcasting) stored with gaps
    between matrices; out new ("new"), or C- or F-ordered matrices with gaps
    ("C", "F"); checked against FP64 numpy.matmul, the gaps unchanged."""
    _, kernel, params, in_dt, precision, out_dt = fam
    rng = np.random.default_rng(seed)
    va = values(a_shape, in_dt, precision, rng)
    vb = values(b_shape, in_dt, precision, rng)
    a, abuf, ahost = stacked(be, va, 3, colmajor_in[0])
    b, bbuf, bhost = stacked(be, vb, 2, colmajor_in[1])
    oa = np.swapaxes(va, -1, -2) if trans_a else va
    ob = np.swapaxes(vb, -1, -2) if trans_b else vb
    prod = np.matmul(oa.astype(np.float64), ob.astype(np.float64))
    absprod = np.matmul(np.abs(oa.astype(np.float64)), np.abs(ob.astype(np.float64)))
    K = oa.shape[-1]
    failures = []
    if out == "new":
        res = gemmlab.matmul(
            a, b, trans_a=trans_a, trans_b=trans_b, alpha=alpha, kernel=kernel, precision=precision, **params
        )
        got = be.get(res).astype(np.float64)
        a32 = float(np.float32(alpha))
        check(got, a32 * prod, abs(a32) * absprod, K, out_dt, kernel_family(fam), "new", failures)
        assert res.shape == prod.shape
    else:
        c0 = values(prod.shape, out_dt, None, rng)
        o, obuf, ohost = stacked(be, c0, gap, out == "F")
        ret = gemmlab.matmul(
            a,
            b,
            out=o,
            trans_a=trans_a,
            trans_b=trans_b,
            alpha=alpha,
            beta=beta,
            kernel=kernel,
            precision=precision,
            **params,
        )
        assert ret is o
        got = be.get(o).astype(np.float64)
        a32, b32 = float(np.float32(alpha)), float(np.float32(beta))
        ref = a32 * prod + b32 * c0.astype(np.float64)
        mag = abs(a32) * absprod + abs(b32) * np.abs(c0.astype(np.float64))
        check(got, ref, mag, K, out_dt, kernel_family(fam), out, failures)
        # Everything of out's buffer outside its matrices is unchanged.
        after = bits_of(be.get(obuf))
        mask = np.ones(after.shape, bool)
        written = be.as_strided(be.asarray(np.arange(after.size, dtype=np.int64)), o.shape, _elem_strides(o))
        mask[be.get(written).ravel()] = False
        if not (after[mask] == bits_of(ohost)[mask]).all():
            failures.append((out, "out's gaps or padding changed"))
    for buf, host in ((abuf, ahost), (bbuf, bhost)):
        if bits_of(be.get(buf)).tobytes() != bits_of(host).tobytes():
            failures.append(("inputs", "an input buffer changed"))
    return failures


def _elem_strides(x) -> tuple[int, ...]:
    return tuple(s // x.itemsize for s in x.strides)
