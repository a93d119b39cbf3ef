#!/bin/bash
# prefill_torch_ab.sh: qwen_tp's prefill against PyTorch's SDPA prefill at every prompt length, and
# two builds of qwen_tp against each other, on one H200 in one device call (no build here: the
# binaries come built off the device, scripts/gpu.d/pack_build.sh). Steps:
#   1. the B build's qwen_gpu_test on the prefill and wide-row kernel tests (TESTS=0 leaves it out);
#   2. `ncu --clock-control none` of the kernels between the weight products (swiglu, qkNormRope,
#      addRmsNorm; NCU_COUNT launches after the first 8) in one 2048-token prefill, A and B:
#      kernel, grid, time, DRAM bytes read and written (NCU=0 leaves it out);
#   3. per prompt length (LENGTHS, longest that matters first): qwen_tp A, PyTorch, qwen_tp B,
#      qwen_tp B, PyTorch, qwen_tp A (qwen3-8b, synthetic weights, --n-predict 4, the default
#      2048-token micro-batch; UBATCH_B="4096" adds two B runs at that micro-batch for prompts of
#      8192 and more). qwen_tp reports its cold prefill (the process's first) apart from the
#      warm one; PyTorch's figure is its second prefill (torch_tp_decode.py times no cold one);
#   4. the B build's whole qwen_gpu_test, with what is left of BUDGET_S (TESTS=0 leaves it out).
# A and B: BUILD_A and BUILD_B (build folders; default both build-h200), their commits COMMIT_A
# and COMMIT_B (default git rev-parse HEAD). Logs in $OUT (each opens with commit, date, command
# and GPU), the table in $OUT/table.md and on stdout, last. Usage, from the repository root:
#   OUT=/path/to/out BUILD_A=b-old COMMIT_A=<hash> BUILD_B=b-new bash examples/qwen_tp/prefill_torch_ab.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
SRC=$(pwd)
D=${OUT:?set OUT}
mkdir -p "$D"
HEAD_REV=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)
BA=${BUILD_A:-$SRC/build-h200} BB=${BUILD_B:-$SRC/build-h200}
RA=${COMMIT_A:-$HEAD_REV} RB=${COMMIT_B:-$HEAD_REV}
TB=${TORCH_BASELINE:-$SRC/.scratch/baselines/torch_tp_decode.py}
[ -f "$TB" ] || TB=$SRC/../shared/baselines/torch_tp_decode.py
LENGTHS=${LENGTHS:-"8192 32000 2048 512"}
BUDGET=${BUDGET_S:-470}
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
hdr() {  # hdr <commit> <command...>
  { echo "# commit $1"; echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ)"; shift; echo "# command: $*"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | sed 's/^/# gpu /'; }
}
build() { [ "$1" = a ] && echo "$BA" || echo "$BB"; }
rev() { [ "$1" = a ] && echo "$RA" || echo "$RB"; }
# runlog <log> <commit> <timeout> <command...>
runlog() {
  local log=$1 c=$2 t=$3; shift 3
  { hdr "$c" "$@"; timeout "$t" "$@"; echo "# rc=$?"; } > "$log" 2>&1
}
q() {  # q <a|b> <prompt> <tag> [extra qwen_tp arguments]
  local v=$1 P=$2 tag=$3; shift 3
  LD_LIBRARY_PATH="$(build "$v")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" runlog "$D/q_${P}_${v}_$tag.log" "$(rev "$v")" 120 \
    "$(build "$v")/examples/qwen_tp/qwen_tp" --model-preset qwen3-8b --prompt-tokens "$P" --n-predict 4 \
    --ctx-size $((P + 768)) "$@"
}
t() {  # t <prompt> <tag>
  runlog "$D/t_${1}_$2.log" torch 150 python3 -u "$TB" --hidden 4096 --layers 36 --heads 32 --kv 8 --head-dim 128 \
    --inter 12288 --vocab 151936 --prompt "$1" --ctx $(($1 + 256)) --gen 12
}

if [ "${TESTS:-1}" = 1 ]; then
  LD_LIBRARY_PATH="$BB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" runlog "$D/tests_b.log" "$RB" 150 \
    "$BB/examples/qwen_tp/tests/qwen_gpu_test" \
    '--gtest_filter=QwenDecodeGpu.WideRowKernelsKeepTheBits:QwenDecodeGpu.EveryPath*:QwenDecodeGpu.SpeculativeEquals*:QwenPrefillGpu.*:QwenPrefillFa3Gpu.*:QwenGpu.LogitsMatchTheCpuReference:QwenGpu.SpeculativeEqualsGreedyOnEveryAllReducePath'
  echo "tests: $(grep -aE '^\[  (PASSED|FAILED) ' "$D/tests_b.log" | tr '\n' ' ') at $(elapsed) s"
fi
if [ "${NCU:-1}" = 1 ]; then
  for v in a b; do
    LD_LIBRARY_PATH="$(build $v)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" runlog "$D/ncu_$v.log" "$(rev $v)" 120 \
      ncu --clock-control none --kernel-name 'regex:swiglu|qkNormRope|addRmsNorm' --launch-skip 8 \
      --launch-count "${NCU_COUNT:-24}" --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      "$(build $v)/examples/qwen_tp/qwen_tp" --model-preset qwen3-8b --prompt-tokens 2048 --n-predict 2 --no-profile
  done
  echo "ncu done at $(elapsed) s"
