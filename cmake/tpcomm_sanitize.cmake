# cmake/tpcomm_sanitize.cmake: initial cache (cmake -C) for the sanitizer + fuzz build folder
# that scripts/test.sh configures beside the main one (docs/reliability.md, "Sanitizers and
# fuzzing"). Clang with AddressSanitizer + UndefinedBehaviorSanitizer (any UB report aborts the
# test), host-only (no CUDA), plus libFuzzer coverage instrumentation so that the same libraries
# serve the fuzz targets of tests/fuzz (TPCOMM_FUZZ). By hand:
#   cmake -C cmake/tpcomm_sanitize.cmake -S . -B build-asan -G Ninja
#   cmake --build build-asan && ctest --test-dir build-asan -L "cpu|mpi|fault" -LE python
set(CMAKE_C_COMPILER clang CACHE STRING "sanitizer build: clang")
set(CMAKE_CXX_COMPILER clang++ CACHE STRING "sanitizer build: clang")
set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "sanitizer build")
# -O1 and line tables only: the usual sanitizer setting, and a shorter build on CI's 2 cores;
# assertions stay on (no NDEBUG).
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only" CACHE STRING "sanitizer build")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only" CACHE STRING "sanitizer build")
set(_tpcomm_san "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer")
set(CMAKE_C_FLAGS "${_tpcomm_san} -fsanitize=fuzzer-no-link" CACHE STRING "sanitizer build")
set(CMAKE_CXX_FLAGS "${_tpcomm_san} -fsanitize=fuzzer-no-link" CACHE STRING "sanitizer build")
set(CMAKE_EXE_LINKER_FLAGS "-fsanitize=address,undefined" CACHE STRING "sanitizer build")
set(CMAKE_SHARED_LINKER_FLAGS "-fsanitize=address,undefined" CACHE STRING "sanitizer build")
set(TPCOMM_WITH_CUDA OFF CACHE BOOL "sanitizer build: host only")
set(TPCOMM_BUILD_BENCH OFF CACHE BOOL "sanitizer build")
set(TPCOMM_BUILD_TESTS ON CACHE BOOL "sanitizer build")
set(TPCOMM_BUILD_EXAMPLES ON CACHE BOOL "sanitizer build: qwen_tp_core for the decoder fuzz targets")
set(QWEN_TP_BUILD_TESTS OFF CACHE BOOL "sanitizer build: the decoder's tests run in the main build")
set(TPCOMM_FUZZ ON CACHE BOOL "sanitizer build: tests/fuzz")
