#!/usr/bin/env bash
# scripts/gpu.sh COMMAND [OUTDIR] [ARGS...]: every GPU run of tpcomm, one entry. Logs go to
# OUTDIR (default $OUT, else ./gpu-logs): OUTDIR/logs/<step>.txt, packed into OUTDIR/logs.tgz at
# the end, each opening with the commit ($COMMIT, else git rev-parse HEAD: the GPU machine's copy
# of .git can be stale, so callers pass it), the date and the command; one line per step on stdout.
# The build (Ninja, -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90}) goes to $BUILD (default
# /tmp/tpcomm-gpu-build). SKIP="step ..." leaves steps out. Commands:
#   tests        every GPU test on 1+ GPUs (~5 min on 2x H200, ~6.5 min on one): tpcomm_gpu_tests
#                (createGroup; GPU_FILTER a gtest filter, GPU_TESTS_S its limit), tpcomm_gpu_mpi_tests
#                (mpirun -np 2), qwen_gpu_test, the shim tests and the torch preload check, the
#                topology probe (and over one GPU), the GEMV benchmark, one-rank (single-GPU
#                overhead) tables.
#   shared       the multi-rank runs one GPU can make, two ranks sharing GPU 0 (protocols and
#                tokens, not TP speed; no NCCL column): qwen_gpu, qwen_cli (TP=2 with and without
#                --prefill-overlap, ids compared), compression (quantize_gpu_bench, the compressed
#                GPU tests, plain vs +int8/+fp8 A B B A), halves (RS/AG in graphs and eager), ll
#                (HalvesP2p*/HalvesSkew*, ll_p2p vs twoshot_p2p A B B A), tune (tools/tune_gpu_test.sh);
#                opt-in: CE=1 (copy-engine mode; CE_TESTS, CE_MODES, CE_CODECS, CE_MIN, CE_MAX),
#                STAGED_SWEEP=1, STAGED_PROBE=1. SKIP_BUILD=1 reuses $BUILD.
#   bench        the tables of bench/results/<machine>.md on 2 GPUs, each with -A nccl in the same
#                process: PART=all (allreduce, halves, qwen), allreduce, halves, qwen, tune (measured
#                selection), compression (the compressed all-reduce's two-GPU tables).
#   compression  the compressed all-reduce on ONE GPU (two ranks sharing it) in under 4
#                minutes with the build of only its targets: quantize_gpu_bench, staged_host and
#                twoshot_p2p against +fp8 / +int8 A B B A, then the compressed GPU tests with what is
#                left (SKIP_TESTS=1: none). PREBUILT=1: $BUILD holds the binaries already (built
#                off-device from $COMMIT); the tests then run in two parts around the timings.
#   ab BEFORE    the no-behaviour-change check of a refactor: allreduce_perf of the tree at BEFORE
#                (a source folder; built into $BUILD-before) and of this tree, A B B A in four
#                processes, two ranks sharing GPU 0, bf16, 8 B..32 MB (8 B, 8 KB, 2 MB, 32 MB among
#                the rows), eager and CUDA graphs, auto and each P2P algorithm forced.
#   ranks        every multi-rank path on ONE GPU in one call (scripts/gpu.d/ranks.sh): the GPU
#                tests at 2, 3, 4 and 8 ranks sharing the GPU (TPCOMM_TEST_RANKS, quick sizes), the
#                MPI tests at 2 and 4 processes, the NCCL drop-in over the NCCL test double, the
#                decoder at TP=2 (20 runs) and TP=4; a table of passed / failed / skipped / not
#                reached per rank count and algorithm. RANKS, STEPS, BUDGET narrow it; PACKED=tgz
#                (scripts/gpu.d/pack_build.sh, built off the GPU machine) skips the build.
#   python       the Python package on GPUs (torch, no pip install): libtpcomm built as the wheel
#                builds it, laid out in /tmp/tpcomm-py-site, tests/python/torch_gpu_check.py under
#                torchrun on min(GPUs, 2) ranks (ARGS go to it); on failure a crash report.
#                PY_BUILD_ONLY=1: stop after the layout.
#   python-e2e   the PyTorch end-to-end benchmark (bench/baselines/torch_qwen_tp.py, qwen3-32b) in
#                CUDA graphs and eager (E2E_GRAPH_S), then torch.compile (E2E_TOTAL_S in all).
# SAFETY: NVSwitch multicast stays off (docs/multicast.md). The four switches below are exported
# for every command, mpirun forwards them with -x, and nothing here unsets them.
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x TPCOMM_MULTICAST"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUB=${1:-}
case "$SUB" in
  ranks) shift; exec bash "$root/scripts/gpu.d/ranks.sh" "$@" ;;
  tests | shared | bench | compression | ab | python | python-e2e) shift ;;
  *) sed -n '2,/^# SAFETY/p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
