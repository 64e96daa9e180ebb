#!/usr/bin/env bash
# The WMMA fragment lab on a GPU machine (issue 6), gemmlab already installed:
#   1. `gemmlab fragments` for every kind -> $OUT/fragments/ (CSV + PNG per kind,
#      fragment_maps_<gpu>.json: copy it into src/gemmlab/data/ to store the maps)
#   2. the GPU tests of tests/test_fragments.py and tests/test_wmma_ext.py
#   3. `gemmlab bench --suite wmma_ext` -> $OUT/wmma_ext.json
# Everything is logged to $OUT/fragments.log.  Usage: OUT=/some/dir scripts/gpu_fragments.sh
set -u
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT/fragments"
export PYTHONUNBUFFERED=1
export GEMMLAB_CACHE_DIR=${GEMMLAB_CACHE_DIR:-/tmp/gemmlab-cache}
log=$OUT/fragments.log
status=0
exec > >(tee -a "$log") 2>&1
echo "== $(date -u +%FT%TZ) gpu_fragments.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
echo "== gemmlab fragments (all kinds)"
timeout 120 gemmlab fragments --out "$OUT/fragments" || status=1
echo "== GPU tests"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_fragments.py tests/test_wmma_ext.py || status=1
echo "== gemmlab bench --suite wmma_ext"
timeout 300 gemmlab bench --suite wmma_ext --reps 5 --budget-s 0.5 --json "$OUT/wmma_ext.json" || status=1
echo "== done $(date -u +%FT%TZ), status $status"
exit $status
