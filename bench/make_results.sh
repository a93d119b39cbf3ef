#!/usr/bin/env bash
# bench/make_results.sh <machine> [build-dir]: runs allreduce_perf's standard set on this
# machine's GPUs and writes bench/results/<machine>.md (date, driver, CUDA, NCCL, commands, raw
# output). tpcomm and NCCL run in the same process on the same buffers (-A ... -A nccl).
#   1. mpirun, eager, bf16, 8 B .. 1 GiB: -A auto, -A staged_host, -A nccl
#   2. mpirun, CUDA graphs (-G 20), bf16: -A auto, -A nccl
#   3. one process driving every GPU (-g N), eager, bf16: -A auto, -A nccl
# Multicast stays off: NCCL_NVLS_ENABLE=0 unless already set. STEPS="1" (or "2 3") runs a subset
# and appends to the file (the header is written when step 1 runs); MAXBYTES (default 1G) caps
# the sweep.
set -euo pipefail
machine="${1:?usage: bench/make_results.sh <machine> [build-dir]}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${2:-$root/build}"
bin="$build/bench/allreduce_perf"
[ -x "$bin" ] || { echo "no $bin: build first (scripts/run.sh builds it)" >&2; exit 1; }
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
n=$(nvidia-smi -L | grep -c '^GPU ')
[ "$n" -ge 2 ] || { echo "needs at least 2 GPUs (found $n)" >&2; exit 1; }
out="$root/bench/results/$machine.md"
mkdir -p "$(dirname "$out")"
maxb="${MAXBYTES:-1G}"

run() {  # title, command...
  local title="$1"; shift
  {
    echo
    echo "## $title"
    echo
    echo '```'
    echo "\$ $*"
    "$@" 2>&1 || echo "(exit status $?)"
    echo '```'
  } >>"$out"
}

steps="${STEPS:-1 2 3}"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }

has 1 && {
  echo "# allreduce_perf on $machine"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | paste -sd, -)"
  echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  echo "- CUDA / NCCL / tpcomm: see each table's second header line"
  echo "- topology (nvidia-smi topo -m):"
  echo
  echo '```'
  nvidia-smi topo -m 2>&1 || true
  echo '```'
} >"$out"

mp=(mpirun -np "$n" --bind-to none)
has 1 && run "mpirun -np $n, eager, bf16: tpcomm auto, staged_host, NCCL" \
  "${mp[@]}" "$bin" -b 8 -e "$maxb" -f 2 -d bf16 -c 1 -A auto -A staged_host -A nccl
has 2 && run "mpirun -np $n, CUDA graph (-G 20), bf16: tpcomm auto, NCCL" \
  "${mp[@]}" "$bin" -b 8 -e "$maxb" -f 2 -d bf16 -c 1 -G 20 -A auto -A nccl
has 3 && run "one process, -g $n, eager, bf16: tpcomm auto, NCCL" \
  "$bin" -g "$n" -b 8 -e "$maxb" -f 2 -d bf16 -c 1 -A auto -A nccl
echo "wrote $out"
