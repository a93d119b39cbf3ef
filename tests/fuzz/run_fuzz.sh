#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh <build-dir> [seconds-per-target] [target...]
# Fuzzes each libFuzzer target of tests/fuzz for a bounded time, starting from its seed corpus
# (read only: new inputs go to <build-dir>/tests/fuzz/work/<target>, crashes to
# <build-dir>/tests/fuzz/crashes/<target>). Exit status non-zero when a target found a crash,
# a leak, UB or a timeout; the reproducer's path is printed.
#   short run (scripts/test.sh, CI):  tests/fuzz/run_fuzz.sh build-asan 20
#   long run (by hand, one core each): TPCOMM_FUZZ_JOBS=2 tests/fuzz/run_fuzz.sh build-asan 3600
#   reproduce:                         build-asan/tests/fuzz/fuzz_params <crash-file>
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:?usage: run_fuzz.sh <build-dir> [seconds] [target...]}"
seconds="${2:-20}"
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_topology_json fuzz_algo_override fuzz_params fuzz_tuning_file fuzz_qwen_config fuzz_safetensors)
jobs="${TPCOMM_FUZZ_JOBS:-1}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/$t"
  if [ ! -x "$bin" ]; then
    echo "[tpcomm] fuzz: $bin not built (skipped)" >&2
    continue
  fi
  short="${t#fuzz_}"
  work="$build/tests/fuzz/work/$short" crashes="$build/tests/fuzz/crashes/$short"
  mkdir -p "$work" "$crashes"
  echo "[tpcomm] fuzz: $t for ${seconds}s (corpus $here/corpus/$short)" >&2
  # -timeout: one input may take 10 s at most; -rss_limit_mb: 2 GB; -max_len 64 KiB (the cache
  # cap is 4 MiB, but structure, not size, is what finds bugs; the seeds set longer inputs).
  par=()
  [ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
  if ! "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      "${par[@]}" -print_final_stats=1 -artifact_prefix="$crashes/" \
      "$work" "$here/corpus/$short" > "$build/tests/fuzz/$t.log" 2>&1; then
    echo "[tpcomm] fuzz: $t FAILED; log $build/tests/fuzz/$t.log; reproducer(s):" >&2
    ls -1 "$crashes" >&2 || true
    tail -40 "$build/tests/fuzz/$t.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$build/tests/fuzz/$t.log" | tail -2 >&2 || true
  fi
done
exit $status
