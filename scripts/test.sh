#!/usr/bin/env bash
# scripts/test.sh: README command (b). Installs what is missing, builds tpcomm with its tests and
# runs them; at the end it prints every stage: ran (how long, passed or failed) or skipped (why).
# Extra arguments go to the main ctest run (e.g. -L cpu, -R selector).
#
# Stages, in order:
#   build     install what is missing (TPCOMM_SKIP_DEPS=1: not), configure, build
#   ctest     every ctest label (cpu, mpi, fault, python, gpu) in parallel (TPCOMM_TEST_JOBS,
#             default: the core count), minus the slow tier below. GPU tests report "Skipped"
#             on a machine without GPUs (exit code 77): a skip is not a pass.
#   slow      TPCOMM_TEST_SLOW=1: the tests in SLOW_TESTS (`pip install .` from a clean clone
#             into a fresh virtual environment, which builds libtpcomm again): minutes on 2 cores
#   sanitize  TPCOMM_SANITIZE=1: the CPU, MPI and fault tests again under ASan + UBSan (clang,
#             $BUILD_DIR-asan; leaks inside Open MPI suppressed by library name,
#             tests/fuzz/lsan.supp; docs/reliability.md, "Sanitizers and fuzzing")
#   fuzz      TPCOMM_FUZZ_SECONDS=N (N > 0): the seed corpora replayed, then each parser target
#             fuzzed N seconds, in the same folder as sanitize
#   optional  one row each in OPTIONAL_STAGES below (its switch, its function, why it is off)
#
# TPCOMM_TEST_ALL=1 turns every stage on with CI's settings (slow, sanitize, fuzz 20 s each),
# except those set explicitly; .ci/run sets it. The default (none of them) is the command a
# user runs: about 10 minutes on a 2-core machine (README, "Two commands").
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ALL="${TPCOMM_TEST_ALL:-0}"
on_in_all() { [ "$ALL" = 1 ] && echo "$1" || echo "$2"; }
SLOW="${TPCOMM_TEST_SLOW:-$(on_in_all 1 0)}"
SANITIZE="${TPCOMM_SANITIZE:-$(on_in_all 1 0)}"
FUZZ_SECONDS="${TPCOMM_FUZZ_SECONDS:-$(on_in_all 20 0)}"
export TPCOMM_SANITIZE="$SANITIZE" TPCOMM_FUZZ_SECONDS="$FUZZ_SECONDS"  # install_deps.sh reads them
JOBS="${TPCOMM_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}"

# The slow tier, by ctest name (a regular expression): run by TPCOMM_TEST_SLOW=1 (CI), not by default.
SLOW_TESTS='^python_pip_install$'

# Optional stages: "switch|function|why it is off by default". A stage runs when its switch (an
# environment variable) is 1 (.ci/run exports the switches CI wants); its function runs in a
# subshell under `set -e`, in the repository root, and fails the run by failing. Add a row and a
# function; the summary lists the stage either way.
OPTIONAL_STAGES=(
  "TPCOMM_TEST_TORCH|torch_stage|minutes: downloads torch (about 2.8 GB from PyPI) into a virtual environment"
  "TPCOMM_TEST_MUTATION|mutation_stage|rebuilds once per deliberate break of a reduction, a bound or an error path"
)
# CI's optional stages: on with TPCOMM_TEST_ALL=1 unless set.
export TPCOMM_TEST_TORCH="${TPCOMM_TEST_TORCH:-$(on_in_all 1 0)}"
export TPCOMM_TEST_MUTATION="${TPCOMM_TEST_MUTATION:-$(on_in_all 1 0)}"

# The torch tests (label torch, tests/python/CMakeLists.txt): 22 tests of tpcomm.torch on CPU
# tensors, gloo and host ranks, in a virtual environment with torch; any skip fails there.
torch_stage() {
  cmake -S "$TPCOMM_ROOT" -B "$BUILD_DIR" -DTPCOMM_TEST_TORCH=ON >/dev/null
  (cd "$BUILD_DIR" && ctest --output-on-failure -L torch)
}

# The mutation check's CI handful (scripts/mutants.py, ci=True): each puts one fixed defect back
# (a reduction, a bound, an error path), rebuilds what it touches and requires a test to fail;
# the checkout is restored after each.
mutation_stage() {
  python3 "$TPCOMM_ROOT/scripts/mutation_check.py" "$BUILD_DIR" --ci --jobs "${TPCOMM_JOBS:-$JOBS}" \
    --log "$BUILD_DIR/mutation_ci.log"
}

SUMMARY=()
FAILED=0
T_START=$SECONDS

# Runs "$@" as stage $1 in a subshell with errexit on; records the time and the outcome.
stage() {
  local name="$1" t0=$SECONDS rc
  shift
  log "stage $name"
  set +e
  (
    set -e
    "$@"
  )
  rc=$?
  set -e
  if [ "$rc" = 0 ]; then
    SUMMARY+=("ran      $(printf '%-9s' "$name") $((SECONDS - t0)) s, passed")
  else
    SUMMARY+=("ran      $(printf '%-9s' "$name") $((SECONDS - t0)) s, FAILED (exit $rc)")
    FAILED=1
  fi
  return 0
}
skip() { SUMMARY+=("skipped  $(printf '%-9s' "$1") $2"); }

