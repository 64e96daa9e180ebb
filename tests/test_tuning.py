"""The autotuner's search space, its tables and how calls use them (no GPU), and,
on a GPU, that it verifies every candidate and resumes after an interrupt."""

import json
import math

import pytest

import gemmlab
from gemmlab.tools import tune
from gemmlab.kernels import registry
from gemmlab.kernels.simt import pipelined
from gemmlab.core import tables
from gemmlab.core.tables import TunedTable, load_table, parse_shape_key, shape_key
from gemmlab.tools.tune import candidate_key, candidates

PIPE = registry.get("pipelined")


@pytest.fixture
def table_dirs(tmp_path, monkeypatch):
    """Empty shipped and user table folders; returns (shipped folder, user folder)."""
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(tables, "SHIPPED_DIR", shipped)
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    load_table.cache_clear()
    yield shipped, tmp_path / "cache" / "tuned"
    load_table.cache_clear()


def _win(kernel, params, ms=1.0):
    return {"kernel": kernel, "params": params, "ms": ms}


def _write(folder, slug, shapes):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{slug}.json").write_text(json.dumps({"gpu": slug, "shapes": shapes}))


def test_keys_round_trip():
    assert shape_key(8192, 64, 8192) == "8192x64x8192"
    assert parse_shape_key("8192x64x8192") == (8192, 64, 8192)
    assert candidate_key("vectorized", {"BM": 64, "BN": 128}) == "vectorized:BM=64,BN=128"


# -- the search space ---------------------------------------------------------------


def test_square_shapes_that_fill_the_gpu_get_no_split():
    cands = candidates(PIPE, 4096, 4096, 4096, 132)
    assert {c["SPLITK"] for c in cands} == {1}
    assert cands == [c for c in PIPE.configurations() if c["SPLITK"] == 1]


@pytest.mark.parametrize("M, N, K", [(8192, 64, 8192), (64, 8192, 8192), (256, 4096, 4096), (100, 100, 300)])
def test_splits_only_where_they_can_help(M, N, K):
    sm = 132
    cands = candidates(PIPE, M, N, K, sm)
    assert all(PIPE.resolve(c) == c for c in cands)  # legal, each one
    assert [c for c in cands if c["SPLITK"] == 1] == [c for c in PIPE.configurations() if c["SPLITK"] == 1]
    for c in cands:
        s, tiles = c["SPLITK"], math.ceil(M / c["BM"]) * math.ceil(N / c["BN"])
        if s > 1:
            assert tiles < sm and tiles * s <= 2 * sm + tiles and math.ceil(K / c["BK"]) >= 4 * s, c
    # and nothing that meets those rules is left out
    for c in PIPE.configurations():
        s, tiles = c["SPLITK"], math.ceil(M / c["BM"]) * math.ceil(N / c["BN"])
        if s > 1 and tiles < sm and tiles * s <= 2 * sm + tiles and math.ceil(K / c["BK"]) >= 4 * s:
            assert c in cands


def test_kernels_without_split_take_every_configuration():
    spec = registry.get("warptile")
    assert candidates(spec, 64, 64, 8192, 132) == spec.configurations()


# -- tables and lookups -------------------------------------------------------------


def test_lookup_takes_the_nearest_tuned_shape():
    small = {"BM": 64, "BN": 64, "BK": 16, "TM": 8, "TN": 4}
    t = TunedTable(
        "x",
        {
            "1024x1024x1024": {"best": _win("vectorized", small), "kernels": {"vectorized": _win("vectorized", small)}},
            "4096x4096x4096": {"best": _win("warptile", {}), "kernels": {"warptile": _win("warptile", {})}},
        },
    )
    assert t.lookup("auto", 900, 1100, 1000) == ("vectorized", small)
    assert t.lookup("auto", 3000, 5000, 4096) == ("warptile", {})
    assert t.lookup("warptile", 64, 64, 64) == ("warptile", {})  # the only shape that has it
    assert t.lookup("pipelined", 4096, 4096, 4096) is None


