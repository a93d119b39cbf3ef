#!/bin/bash
# gpu_session.sh: train a small model with an MTP head and measure its real draft acceptance, in
# one device call on one H200 (about 7-8 minutes):
#   1. train_tiny_qwen.py (MINUTES, default 5) on the GPU, in the background, while qwen_tp builds
#      (cmake + ninja, sm_90); meanwhile a --tiny model trained 30 steps on the CPU is checked
#      against Hugging Face on the GPU (tests/hf_parity.py --device cuda: the "random tiny" case);
#   2. hf_parity.py --device cuda on the trained model;
#   3. real draft acceptance of the trained model on held-out text (PROMPTS prompts: the first
#      PROMPT_CHARS characters of held-out stdlib files, N_PREDICT tokens each): qwen_tp on the GPU
#      with MTP off and --spec-draft-n-max 1..6 (NMAX), and --spec-draft-p-min (PMIN) at n-max 3 and
#      6 (PMIN_NMAX) on the GPU if it has it, else on the CPU reference (--device cpu --tp 4, 64 tokens, in the background);
#   4. a table of acceptance and decode speed, printed last and written to $OUT/summary.md.
# Logs, each opening with commit, date, command and GPU: $OUT/{build,train,parity,accept,accept_cpu,profile}.log,
# compression_agreement.txt (step 3b) and summary.md (at most 8 files come back from a device call). Usage, from the repository root:
#   OUT=/path/to/out bash examples/qwen_tp/train/gpu_session.sh
# COMMIT (env) names the commit when the tree has no .git; PY (env) the Python with torch
# (default python3); KEEP_CKPT=1 also copies the checkpoint's small files (not the weights) to $OUT.
# For a smoke test of this script without a GPU: DEVICE=cpu TRAIN_ARGS=--tiny MINUTES=1 SKIP_BUILD=1
# BUILD=<a build with qwen_tp> (everything then runs on the CPU; the numbers mean nothing).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SRC=$(pwd)
OUT=${OUT:?set OUT}
B=${BUILD:-$SRC/build-h200}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
# The default model: chained MTP training, the best validation checkpoint, 200 MB of the
# installed packages' sources beside the standard library (one epoch instead of ~30).
TRAIN_ARGS=${TRAIN_ARGS-"--mtp-chain 3 --keep-best --extra-corpus 200"}
MINUTES=${MINUTES:-5}
NMAX=${NMAX:-"1 2 3 4 5 6"}
PMIN_NMAX=${PMIN_NMAX:-"3 6"}
PMIN=${PMIN:-"0.5 0.75"}
PROMPTS=${PROMPTS:-4}
PROMPT_CHARS=${PROMPT_CHARS:-700}
N_PREDICT=${N_PREDICT:-200}
# Mid-file prefixes: PREFIXES prompts of PREFIX_CHARS characters ending at a line break inside a
# held-out file (a point fixed per file), PREFIX_PREDICT tokens each, at n-max PREFIX_NMAX. Short
# runs from many places in held-out text: a greedy small model that falls into a loop within 200
# tokens seldom does within 32, so these rows measure the draft on text (distinct 4-grams shows it).
PREFIXES=${PREFIXES:-24}
PREFIX_CHARS=${PREFIX_CHARS:-800}
PREFIX_PREDICT=${PREFIX_PREDICT:-32}
PREFIX_NMAX=${PREFIX_NMAX:-"1 3 5"}
CKPT=${CKPT:-/tmp/qwen_train/ckpt}
TINY=/tmp/qwen_train/tiny
W=/tmp/qwen_train/work
mkdir -p "$OUT" "$W"
REV=${COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
Q=$B/examples/qwen_tp/qwen_tp
T0=$(date +%s)

. "$SRC/examples/qwen_tp/train/session_common.sh"
for l in build train parity accept accept_cpu profile; do header "$OUT/$l.log" "examples/qwen_tp/train/gpu_session.sh ($l part)"; done
echo "# environment: MINUTES=$MINUTES NMAX='$NMAX' PMIN_NMAX='$PMIN_NMAX' PMIN='$PMIN' PROMPTS=$PROMPTS PROMPT_CHARS=$PROMPT_CHARS N_PREDICT=$N_PREDICT PREFIXES=$PREFIXES PREFIX_CHARS=$PREFIX_CHARS PREFIX_PREDICT=$PREFIX_PREDICT PREFIX_NMAX='$PREFIX_NMAX' PY=$PY" >> "$OUT/train.log"
run train 30 $PY -c "import sys, torch, transformers, tokenizers; print(sys.version.split()[0], torch.__version__, transformers.__version__, tokenizers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"

# 1. training in the background (GPU), the build in the foreground (CPU), the tiny model (CPU).
rm -rf "$CKPT" "$TINY"
run train $(( ${MINUTES%.*} * 60 + 120 )) $PY -u "$SRC/examples/qwen_tp/train/train_tiny_qwen.py" --device "$DEVICE" \
    --minutes "$MINUTES" --out "$CKPT" $TRAIN_ARGS &
TRAIN_PID=$!
[ "${SKIP_BUILD:-0}" = 1 ] && echo "## SKIP_BUILD=1: using $Q" >> "$OUT/build.log" ||
run build 300 bash -c "cmake -S '$SRC' -B '$B' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build '$B' -j14 --target qwen_tp"
BUILD_RC=$?
echo "build rc=$BUILD_RC (+$(( $(date +%s) - T0 )) s)"
run parity 120 $PY "$SRC/examples/qwen_tp/train/train_tiny_qwen.py" --tiny --device cpu --steps 30 --minutes 2 --out "$TINY"
if [ $BUILD_RC -eq 0 ]; then
  # The GPU is shared with the training here: a correctness check, no timing.
  run parity 180 $PY "$SRC/examples/qwen_tp/tests/hf_parity.py" --device "$DEVICE" --model-dir "$TINY" --qwen-tp "$Q" --work "$W/tiny"
  TINY_RC=$?
  echo "parity (tiny, 30 steps) rc=$TINY_RC (+$(( $(date +%s) - T0 )) s)"
fi
wait $TRAIN_PID
TRAIN_RC=$?
echo "train rc=$TRAIN_RC (+$(( $(date +%s) - T0 )) s)"
grep -E "held-out|trained [0-9]+ steps" "$OUT/train.log" | tail -2
[ -f "$CKPT/train_metrics.json" ] && { echo "## train_metrics.json"; cat "$CKPT/train_metrics.json"; echo "## config.json"; cat "$CKPT/config.json"; } >> "$OUT/train.log"
if [ "${KEEP_CKPT:-0}" = 1 ] && [ -d "$CKPT" ]; then
  mkdir -p "$OUT/ckpt" && cp "$CKPT"/{config.json,tokenizer.json,heldout_files.txt} "$OUT/ckpt/" 2>/dev/null
fi
if [ $BUILD_RC -ne 0 ] || [ $TRAIN_RC -ne 0 ] || [ ! -f "$CKPT/model.safetensors" ]; then
  echo "build or training failed: see $OUT/build.log and $OUT/train.log"; tail -20 "$OUT/build.log" "$OUT/train.log"; exit 1
fi

# 2. parity of the trained model (the GPU is free now).
run parity 180 $PY "$SRC/examples/qwen_tp/tests/hf_parity.py" --device "$DEVICE" --model-dir "$CKPT" --qwen-tp "$Q" --work "$W/trained"
PARITY_RC=$?
echo "parity (trained) rc=$PARITY_RC (+$(( $(date +%s) - T0 )) s)"

# 3. acceptance on held-out text. Prompt files: the first PROMPT_CHARS characters of the first
# PROMPTS held-out files that are long enough.
$PY - "$CKPT/heldout_files.txt" "$W" "$PROMPTS" "$PROMPT_CHARS" "$PREFIXES" "$PREFIX_CHARS" <<'EOF' >> "$OUT/accept.log" 2>&1
import os, random, sys
held, work, n, chars, nprefix, pchars = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
texts = [(p, open(p, encoding="utf-8", errors="replace").read()) for p in open(held).read().split()]
k = 0
for path, text in texts:
    if k == n:
        break
    if len(text) < 2 * chars:
        continue
    with open(os.path.join(work, "prompt%d.txt" % k), "w") as f:
        f.write(text[:chars])
    print("## prompt%d: first %d characters of %s" % (k, chars, path))
    k += 1
# Prefixes: one per file that is long enough (cycling through them with a new point if there are
# fewer than PREFIXES), ending at a line break at a point drawn from [pchars, len - 400).
long_texts = [(p, t) for p, t in texts if len(t) >= pchars + 1200]
for j in range(nprefix if long_texts else 0):
    path, text = long_texts[j % len(long_texts)]
    rng = random.Random("%s:%d" % (os.path.basename(path), j))
    cut = text.rfind("\n", pchars, rng.randrange(pchars + 400, len(text) - 400)) + 1
    with open(os.path.join(work, "prefix%d.txt" % j), "w") as f:
        f.write(text[cut - pchars:cut])
    print("## prefix%d: characters %d..%d of %s" % (j, cut - pchars, cut, path))
EOF
GPU_PMIN=0
run accept 60 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/prompt0.txt" --n-predict 8 --spec-type draft-mtp --spec-draft-p-min 0.5 --no-profile \
    --metrics-file "$W/probe.prom" && GPU_PMIN=1
if [ $GPU_PMIN = 0 ]; then
  # p-min on the fp32 CPU reference, in the background (CPU) while the GPU runs below: n-max 3 with
  # p-min 0 (off, the CPU's own baseline) and each PMIN, 64 tokens per prompt.
  (for p in $(seq 0 $(( PROMPTS - 1 ))); do
     [ -f "$W/prompt$p.txt" ] || continue
     for pm in 0 $PMIN; do
       run accept_cpu 150 "$Q" --device cpu --tp 4 --model-dir "$CKPT" --prompt-file "$W/prompt$p.txt" --n-predict 64 \
           --spec-type draft-mtp --spec-draft-n-max 3 --spec-draft-p-min "$pm" --metrics-file "$W/mc.prom"
     done
   done) &
  CPU_PID=$!
fi
for p in $(seq 0 $(( PROMPTS - 1 ))); do
  [ -f "$W/prompt$p.txt" ] || continue
  run accept 60 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/prompt$p.txt" --n-predict "$N_PREDICT" --no-profile \
      --metrics-file "$W/m.prom"
  for n in $NMAX; do
    run accept 60 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/prompt$p.txt" --n-predict "$N_PREDICT" --no-profile \
        --spec-type draft-mtp --spec-draft-n-max "$n" --metrics-file "$W/m.prom"
  done
  if [ $GPU_PMIN = 1 ]; then
    for n in $PMIN_NMAX; do
      for pm in $PMIN; do
        run accept 60 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/prompt$p.txt" --n-predict "$N_PREDICT" --no-profile \
            --spec-type draft-mtp --spec-draft-n-max "$n" --spec-draft-p-min "$pm" --metrics-file "$W/m.prom"
      done
    done
  fi
done
for j in $(seq 0 $(( PREFIXES - 1 ))); do
  [ -f "$W/prefix$j.txt" ] || continue
  for n in 0 $PREFIX_NMAX; do
    spec=""; [ "$n" = 0 ] || spec="--spec-type draft-mtp --spec-draft-n-max $n"
    run accept 60 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/prefix$j.txt" --n-predict "$PREFIX_PREDICT" \
        --no-profile $spec --metrics-file "$W/m.prom"
  done
done
# The profile at n-max 3 (the decode step's parts from their graphs, and one chained draft's
# share of a speculative round: what a draft costs), on the first prompt.
[ -f "$W/prompt0.txt" ] && run profile 90 "$Q" --device "$DEVICE" --model-dir "$CKPT" --prompt-file "$W/prompt0.txt" \
    --n-predict "$N_PREDICT" --spec-type draft-mtp --spec-draft-n-max 3 --metrics-file "$W/m.prom"
echo "GPU acceptance runs done (+$(( $(date +%s) - T0 )) s)"
[ -n "${CPU_PID:-}" ] && { wait $CPU_PID; echo "CPU p-min runs done (+$(( $(date +%s) - T0 )) s)"; }

# 3b. the decoder under a compressed all-reduce on the GPU (AGREEMENT=1, the default): the trained model at TP=2
# with --allreduce-compression fp8 / int8 against the uncompressed run (greedy tokens over 256,
# logits teacher-forced; compression_agreement.sh). With one GPU both ranks share it
# (TPCOMM_ALLOW_SHARED_DEVICE=1): the tokens are TP=2's, the speed is not.
if [ "${AGREEMENT:-1}" = 1 ] && [ "$DEVICE" = cuda ]; then
  TPCOMM_ALLOW_SHARED_DEVICE=1 MODEL_DIR="$CKPT" OUT="$W/agree" DEVICE=cuda TP=2 QWEN="$Q" COMMIT="$REV" PY="$PY" \
    timeout 150 bash "$SRC/examples/qwen_tp/compression_agreement.sh" > /dev/null 2>&1
  echo "compression agreement rc=$? (+$(( $(date +%s) - T0 )) s)"
  cp "$W/agree/compression_agreement.txt" "$OUT/" 2>/dev/null && tail -6 "$OUT/compression_agreement.txt"
fi

# 4. the table, from accept.log.
$PY - "$OUT/train.log" "$PARITY_RC" "${TINY_RC:-not run}" "$DEVICE" "$REV" "$OUT/accept.log" "$OUT/accept_cpu.log" <<'EOF' | tee "$OUT/summary.md"
import re, sys
from collections import OrderedDict
train, parity_rc, tiny_rc, device, rev, logs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
rows = OrderedDict()
cmd = None
for line in (l for log in logs for l in open(log, errors="replace")):
    if line.startswith("## ") and "qwen_tp" in line:
        cmd = line
        dev = "cpu" if "--device cpu" in cmd else "cuda"
        m = re.search(r"--spec-draft-n-max (\d+)", cmd)
        n = int(m.group(1)) if m else 0
        if "--n-predict 8 " in cmd:
            cmd = None
            continue
        m = re.search(r"--spec-draft-p-min ([0-9.]+)", cmd)
        pm = m.group(1) if m else "-"
        kind = "mid-file prefixes" if "/prefix" in cmd else "file starts"
        key = (kind, dev, n, pm)
        r = rows.setdefault(key, {"acc": 0, "drafted": 0, "rounds": 0, "tps": [], "runs": 0, "first": 0, "distinct": []})
    elif cmd and line.startswith("output: "):
        # Distinct 4-grams of the generated ids: near 1 for text, low for a loop (a greedy small
        # model can fall into one, and a loop is easy to draft: its acceptance says little).
        ids = line.split()[1:]
        grams = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
        if grams:
            r["distinct"].append(len(set(grams)) / len(grams))
    elif cmd and "eval time =" in line and "prompt" not in line:
        r["tps"].append(float(re.search(r"([0-9.]+) tokens per second", line).group(1)))
        r["runs"] += 1
    elif cmd and line.startswith("draft acceptance"):
        m = re.search(r"\((\d+) accepted / (\d+) generated\), per-token acceptance = [0-9.]+ \((\d+) accepted / (\d+)", line)
        r["acc"] += int(m.group(1)); r["drafted"] += int(m.group(2))
        r["first"] += int(m.group(4)) - int(m.group(3))
        r["rounds"] += int(re.search(r"\((\d+) verify rounds", line).group(1))
metrics = [l.strip() for l in open(train, errors="replace") if "held-out (" in l]
import datetime
print("# qwen_tp on the trained model (commit %s)" % rev)
print("# date %s; command: examples/qwen_tp/train/gpu_session.sh (train.log's environment line has the settings)\n"
      % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
print("Trained model: %s" % (metrics[-1].replace("[train] ", "") if metrics else "(no training metrics)"))
verdict = lambda rc: "PASS" if rc == "0" else "FAIL or not run (rc %s)" % rc
print("HF parity (tests/hf_parity.py --device %s): trained model %s; 30-step --tiny model %s (parity.log)\n"
      % (device, verdict(parity_rc), verdict(tiny_rc)))
print("| prompts | device | n-max | p-min | runs | accepted/drafted | per-token | mean length | decode tok/s (mean) | vs MTP off | distinct 4-grams (lowest / mean run) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
looping = False
base = {}
for (kind, dev, n, pm), r in rows.items():
    tps = sum(r["tps"]) / len(r["tps"]) if r["tps"] else 0
    if n == 0:
        base[kind, dev] = tps
    ratio = r["acc"] / r["drafted"] if r["drafted"] else 0
    per = r["acc"] / (r["acc"] + r["first"]) if r["acc"] + r["first"] else 0
    mean = 1 + r["acc"] / r["rounds"] if r["rounds"] else 1
    speed = "%.2fx" % (tps / base[kind, dev]) if base.get((kind, dev)) else "-"
    distinct = min(r["distinct"]) if r["distinct"] else float("nan")
    looping = looping or distinct < 0.5
    mean_distinct = sum(r["distinct"]) / len(r["distinct"]) if r["distinct"] else float("nan")
    print("| %s | %s | %s | %s | %d | %s | %s | %s | %.1f | %s | %.2f / %.2f |" % (
        kind, dev, n or "off", pm, r["runs"], "%.3f (%d/%d)" % (ratio, r["acc"], r["drafted"]) if n else "-",
        "%.3f" % per if n else "-", "%.2f" % mean if n else "1", tps, speed if n else "1.00x", distinct, mean_distinct))
print("\naccepted/drafted is llama.cpp's draft acceptance (summed over the prompts); decode tok/s excludes the prompt.")
print("file starts: the first PROMPT_CHARS characters of held-out files, N_PREDICT tokens; mid-file prefixes:")
print("PREFIX_CHARS characters ending inside a held-out file, PREFIX_PREDICT tokens (the values: train.log's environment line).")
print("The CPU rows (p-min on the fp32 CPU reference, --tp 4, 64 tokens) measure acceptance, not speed.")
print("distinct 4-grams: share of a run's generated 4-grams that are distinct (1: no 4-gram repeats).")
if looping:
    print("WARNING: a run's output is mostly a loop (distinct 4-grams < 0.5): a loop is easy to draft, so "
          "acceptance there overstates what the draft does on text. Do not quote those rows as the target.")
EOF
grep -aE "draft|step .*ms" "$OUT/profile.log" | tail -6
echo "total $(( $(date +%s) - T0 )) s"
