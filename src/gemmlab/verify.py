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
HOST_REFERENCE_LIMIT = 2 ** 31


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
    if hasattr(x, "get"):                       # CuPy
        return x.get()
    if hasattr(x, "detach"):                    # PyTorch
        return x.detach().cpu().numpy()
    return np.asarray(x)


@dataclass
class ErrorReport:
    rel_fro: float        # ||C - ref||_F / ||ref||_F
    max_rel: float        # max |C - ref| / (|alpha| |A||B| + |beta| |C0|), elementwise
    nonfinite: int        # NaN / Inf elements in the result (unwritten elements stay NaN)

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

    def as_dict(self) -> dict:
        return asdict(self)


def verify(kernel: str = "auto", M: int = 1000, N: int = 1000, K: int = 1000, *, alpha: float = 1.0,
           beta: float = 0.0, dist: str = "uniform", tol: float = 1e-5, seed=None, **tile_params) -> VerifyResult:
    """Run one kernel on fresh random inputs and compare with FP64.

    The output starts as NaN (beta == 0) or random values (beta != 0), so an
    element the kernel never writes shows up as an error.
    """
    import cupy as cp
    from .api import matmul, plan
    from .runtime.device import gpu_info
    rng = np.random.default_rng(seed)
    a = cp.asarray(random_matrix(M, K, dist, rng))
    b = cp.asarray(random_matrix(K, N, dist, rng))
    if beta != 0:
        c0 = cp.asarray(random_matrix(M, N, dist, rng))
    else:
        c0 = cp.full((M, N), np.nan, dtype=np.float32)   # poison: unwritten elements stay NaN
    out = c0.copy()
    matmul(a, b, out=out, alpha=alpha, beta=beta, kernel=kernel, **tile_params)
    cp.cuda.get_current_stream().synchronize()
    ref = reference(a, b, alpha, beta, c0)
    err = compare(out, ref, magnitude(a, b, alpha, beta, c0))
    p = plan(kernel, M, N, K, sm_count=gpu_info(cp.cuda.Device().id).sm_count, **tile_params)
    return VerifyResult(p.spec.name, p.params, M, N, K, float(alpha), float(beta), dist,
                        err.rel_fro, err.max_rel, err.nonfinite, tol, err.ok(tol))
