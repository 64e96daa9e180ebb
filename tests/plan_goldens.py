"""Plan goldens: what the planner chooses over a grid of problems, recorded once and
compared by tests/test_choose.py, so that a change to how the choice is made (not
what it decides) is proven to decide the same.

Two kinds of entry:

* ``plan``: planner.plan(kernel, M, N, K, ...) on a grid of sizes (odd, small, few
  tiles, batched, vocabulary-sized), the four layouts, aligned or not, TMA-readable
  or not, every dtype, batch 1 and more (batches of small matrices among them), GPUs of sm_90a (the shipped H200 and H100
  tables, and none), sm_80, sm_86 and sm_75, for "auto" and named kernels (their
  fallbacks included);
* ``call``: the full call path on NumPy arrays and an emulated GPU (planner.validate,
  kernel_view, plan_call, and the executor's prepared call, where fp32_tc on a thin
  product switches to FP32): views with odd strides or offsets, batches, out in
  either order, every precision.

Each entry records Plan.describe(), the parameters, fallback_reason and reason (or
the error raised).  Regenerate only when a decision is meant to change:

    PYTHONPATH=src python3 tests/plan_goldens.py       # writes tests/data/plan_goldens.json
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
import tempfile
from pathlib import Path

GOLDENS = Path(__file__).resolve().parent / "data" / "plan_goldens.json"

# Sizes (M, N, K): odd, small, few tiles, vocabulary-sized, the models' and issue 32's kinds.
SIZES = [
    (1, 4096, 4096),
    (4, 14336, 4096),
    (2, 3000, 5),
    (16, 8192, 8192),
    (37, 5120, 13824),
    (77, 3072, 768),
    (128, 8192, 8192),
    (197, 197, 64),
    (197, 64, 197),
    (64, 8192, 8192),
    (8192, 64, 8192),
    (256, 4096, 4096),
    (1024, 768, 50257),
    (50257, 768, 1024),
    (1024, 50257, 768),
    (2048, 1024, 3584),
    (1024, 1024, 1024),
    (4096, 4096, 4096),
    (4000, 3000, 1001),
    (3, 5, 7),
    (100, 100, 100),
    (1, 1, 1),
    (8, 64, 8),
    (0, 64, 64),
    (64, 64, 0),
    (16, 16, 65536),
]
LAYOUTS = [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")]
DTYPES = ["float32", "tf32", "float16", "bfloat16", "fp16_ec", "tf32_ec"]
ITEM = {"float32": 4, "tf32": 4, "fp16_ec": 4, "tf32_ec": 4, "float16": 2, "bfloat16": 2}
# (arch, gpu_slug, sm_count, gpu_name); smem limits from runtime.device.ARCH_LIMITS (smem_limit=None).
GPUS = [
    ("sm_90a", "nvidia-h200", 132, "NVIDIA H200"),
    ("sm_90a", "nvidia-h100-80gb-hbm3", 132, "NVIDIA H100 80GB HBM3"),
    ("sm_90a", None, 114, "NVIDIA H100 PCIe"),
    ("sm_80", None, 108, "NVIDIA A100-SXM4-80GB"),
    ("sm_86", None, 84, "NVIDIA GeForce RTX 3090"),
    ("sm_75", None, 40, "Tesla T4"),
    (None, None, 132, "this GPU"),
]
NAMED = ["pipelined", "vectorized", "wgmma", "mma_pipelined", "wmma_warptile", "ec_wgmma", "ec_wmma", "gemv"]


def _rows_aligned(M, N, K, op_a, op_b, e):
    """16-byte rows of contiguous op(A), op(B) stored with these layouts (and C, float32 or e)."""
    wa, wb = (K if op_a == "N" else M), (N if op_b == "N" else K)
    return all((w * e) % 16 == 0 for w in (wa, wb)) and (N * min(e, 4)) % 16 == 0


def _contiguous(size, layout, dt, gpu, batch) -> dict:
    """An "auto" case with the alignment contiguous arrays of ``size`` would have."""
    (M, N, K), (oa, ob), (arch, slug, sms, name) = size, layout, gpu
    al = _rows_aligned(M, N, K, oa, ob, ITEM[dt])
    return dict(
        kernel="auto",
        M=M,
        N=N,
        K=K,
        dtype=dt,
        op_a=oa,
        op_b=ob,
        batch=batch,
        aligned16=al,
        tma_aligned=al,
        arch=arch,
        gpu_slug=slug,
        sm_count=sms,
        gpu_name=name,
    )


def plan_cases() -> list[dict]:
    """The plan() grid: every size x layout x dtype x GPU for "auto" with the alignment
    contiguous arrays would have, then a seeded sample over everything else."""
    cases = [_contiguous(*case, batch=1) for case in itertools.product(SIZES, LAYOUTS, DTYPES, GPUS)]
    rng = random.Random(32)
    for _ in range(2200):
        M, N, K = rng.choice(SIZES)
        if rng.random() < 0.3:  # sizes off every grid
            M, N, K = (
                rng.choice([1, 2, 3, 5, 9, 17, 33, 63, 65, 127, 129, 197, 255, 300, 511, 777, 1001, 2049, 3001, 5000])
                for _ in range(3)
            )
        oa, ob = rng.choice(LAYOUTS)
        dt = rng.choice(DTYPES)
        gpu = rng.choice(GPUS)
        kernel = "auto" if rng.random() < 0.6 else rng.choice(NAMED)
        batch = rng.choice([1, 1, 2, 12, 384])
        al = rng.random() < 0.6
        tma = rng.random() < 0.6
        # any kernel and alignment: the contiguous case's fields, those drawn instead
        case = {
            **_contiguous((M, N, K), (oa, ob), dt, gpu, batch),
            "kernel": kernel,
            "aligned16": al,
            "tma_aligned": tma,
        }
        if rng.random() < 0.3:
            case["stage_bytes"] = rng.choice([0, 4096, (M * K + K * N) * ITEM[dt] // 2])
        if rng.random() < 0.1 and gpu[0] is not None:
            case["smem_limit"] = rng.choice([48 * 1024, 99 * 1024, 163 * 1024])
        cases.append(case)
    # Batches of small matrices (attention within windows), around batched_small's rule: sides
    # at and past SMALL_MAX_SIDE, K at and past SMALL_MAX_K, batches below and above its rounds.
    windows = [(49, 49, 32), (49, 32, 49), (56, 56, 64), (64, 64, 64), (33, 20, 65)]
    storage = ("float32", "float16", "bfloat16")  # the batch rungs' types
    for size, batch, layout, dt, gpu in itertools.product(windows, [512, 768, 6144], LAYOUTS[:3], storage, GPUS):
        cases.append(_contiguous(size, layout, dt, gpu, batch=batch))
    return cases


def plan_kwargs(case: dict) -> tuple[str, int, int, int, dict]:
    kw = dict(case)
    kernel, M, N, K = kw.pop("kernel"), kw.pop("M"), kw.pop("N"), kw.pop("K")
    kw["out_dtype"] = "float32" if kw["dtype"] in ("float32", "tf32", "fp16_ec", "tf32_ec") else kw["dtype"]
    return kernel, M, N, K, kw


def record(fn) -> dict:
    """What a plan says (or the error it raised), as the goldens store it; ``fn`` returns a
    plan, or a plan and the describe() of each candidate of a method chosen on the GPU."""
    try:
        p = fn()
    except (ValueError, TypeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if isinstance(p, tuple):
        p, candidates = p
        return {**record(lambda: p), "candidates": candidates}
    return {
        "describe": p.describe(),
        "params": dict(p.params),
        "fallback_reason": p.fallback_reason,
        "reason": p.reason,
        "limit_reason": p.limit_reason,
        "method": p.method,
        "stage": p.problem.stage,
    }


def record_plan(case: dict) -> dict:
    from gemmlab.core import planner

    kernel, M, N, K, kw = plan_kwargs(case)
    return record(lambda: planner.plan(kernel, M, N, K, **kw))


# -- the full call path on NumPy arrays, an emulated H200 -------------------------------------

# (batch shape, M, N, K): products whose arrays stay small (the call path allocates them).
CALL_SIZES = [
    ((672,), 49, 49, 32),  # windows of 7 x 7 tokens: batched_small in float32 and fp32_tc
    ((), 1, 512, 256),
    ((), 4, 1024, 512),
    ((), 16, 64, 2048),
    ((), 12, 40, 17),
    ((), 77, 384, 256),
    ((), 197, 197, 64),
    ((12,), 197, 64, 197),
    ((3, 4), 65, 33, 129),
    ((), 300, 257, 1001),
    ((), 256, 256, 256),
    ((), 1024, 96, 640),
    ((8,), 128, 128, 64),
    ((), 3, 2000, 7),
    ((), 2000, 3, 9),
    ((2,), 5, 7, 3),
]
CALL_DTYPES = [
    ("float32", None),
    ("float32", "tf32"),
    ("float32", "fp32_tc"),
    ("float32", "fp16_ec"),
    ("float32", "tf32_ec"),
    ("float32", "fp16_ec_scaled"),
    ("float16", None),
]


def call_cases() -> list[dict]:
    cases = []
    for (bs, M, N, K), (dt, prec) in itertools.product(CALL_SIZES, CALL_DTYPES):
        for ta, tb, view in [
            (False, False, "contiguous"),
            (True, False, "transposed"),
            (False, True, "transposed"),
            (False, False, "offset"),
            (False, False, "out_T"),
        ]:
            cases.append(
                dict(batch=list(bs), M=M, N=N, K=K, dtype=dt, precision=prec, trans_a=ta, trans_b=tb, view=view)
            )
    return cases


def _operand(np, rng, batch, rows, cols, dtype, trans, offset):
    """A rows x cols operand (as the product reads it), stored transposed where ``trans``,
    its first element one element past the allocation's start where ``offset``."""
    shape = tuple(batch) + ((cols, rows) if trans else (rows, cols))
    size = int(np.prod(shape)) if shape else 1
    buf = rng.standard_normal(size + 1).astype(dtype)
    x = buf[1:] if offset else buf[:size]
    x = x.reshape(shape)
    return x.swapaxes(-1, -2) if trans else x


