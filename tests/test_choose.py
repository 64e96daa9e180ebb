"""choose(): the one choice of kernel.  Its contract is tests/data/plan_goldens.json
(tests/plan_goldens.py): every recorded decision is reproduced exactly."""

from __future__ import annotations

import pytest

import plan_goldens
from gemmlab import tuned

GOLDENS = plan_goldens.load()


@pytest.fixture(autouse=True, scope="module")
def shipped_tables_only():
    """The goldens were recorded with the shipped tuned tables (conftest's cache folder has no
    user table); a table loaded before under other settings is dropped."""
    tuned.load_table.cache_clear()
    yield
    tuned.load_table.cache_clear()


def test_goldens_cover_every_kind_of_decision():
    results = [r for _, r in GOLDENS["plan"]]
    names = {r["describe"].split("(")[0].split(" ")[0] for r in results if "error" not in r}
    assert {"gemv", "pipelined", "wgmma", "mma_pipelined", "wmma_warptile", "ec_wgmma", "ec_wmma"} <= names
    assert any(r.get("stage") for r in results)
    assert any("cannot take these operands" in r.get("fallback_reason", "") for r in results)
    assert any(r.get("limit_reason") for r in results)
    assert any("staging for wgmma would take" in r.get("fallback_reason", "") for r in results)
    assert any("error" in r for r in results)
    calls = [r for _, r in GOLDENS["call"]]
    assert any(r.get("method") == "fp32" for r in calls) and any(r.get("candidates") for r in calls)


@pytest.mark.parametrize("chunk", range(8))
def test_plan_goldens(chunk):
    entries = GOLDENS["plan"][chunk::8]
    wrong = [(case, want, got) for case, want in entries
             if (got := plan_goldens.record_plan(case)) != want]
    assert not wrong, f"{len(wrong)} of {len(entries)} differ; first: {wrong[0]}"


def test_call_goldens():
    cases = [c for c, _ in GOLDENS["call"]]
    got = plan_goldens.record_calls(cases)
    wrong = [(c, w, g) for (c, w), g in zip(GOLDENS["call"], got) if g != w]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ; first: {wrong[0]}"
