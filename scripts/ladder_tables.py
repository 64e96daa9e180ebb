"""The generated tables: README.md's ladder tables and each rung page's "measured effect".

    python3 scripts/ladder_tables.py           # rewrite every generated block
    python3 scripts/ladder_tables.py --check   # exit 1 naming each block that differs (a CPU test runs this)

Each table is made from one results file of one run, named under the table with its
GPU, date and command.  A block lies between two markers,

    <!-- generated: NAME (scripts/ladder_tables.py) -->
    ...
    <!-- end generated: NAME -->

and is rewritten whole.  To publish a new run, point SOURCES (and FP32_LADDER,
TENSOR_LADDER) at its files and run the script; tests/test_ladder_tables.py then
checks on a GPU of the same model that each rung still gains what its page says.

A page whose kernel (or the one below) no published run has timed yet -- UNMEASURED,
wgmma's steps -- says so in its block instead of a table: compiled and tested on the CPU
only.  Once a ladder run that times them is published (TENSOR_LADDER), empty UNMEASURED
and run the script: their tables replace those sentences (a CPU test fails until then).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H100 = "benchmarks/results/nvidia-h100-80gb-hbm3"
H200 = "benchmarks/results/nvidia-h200"

# file -> (date of the run, the command that wrote it)
SOURCES = {
    f"{H200}/ladder-fp32-2026-11-29.json": ("2026-11-29", "gemmlab bench --sizes 1024,2048,4096"),
    f"{H200}/ladder-bf16-2026-11-30.json": ("2026-11-30", "gemmlab bench --dtype bf16 --sizes 4096,8192 --reps 10"),
    f"{H100}/bench-public-fp32-run68.json": (
        "2026-11-24",
        "gemmlab bench --kernel-only --budget-s 1 --sizes 1024,2048,4096,8192,16384x4096x4096",
    ),
    f"{H100}/bench-public-bf16-run69.json": (
        "2026-11-24",
        "gemmlab bench --dtype bf16 --kernel-only --budget-s 1 --sizes 1024,2048,4096,8192,16384x4096x4096",
    ),
    f"{H100}/ec-run95f.json": ("2026-11-26", "gemmlab bench --suite ec"),
    f"{H100}/models-run90e.json": (
        "2026-11-26",
        "gemmlab bench --suite models --dtype bf16,fp16,fp32 --time-budget-s 30",
    ),
    f"{H200}/shapes-2026-12-01-5.json": (
        "2026-12-01",
        "gemmlab bench --suite shapes --time-budget-s 150",
    ),
    f"{H200}/training-2026-11-29-6.json": ("2026-11-29", "gemmlab bench --suite training --quick"),
    f"{H200}/training-bf16-2026-12-01.json": (
        "2026-12-01",
        "gemmlab bench --suite training --precisions bf16 --models gpt2,bert-base,vit-b16,llama-1b "
        "--modes eager,compile,reduce-overhead --time-budget-s 330",
    ),
    f"{H200}/training-llm-2026-11-30-2.json": (
        "2026-11-30",
        "gemmlab bench --suite training --models llama-1b,qwen2-0.5b --modes eager,compile --precisions bf16",
    ),
    f"{H200}/training-fp32-2026-12-01.json": (
        "2026-12-01",
        "gemmlab bench --suite training --models gpt2,bert-base --modes eager,compile --precisions fp32,tf32,fp32_tc",
    ),
    f"{H200}/training-vit-fp32-2026-12-01.json": (
        "2026-12-01",
        "gemmlab bench --suite training --models vit-b16 --modes eager,compile --precisions fp32,tf32,fp32_tc",
    ),
    f"{H200}/moe-2026-11-30.json": ("2026-11-30", "gemmlab bench --suite moe --tokens 128,1024,8192"),
}
FP32_LADDER = f"{H200}/ladder-fp32-2026-11-29.json"  # the CUDA-core rungs' pages
TENSOR_LADDER = f"{H200}/ladder-bf16-2026-11-30.json"  # the tensor-core rungs' pages
EC_RUN = f"{H100}/ec-run95f.json"
MODELS_RUN = f"{H100}/models-run90e.json"
SHAPES_RUN = f"{H200}/shapes-2026-12-01-5.json"  # other models' products, by kind
# Whole training steps: bf16 in every mode (two runs, by model); fp32_tc's steps, each model from
# the first of these runs that has it.
# (a later run's figure for a model and mode replaces an earlier one's)
TRAINING_BF16_RUNS = (f"{H200}/training-llm-2026-11-30-2.json", f"{H200}/training-bf16-2026-12-01.json")
TRAINING_FP32_TC_RUNS = (
    f"{H200}/training-fp32-2026-12-01.json",
    f"{H200}/training-vit-fp32-2026-12-01.json",
    f"{H200}/training-2026-11-29-6.json",
)
MOE_RUN = f"{H200}/moe-2026-11-30.json"  # the grouped rung's page

PAGE_SIZE = (4096, 4096, 4096)  # the one size each rung page compares at
PAGES = {  # page -> (ladder file, its rung's kernel, the rung below's kernel or None)
    "docs/simt/01-naive.md": (FP32_LADDER, "naive", None),
    "docs/simt/02-coalesced.md": (FP32_LADDER, "coalesced", "naive"),
    "docs/simt/03-smem-tiled.md": (FP32_LADDER, "smem_tiled", "coalesced"),
    "docs/simt/04-blocktile-1d.md": (FP32_LADDER, "blocktile_1d", "smem_tiled"),
    "docs/simt/05-blocktile-2d.md": (FP32_LADDER, "blocktile_2d", "blocktile_1d"),
    "docs/simt/06-vectorized.md": (FP32_LADDER, "vectorized", "blocktile_2d"),
    "docs/simt/07-warptile.md": (FP32_LADDER, "warptile", "vectorized"),
    "docs/simt/08-pipelined.md": (FP32_LADDER, "pipelined", "warptile"),
    "docs/tensor/01-wmma.md": (TENSOR_LADDER, "wmma", None),
    "docs/tensor/02-wmma-warptile.md": (TENSOR_LADDER, "wmma_warptile", "wmma"),
    "docs/tensor/03-mma-pipelined.md": (TENSOR_LADDER, "mma_pipelined", "wmma_warptile"),
    # tensor rung 4 in steps, each beside the one before it; the rung's own kernel is the last
    "docs/tensor/04a-wgmma-tma.md": (TENSOR_LADDER, "wgmma_tma", "mma_pipelined"),
    "docs/tensor/04b-wgmma-specialized.md": (TENSOR_LADDER, "wgmma_specialized", "wgmma_tma"),
    "docs/tensor/04c-wgmma-persistent.md": (TENSOR_LADDER, "wgmma_persistent", "wgmma_specialized"),
    "docs/tensor/04-wgmma.md": (TENSOR_LADDER, "wgmma", "wgmma_persistent"),
}
# A rung taught in steps: its page's "rung-effect" block, the whole rung beside the rung below.
RUNG_PAGES = {"docs/tensor/04-wgmma.md": (TENSOR_LADDER, "wgmma", "mma_pipelined")}
# Kernels no published run has timed yet (their pages say so instead of a table).
UNMEASURED: tuple[str, ...] = ()
# The steps toward a rung (KernelSpec.step): the tensor-core ladder's pages show them.
STEP_KERNELS = ("wgmma_tma", "wgmma_specialized", "wgmma_persistent")
# What times them: the tensor ladder's bench (its default kernels are every rung and step).
LADDER_COMMAND = "gemmlab bench --dtype bf16 --sizes 2048,4096,8192"
EC_PRECISIONS = ("fp16_ec", "fp16_ec_scaled", "tf32_ec", "fp32_tc")
GEMV_LAYERS = ("qkv", "o", "gate_up", "down", "lm_head")


def load(rel: str) -> list[dict]:
    data = json.loads((ROOT / rel).read_text())
    return data["records"] if isinstance(data, dict) else data


def size_name(m: int, n: int, k: int) -> str:
    return f"{m}^3" if m == n == k else f"{m}x{n}x{k}"


def source_line(rel: str, records: list[dict]) -> str:
    date, command = SOURCES[rel]
    return f"{records[0]['gpu']}, {date}, `{command}`, `{rel}`."


def public(records: list[dict]) -> list[dict]:
    """The public-call records (`gemmlab.matmul`, host time included), in row-major NN."""
    return [r for r in records if r.get("path", "public") == "public" and r.get("ops", "NN") == "NN"]


def find(records: list[dict], kernel: str, size: tuple, precision: str | None = None) -> dict:
    for r in public(records):
        if (
            (r["kernel"], (r["M"], r["N"], r["K"])) == (kernel, size)
            and not r.get("skipped")
            and (precision is None or r["params"].get("precision") == precision)
        ):
            return r
    raise LookupError(f"no public record of {kernel} {precision or ''} at {size_name(*size)}")


def rung_table(rel: str, steps: bool = True) -> str:
    """% of cuBLAS per rung (and auto) per size; cuBLAS's own TFLOPS on top.  ``steps``: with
    the steps toward a rung (README.md leaves them to docs/tensor/)."""
    records = load(rel)
    sizes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in public(records)))
    kernels = list(dict.fromkeys(r["kernel"] for r in public(records) if r["kernel"] != "cublas"))
    if not steps:
        kernels = [k for k in kernels if k not in STEP_KERNELS]
    lines = [
        "| kernel | " + " | ".join(size_name(*s) for s in sizes) + " |",
        "|---" * (len(sizes) + 1) + "|",
        "| cuBLAS (TFLOPS) | " + " | ".join(f"{find(records, 'cublas', s)['tflops']:.1f}" for s in sizes) + " |",
    ]
    for k in kernels:
        name = f"**{k}**" if k == "auto" else f"`{k}`"
        lines.append(f"| {name} | " + " | ".join(f"{find(records, k, s)['pct_cublas']:.1f}" for s in sizes) + " |")
    return "\n".join(lines) + "\n\n% of cuBLAS in the same run, through `gemmlab.matmul`. " + source_line(rel, records)


def ec_table(rel: str) -> str:
    """Each error-corrected precision as % of cuBLAS SGEMM, per size."""
    records = load(rel)
    sizes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in public(records)))
    lines = ["| precision | " + " | ".join(size_name(*s) for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for p in EC_PRECISIONS:
        cells = [f"{find(records, 'ec_wgmma', s, p)['pct_cublas']:.0f}" for s in sizes]
        lines.append(f'| `precision="{p}"` | ' + " | ".join(cells) + " |")
    return (
        "\n".join(lines)
        + "\n\n% of cuBLAS SGEMM in the same run, through `gemmlab.matmul` on `ec_wgmma`. "
        + source_line(rel, records)
    )


def gemv_table(rel: str) -> str:
    """One token's products of a Llama-3-8B-sized model's layers, % of torch.matmul."""
    records = load(rel)
    columns = [("fwd", "bf16"), ("fwd", "fp32"), ("dgrad", "bf16"), ("dgrad", "fp32")]
    lines = [
        "| layer (K -> N) | `x @ W.t()` bf16 | `x @ W.t()` fp32 | `dY @ W` bf16 | `dY @ W` fp32 |",
        "|---|---|---|---|---|",
    ]
    for layer in GEMV_LAYERS:
        cells, shape = [], None
        for product, dtype in columns:
            hit = [
                r
                for r in records
                if (r["layer"], r["product"], r["dtype"], r["tokens"]) == (layer, product, dtype, 1)
                and not r.get("skipped")
            ]
            if not hit:
                cells.append("")
                continue
            r = hit[0]
            if product == "fwd":
                shape = (r["K"], r["N"])
            cells.append(f"{r['pct_torch']:.0f}" + ("" if r["rung"] == "gemv" else f" ({r['rung']})"))
        head = f"{layer} {shape[0]} -> {shape[1]}" if shape else layer
        lines.append(f"| {head} | " + " | ".join(cells) + " |")
    return (
        "\n".join(lines) + "\n\nOne token, % of `torch.matmul` on the same tensors (in brackets the rung "
        "`auto` took where it was not gemv), `gemmlab bench --suite models`. " + source_line(rel, records)
    )


def gain(rel: str, kernel: str, below: str, size: tuple = PAGE_SIZE) -> float:
    """How many times faster ``kernel`` ran than ``below`` in the run of ``rel``."""
    records = load(rel)
    return find(records, below, size)["ms"] / find(records, kernel, size)["ms"]


def unmeasured_text(kernel: str, below: str | None) -> str:
    """What a page says where no published run has timed ``kernel`` or ``below`` yet."""
    new = [k for k in (kernel, below) if k in UNMEASURED]
    return (
        f"Not measured yet: {' and '.join(f'`{k}`' for k in new)} {'is' if len(new) == 1 else 'are'} compiled "
        f"for sm_90a and tested on the CPU only (no spills, each step's instructions in its SASS: "
        f"`tests/test_wgmma_steps_compile.py`; grids, arguments and refusals: `tests/test_wgmma_steps.py`).  "
        f"{'Its' if len(new) == 1 else 'Their'} GPU tests (`tests/test_wgmma_steps.py`) and the timing of "
        f"`{kernel}` beside `{below}` wait for "
        f"a run of the ladder bench on an H200 (`{LADDER_COMMAND}`, which times every step); "
        f"`scripts/ladder_tables.py` writes this table from that run's results."
    )


def page_table(page: str, pages: dict | None = None) -> str:
    rel, kernel, below = (pages or PAGES)[page]
    if kernel in UNMEASURED or below in UNMEASURED:
        return unmeasured_text(kernel, below)
    records = load(rel)
    rows = [(below, find(records, below, PAGE_SIZE))] if below else []
    rows.append((kernel, find(records, kernel, PAGE_SIZE)))
    dtype = rows[-1][1]["dtype"]
    lines = [
        f"| {size_name(*PAGE_SIZE)}, {dtype} | " + " | ".join(f"`{k}`" for k, _ in rows) + " |",
        "|---" * (len(rows) + 1) + "|",
        "| % of cuBLAS | " + " | ".join(f"{r['pct_cublas']:.1f}" for _, r in rows) + " |",
        "| TFLOPS | " + " | ".join(f"{r['tflops']:.1f}" for _, r in rows) + " |",
    ]
    text = "\n".join(lines) + "\n\n"
    if below:
        text += f"`{kernel}` runs {gain(rel, kernel, below):.2f}x as fast as `{below}` here. "
    return text + "Through `gemmlab.matmul`, beside cuBLAS in the same run. " + source_line(rel, records)


def shapes_table(rel: str) -> str:
    """The shapes suite by dtype: geometric mean of % of torch.matmul (of SGEMM for fp32 and
    fp32_tc) over its products, how many are below 90%, and the slowest."""
    data = json.loads((ROOT / rel).read_text())
    lines = ["| dtype | products | geometric mean, % of torch.matmul | below 90% | slowest |", "|---|---|---|---|---|"]
    for dtype, summary in data["summary"].items():
        a = summary["all"]
        lines.append(
            f"| {dtype} | {a['products']} | {a['geomean_pct']:.1f}% | {a['below_90']} | "
            f"{a['worst_pct']:.0f}% ({a['worst']}) |"
        )
    records = data["records"]
    return (
        "\n".join(lines)
        + (
            "\n\nEach product as a model hands it over (forward, input- and weight-gradient views, "
            f"{len(data['models'])} public models' sizes and random odd ones), `gemmlab.matmul` beside "
            "`torch.matmul` on the same views (fp32 and fp32_tc: beside SGEMM). "
        )
        + source_line(rel, records)
    )


def training_table(bf16_runs, fp32_tc_runs) -> str:
    """Whole training steps by model: bf16 through gt.use_gemmlab() as % of PyTorch's step speed
    in each mode (eager, compiled, CUDA graphs), from ``bf16_runs``; fp32_tc's steps against the
    SGEMM step (eager and compiled) and its eager time over TF32's, each model from the first of
    ``fp32_tc_runs`` that has it.  Each cell compares setups of one run."""
    modes = ("eager", "compile", "reduce-overhead")
    rows: dict = {}
    sources = []
    for rel in bf16_runs:
        records = load(rel)
        sources.append((rel, records))
        for r in records:
            if r["setup"] == "bf16_gemmlab" and r.get("vs_baseline"):
                rows.setdefault(r["model"], {})[r["mode"]] = f"{100 * r['vs_baseline']:.1f}%"
    fp32_sources, taken = [], set()
    for rel in fp32_tc_runs:
        records = load(rel)
        mine = [
            r
            for r in records
            if r["setup"] == "fp32_tc" and r["model"] in rows and r["model"] not in taken and r.get("vs_baseline")
        ]
        for r in mine:
            by = rows[r["model"]]
            by[f"sgemm {r['mode']}"] = f"{r['vs_baseline']:.2f}x"
            if r["mode"] == "eager":
                by["tf32"] = f"{r['vs_tf32']:.2f}x" if r.get("vs_tf32") else "-"
        if mine:
            taken |= {r["model"] for r in mine}
            fp32_sources.append((rel, records))
    lines = [
        "| model | bf16 eager | bf16 compiled | bf16 CUDA graphs | `fp32_tc()` vs SGEMM, eager "
        "| compiled | eager time vs TF32 |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, by in rows.items():
        cells = [by.get(m, "-") for m in modes] + [by.get(k, "-") for k in ("sgemm eager", "sgemm compile", "tf32")]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    bf16 = " and ".join(source_line(rel, recs).rstrip(".") for rel, recs in sources)
    fp32 = "; ".join(source_line(rel, recs).rstrip(".") for rel, recs in fp32_sources)
    return (
        "\n".join(lines)
        + "\n\nbf16: `use_gemmlab()` as % of PyTorch's step speed (ms per AdamW step, setups alternating in "
        + f"rounds, beside plain PyTorch in the same run), {bf16}. fp32_tc (each model from one run): {fp32}."
    )


def moe_table(rel: str) -> str:
    """The grouped rung beside torch._grouped_mm and a loop of torch.matmul, per token count:
    geometric mean and least of the ratios of time over the suite's products."""
    records = load(rel)
    by: dict = {}
    for r in records:
        by.setdefault(r["note"].split(":")[0], {})[r["kernel"]] = r["ms"]
    lines = [
        "| tokens | products | vs `torch._grouped_mm`: geomean (least) | vs a `torch.matmul` loop: geomean (least) |",
        "|---|---|---|---|",
    ]

    def gm(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs))

    tokens = sorted({int(re.search(r"(\d+) tokens", k).group(1)) for k in by})
    for t in tokens + [None]:
        rows = [v for k, v in by.items() if t is None or f" {t} tokens" in k]
        g = [v["torch._grouped_mm"] / v["gemmlab.grouped_mm"] for v in rows]
        loop = [v["torch.matmul loop"] / v["gemmlab.grouped_mm"] for v in rows]
        lines.append(
            f"| {t if t else 'all'} | {len(rows)} | {gm(g):.2f}x ({min(g):.2f}x) | {gm(loop):.2f}x ({min(loop):.2f}x) |"
        )
    models = sorted({k.split(" ")[0] for k in by})
    return (
        "\n".join(lines)
        + f"\n\nTime ratios (above 1: gemmlab faster), public calls, the gate/up and down projections of "
        f"{', '.join(models)}, uniform and skewed routing. " + source_line(rel, records)
    )


