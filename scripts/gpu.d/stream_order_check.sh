#!/bin/bash
# scripts/gpu.d/stream_order_check.sh: a short check of how one communicator orders calls on
# several streams, on one GPU: the fault matrix's TwoStreams at 3 ranks, then the MPI test binary
# at 2 and 4 processes sharing the GPU (each cut at MPI_S seconds). Logs in $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CUDA_MODULE_LOADING=EAGER TPCOMM_TEST_SIZES=quick
T0=$(date +%s); B=/tmp/bl; L=$OUT/streams-mpi.txt
hdr() { echo "# commit $COMMIT"; echo "# date $(date -u +%FT%TZ)"; echo "# command: $*"; }
hdr "scripts/gpu.d/stream_order_check.sh: cmake + ninja tpcomm_gpu_tests tpcomm_gpu_mpi_tests; the filtered runs below" > $L
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DTPCOMM_BUILD_TESTS=ON > $OUT/build.log 2>&1 &&
  ninja -C $B -j16 tpcomm_gpu_tests tpcomm_gpu_mpi_tests >> $OUT/build.log 2>&1
echo "build rc=$? $(( $(date +%s)-T0 ))s" | tee -a $L
echo "\$ TPCOMM_TEST_RANKS=3 tpcomm_gpu_tests --gtest_filter=All/FaultEach.TwoStreams/*" >> $L
TPCOMM_TEST_RANKS=3 timeout -k 5 30 $B/tests/gpu/tpcomm_gpu_tests --gtest_color=no --gtest_filter='All/FaultEach.TwoStreams/*' >> $L 2>&1
echo "# rc=$? $(( $(date +%s)-T0 ))s" | tee -a $L
for np in 2 4; do
  echo "\$ mpirun -np $np tpcomm_gpu_mpi_tests" >> $L
  timeout -k 5 ${MPI_S:-35} mpirun -np $np --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x TPCOMM_MULTICAST -x CUDA_MODULE_LOADING -x TPCOMM_TEST_SIZES \
    $B/tests/gpu/tpcomm_gpu_mpi_tests --gtest_color=no >> $L 2>&1
  echo "# rc=$? $(( $(date +%s)-T0 ))s" | tee -a $L
done
grep -aE "^\[  (PASSED|FAILED) |^\[       OK|passed, " $L | sort | uniq -c | sort -rn | head -5
echo "OK lines: $(grep -ac '^\[       OK' $L), FAILED lines: $(grep -ac '^\[  FAILED' $L), segfaults: $(grep -ac 'Segmentation' $L)"
grep -a "^\[  FAILED" $L | head -5
