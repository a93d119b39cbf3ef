# session_common.sh: the log helpers of the one-call GPU sessions (gpu_session.sh, draft_session.sh),
# sourced after REV (the commit), OUT (the log folder) and T0 (the start, date +%s) are set.
header() {  # header <file> <command text>: commit, date, command and GPU, opening a log
  { echo "# commit $REV"; echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "# command: $2"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu /'; } > "$1"
}
run() {  # run <log> <timeout s> <command...>: appends the command, its output and its rc to $OUT/<log>.log
  local log=$OUT/$1.log t=$2; shift 2
  echo "## $(date -u +%H:%M:%S) (+$(( $(date +%s) - T0 )) s) $*" >> "$log"
  timeout "$t" "$@" >> "$log" 2>&1
  local rc=$?
  echo "## rc=$rc" >> "$log"
  return $rc
}