def call_plan(case: dict, gpu):
    """The plan the call path makes for ``case``: validate, kernel_view, then the
    executor's prepared call (its fp32_tc thin switch and method set)."""
    import numpy as np
    from gemmlab.core import executor, planner

    rng = np.random.default_rng(0)
    bs, M, N, K = case["batch"], case["M"], case["N"], case["K"]
    off = case["view"] == "offset"
    a = _operand(np, rng, bs, M, K, case["dtype"], case["trans_a"], off)
    b = _operand(np, rng, bs, K, N, case["dtype"], case["trans_b"], off)
    out = None
    if case["view"] == "out_T":
        out_dt = "float32" if case["precision"] else case["dtype"]
        out = np.empty(tuple(bs) + (N, M), out_dt).swapaxes(-1, -2)
    call = planner.validate(a, b, out, 1.0, 0.0, False, False, case["precision"], None)
    prepared = executor.PreparedCall(call, gpu, "auto", {}, case["precision"])
    return prepared.plan, [c.describe() for c, _ in prepared.chooser.candidates] if prepared.chooser else []


def record_calls(cases: list[dict]) -> list[dict]:
    """Every call case's plan on the emulated H200 (tests/emulated_gpu.py)."""
    import pytest
    from gemmlab.kernels.ec import choose_method

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import emulated_gpu

    with pytest.MonkeyPatch.context() as mp:
        emulated_gpu.install(mp)
        # The method chosen on the GPU is not chosen here: its candidates' plans are recorded.
        mp.setattr(choose_method, "ChoiceLaunches", lambda *args: None)
        gpu = emulated_gpu.FakeGPU()
        return [record(lambda: call_plan(case, gpu)) for case in cases]


