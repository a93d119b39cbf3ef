# scripts/common.sh: shared by run.sh and test.sh (sourced, not run). Installs what is missing,
# sets up the environment a fresh machine needs, and configures + builds tpcomm.
#
# Environment knobs:
#   BUILD_DIR                  build directory (default: build)
#   CMAKE_CUDA_ARCHITECTURES   e.g. 90 or "80;86;89;90;100;120" (every supported GPU); default:
#                              the GPUs present (native), else 90 (CMakeLists.txt says which)
#   TPCOMM_CUDA_ARCHS          same, read when CMAKE_CUDA_ARCHITECTURES is unset
#   TPCOMM_JOBS                build parallelism (default: nproc)
#   TPCOMM_SKIP_DEPS=1         do not look for or install system packages

set -euo pipefail

TPCOMM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$TPCOMM_ROOT/$BUILD_DIR" ;; esac

log() { echo "[tpcomm] $*" >&2; }

tpcomm_env() {
  # mpirun refuses root unless told; CI containers run as root with no stdin.
  if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Small machines (CI: 2 cores) run 4-rank tests: let Open MPI oversubscribe.
  export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
  # NVSwitch multicast stays off unless explicitly enabled (shared-machine safety rule).
  export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
  # A CUDA toolkit outside PATH (the usual /usr/local/cuda) is still found.
  if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
}

tpcomm_install_deps() {
  [ "${TPCOMM_SKIP_DEPS:-0}" = 1 ] && return 0
  bash "$TPCOMM_ROOT/scripts/install_deps.sh"
}

tpcomm_configure() {  # extra cmake arguments: "$@"
  local args=(-S "$TPCOMM_ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release)
  local archs="${CMAKE_CUDA_ARCHITECTURES:-${TPCOMM_CUDA_ARCHS:-}}"
  [ -n "$archs" ] && args+=("-DCMAKE_CUDA_ARCHITECTURES=$archs")
  log "cmake ${args[*]} $*"
  cmake "${args[@]}" "$@"
}

tpcomm_build() {  # targets: "$@" (none: all)
  local jobs="${TPCOMM_JOBS:-$(nproc 2>/dev/null || echo 2)}"
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  log "cmake --build $BUILD_DIR -j $jobs ${targets[*]:-}"
  cmake --build "$BUILD_DIR" -j "$jobs" "${targets[@]}"
}
