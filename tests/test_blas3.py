"""A level-3 tester modelled on the reference BLAS's (sblat3 / dblat3), on the GPU,
for every kernel family: each SIMT rung at its default configuration, rung 8
with split-K, the WMMA rungs in FP16 (FP16 out) and TF32.

For every op(a), op(b) in {N, T}^2 (``trans_a`` / ``trans_b``), every M, N, K
in {0, 1, 7, 33} and every alpha, beta in {0, 1, 0.7, -1.3} (blas3_harness.py):

* the inputs are fresh random values (FP16 / TF32-representable for the tensor
  cores, so the kernels' own rounding of them is exact) stored with leading
  dimensions larger than the logical size; the padding and a guard band around
  each input hold a NaN sentinel (a kernel that reads them puts NaN in C);
* out sits in a larger buffer: guard rows and columns around it and the unused
  part of its leading dimension hold a NaN sentinel with a payload; out is
  row-major for K in {0, 7} and column-major (computed as out^T = b^T a^T) for
  K in {1, 33}, so every M x N meets both; with beta == 0 its elements start as
  NaN too (beta == 0 must not read them);
* the result is compared elementwise with alpha * op(a) @ op(b) + beta * out in
  FP64 (alpha and beta rounded to float32, as the kernels see them) within the
  rounding-error bound of a K-term dot product (blas3_harness.bound);
* every guard and padding element of out and of the inputs is bit-identical
  afterwards.

A second pass runs shapes whose widths, leading dimensions and addresses are
multiples of 16 bytes, so that the 16-byte (VEC) variants run in every layout.
Then batches (numpy.matmul broadcasting, gaps between matrices, zero strides,
chunked launches, split-K per batch), PyTorch's transposed views (no copies),
NumPy inputs in Fortran order, and cuBLAS-style strided batches.  The same
machinery runs on the CPU against an emulated launch in tests/test_semantics.py.
"""

import numpy as np
import pytest

import blas3_harness as h
import gemmlab

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

GPU = h.Backend(cp, lambda x: x.get(), "cupy")
FAMS = {f[0]: f for f in h.FAMILIES}
OPS_IDS = lambda t: "T" if t else "N"  # noqa: E731


@pytest.fixture(scope="module", autouse=True)
def _precompiled():
    """Every instantiation launched below, compiled first in parallel processes."""
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime.device import gpu_info

    arch = gpu_info(0).arch
    rt_compile.precompile(sorted(h.instantiations(h.FAMILIES + h.TMA_FAMILIES, arch)), arch)


def _skip_unless_runs(fam):
    from gemmlab.runtime.device import gpu_info

    if not h.runs_on(fam, gpu_info(0).arch):
        pytest.skip(f"{fam[1]} does not exist for {gpu_info(0).arch}")


@pytest.mark.parametrize("trans_a, trans_b", h.OPS, ids=OPS_IDS)
@pytest.mark.parametrize("fam", h.FAMILIES, ids=lambda f: f[0])
def test_level3(fam, trans_a, trans_b):
    _skip_unless_runs(fam)
    # mma_pipelined reads every 16-bit layout at any alignment: no fallback, asserted.
    expect = fam[1] if fam[1] == "mma_pipelined" else None
    failures = h.level3(GPU, fam, trans_a, trans_b, seed=len(fam[0]) * 4 + 2 * trans_a + trans_b, expect=expect)
    assert not failures, f"{len(failures)} failures, e.g. {failures[:8]}"


@pytest.mark.parametrize("trans_a, trans_b", h.OPS, ids=OPS_IDS)
@pytest.mark.parametrize("fam", h.TMA_FAMILIES, ids=lambda f: f[0])
def test_level3_tma(fam, trans_a, trans_b):
    """wgmma on operands TMA reads, in every layout (each operand K- or MN-major in shared
    memory; out column-major for every other K, so each layout also runs as out^T = b^T a^T):
    the rung that ran is asserted, no fallback."""
    _skip_unless_runs(fam)
    failures = h.level3(
        GPU,
        fam,
        trans_a,
        trans_b,
        h.TMA_DIMS,
        pad=h.TMA_PAD,
        guard=h.TMA_GUARD,
        seed=7 + 2 * trans_a + trans_b,
        expect=fam[1],
    )
    assert not failures, f"{len(failures)} failures, e.g. {failures[:8]}"


