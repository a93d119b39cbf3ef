#!/usr/bin/env bash
# run_h200x2.sh: builds qwen_tp and runs the TP=2 benchmark matrix on 2x H200 (qwen3-32b
# shape, synthetic bf16 weights, TP=2, batch 1, 512-token prompt, 256 generated):
# all-reduce path {auto, nccl, staged_host} x {MTP off, MTP n-max 5 at simulated acceptance
# 0.3, 0.485, 0.7} with the fused all-reduce + residual + RMSNorm (the default), the same with
# --no-fused-norm for auto and nccl (MTP off, 0.485), --gemv custom for auto (MTP off, 0.485),
# plus the GPU tests. Output: bench/results/qwen_tp_h200x2.raw.txt (raw log: its tables go into
# bench/results/h200x2.md, the log compressed into bench/results/raw/h200x2/).
# Usage (repo root): examples/qwen_tp/run_h200x2.sh [build-dir]
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
BUILD=${1:-build-qwen}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DTPCOMM_BUILD_TESTS=OFF -DQWEN_TP_BUILD_TESTS=ON \
  -DTPCOMM_BUILD_BENCH=OFF -DTPCOMM_BUILD_TOOLS=OFF
ninja -C "$BUILD" qwen_tp qwen_gpu_test qwen_config_test qwen_safetensors_test qwen_cpu_model_test qwen_speculative_test
OUT=bench/results/qwen_tp_h200x2.raw.txt
mkdir -p bench/results
{
  echo "# qwen_tp on $(hostname), $(date -u +%F)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  nvcc --version | tail -1 || true
  echo "## tests"
  # A failure does not stop the measurements below, but it fails the run (exit status of the
  # tests, once the log is complete): a red test is never hidden behind a finished log.
  testsRc=0
  ctest --test-dir "$BUILD/examples/qwen_tp" --output-on-failure 2>&1 || testsRc=$?
  [ "$testsRc" = 0 ] || echo "## tests FAILED (ctest exit $testsRc); the measurements below still ran"
  BIN="$BUILD/examples/qwen_tp/qwen_tp"
  COMMON="--model-preset qwen3-32b --tp 2 --prompt-tokens 512 --n-predict 256 --ctx-size 1024"
  for ar in auto nccl staged_host; do
    echo "## allreduce=$ar MTP off (one process, createGroup)"
    "$BIN" $COMMON --allreduce $ar --metrics-file /tmp/qwen_$ar.off.prom
    for a in 0.3 0.485 0.7; do
      echo "## allreduce=$ar MTP n-max 5, simulated acceptance $a"
      "$BIN" $COMMON --allreduce $ar --spec-type draft-mtp --spec-draft-n-max 5 --sim-token-acceptance $a \
        --no-profile --metrics-file /tmp/qwen_$ar.$a.prom
    done
    echo "## allreduce=$ar MTP n-min = n-max = 5, simulated llama.cpp draft acceptance 0.485 (the field report's regime)"
    "$BIN" $COMMON --allreduce $ar --spec-type draft-mtp --spec-draft-n-min 5 --spec-draft-n-max 5 \
      --sim-draft-acceptance 0.485 --no-profile --metrics-file /tmp/qwen_$ar.draft0.485.prom
  done
  for ar in auto nccl; do
    echo "## allreduce=$ar --no-fused-norm (all-reduce, then the residual + RMSNorm kernel), MTP off and 0.485"
    "$BIN" $COMMON --allreduce $ar --no-fused-norm --metrics-file /tmp/qwen_$ar.nofuse.off.prom
    "$BIN" $COMMON --allreduce $ar --no-fused-norm --spec-type draft-mtp --spec-draft-n-max 5 --sim-token-acceptance 0.485 \
      --no-profile --metrics-file /tmp/qwen_$ar.nofuse.0.485.prom
  done
  echo "## allreduce=auto --gemv custom (the small-n tensor-core GEMV instead of cuBLAS), MTP off and 0.485"
  "$BIN" $COMMON --allreduce auto --gemv custom --metrics-file /tmp/qwen_auto.gemv.off.prom
  "$BIN" $COMMON --allreduce auto --gemv custom --spec-type draft-mtp --spec-draft-n-max 5 --sim-token-acceptance 0.485 \
    --no-profile --metrics-file /tmp/qwen_auto.gemv.0.485.prom
  echo "## mpirun, one process per GPU (auto, MTP off and 0.485)"
  mpirun -np 2 --allow-run-as-root -x NCCL_NVLS_ENABLE -x TPCOMM_MULTICAST "$BIN" --mpi $COMMON --allreduce auto
  mpirun -np 2 --allow-run-as-root -x NCCL_NVLS_ENABLE -x TPCOMM_MULTICAST "$BIN" --mpi $COMMON --allreduce auto \
    --spec-type draft-mtp --spec-draft-n-max 5 --sim-token-acceptance 0.485 --no-profile
  echo "## TP=1 reference"
  "$BIN" --model-preset qwen3-32b --tp 1 --prompt-tokens 512 --n-predict 64 --ctx-size 1024
  exit "$testsRc"
} 2>&1 | tee "$OUT"
