"""`gemmlab bench --suite models` and `gemmlab tune --suite models`: the case list
(shapes, the views' strides, counts), option parsing, the memory check, the
summary, the table, JSON and plot (no GPU: PyTorch on the CPU, a fake
gemmlab.matmul and fake timers), and on a GPU a tiny suite end to end."""

import json
import math

import pytest

torch = pytest.importorskip("torch")

from gemmlab.tools.bench import models, suites  # noqa: E402
from gemmlab.tools.bench.timing import Timing  # noqa: E402
from gemmlab.tools.cli import main  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _meta(shape):
    return torch.empty(shape, device="meta", dtype=torch.bfloat16)


# -- the cases --------------------------------------------------------------------


def test_the_default_suite_counts():
    cases = models.select()
    linear = [c for c in cases if c.layer != "attention"]
    attention = [c for c in cases if c.layer == "attention"]
    assert len(linear) == 5 * 5 * 3 and len(attention) == 2 * 3 * 2 and len(cases) == 87
    assert {c.layer for c in linear} == {"qkv", "o", "gate_up", "down", "lm_head"}
    assert sorted({c.tokens for c in linear}) == [1, 16, 128, 2048, 8192]
    assert {(c.batch, c.tokens) for c in attention} == {(bh, s) for bh in (32, 128) for s in (512, 2048, 4096)}
    assert len({(c.name, c.tokens, c.batch) for c in cases}) == len(cases)


@pytest.mark.parametrize(
    "layer, fan_in, fan_out",
    [
        ("qkv", 4096, 6144),
        ("o", 4096, 4096),
        ("gate_up", 4096, 28672),
        ("down", 14336, 4096),
        ("lm_head", 4096, 128256),
    ],
)
def test_linear_products_are_the_views_a_model_makes(layer, fan_in, fan_out):
    M = 128
    by = {c.product: c for c in models.select(layers=[layer], tokens=[M])}
    fwd, dgrad, wgrad = by["fwd"], by["dgrad"], by["wgrad"]
    # forward x @ W.t(): x M x in, W out x in row-major, so B is W's transposed view
    assert (fwd.M, fwd.N, fwd.K, fwd.ops, fwd.expression) == (M, fan_out, fan_in, "NT", "x @ W.t()")
    a, b = fwd.operands(_meta)
    assert a.shape == (M, fan_in) and a.stride() == (fan_in, 1)
    assert b.shape == (fan_in, fan_out) and b.stride() == (1, fan_in)  # W.t(): a view, no copy
    # input gradient dY @ W: both row-major
    assert (dgrad.M, dgrad.N, dgrad.K, dgrad.ops) == (M, fan_in, fan_out, "NN")
    a, b = dgrad.operands(_meta)
    assert a.stride() == (fan_out, 1) and b.shape == (fan_out, fan_in) and b.stride() == (fan_in, 1)
    # weight gradient dY.t() @ x: A is dY's transposed view
    assert (wgrad.M, wgrad.N, wgrad.K, wgrad.ops) == (fan_out, fan_in, M, "TN")
    a, b = wgrad.operands(_meta)
    assert a.shape == (fan_out, M) and a.stride() == (1, fan_out)
    assert b.shape == (M, fan_in) and b.stride() == (fan_in, 1)
    assert all(c.batch == 1 and c.out_shape == (c.M, c.N) for c in by.values())


def test_attention_products_are_batched_views():
    cases = {(c.product, c.batch, c.tokens): c for c in models.select(only="attention")}
    qk, pv = cases["qk", 32, 2048], cases["pv", 32, 2048]
    assert (qk.M, qk.N, qk.K, qk.ops, qk.expression) == (2048, 2048, 128, "NT", "Q @ K.transpose(-1, -2)")
    a, b = qk.operands(_meta)
    assert a.shape == (32, 2048, 128) and a.stride() == (2048 * 128, 128, 1)
    assert b.shape == (32, 128, 2048) and b.stride() == (2048 * 128, 1, 128)  # K.transpose(-1, -2)
    assert (pv.M, pv.N, pv.K, pv.ops) == (2048, 128, 2048, "NN")
    a, b = pv.operands(_meta)
    assert a.stride() == (2048 * 2048, 2048, 1) and b.stride() == (2048 * 128, 128, 1)
    assert qk.out_shape == (32, 2048, 2048) and qk.shape == "32x2048x2048x128"
    assert qk.flops == 2.0 * 32 * 2048 * 2048 * 128


