#!/usr/bin/env bash
# scripts/check_readme_params.sh: fails when README.md's environment table and the one params
# table (TPCOMM_PARAM_TABLE in src/common/params.h) differ in names or defaults.
# Plain bash + sed: runs on a fresh machine without Python.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
code=$(sed -n 's/^ *X([A-Za-z0-9]*, *"\([A-Z0-9_]*\)", *"\([^"]*\)".*/TPCOMM_\1=\2/p' "$root/src/common/params.h" | sort)
readme=$(sed -n 's/^| `\(TPCOMM_[A-Z0-9_]*\)` | \(`\([^`]*\)`\|(empty)\) |.*/\1=\3/p' "$root/README.md" | sort)
if [ -z "$code" ]; then
  echo "check_readme_params: found no X(...) rows in src/common/params.h" >&2
  exit 1
fi
if [ "$code" != "$readme" ]; then
  echo "README.md's environment table does not match TPCOMM_PARAM_TABLE (< params.h, > README.md):" >&2
  diff <(echo "$code") <(echo "$readme") >&2 || true
  exit 1
fi
echo "check_readme_params: $(echo "$code" | wc -l) parameters match"
