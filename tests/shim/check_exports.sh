#!/usr/bin/env bash
# check_exports.sh SHIM FRONT: the drop-in exports exactly the NCCL names it intercepts (so
# under LD_PRELOAD every other NCCL function, ncclGetVersion included, stays the engine's) and
# links neither NCCL nor the shared CUDA runtime (so it cannot pull a second copy of either
# into the engine); the vLLM front exports nothing and needs the shim before libnccl.so.2.
set -uo pipefail
shim=$1 front=$2
fail=0
expected="ncclAllGather
ncclAllReduce
ncclCommAbort
ncclCommDestroy
ncclCommFinalize
ncclCommInitAll
ncclCommInitRank
ncclCommInitRankConfig
ncclCommSplit
ncclGroupEnd
ncclGroupStart
ncclReduceScatter"
actual=$(nm -D --defined-only "$shim" | awk '{print $NF}' | sort)
if [ "$actual" != "$expected" ]; then
  echo "FAIL $shim exports (< expected, > actual):"; diff <(echo "$expected") <(echo "$actual"); fail=1
else
  echo "ok   $shim exports exactly the 12 intercepted names"
fi
needed=$(readelf -d "$shim" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
if echo "$needed" | grep -Eq 'libnccl|libcudart|libtpcomm'; then
  echo "FAIL $shim needs: $needed"; fail=1
else
  echo "ok   $shim needs no NCCL, no shared CUDA runtime, no libtpcomm ($(echo $needed))"
fi
frontExports=$(nm -D --defined-only "$front" | awk '{print $NF}' | grep -c '^p\?nccl' || true)
if [ "$frontExports" != 0 ]; then echo "FAIL $front defines NCCL names"; fail=1; else echo "ok   $front defines no NCCL name"; fi
order=$(readelf -d "$front" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -E 'libtpcomm_nccl|libnccl' | tr '\n' ' ')
if [[ "$order" != "libtpcomm_nccl.so libnccl.so."* ]]; then
  echo "FAIL $front NEEDED order: $order (expected libtpcomm_nccl.so then libnccl.so.N)"; fail=1
else
  echo "ok   $front NEEDED: $order"
fi
exit $fail
