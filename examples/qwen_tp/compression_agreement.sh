#!/usr/bin/env bash
# compression_agreement.sh: the decoder under a compressed all-reduce. Greedy tokens and logits of qwen_tp with
# --allreduce-compression fp8 and int8 against the uncompressed run, same checkpoint, prompt and
# tensor-parallel width. Usage, from the repository root:
#   MODEL_DIR=/path/to/hf_dir OUT=/path/to/out [DEVICE=cpu|cuda] [TP=2] [N_PREDICT=256] \
#     [PROMPT_CHARS=700] [QWEN=build/examples/qwen_tp/qwen_tp] bash examples/qwen_tp/compression_agreement.sh
# The prompt: the first PROMPT_CHARS bytes of the checkpoint's first held-out file
# (heldout_files.txt, written by train/train_tiny_qwen.py), else of PROMPT_FILE.
# 1. Each of none / fp8 / int8 generates N_PREDICT tokens greedily (--output-ids): how many equal
#    the uncompressed run's, and where the first difference is (after it the contexts differ).
# 2. The uncompressed run's prompt + tokens are then fed teacher-forced to each setting
#    (--dump-logits): the largest logit difference and the argmax agreement on the same context,
#    over the rows from the prompt's last on (row p predicts token p+1: the N generated tokens
#    and one more; tests/compare_logits.py).
# One raw log, $OUT/compression_agreement.txt, opens with the commit, date and command; a
# summary table is printed last. On --device cpu the host ranks run staged_host+fp8|int8 (forced:
# docs/compression.md). On cuda the selector would leave decode-size messages uncompressed (the
# cost model), so the compressed runs force TPCOMM_ALGO=GPU_ALGO+fp8|GPU_ALGO (or +int8;
# GPU_ALGO default twoshot_p2p) and the log shows the algorithm each run used.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
M=${MODEL_DIR:?set MODEL_DIR (a Hugging Face directory, e.g. from train/train_tiny_qwen.py)}
OUT=${OUT:?set OUT}
DEVICE=${DEVICE:-cpu}
TP=${TP:-2}
N=${N_PREDICT:-256}
CHARS=${PROMPT_CHARS:-700}
Q=${QWEN:-$ROOT/build/examples/qwen_tp/qwen_tp}
PY=${PY:-python3}
mkdir -p "$OUT"
L=$OUT/compression_agreement.txt
W=$OUT/work
mkdir -p "$W"
REV=${COMMIT:-$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)}
{ echo "# commit $REV"; echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# command: MODEL_DIR=$M DEVICE=$DEVICE TP=$TP N_PREDICT=$N PROMPT_CHARS=$CHARS bash examples/qwen_tp/compression_agreement.sh"
  echo "# host: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"; } > "$L"
[ -x "$Q" ] || { echo "no qwen_tp at $Q (build it, or set QWEN)" | tee -a "$L"; exit 1; }

src=${PROMPT_FILE:-}
[ -z "$src" ] && [ -f "$M/heldout_files.txt" ] && src=$(head -1 "$M/heldout_files.txt")
[ -n "$src" ] && [ -f "$src" ] || { echo "no prompt: set PROMPT_FILE or give a checkpoint with heldout_files.txt" | tee -a "$L"; exit 1; }
head -c "$CHARS" "$src" > "$W/prompt.txt"
echo "# prompt: first $CHARS bytes of $src" >> "$L"

run() {  # run NAME COMPRESSION ARGS...: qwen_tp with the common flags, output appended to the log
  local name=$1 c=$2; shift 2
  local env=()
  [ "$DEVICE" = cuda ] && [ "$c" != none ] && env=(TPCOMM_ALGO="${GPU_ALGO:-twoshot_p2p}+$c|${GPU_ALGO:-twoshot_p2p}")
  echo "## $name: ${env[*]:-} qwen_tp --device $DEVICE --tp $TP --model-dir $M --allreduce-compression $c $*" >> "$L"
  env ${env[@]+"${env[@]}"} "$Q" --device "$DEVICE" --tp "$TP" --model-dir "$M" --metrics-file "$W/$name.prom" \
    --allreduce-compression "$c" "$@" >> "$L" 2>&1
  local rc=$?
  echo "## $name: rc=$rc" >> "$L"
  return $rc
}

for c in none fp8 int8; do
  extra=()
  [ "$c" = none ] && extra=(--dump-logits "$W/prompt.logits")  # its header holds the prompt's ids
  run "gen_$c" "$c" --prompt-file "$W/prompt.txt" --n-predict "$N" --output-ids "$W/$c.ids" \
    ${extra[@]+"${extra[@]}"} || { echo "gen_$c failed (log: $L)"; exit 1; }
done
# The teacher-forced sequence: the prompt's ids, then the uncompressed run's tokens.
P=$("$PY" - "$W/prompt.logits" "$W/none.ids" "$W/seq.ids" <<'EOF'
import struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<I", raw, 8)[0]
ids = list(struct.unpack_from("<%di" % n, raw, 16)) + [int(t) for t in open(sys.argv[2]).read().split()]
open(sys.argv[3], "w").write(" ".join(map(str, ids)) + "\n")
print(n)
EOF
) || { echo "cannot read the prompt's ids from $W/prompt.logits" | tee -a "$L"; exit 1; }
for c in none fp8 int8; do
  run "tf_$c" "$c" --prompt-ids "@$W/seq.ids" --n-predict 1 --dump-logits "$W/tf_$c.logits" ||
    { echo "tf_$c failed (log: $L)"; exit 1; }
done

{
  echo "# Summary (prompt $P tokens, $N generated, $DEVICE, TP=$TP)"
  echo "| setting | greedy tokens equal to none's | first difference at | teacher-forced on none's tokens (rows $((P - 1))..) |"
  echo "|---|---|---|---|"
  for c in fp8 int8; do
    agree=$("$PY" - "$W/none.ids" "$W/$c.ids" <<'EOF'
import sys
a = open(sys.argv[1]).read().split()
b = open(sys.argv[2]).read().split()
same = sum(x == y for x, y in zip(a, b))
first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print("%d/%d | %s" % (same, len(a), "none" if first is None and len(a) == len(b) else "token %d" % (first if first is not None else min(len(a), len(b)))))
EOF
)
    cmp=$("$PY" "$ROOT/examples/qwen_tp/tests/compare_logits.py" "$W/tf_none.logits" "$W/tf_$c.logits" --from $((P - 1))) ||
      { echo "compare_logits.py failed for $c: $cmp" | tee -a "$L"; exit 1; }
    echo "| $c | $agree | $cmp |"
  done
} >> "$L"
sed -n '/^# Summary/,$p' "$L"
