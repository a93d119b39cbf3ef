#!/bin/bash
# bench_h200x1.sh: qwen_tp on one H200 (TP=1) against the plain PyTorch decoder of
# bench/baselines/torch_qwen_tp1.py, in the same device call: build, the qwen GPU tests, then the
# benchmark in A B B A order (qwen_tp, torch, torch, qwen_tp) per model shape. Every log records
# the commit, the date and the command. Usage (from a source tree):
#   OUT=/path/to/logs examples/qwen_tp/bench_h200x1.sh [all|test|bench8|bench32|long|variants|field|compile]
# COMMIT (env) names the commit the tree was archived from when it has no .git.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PART=${1:-all}
SRC=$(pwd)
B=${BUILD:-$SRC/build-h200}
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
REV=${COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
Q=$B/examples/qwen_tp/qwen_tp
T="python3 -u $SRC/bench/baselines/torch_qwen_tp1.py"

# header and run (one logged step, appending to $OUT/<name>.log) from ab_common.sh; no budget.
L=$OUT BUDGET=1000000 T0=$(date +%s)
. "$SRC/examples/qwen_tp/ab_common.sh"

if [ ! -x "$Q" ] || [ "$PART" = all ] || [ "$PART" = test ]; then
  header "$OUT/build.log" cmake build
  { cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
    cmake --build "$B" -j16 --target qwen_tp qwen_gpu_test qwen_prefill_test qwen_config_test; } >> "$OUT/build.log" 2>&1 ||
    { echo "BUILD FAILED"; tail -30 "$OUT/build.log"; exit 1; }
fi

if [ "$PART" = all ] || [ "$PART" = test ]; then
  run tests 240 "$B/examples/qwen_tp/tests/qwen_gpu_test" --gtest_filter='QwenPrefillGpu.*:QwenGpu.LogitsMatch*:QwenGpu.AttentionMatchesReference:QwenGpu.CustomGemv*'
  run tests 120 env QWEN_PREFILL_MTILES=1 "$B/examples/qwen_tp/tests/qwen_gpu_test" --gtest_filter='QwenPrefillGpu.*'
  run tests 60 "$B/examples/qwen_tp/tests/qwen_prefill_test"
  run tests 60 "$B/examples/qwen_tp/tests/qwen_config_test"
fi

qwen8() {  # qwen8 <tag>: prefill 512/2048/8192 and decode, qwen3-8b shape
  for P in 512 2048 8192; do
    run "qwen8_$1" 120 $Q --model-preset qwen3-8b --prompt-tokens $P --n-predict 64 --ubatch-size 2048
  done
}
if [ "$PART" = all ] || [ "$PART" = bench8 ]; then
  qwen8 A
  run torch8_B 300 $T --preset qwen3-8b --prefill 512,2048,8192 --decode 512,8192
  run torch8_B2 300 $T --preset qwen3-8b --prefill 512,2048,8192 --decode 512,8192
  qwen8 A2
fi
if [ "$PART" = variants ]; then
  # one variable at a time: the decode attention kernel for prefill too (the old path); one
  # 16-row tile per warp in the prefill kernel; the whole 8192-token prompt in one chunk
  run qwen8_oldattn 120 $Q --model-preset qwen3-8b --prompt-tokens 2048 --n-predict 16 --ubatch-size 2048 --no-prefill-attn --no-profile
  run qwen8_mt1 120 env QWEN_PREFILL_MTILES=1 $Q --model-preset qwen3-8b --prompt-tokens 8192 --n-predict 16 --ubatch-size 2048 --no-profile
  run qwen8_ub8192 120 $Q --model-preset qwen3-8b --prompt-tokens 8192 --n-predict 16 --ubatch-size 8192 --no-profile
fi
if [ "$PART" = all ] || [ "$PART" = long ]; then
  run qwen8_32k 300 $Q --model-preset qwen3-8b --prompt-tokens 32000 --ctx-size 32768 --n-predict 64 --ubatch-size 2048
  [ "$PART" = long ] || run qwen8_32k_ub4096 300 $Q --model-preset qwen3-8b --prompt-tokens 32000 --ctx-size 32768 --n-predict 16 --ubatch-size 4096 --no-profile
  run torch8_32k 300 $T --preset qwen3-8b --prefill 32000 --decode 32000 --no-eager-decode
fi
qwen32() {  # qwen32 <tag>: prefill 512/2048/8192 and decode, qwen3-32b shape
  for P in 512 2048 8192; do
    run "qwen32_$1" 120 $Q --model-preset qwen3-32b --prompt-tokens $P --n-predict 32 --ubatch-size 2048
  done
}
if [ "$PART" = all ] || [ "$PART" = bench32 ]; then
  qwen32 A
  run torch32_B 300 $T --preset qwen3-32b --prefill 512,2048,8192 --decode 512 --reps 2 --steps 20
  run torch32_B2 300 $T --preset qwen3-32b --prefill 512,2048,8192 --decode 512 --reps 2 --steps 20
  qwen32 A2
fi
if [ "$PART" = field ]; then
  # The field report's regime on one GPU (TP=1: no all-reduce, so no tpcomm / NCCL / staged_host
  # columns; the TP=2 table is PART=qwen scripts/gpu.sh bench): qwen3-32b shape, MTP off against
  # fixed 5-token drafts at llama.cpp's accepted/drafted 0.485, A B B A.
  F="$Q --model-preset qwen3-32b --prompt-tokens 512 --n-predict 256 --ctx-size 1024"
  M="--spec-type draft-mtp --spec-draft-n-min 5 --spec-draft-n-max 5 --sim-draft-acceptance 0.485"
  run qwen32_field_off_A 120 $F
  run qwen32_field_mtp_B 120 $F $M
  run qwen32_field_mtp_B2 120 $F $M
  run qwen32_field_off_A2 120 $F
fi
if [ "$PART" = compile ]; then
  # one compiled layer function serves all 36 layers and every position of a 256-slot bucket;
  # each position's first (compiling) call may take COMPILE_S seconds before the script gives up
  # with "compile did not finish within N s" (exit 3); COMPILE_TIMEOUT bounds the whole run;
  # TORCH_LOGS=recompiles logs each recompilation (one expected: the second position's bucket)
  run torch8_compile ${COMPILE_TIMEOUT:-150} env TORCH_LOGS=recompiles $T --preset qwen3-8b --prefill '' --decode 512,8192 --compile \
    --compile-mode ${COMPILE_MODE:-default} --compile-timeout ${COMPILE_S:-50} --check-tokens 16 --steps 50
fi

# Short table last (SUMMARY=0: none, when several parts run one after another).
[ "${SUMMARY:-1}" = 1 ] || exit 0
echo "== summary ($REV)"
for f in "$OUT"/qwen*.log; do
  [ -f "$f" ] || continue
  echo "-- $(basename "$f")"
  grep -aE "^## .*prompt-tokens|prompt eval time|       eval time|prefill cold|decode step|memory rank|roofline|acceptance|accepted length" "$f" |
    sed -E 's/^## [0-9:]+ .*--prompt-tokens ([0-9]+).*/P=\1/' | cut -c1-150
done
for f in "$OUT"/torch*.log; do
  [ -f "$f" ] || continue
  echo "-- $(basename "$f")"
  grep -aE '"what": "(prefill|decode|peak_memory|compile_[a-z]+)"|^compile did not finish' "$f" | cut -c1-300
done
grep -ah "FAILED\|PASSED\|Segmentation\|error" "$OUT"/tests.log 2>/dev/null | head -20
