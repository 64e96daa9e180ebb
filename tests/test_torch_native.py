"""The routed products' C++ kernels (gemmlab.torch.native, csrc/routed.cpp).

On the CPU: the library builds and takes aten::mm, addmm and bmm; a call is served from a
launch it learned only for the same operation, route, shapes, strides, addresses and
scalars (a stand-in launch, counted and not run, stands for a kernel's); calls that are not
routed reach PyTorch's kernels; without a compiler the Python kernels route everything.
On a GPU: repeated products launched from C++ give the products of the data they find
(inputs refilled, outputs poisoned, against float64), on other streams and in CUDA graphs,
and calls that are not one launch (split-K's workspaces, fp32_tc's choice) stay Python's."""

import ctypes
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import gemmlab.torch as gt  # noqa: E402
from gemmlab.runtime import launch  # noqa: E402
from gemmlab.torch import native  # noqa: E402
from torch_cpu import CPURouting, cpu_kernels, routed_reference  # noqa: E402


@pytest.fixture
def library():
    """The C++ library, built at the first test that asks (into the tests' kernel cache, not
    the user's: conftest.py sets it before any test runs)."""
    if native.library() is None:
        pytest.skip(f"no C++ library: {native.why_not()}")


needs_library = pytest.mark.usefixtures("library")


class _Kernel:
    handle = 0  # a stand-in: the library counts a launch of it and runs nothing


class _Holder:
    """A kernelParams array of two arguments (a pointer and an int)."""

    def __init__(self):
        self.values = (ctypes.c_uint64(0xDEADBEEF), ctypes.c_int32(7))
        self.array = (ctypes.c_void_p * 2)(*[ctypes.addressof(v) for v in self.values])
        self.ptr = ctypes.addressof(self.array)


def _stand_in_launch(a, b, **kw):
    """The float64 stand-in product, which also records one launch of one prepared call, as
    gemmlab.matmul's prepared path does on a GPU."""
    result = routed_reference(a, b, **kw)
    rec = launch.recording()
    if rec is not None:
        rec.prepared += 1
        rec.launches.append((_Kernel(), launch.LaunchShape((1, 1, 1), (32, 1, 1)), _Holder(), (8, 4)))
    return result


_stand_in_launch.learnable = True  # routing learns only gemmlab.matmul's launches, or a stand-in's that says so


def _counts():
    return native.counts()


@needs_library
def test_a_repeated_call_is_served_from_the_launch_it_learned():
    a, b = torch.rand(5, 7), torch.rand(7, 3)
    out, other = torch.empty(5, 3), torch.empty(5, 3)
    bias = torch.rand(3)
    with cpu_kernels(_stand_in_launch) as calls, CPURouting():
        calls.update(mm=0, bmm=0)
        before = _counts()
        torch.mm(a, b, out=out)  # learned
        assert calls["mm"] == 1 and _counts()["learned"] == before["learned"] + 1
        out.fill_(float("nan"))
        torch.mm(a, b, out=out)  # served: the stand-in launch is counted, nothing computed
        assert calls["mm"] == 1 and _counts()["test_hits"] == before["test_hits"] + 1
        assert out.isnan().all()
        torch.mm(a, b, out=other)  # another result address: Python's again
        assert calls["mm"] == 2
        torch.mm(a[:, :6], b[:6], out=out)  # another shape
        assert calls["mm"] == 3
        torch.addmm(bias, a, b, out=out)  # another operation
        torch.addmm(bias, a, b, alpha=2.0, out=out)  # another alpha
        assert calls["mm"] == 5
        with CPURouting(torch.float32, kernel="pipelined"):  # another route
            torch.mm(a, b, out=out)
        assert calls["mm"] == 6
        torch.addmm(bias, a, b, alpha=2.0, out=out)
        assert calls["mm"] == 6  # the learned addmm
    hits = _counts()["test_hits"]
    torch.mm(a, b, out=out)  # no context: PyTorch's kernel, nothing served
    assert _counts()["test_hits"] == hits
    torch.testing.assert_close(out, a @ b)


