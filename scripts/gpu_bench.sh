#!/usr/bin/env bash
# scripts/gpu_bench.sh [OUTDIR]: the benchmark tables of bench/results/<machine>.md on a machine
# with 2 GPUs (~8 min on 2x H200), after scripts/gpu_check.sh built $BUILD. Every table has
# -A nccl in the same process and buffers, so every ratio is same-run. Sweeps are split so none
# runs past its limit: the full-range tables (auto vs NCCL, 8 B..1 GB) carry the targets; the
# per-algorithm tables stop at 64 MB (a forced algorithm past its own limit falls back to the
# selector's choice, which the auto table already shows). Then the fused epilogue table and the
# Qwen3-32B TP=2 matrix (examples/qwen_tp). Logs in OUTDIR/logs.tgz. PART=allreduce,
# PART=halves (reduce_scatter_perf / all_gather_perf vs NCCL) or PART=qwen runs one part (each
# fits one 10-minute device call); default all. PART=tune (not in all): the measured
# selection: auto vs the best single algorithm with the model only, tpcomm-doctor --tune into a
# fresh cache, the same table again with the measured selection. PART=compression (not in all):
# the compressed all-reduce's two-GPU tables (below).
PART=${PART:-all}
source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"
[ -x "$B/bench/allreduce_perf" ] && [ -x "$B/bench/all_gather_perf" ] || gpu_build
{ echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "commit ${COMMIT:-$(git -C "$root" rev-parse HEAD)}"; } > "$L/env.txt" 2>&1
P="$MPI $B/bench/allreduce_perf -d bf16"
b() {  # NAME SECONDS COMMAND...
  local name=$1 t=$2; shift 2
  echo "\$ $*" > "$L/$name.txt"
  timeout -k 5 "$t" "$@" >> "$L/$name.txt" 2>&1
  echo "$name rc=$? $(el)"
}
if [ "$PART" = all ] || [ "$PART" = allreduce ]; then
b graph 120 $P -c 1 -b 8 -e 1G -f 2 -G 20 -A auto -A nccl --json "$L/graph.json"
b graph_algos 90 $P -c 1 -b 8 -e 64M -f 2 -G 20 -A lamport_p2p -A oneshot_p2p -A twoshot_p2p -A nccl --json "$L/graph_algos.json"
b eager 120 $P -c 1 -b 8 -e 1G -f 2 -A auto -A staged_host -A nccl --json "$L/eager.json"
b eager_algos 90 $P -c 1 -b 8 -e 64M -f 2 -A lamport_p2p -A oneshot_p2p -A twoshot_p2p -A nccl --json "$L/eager_algos.json"
b oneproc 50 "$B/bench/allreduce_perf" -d bf16 -c 1 -g 2 -b 8 -e 64M -f 4 -A auto -A nccl
b fused 50 $P -c 1 --fused-rmsnorm -G 20
fi
if [ "$PART" = all ] || [ "$PART" = halves ]; then
for h in reduce_scatter all_gather; do
  b "$h" 90 $MPI "$B/bench/${h}_perf" -d bf16 -c 1 -b 8 -e 64M -f 4 -A auto -A nccl --json "$L/$h.json"
  b "${h}_graph" 90 $MPI "$B/bench/${h}_perf" -d bf16 -c 1 -b 8 -e 64M -f 4 -G 20 -A auto -A nccl
  # ll_p2p (to 512 KB) against two-shot and NCCL in graphs, order alternated (A B C C B A)
  b "${h}_small_graph" 90 $MPI "$B/bench/${h}_perf" -d bf16 -c 1 -b 8 -e 512K -f 4 -G 20 \
    -A ll_p2p -A twoshot_p2p -A nccl -A nccl -A twoshot_p2p -A ll_p2p
