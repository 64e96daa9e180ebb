"""Verification against an FP64 reference.

Inputs are drawn fresh for every check (never zeros), the output is poisoned
with NaN before the kernel runs (so an element the kernel never wrote fails),
and the result is compared with alpha * A @ B + beta * C computed in float64.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

DISTRIBUTIONS = ("uniform", "normal", "wide")
# Host FP64 reference up to this many multiply-adds; beyond it, FP64 on the GPU.
HOST_REFERENCE_LIMIT = 2**31


def random_matrix(rows: int, cols: int, dist: str = "uniform", rng=None) -> np.ndarray:
    """A float32 matrix: ``uniform`` U(-1, 1), ``normal`` N(0, 1), or ``wide``:
    random signs with magnitudes log-uniform over 2^-20 .. 2^20."""
    rng = rng if rng is not None else np.random.default_rng()
    if dist == "uniform":
        x = rng.uniform(-1.0, 1.0, size=(rows, cols))
    elif dist == "normal":
        x = rng.standard_normal(size=(rows, cols))
    elif dist == "wide":
        x = np.exp2(rng.uniform(-20.0, 20.0, size=(rows, cols))) * rng.choice([-1.0, 1.0], size=(rows, cols))
    else:
        raise ValueError(f"unknown input distribution {dist!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    return x.astype(np.float32)


def reference(a, b, alpha: float = 1.0, beta: float = 0.0, c=None, *, keep_on_gpu: bool = False):
    """alpha * a @ b + beta * c in float64, on the host (NumPy) or, for large
    problems with GPU inputs, on the GPU (CuPy, cuBLAS DGEMM).  Returns NumPy,
    or with ``keep_on_gpu`` (GPU inputs) a CuPy array that :func:`compare`
    uses on the GPU -- no copy of the result to the host."""
    M, K = a.shape
    N = b.shape[1]
    on_gpu = not isinstance(a, np.ndarray)
    if on_gpu and (keep_on_gpu or M * N * K > HOST_REFERENCE_LIMIT):
        import cupy as cp

        r = alpha * (cp.asarray(a, dtype=cp.float64) @ cp.asarray(b, dtype=cp.float64))
        if beta != 0:
            r += beta * cp.asarray(c, dtype=cp.float64)
        return r if keep_on_gpu else cp.asnumpy(r)
    ha, hb = (_to_host(a).astype(np.float64), _to_host(b).astype(np.float64))
    r = alpha * (ha @ hb)
    if beta != 0:
        r += beta * _to_host(c).astype(np.float64)
    return r


def magnitude(a, b, alpha: float = 1.0, beta: float = 0.0, c=None):
    """|alpha| |a| @ |b| + |beta| |c| in float64 (NumPy result): the scale of each
    element's rounding error.  Computed where the reference is (host or GPU)."""
    M, K = a.shape
    if not isinstance(a, np.ndarray) and M * b.shape[1] * K > HOST_REFERENCE_LIMIT:
        import cupy as cp

        r = abs(alpha) * (cp.abs(cp.asarray(a, dtype=cp.float64)) @ cp.abs(cp.asarray(b, dtype=cp.float64)))
        if beta != 0:
            r += abs(beta) * cp.abs(cp.asarray(c, dtype=cp.float64))
        return cp.asnumpy(r)
    r = abs(alpha) * (np.abs(_to_host(a)).astype(np.float64) @ np.abs(_to_host(b)).astype(np.float64))
    if beta != 0:
        r += abs(beta) * np.abs(_to_host(c)).astype(np.float64)
    return r