@needs_library
def test_new_tuning_tables_drop_the_learned_launches():
    """gemmlab.core.tables.reload() (after `gemmlab tune`) may change plans: the library forgets
    its launches, and the next call goes through Python again."""
    from gemmlab.core import tables

    a, b, out = torch.rand(5, 7), torch.rand(7, 3), torch.empty(5, 3)
    with cpu_kernels(_stand_in_launch) as calls, CPURouting():
        calls.update(mm=0, bmm=0)
        torch.mm(a, b, out=out)
        torch.mm(a, b, out=out)
        assert calls["mm"] == 1  # the second served from C++
        tables.reload()
        assert native.counts()["kept"] == 0
        torch.mm(a, b, out=out)
        assert calls["mm"] == 2


@needs_library
def test_calls_that_are_not_routed_reach_pytorchs_kernels():
    a, b = torch.rand(5, 7), torch.rand(7, 3)
    with cpu_kernels(_stand_in_launch) as calls, CPURouting(torch.bfloat16):
        calls.update(mm=0, bmm=0)
        before = _counts()["to_python"]
        torch.testing.assert_close(a @ b, a.double().matmul(b.double()).float())  # float32: not routed
        ints = torch.arange(6).reshape(2, 3)
        assert torch.equal(ints @ ints.t(), torch.tensor([[5, 14], [14, 50]]))
        empty = torch.rand(0, 7, dtype=torch.bfloat16) @ b.bfloat16()
        assert empty.shape == (0, 3)
        assert calls["mm"] == 0 and _counts()["to_python"] == before


def test_recordings_keep_launches_and_nest():
    """A recording keeps each launch's argument sizes; a recording opened inside another
    spoils the outer one (its launches are not the outer call's alone)."""
    holder = _Holder()
    rec = launch.Recording()
    with rec:
        launch._record(_Kernel(), launch.LaunchShape((1, 1, 1), (32, 1, 1)), holder, (launch.np.int32(1),))
    assert rec.launches and rec.launches[0][3] == (4,)
    with launch.Recording() as outer:
        with launch.Recording() as inner:
            inner.prepared = 1
        assert outer.spoiled and not inner.spoiled  # an inner call's launches are not the outer's


def test_without_a_compiler_the_python_kernels_route(tmp_path):
    """A machine without a C++ compiler: the routing contexts work as before, and why_not()
    says why the C++ kernels are not used."""
    code = (
        "import sys, torch; sys.path.insert(0, 'tests')\n"
        "from torch_cpu import CPURouting, cpu_kernels\n"
        "from gemmlab.torch import native\n"
        "a, b = torch.rand(5, 7), torch.rand(7, 3)\n"
        "with cpu_kernels() as calls, CPURouting():\n"
        "    c = a @ b\n"
        "assert calls['mm'] == 1, calls\n"
        "print(native.why_not())\n"
    )
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), GEMMLAB_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=_root())
    assert done.returncode == 0, done.stderr
    assert "no C++ compiler" in done.stdout


def _root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- on a GPU ---------------------------------------------------------------------------------

gpu = pytest.mark.gpu


def _fill(*ts):
    for t in ts:
        t.uniform_(-1, 1)  # in place: no allocation moves the results of a loop's next pass


def _check(out, ref, dtype):
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= tol, err


# (name, call(a, b, bias, out) -> result, a's shape, b's shape as stored, whether b is a
# transposed view, the bias's shape or None, whether out is given, the dtypes whose calls are
# one launch (learned and repeated from C++)).  Rows of b that are not 16-byte multiples are
# staged first (two launches); the CUDA-core rungs add a bias after the product, and split a
# float32 product of few tiles over K (a workspace).
ALL, HALF = (torch.float32, torch.float16, torch.bfloat16), (torch.float16, torch.bfloat16)
GPU_CASES = [
    ("mm", lambda a, b, c, o: torch.mm(a, b), (256, 512), (512, 384), False, None, False, HALF),
    ("mm, odd rows of b", lambda a, b, c, o: torch.mm(a, b), (257, 300), (300, 129), False, None, False, ()),
    ("x @ W.t()", lambda a, b, c, o: a @ b, (197, 768), (320, 768), True, None, False, HALF),
    ("mm out=", lambda a, b, c, o: torch.mm(a, b, out=o), (256, 512), (512, 384), False, None, True, HALF),
    ("mm out=, odd", lambda a, b, c, o: torch.mm(a, b, out=o), (257, 300), (300, 129), False, None, True, ()),
    ("linear", lambda a, b, c, o: torch.addmm(c, a, b), (197, 768), (1000, 768), True, (1000,), False, HALF),
    ("addmm out=", lambda a, b, c, o: torch.addmm(c, a, b, out=o), (77, 512), (512, 96), False, (96,), True, HALF),
    ("bmm", lambda a, b, c, o: torch.bmm(a, b), (12, 197, 64), (12, 64, 197), False, None, False, ()),
    ("bmm out=", lambda a, b, c, o: torch.bmm(a, b, out=o), (12, 197, 192), (12, 192, 64), False, None, True, ALL),
]


