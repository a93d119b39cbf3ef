#!/bin/bash
# draft_session.sh: the trained draft, measured, in one device call on one H200 (about 6 minutes):
#   1. train_tiny_qwen.py on the carried corpus (CORPUS, default .scratch/corpus-big: the 270 MB
#      corpus train/make_corpus_big.sh builds; any make_corpus.py folder) for exactly STEPS steps
#      from SEED (cut at MINUTES, with a warning, if the GPU is slower than planned), on the GPU in
#      the background, while qwen_tp builds (sm_90) in the foreground. The default recipe: the
#      40.1M-parameter base preset with a 3-step MTP chain distilled from the target, token-level
#      unlikelihood on the next-token head, and sequence-level unlikelihood on its own greedy
#      continuations in the second half (README, "Greedy loops"), the step compiled and the
#      greedy continuations replayed as a CUDA graph (--compile --fast-generate); at each validation, the loops
#      among the greedy continuations of 16 validation-split prompts counted (--probe-during);
#   2. teacher-forced acceptance (qwen_tp --teacher-forced) over TF_CHARS characters of held-out
#      files: accepted/drafted, per-token acceptance and mean accepted length at n-max 1..NMAX_TF;
#      then (PARITY=1, the default) tests/hf_parity.py on the checkpoint: qwen_tp against
#      transformers on the same device, its lines in tf.log;
#   3. free-running: PREFIXES prompts of PREFIX_CHARS characters ending at a line break inside
#      held-out files, PREFIX_PREDICT tokens each, greedy at n-max FREE_NMAX, each run's distinct
#      4-gram share; runs under DISTINCT_MIN are flagged degenerate and left out of the headline
#      and of the traces; the same prompts sampled at --temp SAMPLE_TEMP, n-max 3;
#   4. the rounds of the non-degenerate greedy runs at n-max 3 and 5 (--trace-out, concatenated)
#      replayed (--replay-trace) in the REPLAY_SHAPES runs (random weights, TP=1, 512-token
#      prompt, 256 tokens): MTP off (A) and on (B) as A B3 B5 B5 B3 A, each B also timing MTP off
#      in its own process; the first B3 profiles the draft's share of a round;
#   5. the tables, printed last and written to $OUT/summary.md.
# Logs under $OUT (each opens with commit, date and command): build.log train.log tf.log free.log
# replay.log trace_n3.txt trace_n5.txt summary.md. Usage, from the repository root:
#   OUT=/path/to/out bash examples/qwen_tp/train/draft_session.sh
# The checkpoint lands in CKPT (default ~/.cache/qwen_tp/draft, where the README's quick start looks);
# SKIP_TRAIN=1 measures the checkpoint already there. TRAIN_ONLY=1 trains and stops (the training
# log also saved as $CKPT/session_train.log, the training part of the summary in summary.md), so a
# run can train for up to one call (MINUTES=9 on a 600 s call) and a second call with
# SKIP_TRAIN=1 (same CKPT, e.g. a git-ignored build-draft/ in the tree, which stays between warm
# calls) measures it; that call's train.log then carries the saved training log.
# Time on one H200 at the defaults, measured at ae1f1b4 (h200x1.md, "The draft on the 270 MB
# corpus"): corpus and tokenizer 30 s, compile 50 s, 2800 steps in 167 s (a plain step 41.9 ms, one
# with a sequence-level pass 255.8 ms, every 6th of the second half); the teacher-forced part, the
# Hugging Face parity check, 16 free-running prompts and the replays end the call at ~350 s of
# DEADLINE_S=555 (qwen_tp built beforehand: SKIP_BUILD=1). The step count is the deterministic run's: train/calibrate.sh prints the count
# that fills a training budget for another preset or corpus.
# A smoke test without a GPU (numbers meaningless): DEVICE=cpu CORPUS=<make_corpus.py folder> STEPS=20 TRAIN_ARGS="--tiny --mtp-chain 2
# --mtp-distill 0.5 --unlikelihood 1 --seq-unlikelihood 1 --seq-ul-rows 8 --seq-ul-prefix 64 --seq-ul-tokens 16
# --probe 2" SKIP_BUILD=1 BUILD=build-cpu TF_CHARS=3000 TF_WINDOW=256 PREFIXES=2 PREFIX_PREDICT=16 FREE_NMAX="3 5"
# REPLAY_SHAPES=tiny REPLAY_PREDICT=32 PY=<python with torch>.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
SRC=$(pwd)
OUT=${OUT:?set OUT}
B=${BUILD:-$SRC/build-h200}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
CORPUS=${CORPUS:-$SRC/.scratch/corpus-big}
STEPS=${STEPS:-2800}
MINUTES=${MINUTES:-7}
SEED=${SEED:-1234}
TRAIN_ARGS=${TRAIN_ARGS-"--preset base --mtp-chain 3 --mtp-distill 0.5 --keep-best --unlikelihood 1.0 \
--seq-unlikelihood 1.0 --seq-ul-from 0.5 --seq-ul-every 6 --seq-ul-rows 128 --probe 16 --probe-during --compile \
--fast-generate"}
CKPT=${CKPT:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen_tp/draft}
NMAX_TF=${NMAX_TF:-6}
TF_CHARS=${TF_CHARS:-150000}
TF_WINDOW=${TF_WINDOW:-1024}
PREFIXES=${PREFIXES:-16}
PREFIX_CHARS=${PREFIX_CHARS:-800}
PREFIX_PREDICT=${PREFIX_PREDICT:-64}
FREE_NMAX=${FREE_NMAX:-"1 2 3 4 5 6"}
DISTINCT_MIN=${DISTINCT_MIN:-0.5}
SAMPLE_TEMP=${SAMPLE_TEMP:-0.8}
REPLAY_SHAPES=${REPLAY_SHAPES:-"qwen3-32b qwen3-8b"}
REPLAY_PREDICT=${REPLAY_PREDICT:-256}
# A part that would start past DEADLINE_S seconds (or, for a free-running run, past DEADLINE_S minus
# REPLAY_RESERVE_S, kept for the replays) is skipped, and the log says so: the call ends in time.
DEADLINE_S=${DEADLINE_S:-555}
REPLAY_RESERVE_S=${REPLAY_RESERVE_S:-100}
[ -f "$CORPUS/corpus.jsonl.xz" ] || { echo "draft_session.sh: no corpus at CORPUS=$CORPUS: build the measured draft's" \
  "with examples/qwen_tp/train/make_corpus_big.sh, or another with make_corpus.py --out DIR" >&2; exit 2; }