AB_BEFORE=""
if [ "$SUB" = ab ]; then AB_BEFORE=${1:-}; [ $# -gt 0 ] && shift; fi
OUTDIR=${OUT:-$root/gpu-logs}
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUTDIR=$1; shift; fi  # the rest: the command's own
B=${BUILD:-/tmp/tpcomm-gpu-build}
L=$OUTDIR/logs
COMMIT=${COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
mkdir -p "$L"
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0))s"; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')

# gpu_build [TARGET...]: configure and build $BUILD (every target, or those named) into build.log.
gpu_build() {
  { echo "# commit $COMMIT; date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# command: cmake -S . -B $B -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90} -DCMAKE_BUILD_TYPE=Release && ninja -C $B $*"; } >> "$L/build.log"
  cmake -S "$root" -B "$B" -G Ninja -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DCMAKE_BUILD_TYPE=Release \
    >> "$L/build.log" 2>&1 && ninja -C "$B" -j"$(nproc)" -k 0 "$@" >> "$L/build.log" 2>&1
  local rc=$?
  echo "build rc=$rc $(el)"
  grep -a -B2 -A6 " error" "$L/build.log" | head -20
  return $rc
}

# step NAME SECONDS COMMAND...: runs it under a limit, appending the command, its output and its
# rc to NAME.txt; prints the rc and the summary lines. Several commands may share a NAME.
step() {
  local name=$1 t=$2; shift 2
  case " ${SKIP:-} " in *" $name "*) echo "$name skipped (SKIP)"; return 0 ;; esac
  local f="$L/$name.txt"
  [ -s "$f" ] || echo "# commit $COMMIT; scripts/gpu.sh $SUB; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)" > "$f"
  echo "\$ $* ($(date -u +%Y-%m-%dT%H:%M:%SZ))" >> "$f"
  timeout -k 5 "$t" "$@" >> "$f" 2>&1
  local rc=$?
  echo "# rc=$rc after $(el)" >> "$f"
  echo "$name rc=$rc $(el) | $(grep -avE '^(\$|#) ' "$f" |
    grep -aE 'tests ran|PASSED|FAILED  \]|ok  |FAIL|Passed|Failed|equal for|tokens per second|Avg bus' | tail -3 |
    tr '\n' ' ' | cut -c1-300)"
  return $rc
}

environment() {  # the machine, once per run
  { echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvcc --version | tail -2; nvidia-smi topo -m; echo "commit $COMMIT; command: scripts/gpu.sh $SUB"
    env | grep -E '^(TPCOMM|NCCL|CUDA)_' | sort
    python3 -c "import torch; print('torch', torch.__version__, torch.cuda.nccl.version())"; mpirun --version | head -1; } > "$L/env.txt" 2>&1
}

finish() {
  tar czf "$OUTDIR/logs.tgz" -C "$OUTDIR" logs && rm -rf "$L"
  echo "total $(el); logs: $OUTDIR/logs.tgz"
}

# Two ranks sharing GPU 0 in one process: both ranks' kernels resident at once (two-shot's 128
# blocks twice do not fit 132 SMs, 64 do); no PDL (a kernel launched early behind one rank's
# spinning all-reduce holds the other's SMs); every module loaded up front (a lazy load waits for
# the GPU to go idle while a rank spins: docs/p2p.md); one hardware queue per stream (ranks must
# not queue work behind each other's spinning kernels: docs/host_staged.md).
shared_gpu_env() {
  export TPCOMM_ALLOW_SHARED_DEVICE=1 TPCOMM_TWOSHOT_BLOCKS=${TPCOMM_TWOSHOT_BLOCKS:-64} TPCOMM_PDL=0
  export CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32
}