def _to_host(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get"):  # CuPy
        return x.get()
    if hasattr(x, "detach"):  # PyTorch
        return x.detach().cpu().numpy()
    return np.asarray(x)


@dataclass
class ErrorReport:
    rel_fro: float  # ||C - ref||_F / ||ref||_F
    max_rel: float  # max |C - ref| / (|alpha| |A||B| + |beta| |C0|), elementwise
    nonfinite: int  # NaN / Inf elements in the result (unwritten elements stay NaN)

    def ok(self, tol: float) -> bool:
        return self.nonfinite == 0 and self.rel_fro <= tol


def compare(result, ref, scale: np.ndarray | None = None) -> ErrorReport:
    """Errors of ``result`` against ``ref``: on the host, or on the GPU when
    ``ref`` is a CuPy array (from ``reference(..., keep_on_gpu=True)``)."""
    if isinstance(ref, np.ndarray):
        xp, r = np, _to_host(result).astype(np.float64)
    else:
        import cupy as xp

        r = xp.asarray(result).astype(xp.float64)
    bad = int(xp.count_nonzero(~xp.isfinite(r)))
    diff = r - ref
    denom = float(xp.linalg.norm(ref))
    rel = float(xp.linalg.norm(diff)) / denom if denom > 0 else float(xp.linalg.norm(diff))
    if bad:
        rel = float("inf")
    max_rel = float("nan")
    if scale is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.abs(diff) / np.where(scale > 0, scale, 1.0)
        max_rel = float(np.max(q)) if q.size else 0.0
    return ErrorReport(rel, max_rel, bad)


# The dtypes verify runs a kernel in: float32 on the CUDA cores; tf32 and float16 on
# the tensor cores (float32 result); fp16_ec and tf32_ec, the error-corrected FP32
# methods.  float32 inputs are drawn for every one, then rounded where the kernel
# rounds them (tf32, float16), and the FP64 reference takes the rounded inputs:
# only accumulation and output rounding count.
VERIFY_DTYPES = ("float32", "tf32", "float16", "fp16_ec", "tf32_ec")
# Default bounds on the relative Frobenius error.  The tensor cores' FP32
# accumulation does not round to nearest: 1e-4 up to K = 4096 (a wrong element or
# tile gives errors near 1); the error-corrected methods are held to SGEMM's bound.
TOLERANCE = {"float32": 1e-5, "tf32": 1e-4, "float16": 1e-4, "fp16_ec": 1e-5, "tf32_ec": 1e-5}


def tf32_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits, to nearest), as the tensor
    cores read them."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def verify_dtype(spec, arch: str) -> str:
    """The dtype verify runs a rung in by default on ``arch``: float32 where it computes
    float32, else TF32 (float16 where TF32 needs a newer target), else tf32_ec."""
    for dtype in ("float32", "tf32", "float16", "tf32_ec", "fp16_ec"):
        if dtype in spec.dtypes and spec.builds_for(arch, dtype):
            return dtype
    raise ValueError(f"kernel {spec.name!r} runs in none of {', '.join(VERIFY_DTYPES)} on {arch}")


@dataclass
class VerifyResult:
    kernel: str
    params: dict
    M: int
    N: int
    K: int
    alpha: float
    beta: float
    dist: str
    rel_fro: float
    max_rel: float
    nonfinite: int
    tol: float
    passed: bool
    dtype: str = "float32"

    def as_dict(self) -> dict:
        return asdict(self)


def verify(
    kernel: str = "auto",
    M: int = 1000,
    N: int = 1000,
    K: int = 1000,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    dist: str = "uniform",
    tol: float | None = None,
    seed=None,
    dtype: str = "float32",
    **tile_params,
) -> VerifyResult:
    """Run one kernel on fresh random inputs and compare with FP64.

    ``dtype`` is one of VERIFY_DTYPES; ``tol`` defaults to TOLERANCE[dtype].  The
    output (float32) starts as NaN (beta == 0) or random values (beta != 0), so an
    element the kernel never writes shows up as an error.
    """
    if dtype not in VERIFY_DTYPES:
        raise ValueError(f"dtype {dtype!r}: verify runs one of {', '.join(VERIFY_DTYPES)}")
    tol = TOLERANCE[dtype] if tol is None else tol
    import cupy as cp
    from ..core.api import matmul, plan
    from ..runtime.device import gpu_info

    rng = np.random.default_rng(seed)
    ha, hb = random_matrix(M, K, dist, rng), random_matrix(K, N, dist, rng)
    if dtype == "float16":  # the kernel reads float16: the reference takes the same values
        ha, hb = ha.astype(np.float16), hb.astype(np.float16)
        ra, rb = ha.astype(np.float32), hb.astype(np.float32)
    elif dtype == "tf32":
        ra, rb = tf32_round(ha), tf32_round(hb)
    else:
        ra, rb = ha, hb
    a, b, ref_a, ref_b = cp.asarray(ha), cp.asarray(hb), cp.asarray(ra), cp.asarray(rb)
    if beta != 0:
        c0 = cp.asarray(random_matrix(M, N, dist, rng))
    else:
        c0 = cp.full((M, N), np.nan, dtype=np.float32)  # poison: unwritten elements stay NaN
    out = c0.copy()
    precision = {"tf32": "tf32", "fp16_ec": "fp16_ec", "tf32_ec": "tf32_ec"}.get(dtype)
    matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel, precision=precision, **tile_params)
    cp.cuda.get_current_stream().synchronize()
    ref = reference(ref_a, ref_b, alpha, beta, c0)
    err = compare(out, ref, magnitude(ref_a, ref_b, alpha, beta, c0))
    p = plan(
        kernel,
        M,
        N,
        K,
        sm_count=gpu_info(cp.cuda.Device().id).sm_count,
        dtype=dtype,
        out_dtype="float32",
        **tile_params,
    )
    return VerifyResult(
        p.spec.name,
        p.params,
        M,
        N,
        K,
        float(alpha),
        float(beta),
        dist,
        err.rel_fro,
        err.max_rel,
        err.nonfinite,
        tol,
        err.ok(tol),
        dtype,
    )
