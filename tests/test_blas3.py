"""A level-3 tester modelled on the reference BLAS's (sblat3 / dblat3), for every
kernel family: each SIMT rung at its default configuration, rung 8 with split-K,
the WMMA rungs in FP16 (FP16 out) and TF32.

For every op(a), op(b) in {N, T}^2 (``trans_a`` / ``trans_b``), every M, N, K
in {0, 1, 7, 33} and every alpha, beta in {0, 1, 0.7, -1.3}:

* the inputs are fresh random values (FP16 / TF32-representable for the tensor
  cores, so the kernels' own rounding of them is exact) stored with leading
  dimensions larger than the logical size; the padding and a guard band around
  each input hold a NaN sentinel (a kernel that reads them puts NaN in C);
* out sits in a larger buffer: guard rows and columns around it and the unused
  part of its leading dimension hold a NaN sentinel with a payload; out is
  row-major for K in {0, 7} and column-major (computed as out^T = b^T a^T) for
  K in {1, 33}, so every M x N meets both; with beta == 0 its elements start as
  NaN too (beta == 0 must not read them);
* the result is compared with alpha * op(a) @ op(b) + beta * out computed in
  FP64 (alpha and beta rounded to float32 first, as the kernels see them),
  elementwise within the rounding-error bound of a K-term dot product
  (gamma_K): (K + 20) u (|alpha| |op(a)| |op(b)| + |beta| |out|) with u = 2^-24
  (FP32 accumulation, split-K adding one sum per split), 2K + 20 for the tensor
  cores (whose FP32 accumulation may truncate), plus the FP16 output's own
  rounding;
* every guard and padding element of out and of the inputs is bit-identical
  afterwards.

A second pass runs shapes whose every width, leading dimension and address is a
multiple of 16 bytes, so the 16-byte (VEC) variants run in every layout too.
Batches (numpy.matmul broadcasting, strided batches, zero strides, chunked
launches), column-major outputs of batches and PyTorch's transposed views are
checked after that, against FP64 matmul of the same values.
"""

import itertools

import numpy as np
import pytest

import gemmlab
from gemmlab import api
from gemmlab.kernels import registry

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

DIMS = (0, 1, 7, 33)
SCALARS = (0.0, 1.0, 0.7, -1.3)
OPS = list(itertools.product((False, True), repeat=2))
U32 = 2.0 ** -24
SENTINEL = {"float32": (np.uint32, 0x7FC1DEAD), "float16": (np.uint16, 0x7E5A)}


def _family(name, dtype, **params):
    """(test id, kernel, tile parameters, input dtype, precision, out dtype)."""
    spec = registry.get(name)
    full = {**spec.defaults(), **params}
    if dtype == "tf32":
        return (f"{name}-tf32", name, full, "float32", "tf32", "float32")
    if dtype == "float16":
        return (f"{name}-fp16", name, full, "float16", None, "float16")
    return (name + "".join(f"-{k}{v}" for k, v in params.items()), name, full, "float32", None, "float32")


FAMILIES = [_family(s.name, "float32") for s in registry.ladder("simt")] + [
    _family("pipelined", "float32", SPLITK=3),
    _family("wmma", "float16"), _family("wmma", "tf32"),
    _family("wmma_warptile", "float16"), _family("wmma_warptile", "tf32"),
]


@pytest.fixture(scope="module", autouse=True)
def _precompiled():
    """Every instantiation these tests launch, compiled in parallel processes first
    (each layout, aligned and not; the split-K reduction)."""
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime.device import gpu_info
    items = {(str(registry.SPLITK_REDUCE_SOURCE), registry.SPLITK_REDUCE_KERNEL)}
    for _, kernel, params, _, precision, out_dt in FAMILIES:
        dtype = "tf32" if precision == "tf32" else ("float16" if out_dt == "float16" else "float32")
        for (op_a, op_b), aligned in itertools.product(registry.LAYOUTS, (True, False)):
            p = api.plan(kernel, 64, 64, 64, aligned16=aligned, dtype=dtype, out_dtype=out_dt,
                         op_a=op_a, op_b=op_b, **params)
            items.add((str(p.spec.source_path), p.name_expression))
    rt_compile.precompile(sorted(items), gpu_info(0).arch)


