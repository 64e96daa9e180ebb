"""gemmlab.matmul with the GPU replaced by an emulation of the kernels' contract,
so that the host side -- layouts, leading dimensions, operand swaps for a
column-major out, copies, numpy.matmul broadcasting, batch strides, launches
over gridDim.z and their chunks, split-K workspaces -- runs end to end on a
machine without a GPU, on NumPy arrays treated as device memory.

The emulated launch reads and writes memory by address, exactly as a kernel
would with the pointers, leading dimensions, layouts ('N'/'T' template
arguments) and batch strides it is given (element (r, c) of op(A) of batch z at
A + z * stride_a + (r * lda + c or c * lda + r)), refuses any access outside the
arrays the test made, and checks the 16-byte (VEC) variants' preconditions on
every batch's pointers.  The wgmma rung's launch is emulated from its tensor maps
(runtime.tma's encoder replaced by a record of what it was asked for): one
launch per batch, each operand read through its 3-D map at the batch
coordinate the kernel would give it (0 for a shared operand, whose map holds
one matrix), C written through its map or by the threads with stride_c.  It says nothing about the kernels themselves: that is
tests/test_blas3.py's job on the GPU.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass

import numpy as np

from gemmlab.core import api
from gemmlab.core.arrays import ITEMSIZE
from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_DTYPES, splitk_reduce_kernel
from gemmlab.kernels.tensor.wgmma import PACK16_KERNEL, TF32_PACK_KERNELS
from gemmlab.kernels.simt.staging import PACK32_KERNEL


# NumPy 2 moved byte_bounds to numpy.lib.array_utils.
_byte_bounds = getattr(getattr(np.lib, "array_utils", np), "byte_bounds")


@dataclass(frozen=True)
class FakeGPU:
    ordinal: int = 0
    name: str = "emulated GPU"
    slug: str = "nvidia-h200"  # no shipped table: kernel="auto" takes the rules and the cost model
    arch: str = "sm_90a"
    sm_count: int = 132
    max_smem_per_block_optin: int = 227 * 1024


class Emulator:
    def __init__(self):
        self.arrays: list[np.ndarray] = []  # memory the emulated kernels may touch
        self.launches: list[tuple] = []  # (name, grid) of every launch
        self.calls: list[tuple] = []  # (kernel, launch shape, arguments) of every launch

    # -- memory --------------------------------------------------------------
    def keep(self, x: np.ndarray) -> np.ndarray:
        self.arrays.append(x)
        return x

    def _inside(self, lo: int, hi: int) -> bool:
        for x in self.arrays:
            base = x
            while isinstance(base.base, np.ndarray):
                base = base.base
            start, end = _byte_bounds(base)
            if start <= lo and hi <= end:
                return True
        return False

    def mem(self, ptr: int, dtype: str, shape, strides) -> np.ndarray:
        """A NumPy view of device memory at ``ptr`` (element strides)."""
        dt = np.dtype(dtype)
        if any(n == 0 for n in shape):
            return np.empty(shape, dt)
        lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
        hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + 1
        first, end = ptr + lo * dt.itemsize, ptr + hi * dt.itemsize
        assert self._inside(first, end), f"an emulated kernel touches [{first:#x}, {end:#x}) outside every array"
        raw = (ctypes.c_char * (end - first)).from_address(first)
        base = np.frombuffer(raw, dt)
        return np.lib.stride_tricks.as_strided(base[-lo:], shape, tuple(s * dt.itemsize for s in strides))

    def operand(self, ptr, dtype, op, rows, cols, ld):
        if op == "N":
            return self.mem(ptr, dtype, (rows, cols), (ld, 1))
        return self.mem(ptr, dtype, (rows, cols), (1, ld))

    # -- kernels ---------------------------------------------------------------
    def launch(self, kernel, grid, block, smem, stream, *args, cluster=None):
        self.launches.append((kernel, tuple(grid)))
        self.calls.append((kernel, (tuple(grid), tuple(block), smem, cluster), args))
        assert all(0 < g for g in grid) and grid[1] <= 65535 and grid[2] <= 65535, grid
        if kernel in ("pack16", "pack32"):
            self._pack_rows("uint16" if kernel == "pack16" else "float32", grid, *args)
        elif kernel == "tf32_pack":
            self._tf32_pack(grid, *args)
        elif kernel == "reduce":
            self._reduce(kernel.out_dtype, grid, *args)
        elif kernel.spec.name == "wgmma":
            self._wgmma(kernel, grid, *args)
        elif kernel.spec.name == "wgmma_fp8":
            self._wgmma_fp8(kernel, grid, block, smem, cluster, *args)
        elif kernel.spec.name == "grouped":
            self._grouped(kernel, grid, block, smem, cluster, *args)
        elif kernel.spec.name == "grouped_wgrad":
            self._grouped_wgrad(kernel, grid, block, smem, cluster, *args)
        else:
            self._gemm(kernel, grid, *args)

    def _through(self, m: "FakeMap", z: int, dtype: str) -> np.ndarray:
        """Matrix z of a 3-D tensor map, as the copy engine would address it."""
        assert m.batch is not None and 0 <= z < m.batch, f"batch coordinate {z} outside a map of {m.batch}"
        assert m.ptr % 16 == 0 and (m.rows == 1 or m.ld * np.dtype(dtype).itemsize % 16 == 0), m
        assert m.batch == 1 or (m.bstride % 16 == 0 and m.bstride > 0), m
        return self.mem(m.ptr + z * m.bstride, dtype, (m.rows, m.cols), (m.ld, 1))

    def _wgmma(
        self,
        p,
        grid,
        M,
        N,
        K,
        alpha,
        A,
        lda,
        B,
        ldb,
        beta,
        C,
        ldc,
        sa,
        sb,
        sc,
        batch,
        map_a,
        map_b,
        map_c,
        tma_store,
        splits,
        partials=0,
        counters=0,
        bias=0,
        bias_rs=0,
        bias_cs=0,
        bias_zs=0,
    ):
        # The plan of the name expression, at this launch's sizes (a plan chosen for a band of
        # sizes, planner.size_band, launches each exact size under the same name).
        pr = dataclasses.replace(p.problem, M=int(M), N=int(N), K=int(K))
        splits, M, N, C, bias = int(splits), int(M), int(N), int(C), int(bias)
        assert splits == p.params["SPLITK"], (splits, p.params)
        assert not bias or pr.dtype != "tf32", "the epilogue adds a bias to 16-bit products only"
        if splits > 1:
            # The kernel adds its slices itself (04_wgmma_splitk.cuh) and writes C as unsplit: its
            # workspaces must be as large as the host sized them, the counters zero (each launch
            # leaves them so: nothing to emulate).
            part_bytes, counter_bytes = p.spec.launching.split_fixup(p.params, pr)
            self.mem(int(partials), "uint8", (part_bytes * int(batch),), (1,))
            n = counter_bytes * int(batch) // 4
            assert not self.mem(int(counters), "uint32", (n,), (1,)).any(), "split-K's counters not zero"
        assert pr.dtype in ("float16", "bfloat16", "tf32") and grid[1] == grid[2] == 1, (pr.dtype, grid)
        assert grid[0] <= 132, grid  # persistent: no more blocks than SMs
        M, N, K, ldc, batch = int(M), int(N), int(K), int(ldc), int(batch)
        alpha, beta = float(alpha), float(beta)
        dt = "float32" if pr.dtype == "tf32" else "float16"  # NumPy has no bfloat16: the tests use float16
        assert (map_a.rows, map_a.cols) == ((M, K) if pr.op_a == "N" else (K, M)), map_a
        assert (map_b.rows, map_b.cols) == ((K, N) if pr.op_b == "N" else (N, K)), map_b
        for z in range(batch):
            a = self._through(map_a, z if int(sa) else 0, dt)
            b = self._through(map_b, z if int(sb) else 0, dt)
            if dt == "float32":  # TFLOAT32 maps round as the copy engine moves the values
                a, b = round_tf32(a), round_tf32(b)
            a, b = (a if pr.op_a == "N" else a.T), (b if pr.op_b == "N" else b.T)
            if int(tma_store):
                assert beta == 0 and (map_c.rows, map_c.cols) == (M, N), map_c
                c = self._through(map_c, z, pr.out_dtype)
            else:
                c = self.operand(C + z * int(sc) * ITEMSIZE[pr.out_dtype], pr.out_dtype, "N", M, N, ldc)
            acc = np.zeros((M, N)) if alpha == 0 else a.astype(np.float64) @ b.astype(np.float64)
            r = alpha * acc if beta == 0 else alpha * acc + beta * c.astype(np.float64)
            if bias:  # element (z, m, n) at z * bias_zs + m * bias_rs + n * bias_cs
                assert bias_rs == 0 or bias_cs == 0, "the epilogue reads a row or a column, one stride 0"
                r = r + self.mem(
                    bias + z * int(bias_zs) * ITEMSIZE[pr.out_dtype], pr.out_dtype, (M, N), (int(bias_rs), int(bias_cs))
                ).astype(np.float64)
            c[...] = r.astype(c.dtype)

    def _wgmma_fp8(
        self,
        p,
        grid,
        block,
        smem,
        cluster,
        M,
        N,
        K,
        alpha,
        A,
        lda,
        B,
        ldb,
        beta,
        C,
        ldc,
        sa,
        sb,
        sc,
        map_a,
        map_b,
        scale_a,
        sa_m,
        sa_k,
        scale_b,
        sb_n,
        sb_k,
    ):
        """05_wgmma_fp8.cu's contract: A (M x K) and B (N x K) read through their maps as bytes of
        FP8 (boxes of 128 of them along K; BM rows of A, BN / CLUSTER of B), the scales by their
        strides (outer: sa(m) sb(n); block: sa(m, kb) sb(nb, kb) per 128-wide K-block), C written by
        the threads with ldc (bfloat16 as float16: NumPy has none)."""
        import torch

        pr, prm = p.problem, p.params
        M, N, K, ldc = int(M), int(N), int(K), int(ldc)
        alpha, beta = float(alpha), float(beta)
        assert (pr.op_a, pr.op_b) == ("N", "T") and int(sa) == int(sb) == int(sc) == 0
        assert grid[1] == grid[2] == 1 and grid[0] <= 132 and grid[0] % prm["CLUSTER"] == 0, grid
        assert block[0] == 128 * (prm["BM"] // 64 + 1) and smem == p.spec.launch(prm, pr).smem_bytes
        for m, rows, dtype, box in (
            (map_a, M, pr.dtype, prm["BM"]),
            (map_b, N, pr.dtype_b, prm["BN"] // prm["CLUSTER"]),
        ):
            assert (m.rows, m.cols, m.dtype, m.box_rows, m.box_cols, m.batch) == (rows, K, dtype, box, 128, 1), m
        kb_count = -(-K // 128)

        def fp8(m, dtype):
            raw = np.ascontiguousarray(self._through(m, 0, "uint8"))
            return torch.from_numpy(raw).view(getattr(torch, dtype)).double().numpy()

        a, b = fp8(map_a, pr.dtype), fp8(map_b, pr.dtype_b)
        if pr.scaling == "block":
            s_a = self.mem(int(scale_a), "float32", (M, kb_count), (int(sa_m), int(sa_k))).astype(np.float64)
            nb = -(-N // 128)
            s_b = self.mem(int(scale_b), "float32", (nb, kb_count), (int(sb_n), int(sb_k))).astype(np.float64)
            acc = np.zeros((M, N))
            for kb in range(kb_count):
                ks = slice(128 * kb, 128 * (kb + 1))
                part = a[:, ks] @ b[:, ks].T
                acc += part * s_a[:, kb : kb + 1] * np.repeat(s_b[:, kb], 128)[:N][None, :]
        else:
            assert int(sa_k) == int(sb_k) == 0, "outer scales have no K stride"
            s_a = self.mem(int(scale_a), "float32", (M,), (int(sa_m),)).astype(np.float64)
            s_b = self.mem(int(scale_b), "float32", (N,), (int(sb_n),)).astype(np.float64)
            acc = (a @ b.T) * s_a[:, None] * s_b[None, :]
        if alpha == 0:
            acc = np.zeros((M, N))
        dt = "float32" if pr.out_dtype == "float32" else "float16"
        c = self.operand(int(C), dt, "N", M, N, ldc)
        r = alpha * acc if beta == 0 else alpha * acc + beta * c.astype(np.float64)
        c[...] = r.astype(c.dtype)

    def _grouped(self, p, grid, block, smem, cluster, T, N, K, G, offs, C, ldc, map_a, map_b):
        """06_grouped.cu's contract: A (T x K) read through its map (a batch of one, boxes of BM
        rows x 64 K), B_g through B's 3-D map at batch coordinate g (boxes of BN rows x 64 K for
        'T', stored N x K; 64 x 64 for 'N', stored K x N), the G offsets read from device memory
        and clamped as group_rows clamps them (06_grouped.cuh), each group's rows of C written
        (16-bit values, rounded once from the FP64 product), rows in no group left alone."""
        import torch

        pr, prm = p.problem, p.params
        T, N, K, G, ldc = int(T), int(N), int(K), int(G), int(ldc)
        assert (T, N, K, G) == (pr.M, pr.N, pr.K, pr.groups) and pr.dtype in ("float16", "bfloat16")
        bound = -(-T // prm["BM"]) + G
        assert grid[1] == grid[2] == 1 and 0 < grid[0] <= min(132, bound * -(-N // prm["BN"])), grid
        assert block[0] == 128 * (prm["BM"] // 64 + 1) and smem == p.spec.launch(prm, pr).smem_bytes
        assert cluster in (None, (1, 1, 1)), cluster
        assert (map_a.rows, map_a.cols, map_a.box_rows, map_a.box_cols, map_a.batch) == (T, K, prm["BM"], 64, 1)
        b_shape = (N, K, prm["BN"]) if pr.op_b == "T" else (K, N, 64)
        assert (map_b.rows, map_b.cols, map_b.box_rows, map_b.box_cols, map_b.batch) == (*b_shape, 64, G), map_b
        tdt = getattr(torch, pr.dtype)

        def values(raw):  # 16-bit values as stored -> float64
            return torch.from_numpy(np.ascontiguousarray(raw)).view(tdt).double()

        a = values(self._through(map_a, 0, "uint16"))
        ends = self.mem(int(offs), "int32", (G,), (1,)).tolist()
        c = self.operand(int(C), "uint16", "N", T, N, ldc)
        prev = 0
        for g, end in enumerate(ends):
            start = min(max(prev, 0), T)
            end, prev = min(max(end, start), T), end
            if end == start:
                continue
            b = values(self._through(map_b, g, "uint16"))
            b = b if pr.op_b == "N" else b.t()
            part = (a[start:end] @ b).to(tdt).view(torch.uint16)
            c[start:end] = part.numpy().view(np.uint16)

    def _grouped_wgrad(self, p, grid, block, smem, cluster, T, P, Q, G, offs, C, ldc, sc, map_x, map_y):
        """07_grouped_wgrad.cu's contract: X (T x P) and Y (T x Q) read through their maps (a
        batch of one, 64 x 64 boxes), the offsets from device memory, clamped as group_rows
        clamps them; C_g = X_g^T @ Y_g (P x Q, rows ldc and matrices sc apart) written for every
        group, zeros for an empty one."""
        import torch

        pr, prm = p.problem, p.params
        T, P, Q, G, ldc, sc = int(T), int(P), int(Q), int(G), int(ldc), int(sc)
        assert (P, Q, T, G) == (pr.M, pr.N, pr.K, pr.groups) and (pr.op_a, pr.op_b) == ("T", "N")
        items = G * -(-P // prm["BM"]) * -(-Q // prm["BN"])
        assert grid[1] == grid[2] == 1 and 0 < grid[0] <= min(132, items), grid
        assert block[0] == 128 * (prm["BM"] // 64 + 1) and smem == p.spec.launch(prm, pr).smem_bytes
        for m, cols in ((map_x, P), (map_y, Q)):
            assert (m.rows, m.cols, m.box_rows, m.box_cols, m.batch) == (T, cols, 64, 64, 1), m
        tdt = getattr(torch, pr.dtype)

        def values(raw):
            return torch.from_numpy(np.ascontiguousarray(raw)).view(tdt).double()

        x, y = values(self._through(map_x, 0, "uint16")), values(self._through(map_y, 0, "uint16"))
        ends = self.mem(int(offs), "int32", (G,), (1,)).tolist()
        c = self.mem(int(C), "uint16", (G, P, Q), (sc, ldc, 1))
        prev = 0
        for g, end in enumerate(ends):
            start = min(max(prev, 0), T)
            end, prev = min(max(end, start), T), end
            part = (x[start:end].t() @ y[start:end]).to(tdt).view(torch.uint16)
            c[g] = part.numpy().view(np.uint16)

    def _gemm(self, p, grid, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, sa, sb, sc):
        pr = p.problem
        M, N, K, lda, ldb, ldc = map(int, (M, N, K, lda, ldb, ldc))
        alpha, beta = float(alpha), float(beta)
        in_dt = "float32" if pr.dtype == "tf32" else pr.dtype
        item_in, item_out = ITEMSIZE[in_dt], ITEMSIZE[pr.out_dtype]
        splits, nz = grid[1], grid[2]
        bk = p.params.get("BK", K or 1)
        k_tiles = -(-K // bk)
        per_split = -(-k_tiles // splits)
        for z in range(nz):
            a_ptr, b_ptr = A + z * int(sa) * item_in, B + z * int(sb) * item_in
            c_ptr = C + z * int(sc) * (4 if splits > 1 else item_out)
            if pr.aligned16 and p.spec.family == "simt":  # what the VEC variants assume
                for ptr, ld, width, item in (
                    (a_ptr, lda, K if pr.op_a == "N" else M, item_in),
                    (b_ptr, ldb, N if pr.op_b == "N" else K, item_in),
                    (c_ptr, ldc, N, item_out),
                ):
                    assert ptr % 16 == 0 and ld * item % 16 == 0 and width * item % 16 == 0, (
                        f"{p.name_expression} launched on an operand its 16-byte accesses cannot read"
                    )
            # gemv, outer and gemv_mma: the stored rows their 16-byte accesses start at (a row's
            # end goes element by element): op(B)'s, and op(A)'s where the column path stages it
            # (gemv); C's (outer); x's and W's (gemv_mma)
            rows = {
                "A": (a_ptr, lda, M if pr.op_a == "N" else K, item_in),
                "B": (b_ptr, ldb, K if pr.op_b == "N" else N, item_in),
                "C": (c_ptr, ldc, M, item_out),
            }
            wide = []
            if p.spec.name == "gemv" and ", true, " in p.name_expression:
                wide = ["B", "A"] if (pr.op_a, pr.op_b) == ("N", "T") else ["B"]
            if p.spec.name == "outer" and ", true, " in p.name_expression:
                wide = ["C"]
            if p.spec.name == "gemv_mma":  # 16-byte loads of every row of x and W
                wide = ["A", "B"]
            for side in wide:
                ptr, ld, stored_rows, item = rows[side]
                assert ptr % 16 == 0 and (stored_rows <= 1 or ld * item % 16 == 0), (
                    f"{p.name_expression} launched on rows of {side} its 16-byte accesses cannot read"
                )
            a = self.operand(a_ptr, in_dt, pr.op_a, M, K, lda)
            b = self.operand(b_ptr, in_dt, pr.op_b, K, N, ldb)
            for y in range(splits):
                k0, k1 = min(K, y * per_split * bk), min(K, (y + 1) * per_split * bk)
                # split over K: FP32 partial products in the workspace, whatever C's type
                ws_dt, ws_item = ("float32", 4) if splits > 1 else (pr.out_dtype, item_out)
                c = self.operand(c_ptr + y * M * ldc * ws_item, ws_dt, "N", M, N, ldc)
                if alpha == 0:  # the kernels read neither A nor B then
                    acc = np.zeros((M, N))
                else:
                    acc = a[:, k0:k1].astype(np.float64) @ b[k0:k1, :].astype(np.float64)
                    if pr.dtype == "float32":
                        acc = acc.astype(np.float32).astype(np.float64)
                r = alpha * acc if beta == 0 else alpha * acc + beta * c.astype(np.float64)
                c[...] = r.astype(c.dtype)

    def _pack_rows(self, dtype, grid, *args):
        """The staging copies (gemmlab/pack_rows.cuh: wgmma's pack16, rung 8's pack32), one or
        two a launch (gridDim.y): each matrix of each copy, bit for bit, rows padded to 16 bytes
        with zeros."""
        assert len(args) == 18 and grid[1] in (1, 2), (grid, len(args))
        for y in range(grid[1]):
            rows, cols, src, ld, dst, ldd, src_stride, dst_stride, n = args[9 * y : 9 * y + 9]
            rows, cols, ld, ldd, n = map(int, (rows, cols, ld, ldd, n))
            eb = np.dtype(dtype).itemsize
            assert int(dst) % 16 == 0 and ldd * eb % 16 == 0 and ldd >= cols, (dst, ldd, cols)
            assert 1 <= n <= grid[2], (n, grid)
            for z in range(n):
                d = self.mem(int(dst) + eb * z * int(dst_stride), dtype, (rows, ldd), (ldd, 1))
                d[...] = 0
                d[:, :cols] = self.mem(int(src) + eb * z * int(src_stride), dtype, (rows, cols), (ld, 1))

    def _tf32_pack(self, grid, rows, cols, src, ld, dst, ldd, src_stride, dst_stride):
        """wgmma's TF32 copy (tf32_pack.cu's tf32_pack<false>): each matrix of the batch, rounded."""
        rows, cols, ld, ldd = map(int, (rows, cols, ld, ldd))
        assert int(dst) % 16 == 0 and ldd * 4 % 16 == 0 and ldd >= cols, (dst, ldd, cols)
        for z in range(grid[2]):
            d = self.mem(int(dst) + 4 * z * int(dst_stride), "float32", (rows, cols), (ldd, 1))
            d[...] = round_tf32(self.mem(int(src) + 4 * z * int(src_stride), "float32", (rows, cols), (ld, 1)))

    def _reduce(self, out_dtype, grid, M, N, splits, ws, alpha, beta, C, ldc, sc, choice, method):
        # No method is chosen on the emulated GPU: a record would be a real device's.
        assert int(choice) == 0 and int(method) == 0, (choice, method)
        M, N, splits, ldc = int(M), int(N), int(splits), int(ldc)
        alpha, beta = float(alpha), float(beta)
        for z in range(grid[1]):
            acc = np.zeros((M, N))
            for s in range(splits):
                acc += self.operand(ws + 4 * (z * splits + s) * M * N, "float32", "N", M, N, N)
            c = self.operand(C + z * int(sc) * ITEMSIZE[out_dtype], out_dtype, "N", M, N, ldc)
            c[...] = (alpha * acc if beta == 0 else alpha * acc + beta * c.astype(np.float64)).astype(c.dtype)


class ReduceKernel(str):
    """The split-K reduction as the emulator loads it: equal to "reduce", with the dtype it writes."""

    def __new__(cls, out_dtype: str):
        k = super().__new__(cls, "reduce")
        k.out_dtype = out_dtype
        return k


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits), to nearest, ties away from zero."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@dataclass(frozen=True)
class FakeMap:
    """What runtime.tma was asked to encode (bstride in bytes; batch None: a 2-D map)."""

    ptr: int
    rows: int
    cols: int
    ld: int
    dtype: str
    box_rows: int
    box_cols: int
    batch: int | None
    bstride: int


class _Workspace:
    kept = repeats = False  # a new buffer each call: nothing built on it is kept

    def __init__(self, emu, nbytes, zero_new=False):
        self.buf = emu.keep((np.zeros if zero_new else np.empty)(max(nbytes, 4), np.uint8))
        self.handle = self.buf.ctypes.data

    def close(self, stream=None):
        pass


def install(monkeypatch) -> Emulator:
    """Route gemmlab.matmul's GPU work to an Emulator; NumPy arrays play device arrays."""
    from gemmlab.core import executor, planner
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime import device as rt_device

    emu = Emulator()
    gpu = FakeGPU()
    # A cache of its own for the emulated calls (they hold emulated allocators and streams).
    cache = executor.PreparedCache()
    monkeypatch.setattr(executor, "CACHE", cache)
    monkeypatch.setattr(api, "CACHE", cache)
    monkeypatch.setattr(rt_device, "gpu_info", lambda device=0: gpu)
    monkeypatch.setattr(api, "make_current", lambda device: None)
    monkeypatch.setattr(executor, "make_current", lambda device: None)
    monkeypatch.setattr(executor, "stream_getter", lambda kind: lambda device: 0)

    def allocator(kind, shape, device, dtype):
        def alloc():
            x = emu.keep(np.empty(shape, np.dtype(dtype)))
            return x, x.ctypes.data

        return alloc

    monkeypatch.setattr(executor, "allocator", allocator)
    monkeypatch.setattr(executor, "allow_dynamic_smem", lambda *a: None)
    # The closures of Launcher.direct call cuda.core's launch itself: emulated calls take
    # Launcher.run, which makes the same launch through launch_shaped (patched below).
    monkeypatch.setattr(executor.Launcher, "direct", lambda self: None)
    monkeypatch.setattr(
        executor,
        "launch_shaped",
        lambda kernel, shape, stream, args: emu.launch(
            kernel, shape.grid, shape.block, shape.smem_bytes, stream, *args
        ),
    )
    monkeypatch.setattr(
        executor,
        "stream_workspace",
        lambda gpu, stream, nbytes, what, hint="", slot="scratch", zero_new=False, capturing=None: _Workspace(
            emu, nbytes, zero_new
        ),
    )
    monkeypatch.setattr(executor, "stream_is_capturing", lambda stream: False)

    from gemmlab.runtime import tma

    monkeypatch.setattr(tma, "_encode", lambda *a: FakeMap(*a))
    # a map copied and pointed elsewhere (executor._moved): the same record at the new address
    monkeypatch.setattr(executor, "moved_map", lambda m, address: dataclasses.replace(m, ptr=address))
    # What a rung's own arguments launch and allocate (wgmma's staging copy), on the emulator too.
    from gemmlab.runtime import launch as rt_launch

    monkeypatch.setattr(rt_launch, "launch", emu.launch)
    monkeypatch.setattr(
        rt_launch, "device_workspace", lambda gpu, stream, nbytes, what, hint="": _Workspace(emu, nbytes)
    )
    monkeypatch.setattr(rt_launch, "stream_is_capturing", lambda stream: False)

    def load_kernel(source, name, arch):
        if name == PACK16_KERNEL:
            return "pack16"
        if name == PACK32_KERNEL:
            return "pack32"
        if name == TF32_PACK_KERNELS[0]:
            return "tf32_pack"
        for d in SPLITK_REDUCE_DTYPES:
            if name == splitk_reduce_kernel(d):
                return ReduceKernel(d)
        return _PLANS[name]

    monkeypatch.setattr(rt_compile, "load_kernel", load_kernel)
    real_plan = planner.plan

    def plan(*args, **kwargs):  # remember which plan a name expression belongs to
        p = real_plan(*args, **kwargs)
        _PLANS[p.name_expression] = p
        return p

    monkeypatch.setattr(planner, "plan", plan)
    real_plan_call = executor.plan_call

    def plan_call(*args, **kwargs):  # a prepared call's plan, where planner.plan made none of its kernel
        p = real_plan_call(*args, **kwargs)
        _PLANS.setdefault(p.name_expression, p)
        return p

    monkeypatch.setattr(executor, "plan_call", plan_call)
    monkeypatch.setattr(
        api, "empty_like_kind", lambda op, shape, device, dtype="float32": emu.keep(np.empty(shape, np.dtype(dtype)))
    )
    monkeypatch.setattr(
        api,
        "contiguous_copy",
        lambda op, device, dtype=None: emu.keep(np.array(op.obj, dtype=dtype, order="C", copy=True)),
    )
    # NumPy operands are "device" arrays here: no staging through CuPy.
    monkeypatch.setattr(
        api,
        "_matmul_host",
        lambda call, a, b, out, ta, tb, kernel, precision, tp, key=None, bv=None: api._matmul_gpu(
            call, gpu, kernel, tp, precision, out, key, bv
        ),
    )
    _install_fp8(monkeypatch, emu)
    _install_grouped(monkeypatch, emu)
    # ... and take the prepared-call fast path as CuPy arrays do.
    from gemmlab.core import arrays

    monkeypatch.setitem(
        arrays.SIGNATURES,
        np.ndarray,
        lambda x: (x.ctypes.data, ("numpy", x.shape, x.strides, x.dtype, -1, not x.ctypes.data & 15)),
    )
    return emu


