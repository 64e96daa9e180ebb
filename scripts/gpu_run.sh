#!/usr/bin/env bash
# One call on the GPU machine does it all: install gemmlab, run the whole test
# suite (GPU tests included), then the benchmarks.  Logs, JSON and plots go to
# $OUT (default ./.out).  Usage:
#   scripts/gpu_run.sh [tune|tests|bench|overhead|ec|models|shapes|fp8|moe|tiles|fp32tiles|smallbatch|stepkernels|training|decode|train|tp|sweep|profile|extra|all]...
# "bench" times gemmlab.matmul beside cupy/torch.matmul, host time included (the
# public call; BENCH_ARGS=--kernel-only adds each kernel alone, back to back).
# "overhead" measures host µs per call (gemmlab vs torch.matmul vs cupy.matmul) and
# % of cuBLAS from 64^3 to 2048^3.
# "models" times a Llama-3-8B-sized transformer's products (linear layers forward and
# backward, attention's batched products) beside torch.matmul (MODELS_ARGS adds options,
# e.g. "--dtype bf16 --tokens 2048"; TUNE_ARGS="--suite models" tunes its shapes).
# "shapes" times 700+ products of 23 public models and random odd sizes (forward, input and
# weight gradient views) in bf16, fp16, fp32 and fp32_tc beside torch.matmul, by kind of
# product (SHAPES_ARGS, e.g. "--dtype bf16 --kinds odd_align" or "--sample 100").  On a fresh
# machine its kernels take about 7 minutes to compile and the timing 8 more: run it twice in a
# row on one machine, first with SHAPES_ARGS="--compile-only" (the second finds them cached).
# "fp8" times the FP8 rung (wgmma_fp8) beside torch._scaled_mm and the BF16 products of the same
# shapes (FP8_ARGS, e.g. "--kernel-only --sizes 4096,8192 --kernels auto wgmma_fp8:PROMOTE=0").
# "moe" times the grouped rung (gemmlab.grouped_mm, Hopper) on public MoE models' expert layers
# beside torch._grouped_mm and a loop of torch.matmul: one `gemmlab bench --suite moe` per
# --tokens value, so that the step fits one 10-minute device command and a run cut short keeps
# the token counts already done ($OUT/moe-<tokens>.json; MOE_TOKENS, default "128 1024 8192",
# each word one call, e.g. "128,1024 8192"; MOE_TIMEOUT s per call, default 180; MOE_ARGS,
# e.g. "--models granite-3.0-1b-a400m").  The kernels compile in the first call and are reused.
# "tiles" forces wgmma's tiles side by side on models' products, on Q @ K^T over lengths and on
# few-tile products (scripts/ab_wgmma_tiles.py: $OUT/ab-tiles.json, ab-qk.json, ab-few.json),
# then lists each kernel's time in those few-tile products beside cuBLAS's
# (scripts/kernel_times.py: $OUT/kernel-times.json).
# "fp32tiles" forces rung 8's tilings on the shapes suite's float32 products, kernel time beside
# cuBLAS, in their own layouts and then as a.T @ b.T (scripts/ab_fp32_tiles.py:
# $OUT/ab-fp32-tiles.json, ab-fp32-tiles-tt.json).
# "smallbatch" times batches of small matrices (Swin's windows and others) on batched_small and
# batched_small_mma beside the tiled arms auto took before them and torch.matmul
# (scripts/ab_batched_small.py: $OUT/ab-batched-small.json; SMALLBATCH_ARGS, e.g. "--dtype bf16").
# "stepkernels" lists each kernel's time in every product of GPT-2's, BERT-base's and ViT-B/16's
# training steps, fp32_tc beside SGEMM, and adds them up over a step (scripts/kernel_times.py
# --models: $OUT/step-kernels.json; STEPKERNELS_ARGS, e.g. "--dtype bf16 --models llama-1b").
# "training" times whole models' training steps through gemmlab.torch beside PyTorch, with
# their drift from float64 (TRAINING_ARGS, default "--quick --time-budget-s 400": the headline
# within one device command; "" runs every model, mode and precision).
# "decode" generates token by token with the training suite's decoders and a key/value cache
# (static and grown), gemmlab.torch beside PyTorch, ms per token (DECODE_ARGS, e.g. "--models
# llama-1b --precisions bf16 --caches grown").
# "ec" times the error-corrected methods beside cuBLAS SGEMM and tabulates their accuracy
# (EC_BENCH_ARGS, EC_ACCURACY_ARGS), then fp32_tc's batched attention products on each
# error-corrected rung (scripts/ab_fp32_tc_attention.py: $OUT/ab-fp32-tc-attention.json).
# "train" trains examples/train_fp32_tc.py's small transformer four ways (fp32, TF32,
# bf16 autocast, gemmlab.torch.fp32_tc()): $OUT/train.json and train.png (TRAIN_ARGS).
# "tp" runs examples/tensor_parallel.py with torchrun over every GPU of the machine,
# bf16 and fp32_tc ($OUT/tp-bf16.json, tp-fp32_tc.json; TP_ARGS), when it has two or more.
# "tune" runs the autotuner first and copies its table and its progress record to
# $OUT/tuned/ (the shipped tables in src/gemmlab/data/tuned/ come from there); later steps
# use it.  TUNE_ARGS, e.g. "--kernels pipelined --ops NN,NT,TN,TT" (the default
# shapes in all four layouts) or "--suite models --kernels pipelined --tokens 2048".
set -u
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export GEMMLAB_CACHE_DIR=${GEMMLAB_CACHE_DIR:-/tmp/gemmlab-cache}
export GEMMLAB_TEST_CACHE_DIR=${GEMMLAB_TEST_CACHE_DIR:-$GEMMLAB_CACHE_DIR}   # tests reuse compiled kernels
steps=${*:-all}
log=$OUT/run.log
has() { [[ " $steps " == *" $1 "* || " $steps " == *" all "* ]]; }

