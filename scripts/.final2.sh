set -u
export PYTHONUNBUFFERED=1 GEMMLAB_CACHE_DIR=/tmp/gemmlab-cache GEMMLAB_TEST_CACHE_DIR=/tmp/gemmlab-cache
R=/tmp/r; mkdir -p $R
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warning
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
python3 -c "import torch, hypothesis; print('torch', torch.__version__, 'hypothesis', hypothesis.__version__)" 2>&1 | tail -1 | tee -a $R/gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_torch_ops.py tests/test_hardening.py "tests/test_gpu_correctness.py::test_empty_product_reads_neither_a_nor_b" 2>&1 | tail -25 | tee $R/tests.log
(cd /tmp && tar czf $OUT/final2.tar.gz r)
OUT=$R SANITIZE_TIMEOUT=60 timeout 200 bash scripts/sanitize.sh 2>&1 | tee $R/sanitize.txt
cd /tmp && tar czf $OUT/final2.tar.gz r && ls -la $OUT