cmd_tests() {
  environment
  gpu_build
  # One GPU runs the multi-rank cases with two ranks sharing it: ~300-400 s for the whole binary.
  step gpu_tests "${GPU_TESTS_S:-$([ "$ngpu" -ge 2 ] && echo 300 || echo 540)}" "$B/tests/gpu/tpcomm_gpu_tests" \
    ${GPU_FILTER:+--gtest_filter=$GPU_FILTER}
  [ "$ngpu" -ge 2 ] && step gpu_mpi_tests 150 $MPI "$B/tests/gpu/tpcomm_gpu_mpi_tests"
  step qwen_gpu 200 "$B/examples/qwen_tp/tests/qwen_gpu_test"
  [ "$ngpu" -ge 2 ] && step shim_ctest 200 ctest --test-dir "$B" -R "shim|consumer" --output-on-failure
  [ "$ngpu" -ge 2 ] && step torch_preload 300 bash "$root/tests/shim/run_torch_preload.sh" "$B/libtpcomm_nccl.so" "$L/torch"
  step probe 60 bash "$root/tools/gpu_probe_check.sh" "$B" "$ngpu"
  # createGroup's probe over one GPU (the other hidden from CUDA). Not a 1x-machine probe: the
  # doctor's NVML view still lists every GPU of the machine.
  [ "$ngpu" -ge 2 ] && step probe_1gpu 60 env CUDA_VISIBLE_DEVICES=0 bash "$root/tools/gpu_probe_check.sh" "$B" 1
  # The decode step's weight products: cuBLAS vs qwen_tp's gemvBf16, GB/s per layer shape.
  step gemv_bench 90 env CUDA_VISIBLE_DEVICES=0 "$B/examples/qwen_tp/gemv_bench" --preset qwen3-32b --tp 2
  # Single-GPU overheads (the cost model's calibration): one rank on GPU 0, so the time is the per-call
  # fixed cost (host path, launch, kernel) with no peer; NCCL's one-rank call beside it.
  local one="$B/bench/allreduce_perf -g 1 -d bf16 -c 1 -b 8 -e 1M -f 4 -A auto -A nccl"
  step one_gpu_eager 40 env CUDA_VISIBLE_DEVICES=0 $one
  step one_gpu_graph 40 env CUDA_VISIBLE_DEVICES=0 $one -G 20
  grep -a "^\[  FAILED  \]" "$L"/gpu_tests.txt "$L"/gpu_mpi_tests.txt "$L"/qwen_gpu.txt 2>/dev/null | sort -u | head -12
  finish
}

