"""gemmlab/wmma_ext.cuh: compile-only checks (no GPU) and every function against
NumPy and wmma::load_matrix_sync on the GPU, for every fragment kind.

CPU: the check and benchmark kernels compile for sm_80 and sm_90a without spills
or stack; other architectures get a compile error naming them; the public
entry point compiles user code against the header.
GPU: kernels/lab/wmma_ext_check.cu builds fragments with each function and with
load_matrix_sync from tiles NumPy built; both fragments must be bit-identical,
and the extension's fragment, used in a product (or stored), must equal NumPy's.
"""

import zlib

import numpy as np
import pytest

import gemmlab
from gemmlab.lab import fragments as fr
from gemmlab.tools.bench import wmma_ext as bench
from gemmlab.core.errors import CompileError
from gemmlab.runtime.compile import compile_module, parse_ptxas_log

ARCHES = ("sm_80", "sm_90a")
CHECK_SOURCE = fr.SOURCE.parent / "wmma_ext_check.cu"
NTESTS = 6


def check_name(kd):
    return kd.name_expression("gemmlab::lab::wmma_ext_check")


@pytest.fixture(scope="module")
def modules():
    memo = {}

    def get(which, arch):
        if (which, arch) not in memo:
            if which == "check":
                memo[which, arch] = compile_module(CHECK_SOURCE, [check_name(kd) for kd in fr.KINDS], arch)
            else:
                memo[which, arch] = compile_module(bench.SOURCE, bench.kernel_names(), arch)
        return memo[which, arch]

    return get


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("which", ["check", "bench"])
def test_lab_kernels_compile_without_spills(which, arch, modules):
    module = modules(which, arch)
    names = [check_name(kd) for kd in fr.KINDS] if which == "check" else bench.kernel_names()
    res = parse_ptxas_log(module.log)
    assert len(res) == len(names)
    for name in names:
        r = res[module.symbols[name]]
        assert r.spill_bytes == 0, f"{name} spills on {arch}"
        assert r.stack_bytes == 0, f"{name} has a stack frame on {arch} (a fragment indexed at run time?)"


USER_KERNEL = r"""
#include <gemmlab/wmma_ext.cuh>
using namespace nvcuda;
__global__ void scaled_identity_times(const half* b, float alpha, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    gemmlab::wmma_ext::make_identity(a, alpha);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::fill_fragment(acc, 0.0f);
    wmma::mma_sync(acc, a, fb, acc);
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}
"""


@pytest.mark.parametrize("arch", ["sm_87", "sm_103"])
def test_other_architectures_are_refused_by_name(arch, tmp_path):
    with pytest.raises(CompileError, match=rf"{arch} is not supported"):
        gemmlab.compile_with_headers(USER_KERNEL, ["scaled_identity_times"], arch=arch)


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_89", "sm_100a", "sm_120"])
def test_architectures_with_maps_derived_from_sass_compile(arch):
    """Their maps are the sm_80 ones (test_fragments.py checks the dump kernel's SASS)."""
    module = gemmlab.compile_with_headers(USER_KERNEL, ["scaled_identity_times"], arch=arch)
    assert module.cubin[:4] == b"\x7fELF"


def test_public_entry_point_compiles_user_code(tmp_path):
    from gemmlab.lab.wmma_ext import header, include_dir

    assert header().is_file() and (include_dir() / "gemmlab" / "wmma_ext.cuh") == header()
    module = gemmlab.compile_with_headers(USER_KERNEL, ["scaled_identity_times"], arch="sm_90a")
    assert module.cubin[:4] == b"\x7fELF"
    assert module.resources("scaled_identity_times").spill_bytes == 0
    path = tmp_path / "user.cu"
    path.write_text(USER_KERNEL)
    assert gemmlab.compile_with_headers(path, ["scaled_identity_times"], arch="sm_80").cubin[:4] == b"\x7fELF"
    with pytest.raises(FileNotFoundError):
        gemmlab.compile_with_headers(tmp_path / "missing.cu", [], arch="sm_80")


# -- GPU: every function, every kind -------------------------------------------------------


