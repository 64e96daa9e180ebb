"""The generated tables (scripts/ladder_tables.py) match their results files, and on a
GPU each rung still gains over the rung below what its page's table says.

CPU: README.md's ladder tables and every rung page's "measured effect" block are what
the script makes from the results files it names, so a table cannot drift from its
record; a page whose kernels no published run has timed (UNMEASURED: wgmma's steps)
says so, and stops saying so once the run it names has timed them.  GPU (the model the tables were measured on): each pair of neighbouring rungs
timed through `gemmlab.matmul` at the pages' size, as the ladder bench times them
(L2 flushed, each call started on an idle GPU), the two in interleaved rounds, output
checked against FP64 first.
"""

import importlib.util
from pathlib import Path

import pytest

from gemmlab.kernels import registry

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ladder_tables.py"
_spec = importlib.util.spec_from_file_location("ladder_tables", SCRIPT)
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)

# A rung's measured gain over the rung below may differ from its page's by this factor
# either way: runs of one GPU model differ by a few percent in clocks and power.
GAIN_TOLERANCE = 1.2
# Which pages' comparisons each block holds.
BLOCKS = {"measured-effect": tables.PAGES, "rung-effect": tables.RUNG_PAGES}
# (page, block): each comparison of a rung with the rung below that a published run has timed.
PAIRS = [
    pytest.param(page, block, id=f"{Path(page).stem}-{block}")
    for block, pages in BLOCKS.items()
    for page, (_, kernel, below) in pages.items()
    if below and not {kernel, below} & set(tables.UNMEASURED)
]


def test_generated_tables_are_current(capsys):
    assert tables.main(["--check"]) == 0, capsys.readouterr().err


def test_every_rung_page_has_a_block_and_a_source():
    for block, pages in BLOCKS.items():
        for page, (rel, kernel, below) in pages.items():
            assert (tables.ROOT / rel).is_file() and rel in tables.SOURCES, page
            text = (tables.ROOT / page).read_text()
            start, end = tables.marker(block)
            assert text.count(start) == 1 and text.count(end) == 1, (page, block)
            body = text.split(start)[1].split(end)[0]
            assert f"`{kernel}`" in body and (below is None or f"`{below}`" in body), (page, block)


def test_unmeasured_pages_say_so_until_their_run_is_published():
    """A kernel in UNMEASURED has no record in the runs the pages name (once one has, its
    name must leave UNMEASURED so that its table is written); its pages say it is not
    measured, with no figure, and name the run that will measure it."""
    for rel in {rel for rel, _, _ in tables.PAGES.values()}:
        timed = {r["kernel"] for r in tables.load(rel)}
        assert not timed & set(tables.UNMEASURED), f"{rel} times {timed & set(tables.UNMEASURED)}: publish their tables"
    pending = [page for page, (_, k, b) in tables.PAGES.items() if {k, b} & set(tables.UNMEASURED)]
    assert set(tables.UNMEASURED) <= {s.name for s in registry.ladder() if s.step}, "only steps wait for a run"
    assert set(tables.STEP_KERNELS) == {s.name for s in registry.ladder() if s.step}, "README leaves out every step"
    start, end = tables.marker("measured-effect")
    for page in pending:
        body = (tables.ROOT / page).read_text().split(start)[1].split(end)[0]
        assert body.strip().startswith("Not measured yet:") and tables.LADDER_COMMAND in body, page
        assert "|" not in body and "TFLOPS" not in body and "as fast" not in body, page  # no figure
    for page in set(tables.PAGES) - set(pending):
        assert "Not measured yet" not in (tables.ROOT / page).read_text(), page
    # The rung's own gain over the rung below stays measured on its page.
    assert (
        "docs/tensor/04-wgmma.md" in tables.RUNG_PAGES
        and tables.RUNG_PAGES["docs/tensor/04-wgmma.md"][2] == "mma_pipelined"
    )


def test_a_missing_block_is_named():
    with pytest.raises(LookupError, match="no block 'x'"):
        tables.rewrite("no markers here\n", "x", "body")


def test_rewrite_replaces_only_the_block():
    start, end = tables.marker("x")
    text = f"before\n{start}\nold\n{end}\nafter\n"
    assert tables.rewrite(text, "x", "new") == f"before\n{start}\nnew\n{end}\nafter\n"