cmd_shared() {
  shared_gpu_env
  environment
  [ "${SKIP_BUILD:-0}" = 1 ] || gpu_build
  step qwen_gpu 260 "$B/examples/qwen_tp/tests/qwen_gpu_test"
  local Q="$B/examples/qwen_tp/qwen_tp --model-preset qwen3-0.6b --tp 2 --prompt-tokens 300 --n-predict 32 --ubatch-size 512 --no-profile"
  step qwen_cli 60 $Q --output-ids "$L/serial.ids"
  step qwen_cli 60 $Q --prefill-overlap --output-ids "$L/overlap.ids"
  case " ${SKIP:-} " in *" qwen_cli "*) ;; *)
    if [ ! -s "$L/serial.ids" ] || [ ! -s "$L/overlap.ids" ]; then echo "# FAILED: a qwen_tp run wrote no ids" >> "$L/qwen_cli.txt"
    elif cmp -s "$L/serial.ids" "$L/overlap.ids"; then echo "# overlap ids == serial ids" >> "$L/qwen_cli.txt"
    else echo "# overlap ids differ from serial ids" >> "$L/qwen_cli.txt"; fi
    tail -1 "$L/qwen_cli.txt" ;;
  esac
  # The quantizer alone on normal data and on its own read-back (the in-place input); the fp8
  # encoder against its host definition and the compressed GPU tests (bitwise to the host).
  step compression 60 "$B/tests/gpu/quantize_gpu_bench" --count $((32 << 20)) --reps 20
  step compression 200 "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter='QuantizeGpu.*:*Compressed*'
  local P="$B/bench/allreduce_perf -g 2 -d bf16 -b 1M -e 16M -f 4 -w 5 -n 20 -K 5" c h
  for c in int8 fp8; do  # A B B A, each timing on the check's data (random normal with outliers)
    step compression 60 $P --compression $c -A staged_host -A staged_host+$c -A staged_host+$c -A staged_host
    step compression 60 ${P/-e 16M/-e 4M} --compression $c -A twoshot_p2p -A twoshot_p2p+$c -A twoshot_p2p+$c -A twoshot_p2p
  done
  # One thread capturing both ranks' graphs (-g 2 -G), then the halves in graphs and eager
  # (staged_host on GPU ranks is all-reduce only): the protocols' one-GPU floor.
  step halves 60 "$B/bench/allreduce_perf" -g 2 -d bf16 -b 8 -e 1M -f 8 -G 20 -A auto
  for h in reduce_scatter all_gather; do
    step halves 60 "$B/bench/${h}_perf" -g 2 -d bf16 -b 8 -e 64M -f 4 -G 20 -A auto
    step halves 60 "$B/bench/${h}_perf" -g 2 -d bf16 -b 8 -e 64M -f 4 -A auto
  done
  # Small-message reduce-scatter / all-gather (ll_p2p): tests, then A B B A in graphs.
  step ll 300 "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter='*HalvesP2p*:*HalvesSkew*'
  for h in reduce_scatter all_gather; do
    step ll 60 "$B/bench/${h}_perf" -g 2 -d bf16 -b 8 -e 1M -f 8 -G 20 -A ll_p2p -A twoshot_p2p -A twoshot_p2p -A ll_p2p
  done
  # --tune on GPU ranks sharing the GPU, then allreduce_perf --vs-best on the measured
  # table (its own cache folder).
  step tune 240 bash "$root/tools/tune_gpu_test.sh" "$B/tools/tpcomm-doctor" "$B/bench/allreduce_perf" 4M
  # staged_host's copy-engine mode (docs/host_staged.md): its GPU tests, then allreduce_perf in
  # each mode of CE_MODES (MODE[:CHUNK[:SPLIT]], default SM CE CE SM), plain and +int8 / +fp8.
  if [ "${CE:-0}" = 1 ]; then
    [ "${CE_TESTS:-1}" = 0 ] || step ce 300 "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter='*StagedHostGpu*:*Compressed*'
    local m mode chunk split
    for m in ${CE_MODES:-0 1 1 0}; do
      IFS=: read -r mode chunk split <<< "$m"
      [ -z "$chunk" ] || chunk=TPCOMM_STAGED_CHUNK_BYTES=$chunk
      [ -z "$split" ] || split=TPCOMM_STAGED_CE_SPLIT=$split
      for c in ${CE_CODECS:-int8 fp8}; do
        step ce 90 env TPCOMM_STAGED_COPY_ENGINES=$mode $chunk $split "$B/bench/allreduce_perf" -g 2 -d bf16 \
          -b ${CE_MIN:-1M} -e ${CE_MAX:-64M} -f 4 -w 5 -n 20 -K 5 --compression $c -A staged_host -A staged_host+$c
      done
    done
  fi
  # staged_host and its int8 form over TPCOMM_STAGED_BLOCKS, the CUDA blocks per role.
  if [ "${STAGED_SWEEP:-0}" = 1 ]; then
    local nb
    for nb in 16 32 64 128; do
      step staged_sweep 90 env TPCOMM_STAGED_BLOCKS=$nb "$B/bench/allreduce_perf" -g 2 -d bf16 -b 1M -e 16M -f 4 \
        -w 5 -n 20 -K 5 --compression int8 -A staged_host -A staged_host+int8
    done
  fi
  # The medium itself (hostmem_bench: SM loads and stores of pinned host memory against the copy
  # engines), then staged_host(+int8) at 16 MB over slots x chunk bytes, A B B A each.
  if [ "${STAGED_PROBE:-0}" = 1 ]; then
    step staged_probe 120 "$B/tests/gpu/hostmem_bench" --count $((64 << 20)) --reps 10
    local geo
    for geo in "1M 4" "1M 8" "1M 16" "4M 4" "4M 8" "256K 16"; do
      set -- $geo
      step staged_probe 60 env TPCOMM_STAGED_CHUNK_BYTES=$1 TPCOMM_STAGED_SLOTS=$2 "$B/bench/allreduce_perf" -g 2 \
        -d bf16 -b 16M -e 16M -w 5 -n 20 -K 5 --compression int8 -A staged_host -A staged_host+int8 \
        -A staged_host+int8 -A staged_host
    done
  fi
  finish
}

