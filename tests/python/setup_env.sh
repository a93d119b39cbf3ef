#!/usr/bin/env bash
# tests/python/setup_env.sh VENV STAGE LIBTPCOMM SOURCE [torch]: the ctest fixture of the python
# label (and, with `torch`, of the torch label). Makes a virtual environment of the tests' own
# under the build folder (numpy, pytest from PyPI; kept between runs) and stages the package as
# pip would install it: STAGE/tpcomm/ holds python/tpcomm (tpcomm.torch included) and
# lib/libtpcomm.so (the library this build made). With `torch` the environment gets torch too:
# from TPCOMM_TORCH_INDEX_URL when set (e.g. https://download.pytorch.org/whl/cpu, ~200 MB), else
# PyPI's wheel, which pulls the CUDA libraries (torch 2.15.0: 29 wheels, 2.8 GB, 5.3 GB
# installed; about 45 s to download and 60 s to install on the CI VM), and tokenizers, transformers
# and safetensors from PyPI.
set -euo pipefail
venv="$1" stage="$2" lib="$3" src="$4" extra="${5:-}"
py="${TPCOMM_PYTHON:-python3}"
want="import numpy, pytest"
[ "$extra" = torch ] && want="$want, torch"
if ! "$venv/bin/python" -c "$want" 2>/dev/null; then
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
  if [ "$extra" = torch ]; then
    echo "[tpcomm] installing torch into $venv${TPCOMM_TORCH_INDEX_URL:+ from $TPCOMM_TORCH_INDEX_URL}" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      ${TPCOMM_TORCH_INDEX_URL:+--index-url "$TPCOMM_TORCH_INDEX_URL"} torch </dev/null
  fi
fi
# The decoder's trainer (qwen_train_losses_torch runs it) builds its BPE with tokenizers, and its
# Hugging Face parity test (qwen_hf_parity_torch) runs transformers (safetensors with it), from PyPI
# (a kept environment gets them too, without reinstalling torch).
if [ "$extra" = torch ] && ! "$venv/bin/python" -c "import tokenizers, transformers, safetensors" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check tokenizers transformers safetensors </dev/null
fi
rm -rf "$stage/tpcomm"
mkdir -p "$stage/tpcomm/lib"
# The whole package, subpackages included (tpcomm.torch and its C++ source), as pip installs it.
(cd "$src/python" && find tpcomm -name __pycache__ -prune -o -type f -print | while read -r f; do
  mkdir -p "$stage/$(dirname "$f")" && cp "$f" "$stage/$f"
done)
cp "$lib" "$stage/tpcomm/lib/libtpcomm.so"
"$venv/bin/python" -c "import sys; sys.path.insert(0, '$stage'); import tpcomm; print('[tpcomm] python tests use', tpcomm.__file__, tpcomm.version())"
