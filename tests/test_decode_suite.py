"""`gemmlab bench --suite decode` (gemmlab.tools.bench.decode) on the CPU: tiny decoders,
eager (gemmlab.torch leaves CPU tensors to PyTorch).  A decode step over a key/value cache
gives the logits the whole sequence's forward gives at each position, with either kind of
cache; the run times each setup, sets it beside its baseline and compares their logits; the
command writes a table, JSON and a plot.  On a GPU: one short run."""

import json

import pytest

torch = pytest.importorskip("torch")

from gemmlab.runtime.device import gpu_available  # noqa: E402
from gemmlab.tools.bench import decode, training  # noqa: E402
from gemmlab.tools.cli import main  # noqa: E402
from test_training_suite import _tiny  # noqa: E402


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(training, "DEVICE", "cpu")
    monkeypatch.setattr(training, "_gpu_name", lambda: "CPU")
    monkeypatch.setattr(training, "CONFIGS", {k: _tiny(v) for k, v in training.CONFIGS.items()})


@pytest.mark.parametrize("model", ["llama-1b", "gpt2", "granite-moe-1b"])
@pytest.mark.parametrize("cache", decode.CACHES)
def test_a_step_over_the_cache_gives_the_forward_passs_logits(on_cpu, model, cache):
    cfg = training.CONFIGS[model]
    torch.manual_seed(0)
    m = training.build(cfg).eval()
    tokens = torch.randint(0, cfg.vocab, (2, 12))
    B, S = tokens.shape
    empty = torch.zeros(B, cfg.kv_heads, 0, cfg.head_dim)
    caches = [decode.Cache(cache, empty, empty, S) for _ in range(cfg.layers)]
    rope = training._rope_tables(S, cfg.head_dim, m.embed.weight) if cfg.rope else None
    with torch.no_grad():
        full = m(tokens)
        for i in range(S):
            got = decode.step(m, caches, tokens[:, i : i + 1], i, rope)
            torch.testing.assert_close(got[:, 0], full[:, i], rtol=1e-4, atol=1e-5)
    assert all(c.n == S for c in caches)


def test_a_static_cache_is_read_through_views_and_a_grown_one_is_new_at_every_token():
    k = torch.randn(1, 2, 3, 4)
    static, grown = decode.Cache("static", k, k, 8), decode.Cache("grown", k, k, 8)
    ks, _ = static.append(k[:, :, :1], k[:, :, :1])
    assert ks.shape[2] == 4 and ks.data_ptr() == static.k.data_ptr() and not ks.is_contiguous()
    before = grown.k
    kg, _ = grown.append(k[:, :, :1], k[:, :, :1])
    assert kg.shape[2] == 4 and kg.is_contiguous() and kg.data_ptr() != before.data_ptr()
    torch.testing.assert_close(ks, kg)


def test_run_times_each_setup_beside_its_baseline(on_cpu):
    setups = ("bf16", "bf16_gemmlab", "fp32", "tf32", "fp32_tc")
    data = decode.run(["llama-1b"], setups, decode.CACHES, prompt=5, tokens=2, rounds=2, quiet=True)
    recs = {(r["cache"], r["setup"]): r for r in data["records"]}
    assert len(recs) == 10 and data["gpu"] == "CPU" and data["configs"]["llama-1b"]["layers"] == 2
    for (cache, setup), r in recs.items():
        assert r["ms"] > 0 and len(r["ms_all"]) == 2 and r["tokens_per_s"] > 0 and not r["failed"]
        assert r["baseline"] == training.BASELINE.get(setup)
        if r["baseline"]:
            base = recs[cache, r["baseline"]]
            assert r["vs_baseline"] == pytest.approx(base["ms"] / r["ms"])
            # on the CPU every setup is PyTorch's own product: the same logits
            assert r["logits_diff"] == 0.0
        else:
            assert r["vs_baseline"] is None and r["logits_diff"] is None
    assert "llama-1b" in decode.table(data) and "vs PyTorch" in decode.table(data)


def test_run_refuses_what_it_cannot_run(on_cpu):
    with pytest.raises(ValueError, match="decoders"):
        decode.run(["vit-b16"], ("bf16",), quiet=True)
    with pytest.raises(ValueError, match="cache 'paged'"):
        decode.run(["gpt2"], ("bf16",), ("paged",), quiet=True)
    with pytest.raises(ValueError, match="1 or more"):
        decode.run(["gpt2"], ("bf16",), tokens=0, quiet=True)


def test_command_writes_table_json_and_plot(on_cpu, tmp_path, capsys):
    out, png = tmp_path / "decode.json", tmp_path / "decode.png"
    argv = ["bench", "--suite", "decode", "--models", "gpt2", "--precisions", "fp32_tc", "--caches", "grown"]
    argv += ["--prompt", "4", "--steps", "2", "--num-layers", "1", "--json", str(out), "--plot", str(png), "--quiet"]
    assert main(argv) == 0
    data = json.loads(out.read_text())
    assert [r["setup"] for r in data["records"]] == ["fp32", "fp32_tc"] and png.stat().st_size > 0
    assert data["configs"]["gpt2"]["layers"] == 1
    assert "fp32_tc" in capsys.readouterr().out


def test_the_command_refuses_decode_options_elsewhere(capsys):
    assert main(["bench", "--suite", "shapes", "--caches", "grown"]) == 2
    assert "--caches is for --suite decode" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs a GPU")
def test_decode_suite_runs_on_the_gpu():
    data = decode.run(["gpt2"], ("bf16", "bf16_gemmlab"), ("static",), prompt=64, tokens=2, rounds=1, num_layers=2)
    (base, mine) = data["records"]
    assert not base["failed"] and not mine["failed"] and mine["vs_baseline"] > 0
    assert mine["logits_diff"] < 5e-2  # bfloat16 products, summed in another order
