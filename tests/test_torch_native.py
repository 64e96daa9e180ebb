"""The routed products' C++ kernels (gemmlab.torch.native, csrc/routed.cpp).

On the CPU: the library builds and takes aten::mm, bmm, mv and their other forms; a call is
served from the steps it learned only for the same operation, route, shapes, strides,
addresses and scalars (stand-in launches and memsets, counted and not run, stand for a
kernel's); a bias added after the product is added after a repeat; a repeat on kept
workspaces takes their locks and never waits for them; calls that are not routed reach
PyTorch's kernels; without a compiler the Python kernels route everything.  On a GPU: repeated products launched from
C++ give the products of the data they find (inputs refilled, outputs poisoned, against
float64), on other streams and in CUDA graphs, calls on kept workspaces (split-K,
fp32_tc's choice and parts, staging copies) included."""

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


def _stand_in_launch_step():
    """A recorded launch of the stand-in kernel (runtime.launch.Recording's form)."""
    return (launch.LAUNCH, _Kernel(), launch.LaunchShape((1, 1, 1), (32, 1, 1)), _Holder(), (8, 4))


def _stand_in_launch(a, b, **kw):
    """The float64 stand-in product, which also records one launch of one prepared call, as
    gemmlab.matmul's prepared path does on a GPU."""
    result = routed_reference(a, b, **kw)
    rec = launch.recording()
    if rec is not None:
        rec.prepared += 1
        rec.steps.append(_stand_in_launch_step())
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


# Every form the library takes: (name, call(a, b, c, out), a's shape, b's shape, c's shape).
FORMS = [
    ("mm", lambda a, b, c, o: torch.mm(a, b), (5, 7), (7, 3), None),
    ("mm.out", lambda a, b, c, o: torch.mm(a, b, out=o), (5, 7), (7, 3), None),
    ("addmm", lambda a, b, c, o: torch.addmm(c, a, b, beta=0.5), (5, 7), (7, 3), (3,)),
    ("addmm.out", lambda a, b, c, o: torch.addmm(c, a, b, out=o), (5, 7), (7, 3), (5, 3)),
    ("addmm_", lambda a, b, c, o: c.addmm_(a, b, alpha=2.0), (5, 7), (7, 3), (5, 3)),
    ("bmm", lambda a, b, c, o: torch.bmm(a, b), (2, 5, 7), (2, 7, 3), None),
    ("bmm.out", lambda a, b, c, o: torch.bmm(a, b, out=o), (2, 5, 7), (2, 7, 3), None),
    ("baddbmm", lambda a, b, c, o: torch.baddbmm(c, a, b), (2, 5, 7), (2, 7, 3), (5, 3)),
    ("baddbmm.out", lambda a, b, c, o: torch.baddbmm(c, a, b, out=o), (2, 5, 7), (2, 7, 3), (2, 5, 3)),
    ("baddbmm_", lambda a, b, c, o: c.baddbmm_(a, b, beta=0.5), (2, 5, 7), (2, 7, 3), (2, 5, 3)),
    ("mv", lambda a, b, c, o: torch.mv(a, b), (5, 7), (7,), None),
    ("mv.out", lambda a, b, c, o: torch.mv(a, b, out=o), (5, 7), (7,), None),
    ("addmv", lambda a, b, c, o: torch.addmv(c, a, b), (5, 7), (7,), (5,)),
    ("addmv.out", lambda a, b, c, o: torch.addmv(c, a, b, out=o), (5, 7), (7,), (5,)),
    ("addmv_", lambda a, b, c, o: c.addmv_(a, b), (5, 7), (7,), (5,)),
]


def test_the_forms_are_those_the_library_takes():
    assert sorted(f[0] for f in FORMS) == sorted(native.OPERATORS)


@needs_library
@pytest.mark.parametrize("name, fn, sa, sb, sc", FORMS, ids=[f[0] for f in FORMS])
def test_every_form_is_repeated_from_cpp(name, fn, sa, sb, sc):
    """Each operator's kernel in C++: its first call right (Python's), its repeats on the same
    tensors served from the launch learned (the stand-in computes nothing there).  A
    functional form's result is a new tensor each call, on an address the CPU's allocator
    seldom hands back: its calls are the C++ kernel's, handed to Python (on a GPU, the caching
    allocator's blocks come back: test_repeated_products_launched_from_cpp_...)."""
    a, b = torch.rand(sa), torch.rand(sb)
    c = torch.rand(sc) if sc else None
    o = torch.empty((*sa[:-1], *sb[-1:]) if len(sb) > 1 else sa[:-1])
    c0 = c.clone() if c is not None else None
    expected = fn(a.double(), b.double(), c.double() if c is not None else None, o.double())
    functional = "." not in name and not name.endswith("_")
    with cpu_kernels(_stand_in_launch) as calls, CPURouting():
        calls.update(mm=0, bmm=0)
        before, handed = _counts()["test_hits"], _counts()["to_python"]
        for i in range(4):
            result = fn(a, b, c, o)
            if i == 0:
                torch.testing.assert_close(result, expected.float())
            if c is not None:
                c.copy_(c0)  # an in-place form's accumulator as it was
            del result
        routed = calls["mm"] + calls["bmm"]
        hits, handed = _counts()["test_hits"] - before, _counts()["to_python"] - handed
    assert routed + hits == 4 and handed == routed
    if not functional:
        assert routed == 1


