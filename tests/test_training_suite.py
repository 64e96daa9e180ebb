"""`gemmlab bench --suite training`: the models (parameter counts of the published
configurations, tiny ones forward and backward on the CPU, attention's products
as matmuls), the selection, the run's flow on the CPU (tiny models, eager), the
table, JSON and plot, the example; on a GPU small runs end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gemmlab.tools.bench import training  # noqa: E402
from gemmlab.tools.cli import main  # noqa: E402
from gemmlab.runtime.device import gpu_available  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_models.py"


def _tiny(cfg):
    """The same architecture at a few thousand parameters (GQA kept where the model has it)."""
    return training.replace(
        cfg,
        d=64,
        layers=2,
        heads=4,
        kv_heads=2 if cfg.kv_heads != cfg.heads else 4,
        ffn=96,
        vocab=101 if cfg.vocab else 0,
        seq=17,
        image=32 if cfg.image else 0,
        patch=8 if cfg.patch else 0,
        window=2 if cfg.window else 0,
        classes=10 if cfg.classes else 0,
        batch=2,
        drift_batch=2,
        drift_seq=9,
        experts=min(cfg.experts, 5),
        top_k=min(cfg.top_k, 2),
    )


# -- the models ----------------------------------------------------------------------


def test_published_parameter_counts():
    for name, cfg in training.CONFIGS.items():
        if name in training.PUBLISHED_BILLIONS:
            assert round(training.parameter_count(cfg) / 1e9, 2) == training.PUBLISHED_BILLIONS[name], name
        elif name in training.PUBLISHED_SIZES_ONLY:
            continue  # its sizes are checked below
        else:
            assert training.parameter_count(cfg) == training.PUBLISHED_PARAMS[name], name
    # about 1.24B, 124M, 110M and 86M: the sizes the suite's models are known by
    assert [
        round(training.PUBLISHED_PARAMS[n] / 1e6) for n in ("llama-1b", "qwen2-0.5b", "gpt2", "bert-base", "vit-b16")
    ] == [1236, 494, 124, 110, 87]
    llama = training.CONFIGS["llama-1b"]
    assert (llama.d, llama.layers, llama.heads, llama.kv_heads, llama.ffn, llama.vocab) == (
        2048,
        16,
        32,
        8,
        8192,
        128256,
    )
    assert training.CONFIGS["vit-b16"].seq == 1 + (224 // 16) ** 2
    granite = training.CONFIGS["granite-moe-1b"]
    assert (granite.d, granite.layers, granite.heads, granite.kv_heads, granite.ffn, granite.vocab) == (
        1024,
        24,
        16,
        8,
        512,
        49155,
    )
    assert (granite.experts, granite.top_k) == (32, 8)
    # Swin-T's first stage: embed_dim 96, depths[0] 2, num_heads[0] 3, window 7, mlp_ratio 4, patch 4
    swin = training.CONFIGS["swin-t-stage1"]
    assert (swin.d, swin.layers, swin.heads, swin.ffn, swin.window, swin.patch) == (96, 2, 3, 384, 7, 4)
    assert swin.seq == (224 // 4) ** 2 and swin.kind == "vision"
    # BERT-large: hidden 1024, 24 layers, 16 heads, intermediate 4096, post-norm
    large = training.CONFIGS["bert-large-torch"]
    bert_large = (1024, 24, 16, 4096, 30522, False)
    assert (large.d, large.layers, large.heads, large.ffn, large.vocab, large.pre_norm) == bert_large


@pytest.mark.parametrize("name", list(training.CONFIGS))
def test_tiny_models_train_on_the_cpu(name):
    cfg = _tiny(training.CONFIGS[name])
    torch.manual_seed(0)
    model = training.build(cfg)
    assert sum(p.numel() for p in model.parameters()) == training.parameter_count(cfg)
    inputs, targets = training.make_batch(cfg, 2, cfg.seq, "cpu", torch.Generator().manual_seed(0))
    loss = training.loss_of(model, inputs, targets)
    assert loss.shape == () and torch.isfinite(loss)
    expected = torch.log(torch.tensor(float(cfg.classes or cfg.vocab)))
    assert abs(float(loss.detach()) - float(expected)) < 0.5  # small initial weights: about uniform
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    if cfg.vocab:  # the head is the embedding
        assert model.head.weight is model.embed.weight


def test_attention_products_are_matmuls_the_routing_sees():
    """q @ k^T and softmax @ v reach torch.matmul's overridable entry points (as
    Tensor.matmul / __matmul__), the linear layers F.linear: what gemmlab.torch routes."""
    from torch.overrides import TorchFunctionMode

    seen = []

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    cfg = _tiny(training.CONFIGS["llama-1b"])
    model = training.build(cfg)
    inputs, _ = training.make_batch(cfg, 2, cfg.seq, "cpu", torch.Generator().manual_seed(0))
    with Count():
        model(inputs)
    assert sum(n in ("matmul", "__matmul__") for n in seen) == 2 * cfg.layers
    # qkv, o, up (the gate its other half) and down per layer, and the head
    assert seen.count("linear") == 4 * cfg.layers + 1


def test_matmul_shapes_of_a_step():
    """What the warm-up's parallel compilation plans: each forward product and its two gradients."""
    cfg = training.CONFIGS["gpt2"]
    shapes = training.matmul_shapes(cfg)
    rows = 4 * 1024
    assert (rows, 50257, 768, "NT", 1) in shapes  # x @ W.t() of the head
    assert (rows, 768, 50257, "NN", 1) in shapes  # grad @ W
    assert (768, 50257, rows, "TN", 1) in shapes  # x.t() @ grad
    assert (1024, 1024, 64, "NT", 48) in shapes and (1024, 64, 1024, "NN", 48) in shapes  # q @ k^T, p @ v
    assert (1024, 64, 1024, "NN", 48) in shapes and (64, 1024, 1024, "TN", 48) in shapes  # their gradients
    assert len(shapes) == len(set(shapes)) == 19
    vit = training.matmul_shapes(training.CONFIGS["vit-b16"], batch=2)
    assert (2 * 196, 768, 768, "NT", 1) in vit and (2, 1000, 768, "NT", 1) in vit


