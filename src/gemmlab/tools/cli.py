"""The ``gemmlab`` command: list, bench, accuracy, fragments, sweep, tune, verify, inspect."""

from __future__ import annotations

import argparse
import json
import sys

from ..core.errors import GemmlabError


def _sizes(text: str):
    from .bench.suites import parse_size

    return [parse_size(s) for s in text.split(",") if s.strip()]


def _progress_printer(command: str):
    """A progress callback: one line per message on stderr, prefixed by the command."""

    def show(message: str) -> None:
        print(f"gemmlab {command}: {message.strip()}", file=sys.stderr, flush=True)

    return show


def _kernel_items(items) -> list[str]:
    """Kernels with optional tile parameters, given with spaces, commas or both:
    ['naive,vectorized:BM=64,BN=64', 'wmma'] -> ['naive', 'vectorized:BM=64,BN=64', 'wmma']
    (a comma-separated NAME=VALUE continues the kernel before it)."""
    out: list[str] = []
    for item in [items] if isinstance(items, str) else items:
        for piece in filter(None, (x.strip() for x in item.split(","))):
            if "=" in piece and ":" not in piece and out and ":" in out[-1]:
                out[-1] += "," + piece
            else:
                out.append(piece)
    return out


def _kernel_entries(items, default):
    """['vectorized:BM=64,BN=64', 'smem_tiled:tile=16'] (or 'naive,smem_tiled:tile=16') ->
    [('vectorized', {'BM': 64, 'BN': 64}), ('smem_tiled', {'tile': 16})]."""
    items = _kernel_items(items or [])
    if not items:
        return default()
    out = []
    for item in items:
        name, _, rest = item.strip().partition(":")
        params = {}
        for kv in filter(None, rest.split(",")):
            k, sep, v = kv.partition("=")
            try:
                params[k.strip()] = int(v)
            except ValueError:
                raise ValueError(f"tile parameter {kv!r} of {name!r} must be NAME=INTEGER") from None
        out.append((name, params))
    return out


def _ops(text: str) -> list[str]:
    """'NN,TN' -> ['NN', 'TN']: op(A), op(B) layouts, T a transposed view (column-major)."""
    ops = [o.strip().upper() for o in text.split(",") if o.strip()]
    bad = [o for o in ops if len(o) != 2 or set(o) - {"N", "T"}]
    if bad or not ops:
        raise ValueError(f"--ops {text!r}: give layouts of op(A) and op(B) as NN, TN, NT or TT (comma list)")
    return ops


def cmd_list(args) -> int:
    from ..core.api import kernels

    ks = kernels()
    if args.json:
        print(json.dumps(ks, indent=1))
        return 0
    for k in ks:
        rung = f"{k['rung']}{k['step']}."  # a step toward a rung: 4a., 4b., ...
        print(f"{rung} {k['name']:14s} [{k['family']}, {', '.join(k['dtypes'])}] {k['description']}")
        for name, p in k["params"].items():
            print(f"      {name:5s} in {p['values']} (default {p['default']}): {p['doc']}")
        for c in k["constraints"]:
            print(f"      rule: {c}")
        print(f"      runs on: {k['arch_range']}" + (f"; why: {k['needs']}" if k["needs"] else ""))
    return 0


def _finish(records, args, plot) -> None:
    from .bench.report import table

    dicts = [r.as_dict() for r in records]
    print(table(dicts))
    _save(dicts, args, plot)