_PLANS: dict[str, object] = {}


def _install_fp8(monkeypatch, emu: Emulator) -> None:
    """FP8 calls (gemmlab.core.scaled) on the emulator: PyTorch CPU tensors over memory the
    emulator keeps (fp8_tensor, emulated_tensor) play device tensors, a bfloat16 result is
    float16 (NumPy has none), launches go to Emulator._wgmma_fp8, prepared calls to a cache of
    their own."""
    from gemmlab.core import executor, scaled
    from gemmlab.runtime import device as rt_device
    from gemmlab.runtime import launch as rt_launch

    monkeypatch.setattr(scaled, "PREPARED", executor.PreparedCache())
    monkeypatch.setattr(scaled, "check_devices", lambda *a, **k: None)  # CPU tensors play device ones
    monkeypatch.setattr(scaled, "stream_getter", lambda kind: lambda device: 0)
    monkeypatch.setattr(rt_device, "make_current", lambda device: None)
    monkeypatch.setattr(rt_launch, "allow_dynamic_smem", lambda *a: None)
    monkeypatch.setattr(rt_launch, "clusters_that_fit", lambda kernel, grid, *a: grid[0] // 2)
    monkeypatch.setattr(
        rt_launch,
        "launch_shaped",
        lambda kernel, shape, stream, args: emu.launch(
            kernel, shape.grid, shape.block, shape.smem_bytes, stream, *args, cluster=shape.cluster
        ),
    )

    def allocator(kind, shape, device, dtype):
        def alloc():
            t = emulated_tensor(emu, np.empty(shape, np.float32 if dtype == "float32" else np.float16))
            return t, t.data_ptr()

        return alloc

    monkeypatch.setattr(scaled, "allocator", allocator)
    real_plan = scaled.plan_scaled

    def plan_scaled(*args, **kwargs):
        p = real_plan(*args, **kwargs)
        _PLANS[p.name_expression] = p
        return p

    monkeypatch.setattr(scaled, "plan_scaled", plan_scaled)


def _install_grouped(monkeypatch, emu: Emulator) -> None:
    """Grouped calls (gemmlab.core.grouped) on the emulator, as _install_fp8's: PyTorch CPU
    tensors over memory the emulator keeps (emulated_tensor) play device tensors, launches go
    to Emulator._grouped (the launch patches are _install_fp8's), prepared calls to a cache of
    their own."""
    import torch

    from gemmlab.core import executor, grouped

    monkeypatch.setattr(grouped, "PREPARED", executor.PreparedCache())
    monkeypatch.setattr(grouped, "check_devices", lambda *a, **k: None)  # CPU tensors play device ones
    monkeypatch.setattr(grouped, "stream_getter", lambda kind: lambda device: 0)

    def allocator(kind, shape, device, dtype):
        def alloc():
            raw = emulated_tensor(emu, np.empty(shape, np.uint16))
            t = raw.view(getattr(torch, dtype))
            return t, t.data_ptr()

        return alloc

    monkeypatch.setattr(grouped, "allocator", allocator)
    real_plan = grouped.plan_grouped

    def plan_grouped(*args, **kwargs):
        p = real_plan(*args, **kwargs)
        _PLANS[p.name_expression] = p
        return p

    monkeypatch.setattr(grouped, "plan_grouped", plan_grouped)
    real_wgrad = grouped.plan_grouped_wgrad

    def plan_grouped_wgrad(*args, **kwargs):
        p = real_wgrad(*args, **kwargs)
        _PLANS[p.name_expression] = p
        return p

    monkeypatch.setattr(grouped, "plan_grouped_wgrad", plan_grouped_wgrad)


def emulated_tensor(emu: Emulator, x: np.ndarray):
    """A PyTorch CPU tensor over a copy of ``x`` in memory the emulator keeps (64-byte aligned)."""
    import torch

    buf = emu.keep(np.empty(x.nbytes + 64, np.uint8))
    off = -buf.ctypes.data % 64
    view = buf[off : off + x.nbytes].view(x.dtype).reshape(x.shape)
    view[...] = x
    return torch.from_numpy(view)


def fp8_tensor(emu: Emulator, t):
    """A copy of the FP8 CPU tensor ``t`` (2-D) in emulated device memory, with t's layout:
    row-major, or column-major (a transposed row-major tensor)."""
    import torch

    col = t.dim() == 2 and t.stride(0) == 1 and t.shape[0] > 1
    src = t.t() if col else t
    raw = emulated_tensor(emu, src.contiguous().view(torch.uint8).numpy()).view(t.dtype)
    return raw.t() if col else raw
