#!/usr/bin/env bash
# scripts/gpu.d/raw_log.sh NAME COMMIT "COMMAND" PATH... : a results page's raw log from what a device
# call brought back. Writes bench/results/raw/$MACHINE/NAME_<short commit>.txt.gz (MACHINE default
# h200x1): a header (the commit that ran, its `git rev-parse HEAD` form, the date of the call,
# the command), then each PATH after a "==> path <==" line, as `tail -n +1` prints them. A folder
# is taken file by file; a .tgz or .tar.gz is unpacked and taken file by file; files whose names
# match SKIP (default '\.csv$': ncu's raw tables) are left out and listed at the end. DATE (default
# now, UTC) names the call's date when the bundle is made later. Prints the file written, its size
# and bench/results's total against the 2 MiB budget of the results folder.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: raw_log.sh NAME COMMIT \"COMMAND\" PATH..." >&2; exit 2; }
name=$1 commit=$2 command=$3
shift 3
root=$(git rev-parse --show-toplevel)
full=$(git -C "$root" rev-parse --verify --quiet "$commit^{commit}") ||
  { echo "raw_log.sh: COMMIT '$commit' is not a commit of this repository" >&2; exit 2; }
machine=${MACHINE:-h200x1}
skip=${SKIP:-'\.csv$'}
dir="$root/bench/results/raw/$machine"
[ -d "$dir" ] || { echo "raw_log.sh: $dir is not a folder (MACHINE=$machine)" >&2; exit 2; }
for p in "$@"; do [ -e "$p" ] || { echo "raw_log.sh: PATH '$p' does not exist" >&2; exit 2; }; done
out="$dir/${name}_${full:0:7}.txt.gz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
left=()
emit() {  # emit <file> <shown name>
  if [[ "$2" =~ $skip ]]; then left+=("$2"); return; fi
  printf '==> %s <==\n' "$2"
  cat "$1"
  printf '\n'
}
{
  echo "# commit $full"
  echo "# git rev-parse HEAD: $full"
  echo "# date ${DATE:-$(date -u +%FT%TZ)}"
  echo "# command: $command"
  for p in "$@"; do
    if [ -d "$p" ]; then
      while IFS= read -r f; do emit "$f" "${f#"$(dirname "$p")"/}"; done < <(find "$p" -type f | LC_ALL=C sort)
    elif [[ "$p" == *.tgz || "$p" == *.tar.gz ]]; then
      u="$work/$(basename "$p")"
      mkdir -p "$u" && tar -xzf "$p" -C "$u"
      while IFS= read -r f; do emit "$f" "${f#"$u"/}"; done < <(find "$u" -type f | LC_ALL=C sort)
    else
      emit "$p" "$(basename "$p")"
    fi
  done
} > "$work/${name}_$full.txt"  # not a pipe: emit's list stays in this shell; gzip keeps the name
gzip -9c "$work/${name}_$full.txt" > "$out"
size=$(stat -c %s "$out")
total=$(du -sb "$root/bench/results" | cut -f1)
echo "raw_log.sh: wrote ${out#"$root"/} ($size bytes); bench/results holds $total of 2097152 bytes"
[ ${#left[@]} -eq 0 ] || echo "raw_log.sh: left out (SKIP='$skip'): ${left[*]}"
