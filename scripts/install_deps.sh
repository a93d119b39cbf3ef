#!/usr/bin/env bash
# scripts/install_deps.sh: installs the Debian/Ubuntu packages tpcomm builds against, only those
# that are missing, and only when it can (root, or passwordless sudo). The CUDA toolkit (with
# NCCL) is not installed here: without it tpcomm builds its host-only library.
set -euo pipefail

PACKAGES=(build-essential cmake ninja-build libopenmpi-dev openmpi-bin nlohmann-json3-dev libgtest-dev libbenchmark-dev)
# The sanitizer and fuzz stages of scripts/test.sh (clang, ASan/UBSan/libFuzzer runtimes), only
# when one of them is on (TPCOMM_SANITIZE=1, TPCOMM_FUZZ_SECONDS=N, or TPCOMM_TEST_ALL=1 as in CI).
if [ "${TPCOMM_SANITIZE:-0}" = 1 ] || [ "${TPCOMM_FUZZ_SECONDS:-0}" != 0 ] ||
   [ "${TPCOMM_TEST_ALL:-0}" = 1 ]; then
  PACKAGES+=(clang libclang-rt-14-dev)
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "[tpcomm] not a Debian-based system: install these yourself if the build fails: ${PACKAGES[*]}" >&2
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[tpcomm] system packages: all present" >&2
  exit 0
fi

if [ "$(id -u)" = 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "[tpcomm] missing packages and no root/sudo to install them: ${missing[*]}" >&2
  echo "[tpcomm] run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "[tpcomm] missing packages but no apt-get: ${missing[*]}" >&2
  exit 1
fi

echo "[tpcomm] installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q </dev/null
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
