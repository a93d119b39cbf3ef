# scripts/gpu_common.sh: sourced by gpu_check.sh and gpu_bench.sh (a GPU session). Sets the
# safety environment (multicast off, docs/multicast.md; mpirun forwards these with -x), root, OUTDIR
# (argument 1, else $OUT, else ./gpu-logs), B (the build, $BUILD or /tmp/tpcomm-gpu-build), L
# (the log folder), el (seconds since start) and gpu_build (configure + build with Ninja).
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR=${1:-${OUT:-$root/gpu-logs}}
B=${BUILD:-/tmp/tpcomm-gpu-build}
L=$OUTDIR/logs
mkdir -p "$L"
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 ))s"; }
gpu_build() {
  { echo "# commit ${COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null)}"; echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# command: cmake -S . -B $B -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90} -DCMAKE_BUILD_TYPE=Release && ninja -C $B"; } > "$L/build.log"
  cmake -S "$root" -B "$B" -G Ninja -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DCMAKE_BUILD_TYPE=Release \
    >> "$L/build.log" 2>&1 && ninja -C "$B" -j"$(nproc)" -k 0 >> "$L/build.log" 2>&1
  echo "build rc=$? $(el)"
  grep -a -B2 -A6 " error" "$L/build.log" | head -20
}
MPI="mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x TPCOMM_MULTICAST"