cmd_bench() {
  local PART=${PART:-all} P="$MPI $B/bench/allreduce_perf -d bf16" h
  environment
  [ -x "$B/bench/allreduce_perf" ] && [ -x "$B/bench/all_gather_perf" ] || gpu_build
  if [ "$PART" = all ] || [ "$PART" = allreduce ]; then
    # The full-range tables (auto vs NCCL, 8 B..1 GB) carry the targets; the per-algorithm ones stop
    # at 64 MB (a forced algorithm past its limit falls back to the choice the auto table shows).
    step graph 120 $P -c 1 -b 8 -e 1G -f 2 -G 20 -A auto -A nccl --json "$L/graph.json"
    step graph_algos 90 $P -c 1 -b 8 -e 64M -f 2 -G 20 -A lamport_p2p -A oneshot_p2p -A twoshot_p2p -A nccl --json "$L/graph_algos.json"
    step eager 120 $P -c 1 -b 8 -e 1G -f 2 -A auto -A staged_host -A nccl --json "$L/eager.json"
    step eager_algos 90 $P -c 1 -b 8 -e 64M -f 2 -A lamport_p2p -A oneshot_p2p -A twoshot_p2p -A nccl --json "$L/eager_algos.json"
    step oneproc 50 "$B/bench/allreduce_perf" -d bf16 -c 1 -g 2 -b 8 -e 64M -f 4 -A auto -A nccl
    step fused 50 $P -c 1 --fused-rmsnorm -G 20
  fi
  if [ "$PART" = all ] || [ "$PART" = halves ]; then
    for h in reduce_scatter all_gather; do
      step "$h" 90 $MPI "$B/bench/${h}_perf" -d bf16 -c 1 -b 8 -e 64M -f 4 -A auto -A nccl --json "$L/$h.json"
      step "${h}_graph" 90 $MPI "$B/bench/${h}_perf" -d bf16 -c 1 -b 8 -e 64M -f 4 -G 20 -A auto -A nccl
      # ll_p2p (to 512 KB) against two-shot and NCCL in graphs, order alternated (A B C C B A)
      step "${h}_small_graph" 90 $MPI "$B/bench/${h}_perf" -d bf16 -c 1 -b 8 -e 512K -f 4 -G 20 \
        -A ll_p2p -A twoshot_p2p -A nccl -A nccl -A twoshot_p2p -A ll_p2p
    done
  fi
  [ "$PART" = tune ] && bench_tune
  [ "$PART" = compression ] && bench_compression
  { [ "$PART" = all ] || [ "$PART" = qwen ]; } && bench_qwen
  local f
  for f in graph graph_algos eager eager_algos oneproc reduce_scatter reduce_scatter_graph all_gather all_gather_graph; do
    [ -f "$L/$f.txt" ] || continue
    echo "== $f"; sed -n '/Side by side/,/^#$/p' "$L/$f.txt" | head -34; grep -aE "Out of bounds" "$L/$f.txt" | sort | uniq -c | head -3
  done
  [ -f "$L/fused.txt" ] && grep -a "^#  rows\|^ *[0-9]" "$L/fused.txt" | tail -11
  for f in "$L"/qwen_*.txt; do [ -f "$f" ] && { echo "== $(basename "$f")"; grep -aE "eval time|acceptance|roofline|decode step" "$f"; }; done
  finish
}

# Measured selection: auto vs the best single algorithm with the model only,
# tpcomm-doctor --tune into a fresh cache, the same table again with the measured selection.
bench_tune() {
  export XDG_CACHE_HOME=$L/cache  # a fresh cache: the tuning file written now, and only it
  local V="$MPI -x XDG_CACHE_HOME -x TPCOMM_TUNE -x TPCOMM_DEBUG -x TPCOMM_DEBUG_SUBSYS $B/bench/allreduce_perf -d bf16 -c 1 -b 8 -e 256M -f 4"
  local VA="-A auto -A lamport_p2p -A oneshot_p2p -A twoshot_p2p -A staged_host -A ring_nccl --vs-best" f
  TPCOMM_TUNE=0 TPCOMM_DEBUG=WARN TPCOMM_DEBUG_SUBSYS=ALL step tune_model 150 $V $VA --json "$L/tune_model.json"
  step tune 240 "$B/tools/tpcomm-doctor" --tune --tune-seconds 200
  TPCOMM_TUNE=1 TPCOMM_DEBUG=INFO TPCOMM_DEBUG_SUBSYS=INIT,TUNE step tune_measured 150 $V $VA --json "$L/tune_measured.json"
  cp "$XDG_CACHE_HOME/tpcomm/tune.json" "$L/" 2>/dev/null || true
  for f in tune_model tune_measured; do echo "== $f"; sed -n '/auto vs the best/,/^#$/p' "$L/$f.txt"; done
  grep -a "tuning file:" "$L/tune_measured.txt" | head -2
}

# The compressed all-reduce on two GPUs (~6 min): twoshot_p2p against its +fp8 / +int8 forms and NCCL, 1-256 MB,
# order alternated; staged_host with the SM kernel (TPCOMM_STAGED_COPY_ENGINES=0) and the copy
# engines (=1), plain and +int8 / +fp8, modes A B B A across processes.
bench_compression() {
  step compressed_twoshot 150 $MPI "$B/bench/allreduce_perf" -d bf16 -c 1 -b 1M -e 256M -f 4 -w 5 -n 20 -K 5 \
    --compression int8 -A twoshot_p2p -A twoshot_p2p+fp8 -A twoshot_p2p+int8 -A nccl -A nccl -A twoshot_p2p+int8 \
    -A twoshot_p2p+fp8 -A twoshot_p2p
  local i=0 mode f
  for mode in 0 1 1 0; do
    i=$((i + 1))
    step "staged_ce${mode}_$i" 90 $MPI -x TPCOMM_STAGED_COPY_ENGINES=$mode "$B/bench/allreduce_perf" -d bf16 -c 1 \
      -b 1M -e 64M -f 4 -w 5 -n 20 -K 5 --compression int8 -A staged_host -A staged_host+int8 -A staged_host+fp8
  done
  for f in "$L"/compressed_twoshot.txt "$L"/staged_ce*.txt; do echo "== $(basename "$f")"; sed -n '/Side by side/,/^#$/p' "$f" | head -12; done
}

