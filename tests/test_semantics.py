"""GEMM semantics end to end on the CPU: the level-3 tester and the batch tests of
tests/test_blas3.py, run against an emulation of the kernels' contract
(emulated_gpu.py) instead of the GPU.  They check the host side -- layouts read
from strides, trans_a / trans_b, the operand swap for a column-major out,
copies of unreadable strides, numpy.matmul broadcasting, batch strides,
gridDim.z launches and their chunks, split-K workspaces per batch, the 16-byte
variants' preconditions -- on every call; the kernels are checked on the GPU."""

import itertools

import numpy as np
import pytest

import blas3_harness as h
import emulated_gpu
import gemmlab
from gemmlab import api, executor


class EmuBackend(h.Backend):
    def __init__(self, emu):
        super().__init__(np, lambda x: np.array(x, copy=True), "emulated")
        self.emu = emu

    def asarray(self, host):
        return self.emu.keep(np.array(host, copy=True))


@pytest.fixture
def be(monkeypatch):
    return EmuBackend(emulated_gpu.install(monkeypatch))


FAMS = {f[0]: f for f in h.FAMILIES}
CPU_FAMILIES = ["naive", "vectorized", "pipelined-SPLITK3", "wmma-fp16", "wmma_warptile-tf32"]


@pytest.mark.parametrize("trans_a, trans_b", h.OPS, ids=lambda t: "T" if t else "N")
@pytest.mark.parametrize("fam", CPU_FAMILIES)
def test_level3_emulated(be, fam, trans_a, trans_b):
    failures = h.level3(be, FAMS[fam], trans_a, trans_b, dims=(0, 1, 7), seed=3)
    assert not failures, failures[:8]


@pytest.mark.parametrize("trans_a, trans_b", h.OPS, ids=lambda t: "T" if t else "N")
def test_level3_aligned_emulated_takes_the_vec_variant(be, trans_a, trans_b):
    """Aligned operands launch the VEC instantiation (the emulator checks its
    preconditions on every batch's pointers); the odd ones the scalar one."""
    failures = h.level3(be, FAMS["vectorized"], trans_a, trans_b, dims=(4, 12), scalars=(1.0, -1.3),
                        pad=4, guard=4, seed=5)
    assert not failures, failures[:8]
    names = [k.name_expression for k, _ in be.emu.launches if k != "reduce"]
    assert names and all(", true, " in n for n in names)
    op = ("T" if trans_a else "N", "T" if trans_b else "N")
    swapped = ("N" if trans_b else "T", "N" if trans_a else "T")    # column-major out: b^T a^T
    assert {n[-9:] for n in names} == {f"'{op[0]}', '{op[1]}'>", f"'{swapped[0]}', '{swapped[1]}'>"}


BATCH_CASES = [
    # a shape, b shape, trans_a, trans_b, colmajor inputs, out
    ((3, 5, 4), (4, 6), False, False, (False, False), "C"),      # 2-D b broadcast over a's batch
    ((5, 4), (3, 4, 6), False, False, (True, False), "F"),       # 2-D a, column-major a, column-major out
    ((2, 1, 5, 4), (3, 4, 6), False, False, (False, True), "C"),  # (2, 1) x (3): two groups, one looped
    ((2, 3, 4, 5), (2, 3, 6, 4), True, True, (True, False), "F"),
    ((1, 5, 4), (7, 4, 6), False, False, (False, False), "new"),
    ((0, 5, 4), (1, 4, 6), False, False, (False, False), "C"),    # an empty batch
    ((3, 5, 0), (3, 0, 6), False, False, (False, False), "C"),    # K = 0: out = beta * out
]


@pytest.mark.parametrize("fam", CPU_FAMILIES)
@pytest.mark.parametrize("case", BATCH_CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[5]}")
def test_batches_emulated(be, fam, case):
    a_shape, b_shape, ta, tb, colmajor, out = case
    failures = h.batched(be, FAMS[fam], a_shape, b_shape, trans_a=ta, trans_b=tb, colmajor_in=colmajor, out=out)
    assert not failures, failures


