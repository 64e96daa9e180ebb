"""`gemmlab bench --suite shapes`: the generator (counts, views, determinism, kinds),
the selection, the summary, table, JSON and plot (no GPU: PyTorch on the CPU and a
fake gemmlab.matmul), and on a GPU a sample of the suite end to end."""

import json
import math
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from gemmlab.tools.bench import models, shapes, suites  # noqa: E402
from gemmlab.tools.bench.timing import Timing  # noqa: E402
from gemmlab.tools.cli import main  # noqa: E402
from gemmlab.runtime.device import gpu_available  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _meta(shape):
    return torch.empty(shape, device="meta", dtype=torch.bfloat16)


def _find(products, model, layer, view, tokens, batch=1):
    """The product of ``view`` of ``model``'s ``layer`` at ``tokens`` (attention: S)."""
    hits = [
        p for p in products if (p.model, p.layer, p.product, p.tokens, p.batch) == (model, layer, view, tokens, batch)
    ]
    assert len(hits) == 1, hits
    return hits[0]


# -- the generator -----------------------------------------------------------------


def test_at_least_300_products_from_at_least_10_models():
    products = shapes.generate()
    named = {p.model for p in products} - {shapes.RANDOM}
    assert len(products) >= 300 and len(named) >= 10 and len(shapes.MODELS) >= 10
    assert all(m.source and m.family for m in shapes.MODELS.values())
    # each (shape, layout, batch) once
    assert len({(p.M, p.N, p.K, p.batch, p.ops) for p in products}) == len(products)
    counts = Counter(p.kind for p in products)
    assert set(counts) == set(shapes.KINDS) and min(counts.values()) >= 10, counts


def test_each_linear_layer_comes_in_three_views():
    """Before products shared by two models are merged, each model's linear layer
    at each token count is its forward, input-gradient and weight-gradient product,
    attention its Q @ K^T, P @ V and the backward's P^T @ dO (a TN batch), and a decoding
    step its Q @ K^T and P @ V."""
    for m in shapes.MODELS.values():
        mine = shapes._model_products(m)
        linear = Counter(
            (p.layer, p.tokens)
            for p in mine
            if p.layer not in (models.ATTENTION, models.DECODE, models.DECODE_CACHE) and p.product != "fwd_t"
        )
        assert set(linear.values()) == {3}
        for layer, tokens in linear:
            views = {p.product: p for p in mine if (p.layer, p.tokens) == (layer, tokens)}
            fwd, dgrad, wgrad = views["fwd"], views["dgrad"], views["wgrad"]
            assert (fwd.M, fwd.N, fwd.K, fwd.ops) == (tokens, dgrad.K, dgrad.N, "NT")
            assert (dgrad.M, dgrad.ops) == (tokens, "NN")
            assert (wgrad.M, wgrad.N, wgrad.K, wgrad.ops) == (fwd.N, fwd.K, tokens, "TN")
        attention = Counter((p.batch, p.tokens) for p in mine if p.layer == models.ATTENTION)
        assert len(attention) == len(m.attention) and set(attention.values()) == ({3} if m.attention else set())
        for bh, seq in m.attention:
            qk, pv, dv = (p for p in mine if p.layer == models.ATTENTION and (p.batch, p.tokens) == (bh, seq))
            assert (qk.ops, pv.ops, dv.ops) == ("NT", "NN", "TN")
            assert (dv.M, dv.N, dv.K) == (seq, m.head_dim, seq) and dv.stored == ((bh, seq, seq), (bh, seq, m.head_dim))
            a, b = dv.operands(lambda shape: torch.empty(shape, device="meta"))
            assert a.shape == (bh, seq, seq) and a.stride() == (seq * seq, 1, seq)  # P.transpose(-1, -2)
            assert b.shape == (bh, seq, m.head_dim) and b.is_contiguous()
        decode = Counter((p.batch, p.tokens) for p in mine if p.layer == models.DECODE)
        assert len(decode) == len(m.decode) and set(decode.values()) <= {2}
        cache = Counter((p.batch, p.M, p.tokens, p.capacity) for p in mine if p.layer == models.DECODE_CACHE)
        assert sorted(cache) == sorted(m.decode_cache) and set(cache.values()) <= {2}
        for bkv, rows, ctx in m.decode:
            qk, pv = (p for p in mine if p.layer == models.DECODE and (p.batch, p.tokens) == (bkv, ctx))
            assert (qk.M, qk.N, qk.K, qk.ops) == (rows, ctx, m.head_dim, "NT")
            assert (pv.M, pv.N, pv.K, pv.ops) == (rows, m.head_dim, ctx, "NN")


