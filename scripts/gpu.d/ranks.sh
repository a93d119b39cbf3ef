#!/usr/bin/env bash
# scripts/gpu.d/ranks.sh [OUTDIR] (run as `scripts/gpu.sh ranks [OUTDIR]`): every multi-rank path on ONE GPU, in one device call (~8 min on
# 1x H200 after a ~2 min build): the GPU test binary at 2, 3, 4 and 8 ranks sharing the GPU
# (TPCOMM_TEST_RANKS; TPCOMM_TEST_SIZES=quick keeps the size tables' kinds of edges), the MPI
# test binary at 2 and 4 processes sharing it (CUDA IPC), the NCCL drop-in and ring_nccl over the
# NCCL test double, and the decoder at TP=2 and TP=4 on the prompt that once timed out. Proves protocols, slicing, epochs and residency at every rank count;
# not speed, not NCCL (it needs one GPU per rank), not cross-GPU memory ordering. Prints a table
# last (N, algorithm, passed, failed, skipped); logs in OUTDIR/ranks.tgz, each log opening with
# the commit, the date and the command. COMMIT=<hash> names the commit of a tree without .git;
# RANKS="2 3 4 8" and STEPS="decoder mpi shim tests" narrow the run (the rank counts run as
# concurrent processes; PARALLEL=0: one after another); PACKED=file.tgz
# (scripts/gpu.d/pack_build.sh) runs binaries built off the GPU machine instead of building;
# STEPS=mutants with MUTANTS=file.tgz (scripts/gpu.d/pack_mutants.py) runs library mutants' tests.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUTDIR=${1:-${OUT:-$root/gpu-logs}}
B=${BUILD:-/tmp/tpcomm-gpu-build}
L=$OUTDIR/ranks
mkdir -p "$L"
REV=$(git -C "$root" rev-parse "${COMMIT:-HEAD}" 2>/dev/null || echo "${COMMIT:-unknown}")  # the full hash where git can resolve it
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0))s"; }
header() { echo "# commit $REV"; echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "# command: $*"; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -lt 1 ]; then echo "scripts/gpu.sh ranks: no GPU visible (nvidia-smi -L lists none)"; exit 2; fi
{ header "scripts/gpu.sh ranks"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } > "$L/env.txt"

# PACKED=file.tgz (scripts/gpu.d/pack_build.sh, made off the GPU machine from the same commit):
# unpacked into $BUILD instead of building; the binaries find their libraries on LD_LIBRARY_PATH.
if [ -n "${PACKED:-}" ]; then
  mkdir -p "$B" && tar xzf "$PACKED" -C "$B" || { echo "PACKED=$PACKED: cannot unpack into $B"; exit 1; }
  header "tar xzf $PACKED -C $B (built off this machine)" > "$L/build.log"
  SKIP_BUILD=1
  echo "unpacked $PACKED into $B $(el)"
fi
export LD_LIBRARY_PATH="$B:$B/tests/shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  header "cmake -S . -B $B -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DTPCOMM_BUILD_TESTS=ON && ninja" > "$L/build.log"
  cmake -S "$root" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
    -DTPCOMM_BUILD_TESTS=ON >> "$L/build.log" 2>&1 &&
    ninja -C "$B" -j"$(nproc)" tpcomm_gpu_tests tpcomm_gpu_mpi_tests qwen_tp tpcomm_shim_fake tpcomm_nccl_transport_fake \
      tpcomm_nccl fake_nccl >> "$L/build.log" 2>&1
  rc=$?
  echo "build rc=$rc $(el)"
  [ $rc = 0 ] || { grep -a -B2 -A6 " error" "$L/build.log" | head -30; exit 1; }
fi

