#!/usr/bin/env bash
# Fetches the cuDNN frontend's headers (NVIDIA's header-only C++ API over cuDNN, MIT licence) into
# third_party/cudnn_frontend/include, for qwen_tp's cuDNN prefill attention
# (kernels/attention_prefill_cudnn.cc). Needs pip and the network; the GPU machine has neither,
# so fetch here and carry third_party/ (git-ignored) with the tree. Then reconfigure CMake.
#   examples/qwen_tp/tools/fetch_cudnn_frontend.sh [VERSION]   (default 1.32.0)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
version=${1:-1.32.0}
dest=$root/third_party/cudnn_frontend
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$version"
rm -rf "$dest" && mkdir -p "$dest"
python3 - "$tmp" "$dest" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    z.extractall(sys.argv[2], names)
    lic = [n for n in z.namelist() if n.lower().endswith(("license", "license.txt"))]
    z.extractall(sys.argv[2], lic)
print("cudnn frontend: %d files from %s" % (len(names), wheel.split("/")[-1]))
PY
echo "headers in $dest/include (cudnn_frontend.h); reconfigure CMake to build the cuDNN prefill attention"