def _save(dicts, args, plot) -> None:
    """Write ``dicts`` as JSON to --json and plot them to --plot, where asked."""
    from .bench.report import write_json

    if args.json:
        write_json(dicts, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        plot(dicts, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)


# Options of `gemmlab bench` that only some suites take: elsewhere they are
# refused, not silently ignored.
SUITE_OPTIONS = {
    "kernels": ("ladder", "fp8"),
    "dtype": ("ladder", "models", "shapes"),
    "ops": ("ladder",),
    "all_configs": ("ladder",),
    "sizes": ("ladder", "ec", "overhead", "fp8"),
    "kernel_only": ("ladder", "ec", "overhead", "fp8"),
    "plot": ("ladder", "ec", "overhead", "models", "shapes", "training", "decode", "fp8"),
    "calls": ("overhead",),
    "host_shape": ("overhead",),
    "tokens": ("models", "moe"),
    "layers": ("models",),
    "only": ("models",),
    "products": ("models",),
    "time_budget_s": ("models", "shapes", "training", "decode"),
    "compile_only": ("models", "shapes"),
    # the shapes and training suites' own (bench_suite_args)
    "models": ("shapes", "training", "decode", "moe"),
    "model_file": ("shapes",),
    "config_file": ("training",),
    "kinds": ("shapes",),
    "limit": ("shapes",),
    "sample": ("shapes",),
    "seed": ("shapes", "training", "decode", "moe"),
    "modes": ("training",),
    "precisions": ("training", "decode"),
    "steps": ("training", "decode"),
    "batch": ("training", "decode"),
    "num_layers": ("training", "decode"),
    "caches": ("decode",),
    "prompt": ("decode",),
    "quick": ("training",),
}
# The ladder's --dtype names (the models suite takes a list of its own).
LADDER_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp16_ec", "tf32_ec")


def _check_suite_options(args) -> None:
    for name, suites in SUITE_OPTIONS.items():
        if getattr(args, name) not in (None, False) and args.suite not in suites:
            raise ValueError(
                f"--{name.replace('_', '-')} is for --suite {' or '.join(suites)}, not --suite {args.suite}"
            )


def _timing(args) -> dict:
    """The timing options every GPU suite takes."""
    return {
        "reps": args.reps,
        "max_run_s": args.max_run_s,
        "budget_s": args.budget_s,
        "quiet": args.quiet,
        "kernel_only": args.kernel_only,
    }


def cmd_bench(args) -> int:
    _check_suite_options(args)
    if args.suite == "wmma_ext":  # the WMMA fragment lab's experiments (issue 6)
        return cmd_bench_wmma_ext(args)
    if args.suite == "ec":  # the error-corrected FP32 methods beside cuBLAS SGEMM
        return cmd_bench_ec(args)
    if args.suite == "overhead":  # host µs per call, and % of cuBLAS at small sizes
        return cmd_bench_overhead(args)
    if args.suite == "models":  # a transformer's products beside torch.matmul
        return cmd_bench_models(args)
    if args.suite == "shapes":  # many models' products beside torch.matmul
        return cmd_bench_shapes(args)
    if args.suite == "training":  # whole models' training steps, gemmlab.torch beside PyTorch
        return cmd_bench_training(args)
    if args.suite == "decode":  # token-by-token generation with a cache, gemmlab.torch beside PyTorch
        return cmd_bench_decode(args)
    if args.suite == "fp8":  # the FP8 rung beside torch._scaled_mm (Hopper)
        return cmd_bench_fp8(args)
    if args.suite == "moe":  # the grouped rung beside torch._grouped_mm (Hopper)
        return cmd_bench_moe(args)
    if args.dtype is not None and args.dtype not in LADDER_DTYPES:
        raise ValueError(f"--dtype {args.dtype!r}: the ladder takes one of {', '.join(LADDER_DTYPES)}")
    from ..core.api import plan
    from .bench.report import plot_ladder
    from .bench.suites import DEFAULT_SIZES, default_entries, run_suite
    from .bench.suites import DTYPE_ALIASES
    from ..kernels.spec import FLOAT32_RESULT

    dtype = DTYPE_ALIASES[args.dtype or "fp32"]
    ops = _ops(args.ops or "NN")
    entries = _kernel_entries(args.kernels, lambda: default_entries(dtype))
    for name, params in entries:  # refuse bad names before any GPU time is spent
        plan(name, 128, 128, 128, dtype=dtype, out_dtype="float32" if dtype in FLOAT32_RESULT else dtype, **params)
    if args.all_configs:  # every legal tile configuration of each named kernel
        from ..kernels import registry

        entries = [
            (name, cfg)
            for name in dict.fromkeys(n for n, _ in entries)
            for cfg in registry.get(name).configurations(dtype)
        ]
    sizes = _sizes(args.sizes) if args.sizes else DEFAULT_SIZES
    records = run_suite(entries, sizes, dist=args.dist, flush=not args.no_flush, dtype=dtype, ops=ops, **_timing(args))
    _finish(records, args, plot_ladder)
    return 0


def cmd_bench_fp8(args) -> int:
    from .bench import fp8
    from .bench.report import plot_ladder
    from ..core.planner import plan_scaled

    entries = _kernel_entries(args.kernels, lambda: list(fp8.DEFAULT_ENTRIES))
    for name, params in entries:  # refuse bad names and tiles before any GPU time is spent
        for kind in fp8.SCALINGS:
            plan_scaled(128, 128, 128, "float8_e4m3fn", scaling=kind, kernel=name, **params)
    sizes = _sizes(args.sizes) if args.sizes else None
    records = fp8.run(sizes, entries=entries, flush=not args.no_flush, **_timing(args))
    _finish(records, args, plot_ladder)
    return 0


def cmd_bench_moe(args) -> int:
    from .bench import moe
    from .bench.models import parse_tokens

    tokens = parse_tokens(args.tokens) if args.tokens else None
    names = [m for m in (args.models or "").split(",") if m.strip()] or None
    unknown = sorted(set(names or ()) - set(moe.MOE_MODELS))
    if unknown:  # refused before any GPU time is spent
        raise ValueError(f"--models {','.join(unknown)}: --suite moe knows {', '.join(moe.MOE_MODELS)}")
    timing = {k: v for k, v in _timing(args).items() if k != "kernel_only"}
    records = moe.run(tokens, models=names, seed=args.seed or 0, flush=not args.no_flush, **timing)
    dicts = [r.as_dict() for r in records]
    from .bench.report import table

    print(table(dicts))
    _save(dicts, args, None)
    return 0


def cmd_bench_ec(args) -> int:
    from .bench.ec import run
    from .bench.report import plot_ladder

    sizes = _sizes(args.sizes) if args.sizes else None
    records = run(sizes, dist=args.dist, flush=not args.no_flush, **_timing(args))
    _finish(records, args, plot_ladder)
    return 0


def cmd_bench_overhead(args) -> int:
    from .bench import overhead
    from .bench.suites import parse_size

    shape = parse_size(args.host_shape) if args.host_shape else overhead.HOST_SHAPE
    if args.calls is not None and args.calls < 1:
        raise ValueError(f"--calls {args.calls}: give at least 1 call per round")
    sizes = _sizes(args.sizes) if args.sizes else None
    data = overhead.run(
        shape=shape,
        calls=args.calls or overhead.CALLS,
        sizes=sizes,
        dist=args.dist,
        flush=not args.no_flush,
        **_timing(args),
    )
    print(overhead.table(data))
    _save(data, args, overhead.plot)
    return 0


def _model_cases(args):
    """The models suite's cases that --layers, --only, --tokens and --products select."""
    from .bench import models

    return models.select(
        layers=models.parse_layers(args.layers) if args.layers else None,
        only=args.only,
        tokens=models.parse_tokens(args.tokens) if args.tokens else None,
        products=models.parse_products(args.products) if args.products else None,
    )


def cmd_bench_models(args) -> int:
    from .bench import models

    cases = _model_cases(args)
    dtypes = models.parse_dtypes(args.dtype or ",".join(models.DTYPES))
    if args.compile_only:
        models.compile_only(cases, dtypes, quiet=args.quiet)
        return 0
    budget = _time_budget(args, models.TIME_BUDGET_S)
    data = models.run(
        cases,
        dtypes,
        reps=args.reps,
        flush=not args.no_flush,
        max_run_s=args.max_run_s,
        budget_s=args.budget_s,
        time_budget_s=budget,
        quiet=args.quiet,
    )
    print(models.table(data))
    _save(data, args, models.plot)
    return 1 if any(r.get("ok") is False for r in data["records"]) else 0


def _time_budget(args, default: float) -> float:
    if args.time_budget_s is not None and args.time_budget_s < 0:
        raise ValueError(f"--time-budget-s {args.time_budget_s}: give a number of seconds, 0 or more")
    return default if args.time_budget_s is None else args.time_budget_s


def cmd_bench_shapes(args) -> int:
    from .bench import models, shapes

    own = shapes.load_models(args.model_file) if args.model_file else None
    names = [m.name for m in own] if own else None
    products = shapes.select(
        seed=args.seed or 0,
        limit=args.limit,
        sample=args.sample,
        model_names=(shapes.parse_models(args.models, names) if args.models else None),
        kinds=shapes.parse_kinds(args.kinds) if args.kinds else None,
        own=own,
    )
    dtypes = models.parse_dtypes(args.dtype or ",".join(shapes.DTYPES))
    if args.compile_only:
        models.compile_only(products, dtypes, quiet=args.quiet)
        return 0
    data = shapes.run(
        products,
        dtypes,
        time_budget_s=_time_budget(args, shapes.TIME_BUDGET_S),
        reps=args.reps,
        flush=not args.no_flush,
        max_run_s=args.max_run_s,
        budget_s=args.budget_s,
        quiet=args.quiet,
        seed=args.seed or 0,
        own=own,
    )
    print(shapes.table(data))
    _save(data, args, shapes.plot)
    return 1 if any(r.get("ok") is False for r in data["records"]) else 0


def cmd_bench_training(args) -> int:
    from .bench import training

    configs = training.load_configs(args.config_file) if args.config_file else None
    plan = training.select(
        quick=args.quick, models=args.models, modes=args.modes, precisions=args.precisions, configs=configs
    )
    data = training.run(
        plan,
        configs=configs,
        steps=args.steps,
        batch=args.batch,
        num_layers=args.num_layers,
        seed=args.seed or 0,
        time_budget_s=_time_budget(args, training.TIME_BUDGET_S),
        quiet=args.quiet,
    )
    print(training.table(data))
    _save(data, args, training.plot)
    return 1 if any(r.get("failed") for r in data["records"]) else 0


def cmd_bench_decode(args) -> int:
    from .bench import decode, training

    models = training._names(args.models, decode.decoders(), "--models") if args.models else decode.DEFAULT_MODELS
    data = decode.run(
        models,
        training.setups_of(args.precisions),
        training._names(args.caches, decode.CACHES, "--caches"),
        batch=args.batch or 1,
        prompt=decode.PROMPT if args.prompt is None else args.prompt,
        tokens=decode.TOKENS if args.steps is None else args.steps,
        num_layers=args.num_layers,
        seed=args.seed or 0,
        time_budget_s=_time_budget(args, decode.TIME_BUDGET_S),
        quiet=args.quiet,
    )
    print(decode.table(data))
    _save(data, args, decode.plot)
    return 1 if any(r.get("failed") for r in data["records"]) else 0


def cmd_accuracy(args) -> int:
    from ..core.methods import EC_PRECISIONS
    from .accuracy import INPUT_SETS, KS, METHODS, as_dicts, default_methods, plot, run, table
    from ..kernels import registry

    ks = [int(k) for k in args.ks.split(",")] if args.ks else list(KS)
    inputs = args.inputs.split(",") if args.inputs else list(INPUT_SETS)
    if args.methods:
        methods = args.methods.split(",")
    else:  # the GPU's target decides whether ec_wgmma joins the defaults
        from ..runtime.device import gpu_info

        methods = default_methods(gpu_info(0).arch)
    for name in inputs:
        if name not in INPUT_SETS:
            raise ValueError(f"unknown input set {name!r}; choose from {', '.join(INPUT_SETS)}")
    ec_kernels = [spec.name for spec in registry.ladder("ec")]
    for m in methods:
        precision, _, kernel = m.partition(":")
        if precision not in METHODS or (kernel and (kernel not in ec_kernels or precision not in EC_PRECISIONS)):
            raise ValueError(
                f"unknown method {m!r}; choose from {', '.join(METHODS)}, or an error-corrected "
                f"precision on a named kernel (precision:kernel, kernel one of "
                f"{', '.join(ec_kernels)})"
            )
    if min(ks) < 1 or args.size < 1:
        raise ValueError("K and --size must be at least 1")
    points = as_dicts(run(ks, inputs, methods, M=args.size, N=args.size, quiet=args.quiet))
    print(table(points))
    _save(points, args, plot)
    return 0


def cmd_bench_wmma_ext(args) -> int:
    from .bench.report import write_json
    from .bench.wmma_ext import run, table

    records = [r.as_dict() for r in run(reps=args.reps, budget_s=args.budget_s, quiet=args.quiet)]
    print(table(records))
    if args.json:
        write_json(records, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def cmd_fragments(args) -> int:
    from ..lab import fragments as fr

    if args.analytic:
        arch = args.arch or "sm_90a"
        kinds = _fragment_kinds(fr, args.kinds, arch)
        maps = {kd.name: fr.analytic_map(kd, arch) for kd in kinds}
        gpu = f"analytic-{arch}"
    else:
        if args.arch:
            raise ValueError("--arch is for --analytic; a GPU dump uses the GPU's own target")
        from ..runtime.device import gpu_info

        info = gpu_info(args.device)
        gpu, arch = info.name, info.arch
        kinds = _fragment_kinds(fr, args.kinds, arch)
        maps = fr.dump(kinds, device=args.device)
    failed = 0
    for kd in kinds:
        problems = fr.check_map(kd, maps[kd.name])
        differs = [] if args.analytic else fr.compare(kd, maps[kd.name], fr.analytic_map(kd, arch))
        failed += bool(problems or differs)
        status = "ok" if not (problems or differs) else "DIFFERS" if differs else "INCOMPLETE"
        print(
            f"{kd.name:36s} {kd.num_elements:2d} slots/lane  {status}"
            + ("" if args.analytic else "  (vs analytic map)")
        )
        for line in problems + differs:
            print("    " + line)
    if args.out:
        path = fr.write_outputs(maps, args.out, gpu=gpu, arch=arch, plots=not args.no_plots)
        print(f"wrote {args.out}/<kind>.csv{'' if args.no_plots else ', <kind>.png'} and {path}", file=sys.stderr)
    return 1 if failed else 0


def _fragment_kinds(fr, patterns, arch: str) -> list:
    """The kinds the patterns name that ``arch`` has; ValueError naming the arch where
    it has none of them (BF16 and TF32 fragments need sm_80)."""
    named = fr.select(patterns)  # ValueError for a pattern naming no kind at all
    have = [kd for kd in named if kd in fr.kinds_for(arch)]
    if not have:
        raise ValueError(
            f"{arch} has no {' '.join(patterns)} fragments: BF16 and TF32 WMMA need sm_80; "
            f"{arch} has the FP16 kinds of the k = 16 shapes"
        )
    if patterns and len(have) < len(named):
        print(
            f"gemmlab fragments: {len(named) - len(have)} of the kinds named do not exist on {arch} "
            "(BF16 and TF32 WMMA need sm_80); left out",
            file=sys.stderr,
        )
    return have


def cmd_sweep(args) -> int:
    from .bench.report import plot_sweep, sweep_speedups
    from .bench.suites import SWEEP_SIZES, run_suite, sweep_entries

    sizes = _sizes(args.sizes) if args.sizes else SWEEP_SIZES
    records = run_suite(sweep_entries(), sizes, **_timing(args))
    _finish(records, args, plot_sweep)
    print("\nnaive -> tiled speedup:")
    for line in sweep_speedups([r.as_dict() for r in records]):
        print("  " + line)
    return 0


def tune_shapes(args) -> tuple[list, dict | None]:
    """The shapes `gemmlab tune` times, and for --suite models the layouts and
    batches the suite runs each in (the models suite's own case list)."""
    from .tune import DEFAULT_SIZES

    selecting = [f"--{n.replace('_', '-')}" for n in ("tokens", "layers", "only", "products") if getattr(args, n)]
    if args.suite != "models":
        if selecting:
            raise ValueError(f"{', '.join(selecting)}: for --suite models")
        sizes = _sizes(args.sizes) if args.sizes else DEFAULT_SIZES
        if not args.ops:
            return sizes, None
        layouts = tuple(dict.fromkeys(_ops(args.ops)))
        return sizes, {tuple(s): tuple((o, 1) for o in layouts) for s in sizes}
    if args.sizes or args.ops:
        raise ValueError("--sizes and --ops are not for --suite models: the suite names its shapes and layouts")
    from .bench.models import tune_shapes as shapes_of

    uses = shapes_of(_model_cases(args))
    return list(uses), uses


def cmd_tune(args) -> int:
    from .tune import DEFAULT_KERNELS, tune

    kernels = _kernel_items(args.kernels or []) or list(DEFAULT_KERNELS)
    from ..kernels import registry

    for name in kernels:  # refuse bad names before any GPU time is spent
        registry.get(name)
    sizes, uses = tune_shapes(args)
    table = tune(kernels, sizes, uses=uses, fresh=args.fresh, jobs=args.jobs, output=args.output, quiet=args.quiet)
    print(f"{'shape':>18s}  {'cuBLAS ms':>9s}  {'best ms':>8s}  {'%cuBLAS':>7s}  winner")
    for key, entry in table.shapes.items():
        best = entry.get("best")
        if best:
            pct = 100 * entry["cublas_ms"] / best["ms"] if entry.get("cublas_ms") else float("nan")
            params = ",".join(f"{k}={v}" for k, v in best["params"].items())
            print(
                f"{key:>18s}  {entry.get('cublas_ms') or float('nan'):9.3f}  {best['ms']:8.3f}  {pct:6.1f}%  "
                f"{best['kernel']}:{params}"
            )
        else:
            print(f"{key:>18s}  no correct candidate")
    return 0


def cmd_verify(args) -> int:
    from ..core.api import plan
    from ..kernels import registry
    from .verify import TOLERANCE, VERIFY_DTYPES, verify, verify_dtype

    names = _kernel_items(args.kernels)
    everything = names in ([], ["all"])
    specs = {} if everything else {n: None if n == "auto" else registry.get(n) for n in names}  # unknown: the list
    if args.dtype is not None and args.dtype not in VERIFY_DTYPES:
        raise ValueError(f"--dtype {args.dtype!r}: give one of {', '.join(VERIFY_DTYPES)}")
    shapes = _sizes(args.shapes)
    from ..runtime.device import gpu_info

    gpu = gpu_info(0)  # no GPU: one line, before any array library is touched
    if everything:  # every matmul rung this GPU runs, each in its own dtype (FP8's: tests/test_wgmma_fp8.py;
        # grouped's: tests/test_grouped.py)
        specs = {
            s.name: s
            for s in registry.ladder()
            if s.builds_for(gpu.arch) and any(d in VERIFY_DTYPES for d in s.dtypes) and not s.own_call
        }
    runs = []
    for name, spec in specs.items():
        if spec:  # a rung this GPU cannot run: why, and which run here
            spec.check_arch(gpu.arch, gpu.name)
        dtype = args.dtype or (verify_dtype(spec, gpu.arch) if spec else "float32")
        if spec:
            spec.check_arch(gpu.arch, gpu.name, dtype)
        plan(name, 128, 128, 128, dtype=dtype, out_dtype="float32", arch=gpu.arch, gpu_name=gpu.name)
        runs.append((name, dtype))
    failed = 0
    results = []
    for name, dtype in runs:
        tol = args.tol if args.tol is not None else TOLERANCE[dtype]
        for M, N, K in shapes:
            r = verify(name, M, N, K, alpha=args.alpha, beta=args.beta, dist=args.dist, tol=tol, dtype=dtype)
            results.append(r.as_dict())
            failed += not r.passed
            print(
                f"{'ok  ' if r.passed else 'FAIL'} {name:14s} {dtype:8s} {M}x{N}x{K} alpha={args.alpha} "
                f"beta={args.beta} {args.dist}: rel err {r.rel_fro:.2e} (bound {tol:.0e}), max elementwise "
                f"{r.max_rel:.2e}" + (f", {r.nonfinite} non-finite" if r.nonfinite else ""),
                flush=True,
            )
    if args.json:
        from .bench.report import write_json

        write_json(results, args.json)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def cmd_inspect(args) -> int:
    from .inspect_kernels import format_reports, inspect_kernels
    from ..runtime.headers import find_cuda_headers

    reports = inspect_kernels(
        args.arch,
        _kernel_items(args.kernel) if args.kernel else None,
        all_configs=args.all_configs,
        ops=_ops(args.ops),
        jobs=args.jobs,
        progress=None if args.quiet else _progress_printer("inspect"),
    )
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=1))
    else:
        print(find_cuda_headers().report())
        print(format_reports(reports))
    return 1 if any(r.spill_bytes for r in reports) else 0


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default where its help text does not already say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" not in text and action.default not in (None, False, argparse.SUPPRESS) and action.option_strings:
            shown = " ".join(action.default) if isinstance(action.default, list) else action.default
            text += f" (default: {shown})"
        return text.replace("%", "%%") if "%(" not in text and "%%" not in text else text


