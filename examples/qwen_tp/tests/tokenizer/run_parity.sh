#!/usr/bin/env bash
# run_parity.sh PYTHON VENV OUTDIR TEST_BINARY: ctest qwen_tokenizer_hf_parity. Installs
# `tokenizers` into VENV (kept between runs), makes OUTDIR/tokenizer.json and reference.jsonl
# with make_reference.py, then runs the TokenizerHf tests of TEST_BINARY against them.
# Exit 77 (skipped) only when pip cannot reach the package registry.
set -euo pipefail
py="$1" venv="$2" out="$3" bin="$4"
here="$(cd "$(dirname "$0")" && pwd)"
if ! "$venv/bin/python" -c "import tokenizers" 2>/dev/null; then
  rm -rf "$venv"
  "$py" -m venv "$venv" || { echo "[qwen_tokenizer] '$py -m venv' failed: install python3-venv" >&2; exit 1; }
  if ! log=$("$venv/bin/python" -m pip install -q --disable-pip-version-check tokenizers </dev/null 2>&1); then
    echo "$log" >&2
    if grep -qiE "connection|resolve|network|unreachable|timed out|No matching distribution" <<<"$log"; then
      echo "[qwen_tokenizer] SKIPPED: pip could not get 'tokenizers' from the package registry (unreachable, or no wheel for this platform); the output above says which" >&2
      exit 77
    fi
    exit 1
  fi
fi
"$venv/bin/python" "$here/make_reference.py" --out "$out"
# The env variable is set, so the TokenizerHf tests run (they skip only without it).
QWEN_TOKENIZER_REF_DIR="$out" exec "$bin" --gtest_filter='TokenizerHf.*'
