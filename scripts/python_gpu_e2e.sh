#!/usr/bin/env bash
# scripts/python_gpu_e2e.sh [OUTDIR]: the PyTorch end-to-end benchmark on a 2-GPU machine that has
# torch but cannot `pip install` (one device call of at most 10 minutes). Builds libtpcomm the way
# the wheel does and lays the package out (scripts/python_gpu_check.sh with PY_BUILD_ONLY=1), then
# runs bench/baselines/torch_qwen_tp.py (qwen3-32b, TP = min(GPUs, 2)) twice, each under a time
# bound so that one slow part cannot eat the call:
#   1. nccl, symm, tpcomm, tpcomm_fused: greedy check, prefill 512/4096, decode batch 1/8 in CUDA
#      graphs and eager (E2E_GRAPH_S, default 240 s)   -> OUTDIR/torch_qwen_tp_graph.txt
#   2. the same decode through torch.compile + CUDA graph, batch 1 then 8 (what time is left,
#      E2E_TOTAL_S 560 s in all)                        -> OUTDIR/torch_qwen_tp_compile.txt
# Each run's stdout (one JSON line per measurement, flushed as it goes) is kept in
# OUTDIR/torch_qwen_tp_*.log, so a run cut by its bound still leaves what it measured.
# Multicast off (the script refuses otherwise). COMMIT from the environment heads every file.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR=${1:-${OUT:-$root/gpu-logs}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
export COMMIT=${COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
PY_BUILD_ONLY=1 bash "$root/scripts/python_gpu_check.sh" "$OUTDIR" || exit 1
SITE=/tmp/tpcomm-py-site
echo "built in $(el) s"
# The torch ops compile at first import: once here, not in two ranks at once.
PYTHONPATH="$SITE" python3 -c "import torch, tpcomm.torch" > "$OUTDIR/torch_ops_build.log" 2>&1 ||
  { tail -20 "$OUTDIR/torch_ops_build.log"; exit 1; }
echo "torch ops built in $(el) s"
ngpu=$(python3 -c "import torch; print(min(torch.cuda.device_count(), 2))")
run() {  # run NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 timeout -k 10 "$secs" python3 -m torch.distributed.run \
    --nproc_per_node="$ngpu" "$root/bench/baselines/torch_qwen_tp.py" --preset qwen3-32b \
    --results "$OUTDIR/torch_qwen_tp_$name.txt" "$@" > "$OUTDIR/torch_qwen_tp_$name.log" 2>&1
  echo "$name: rc=$? at $(el) s"
  grep -a "^phase\|^decode\|^prefill\|^# greedy\|^# tpcomm's\|skipped\|failed\|Error" \
    "$OUTDIR/torch_qwen_tp_$name.log" | head -40
}
run graph "${E2E_GRAPH_S:-240}" --modes eager,graph
left=$(( ${E2E_TOTAL_S:-560} - $(el) ))
if [ "$left" -gt 60 ]; then
  run compile "$left" --modes compile --prefill "" --generate 0
else
  echo "compile: not run ($left s left)"
fi
