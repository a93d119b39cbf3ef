#!/usr/bin/env bash
# run_hf_parity.sh PYTHON QWEN_TP WORKDIR: ctest qwen_hf_parity_cpu. With a Python that has torch,
# transformers, tokenizers and safetensors ($QWEN_HF_PYTHON, else PYTHON), trains the --tiny
# model for 30 steps on the CPU (train/train_tiny_qwen.py) into WORKDIR/ckpt and runs
# tests/hf_parity.py --device cpu --tp 2 against `QWEN_TP --device cpu`. Exit 77 (skipped) when
# those packages are missing (ctest qwen_hf_parity_torch runs it in the torch label's venv, which
# has them: there a skip fails).
set -euo pipefail
py="${QWEN_HF_PYTHON:-$1}" bin="$2" work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
if ! "$py" -c "import torch, transformers, tokenizers, safetensors, numpy" 2>/dev/null; then
  echo "[qwen_hf_parity] SKIPPED: $py lacks torch, transformers, tokenizers, safetensors or numpy" \
       "(set QWEN_HF_PYTHON to a Python that has them)"
  exit 77
fi
"$py" "$here/../train/train_tiny_qwen.py" --tiny --device cpu --steps 30 --minutes 5 --keep-best --out "$work/ckpt"
exec "$py" "$here/hf_parity.py" --device cpu --tp 2 --model-dir "$work/ckpt" --qwen-tp "$bin" --work "$work"
