"""WMMA fragment maps (gemmlab.lab.fragments, kernels/lab/fragment_dump.cu).

CPU: the analytic maps are complete and consistent; they agree with the SASS
ptxas emits for the dump kernel on sm_75 (its FP16 kinds), sm_80, sm_86, sm_89,
sm_90a, sm_100a and sm_120 (emulated by
tests/sass_warp.py); with the maps measured on GPUs and stored in
gemmlab/data/ (skipped until a GPU run has stored them); the dump kernel
compiles without spills; outputs (CSV, JSON, PNG) and the CLI work.
GPU: a fresh dump equals the analytic maps for every kind.
"""

import json
import struct

import numpy as np
import pytest

from gemmlab.lab import fragments as fr
from gemmlab.tools.cli import main
from gemmlab.tools.inspect_kernels import find_disassembler
from gemmlab.runtime.compile import compile_module, parse_ptxas_log

# Kernel parameters' offset in constant bank 0, per target.
PARAM_BASE = {
    "sm_75": 0x160,
    "sm_80": 0x160,
    "sm_86": 0x160,
    "sm_89": 0x160,
    "sm_90a": 0x210,
    "sm_100a": 0x380,
    "sm_120": 0x380,
}
ARCHES = tuple(PARAM_BASE)
KIND_IDS = [kd.name for kd in fr.KINDS]


@pytest.fixture(scope="module")
def dump_module():
    memo = {}

    def get(arch):
        if arch not in memo:
            memo[arch] = compile_module(fr.SOURCE, [kd.name_expression() for kd in fr.kinds_for(arch)], arch)
        return memo[arch]

    return get


def test_kind_list_covers_the_issue():
    names = set(KIND_IDS)
    assert len(fr.KINDS) == 42
    for use in ("matrix_a", "matrix_b"):
        for shape in ("m16n16k16", "m32n8k16", "m8n32k16"):
            for dt in ("f16", "bf16"):
                for lay in ("row", "col"):
                    assert f"{use}.{shape}.{dt}.{lay}" in names
        assert f"{use}.m16n16k8.tf32.row" in names and f"{use}.m16n16k8.tf32.col" in names
    for shape in ("m16n16k16", "m32n8k16", "m8n32k16"):
        for dt in ("f32", "f16"):
            assert f"accumulator.{shape}.{dt}.row" in names
    assert "accumulator.m16n16k8.f32.col" in names


@pytest.mark.parametrize("name", KIND_IDS)
def test_analytic_map_holds_every_element_once(name):
    kd = fr.kind(name)
    fmap = fr.analytic_map(kd, "sm_80")
    assert fmap.shape == (32, kd.num_elements, 2)
    assert fr.check_map(kd, fmap) == []
    unique = fmap[:, : kd.unique].reshape(-1, 2)
    assert len({tuple(x) for x in unique}) == kd.rows * kd.cols == 32 * kd.unique  # one lane, one slot each
    for k in range(kd.unique, kd.num_elements):  # padding slots repeat
        assert (fmap[:, k] == fmap[:, k % kd.unique]).all()
    assert (fr.analytic_map(kd, "sm_90a") == fmap).all()


def _ptx_m16n8k16(lane):
    """The PTX ISA's mma.m16n8k16 .f16/.bf16 layouts, written as the ISA states them:
    A a0..a7, B b0..b3, C c0..c3 as (row, col)."""
    group, tig = lane >> 2, lane % 4
    a = [(group + (8 if i in (2, 3, 6, 7) else 0), tig * 2 + (i & 1) + (8 if i >= 4 else 0)) for i in range(8)]
    b = [(tig * 2 + (i & 1) + (8 if i >= 2 else 0), group) for i in range(4)]
    c = [(group + (8 if i >= 2 else 0), tig * 2 + (i & 1)) for i in range(4)]
    return a, b, c