{
  echo "== $(date -u +%FT%TZ) gpu_run.sh $steps"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv
  python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warning
  python3 -c "import gemmlab, cuda.core, cupy; from gemmlab.runtime.headers import find_cuda_headers as f; \
print('gemmlab', gemmlab.__version__, 'cuda.core', cuda.core.__version__, 'cupy', cupy.__version__); print(f().report())"
  # the routed products' C++ library, built once here rather than by the first test worker
  python3 -c "from gemmlab.torch import native; print('C++ routed kernels:', native.library() and 'built', native.why_not() or '')"
} 2>&1 | tee -a "$log"

if has tune; then
  echo "== tune" | tee -a "$log"
  timeout ${TUNE_TIMEOUT:-600} gemmlab tune ${TUNE_ARGS:-} 2>&1 | tee -a "$log"
  mkdir -p "$OUT/tuned" && cp "$GEMMLAB_CACHE_DIR"/tuned/*.json "$OUT/tuned/" 2>/dev/null
fi
if has tests; then
  echo "== tests" | tee -a "$log"
  # The compile-only tests run in CI on every push; here the GPU tests.  With pytest-xdist
  # (on the lent machines) PYTEST_WORKERS processes (default 14) run the whole GPU suite,
  # kernels compiled on demand (precompile_tests.py first saves nothing then): on a fresh
  # H200 (2026-11-30) 430 s took it to 99% (10,477 tests), so leave it the default 540 s;
  # without xdist, one process takes longer than a command's 10 minutes: split the files
  # with PYTEST_ARGS over two calls.  SIGINT at the limit, so that pytest still prints its
  # summary and the 30 slowest tests.  The whole output goes to $OUT/tests.log;
  # PYTEST_MAXFAIL (default 1) failures stop it.
  workers=()
  if python3 -c "import xdist" 2>/dev/null; then
    workers=(-n "${PYTEST_WORKERS:-14}")
  else
    python3 scripts/precompile_tests.py 2>&1 | tail -n 1 | tee -a "$log"   # in parallel, not one at a time
  fi
  timeout -s INT ${TESTS_TIMEOUT:-540} python3 -m pytest -q "${workers[@]}" --maxfail=${PYTEST_MAXFAIL:-1} --durations=30 \
    -p no:cacheprovider ${PYTEST_ARGS:---ignore=tests/test_compile.py tests} 2>&1 | tee "$OUT/tests.log" \
    | tail -n 40 | tee -a "$log"
fi
if has bench; then
  echo "== bench (default suite: the gemmlab.matmul call beside cuBLAS called the same way, host time included)" \
    | tee -a "$log"
  timeout 900 gemmlab bench ${BENCH_ARGS:-} --json "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee -a "$log"
fi
if has overhead; then
  echo "== overhead: host µs per call (gemmlab vs torch.matmul vs cupy.matmul), % of cuBLAS 64^3..2048^3" \
    | tee -a "$log"
  timeout 600 gemmlab bench --suite overhead ${OVERHEAD_ARGS:-} --json "$OUT/overhead.json" \
    --plot "$OUT/overhead.png" 2>&1 | tee -a "$log"
fi
if has models; then
  echo "== models: a transformer's products, gemmlab.matmul beside torch.matmul on the same views" | tee -a "$log"
  timeout 900 gemmlab bench --suite models ${MODELS_ARGS:-} --json "$OUT/models.json" --plot "$OUT/models.png" \
    2>&1 | tee "$OUT/models.log" | tee -a "$log"
fi
if has shapes; then
  echo "== shapes: many models' products by kind, gemmlab.matmul beside torch.matmul on the same views" \
    | tee -a "$log"
  timeout 900 gemmlab bench --suite shapes ${SHAPES_ARGS:-} --json "$OUT/shapes.json" --plot "$OUT/shapes.png" \
    2>&1 | tee "$OUT/shapes.log" | tee -a "$log"
fi
if has fp8; then
  echo "== fp8: the FP8 rung beside torch._scaled_mm, per tensor, per row and block scales" | tee -a "$log"
  timeout 600 gemmlab bench --suite fp8 ${FP8_ARGS:-} --json "$OUT/fp8.json" --plot "$OUT/fp8.png" \
    2>&1 | tee "$OUT/fp8.log" | tee -a "$log"
fi
if has moe; then
  for tokens in ${MOE_TOKENS:-128 1024 8192}; do
    echo "== moe: the grouped rung beside torch._grouped_mm and a matmul loop, --tokens $tokens" | tee -a "$log"
    timeout ${MOE_TIMEOUT:-180} gemmlab bench --suite moe --tokens "$tokens" ${MOE_ARGS:-} \
      --json "$OUT/moe-${tokens//,/-}.json" 2>&1 | tee "$OUT/moe-${tokens//,/-}.log" | tee -a "$log"
  done
fi
if [[ " $steps " == *" tiles "* ]]; then   # not part of "all": an A/B, asked for by name
  echo "== tiles: wgmma's tiles forced side by side, beside torch (models' products, then Q @ K^T by length)" \
    | tee -a "$log"
  timeout 300 python3 scripts/ab_wgmma_tiles.py --json "$OUT/ab-tiles.json" 2>&1 | tee "$OUT/ab-tiles.log" | tee -a "$log"
  timeout 300 python3 scripts/ab_wgmma_tiles.py --set qk --batched-arms t128=128x128x4,t64=128x64x4,s64=64x64x8,n128=64x128x4 \
    --json "$OUT/ab-qk.json" 2>&1 | tee "$OUT/ab-qk.log" | tee -a "$log"
  timeout 300 python3 scripts/ab_wgmma_tiles.py --set few --arms t64=64x128x4,t128=128x128x4,s128=128x128x4x1x2,t192=128x192x4 \
    --json "$OUT/ab-few.json" 2>&1 | tee "$OUT/ab-few.log" | tee -a "$log"
  timeout 120 python3 scripts/kernel_times.py --json "$OUT/kernel-times.json" 2>&1 | tee -a "$log"
fi
if [[ " $steps " == *" smallbatch "* ]]; then   # not part of "all": an A/B, asked for by name
  echo "== smallbatch: the batch rungs beside the tiled arms and torch (attention within windows)" | tee -a "$log"
  timeout 300 python3 scripts/ab_batched_small.py ${SMALLBATCH_ARGS:---dtype fp32,bf16} \
    --json "$OUT/ab-batched-small.json" 2>&1 | tee "$OUT/ab-batched-small.log" | tee -a "$log"
fi
if [[ " $steps " == *" stepkernels "* ]]; then   # not part of "all": a breakdown, asked for by name
  echo "== stepkernels: each kernel's time in a training step's products, added up over the step" | tee -a "$log"
  timeout 400 python3 scripts/kernel_times.py ${STEPKERNELS_ARGS:---dtype fp32_tc --models gpt2,bert-base,vit-b16} \
    --json "$OUT/step-kernels.json" 2>&1 | tee "$OUT/step-kernels.log" | tee -a "$log"
fi
if [[ " $steps " == *" fp32tiles "* ]]; then   # not part of "all": an A/B, asked for by name
  echo "== fp32tiles: rung 8's tilings forced side by side on the shapes suite's float32 products" | tee -a "$log"
  timeout 300 python3 scripts/ab_fp32_tiles.py "$OUT/ab-fp32-tiles.json" 0.5 2>&1 | tee "$OUT/ab-fp32-tiles.log" | tee -a "$log"
  timeout 300 python3 scripts/ab_fp32_tiles.py "$OUT/ab-fp32-tiles-tt.json" 2.0 --ops TT 2>&1 \
    | tee "$OUT/ab-fp32-tiles-tt.log" | tee -a "$log"
fi
if has training; then
  echo "== training: whole models' steps through gemmlab.torch beside PyTorch, drift from float64" | tee -a "$log"
  # One device command runs at most 600 s: the budget leaves the last runs out, the JSON is written.
  timeout 580 gemmlab bench --suite training ${TRAINING_ARGS---quick --time-budget-s 400} --json "$OUT/training.json" \
    --plot "$OUT/training.png" 2>&1 | tee "$OUT/training.log" | tee -a "$log"
fi
if has decode; then
  echo "== decode: token-by-token generation with a cache through gemmlab.torch beside PyTorch" | tee -a "$log"
  timeout 580 gemmlab bench --suite decode ${DECODE_ARGS:-} --time-budget-s 400 --json "$OUT/decode.json" \
    --plot "$OUT/decode.png" 2>&1 | tee "$OUT/decode.log" | tee -a "$log"
fi
if has ec; then
  echo "== error-corrected FP32: speed (bench --suite ec) and accuracy" | tee -a "$log"
  timeout 600 gemmlab bench --suite ec ${EC_BENCH_ARGS:-} --json "$OUT/ec-bench.json" 2>&1 | tee -a "$log"
  timeout 600 gemmlab accuracy ${EC_ACCURACY_ARGS:-} --json "$OUT/ec-accuracy.json" --plot "$OUT/ec-accuracy.png" \
    2>&1 | tee -a "$log"
  timeout 300 python3 scripts/ab_fp32_tc_attention.py --json "$OUT/ab-fp32-tc-attention.json" 2>&1 | tee -a "$log"
fi
if has sweep; then
  echo "== sweep" | tee -a "$log"
  timeout 600 gemmlab sweep --json "$OUT/sweep.json" --plot "$OUT/sweep.png" 2>&1 | tee -a "$log"
fi
if has profile; then
  echo "== Nsight Compute facts per rung" | tee -a "$log"
  timeout 900 scripts/profile_ladder.sh "$OUT/ncu.csv" 4096 2>&1 | tail -n 5 | tee -a "$log"
fi
if has extra && [ -n "${GEMMLAB_EXTRA_KERNELS:-}" ]; then
  echo "== extra configurations" | tee -a "$log"
  # GEMMLAB_EXTRA_KERNELS: space-separated, e.g. "vectorized:BM=64,BN=64 smem_tiled:tile=16"
  timeout 900 gemmlab bench --kernels $GEMMLAB_EXTRA_KERNELS ${GEMMLAB_EXTRA_ARGS:-} --sizes "${GEMMLAB_EXTRA_SIZES:-4096,16384x4096x4096}" \
    --json "$OUT/extra.json" 2>&1 | tee -a "$log"
fi
if has train; then
  echo "== train: examples/train_fp32_tc.py, fp32 / tf32 / bf16 autocast / gemmlab.torch.fp32_tc()" | tee -a "$log"
  timeout 900 python3 examples/train_fp32_tc.py ${TRAIN_ARGS:-} --json "$OUT/train.json" --plot "$OUT/train.png" \
    2>&1 | tee -a "$log"
fi
if has tp; then
  gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
  if [ "$gpus" -ge 2 ]; then
    # NVLink multicast stays off (the GPU machines' notes say why).
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    for dt in bf16 fp32_tc; do
      echo "== tp: examples/tensor_parallel.py on $gpus GPUs, $dt" | tee -a "$log"
      timeout 600 torchrun --nproc-per-node "$gpus" examples/tensor_parallel.py --dtype $dt ${TP_ARGS:-} \
        --json "$OUT/tp-$dt.json" 2>&1 | grep -v -i "warn\|OMP_NUM\|\*\*\*\*" | tee -a "$log"
    done
  else
    echo "== tp: skipped, $gpus GPU(s) on this machine" | tee -a "$log"
  fi
fi
echo "== done $(date -u +%FT%TZ)" | tee -a "$log"
