#!/usr/bin/env bash
# run_preload_checks.sh SHIM FRONT PROBE REAL_NCCL: CPU checks of libtpcomm_nccl.so as an
# LD_PRELOAD under a stand-in engine (engine_probe), no GPU needed:
#   - under the preload, the intercepted names bind to the shim and all others
#     (ncclGetVersion, ncclAllGather, ...) still to the engine's libnccl;
#   - every result code is the same with and without the preload, and with TPCOMM_SHIM=0;
#   - TPCOMM_NCCL_LIBRARY picks the real NCCL by path; a bad path makes the intercepted calls
#     fail with ncclSystemError and a message instead of recursing or crashing;
#   - libtpcomm_nccl_vllm.so (VLLM_NCCL_SO_PATH) resolves intercepted names to the shim and the
#     rest to libnccl.so.2, as vLLM's dlsym(handle, name) sees them.
set -uo pipefail
shim=$1 front=$2 probe=$3 real=$4
fail=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$probe" > "$tmp/plain" 2> "$tmp/plain.err"
LD_PRELOAD="$shim" TPCOMM_DEBUG=INFO "$probe" > "$tmp/pre" 2> "$tmp/pre.err"
LD_PRELOAD="$shim" TPCOMM_SHIM=0 "$probe" > "$tmp/off" 2> "$tmp/off.err"
LD_PRELOAD="$shim" TPCOMM_NCCL_LIBRARY="$real" TPCOMM_DEBUG=INFO "$probe" > "$tmp/path" 2> "$tmp/path.err"
LD_PRELOAD="$shim" TPCOMM_NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$probe" > "$tmp/bad" 2> "$tmp/bad.err"
"$probe" --front "$front" > "$tmp/front" 2> "$tmp/front.err"

shimname=$(basename "$shim")
bind() { sed -n "s/^bind $2 //p" "$tmp/$1"; }
rcs() { grep '^rc ' "$tmp/$1"; }

check "plain run: every name binds to libnccl" bash -c "! grep '^bind' '$tmp/plain' | grep -qv 'libnccl'"
for run in pre off path bad; do
  for name in ncclAllReduce ncclAllGather ncclCommInitAll ncclGroupStart; do
    check "$run: $name binds to the shim" test "$(bind $run $name)" = "$shimname"
  done
  for name in ncclGetVersion ncclBroadcast ncclGetErrorString; do
    check "$run: $name still binds to the engine's NCCL" bash -c "[[ '$(bind $run $name)' == libnccl* ]]"
  done
done
check "result codes equal with the preload" diff <(rcs plain) <(rcs pre)
check "result codes equal with TPCOMM_SHIM=0" diff <(rcs plain) <(rcs off)
check "result codes equal with TPCOMM_NCCL_LIBRARY" diff <(rcs plain) <(rcs path)
check "default search logs where the real NCCL came from" grep -q "real NCCL [0-9]* from .*libnccl" "$tmp/pre.err"
check "TPCOMM_NCCL_LIBRARY is the source when set" grep -q "(TPCOMM_NCCL_LIBRARY=$real)" "$tmp/path.err"
check "bad TPCOMM_NCCL_LIBRARY: ncclGetVersion still works" grep -q '^rc ncclGetVersion 0 ' "$tmp/bad"
check "bad TPCOMM_NCCL_LIBRARY: intercepted calls fail with ncclSystemError (2)" grep -q '^rc ncclGroupStart 2$' "$tmp/bad"
check "bad TPCOMM_NCCL_LIBRARY: says why" grep -q "TPCOMM_NCCL_LIBRARY" "$tmp/bad.err"
for name in ncclAllReduce ncclAllGather ncclCommInitRank ncclGroupEnd; do
  check "vllm front: dlsym $name -> shim" grep -q "^front $name $shimname$" "$tmp/front"
done
for name in ncclGetVersion ncclBroadcast ncclGetUniqueId; do
  check "vllm front: dlsym $name -> libnccl" grep -q "^front $name libnccl" "$tmp/front"
done
if [ $fail -ne 0 ]; then
  for f in plain pre off path bad front; do echo "--- $f"; cat "$tmp/$f"; cat "$tmp/$f.err"; done
fi
exit $fail
