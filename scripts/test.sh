#!/usr/bin/env bash
# scripts/test.sh: README command (b). Installs what is missing, builds tpcomm with its tests,
# and runs every ctest label (cpu, mpi, gpu). GPU tests report "Skipped" on a machine without
# GPUs (exit code 77). Extra arguments go to the main ctest run (e.g. -L cpu, -R selector).
#
# Then two more stages (docs/reliability.md, "Sanitizers and fuzzing"), each in its own build
# folder beside $BUILD_DIR and each opt-out:
#   TPCOMM_SANITIZE=0        skip: the CPU, MPI and fault tests again under ASan + UBSan
#                            (clang, $BUILD_DIR-asan; leaks inside Open MPI are suppressed by
#                            library name, tests/fuzz/lsan.supp)
#   TPCOMM_FUZZ_SECONDS=N    fuzz each parser target N seconds (default 20; 0 skips), after the
#                            seed corpora replayed in the same folder (ctest label fuzz)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

tpcomm_env
tpcomm_install_deps
tpcomm_configure -DTPCOMM_BUILD_TESTS=ON
tpcomm_build
(
  cd "$BUILD_DIR"
  log "ctest --output-on-failure $*"
  ctest --output-on-failure "$@"
)

SANITIZE="${TPCOMM_SANITIZE:-1}"
FUZZ_SECONDS="${TPCOMM_FUZZ_SECONDS:-20}"
[ "$SANITIZE" = 0 ] && [ "$FUZZ_SECONDS" = 0 ] && exit 0
if ! command -v clang++ >/dev/null 2>&1; then
  log "sanitizer/fuzz stages need clang (scripts/install_deps.sh installs it); set TPCOMM_SANITIZE=0 TPCOMM_FUZZ_SECONDS=0 to skip"
  exit 1
fi
SAN_DIR="$BUILD_DIR-asan"
log "sanitizer build: cmake -C cmake/tpcomm_sanitize.cmake -B $SAN_DIR"
cmake -C "$TPCOMM_ROOT/cmake/tpcomm_sanitize.cmake" -S "$TPCOMM_ROOT" -B "$SAN_DIR" -G Ninja >/dev/null
asan_options="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export ASAN_OPTIONS="$asan_options"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$TPCOMM_ROOT/tests/fuzz/lsan.supp:print_suppressions=0"
jobs="${TPCOMM_JOBS:-$(nproc 2>/dev/null || echo 2)}"
if [ "$SANITIZE" != 0 ]; then
  cmake --build "$SAN_DIR" -j "$jobs"
  # python: the interpreter is not instrumented; consumer_install rebuilds an outside project.
  log "ctest (ASan+UBSan) -L 'cpu|fault' -LE 'python|mpi' -E consumer_install"
  (cd "$SAN_DIR" && ctest --output-on-failure -L "cpu|fault" -LE "python|mpi" -E consumer_install)
  # Open MPI has no frame pointers: without the slow unwinder a leak inside it shows one frame
  # and its suppression (by library name) cannot match. Slow, so for the MPI tests only.
  log "ctest (ASan+UBSan) -L mpi"
  (cd "$SAN_DIR" && ASAN_OPTIONS="$asan_options:fast_unwind_on_malloc=0" \
     LSAN_OPTIONS="$LSAN_OPTIONS:fast_unwind_on_malloc=0" ctest --output-on-failure -L mpi)
fi
if [ "$FUZZ_SECONDS" != 0 ]; then
  cmake --build "$SAN_DIR" -j "$jobs" --target tpcomm_fuzzers
  (cd "$SAN_DIR" && ctest --output-on-failure -L fuzz)
  log "fuzzing each target for ${FUZZ_SECONDS}s (tests/fuzz/run_fuzz.sh)"
  bash "$TPCOMM_ROOT/tests/fuzz/run_fuzz.sh" "$SAN_DIR" "$FUZZ_SECONDS"
fi