class _NotedPlan:
    """What a stand-in notes as its call's plan: last_plan() resolves it to its name."""

    def __init__(self, name):
        self.name = name

    def resolve(self):
        return self.name


def _stand_in_noting(a, b, **kw):
    """The stand-in launch, noting a plan named after the operands' shapes, as gemmlab.matmul
    notes the plan it ran."""
    from gemmlab.core import api

    result = _stand_in_launch(a, b, **kw)
    api.note_plan(_NotedPlan(f"{tuple(a.shape)} @ {tuple(b.shape)}"))
    return result


_stand_in_noting.learnable = True


@needs_library
def test_last_plan_names_what_a_repeat_from_cpp_ran():
    """gemmlab.last_plan() after a call repeated from C++ is the plan that call ran when it was
    learned, not the plan of the last call through Python; a later call through Python is
    newer again."""
    import gemmlab
    from gemmlab.core import api

    a, b, c, d = torch.rand(5, 7), torch.rand(7, 3), torch.rand(4, 6), torch.rand(6, 2)
    out, other = torch.empty(5, 3), torch.empty(4, 2)
    with cpu_kernels(_stand_in_noting) as calls, CPURouting():
        calls.update(mm=0, bmm=0)
        torch.mm(a, b, out=out)
        torch.mm(c, d, out=other)
        assert gemmlab.last_plan() == "(4, 6) @ (6, 2)"
        torch.mm(a, b, out=out)  # repeated from C++
        assert calls["mm"] == 2
        assert gemmlab.last_plan() == "(5, 7) @ (7, 3)"
        api.note_plan(_NotedPlan("a call through Python"))
        assert gemmlab.last_plan() == "a call through Python"


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


def _stand_in_steps(lock=None, add=False):
    """A stand-in product of several steps (two launches around a memset), which holds
    ``lock`` (a kept workspace's, runtime.launch.SlotLock) as stream_workspace would and, with
    ``add``, adds the bias after the product as gemmlab.matmul does for rungs without the
    epilogue."""

    def product(a, b, bias=None, **kw):
        rec = launch.recording()
        if lock is not None:
            lock.acquire()
            lock.release()
        result = routed_reference(a, b, **kw)
        if rec is not None:
            rec.prepared += 1
            # address 0: a test's memset, counted and not run
            rec.steps += [_stand_in_launch_step(), (launch.MEMSET, 0, 256), _stand_in_launch_step()]
            if lock is not None:
                rec.hold(lock.address, 0)
        if bias is not None:
            if rec is not None and add:
                rec.added(1.0)
            result.add_(bias)
        return result

    product.learnable = True
    return product


@needs_library
def test_a_call_of_several_steps_is_repeated_whole():
    a, b, out = torch.rand(5, 7), torch.rand(7, 3), torch.empty(5, 3)
    with cpu_kernels(_stand_in_steps()) as calls, CPURouting():
        calls.update(mm=0, bmm=0)
        torch.mm(a, b, out=out)
        before = _counts()
        torch.mm(a, b, out=out)
        assert calls["mm"] == 1
        assert _counts()["test_hits"] == before["test_hits"] + 3  # two launches and the memset


@needs_library
def test_a_bias_added_after_the_product_is_added_after_a_repeat():
    """A rung without the bias epilogue: Python adds the bias after the product, and so does a
    repeat from C++ (the stand-in launch computes nothing, so out holds its old values plus
    the bias)."""
    a, b, out, bias = torch.rand(5, 7), torch.rand(7, 3), torch.empty(5, 3), torch.rand(3)
    product = a @ b  # outside the context: PyTorch's
    results = []
    with cpu_kernels(_stand_in_steps(add=True)) as calls, CPURouting():
        calls.update(mm=0, bmm=0)
        for beta in (1.0, 0.5):  # nn.Linear's, added by gemmlab.matmul; another, added by routing
            torch.addmm(bias, a, b, beta=beta, out=out)
            results.append(out.clone())
            out.fill_(1.0)
            torch.addmm(bias, a, b, beta=beta, out=out)  # repeated: the launch runs nothing here
            results.append(out.clone())
        assert calls["mm"] == 2
    torch.testing.assert_close(results[0], product + bias)
    torch.testing.assert_close(results[1], 1.0 + bias.expand(5, 3))
    torch.testing.assert_close(results[2], product + 0.5 * bias)
    torch.testing.assert_close(results[3], 1.0 + 0.5 * bias.expand(5, 3))


