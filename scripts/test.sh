#!/usr/bin/env bash
# scripts/test.sh: README command (b). Installs what is missing, builds tpcomm with its tests,
# and runs every ctest label (cpu, mpi, gpu). GPU tests report "Skipped" on a machine without
# GPUs (exit code 77). Extra arguments go to ctest (e.g. -L cpu, -R selector).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

tpcomm_env
tpcomm_install_deps
tpcomm_configure -DTPCOMM_BUILD_TESTS=ON
tpcomm_build
cd "$BUILD_DIR"
log "ctest --output-on-failure $*"
ctest --output-on-failure "$@"
