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
from gemmlab.core import executor


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
CPU_FAMILIES = [
    "naive",
    "vectorized",
    "pipelined-SPLITK3",
    "wmma-fp16",
    "wmma_warptile-tf32",
    "gemv",
    "gemv-fp16",
    "outer",
    "outer-fp16",
]


@pytest.mark.parametrize("trans_a, trans_b", h.OPS, ids=lambda t: "T" if t else "N")
@pytest.mark.parametrize("fam", CPU_FAMILIES)
def test_level3_emulated(be, fam, trans_a, trans_b):
    failures = h.level3(be, FAMS[fam], trans_a, trans_b, dims=(0, 1, 7), seed=3)
    assert not failures, failures[:8]


@pytest.mark.parametrize("trans_a, trans_b", h.OPS, ids=lambda t: "T" if t else "N")
def test_level3_aligned_emulated_takes_the_vec_variant(be, trans_a, trans_b):
    """Aligned operands launch the VEC instantiation (the emulator checks its
    preconditions on every batch's pointers); the odd ones the scalar one."""
    failures = h.level3(
        be, FAMS["vectorized"], trans_a, trans_b, dims=(4, 12), scalars=(1.0, -1.3), pad=4, guard=4, seed=5
    )
    assert not failures, failures[:8]
    names = [k.name_expression for k, _ in be.emu.launches if k != "reduce"]
    assert names and all(", true, " in n for n in names)
    op = ("T" if trans_a else "N", "T" if trans_b else "N")
    swapped = ("N" if trans_b else "T", "N" if trans_a else "T")  # column-major out: b^T a^T
    assert {n[-9:] for n in names} == {f"'{op[0]}', '{op[1]}'>", f"'{swapped[0]}', '{swapped[1]}'>"}