def test_lookup_prefers_shapes_tuned_in_the_same_layout():
    """A winner tuned in another layout is never this layout's answer (run 87: a TN weight
    gradient's 128 x 128 x 16 tile, a hair nearer than an NN shape, ran an NT product at 79%
    of cuBLAS; and each layout has its own warp tiling, pipelined.LAYOUT_TILING): a layout
    no shape was tuned in gets the rules."""
    tn, nn = {"BM": 128, "BN": 128, "BK": 16}, {"BM": 128, "BN": 256, "BK": 8}
    t = TunedTable(
        "x",
        {
            "6144x4096x8192": {
                "best": _win("pipelined", tn),
                "kernels": {"pipelined": _win("pipelined", tn)},
                "uses": [{"ops": "TN", "batch": 1}],
            },
            "8192x4096x6145": {"best": _win("pipelined", nn), "kernels": {"pipelined": _win("pipelined", nn)}},
        },
    )
    assert t.lookup("auto", 8192, 4096, 14336, "TN") == ("pipelined", tn)
    assert t.lookup("auto", 8192, 4096, 14336, "NN") == ("pipelined", nn)
    assert t.lookup("auto", 8192, 4096, 14336) == ("pipelined", nn)  # NN by default
    assert t.lookup("auto", 6144, 4096, 8192, "TT") is None  # none in TT: the rules answer


def test_plan_uses_the_table_for_auto_and_for_named_kernels_without_params(table_dirs):
    shipped, _ = table_dirs
    split = {**PIPE.defaults(), "SPLITK": 4}
    _write(
        shipped,
        "gpu-a",
        {"8192x64x8192": {"best": _win("pipelined", split), "kernels": {"pipelined": _win("pipelined", split)}}},
    )
    p = gemmlab.plan("auto", 8192, 64, 8192, gpu_slug="gpu-a")
    assert p.spec.name == "pipelined" and p.params == split
    assert gemmlab.plan("pipelined", 8192, 64, 8192, gpu_slug="gpu-a").params == split
    # a shape near the tuned one: its tile, the split chosen again for this shape's
    # 63 tiles (2 x 63 blocks within 132 SMs: choose._fit_nearest)
    assert gemmlab.plan("auto", 8000, 60, 8000, gpu_slug="gpu-a", sm_count=132).params == {**split, "SPLITK": 2}
    # explicit tile parameters win over the table
    assert gemmlab.plan("pipelined", 8000, 60, 8000, gpu_slug="gpu-a", SPLITK=2).params["SPLITK"] == 2
    # a kernel the table has nothing for keeps its defaults
    assert gemmlab.plan("warptile", 8000, 60, 8000, gpu_slug="gpu-a").params == registry.get("warptile").defaults()
    # an unknown GPU model falls back to the heuristic
    assert gemmlab.plan("auto", 8000, 60, 8000, gpu_slug="gpu-b").params == gemmlab.plan("auto", 8000, 60, 8000).params


