"""The benchmark harness: what it records and writes and how it reads sizes (no GPU:
synthetic records and fake timers), and on a GPU that it runs end to end (never its timings)."""

import json

import pytest

from gemmlab.tools.bench import overhead, report, suites
from gemmlab.tools.bench.suites import parse_size
from gemmlab.tools.bench.timing import Timing
from gemmlab.tools.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def _rec(kernel, path, ms, pct=None, M=256, dtype="float32", **kw):
    return suites.Record(
        "GPU", kernel, {}, M, M, M, dtype, ms, 1.0, 0.1, 1.0, pct, None, 1e-7, 3, path=path, **kw
    ).as_dict()


def _records():
    out = []
    for path, scale in (("public", 2.0), ("kernel", 1.0)):
        for M in (64, 256):
            out += [
                _rec("cublas", path, 0.1 * scale, 100.0, M),
                _rec("auto", path, 0.2 * scale, 50.0, M, note="auto chose wgmma(BM=128)"),
            ]
    return out


def test_table_has_a_titled_group_per_path():
    lines = report.table(_records()).splitlines()
    assert "gemmlab.matmul (public)" in lines[0] and "kernel only (run_plan)" in lines[0]
    assert lines[1].split()[:4] == ["kernel", "M", "N", "K"] and lines[1].count("%cuBLAS") == 2
    rows = [ln for ln in lines if ln.startswith(("cublas", "auto:wgmma"))]
    assert len(rows) == 4  # one row per kernel and size, both paths in it
    assert rows[1].split()[4:] == ["0.400", "1.00", "50.0%", "|", "0.200", "1.00", "50.0%", "1.0e-07"]
    assert lines[-2].startswith("public: gemmlab.matmul(a, b, out=c") and lines[-1].startswith("kernel only:")


def test_table_of_one_path_and_old_records():
    """Without --kernel-only: one group; records from before the path field are kernel-only figures."""
    public = [r for r in _records() if r["path"] == "public"]
    text = report.table(public)
    assert "gemmlab.matmul (public)" in text and "kernel only" not in text
    old = [{k: v for k, v in r.items() if k != "path"} for r in _records() if r["path"] == "kernel"]
    assert "kernel only (run_plan)" in report.table(old).splitlines()[0]
    assert report.headline(_records())[1] == "public" and report.headline(old)[1] == "kernel"


def test_skipped_rows_say_why():
    recs = [_rec("naive", "public", None, skipped="one run takes 4.0 s (> 3 s)")]
    assert report.table(recs).splitlines()[3].endswith("(skipped: one run takes 4.0 s (> 3 s))")


