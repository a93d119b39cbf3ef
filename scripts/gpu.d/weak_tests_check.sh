#!/usr/bin/env bash
# scripts/gpu.d/weak_tests_check.sh OUTDIR: on one GPU, the tests written for the reliability
# round's weak spots, and the proof that they can fail: builds tpcomm_gpu_tests and
# qwen_gpu_test (BUILD, default /tmp/tpcomm-gpu-build), runs All/OneRankZeros.* (one rank: -0.0
# in, +0.0 out) and QwenGpu.Tp2TokensEqualTp1 (TP=2 sharing the GPU against TP=1 and the fp32
# reference, a bound derived from bf16 rounding), then scripts/mutation_check.py on the mutants
# those tests must catch (MUTANTS, default: the one-rank kernel copying -0.0 through, and one
# rank's partial scaled by 1.01 in every device sum). One log, OUTDIR/weak_tests.txt, opening with
# the commit ($COMMIT), the date and the command; a short table last on stdout.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUTDIR=${1:-${OUT:-$root/gpu-logs}}
mkdir -p "$OUTDIR"
B=${BUILD:-/tmp/tpcomm-gpu-build}
LOG=$OUTDIR/weak_tests.txt
MUT=${MUTANTS:-gpu_one_rank_keeps_negative_zero,qwen_sum_scaled_1pct}
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0))s"; }
{ echo "# commit $(git -C "$root" rev-parse "${COMMIT:-HEAD}" 2>/dev/null || echo "${COMMIT:-unknown}")"
  echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# command: scripts/gpu.d/weak_tests_check.sh (MUTANTS=$MUT)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$LOG"
{ cmake -S "$root" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
    -DTPCOMM_BUILD_TESTS=ON > /dev/null && ninja -C "$B" -j"$(nproc)" tpcomm_gpu_tests qwen_gpu_test; } >> "$LOG" 2>&1
rc=$?; echo "build rc=$rc $(el)"; [ $rc = 0 ] || { tail -30 "$LOG"; exit 1; }
export TPCOMM_ALLOW_SHARED_DEVICE=1 CUDA_MODULE_LOADING=EAGER
res=()
for t in "tests/gpu/tpcomm_gpu_tests All/OneRankZeros.*" "examples/qwen_tp/tests/qwen_gpu_test QwenGpu.Tp2TokensEqualTp1"; do
  set -- $t
  echo "## $1 --gtest_filter=$2" >> "$LOG"
  timeout -k 5 120 "$B/$1" --gtest_filter="$2" >> "$LOG" 2>&1
  rc=$?; res+=("| $(basename "$1") $2 | rc $rc | $(grep -a -E '^\[  (PASSED|FAILED) ' "$LOG" | tail -1) |"); echo "$2 rc=$rc $(el)"
done
grep -a "logits vs the fp32 reference\|greedy tokens equal" "$LOG" | tail -2
echo "## python3 scripts/mutation_check.py $B --only $MUT" >> "$LOG"
timeout -k 5 "${MUTATION_S:-400}" python3 "$root/scripts/mutation_check.py" "$B" --only "$MUT" --log "$OUTDIR/mutation.txt" >> "$LOG" 2>&1
rc=$?; echo "mutation_check rc=$rc $(el)"
[ -f "$OUTDIR/mutation.txt" ] && { echo "==> mutation.txt <=="; cat "$OUTDIR/mutation.txt"; } >> "$LOG"
echo "| test | exit | gtest |"; echo "|---|---|---|"; printf '%s\n' "${res[@]}"
grep -a "^| " "$LOG" | grep -v "^| test\|^|---" | tail -4
echo "total $(el)"