def test_user_table_overrides_the_shipped_one_shape_by_shape(table_dirs):
    shipped, user = table_dirs
    v64 = {"BM": 64, "BN": 64, "BK": 16, "TM": 8, "TN": 4}
    v128 = {"BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 4}
    _write(
        shipped,
        "gpu-a",
        {"1024x1024x1024": {"best": _win("vectorized", v64)}, "4096x4096x4096": {"best": _win("vectorized", v64)}},
    )
    _write(user, "gpu-a", {"4096x4096x4096": {"best": _win("vectorized", v128)}})
    t = load_table("gpu-a")
    assert t.lookup("auto", 1024, 1024, 1024) == ("vectorized", v64)
    assert t.lookup("auto", 4096, 4096, 4096) == ("vectorized", v128)


def test_entries_this_version_cannot_run_are_dropped(table_dirs):
    shipped, _ = table_dirs
    _write(
        shipped,
        "gpu-a",
        {
            "1024x1024x1024": {"best": _win("no_such_kernel", {})},
            "2048x2048x2048": {"best": _win("vectorized", {"BM": 999})},
            "4096x4096x4096": {"best": _win("warptile", {})},
        },
    )
    t = load_table("gpu-a")
    assert t.lookup("auto", 1024, 1024, 1024) == ("warptile", {})


def test_unreadable_table_is_ignored_with_a_warning(table_dirs):
    shipped, _ = table_dirs
    (shipped / "gpu-a.json").write_text("{not json")
    with pytest.warns(RuntimeWarning, match="ignoring unreadable tuning file"):
        assert load_table("gpu-a") is None


def test_progress_is_dropped_when_kernel_sources_change(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"gpu": "G", "sources": "old", "results": {"1x1x1": {"candidates": {"k:": {}}}}}))
    assert tune._Progress(path, "G", fresh=False).results == {}
    path.write_text(
        json.dumps({"gpu": "G", "sources": tables.sources_digest(), "results": {"1x1x1": {"candidates": {"k:": {}}}}})
    )
    prog = tune._Progress(path, "G", fresh=False)
    assert prog.resumed == 1
    assert tune._Progress(path, "other GPU", fresh=False).results == {}
    assert tune._Progress(path, "G", fresh=True).results == {}


def test_winners_come_from_the_finalists_only():
    ok = lambda ms, final=None: {"params": {}, "status": "ok", "ms": ms, **({"final_ms": final} if final else {})}
    shape = {
        "candidates": {
            "vectorized:BM=1": ok(1.0, 1.3),
            "vectorized:BM=2": ok(1.1, 1.2),
            "vectorized:BM=3": ok(1.2, 1.25),
            "vectorized:BM=4": ok(1.3, 1.4),
            "vectorized:BM=5": ok(1.25),  # not a finalist: 5th by first timing
            "vectorized:BM=6": {"params": {}, "status": "wrong", "rel_error": 1.0},
            "warptile:BM=1": ok(0.9, 1.5),
        }
    }
    shape["candidates"]["vectorized:BM=5"]["ms"] = 1.35
    w = tune._winners(["vectorized", "warptile"], shape)
    assert w["kernels"]["vectorized"]["ms"] == 1.2 and w["kernels"]["warptile"]["ms"] == 1.5
    assert w["best"]["kernel"] == "vectorized"


@pytest.mark.parametrize("path", sorted(tables.SHIPPED_DIR.glob("*.json")), ids=lambda p: p.name)
def test_shipped_tables_are_complete_and_legal(path):
    data = json.loads(path.read_text())
    assert path.stem == "-".join(data["gpu"].lower().split())
    for key, entry in data["shapes"].items():
        parse_shape_key(key)
        assert entry["cublas_ms"] > 0
        for win in [entry["best"], *entry["kernels"].values()]:
            assert registry.get(win["kernel"]).resolve(win["params"]) == win["params"], (key, win)
            assert win["ms"] > 0
        assert entry["best"]["ms"] == min(w["ms"] for w in entry["kernels"].values())


def test_shipped_tables():
    """The H100's table ships; the H200's does not (its rules measured faster than its table,
    which was tuned in NN only on code since changed: benchmarks/NOTES.md, 2026-12-01)."""
    names = {p.stem for p in tables.SHIPPED_DIR.glob("*.json")}
    assert "nvidia-h200" not in names
    assert any(n.startswith("nvidia-h100") for n in names)


# -- on the GPU -----------------------------------------------------------------------