def test_torch_layers_are_pytorchs_own_and_attend_without_matmuls():
    """bert-large-torch's blocks are nn.TransformerEncoderLayer (post-norm, GELU): each block's
    attention is one F.multi_head_attention_forward (its packed q/k/v and output projections reach
    aten's addmm, which the routing contexts replace; its attention SDPA, no matmul), its MLP two
    F.linear; a step's product list has no attention product."""
    from torch.overrides import TorchFunctionMode

    cfg = _tiny(training.CONFIGS["bert-large-torch"])
    model = training.build(cfg)
    assert all(isinstance(b, torch.nn.TransformerEncoderLayer) and not b.norm_first for b in model.blocks)
    seen = []

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    inputs, _ = training.make_batch(cfg, 2, cfg.seq, "cpu", torch.Generator().manual_seed(0))
    with Count():
        model(inputs)
    assert not any(n in ("matmul", "__matmul__", "bmm", "baddbmm") for n in seen)
    assert seen.count("multi_head_attention_forward") == cfg.layers
    assert seen.count("linear") == 2 * cfg.layers + 2  # up and down a layer; the transform and the head
    shapes = training.matmul_shapes(training.CONFIGS["bert-large-torch"], batch=1)
    assert all(b == 1 for *_, b in shapes) and (512, 3 * 1024, 1024, "NT", 1) in shapes


def test_windows_are_batches_of_short_sequences():
    """Swin's stage: each block's attention takes every window of every image as one sequence of
    window^2 patches (a batch of small products), and a step's products say so."""
    cfg = _tiny(training.CONFIGS["swin-t-stage1"])  # 4 x 4 patches, windows of 2 x 2
    model = training.build(cfg)
    seen = []
    model.blocks[0].attn.register_forward_hook(lambda mod, args, out: seen.append(tuple(args[0].shape)))
    images, _ = training.make_batch(cfg, 3, cfg.seq, "cpu", torch.Generator().manual_seed(0))
    model(images)
    assert seen == [(3 * 4, 4, cfg.d)]  # 3 images x 4 windows, 4 patches each
    swin = training.CONFIGS["swin-t-stage1"]
    shapes = training.matmul_shapes(swin, batch=2)
    windows = 2 * 64 * 3  # images x windows x heads
    assert (49, 49, 32, "NT", windows) in shapes and (49, 32, 49, "NN", windows) in shapes
    assert (2 * 3136, 3 * 96, 96, "NT", 1) in shapes and (2 * 3136, 96, 48, "NT", 1) in shapes  # qkv, patches