fi
for P in $LENGTHS; do
  q a "$P" a; t "$P" a; q b "$P" a; q b "$P" b; t "$P" b; q a "$P" b
  if [ -n "${UBATCH_B:-}" ] && [ "$P" -ge 8192 ]; then
    q b "$P" "ub${UBATCH_B}a" --ubatch-size "$UBATCH_B"; q b "$P" "ub${UBATCH_B}b" --ubatch-size "$UBATCH_B"
  fi
  echo "$P done at $(elapsed) s"
  [ "$(elapsed)" -gt $((BUDGET - 170)) ] && { echo "budget: the lengths after $P left out"; break; }
done

tok() { grep -a -m1 'prompt eval' "$1" 2>/dev/null | grep -oE '[0-9.]+ tokens per second' | awk '{print $1}'; }
ttok() { grep -a '^torch TP=' "$1" 2>/dev/null | grep -oE 'prefill [0-9]+' | awk '{print $2}'; }
{
  echo "qwen3-8b prefill, warm tok/s; A = $RA, B = $RB"
  echo
  echo "| prompt | A a, b | B a, b | PyTorch a, b | B / A | B / PyTorch | A / PyTorch | B cold |"
  echo "|---|---|---|---|---|---|---|---|"
  for P in $LENGTHS; do
    [ -f "$D/q_${P}_a_a.log" ] || continue
    aa=$(tok "$D/q_${P}_a_a.log"); ab=$(tok "$D/q_${P}_a_b.log"); ba=$(tok "$D/q_${P}_b_a.log"); bb=$(tok "$D/q_${P}_b_b.log")
    ta=$(ttok "$D/t_${P}_a.log"); tb=$(ttok "$D/t_${P}_b.log")
    cold=$(grep -a 'prefill cold' "$D/q_${P}_b_a.log" | grep -oE '[0-9.]+ tokens per second' | awk '{print $1}')
    r=$(awk -v a="$aa" -v b="$ab" -v c="$ba" -v d="$bb" -v e="$ta" -v f="$tb" \
      'BEGIN { if (a + b > 0 && e + f > 0) printf "%.3f | %.3f | %.3f", (c + d) / (a + b), (c + d) / (e + f), (a + b) / (e + f) }')
    echo "| $P | $aa, $ab | $ba, $bb | $ta, $tb | $r | $cold |"
  done
  if [ -n "${UBATCH_B:-}" ]; then
    echo
    for P in $LENGTHS; do
      [ -f "$D/q_${P}_b_ub${UBATCH_B}a.log" ] &&
        echo "B, --ubatch-size $UBATCH_B, $P: $(tok "$D/q_${P}_b_ub${UBATCH_B}a.log"), $(tok "$D/q_${P}_b_ub${UBATCH_B}b.log")"
    done
  fi
  echo
  for f in "$D"/q_*_b_a.log; do
    echo "$(basename "$f"):"
    grep -a -E "GEMMs alone|attention alone|memory rank 0|prefill cold" "$f" | cut -c1-220
  done
  for v in a b; do
    [ -f "$D/ncu_$v.log" ] || continue
    echo
    echo "ncu $v (launch, kernel, grid, us, MB read, MB written):"
    python3 - "$D/ncu_$v.log" << 'PY'
import collections, csv, sys
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
kernels = collections.OrderedDict()
for r in csv.DictReader(rows):
    kernels.setdefault((r["ID"], r["Kernel Name"][:40], r.get("Grid Size", "")), {})[r["Metric Name"]] = (r["Metric Value"], r["Metric Unit"])
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3, "byte": 1e-6, "B": 1e-6,
         "Kbyte": 1e-3, "KB": 1e-3, "Mbyte": 1, "MB": 1, "Gbyte": 1e3, "GB": 1e3}
def val(m, name):
    v, u = m.get(name, ("nan", ""))
    return float(v.replace(",", "")) * scale.get(u, float("nan"))
for (i, n, g), m in kernels.items():
    print(f"  {i:>4} {n:40s} {g:18s} {val(m, 'gpu__time_duration.sum'):8.1f} "
          f"{val(m, 'dram__bytes_read.sum'):8.1f} {val(m, 'dram__bytes_write.sum'):8.1f}")
PY
  done
} > "$D/table.md" 2>&1
if [ "${TESTS:-1}" = 1 ] && [ $((BUDGET - $(elapsed))) -gt 30 ]; then
  LD_LIBRARY_PATH="$BB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" runlog "$D/tests_all_b.log" "$RB" $((BUDGET - $(elapsed))) \
    "$BB/examples/qwen_tp/tests/qwen_gpu_test"
  echo "whole qwen_gpu_test: $(grep -aE '^\[  (PASSED|FAILED) ' "$D/tests_all_b.log" | tr '\n' ' ')$(tail -1 "$D/tests_all_b.log")" >> "$D/table.md"
fi
cat "$D/table.md"
