"""The FP8 rung (wgmma_fp8, Hopper) without a GPU: where it runs, its parameters and rules, the
scales' shapes and what they say, the tensor maps of FP8 operands, the checks of an FP8 call
(each error naming what is wrong), the plan, and one launch's arguments run through an
emulation of the kernel's contract (tests/emulated_gpu.py).  On a GPU: test_wgmma_fp8.py."""

import numpy as np
import pytest

import gemmlab
from gemmlab.core import executor, scaled
from gemmlab.kernels import registry
from gemmlab.kernels.spec import Problem
from gemmlab.kernels.tensor import wgmma_fp8 as fp8
from gemmlab.runtime import tma

import emulated_gpu

torch = pytest.importorskip("torch")

SPEC = registry.get("wgmma_fp8")
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


# -- the rung ---------------------------------------------------------------------------------


def test_rung_follows_wgmma_on_hopper_only():
    names = [s.name for s in registry.ladder("tensor")]
    assert names.index("wgmma_fp8") == names.index("wgmma") + 1
    assert SPEC.arches == ("sm_90a",) and SPEC.layouts == (("N", "T"),)
    assert SPEC.dtypes == ("float8_e4m3fn", "float8_e5m2") and SPEC.out_dtypes == ("bfloat16", "float32")
    with pytest.raises(ValueError, match=r"kernel 'wgmma_fp8' does not run on NVIDIA A100 \(sm_80\): it needs sm_90a"):
        SPEC.check_arch("sm_80", "NVIDIA A100")


def test_every_configuration_fits_shared_memory_and_the_default_is_one():
    configs = SPEC.configurations()
    assert SPEC.defaults() in configs
    assert SPEC.defaults() == {"BM": 128, "BN": 128, "STAGES": 6, "CLUSTER": 1, "PROMOTE": 4}
    for p in configs:
        smem = (
            p["STAGES"] * (p["BM"] + p["BN"]) * 128
            + (p["BM"] // 64) * 4 * 2560
            + 16 * p["STAGES"]
            + 4 * p["STAGES"] * (p["BM"] + 4)
            + 1024
        )
        assert fp8.wgmma_fp8_smem(p) == smem <= 227 * 1024


def test_template_arguments():
    prob = Problem(1, 1, 1, True, "float8_e4m3fn", "bfloat16", "N", "T", dtype_b="float8_e5m2", scaling="row")
    p = SPEC.defaults()
    assert SPEC.name_expression(p, prob) == "gemmlab::wgmma_fp8_gemm<4, 5, 1, 128, 128, 6, 1, 0, 4, 'N', 'T'>"
    # Block scales promote at every K-step, whatever PROMOTE says; float32 out is type code 3.
    block = Problem(1, 1, 1, True, "float8_e5m2", "float32", "N", "T", dtype_b="float8_e5m2", scaling="block")
    assert SPEC.name_expression({**p, "PROMOTE": 0}, block) == (
        "gemmlab::wgmma_fp8_gemm<5, 5, 3, 128, 128, 6, 1, 1, 1, 'N', 'T'>"
    )
    # "tensor" is "row"'s instantiation: outer scales whose strides are 0.
    tensor = Problem(1, 1, 1, True, "float8_e4m3fn", "bfloat16", "N", "T", dtype_b="float8_e5m2", scaling="tensor")
    assert SPEC.name_expression(p, tensor) == SPEC.name_expression(p, prob)


def test_every_variant_is_built():
    assert len(SPEC.variants) == 2 * 2 * 2 * 2
    assert {(v.dtype, v.dtype_b, v.out_dtype, v.scaling) for v in SPEC.variants} == {
        (a, b, o, s)
        for a in fp8.FP8_DTYPES
        for b in fp8.FP8_DTYPES
        for o in fp8.FP8_OUT_DTYPES
        for s in ("row", "block")
    }


@pytest.mark.parametrize(
    "M, N, cluster, sm_count, blocks",
    [
        (4096, 4096, 1, 132, 132),
        (100, 300, 1, 132, 3),
        (300, 100, 2, 132, 4),  # 3 tile-rows: 2 clusters of 2 blocks
        (8192, 8192, 2, 132, 132),
        (1, 1, 1, 8, 1),
    ],
)
def test_geometry_is_a_persistent_grid(M, N, cluster, sm_count, blocks):
    p = {**SPEC.defaults(), "CLUSTER": cluster}
    prob = Problem(M, N, 256, True, "float8_e4m3fn", "bfloat16", "N", "T", sm_count=sm_count)
    geo = SPEC.launch(p, prob)
    assert geo.persistent and geo.grid == (blocks, 1, 1) and geo.cluster == (cluster, 1, 1)
    assert geo.block == (384, 1, 1) and geo.smem_bytes == fp8.wgmma_fp8_smem(p)


# -- scales -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a_shape, b_shape, kind",
    [
        ((), (), "tensor"),
        ((1,), (1, 1), "tensor"),
        ((300, 1), (1, 500), "row"),
        ((300,), (500,), "row"),
        ((1,), (1, 500), "row"),  # per tensor on one side, per column on the other
        ((300, 1), (), "row"),
        ((300, 8), (4, 8), "block"),  # K = 1000: 8 blocks; N = 500: 4
    ],
)
def test_scale_shapes_say_the_scaling(a_shape, b_shape, kind):
    a, b = torch.ones(a_shape), torch.ones(b_shape)
    got, strides = fp8.fp8_scale_layout(300, 500, 1000, a.shape, a.stride(), b.shape, b.stride())
    assert got == kind
    if kind == "block":
        assert strides == (8, 1, 8, 1)
    else:
        assert strides[1] == strides[3] == 0  # outer scales have no K stride
        assert strides[0] == (0 if a.numel() == 1 else 1) and strides[2] == (0 if b.numel() == 1 else 1)


