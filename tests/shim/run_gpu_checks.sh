#!/usr/bin/env bash
# run_gpu_checks.sh MODE SHIM PROBE [MPIEXEC ARGS...]: runs engine_allreduce in MODE (--initall:
# llama.cpp's shape; --mpi: PyTorch's, under the given mpiexec command) three times: without
# the preload, with LD_PRELOAD=libtpcomm_nccl.so (TPCOMM_DEBUG=INFO), and with the preload but
# TPCOMM_SHIM=0. Each run checks every element itself; then the outputs must be bitwise equal
# across the runs (same fnv per case), and the preloaded run's log must show tpcomm running
# some calls (a shim that never routes would pass the rest). Exit 77: no GPUs.
set -uo pipefail
mode=$1 shim=$2 probe=$3
shift 3
launcher=("$@")
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # run NAME ENV...
  local name=$1; shift
  env "$@" "${launcher[@]}" "$probe" "$mode" > "$tmp/$name" 2> "$tmp/$name.err"
  echo $? > "$tmp/$name.rc"
}
# A single-host mpiexec passes its environment (LD_PRELOAD included) to the ranks.
run plain TPCOMM_SHIM=1
rc=$(cat "$tmp/plain.rc")
if [ "$rc" = 77 ]; then cat "$tmp/plain"; exit 77; fi
run preload "LD_PRELOAD=$shim" TPCOMM_DEBUG=INFO TPCOMM_DEBUG_SUBSYS=INIT,COLL
run off "LD_PRELOAD=$shim" TPCOMM_SHIM=0
fail=0
for r in plain preload off; do
  if [ "$(cat "$tmp/$r.rc")" != 0 ]; then echo "FAIL $r run exited $(cat "$tmp/$r.rc")"; tail -n 20 "$tmp/$r" "$tmp/$r.err"; fail=1; fi
done
cases() { grep '^case ' "$tmp/$1" | sort; }
if ! diff <(cases plain) <(cases preload) > "$tmp/diff1"; then echo "FAIL outputs differ with the preload:"; head -20 "$tmp/diff1"; fail=1; fi
if ! diff <(cases plain) <(cases off) > "$tmp/diff2"; then echo "FAIL outputs differ with TPCOMM_SHIM=0:"; head -20 "$tmp/diff2"; fail=1; fi
n=$(cases plain | wc -l)
if [ "$n" -lt 100 ]; then echo "FAIL only $n cases ran"; fail=1; fi
if ! grep -Eq -- '-> (lamport|oneshot|twoshot)_p2p' "$tmp/preload.err"; then
  echo "FAIL the preloaded run never routed a call to tpcomm:"; grep libtpcomm_nccl "$tmp/preload.err" | head -20; fail=1
fi
grep 'libtpcomm_nccl' "$tmp/preload.err" | head -40
[ $fail = 0 ] && echo "ok   $mode: $n cases bitwise equal with and without the preload; tpcomm ran some"
exit $fail
