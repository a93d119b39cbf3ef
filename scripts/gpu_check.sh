#!/usr/bin/env bash
# scripts/gpu_check.sh [OUTDIR]: every GPU test on a machine with 1+ NVIDIA GPUs (the 2x H200
# run takes ~5 min): builds with Ninja into $BUILD (default /tmp/tpcomm-gpu-build), then runs
# tpcomm_gpu_tests (createGroup), tpcomm_gpu_mpi_tests (mpirun -np 2), qwen_gpu_test, the shim
# tests, the topology probe, the GEMV benchmark and one-rank (single-GPU overhead) tables, each
# under its own time limit; logs in OUTDIR/logs (default $OUT or ./gpu-logs), a one-line result
# per step. SKIP="name ..." leaves steps out; GPU_FILTER a gtest filter for tpcomm_gpu_tests. COMMIT=<hash> names the commit in the logs (the GPU
# machine's copy of .git can be stale, so callers pass it). Multicast stays off (docs/multicast.md): gpu_common.sh
# exports the variables for every child and mpirun forwards them.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
{ echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -2; nvidia-smi topo -m; echo "commit ${COMMIT:-$(git -C "$root" rev-parse HEAD)}"
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.nccl.version())"; mpirun --version | head -1; } > "$L/env.txt" 2>&1
gpu_build
step() {  # NAME SECONDS COMMAND...: runs it under a limit, prints rc and the summary lines
  local name=$1 t=$2; shift 2
  case " ${SKIP:-} " in *" $name "*) echo "$name skipped (SKIP)"; return 0 ;; esac
  echo "# commit ${COMMIT:-$(git -C "$root" rev-parse HEAD)}; date $(date -u +%Y-%m-%dT%H:%M:%SZ); command: $*" > "$L/$name.txt"
  timeout -k 5 "$t" "$@" >> "$L/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $(el) | $(grep -aE 'tests ran|PASSED|FAILED  \] [0-9]|ok  |FAIL|Passed|Failed|equal for' "$L/$name.txt" | tail -4 | tr '\n' ' ' | cut -c1-300)"
  [ "$rc" = 0 ] || failedSteps="$failedSteps $name"  # the run fails at the end: no step hidden
}
# One GPU runs the multi-rank cases with two ranks sharing it: ~300-400 s for the whole binary.
# GPU_FILTER=<gtest filter> runs a subset.
step gpu_tests "${GPU_TESTS_S:-$([ "$ngpu" -ge 2 ] && echo 300 || echo 540)}" "$B/tests/gpu/tpcomm_gpu_tests" ${GPU_FILTER:+--gtest_filter=$GPU_FILTER}
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
# Single-GPU overheads (issue 3's calibration): one rank on GPU 0, so the time is the per-call
# fixed cost (host path, launch, kernel) with no peer; NCCL's one-rank call beside it.
step one_gpu_eager 40 env CUDA_VISIBLE_DEVICES=0 "$B/bench/allreduce_perf" -g 1 -d bf16 -c 1 -b 8 -e 1M -f 4 -A auto -A nccl
step one_gpu_graph 40 env CUDA_VISIBLE_DEVICES=0 "$B/bench/allreduce_perf" -g 1 -d bf16 -c 1 -b 8 -e 1M -f 4 -G 20 -A auto -A nccl
grep -a "^\[  FAILED  \]" "$L"/gpu_tests.txt "$L"/gpu_mpi_tests.txt "$L"/qwen_gpu.txt 2>/dev/null | sort -u | head -12
tar czf "$OUTDIR/logs.tgz" -C "$OUTDIR" logs && rm -rf "$L"
echo "total $(el); logs: $OUTDIR/logs.tgz"
[ -z "${failedSteps:-}" ] || { echo "FAILED steps:$failedSteps"; exit 1; }
