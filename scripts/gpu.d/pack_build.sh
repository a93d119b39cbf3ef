#!/usr/bin/env bash
# scripts/gpu.d/pack_build.sh BUILD OUT.tgz: the binaries of the one-GPU runs (scripts/gpu.sh ranks
# and the fault, MPI, shim-double and decoder steps) packed from a build folder made off the GPU
# machine, keeping the build's layout: libtpcomm, libtpcomm_nccl and the NCCL test double, the
# GPU test binaries, qwen_tp with its GPU test and gemv_bench, allreduce_perf, and tpcomm-doctor (the topology
# probe's helper, found beside the library as in the build). About 16 MB compressed, small
# enough to carry to a GPU machine, where `PACKED=OUT.tgz scripts/gpu.sh ranks` unpacks it into
# $BUILD and runs without building (the build is ~2 of the call's 10 minutes). The binaries find
# their libraries through LD_LIBRARY_PATH there (their run paths name this machine's folder).
set -euo pipefail
B=${1:?usage: pack_build.sh BUILD OUT.tgz}
OUT=${2:?usage: pack_build.sh BUILD OUT.tgz}
files=(libtpcomm.so libtpcomm.so.0 libtpcomm_nccl.so tests/shim/libfake_nccl.so tests/shim/libfake_nccl.so.2
  tests/gpu/tpcomm_gpu_tests tests/gpu/tpcomm_gpu_mpi_tests tests/shim/tpcomm_shim_fake
  tests/shim/tpcomm_nccl_transport_fake examples/qwen_tp/qwen_tp examples/qwen_tp/tests/qwen_gpu_test
  examples/qwen_tp/gemv_bench
  bench/allreduce_perf tools/tpcomm-doctor)
have=()
for f in "${files[@]}"; do
  if [ -e "$B/$f" ]; then have+=("$f"); else echo "pack_build.sh: $B/$f is missing (build it first)" >&2; exit 1; fi
done
# The versioned library itself, behind its links.
have+=("$(basename "$(readlink -f "$B/libtpcomm.so.0")")")
tar czf "$OUT" -C "$B" "${have[@]}"
echo "$OUT: ${#have[@]} files, $(du -h "$OUT" | cut -f1)"
