#!/usr/bin/env bash
# run at commit b7dffdd33fb0b3971f9ffd7ab79054b261f93a76, 2026-12-02 04:06 UTC (session 11 call 3): COMMIT=b7dffdd33fb0b3971f9ffd7ab79054b261f93a76 bash scratch_diag/diag.sh
# temporary: why does the teacher-forced 516-token TP=2 shared-GPU run time out?
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
export TPCOMM_ALLOW_SHARED_DEVICE=1
SRC=$(pwd); B=/tmp/diagb; D=$OUT/diag; mkdir -p $D
T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 ))s"; }
( python3 -u examples/qwen_tp/train/train_tiny_qwen.py --device cuda --steps 20 --max-files 300 --minutes 2 --out /tmp/ck > $D/train.log 2>&1; echo "train rc=$?" >> $D/train.log ) &
TP=$!
cmake -S . -B $B -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DTPCOMM_BUILD_TESTS=OFF > $D/build.log 2>&1 && ninja -C $B -j16 qwen_tp allreduce_perf >> $D/build.log 2>&1; echo "build rc=$? $(el)"
wait $TP; tail -2 $D/train.log; echo "train done $(el)"
which gdb eu-stack 2>&1 | head -2
Q=$B/examples/qwen_tp/qwen_tp
python3 -c "
import random; random.seed(1)
for n in (260,516,1040): open('/tmp/ids%d'%n,'w').write(' '.join(str(random.randrange(4,4000)) for _ in range(n)))"
t() {  # NAME ENV... -- ARGS
  local name=$1; shift; local env=(); while [ "$1" != -- ]; do env+=("$1"); shift; done; shift
  ( env "${env[@]}" TPCOMM_TIMEOUT_MS=9000 timeout 60 $Q --device cuda --tp 2 --model-dir /tmp/ck --no-profile "$@" > $D/$name.log 2>&1; echo "rc=$?" >> $D/$name.log ) &
  local p=$!
  sleep 5
  if kill -0 $p 2>/dev/null; then pid=$(pgrep -f "model-dir /tmp/ck" | head -1); [ -n "$pid" ] && command -v gdb >/dev/null && timeout 20 gdb -p $pid -batch -ex "thread apply all bt 12" > $D/$name.gdb 2>&1; fi
  wait $p
  echo "$name: $(tail -1 $D/$name.log) $(grep -c kTimeout $D/$name.log) timeouts $(el)"
}
t a260 X=1 -- --prompt-ids @/tmp/ids260 --n-predict 1 --dump-logits /tmp/a.l
t a516 X=1 -- --prompt-ids @/tmp/ids516 --n-predict 1 --dump-logits /tmp/a.l
t b516nodump X=1 -- --prompt-ids @/tmp/ids516 --n-predict 1
t c516np8 X=1 -- --prompt-ids @/tmp/ids516 --n-predict 8
t d516ub256 X=1 -- --prompt-ids @/tmp/ids516 --n-predict 1 --ubatch-size 256
t e516twoshot TPCOMM_ALGO=twoshot_p2p -- --prompt-ids @/tmp/ids516 --n-predict 1
t f516oneshot TPCOMM_ALGO=oneshot_p2p -- --prompt-ids @/tmp/ids516 --n-predict 1
t g516lamport TPCOMM_ALGO=lamport_p2p -- --prompt-ids @/tmp/ids516 --n-predict 1
t h516nofuse X=1 -- --prompt-ids @/tmp/ids516 --n-predict 1 --no-fused-norm
t i1040 X=1 -- --prompt-ids @/tmp/ids1040 --n-predict 1
t j516info TPCOMM_DEBUG=INFO -- --prompt-ids @/tmp/ids516 --n-predict 1
echo "diag total $(el)"
STAGED_SWEEP=1 SKIP="qwen_gpu qwen_cli compression halves tune" SKIP_BUILD=1 BUILD=$B COMMIT=$COMMIT bash scripts/gpu_shared_check.sh $OUT/sweep 2>&1 | tail -6
echo "all $(el)"