# Ranks share the GPU (the binaries set TPCOMM_ALLOW_SHARED_DEVICE=1 and the grids from the rank
# count); every module is loaded up front (a lazy load waits for the GPU to go idle while a rank
# spins); one hardware queue per stream.
export CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32 TPCOMM_TEST_SIZES=${TPCOMM_TEST_SIZES:-quick}
steps=" ${STEPS:-decoder mpi shim${MUTANTS:+ mutants} tests} "
left() { echo $((${BUDGET:-570} - ($(date +%s) - T0))); }  # seconds left of the call
if [[ $steps == *" decoder "* ]]; then
  # The case that once timed out: a 1524-token prompt through a 2048-token micro-batch,
  # DECODER_RUNS (20) times at TP=2 and at TP=4, every run's tokens equal to the first's (on one
  # H200 a run takes ~3 s at TP=2 and ~7 s at TP=4).
  Q="$B/examples/qwen_tp/qwen_tp --model-preset qwen3-0.6b --prompt-tokens 1524 --ubatch-size 2048 --n-predict 16 --no-profile"
  for tp in 2 4; do
    log=$L/decoder_tp$tp.txt
    header "$Q --tp $tp --output-ids run<i>.ids (TPCOMM_ALLOW_SHARED_DEVICE=1)" > "$log"
    runs=${DECODER_RUNS:-20}
    pass=0
    for i in $(seq 1 "$runs"); do
      TPCOMM_ALLOW_SHARED_DEVICE=1 timeout -k 5 60 $Q --tp "$tp" --output-ids "$L/tp${tp}_$i.ids" >> "$log" 2>&1
      rc=$?
      same=1
      [ "$i" = 1 ] || cmp -s "$L/tp${tp}_1.ids" "$L/tp${tp}_$i.ids" || same=0
      [ $rc = 0 ] && [ -s "$L/tp${tp}_$i.ids" ] && [ $same = 1 ] && pass=$((pass + 1))
      echo "# run $i rc=$rc same-ids=$same" >> "$log"
      done_runs=$i
      # A timeout costs ~15 s: after 3 failed runs the rest would only spend the call.
      if [ $((i - pass)) -ge 3 ] && [ "$i" -lt "$runs" ]; then echo "# stopped after 3 failed runs" >> "$log"; break; fi
    done
    echo "# decoder TP=$tp: $pass of $done_runs passed (of $runs asked)" >> "$log"
    echo "decoder TP=$tp: $pass of $done_runs passed (of $runs asked) $(el)"
  done
fi
run_gtest() {  # run_gtest <tag> <seconds> <command...>: the test list (names and parameters), then the run
  local tag=$1 t=$2; shift 2
  header "$*" > "$L/$tag.txt"
  "$@" --gtest_list_tests > "$L/$tag.list" 2>&1
  timeout -k 5 "$t" "$@" >> "$L/$tag.txt" 2>&1
  echo "# rc=$?" >> "$L/$tag.txt"
  echo "$tag: $(grep -a -E 'passed|PASSED|FAILED  \]' "$L/$tag.txt" | tail -2 | tr '\n' ' ' | cut -c1-150) $(el)"
}
if [[ $steps == *" mpi "* ]]; then
  for np in 2 4; do
    run_gtest mpi_np$np "${MPI_SECONDS:-45}" mpirun -np "$np" --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE \
      -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x TPCOMM_MULTICAST -x CUDA_MODULE_LOADING \
      -x TPCOMM_TEST_SIZES -x LD_LIBRARY_PATH "$B/tests/gpu/tpcomm_gpu_mpi_tests"
  done
fi
if [[ $steps == *" shim "* ]]; then
  # The NCCL drop-in's routing and ring_nccl's glue over the NCCL test double, ranks sharing the
  # GPU (real NCCL refuses two ranks on one GPU): the ctest entries of label gpu with "fake".
  run_gtest shim_trans 60 env TPCOMM_ALLOW_SHARED_DEVICE=1 "$B/tests/shim/tpcomm_nccl_transport_fake" --gpu
  for algo in ring_nccl '^ring_nccl'; do
    tag=shim_ring; [ "$algo" = ring_nccl ] || tag=shim_noring
    run_gtest "$tag" 60 env LD_PRELOAD="$B/libtpcomm_nccl.so" TPCOMM_NCCL_LIBRARY="$B/tests/shim/libfake_nccl.so.2" \
      TPCOMM_ALGO="$algo" TPCOMM_ALLOW_SHARED_DEVICE=1 "$B/tests/shim/tpcomm_shim_fake" --gpu
  done
