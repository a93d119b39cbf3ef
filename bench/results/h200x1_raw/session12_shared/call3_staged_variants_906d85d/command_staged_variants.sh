#!/usr/bin/env bash
# [header added after the run] this script as it ran in call 3: commit 906d85d644241672869b89c6414a4d9517b18638, 2026-12-02 06:27-06:34 UTC (call 3); command: COMMIT=906d85d... BASE_DIR=scratch_diag/base bash scripts/staged_variants.sh $OUT
# scripts/staged_variants.sh (session 12, issue 18): the staged_host+int8/+fp8 reducer, three
# builds in one GPU call, each against plain staged_host, A B B A, two ranks sharing GPU 0:
#   ahead256  the working tree: the first peer's codes of the next step read a step ahead, 256 threads
#   ahead512  the same at 512 threads (128 registers: spills)
#   base512   the reducer before (one round trip per step, 512 threads), from BASE_DIR
# then the compressed GPU tests on ahead256. COMMIT=<hash> names the commit; BASE_DIR holds the
# two files of the base (staged_host_compressed.cu, quantize_warp.cuh).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
export TPCOMM_ALLOW_SHARED_DEVICE=1 TPCOMM_TWOSHOT_BLOCKS=64 TPCOMM_PDL=0 CUDA_MODULE_LOADING=EAGER
F=$root/src/algos/staged_host_compressed.cu Q=$root/src/algos/quantize_warp.cuh
{ echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "commit ${COMMIT:-unknown}"; echo "command: scripts/staged_variants.sh"; } > "$L/env.txt" 2>&1
measure() {
  local v=$1 log=$L/$1.txt
  echo "# commit ${COMMIT:-unknown}, variant $v, $(date -u +%FT%TZ), scripts/staged_variants.sh" > "$log"
  for c in int8 fp8; do
    local cmd="$B/bench/allreduce_perf -g 2 -d bf16 -b 1M -e 16M -f 4 -w 5 -n 20 -K 5 --compression $c"
    cmd="$cmd -A staged_host -A staged_host+$c -A staged_host+$c -A staged_host"
    echo "\$ $cmd" >> "$log"; timeout 90 $cmd >> "$log" 2>&1; echo "# rc=$?" >> "$log"
  done
  echo "== $v $(el)"; grep -A5 'Side by side' "$log" | grep -E '^# +[0-9]'
}
gpu_build
measure ahead256
timeout 240 "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter='*Compressed*' > "$L/tests_ahead256.txt" 2>&1
echo "tests rc=$? $(el) $(grep -E 'PASSED|FAILED' "$L/tests_ahead256.txt" | head -3 | tr '\n' ' ')"
sed -i 's/^constexpr int kThreads = 256;$/constexpr int kThreads = 512;/' "$F"
ninja -C "$B" allreduce_perf >> "$L/build.log" 2>&1 || echo "rebuild ahead512 failed"
measure ahead512
cp "${BASE_DIR:?}/staged_host_compressed.cu" "$F"; cp "$BASE_DIR/quantize_warp.cuh" "$Q"
ninja -C "$B" allreduce_perf >> "$L/build.log" 2>&1 || echo "rebuild base512 failed"
measure base512
tar czf "$OUTDIR/logs.tgz" -C "$OUTDIR" logs && rm -rf "$L"
echo "total $(el)"