@pytest.mark.gpu
def test_tuner_verifies_every_candidate_and_all_pass(tmp_path, monkeypatch):
    """Every configuration the tuner may pick (the whole pipelined space, splits included)
    is correct on an odd shape: the search space holds only verified configurations."""
    monkeypatch.setattr(tune, "FINALISTS", 1)
    out = tmp_path / "t.json"
    # Odd sizes (the scalar variant) and sizes that are multiples of 4 but of no tile (the
    # 16-byte one, where REG_TRANSPOSE changes the code; in the other, both values are one
    # instantiation and the tuner times it once).
    shapes = [(257, 129, 77), (260, 132, 76)]
    tune.tune(["pipelined"], shapes, output=out, quiet=True)
    prog = json.loads(tables.progress_path(_slug()).read_text())
    from gemmlab.runtime.device import gpu_info

    for (M, N, K), distinct in zip(shapes, (0.5, 1)):
        results = prog["results"][f"{M}x{N}x{K}"]["candidates"]
        expected = candidates(PIPE, M, N, K, gpu_info(0).sm_count)
        assert len(results) == distinct * len(expected) and any(c["SPLITK"] > 1 for c in expected)
        bad = {k: r for k, r in results.items() if r["status"] != "ok"}
        assert not bad


def _slug():
    from gemmlab.runtime.device import gpu_info

    return gpu_info(0).slug


@pytest.mark.gpu
def test_tuner_resumes_after_an_interrupt(tmp_path, monkeypatch):
    from gemmlab.tools.bench import timing

    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    real = timing.time_gpu
    calls = []

    def interrupting(fn, **kw):
        calls.append(kw.get("reps"))
        if len(calls) == 5:  # 4 candidates timed, then Ctrl-C
            raise KeyboardInterrupt
        return real(fn, **kw)

    monkeypatch.setattr(timing, "time_gpu", interrupting)
    kernels, sizes = ["vectorized"], [(300, 200, 100)]
    with pytest.raises(KeyboardInterrupt):
        tune.tune(kernels, sizes, quiet=True)
    saved = json.loads(tables.progress_path(_slug()).read_text())["results"]["300x200x100"]
    assert len(saved["candidates"]) == 4
    assert "best" not in saved and "cublas_ms" not in saved  # cuBLAS is timed with the finalists

    calls.clear()
    monkeypatch.setattr(timing, "time_gpu", lambda fn, **kw: calls.append(kw.get("reps")) or real(fn, **kw))
    table = tune.tune(kernels, sizes, quiet=True)
    n = len(candidates(registry.get("vectorized"), 300, 200, 100, 132))
    screened = [r for r in calls if r == tune.SCREEN_REPS]
    assert len(screened) == n - 4, "the 4 measured candidates were timed again"
    # the finalists and cuBLAS, timed in interleaved rounds
    assert calls.count(tune.FINAL_REPS) == tune.FINAL_ROUNDS * min(tune.FINALISTS, n)
    assert calls.count(tune.CUBLAS_REPS) == tune.FINAL_ROUNDS
    assert len(calls) == len(screened) + tune.FINAL_ROUNDS * (min(tune.FINALISTS, n) + 1)
    assert table.shapes["300x200x100"]["cublas_ms"] > 0
    best = table.shapes["300x200x100"]["best"]
    assert load_table(_slug()).lookup("vectorized", 300, 200, 100) == ("vectorized", best["params"])
    p = gemmlab.plan("vectorized", 300, 200, 100, gpu_slug=_slug())
    assert p.params == best["params"]


def test_tables_can_be_switched_off(monkeypatch):
    """GEMMLAB_TUNED=off: no table is read, and auto takes the rules of a GPU without one."""
    from gemmlab.core import planner

    load_table.cache_clear()
    assert load_table("nvidia-h100-80gb-hbm3") is not None  # the shipped table
    monkeypatch.setenv("GEMMLAB_TUNED", "off")
    load_table.cache_clear()
    try:
        assert load_table("nvidia-h100-80gb-hbm3") is None
        p = planner.plan("auto", 4096, 4096, 4096, gpu_slug="nvidia-h100-80gb-hbm3", sm_count=132)
        assert (p.spec.name, p.params) == (
            pipelined.auto_params(4096, 4096, 4096, 132)[0],
            p.spec.resolve(pipelined.auto_params(4096, 4096, 4096, 132)[1]),
        )
    finally:
        load_table.cache_clear()