def test_matmul_products_count_a_step():
    """Each product with how many times a step makes it: a layer's once a layer, the head's once;
    equal shapes are one entry (GPT-2's Q @ K^T input gradient is its P @ V)."""
    cfg = training.CONFIGS["gpt2"]
    products = training.matmul_products(cfg)
    counts = {p[:5]: p[5] for p in products}
    assert sum(counts.values()) == 3 * (6 * cfg.layers + 1)
    assert counts[(4 * 1024, 50257, 768, "NT", 1)] == 1 and counts[(4 * 1024, 2304, 768, "NT", 1)] == 12
    assert counts[(1024, 64, 1024, "NN", 48)] == 24  # p @ v, and (grad of q @ k^T) @ k
    assert [p[:5] for p in products] == training.matmul_shapes(cfg)
    moe = training.CONFIGS["granite-moe-1b"]
    expert_up = next(
        p for p in training.matmul_products(moe, batch=1) if p[:5] == (1024 * 8 // 32, 2 * 512, 1024, "NT", 1)
    )
    assert expert_up[5] == moe.layers * moe.experts  # every expert of every layer


def test_rotary_positions_rotate_pairs():
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    cos, sin = training._rope_tables(5, 8, x)
    y = training._rotate(x, cos, sin)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1))  # a rotation
    assert torch.equal(y[..., 0, :], x[..., 0, :])  # position 0 is not turned


# -- selection -------------------------------------------------------------------------


def test_quick_is_the_headline():
    runs = training.select(quick=True)
    eager = [r for r in runs if r.mode == "eager"]
    assert [r.model for r in eager] == list(training.CONFIGS)
    grouped = {m for m, c in training.CONFIGS.items() if c.grouped}
    assert all({"bf16", "bf16_gemmlab", "fp32", "fp32_tc"} <= set(r.setups) for r in eager if r.model not in grouped)
    assert all(r.setups == ("bf16", "bf16_gemmlab") for r in eager if r.model in grouped) and grouped
    assert runs[-1] == training.Run("vit-b16", "compile", ("bf16", "bf16_gemmlab"))
    assert training.select(quick=True, models="gpt2") == [training.Run("gpt2", "eager", training.QUICK_SETUPS)]


def test_selection_orders_eager_first_and_adds_baselines():
    runs = training.select(models="gpt2,bert-base", modes="reduce-overhead,eager", precisions="fp32_tc")
    assert [(r.model, r.mode) for r in runs] == [
        ("gpt2", "reduce-overhead"),
        ("bert-base", "reduce-overhead"),
        ("gpt2", "eager"),
        ("bert-base", "eager"),
    ]
    assert all(r.setups == ("fp32", "fp32_tc") for r in runs)  # SGEMM beside fp32_tc
    every = training.select()
    moe = sum(1 for c in training.CONFIGS.values() if c.experts and not c.grouped)  # eager only
    assert len(every) == len(training.CONFIGS) * 3 - 2 * moe and every[0].setups == tuple(training.SETUPS)
    assert training.select(models="granite-moe-1b-grouped", precisions="fp32,fp32_tc") == []


def test_selection_order_is_eager_first_by_default():
    n = len(training.CONFIGS)
    assert [r.mode for r in training.select()][:n] == ["eager"] * n


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"models": "gpt3"}, "--models 'gpt3'"),
        ({"modes": "jit"}, "--modes 'jit'"),
        ({"precisions": "fp64"}, "--precisions 'fp64'"),
        ({"quick": True, "modes": "eager"}, "--quick chooses the modes and precisions"),
    ],
)
def test_selection_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        training.select(**kwargs)


