#!/bin/bash
# bench_snapshot.sh: the command each qwen_tp device call ran (bench/results/raw/h200x1/qwen-*), kept
# here as .qwen_snap/device1.sh was run: from the root of a checkout holding .qwen_snap/src.tgz
# (`git archive --format=tar.gz -o .qwen_snap/src.tgz HEAD`) and .qwen_snap/COMMIT (`git rev-parse
# HEAD`), so that the build on the device is exactly that commit, whatever else the working tree
# holds. Usage: bash examples/qwen_tp/bench_snapshot.sh test bench8 variants long bench32 compile
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
C=$(cat .qwen_snap/COMMIT)
mkdir -p /tmp/src /tmp/logs && tar xzf .qwen_snap/src.tgz -C /tmp/src || exit 1
cd /tmp/src
n=$#; i=0
for p in "$@"; do
  i=$((i + 1)); S=0; [ $i = $n ] && S=1
  COMMIT=$C OUT=/tmp/logs BUILD=/tmp/src/build-h200 SUMMARY=$S COMPILE_TIMEOUT=100 bash examples/qwen_tp/bench_h200x1.sh $p 2>&1 | tail -80
done
tar czf $OUT/qwen_logs.tgz -C /tmp logs
ls -la $OUT
