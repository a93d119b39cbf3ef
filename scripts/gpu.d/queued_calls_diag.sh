#!/bin/bash
# scripts/gpu.d/queued_calls_diag.sh: on one GPU, which (ranks, algorithm, PDL, graph, hardware
# queues) time out when allreduce_perf -t N queues 20 calls per batch with ranks sharing the GPU;
# then the decoder at TP=2 and 4 on a 1524-token prompt, and one qwen3-8b decode step under ncu.
# It builds the tree at .scratch/old (a `git archive` of the commit to diagnose) into /tmp/b33;
# logs and a summary in $OUT. The run behind bench/results/h200x1.md's diagnosis table
# (commit 5128b77).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
export TPCOMM_ALLOW_SHARED_DEVICE=1 TPCOMM_TIMEOUT_MS=3000 CUDA_MODULE_LOADING=EAGER
SRC=$(pwd); B=/tmp/b33; L=$OUT/diag; mkdir -p $L
REV=${COMMIT:-$(git rev-parse HEAD 2>/dev/null)}; echo "# commit $REV date $(date -u +%FT%TZ) command scripts/gpu.d/queued_calls_diag.sh" | tee $L/env.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $L/env.txt
T0=$(date +%s)
cmake -S .scratch/old -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DTPCOMM_BUILD_TESTS=ON > $L/build.log 2>&1 &&
  ninja -C $B -j16 allreduce_perf qwen_tp tpcomm_gpu_tests >> $L/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-T0 ))s"
P=$B/bench/allreduce_perf
one() { # tag env... -- args
  local tag=$1; shift
  local t1=$(date +%s)
  timeout -k 5 60 env "$@" > $L/$tag.txt 2>&1; local rc=$?
  local wrong=$(awk '!/^#/ && NF>=13 {w+=$9+$13} END{print w+0}' $L/$tag.txt)
  local algos=$(awk '!/^#/ && NF>=14 {print $NF}' $L/$tag.txt | sort | uniq -c | tr '\n' ' ')
  printf "%-44s rc=%-3s %3ss wrong=%s %s %s\n" "$tag" "$rc" "$(( $(date +%s)-t1 ))" "$wrong" "$(grep -c -i 'timeout\|unusable' $L/$tag.txt)to" "$algos" | tee -a $L/summary.txt
}
for N in 4 8; do
  bl=$((128/(2*N))); sb=$((64/(2*N)))
  for conn in 8 32; do for pdl in 1 0; do for g in 0 5; do
    one "N$N.twoshot.conn$conn.pdl$pdl.G$g.b$bl" CUDA_DEVICE_MAX_CONNECTIONS=$conn TPCOMM_PDL=$pdl TPCOMM_P2P_BLOCKS=$bl TPCOMM_TWOSHOT_BLOCKS=$bl $P -t $N -d bf16 -b 8 -e 4M -f 8 -n 20 -w 5 -K 2 -G $g -A twoshot_p2p
  done; done; done
  one "N$N.oneshot.conn8.pdl1.G0.b$bl" TPCOMM_P2P_BLOCKS=$bl TPCOMM_TWOSHOT_BLOCKS=$bl $P -t $N -d bf16 -b 8 -e 512K -f 8 -n 20 -w 5 -K 2 -A oneshot_p2p
  one "N$N.ll_as_ar.conn8.pdl1.G5.b$bl" TPCOMM_P2P_BLOCKS=$bl TPCOMM_TWOSHOT_BLOCKS=$bl $P -t $N -d bf16 -b 8 -e 4M -f 8 -n 20 -w 5 -K 2 -G 5 -A ll_p2p
  one "N$N.staged.conn8.pdl1.G5.sb$sb" TPCOMM_DEBUG=INFO TPCOMM_DEBUG_SUBSYS=COLL TPCOMM_STAGED_BLOCKS=$sb TPCOMM_P2P_BLOCKS=$bl TPCOMM_TWOSHOT_BLOCKS=$bl $P -t $N -d bf16 -b 8 -e 4M -f 8 -n 20 -w 5 -K 2 -G 5 -A staged_host
  one "N$N.staged.conn8.pdl1.G0.sb$sb" TPCOMM_STAGED_BLOCKS=$sb $P -t $N -d bf16 -b 8 -e 4M -f 8 -n 20 -w 5 -K 2 -A staged_host
done
one "N4.twoshot.conn32.pdl0.G0.b64" CUDA_DEVICE_MAX_CONNECTIONS=32 TPCOMM_PDL=0 TPCOMM_TWOSHOT_BLOCKS=64 $P -t 4 -d bf16 -b 8 -e 4M -f 8 -n 20 -w 5 -K 2 -A twoshot_p2p
one "N4.twoshot.conn8.pdl1.G0.n1.b16" TPCOMM_TWOSHOT_BLOCKS=16 $P -t 4 -d bf16 -b 8 -e 4M -f 8 -n 1 -w 1 -K 2 -A twoshot_p2p
one "N3.twoshot.conn8.pdl1.G0.b21" TPCOMM_TWOSHOT_BLOCKS=21 TPCOMM_P2P_BLOCKS=21 $P -t 3 -d bf16 -b 8 -e 4M -f 8 -n 20 -w 5 -K 2 -A twoshot_p2p
one "N2.twoshot.conn8.pdl1.G0.b64" TPCOMM_TWOSHOT_BLOCKS=64 $P -t 2 -d bf16 -b 8 -e 4M -f 8 -n 20 -w 5 -K 2 -A twoshot_p2p
# the decoder with ranks sharing the GPU: TP=2 and TP=4, 1524-token prompt, 2048 micro-batch
Q=$B/examples/qwen_tp/qwen_tp
for i in 1 2 3 4 5; do
  one "qwen.tp2.run$i" $Q --model-preset qwen3-0.6b --tp 2 --prompt-tokens 1524 --ubatch-size 2048 --n-predict 8 --no-profile
done
for i in 1 2 3; do
  one "qwen.tp4.run$i" $Q --model-preset qwen3-0.6b --tp 4 --prompt-tokens 1524 --ubatch-size 2048 --n-predict 8 --no-profile
done
# one qwen3-8b decode step's kernels under ncu, 16-token prompt, 2 decode steps, no graphs
if command -v ncu >/dev/null; then
  timeout -k 5 150 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
    $B/examples/qwen_tp/qwen_tp --model-preset qwen3-8b --prompt-tokens 16 --n-predict 3 --no-graphs --no-profile > $L/ncu_decode8b.csv 2> $L/ncu_decode8b.err
  echo "ncu rc=$? $(wc -l < $L/ncu_decode8b.csv) lines"
else echo "no ncu"; fi
echo "diag total $(( $(date +%s)-T0 ))s"
cat $L/summary.txt > $OUT/summary.txt
tar czf $OUT/diag.tgz -C $OUT diag && rm -rf $L
