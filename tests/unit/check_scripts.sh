#!/bin/bash
# check_scripts.sh [ROOT]: every shell script the repository tracks parses (bash -n), so a quoting
# slip in a device-only script (run on the GPU machine, never in CI) fails here, not in a device
# call (ctest scripts_check, label cpu).
# check_scripts.sh --self-test: a script with an unbalanced quote inside a single-quoted awk
# program must fail the check, and the same script fixed must pass.
set -u
check() {  # check FILE...: prints each file that does not parse; returns 1 if any
  local fail=0 f
  for f in "$@"; do
    bash -n "$f" 2> /tmp/check_scripts.$$ || { echo "check_scripts: $f does not parse:" >&2; cat /tmp/check_scripts.$$ >&2; fail=1; }
  done
  rm -f /tmp/check_scripts.$$
  return $fail
}
if [ "${1:-}" = --self-test ]; then
  d=$(mktemp -d)
  trap 'rm -rf "$d"' EXIT
  printf '%s\n' "awk '/decode step's line/ { print }' f" > "$d/bad.sh"
  printf '%s\n' "awk '/decode step.s line/ { print }' f" > "$d/good.sh"
  if check "$d/bad.sh" 2> /dev/null; then echo "check_scripts --self-test: the broken script passed" >&2; exit 1; fi
  check "$d/good.sh" || { echo "check_scripts --self-test: the fixed script failed" >&2; exit 1; }
  echo "check_scripts --self-test: a broken script fails, its fix passes"
  exit 0
fi
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1
mapfile -t files < <(git ls-files '*.sh' 2> /dev/null || find . -name '*.sh' -not -path './build*' -not -path './third_party/*')
[ ${#files[@]} -gt 0 ] || { echo "check_scripts: no shell scripts found under $root" >&2; exit 1; }
check "${files[@]}" || exit 1
echo "check_scripts: ${#files[@]} shell scripts parse"