# The Qwen3-32B TP=2 matrix (examples/qwen_tp). The decoder's own choices first (tpcomm auto, MTP
# off, 128 tokens): GEMMs of <= 8 tokens on cuBLAS, the custom GEMV or the stream, kernels with or without
# PDL; the matrix runs with the fastest by decode tok/s (the four picks stay in the logs).
bench_qwen() {
  local Q="$B/examples/qwen_tp/qwen_tp --model-preset qwen3-32b --tp 2 --prompt-tokens 512 --n-predict 256 --ctx-size 1024"
  local best=0 X="" g p f t ar a
  tps() { grep -a "^ *eval time" "$1" | head -1 | sed -E 's/.*, *([0-9.]+) tokens per second.*/\1/'; }
  for g in cublas custom stream; do for p in pdl no-pdl; do
    f=""; [ $p = no-pdl ] && f=--no-pdl
    step "qwen_pick_${g}_$p" 40 $Q --n-predict 128 --allreduce auto --gemv $g $f --no-profile
    t=$(tps "$L/qwen_pick_${g}_$p.txt"); echo "  $g $p: ${t:-?} tok/s"
    if [ -n "$t" ] && awk "BEGIN{exit !($t > $best)}"; then best=$t; X="--gemv $g $f"; fi
  done; done
  echo "matrix flags: $X"
  for ar in auto nccl staged_host; do
    step "qwen_${ar}_off" 60 $Q $X --allreduce $ar
    # The field report's regime: accepted/drafted 0.485 with fixed 5-token drafts.
    step "qwen_${ar}_field" 60 $Q $X --allreduce $ar --spec-type draft-mtp --spec-draft-n-min 5 --spec-draft-n-max 5 \
      --sim-draft-acceptance 0.485 --no-profile
  done
  for a in 0.3 0.7; do
    step "qwen_auto_$a" 40 $Q $X --allreduce auto --spec-type draft-mtp --spec-draft-n-max 5 --sim-token-acceptance $a --no-profile
  done
  step qwen_nccl_eager_off 40 $Q $X --allreduce nccl --no-graphs
  step qwen_auto_eager_off 40 $Q $X --allreduce auto --no-graphs
}

cmd_compression() {
  export TPCOMM_ALLOW_SHARED_DEVICE=1 TPCOMM_TWOSHOT_BLOCKS=${TPCOMM_TWOSHOT_BLOCKS:-64}
  left() { echo $((230 - ($(date +%s) - T0))); }  # seconds left of the 4-minute budget (10 s margin)
  local tests="" heavy S T t
  if [ "${PREBUILT:-0}" = 1 ]; then
    gpu_build() { [ -x "$B/tests/gpu/tpcomm_gpu_tests" ] && [ -x "$B/bench/allreduce_perf" ] && [ -x "$B/tests/gpu/quantize_gpu_bench" ]; }
    S=Sizes/CompressedGpu.*; heavy="$S/14:$S/15:$S/30:$S/31:$S/46:$S/47:$S/62:$S/63:$S/78:$S/79"
    T=StagedSizes/CompressedGpu.*; heavy="$heavy:$S/94:$S/95:$T/7:$T/15:$T/23:$T/31"
    heavy="$heavy:$T/39:$T/47:CompressedGpuRules.SameBitsOverRotatingRuns"
    echo "# PREBUILT=1: binaries in $B built off-device from $COMMIT" >> "$L/compressed_gpu_tests.txt"
    # Every size but the largest first, before the timings, so a short budget checks every path.
    [ "${SKIP_TESTS:-0}" = 1 ] || step compressed_gpu_tests 60 "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter="*Compressed*:-$heavy"
    [ "${SKIP_TESTS:-0}" = 1 ] || tests=$heavy
  fi
  gpu_build allreduce_perf quantize_gpu_bench || { tail -40 "$L/build.log"; finish; return 1; }
  local P="$B/bench/allreduce_perf -g 2 -d bf16 -b 1M -e 16M -f 4 -n 20 -w 5 -K 5"
  step quantize_gpu 40 "$B/tests/gpu/quantize_gpu_bench" --count $((32 << 20)) --reps 20
  step compression_allreduce 80 $P --compression fp8 -A staged_host -A staged_host+fp8 -A staged_host+fp8 -A staged_host
  step compression_allreduce 60 ${P/-e 16M/-e 4M} --compression fp8 -A twoshot_p2p -A twoshot_p2p+fp8 -A twoshot_p2p+fp8 -A twoshot_p2p
  step compression_allreduce 80 $P --compression int8 -A staged_host -A staged_host+int8 -A staged_host+int8 -A staged_host
  if [ "${SKIP_TESTS:-0}" = 1 ]; then
    echo "# SKIP_TESTS=1: the compressed GPU tests were not run" >> "$L/compressed_gpu_tests.txt"
  elif gpu_build tpcomm_gpu_tests; then
    t=$(left); [ "$t" -lt 20 ] && t=20
    step compressed_gpu_tests "$t" "$B/tests/gpu/tpcomm_gpu_tests" --gtest_filter="${tests:-*Compressed*}"
  fi
  grep -a -A12 "Side by side" "$L/compression_allreduce.txt" | grep -a "^#" | head -40
  grep -a -E "^  (fp8|int8)" "$L/quantize_gpu.txt"
  grep -a -E "PASSED|FAILED|SKIPPED" "$L/compressed_gpu_tests.txt" | head -20
  finish
}

