#!/bin/bash
# calibrate.sh: what a training step of the draft recipe costs on this GPU, per preset, so that
# draft_session.sh's STEPS (the deterministic step count) fills its minutes. For each preset in
# PRESETS (default "base wide"): train_tiny_qwen.py --time-steps TIMED on CORPUS with the draft
# recipe (--mtp-chain 3 --mtp-distill 0.5 --unlikelihood 1.0, EXTRA_ARGS: by default --compile
# --fast-generate) and a sequence-level pass on every 2nd step, so one process (one compile)
# times plain steps and steps with the pass apart. Then, per preset, the steps that fit in
# TRAIN_S seconds of training under draft_session.sh's schedule: a sequence-level step every
# SEQ_EVERY-th from SEQ_FROM of the steps on (defaults 6 and 0.5, the default recipe's).
# Logs: $OUT/calibrate.log (commit, date, command first); the table last on stdout and in
# $OUT/calibrate.md. Usage, from the repository root:
#   OUT=/path CORPUS=.scratch/corpus-big bash examples/qwen_tp/train/calibrate.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
SRC=$(pwd)
OUT=${OUT:?set OUT}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
CORPUS=${CORPUS-$SRC/.scratch/corpus}  # empty: the trainer's own corpus (this machine's standard library)
PRESETS=${PRESETS:-"base wide"}
TIMED=${TIMED:-20}
TRAIN_S=${TRAIN_S:-300}
SEQ_EVERY=${SEQ_EVERY:-6}
SEQ_FROM=${SEQ_FROM:-0.5}
EXTRA_ARGS=${EXTRA_ARGS-"--compile --fast-generate"}
mkdir -p "$OUT"
# shellcheck disable=SC2034  # REV and T0: read by session_common.sh's header and run
REV=${COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
T0=$(date +%s)
. "$SRC/examples/qwen_tp/train/session_common.sh"
header "$OUT/calibrate.log" "examples/qwen_tp/train/calibrate.sh; PRESETS='$PRESETS' TIMED=$TIMED TRAIN_S=$TRAIN_S \
SEQ_EVERY=$SEQ_EVERY SEQ_FROM=$SEQ_FROM EXTRA_ARGS='$EXTRA_ARGS' CORPUS=$CORPUS DEVICE=$DEVICE"
for p in $PRESETS; do
  # shellcheck disable=SC2086
  run calibrate 400 $PY -u "$SRC/examples/qwen_tp/train/train_tiny_qwen.py" --device "$DEVICE" ${CORPUS:+--corpus "$CORPUS"} \
    --preset "$p" --mtp-chain 3 --mtp-distill 0.5 --unlikelihood 1.0 --seq-unlikelihood 1 --seq-ul-from 0 \
    --seq-ul-every 2 --seq-ul-rows 128 --time-steps "$TIMED" --out "$OUT/unused" $EXTRA_ARGS
  echo "preset $p rc=$? (+$(( $(date +%s) - T0 )) s)"
done
$PY - "$OUT/calibrate.log" "$TRAIN_S" "$SEQ_EVERY" "$SEQ_FROM" <<'EOF' | tee "$OUT/calibrate.md"
import re, sys
log, budget, every, frac = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rows, cur, kinds = {}, None, []
for line in open(log, errors="replace"):
    m = re.search(r"--preset (\S+)", line)
    if line.startswith("## ") and m:
        cur = m.group(1)
    m = re.search(r"--time-steps: (plain steps|steps with [^:]+): (\d+), ([0-9.]+) ms each", line)
    if m and cur:
        rows.setdefault(cur, {})[m.group(1)] = float(m.group(3))
        kinds.append((cur, m.group(1), int(m.group(2)), float(m.group(3))))
    m = re.search(r"--compile: step compiled .* in ([0-9.]+) s", line)
    if m and cur:
        rows.setdefault(cur, {})["compile"] = float(m.group(1))
    m = re.search(r"corpus and tokenizer ([0-9.]+) s", line)
    if m and cur:
        rows.setdefault(cur, {})["corpus"] = float(m.group(1))
print("| preset | plain step ms | with a sequence-level pass ms | compile s | corpus s | steps in %.0f s "
      "(a sequence-level pass every %d from %.0f%% of them) |" % (budget, every, 100 * frac))
print("|---|---|---|---|---|---|")
for p, r in rows.items():
    plain, seq = r.get("plain steps"), r.get("steps with a sequence-level pass")
    if plain is None or seq is None:
        print("| %s | (no timing: see calibrate.log) | | | | |" % p)
        continue
    mean = plain + (1 - frac) / every * (seq - plain)  # ms per step over the whole schedule
    fmt = lambda k: "%.0f" % r[k] if k in r else "-"
    print("| %s | %.1f | %.1f | %s | %s | %d |" % (p, plain, seq, fmt("compile"), fmt("corpus"), int(budget * 1e3 / mean)))
if kinds:  # every kind of step timed (with --ditto in EXTRA_ARGS: DITTO's too)
    print("\n| preset | timed steps | count | mean ms |\n|---|---|---|---|")
    for p, k, n, ms in kinds:
        print("| %s | %s | %d | %.1f |" % (p, k, n, ms))
EOF
echo "total $(( $(date +%s) - T0 )) s"
