set -u
export PYTHONUNBUFFERED=1 GEMMLAB_CACHE_DIR=/tmp/gemmlab-cache GEMMLAB_TEST_CACHE_DIR=/tmp/gemmlab-cache
R=/tmp/r; mkdir -p $R
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warning
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu 2>&1 | tail -15 | tee $R/tests-gpu.log
FRAG_PNGS="matrix_a.m16n16k16.f16.row" OUT=$R/frag timeout 200 bash scripts/gpu_fragments.sh > $R/frag-stdout.log 2>&1; echo "fragments rc=$?"; grep -E "passed|failed|status" $R/frag/fragments.log | tail -3; grep -c "ok  (vs" $R/frag/fragments.log
cd /tmp && tar czf $OUT/final-h100.tar.gz r && ls -la $OUT