cmd_ab() {
  [ -d "$AB_BEFORE/src" ] || { echo "scripts/gpu.sh ab BEFORE: BEFORE must be a tpcomm source folder (got '$AB_BEFORE')"; return 2; }
  shared_gpu_env
  environment
  local A="${BUILD:-/tmp/tpcomm-gpu-build}-before" run k flags
  { cmake -S "$AB_BEFORE" -B "$A" -G Ninja -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DCMAKE_BUILD_TYPE=Release &&
    ninja -C "$A" -j"$(nproc)" allreduce_perf; } >> "$L/build_before.log" 2>&1 || { echo "before: build failed"; tail -20 "$L/build_before.log"; return 1; }
  gpu_build allreduce_perf || return 1
  echo "# A = $AB_BEFORE (built in $A), B = this tree ($COMMIT)" > "$L/ab.txt"
  for flags in "" "-G 20"; do
    k=0
    for run in "$A" "$B" "$B" "$A"; do  # A B B A, each its own process
      k=$((k + 1))
      step "ab${flags:+_graph}" 120 "$run/bench/allreduce_perf" -g 2 -d bf16 -b 8 -e 32M -f 4 -w 5 -n 20 -K 5 $flags \
        -A auto -A lamport_p2p -A oneshot_p2p -A twoshot_p2p -A staged_host
    done
  done
  for f in "$L"/ab.txt "$L"/ab_graph.txt; do echo "== $(basename "$f")"; grep -aE '^\$|^ +(8|8192|2097152|33554432) ' "$f"; done
  finish
}

# libtpcomm as the wheel builds it (-DSKBUILD=ON: CUDA runtime static, unversioned; no NCCL, MPI
# or shim), laid out with the Python package in a scratch site folder.
python_build() {
  B=${BUILD:-/tmp/tpcomm-py-build}
  SITE=/tmp/tpcomm-py-site
  cmake -S "$root" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
    -DSKBUILD=ON -DTPCOMM_WITH_NCCL=OFF -DTPCOMM_WITH_MPI=OFF -DTPCOMM_BUILD_SHIM=OFF -DTPCOMM_BUILD_TESTS=OFF \
    -DTPCOMM_BUILD_BENCH=OFF -DTPCOMM_BUILD_EXAMPLES=OFF -DTPCOMM_BUILD_TOOLS=OFF > "$L/python_gpu_build.log" 2>&1 &&
    ninja -C "$B" tpcomm >> "$L/python_gpu_build.log" 2>&1
  local rc=$?
  echo "libtpcomm build rc=$rc"
  [ $rc = 0 ] || { tail -20 "$L/python_gpu_build.log"; return 1; }
  rm -rf "$SITE" && mkdir -p "$SITE/tpcomm"
  cp -r "$root/python/tpcomm/." "$SITE/tpcomm/" && mkdir -p "$SITE/tpcomm/lib" && cp -L "$B/libtpcomm.so" "$SITE/tpcomm/lib/"
  echo "package laid out in $SITE"
}

cmd_python() {
  python_build || { finish; return 1; }
  [ "${PY_BUILD_ONLY:-0}" = 1 ] && { finish; return 0; }
  local n rc
  n=$(python3 -c "import torch; print(min(torch.cuda.device_count(), 2))")
  PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 step python_gpu_check 540 python3 -m torch.distributed.run \
    --nproc_per_node="$n" "$root/tests/python/torch_gpu_check.py" "$@"
  rc=$?
  grep -a "passed\|FAIL\|Error" "$L/python_gpu_check.txt" | tail -8
  [ $rc = 0 ] || python_crash_report > "$L/python_crash_repro.txt" 2>&1
  finish
  return $rc
}

