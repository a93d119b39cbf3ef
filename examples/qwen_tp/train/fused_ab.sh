#!/bin/bash
# fused_ab.sh: the fused draft kernels against the separate ones on one H200, in one device call (~5 minutes):
#   1. build qwen_tp and qwen_gpu_test (sm_90); run qwen_gpu_test whole (FusedKernelsGiveTheSameBits
#      among them: fused against --no-fused-kernels bit for bit, TP=1 and TP=2 on one GPU);
#   2. a checkpoint of the trained model's shape (8 layers, hidden 512, vocab 4096, MTP head) from
#      STEPS training steps: the weights barely trained, which does not change a step's time;
#   3. qwen_tp on it, TP=1, CUDA graphs, n-max 3, fused and --no-fused-kernels alternated A B B A
#      (REPS times), the profile's decode-step and draft-step times and node counts, generated ids
#      compared. Logs under $OUT, each opening with commit, date and command. Usage:
#   OUT=/path COMMIT=<hash> bash examples/qwen_tp/train/fused_ab.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
export TPCOMM_ALLOW_SHARED_DEVICE=1 CUDA_MODULE_LOADING=EAGER
SRC=$(pwd); OUT=${OUT:?set OUT}; B=${BUILD:-/tmp/qwen-fused-build}; PY=${PY:-python3}
STEPS=${STEPS:-20}; REPS=${REPS:-2}; CK=/tmp/qwen_fused/ckpt; mkdir -p "$OUT" /tmp/qwen_fused
REV=${COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}; T0=$(date +%s)
el() { echo "+$(( $(date +%s) - T0 )) s"; }
for l in build test ckpt ab; do
  { echo "# commit $REV"; echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "# command: examples/qwen_tp/train/fused_ab.sh ($l part)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# gpu /'; } > "$OUT/$l.log"
done
run() { local log=$OUT/$1.log t=$2; shift 2; echo "## $(date -u +%H:%M:%S) $*" >> "$log"
  timeout -k 5 "$t" "$@" >> "$log" 2>&1; local rc=$?; echo "## rc=$rc" >> "$log"; return $rc; }
$PY -u "$SRC/examples/qwen_tp/train/train_tiny_qwen.py" --device cuda --steps "$STEPS" --minutes 3 --out "$CK" \
  >> "$OUT/ckpt.log" 2>&1 &
TRAIN=$!
run build 300 bash -c "cmake -S '$SRC' -B '$B' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build '$B' -j14 --target qwen_tp qwen_gpu_test"
echo "build rc=$? $(el)"
wait $TRAIN; rc=$?; echo "ckpt rc=$rc $(el)"; echo "## rc=$rc (train_tiny_qwen.py --steps $STEPS)" >> "$OUT/ckpt.log"
run test 240 "$B/examples/qwen_tp/tests/qwen_gpu_test"
echo "test rc=$? $(el) $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test.log" | tr '\n' ' ')"
Q="$B/examples/qwen_tp/qwen_tp --device cuda --model-dir $CK --prompt-tokens 260 --n-predict 200 --spec-type draft-mtp --spec-draft-n-max 3"
i=0
for r in $(seq "$REPS"); do
  for v in fused unfused unfused fused; do
    i=$((i + 1)); flag=""; [ $v = unfused ] && flag=--no-fused-kernels
    run ab 90 $Q $flag --output-ids "/tmp/qwen_fused/$v.$i.ids" --metrics-file /tmp/qwen_fused/m.prom
    echo "$v: $(grep -E '^(decode step|draft step)' "$OUT/ab.log" | tail -2 | cut -c1-150 | tr '\n' ' ')"
  done
done
first=$(ls /tmp/qwen_fused/*.ids | head -1); same=1
for f in /tmp/qwen_fused/*.ids; do cmp -s "$first" "$f" || same=0; done
echo "# generated ids equal in every run: $same" | tee -a "$OUT/ab.log"
echo "total $(el)"