def test_bench_writes_json_and_plot(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(suites, "run_suite", lambda *a, **kw: [suites.Record(**r) for r in _records()])
    js, png = tmp_path / "b.json", tmp_path / "b.png"
    assert main(["bench", "--kernels", "auto", "--kernel-only", "--json", str(js), "--plot", str(png)]) == 0
    data = json.loads(js.read_text())
    assert {r["path"] for r in data} == {"public", "kernel"} and data == _records()
    assert png.read_bytes()[:8] == PNG


def _host_rows():
    def row(call, library, arrays, us, torch_us, dtype="bfloat16", out=True):
        return overhead.HostRecord(
            "GPU",
            call,
            library,
            arrays,
            dtype,
            out,
            "64x64x64",
            us,
            [us],
            300,
            torch_us,
            library == "gemmlab" and torch_us is not None and us > torch_us,
        ).as_dict()

    return [
        row("torch.matmul(a, b, out=c)", "torch", "torch", 6.0, 6.0),
        row("gemmlab.matmul(a, b, out=c)", "gemmlab", "torch", 9.0, 6.0),
        row("run_plan(last_plan(), raw pointers)", "gemmlab", "torch", 4.0, 6.0),
        row("cupy.matmul(a, b, out=c)", "cupy", "cupy", 7.0, 6.0, dtype="float16"),
    ]


def _overhead_data():
    return {"host": _host_rows(), "sizes": [r for r in _records() if r["M"] in (64, 256)]}


def test_overhead_table_flags_rows_over_torch():
    text = overhead.table(_overhead_data())
    lines = text.splitlines()
    slow = next(ln for ln in lines if ln.startswith("gemmlab.matmul"))
    fast = next(ln for ln in lines if ln.startswith("run_plan"))
    assert slow.split()[-8:] == ["9.00", "6.00", "1.50x", "<<", "over", "torch.matmul's", "host", "time"]
    assert "<<" not in fast and "0.67x" in fast
    assert "1 of 2 gemmlab rows over torch.matmul's host time" in text
    assert "% of cuBLAS" in text and "gemmlab.matmul (public)" in text


def test_overhead_suite_writes_table_json_and_plot(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run(**kw):
        seen.update(kw)
        return _overhead_data()

    monkeypatch.setattr(overhead, "run", fake_run)
    js, png = tmp_path / "o.json", tmp_path / "o.png"
    assert (
        main(
            [
                "bench",
                "--suite",
                "overhead",
                "--host-shape",
                "128",
                "--calls",
                "20",
                "--sizes",
                "64,256",
                "--json",
                str(js),
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    assert seen["shape"] == (128, 128, 128) and seen["calls"] == 20 and seen["sizes"] == [(64,) * 3, (256,) * 3]
    assert seen["kernel_only"] is False
    assert "over torch.matmul's host time" in capsys.readouterr().out
    assert json.loads(js.read_text()) == _overhead_data()
    assert png.read_bytes()[:8] == PNG


class _FakeOperands:
    dtype, ops, shape, note, batch = "float32", "NN", (64, 64, 64), "fake cuBLAS", 1
    raw = (0, 1, 64, 2, 64, 3, 64, 1.0, 0.0)

    def __init__(self):
        self.checked_calls = []

    def cublas(self):
        pass

    def error(self):
        return 1e-7

    def checked(self, fn):
        self.checked_calls.append(fn)
        return 2e-7


class _FakePlan:
    params = {"BM": 64}
    spec = type("Spec", (), {"name": "vectorized"})

    def describe(self):
        return "vectorized(BM=64)"


def test_time_size_records_each_path_with_the_plan_the_call_ran(monkeypatch):
    """The record's kernel comes from gemmlab.last_plan() after the public call;
    cuBLAS is sampled before and after on each path; both paths are checked."""
    monkeypatch.setattr(suites, "last_plan", lambda: _FakePlan())
    ms = {("cublas", "public"): 0.02, ("cublas", "kernel"): 0.01, ("ours", "public"): 0.04, ("ours", "kernel"): 0.01}
    asked = []

    def timer(fn, path="kernel"):
        who = "cublas" if fn == ops_.cublas else "ours"
        asked.append((who, path))
        return Timing(ms[who, path], [ms[who, path]] * 3)

    ops_ = _FakeOperands()
    gpu = type("GPU", (), {"name": "GPU"})
    calls = [("auto", lambda: None, lambda p: ("auto", dict(p.params), f"auto chose {p.describe()}"))]
    recs = suites.time_size(ops_, calls, paths=("public", "kernel"), timer=timer, gpu=gpu, say=lambda m: None)
    assert [(r.kernel, r.path) for r in recs] == [
        ("cublas", "public"),
        ("auto", "public"),
        ("cublas", "kernel"),
        ("auto", "kernel"),
    ]
    assert asked.count(("cublas", "public")) == 2 and asked.count(("cublas", "kernel")) == 2
    pub, ker = recs[1], recs[3]
    assert pub.note == "auto chose vectorized(BM=64)" and pub.params == {"BM": 64}
    assert pub.pct_cublas == pytest.approx(50.0) and ker.pct_cublas == pytest.approx(100.0)
    assert recs[0].reps == 6 and pub.rel_error == 2e-7 and len(ops_.checked_calls) == 2
    kernel_run = ops_.checked_calls[1]  # run_plan on the plan the public call ran, raw pointers
    assert isinstance(kernel_run.args[0], _FakePlan) and kernel_run.args[2:] == ops_.raw


# -- size arguments ----------------------------------------------------------


def test_parse_size():
    assert parse_size("4096") == (4096, 4096, 4096)
    assert parse_size("16384x4096x4096") == (16384, 4096, 4096)
    assert parse_size("2X3x4") == (2, 3, 4)


@pytest.mark.parametrize(
    "text, msg",
    [
        ("abc", "is not N or MxNxK"),
        ("0", "must be N or MxNxK with positive integers"),
        ("4x0x4", "positive integers"),
        ("-8", "positive integers"),
        ("4x4", "must be N or MxNxK"),
        ("1x2x3x4", "must be N or MxNxK"),
        ("", "is not N or MxNxK"),
    ],
)
def test_parse_size_rejects(text, msg):
    with pytest.raises(ValueError, match=msg):
        parse_size(text)


# -- on a GPU: the harness runs end to end (timings are not asserted) ----------


@pytest.mark.gpu
def test_run_suite_times_both_paths_on_the_gpu():
    recs = suites.run_suite([("auto", {})], [(256, 256, 256)], reps=3, budget_s=0.2, quiet=True, kernel_only=True)
    assert [(r.kernel, r.path) for r in recs] == [
        ("cublas", "public"),
        ("auto", "public"),
        ("cublas", "kernel"),
        ("auto", "kernel"),
    ]
    assert all(r.ms and r.ms > 0 and r.rel_error < 1e-5 for r in recs)


@pytest.mark.gpu
def test_overhead_host_rows_on_the_gpu():
    pytest.importorskip("torch")
    rows = overhead.host_records((64, 64, 64), calls=3, rounds=2, quiet=True)
    assert {r.library for r in rows} == {"gemmlab", "torch", "cupy"}
    assert all(r.host_us > 0 and len(r.us_all) == 2 for r in rows)
    assert all(r.torch_us is not None for r in rows if r.library == "gemmlab")


def test_time_rounds_rotates_the_order_and_pools_each_calls_runs(monkeypatch):
    """timing.time_rounds: every call once a round through time_gpu (host time included by
    default), the first call of round r being the r-th, each call's runs pooled into one median."""
    from gemmlab.tools.bench import timing

    order, seen = [], []

    def fake(fn, **kw):
        seen.append(kw)
        fn()
        return Timing(None, [float(len(order))])

    monkeypatch.setattr(timing, "time_gpu", fake)
    calls = {name: (lambda name=name: order.append(name)) for name in ("a", "b", "c")}
    out = timing.time_rounds(calls, l2_bytes=1 << 20, rounds=4)
    assert order == list("abcbcacababc")
    assert all(kw["host"] and kw["l2_bytes"] == 1 << 20 and kw["reps"] == 3 for kw in seen)
    assert out["a"].ms_all == [1.0, 6.0, 8.0, 10.0] and out["a"].ms == 7.0  # a ran 1st, 6th, 8th, 10th
    assert list(out) == ["a", "b", "c"] and all(len(t.ms_all) == 4 for t in out.values())


def test_write_run_keeps_the_fields_and_the_command(tmp_path):
    import json
    import sys

    from gemmlab.tools.bench import report

    path = tmp_path / "ab.json"
    report.write_run(path, "NVIDIA H200", [{"product": "p", "pct_auto": 101.0}], summary={"auto": 101.0})
    doc = json.loads(path.read_text())
    assert doc["gpu"] == "NVIDIA H200" and doc["summary"] == {"auto": 101.0}
    assert doc["records"] == [{"product": "p", "pct_auto": 101.0}]
    assert doc["command"] == " ".join(sys.argv) and len(doc["date"]) == 10


def test_overhead_new_address_rows_take_the_next_operands_each_call():
    seen = []
    call = overhead._cycling(lambda a, b, out: seen.append((a, b, out)), [(1, 2, 3), (4, 5, 6)])
    for _ in range(3):
        call()
    assert seen == [(1, 2, 3), (4, 5, 6), (1, 2, 3)]
    from gemmlab.core import executor

    assert overhead.NEW_ARRAYS > executor.ARGS_KEPT and overhead.NEW_ROWS > executor.CACHE.size
