#!/bin/bash
# make_corpus_big.sh [OUT]: the 270 MB corpus the measured draft trained on (examples/qwen_tp/README.md,
# "The trained draft, measured"), rebuilt on any Debian or Ubuntu machine with a network:
#   1. a virtual environment of PYTHON (default python3.11) at VENV with the exact packages of
#      corpus_packages.txt (--no-deps: no resolver, the listed versions only; about 7.5 GB, most of
#      it torch's and the CUDA libraries' wheels, whose .py files are few);
#   2. make_corpus.py over that interpreter's standard library, the Python documentation's sources
#      (DOCS, Debian's python3.11-doc) and the installed packages' permissively licensed sources,
#      --max-mb 270 --package-cap-mb 8 (at most 8 MB of any one distribution), into OUT (default
#      .scratch/corpus-big, draft_session.sh's default CORPUS);
#   3. the sha256 of the corpus's uncompressed lines against the measured corpus's (corpus_big.sha256):
#      "same corpus" or "another corpus" (an interpreter other than 3.11.7 brings its own standard
#      library, another python3.11-doc its own pages; the draft then trains on other text).
# Exits 2 on a missing prerequisite (with what to install), 1 on a failed step.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-.scratch/corpus-big}
PYTHON=${PYTHON:-python3.11}
VENV=${VENV:-/tmp/qwen-corpus-venv}
DOCS=${DOCS:-/usr/share/doc/python3.11/html/_sources}

command -v "$PYTHON" > /dev/null || { echo "make_corpus_big.sh: PYTHON=$PYTHON not found (a Python 3.11 interpreter)" >&2; exit 2; }
[ -d "$DOCS" ] || { echo "make_corpus_big.sh: DOCS=$DOCS not found: apt-get install python3.11-doc, or set DOCS" >&2; exit 2; }
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV" || { echo "make_corpus_big.sh: '$PYTHON -m venv $VENV' failed (Debian: apt-get install python3.11-venv)" >&2; exit 2; }
fi
echo "make_corpus_big.sh: installing corpus_packages.txt into $VENV ($("$VENV/bin/python" --version))"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$HERE/corpus_packages.txt" ||
  { echo "make_corpus_big.sh: pip install failed" >&2; exit 1; }
"$VENV/bin/python" "$HERE/make_corpus.py" --out "$OUT" --python "$VENV/bin/python" --docs "$DOCS" \
  --max-mb 270 --package-cap-mb 8 || { echo "make_corpus_big.sh: make_corpus.py failed" >&2; exit 1; }
want=$(cut -d' ' -f1 "$HERE/corpus_big.sha256")
got=$("$VENV/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["corpus_text_sha256"])' "$OUT/MANIFEST.json")
if [ "$got" = "$want" ]; then
  echo "make_corpus_big.sh: same corpus as the measured draft's (text sha256 $got)"
else
  echo "make_corpus_big.sh: another corpus than the measured draft's (text sha256 $got, measured $want):" \
       "see $OUT/MANIFEST.json's sources against corpus_packages.txt and the interpreter"
fi