def test_block_scales_of_any_strides():
    a = torch.ones(8, 300).t()  # (300, 8), column-major
    b = torch.ones(8, 4).t()
    assert fp8.fp8_scale_layout(300, 500, 1000, a.shape, a.stride(), b.shape, b.stride()) == (
        "block",
        (1, 300, 1, 4),
    )


@pytest.mark.parametrize(
    "a_shape, b_shape, bad",
    [
        ((300, 2), (1, 500), "scale_a has shape \\(300, 2\\)"),
        ((300, 1), (500, 1), "scale_b has shape \\(500, 1\\)"),
        ((300, 8), (8, 4), "scale_b has shape \\(8, 4\\)"),  # B's blocks as (K-block, N-block)
        ((299,), (500,), "scale_a has shape \\(299,\\)"),
    ],
)
def test_scale_shapes_that_fit_nothing_are_named(a_shape, b_shape, bad):
    a, b = torch.ones(a_shape), torch.ones(b_shape)
    with pytest.raises(
        ValueError, match=bad + r".*300 x 500 x 1000.*scale_a \(300, 8\) \(row, K-block\) and scale_b \(4, 8\)"
    ):
        fp8.fp8_scale_layout(300, 500, 1000, a.shape, a.stride(), b.shape, b.stride())


def test_one_k_block_reads_alike_either_way():
    """K <= 128 and N <= 128: (M, 1) and (1, 1) are per row and per tensor, or one block each; the
    outer reading is taken, and it computes the same product."""
    assert fp8.fp8_scale_layout(300, 100, 128, (300, 1), (1, 1), (1, 1), (1, 1))[0] == "row"


# -- tensor maps ----------------------------------------------------------------------------------


def test_fp8_elements_are_bytes_to_the_copy_engine():
    assert tma.element_bytes("float8_e4m3fn") == tma.element_bytes("float8_e5m2") == 1
    assert tma.padded_ld(100, 1) == 112