def test_configure_overrides_batch_and_layers():
    cfg = training.configure(training.CONFIGS["llama-1b"], batch=1, num_layers=4)
    assert (cfg.batch, cfg.layers, cfg.d) == (1, 4, 2048)
    with pytest.raises(ValueError, match="--num-layers 0"):
        training.configure(cfg, num_layers=0)


# -- the run's flow on the CPU (tiny models, eager; gemmlab.torch leaves CPU tensors to PyTorch)


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(training, "DEVICE", "cpu")
    monkeypatch.setattr(training, "_gpu_name", lambda: "CPU")
    monkeypatch.setattr(training, "CONFIGS", {k: _tiny(v) for k, v in training.CONFIGS.items()})


def test_run_times_setups_and_compares_with_float64(on_cpu):
    runs = [training.Run("gpt2", "eager", ("bf16", "bf16_gemmlab", "fp32", "tf32", "fp32_tc"))]
    data = training.run(runs, steps=3, quiet=True)
    recs = {r["setup"]: r for r in data["records"]}
    assert list(recs) == ["bf16", "bf16_gemmlab", "fp32", "tf32", "fp32_tc"] and data["gpu"] == "CPU"
    for r in recs.values():
        assert r["ms"] > 0 and len(r["ms_all"]) == 3 and r["items_per_s"] > 0 and r["items"] == "tokens"
        assert r["loss_drift"] is not None and r["weight_drift"] is not None and not r["failed"]
    assert recs["bf16_gemmlab"]["vs_baseline"] == pytest.approx(recs["bf16"]["ms"] / recs["bf16_gemmlab"]["ms"])
    assert recs["fp32_tc"]["vs_tf32"] == pytest.approx(recs["fp32_tc"]["ms"] / recs["tf32"]["ms"])
    # float32 on the CPU is float32 in every setup: far closer to float64 than bfloat16 is
    assert recs["fp32"]["weight_drift"] < 1e-2 < recs["bf16"]["weight_drift"]
    assert recs["fp32"]["loss_drift"] < 1e-5 and recs["fp32_tc"]["weight_rel"] < 1e-5
    assert data["configs"]["gpt2"]["params"] == training.parameter_count(training.CONFIGS["gpt2"])


# -- a user's own models (--config-file) -----------------------------------------------------

MY_CONFIG = {"name": "my-decoder", "kind": "decoder", "d": 64, "layers": 2, "heads": 4, "kv_heads": 2}
MY_CONFIG |= {"ffn": 96, "vocab": 101, "seq": 17, "batch": 2, "gated": True, "rms": True, "rope": True}


def _config_file(tmp_path, configs):
    path = tmp_path / "configs.json"
    path.write_text(json.dumps(configs))
    return path