def bf16_bits(x):
    """float -> bfloat16 bits, round to nearest even (as __float2bfloat16_rn)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def to_storage(kd_dtype, values):
    values = np.asarray(values, np.float64)
    if kd_dtype == "f16":
        return values.astype(np.float16)
    if kd_dtype == "bf16":
        return bf16_bits(values.astype(np.float32))
    return values.astype(np.float32)


def to_float(kd_dtype, stored):
    if kd_dtype == "bf16":
        return (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return stored.astype(np.float64)


def to_memory(kd, mat, ldm, fill):
    """A rows x cols tile in the kind's layout with leading dimension ldm; the
    padding holds ``fill`` (junk a wrong ldm would pick up)."""
    body = mat.T if kd.layout == "col" else mat
    mem = np.full((body.shape[0], ldm), fill, dtype=mat.dtype)
    mem[:, : body.shape[1]] = body
    return mem.ravel()


@pytest.mark.gpu
@pytest.mark.parametrize("name", [kd.name for kd in fr.KINDS])
def test_every_function_against_numpy(name):
    import cupy as cp
    from gemmlab.runtime.device import gpu_info
    from gemmlab.runtime.launch import launch

    kd = fr.kind(name)
    arch = gpu_info().arch
    module = compile_module(CHECK_SOURCE, [check_name(k) for k in fr.KINDS], arch)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    rows, cols, dt = kd.rows, kd.cols, kd.dtype
    line = cols if kd.layout == "row" else rows
    ldm = line + 8
    alpha = -1.5

    src = rng.uniform(-2, 2, (rows, cols)).astype(np.float32)
    src[src == 0] = 0.5
    vec = to_storage(dt, rng.uniform(-2, 2, line))
    expected = np.zeros((NTESTS, rows, cols))
    if kd.layout == "row":
        expected[0, 0, :] = to_float(dt, vec)
    else:
        expected[0, :, 0] = to_float(dt, vec)
    # make_identity's contract: alpha on the diagonal and +0 everywhere else, for any
    # alpha -- what loading an identity matrix with alpha written on its diagonal gives,
    # and what fill_fragment(0) plus the diagonal would give.  Not the IEEE product
    # alpha * I, whose off-diagonal elements are -0 for a negative alpha (and NaN for a
    # NaN alpha): a reference built as alpha * np.eye holds -0 there, which the first GPU
    # run (run 29, H200) flagged in every kind while every product was right.  alpha is
    # negative on purpose so that a -0 (or a sign error) off the diagonal still fails the
    # bit-exact comparison below.
    expected[1] = np.where(np.eye(rows, cols, dtype=bool), alpha, 0.0)
    assert alpha < 0 and not np.signbit(expected[1][~np.eye(rows, cols, dtype=bool)]).any()
    opv = np.float32(0.25) - np.float32(2.0) * src
    expected[2] = expected[3] = to_float(dt, to_storage(dt, opv))
    r_idx, c_idx = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    expected[4] = (r_idx * cols + c_idx) % 128 - 64
    expected[5] = to_float(dt, to_storage(dt, rng.uniform(-2, 2, (rows, cols))))
    junk = to_storage(dt, [1234.0])[0]
    refs = np.concatenate([to_memory(kd, to_storage(dt, e), ldm, junk) for e in expected])
    src_mem = to_memory(kd, src, ldm, np.float32(777.0))

    if kd.use == "matrix_a":
        other = to_storage(dt, rng.uniform(-1, 1, (kd.k, kd.n)))
    else:
        other = to_storage(dt, rng.uniform(-1, 1, (kd.m, kd.k)))
    prod_dtype = np.float16 if (kd.use == "accumulator" and dt == "f16") else np.float32

    d_refs, d_src, d_vec, d_other = (cp.asarray(a) for a in (refs, src_mem, vec, other))
    raw = cp.full(NTESTS * 2 * 32 * kd.num_elements, 0xFFFFFFFF, dtype=cp.uint32)  # poisoned
    prod = cp.full(NTESTS * kd.m * kd.n, np.nan, dtype=prod_dtype)
    vec_out = cp.asarray(np.full(line, to_storage(dt, [np.nan])[0]))
    launch(
        module.kernel(check_name(kd)),
        (1, 1, 1),
        (32, 1, 1),
        0,
        cp.cuda.get_current_stream().ptr,
        d_refs.data.ptr,
        d_src.data.ptr,
        np.int32(ldm),
        d_vec.data.ptr,
        np.float32(alpha),
        d_other.data.ptr,
        raw.data.ptr,
        prod.data.ptr,
        vec_out.data.ptr,
    )
    cp.cuda.get_current_stream().synchronize()
    raw = cp.asnumpy(raw).reshape(NTESTS, 2, 32, kd.num_elements)
    prod = cp.asnumpy(prod).astype(np.float64).reshape(NTESTS, kd.m, kd.n)
    labels = [
        "load_vector_sync",
        "make_identity",
        "load_matrix_with_op_sync",
        "load_matrix_with_op_sync<skew>",
        "foreach_ij",
        "foreach",
    ]
    failures = []
    for t, label in enumerate(labels):
        ext, ref = raw[t, 0], raw[t, 1]
        if not (ext == ref).all():
            lane, k = np.argwhere(ext != ref)[0]
            failures.append(
                f"{label}: fragment differs from load_matrix_sync, first at lane {lane} x[{k}] "
                f"({ext[lane, k]:#x} vs {ref[lane, k]:#x}), {int((ext != ref).sum())} slots"
            )
        e = expected[t]
        if kd.use == "accumulator":
            want, scale = e, np.abs(e) + 1e-30
        elif kd.use == "matrix_a":
            o = to_float(dt, other)
            want, scale = e @ o, np.abs(e) @ np.abs(o)
        else:
            o = to_float(dt, other)
            want, scale = o @ e, np.abs(o) @ np.abs(e)
        tol = 0.0 if kd.use == "accumulator" else (4e-3 if dt == "tf32" else 1e-5)
        err = np.abs(prod[t] - want)
        if not np.isfinite(prod[t]).all() or (err > tol * scale + 1e-30).any():
            failures.append(f"{label}: product differs from NumPy, max error {np.nanmax(err):.3g}")
    got_vec = to_float(dt, cp.asnumpy(vec_out))
    want_vec = expected[5][0, :] if kd.layout == "row" else expected[5][:, 0]
    if not (got_vec == want_vec).all():
        failures.append(f"store_vector_sync: {got_vec[:4]}... != {want_vec[:4]}...")
    assert not failures, f"{name}:\n" + "\n".join(failures)


@pytest.mark.gpu
def test_bench_suite_runs_and_checks():
    recs = [r.as_dict() for r in bench.run(reps=2, budget_s=0.2, quiet=True, quick=True)]
    assert {r["experiment"] for r in recs} == {"vector", "identity", "ec_gemm", "skew"}
    for r in recs:
        assert r["ms"] is not None and r["ms"] > 0, r
        assert r["ms_min"] <= r["ms"] <= r["ms_max"], r
        limit = 1e-4 if r["experiment"] == "ec_gemm" else 1e-3  # plain FP16 would be ~3e-4
        assert r["rel_error"] < limit, r