def blocks() -> dict[str, dict[str, str]]:
    """file -> {block name: its generated text}."""
    out = {
        "README.md": {
            "fp32-ladder": rung_table(FP32_LADDER),
            "tensor-ladder": rung_table(TENSOR_LADDER, steps=False),
            "ec-ladder": ec_table(EC_RUN),
            "gemv": gemv_table(MODELS_RUN),
            "shapes": shapes_table(SHAPES_RUN),
            "training": training_table(TRAINING_BF16_RUNS, TRAINING_FP32_TC_RUNS),
        }
    }
    out["docs/simt/README.md"] = {"fp32-ladder": out["README.md"]["fp32-ladder"]}
    out["docs/tensor/README.md"] = {"tensor-ladder": rung_table(TENSOR_LADDER)}
    for page in PAGES:
        out[page] = {"measured-effect": page_table(page)}
    for page in RUNG_PAGES:
        out[page]["rung-effect"] = page_table(page, RUNG_PAGES)
    out["docs/tensor/06-grouped.md"] = {"moe": moe_table(MOE_RUN)}
    return out


def marker(name: str) -> tuple[str, str]:
    return f"<!-- generated: {name} (scripts/ladder_tables.py) -->", f"<!-- end generated: {name} -->"


def rewrite(text: str, name: str, body: str) -> str:
    start, end = marker(name)
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise LookupError(f"no block {name!r} (put the lines {start} and {end} where it goes)")
    return pattern.sub(lambda _: f"{start}\n{body}\n{end}", text, count=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block differs")
    args = ap.parse_args(argv)
    stale = []
    for rel, named in blocks().items():
        path = ROOT / rel
        old = path.read_text()
        new = old
        for name, body in named.items():
            new = rewrite(new, name, body)
        if new != old:
            stale.append(rel)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(
            "generated tables out of date in " + ", ".join(stale) + ": run python3 scripts/ladder_tables.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
