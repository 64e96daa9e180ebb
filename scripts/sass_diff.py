"""Compile the same kernel instantiations from two source trees and report every
kernel whose SASS or mangled name differs: the check that a change to the .cu /
.cuh files (comments, moved functions, renamed constants) left the machine
code alone.

    python3 scripts/sass_diff.py --base /tmp/base --arch sm_90a
    python3 scripts/sass_diff.py --base /tmp/base --arch sm_80 --kernels wgmma,mma_pipelined --sample 10

--base is another checkout of the repository (e.g. `git archive <commit> | tar -x
-C /tmp/base`); --new defaults to this script's tree.  The instantiations are
those tests/test_compile.py compiles for the architecture (every configuration
in the 'N', 'N' layout for sm_90a, the layout set for sm_80), plus the helper
kernels (splitk_reduce, tf32_pack, ec_split_pack, exponent_histogram) and the
lab modules (fragment_dump, wmma_ext_check, wmma_ext_bench).  --kernels picks
some of them by registry name (or splitk_reduce, tf32_pack, ec_split_pack,
exponent_histogram, fragment_dump, wmma_ext_check, wmma_ext_bench); --sample N
keeps N instantiations of each, spread evenly.  Each tree is compiled in its own
process, with that tree's headers (NVRTC, no cache, in groups of --chunk
instantiations per module, the same groups for both trees); the SASS of a kernel
is nvdisasm's text of its .text section (no line information).  Compared per kernel: the mangled name, the kernel's
sections in nvdisasm's text (code, static shared memory, parameter bank) and
ptxas's report (registers, shared memory, stack, spills); a module's other
sections (global data: NVRTC emits namespace-scope constexpr variables there) are
reported apart, since the kernels do not read them.  Needs nvdisasm
(pip install 'gemmlab[inspect]').  Exit status 1 if anything differs.

A change that renames instantiations (a template argument added, a kernel made a
template) is checked with --base-sub and --code-only: --select keeps the new
tree's instantiations matching a regular expression, --base-sub 'PATTERN=>REPL'
(repeatable) gives the base tree's name of each, and --code-only compares the
kernel's code (symbol names and binding, global or weak, normalised) and ptxas's
report only, not the mangled name or the parameter bank:

    python3 scripts/sass_diff.py --base /tmp/base --kernels wgmma,splitk_reduce --select "false, '|reduce" \
        --base-sub ", false, '=>, '" --base-sub "splitk_reduce<3>=>splitk_reduce" --code-only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
AUX = ("splitk_reduce", "tf32_pack", "ec_split_pack", "ec_split_scaled", "exponent_histogram")
LAB = ("fragment_dump", "wmma_ext_check", "wmma_ext_bench")


# -- worker side: runs with PYTHONPATH=<tree>/src:<tree>/tests ---------------------------


def _list_jobs(arch: str, kernels: set[str] | None) -> list[tuple[str, str, str]]:
    """(group, source relative to the kernel folder, name expression) of everything to compile."""
    import test_compile as tc
    from gemmlab.kernels.ec.ec_wgmma import (
        EC_SPLIT_PACK_KERNELS,
        EC_SPLIT_PACK_SOURCE,
        EC_SPLIT_SCALED_KERNELS,
        EC_SPLIT_SCALED_SOURCE,
    )
    from gemmlab.kernels.ec.exponent_histogram import EXPONENT_HISTOGRAM_KERNEL, EXPONENT_HISTOGRAM_SOURCE
    from gemmlab.kernels.simt.splitk_reduce import SPLITK_REDUCE_KERNELS, SPLITK_REDUCE_SOURCE
    from gemmlab.kernels.spec import KERNEL_DIR
    from gemmlab.kernels.tensor.wgmma import TF32_PACK_KERNELS, TF32_PACK_SOURCE

    def want(name):
        return kernels is None or name in kernels

    def rel(path) -> str:
        return str(Path(path).resolve().relative_to(KERNEL_DIR.resolve()))

    jobs = []
    for spec in tc.SPECS:
        if spec.builds_for(arch) and want(spec.name):
            jobs += [(spec.name, rel(spec.source_path), n) for n in tc.instantiations(spec, arch)]
    if want("splitk_reduce"):
        jobs += [("splitk_reduce", rel(SPLITK_REDUCE_SOURCE), n) for n in SPLITK_REDUCE_KERNELS]  # one per output dtype
    if want("exponent_histogram"):
        jobs.append(("exponent_histogram", rel(EXPONENT_HISTOGRAM_SOURCE), EXPONENT_HISTOGRAM_KERNEL))
    if arch == "sm_90a":
        if want("tf32_pack"):
            jobs += [("tf32_pack", rel(TF32_PACK_SOURCE), n) for n in TF32_PACK_KERNELS]
        if want("ec_split_pack"):
            jobs += [("ec_split_pack", rel(EC_SPLIT_PACK_SOURCE), n) for n in EC_SPLIT_PACK_KERNELS]
        if want("ec_split_scaled"):
            jobs += [("ec_split_scaled", rel(EC_SPLIT_SCALED_SOURCE), n) for n in EC_SPLIT_SCALED_KERNELS]
    if arch in ("sm_80", "sm_90a"):  # wmma_ext.cuh exists for these only
        from gemmlab.lab import fragments as fr
        from gemmlab.tools.bench import wmma_ext as bench

        if want("fragment_dump"):
            jobs += [("fragment_dump", rel(fr.SOURCE), kd.name_expression()) for kd in fr.KINDS]
        if want("wmma_ext_check"):
            jobs += [
                (
                    "wmma_ext_check",
                    rel(fr.SOURCE.parent / "wmma_ext_check.cu"),
                    kd.name_expression("gemmlab::lab::wmma_ext_check"),
                )
                for kd in fr.KINDS
            ]
        if want("wmma_ext_bench"):
            jobs += [("wmma_ext_bench", rel(bench.SOURCE), n) for n in bench.kernel_names()]
    return jobs


SECTION = re.compile(r"^\s*\.section\s+([^,\s]+)", re.M)
# Line information (file paths, line numbers) and the toolkit's notes are expected to differ.
NOT_COMPARED = (".debug_", ".nv_debug_", ".note.nv.tkinfo")
INTERNAL = re.compile(r"_INTERNAL_\w+?_cu_[0-9a-f]{8}_\d+")  # file-local names: a hash of the path
LABEL = re.compile(r"\.L_(x_)?\d+\b")


def _renumber(text: str) -> str:
    """nvdisasm numbers labels across the whole file, so one more section elsewhere
    shifts them: number them by first appearance within the text instead."""
    seen: dict[str, str] = {}
    return LABEL.sub(lambda m: seen.setdefault(m.group(0), f".L_{m.group(1) or ''}{len(seen)}"), text)


def _sections(cubin: bytes) -> dict[str, str]:
    """nvdisasm's text of the cubin, per section (.text.<kernel>, .nv.shared.<kernel>, ...)."""
    from gemmlab.runtime.compile import find_nvdisasm  # in both trees' runtime, whatever else moved

    tool = find_nvdisasm()
    if tool is None:
        raise SystemExit("nvdisasm not found (pip install 'gemmlab[inspect]')")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        text = subprocess.run([tool, str(path)], capture_output=True, text=True, check=True).stdout
    text = re.sub(r"^\s*//-+ .*$\n?", "", text, flags=re.M)  # banners naming the next section
    parts = SECTION.split(text)
    return {name: body for name, body in zip(parts[1::2], parts[2::2])}