@needs_library
def test_a_call_on_kept_workspaces_waits_for_nobody_and_forgets_replaced_ones():
    """A repeat takes the workspaces' locks as Python's call did; where another thread holds
    one, the call goes to Python (which waits for it) rather than wait in C++; a workspace
    replaced (stream_workspace grows it) drops every learned call."""
    import threading

    lock = launch.SlotLock()
    assert lock.address, "this C library has no POSIX mutexes"
    a, b, out = torch.rand(5, 7), torch.rand(7, 3), torch.empty(5, 3)
    with cpu_kernels(_stand_in_steps(lock)) as calls, CPURouting():
        calls.update(mm=0, bmm=0)
        torch.mm(a, b, out=out)
        torch.mm(a, b, out=out)
        assert calls["mm"] == 1  # repeated from C++
        lock.acquire()  # another call on the workspace, in progress
        done = threading.Event()

        def other_thread():
            with CPURouting():
                torch.mm(a, b, out=out)
            done.set()

        worker = threading.Thread(target=other_thread)
        worker.start()
        assert not done.wait(0.5)  # in Python, waiting for the lock as stream_workspace would
        lock.release()
        worker.join()
        assert calls["mm"] == 2
        torch.mm(a, b, out=out)
        assert calls["mm"] == 2  # repeated again
        for forget in launch.on_workspace_replaced:
            forget()
        torch.mm(a, b, out=out)
        assert calls["mm"] == 3


def test_recordings_keep_launches_and_nest():
    """A recording keeps each launch's argument sizes; a recording opened inside another
    spoils the outer one (its launches are not the outer call's alone)."""
    holder = _Holder()
    rec = launch.Recording()
    with rec:
        launch._record(_Kernel(), launch.LaunchShape((1, 1, 1), (32, 1, 1)), holder, (launch.np.int32(1),))
    assert rec.steps and rec.steps[0][4] == (4,)
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
# learned calls (repeated from C++)): staged copies of rows that are not 16-byte multiples,
# split-K's workspaces and a bias added after the product are repeated too.
ALL, HALF = (torch.float32, torch.float16, torch.bfloat16), (torch.float16, torch.bfloat16)
GPU_CASES = [
    ("mm", lambda a, b, c, o: torch.mm(a, b), (256, 512), (512, 384), False, None, False, HALF),
    ("mm, odd rows of b", lambda a, b, c, o: torch.mm(a, b), (257, 300), (300, 129), False, None, False, HALF),
    ("x @ W.t()", lambda a, b, c, o: a @ b, (197, 768), (320, 768), True, None, False, HALF),
    ("mm out=", lambda a, b, c, o: torch.mm(a, b, out=o), (256, 512), (512, 384), False, None, True, HALF),
    ("mm out=, odd", lambda a, b, c, o: torch.mm(a, b, out=o), (257, 300), (300, 129), False, None, True, HALF),
    ("linear", lambda a, b, c, o: torch.addmm(c, a, b), (197, 768), (1000, 768), True, (1000,), False, ALL),
    ("addmm out=", lambda a, b, c, o: torch.addmm(c, a, b, out=o), (77, 512), (512, 96), False, (96,), True, HALF),
    ("bmm", lambda a, b, c, o: torch.bmm(a, b), (12, 197, 64), (12, 64, 197), False, None, False, HALF),
    ("bmm out=", lambda a, b, c, o: torch.bmm(a, b, out=o), (12, 197, 192), (12, 192, 64), False, None, True, ALL),
    ("baddbmm", lambda a, b, c, o: torch.baddbmm(c, a, b), (12, 197, 64), (12, 64, 197), False, (197,), False, ALL),
    ("mv", lambda a, b, c, o: torch.mv(a, b), (3000, 768), (768,), False, None, False, ALL),
    ("addmv", lambda a, b, c, o: torch.addmv(c, a, b), (1001, 4096), (4096,), False, (1001,), False, ALL),
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
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_calls_on_kept_workspaces_are_repeated_right_on_their_stream_only(dtype):
    """fp32_tc's method choice and parts, and a split over K, take a stream's kept workspaces:
    repeated from C++ on that stream (right every time, inputs refilled and outputs poisoned);
    on another stream and in a CUDA graph Python's call runs them, with workspaces of their own."""
    ctx = gt.fp32_tc() if dtype == torch.float32 else gt.use_gemmlab(dtype)
    a = torch.empty(128, 8192, device="cuda", dtype=dtype)
    b = torch.empty(8192, 128, device="cuda", dtype=dtype)
    out = torch.empty(128, 128, device="cuda", dtype=dtype)
    side = torch.cuda.Stream()
    with ctx:
        before = native.counts()
        for _ in range(4):
            _fill(a, b)
            out.fill_(float("nan"))
            torch.mm(a, b, out=out)
            _check(out, a.double() @ b.double(), dtype)
        after = native.counts()
        assert after["hits"] >= before["hits"] + 2, after
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                _fill(a, b)
                out.fill_(float("nan"))
                torch.mm(a, b, out=out)
                side.synchronize()
                _check(out, a.double() @ b.double(), dtype)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.mm(a, b, out=out)
        for _ in range(2):
            _fill(a, b)
            out.fill_(float("nan"))
            graph.replay()
            _check(out, a.double() @ b.double(), dtype)
        _fill(a, b)
        torch.mm(a, b, out=out)  # the first stream's learned call again
        _check(out, a.double() @ b.double(), dtype)
