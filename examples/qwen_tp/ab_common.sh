# ab_common.sh: what decode_ab.sh, prefill_ab.sh and bench_h200x1.sh share, sourced after they set OUT, L (the log
# folder), BUDGET (seconds), T0 (start) and REV (the commit): pack (the logs into $OUT/logs.tgz at
# exit, unless PART=summary), left (seconds of the budget left), header (a log's commit, date,
# command and GPU lines) and run (one budgeted, logged step; its exit status in LAST_RC and as
# its own, 0 when skipped).
pack() { tar -czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null && rm -rf "$L"; }
# PART=summary: the table of the logs in $OUT/logs only. L=$OUT (bench_h200x1.sh): the logs stay
# as they are, nothing is packed or removed.
[ "${PART:-all}" = summary ] || [ "$L" = "$OUT" ] || trap pack EXIT

left() { echo $((BUDGET - ($(date +%s) - T0))); }
header() {  # header <log> <command...>
  local log=$1; shift
  { echo "# commit $REV"; echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "# command: $*";
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | sed 's/^/# gpu /'; } > "$log"
}
# run <name> <timeout s> <command...>: one log per name. Skipped when less than a third of the
# timeout (about what the step takes) is left of the budget; the timeout is cut to what is left.
run() {
  local name=$1 t=$2; shift 2
  local log=$L/$name.log lf
  lf=$(left)
  if [ "$lf" -lt $((t / 3)) ]; then echo "## skipped (budget: $lf s left, timeout $t): $*" >> "$L/skipped.log"; echo "$name skipped"; return; fi
  [ "$lf" -lt "$t" ] && t=$lf
  [ -f "$log" ] || header "$log" "$@"
  echo "## $(date -u +%H:%M:%S) $*" >> "$log"
  timeout "$t" "$@" >> "$log" 2>&1
  local rc=$?
  echo "## rc=$rc" >> "$log"
  echo "$name rc=$rc ($(left) s left)"
  LAST_RC=$rc
  return $rc
}
LAST_RC=0