def _code_only(sass: str, mangled: str) -> str:
    """A kernel's code section alone, its own name and binding (global, weak) normalised
    and the labels numbered within it."""
    text = sass[sass.index(f".text.{mangled}") :]
    text = re.sub(r"\.(global|weak)\s+" + re.escape(mangled), ".SYMBOL KERNEL", text)
    return _renumber(text.replace(mangled, "KERNEL"))


def _compile_chunk(source: str, names: list[str], arch: str) -> dict[str, dict]:
    """Per name expression: its mangled name, the text of the kernel's own sections
    (code, static shared memory, parameter bank), its ptxas report, and the module's
    other sections (global data such as namespace-scope constants), file-local
    names normalised."""
    from gemmlab.kernels.spec import KERNEL_DIR  # kernels/spec.py and runtime/compile.py: in both trees
    from gemmlab.runtime.compile import compile_module, parse_ptxas_log

    module = compile_module(KERNEL_DIR / source, names, arch, use_cache=False)
    sections = _sections(module.cubin)
    report = parse_ptxas_log(module.log)
    mangled_all = set(module.symbols.values())
    other = {
        k: INTERNAL.sub("_INTERNAL_", v)
        for k, v in sections.items()
        if not any(k.endswith("." + m) for m in mangled_all) and not k.startswith(NOT_COMPARED)
    }
    out = {}
    for n in names:
        m = module.symbols[n]
        own = {k: v for k, v in sections.items() if k.endswith("." + m)}
        if f".text.{m}" not in own:
            raise RuntimeError(f"no SASS for {n} ({m})")
        res = report.get(m)
        out[n] = {
            "mangled": m,
            "sass": _renumber("".join(f"{k}\n{own[k]}" for k in sorted(own))),
            "ptxas": None if res is None else [res.registers, res.smem_bytes, res.stack_bytes, res.spill_bytes],
            "module_data": _renumber("".join(f"{k}\n{other[k]}" for k in sorted(other))),
        }
    return out