def test_batches_go_to_grid_z_and_the_rest_is_looped(be):
    a = be.asarray(h.values((2, 1, 5, 4), "float32", None, np.random.default_rng(0)))
    b = be.asarray(h.values((3, 4, 6), "float32", None, np.random.default_rng(1)))
    gemmlab.matmul(a, b, kernel="naive")
    grids = [g for k, g in be.emu.launches]
    assert grids == [grids[0]] * 2 and grids[0][2] == 3      # z: the 3 of b; the 2 of a looped here
    be.emu.launches.clear()
    gemmlab.matmul(be.asarray(np.zeros((4, 3, 5, 4), np.float32)), be.asarray(np.repeat(b[None], 4, 0)),
                   kernel="naive")
    assert [g[2] for _, g in be.emu.launches] == [12]         # contiguous stacks merge into one launch


def test_large_batches_are_launched_in_chunks(be, monkeypatch):
    monkeypatch.setattr(executor, "GRID_Z_MAX", 3)
    failures = h.batched(be, FAMS["naive"], (7, 5, 4), (4, 6), out="C")
    assert not failures
    assert [g[2] for _, g in be.emu.launches] == [3, 3, 1]


def test_split_k_workspace_is_per_batch_and_chunked(be, monkeypatch):
    """Split-K: gridDim.y = SPLITK, a workspace of SPLITK x M x N floats per batch,
    chunked so that it stays under SPLITK_WORKSPACE_LIMIT."""
    monkeypatch.setattr(executor, "SPLITK_WORKSPACE_LIMIT", 2 * 3 * 5 * 6 * 4)   # two batches' worth
    failures = h.batched(be, FAMS["pipelined-SPLITK3"], (5, 5, 40), (5, 40, 6), out="F")
    assert not failures
    gemm = [g for k, g in be.emu.launches if k != "reduce"]
    reduce = [g for k, g in be.emu.launches if k == "reduce"]
    assert [g[1:] for g in gemm] == [(3, 2), (3, 2), (3, 1)]
    assert [g[1] for g in reduce] == [2, 2, 1]


@pytest.mark.parametrize("fam", ["naive", "vectorized", "pipelined-SPLITK3"])
def test_quick_return_in_batches(be, fam):
    """alpha = 0: out = beta * out for every batch, the inputs never read (NaN in them stays out)."""
    _, kernel, params, *_ = FAMS[fam]
    a = be.asarray(np.full((3, 5, 4), np.nan, np.float32))
    b = be.asarray(np.full((4, 6), np.nan, np.float32))
    c0 = h.values((3, 5, 6), "float32", None, np.random.default_rng(2))
    out = be.asarray(np.asfortranarray(c0))
    gemmlab.matmul(a, b, out=out, alpha=0.0, beta=-1.3, kernel=kernel, **params)
    assert np.array_equal(out, (np.float32(-1.3) * c0).astype(np.float32))


def test_unreadable_strides_are_copied_once(be):
    """a[:, ::2] has unit stride on neither side: one contiguous copy, then the row-major kernel."""
    rng = np.random.default_rng(4)
    big = be.asarray(h.values((6, 10), "float32", None, rng))
    b = be.asarray(h.values((5, 3), "float32", None, rng))
    kept = len(be.emu.arrays)
    c = gemmlab.matmul(big[:, ::2], b, kernel="naive")
    assert len(be.emu.arrays) == kept + 2        # the copy and the result
    ref = big[:, ::2].astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c - ref).max() <= 20 * h.U32 * (np.abs(big[:, ::2]) @ np.abs(b)).max()
    # A strided out: computed in a contiguous copy, copied back; its gaps unchanged.
    out_buf = be.asarray(np.full((6, 6), 5.0, np.float32))
    gemmlab.matmul(big[:, ::2], b, out=out_buf[:, ::2], kernel="naive")
    assert np.array_equal(out_buf[:, 1::2], np.full((6, 3), 5.0, np.float32))
    assert np.abs(out_buf[:, ::2] - ref).max() <= 20 * h.U32 * (np.abs(big[:, ::2]) @ np.abs(b)).max()
    # A negative batch stride is read in place.
    stack = be.asarray(h.values((3, 4, 5), "float32", None, rng))
    kept = len(be.emu.arrays)
    r = gemmlab.matmul(stack[::-1], b, kernel="naive")
    assert len(be.emu.arrays) == kept + 1        # only the result
    assert np.allclose(r, np.matmul(stack[::-1].astype(np.float64), b.astype(np.float64)), rtol=0, atol=1e-5)