# A failed check: one rank, torch imported first, full tpcomm log, native frames from gdb where the
# machine has it; the same without torch; which of libtpcomm's references bind outside it with
# torch loaded (a CUDA runtime or json symbol bound to torch's copy); and libtpcomm loaded first
# with RTLD_DEEPBIND (its own symbols first).
python_crash_report() {
  cat > /tmp/tpcomm_crash_repro.py <<'PY'
import faulthandler, sys, torch, tpcomm
faulthandler.enable(all_threads=True)
torch.cuda.set_device(0)
print("torch", torch.__version__, "cuda init", torch.cuda.is_initialized(), flush=True)
c = tpcomm.Communicator(1, tpcomm.get_unique_id(), 0, device=0)
print("created", c, flush=True)
PY
  head -1 "$L/python_gpu_check.txt"
  echo "# crash repro: torch imported first, one rank, TPCOMM_DEBUG=TRACE"
  if command -v gdb > /dev/null; then
    TPCOMM_DEBUG=TRACE PYTHONPATH="$SITE" gdb -batch -ex run -ex bt -ex "info sharedlibrary" \
      --args python3 /tmp/tpcomm_crash_repro.py 2>&1 | tail -150
  else
    echo "(no gdb on this machine: Python frames only)"
    TPCOMM_DEBUG=TRACE PYTHONPATH="$SITE" python3 -X faulthandler /tmp/tpcomm_crash_repro.py 2>&1 | tail -80
  fi
  echo "# without torch imported:"
  TPCOMM_DEBUG=TRACE PYTHONPATH="$SITE" python3 -X faulthandler -c \
    "import tpcomm; print(tpcomm.Communicator(1, tpcomm.get_unique_id(), 0, device=0))" 2>&1 | tail -20
  echo "# libtpcomm's references bound to another library (LD_DEBUG=bindings, torch first):"
  PYTHONPATH="$SITE" LD_DEBUG=bindings LD_DEBUG_OUTPUT=/tmp/tpcomm_ld python3 /tmp/tpcomm_crash_repro.py > /dev/null 2>&1
  cat /tmp/tpcomm_ld.* 2>/dev/null | grep "binding file .*libtpcomm.so" | grep -v "to .*libtpcomm.so" |
    sed 's/.*binding file //' | sort | uniq -c | sort -rn | head -60
  rm -f /tmp/tpcomm_ld.*
  echo "# torch first, libtpcomm preloaded with RTLD_DEEPBIND:"
  TPCOMM_DEBUG=TRACE PYTHONPATH="$SITE" python3 -X faulthandler -c "
import ctypes, os, torch
ctypes.CDLL('$SITE/tpcomm/lib/libtpcomm.so', mode=os.RTLD_LOCAL | os.RTLD_DEEPBIND)
import tpcomm
torch.cuda.set_device(0)
print('created with DEEPBIND', tpcomm.Communicator(1, tpcomm.get_unique_id(), 0, device=0))" 2>&1 | tail -20
}

# Two runs, each under a time bound so one slow part cannot eat the call; each run's stdout (one
# JSON line per measurement, flushed as it goes) stays in its log, so a run cut by its bound
# still leaves what it measured.
cmd_python_e2e() {
  python_build || { finish; return 1; }
  # The torch ops compile at first import: once here, not in two ranks at once.
  PYTHONPATH="$SITE" python3 -c "import torch, tpcomm.torch" > "$L/torch_ops_build.log" 2>&1 ||
    { tail -20 "$L/torch_ops_build.log"; finish; return 1; }
  echo "torch ops built in $(el)"
  local n left
  n=$(python3 -c "import torch; print(min(torch.cuda.device_count(), 2))")
  e2e() {  # NAME SECONDS ARGS...
    local name=$1 secs=$2; shift 2
    PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 step "torch_qwen_tp_$name" "$secs" python3 -m torch.distributed.run \
      --nproc_per_node="$n" "$root/bench/baselines/torch_qwen_tp.py" --preset qwen3-32b \
      --results "$OUTDIR/torch_qwen_tp_$name.txt" "$@"
    grep -a "^phase\|^decode\|^prefill\|^# greedy\|^# tpcomm's\|skipped\|failed\|Error" "$L/torch_qwen_tp_$name.txt" | head -40
  }
  e2e graph "${E2E_GRAPH_S:-240}" --modes eager,graph
  left=$((${E2E_TOTAL_S:-560} - $(date +%s) + T0))
  if [ "$left" -gt 60 ]; then e2e compile "$left" --modes compile --prefill "" --generate 0; else echo "compile: not run ($left s left)"; fi
  finish
}

case "$SUB" in
  tests) cmd_tests ;;
  shared) cmd_shared ;;
  bench) cmd_bench ;;
  compression) cmd_compression ;;
  ab) cmd_ab ;;
  python) cmd_python "$@" ;;
  python-e2e) cmd_python_e2e ;;
esac