def _worker(args) -> int:
    if args.worker == "list":
        kernels = set(args.kernels.split(",")) if args.kernels else None
        Path(args.out).write_text(json.dumps(_list_jobs(args.arch, kernels)))
        return 0
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    chunks = json.loads(Path(args.jobs_file).read_text())
    result = {}
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_compile_chunk, src, names, args.arch) for src, names in chunks]
        for (src, _), fut in zip(chunks, futures):
            for n, v in fut.result().items():
                result[f"{src}|{n}"] = v
    Path(args.out).write_text(json.dumps(result))
    return 0


# -- driver side ----------------------------------------------------------------------------


def _run_worker(tree: Path, argv: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{tree / 'tests'}")
    subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env, cwd=tree, check=True)


def _sample(items: list, n: int | None) -> list:
    if n is None or len(items) <= n:
        return items
    return [items[(i * len(items)) // n] for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, help="the other tree (a checkout of the repository)")
    ap.add_argument("--new", type=Path, default=HERE, help="the changed tree (default: this one)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--kernels", help="comma-separated kernel names (default: all)")
    ap.add_argument("--sample", type=int, help="instantiations per kernel, spread evenly (default: all)")
    ap.add_argument("--chunk", type=int, default=8, help="instantiations per compiled module")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--diff-dir", type=Path, help="write the two SASS texts of each differing kernel here")
    ap.add_argument("--select", help="keep the instantiations whose name matches this regular expression")
    ap.add_argument(
        "--base-sub",
        action="append",
        default=[],
        metavar="PATTERN=>REPL",
        help="the base tree's name of an instantiation: re.sub(PATTERN, REPL, new name); repeatable",
    )
    ap.add_argument(
        "--code-only",
        action="store_true",
        help="compare the code and ptxas's report only (not the mangled name or parameter bank)",
    )
    ap.add_argument("--worker", choices=("list", "compile"), help=argparse.SUPPRESS)
    ap.add_argument("--jobs-file", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return _worker(args)
    if args.base is None:
        ap.error("--base is required")

    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        listing = ["--worker", "list", "--arch", args.arch, "--out", str(tmp / "jobs.json")]
        if args.kernels:
            listing += ["--kernels", args.kernels]
        _run_worker(args.new.resolve(), listing)
        jobs = json.loads((tmp / "jobs.json").read_text())
        if args.select:
            jobs = [j for j in jobs if re.search(args.select, j[2])]
        by_group: dict[str, list] = {}
        for group, src, name in jobs:
            by_group.setdefault(group, []).append((src, name))
        chunks, counts = [], {}
        for group, items in by_group.items():
            items = _sample(items, args.sample)
            counts[group] = len(items)
            for src in dict.fromkeys(s for s, _ in items):
                names = [n for s, n in items if s == src]
                chunks += [[src, names[i : i + args.chunk]] for i in range(0, len(names), args.chunk)]
        chunks.sort(key=lambda c: -len(c[1]))
        (tmp / "chunks.json").write_text(json.dumps(chunks))
        subs = [tuple(x.split("=>", 1)) for x in args.base_sub]

        def base_name(name: str) -> str:
            for pattern, repl in subs:
                name = re.sub(pattern, repl, name)
            return name

        renamed = {f"{src}|{base_name(n)}": f"{src}|{n}" for src, names in chunks for n in names}
        (tmp / "chunks.base.json").write_text(
            json.dumps([[src, [base_name(n) for n in names]] for src, names in chunks])
        )
        total = sum(counts.values())
        print(
            f"{args.arch}: {total} instantiations in {len(chunks)} modules: "
            + ", ".join(f"{g} {n}" for g, n in counts.items()),
            flush=True,
        )
        results = {}
        for label, tree in (("base", args.base.resolve()), ("new", args.new.resolve())):
            t1 = time.time()
            jobs_file = tmp / ("chunks.base.json" if label == "base" else "chunks.json")
            _run_worker(
                tree,
                [
                    "--worker",
                    "compile",
                    "--arch",
                    args.arch,
                    "--jobs",
                    str(args.jobs),
                    "--jobs-file",
                    str(jobs_file),
                    "--out",
                    str(tmp / f"{label}.json"),
                ],
            )
            results[label] = json.loads((tmp / f"{label}.json").read_text())
            if label == "base":
                results[label] = {renamed[k]: v for k, v in results[label].items()}
            if args.code_only:
                for v in results[label].values():
                    v["sass"], v["mangled"] = _code_only(v["sass"], v["mangled"]), None
            print(f"  {label} ({tree}): compiled in {time.time() - t1:.0f} s", flush=True)

    base, new = results["base"], results["new"]
    differing, data_only = [], []
    for key in sorted(base):
        b, n = base[key], new.get(key)
        what = (
            "missing"
            if n is None
            else "mangled name"
            if b["mangled"] != n["mangled"]
            else "SASS"
            if b["sass"] != n["sass"]
            else "ptxas report"
            if b["ptxas"] != n["ptxas"]
            else None
        )
        if what is None:
            if b["module_data"] != n["module_data"]:
                data_only.append(key)
            continue
        differing.append(key)
        print(f"  DIFFERS ({what}): {key}")
        if args.diff_dir and n is not None:
            args.diff_dir.mkdir(parents=True, exist_ok=True)
            stem = hashlib.sha1(key.encode()).hexdigest()[:12]
            (args.diff_dir / f"{stem}.base.sass").write_text(b["sass"])
            (args.diff_dir / f"{stem}.new.sass").write_text(n["sass"])
            print(f"    {args.diff_dir / stem}.{{base,new}}.sass")
    if data_only:
        print(
            f"  {len(data_only)} kernels identical whose modules' global data differ "
            "(namespace-scope constants added or removed), e.g. " + data_only[0]
        )
        if args.diff_dir:
            args.diff_dir.mkdir(parents=True, exist_ok=True)
            for label, r in (("base", base), ("new", new)):
                (args.diff_dir / f"module_data.{label}.txt").write_text(r[data_only[0]]["module_data"])
    same = len(base) - len(differing)
    compared = "code and ptxas report" if args.code_only else "SASS and mangled name"
    print(
        f"{args.arch}: {same} of {len(base)} kernels identical ({compared}), "
        f"{len(differing)} differ; {time.time() - t0:.0f} s"
    )
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