def test_selection_narrows_the_suite():
    cases = models.select(layers=["qkv"], tokens=[16], products=["fwd", "wgrad"])
    assert [(c.name, c.tokens) for c in cases] == [("qkv.fwd", 16), ("qkv.wgrad", 16)]
    assert {c.layer for c in models.select(only="linear")} == set(models.LINEAR_LAYERS)
    assert [c.layer for c in models.select(layers=["attention"])] == ["attention"] * 12


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"layers": ["qkv"], "only": "linear"}, "give --layers or --only, not both"),
        ({"only": "mlp"}, "--only 'mlp': choose linear or attention"),
        ({"only": "attention", "tokens": [16]}, "the selection has none"),
        ({"layers": ["attention"], "products": ["fwd"]}, "the selection has none"),
    ],
)
def test_selection_refuses_what_it_cannot_mean(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        models.select(**kwargs)


def test_option_lists_parse():
    assert models.parse_dtypes("bf16, fp32_tc,bf16") == ["bf16", "fp32_tc"]
    assert models.parse_tokens("1,16, 8192") == [1, 16, 8192]
    assert models.parse_layers("qkv,attention") == ["qkv", "attention"]
    assert models.parse_products("wgrad") == ["wgrad"]
    for parse, text in (
        (models.parse_dtypes, "tf32"),
        (models.parse_tokens, "0"),
        (models.parse_tokens, "x"),
        (models.parse_layers, "mlp"),
        (models.parse_products, "qk"),
        (models.parse_dtypes, ""),
    ):
        with pytest.raises(ValueError):
            parse(text)


def test_tune_shapes_keep_each_use_of_a_shape():
    shapes = models.tune_shapes(models.select())
    # o's forward and input gradient are one shape in two layouts
    assert shapes[(2048, 4096, 4096)] == [("NT", 1), ("NN", 1)]
    assert shapes[(128256, 4096, 8192)] == [("TN", 1)]  # lm_head's weight gradient at M=8192
    # o's weight gradient at M=128 is Q @ K^T's shape at S=4096: one entry serves both
    assert shapes[(4096, 4096, 128)] == [("TN", 1), ("NT", 32), ("NT", 128)]
    assert shapes[(512, 128, 512)] == [("NN", 32), ("NN", 128)]  # P @ V at S=512
    assert len(shapes) == 75


# -- memory -----------------------------------------------------------------------


def test_memory_estimate_and_skip_note():
    lm = models.linear_case("lm_head", "fwd", 8192)
    out = 8192 * 128256 * 4
    inputs = (8192 * 4096 + 128256 * 4096) * 4
    assert models.memory_needed(lm, "fp32") == inputs + out + models.SMALL_WORKSPACE
    assert models.memory_needed(lm, "fp32_tc") == 3 * inputs + out  # the split parts of A and B
    assert models.memory_needed(lm, "bf16") == (inputs + out) // 2 + models.SMALL_WORKSPACE
    assert models.too_big(lm, "fp32", 80 << 30) is None
    assert models.too_big(lm, "fp32", 4 << 30) == "needs about 6.1 GiB of GPU memory, 4.0 GiB free"


# -- summary, table, JSON, plot ---------------------------------------------------


def _fake_records():
    recs = []
    for case, pct in (
        (models.linear_case("qkv", "fwd", 16), 50.0),
        (models.linear_case("qkv", "dgrad", 16), 200.0),
        (models.attention_case("qk", 32, 512), 100.0),
    ):
        for dtype, scale in (("bf16", 1.0), ("fp32", 0.5)):
            r = models.ModelRecord(
                "GPU",
                case.name,
                case.layer,
                case.product,
                case.expression,
                case.tokens,
                case.batch,
                case.M,
                case.N,
                case.K,
                case.ops,
                dtype,
                "wgmma",
                "wgmma(BM=128)",
                {"BM": 128},
                None,
                "",
                100.0 / (pct * scale),
                1.0,
                pct * scale,
                1.0,
                1.0,
                1e-3,
                1e-3,
                True,
                5,
                10,
            )
            recs.append(r.as_dict())
    skipped = models.skipped_record("GPU", models.linear_case("lm_head", "fwd", 8192), "fp32", "needs about 9 GiB")
    return recs + [skipped.as_dict()]


def test_summary_geomean_and_worst():
    s = models.summary(_fake_records())
    assert s["bf16"]["geomean_pct"] == pytest.approx(100.0)  # (50 * 200 * 100) ** (1/3)
    assert s["bf16"]["worst_pct"] == 50.0 and s["bf16"]["worst_case"] == "qkv.fwd M=16"
    assert s["fp32"]["geomean_pct"] == pytest.approx(50.0) and s["fp32"]["worst_pct"] == 25.0
    assert (s["fp32"]["cases"], s["fp32"]["skipped"], s["fp32"]["failed"]) == (3, 1, 0)
    assert (s["bf16"]["cases"], s["bf16"]["skipped"]) == (3, 0)


def test_error_bound():
    assert models.error_ok("bf16", 5e-3, 1e-3) and not models.error_ok("bf16", 2e-2, 1e-3)
    assert models.error_ok("fp32", 3e-5, 1e-5)  # within 4x torch's own error
    assert not models.error_ok("fp32", float("inf"), 1e-6) and not models.error_ok("fp32", None, 1e-6)


def test_table_and_plot(tmp_path):
    recs = _fake_records()
    recs[0]["fallback"] = "wgmma cannot take these operands"
    data = {"records": recs, "summary": models.summary(recs)}
    text = models.table(data)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["case", "dtype", "shape"] and "% torch" in lines[0]
    rows = [ln for ln in lines if ln.startswith(("qkv.", "attention.", "lm_head."))]
    assert rows[0].split()[:8] == ["qkv.fwd", "M=16", "bf16", "16x6144x4096", "NT", "wgmma*", "2.000", "1.000"]
    assert "50.0%" in rows[0]
    assert any(r.startswith("attention.qk BH=32 S=512") and "32x512x512x128" in r for r in rows)
    assert "skipped: needs about 9 GiB" in text
    assert "bf16    geomean 100.0% of torch.matmul over 3 cases; worst 50.0% (qkv.fwd M=16)" in text
    assert "fp32    geomean 50.0% of torch.matmul over 3 cases; worst 25.0% (qkv.fwd M=16); 1 skipped" in text
    assert "* the rung auto wanted could not take these operands" in text
    png = tmp_path / "m.png"
    models.plot(data, png)
    assert png.read_bytes()[:8] == PNG


# -- the timing loop on the CPU: a fake gemmlab.matmul, fake timers -------------------


class _FakePlan:
    def __init__(self, name="wgmma", method=None):
        self.spec = type("Spec", (), {"name": name})
        self.params, self.method, self.fallback_reason = {"BM": 128}, method, ""

    def describe(self):
        return f"{self.spec.name}(BM=128)"


class _FakeClock:
    def __init__(self):
        self.lines, self.done = [], 0

    def say(self, msg):
        self.lines.append(msg)

    def next(self):
        self.done += 1

    def session_budget_s(self):
        return 0.5


def _cpu_maker(storage):
    gen = torch.Generator().manual_seed(0)
    return lambda shape: torch.rand(shape, dtype=getattr(torch, storage), generator=gen).mul_(2).sub_(1)


def _time_fake(monkeypatch, cases, dtypes, matmul, free=1 << 40):
    seen = {"calls": [], "budgets": []}

    def fake_matmul(a, b, *, out, precision):
        seen["calls"].append((a.stride(), b.stride(), precision))
        matmul(a, b, out)

    monkeypatch.setattr(models, "matmul", fake_matmul)
    monkeypatch.setattr(models, "last_plan", lambda: _FakePlan())
    monkeypatch.setattr(suites, "last_plan", lambda: _FakePlan())  # what time_size asks

    def timer_for(share):
        seen["budgets"].append(share)

        def timer(fn, path="kernel"):
            fn()
            ms = 2.0 if fn.func is fake_matmul else 1.0
            return Timing(ms, [ms] * 3)

        return timer

    gpu = type("GPU", (), {"name": "CPU"})
    clock = _FakeClock()
    recs = models.time_cases(cases, dtypes, gpu, clock, maker=_cpu_maker, timer_for=timer_for, free_bytes=lambda: free)
    return [r.as_dict() for r in recs], seen, clock


def test_time_cases_checks_every_result_on_the_views(monkeypatch):
    cases = [models.linear_case("qkv", "fwd", 16), models.linear_case("qkv", "wgrad", 16)]
    recs, seen, clock = _time_fake(
        monkeypatch, cases, ["fp32", "fp32_tc"], lambda a, b, out: torch.matmul(a, b, out=out)
    )
    assert [(r["case"], r["dtype"]) for r in recs] == [
        ("qkv.fwd", "fp32"),
        ("qkv.fwd", "fp32_tc"),
        ("qkv.wgrad", "fp32"),
        ("qkv.wgrad", "fp32_tc"),
    ]
    # gemmlab.matmul got the model's views: W.t() for the forward, dY.t() for the weight gradient
    assert seen["calls"][0][:2] == ((4096, 1), (1, 4096)) and seen["calls"][0][2] is None
    assert ((1, 6144), (4096, 1), "fp32_tc") in seen["calls"]
    for r in recs:
        assert r["ms"] == 2.0 and r["torch_ms"] == 1.0 and r["pct_torch"] == pytest.approx(50.0)
        assert r["rung"] == "wgmma" and r["plan"] == "wgmma(BM=128)" and r["ok"] is True
        assert r["rel_error"] < 1e-6 and r["torch_rel_error"] < 1e-6 and r["reps"] == 3 and r["torch_reps"] == 6
        assert r["tflops"] == pytest.approx(2 * r["M"] * r["N"] * r["K"] / 2e-3 / 1e12)
    assert clock.done == 4 and seen["budgets"] == [0.5] * 4


def test_time_cases_times_the_mode_beside_torch_without_out(monkeypatch):
    # On the CPU the mode leaves the tensors to PyTorch: this checks the suite's
    # flow (torch.matmul outside, inside, outside the mode; no out=), not gemmlab.
    case = models.linear_case("o", "fwd", 16)
    seen = []

    def timer_for(share):
        def timer(fn, path="kernel"):
            fn()
            seen.append(fn.__name__)
            ms = 2.0 if fn.__name__ == "inside_mode" else 1.0
            return Timing(ms, [ms] * 3)

        return timer

    monkeypatch.setattr(models, "last_plan", lambda: _FakePlan("ec_wgmma", "fp16_ec"))
    monkeypatch.setattr(suites, "last_plan", lambda: _FakePlan("ec_wgmma", "fp16_ec"))
    monkeypatch.setattr(models, "matmul", lambda *a, **k: pytest.fail("the mode's case called gemmlab.matmul"))
    gpu = type("GPU", (), {"name": "CPU"})
    recs = models.time_cases(
        [case], ["fp32_tc_mode"], gpu, _FakeClock(), maker=_cpu_maker, timer_for=timer_for, free_bytes=lambda: 1 << 40
    )
    r = recs[0].as_dict()
    assert seen == ["outside_mode", "inside_mode", "outside_mode"]
    assert r["dtype"] == "fp32_tc_mode" and r["pct_torch"] == pytest.approx(50.0) and r["method"] == "fp16_ec"
    assert r["ok"] is True and r["rel_error"] < 1e-6 and r["note"].startswith("torch.matmul(a, b)")


def test_the_mode_needs_room_for_its_results():
    lm = models.linear_case("lm_head", "fwd", 8192)
    out = 8192 * 128256 * 4
    assert models.memory_needed(lm, "fp32_tc_mode") - models.memory_needed(lm, "fp32_tc") == 2 * out


def test_time_cases_flags_a_wrong_result(monkeypatch):
    def wrong(a, b, out):
        torch.matmul(a, b, out=out)
        out[0, 0] += 1e3

    recs, _, _ = _time_fake(monkeypatch, [models.linear_case("o", "dgrad", 16)], ["bf16"], wrong)
    assert recs[0]["ok"] is False and recs[0]["rel_error"] > 1e-2


def test_time_cases_catches_unwritten_output(monkeypatch):
    recs, _, _ = _time_fake(monkeypatch, [models.attention_case("pv", 32, 512)], ["fp16"], lambda a, b, out: None)
    assert recs[0]["ok"] is False and recs[0]["rel_error"] == math.inf


def test_time_cases_skips_what_does_not_fit(monkeypatch):
    qkv = models.linear_case("qkv", "fwd", 16)
    free = models.memory_needed(qkv, "fp32") + models.MEMORY_HEADROOM  # fp32 fits, fp32_tc's parts do not
    recs, seen, clock = _time_fake(
        monkeypatch, [qkv], ["fp32", "fp32_tc"], lambda a, b, out: torch.matmul(a, b, out=out), free=free
    )
    assert recs[0]["dtype"] == "fp32_tc" and recs[0]["skipped"].startswith("needs about")
    assert recs[1]["dtype"] == "fp32" and recs[1]["ms"] == 2.0 and clock.done == 2
    assert any("skipped" in line for line in clock.lines)


def test_clock_shares_the_budget_and_estimates_what_is_left(monkeypatch):
    pairs = [(models.linear_case("qkv", "fwd", 16), "bf16"), (models.linear_case("lm_head", "fwd", 8192), "fp32")]
    clock = models._Clock(pairs, 100.0, quiet=True)
    small, big = clock.estimates
    assert big > small > 0
    assert clock.session_budget_s() == pytest.approx(100.0 * small / (small + big) / 3, rel=1e-3)
    clock.next()
    monkeypatch.setattr(clock, "elapsed", lambda: 2 * small)  # twice the estimate: the rest scales too
    assert clock.left_s() == pytest.approx(2 * big)
    monkeypatch.setattr(clock, "elapsed", lambda: 1000.0)  # over budget: the fewest runs
    assert clock.session_budget_s() == 0.0


# -- the command line -------------------------------------------------------------


def _fake_data():
    recs = _fake_records()
    return {"records": recs, "summary": models.summary(recs)}


def test_bench_models_writes_table_json_and_plot(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run(cases, dtypes, **kw):
        seen.update(cases=cases, dtypes=dtypes, **kw)
        return _fake_data()

    monkeypatch.setattr(models, "run", fake_run)
    js, png = tmp_path / "m.json", tmp_path / "m.png"
    assert (
        main(
            [
                "bench",
                "--suite",
                "models",
                "--tokens",
                "16",
                "--layers",
                "qkv",
                "--dtype",
                "bf16",
                "--products",
                "fwd",
                "--time-budget-s",
                "60",
                "--reps",
                "5",
                "--no-flush",
                "--json",
                str(js),
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    assert [(c.name, c.tokens) for c in seen["cases"]] == [("qkv.fwd", 16)] and seen["dtypes"] == ["bf16"]
    assert (seen["time_budget_s"], seen["reps"], seen["flush"]) == (60.0, 5, False)
    assert "geomean" in capsys.readouterr().out
    assert json.loads(js.read_text()) == _fake_data()
    assert png.read_bytes()[:8] == PNG


def test_bench_models_defaults(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(
        models, "run", lambda cases, dtypes, **kw: seen.update(cases=cases, dtypes=dtypes, **kw) or _fake_data()
    )
    assert main(["bench", "--suite", "models", "--only", "attention"]) == 0
    assert seen["dtypes"] == ["bf16", "fp16", "fp32", "fp32_tc", "fp32_tc_mode"] and len(seen["cases"]) == 12
    assert seen["time_budget_s"] == models.TIME_BUDGET_S


def test_bench_models_fails_when_a_result_is_wrong(monkeypatch, capsys):
    data = _fake_data()
    data["records"][0]["ok"] = False
    monkeypatch.setattr(models, "run", lambda cases, dtypes, **kw: data)
    assert main(["bench", "--suite", "models", "--layers", "qkv"]) == 1
    assert "<< WRONG" in capsys.readouterr().out


def test_tune_suite_models_hands_the_suite_shapes_to_the_tuner(monkeypatch, capsys):
    from gemmlab.tools import tune
    from gemmlab.core.tables import TunedTable

    seen = {}

    def fake_tune(kernels, sizes, **kw):
        seen.update(kernels=kernels, sizes=sizes, **kw)
        return TunedTable("GPU", {})

    monkeypatch.setattr(tune, "tune", fake_tune)
    assert main(["tune", "--suite", "models", "--layers", "o", "--tokens", "16,2048"]) == 0
    o = models.select(layers=["o"], tokens=[16, 2048])
    assert seen["sizes"] == list(models.tune_shapes(o)) and seen["uses"] == models.tune_shapes(o)
    assert seen["uses"][(16, 4096, 4096)] == [("NT", 1), ("NN", 1)]
    assert seen["uses"][(4096, 4096, 16)] == [("TN", 1)]
    assert seen["kernels"] == list(tune.DEFAULT_KERNELS)
    assert main(["tune", "--sizes", "64"]) == 0
    assert seen["sizes"] == [(64, 64, 64)] and seen["uses"] is None


def test_tuner_progress_keys_name_the_uses():
    from gemmlab.tools import tune

    assert tune.progress_key(64, 64, 64) == "64x64x64"
    assert tune.progress_key(16, 4096, 4096, [("NT", 1), ("NN", 1)]) == "16x4096x4096 NT,NN"
    assert tune.progress_key(512, 512, 128, [("NT", 32), ("NT", 128)]) == "512x512x128 NTx32,NTx128"


def test_tuner_split_candidates_count_the_batch():
    from gemmlab.tools import tune
    from gemmlab.kernels import registry

    pipe = registry.get("pipelined")
    assert any(c["SPLITK"] > 1 for c in tune.candidates(pipe, 512, 512, 128, 132))
    assert all(c["SPLITK"] == 1 for c in tune.candidates(pipe, 512, 512, 128, 132, batch=32))


# -- on a GPU: a tiny models suite end to end (timings are not asserted) -------------


@pytest.mark.gpu
def test_models_suite_runs_on_the_gpu():
    cases = models.select(layers=["qkv"], tokens=[16])
    data = models.run(cases, ["bf16", "fp32_tc"], reps=3, budget_s=0.1, time_budget_s=5, quiet=True)
    recs = data["records"]
    assert [(r["case"], r["dtype"]) for r in recs] == [(c.name, d) for c in cases for d in ("bf16", "fp32_tc")]
    assert all(r["ms"] > 0 and r["torch_ms"] > 0 and r["ok"] and r["rung"] for r in recs)
    assert all(r["method"] for r in recs if r["dtype"] == "fp32_tc")
    assert set(data["summary"]) == {"bf16", "fp32_tc"}


@pytest.mark.gpu
def test_models_suite_runs_the_mode_on_the_gpu():
    cases = models.select(layers=["o"], tokens=[16], products=["fwd", "dgrad"])
    data = models.run(cases, ["fp32_tc_mode"], reps=3, budget_s=0.1, time_budget_s=5, quiet=True)
    recs = data["records"]
    assert all(r["ms"] > 0 and r["torch_ms"] > 0 and r["ok"] and r["rung"] for r in recs) and len(recs) == 2
    assert all(r["method"] for r in recs if r["rung"].startswith("ec_"))  # not the FP32 rungs of thin products


@pytest.mark.gpu
def test_models_suite_command_on_the_gpu(tmp_path, capsys):
    js, png = tmp_path / "m.json", tmp_path / "m.png"
    assert (
        main(
            [
                "bench",
                "--suite",
                "models",
                "--tokens",
                "16",
                "--layers",
                "qkv",
                "--dtype",
                "bf16",
                "--reps",
                "3",
                "--time-budget-s",
                "5",
                "--quiet",
                "--json",
                str(js),
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    data = json.loads(js.read_text())
    assert len(data["records"]) == 3 and data["summary"]["bf16"]["cases"] == 3
    assert png.read_bytes()[:8] == PNG


@pytest.mark.gpu
def test_tuner_verifies_each_use_of_a_shape(monkeypatch):
    """tune(uses=...): every candidate runs and is checked in each layout and batch of
    its shape; the table entry names them."""
    from gemmlab.core import tables
    from gemmlab.tools import tune
    from gemmlab.runtime.device import gpu_info

    monkeypatch.setattr(tune, "FINALISTS", 1)
    uses = {(96, 64, 32): [("NT", 1), ("TN", 1)], (64, 32, 96): [("NN", 4)]}
    table = tune.tune(
        ["vectorized"],
        list(uses),
        uses=uses,
        fresh=True,
        quiet=True,
        output=tables.cache_dir() / "models-uses-test.json",
    )
    assert table.shapes["96x64x32"]["uses"] == [{"ops": "NT", "batch": 1}, {"ops": "TN", "batch": 1}]
    assert table.shapes["64x32x96"]["best"]["ms"] > 0
    results = json.loads(tables.progress_path(gpu_info(0).slug).read_text())["results"]
    for key in ("96x64x32 NT,TN", "64x32x96 NNx4"):
        assert results[key]["candidates"] and all(r["status"] == "ok" for r in results[key]["candidates"].values())