summary() {
  echo
  echo "[tpcomm] scripts/test.sh summary ($((SECONDS - T_START)) s in all, $(nproc 2>/dev/null || echo '?') cores, load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')):"
  local line
  for line in "${SUMMARY[@]}"; do echo "  $line"; done
  if [ "$FAILED" = 0 ]; then echo "[tpcomm] all stages that ran passed"; else echo "[tpcomm] FAILED: see the stages above"; fi
}

build_stage() {
  tpcomm_install_deps
  tpcomm_configure -DTPCOMM_BUILD_TESTS=ON
  tpcomm_build
}

ctest_stage() {
  cd "$BUILD_DIR"
  log "ctest --output-on-failure -j $JOBS -E '$SLOW_TESTS' $*"
  ctest --output-on-failure -j "$JOBS" -E "$SLOW_TESTS" "$@"
}

slow_stage() {
  cd "$BUILD_DIR"
  log "ctest --output-on-failure -R '$SLOW_TESTS'"
  ctest --output-on-failure -R "$SLOW_TESTS"
}

SAN_DIR="$BUILD_DIR-asan"
asan_options="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
sanitizer_env() {
  export ASAN_OPTIONS="$asan_options"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$TPCOMM_ROOT/tests/fuzz/lsan.supp:print_suppressions=0"
  if ! command -v clang++ >/dev/null 2>&1; then
    log "the sanitizer and fuzz stages need clang (scripts/install_deps.sh installs it when they are on)"
    return 1
  fi
  log "sanitizer build: cmake -C cmake/tpcomm_sanitize.cmake -B $SAN_DIR"
  cmake -C "$TPCOMM_ROOT/cmake/tpcomm_sanitize.cmake" -S "$TPCOMM_ROOT" -B "$SAN_DIR" -G Ninja >/dev/null
}

sanitize_stage() {
  sanitizer_env
  cmake --build "$SAN_DIR" -j "${TPCOMM_JOBS:-$(nproc 2>/dev/null || echo 2)}"
  # python: the interpreter is not instrumented; consumer_install rebuilds an outside project.
  log "ctest (ASan+UBSan) -L 'cpu|fault' -LE 'python|mpi' -E consumer_install"
  (cd "$SAN_DIR" && ctest --output-on-failure -L "cpu|fault" -LE "python|mpi" -E consumer_install)
  # Open MPI has no frame pointers: without the slow unwinder a leak inside it shows one frame
  # and its suppression (by library name) cannot match. Slow, so for the MPI tests only.
  log "ctest (ASan+UBSan) -L mpi"
  (cd "$SAN_DIR" && ASAN_OPTIONS="$asan_options:fast_unwind_on_malloc=0" \
     LSAN_OPTIONS="$LSAN_OPTIONS:fast_unwind_on_malloc=0" ctest --output-on-failure -L mpi)
}

fuzz_stage() {
  sanitizer_env
  cmake --build "$SAN_DIR" -j "${TPCOMM_JOBS:-$(nproc 2>/dev/null || echo 2)}" --target tpcomm_fuzzers
  (cd "$SAN_DIR" && ctest --output-on-failure -L fuzz)
  log "fuzzing each target for ${FUZZ_SECONDS}s (tests/fuzz/run_fuzz.sh)"
  bash "$TPCOMM_ROOT/tests/fuzz/run_fuzz.sh" "$SAN_DIR" "$FUZZ_SECONDS"
}

tpcomm_env
cd "$TPCOMM_ROOT"
stage build build_stage
if [ "$FAILED" != 0 ]; then
  skip ctest "the build failed"
  summary
  exit 1
fi
stage ctest ctest_stage "$@"
if [ "$SLOW" = 1 ]; then stage slow slow_stage; else skip slow "TPCOMM_TEST_SLOW=1 (or TPCOMM_TEST_ALL=1, CI) runs $SLOW_TESTS"; fi
if [ "$SANITIZE" = 1 ]; then stage sanitize sanitize_stage; else skip sanitize "TPCOMM_SANITIZE=1 (or TPCOMM_TEST_ALL=1, CI) runs it: a second, clang build"; fi
if [ "$FUZZ_SECONDS" != 0 ]; then stage fuzz fuzz_stage; else skip fuzz "TPCOMM_FUZZ_SECONDS=N (or TPCOMM_TEST_ALL=1, CI: 20) runs it"; fi
for row in "${OPTIONAL_STAGES[@]}"; do
  IFS='|' read -r switch fn why <<<"$row"
  if [ "${!switch:-0}" = 1 ]; then stage "$fn" "$fn"; else skip "$fn" "$switch=1 runs it: $why"; fi
done
summary
exit "$FAILED"