def test_transposed_views_on_activations_stored_feature_major():
    """x_t.t() @ W.t(): the layers of TRANSPOSED_LAYERS at each model's largest token count, both
    operands transposed views of contiguous tensors (TT), kind "tt" where nothing else applies."""
    products = shapes.generate()
    tt = [p for p in products if p.ops == "TT"]
    assert len(tt) >= 15 and all(p.product == "fwd_t" and p.layer in shapes.TRANSPOSED_LAYERS for p in tt)
    assert sum(p.kind == "tt" for p in tt) >= 10
    up = _find(products, "llama-3.2-1b", "up", "fwd_t", 2048)
    fwd = _find(products, "llama-3.2-1b", "up", "fwd", 2048)
    assert (up.M, up.N, up.K, up.ops) == (fwd.M, fwd.N, fwd.K, "TT") and up.stored == ((2048, 2048), (8192, 2048))
    a, b = up.operands(lambda shape: torch.empty(shape))
    assert a.shape == (2048, 2048) and a.stride() == (1, 2048)  # x_t (features, tokens), viewed
    assert b.shape == (2048, 8192) and b.stride() == (1, 2048)  # W.t()
    assert shapes.kinds_of(2048, 8192, 2048, 1, "TT", up.stored) == ("tt",)


def test_views_are_the_ones_pytorch_hands_over():
    products = shapes.generate()
    head = _find(products, "gpt2", "lm_head", "dgrad", 1024)  # dY @ W, W of 50257 x 768
    assert (head.M, head.N, head.K) == (1024, 768, 50257)
    a, b = head.operands(_meta)
    assert a.stride() == (50257, 1) and b.shape == (50257, 768) and b.stride() == (768, 1)
    fwd = _find(products, "gpt2", "lm_head", "fwd", 1024)  # x @ W.t()
    a, b = fwd.operands(_meta)
    assert b.shape == (768, 50257) and b.stride() == (1, 768)
    wgrad = _find(products, "gpt2", "lm_head", "wgrad", 1024)
    a, b = wgrad.operands(_meta)
    assert a.shape == (50257, 1024) and a.stride() == (1, 50257)  # dY.t()
    qk = _find(products, "vit-b16", "attention", "qk", 197, batch=384)
    a, b = qk.operands(_meta)
    assert (qk.M, qk.N, qk.K) == (197, 197, 64) and b.shape == (384, 64, 197) and b.stride() == (197 * 64, 1, 64)
    # a decoding step of Llama 3 8B: 4 query heads per key/value head, 8193 cached positions;
    # and against the first 3001 positions of a cache allocated for 8192: each matrix of K and
    # V one capacity apart, as a generation loop's k_cache[:, :S] hands it over
    for layer, S, capacity in (("decode", 8193, 8193), ("decode_cache", 3001, 8192)):
        qk = _find(products, "llama-3-8b", layer, "qk", S, batch=8)
        a, b = qk.operands(_meta)
        assert a.shape == (8, 4, 128) and b.shape == (8, 128, S) and b.stride() == (capacity * 128, 1, 128)
        pv = _find(products, "llama-3-8b", layer, "pv", S, batch=8)
        a, b = pv.operands(_meta)
        assert a.shape == (8, 4, S) and b.shape == (8, S, 128) and b.stride() == (capacity * 128, 128, 1)
        assert qk.kind == "decode" and qk.stored_elements() == 8 * 4 * 128 + 8 * capacity * 128


def test_generation_is_deterministic_by_seed():
    assert shapes.generate(0) == shapes.generate(0)
    one, other = shapes.generate(0), shapes.generate(1)
    assert [p for p in one if p.model != shapes.RANDOM] == [p for p in other if p.model != shapes.RANDOM]
    rand = [p for p in one if p.model == shapes.RANDOM]
    assert rand != [p for p in other if p.model == shapes.RANDOM]
    linear = [p for p in rand if p.layer != models.ATTENTION]
    assert len(linear) == 3 * shapes.RANDOM_LAYERS
    assert all(p.tokens % 2 and p.K % 2 if p.product == "wgrad" else p.tokens % 2 for p in linear)