def test_16x16x16_maps_are_two_m16n8k16_tiles():
    a_kind = fr.kind("matrix_a.m16n16k16.bf16.row")
    b_kind = fr.kind("matrix_b.m16n16k16.bf16.row")
    c_kind = fr.kind("accumulator.m16n16k16.f32.row")
    for lane in range(32):
        a, b, c = _ptx_m16n8k16(lane)
        assert [tuple(x) for x in fr.analytic_map(a_kind)[lane]] == a
        # B: columns 0-7 then 8-15 (two n8 tiles); C likewise.
        assert [tuple(x) for x in fr.analytic_map(b_kind)[lane]] == b + [(r, col + 8) for r, col in b]
        assert [tuple(x) for x in fr.analytic_map(c_kind)[lane]] == c + [(r, col + 8) for r, col in c]


def test_unsupported_arch_is_refused():
    with pytest.raises(ValueError, match="sm_75 has no matrix_a.m16n16k16.bf16.row"):
        fr.analytic_map(fr.kind("matrix_a.m16n16k16.bf16.row"), "sm_75")
    with pytest.raises(ValueError, match="sm_70"):
        fr.analytic_map(fr.KINDS[0], "sm_70")
    with pytest.raises(ValueError, match="sm_103"):
        fr.arch_family("sm_103")
    assert fr.provenance("sm_90a").startswith("measured") and fr.provenance("sm_86").startswith("derived")


@pytest.mark.parametrize(
    "name",
    [
        "matrix_a.m32n8k16.bf16.col",
        "matrix_b.m16n16k8.tf32.row",
        "accumulator.m8n32k16.f16.col",
        "matrix_a.m16n16k16.f16.row",
    ],
)
def test_decode_reads_back_what_a_load_would_give(name):
    """tile_codes -> slots filled by the analytic map -> decode: the map again,
    through the same encodings the GPU dump uses (raw 16-bit codes, float codes)."""
    kd = fr.kind(name)
    tile, ld = fr.tile_codes(kd)
    fmap = fr.analytic_map(kd)
    raw = np.zeros((32, kd.num_elements), dtype=np.uint32)
    for lane in range(32):
        for k in range(kd.num_elements):
            r, c = fmap[lane, k]
            v = tile[c, r] if kd.layout == "col" else tile[r, c]
            raw[lane, k] = struct.unpack("<I", struct.pack("<f", float(v)))[0] if kd.elem_bytes == 4 else int(v)
    assert (fr.decode(kd, raw.ravel()) == fmap).all()
    raw[3, 1] = 0xFFFFFFFF  # a poisoned slot decodes as -1
    assert (fr.decode(kd, raw.ravel())[3, 1] == -1).all()


def test_outputs_and_cli(tmp_path, capsys):
    assert main(["fragments", "--analytic", "--arch", "sm_80", "--out", str(tmp_path), "matrix_a.m32n8k16"]) == 0
    printed = capsys.readouterr().out
    assert "matrix_a.m32n8k16.f16.row" in printed and "matrix_b" not in printed
    csv = (tmp_path / "matrix_a.m32n8k16.bf16.col.csv").read_text().splitlines()
    assert csv[0] == "lane,k,row,col" and len(csv) == 1 + 32 * 16
    assert csv[1] == "0,0,0,0" and csv[2] == "0,1,0,1"
    assert (tmp_path / "matrix_a.m32n8k16.bf16.col.png").read_bytes()[:4] == b"\x89PNG"
    doc = json.loads((tmp_path / "fragment_maps_analytic-sm-80.json").read_text())
    assert doc["arch"] == "sm_80" and len(doc["kinds"]) == 4
    meta, maps = fr.load_measured(tmp_path / "fragment_maps_analytic-sm-80.json")
    assert (maps["matrix_a.m32n8k16.f16.row"] == fr.analytic_map(fr.kind("matrix_a.m32n8k16.f16.row"))).all()


