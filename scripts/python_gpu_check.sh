#!/usr/bin/env bash
# scripts/python_gpu_check.sh [OUTDIR] [check options]: the Python package's GPU check on a machine that has
# torch and CUDA GPUs but cannot `pip install` (the GPU machine): builds libtpcomm as the wheel
# does (-DSKBUILD=ON: CUDA runtime static, unversioned; no NCCL, MPI or shim), lays the package
# out in a scratch site folder, and runs tests/python/torch_gpu_check.py under torchrun on
# min(GPUs, 2) ranks (one GPU: the one-rank cases; the all-reduce is then a copy). Multicast off.
# Logs to OUTDIR (default $OUT, else ./gpu-logs): python_gpu_build.log, python_gpu_check.txt.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR=${OUT:-$root/gpu-logs}
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUTDIR=$1; shift; fi  # the rest go to the check
B=${BUILD:-/tmp/tpcomm-py-build}
SITE=/tmp/tpcomm-py-site
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
cmake -S "$root" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
  -DSKBUILD=ON -DTPCOMM_WITH_NCCL=OFF -DTPCOMM_WITH_MPI=OFF -DTPCOMM_BUILD_SHIM=OFF -DTPCOMM_BUILD_TESTS=OFF \
  -DTPCOMM_BUILD_BENCH=OFF -DTPCOMM_BUILD_EXAMPLES=OFF -DTPCOMM_BUILD_TOOLS=OFF > "$OUTDIR/python_gpu_build.log" 2>&1 &&
  ninja -C "$B" tpcomm >> "$OUTDIR/python_gpu_build.log" 2>&1
rc=$?
echo "libtpcomm build rc=$rc"
[ $rc = 0 ] || { tail -20 "$OUTDIR/python_gpu_build.log"; exit 1; }
rm -rf "$SITE" && mkdir -p "$SITE/tpcomm"
cp -r "$root/python/tpcomm/." "$SITE/tpcomm/" && mkdir -p "$SITE/tpcomm/lib" && cp -L "$B/libtpcomm.so" "$SITE/tpcomm/lib/"
# PY_BUILD_ONLY=1: stop here, the package laid out in $SITE (scripts/python_gpu_e2e.sh runs from it).
[ "${PY_BUILD_ONLY:-0}" = 1 ] && { echo "package laid out in $SITE"; exit 0; }
ngpu=$(python3 -c "import torch; print(min(torch.cuda.device_count(), 2))")
echo "# commit ${COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}; date $(date -u +%FT%TZ); command: $0 $*" \
  > "$OUTDIR/python_gpu_check.txt"
PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 python3 -m torch.distributed.run --nproc_per_node="$ngpu" \
  "$root/tests/python/torch_gpu_check.py" "$@" >> "$OUTDIR/python_gpu_check.txt" 2>&1
rc=$?
echo "torch_gpu_check ($ngpu rank(s)) rc=$rc"
grep -a "passed\|FAIL\|Error" "$OUTDIR/python_gpu_check.txt" | tail -8
if [ $rc != 0 ]; then
  # Diagnose a crash of Communicator creation with torch imported (static runtime code bound to
  # torch's libstdc++ did this once: CMakeLists.txt, --exclude-libs). One rank, torch first,
  # full tpcomm log, native frames from gdb where the machine has it.
  cat > /tmp/tpcomm_crash_repro.py <<'PY'
import faulthandler, sys, torch, tpcomm
faulthandler.enable(all_threads=True)
torch.cuda.set_device(0)
print("torch", torch.__version__, "cuda init", torch.cuda.is_initialized(), flush=True)
c = tpcomm.Communicator(1, tpcomm.get_unique_id(), 0, device=0)
print("created", c, flush=True)
PY
  {
    head -1 "$OUTDIR/python_gpu_check.txt"
    export TPCOMM_DEBUG=TRACE
    echo "# crash repro: torch imported first, one rank, TPCOMM_DEBUG=TRACE"
    if command -v gdb > /dev/null; then
      PYTHONPATH="$SITE" gdb -batch -ex run -ex bt -ex "info sharedlibrary" \
        --args python3 /tmp/tpcomm_crash_repro.py 2>&1 | tail -150
    else
      echo "(no gdb on this machine: Python frames only)"
      PYTHONPATH="$SITE" python3 -X faulthandler /tmp/tpcomm_crash_repro.py 2>&1 | tail -80
    fi
    echo "# without torch imported:"
    PYTHONPATH="$SITE" python3 -X faulthandler -c \
      "import tpcomm; print(tpcomm.Communicator(1, tpcomm.get_unique_id(), 0, device=0))" 2>&1 | tail -20
    # Symbol interposition: which of libtpcomm's references bind outside it when torch is loaded
    # (a CUDA runtime or json symbol bound to torch's copy would explain the crash), and whether
    # the crash goes away when libtpcomm is loaded first with RTLD_DEEPBIND (its own symbols first).
    echo "# libtpcomm's references bound to another library (LD_DEBUG=bindings, torch first):"
    PYTHONPATH="$SITE" LD_DEBUG=bindings LD_DEBUG_OUTPUT=/tmp/tpcomm_ld python3 /tmp/tpcomm_crash_repro.py > /dev/null 2>&1
    cat /tmp/tpcomm_ld.* 2>/dev/null | grep "binding file .*libtpcomm.so" | grep -v "to .*libtpcomm.so" |
      sed 's/.*binding file //' | sort | uniq -c | sort -rn | head -60
    rm -f /tmp/tpcomm_ld.*
    echo "# torch first, libtpcomm preloaded with RTLD_DEEPBIND:"
    PYTHONPATH="$SITE" python3 -X faulthandler -c "
import ctypes, os, torch
ctypes.CDLL('$SITE/tpcomm/lib/libtpcomm.so', mode=os.RTLD_LOCAL | os.RTLD_DEEPBIND)
import tpcomm
torch.cuda.set_device(0)
print('created with DEEPBIND', tpcomm.Communicator(1, tpcomm.get_unique_id(), 0, device=0))" 2>&1 | tail -20
  } > "$OUTDIR/python_crash_repro.txt" 2>&1
  echo "crash repro: $OUTDIR/python_crash_repro.txt"
fi
exit $rc
