"""The wgmma rung (Hopper): the kernel itself on odd shapes (leading dimensions
padded so that TMA can read the operands), the fallback when it cannot, the
TF32 packing, and -- without a GPU -- the refusal on other architectures.

Every GPU check compares with an FP64 reference on fresh random inputs, with the
output poisoned (NaN) first, and checks from the ``gemmlab`` debug log which
kernel actually ran."""

import logging

import numpy as np
import pytest

import gemmlab
from gemmlab.core import executor
from gemmlab.kernels import registry
from gemmlab.kernels.simt.pipelined import SPLITK_VALUES
from gemmlab.kernels.spec import TYPE_CODES
from gemmlab.runtime import device as rt_device
from gemmlab.tools.verify import random_matrix

DTYPES = [
    ("float16", "float32"),
    ("float16", "float16"),
    ("bfloat16", "float32"),
    ("bfloat16", "bfloat16"),
    ("tf32", "float32"),
]
# As tests/test_tensor.py: relative Frobenius error against FP64 on the rounded inputs.
BOUND = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 8e-3}


# -- without a GPU: other architectures ------------------------------------------------------


def _fake_gpu(arch="sm_80", name="NVIDIA A100-SXM4-80GB"):
    return rt_device.GPUInfo(0, name, (8, 0), arch, 108, 1410.0, 40 << 20, 163 << 10)


def test_matmul_names_the_architecture_when_wgmma_cannot_run(monkeypatch):
    monkeypatch.setattr(rt_device, "gpu_info", lambda ordinal=0: _fake_gpu())
    a = np.ones((64, 64), np.float16)
    with pytest.raises(
        ValueError,
        match=r"kernel 'wgmma' does not run on NVIDIA A100-SXM4-80GB \(sm_80\): it needs "
        r"sm_90a.*Kernels that run there for float16: wmma, wmma_warptile, mma_pipelined",
    ):
        gemmlab.matmul(a, a, kernel="wgmma")


def test_run_plan_refuses_a_wgmma_plan_on_another_gpu():
    p = gemmlab.plan("wgmma", 64, 64, 64, dtype="float16", out_dtype="float16")
    with pytest.raises(
        ValueError, match=r"kernel 'wgmma' does not run on NVIDIA A100-SXM4-80GB \(sm_80\): it needs sm_90a"
    ):
        executor.run_plan(p, _fake_gpu(), 0, 0, 64, 0, 64, 0, 64, 1.0, 0.0)


# -- on a Hopper GPU ----------------------------------------------------------------------------

torch = pytest.importorskip("torch") if rt_device.gpu_available() else None
hopper = pytest.mark.skipif(
    not rt_device.gpu_available() or rt_device.gpu_info(0).arch != "sm_90a", reason="needs a Hopper GPU (sm_90a)"
)


def _padded(rows, cols, ld, dtype, rng, offset=0):
    """A rows x cols view with leading dimension ld (and ``offset`` elements into its buffer) of
    fresh random values; returns (view, FP64 copy of what the kernel sees)."""
    base = torch.from_numpy(random_matrix(1, rows * ld + offset + ld, "uniform", rng).ravel()).cuda()
    if dtype != "tf32":
        base = base.to(getattr(torch, dtype))
    view = base[offset : offset + rows * ld].view(rows, ld)[:, :cols]
    ref = view.double()
    if dtype == "tf32":
        bits = view.float().contiguous().view(torch.int32)
        ref = ((bits + 0x1000) & ~0x1FFF).view(torch.float32).double()  # round to nearest TF32
    return view, ref


def _ran(caplog) -> list[str]:
    """What the last matmul of this thread ran (a call may reuse a prepared call, which logs
    nothing: gemmlab.last_plan says what it ran either way)."""
    p = gemmlab.last_plan()
    return [f"running {p.describe()}"] if p is not None else []


def _operand(rows, cols, layout, ld, dtype, rng, offset=0):
    """op(x), rows x cols: stored row-major ('N'), or the transpose of a row-major cols x rows
    array ('T', a transposed view: no copy), rows of ld elements as stored."""
    if layout == "N":
        return _padded(rows, cols, ld(cols), dtype, rng, offset)
    x, x64 = _padded(cols, rows, ld(rows), dtype, rng, offset)
    return x.t(), x64.t()