# Whether each command needs a GPU, said in its help (`gemmlab -h` lists them).
GPU = "[needs a CUDA GPU]"
NO_GPU = "[no GPU needed]"


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    ap = argparse.ArgumentParser(
        prog="gemmlab",
        formatter_class=_HelpFormatter,
        description="gemmlab: a GEMM kernel ladder, measured against cuBLAS.  "
        "Start with `gemmlab list` and `gemmlab inspect --arch sm_86` (no GPU needed); "
        "on a GPU, `gemmlab verify` and `gemmlab bench`.",
    )
    ap.add_argument("--version", action="version", version=f"gemmlab {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, gpu: str, text: str):
        return sub.add_parser(name, help=f"{text} {gpu}", description=f"{text} {gpu}", formatter_class=_HelpFormatter)

    p = add("list", NO_GPU, "the kernel registry: every rung, its tile parameters, rules and targets")
    p.add_argument("--json", action="store_true", help="print the registry as JSON")
    p.set_defaults(func=cmd_list)

    def timing_args(p):
        p.add_argument("--reps", type=int, default=20, help="timed runs per point (median reported)")
        p.add_argument("--max-run-s", type=float, default=3.0, help="skip a point whose single run takes longer")
        p.add_argument("--budget-s", type=float, default=2.0, help="time budget per point for the repeats")
        p.add_argument("--json", metavar="PATH", help="write the records as JSON")
        p.add_argument("--plot", metavar="PATH.png", help="write a plot")
        p.add_argument("--quiet", action="store_true", help="no progress lines")
        p.add_argument(
            "--kernel-only",
            action="store_true",
            help="also time each kernel alone (the plan the gemmlab.matmul call ran, launched on raw "
            "pointers back to back, beside cuBLAS back to back): a second group of columns and records "
            "with path 'kernel'.  The default figure (path 'public') is the gemmlab.matmul call itself "
            "beside cupy/torch.matmul, each run started on an idle GPU, host time included",
        )

    def model_selection_args(p, what):
        """The models suite's selection, for bench and tune alike."""
        p.add_argument(
            "--tokens",
            metavar="M,...",
            help=f"{what}--suite models: token counts M of the linear layers (default 1,16,128,2048,8192); "
            "--suite moe: tokens before routing (default 128,1024,8192)",
        )
        p.add_argument(
            "--layers",
            metavar="NAME,...",
            help=f"{what}--suite models: comma list of qkv, o, gate_up, down, lm_head, attention (default all)",
        )
        p.add_argument(
            "--only",
            choices=("linear", "attention"),
            help=f"{what}--suite models: the linear layers only, or attention's batched products only",
        )
        p.add_argument(
            "--products",
            metavar="P,...",
            help=f"{what}--suite models: the linear layers' "
            "products, comma list of fwd (x @ W.t()), dgrad (dY @ W), wgrad (dY.t() @ x); default all",
        )

    def bench_suite_args(p):
        """The options of --suite shapes and --suite training."""
        p.add_argument(
            "--models",
            metavar="NAME,...",
            help="--suite shapes: the models whose products to time "
            "(default all, and 'random': the random odd sizes); --suite training: comma list of "
            "llama-1b, qwen2-0.5b, gpt2, bert-base, bert-large-torch, vit-b16, swin-t-stage1, granite-moe-1b-grouped, "
            "granite-moe-1b "
            "(default all); --suite moe: comma list of "
            "mixtral-8x7b, qwen1.5-moe-a2.7b, deepseek-v2-lite, qwen3-30b-a3b, granite-3.0-1b-a400m",
        )
        p.add_argument(
            "--model-file",
            metavar="PATH",
            help="--suite shapes: time the products of the models in this JSON file instead of the "
            "suite's (a list of {name, head_dim, layers: [[name, in, out], ...], tokens, attention, "
            "decode}: docs/usage.md)",
        )
        p.add_argument(
            "--config-file",
            metavar="PATH",
            help="--suite training: train the models in this JSON file instead of the suite's (a list "
            "of objects with the suite's Config fields: name, kind, d, layers, heads, ffn, ...: docs/usage.md)",
        )
        p.add_argument(
            "--kinds",
            metavar="KIND,...",
            help="--suite shapes: only products having any of these "
            "kinds (batched_odd, batched, odd_align, small_m, small_k, few_tiles, nt, tn, nn)",
        )
        p.add_argument("--limit", type=int, metavar="N", help="--suite shapes: the first N products selected")
        p.add_argument("--sample", type=int, metavar="N", help="--suite shapes: N products drawn with --seed")
        p.add_argument(
            "--seed",
            type=int,
            metavar="S",
            help="--suite shapes: the random sizes' and --sample's "
            "seed; --suite training: the weights' and data's (default 0)",
        )
        p.add_argument(
            "--modes",
            metavar="MODE,...",
            help="--suite training: comma list of eager, compile, reduce-overhead (default all)",
        )
        p.add_argument(
            "--precisions",
            metavar="P,...",
            help="--suite training: comma list of bf16 (PyTorch and "
            "gemmlab.torch.use_gemmlab), fp32 (SGEMM, TF32 off), tf32, fp32_tc "
            "(gemmlab.torch.fp32_tc()); default all",
        )
        p.add_argument(
            "--steps",
            type=int,
            metavar="N",
            help="--suite training: timed steps per run (default 9); --suite decode: timed tokens per round (default 32)",
        )
        p.add_argument(
            "--caches",
            metavar="KIND,...",
            help="--suite decode: comma list of static (views of a buffer for the longest context), grown "
            "(torch.cat at every token); default both",
        )
        p.add_argument(
            "--prompt",
            type=int,
            metavar="N",
            help="--suite decode: cached positions before the first token (default 1024)",
        )
        p.add_argument(
            "--batch",
            type=int,
            metavar="N",
            help="--suite training: batch size for every model (default each model's own)",
        )
        p.add_argument(
            "--num-layers",
            type=int,
            metavar="N",
            help="--suite training: transformer layers of every model (default each model's published count)",
        )
        p.add_argument(
            "--quick",
            action="store_true",
            help="--suite training: the headline only: each model "
            "eager in bf16 and fp32_tc beside plain PyTorch (and TF32), and ViT-B/16 compiled in bf16",
        )

    p = add("bench", GPU, "time gemmlab.matmul beside cuBLAS")
    p.add_argument(
        "--kernels",
        nargs="+",
        metavar="KERNEL[:P=V,...]",
        help="kernels to time, separated by spaces or commas, each with optional tile parameters "
        "(e.g. --kernels naive,vectorized:BM=64,BN=64 smem_tiled:tile=16); default: every rung",
    )
    p.add_argument("--sizes", help="comma list of N or MxNxK (default: the suite's)")
    p.add_argument(
        "--dist",
        default="uniform",
        choices=("uniform", "normal", "wide"),
        help="inputs: U(-1, 1), N(0, 1), or random signs with magnitudes 2^-20 .. 2^20",
    )
    p.add_argument(
        "--dtype",
        metavar="DTYPE",
        help="ladder: one of fp32 (the CUDA-core ladder beside cuBLAS SGEMM), tf32/fp16/bf16 (the "
        "tensor-core ladder beside cuBLAS in that dtype, PyTorch matmul), fp16_ec/tf32_ec (the "
        "error-corrected FP32 kernels, one method, unscaled, beside cuBLAS SGEMM); default fp32.  "
        "models: a comma list of bf16, fp16, fp32, fp32_tc, fp32_tc_mode (torch.matmul inside "
        "gemmlab.torch.fp32_tc()) (default all five); shapes: the same list (default bf16, fp16, "
        "fp32, fp32_tc)",
    )
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 between runs")
    p.add_argument(
        "--all-configs",
        action="store_true",
        help="time every legal tile configuration of the kernels named by --kernels",
    )
    p.add_argument(
        "--ops",
        help="operand layouts to time, comma list of NN, TN, NT, TT (T: op(A) "
        "or op(B) a transposed view, i.e. column-major; cuBLAS gets the same views); default NN",
    )
    p.add_argument(
        "--suite",
        default="ladder",
        choices=("ladder", "wmma_ext", "ec", "overhead", "models", "shapes", "training", "decode", "fp8", "moe"),
        help="ladder: kernels beside cuBLAS (default); wmma_ext: the WMMA fragment lab's experiments; "
        "ec: the FP32-accurate tensor-core methods (precision=fp16_ec, fp16_ec_scaled, tf32_ec, "
        "fp32_tc) beside cuBLAS SGEMM (default sizes 4096, 8192, 16384x4096x4096); overhead: host "
        "µs per call of gemmlab.matmul, torch.matmul and cupy.matmul on tiny operands, and %% of "
        "cuBLAS from 64^3 to 2048^3 (float32, bfloat16, float16); models: a Llama-3-8B-sized "
        "transformer's linear layers (forward, input and weight gradient) and attention's batched "
        "products, gemmlab.matmul beside torch.matmul on the same views; shapes: 700+ products of "
        "23 public models and random odd sizes (forward, input and weight gradient views), by kind; "
        "training: whole models' training steps (Llama-3.2-1B, GPT-2, BERT-base, ViT-B/16 sizes) "
        "through gemmlab.torch beside plain PyTorch, eager and compiled; decode: the training suite's "
        "decoders generating token by token with a key/value cache (attention as products over the "
        "cache, a new length at every token), gemmlab.torch beside plain PyTorch, ms per token; "
        "fp8 (Hopper): the FP8 rung "
        "(per-tensor, per-row and block scales; --kernels adds tile configurations of wgmma_fp8) beside "
        "torch._scaled_mm (fast accumulation off and on), torch.matmul and gemmlab in bfloat16, on square "
        "and Llama-3-8B / 70B shapes; moe (Hopper): gemmlab.grouped_mm on the expert layers of public "
        "mixture-of-experts models (Mixtral-8x7B, Qwen1.5-MoE, DeepSeek-V2-Lite, Qwen3-30B-A3B, "
        "Granite-3.0-1B-A400M), uniform and skewed routing, beside torch._grouped_mm and a loop of "
        "torch.matmul (--tokens, --models, --seed)",
    )
    p.add_argument(
        "--calls",
        type=int,
        metavar="N",
        help="--suite overhead: back-to-back calls per timed round of the host figures (default 300)",
    )
    p.add_argument(
        "--host-shape",
        metavar="MxNxK",
        help="--suite overhead: the operands' shape for the host figures (default 64x64x64)",
    )
    model_selection_args(p, "")
    p.add_argument(
        "--time-budget-s",
        type=float,
        metavar="S",
        help="--suite models, shapes: seconds for all timed repeats together (default 300, shapes "
        "150); each product gets a share in proportion to its expected time, at least 3 timed runs.  "
        "--suite training: no new run starts after this many seconds (default 900)",
    )
    p.add_argument(
        "--compile-only",
        action="store_true",
        help="--suite models, shapes: compile the kernels the products plan into the cache, time "
        "nothing (on a fresh machine the compilation alone can take minutes: run it first)",
    )
    bench_suite_args(p)
    timing_args(p)
    p.set_defaults(func=cmd_bench)

    p = add("accuracy", GPU, "error vs FP64 of SGEMM, TF32, FP16 and the error-corrected methods over K and input sets")
    p.add_argument("--ks", help="comma list of K (default 1024,4096,16384,65536,131072)")
    p.add_argument(
        "--inputs",
        help="comma list of input sets (default: uniform, uniform_small, uniform_large, normal, log_uniform)",
    )
    p.add_argument(
        "--methods",
        help="comma list (default: sgemm_cublas, fp32, tf32, fp16, fp16_ec, "
        "fp16_ec_scaled, tf32_ec, fp32_tc, fp32_tc:ec_wmma, and fp32_tc:ec_wgmma on Hopper); "
        "precision:kernel runs an error-corrected "
        "precision on that kernel (ec_wmma, ec_wgmma) instead of auto's",
    )
    p.add_argument("--size", type=int, default=256, help="M = N (default 256)")
    p.add_argument("--json", metavar="PATH", help="write the points as JSON")
    p.add_argument("--plot", metavar="PATH.png", help="write a plot")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_accuracy)

    p = add(
        "fragments",
        "[needs a CUDA GPU; with --analytic no GPU]",
        "WMMA fragment maps: which element each lane's x[k] holds",
    )
    p.add_argument(
        "kinds",
        nargs="*",
        help="kinds to dump, by name or parts of it (matrix_a, m32n8k16.bf16, "
        "accumulator.m16n16k16.f32.row); default: all",
    )
    p.add_argument("--out", metavar="DIR", help="write <kind>.csv, <kind>.png and fragment_maps_<gpu>.json")
    p.add_argument("--analytic", action="store_true", help="the analytic maps instead of a GPU dump (no GPU)")
    p.add_argument(
        "--arch",
        help="with --analytic: the target, sm_75, sm_80, sm_86, sm_89, sm_90(a), sm_100(a) or "
        "sm_120(a) (default sm_90a)",
    )
    p.add_argument("--device", type=int, default=0, help="the GPU to dump on (CUDA ordinal)")
    p.add_argument("--no-plots", action="store_true", help="with --out: CSV and JSON only, no PNG per kind")
    p.set_defaults(func=cmd_fragments)

    p = add("sweep", GPU, "the TILE_WIDTH study: smem_tiled with tile 2..32 beside naive")
    p.add_argument("--sizes", help="comma list (default 256,1024,2048,4096)")
    timing_args(p)
    p.set_defaults(func=cmd_sweep)

    p = add("tune", GPU, "find the fastest correct configuration per shape on this GPU and keep it")
    p.add_argument(
        "--kernels",
        nargs="+",
        metavar="KERNEL",
        help="kernels to tune, separated by spaces or commas (default: vectorized warptile pipelined)",
    )
    p.add_argument(
        "--sizes",
        help="comma list of N or MxNxK (default: the benchmark suite's shapes, square 512..8192 and skinny ones)",
    )
    p.add_argument(
        "--ops",
        help="with --sizes (or the default shapes): comma list of operand layouts "
        "NN, NT, TN, TT (T: that operand a transposed view); each candidate is timed in all of "
        "them and ranked by the sum, so the shape's one entry serves them together (default NN)",
    )
    p.add_argument(
        "--suite",
        choices=("models",),
        help="models: the shapes of `gemmlab bench --suite models`, "
        "each timed in the layouts and batches the suite runs it in",
    )
    model_selection_args(p, "with ")
    p.add_argument("--fresh", action="store_true", help="ignore saved progress and measure everything again")
    p.add_argument("--jobs", type=int, help="parallel compiler processes (default: one per CPU)")
    p.add_argument("--output", metavar="PATH", help="write the table here instead of the cache folder")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_tune)

    p = add("verify", GPU, "compare kernels with an FP64 reference on fresh random inputs")
    p.add_argument(
        "--kernels",
        nargs="+",
        default=["all"],
        metavar="KERNEL",
        help="kernel names (commas or spaces), auto, or all: every rung this GPU runs, each in its "
        "dtype (float32 on the CUDA cores, tf32 on the tensor cores, float16 where TF32 needs sm_80, "
        "tf32_ec for the error-corrected rungs)",
    )
    p.add_argument(
        "--dtype",
        help="run every kernel in this dtype instead: float32, tf32, float16, fp16_ec or "
        "tf32_ec (inputs drawn as float32 and rounded to it; the reference takes the rounded inputs)",
    )
    p.add_argument(
        "--shapes",
        default="1x1x1,7x13x5,33x65x17,127x129x255,1000,4097x31x129,16x16x4096",
        help="comma list of N or MxNxK",
    )
    p.add_argument("--alpha", type=float, default=1.0, help="C = alpha * A @ B + beta * C")
    p.add_argument(
        "--beta",
        type=float,
        default=0.0,
        help="C = alpha * A @ B + beta * C; 0: the output starts as NaN, so an element never written fails",
    )
    p.add_argument(
        "--dist",
        default="uniform",
        choices=("uniform", "normal", "wide"),
        help="inputs: U(-1, 1), N(0, 1), or random signs with magnitudes 2^-20 .. 2^20",
    )
    p.add_argument(
        "--tol",
        type=float,
        help="bound on the relative Frobenius error vs FP64 (default by dtype: "
        "1e-5 for float32, fp16_ec, tf32_ec; 1e-4 for tf32 and float16)",
    )
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.set_defaults(func=cmd_verify)

    p = add(
        "inspect",
        NO_GPU,
        "compile for a target and report registers, shared memory, spills and SASS "
        "instruction counts per kernel (the SASS columns need nvdisasm: pip install 'gemmlab[inspect]')",
    )
    p.add_argument(
        "--arch",
        default="sm_90a",
        help="the target to compile for: sm_75, sm_80, sm_86, sm_89, "
        "sm_90a, sm_100a, sm_120 (the GPU's compute capability; Hopper and Blackwell take the 'a' "
        "form)",
    )
    p.add_argument(
        "--kernel",
        "--kernels",
        dest="kernel",
        nargs="+",
        metavar="KERNEL",
        help="kernels, separated by spaces or commas (default: every rung; those that cannot target "
        "--arch are listed with the reason)",
    )
    p.add_argument("--jobs", type=int, help="parallel compiler processes (default: one per CPU)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--all-configs", action="store_true", help="every legal tile configuration, not just defaults")
    p.add_argument("--ops", default="NN", help="operand layouts, comma list of NN, TN, NT, TT (default NN)")
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    p.set_defaults(func=cmd_inspect)
    return ap