# How an entry is stored: a case as the values of its keys in this order (null: not given),
# a result as the indices of its strings (and of its parameters' JSON) in one table.
PLAN_KEYS = (
    "kernel",
    "M",
    "N",
    "K",
    "dtype",
    "op_a",
    "op_b",
    "batch",
    "aligned16",
    "tma_aligned",
    "arch",
    "gpu_slug",
    "sm_count",
    "gpu_name",
    "stage_bytes",
    "smem_limit",
)
CALL_KEYS = ("batch", "M", "N", "K", "dtype", "precision", "trans_a", "trans_b", "view")
RESULT_KEYS = ("describe", "params", "fallback_reason", "reason", "limit_reason", "method", "stage", "candidates")


def _pack_case(case: dict, keys) -> list:
    return [case.get(k) for k in keys]


def _unpack_case(values: list, keys) -> dict:
    case = dict(zip(keys, values))
    for k in ("stage_bytes", "smem_limit"):
        if k in case and case[k] is None:
            del case[k]
    return case


def _pack_result(result: dict, table: dict) -> list | int:
    def idx(text):
        return table.setdefault(text, len(table))

    if "error" in result:
        return idx(result["error"])
    out = []
    for k in RESULT_KEYS:
        v = result.get(k)
        out.append(
            idx(json.dumps(v, sort_keys=True)) if k in ("params", "candidates") else idx(v) if isinstance(v, str) else v
        )
    return out