def test_matmul_strided_batched(be):
    rng = np.random.default_rng(6)
    M, N, K, batch = 5, 6, 4, 3
    flat_a = be.asarray(h.values((batch * 30 + 5,), "float32", None, rng))   # matrices 30 apart, ld 7
    a0 = np.lib.stride_tricks.as_strided(flat_a, (M, K), (7 * 4, 4))
    b0 = be.asarray(h.values((K, N), "float32", None, rng))             # stride 0: one b for all
    out_flat = be.asarray(np.full((batch * 40,), 9.0, np.float32))
    o0 = np.lib.stride_tricks.as_strided(out_flat, (M, N), (8 * 4, 4))
    res = gemmlab.matmul_strided_batched(a0, b0, batch, 30, 0, out=o0, stride_out=40, alpha=2.0, kernel="naive")
    assert res.shape == (batch, M, N)
    for i in range(batch):
        ai = flat_a[30 * i:30 * i + 35].reshape(M, 7)[:, :K].astype(np.float64)
        oi = out_flat[40 * i:40 * i + 40].reshape(M, 8)
        assert np.allclose(oi[:, :N], 2.0 * ai @ b0.astype(np.float64), rtol=0, atol=1e-5)
        assert (oi[:, N:] == 9.0).all()
    new = gemmlab.matmul_strided_batched(a0, b0, batch, 30, 0, trans_b=False, kernel="naive")
    assert new.shape == (batch, M, N) and np.allclose(2.0 * new, res, rtol=0, atol=1e-5)


def test_matmul_strided_batched_refuses_what_lies_outside_the_allocation():
    buf = np.zeros(40, np.float32)
    a0 = buf[:20].reshape(4, 5)
    with pytest.raises(ValueError, match=r"matmul_strided_batched: 3 matrices of a .* 20 elements apart, "
                                         r"reach past its allocation \(80 bytes beyond it\)"):
        gemmlab.matmul_strided_batched(a0, np.zeros((5, 2), np.float32), 3, 20, 0)
    with pytest.raises(ValueError, match=r"out= and stride_out= go together"):
        gemmlab.matmul_strided_batched(a0, np.zeros((5, 2), np.float32), 2, 20, 0, stride_out=8)
    with pytest.raises(ValueError, match=r"stride_a must be an int >= 0; got -1"):
        gemmlab.matmul_strided_batched(a0, np.zeros((5, 2), np.float32), 2, -1, 0)
    with pytest.raises(ValueError, match=r"must be the first matrix of the batch \(2-D\)"):
        gemmlab.matmul_strided_batched(buf.reshape(2, 4, 5), np.zeros((5, 2), np.float32), 2, 20, 0)


def test_auto_in_every_layout_and_batch(be):
    """kernel='auto' (the shipped H200 table) runs every layout and a batch."""
    for ta, tb in itertools.product((False, True), repeat=2):
        failures = h.batched(be, ("auto", "auto", {}, "float32", None, "float32"),
                             (2, 36, 40) if ta else (2, 40, 36), (44, 36) if tb else (36, 44),
                             trans_a=ta, trans_b=tb, out="F")
        assert not failures
    layouts = {(k.problem.op_a, k.problem.op_b) for k, _ in be.emu.launches if k != "reduce"}
    assert layouts == {("T", "T"), ("N", "T"), ("T", "N"), ("N", "N")}   # out^T = b^T a^T of each
