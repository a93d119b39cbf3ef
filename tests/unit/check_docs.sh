#!/usr/bin/env bash
# check_docs.sh [ROOT]: the documentation's rules, checked (ctest docs_check, label cpu).
#   1. README.md, CHANGELOG.md, docs/, bench/results/*.md and the sources say what the code is,
#      not when it was written: nothing matches the pattern "session <digit>" (any case).
#   2. Every link into bench/results from README.md, CHANGELOG.md, docs/*.md, examples/*/README.md
#      and the results pages resolves to a file that is there (a results page names a raw log
#      for every row; the log must exist).
#   3. bench/results holds only <machine>.md pages and raw/<machine>/<name>.gz|.xz logs, every raw
#      log is cited by a results page, every raw folder has its page, and the folder stays
#      within its budget (2 MiB).
#   4. README.md's environment table equals TPCOMM_PARAM_TABLE (scripts/check_readme_params.sh).
# check_docs.sh --self-test: builds a small tree that passes, then breaks each rule in turn and
# expects a failure (ctest docs_check_can_fail): a check that cannot fail proves nothing. (The
# planted references are split in two quoted halves so that this file does not match itself.)
# Plain bash, grep and sed: runs on a fresh machine without Python.
set -uo pipefail

budget=$((2 * 1024 * 1024))

