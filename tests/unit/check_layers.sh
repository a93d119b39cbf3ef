#!/usr/bin/env bash
# The layers of src/ point one way (docs/architecture.md): a file may include headers of its own
# layer and of the layers below it, never above. Fails listing every upward #include.
#   common, topology (0-1) <- bootstrap, transports (2) <- algos (3) <- collectives (4) <- shim (5)
# Inside src/algos the family folders do the same:
#   common, host (0) <- compressed, fused (1) <- p2p, staged_host, multicast, nccl, local (2)
# and a folder includes no other folder of its own level (one family never reaches into another).
set -euo pipefail
src="${1:-$(dirname "$0")/../../src}"
rank() {
  case "$1" in
    common) echo 0 ;; topology) echo 1 ;; bootstrap | transports) echo 2 ;; algos) echo 3 ;;
    collectives) echo 4 ;; shim | capi) echo 5 ;; *) echo 9 ;;
  esac
}
algoRank() {
  case "$1" in
    common | host) echo 0 ;; compressed | fused) echo 1 ;; p2p | staged_host | multicast | nccl | local) echo 2 ;;
    *) echo 9 ;;
  esac
}
bad=0
checked=0
folders=0
while IFS= read -r file; do
  rel="${file#"$src"/}"
  layer="${rel%%/*}"
  mine=$(rank "$layer")
  family=""
  if [ "$layer" = algos ]; then
    family="${rel#algos/}"
    family="${family%%/*}"
    if [ "$(algoRank "$family")" = 9 ]; then
      echo "src/algos/$family: not a known family folder (add it to algoRank in $0)"
      bad=$((bad + 1))
    fi
  fi
  while IFS= read -r inc; do
    target="${inc%%/*}"
    theirs=$(rank "$target")
    [ "$theirs" = 9 ] && continue  # not a src/ layer (tpcomm/ public headers, system headers)
    if [ "$theirs" -gt "$mine" ]; then
      echo "upward include: $rel ($layer) includes \"$inc\" ($target)"
      bad=$((bad + 1))
    elif [ -n "$family" ] && [ "$target" = algos ]; then
      other="${inc#algos/}"
      other="${other%%/*}"
      [ "$other" = "$family" ] && continue
      a=$(algoRank "$family")
      b=$(algoRank "$other")
      if [ "$b" -ge "$a" ]; then
        echo "algos: $rel ($family) includes \"$inc\" ($other, $([ "$b" -gt "$a" ] && echo above || echo beside) it)"
        bad=$((bad + 1))
      fi
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
  checked=$((checked + 1))
done < <(find "$src" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | sort)
[ "$checked" -gt 50 ] || { echo "only $checked files found under $src: wrong folder?"; exit 1; }
# Every family folder opens with a note saying what lives there.
for d in "$src"/algos/*/; do
  [ -f "$d/README.md" ] || { echo "src/algos/$(basename "$d"): no README.md saying what lives there"; bad=$((bad + 1)); }
  folders=$((folders + 1))
done
if [ "$bad" -gt 0 ]; then
  echo "$bad layering problem(s) in $checked files"
  exit 1
fi
echo "layers: $checked files, $folders algos folders, no upward or sideways include"
