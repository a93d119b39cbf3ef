#!/usr/bin/env bash
# tests/python/setup_env.sh VENV STAGE LIBTPCOMM SOURCE: the ctest fixture of the python label.
# Makes a virtual environment of the tests' own under the build folder (numpy, pytest from PyPI;
# kept between runs) and stages the package as pip would install it: STAGE/tpcomm/ holds
# python/tpcomm/*.py and lib/libtpcomm.so (the library this build made).
set -euo pipefail
venv="$1" stage="$2" lib="$3" src="$4"
py="${TPCOMM_PYTHON:-python3}"
if ! "$venv/bin/python" -c "import numpy, pytest" 2>/dev/null; then
  rm -rf "$venv"
  if ! "$py" -m venv "$venv"; then
    # Debian's python3 keeps venv/ensurepip in a package of its own.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
      echo "[tpcomm] installing python$ver-venv" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python$ver-venv" </dev/null ||
        { apt-get update -q </dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python$ver-venv" </dev/null; }
      rm -rf "$venv"
      "$py" -m venv "$venv"
    else
      echo "[tpcomm] '$py -m venv' failed: install your distribution's python3-venv" >&2
      exit 1
    fi
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check numpy pytest </dev/null
fi
rm -rf "$stage/tpcomm"
mkdir -p "$stage/tpcomm/lib"
cp "$src"/python/tpcomm/*.py "$stage/tpcomm/"
cp "$lib" "$stage/tpcomm/lib/libtpcomm.so"
"$venv/bin/python" -c "import sys; sys.path.insert(0, '$stage'); import tpcomm; print('[tpcomm] python tests use', tpcomm.__file__, tpcomm.version())"