@gpu
@needs_library
@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name, fn, sa, sb, tb, sbias, given, learns", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_repeated_products_launched_from_cpp_compute_the_data_they_find(
    dtype, name, fn, sa, sb, tb, sbias, given, learns
):
    a = torch.empty(sa, device="cuda", dtype=dtype)
    b_stored = torch.empty(sb, device="cuda", dtype=dtype)
    b = b_stored.t() if tb else b_stored
    bias = torch.empty(sbias, device="cuda", dtype=dtype) if sbias else None
    out = torch.empty((*sa[:-1], b.shape[-1]), device="cuda", dtype=dtype) if given else None
    hits = native.counts()["hits"]
    with gt.use_gemmlab(dtype):
        for _ in range(6):  # functional results alternate between two blocks of the allocator
            _fill(a, b_stored, *([bias] if bias is not None else []))
            if out is not None:
                out.fill_(float("nan"))
            result = fn(a, b, bias, out)
            ref = a.double() @ b.double() + (bias.double() if bias is not None else 0)
            _check(result, ref, dtype)
            del result, ref
    if dtype in learns:
        assert native.counts()["hits"] >= hits + 3, native.counts()


@gpu
@needs_library
def test_cpp_launches_go_to_the_current_stream_and_into_cuda_graphs():
    dtype = torch.bfloat16
    a = torch.rand(320, 512, device="cuda", dtype=dtype)
    b = torch.rand(512, 256, device="cuda", dtype=dtype)
    out = torch.empty(320, 256, device="cuda", dtype=dtype)
    side = torch.cuda.Stream()
    with gt.use_gemmlab(dtype):
        torch.mm(a, b, out=out)
        torch.mm(a, b, out=out)  # learned by now
        hits = native.counts()["hits"]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _fill(a, b)
            out.fill_(float("nan"))
            torch.mm(a, b, out=out)
        torch.cuda.current_stream().wait_stream(side)
        _check(out, a.double() @ b.double(), dtype)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.mm(a, b, out=out)
        assert native.counts()["hits"] >= hits + 2
        for _ in range(2):
            _fill(a, b)
            out.fill_(float("nan"))
            graph.replay()
            _check(out, a.double() @ b.double(), dtype)


@gpu
@needs_library
def test_calls_of_more_than_one_launch_stay_pythons():
    """fp32_tc's method choice and a split over K take workspaces: never learned, every call
    through Python, right every time."""
    a = torch.empty(128, 8192, device="cuda")
    b = torch.empty(8192, 128, device="cuda")
    out = torch.empty(128, 128, device="cuda")
    for ctx, dtype in ((gt.fp32_tc(), torch.float32), (gt.use_gemmlab(torch.bfloat16), torch.bfloat16)):
        x, y, o = a.to(dtype), b.to(dtype), out.to(dtype)
        before = native.counts()
        with ctx:
            for _ in range(3):
                _fill(x, y)
                o.fill_(float("nan"))
                torch.mm(x, y, out=o)
                _check(o, x.double() @ y.double(), dtype)
        after = native.counts()
        plan = __import__("gemmlab").last_plan()
        if dtype == torch.float32 or plan.spec.splits(plan.params) > 1:
            assert after["hits"] == before["hits"], (plan.describe(), after)
            assert after["to_python"] == before["to_python"] + 3
