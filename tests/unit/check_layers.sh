#!/usr/bin/env bash
# The layers of src/ point one way (docs/architecture.md): a file may include headers of its own
# layer and of the layers below it, never above. Fails listing every upward #include.
#   common, topology (0-1) <- bootstrap, transports (2) <- algos (3) <- collectives (4) <- shim (5)
set -euo pipefail
src="${1:-$(dirname "$0")/../../src}"
rank() {
  case "$1" in
    common) echo 0 ;; topology) echo 1 ;; bootstrap | transports) echo 2 ;; algos) echo 3 ;;
    collectives) echo 4 ;; shim | capi) echo 5 ;; *) echo 9 ;;
  esac
}
bad=0
checked=0
while IFS= read -r file; do
  layer="${file#"$src"/}"
  layer="${layer%%/*}"
  mine=$(rank "$layer")
  while IFS= read -r inc; do
    target="${inc%%/*}"
    theirs=$(rank "$target")
    [ "$theirs" = 9 ] && continue  # not a src/ layer (tpcomm/ public headers, system headers)
    if [ "$theirs" -gt "$mine" ]; then
      echo "upward include: ${file#"$src"/} ($layer) includes \"$inc\" ($target)"
      bad=$((bad + 1))
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
  checked=$((checked + 1))
done < <(find "$src" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | sort)
[ "$checked" -gt 50 ] || { echo "only $checked files found under $src: wrong folder?"; exit 1; }
if [ "$bad" -gt 0 ]; then
  echo "$bad upward include(s) in $checked files"
  exit 1
fi
echo "layers: $checked files, no upward include"
