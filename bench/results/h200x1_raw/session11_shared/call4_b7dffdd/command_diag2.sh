#!/usr/bin/env bash
# run at commit b7dffdd33fb0b3971f9ffd7ab79054b261f93a76, 2026-12-02 04:11 UTC (session 11 call 4): COMMIT=b7dffdd33fb0b3971f9ffd7ab79054b261f93a76 bash scratch_diag/diag2.sh
# session 11: compression agreement at TP=2 (shared GPU) on a 2.5-minute trained model, a repeat
# count of the teacher-forced run (the flake of call 2), and the STAGED_SWEEP logs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
SRC=$(pwd); B=/tmp/diagb; D=$OUT/r; mkdir -p $D
T0=$(date +%s); el() { echo "+$(( $(date +%s) - T0 ))s"; }
{ echo "# commit $COMMIT"; echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "# command: scratch script (session 11 call 4): train_tiny_qwen.py --minutes 2.5 --mtp-chain 3 --keep-best --extra-corpus 50; compression_agreement.sh TP=2 shared; 10 teacher-forced repeats; STAGED_SWEEP"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $D/env.txt
( python3 -u examples/qwen_tp/train/train_tiny_qwen.py --device cuda --minutes 2.5 --mtp-chain 3 --keep-best --extra-corpus 50 --out /tmp/ck2 > $D/train.log 2>&1; echo "train rc=$?" >> $D/train.log ) &
TP=$!
cmake -S . -B $B -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release -DTPCOMM_BUILD_TESTS=OFF > $D/build.log 2>&1 && ninja -C $B -j16 qwen_tp allreduce_perf >> $D/build.log 2>&1; echo "build rc=$? $(el)"
STAGED_SWEEP=1 SKIP="qwen_gpu qwen_cli compression halves tune" SKIP_BUILD=1 BUILD=$B bash scripts/gpu_shared_check.sh $D/sweep 2>&1 | tail -6
wait $TP; grep "held-out" $D/train.log | tail -2; tail -1 $D/train.log; echo "train done $(el)"
for i in 1 2 3; do
  TPCOMM_ALLOW_SHARED_DEVICE=1 MODEL_DIR=/tmp/ck2 OUT=$D/agree$i DEVICE=cuda TP=2 QWEN=$B/examples/qwen_tp/qwen_tp timeout 150 bash examples/qwen_tp/compression_agreement.sh > /dev/null 2>&1
  rc=$?; echo "agreement try $i rc=$rc $(el)"; sed -n '/^# Summary/,$p' $D/agree$i/compression_agreement.txt
  [ $rc = 0 ] && break
done
W=$(ls -d $D/agree*/work | tail -1)
for i in $(seq 1 10); do
  TPCOMM_ALLOW_SHARED_DEVICE=1 timeout 60 $B/examples/qwen_tp/qwen_tp --device cuda --tp 2 --model-dir /tmp/ck2 --allreduce-compression none --prompt-ids @$W/seq.ids --n-predict 1 --dump-logits /tmp/tf.l --no-profile > $D/rep$i.log 2>&1
  echo "tf repeat $i rc=$? $(grep -c kTimeout $D/rep$i.log) timeout lines $(el)"
done
rm -rf $D/agree*/work
tar czf $OUT/session11_call4.tgz -C $D . && rm -rf $D
echo "all $(el)"