BATCH_CASES = [
    # a shape, b shape, trans_a, trans_b, colmajor inputs, out
    ((3, 5, 4), (4, 6), False, False, (False, False), "C"),  # 2-D b broadcast over a's batch
    ((5, 4), (3, 4, 6), False, False, (True, False), "F"),  # 2-D a, column-major a, column-major out
    ((2, 1, 5, 4), (3, 4, 6), False, False, (False, True), "C"),  # (2, 1) x (3): two groups, one looped
    ((2, 3, 4, 5), (2, 3, 6, 4), True, True, (True, False), "F"),
    ((1, 5, 4), (7, 4, 6), False, False, (False, False), "new"),
    ((0, 5, 4), (1, 4, 6), False, False, (False, False), "C"),  # an empty batch
    ((3, 5, 0), (3, 0, 6), False, False, (False, False), "C"),  # K = 0: out = beta * out
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
    assert grids == [grids[0]] * 2 and grids[0][2] == 3  # z: the 3 of b; the 2 of a looped here
    be.emu.launches.clear()
    gemmlab.matmul(be.asarray(np.zeros((4, 3, 5, 4), np.float32)), be.asarray(np.repeat(b[None], 4, 0)), kernel="naive")
    assert [g[2] for _, g in be.emu.launches] == [12]  # contiguous stacks merge into one launch


def test_large_batches_are_launched_in_chunks(be, monkeypatch):
    monkeypatch.setattr(executor, "GRID_Z_MAX", 3)
    failures = h.batched(be, FAMS["naive"], (7, 5, 4), (4, 6), out="C")
    assert not failures
    assert [g[2] for _, g in be.emu.launches] == [3, 3, 1]


def test_split_k_workspace_is_per_batch_and_chunked(be, monkeypatch):
    """Split-K: gridDim.y = SPLITK, a workspace of SPLITK x M x N floats per batch,
    chunked so that it stays under SPLITK_WORKSPACE_LIMIT."""
    monkeypatch.setattr(executor, "SPLITK_WORKSPACE_LIMIT", 2 * 3 * 5 * 6 * 4)  # two batches' worth
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
    assert len(be.emu.arrays) == kept + 2  # the copy and the result
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
    assert len(be.emu.arrays) == kept + 1  # only the result
    assert np.allclose(r, np.matmul(stack[::-1].astype(np.float64), b.astype(np.float64)), rtol=0, atol=1e-5)


def test_matmul_strided_batched(be):
    rng = np.random.default_rng(6)
    M, N, K, batch = 5, 6, 4, 3
    flat_a = be.asarray(h.values((batch * 30 + 5,), "float32", None, rng))  # matrices 30 apart, ld 7
    a0 = np.lib.stride_tricks.as_strided(flat_a, (M, K), (7 * 4, 4))
    b0 = be.asarray(h.values((K, N), "float32", None, rng))  # stride 0: one b for all
    out_flat = be.asarray(np.full((batch * 40,), 9.0, np.float32))
    o0 = np.lib.stride_tricks.as_strided(out_flat, (M, N), (8 * 4, 4))
    res = gemmlab.matmul_strided_batched(a0, b0, batch, 30, 0, out=o0, stride_out=40, alpha=2.0, kernel="naive")
    assert res.shape == (batch, M, N)
    for i in range(batch):
        ai = flat_a[30 * i : 30 * i + 35].reshape(M, 7)[:, :K].astype(np.float64)
        oi = out_flat[40 * i : 40 * i + 40].reshape(M, 8)
        assert np.allclose(oi[:, :N], 2.0 * ai @ b0.astype(np.float64), rtol=0, atol=1e-5)
        assert (oi[:, N:] == 9.0).all()
    new = gemmlab.matmul_strided_batched(a0, b0, batch, 30, 0, trans_b=False, kernel="naive")
    assert new.shape == (batch, M, N) and np.allclose(2.0 * new, res, rtol=0, atol=1e-5)


def test_matmul_strided_batched_refuses_what_lies_outside_the_allocation():
    buf = np.zeros(40, np.float32)
    a0 = buf[:20].reshape(4, 5)
    with pytest.raises(
        ValueError,
        match=r"matmul_strided_batched: 3 matrices of a .* 20 elements apart, "
        r"reach past its allocation \(80 bytes beyond it\)",
    ):
        gemmlab.matmul_strided_batched(a0, np.zeros((5, 2), np.float32), 3, 20, 0)
    with pytest.raises(ValueError, match=r"out= and stride_out= go together"):
        gemmlab.matmul_strided_batched(a0, np.zeros((5, 2), np.float32), 2, 20, 0, stride_out=8)
    with pytest.raises(ValueError, match=r"stride_a must be an int >= 0; got -1"):
        gemmlab.matmul_strided_batched(a0, np.zeros((5, 2), np.float32), 2, -1, 0)
    with pytest.raises(ValueError, match=r"must be the first matrix of the batch \(2-D\)"):
        gemmlab.matmul_strided_batched(buf.reshape(2, 4, 5), np.zeros((5, 2), np.float32), 2, 20, 0)


def test_auto_in_every_layout_and_batch(be):
    """kernel='auto' (an H200: the rules and the cost model) runs every layout and a batch."""
    for ta, tb in itertools.product((False, True), repeat=2):
        failures = h.batched(
            be,
            ("auto", "auto", {}, "float32", None, "float32"),
            (2, 36, 40) if ta else (2, 40, 36),
            (44, 36) if tb else (36, 44),
            trans_a=ta,
            trans_b=tb,
            out="F",
        )
        assert not failures
    layouts = {(k.problem.op_a, k.problem.op_b) for k, _ in be.emu.launches if k != "reduce"}
    assert layouts == {("T", "T"), ("N", "T"), ("T", "N"), ("N", "N")}  # out^T = b^T a^T of each


# -- the wgmma rung: a batch is one launch through 3-D tensor maps ----------------------------


def _tma_stack(be, vals, colmajor=False, gap=8):
    """A batch (vals: (..., r, c)) in one 16-byte aligned buffer: each matrix stored
    row-major (or column-major) with rows padded to 16 bytes and ``gap`` elements
    after it (a multiple of 8: the batch stride stays a multiple of 16 bytes, as TMA
    needs; another gap makes it not)."""
    *bshape, r, c = vals.shape
    sr, sc = (c, r) if colmajor else (r, c)
    ld = -(-sc // 8) * 8
    per = sr * ld + gap
    nb = int(np.prod(bshape)) if bshape else 1
    raw = be.emu.keep(np.full(nb * per + 16, np.nan, vals.dtype))
    off = (-raw.ctypes.data % 16) // raw.itemsize
    buf = raw[off : off + nb * per]
    flat = vals.reshape((nb, r, c))
    for i in range(nb):
        buf[i * per : i * per + sr * ld].reshape(sr, ld)[:, :sc] = flat[i].T if colmajor else flat[i]
    bstr = tuple(int(np.prod(bshape[j + 1 :])) * per for j in range(len(bshape)))
    inner = (1, ld) if colmajor else (ld, 1)
    return np.lib.stride_tricks.as_strided(buf, tuple(bshape) + (r, c), tuple(s * buf.itemsize for s in bstr + inner))


WGMMA_BATCHES = [
    # a shape, b shape, trans_a, trans_b, out, out dtype, gemm launches
    ((5, 40, 24), (5, 24, 72), False, False, "new", "float16", 1),
    ((5, 24, 40), (5, 24, 72), True, False, "C", "float32", 1),  # A 'T' (stored K x M)
    ((5, 40, 24), (5, 72, 24), False, True, "F", "float16", 1),  # column-major out: b^T a^T
    ((5, 24, 40), (5, 72, 24), True, True, "C", "float16", 1),
    ((40, 24), (6, 24, 72), False, False, "C", "float32", 1),  # 2-D a shared by every matrix
    ((6, 40, 24), (72, 24), False, True, "new", "float16", 1),  # 2-D b^T shared
    ((2, 1, 40, 24), (3, 24, 72), False, False, "C", "float16", 2),  # (2, 1) x (3): one group looped
]


def _wgmma_batch(be, a_shape, b_shape, ta, tb, out, out_dt, gap=8, beta=0.0, colmajor_in=(False, False), **params):
    rng = np.random.default_rng(len(a_shape) + 3 * ta + tb)
    va = rng.integers(-4, 5, a_shape).astype(np.float16)
    vb = rng.integers(-4, 5, b_shape).astype(np.float16)
    a, b = _tma_stack(be, va, colmajor_in[0], gap), _tma_stack(be, vb, colmajor_in[1], gap)
    oa = np.swapaxes(va, -1, -2) if ta else va
    ob = np.swapaxes(vb, -1, -2) if tb else vb
    ref = np.matmul(oa.astype(np.float64), ob.astype(np.float64))
    if out == "new":
        got = gemmlab.matmul(a, b, trans_a=ta, trans_b=tb, kernel="wgmma", out_dtype=out_dt, **params)
    else:
        c0 = rng.integers(-4, 5, ref.shape).astype(out_dt)
        o = _tma_stack(be, c0, out == "F", gap)
        assert gemmlab.matmul(a, b, out=o, trans_a=ta, trans_b=tb, beta=beta, kernel="wgmma", **params) is o
        got, ref = o, ref + beta * c0
    assert got.shape == ref.shape and np.array_equal(got.astype(np.float64), ref)


@pytest.mark.parametrize(
    "case", WGMMA_BATCHES, ids=lambda c: f"{c[0]}x{c[1]}-{'T' if c[2] else 'N'}{'T' if c[3] else 'N'}-{c[4]}-{c[5]}"
)
def test_wgmma_batch_is_one_launch_through_3d_maps(be, case):
    """A batch on wgmma: one launch per group of batch dimensions (numpy.matmul's
    broadcasting loops the rest, as gridDim.z does for the other rungs), each operand
    read through its 3-D map (a shared one through a map of one matrix), C through
    its map or from registers (beta != 0) at stride_c; every layout, both out orders."""
    a_shape, b_shape, ta, tb, out, out_dt, launches = case
    _wgmma_batch(be, a_shape, b_shape, ta, tb, out, out_dt)
    gemm = [(k, g) for k, g in be.emu.launches if k != "reduce"]
    assert len(gemm) == launches and all(k.spec.name == "wgmma" and g[2] == 1 for k, g in gemm), gemm
    assert gemmlab.last_plan().spec.name == "wgmma" and not gemmlab.last_plan().fallback_reason
    be.emu.launches.clear()
    _wgmma_batch(be, a_shape, b_shape, ta, tb, "C", out_dt, beta=0.5)  # register stores, stride_c
    assert len([k for k, _ in be.emu.launches if k != "reduce"]) == launches


@pytest.mark.parametrize(
    "case", WGMMA_BATCHES, ids=lambda c: f"{c[0]}x{c[1]}-{'T' if c[2] else 'N'}{'T' if c[3] else 'N'}-{c[4]}-{c[5]}"
)
def test_wgmma_split_k_batch(be, case):
    """Split over K (SPLITK=3; K = 24: one K-step, so two slices are empty): the kernel adds
    its slices itself, so each launch is the GEMM alone, writing C in C's dtype with alpha and
    beta as unsplit, given a partials workspace and zeroed counters of the sizes the spec
    asks for (the emulator checks both); no reduction runs."""
    a_shape, b_shape, ta, tb, out, out_dt, launches = case
    for beta in (0.0, 0.5):
        be.emu.launches.clear()
        _wgmma_batch(
            be, a_shape, b_shape, ta, tb, out if beta == 0 else "C", out_dt, beta=beta, BM=64, BN=128, SPLITK=3
        )
        kinds = [k if k == "reduce" else k.spec.name for k, _ in be.emu.launches]
        assert kinds == ["wgmma"] * launches, kinds
        assert gemmlab.last_plan().params["SPLITK"] == 3


def test_wgmma_batch_in_chunks(be, monkeypatch):
    """More matrices than one launch takes (GRID_Z_MAX lowered to 2): a launch per chunk,
    each starting at its chunk's first matrix."""
    monkeypatch.setattr(executor, "GRID_Z_MAX", 2)
    _wgmma_batch(be, (5, 40, 24), (5, 72, 24), False, True, "C", "float16")
    assert [k.spec.name for k, _ in be.emu.launches] == ["wgmma"] * 3


def test_wgmma_batch_stride_tma_cannot_take_falls_back(be):
    """A batch stride that is not a multiple of 16 bytes (gaps of 3 elements): TMA cannot
    step by it, so the plan falls back to mma_pipelined (one launch along gridDim.z) and
    says why."""
    _wgmma_batch(be, (4, 40, 24), (4, 24, 72), False, False, "C", "float16", gap=3)
    p = gemmlab.last_plan()
    assert p.spec.name == "mma_pipelined" and "strides between matrices" in p.fallback_reason, p.describe()


def test_auto_takes_wgmma_for_batched_attention_products():
    """Batched 16-bit products on Hopper -- those of attention, (BH, S, 128) @ (BH, 128, S)
    and (BH, S, S) @ (BH, S, 128) -- run on wgmma: one launch takes the whole batch."""
    for bh in (32, 128):
        for s in (512, 2048, 4096):
            for M, N, K in ((s, s, 128), (s, 128, s)):
                p = gemmlab.plan(
                    "auto",
                    M,
                    N,
                    K,
                    dtype="bfloat16",
                    out_dtype="bfloat16",
                    batch=bh,
                    arch="sm_90a",
                    op_b="T" if N == s else "N",
                )
                assert p.spec.name == "wgmma", (bh, s, M, N, K, p.describe())
    # 64 products of 512 x 128 @ 128 x 512: 512 tiles of 128 x 256 fill the GPU; a batch with
    # two K-steps runs 128 x 128 tiles (run 88e), and so does P @ V's N = 128.
    p = gemmlab.plan("auto", 512, 512, 128, dtype="bfloat16", out_dtype="bfloat16", batch=64, arch="sm_90a")
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == (128, 128)
    p = gemmlab.plan("auto", 512, 512, 512, dtype="bfloat16", out_dtype="bfloat16", batch=64, arch="sm_90a")
    assert p.spec.name == "wgmma" and (p.params["BM"], p.params["BN"]) == (128, 256)


# -- thin products: the 16-byte variants where every stored row starts on the grid ----------


def _aligned_rows(be, rows, cols, rng, offset=0):
    """A rows x cols float32 array on the 16-byte grid (``offset`` elements past it)."""
    raw = be.emu.keep(np.empty(rows * cols + 8, np.float32))
    start = (-raw.ctypes.data % 16) // 4 + offset
    x = raw[start : start + rows * cols].reshape(rows, cols)
    x[...] = h.values((rows, cols), "float32", None, rng)
    return x


@pytest.mark.parametrize(
    "product, M, rung, wide",
    [
        ("fwd", 1, "gemv", True),  # x @ W.t(): 1 x 37 logits, C's rows of odd length
        ("fwd", 3, "gemv", True),
        ("dgrad", 1, "gemv", True),  # dY @ W: dY one row of odd length
        ("dgrad", 3, "gemv", True),  # three such rows: the row path checks op(A)'s rows itself
        ("wgrad", 1, "outer", True),  # dY.t() @ x: K = 1, op(A) one stored row of odd length
        ("fwd-x-off-grid", 3, "gemv", False),
    ],
)
def test_thin_products_of_odd_length_rows_take_the_16_byte_variant(be, product, M, rung, wide):
    """A vocabulary of odd length (37 here) at one token or a few: the operand of that
    length is one stored row, or C, whose width gemv and outer take element by element at
    its end, so the kernel still reads op(B) (gemv) or writes C (outer) 16 bytes at a time
    (the emulator checks the rows it does so on); only an operand off the grid stops it."""
    rng = np.random.default_rng(M)
    V, D = 37, 40
    W = _aligned_rows(be, V, D, rng)
    if product.startswith("fwd"):
        x = _aligned_rows(be, M, D, rng, offset=1 if "off" in product else 0)
        a, b = x, W.T
    elif product == "dgrad":
        a, b = _aligned_rows(be, M, V, rng), W
    else:
        a, b = _aligned_rows(be, M, V, rng).T, _aligned_rows(be, M, D, rng)
    got = gemmlab.matmul(a, b)
    p = gemmlab.last_plan()
    assert p.spec.name == rung and (", true, " in p.name_expression) == wide, p.name_expression
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(got - ref).max() <= 64 * h.U32 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))).max()