# What to try instead, per command, when there is no GPU.
NO_GPU_HINTS = {"fragments": "gemmlab fragments --analytic needs no GPU"}


def _one_line(command: str, exc: BaseException) -> str:
    """The message of an error the command refuses with (exit code 2)."""
    from ..core.errors import NoGPUError, missing_module_message

    if isinstance(exc, ModuleNotFoundError):
        found = missing_module_message(exc.name)
        if found:
            return found
    if isinstance(exc, NoGPUError) and command in NO_GPU_HINTS:
        return f"{exc} ({NO_GPU_HINTS[command]})"
    if type(exc).__module__.startswith(("cupy", "cupy_backends")):
        return (
            f"CuPy could not use the GPU ({type(exc).__name__}: {exc}); a driver older than CuPy's CUDA "
            "fails so: gemmlab[cu13] needs an NVIDIA driver 580 or later, gemmlab[cu12] 525 or later"
        )
    return str(exc)


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a refusal to print as one line (not a bug to trace)."""
    return isinstance(exc, (GemmlabError, ValueError, TypeError, ImportError)) or type(exc).__module__.startswith(
        ("cupy", "cupy_backends")
    )


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `gemmlab list | head`
        sys.stderr.close()
        return 0
    except Exception as exc:
        if not _refused(exc):
            raise
        print(f"gemmlab {args.command}: {_one_line(args.command, exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
