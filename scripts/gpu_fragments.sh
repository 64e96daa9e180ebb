#!/usr/bin/env bash
# The WMMA fragment lab on a GPU machine (issue 6), gemmlab already installed:
#   1. `gemmlab fragments` for every kind: the CSV of every kind and
#      fragment_maps_<gpu>.json go to $FRAG_DIR (default /tmp/fragments, outside
#      $OUT); the JSON is copied to $OUT/fragments/ (copy it into src/gemmlab/data/
#      to store the maps), with a picture of each kind named in $FRAG_PNGS
#   2. the GPU tests of tests/test_fragments.py and tests/test_wmma_ext.py
#   3. `gemmlab bench --suite wmma_ext` -> $OUT/wmma_ext.json (ec_gemm up to n = 2^15)
# Everything is logged to $OUT/fragments.log.  Usage: OUT=/some/dir scripts/gpu_fragments.sh
#
# What lands in $OUT: fragments.log, wmma_ext.json, fragments/fragment_maps_<gpu>.json
# and one PNG per kind in FRAG_PNGS (4 by default): 7 files.  The GPU jobs that ran it
# returned at most 8 files from $OUT, so a run that puts other files there must shorten
# FRAG_PNGS (FRAG_PNGS= for none).  About 1-1.5 minutes on an H200 (run 29: 64 s with
# 5 repeats; the ec_gemm at n = 32768 takes 1.3-1.7 s per run and runs 2 x 2 times).
set -u
OUT=${OUT:-$PWD/.out}
FRAG_DIR=${FRAG_DIR:-/tmp/fragments}
FRAG_PNGS=${FRAG_PNGS-matrix_a.m16n16k16.f16.row matrix_b.m16n16k16.f16.row accumulator.m16n16k16.f32.row matrix_a.m8n32k16.f16.row}
mkdir -p "$OUT/fragments" "$FRAG_DIR"
export PYTHONUNBUFFERED=1
export GEMMLAB_CACHE_DIR=${GEMMLAB_CACHE_DIR:-/tmp/gemmlab-cache}
log=$OUT/fragments.log
status=0
exec > >(tee -a "$log") 2>&1
echo "== $(date -u +%FT%TZ) gpu_fragments.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
echo "== gemmlab fragments (all kinds) -> $FRAG_DIR"
timeout 120 gemmlab fragments --no-plots --out "$FRAG_DIR" || status=1
maps=$(ls "$FRAG_DIR"/fragment_maps_*.json 2>/dev/null | head -n 1)
if [ -n "$maps" ]; then
    cp "$maps" "$OUT/fragments/" && echo "copied $(basename "$maps") to $OUT/fragments/"
    if [ -n "$FRAG_PNGS" ]; then
        timeout 120 python3 - "$maps" "$OUT/fragments" $FRAG_PNGS <<'EOF' || status=1
import sys
from gemmlab.lab import fragments as fr
path, folder, names = sys.argv[1], sys.argv[2], sys.argv[3:]
meta, maps = fr.load_measured(path)
for name in names:
    fr.plot_map(fr.kind(name), maps[name], f"{folder}/{name}.png", title=f"{name} on {meta['gpu']}")
    print(f"plotted {folder}/{name}.png")
EOF
    fi
else
    echo "no fragment_maps_*.json in $FRAG_DIR"; status=1
fi
echo "== GPU tests"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_fragments.py tests/test_wmma_ext.py || status=1
echo "== gemmlab bench --suite wmma_ext"
# 20 repeats (run 29 had 5): the vector and identity kernels take 10-130 us, where 5
# repeats left the small-size ratios within noise; the time budget still caps the
# large ec_gemm sizes at a few runs.
timeout 300 gemmlab bench --suite wmma_ext --reps 20 --budget-s 0.5 --json "$OUT/wmma_ext.json" || status=1
echo "== done $(date -u +%FT%TZ), status $status"
exit $status
