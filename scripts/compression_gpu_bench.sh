#!/usr/bin/env bash
# scripts/compression_gpu_bench.sh [OUTDIR]: the compressed all-reduce on ONE GPU (two
# ranks sharing it, TPCOMM_ALLOW_SHARED_DEVICE=1), under 4 minutes on an H200 including the build
# of only the targets it runs. Three raw logs in OUTDIR (argument 1, else $OUT, else ./gpu-logs),
# each opening with the commit ($COMMIT, else git rev-parse HEAD), the date and the command:
#   compression_allreduce.txt  allreduce_perf -g 2 on GPU 0, bf16, 1M..16M: staged_host vs
#       staged_host+fp8, staged_host vs staged_host+int8 (1M..16M), twoshot_p2p vs twoshot_p2p+fp8
#       (1M..4M), each A B B A in one process; time, busbw and the error columns (maxabs, rmsrel vs the fp64
#       sum). Two ranks share one GPU's SMs and its PCIe link: the ratios compare algorithms on
#       the same footing; they are not the speed of two separate GPUs.
#   quantize_gpu.txt  the quantize and read-back passes alone (tests/gpu/quantize_gpu_bench.cu),
#       GB/s of message for fp8/int8 x f32/f16/bf16, each checked bitwise against the host quantizers.
#   compressed_gpu_tests.txt  tpcomm_gpu_tests --gtest_filter='*Compressed*' (twoshot_p2p and
#       staged_host compressed, every format x dtype x size, bitwise the definition on every rank),
#       given what is left of the 4 minutes (at least 20 s): a run cut short says rc=124 there, and
#       the same command run alone completes it. SKIP_TESTS=1 leaves them out.
# Build: cmake -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 into $BUILD (default /tmp/tpcomm-gpu-build,
# reused when present); the build's own log goes to $BUILD/compression_build.log (its tail into
# the first log on failure). PREBUILT=1: no build; $BUILD already holds allreduce_perf,
# quantize_gpu_bench and tpcomm_gpu_tests built elsewhere (e.g. off-device from another branch,
# carried: $COMMIT then names what they were built from), and the tests run in two parts: every
# size but the largest (4M+17 elements) first, before the timings, then the largest and the
# 200-run rotation with what is left, so a short device budget still checks every kernel path. Multicast stays off (docs/multicast.md): the variables below are
# exported for every command and nothing here unsets them.
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
export TPCOMM_ALLOW_SHARED_DEVICE=1
# Two ranks on one GPU must fit its SMs at once (the create-time residency check): two-shot's grid
# of 128 blocks twice does not fit 132 SMs, 64 does (as tests/gpu/gpu_test_main.cc sets it).
export TPCOMM_TWOSHOT_BLOCKS=${TPCOMM_TWOSHOT_BLOCKS:-64}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR=${1:-${OUT:-$root/gpu-logs}}
B=${BUILD:-/tmp/tpcomm-gpu-build}
COMMIT=${COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
mkdir -p "$OUTDIR" "$B"
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( 230 - ($(date +%s) - T0) )); }  # seconds left of the 4-minute budget (10 s margin)

build() {  # TARGETS...
  { cmake -S "$root" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
    ninja -C "$B" -j"$(nproc)" "$@"; } >> "$B/compression_build.log" 2>&1
}
header() {  # FILE COMMAND...
  local f=$1; shift
  { echo "# commit $COMMIT; date $(date -u +%Y-%m-%dT%H:%M:%SZ); command: $*"
    echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); env: NCCL_NVLS_ENABLE=0 TPCOMM_MULTICAST=0 TPCOMM_ALLOW_SHARED_DEVICE=1 TPCOMM_TWOSHOT_BLOCKS=$TPCOMM_TWOSHOT_BLOCKS"; } >> "$f"
}
run() {  # FILE SECONDS COMMAND...
  local f=$1 t=$2; shift 2
  header "$f" "$@"
  timeout -k 5 "$t" "$@" >> "$f" 2>&1
  local rc=$?
  echo "# rc=$rc after $(el)" >> "$f"
  echo "$(basename "$f"): rc=$rc $(el)"
}

A=$OUTDIR/compression_allreduce.txt
Q=$OUTDIR/quantize_gpu.txt
G=$OUTDIR/compressed_gpu_tests.txt
: > "$A"; : > "$Q"; : > "$G"
if [ "${PREBUILT:-0}" = 1 ]; then
  build() { [ -x "$B/tests/gpu/tpcomm_gpu_tests" ] && [ -x "$B/bench/allreduce_perf" ] && [ -x "$B/tests/gpu/quantize_gpu_bench" ]; }
  S=Sizes/CompressedGpu.*; heavy="$S/14:$S/15:$S/30:$S/31:$S/46:$S/47:$S/62:$S/63:$S/78:$S/79"
  T=StagedSizes/CompressedGpu.*; heavy="$heavy:$S/94:$S/95:$T/7:$T/15:$T/23:$T/31"
  heavy="$heavy:$T/39:$T/47:CompressedGpuRules.SameBitsOverRotatingRuns"
  echo "# PREBUILT=1: binaries in $B built off-device from $COMMIT" >> "$G"
  [ "${SKIP_TESTS:-0}" = 1 ] || run "$G" 60 "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter="*Compressed*:-$heavy"
  [ "${SKIP_TESTS:-0}" = 1 ] || TEST_FILTER=$heavy
fi
if ! build allreduce_perf quantize_gpu_bench; then
  echo "# build failed after $(el); tail of $B/compression_build.log:" >> "$A"
  tail -40 "$B/compression_build.log" >> "$A"
  echo "build failed $(el)"; exit 1
fi
echo "built bench $(el)"
P="$B/bench/allreduce_perf -g 2 -d bf16 -b 1M -e 16M -f 4 -n 20 -w 5 -K 5"
run "$Q" 40 "$B/tests/gpu/quantize_gpu_bench" --count $((32 << 20)) --reps 20
run "$A" 80 $P --compression fp8 -A staged_host -A staged_host+fp8 -A staged_host+fp8 -A staged_host
run "$A" 60 ${P/-e 16M/-e 4M} --compression fp8 -A twoshot_p2p -A twoshot_p2p+fp8 -A twoshot_p2p+fp8 -A twoshot_p2p
run "$A" 80 $P --compression int8 -A staged_host -A staged_host+int8 -A staged_host+int8 -A staged_host
if [ "${SKIP_TESTS:-0}" = 1 ]; then
  echo "# SKIP_TESTS=1: the compressed GPU tests were not run" >> "$G"
elif build tpcomm_gpu_tests; then
  t=$(left); [ "$t" -lt 20 ] && t=20
  run "$G" "$t" "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter="${TEST_FILTER:-*Compressed*}"
else
  echo "# build of tpcomm_gpu_tests failed after $(el); tail of $B/compression_build.log:" >> "$G"
  tail -40 "$B/compression_build.log" >> "$G"
  echo "tpcomm_gpu_tests build failed $(el)"
fi
grep -a -A12 "Side by side" "$A" | grep -a "^#" | head -40
grep -a -E "^  (fp8|int8)" "$Q"
grep -a -E "PASSED|FAILED|SKIPPED" "$G" | head -20