@pytest.mark.parametrize("trans_a, trans_b", h.OPS, ids=OPS_IDS)
@pytest.mark.parametrize("fam", h.FAMILIES, ids=lambda f: f[0])
def test_level3_aligned(fam, trans_a, trans_b):
    """Widths, leading dimensions and addresses all multiples of 16 bytes: the VEC
    variants, and shapes past rung 8's 128 x 256 tile (its unchecked copies run)."""
    _skip_unless_runs(fam)
    failures = []
    for dims in [(4, 36), (132, 264)]:
        failures += h.level3(GPU, fam, trans_a, trans_b, dims, (1.0, -1.3), pad=4, guard=4, seed=11)
    assert not failures, f"{len(failures)} failures, e.g. {failures[:8]}"


BATCH_CASES = [
    # a shape, b shape, trans_a, trans_b, column-major inputs, out
    ((3, 33, 7), (7, 9), False, False, (False, False), "C"),  # 2-D b broadcast over a's batch
    ((9, 7), (3, 7, 33), False, False, (True, False), "F"),  # 2-D a; column-major a and out
    ((2, 1, 7, 33), (3, 7, 9), True, False, (False, True), "C"),  # (2, 1) x (3): one group looped
    ((2, 3, 9, 33), (2, 3, 7, 9), True, True, (True, False), "F"),
    ((1, 33, 40), (5, 40, 36), False, False, (False, False), "new"),
    ((0, 5, 4), (1, 4, 6), False, False, (False, False), "C"),  # an empty batch
    ((3, 5, 0), (3, 0, 6), False, False, (False, False), "F"),  # K = 0: out = beta * out
]


@pytest.mark.parametrize("fam", h.FAMILIES, ids=lambda f: f[0])
@pytest.mark.parametrize("case", BATCH_CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[5]}")
def test_batches(fam, case):
    _skip_unless_runs(fam)
    a_shape, b_shape, ta, tb, colmajor, out = case
    failures = h.batched(GPU, fam, a_shape, b_shape, trans_a=ta, trans_b=tb, colmajor_in=colmajor, out=out)
    assert not failures, failures


def test_batches_in_chunks_and_split_k_workspace_per_chunk(monkeypatch):
    """More batches than one launch takes (GRID_Z_MAX lowered to 3), and split-K's
    workspace limited to two batches' worth: the pointer offsets of every chunk.
    (Prepared calls are built with the limits of their time: the cache starts empty.)"""
    from gemmlab.core import executor

    executor.CACHE.clear()
    monkeypatch.setattr(executor, "GRID_Z_MAX", 3)
    assert not h.batched(GPU, FAMS["naive"], (7, 5, 33), (33, 6), out="C")
    assert not h.batched(GPU, FAMS["wmma_warptile-fp16"], (7, 5, 33), (7, 6, 33), trans_b=True, out="F")
    monkeypatch.setattr(executor, "SPLITK_WORKSPACE_LIMIT", 2 * 3 * 33 * 20 * 4)
    executor.CACHE.clear()
    assert not h.batched(GPU, FAMS["pipelined-SPLITK3"], (5, 33, 40), (5, 40, 20), out="F")
    executor.CACHE.clear()  # the next tests get prepared calls with the usual limits


def test_more_than_65535_batches():
    rng = np.random.default_rng(0)
    a = h.values((70000, 2, 3), "float32", None, rng)
    b = h.values((3, 2), "float32", None, rng)
    c = gemmlab.matmul(cp.asarray(a), cp.asarray(b), kernel="coalesced").get()
    assert np.abs(c - np.matmul(a.astype(np.float64), b.astype(np.float64))).max() <= 1e-6