@pytest.mark.parametrize("arch", ARCHES)
def test_dump_kernel_compiles_without_spills(arch, dump_module):
    module = dump_module(arch)
    res = parse_ptxas_log(module.log)
    assert len(res) == len(fr.kinds_for(arch)) == (24 if arch == "sm_75" else len(fr.KINDS))
    for kd in fr.kinds_for(arch):
        r = res[module.symbols[kd.name_expression()]]
        assert r.spill_bytes == 0 and r.stack_bytes == 0, kd.name


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not found (pip install 'gemmlab[inspect]')")
@pytest.mark.parametrize("arch", ARCHES)
def test_analytic_maps_match_the_compilers_sass(arch, dump_module):
    """The dump kernel's SASS, run on the CPU by a small warp emulator, holds the
    analytic map for every kind: what ptxas does with wmma.load on this arch."""
    import sass_warp
    from gemmlab.tools.inspect_kernels import disassemble

    module = dump_module(arch)
    sass = disassemble(module.cubin)
    pbase = PARAM_BASE[arch]
    tile_at, out_at = 0x10000000, 0x20000000
    for kd in fr.kinds_for(arch):
        tile, ld = fr.tile_codes(kd)
        mem = {}
        for off, byte in enumerate(tile.tobytes()):
            mem[tile_at + off] = byte
        params = {pbase: tile_at, pbase + 8: ld, pbase + 0x10: out_at}
        warp = sass_warp.Warp(lambda off: params.get(off, 0), mem)
        warp.run(sass_warp.instructions(sass[module.symbols[kd.name_expression()]]))
        raw = np.array(
            [sum(mem.get(out_at + 4 * i + b, 0xFF) << (8 * b) for b in range(4)) for i in range(32 * kd.num_elements)],
            dtype=np.uint32,
        )
        got = fr.decode(kd, raw)
        assert fr.compare(kd, got, fr.analytic_map(kd, arch)) == []


def _check_stored_maps(files):
    for path in files:
        meta, maps = fr.load_measured(path)
        assert set(maps) == set(KIND_IDS), f"{path.name} lacks kinds"
        problems = []
        for kd in fr.KINDS:
            problems += fr.compare(kd, maps[kd.name], fr.analytic_map(kd, meta["arch"]))
        assert not problems, f"{path.name} ({meta['gpu']}):\n" + "\n".join(problems)


def test_stored_measured_maps_match_analytic():
    files = fr.measured_files()
    if not files:
        pytest.skip(
            f"measured maps missing: no fragment_maps_*.json in {fr.DATA_DIR} yet "
            "(run scripts/gpu_fragments.sh on a GPU and copy $OUT/fragments/fragment_maps_<gpu>.json there)"
        )
    _check_stored_maps(files)


def test_written_maps_file_is_what_the_stored_maps_test_reads(tmp_path):
    """What `gemmlab fragments --out` writes on an H200 (named from gpu_info().name,
    "NVIDIA H200", arch sm_90a) is the file test_stored_measured_maps_match_analytic
    picks up once copied into gemmlab/data/, and it passes that test's checks."""
    maps = {kd.name: fr.analytic_map(kd, "sm_90a") for kd in fr.KINDS}
    path = fr.write_outputs(maps, tmp_path / "out", gpu="NVIDIA H200", arch="sm_90a", plots=False)
    assert path.name == "fragment_maps_nvidia-h200.json"
    data = tmp_path / "data"
    data.mkdir()
    (data / path.name).write_bytes(path.read_bytes())
    assert fr.measured_files(data) == [data / path.name]
    _check_stored_maps(fr.measured_files(data))
    maps["matrix_b.m8n32k16.bf16.col"] = maps["matrix_b.m8n32k16.bf16.col"][::-1].copy()  # lanes swapped
    fr.write_outputs(maps, data, gpu="NVIDIA H200", arch="sm_90a", plots=False)
    with pytest.raises(AssertionError, match="matrix_b.m8n32k16.bf16.col"):
        _check_stored_maps(fr.measured_files(data))


@pytest.mark.gpu
def test_fresh_dump_matches_analytic():
    maps = fr.dump()
    from gemmlab.runtime.device import gpu_info

    arch = gpu_info().arch
    problems = []
    for kd in fr.KINDS:
        problems += fr.check_map(kd, maps[kd.name])
        problems += fr.compare(kd, maps[kd.name], fr.analytic_map(kd, arch))
    assert not problems, "\n".join(problems)
