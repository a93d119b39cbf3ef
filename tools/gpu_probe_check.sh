#!/usr/bin/env bash
# gpu_probe_check.sh BUILD_DIR [NGPUS]: the topology probe on a GPU machine, for bench/results.
# Builds nothing. Runs tpcomm-doctor cold (TPCOMM_TOPO_CACHE=0, child process + P2P checks)
# and cached, timing both; a cold and a cached probeTopology + Communicator::createGroup over
# NGPUS GPUs (tpcomm_probe_timing); tpcomm-doctor --measure; and prints a Markdown block to
# paste into bench/results/<machine>.md. The cache goes to a scratch XDG_CACHE_HOME.
# Multicast stays off: NCCL_NVLS_ENABLE=0 etc. are forced here and never unset.
set -u
BUILD=${1:?usage: tools/gpu_probe_check.sh BUILD_DIR [NGPUS]}
NG=${2:-2}
DOC=$BUILD/tools/tpcomm-doctor
TIMING=$BUILD/tools/tpcomm_probe_timing
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XDG_CACHE_HOME=$(mktemp -d /tmp/tpcomm-probe-cache.XXXXXX)
OUT=$(mktemp -d /tmp/tpcomm-probe-out.XXXXXX)
[ -x "$DOC" ] || { echo "no $DOC (build target tpcomm-doctor)"; exit 1; }

ms() { date +%s%N; }
t0=$(ms); TPCOMM_TOPO_CACHE=0 "$DOC" > "$OUT/doctor_cold.txt" 2>&1; rc_cold=$?; t1=$(ms)
"$DOC" > "$OUT/doctor_cached.txt" 2>&1; rc_cached=$?; t2=$(ms)
"$DOC" --json > "$OUT/doctor.json" 2>&1
"$DOC" --measure --no-cache > "$OUT/doctor_measure.txt" 2>&1; rc_measure=$?
cold_ms=$(( (t1 - t0) / 1000000 )); cached_ms=$(( (t2 - t1) / 1000000 ))

timing_cold="(tpcomm_probe_timing not built)"; timing_cached="$timing_cold"
if [ -x "$TIMING" ]; then
  rm -rf "$XDG_CACHE_HOME"/tpcomm
  timing_cold=$(TPCOMM_DEBUG=INFO TPCOMM_DEBUG_SUBSYS=TOPO TPCOMM_NCCL=0 "$TIMING" "$NG" 2>&1)
  timing_cached=$(TPCOMM_DEBUG=INFO TPCOMM_DEBUG_SUBSYS=TOPO TPCOMM_NCCL=0 "$TIMING" "$NG" 2>&1)
fi

cat <<MD
## Topology probe ($(hostname), $(date -u +%Y-%m-%d))

driver $(cat /sys/module/nvidia/version 2>/dev/null || nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1),
$(nvcc --version 2>/dev/null | tail -1), command: \`tools/gpu_probe_check.sh $BUILD $NG\`

| what | result |
|---|---|
| tpcomm-doctor cold (TPCOMM_TOPO_CACHE=0: probe child + P2P checks), whole process | ${cold_ms} ms, exit $rc_cold |
| tpcomm-doctor cached, whole process | ${cached_ms} ms, exit $rc_cached |
| doctor's own probe line, cold | $(grep '^probe:' "$OUT/doctor_cold.txt") |
| doctor's own probe line, cached | $(grep '^probe:' "$OUT/doctor_cached.txt") |
| tpcomm-doctor --measure | exit $rc_measure |

probeTopology / createGroup over $NG GPUs, cold (cache emptied) then cached:
\`\`\`
$timing_cold
--- cached
$timing_cached
\`\`\`

tpcomm-doctor --measure:
\`\`\`
$(cat "$OUT/doctor_measure.txt")
\`\`\`
MD
echo "raw outputs (cold, cached, json, measure) in $OUT" >&2
# The probe's targets (2x H200: NVLink verified, cold probe < 2 s, cached < 50 ms), printed for
# the reader (not a gate):
[ "$NG" -ge 2 ] || exit 0
grep -qE "NVS?18 ok" "$OUT/doctor_cold.txt" && echo "check: NVLink x18 verified: yes" >&2 || echo "check: NVLink x18 verified: NO" >&2
grep -q "supported by the device, disabled by NCCL_NVLS_ENABLE=0" "$OUT/doctor_cold.txt" \
  && echo "check: multicast line: yes" >&2 || echo "check: multicast line: NO" >&2