W=${WORK:-/tmp/qwen_draft/work}
mkdir -p "$OUT" "$W" "$(dirname "$CKPT")"
REV=${COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
Q=$B/examples/qwen_tp/qwen_tp
T0=$(date +%s)
SETTINGS="STEPS=$STEPS MINUTES=$MINUTES SEED=$SEED TRAIN_ARGS='$TRAIN_ARGS' NMAX_TF=$NMAX_TF TF_CHARS=$TF_CHARS TF_WINDOW=$TF_WINDOW \
PREFIXES=$PREFIXES PREFIX_CHARS=$PREFIX_CHARS PREFIX_PREDICT=$PREFIX_PREDICT FREE_NMAX='$FREE_NMAX' DISTINCT_MIN=$DISTINCT_MIN \
SAMPLE_TEMP=$SAMPLE_TEMP REPLAY_SHAPES='$REPLAY_SHAPES' REPLAY_PREDICT=$REPLAY_PREDICT DEADLINE_S=$DEADLINE_S DEVICE=$DEVICE"

. "$SRC/examples/qwen_tp/train/session_common.sh"
for l in build train tf free replay; do header "$OUT/$l.log" "examples/qwen_tp/train/draft_session.sh ($l part); $SETTINGS"; done
run train 30 $PY -c "import sys, torch, tokenizers; print(sys.version.split()[0], torch.__version__, tokenizers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
[ -f "$CORPUS/MANIFEST.json" ] && run train 10 $PY -c "import json, sys; m = json.load(open(sys.argv[1])); print('corpus', m['splits'], 'xz bytes', m['corpus_xz_bytes'], 'sha256', m['corpus_sha256'])" "$CORPUS/MANIFEST.json"

# 1. training (GPU, background) and the build (CPU, foreground).
[ "${SKIP_TRAIN:-0}" = 1 ] || rm -rf "$CKPT"
if [ "${SKIP_TRAIN:-0}" = 1 ]; then
  echo "## SKIP_TRAIN=1: using $CKPT" >> "$OUT/train.log"
  [ -f "$CKPT/session_train.log" ] && { echo "## the training call's log ($CKPT/session_train.log):"; cat "$CKPT/session_train.log"; } >> "$OUT/train.log"
fi
[ "${SKIP_TRAIN:-0}" = 1 ] ||
run train $(( ${MINUTES%.*} * 60 + 150 )) $PY -u "$SRC/examples/qwen_tp/train/train_tiny_qwen.py" --device "$DEVICE" \
    --corpus "$CORPUS" --steps "$STEPS" --minutes "$MINUTES" --seed "$SEED" --out "$CKPT" $TRAIN_ARGS &
TRAIN_PID=$!
if [ "${SKIP_BUILD:-0}" = 1 ]; then echo "## SKIP_BUILD=1: using $Q" >> "$OUT/build.log"; BUILD_RC=0
else
  run build 400 bash -c "cmake -S '$SRC' -B '$B' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build '$B' -j14 --target qwen_tp"
  BUILD_RC=$?
fi
echo "build rc=$BUILD_RC (+$(( $(date +%s) - T0 )) s)"
# Held-out prompts from the corpus's held-out split (never trained on), while the model trains.
$PY "$SRC/examples/qwen_tp/train/heldout_prompts.py" "$CORPUS/corpus.jsonl.xz" "$W" "$TF_CHARS" "$PREFIXES" "$PREFIX_CHARS" "$PREFIX_PREDICT" \
    >> "$OUT/free.log" 2>&1
wait $TRAIN_PID
TRAIN_RC=$?
echo "train rc=$TRAIN_RC (+$(( $(date +%s) - T0 )) s)"
grep -aE "held-out|trained [0-9]+ steps|deadline|keep-best" "$OUT/train.log" | tail -5
[ -f "$CKPT/train_metrics.json" ] && { echo "## train_metrics.json"; cat "$CKPT/train_metrics.json"; echo "## config.json"; cat "$CKPT/config.json"; } >> "$OUT/train.log"
if [ $BUILD_RC -ne 0 ] || [ $TRAIN_RC -ne 0 ] || [ ! -f "$CKPT/model.safetensors" ]; then
  echo "build or training failed: see build.log and train.log"; tail -20 "$OUT/build.log" "$OUT/train.log"; exit 1
fi
if [ "${TRAIN_ONLY:-0}" = 1 ]; then  # the measurements come from a later SKIP_TRAIN=1 call
  [ "${SKIP_TRAIN:-0}" = 1 ] || cp "$OUT/train.log" "$CKPT/session_train.log"
  header "$OUT/summary.md" "examples/qwen_tp/train/draft_session.sh (summary, TRAIN_ONLY=1); $SETTINGS"
  $PY "$SRC/examples/qwen_tp/train/draft_summary.py" --train "$OUT/train.log" --tf "$OUT/tf.log" --free "$OUT/free.log" \
      --replay "$OUT/replay.log" --distinct-min "$DISTINCT_MIN" | tee -a "$OUT/summary.md"
  echo "total $(( $(date +%s) - T0 )) s"
  exit 0
fi

# 2. teacher-forced acceptance over held-out text.
run tf 240 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/tf.txt" --spec-type draft-mtp \
    --spec-draft-n-max "$NMAX_TF" --teacher-forced --tf-window "$TF_WINDOW" --tf-context 64 --no-profile --metrics-file "$W/m.prom"
echo "teacher-forced rc=$? (+$(( $(date +%s) - T0 )) s)"; grep -a "teacher-forced n-max 3" "$OUT/tf.log"
# 2b. The trained checkpoint through qwen_tp against transformers on the same device
# (tests/hf_parity.py: logits within its bound, argmax, 64 greedy tokens), into tf.log (the call
# returns 8 files at most); PARITY=0 leaves it out.
if [ "${PARITY:-1}" = 1 ]; then
  run tf 120 $PY "$SRC/examples/qwen_tp/tests/hf_parity.py" --device "$DEVICE" --model-dir "$CKPT" --qwen-tp "$Q" \
      --work "$W/parity"
  echo "hf parity rc=$? (+$(( $(date +%s) - T0 )) s)"
fi

# 3. free-running on the prefixes (greedy at each n-max; then sampled at n-max 3), with traces.
for j in $(seq 0 $(( PREFIXES - 1 ))); do
  [ -f "$W/prefix$j.txt" ] || continue
  if [ $(( $(date +%s) - T0 )) -gt $(( DEADLINE_S - REPLAY_RESERVE_S )) ]; then
    echo "## deadline: prefixes $j.. skipped (+$(( $(date +%s) - T0 )) s)" >> "$OUT/free.log"; break
  fi
  for n in $FREE_NMAX; do
    run free 60 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/prefix$j.txt" --n-predict "$PREFIX_PREDICT" \
        --no-profile --spec-type draft-mtp --spec-draft-n-max "$n" --trace-out "$W/trace_n${n}_p$j.txt" --metrics-file "$W/m.prom"
  done
  run free 60 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/prefix$j.txt" --n-predict "$PREFIX_PREDICT" \
      --no-profile --spec-type draft-mtp --spec-draft-n-max 3 --temp "$SAMPLE_TEMP" --seed $(( j + 1 )) --metrics-file "$W/m.prom"
done
echo "free-running done (+$(( $(date +%s) - T0 )) s)"
# The traces of the non-degenerate greedy runs at n-max 3 and 5, in prefix order.
$PY "$SRC/examples/qwen_tp/train/draft_summary.py" --free "$OUT/free.log" --distinct-min "$DISTINCT_MIN" \
    --select-traces "$OUT" --rev "$REV"

# The tables so far (written again at the end: a call cut short still returns these).
$PY "$SRC/examples/qwen_tp/train/draft_summary.py" --train "$OUT/train.log" --tf "$OUT/tf.log" --free "$OUT/free.log" \
    --replay "$OUT/replay.log" --distinct-min "$DISTINCT_MIN" > "$OUT/summary.md" 2>&1

# 4. the traces replayed at the large shapes, TP=1, A B3 B5 B5 B3 A.
for shape in $REPLAY_SHAPES; do
  base=(--device "$DEVICE" --model-preset "$shape" --prompt-tokens 512 --n-predict "$REPLAY_PREDICT" --ctx-size 1024)
  first=1
  for step in A B3 B5 B5 B3 A; do
    if [ $(( $(date +%s) - T0 )) -gt $(( DEADLINE_S - 20 )) ]; then
      echo "## deadline: $shape $step skipped (+$(( $(date +%s) - T0 )) s)" >> "$OUT/replay.log"; continue
    fi
    case $step in
      A) run replay 120 "$Q" "${base[@]}" --no-profile --metrics-file "$W/m.prom" ;;
      B*) n=${step#B}; prof=--no-profile; [ "$step" = B3 ] && [ $first = 1 ] && prof= && first=0
          [ -s "$OUT/trace_n$n.txt" ] && run replay 150 "$Q" "${base[@]}" $prof --spec-type draft-mtp --spec-draft-n-max "$n" \
              --replay-trace "$OUT/trace_n$n.txt" --metrics-file "$W/m.prom" ;;
    esac
  done
  echo "replay $shape done (+$(( $(date +%s) - T0 )) s)"
done

# 5. the tables.
header "$OUT/summary.md" "examples/qwen_tp/train/draft_session.sh (summary); $SETTINGS"
$PY "$SRC/examples/qwen_tp/train/draft_summary.py" --train "$OUT/train.log" --tf "$OUT/tf.log" --free "$OUT/free.log" \
    --replay "$OUT/replay.log" --distinct-min "$DISTINCT_MIN" | tee -a "$OUT/summary.md"
{ echo; grep -a "^\[hf_parity\] \(PASS\|FAIL\|SKIP\|logits:\|greedy:\)" "$OUT/tf.log" || echo "(no hf_parity verdict in tf.log)"; } |
    tee -a "$OUT/summary.md"
echo "total $(( $(date +%s) - T0 )) s"