done
fi
if [ "$PART" = tune ]; then
export XDG_CACHE_HOME=$L/cache  # a fresh cache: the tuning file written now, and only it (mpirun -x needs each set)
V="$MPI -x XDG_CACHE_HOME -x TPCOMM_TUNE -x TPCOMM_DEBUG -x TPCOMM_DEBUG_SUBSYS $B/bench/allreduce_perf -d bf16 -c 1 -b 8 -e 256M -f 4"
VA="-A auto -A lamport_p2p -A oneshot_p2p -A twoshot_p2p -A staged_host -A ring_nccl --vs-best"
TPCOMM_TUNE=0 TPCOMM_DEBUG=WARN TPCOMM_DEBUG_SUBSYS=ALL b tune_model 150 $V $VA --json "$L/tune_model.json"
b tune 240 "$B/tools/tpcomm-doctor" --tune --tune-seconds 200
TPCOMM_TUNE=1 TPCOMM_DEBUG=INFO TPCOMM_DEBUG_SUBSYS=INIT,TUNE b tune_measured 150 $V $VA --json "$L/tune_measured.json"
cp "$XDG_CACHE_HOME/tpcomm/tune.json" "$L/" 2>/dev/null || true
for f in tune_model tune_measured; do echo "== $f"; sed -n '/auto vs the best/,/^#$/p' "$L/$f.txt"; done
grep -a "tuning file:" "$L/tune_measured.txt" | head -2
fi
# PART=compression (not in all; ~6 min): the compressed all-reduce on two GPUs. twoshot_p2p against its +fp8 / +int8
# forms and NCCL, 1-256 MB, order alternated (the >= 8 MB busbw target: >= 1.6x two-shot), then
# staged_host with the SM kernel (TPCOMM_STAGED_COPY_ENGINES=0) and the copy engines (=1), plain
# and +int8 / +fp8 in one process per mode, modes A B B A across processes (each GPU on its own
# PCIe link here, unlike the one-GPU runs of gpu_shared_check.sh; docs/host_staged.md).
if [ "$PART" = compression ]; then
b compressed_twoshot 150 $P -c 1 -b 1M -e 256M -f 4 -w 5 -n 20 -K 5 --compression int8 \
  -A twoshot_p2p -A twoshot_p2p+fp8 -A twoshot_p2p+int8 -A nccl -A nccl -A twoshot_p2p+int8 -A twoshot_p2p+fp8 -A twoshot_p2p
i=0
for mode in 0 1 1 0; do
  i=$((i + 1))
  b "staged_ce${mode}_$i" 90 $MPI -x TPCOMM_STAGED_COPY_ENGINES=$mode "$B/bench/allreduce_perf" -d bf16 -c 1 -b 1M -e 64M \
    -f 4 -w 5 -n 20 -K 5 --compression int8 -A staged_host -A staged_host+int8 -A staged_host+fp8
done
for f in "$L"/compressed_twoshot.txt "$L"/staged_ce*.txt; do echo "== $(basename "$f")"; sed -n '/Side by side/,/^#$/p' "$f" | head -12; done
fi
if [ "$PART" = all ] || [ "$PART" = qwen ]; then
Q="$B/examples/qwen_tp/qwen_tp --model-preset qwen3-32b --tp 2 --prompt-tokens 512 --n-predict 256 --ctx-size 1024"
# The decoder's own choices first (tpcomm auto, MTP off, 128 tokens): GEMMs of <= 8 tokens on
# cuBLAS or the custom GEMV, kernels with or without PDL. The matrix runs with the fastest by
# decode tok/s (every log's first line names the flags); the four picks stay in the logs.
tps() { grep -a "^ *eval time" "$1" | head -1 | sed -E 's/.*, *([0-9.]+) tokens per second.*/\1/'; }
best=0; X=""
for g in cublas custom; do for p in pdl no-pdl; do
  f=""; [ $p = no-pdl ] && f=--no-pdl
  b "qwen_pick_${g}_$p" 40 $Q --n-predict 128 --allreduce auto --gemv $g $f --no-profile
  t=$(tps "$L/qwen_pick_${g}_$p.txt"); echo "  $g $p: ${t:-?} tok/s"
  if [ -n "$t" ] && awk "BEGIN{exit !($t > $best)}"; then best=$t; X="--gemv $g $f"; fi
done; done
echo "matrix flags: $X"
for ar in auto nccl staged_host; do
  b "qwen_${ar}_off" 60 $Q $X --allreduce $ar
  # The field report's regime: llama.cpp's accepted/drafted 0.485 with fixed 5-token drafts.
  b "qwen_${ar}_field" 60 $Q $X --allreduce $ar --spec-type draft-mtp --spec-draft-n-min 5 --spec-draft-n-max 5 \
    --sim-draft-acceptance 0.485 --no-profile
done
for a in 0.3 0.7; do b "qwen_auto_$a" 40 $Q $X --allreduce auto --spec-type draft-mtp --spec-draft-n-max 5 --sim-token-acceptance $a --no-profile; done
b qwen_nccl_eager_off 40 $Q $X --allreduce nccl --no-graphs
b qwen_auto_eager_off 40 $Q $X --allreduce auto --no-graphs
fi
for f in graph graph_algos eager eager_algos oneproc reduce_scatter reduce_scatter_graph all_gather all_gather_graph; do
  [ -f "$L/$f.txt" ] || continue
  echo "== $f"; sed -n '/Side by side/,/^#$/p' "$L/$f.txt" | head -34; grep -aE "Out of bounds" "$L/$f.txt" | sort | uniq -c | head -3
done
[ -f "$L/fused.txt" ] && grep -a "^#  rows\|^ *[0-9]" "$L/fused.txt" | tail -11
for f in "$L"/qwen_*.txt; do echo "== $(basename "$f")"; grep -aE "eval time|acceptance|roofline|decode step" "$f"; done
tar czf "$OUTDIR/logs.tgz" -C "$OUTDIR" logs && rm -rf "$L"
echo "total $(el); logs: $OUTDIR/logs.tgz"