check() {
  local root=$1 fail=0 f
  cd "$root" || return 2

  # 1. No work-period references. The pattern is spelled with a class so this file does not match.
  local pat='[s]essions? [0-9]'
  local where=()
  for f in README.md CHANGELOG.md docs src include tests bench tools examples python scripts \
           CMakeLists.txt cmake pyproject.toml; do
    [ -e "$f" ] && where+=("$f")
  done
  local hits
  hits=$(grep -rniIE --exclude-dir=raw --exclude-dir=.git "$pat" "${where[@]}" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "check_docs: work-period references (say what the code does and why, not when):" >&2
    echo "$hits" | head -40 >&2
    fail=1
  fi

  # 2. Links into bench/results resolve.
  local md target dir path
  local mds=()
  for f in README.md CHANGELOG.md docs/*.md examples/*/README.md bench/results/*.md; do
    [ -f "$f" ] && mds+=("$f")
  done
  for md in "${mds[@]}"; do
    dir=$(dirname "$md")
    # markdown link targets, then plain mentions of bench/results paths (relative to the root)
    while IFS= read -r target; do
      target=${target%%#*}
      [ -z "$target" ] && continue
      case "$target" in http://*|https://*|mailto:*) continue ;; esac
      path=$(realpath -m --relative-to="$root" "$dir/$target")
      case "$path" in
        bench/results|bench/results/*)
          [ -e "$path" ] || { echo "check_docs: $md links to $target, which is not there" >&2; fail=1; } ;;
      esac
    done < <(grep -oE '\]\([^) ]+\)' "$md" | sed 's/^](//; s/)$//')
    while IFS= read -r path; do
      path=${path%.}
      [ -e "$path" ] || { echo "check_docs: $md names $path, which is not there" >&2; fail=1; }
    done < <(grep -oE '(^|[^./A-Za-z0-9_-])bench/results/[A-Za-z0-9_./-]+\.(md|gz|xz|txt|log|json|png)' "$md" |
             sed -E 's/^[^b]*//')
  done

  # 3. Layout, citations, budget.
  if [ -d bench/results ]; then
    local cited
    cited=$(cd bench/results && for f in *.md; do
              [ -f "$f" ] && grep -oE '\]\(raw/[^) ]+\)' "$f" | sed 's/^](//; s/)$//; s/#.*//'
            done | sort -u)
    while IFS= read -r f; do
      case "$f" in
        ./*.md) ;;
        ./raw/*/*.gz|./raw/*/*.xz)
          local machine rel
          rel=${f#./}
          machine=$(echo "$rel" | cut -d/ -f2)
          [ -f "bench/results/$machine.md" ] ||
            { echo "check_docs: bench/results/$rel has no results page bench/results/$machine.md" >&2; fail=1; }
          grep -qxF "$rel" <<<"$cited" ||
            { echo "check_docs: bench/results/$rel is cited by no results page (cite it or remove it)" >&2; fail=1; } ;;
        *) echo "check_docs: bench/results/${f#./} is neither a results page nor a compressed raw log under raw/<machine>/" >&2
           fail=1 ;;
      esac
    done < <(cd bench/results && find . -type f | sort)
    local size
    size=$(du -sb bench/results | cut -f1)
    if [ "$size" -gt "$budget" ]; then
      echo "check_docs: bench/results holds $size bytes, over its budget of $budget" >&2
      fail=1
    fi
  fi

  # 4. The environment table.
  if ! bash scripts/check_readme_params.sh > /dev/null; then
    bash scripts/check_readme_params.sh >&2
    fail=1
  fi

  return $fail
}

self_test() {
  local here t rc=0
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  t=$(mktemp -d)
  trap 'rm -rf "$t"' RETURN
  make_tree() {
    rm -rf "$t/r" && mkdir -p "$t/r/scripts" "$t/r/src/common" "$t/r/docs" "$t/r/bench/results/raw/m1"
    cp "$here/scripts/check_readme_params.sh" "$t/r/scripts/"
    printf '%s\n' '#define TPCOMM_PARAM_TABLE(X) \' \
      '  X(TimeoutMs, "TIMEOUT_MS", "10000", kInt, 1, 2, "bound on every wait (ms)")' > "$t/r/src/common/params.h"
    printf '%s\n' '# t' '' '| Variable | Default | Meaning |' '|---|---|---|' \
      '| `TPCOMM_TIMEOUT_MS` | `10000` | bound |' '' 'Results: [m1](bench/results/m1.md).' > "$t/r/README.md"
    printf '%s\n' '# Page' 'Measured at abc1234: [raw](../bench/results/m1.md).' > "$t/r/docs/page.md"
    printf '%s\n' '# m1' '- raw log: [raw/m1/a.txt.gz](raw/m1/a.txt.gz)' > "$t/r/bench/results/m1.md"
    echo "# commit abc1234" | gzip > "$t/r/bench/results/raw/m1/a.txt.gz"
    printf '%s\n' '// why, not when' > "$t/r/src/a.cc"
  }
  expect() {  # expect pass|fail "what"
    local got=pass
    check "$t/r" > /dev/null 2>&1 || got=fail
    if [ "$got" != "$1" ]; then
      echo "check_docs --self-test: $2: expected $1, got $got" >&2
      rc=1
    else
      echo "check_docs --self-test: $2: $got, as expected"
    fi
  }
  make_tree; expect pass "a tree that keeps every rule"
  make_tree; echo "Measured in Sess""ion 4." >> "$t/r/docs/page.md"; expect fail "a work-period reference in docs/"
  make_tree; echo "// as of sess""ion 12" >> "$t/r/src/a.cc"; expect fail "a work-period reference in a source comment"
  make_tree; echo "See SESS""IONS 3-4." >> "$t/r/README.md"; expect fail "a work-period reference in the README"
  make_tree; rm "$t/r/bench/results/raw/m1/a.txt.gz"; expect fail "a results page citing a raw log that is not there"
  make_tree; echo "[gone](../bench/results/m2.md)" >> "$t/r/docs/page.md"; expect fail "a doc linking a results page that is not there"
  make_tree; echo x | gzip > "$t/r/bench/results/raw/m1/b.txt.gz"; expect fail "a raw log no page cites"
  make_tree; echo x > "$t/r/bench/results/raw/m1/c.txt"; expect fail "an uncompressed file in raw/"
  make_tree; mkdir -p "$t/r/bench/results/raw/m9" && echo x | gzip > "$t/r/bench/results/raw/m9/d.txt.gz" &&
    echo '[d](raw/m9/d.txt.gz)' >> "$t/r/bench/results/m1.md"; expect fail "a raw folder without its machine's page"
  make_tree; head -c $((budget + 4096)) /dev/urandom | gzip -1 > "$t/r/bench/results/raw/m1/big.bin.gz" &&
    echo '[big](raw/m1/big.bin.gz)' >> "$t/r/bench/results/m1.md"; expect fail "bench/results over its budget"
  make_tree; sed -i 's/`10000`/`20000`/' "$t/r/README.md"; expect fail "an environment table that differs from params.h"
  return $rc
}

if [ "${1:-}" = --self-test ]; then
  self_test
  exit $?
fi
root=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/../..}" && pwd)
if check "$root"; then
  echo "check_docs: README, docs, results pages and sources keep the documentation's rules"
else
  exit 1
fi
