#!/bin/bash
# prefill_ab.sh: the FlashAttention-3-style prefill attention (docs/prefill_attention.md) and
# cuDNN's fused attention against the FlashAttention-2 kernel on one H200, in one device call. Builds qwen_tp and qwen_gpu_test, runs
# the fa3 GPU tests (QwenPrefillFa3Gpu.*: fp64 reference, fa2, chunking bits, the model) and the
# chunked-prefill model tests with QWEN_PREFILL_ATTN=fa2 (the default, fa3, runs them in the
# decoder's own suite), times the attention alone
# (QwenPrefillFa3Gpu.DISABLED_Bench: one qwen3-8b layer over a 32000-token prompt in chunks of
# 2048 and 8192; TFLOP/s of the causal work), then qwen_tp's prefill at 32000/8192/2048/512 tokens
# (qwen3-8b, synthetic weights, --ubatch-size $UBATCH) with QWEN_PREFILL_ATTN=fa2 and fa3 from one
# binary, A B B A per length; with cuDNN (a build that found its headers: carry third_party/ from
# examples/qwen_tp/tools/fetch_cudnn_frontend.sh; libcudnn.so.9 from python3's nvidia-cudnn package
# put on LD_LIBRARY_PATH here), its tests (QwenPrefillCudnnGpu.*) and QWEN_PREFILL_ATTN=cudnn
# runs too, in the order fa2 fa3 cudnn cudnn fa3 fa2. A time budget (BUDGET_S, default 420 s) skips what would not fit,
# lowest priority last. Logs go to $OUT/logs.tgz (each log opens with commit, date, command and
# GPU; clocks.csv: the GPU's clocks and power every 250 ms), the table (with a line on the clocks)
# to $OUT/summary.md and to stdout, last. Usage, from the repository root:
#   OUT=/path/to/out bash examples/qwen_tp/prefill_ab.sh
# BUILD: the build folder (default build-h200); SKIP_BUILD=1 uses what is there. UBATCH: qwen_tp's
# --ubatch-size (default 2048). PART=ubatch: only fa3 at --ubatch-size 2048 against 8192 (below). Last, when the budget allows, PyTorch's SDPA prefill at 32000 on
# the same shape (torch_tp_decode.py: TORCH_BASELINE, else .scratch/baselines/ in the tree, else
# ../shared/baselines/; about 10 s; TORCH=0 leaves it out).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
unset QWEN_PREFILL_ATTN
SRC=$(pwd)
OUT=${OUT:?set OUT}
L=$OUT/logs
mkdir -p "$L"
B=${BUILD:-$SRC/build-h200}
BUDGET=${BUDGET_S:-420}
UB=${UBATCH:-2048}
T0=$(date +%s)
REV=${COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
Q=$B/examples/qwen_tp/qwen_tp
T=$B/examples/qwen_tp/tests/qwen_gpu_test
TB=${TORCH_BASELINE:-$SRC/.scratch/baselines/torch_tp_decode.py}
[ -f "$TB" ] || TB=$SRC/../shared/baselines/torch_tp_decode.py
SUM=$OUT/summary.md

. "$SRC/examples/qwen_tp/ab_common.sh"

if [ "${PART:-all}" != summary ]; then
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  header "$L/build.log" cmake build
  { cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DTPCOMM_BUILD_TESTS=ON &&
    cmake --build "$B" -j16 --target qwen_tp qwen_gpu_test; } >> "$L/build.log" 2>&1 ||
    { echo "BUILD FAILED"; tail -30 "$L/build.log"; exit 1; }
  echo "build done ($(left) s left)"
fi

# 0. What ptxas made of the kernel: wgmma present (HGMMA), the 8 wgmma of each GEMM in one async
#    batch (a "gsb0" wait on the batch's last only: 8 in all; a wait after each would show 64), no
#    local memory (spills), the TMA loads (UTMALDG).
O3=$B/examples/qwen_tp/CMakeFiles/qwen_tp_fa3.dir/kernels/attention_prefill_fa3.cu.o
if command -v cuobjdump > /dev/null && [ -f "$O3" ]; then
  header "$L/sass.log" cuobjdump -sass "$O3"
  cuobjdump -sass "$O3" > "$L/sass.txt" 2>&1
  echo "HGMMA $(grep -c HGMMA "$L/sass.txt"), HGMMA with gsb0 $(grep -c 'HGMMA.*gsb0' "$L/sass.txt"), local loads/stores $(grep -c 'STL\|LDL' "$L/sass.txt"), UTMALDG $(grep -c UTMALDG "$L/sass.txt") (expected 64, 8, 0, 12)" >> "$L/sass.log"
fi
# cuDNN, where python3 has it (PyTorch's nvidia-cudnn package): the frontend opens libcudnn.so.9.
CUDNN_LIB=$(python3 -c "import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], 'lib'))" 2>/dev/null)
[ -n "$CUDNN_LIB" ] && export LD_LIBRARY_PATH="$CUDNN_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "${PART:-all}" = ubatch ]; then
# PART=ubatch: the default kernel (fa3) at 32000 and 8192 tokens with --ubatch-size 2048 against
# 8192, A B B A, profiled (the chunk's weight GEMMs alone: their TFLOP/s; the prompt's attention
# alone, chunk by chunk), then PyTorch's SDPA prefill at 32000; the table lists each run's warm
# prefill, its GEMM line and its attention line.
for P in 32000 8192; do
  for r in a_2048 a_8192 b_8192 b_2048; do
    run "ub_${P}_$r" 90 "$Q" --model-preset qwen3-8b --prompt-tokens "$P" --n-predict 4 --ubatch-size "${r#*_}" \
      --ctx-size 32768
  done
done
if [ "${TORCH:-1}" = 1 ] && [ -f "$TB" ]; then
  run torch8_32000 90 python3 -u "$TB" --hidden 4096 --layers 36 --heads 32 --kv 8 --head-dim 128 --inter 12288 \
    --vocab 151936 --prompt 32000 --ctx 32768 --gen 12
fi
{
  echo "# prefill_ab.sh PART=ubatch at $REV ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  for f in "$L"/ub_*.log; do
    echo "- $(basename "$f" .log): $(grep -a 'prompt eval time' "$f" | head -1 | sed 's/^ *//')"
    echo "  $(grep -a "prefill chunk's weight GEMMs" "$f" | head -1)$(grep -q 'rc=[1-9]' "$f" && echo ' (FAILED or timed out)')"
    echo "  $(grep -a "prefill attention alone" "$f" | head -1)"
  done
  [ -f "$L/torch8_32000.log" ] && echo "PyTorch, 32000: $(grep -a '^torch TP=' "$L/torch8_32000.log" | tail -1)"
  clocks_summary
  echo "total $(( $(date +%s) - T0 )) s"
} > "$SUM" 2>&1
cat "$SUM"  # the logs are packed on exit (ab_common.sh)
exit 0
fi
# 1. Correctness first: the kernels alone and in the model, then the chunked-prefill model tests
#    with fa2, the kernel that is not the default, selected through the environment.
run tests 150 "$T" --gtest_filter='QwenPrefillFa3Gpu.*:QwenPrefillCudnnGpu.*'
CUDNN_OK=0
grep -aq '^\[       OK \] QwenPrefillCudnnGpu.MatchesFa2' "$L/tests.log" && CUDNN_OK=1
# A hang (the timeout's rc 124) would hang every fa3 run after it: time only fa2 then.
FA3_OK=1
if [ "$LAST_RC" = 124 ]; then FA3_OK=0; echo "## fa3 tests timed out: fa3 runs skipped" >> "$L/skipped.log"; fi
run tests_chunked_fa2 90 env QWEN_PREFILL_ATTN=fa2 "$T" --gtest_filter='QwenPrefillGpu.ChunkedPrefill*'
# 2. The attention alone: one qwen3-8b layer, 32000-token prompt, chunks of 2048 and 8192.
[ $FA3_OK = 1 ] && run bench 60 "$T" --gtest_also_run_disabled_tests --gtest_filter='QwenPrefillFa3Gpu.DISABLED_Bench'
# 3. qwen_tp prefill, fa2 / fa3 in one binary, A B B A per length (longest first: it matters most).
q8() {  # q8 <tag> <kernel> <prompt> [extra]
  local tag=$1 k=$2 P=$3; shift 3
  [ "$k" = fa3 ] && [ $FA3_OK != 1 ] && return
  [ "$k" = cudnn ] && [ $CUDNN_OK != 1 ] && return
  run "q8_${P}_$tag" 60 env QWEN_PREFILL_ATTN="$k" "$Q" --model-preset qwen3-8b --prompt-tokens "$P" --n-predict 4 \
    --ubatch-size "$UB" --no-profile "$@"
}
for P in 32000 8192 2048 512; do
  extra=""; [ "$P" = 32000 ] && extra="--ctx-size 32768"
  # shellcheck disable=SC2086
  { q8 a_fa2 fa2 $P $extra; q8 a_fa3 fa3 $P $extra; q8 a_cudnn cudnn $P $extra; q8 b_cudnn cudnn $P $extra
    q8 b_fa3 fa3 $P $extra; q8 b_fa2 fa2 $P $extra; }
done
# 4. Lowest priority: PyTorch's SDPA prefill on the same shape (the 1.3x target's denominator).
if [ "${TORCH:-1}" = 1 ] && [ -f "$TB" ]; then
  run torch8_32000 90 python3 -u "$TB" --hidden 4096 --layers 36 --heads 32 --kv 8 --head-dim 128 --inter 12288 \
    --vocab 151936 --prompt 32000 --ctx 32768 --gen 12
fi
fi

# ---- the table ----
{
  echo "# prefill_ab.sh at $REV ($(date -u +%Y-%m-%dT%H:%M:%SZ)), --ubatch-size $UB"
  echo
  echo "qwen_tp prefill, qwen3-8b, warm tok/s (prompt eval time):"
  echo
  echo "| prompt | fa2 (a, b) | fa3 (a, b) | cudnn (a, b) | fa3 / fa2 | cudnn / fa2 (means) | kernel each run reported |"
  echo "|---|---|---|---|---|---|---|"
  for P in 32000 8192 2048 512; do
    line=$(for r in a_fa2 b_fa2 a_fa3 b_fa3 a_cudnn b_cudnn; do
      f=$L/q8_${P}_$r.log
      if [ -f "$f" ]; then
        awk -v r="$r" '
          /prompt eval time/ && !pf { for (i = 1; i <= NF; ++i) if ($i == "tokens" && $(i+1) == "per") pf = $(i-1) }
          /prefill attention tensor-core FA3/ { k = "FA3" } /prefill attention tensor-core FA2/ { k = "FA2" }
          /prefill attention cuDNN/ { k = "cuDNN" }
          /rc=[1-9]/ { bad = 1 }
          END { printf "%s=%s:%s%s ", r, pf ? pf : "-", k ? k : "?", bad ? "!" : "" }' "$f"
      else
        printf "%s=-:- " "$r"
      fi
    done)
    echo "$line" | awk -v P="$P" '{
      for (i = 1; i <= NF; ++i) { split($i, a, "[=:]"); v[a[1]] = a[2]; k[a[1]] = a[3] }
      n2 = (v["a_fa2"] != "-") + (v["b_fa2"] != "-"); n3 = (v["a_fa3"] != "-") + (v["b_fa3"] != "-")
      nc = (v["a_cudnn"] != "-") + (v["b_cudnn"] != "-")
      m2 = n2 ? (v["a_fa2"] + v["b_fa2"]) / n2 : 0; m3 = n3 ? (v["a_fa3"] + v["b_fa3"]) / n3 : 0
      mc = nc ? (v["a_cudnn"] + v["b_cudnn"]) / nc : 0
      printf "| %s | %s, %s | %s, %s | %s, %s | %s | %s | fa2: %s %s; fa3: %s %s; cudnn: %s %s |\n", P,
        v["a_fa2"], v["b_fa2"], v["a_fa3"], v["b_fa3"], v["a_cudnn"], v["b_cudnn"],
        (m2 > 0 && m3 > 0) ? sprintf("%.3fx", m3 / m2) : "-", (m2 > 0 && mc > 0) ? sprintf("%.3fx", mc / m2) : "-",
        k["a_fa2"], k["b_fa2"], k["a_fa3"], k["b_fa3"], k["a_cudnn"], k["b_cudnn"] }'
  done
  echo
  echo "(\"!\": the run failed or timed out; a fa3 or cudnn run that reports FA2 did not get its kernel; cudnn runs"
  echo " skipped unless QwenPrefillCudnnGpu.MatchesFa2 passed: $([ "${CUDNN_OK:-0}" = 1 ] && echo it did || echo it did not).)"
  echo
  echo "The attention alone (QwenPrefillFa3Gpu.DISABLED_Bench, one qwen3-8b layer, 32000-token prompt):"
  echo
  grep -a '^|' "$L/bench.log" 2>/dev/null || echo "(no bench table: see bench.log)"
  echo
  if [ -f "$L/torch8_32000.log" ]; then
    echo "PyTorch, 32000: $(grep -a '^torch TP=' "$L/torch8_32000.log" | tail -1)"
  else
    echo "PyTorch: not run (TORCH=0, no torch_tp_decode.py at $TB, or no budget left)"
  fi
  echo
  [ -f "$L/sass.log" ] && echo "fa3 SASS: $(tail -1 "$L/sass.log")"
  for f in tests tests_chunked_fa2 bench; do
    [ -f "$L/$f.log" ] || continue
    echo "$f: $(grep -a '^\[  PASSED\|^\[  FAILED\|^\[  SKIPPED' "$L/$f.log" | tr '\n' ' ' | cut -c1-400) $(grep -a '## rc=' "$L/$f.log" | tail -1)"
  done
  [ -f "$L/skipped.log" ] && cat "$L/skipped.log"
  clocks_summary
  echo "total $(( $(date +%s) - T0 )) s"
} > "$SUM" 2>&1
cp "$SUM" "$L/summary.md"
cat "$SUM"