def _plan(M, N, K, **kw):
    scaling = kw.pop("scaling", "tensor")
    return scaled.plan_scaled(
        M,
        N,
        K,
        kw.pop("dtype", "float8_e4m3fn"),
        kw.pop("dtype_b", None),
        kw.pop("out_dtype", "bfloat16"),
        scaling,
        **kw,
    )


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("bm, bn", [(128, 128), (64, 64)])
def test_tensor_maps_box_128_values_of_k(monkeypatch, bm, bn, cluster):
    monkeypatch.setattr(tma, "_encode", lambda *a: emulated_gpu.FakeMap(*a))
    p = _plan(300, 500, 1000, dtype_b="float8_e5m2", kernel="wgmma_fp8", BM=bm, BN=bn, CLUSTER=cluster)
    ops = tma.Operands(0x10000, 1008, 0x40000, 1024, 0x80000, 500)
    args = fp8.wgmma_fp8_args(p, ops, 1.0, 0.0, fp8.Fp8Scales(0x90000, 1, 0, 0x98000, 1, 0))
    map_a, map_b = args[14], args[15]
    assert map_a == emulated_gpu.FakeMap(0x10000, 300, 1000, 1008, "float8_e4m3fn", bm, 128, 1, map_a.bstride)
    assert map_b == emulated_gpu.FakeMap(0x40000, 500, 1000, 1024, "float8_e5m2", bn // cluster, 128, 1, map_b.bstride)
    assert args[16:] == (0x90000, 1, 0, 0x98000, 1, 0)
    assert len(args) == 22  # 05_wgmma_fp8.cu's parameters


def test_tensor_maps_refuse_operands_off_the_grid(monkeypatch):
    monkeypatch.setattr(tma, "_encode", lambda *a: emulated_gpu.FakeMap(*a))
    p = _plan(300, 500, 1000)
    scales = fp8.Fp8Scales(0, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="TMA cannot read b in place .*1001 bytes apart"):
        fp8.wgmma_fp8_args(p, tma.Operands(0x10000, 1008, 0x40000, 1001, 0x80000, 500), 1.0, 0.0, scales)
    with pytest.raises(ValueError, match="TMA cannot read a in place .*address 0x10008"):
        fp8.wgmma_fp8_args(p, tma.Operands(0x10008, 1008, 0x40000, 1008, 0x80000, 500), 1.0, 0.0, scales)


# -- the plan -----------------------------------------------------------------------------------


def test_plan_takes_the_rung_and_says_why():
    p = _plan(1024, 2048, 4096, arch="sm_90a")  # 8 x 8 tiles of 128 x 256: too few for them
    assert p.spec.name == "wgmma_fp8" and p.params == SPEC.defaults()
    assert "FP8 inputs" in p.reason and p.problem.scaling == "tensor" and p.problem.dtype_b == "float8_e4m3fn"
    assert "too few tiles" in p.reason


def test_large_products_take_the_wide_tile():
    """128 x 256 tiles (promoting every K-step) where they fill two waves of the SMs: from 264
    tiles on 132 SMs, whatever the scaling; fewer tiles keep the defaults."""
    from gemmlab.kernels.tensor.wgmma_fp8 import WIDE_TILE, fp8_auto_tile

    assert fp8_auto_tile(4096, 4096, 132) == WIDE_TILE  # 32 x 16 = 512 tiles
    assert fp8_auto_tile(128 * 12, 256 * 22, 132) == WIDE_TILE  # 264
    assert fp8_auto_tile(128 * 12, 256 * 22 - 1, 132) == WIDE_TILE  # the last column of tiles is partial
    assert fp8_auto_tile(128 * 12, 256 * 21, 132) == {}  # 252
    for scaling in ("tensor", "row", "block"):
        p = _plan(8192, 8192, 4096, scaling=scaling, arch="sm_90a")
        assert p.params == {**SPEC.defaults(), **WIDE_TILE} and "128 x 256" in p.reason, p.describe()
    assert _plan(8192, 8192, 4096, arch="sm_90a", sm_count=1025).params == SPEC.defaults()  # 2048 tiles


def test_plan_refuses_other_gpus_and_other_kernels():
    with pytest.raises(ValueError, match=r"does not run on NVIDIA A100 \(sm_80\): it needs sm_90a: wgmma.mma_async"):
        _plan(256, 256, 256, arch="sm_80", gpu_name="NVIDIA A100")
    with pytest.raises(ValueError, match="FP8 inputs run on 'wgmma_fp8' only"):
        _plan(256, 256, 256, kernel="wgmma")
    with pytest.raises(TypeError, match="FP8 products write bfloat16 or float32, not float16"):
        _plan(256, 256, 256, out_dtype="float16")
    with pytest.raises(ValueError, match=r"tile parameters \['BM'\] need a named kernel.*auto takes PROMOTE alone"):
        _plan(256, 256, 256, BM=64, PROMOTE=0)
    with pytest.raises(ValueError, match="tile parameter BN=512 is not legal"):
        _plan(256, 256, 256, kernel="wgmma_fp8", BN=512)
    # BN = 256 with the other defaults: too much shared memory, and PROMOTE 4, named both.
    with pytest.raises(ValueError, match=r"must fit in the 227 KiB.*; BN = 256 promotes every K-step or never"):
        _plan(256, 256, 256, kernel="wgmma_fp8", BN=256)
    for promote in (0, 1):
        p = _plan(256, 256, 256, kernel="wgmma_fp8", BM=128, BN=256, STAGES=4, PROMOTE=promote)
        assert p.params == {"BM": 128, "BN": 256, "STAGES": 4, "CLUSTER": 1, "PROMOTE": promote}


def test_plan_refuses_a_tile_beyond_the_gpus_shared_memory():
    with pytest.raises(ValueError, match="needs 221376 bytes of shared memory per block; a small GPU allows 100000"):
        _plan(256, 256, 256, smem_limit=100000, gpu_name="a small GPU")


# -- the checks of a call (CPU tensors: the device is checked last) ------------------------------


def _operands(M, N, K, da=E4M3, db=E4M3):
    a = torch.randn(M, K).to(da)
    b = torch.randn(N, K).to(db).t()  # column-major K x N
    return a, b


def test_checks_accept_the_layout_and_name_the_device_last():
    a, b = _operands(64, 32, 128)
    assert scaled.validate_scaled(a, b, torch.ones(()), torch.ones(())).scaling == "tensor"
    with pytest.raises(ValueError, match="a is on the cpu; an FP8 product runs on a CUDA device"):
        scaled.matmul_scaled(a, b, torch.ones(()), torch.ones(()))


def test_checks_name_each_problem():
    a, b = _operands(64, 32, 128)
    one = torch.ones(())
    with pytest.raises(ValueError, match="needs both scale_a and scale_b"):
        scaled.validate_scaled(a, b, None, one)
    with pytest.raises(TypeError, match="scale_a must be a PyTorch tensor.*got ndarray"):
        scaled.validate_scaled(a, b, np.ones(()), one)
    with pytest.raises(TypeError, match="b has dtype bfloat16; with scale_a / scale_b both operands are FP8"):
        scaled.validate_scaled(a, b.to(torch.bfloat16), one, one)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        scaled.validate_scaled(a, _operands(64, 32, 96)[1], one, one)
    with pytest.raises(TypeError, match="scale_b has dtype float64; scales are float32"):
        scaled.validate_scaled(a, b, one, one.double())
    with pytest.raises(ValueError, match=r"b \(128 x 32, strides \(32, 1\)\) is not column-major.*layout 'N'"):
        scaled.validate_scaled(a, b.contiguous(), one, one)
    with pytest.raises(ValueError, match=r"a \(64 x 128, strides \(1, 64\)\) is not row-major.*a.contiguous\(\)"):
        scaled.validate_scaled(a.t().contiguous().t(), b, one, one)
    with pytest.raises(ValueError, match="scale_b has shape \\(33,\\)"):
        scaled.validate_scaled(a, b, one, torch.ones(33))
    with pytest.raises(TypeError, match="FP8 products write bfloat16 or float32, not float16"):
        scaled.validate_scaled(a, b, one, one, out_dtype=torch.float16)
    with pytest.raises(ValueError, match="trans_a=False"):
        scaled.validate_scaled(a, b, one, one, trans_a=True)
    a3 = torch.randn(2, 64, 128).to(E4M3)
    with pytest.raises(ValueError, match="a has 3 dimensions"):
        scaled.validate_scaled(a3, b, one, one)


def test_checks_refuse_rows_off_the_16_byte_grid():
    a, b = _operands(64, 32, 120)  # K = 120 bytes a row
    one = torch.ones(())
    with pytest.raises(ValueError, match="a: TMA reads FP8 operands .*rows 120 bytes apart"):
        scaled.validate_scaled(a, b, one, one)


def test_checks_of_out():
    a, b = _operands(64, 32, 128)
    one = torch.ones(())
    with pytest.raises(TypeError, match="out_dtype float32 differs from out's dtype bfloat16"):
        scaled.validate_scaled(a, b, one, one, out=torch.empty(64, 32, dtype=torch.bfloat16), out_dtype="float32")
    with pytest.raises(ValueError, match=r"out has shape \(32, 64\)"):
        scaled.validate_scaled(a, b, one, one, out=torch.empty(32, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="must be row-major with unit column stride"):
        scaled.validate_scaled(a, b, one, one, out=torch.empty(32, 64, dtype=torch.float32).t())


def test_matmul_routes_fp8_and_names_what_is_missing():
    a, b = _operands(64, 32, 128)
    with pytest.raises(ValueError, match="needs both scale_a and scale_b"):
        gemmlab.matmul(a, b)
    one = torch.ones(())
    with pytest.raises(TypeError, match="bias has dtype float32; it must have the result's dtype, bfloat16"):
        gemmlab.matmul(a, b, scale_a=one, scale_b=one, bias=torch.ones(32))
    with pytest.raises(ValueError, match=r"bias has shape \(64, 2\), which does not broadcast"):
        gemmlab.matmul(a, b, scale_a=one, scale_b=one, bias=torch.ones(64, 2).bfloat16())
    out = torch.empty(64, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bias shares memory with out"):
        gemmlab.matmul(a, b, scale_a=one, scale_b=one, out=out, bias=out[0])
    with pytest.raises(ValueError, match="a is on the cpu"):
        gemmlab.matmul(a, b, scale_a=torch.ones(()), scale_b=torch.ones(()))


# -- one launch, emulated -------------------------------------------------------------------------


class _Gpu:
    ordinal, name, arch, sm_count, max_smem_per_block_optin = 0, "emulated H200", "sm_90a", 132, 227 * 1024


def _emulated_call(monkeypatch, M, N, K, da, db, out_dtype, sa, sb, alpha=1.0, beta=0.0, **tile):
    """scaled.launch_scaled on NumPy buffers standing for device memory, the kernel replaced by
    emulated_gpu's contract of 05_wgmma_fp8.cu: checks the arguments the host builds -- maps,
    scales' addresses and strides, launch shape -- against the FP64 product of the dequantised
    operands."""
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime import launch as rt_launch

    emu = emulated_gpu.Emulator()
    monkeypatch.setattr(tma, "_encode", lambda *a: emulated_gpu.FakeMap(*a))
    monkeypatch.setattr(rt_launch, "allow_dynamic_smem", lambda *a: None)
    monkeypatch.setattr(rt_launch, "clusters_that_fit", lambda kernel, grid, *a: grid[0] // 2)
    monkeypatch.setattr(
        rt_launch,
        "launch_shaped",
        lambda kernel, shape, stream, args: emu.launch(
            kernel, shape.grid, shape.block, shape.smem_bytes, stream, *args, cluster=shape.cluster
        ),
    )
    a, b = _operands(M, N, K, da, db)

    # The buffers, 16-byte aligned as device allocations are.
    def device(t):
        t = t.contiguous().reshape(-1)
        raw = t.view(torch.uint8).numpy() if t.element_size() == 1 else t.numpy()
        buf = emu.keep(np.empty(raw.nbytes + 16, np.uint8))
        off = (-buf.ctypes.data) % 16
        buf[off : off + raw.nbytes] = raw.view(np.uint8).ravel()
        return buf.ctypes.data + off

    A, B = device(a), device(b.t())  # B stored N x K
    SA, SB = device(sa.float()), device(sb.float())
    call = scaled.validate_scaled(a, b, sa.contiguous(), sb.contiguous(), out_dtype=out_dtype)
    p = scaled.plan_scaled(
        M, N, K, call.dtype, call.dtype_b, call.out_dtype, call.scaling, kernel="wgmma_fp8" if tile else "auto", **tile
    )
    monkeypatch.setattr(rt_compile, "load_kernel", lambda source, name, arch: p)
    odt = np.float32 if out_dtype == "float32" else np.float16
    c0 = np.random.default_rng(1).standard_normal((M, N)).astype(odt)
    C = emu.keep(c0.copy())
    scaled.launch_scaled(p, call, _Gpu(), 0, A, B, C.ctypes.data, N, SA, SB, alpha, beta)
    # The reference: FP64 products of the dequantised operands.
    a64, b64 = a.double(), b.double()
    if call.scaling == "block":
        ref = torch.zeros(M, N, dtype=torch.float64)
        for kb in range(-(-K // 128)):
            ks = slice(128 * kb, 128 * kb + 128)
            ref += (
                (a64[:, ks] @ b64[ks, :])
                * sa[:, kb : kb + 1].double()
                * sb[:, kb].double().repeat_interleave(128)[:N][None, :]
            )
    else:
        ref = (sa.double().reshape(-1, 1) * a64) @ (b64 * sb.double().reshape(1, -1))
    ref = alpha * ref.numpy() + beta * c0.astype(np.float64)
    return C, ref, p


@pytest.mark.parametrize(
    "M, N, K, da, db, out_dtype, scaling",
    [
        (300, 200, 384, E4M3, E4M3, "bfloat16", "tensor"),
        (1, 130, 256, E4M3, E5M2, "float32", "row"),
        (257, 129, 1000 - 1000 % 16, E5M2, E4M3, "float32", "block"),
        (64, 64, 16, E5M2, E5M2, "bfloat16", "row"),
    ],
)
def test_emulated_launch_computes_the_scaled_product(monkeypatch, M, N, K, da, db, out_dtype, scaling):
    kb, nb = -(-K // 128), -(-N // 128)
    rng = torch.Generator().manual_seed(0)
    shapes = {"tensor": ((), ()), "row": ((M, 1), (1, N)), "block": ((M, kb), (nb, kb))}[scaling]
    sa = torch.exp2(torch.randint(-6, 7, shapes[0], generator=rng).float())
    sb = torch.exp2(torch.randint(-6, 7, shapes[1], generator=rng).float())
    C, ref, p = _emulated_call(monkeypatch, M, N, K, da, db, out_dtype, sa, sb, alpha=0.5)
    assert p.problem.scaling == scaling
    np.testing.assert_allclose(C.astype(np.float64), ref, rtol=2e-3 if out_dtype == "bfloat16" else 1e-6, atol=1e-3)


def test_emulated_launch_with_beta_and_a_cluster(monkeypatch):
    sa, sb = torch.full((), 0.25), torch.full((), 4.0)
    C, ref, p = _emulated_call(monkeypatch, 200, 300, 256, E4M3, E4M3, "float32", sa, sb, 2.0, -1.0, CLUSTER=2)
    assert p.params["CLUSTER"] == 2
    np.testing.assert_allclose(C, ref, rtol=1e-6, atol=1e-4)


# -- torch.ops.gemmlab.scaled_mm: torch._scaled_mm's schema -------------------------------------


def test_scaled_mm_has_torch_scaled_mms_schema():
    import gemmlab.torch  # noqa: F401  (registers the operators)

    ours = torch.ops.gemmlab.scaled_mm.default._schema
    theirs = torch.ops.aten._scaled_mm.default._schema
    assert [(a.name, str(a.type), a.default_value) for a in ours.arguments] == [
        (a.name, str(a.type), a.default_value) for a in theirs.arguments
    ]
    assert [str(r.type) for r in ours.returns] == [str(r.type) for r in theirs.returns]


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_scaled_mm_fake_gives_the_result_shape(out_dtype):
    import gemmlab.torch as gt

    a = torch.empty(300, 128, dtype=E4M3, device="meta")
    b = torch.empty(200, 128, dtype=E5M2, device="meta").t()
    s = torch.empty((), device="meta")
    out = gt.scaled_mm(a, b, s, s, out_dtype=out_dtype)
    assert out.shape == (300, 200) and out.dtype == out_dtype and out.device.type == "meta"


def test_scaled_mm_refuses_what_it_does_not_build():
    import gemmlab.torch as gt

    a = torch.empty(64, 128, dtype=E4M3, device="meta")
    b = torch.empty(32, 128, dtype=E4M3, device="meta").t()
    s = torch.empty((), device="meta")
    with pytest.raises(TypeError, match="torch._scaled_mm's default, an FP8 result, is not built"):
        gt.scaled_mm(a, b, s, s)
    with pytest.raises(ValueError, match="adds a bias of N values in out_dtype"):
        gt.scaled_mm(a, b, s, s, bias=torch.empty(32, device="meta"), out_dtype=torch.bfloat16)
    bias = torch.empty(32, device="meta", dtype=torch.bfloat16)
    assert gt.scaled_mm(a, b, s, s, bias=bias, out_dtype=torch.bfloat16).shape == (64, 32)
    with pytest.raises(ValueError, match="takes no scale_result"):
        gt.scaled_mm(a, b, s, s, scale_result=s, out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="takes float8_e4m3fn / float8_e5m2 tensors"):
        gt.scaled_mm(a.to(torch.bfloat16), b, s, s, out_dtype=torch.bfloat16)


def test_gemmlab_plan_takes_fp8_dtypes():
    p = gemmlab.plan("auto", 300, 500, 1024, dtype="float8_e4m3fn", out_dtype="float32", op_b="T", arch="sm_90a")
    assert p.spec.name == "wgmma_fp8" and p.problem.scaling == "tensor"
    p = gemmlab.plan(
        "wgmma_fp8",
        300,
        500,
        1024,
        dtype="float8_e5m2",
        dtype_b="float8_e4m3fn",
        out_dtype="bfloat16",
        op_b="T",
        scaling="block",
        BM=64,
        BN=64,
    )
    assert p.name_expression == "gemmlab::wgmma_fp8_gemm<5, 4, 1, 64, 64, 6, 1, 1, 1, 'N', 'T'>"
    with pytest.raises(ValueError, match="FP8 operands in layout NN: FP8 wgmma reads both operands K-major"):
        gemmlab.plan("auto", 300, 500, 1024, dtype="float8_e4m3fn", out_dtype="float32")
    with pytest.raises(ValueError, match="one matrix so far"):
        gemmlab.plan("auto", 300, 500, 1024, dtype="float8_e4m3fn", out_dtype="float32", op_b="T", batch=2)
    with pytest.raises(TypeError, match="kernel 'wgmma_fp8' computes float8_e4m3fn, float8_e5m2, not bfloat16"):
        gemmlab.plan("wgmma_fp8", 300, 500, 1024, dtype="bfloat16", out_dtype="bfloat16")


def test_launch_arguments_pack_with_their_tensor_maps(monkeypatch):
    """The arguments launch_scaled hands the driver pack as MapParams (cuda.core's packer takes no
    tensor maps), in 05_wgmma_fp8.cu's parameter order: ints, alpha, A, lda, B, ldb, beta, C,
    ldc, three batch strides, the two maps, then each scale's address and two strides."""
    driver = pytest.importorskip("cuda.bindings.driver")
    from gemmlab.runtime.launch import MapParams, PackedArgs

    monkeypatch.setattr(tma, "_encode", lambda *a: driver.CUtensorMap())
    p = _plan(300, 500, 1024)
    ops = tma.Operands(0x10000, 1024, 0x40000, 1024, 0x80000, 500)
    args = fp8.wgmma_fp8_args(p, ops, 1.0, 0.0, fp8.Fp8Scales(0x90000, 1, 0, 0x98000, 1, 0))
    holder = PackedArgs(args).packed()
    assert isinstance(holder, MapParams)
    assert holder._layout.maps == (14, 15)
    assert holder._layout.fmt == "@22Q" + "iiif" + "Qi" + "Qi" + "f" + "Qi" + "qqq" + "Qqq" + "Qqq"


def test_scaled_mm_schema_mutates_and_aliases_nothing():
    """The schema's half of what opcheck's test_schema checks (which needs float8 arithmetic that
    PyTorch does not define; test_wgmma_fp8.py checks the inputs stay unchanged byte for byte)."""
    import gemmlab.torch  # noqa: F401

    schema = torch.ops.gemmlab.scaled_mm.default._schema
    assert not schema.is_mutable
    assert all(x.alias_info is None for x in list(schema.arguments) + list(schema.returns))


# -- prepared FP8 calls, emulated: what a repeated call builds and launches -----------------------


def _counted(monkeypatch):
    """Counts of what an FP8 call checks, plans and builds: calls of validate_scaled, plan_scaled,
    wgmma_fp8_args and tensor maps encoded."""
    counts = {"validate": 0, "plan": 0, "args": 0, "maps": 0}

    def counting(name, f):
        def wrapped(*a, **k):
            counts[name] += 1
            return f(*a, **k)

        return wrapped

    monkeypatch.setattr(scaled, "validate_scaled", counting("validate", scaled.validate_scaled))
    monkeypatch.setattr(scaled, "plan_scaled", counting("plan", scaled.plan_scaled))
    monkeypatch.setattr(scaled, "wgmma_fp8_args", counting("args", scaled.wgmma_fp8_args))
    monkeypatch.setattr(tma, "_encode", counting("maps", tma._encode))
    return counts


def _fp8_call(emu, M, N, K, da=E4M3, db=E4M3, kind="tensor", seed=0):
    """a, b, scale_a, scale_b in emulated device memory, and the FP64 reference of their product."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) * 4).to(da)
    bt = (torch.randn(N, K, generator=g) * 4).to(db)
    kb, nb = -(-K // 128), -(-N // 128)
    shapes = {"tensor": ((), ()), "row": ((M, 1), (1, N)), "block": ((M, kb), (nb, kb))}[kind]
    sa, sb = (torch.exp2(torch.randint(-3, 4, s, generator=g).float()) for s in shapes)
    if kind == "block":
        ref = torch.zeros(M, N, dtype=torch.float64)
        for k in range(kb):
            ks = slice(128 * k, 128 * k + 128)
            part = a[:, ks].double() @ bt[:, ks].double().t()
            ref += part * sa[:, k : k + 1].double() * sb[:, k].double().repeat_interleave(128)[:N][None, :]
    else:
        ref = (sa.double().reshape(-1, 1) * a.double()) @ (bt.double().t() * sb.double().reshape(1, -1))
    dev = lambda t: emulated_gpu.emulated_tensor(emu, t.numpy())  # noqa: E731
    return emulated_gpu.fp8_tensor(emu, a), emulated_gpu.fp8_tensor(emu, bt.t()), dev(sa), dev(sb), ref


@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
@pytest.mark.parametrize("shape", ["row", "column", "matrix"])
def test_emulated_bias(monkeypatch, kind, shape):
    """A bias of N (torch._scaled_mm's), a column (M, 1) or a whole matrix, in the result's dtype,
    added after the product (alpha times the scaled sums, plus beta * out where out is given),
    on new tensors each time; the third call has the first's signature, so a, b, the scales
    and out are not checked again (the bias is)."""
    emu = emulated_gpu.install(monkeypatch)
    M, N, K = 200, 300, 384
    a, b, sa, sb, ref = _fp8_call(emu, M, N, K, kind=kind)
    checked = []
    real = scaled.validate_scaled
    monkeypatch.setattr(scaled, "validate_scaled", lambda *a, **k: checked.append(1) or real(*a, **k))
    for seed, given in ((1, True), (2, False), (3, True)):
        before = len(checked)
        g = torch.Generator().manual_seed(seed)
        host = torch.randn({"row": (N,), "column": (M, 1), "matrix": (M, N)}[shape], generator=g)
        bias = emulated_gpu.emulated_tensor(emu, host.numpy())
        c0 = torch.randn(M, N, generator=g)
        out = emulated_gpu.emulated_tensor(emu, c0.numpy()) if given else None
        beta = 0.5 if given else 0.0
        r = gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out, alpha=-1.5, beta=beta, bias=bias, out_dtype="float32")
        assert r is out or not given
        want = -1.5 * ref + host.double() + beta * c0.double()
        np.testing.assert_allclose(r.numpy(), want.numpy(), rtol=1e-6, atol=1e-3)
        assert (len(checked) == before) == (seed == 3)


def test_emulated_bias_refuses_transposed_operands_as_the_product_does(monkeypatch):
    """trans_a / trans_b are refused with a bias as without one, before anything is written."""
    emu = emulated_gpu.install(monkeypatch)
    a, b, sa, sb, _ = _fp8_call(emu, 200, 300, 384)
    bias = emulated_gpu.emulated_tensor(emu, np.ones(300, np.float32))
    out = emulated_gpu.emulated_tensor(emu, np.full((200, 300), 7.0, np.float32))
    for trans in ({"trans_a": True}, {"trans_b": True}):
        with pytest.raises(ValueError, match="FP8 products take trans_a=False, trans_b=False"):
            gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out, bias=bias, **trans)
    assert (out.numpy() == 7.0).all()


def test_a_repeated_fp8_call_builds_nothing_and_launches_what_a_fresh_one_would(monkeypatch):
    emu = emulated_gpu.install(monkeypatch)
    counts = _counted(monkeypatch)
    M, N, K = 200, 300, 512
    a, b, sa, sb, ref = _fp8_call(emu, M, N, K)
    out = emulated_gpu.emulated_tensor(emu, np.zeros((M, N), np.float32))
    r = gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out)
    assert r is out
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6, atol=1e-3)
    # The first call: checked and planned once, its arguments built twice (the second with the
    # addresses moved, to learn where they sit), its two maps encoded for each.
    assert counts == {"validate": 1, "plan": 1, "args": 2, "maps": 4}
    assert len(scaled.PREPARED) == 1
    first = emu.calls[-1]
    out.zero_()
    gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out)
    assert counts == {"validate": 1, "plan": 1, "args": 2, "maps": 4}  # nothing new
    assert emu.calls[-1][1:] == first[1:] and emu.calls[-1][2] == first[2]
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6, atol=1e-3)
    assert gemmlab.last_plan() is scaled.last_scaled_plan() and gemmlab.last_plan().spec.name == "wgmma_fp8"
    # New addresses of every tensor, the same signature: nothing checked, planned or encoded,
    # the arguments moved; exactly what a fresh call launches on them.
    a2, b2, sa2, sb2, ref2 = _fp8_call(emu, M, N, K, seed=1)
    out2 = emulated_gpu.emulated_tensor(emu, np.zeros((M, N), np.float32))
    gemmlab.matmul(a2, b2, scale_a=sa2, scale_b=sb2, out=out2, alpha=2.0)
    assert counts == {"validate": 1, "plan": 1, "args": 2, "maps": 4}
    np.testing.assert_allclose(out2.numpy(), 2 * ref2.numpy(), rtol=1e-6, atol=1e-3)
    moved = emu.calls[-1]
    assert {int(moved[2][i]) for i in (4, 6, 9, 16, 19)} == {
        x.data_ptr() for x in (a2, b2, out2, sa2, sb2)
    }  # A, B, C and the scales' addresses
    scaled.PREPARED.clear()
    gemmlab.matmul(a2, b2, scale_a=sa2, scale_b=sb2, out=out2, alpha=2.0)
    assert counts["validate"] == 2 and counts["plan"] == 2
    assert emu.calls[-1][1:] == moved[1:]
    # Without out: a new result each call, nothing else new.
    seen = dict(counts)
    r1 = gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out_dtype="float32")
    r2 = gemmlab.matmul(a2, b2, scale_a=sa2, scale_b=sb2, out_dtype="float32")
    assert counts["plan"] == seen["plan"] + 1 and counts["validate"] == seen["validate"] + 1
    assert r1.data_ptr() != r2.data_ptr()
    np.testing.assert_allclose(r1.numpy(), ref.numpy(), rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(r2.numpy(), ref2.numpy(), rtol=1e-6, atol=1e-3)


def test_each_scaling_dtype_and_result_type_is_its_own_fp8_entry(monkeypatch):
    emu = emulated_gpu.install(monkeypatch)
    counts = _counted(monkeypatch)
    M, N, K = 130, 260, 384
    calls = [
        _fp8_call(emu, M, N, K, kind="tensor"),
        _fp8_call(emu, M, N, K, kind="row"),
        _fp8_call(emu, M, N, K, kind="block"),
        _fp8_call(emu, M, N, K, db=E5M2, kind="tensor"),
    ]
    for twice in range(2):
        for i, (a, b, sa, sb, ref) in enumerate(calls):
            for out_dtype in ("float32", "bfloat16"):
                r = gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype)
                tol = 1e-6 if out_dtype == "float32" else 4e-3
                np.testing.assert_allclose(r.numpy().astype(np.float64), ref.numpy(), rtol=tol, atol=1e-2)
                assert gemmlab.last_plan().problem.scaling == ("tensor", "row", "block", "tensor")[i]
        assert len(scaled.PREPARED) == 8 and counts["plan"] == 8


def test_fp8_errors_still_come_before_anything_is_written(monkeypatch):
    emu = emulated_gpu.install(monkeypatch)
    M, N, K = 64, 64, 256
    a, b, sa, sb, _ = _fp8_call(emu, M, N, K)
    out = emulated_gpu.emulated_tensor(emu, np.full((M, N), 7.0, np.float32))
    gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out)
    launched = len(emu.calls)
    out.fill_(7.0)
    # The same shapes and strides, a at an address TMA cannot read: the full path refuses it.
    raw = emulated_gpu.emulated_tensor(emu, np.zeros(M * K + 16, np.uint8)).view(E4M3)
    odd = raw[1:].as_strided((M, K), (K, 1))
    with pytest.raises(ValueError, match="16-byte aligned"):
        gemmlab.matmul(odd, b, scale_a=sa, scale_b=sb, out=out)
    with pytest.raises(TypeError, match="alpha must be a real number"):
        gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out=out, alpha=np.float32(1) + 1j)
    with pytest.raises(ValueError, match="beta != 0 needs out"):
        gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, beta=1.0)
    assert len(emu.calls) == launched and (out.numpy() == 7.0).all()


def test_moved_fp8_arguments_pack_as_a_fresh_build_would(monkeypatch):
    """With real tensor maps (cuda.bindings' CUtensorMap, packed by MapParams): the arguments a
    prepared FP8 call makes for new addresses, alpha and beta by MapParams.rebound are, byte
    for byte, the packed arguments built for them from nothing (maps here hold their address
    in their first 8 bytes, as the encoder and cuTensorMapReplaceAddress stand-ins write it)."""
    import ctypes
    import struct

    driver = pytest.importorskip("cuda.bindings.driver")
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime import launch as rt_launch
    from gemmlab.runtime.launch import MapParams

    def encode(ptr, *rest):
        m = driver.CUtensorMap()
        ctypes.memmove(m.getPtr(), struct.pack("Q", ptr), 8)
        return m

    def replace(map_address, address):
        ctypes.memmove(map_address, struct.pack("Q", address), 8)

    monkeypatch.setattr(tma, "_encode", encode)
    monkeypatch.setattr(tma, "replace_address", replace)
    monkeypatch.setattr(executor, "replace_address", replace)  # the copy is executor._moved's
    monkeypatch.setattr(rt_compile, "load_kernel", lambda *a: "kernel")
    monkeypatch.setattr(rt_launch, "allow_dynamic_smem", lambda *a: None)
    launched = []
    monkeypatch.setattr(rt_launch, "launch_shaped", lambda kernel, shape, stream, args: launched.append(args))
    a, b = _operands(300, 500, 1024)
    sa, sb = torch.ones(300, 1), torch.ones(1, 500)
    call = scaled.validate_scaled(a, b, sa, sb, out_dtype="float32")
    p = scaled.plan_scaled(300, 500, 1024, call.dtype, call.dtype_b, "float32", call.scaling)
    prepared = scaled.ScaledPrepared(p, call, _Gpu(), 500, 0)

    def packed_bytes(args):
        holder = args.packed()
        assert isinstance(holder, MapParams)
        lay = holder._layout
        raw = ctypes.string_at(holder.ptr - lay.table, lay.nbytes)
        return raw[: lay.table] + raw[lay.table + 8 * lay.n :]  # the maps and the values, not the pointers

    prepared.launch(0, 0x100000, 0x200000, 0x300000, 0x400000, 0x500000, 1.0, 0.0)
    # A, B, C, the maps of A and B and the scales: where the first build holds the addresses
    assert sorted(i for _, i, _ in prepared._moves.at) == [4, 6, 9, 14, 15, 16, 19]
    monkeypatch.setattr(scaled, "wgmma_fp8_args", None)  # nothing is built from here on
    for addresses, alpha, beta in (
        ((0x1100000, 0x1200000, 0x1300000, 0x1400000, 0x1500000), 1.0, 0.0),
        ((0x2100000, 0x200000, 0x2300000, 0x2400000, 0x2400000), -2.5, 0.0),
    ):
        prepared.launch(0, *addresses, alpha, beta)
        with monkeypatch.context() as m:
            m.setattr(scaled, "wgmma_fp8_args", fp8.wgmma_fp8_args)
            fresh = prepared.build(*addresses, alpha, beta)
        assert packed_bytes(launched[-1]) == packed_bytes(fresh)


@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
@pytest.mark.parametrize("promote", [0, 1])
def test_emulated_256_wide_tiles_can_be_forced(monkeypatch, kind, promote):
    """kernel="wgmma_fp8", BM=128, BN=256 (two consumer warpgroups of 64 x 256), STAGES=4: the
    host's launch of it (B's map in boxes of 256 rows, or 128 a block of a cluster)."""
    emu = emulated_gpu.install(monkeypatch)
    a, b, sa, sb, ref = _fp8_call(emu, 300, 600, 384, kind=kind)
    for cluster in (1, 2):
        tile = dict(BM=128, BN=256, STAGES=4, CLUSTER=cluster, PROMOTE=promote)
        r = gemmlab.matmul(a, b, scale_a=sa, scale_b=sb, out_dtype="float32", kernel="wgmma_fp8", **tile)
        np.testing.assert_allclose(r.numpy(), ref.numpy(), rtol=1e-6, atol=1e-3)
        p = gemmlab.last_plan()
        assert p.params == tile and p.spec.launch(p.params, p.problem).block == (384, 1, 1)


@pytest.mark.parametrize("M, N, wide", [(256, 256, False), (8192, 8192, True)])
def test_auto_takes_promote_alone(M, N, wide):
    """PROMOTE is how often the sums are promoted, not a tile: auto keeps choosing the tile and takes
    PROMOTE=0 (torch._scaled_mm's use_fast_accum) or another legal value with it."""
    p = _plan(M, N, 4096, PROMOTE=0)
    auto = _plan(M, N, 4096)
    assert {k: v for k, v in p.params.items() if k != "PROMOTE"} == {
        k: v for k, v in auto.params.items() if k != "PROMOTE"
    }
    assert p.params["PROMOTE"] == 0 and "promoting never as asked" in p.reason
    assert (p.params["BN"] == 256) == wide and auto.params["PROMOTE"] == (1 if wide else 4)
    assert "promoting every K-step" in auto.reason if wide else "promoting every 4 K-steps" in auto.reason