# -- on a GPU -------------------------------------------------------------------------------


def _operands(dtype: str):
    """Fresh random operands at the pages' size, and out poisoned with NaN."""
    M, N, K = tables.PAGE_SIZE
    if dtype == "float32":
        import cupy as cp

        rng = cp.random.default_rng(7)
        a = rng.uniform(-1, 1, (M, K), dtype=cp.float32)
        b = rng.uniform(-1, 1, (K, N), dtype=cp.float32)
        return a, b, cp.full((M, N), cp.nan, cp.float32)
    torch = pytest.importorskip("torch")
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = (torch.rand(M, K, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    b = (torch.rand(K, N, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    return a, b, torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)


def _relative_error(a, b, out) -> float:
    """max |out - a@b| / max |a@b|, the product taken in FP64 on the GPU."""
    import cupy as cp

    a64, b64, o64 = (cp.asarray(x.float() if hasattr(x, "float") else x).astype(cp.float64) for x in (a, b, out))
    ref = a64 @ b64
    return float(cp.abs(o64 - ref).max() / cp.abs(ref).max())


def _call(kernel: str, dtype: str):
    """A public call of ``kernel`` at the pages' size on fresh operands, checked against FP64 first."""
    import gemmlab

    a, b, out = _operands(dtype)
    gemmlab.matmul(a, b, out=out, kernel=kernel)
    err = _relative_error(a, b, out)
    assert err <= (1e-5 if dtype == "float32" else 1e-2), (kernel, err)
    return lambda: gemmlab.matmul(a, b, out=out, kernel=kernel)


def _gain(kernel: str, below: str, dtype: str) -> float:
    """How many times as fast as ``below`` ``kernel`` runs: both timed in the same interleaved
    rounds (other processes share the GPU while the tests run; interleaving gives both calls the
    same share of it)."""
    from gemmlab.runtime.device import gpu_info
    from gemmlab.tools.bench.timing import time_rounds

    t = time_rounds(
        {"below": _call(below, dtype), "rung": _call(kernel, dtype)},
        l2_bytes=gpu_info().l2_bytes,
        rounds=4,
        reps=3,
        budget_s=0.5,
    )
    assert t["below"].ms is not None and t["rung"].ms is not None, (kernel, below)
    return t["below"].ms / t["rung"].ms


@pytest.fixture(scope="module")
def compiled():
    """Every rung the pairs time, compiled first in parallel processes; the GPU."""
    from gemmlab.core import planner
    from gemmlab.runtime import compile as rt_compile
    from gemmlab.runtime.device import gpu_info

    gpu = gpu_info()
    items = set()
    for rel, kernel, below in [BLOCKS[p.values[1]][p.values[0]] for p in PAIRS]:
        dtype = tables.load(rel)[0]["dtype"]
        for k in (kernel, below):
            if k:
                p = planner.plan(
                    k,
                    *tables.PAGE_SIZE,
                    dtype=dtype,
                    out_dtype=dtype,
                    gpu_slug=gpu.slug,
                    sm_count=gpu.sm_count,
                    arch=gpu.arch,
                    gpu_name=gpu.name,
                )
                items.add((str(p.spec.source_path), p.name_expression))
    rt_compile.precompile(sorted(items), gpu.arch)
    return gpu


@pytest.mark.gpu
@pytest.mark.parametrize("page, block", PAIRS)
def test_each_rung_gains_what_its_page_says(page, block, compiled):
    rel, kernel, below = BLOCKS[block][page]
    record_gpu = tables.load(rel)[0]["gpu"]
    if compiled.name != record_gpu:
        pytest.skip(
            f"{page}'s table was measured on {record_gpu}, this is {compiled.name}: "
            "regenerate the tables from this GPU's ladder bench (scripts/ladder_tables.py)"
        )
    dtype = tables.load(rel)[0]["dtype"]
    documented = tables.gain(rel, kernel, below)
    measured = _gain(kernel, below, dtype)
    assert documented / GAIN_TOLERANCE <= measured <= documented * GAIN_TOLERANCE, (
        f"{kernel} runs {measured:.2f}x as fast as {below} at {tables.size_name(*tables.PAGE_SIZE)}; "
        f"{page}'s {block} says {documented:.2f}x ({rel})"
    )