def test_a_config_file_trains_its_own_models(on_cpu, tmp_path):
    """--config-file: the file's models with Config's defaults for the rest (kv_heads: heads;
    a vision model's seq from its patches), selected and run as the suite's own, its sizes in
    the record."""
    vision = {"name": "my-vit", "kind": "vision", "d": 64, "layers": 1, "heads": 4, "ffn": 96}
    vision |= {"image": 32, "patch": 8, "classes": 10, "batch": 2}
    configs = training.load_configs(_config_file(tmp_path, [MY_CONFIG, vision]))
    mine, vit = configs["my-decoder"], configs["my-vit"]
    assert (mine.kv_heads, mine.gated, mine.drift_seq, mine.source) == (2, True, 17, str(tmp_path / "configs.json"))
    assert (vit.kv_heads, vit.seq) == (4, 1 + 16)
    runs = training.select(models="my-decoder", modes="eager", precisions="fp32", configs=configs)
    assert runs == [training.Run("my-decoder", "eager", ("fp32",))]
    data = training.run(runs, steps=2, quiet=True, configs=configs)
    assert [r["setup"] for r in data["records"]] == ["fp32"] and data["records"][0]["ms"] > 0
    assert data["configs"]["my-decoder"]["params"] == training.parameter_count(mine)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"name": "gpt2"}, "name 'gpt2': is one of the suite's own"),
        ({"kind": "audio"}, "kind 'audio': give one of decoder, encoder, vision"),
        ({"heads": 5}, r"d \(64\) is a multiple of heads \(5\)"),
        ({"kv_heads": 3}, r"heads \(4\) is a multiple of kv_heads \(3\)"),
        ({"layers": -1}, "layers: give a whole number"),
        ({"heads": 0}, "d, layers, heads, kv_heads and ffn are 1 or more"),
        ({"rope": "yes"}, "rope: give true or false"),
        ({"depth": 2}, "unknown field"),
        ({"window": 2}, "a window divides the patches"),
        ({"drift_seq": 99}, "drift_seq is 1 to seq"),
    ],
)
def test_a_config_file_that_does_not_fit_is_refused_naming_the_field(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        training.load_configs(_config_file(tmp_path, [{**MY_CONFIG, **change}]))
    no_vocab = {k: v for k, v in MY_CONFIG.items() if k != "vocab"}
    with pytest.raises(ValueError, match="give vocab"):
        training.load_configs(_config_file(tmp_path, [no_vocab]))
    with pytest.raises(ValueError, match="give a list of models"):
        training.load_configs(_config_file(tmp_path, {"name": "x"}))


def test_the_command_trains_a_config_files_models(tmp_path, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(training, "run", lambda runs, **kw: seen.update(runs=runs, **kw) or {"records": []})
    monkeypatch.setattr(training, "table", lambda data: "")
    path = _config_file(tmp_path, [MY_CONFIG])
    main(["bench", "--suite", "training", "--config-file", str(path), "--modes", "eager", "--precisions", "bf16"])
    assert [r.model for r in seen["runs"]] == ["my-decoder"] and list(seen["configs"]) == ["my-decoder"]
    capsys.readouterr()
    assert main(["bench", "--suite", "shapes", "--config-file", str(path)]) == 2
    assert "--config-file is for --suite training" in capsys.readouterr().err


def test_run_stops_at_the_time_budget_and_reports_a_failing_setup(on_cpu, monkeypatch):
    real = training.train_step

    def step(model, opt, inputs, targets, setup):
        if setup == "bf16_gemmlab":
            raise RuntimeError("no kernel\nsecond line")
        return real(model, opt, inputs, targets, setup)

    monkeypatch.setattr(training, "train_step", step)
    runs = [training.Run("vit-b16", "eager", ("bf16", "bf16_gemmlab")), training.Run("bert-base", "eager", ("fp32",))]
    data = training.run(runs, steps=2, time_budget_s=0.0, quiet=True)
    recs = data["records"]
    assert recs[0]["ms"] > 0 and recs[0]["items"] == "images"
    assert recs[1]["failed"] == "RuntimeError: no kernel" and recs[1]["ms"] is None
    assert recs[2]["skipped"] == "time budget spent"
    text = training.table(data)
    assert "FAILED: RuntimeError: no kernel" in text and "skipped: time budget spent" in text


def _fake_data():
    recs = []
    for mode in ("eager", "compile"):
        for setup, ms in (("bf16", 30.0), ("bf16_gemmlab", 40.0), ("fp32", 100.0), ("tf32", 45.0), ("fp32_tc", 60.0)):
            cfg = training.CONFIGS["vit-b16"]
            drift = dict(loss_drift=1e-6, weight_drift=1e-3, weight_rel=1e-7) if mode == "eager" else {}
            r = training._record(
                "GPU", cfg, mode, setup, ms=ms, ms_all=[ms] * 3, items_per_s=64e3 / ms, warmup_s=1.0, loss=6.9, **drift
            )
            recs.append(r)
        base = {r.setup: r for r in recs if r.mode == mode}
        base["bf16_gemmlab"].vs_baseline = 30.0 / 40.0
        base["fp32_tc"].vs_baseline, base["fp32_tc"].vs_tf32 = 100.0 / 60.0, 60.0 / 45.0
    return {"gpu": "GPU", "torch": "x", "records": [r.as_dict() for r in recs], "configs": {}}


def test_table_and_plot(tmp_path):
    data = _fake_data()
    text = training.table(data)
    assert "75.0% of bf16" in text and "1.67x fp32" in text
    assert "vit-b16 eager: fp32_tc 1.67x as fast as the SGEMM step, its time 1.33x TF32's" in text
    assert "vit-b16 compile: bf16 through gemmlab at 75.0% of PyTorch's step speed" in text
    png = tmp_path / "t.png"
    training.plot(data, png)
    assert png.read_bytes()[:8] == PNG


def test_command_writes_table_json_and_plot(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run(runs, **kw):
        seen.update(runs=runs, **kw)
        return _fake_data()

    monkeypatch.setattr(training, "run", fake_run)
    js, png = tmp_path / "t.json", tmp_path / "t.png"
    assert (
        main(
            [
                "bench",
                "--suite",
                "training",
                "--models",
                "gpt2",
                "--modes",
                "eager,compile",
                "--precisions",
                "bf16",
                "--steps",
                "5",
                "--batch",
                "2",
                "--num-layers",
                "3",
                "--seed",
                "7",
                "--time-budget-s",
                "60",
                "--json",
                str(js),
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    assert seen["runs"] == [
        training.Run("gpt2", "eager", ("bf16", "bf16_gemmlab")),
        training.Run("gpt2", "compile", ("bf16", "bf16_gemmlab")),
    ]
    assert (seen["steps"], seen["batch"], seen["num_layers"], seen["seed"], seen["time_budget_s"]) == (5, 2, 3, 7, 60)
    assert "ms/step" in capsys.readouterr().out
    assert json.loads(js.read_text()) == _fake_data()
    assert png.read_bytes()[:8] == PNG
    main(["bench", "--suite", "training", "--quick"])
    assert seen["runs"] == training.select(quick=True) and seen["time_budget_s"] == training.TIME_BUDGET_S


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--kinds", "small_m"], "--kinds is for --suite shapes"),
        (["--dtype", "bf16"], "--dtype is for --suite ladder or models or shapes"),
        (["--models", "gpt3"], "--models 'gpt3'"),
    ],
)
def test_command_refuses(argv, message, capsys):
    assert main(["bench", "--suite", "training", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(gpu_available(), reason="the message of a machine without a GPU")
def test_without_a_gpu_one_line_and_status_2(capsys):
    assert main(["bench", "--suite", "training", "--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gemmlab bench: ") and "\n" not in err
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().startswith("train_models.py: this example needs a CUDA GPU; ")
    assert "\n" not in done.stderr.strip()


# -- on a GPU: small runs end to end (timings are not asserted) -------------------------


@pytest.mark.gpu
def test_training_suite_runs_eager_on_the_gpu():
    runs = training.select(models="gpt2", modes="eager")
    data = training.run(runs, steps=2, batch=1, num_layers=1, quiet=True)
    recs = {r["setup"]: r for r in data["records"]}
    assert set(recs) == set(training.SETUPS)
    assert all(r["ms"] > 0 and not r["failed"] and r["weight_drift"] is not None for r in recs.values())
    assert recs["fp32_tc"]["vs_baseline"] > 0 and recs["bf16_gemmlab"]["vs_baseline"] > 0
    # fp32_tc's weights stay about as close to float64's as SGEMM's, far closer than bfloat16's
    assert recs["fp32_tc"]["weight_drift"] < 0.1 * recs["bf16"]["weight_drift"]
    assert recs["fp32_tc"]["weight_drift"] < 10 * recs["fp32"]["weight_drift"] + 1e-6


@pytest.mark.gpu
def test_training_suite_runs_compiled_on_the_gpu():
    """torch.compile with CUDA graphs (reduce-overhead), the routed setups included."""
    runs = training.select(models="vit-b16", modes="reduce-overhead", precisions="bf16,fp32_tc")
    data = training.run(runs, steps=2, batch=2, num_layers=1, quiet=True)
    assert [r["setup"] for r in data["records"]] == ["bf16", "bf16_gemmlab", "fp32", "fp32_tc"]
    assert all(r["ms"] > 0 and not r["failed"] for r in data["records"]), data["records"]


@pytest.mark.gpu
def test_training_example_runs_on_the_gpu():
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--model",
            "gpt2",
            "--layers",
            "1",
            "--batch",
            "1",
            "--steps",
            "3",
            "--precision",
            "fp32_tc",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[1].startswith("PyTorch") and lines[2].startswith("gemmlab") and "ms per step" in lines[2]


def test_experts_run_each_token_through_its_top_k():
    """The mixture of experts: every token's output is the router-weighted sum of its top_k
    experts' SwiGLU MLPs (checked against a loop over tokens), each expert a matrix of as many
    rows as tokens chose it, through F.linear (what gemmlab.torch routes)."""
    from torch.overrides import TorchFunctionMode

    cfg = _tiny(training.CONFIGS["granite-moe-1b"])
    torch.manual_seed(0)
    experts = training.build(cfg).blocks[0].mlp
    x = torch.randn(2, 7, cfg.d, dtype=torch.float64)
    experts = experts.double()
    rows = []

    class Rows(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "linear" and args[1].shape[0] == 2 * cfg.ffn:
                rows.append(args[0].shape[0])
            return func(*args, **(kwargs or {}))

    with Rows():
        y = experts(x)
    flat = x.reshape(-1, cfg.d)
    logits = flat @ experts.router.weight.t()
    want = torch.zeros_like(flat)
    for t in range(flat.shape[0]):
        top, which = logits[t].topk(cfg.top_k)
        for w, e in zip(top.softmax(-1), which):
            gate, up = (flat[t] @ experts.up[e].t()).chunk(2)
            want[t] += w * ((torch.nn.functional.silu(gate) * up) @ experts.down[e].t())
    assert torch.allclose(y.reshape(-1, cfg.d), want, atol=1e-12)
    assert sum(rows) == flat.shape[0] * cfg.top_k and len(rows) <= cfg.experts


def test_experts_run_eager_only():
    runs = training.select(models="granite-moe-1b,gpt2", modes="eager,compile")
    assert [(r.model, r.mode) for r in runs] == [("granite-moe-1b", "eager"), ("gpt2", "eager"), ("gpt2", "compile")]
    shapes = training.matmul_shapes(training.CONFIGS["granite-moe-1b"], batch=1)
    assert (1024 * 8 // 32, 2 * 512, 1024, "NT", 1) in shapes  # an expert's up projection, on average
    assert (1024, 32, 1024, "NT", 1) in shapes  # the router


# -- the grouped mixture of experts --------------------------------------------------------


def test_grouped_experts_are_the_loop_variants_model():
    """granite-moe-1b-grouped: the sizes and parameters of granite-moe-1b, listed before it."""
    loop, grouped = training.CONFIGS["granite-moe-1b"], training.CONFIGS["granite-moe-1b-grouped"]
    assert training.replace(grouped, name=loop.name, grouped=False) == loop and grouped.grouped
    assert training.parameter_count(grouped) == training.parameter_count(loop)
    names = list(training.CONFIGS)
    assert names.index("granite-moe-1b-grouped") == names.index("granite-moe-1b") - 1 == len(names) - 2
    tiny = _tiny(grouped)
    torch.manual_seed(0)
    a = training.build(tiny)
    torch.manual_seed(0)
    b = training.build(_tiny(loop))
    assert [(k, v.shape) for k, v in a.state_dict().items()] == [(k, v.shape) for k, v in b.state_dict().items()]
    assert sum(p.numel() for p in a.parameters()) == training.parameter_count(tiny)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_grouped_experts_compute_what_the_loop_computes(dtype):
    """The same weights, the same tokens: the grouped experts' output and gradients are the
    loop's (float32: torch._grouped_mm's CPU kernel; float64: the groups' loop it stands in)."""
    loop, grouped = _tiny(training.CONFIGS["granite-moe-1b"]), _tiny(training.CONFIGS["granite-moe-1b-grouped"])
    torch.manual_seed(0)
    ref = training.build(loop).blocks[0].mlp.to(dtype)
    mine = training.build(grouped).blocks[0].mlp.to(dtype)
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(2, 13, loop.d, dtype=dtype)
    up = torch.randn(2, 13, loop.d, dtype=dtype)
    y_ref, y = ref(x), mine(x)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
    (y_ref * up).sum().backward()
    (y * up).sum().backward()
    for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=tol, atol=tol, msg=name)


def test_grouped_experts_pad_each_group_and_run_two_grouped_products():
    """Two torch._grouped_mm calls a layer (2-D x 3-D, int32 offs), each group padded to
    GROUP_ALIGN_ROWS rows in a buffer whose size does not depend on the routing."""
    from torch.overrides import TorchFunctionMode

    cfg = _tiny(training.CONFIGS["granite-moe-1b-grouped"])
    torch.manual_seed(0)
    experts = training.build(cfg).blocks[0].mlp
    seen = []

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch._grouped_mm:
                seen.append((tuple(args[0].shape), tuple(args[1].shape), (kwargs or {})["offs"].clone()))
            return func(*args, **(kwargs or {}))

    with Calls():
        for seed in (1, 2):
            experts(torch.randn(2, 40, cfg.d, generator=torch.Generator().manual_seed(seed)))
    rows = 2 * 40 * cfg.top_k + cfg.experts * (training.GROUP_ALIGN_ROWS - 1)
    assert [s[:2] for s in seen] == [
        ((rows, cfg.d), (cfg.experts, cfg.d, 2 * cfg.ffn)),
        ((rows, cfg.ffn), (cfg.experts, cfg.ffn, cfg.d)),
    ] * 2
    for _, _, offs in seen:
        sizes = torch.diff(offs, prepend=offs.new_zeros(1))
        assert offs.dtype == torch.int32 and (sizes % training.GROUP_ALIGN_ROWS == 0).all()
        assert 2 * 40 * cfg.top_k <= int(offs[-1]) <= rows
    assert not torch.equal(seen[0][2], seen[2][2])  # the offsets change, the shapes do not


def test_grouped_experts_go_to_the_grouped_rungs_through_use_gemmlab():
    """Inside the routing context (here on the CPU, with float64 stand-ins for the rungs), a
    bfloat16 step of the grouped model hands its two grouped products per layer to the grouped
    rung and their weight gradients to grouped_wgrad; no grouped call stays PyTorch's."""
    from torch_cpu import CPURouting, cpu_kernels, grouped_calls

    cfg = _tiny(training.CONFIGS["granite-moe-1b-grouped"])
    torch.manual_seed(0)
    model = training.build(cfg).to(torch.bfloat16)
    inputs, targets = training.make_batch(cfg, 2, cfg.seq, "cpu", torch.Generator().manual_seed(0))
    with cpu_kernels():
        grouped_calls.update(grouped=0, weight_grad=0)
        with CPURouting(torch.bfloat16):
            loss = training.loss_of(model, inputs, targets)
            assert grouped_calls == {"grouped": 2 * cfg.layers, "weight_grad": 0}
            loss.backward()
        # backward: each product's input gradient (2-D x 3-D) and weight gradient (2-D x 2-D)
        assert grouped_calls == {"grouped": 4 * cfg.layers, "weight_grad": 2 * cfg.layers}
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_grouped_experts_compile():
    """torch.compile (aot_eager on the CPU, bfloat16 as the suite compiles it) of the grouped
    experts, forward and backward: one graph, no recompilation for new offsets."""
    from torch._dynamo.testing import CompileCounterWithBackend

    cfg = _tiny(training.CONFIGS["granite-moe-1b-grouped"])
    torch.manual_seed(0)
    experts = training.build(cfg).blocks[0].mlp.to(torch.bfloat16)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(experts, backend=counter, fullgraph=True)
    for seed in (1, 2, 3):
        x = torch.randn(2, 40, cfg.d, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
        y = compiled(x)
        torch.testing.assert_close(y, experts(x), rtol=2e-2, atol=2e-2)
        y.float().square().sum().backward()
    assert counter.frame_count == 1
    assert all(torch.isfinite(p.grad).all() for p in experts.parameters())