def test_matmul_strided_batched_on_cupy():
    rng = np.random.default_rng(1)
    M, N, K, batch = 33, 7, 20, 4
    flat = cp.asarray(h.values((batch * 800,), "float32", None, rng))
    a0 = flat[: M * 21].reshape(M, 21)[:, :K]  # ld 21, matrices 800 apart
    b0 = cp.asarray(h.values((N, K), "float32", None, rng))  # one b^T for all: stride 0
    out_flat = cp.full(batch * 300, 5.0, cp.float32)
    o0 = out_flat[: N * M].reshape(N, M).T  # column-major out, 300 apart
    res = gemmlab.matmul_strided_batched(
        a0, b0, batch, 800, 0, out=o0, stride_out=300, trans_b=True, alpha=-1.3, kernel="pipelined"
    )
    assert res.shape == (batch, M, N)
    host, oh = flat.get(), out_flat.get()
    for i in range(batch):
        ai = host[800 * i : 800 * i + M * 21].reshape(M, 21)[:, :K].astype(np.float64)
        ref = np.float32(-1.3) * (ai @ b0.get().T.astype(np.float64))
        got = oh[300 * i : 300 * i + N * M].reshape(N, M).T
        assert np.abs(got - ref).max() <= 40 * h.U32 * (np.abs(ai) @ np.abs(b0.get().T)).max() * 1.3
        assert (oh[300 * i + N * M : 300 * (i + 1)] == 5.0).all()


def test_numpy_inputs_keep_their_layout():
    """NumPy operands in Fortran order and transposed views: staged as they are, the result right."""
    rng = np.random.default_rng(2)
    a = np.asfortranarray(h.values((65, 33), "float32", None, rng))
    b = h.values((47, 33), "float32", None, rng)
    out = np.asfortranarray(h.values((65, 47), "float32", None, rng))
    c0 = out.copy()
    gemmlab.matmul(a, b.T, out=out, beta=0.5)
    ref = a.astype(np.float64) @ b.T.astype(np.float64) + 0.5 * c0.astype(np.float64)
    assert np.abs(out - ref).max() <= 60 * h.U32 * (np.abs(a) @ np.abs(b.T) + np.abs(c0)).max()


def test_torch_transposed_views_run_without_copies():
    """gemmlab.torch.mm and gemmlab.matmul read a.t() and b.t() in place: the only
    allocation is the result (PyTorch's allocator counts every tensor it hands out)."""
    torch = pytest.importorskip("torch")
    import gemmlab.torch as gt

    g = torch.Generator(device="cuda").manual_seed(3)
    a = torch.rand((70, 129), device="cuda", generator=g) * 2 - 1
    b = torch.rand((33, 70), device="cuda", generator=g) * 2 - 1
    for kernel in ("pipelined", "vectorized", "auto"):
        gt.mm(a.t(), b.t(), kernel)  # compile and warm up outside the count
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        c = gt.mm(a.t(), b.t(), kernel)
        torch.cuda.synchronize()
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 1, kernel
        ref = a.double().t() @ b.double().t()
        assert float((c.double() - ref).abs().max()) <= 100 * h.U32 * float((a.abs().t() @ b.abs().t()).max())
    # A column-major out, and a batch with a transposed 2-D operand.
    out = torch.empty((33, 129), device="cuda").t()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    gemmlab.matmul(a.t(), b.t(), out=out)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    assert float((out.double() - a.double().t() @ b.double().t()).abs().max()) <= 1e-4
    stack = torch.rand((4, 129, 70), device="cuda", generator=g)
    r = gemmlab.matmul(stack, b.t())
    assert r.shape == (4, 129, 33)
    assert float((r.double() - stack.double() @ b.double().t()).abs().max()) <= 1e-4


def test_torch_gradients_through_transposed_views():
    """The backward pass multiplies by b^T and a^T: views, read without copies."""
    torch = pytest.importorskip("torch")
    import gemmlab.torch as gt

    a = (torch.rand((65, 130), device="cuda") - 0.5).requires_grad_()
    b = (torch.rand((47, 130), device="cuda") - 0.5).requires_grad_()
    w = torch.rand((65, 47), device="cuda")
    (gt.mm(a, b.t()) * w).sum().backward()
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    (a64 @ b64.t() * w.double()).sum().backward()
    for x, y in ((a.grad, a64.grad), (b.grad, b64.grad)):
        assert float(torch.linalg.norm(x.double() - y) / torch.linalg.norm(y)) <= 1e-5