def _tf32(x):
    """x rounded to TF32 (10 mantissa bits, ties away from zero), as the tensor cores round it."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _values(rows, cols, dtype, precision, rng):
    x = rng.uniform(-1.0, 1.0, size=(rows, cols))
    if dtype == "float16":
        return x.astype(np.float16)
    x = x.astype(np.float32)
    return _tf32(x) if precision == "tf32" else x


class Embedded:
    """A rows x cols matrix stored row-major, or column-major (``colmajor``), inside a
    buffer with ``pad`` unused elements per leading dimension and ``guard``
    elements of sentinel on every side.  ``host`` is the buffer as written."""

    def __init__(self, values, colmajor, pad, guard, dtype):
        stored = values.T if colmajor else values
        r, c = stored.shape
        utype, bits = SENTINEL[dtype]
        host = np.full((r + 2 * guard, c + pad + 2 * guard), bits, utype).view(np.dtype(dtype))
        host[guard:guard + r, guard:guard + c] = stored
        self.host = host
        self.buf = cp.asarray(host)
        view = self.buf[guard:guard + r, guard:guard + c]
        self.view = view.T if colmajor else view
        self.ld = c + pad + 2 * guard

    def unchanged(self) -> bool:
        return self.buf.get().view(SENTINEL[str(self.host.dtype)][0]).tobytes() == \
            self.host.view(SENTINEL[str(self.host.dtype)][0]).tobytes()


def _bound(K, dtype, kernel_family, mag, ref):
    terms = (2 * K + 20) if kernel_family == "tensor" else (K + 20)
    b = terms * U32 * mag
    if dtype == "float16":   # the FP16 result's own rounding (2^-11 relative; 2^-25 absolute below 2^-14)
        b = b + 2.0 ** -11 * (np.abs(ref) + b) + 2.0 ** -25
    return b


def _level3(fam, trans_a, trans_b, dims, scalars, pad, guard, seed):
    """Run the tester over dims^3 x scalars^2 for one family and op pair; returns failures."""
    _, kernel, params, in_dt, precision, out_dt = fam
    family = registry.get(kernel).family
    rng = np.random.default_rng(seed)
    utype, bits = SENTINEL[out_dt]
    pairs = list(itertools.product(scalars, scalars))
    failures = []
    for M, N, K in itertools.product(dims, repeat=3):
        colmajor_out = dims.index(K) % 2 == 1               # K = dims[1], dims[3]: out^T = b^T a^T
        va, vb = _values(M, K, in_dt, precision, rng), _values(K, N, in_dt, precision, rng)
        A = Embedded(va, trans_a, pad, guard, in_dt)        # op(a) = a^T: a is stored K x M
        B = Embedded(vb, trans_b, pad, guard, in_dt)
        a_arg = A.view.T if trans_a else A.view             # the array passed; trans_a makes it op(a)
        b_arg = B.view.T if trans_b else B.view
        c0 = _values(M, N, out_dt, None, rng)
        # One buffer of len(pairs) slots, each out embedded with guards and padding.
        sr, sc = (N, M) if colmajor_out else (M, N)
        slots = np.full((len(pairs), sr + 2 * guard, sc + pad + 2 * guard), bits, utype).view(np.dtype(out_dt))
        inside = np.zeros(slots.shape[1:], bool)
        inside[guard:guard + sr, guard:guard + sc] = True
        for i, (alpha, beta) in enumerate(pairs):
            # beta == 0: out starts as NaN (never read, every element written)
            slots[i][inside] = (c0.T if colmajor_out else c0).ravel() if beta else slots[i][inside]
        dev = cp.asarray(slots)
        for i, (alpha, beta) in enumerate(pairs):
            o = dev[i, guard:guard + sr, guard:guard + sc]
            out = o.T if colmajor_out else o
            ret = gemmlab.matmul(a_arg, b_arg, out=out, alpha=alpha, beta=beta, trans_a=trans_a,
                                 trans_b=trans_b, kernel=kernel, precision=precision, **params)
            assert ret is out
        got_all = dev.get()
        prod = va.astype(np.float64) @ vb.astype(np.float64)
        absprod = np.abs(va.astype(np.float64)) @ np.abs(vb.astype(np.float64))
        for i, (alpha, beta) in enumerate(pairs):
            a32, b32 = float(np.float32(alpha)), float(np.float32(beta))
            ref = a32 * prod + (b32 * c0.astype(np.float64) if beta else 0.0)
            mag = abs(a32) * absprod + (abs(b32) * np.abs(c0.astype(np.float64)) if beta else 0.0)
            slot = got_all[i]
            got = slot[guard:guard + sr, guard:guard + sc].astype(np.float64)
            got = got.T if colmajor_out else got
            err = np.abs(got - ref)
            case = (M, N, K, alpha, beta, "F" if colmajor_out else "C")
            if not np.isfinite(got).all():
                failures.append((case, f"{int((~np.isfinite(got)).sum())} non-finite"))
            elif not (err <= _bound(K, out_dt, family, mag, ref)).all():
                failures.append((case, f"max error {err.max():.3e}, bound {_bound(K, out_dt, family, mag, ref).max():.3e}"))
            guards = slot.view(utype)[~inside]
            if not (guards == bits).all():
                failures.append((case, f"{int((guards != bits).sum())} guard/padding elements of out changed"))
        if not (A.unchanged() and B.unchanged()):
            failures.append(((M, N, K), "an input buffer changed"))
    return failures


@pytest.mark.parametrize("trans_a, trans_b", OPS, ids=lambda t: "T" if t else "N")
@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f[0])
def test_level3(fam, trans_a, trans_b):
    failures = _level3(fam, trans_a, trans_b, DIMS, SCALARS, pad=3, guard=1, seed=len(fam[0]) + 2 * trans_a + trans_b)
    assert not failures, f"{len(failures)} failures, e.g. {failures[:8]}"


@pytest.mark.parametrize("trans_a, trans_b", OPS, ids=lambda t: "T" if t else "N")
@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f[0])
def test_level3_aligned(fam, trans_a, trans_b):
    """Widths, leading dimensions and addresses all multiples of 16 bytes: the VEC
    variants, with shapes larger than rung 8's 128 x 256 tile (its unchecked copies
    run too); alpha, beta in {1, -1.3}."""
    failures = []
    for dims in [(4, 36), (132, 264)]:
        failures += _level3(fam, trans_a, trans_b, dims, (1.0, -1.3), pad=4, guard=4, seed=11)
    assert not failures, f"{len(failures)} failures, e.g. {failures[:8]}"
