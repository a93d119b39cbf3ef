#!/usr/bin/env bash
# Every library and executable built in BUILD_DIR has a RUNPATH (or RPATH) whose entries are
# absolute or $ORIGIN-relative: an empty entry (":" at either end, "::" inside) or a relative one
# makes the dynamic loader search the working directory, where a planted libnccl.so.2 or
# libnvidia-ml.so.1 would be loaded. Fails listing every offending file and entry.
set -euo pipefail
build="${1:?usage: check_runpath.sh BUILD_DIR}"
command -v readelf >/dev/null || { echo "readelf not found (binutils)"; exit 1; }
bad=0
checked=0
while IFS= read -r f; do
  head -c 4 "$f" 2>/dev/null | grep -q $'\x7fELF' || continue
  checked=$((checked + 1))
  path=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]$/\2/p')
  [ -z "$path" ] && continue
  if [[ "$path" == :* || "$path" == *: || "$path" == *::* ]]; then
    echo "empty RUNPATH entry: $f: [$path]"
    bad=$((bad + 1))
    continue
  fi
  IFS=: read -ra entries <<<"$path"
  for e in "${entries[@]}"; do
    case "$e" in
      /* | '$ORIGIN' | '$ORIGIN/'*) ;;
      *) echo "relative RUNPATH entry: $f: '$e' in [$path]"; bad=$((bad + 1)) ;;
    esac
  done
done < <(find "$build" -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) -not -path '*/CMakeFiles/*' \
  -not -path '*venv*' -not -path '*site-packages*' -not -path '*/consumer/work/*' | sort)
[ "$checked" -gt 0 ] || { echo "no ELF files under $build"; exit 1; }
if [ "$bad" -gt 0 ]; then
  echo "$bad bad RUNPATH entries in $checked ELF files"
  exit 1
fi
echo "runpath: $checked ELF files, every entry absolute or \$ORIGIN-relative"