fi
if [[ $steps == *" mutants "* ]]; then
  # Library mutants built off this machine (scripts/gpu.d/pack_mutants.py, same commit): each
  # puts a fixed defect back; its tests, at 3 ranks, must fail. The same filters then run on the
  # unmutated library and must pass.
  if [ -z "${MUTANTS:-}" ] || ! tar xzf "$MUTANTS" -C "$B"; then
    echo "mutants: MUTANTS=<tarball of scripts/gpu.d/pack_mutants.py> needed" | tee -a "$L/mutants.log"
  else
    all=""
    while IFS=$'\t' read -r name filter; do
      [[ -z "$name" || "$name" == \#* ]] && continue
      log=$L/mutant_$name.log
      header "LD_LIBRARY_PATH=$B/mutants/$name:... TPCOMM_TEST_RANKS=3 tpcomm_gpu_tests --gtest_filter=$filter" > "$log"
      LD_LIBRARY_PATH="$B/mutants/$name:$LD_LIBRARY_PATH" TPCOMM_TEST_RANKS=3 timeout -k 5 180 \
        "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter="$filter" >> "$log" 2>&1
      rc=$?
      verdict="NOT caught (rc 0)"
      grep -aq "^\[==========\] 0 tests" "$log" && verdict="no test matched"
      [ $rc != 0 ] && verdict="caught (rc $rc, $(grep -a -c '^\[  FAILED  \]' "$log") FAILED lines)"
      echo "mutant $name: $verdict" | tee -a "$L/mutants.log"
      all="$all${all:+:}$filter"
    done < "$B/mutants/MANIFEST"
    log=$L/mutant_none.log
    header "TPCOMM_TEST_RANKS=3 tpcomm_gpu_tests --gtest_filter=$all (unmutated)" > "$log"
    TPCOMM_TEST_RANKS=3 timeout -k 5 180 "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter="$all" >> "$log" 2>&1
    echo "unmutated, the same filters: rc $? ($(grep -a 'passed,' "$log" | tail -1))" | tee -a "$L/mutants.log"
  fi
fi

if [[ $steps == *" tests "* ]]; then
  set -- ${RANKS:-2 3 4 8}
  if [ "${PARALLEL:-1}" = 1 ] && [ $# -gt 1 ]; then
    # One process per rank count, all at once, each with the whole time left: the suite's time is
    # mostly host work (inputs, references, comparisons) on one core per process, and processes
    # sharing a GPU take turns on it (time slices), so one process's ranks never wait for SMs
    # that another process holds. PARALLEL=0 runs them one after another with equal shares.
    t=$(( $(left) - 5 ))
    for n in "$@"; do
      run_gtest tests_n$n "$t" env TPCOMM_TEST_RANKS=$n "$B/tests/gpu/tpcomm_gpu_tests" &
    done
    wait
  else
    for n in "$@"; do
      share=$(( $(left) / $# )); shift  # an equal share of what is left, per remaining rank count
      [ "$share" -gt 20 ] || { echo "tests N=$n: no time left"; continue; }
      run_gtest tests_n$n "$share" env TPCOMM_TEST_RANKS=$n "$B/tests/gpu/tpcomm_gpu_tests"
    done
  fi
fi

# The table: per run and algorithm, gtest's passed / failed / skipped / not reached (test names
# mapped to their parameters through the --gtest_list_tests files), then the decoder lines.
{ python3 "$root/scripts/gpu.d/gtest_table.py" "$L"; cat "$L/mutants.log" 2>/dev/null; } | tee "$L/summary.txt"
rm -f "$L"/tp*_*.ids
cp "$L/summary.txt" "$OUTDIR/ranks_summary.txt"
tar czf "$OUTDIR/ranks.tgz" -C "$OUTDIR" ranks && rm -rf "$L"
echo "total $(el); logs: $OUTDIR/ranks.tgz"
