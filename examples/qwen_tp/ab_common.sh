# ab_common.sh: what decode_ab.sh, prefill_ab.sh and bench_h200x1.sh share, sourced after they set OUT, L (the log
# folder), BUDGET (seconds), T0 (start) and REV (the commit): pack (the logs into $OUT/logs.tgz at
# exit, unless PART=summary), left (seconds of the budget left), header (a log's commit, date,
# command and GPU lines) and run (one budgeted, logged step; its exit status in LAST_RC and as
# its own, 0 when skipped).
# clocks_start: the GPU's SM and memory clocks, power, temperature and clock-event reasons every
# 250 ms while the script runs, into $L/clocks.csv (nvidia-smi's queries only read them; CLOCKS=0
# leaves it out): a sustained run's clocks beside an idle GPU's, for the summary.
CLOCK_PID=
clocks_start() {
  command -v nvidia-smi > /dev/null 2>&1 || return 0
  local q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu r
  for r in clocks_event_reasons.active clocks_throttle_reasons.active; do  # the reasons' name by driver
    nvidia-smi --query-gpu=$r --format=csv,noheader > /dev/null 2>&1 && { q=$q,$r; break; }
  done
  nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -lms 250 > "$L/clocks.csv" 2>&1 &
  CLOCK_PID=$!
}
pack() {
  [ -n "$CLOCK_PID" ] && kill "$CLOCK_PID" 2> /dev/null
  tar -czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null && rm -rf "$L"
}
# PART=summary: the table of the logs in $OUT/logs only. L=$OUT (bench_h200x1.sh): the logs stay
# as they are, nothing is packed or removed, no clocks sampled.
if [ "${PART:-all}" != summary ] && [ "$L" != "$OUT" ]; then
  trap pack EXIT
  [ "${CLOCKS:-1}" = 1 ] && clocks_start
fi
# clocks_summary: one line from $L/clocks.csv (the samples so far): SM clock min / median / max,
# power max, the samples under 95% of the highest SM clock, and the clock-event reasons seen.
clocks_summary() {
  [ -s "$L/clocks.csv" ] || return 0
  python3 - "$L/clocks.csv" << 'EOF'
import statistics, sys
rows = []
for line in open(sys.argv[1], errors="replace"):
    f = [x.strip() for x in line.split(",")]
    try:
        rows.append((float(f[1]), float(f[3]), f[5] if len(f) > 5 else ""))
    except (IndexError, ValueError):
        continue
if not rows:
    print("GPU clocks: no samples (" + open(sys.argv[1], errors="replace").readline().strip()[:120] + ")")
    sys.exit()
sm = [r[0] for r in rows]
low = [r for r in rows if r[0] < 0.95 * max(sm)]
top = max(r[1] for r in rows)
hot = [r[0] for r in rows if r[1] >= 0.9 * top]  # the heaviest phases (prefill's products, not decode)
reasons = sorted({r[2] for r in rows if r[2] not in ("", "0x0000000000000000", "0x0000000000000001")})
print("GPU clocks over the call (%d samples, 250 ms apart): SM %.0f / %.0f / %.0f MHz (min / median / max), power up "
      "to %.0f W; at 90%% of that power or more (%d samples) SM median %.0f, min %.0f MHz; %d samples under 95%% of "
      "the highest SM clock; clock-event reasons other than idle: %s"
      % (len(rows), min(sm), statistics.median(sm), max(sm), top, len(hot), statistics.median(hot), min(hot), len(low),
         " ".join(reasons) or "none"))
EOF
}

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