def _check(M, N, K, dtype, out_dtype, alpha, beta, rng, caplog, *, pad=8, offset=0, expect="wgmma", ops="NN", **params):
    ld = lambda n: -(-n // pad) * pad if pad else n
    a, a64 = _operand(M, K, ops[0], ld, dtype, rng, offset)
    b, b64 = _operand(K, N, ops[1], ld, dtype, rng)
    ot = getattr(torch, out_dtype)
    c0 = torch.from_numpy(random_matrix(M, N, "uniform", rng)).cuda().to(ot)
    out = c0.clone() if beta else torch.full((M, N), float("nan"), device="cuda", dtype=ot)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        gemmlab.matmul(
            a,
            b,
            out=out,
            alpha=alpha,
            beta=beta,
            kernel="wgmma",
            **params,
            **({"precision": "tf32"} if dtype == "tf32" else {}),
        )
        torch.cuda.synchronize()
    ran = _ran(caplog)
    assert len(ran) == 1 and (expect is None or ran[0].startswith(f"running {expect}(")), ran
    if expect == "wgmma" and ops != "NN":  # the layout read: the operands as stored
        assert gemmlab.last_plan().name_expression.endswith(f"'{ops[0]}', '{ops[1]}'>")
    ref = alpha * (a64 @ b64) + (beta * c0.double() if beta else 0)
    bad = torch.isnan(out) | ((out.double() - ref).abs() > 0.05 * ref.abs().max())
    if bad.any():
        r, c = [int(x) for x in bad.nonzero()[0]]
        rows = bad.any(dim=1).nonzero().ravel()
        cols = bad.any(dim=0).nonzero().ravel()
        pytest.fail(
            f"{M}x{N}x{K} {dtype}->{out_dtype}: {int(bad.sum())} wrong elements; first at ({r}, {c}): "
            f"{float(out[r, c])} vs {float(ref[r, c])}; wrong rows {rows[:8].tolist()}..{rows[-1:].tolist()}"
            f" ({len(rows)}), cols {cols[:8].tolist()}..{cols[-1:].tolist()} ({len(cols)})"
        )
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
def test_diagnostic_one_tile(dtype, out_dtype, caplog):
    """64 x 256 x 64: one tile of one consumer row; on failure the message says where it breaks."""
    _check(64, 256, 64, dtype, out_dtype, 1.0, 0.0, np.random.default_rng(1), caplog)


SHAPES = [
    (1, 1, 1),
    (7, 13, 5),
    (64, 256, 64),
    (128, 256, 128),
    (129, 257, 65),
    (5, 300, 64),
    (300, 5, 64),
    (63, 1000, 1),
    (100, 100, 3000),
    (4097, 4095, 513),
]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_odd_shapes(dtype, out_dtype, shape, alpha, beta, caplog):
    """The kernel itself on shapes that are multiples of no tile (rows padded to 16 bytes)."""
    M, N, K = shape
    _check(M, N, K, dtype, out_dtype, alpha, beta, np.random.default_rng(M * 7 + N * 3 + K), caplog)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["TN", "NT", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", [("float16", "float32"), ("bfloat16", "bfloat16")])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 1, 1),
        (7, 13, 5),
        (64, 256, 64),
        (129, 257, 65),
        (5, 300, 64),
        (300, 5, 64),
        (63, 1000, 1),
        (100, 100, 3000),
        (4097, 4095, 513),
    ],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_odd_shapes_in_every_layout(ops, dtype, out_dtype, shape, alpha, beta, caplog):
    """16-bit operands as stored, without a copy: A 'T' (K x M, M-major in shared memory,
    read through the transpose bit), B 'T' (N x K, K-major), on shapes that are multiples
    of no tile."""
    M, N, K = shape
    # A vector's layout is ambiguous: a transposed view with a dimension of 1 may be read
    # as the other layout, whose stride TMA may refuse (a 63 x 1 'T' view of a 1 x 63 row is
    # 63 rows of 2 bytes as 'N'), and fall back; the result is checked either way.
    expect = "wgmma" if min(shape) > 1 else None
    _check(M, N, K, dtype, out_dtype, alpha, beta, np.random.default_rng(M * 5 + N + K), caplog, ops=ops, expect=expect)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize(
    "dtype, out_dtype, ops",
    [
        ("float16", "float32", "NN"),
        ("bfloat16", "bfloat16", "NT"),
        ("float16", "float16", "TN"),
        ("bfloat16", "float32", "TT"),
        ("tf32", "float32", "NN"),
    ],
)
@pytest.mark.parametrize(
    "shape", [(1, 4100, 520), (16, 130, 1000), (129, 257, 65), (300, 70, 3000)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_narrow_tile_in_every_layout(bm, dtype, out_dtype, ops, shape, alpha, beta, caplog):
    """BN = 64 (the tile of products with few rows: m64n64 wgmmas, one box of B a K-step) on
    shapes that are multiples of no tile, each layout read as stored, both epilogues (the
    TMA store with beta = 0; with beta != 0 16-bit inputs staged a warp's rows at a time, TF32
    from the registers)."""
    M, N, K = shape
    # (a vector's layout is ambiguous: a 'T' view with a dimension of 1 may fall back)
    expect = "wgmma" if min(shape) > 1 or ops == "NN" else None
    _check(
        M,
        N,
        K,
        dtype,
        out_dtype,
        alpha,
        beta,
        np.random.default_rng(M + N + K + bm),
        caplog,
        ops=ops,
        expect=expect,
        BM=bm,
        BN=64,
    )
    if expect:
        assert gemmlab.last_plan().params["BN"] == 64


# Every tile configuration unsplit; split-K on a few of them (test_split_k_in_every_tile).
UNSPLIT_CONFIGS = [p for p in registry.get("wgmma").configurations() if p["SPLITK"] == 1]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("params", UNSPLIT_CONFIGS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize(
    "dtype, out_dtype, ops",
    [
        ("bfloat16", "bfloat16", "NN"),
        ("tf32", "float32", "NN"),
        ("bfloat16", "bfloat16", "NT"),
        ("float16", "float16", "TT"),
    ],
)
def test_every_configuration(params, dtype, out_dtype, ops, caplog):
    if params not in registry.get("wgmma").configurations(dtype):
        pytest.skip(f"not a {dtype} configuration (BN = 192 is 16-bit only)")
    rng = np.random.default_rng(5)
    a, a64 = _operand(300, 520, ops[0], lambda n: -(-n // 8) * 8, dtype, rng)
    b, b64 = _operand(520, 333, ops[1], lambda n: -(-n // 8) * 8, dtype, rng)
    out = torch.full((300, 333), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        gemmlab.matmul(a, b, out=out, kernel="wgmma", **params, **({"precision": "tf32"} if dtype == "tf32" else {}))
        torch.cuda.synchronize()
    assert _ran(caplog)[0].startswith("running wgmma(" + ", ".join(f"{k}={v}" for k, v in params.items()))
    assert gemmlab.last_plan().name_expression.endswith(f"'{ops[0]}', '{ops[1]}'>")
    ref = a64 @ b64
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert not torch.isnan(out).any() and err <= BOUND[out_dtype], err


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("how", ["contiguous-odd-widths", "base-off-by-one-element"])
def test_fallback_when_tma_cannot_read(dtype, how, caplog):
    """Operands TMA cannot take still give the right result, through mma_pipelined (its
    narrow copies read any alignment), and the log says why."""
    rng = np.random.default_rng(3)
    if how == "contiguous-odd-widths":  # rows of 1026 and 8190 bytes
        _check(4097, 4095, 513, dtype, dtype, 1.0, 0.0, rng, caplog, pad=0, expect="mma_pipelined")
    else:  # 2 bytes off a 16-byte boundary
        _check(300, 200, 64, dtype, "float32", 0.5, 2.0, rng, caplog, offset=1, expect="mma_pipelined")
    assert any("wgmma cannot take these operands: TMA needs" in r.getMessage() for r in caplog.records)


@hopper
@pytest.mark.gpu
def test_tf32_any_layout_runs_on_wgmma(caplog):
    """TF32 is packed into an aligned workspace first: odd contiguous widths and an unaligned
    base still run on wgmma."""
    _check(4097, 4095, 513, "tf32", "float32", 1.0, 0.0, np.random.default_rng(4), caplog, pad=0)
    _check(300, 200, 65, "tf32", "float32", 0.5, 2.0, np.random.default_rng(5), caplog, offset=1, pad=0)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype, precision", [("float16", None), ("bfloat16", None), ("float32", "tf32")])
def test_auto_runs_wgmma_on_hopper(dtype, precision, caplog):
    a = torch.rand((1000, 512), device="cuda").to(getattr(torch, dtype))
    b = torch.rand((512, 768), device="cuda").to(getattr(torch, dtype))
    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        c = gemmlab.matmul(a, b, precision=precision)
        torch.cuda.synchronize()
    assert _ran(caplog)[0].startswith("running wgmma("), _ran(caplog)
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)) < 1e-2


@hopper
@pytest.mark.gpu
def test_alpha_zero_reads_neither_a_nor_b(caplog):
    a = torch.full((300, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    b = torch.full((64, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    c0 = torch.rand((300, 256), device="cuda", dtype=torch.bfloat16)
    out = c0.clone()
    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        gemmlab.matmul(a, b, out=out, alpha=0.0, beta=0.5, kernel="wgmma")
        torch.cuda.synchronize()
    assert _ran(caplog)[0].startswith("running wgmma(")
    assert torch.equal(out, (c0.float() * 0.5).bfloat16())


@hopper
@pytest.mark.gpu
def test_many_tiles_per_block():
    """More tiles than SMs: each persistent block walks several tiles and the ring's phases
    carry over from tile to tile."""
    rng = np.random.default_rng(6)
    a = torch.from_numpy(random_matrix(2048, 320, "uniform", rng)).cuda().bfloat16()
    b = torch.from_numpy(random_matrix(320, 4096, "uniform", rng)).cuda().bfloat16()
    out = torch.full((2048, 4096), float("nan"), device="cuda", dtype=torch.float32)
    gemmlab.matmul(a, b, out=out, kernel="wgmma", BM=64, BN=128, STAGES=3)  # 512 tiles
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)) <= 1e-4


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float32"), ("tf32", "float32")])
@pytest.mark.parametrize(
    "shape", [(1, 1, 1), (129, 257, 65), (300, 5, 64), (4097, 4095, 513)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize("ops", ["NN", "NT", "TT"])
def test_clusters_on_odd_shapes(dtype, out_dtype, shape, bm, ops, caplog):
    """Clusters of two blocks sharing (multicasting) the B tile, including an odd number of
    tile-rows, where the second block of the last cluster computes rows past M; B 'N' is
    multicast in 64-column boxes, B 'T' (K-major) in halves of its BN rows."""
    if dtype == "tf32" and ops != "NN":
        pytest.skip("TF32 reads NN only")
    M, N, K = shape
    rng = np.random.default_rng(M + N + K + bm)
    a, a64 = _operand(M, K, ops[0], lambda n: -(-n // 8) * 8, dtype, rng)
    b, b64 = _operand(K, N, ops[1], lambda n: -(-n // 8) * 8, dtype, rng)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        gemmlab.matmul(
            a, b, out=out, kernel="wgmma", BM=bm, CLUSTER=2, **({"precision": "tf32"} if dtype == "tf32" else {})
        )
        torch.cuda.synchronize()
    assert "CLUSTER=2" in _ran(caplog)[0]
    if min(shape) > 1:  # (a vector's layout is ambiguous: 1 x 1 is read as NN)
        assert gemmlab.last_plan().name_expression.endswith(f"'{ops[0]}', '{ops[1]}'>")
    ref = a64 @ b64
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert not torch.isnan(out).any() and err <= BOUND[out_dtype], err


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("pad", [8, 0])
@pytest.mark.parametrize("which", ["a", "b"])
def test_tf32_inputs_are_rounded_to_nearest(pad, which, caplog):
    """1 + 3 * 2^-12 rounds to 1 + 2^-10 in TF32 (the tensor cores alone would truncate it
    to 1): with the other operand all ones, every output is exactly K * (1 + 2^-10), for
    the operand read in place (rounded by the copy engine: a TFLOAT32 tensor map) and
    packed (rows of 65 or 301 floats: not 16-byte multiples)."""
    M, N, K = 200, 301, 65
    lda = -(-K // pad) * pad if pad else K
    ldb = -(-N // pad) * pad if pad else N
    x = 1 + 3 * 2**-12
    a = torch.full((M, lda), x if which == "a" else 1.0, device="cuda")[:, :K]
    b = torch.full((K, ldb), x if which == "b" else 1.0, device="cuda")[:, :N]
    with caplog.at_level(logging.DEBUG, logger="gemmlab"):
        c = gemmlab.matmul(a, b, kernel="wgmma", precision="tf32")
        torch.cuda.synchronize()
    assert _ran(caplog)[0].startswith("running wgmma(")
    assert torch.equal(c, torch.full_like(c, K * (1 + 2**-10)))


# -- batches: one launch through 3-D tensor maps -----------------------------------------------


def _stack(nb, rows, cols, layout, dtype, rng, gap=8):
    """op(x) for each of nb matrices (nb None: one 2-D matrix), rows x cols, stored 'N' or 'T'
    (a transposed view) with rows padded to 16 bytes and ``gap`` elements between matrices;
    returns (view, FP64 copy of what the kernel sees)."""
    sr, sc = (rows, cols) if layout == "N" else (cols, rows)
    ld = -(-sc // 8) * 8
    per = sr * ld + gap
    n = nb or 1
    base = torch.from_numpy(random_matrix(1, n * per + 8, "uniform", rng).ravel()).cuda()
    if dtype != "tf32":
        base = base.to(getattr(torch, dtype))
    view = torch.as_strided(base, (n, sr, sc), (per, ld, 1))
    if layout == "T":
        view = view.transpose(-1, -2)
    if nb is None:
        view = view[0]
    ref = view.double()
    if dtype == "tf32":
        bits = view.float().contiguous().view(torch.int32)
        ref = ((bits + 0x1000) & ~0x1FFF).view(torch.float32).double()
    return view, ref


class _Launches:
    """Counts the GEMM launches of the executor (``n``) and its staging pre-pass's (``copies``:
    pack16, tf32_pack)."""

    def __init__(self, monkeypatch):
        from gemmlab.core import executor
        from gemmlab.kernels.tensor.wgmma import PACK16_KERNEL, TF32_PACK_KERNELS, TF32_PACK_SOURCE
        from gemmlab.runtime import compile as rt_compile

        arch = rt_device.gpu_info(0).arch
        copy_kernels = [
            rt_compile.load_kernel(TF32_PACK_SOURCE, name, arch) for name in (PACK16_KERNEL, TF32_PACK_KERNELS[0])
        ]
        self.n = self.copies = 0
        executor.CACHE.clear()  # a fresh prepared call: its first launch goes through run()
        real = executor.launch_shaped

        def counted(kernel, *a, **kw):
            if any(kernel is k for k in copy_kernels):
                self.copies += 1
            else:
                self.n += 1
            return real(kernel, *a, **kw)

        monkeypatch.setattr(executor, "launch_shaped", counted)


def _batched(
    monkeypatch,
    nb_a,
    nb_b,
    M,
    N,
    K,
    ops,
    dtype,
    out_dtype,
    *,
    beta=0.0,
    gap=8,
    out_gap=8,
    expect=1,
    kernel="wgmma",
    **params,
):
    rng = np.random.default_rng(M + 3 * N + 7 * K + (nb_a or 0) + 11 * (nb_b or 0))
    a, a64 = _stack(nb_a, M, K, ops[0], dtype, rng, gap)
    b, b64 = _stack(nb_b, K, N, ops[1], dtype, rng, gap)
    nb = max(nb_a or 1, nb_b or 1)
    ot = getattr(torch, out_dtype)
    c_buf = torch.full((nb * (M * (-(-N // 8) * 8) + out_gap) + 8,), float("nan"), device="cuda", dtype=ot)
    ldc = -(-N // 8) * 8
    out = torch.as_strided(c_buf, (nb, M, N), (M * ldc + out_gap, ldc, 1))
    c0 = torch.from_numpy(random_matrix(1, nb * M * N, "uniform", rng).reshape(nb, M, N)).cuda().to(ot)
    if beta:
        out.copy_(c0)
    launches = _Launches(monkeypatch)
    gemmlab.matmul(
        a, b, out=out, beta=beta, kernel=kernel, **params, **({"precision": "tf32"} if dtype == "tf32" else {})
    )
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and not p.fallback_reason, p.describe()
    assert launches.n == expect, f"{launches.n} launches for a batch of {nb}"
    ref = torch.matmul(a64, b64) + (beta * c0.double() if beta else 0)
    assert not torch.isnan(out).any(), "unwritten or NaN outputs"
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"
    # Nothing between C's matrices or past its rows was written.
    written = torch.zeros(c_buf.numel(), dtype=torch.bool, device="cuda")
    torch.as_strided(written, out.shape, out.stride()).fill_(True)
    assert torch.isnan(c_buf[~written]).all(), "C's gaps were written"


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float32")])
@pytest.mark.parametrize("shape", [(129, 257, 65), (7, 13, 5), (300, 200, 520)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_batch_is_one_launch_in_every_layout(monkeypatch, ops, dtype, out_dtype, shape, beta):
    """A batch of 5 with gaps between the matrices (a, b and out), shapes that are multiples of
    no tile: one launch, every matrix right, C's gaps untouched; beta = 0 stores through C's
    3-D map, beta != 0 without TMA at stride_c."""
    M, N, K = shape
    _batched(monkeypatch, 5, 5, M, N, K, ops, dtype, out_dtype, beta=beta)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("shared", ["a", "b"])
@pytest.mark.parametrize("ops", ["NN", "TT"])
def test_broadcast_operand_is_a_batch_of_one(monkeypatch, shared, ops):
    """numpy.matmul broadcasting: a 2-D operand every matrix shares (stride 0, which a map
    cannot step by: its map holds one matrix, read at batch coordinate 0)."""
    _batched(
        monkeypatch,
        None if shared == "a" else 6,
        None if shared == "b" else 6,
        200,
        300,
        72,
        ops,
        "bfloat16",
        "bfloat16",
    )


@hopper
@pytest.mark.gpu
def test_batch_with_clusters_and_small_tiles(monkeypatch):
    _batched(monkeypatch, 4, 4, 129, 257, 65, "NT", "float16", "float16", BM=64, BN=128, CLUSTER=2)
    _batched(monkeypatch, 4, 4, 129, 257, 65, "TN", "bfloat16", "float32", BM=128, BN=128, STAGES=3)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("gap", [8, 3])
def test_tf32_batch_is_one_gemm_launch(monkeypatch, gap):
    """TF32: read in place through TFLOAT32 3-D maps (gaps of 8 floats), or packed first in
    one pre-pass launch per operand (gaps of 3: batch strides TMA cannot step by) -- one GEMM
    launch either way."""
    _batched(monkeypatch, 3, 3, 129, 257, 65, "NN", "tf32", "float32", gap=gap, out_gap=gap)


def _one_wgmma_launch(monkeypatch, a, b):
    """gemmlab.matmul(a, b) on bf16 views runs wgmma in one launch and matches FP64."""
    launches = _Launches(monkeypatch)
    got = gemmlab.matmul(a, b)
    torch.cuda.synchronize()
    assert gemmlab.last_plan().spec.name == "wgmma" and launches.n == 1, gemmlab.last_plan().describe()
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)) <= BOUND["bfloat16"]


@hopper
@pytest.mark.gpu
def test_interleaved_heads_batch(monkeypatch):
    """Attention's heads interleaved in memory: (S, H, D) viewed as H matrices of S x D,
    a batch stride (D elements) smaller than a matrix."""
    S, H, D = 300, 4, 64
    q = torch.randn(S, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(S, H, D, device="cuda", dtype=torch.bfloat16)
    qh, kh = q.transpose(0, 1), k.transpose(0, 1)  # (H, S, D), strides (D, H * D, 1)
    _one_wgmma_launch(monkeypatch, qh, kh.transpose(-1, -2))


@hopper
@pytest.mark.gpu
def test_auto_runs_a_batch_on_wgmma_in_one_launch(monkeypatch):
    q = torch.randn(8, 512, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(8, 512, 128, device="cuda", dtype=torch.bfloat16)
    _one_wgmma_launch(monkeypatch, q, k.transpose(-1, -2))


# -- split-K: each tile's last slice adds the others' partial tiles in the kernel -----------------


def _split_ran(splits):
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and p.params["SPLITK"] == splits, p.describe()
    assert ", true, '" in p.name_expression, p.name_expression  # the split instantiation (the fixup)
    odt = p.name_expression.split("<")[1].split(", ")[1]
    assert odt == str(TYPE_CODES[p.problem.out_dtype]), p.name_expression  # C's own type: no reduction converts


SPLIT_SHAPES = [(1, 300, 4000), (7, 13, 5), (16, 520, 3001), (129, 257, 1100), (1, 1, 1)]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype, out_dtype", DTYPES)
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("shape", SPLIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_split_k_on_odd_shapes(dtype, out_dtype, ops, shape, alpha, beta, caplog):
    """SPLITK=3 on shapes that are multiples of no tile, in every layout and output type:
    slices of unequal length, empty ones where K has fewer than 3 K-steps (7x13x5), the
    owner's epilogue writing alpha * sum + beta * C in C's dtype (through TMA with beta = 0,
    staged or from TF32's registers with beta != 0)."""
    if dtype == "tf32" and ops != "NN":
        pytest.skip("TF32 reads NN only")
    M, N, K = shape
    expect = "wgmma" if min(shape) > 1 or ops == "NN" else None  # (a vector's layout is ambiguous)
    _check(
        M,
        N,
        K,
        dtype,
        out_dtype,
        alpha,
        beta,
        np.random.default_rng(M + 3 * N + K),
        caplog,
        ops=ops,
        expect=expect,
        BM=64,
        BN=128,
        SPLITK=3,
    )
    if expect:
        _split_ran(3)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize(
    "tile",
    [
        dict(BM=64, BN=64),
        dict(BM=128, BN=64),
        dict(BM=64, BN=128),
        dict(BM=128, BN=128),
        dict(BM=64, BN=256),
        dict(BM=128, BN=256),
        dict(BM=64, BN=128, CLUSTER=2),
        dict(BM=128, BN=256, CLUSTER=2),
    ],
    ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()),
)
@pytest.mark.parametrize("splits", [2, 16])
@pytest.mark.parametrize(
    "dtype, out_dtype, ops", [("bfloat16", "bfloat16", "NN"), ("float16", "float32", "TT"), ("tf32", "float32", "NN")]
)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (-0.5, 2.0)])
def test_split_k_in_every_tile(tile, splits, dtype, out_dtype, ops, alpha, beta, caplog):
    """Each tile shape and clusters (an odd number of tile-rows: the last cluster's second
    block computes rows past M, its consumers outside C neither write nor wait) split 2 and
    16 ways, with alpha and beta."""
    _check(
        300,
        333,
        2100,
        dtype,
        out_dtype,
        alpha,
        beta,
        np.random.default_rng(splits),
        caplog,
        ops=ops,
        SPLITK=splits,
        **tile,
    )
    _split_ran(splits)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("splits", [s for s in SPLITK_VALUES if s > 1])
@pytest.mark.parametrize("dtype, out_dtype, ops", [("bfloat16", "bfloat16", "TN"), ("tf32", "float32", "NN")])
def test_split_k_every_split(splits, dtype, out_dtype, ops, caplog):
    """Every SPLITK the spec offers on a product no tile divides (65 K-steps, or 130 of TF32:
    slices of unequal length, and for 16 slices of 16-bit three without K-steps), two
    consumer warpgroups."""
    _check(
        301,
        333,
        4153,
        dtype,
        out_dtype,
        0.75,
        0.5,
        np.random.default_rng(splits),
        caplog,
        ops=ops,
        BM=128,
        BN=128,
        SPLITK=splits,
    )
    _split_ran(splits)


def _split_call(M, N, K, dtype, rng, **params):
    """A split product on fresh operands, out poisoned: (out, its FP64 reference, the call)."""
    a, a64 = _operand(M, K, "N", lambda n: -(-n // 8) * 8, dtype, rng)
    b, b64 = _operand(K, N, "T", lambda n: -(-n // 8) * 8, dtype, rng)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, dtype))

    def call():
        return gemmlab.matmul(a, b, out=out, kernel="wgmma", **params)

    return out, a64 @ b64, call


def _close(out, ref, dtype):
    assert not torch.isnan(out).any(), "unwritten or NaN outputs"
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[dtype], f"relative error {err:.2e}"


@hopper
@pytest.mark.gpu
def test_split_k_counters_are_zero_again_after_every_launch():
    """The counters are zeroed once, when the stream's workspace is allocated: each launch must
    leave them zero for the next.  The same call many times (the prepared call's kept launch),
    interleaved with products of other tile counts and splits on the same stream (the same
    counters, a larger one growing them), each result right, out poisoned before every call."""
    rng = np.random.default_rng(7)
    calls = [
        _split_call(64, 1000, 4096, "bfloat16", rng, BM=64, BN=128, SPLITK=4),
        _split_call(300, 333, 2100, "bfloat16", rng, BM=128, BN=256, SPLITK=3, CLUSTER=2),
        _split_call(1000, 2000, 3000, "bfloat16", rng, BM=64, BN=128, SPLITK=2),  # more counters
        _split_call(7, 13, 5, "bfloat16", rng, BM=64, BN=128, SPLITK=16),  # empty slices
    ]
    for _ in range(3):
        for out, ref, call in calls + calls[:1] * 3:
            out.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            _close(out, ref, "bfloat16")


@hopper
@pytest.mark.gpu
def test_split_k_on_other_streams():
    """Split products on a second and a third stream (each stream's own workspaces and
    counters), the two running at the same time (few tiles: both grids resident together),
    then again on the default stream."""
    rng = np.random.default_rng(8)
    first = _split_call(64, 1000, 4096, "bfloat16", rng, BM=64, BN=128, SPLITK=2)
    second = _split_call(130, 500, 3000, "float16", rng, BM=128, BN=128, SPLITK=3)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for _ in range(3):
        for (out, _, call), stream in zip((first, second), streams):
            out.fill_(float("nan"))
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                call()
        torch.cuda.synchronize()
        _close(first[0], first[1], "bfloat16")
        _close(second[0], second[1], "float16")
    for out, ref, call in (first, second):
        out.fill_(float("nan"))
        call()
    torch.cuda.synchronize()
    _close(first[0], first[1], "bfloat16")
    _close(second[0], second[1], "float16")


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float32")])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_split_k_batch(monkeypatch, ops, dtype, out_dtype, beta):
    """A batch of 5 with gaps between the matrices, split 3 ways: one launch (its work items
    every (matrix, slice, tile)), no reduction; C's gaps untouched."""
    _batched(monkeypatch, 5, 5, 129, 257, 520, ops, dtype, out_dtype, beta=beta, expect=1, BM=64, BN=128, SPLITK=3)
    _split_ran(3)


@hopper
@pytest.mark.gpu
def test_split_k_batch_with_a_shared_operand_and_chunks(monkeypatch):
    """A broadcast b (stride 0), and a workspace limit that cuts the batch into chunks of two:
    a launch per chunk, each on its matrices' partials and counters."""
    from gemmlab.core import executor
    from gemmlab.kernels.spec import Problem
    from gemmlab.kernels.tensor.wgmma import wgmma_split_workspace

    _batched(monkeypatch, 6, None, 100, 200, 700, "NT", "bfloat16", "bfloat16", expect=1, BM=64, BN=128, SPLITK=4)
    params = registry.get("wgmma").resolve({"BM": 64, "BN": 128, "SPLITK": 4}, "float16")
    per_matrix = wgmma_split_workspace(params, Problem(100, 200, 700, True, "float16", "float16"))[0]
    monkeypatch.setattr(executor, "SPLITK_WORKSPACE_LIMIT", 2 * per_matrix)
    _batched(monkeypatch, 5, 5, 100, 200, 700, "TN", "float16", "float16", expect=3, BM=64, BN=128, SPLITK=4)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_split_k_alpha_zero_reads_neither_a_nor_b(out_dtype):
    a = torch.full((16, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
    b = torch.full((4096, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    c0 = torch.rand((16, 256), device="cuda").to(getattr(torch, out_dtype))
    out = c0.clone()
    gemmlab.matmul(a, b, out=out, alpha=0.0, beta=0.5, kernel="wgmma", BM=64, BN=128, SPLITK=4)
    torch.cuda.synchronize()
    assert torch.equal(out, (c0.float() * 0.5).to(c0.dtype))


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize(
    "M, N, K, ops", [(2, 4096, 8192, "NN"), (16, 4096, 14336, "NN"), (128, 4096, 28672, "NN"), (16, 2048, 8192, "NT")]
)
def test_auto_splits_few_tiles_with_a_long_k(M, N, K, ops, caplog):
    """kernel="auto" on a product whose tiles leave most SMs idle (a decode step's dY @ W of a
    few rows; one row of a small W runs on gemv, x @ W.t() of up to 16 rows over a W of at most
    16 MiB on gemv_mma): wgmma split over K, the result right, twice (the second call through
    the prepared call)."""
    rng = np.random.default_rng(M + N + K)
    ld = lambda n: n
    a, a64 = _operand(M, K, ops[0], ld, "bfloat16", rng)
    b, b64 = _operand(K, N, ops[1], ld, "bfloat16", rng)
    sm = rt_device.gpu_info(0).sm_count
    for _ in range(2):
        got = gemmlab.matmul(a, b)
        torch.cuda.synchronize()
        p = gemmlab.last_plan()
        assert p.spec.name == "wgmma" and p.params["SPLITK"] > 1, p.describe()
        assert p.params["SPLITK"] * -(-M // p.params["BM"]) * -(-N // p.params["BN"]) <= sm
        ref = a64 @ b64
        assert float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)) <= BOUND["bfloat16"]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize(
    "M, N, K, ops, tile",
    [
        (16, 4096, 4096, "NT", (64, 64, 12)),
        (100, 4096, 6144, "NN", (64, 64, 12)),
        (128, 6144, 4096, "NT", (64, 128, 8)),
        (7, 4100, 4000, "TT", (64, 64, 12)),
    ],
)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_auto_narrow_tile_for_a_few_rows(M, N, K, ops, tile, dtype):
    """kernel="auto" on products of a few rows that split-K served before: one unsplit launch of
    the narrow deep-ring tile, the result right, twice (the second call through the prepared call)."""
    rng = np.random.default_rng(M + N + K)
    ld = lambda n: -(-n // 8) * 8
    a, a64 = _operand(M, K, ops[0], ld, dtype, rng)
    b, b64 = _operand(K, N, ops[1], ld, dtype, rng)
    for _ in range(2):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, dtype))
        gemmlab.matmul(a, b, out=out)
        torch.cuda.synchronize()
        p = gemmlab.last_plan()
        assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"], p.params["STAGES"]) == tile, p.describe()
        assert p.params["SPLITK"] == 1 and ", false, '" in p.name_expression
        ref = a64 @ b64
        assert not torch.isnan(out).any()
        assert float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)) <= BOUND[dtype]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("product", ["qk", "pv"])
def test_auto_attention_batches_on_128x128(product):
    """Attention-shaped batches of 32 (head dim 128; a sequence length of 336, which TMA can
    read and no tile divides): P @ V (N = 128) and Q @ K^T (K = 128) on 128x128 tiles in one
    launch, the result right."""
    rng = np.random.default_rng(7)
    q = torch.from_numpy(random_matrix(32 * 336, 128, "uniform", rng)).cuda().bfloat16().view(32, 336, 128)
    k = torch.from_numpy(random_matrix(32 * 336, 128, "uniform", rng)).cuda().bfloat16().view(32, 336, 128)
    a, b = (
        (q, k.transpose(-1, -2))
        if product == "qk"
        else (
            torch.softmax(
                torch.from_numpy(random_matrix(32 * 336, 336, "uniform", rng)).cuda().view(32, 336, 336), -1
            ).bfloat16(),
            k,
        )
    )
    out = torch.full((32, 336, b.shape[-1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(a, b, out=out)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == (128, 128), p.describe()
    ref = a.double() @ b.double()
    assert not torch.isnan(out).any()
    assert float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)) <= BOUND["bfloat16"]


# -- the 128 x 192 tile (BN = 192: 16-bit only, CLUSTER = 1) ------------------------------------


def _bn192_ran(split=False):
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == (128, 192), p.describe()
    assert f", 128, 192, 4, 1, {'true' if split else 'false'}, '" in p.name_expression, p.name_expression


def test_emulated_bn192_reads_b_in_three_boxes_or_one(monkeypatch):
    """Without a GPU (tests/emulated_gpu.py): BN = 192 by name in every layout builds B's map
    in 64 x 64 boxes (B 'N': three a K-step) or in boxes of 192 rows (B 'T': K-major, one),
    A's in 128-row (A 'N') or 64 x 64 boxes, and the result is right."""
    import emulated_gpu
    from gemmlab.runtime import tma

    emu = emulated_gpu.install(monkeypatch)
    maps = []
    encode = tma._encode
    monkeypatch.setattr(tma, "_encode", lambda *a: maps.append(encode(*a)) or maps[-1])
    rng = np.random.default_rng(11)
    for ops in ("NN", "NT", "TN", "TT"):
        M, N, K = 136, 200, 72
        a = emu.keep(rng.uniform(-1, 1, (M, K) if ops[0] == "N" else (K, M)).astype(np.float16))
        b = emu.keep(rng.uniform(-1, 1, (K, N) if ops[1] == "N" else (N, K)).astype(np.float16))
        a_op, b_op = (a if ops[0] == "N" else a.T), (b if ops[1] == "N" else b.T)
        maps.clear()
        out = gemmlab.matmul(a_op, b_op, kernel="wgmma", BN=192)
        _bn192_ran()
        assert gemmlab.last_plan().name_expression.endswith(f"'{ops[0]}', '{ops[1]}'>")
        map_a, map_b = maps[:2]
        assert (map_a.box_rows, map_a.box_cols) == ((128, 64) if ops[0] == "N" else (64, 64)), map_a
        assert (map_b.box_rows, map_b.box_cols) == ((64, 64) if ops[1] == "N" else (192, 64)), map_b
        ref = a_op.astype(np.float64) @ b_op.astype(np.float64)
        np.testing.assert_allclose(out.astype(np.float64), ref, rtol=0, atol=2e-2)


# Multiples of no tile (517 x 389 x 263), the transformer products 128 x 192 is for (N = 768,
# M = 4096) and such a product off every tile.
BN192_SHAPES = [(517, 389, 263), (4096, 768, 768), (4001, 770, 776), (129, 193, 65), (1, 1, 1)]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize(
    "dtype, out_dtype",
    [("bfloat16", "bfloat16"), ("float16", "float16"), ("bfloat16", "float32"), ("float16", "float32")],
)
@pytest.mark.parametrize("shape", BN192_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_bn192_on_odd_shapes_in_every_layout(ops, dtype, out_dtype, shape, alpha, beta, caplog):
    """BN = 192 by name: m64n192 wgmmas, B 'N' in three 64-column boxes a K-step, B 'T' in one
    of 192 rows; both epilogues (beta = 0: the TMA store, three 64-column chunks of a 16-bit
    tile or six 32-column ones of FP32; beta != 0: staged a warp's rows at a time), output
    poisoned first."""
    M, N, K = shape
    expect = "wgmma" if min(shape) > 1 or ops == "NN" else None  # (a vector's layout is ambiguous)
    _check(
        M,
        N,
        K,
        dtype,
        out_dtype,
        alpha,
        beta,
        np.random.default_rng(M + 2 * N + K),
        caplog,
        ops=ops,
        expect=expect,
        BM=128,
        BN=192,
    )
    if expect:
        _bn192_ran()


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float32")])
@pytest.mark.parametrize("splits", [2, 3, 16])
@pytest.mark.parametrize("shape", [(517, 389, 2100), (300, 768, 3001), (7, 13, 5)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
def test_bn192_split_k(ops, dtype, out_dtype, splits, shape, alpha, beta, caplog):
    """BN = 192 split over K: FP32 partial 128 x 192 tiles from the registers into the workspace,
    added by each tile's last slice before its epilogue; slices of unequal length, empty ones
    (7x13x5)."""
    M, N, K = shape
    expect = "wgmma" if min(shape) > 1 or ops == "NN" else None
    _check(
        M,
        N,
        K,
        dtype,
        out_dtype,
        alpha,
        beta,
        np.random.default_rng(M + N + K + splits),
        caplog,
        ops=ops,
        expect=expect,
        BM=128,
        BN=192,
        SPLITK=splits,
    )
    if expect:
        _bn192_ran(split=True)
        _split_ran(splits)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("ops", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", "bfloat16"), ("float16", "float32")])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_bn192_batch_is_one_launch(monkeypatch, ops, dtype, out_dtype, beta):
    """A batch of 5 with gaps between the matrices on 128 x 192 tiles: one launch (3-D maps,
    C stored through its map with beta = 0), every matrix right, C's gaps untouched; split 3
    ways, one launch too."""
    _batched(monkeypatch, 5, 5, 129, 389, 263, ops, dtype, out_dtype, beta=beta, BM=128, BN=192)
    _bn192_ran()
    _batched(monkeypatch, 5, 5, 129, 389, 1100, ops, dtype, out_dtype, beta=beta, expect=1, BM=128, BN=192, SPLITK=3)
    _bn192_ran(split=True)


@hopper
@pytest.mark.gpu
def test_bn192_batch_with_a_shared_operand(monkeypatch):
    _batched(monkeypatch, 6, None, 200, 389, 72, "NT", "bfloat16", "bfloat16", BM=128, BN=192)
    _bn192_ran()


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K, ops", [(4096, 768, 3072, "NT"), (12608, 768, 768, "NN"), (4096, 2304, 768, "TN")])
def test_auto_takes_what_the_wave_choice_says(M, N, K, ops):
    """kernel="auto" on a transformer's products whose 128 x 256 tiles leave the last round of
    the persistent grid part-empty: what wgmma_auto_choice says for this GPU's SMs (on 132:
    128 x 192), the result right."""
    from gemmlab.kernels.tensor.wgmma import wgmma_auto_choice

    sm = rt_device.gpu_info(0).sm_count
    rng = np.random.default_rng(M + N + K)
    a, a64 = _operand(M, K, ops[0], lambda n: n, "bfloat16", rng)
    b, b64 = _operand(K, N, ops[1], lambda n: n, "bfloat16", rng)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmlab.matmul(a, b, out=out)
    torch.cuda.synchronize()
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and p.params == wgmma_auto_choice(M, N, sm, 1, K, "bfloat16")[0], p.describe()
    if sm == 132:
        _bn192_ran()
    ref = a64 @ b64
    assert not torch.isnan(out).any()
    assert float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)) <= BOUND["bfloat16"]


# -- C that TMA does not store: the staged epilogue (tensor/04_wgmma_store.cuh) -----------------


@pytest.fixture
def c_through_tma(monkeypatch):
    """Whether each wgmma launch built during the test stores C through TMA (_c_map's answer),
    in order -- the second build of a new kind of launch, with its addresses moved
    (executor._address_moves), included; the prepared calls are dropped first, so that every
    call builds its launch."""
    from gemmlab.kernels.tensor import wgmma as wg

    seen = []
    real = wg._c_map

    def spy(*a, **kw):
        m = real(*a, **kw)
        seen.append(m is not None)
        return m

    monkeypatch.setattr(wg, "_c_map", spy)
    executor.CACHE.clear()
    return seen


def _c_off_the_grid(nb, M, N, ot, view, beta, rng):
    """(out, its buffer, what out holds before the call) for a result of nb matrices (None: one)
    of M x N in dtype ``ot`` off the 16-byte grid: ``contiguous`` (rows of N elements, N odd);
    ``odd-ld``: a column slice one element into rows of an odd length, so that the base is off
    too (no paired stores); ``even-ld``: two elements into rows of an even length, the base off
    the 16-byte grid (paired stores, no TMA).  The buffer is NaN everywhere, out holds fresh
    values where beta != 0."""
    batch = () if nb is None else (nb,)
    if view == "contiguous":
        ld, first = N, 0
    elif view == "odd-ld":
        ld, first = (N + 2 if N % 2 else N + 1), 1
    else:
        ld, first = (N + 3 if N % 2 else N + 2), 2
    eb = torch.finfo(ot).bits // 8
    assert (ld * eb) % 16 or (first * eb) % 16, "TMA would store it"
    buf = torch.full((*batch, M, ld), float("nan"), device="cuda", dtype=ot)
    out = buf[..., first : first + N]
    c0 = torch.from_numpy(random_matrix((nb or 1) * M, N, "uniform", rng).reshape(*batch, M, N)).cuda().to(ot)
    if beta:
        out.copy_(c0)
    return out, buf, c0


def _staged_check(nb, M, N, K, ops, dtype, out_dtype, alpha, beta, bias_kind, view, c_through_tma, **params):
    """alpha * op(a) @ op(b) (+ a row or a column bias) (+ beta * out) on wgmma with C off the
    16-byte grid: every element within bf16's, fp16's or fp32's rounding of the FP64 value,
    nothing outside out written, wgmma (split as ``params`` say) without a TMA store of C, in
    one launch."""
    rng = np.random.default_rng(M + 3 * N + 7 * K + (nb or 0))
    a, a64 = _stack(nb, M, K, ops[0], dtype, rng)
    b, b64 = _stack(nb, K, N, ops[1], dtype, rng)
    ot = getattr(torch, out_dtype)
    out, buf, c0 = _c_off_the_grid(nb, M, N, ot, view, beta, rng)
    bias = None
    if bias_kind != "none":
        shape = (N,) if bias_kind == "row" else (M, 1)
        bias = torch.from_numpy(random_matrix(1, shape[0], "uniform", rng).reshape(shape)).cuda().to(ot)
    got = gemmlab.matmul(a, b, out=out, alpha=alpha, beta=beta, bias=bias, kernel="wgmma", **params)
    torch.cuda.synchronize()
    assert got is out
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and not p.fallback_reason, p.describe()
    assert p.params["SPLITK"] == params.get("SPLITK", 1), p.describe()
    assert c_through_tma and not any(c_through_tma), c_through_tma  # C stored without its map
    prod = a64 @ b64
    ref = alpha * prod + (beta * c0.double() if beta else 0)
    size = abs(alpha) * (a64.abs() @ b64.abs()) + (abs(beta) * c0.double().abs() if beta else 0)
    if bias is not None:
        ref, size = ref + bias.double(), size + bias.double().abs()
    got64 = out.double()
    # One rounding to C's type on top of the FP32 sums, relative to the sizes of the terms (a
    # bias or beta * C left out, or a value in the wrong place, is of the order of the terms).
    tol = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}[out_dtype] * size + 1e-6
    bad = torch.isnan(got64) | ((got64 - ref).abs() > tol)
    if bad.any():
        idx = [int(x) for x in bad.nonzero()[0]]
        pytest.fail(
            f"{p.describe()}: {int(bad.sum())} of {bad.numel()} wrong; first at {idx}: "
            f"{float(got64[tuple(idx)])} vs {float(ref[tuple(idx)])}"
        )
    err = float(torch.linalg.norm(got64 - ref) / torch.linalg.norm(ref))
    assert err <= BOUND[out_dtype], f"relative error {err:.2e}"
    outside = torch.ones(buf.shape, dtype=torch.bool, device="cuda")
    outside[..., out.storage_offset() - buf.storage_offset() :][..., :N] = False
    assert torch.isnan(buf[outside]).all(), "written outside out"


# (nb, M, N, K, ops): attention's Q @ K^T at 197 tokens (a batch of 3), 77 tokens with a head
# dim of 128, a vocabulary's 50257 columns, and a product no tile divides.
STAGED_SHAPES = [
    (3, 197, 197, 64, "NT"),
    (None, 77, 77, 128, "NN"),
    (None, 1000, 50257, 64, "NN"),
    (None, 517, 389, 263, "TN"),
]
STAGED_DTYPES = [("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float16", "float16"), ("float16", "float32")]


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("shape", STAGED_SHAPES, ids=lambda s: f"{s[0] or 1}x{s[1]}x{s[2]}x{s[3]}-{s[4]}")
@pytest.mark.parametrize("dtype, out_dtype", STAGED_DTYPES)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
@pytest.mark.parametrize("bias_kind", ["none", "row", "column"])
@pytest.mark.parametrize("view", ["contiguous", "odd-ld", "even-ld"])
def test_c_off_the_grid_is_staged(shape, dtype, out_dtype, alpha, beta, bias_kind, view, c_through_tma):
    """C whose rows (and, in a view, base) are off the 16-byte grid: written by the staged
    epilogue, one element a lane (odd rows or base) or two (even-ld), C's type staged with
    beta = 0 (out poisoned first), FP32 with beta != 0 (out fresh values, in the reference)."""
    nb, M, N, K, ops = shape
    _staged_check(nb, M, N, K, ops, dtype, out_dtype, alpha, beta, bias_kind, view, c_through_tma)


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize("params", UNSPLIT_CONFIGS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
@pytest.mark.parametrize(
    "dtype, out_dtype, alpha, beta, bias_kind, view",
    [
        ("bfloat16", "bfloat16", 1.0, 0.0, "row", "odd-ld"),
        ("float16", "float32", 0.5, 2.0, "column", "odd-ld"),
        ("float16", "float16", 0.5, 2.0, "none", "even-ld"),
        ("bfloat16", "float32", -1.0, 0.0, "none", "even-ld"),
    ],
)
def test_c_off_the_grid_in_every_tile(params, dtype, out_dtype, alpha, beta, bias_kind, view, c_through_tma):
    """Every unsplit configuration (the 16-bit ones: BN = 64 to 256, BM = 64 and 128, clusters)
    with the staged epilogue on 517 x 389 x 263: chunks of 64 (16-bit) or 32 (FP32) columns
    ending inside and past N, warps whose rows start past M."""
    if params not in registry.get("wgmma").configurations(dtype):
        pytest.skip(f"not a {dtype} configuration")
    _staged_check(None, 517, 389, 263, "NT", dtype, out_dtype, alpha, beta, bias_kind, view, c_through_tma, **params)
    assert gemmlab.last_plan().params == params


@hopper
@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape",
    STAGED_SHAPES[:2] + STAGED_SHAPES[3:] + [(None, 301, 389, 4000, "NN")],
    ids=lambda s: f"{s[0] or 1}x{s[1]}x{s[2]}x{s[3]}-{s[4]}",
)
@pytest.mark.parametrize("dtype, out_dtype", STAGED_DTYPES)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.5, 2.0)])
@pytest.mark.parametrize("bias_kind", ["none", "row", "column"])
@pytest.mark.parametrize("view", ["odd-ld", "even-ld"])
@pytest.mark.parametrize(
    "tile", [dict(BM=64, BN=128, SPLITK=3), dict(BM=128, BN=256, SPLITK=4)], ids=["64x128", "128x256"]
)
def test_c_off_the_grid_split_k(shape, dtype, out_dtype, alpha, beta, bias_kind, view, tile, c_through_tma):
    """Split over K with C off the 16-byte grid: the tile's last slice adds the others' partials
    and runs the staged epilogue, bias and beta * C included (short K: slices without K-steps)."""
    nb, M, N, K, ops = shape
    _staged_check(nb, M, N, K, ops, dtype, out_dtype, alpha, beta, bias_kind, view, c_through_tma, **tile)


def _np_stack(emu, nb, rows, cols, layout, rng):
    """_stack for the emulated GPU: float16 (NumPy has no bfloat16), rows padded to 8 elements."""
    sr, sc = (rows, cols) if layout == "N" else (cols, rows)
    ld = -(-sc // 8) * 8
    x = emu.keep(rng.uniform(-1, 1, (nb or 1, sr, ld)).astype(np.float16))[..., :sc]
    x = x if layout == "N" else x.transpose(0, 2, 1)
    return x if nb else x[0]


@pytest.mark.parametrize("shape", STAGED_SHAPES[:2] + STAGED_SHAPES[3:], ids=lambda s: f"{s[0] or 1}x{s[1]}x{s[2]}")
@pytest.mark.parametrize("beta", [0.0, 2.0])
@pytest.mark.parametrize("bias_kind", ["none", "row", "column"])
@pytest.mark.parametrize("view", ["contiguous", "odd-ld", "even-ld"])
@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("splits", [1, 3])
def test_emulated_c_off_the_grid_is_stored_without_tma(
    monkeypatch, shape, beta, bias_kind, view, out_dtype, splits, c_through_tma
):
    """Without a GPU (tests/emulated_gpu.py): the GPU tests' results off the 16-byte grid reach
    wgmma, unsplit or split (which adds its slices in the kernel: the same epilogue), without a
    map of C (so the kernel stages them), with the leading dimension, batch stride and bias
    strides that give the right result; nothing outside out written."""
    import emulated_gpu

    emu = emulated_gpu.install(monkeypatch)
    nb, M, N, K, ops = shape
    rng = np.random.default_rng(M + N + K)
    a, b = _np_stack(emu, nb, M, K, ops[0], rng), _np_stack(emu, nb, K, N, ops[1], rng)
    ld, first = (N, 0)  # as _c_off_the_grid's views
    if view == "odd-ld":
        ld, first = (N + 2 if N % 2 else N + 1), 1
    elif view == "even-ld":
        ld, first = (N + 3 if N % 2 else N + 2), 2
    batch = () if nb is None else (nb,)
    buf = emu.keep(np.full((*batch, M, ld), np.nan, out_dtype))
    out = buf[..., first : first + N]
    c0 = rng.uniform(-1, 1, (*batch, M, N)).astype(out_dtype)
    if beta:
        out[...] = c0
    bias = None
    if bias_kind != "none":
        bias = emu.keep(rng.uniform(-1, 1, (N,) if bias_kind == "row" else (M, 1)).astype(out_dtype))
    assert gemmlab.matmul(a, b, out=out, alpha=0.5, beta=beta, bias=bias, kernel="wgmma", SPLITK=splits) is out
    p = gemmlab.last_plan()
    assert p.spec.name == "wgmma" and not p.fallback_reason and p.params["SPLITK"] == splits, p.describe()
    assert c_through_tma and not any(c_through_tma), c_through_tma  # C stored without its map
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c0 + (0 if bias is None else bias)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=0, atol=2e-2)
    outside = np.ones(buf.shape, bool)
    outside[..., first : first + N] = False
    assert np.isnan(buf[outside]).all()


def _map_encoder(dtype, batch):
    """(device memory, its address, encode(address, encoder=tma._encode)): the tensor-map
    tests' maps of a 200 x 136 matrix of ``dtype`` (rows 144 apart), a batch of them where
    ``batch`` is given.  The memory is never read (maps only point); keep it while the maps
    are used."""
    from gemmlab.runtime import tma

    eb = tma.element_bytes(dtype)
    rows, cols, ld, box_cols = 200, 136, 144, tma.SWIZZLE_BYTES // eb
    memory = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    batched = (batch, rows * ld * eb) if batch else ()

    def encode(address, encoder=None):
        return (encoder or tma._encode)(address, rows, cols, ld, dtype, 64, box_cols, *batched)

    return memory, memory.data_ptr(), encode


@hopper
@pytest.mark.parametrize("dtype, batch", [("bfloat16", None), ("tf32", None), ("float16", 5)])
def test_a_map_pointed_elsewhere_equals_one_encoded_there(dtype, batch):
    """runtime.tma.moved_map (a copy of a tensor map with cuTensorMapReplaceAddress) gives
    the very bytes the driver encodes for the new address: what lets a call on new
    addresses copy an earlier launch (executor._address_moves compares maps by bytes)."""
    import ctypes

    from gemmlab.runtime import tma

    memory, base, encode = _map_encoder(dtype, batch)
    first = encode(base)
    for shift in (16, 4096, 1 << 20):
        there = encode(base + shift)
        moved = tma.moved_map(first, base + shift)
        assert ctypes.string_at(moved.getPtr(), 128) == ctypes.string_at(there.getPtr(), 128), shift


@hopper
@pytest.mark.parametrize(
    "dtype, batch",
    [("bfloat16", None), ("tf32", None), ("float32", None), ("float8_e4m3fn", None), ("float16", 5), ("bfloat16", 1)],
)
def test_the_drivers_entry_point_encodes_what_the_binding_encodes(monkeypatch, dtype, batch):
    """runtime.tma encodes maps and points them elsewhere through the driver's entry points
    (ctypes); the binding's calls, its fallback, give the very same bytes."""
    import ctypes

    from gemmlab.runtime import tma

    assert tma._c_entries(), "libcuda.so.1 not found on a machine with a GPU"
    memory, base, encode = _map_encoder(dtype, batch)
    ours = encode(base, tma._encode_driver)
    fast = ctypes.string_at(ours.getPtr(), 128)
    moved = tma.moved_map(ours, base + 4096)
    monkeypatch.setattr(tma, "_c", False)  # the binding's calls from here on
    binding = encode(base, tma._encode_driver)
    assert fast == ctypes.string_at(binding.getPtr(), 128)
    there = encode(base + 4096, tma._encode_driver)
    assert ctypes.string_at(moved.getPtr(), 128) == ctypes.string_at(there.getPtr(), 128)