@pytest.mark.parametrize(
    "model, layer, view, tokens, kind",
    [
        ("gpt2", "lm_head", "dgrad", 1024, "odd_align"),  # K = 50257: dY's rows off the 16-byte grid
        ("bert-base", "mlm_decoder", "fwd", 128, "odd_align"),  # N = 30522
        ("whisper-small", "lm_head", "wgrad", 448, "odd_align"),  # M = 51865
        ("vit-b16", "attention", "pv", 197, "batched_odd"),
        ("llama-3-8b", "up", "fwd", 16, "small_m"),  # 16 x 14336 x 4096, decode
        ("mixtral-8x7b", "expert_up", "dgrad", 37, "small_m"),  # 37 rows for one expert
        ("mixtral-8x7b", "expert_down", "wgrad", 3, "small_k"),
        ("qwen2.5-7b", "kv", "fwd", 2048, "few_tiles"),  # 2048 x 512 x 3584: 64 tiles of 128 x 128
        ("llama-3.2-1b", "q", "fwd", 2048, "nt"),
        ("llama-3.2-1b", "q", "wgrad", 2048, "tn"),
        ("llama-3.2-1b", "q", "dgrad", 2048, "nn"),
        ("llama-3-8b", "decode", "qk", 8193, "decode"),  # 8 x 4 x 8193 x 128: a GQA group per KV head
        ("gpt2", "decode", "pv", 1025, "decode"),  # 96 x 1 x 64 x 1025: one query row per head
    ],
)
def test_kinds_on_known_products(model, layer, view, tokens, kind):
    batch = (
        {"vit-b16": 384}.get(model, 1)
        if layer == "attention"
        else {"llama-3-8b": 8, "gpt2": 96}[model]
        if layer == "decode"
        else 1
    )
    assert _find(shapes.generate(), model, layer, view, tokens, batch).kind == kind


def test_kinds_of_by_hand():
    sq = ((4096, 4096), (4096, 4096))
    assert shapes.kinds_of(4096, 4096, 4096, 1, "NT", sq) == ("nt",)
    assert shapes.kinds_of(197, 197, 64, 384, "NT", ((384, 197, 64),) * 2) == ("batched_odd", "odd_align", "nt")
    assert shapes.kinds_of(512, 512, 128, 32, "NN", ((32, 512, 512), (32, 512, 128))) == ("batched", "nn")
    assert shapes.kinds_of(4, 14336, 4096, 1, "NT", ((4, 4096), (14336, 4096))) == ("small_m", "few_tiles", "nt")
    assert shapes.kinds_of(1024, 768, 50257, 1, "NN", ((1024, 50257), (50257, 768)))[0] == "odd_align"
    assert shapes.kinds_of(2048, 1024, 3584, 1, "NT", ((2048, 3584), (1024, 3584))) == ("few_tiles", "nt")
    assert shapes.kinds_of(4, 8193, 128, 8, "NT", ((8, 4, 128), (8, 8193, 128)))[:2] == ("decode", "batched_odd")
    assert shapes.kinds_of(17, 8193, 128, 8, "NT", ((8, 17, 128), (8, 8193, 128)))[0] == "batched_odd"


# -- selection -----------------------------------------------------------------------


def test_selection_by_model_kind_limit_and_sample():
    every = shapes.select()
    assert every == shapes.generate()
    gpt2 = shapes.select(model_names=["gpt2"])
    assert gpt2 and {p.model for p in gpt2} == {"gpt2"}
    odd = shapes.select(kinds=["odd_align"])
    assert odd and all("odd_align" in p.kinds for p in odd)
    assert any(p.kind != "odd_align" for p in odd)  # any of its kinds, not only the first
    assert shapes.select(limit=7) == every[:7]
    sample = shapes.select(sample=50, seed=3)
    assert len(sample) == 50 and sample == shapes.select(sample=50, seed=3) != shapes.select(sample=50, seed=4)
    assert all(p in every or p.model == shapes.RANDOM for p in sample)
    assert shapes.parse_models("gpt2, random") == ["gpt2", "random"]
    assert shapes.parse_kinds("small_m") == ["small_m"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"limit": 3, "sample": 3}, "give --limit or --sample, not both"),
        ({"limit": 0}, "--limit 0"),
        ({"sample": -1}, "--sample -1"),
        ({"model_names": ["gpt2"], "kinds": ["small_m"]}, "has no products"),
    ],
)
def test_selection_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        shapes.select(**kwargs)


