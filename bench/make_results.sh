#!/usr/bin/env bash
# bench/make_results.sh <machine> [build-dir]: runs allreduce_perf's standard set on this
# machine's GPUs and writes each run's raw log, compressed, to
# bench/results/raw/<machine>/allreduce-<run>_<commit>.txt.gz (the commit, the date, the command,
# the GPUs, driver and topology first; CUDA, NCCL and tpcomm in each table's header lines).
# tpcomm and NCCL run in the same process on the same buffers (-A ... -A nccl).
#   1. mpirun, eager, bf16, 8 B .. 1 GiB: -A auto, -A staged_host, -A nccl
#   2. mpirun, CUDA graphs (-G 20), bf16: -A auto, -A nccl
#   3. one process driving every GPU (-g N), eager, bf16: -A auto, -A nccl
# Then put the tables a reader needs on bench/results/<machine>.md, each naming its commit, date,
# command and raw log (tests/unit/check_docs.sh fails on a raw log no page cites).
# Multicast stays off: NCCL_NVLS_ENABLE=0 unless already set. STEPS="1" (or "2 3") runs a subset;
# MAXBYTES (default 1G) caps the sweep.
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
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dir="$root/bench/results/raw/$machine"
mkdir -p "$dir"
maxb="${MAXBYTES:-1G}"

run() {  # name, command...
  local name="$1"; shift
  local out="$dir/allreduce-${name}_${commit}.txt"
  {
    echo "# commit $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown); date $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# command: $*"
    echo "# GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | paste -sd, -)"
    echo "# driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
    nvidia-smi topo -m 2>&1 | sed 's/^/# /' || true
    "$@" 2>&1 || echo "(exit status $?)"
  } >"$out"
  gzip -9nf "$out"
  echo "wrote $out.gz"
}

steps="${STEPS:-1 2 3}"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }

mp=(mpirun -np "$n" --bind-to none)
has 1 && run "eager-mpirun" "${mp[@]}" "$bin" -b 8 -e "$maxb" -f 2 -d bf16 -c 1 -A auto -A staged_host -A nccl
has 2 && run "graph-mpirun" "${mp[@]}" "$bin" -b 8 -e "$maxb" -f 2 -d bf16 -c 1 -G 20 -A auto -A nccl
has 3 && run "eager-one-process" "$bin" -g "$n" -b 8 -e "$maxb" -f 2 -d bf16 -c 1 -A auto -A nccl
echo "now cite them from bench/results/$machine.md (a table per run: commit, date, command, raw log)"