def _unpack_result(packed, strings: list[str]) -> dict:
    if isinstance(packed, int):
        return {"error": strings[packed]}
    out = {}
    for k, v in zip(RESULT_KEYS, packed):
        if k in ("params", "candidates"):
            v = json.loads(strings[v]) if v is not None else None
        elif k != "stage":
            v = strings[v]
        if k != "candidates" or v is not None:
            out[k] = v
    return out


def load() -> dict:
    """{"plan": [(case, result)], "call": [(case, result)]} as recorded."""
    data = json.loads(GOLDENS.read_text())
    s = data["strings"]
    return {
        "plan": [(_unpack_case(c, PLAN_KEYS), _unpack_result(r, s)) for c, r in data["plan"]],
        "call": [(_unpack_case(c, CALL_KEYS), _unpack_result(r, s)) for c, r in data["call"]],
    }


def generate() -> dict:
    pc, cc = plan_cases(), call_cases()
    plans = [record_plan(c) for c in pc]
    calls = record_calls(cc)
    table: dict[str, int] = {}
    packed_plans = [[_pack_case(c, PLAN_KEYS), _pack_result(r, table)] for c, r in zip(pc, plans)]
    packed_calls = [[_pack_case(c, CALL_KEYS), _pack_result(r, table)] for c, r in zip(cc, calls)]
    return {
        "about": "tests/plan_goldens.py: what the planner chose; compared by tests/test_choose.py",
        "strings": list(table),
        "plan": packed_plans,
        "call": packed_calls,
    }


if __name__ == "__main__":
    os.environ["GEMMLAB_CACHE_DIR"] = tempfile.mkdtemp()  # the shipped tables only, no user table
    os.environ.pop("GEMMLAB_TUNED", None)
    data = generate()
    GOLDENS.parent.mkdir(exist_ok=True)
    GOLDENS.write_text(json.dumps(data, separators=(",", ":")))
    print(
        f"{GOLDENS}: {len(data['plan'])} plan and {len(data['call'])} call entries, "
        f"{GOLDENS.stat().st_size / 1e6:.2f} MB"
    )