# -- a user's own models (--model-file) ----------------------------------------------------


def _model_file(tmp_path, models_json):
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json))
    return path


MY_MODEL = {
    "name": "my-encoder",
    "family": "encoder",
    "source": "my config.json",
    "tokens": [197, 3000],
    "layers": [["qkv", 640, 1920], ["head", 640, 37, [4]]],
    "head_dim": 80,
    "attention": [[96, 197]],
    "decode": [[8, 2, 501]],
}


def test_a_model_file_makes_the_suites_views_of_its_models(tmp_path):
    """A model from a file makes the products a suite model of the same sizes makes: each layer's
    three views at each token count (or its own), attention's two, a decoding step's two."""
    own = shapes.load_models(_model_file(tmp_path, [MY_MODEL]))
    assert [m.name for m in own] == ["my-encoder"] and own[0].layers[1] == ("head", 640, 37, (4,))
    products = shapes.select(own=own)
    assert products == shapes.generate(own=own) and {p.model for p in products} == {"my-encoder"}
    qkv = _find(products, "my-encoder", "qkv", "wgrad", 3000)
    assert (qkv.M, qkv.N, qkv.K, qkv.ops) == (1920, 640, 3000, "TN")
    assert "small_m" in _find(products, "my-encoder", "head", "fwd", 4).kinds
    qk = _find(products, "my-encoder", "attention", "qk", 197, batch=96)
    assert (qk.M, qk.N, qk.K) == (197, 197, 80)
    # qkv's three views at two token counts, the head's at its own, attention's three, decoding's two
    assert len(products) == 2 * 3 + 3 + 3 + 2
    assert shapes.select(own=own, model_names=shapes.parse_models("my-encoder", ["my-encoder"])) == products
    assert shapes.sources(own) == {"my-encoder": {"family": "encoder", "source": "my config.json"}}
    minimal = shapes.load_models(_model_file(tmp_path, [{"name": "m", "layers": [["up", 8, 24]], "head_dim": 8}]))
    assert minimal[0].tokens == (2048,) and minimal[0].attention == () and minimal[0].source.endswith("models.json")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"name": "gpt2"}, "name 'gpt2': is one of the suite's own"),
        ({"name": ""}, "give a new name"),
        ({"layers": []}, "layers: give a list"),
        ({"layers": [["up", 8]]}, r"layers\[0\]: give \[name, in features"),
        ({"layers": [["up", 8, -2]]}, r"layers\[0\]'s features: give 2 positive integers"),
        ({"layers": [["up", 8, 24, []]]}, r"layers\[0\]'s token counts: give a list of positive integers"),
        ({"head_dim": 0}, "head_dim: give a positive integer"),
        ({"tokens": [128, 0]}, "tokens: give a list of positive integers"),
        ({"attention": [[96]]}, r"attention\[0\]: give 2 positive integers"),
        ({"decode": [[8, 2, 1.5]]}, r"decode\[0\]: give 3 positive integers"),
        ({"heads": 12}, "unknown field"),
        ({"attention": 96}, "attention: give a list of lists"),
    ],
)
def test_a_model_file_that_does_not_say_is_refused_naming_the_field(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        shapes.load_models(_model_file(tmp_path, [{**MY_MODEL, **change}]))


def test_a_model_file_that_is_not_a_list_of_models_is_refused(tmp_path):
    for bad, message in (({"name": "x"}, "give a list of models"), ([], "give a list of models"), ([3], "an object")):
        with pytest.raises(ValueError, match=message):
            shapes.load_models(_model_file(tmp_path, bad))
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(ValueError, match="broken.json"):
        shapes.load_models(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="--model-file .*missing.json"):
        shapes.load_models(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="name 'a'"):  # two models of one name
        shapes.load_models(_model_file(tmp_path, [{**MY_MODEL, "name": "a"}, {**MY_MODEL, "name": "a"}]))


def test_option_lists_refuse_unknown_names():
    for parse, text in ((shapes.parse_models, "gpt3"), (shapes.parse_kinds, "odd"), (shapes.parse_kinds, "")):
        with pytest.raises(ValueError, match="give a comma list"):
            parse(text)


# -- the timing loop on the CPU: records carry the tags ------------------------------


def test_records_carry_model_kind_and_view(monkeypatch):
    products = (
        shapes.select(model_names=["gpt2"])[:3]
        + [p for p in shapes.generate() if p.model == "vit-b16" and p.batch > 1][:1]
    )
    calls = []

    def fake_matmul(a, b, *, out, precision):
        calls.append((a.stride(), b.stride()))
        torch.matmul(a, b, out=out)

    class Plan:
        spec = type("Spec", (), {"name": "wgmma"})
        params, method, fallback_reason = {}, None, ""

        def describe(self):
            return "wgmma()"

    monkeypatch.setattr(models, "matmul", fake_matmul)
    monkeypatch.setattr(models, "last_plan", Plan)
    monkeypatch.setattr(suites, "last_plan", Plan)

    class Clock:
        def say(self, msg):
            pass

        def next(self):
            pass

        def session_budget_s(self):
            return 0.1

    def timer_for(share):
        def timer(fn, path="kernel"):
            fn()
            ms = 2.0 if getattr(fn, "func", None) is fake_matmul else 1.0
            return Timing(ms, [ms] * 3)

        return timer

    gen = torch.Generator().manual_seed(0)

    def maker(storage):
        return lambda shape: torch.rand(shape, dtype=getattr(torch, storage), generator=gen).mul_(2).sub_(1)

    recs = [
        r.as_dict()
        for r in models.time_cases(
            products,
            ["fp32"],
            type("GPU", (), {"name": "CPU"}),
            Clock(),
            maker=maker,
            timer_for=timer_for,
            free_bytes=lambda: 1 << 40,
        )
    ]
    assert len(recs) == 4 and all(r["ok"] and r["pct_torch"] == pytest.approx(50.0) for r in recs)
    for p, r in zip(products, recs):
        assert r["tags"] == {"model": p.model, "kind": p.kind, "kinds": list(p.kinds), "view": p.product}
        assert r["case"] == p.name and (r["M"], r["N"], r["K"], r["batch"]) == (p.M, p.N, p.K, p.batch)
    assert calls[0] == ((768, 1), (1, 768))  # x @ W.t(): W's transposed view, no copy


# -- summary, table, JSON, plot ------------------------------------------------------


def _fake_data():
    recs = []
    picks = shapes.generate()[:40:4]
    for i, p in enumerate(picks):
        for dtype, scale in (("bf16", 1.0), ("fp32_tc", 2.0)):
            pct = (60.0 + 10 * i) * scale
            r = models._record(
                p,
                dtype,
                "GPU",
                type("T", (), {"ms": 1.0, "rel_error": 1e-3, "reps": 6, "note": "torch"}),
                type(
                    "O",
                    (),
                    {
                        "kernel": "wgmma",
                        "note": "wgmma()",
                        "params": {},
                        "ms": 100 / pct,
                        "pct_cublas": pct,
                        "rel_error": 1e-3,
                        "reps": 3,
                        "skipped": None,
                    },
                ),
                type("P", (), {"method": "fp16_ec" if dtype == "fp32_tc" else None, "fallback_reason": ""}),
            )
            recs.append(r.as_dict())
    recs.append(models.skipped_record("GPU", picks[0], "bf16", "failed: GemmlabError: boom", ok=False).as_dict())
    return {"records": recs, "summary": shapes.summary(recs), "models": shapes.sources()}


def test_summary_counts_kinds_and_the_slow():
    data = _fake_data()
    s = data["summary"]
    bf16 = [r for r in data["records"] if r["dtype"] == "bf16" and r.get("pct_torch")]
    assert s["bf16"]["all"]["products"] == 10 and s["bf16"]["all"]["failed"] == 1
    assert s["bf16"]["all"]["below_90"] == sum(r["pct_torch"] < 90 for r in bf16) == 3
    assert s["bf16"]["all"]["geomean_pct"] == pytest.approx(math.exp(sum(math.log(r["pct_torch"]) for r in bf16) / 10))
    assert s["bf16"]["all"]["worst_pct"] == 60.0
    assert sum(k["products"] for k in s["bf16"]["kinds"].values()) == 10
    assert "big" in s["fp32_tc"] and "big" not in s["bf16"]
    big = [r for r in data["records"] if r["dtype"] == "fp32_tc" and shapes.gflop(r) >= 1.0]
    assert s["fp32_tc"]["big"]["products"] == len(big)


def test_table_json_and_plot_through_the_command(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run(products, dtypes, **kw):
        seen.update(products=products, dtypes=dtypes, **kw)
        return _fake_data()

    monkeypatch.setattr(shapes, "run", fake_run)
    js, png = tmp_path / "s.json", tmp_path / "s.png"
    assert (
        main(
            [
                "bench",
                "--suite",
                "shapes",
                "--models",
                "gpt2,vit-b16",
                "--kinds",
                "odd_align,batched_odd",
                "--dtype",
                "bf16,fp32_tc",
                "--sample",
                "5",
                "--seed",
                "2",
                "--time-budget-s",
                "30",
                "--json",
                str(js),
                "--plot",
                str(png),
            ]
        )
        == 1
    )  # the fake data holds a failure
    assert len(seen["products"]) == 5 and seen["dtypes"] == ["bf16", "fp32_tc"]
    assert seen["products"] == shapes.select(
        seed=2, sample=5, model_names=["gpt2", "vit-b16"], kinds=["odd_align", "batched_odd"]
    )
    assert seen["time_budget_s"] == 30.0 and seen["seed"] == 2
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:2] == ["kind", "bf16"]
    assert "all " in out and "below 90%" in out and "WRONG or failed" in out and "slowest products" in out
    assert "of >= 1 GFLOP: geomean" in out
    assert json.loads(js.read_text()) == json.loads(json.dumps(_fake_data()))
    assert png.read_bytes()[:8] == PNG


def test_command_defaults(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(
        shapes, "run", lambda products, dtypes, **kw: seen.update(n=len(products), dtypes=dtypes, **kw) or _fake_data()
    )
    main(["bench", "--suite", "shapes"])
    assert seen["n"] == len(shapes.generate()) and seen["dtypes"] == list(shapes.DTYPES)
    assert seen["time_budget_s"] == shapes.TIME_BUDGET_S


def test_command_times_a_model_files_products(tmp_path, monkeypatch, capsys):
    """--model-file: the file's models' products, and the record names their sources; a file that
    does not say is refused in one line, and the option is the shapes suite's only."""
    seen = {}
    monkeypatch.setattr(
        shapes,
        "run",
        lambda products, dtypes, **kw: seen.update(products=products, own=kw.get("own")) or _fake_data(),
    )
    path = _model_file(tmp_path, [MY_MODEL])
    main(["bench", "--suite", "shapes", "--model-file", str(path), "--models", "my-encoder"])
    assert {p.model for p in seen["products"]} == {"my-encoder"} and [m.name for m in seen["own"]] == ["my-encoder"]
    capsys.readouterr()
    bad = _model_file(tmp_path, [{**MY_MODEL, "head_dim": -1}])
    assert main(["bench", "--suite", "shapes", "--model-file", str(bad)]) == 2
    assert "head_dim: give a positive integer" in capsys.readouterr().err
    assert main(["bench", "--suite", "training", "--model-file", str(path)]) == 2
    assert "--model-file is for --suite shapes" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--limit", "3", "--sample", "3"], "give --limit or --sample, not both"),
        (["--tokens", "16"], "--tokens is for --suite models"),
        (["--quick"], "--quick is for --suite training"),
        (["--dtype", "tf32"], "--dtype 'tf32'"),
        (["--time-budget-s", "-1"], "--time-budget-s -1"),
    ],
)
def test_command_refuses(argv, message, capsys):
    assert main(["bench", "--suite", "shapes", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(gpu_available(), reason="the message of a machine without a GPU")
def test_without_a_gpu_one_line_and_status_2(capsys):
    assert main(["bench", "--suite", "shapes", "--limit", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gemmlab bench: ") and "\n" not in err


# -- on a GPU: a sample of the suite end to end (timings are not asserted) -------------


@pytest.mark.gpu
def test_shapes_suite_runs_on_the_gpu(tmp_path):
    products = shapes.select(sample=6, seed=1, kinds=["odd_align", "batched_odd", "small_m"])
    data = shapes.run(products, ["bf16", "fp32_tc"], reps=3, budget_s=0.1, time_budget_s=5, quiet=True)
    recs = data["records"]
    assert len(recs) == 12 and all(r["ms"] > 0 and r["torch_ms"] > 0 and r["ok"] and r["rung"] for r in recs)
    assert {r["tags"]["kind"] for r in recs} <= set(shapes.KINDS)
    assert data["summary"]["bf16"]["all"]["products"] == 6
    shapes.plot(data, tmp_path / "s.png")
    assert "geometric mean" in shapes.table(data)
