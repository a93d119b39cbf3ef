#!/usr/bin/env bash
# scripts/run.sh: README command (a). Installs what is missing, builds, and runs allreduce_perf:
# across all local GPUs (one rank per GPU under mpirun; tpcomm's selector then NCCL itself, in
# the same process on the same buffers), or across 4 host ranks where there is no GPU.
# Extra arguments replace the default size sweep, e.g. scripts/run.sh -b 8 -e 1G -f 2 -G 20.
# The output is also saved under $BUILD_DIR/results/.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

tpcomm_env
tpcomm_install_deps
tpcomm_configure
tpcomm_build allreduce_perf

BIN="$BUILD_DIR/bench/allreduce_perf"
NGPUS=0
if command -v nvidia-smi >/dev/null 2>&1; then
  NGPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if ! grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
  [ "$NGPUS" -gt 0 ] && log "$NGPUS GPUs but tpcomm was built without CUDA (no nvcc found): running host ranks"
  NGPUS=0
fi
HAVE_MPI=0
command -v mpirun >/dev/null 2>&1 && HAVE_MPI=1
HAVE_NCCL=0
grep -q '^NCCL_LIBRARY:FILEPATH=/' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null && HAVE_NCCL=1

mkdir -p "$BUILD_DIR/results"
STAMP="$(hostname)-$(date +%Y%m%d-%H%M%S)"
OUT="$BUILD_DIR/results/$STAMP"

if [ "$NGPUS" -gt 0 ]; then
  SIZES=(-b 8 -e 128M -f 4)
  [ $# -gt 0 ] && SIZES=("$@")
  ALGOS=(-A auto)
  [ "$HAVE_NCCL" = 1 ] && ALGOS+=(-A nccl)
  if [ "$HAVE_MPI" = 1 ]; then
    CMD=(mpirun -np "$NGPUS" --bind-to none "$BIN" "${SIZES[@]}" -c 1 "${ALGOS[@]}" --json "$OUT.json")
  else
    CMD=("$BIN" -g "$NGPUS" "${SIZES[@]}" -c 1 "${ALGOS[@]}" --json "$OUT.json")
  fi
else
  SIZES=(-b 8 -e 64M -f 4)
  [ $# -gt 0 ] && SIZES=("$@")
  if [ "$HAVE_MPI" = 1 ]; then
    CMD=(mpirun -np 4 --oversubscribe "$BIN" "${SIZES[@]}" -c 1 --json "$OUT.json")
  else
    CMD=("$BIN" -t 4 "${SIZES[@]}" -c 1 --json "$OUT.json")
  fi
fi
log "${CMD[*]}"
set +e
"${CMD[@]}" 2>&1 | tee "$OUT.txt"
status=${PIPESTATUS[0]}
set -e
log "saved $OUT.txt and $OUT.json"
exit "$status"
