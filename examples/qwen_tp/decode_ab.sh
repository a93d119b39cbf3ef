#!/bin/bash
# decode_ab.sh: the decode kernels (docs/decode_kernels.md) on one H200, in one device call. Builds qwen_tp,
# qwen_gpu_test and gemv_bench, runs the decode GPU tests (tensor-core attention, fused GEMVs,
# every decode path against the CPU reference, speculative == greedy), then times qwen_tp's
# decode with the old kernels against the new ones in one binary (QWEN_DECODE=
# old|attn|gemv|fused), in A B B A order, at position 512 (qwen3-8b, qwen3-32b); then gemv_bench
# (each product alone: cuBLAS against the custom GEMV), then position 32000 (qwen3-8b);
# PyTorch's decoder (torch_tp_decode.py: eager ops in a CUDA graph, then --compile) on the same
# shapes; and an `ncu --clock-control none` profile of one decode step (fused, old). A time
# budget (BUDGET_S, default 450 s) skips what would not fit, lowest priority last; PART=gemv
# stops after the GEMV steps (build, tests, the A/B at 512, gemv_bench, the fused steps' ncu);
# PART=norm times addRmsNorm's two kernels and QWEN_DECODE=attnrope instead (8b and 32b at 512,
# 8b at 32000), PyTorch eager and torch.compile at 8b 512, one 8b step under ncu; PART=lt times
# the weight GEMMs on cublasGemmEx against cuBLASLt timed at init (QWEN_GEMM=gemmex|lt), each
# with the L2 prefetch of the next product's weights off and on (QWEN_PREFETCH=off|on); PART=stream
# times the one-token products through cuBLAS against gemvStream (QWEN_GEMV=cublas|stream), PART=bench
# runs gemv_bench alone, PART=streamfused the stream's fused step forms, PART=streamlayer one
# launch a layer against the separate streams, PART=streampdl which streams launch with PDL,
# PART=default qwen_tp as shipped against --gemv cublas; PART=attnprefetch the attention's L2
# prefetch of o_proj; PART=fusedrope RoPE inside the attention against qkNormRopeStore;
# PART=argmaxrope the argmax's old loop, the shipped step and RoPE inside the attention;
# PART=pick the final norm, lm_head and argmax as three kernels against one (QWEN_PICK);
# PART=rope the q/k norm, RoPE and KV store after the qkv stream against inside it (QWEN_ROPE);
# PART=slots each stream on both resident slots of a multiprocessor against on one, with PDL on
# every stream (QWEN_STREAM_SLOTS), alone and with QWEN_ROPE=qkv; PART=ropeslots both parts in one call;
# TESTS=all|filter|none: the whole qwen_gpu_test, the decode filter (default) or no tests first.
# Logs go to $OUT/logs.tgz (each log opens with commit, date, command; clocks.csv holds the GPU's
# clocks and power every 250 ms, ab_common.sh), the table (memory at 32000, the clocks too) to
# $OUT/summary.md and to stdout, last. Usage, from the repository root:
#   OUT=/path/to/out bash examples/qwen_tp/decode_ab.sh
# TORCH_BASELINE: torch_tp_decode.py (default .scratch/baselines/ in the tree, then
# ../shared/baselines/). BUILD: the build folder (default build-h200); SKIP_BUILD=1 uses what is
# there (binaries built elsewhere: scripts/gpu.d/pack_build.sh).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TPCOMM_MULTICAST=0
SRC=$(pwd)
OUT=${OUT:?set OUT}
L=$OUT/logs
mkdir -p "$L"
B=${BUILD:-$SRC/build-h200}
BUDGET=${BUDGET_S:-450}
T0=$(date +%s)
REV=${COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
Q=$B/examples/qwen_tp/qwen_tp
TB=${TORCH_BASELINE:-$SRC/.scratch/baselines/torch_tp_decode.py}
[ -f "$TB" ] || TB=$SRC/../shared/baselines/torch_tp_decode.py
SUM=$OUT/summary.md

. "$SRC/examples/qwen_tp/ab_common.sh"

if [ "${PART:-all}" != summary ]; then
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  header "$L/build.log" cmake build
  { cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DTPCOMM_BUILD_TESTS=ON &&
    cmake --build "$B" -j16 --target qwen_tp qwen_gpu_test gemv_bench; } >> "$L/build.log" 2>&1 ||
    { echo "BUILD FAILED"; tail -30 "$L/build.log"; exit 1; }
  echo "build done ($(left) s left)"
fi

# 1. Correctness first: the new kernels, the model on every path, and the old tests they touch;
# CustomGemvSpeculativeEqualsGreedy is the first TP=2 case there (two ranks on the one GPU).
# TESTS=all runs the whole qwen_gpu_test instead, TESTS=none none.
case "${TESTS:-filter}" in
  all) run tests 330 "$B/examples/qwen_tp/tests/qwen_gpu_test" ;;
  none) ;;
  *) run tests 200 "$B/examples/qwen_tp/tests/qwen_gpu_test" \
       --gtest_filter='QwenDecodeGpu.*:QwenGemvGpu.*:QwenGpu.LogitsMatch*:QwenGpu.AttentionMatchesReference:QwenGpu.CustomGemv*:QwenGpu.ChainedDraftsInOneGraphEqualSingleSteps:QwenGpu.SharedGpuLoadsModulesEagerly' ;;
esac

S8="--hidden 4096 --layers 36 --heads 32 --kv 8 --head-dim 128 --inter 12288 --vocab 151936"
S32="--hidden 5120 --layers 64 --heads 64 --kv 8 --head-dim 128 --inter 25600 --vocab 151936"
NCU_M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
ncu_step() {  # ncu_step <mode> <preset> <prompt> [extra]; NCU_ENV: more VAR=value settings, named in the log's name
  local mode=$1 preset=$2 P=$3; shift 3
  local name="ncu_${mode}${NCU_ENV:+_${NCU_ENV//[^a-z0-9]/}}_${preset#qwen3-}_$P"
  if ! command -v ncu > /dev/null; then echo "ncu not found: $name" >> "$L/skipped.log"; return; fi
  # shellcheck disable=SC2086
  run "$name" 90 env ${NCU_ENV:-} QWEN_DECODE=$mode QWEN_NCU_STEP=1 ncu --clock-control none --profile-from-start off \
    --graph-profiling node --metrics $NCU_M --csv --page raw --print-units base --kernel-name-base demangled \
    $Q --model-preset $preset --prompt-tokens $P --n-predict 2 --ubatch-size 2048 "$@"
}

qn() {  # qn <preset> <prompt> <tag> <norm> <decode> [extra]; GEMM=gemmex|lt (QWEN_GEMM), default gemmex;
        # PF=off|on|<MB> (QWEN_PREFETCH), default off; AP=off|on|<MB> (QWEN_ATTN_PREFETCH), default unset;
        # ARGMAX=loop|vec (QWEN_ARGMAX), PICK=split|fused (QWEN_PICK), ROPE=kernel|qkv (QWEN_ROPE),
        # SLOTS=2|1 (QWEN_STREAM_SLOTS), default unset
  local preset=$1 P=$2 tag=$3 norm=$4 dec=$5; shift 5
  local short=${preset#qwen3-}; local N=64; [ "$short" = 32b ] && N=32
  run "q${short%b}_${P}_$tag" 120 env QWEN_NORM=$norm QWEN_DECODE=$dec QWEN_GEMM=${GEMM:-gemmex} QWEN_PREFETCH=${PF:-off} \
    QWEN_GEMV=${GEMV:-cublas} QWEN_STREAM_PDL=${QWEN_STREAM_PDL:-off} QWEN_STREAM_LAYER=${QWEN_STREAM_LAYER:-off} \
    ${AP:+QWEN_ATTN_PREFETCH=$AP} ${ARGMAX:+QWEN_ARGMAX=$ARGMAX} ${PICK:+QWEN_PICK=$PICK} ${ROPE:+QWEN_ROPE=$ROPE} ${SLOTS:+QWEN_STREAM_SLOTS=$SLOTS} $Q \
    --model-preset $preset --prompt-tokens $P --n-predict $N --ubatch-size 2048 "$@"
}
# over_shapes "<m1 m2 ..>" "<shape;shape;..>" <fn>: at each shape ("preset prompt [extra args]"),
# the modes in A B .. B A order (tags a_<m1> a_<m2> .. b_<m2> b_<m1>), each as
# <fn> <preset> <prompt> <tag> [extra args].
SHAPES3="qwen3-8b 512;qwen3-32b 512;qwen3-8b 32000 --ctx-size 32768"
over_shapes() {
  local fn=$3 c r i
  local -a modes shapes order=()
  read -r -a modes <<< "$1"
  IFS=';' read -r -a shapes <<< "$2"
  echo "$1" >> "$L/modes.txt"  # the modes in run order, for the summary's means
  for r in "${modes[@]}"; do order+=("a_$r"); done
  for ((i = ${#modes[@]} - 1; i >= 0; i--)); do order+=("b_${modes[i]}"); done
  for c in "${shapes[@]}"; do
    for r in "${order[@]}"; do
      # shellcheck disable=SC2086
      set -- $c
      "$fn" "$1" "$2" "$r" "${@:3}"
    done
  done
}
if [ "${PART:-all}" = lt ]; then
# PART=lt: the weight GEMMs through cublasGemmEx against cuBLASLt timed at init (QWEN_GEMM=
# gemmex|lt), each with the L2 prefetch off and on (QWEN_PREFETCH), in the order A B C D D C B A
# at qwen3-8b and qwen3-32b 512 and at qwen3-8b 32000 (its prefill too: full 2048-row chunks
# tuned, the last 1280 rows not); torch.compile at 8b 512 for the ratio.
for c in "qwen3-8b 512" "qwen3-32b 512" "qwen3-8b 32000 --ctx-size 32768"; do
  for r in a_gemmex_off a_gemmex_on a_lt_off a_lt_on b_lt_on b_lt_off b_gemmex_on b_gemmex_off; do
    g=${r#*_}
    # shellcheck disable=SC2086
    set -- $c  # preset, prompt, then the extra arguments (--ctx-size) after the tag
    GEMM=${g%_*} PF=${g#*_} qn "$1" "$2" "$r" regs attn "${@:3}"
  done
done
run torch8_compile_512 150 python3 -u "$TB" $S8 --prompt 512 --ctx 1024 --gen 64 --compile
elif [ "${PART:-all}" = stream ]; then
# PART=stream: the one-token products through cuBLAS against gemvStream (QWEN_GEMV=cublas|stream,
# default decode kernels), A B B A at qwen3-8b and qwen3-32b 512 and at qwen3-8b 32000 (at 8b 512
# the stream PDL-launched too); MTP speculation (n-max 3, simulated acceptance 0.6) both ways at
# 8b 512; torch.compile at 8b 512 for the ratio.
# The stream launched with PDL too (QWEN_STREAM_PDL=on) at 8b 512: A B C C B A.
for r in a_cublas a_stream a_streampdl b_streampdl b_stream b_cublas; do
  g=${r#*_}
  GEMV=${g%pdl} QWEN_STREAM_PDL=$([ "$g" = streampdl ] && echo on || echo off) qn qwen3-8b 512 "$r" regs attn
done
for c in "qwen3-32b 512" "qwen3-8b 32000 --ctx-size 32768"; do
  for r in a_cublas a_stream b_stream b_cublas; do
    # shellcheck disable=SC2086
    set -- $c
    GEMV=${r#*_} qn "$1" "$2" "$r" regs attn "${@:3}"
  done
done
for r in a_cublas a_stream b_stream b_cublas; do
  run "q8_512_mtp_$r" 60 env QWEN_GEMV=${r#*_} $Q --model-preset qwen3-8b --prompt-tokens 512 --n-predict 128 \
    --ubatch-size 2048 --spec-type draft-mtp --spec-draft-n-max 3 --sim-draft-acceptance 0.6
done
run torch8_compile_512 240 python3 -u "$TB" $S8 --prompt 512 --ctx 1024 --gen 64 --compile
elif [ "${PART:-all}" = streamfused ]; then
# PART=streamfused: the stream with the fused step's forms (QWEN_DECODE=gemv|fused: the norm in
# the qkv and gate/up streams' prologue, SwiGLU and the residual add in their epilogues), without
# and with PDL between consecutive streams (QWEN_STREAM_PDL=chain), against the stream with
# separate kernels (attn) and cuBLAS (attn): A B C D E E D C B A at qwen3-8b 512, attn gemv
# gemv-chain gemv-chain gemv attn at qwen3-32b 512 and qwen3-8b 32000.
sf() {  # sf <preset> <prompt> <tag> [extra]: tag a_<cublas|attn|gemv|fused>[chain]
  local preset=$1 P=$2 tag=$3 d=${3#*_}; shift 3
  local pdl=off g=stream
  case $d in *chain) pdl=chain; d=${d%chain} ;; esac
  [ "$d" = cublas ] && { g=cublas; d=attn; }
  GEMV=$g QWEN_STREAM_PDL=$pdl qn "$preset" "$P" "$tag" regs "$d" "$@"
}
for r in a_cublas a_attn a_gemv a_gemvchain a_fusedchain b_fusedchain b_gemvchain b_gemv b_attn b_cublas; do
  sf qwen3-8b 512 "$r"
done
for c in "qwen3-32b 512" "qwen3-8b 32000 --ctx-size 32768"; do
  for r in a_attn a_gemv a_gemvchain b_gemvchain b_gemv b_attn; do
    # shellcheck disable=SC2086
    set -- $c
    sf "$1" "$2" "$r" "${@:3}"
  done
done
elif [ "${PART:-all}" = streamlayer ]; then
# PART=streamlayer: the fused step's streams as separate launches (with the default's PDL, auto)
# against one cooperative launch a layer (QWEN_STREAM_LAYER=off|on, QWEN_DECODE=gemv, streamed),
# A B B A at qwen3-8b and qwen3-32b 512 and qwen3-8b 32000.
layer_run() { GEMV=stream QWEN_STREAM_PDL=auto QWEN_STREAM_LAYER=${3#*_} qn "$1" "$2" "$3" regs gemv "${@:4}"; }
over_shapes "off on" "$SHAPES3" layer_run
elif [ "${PART:-all}" = attnprefetch ]; then
# PART=attnprefetch: the decode attention asking L2 for o_proj's rows before its PDL wait
# (QWEN_ATTN_PREFETCH=off|on|40: on is half the L2), the shipped step otherwise (the stream, the
# fused step, auto PDL): off on 40 40 on off at qwen3-8b 512; off on on off at qwen3-32b 512,
# qwen3-8b 2048 and qwen3-8b 32000 (past the KV cap, where on asks for nothing).
ap_run() { AP=${3#*_} GEMV=stream QWEN_STREAM_PDL=auto qn "$1" "$2" "$3" regs gemv "${@:4}"; }
over_shapes "off on 40" "qwen3-8b 512" ap_run
over_shapes "off on" "qwen3-32b 512;qwen3-8b 2048;qwen3-8b 32000 --ctx-size 32768" ap_run
elif [ "${PART:-all}" = argmaxrope ] || [ "${PART:-all}" = fusedrope ]; then
# PART=argmaxrope: the shipped step with the greedy argmax's float-at-a-time loop (QWEN_ARGMAX=loop,
# "gemvloop"), as shipped ("gemv": 16-byte loads in flight), and with the q/k norm, RoPE and KV
# store inside the attention ("fused"), A B C C B A at qwen3-8b and qwen3-32b 512 and qwen3-8b
# 32000; the argmax alone in both forms (gemv_bench --argmax-only); then (NCU=1, the default) one
# 8b step of gemv and of fused at 512 under ncu: the attention kernel's time with and without the
# q/k norm, RoPE and KV store inside, beside qkNormRopeStore's. PART=fusedrope: gemv and fused
# only, A B B A, then the same ncu steps.
ar_run() {
  local m=${3#*_} a=vec
  [ "$m" = gemvloop ] && m=gemv a=loop
  GEMV=stream QWEN_STREAM_PDL=auto ARGMAX=$a qn "$1" "$2" "$3" regs "$m" "${@:4}"
}
if [ "${PART:-all}" = fusedrope ]; then
  over_shapes "gemv fused" "$SHAPES3" ar_run
else
  over_shapes "gemvloop gemv fused" "$SHAPES3" ar_run
  run gemv_bench 90 "$B/examples/qwen_tp/gemv_bench" --preset qwen3-8b --argmax-only  # the argmax alone, both forms
fi
if [ "${NCU:-1}" = 1 ]; then ncu_step gemv qwen3-8b 512; ncu_step fused qwen3-8b 512; fi
elif [ "${PART:-all}" = pick ]; then
# PART=pick: the shipped step (the stream, gemv, PDL auto) with the final norm, the lm_head and the
# greedy argmax as three kernels (QWEN_PICK=split) and as one launch whose last block picks
# (fused, gpu::streamPick), A B B A at qwen3-8b and qwen3-32b 512 and qwen3-8b 32000; then (NCU=1,
# the default) one 8b step at 512 under ncu, fused.
pk_run() { GEMV=stream QWEN_STREAM_PDL=auto PICK=${3#*_} qn "$1" "$2" "$3" regs gemv "${@:4}"; }
over_shapes "split fused" "$SHAPES3" pk_run
if [ "${NCU:-1}" = 1 ]; then ncu_step gemv qwen3-8b 512; fi
elif [ "${PART:-all}" = rope ] || [ "${PART:-all}" = slots ] || [ "${PART:-all}" = ropeslots ]; then
# PART=rope: the shipped step (the stream, gemv, PDL auto, the tail in one launch) with the q/k
# norm, RoPE and KV store as qkNormRopeStore after the qkv stream (QWEN_ROPE=kernel) and inside it
# (qkv, gpu::streamQkvRope: a cluster of blocks a head), A B B A at qwen3-8b and qwen3-32b 512 and
# qwen3-8b 32000; then (NCU=1, the default) one 8b step at 512 under ncu with the rope inside.
rp_run() { GEMV=stream QWEN_STREAM_PDL=auto ROPE=${3#*_} qn "$1" "$2" "$3" regs gemv "${@:4}"; }
# PART=slots: the shipped step ("s2": two blocks a multiprocessor, PDL auto) against each stream on
# one slot a multiprocessor with PDL on every stream ("s1all": the next stream's blocks resident on
# the free slot, their first loads overlapping the stream before) and on the streams after a
# stream only ("s1chain": qkv, gate/up, down; o_proj after the attention without), and s1all with
# the q/k norm, RoPE and KV store inside the qkv stream ("s1allqkv": both levers at once), A B C D
# D C B A at qwen3-8b and qwen3-32b 512 (SLOT_MODES: another list of these modes).
sl_run() {
  case ${3#*_} in
    s1all) GEMV=stream QWEN_STREAM_PDL=all SLOTS=1 qn "$1" "$2" "$3" regs gemv "${@:4}" ;;
    s1allqkv) GEMV=stream QWEN_STREAM_PDL=all SLOTS=1 ROPE=qkv qn "$1" "$2" "$3" regs gemv "${@:4}" ;;
    s1chain) GEMV=stream QWEN_STREAM_PDL=chain SLOTS=1 qn "$1" "$2" "$3" regs gemv "${@:4}" ;;
    *) GEMV=stream QWEN_STREAM_PDL=auto SLOTS=2 qn "$1" "$2" "$3" regs gemv "${@:4}" ;;
  esac
}
if [ "${PART:-all}" != slots ]; then
  over_shapes "kernel qkv" "$SHAPES3" rp_run
  if [ "${NCU:-1}" = 1 ]; then NCU_ENV="QWEN_ROPE=qkv" ncu_step gemv qwen3-8b 512; fi
fi
if [ "${PART:-all}" != rope ]; then
  over_shapes "${SLOT_MODES:-s2 s1all s1chain s1allqkv}" "qwen3-8b 512;qwen3-32b 512" sl_run
  # each product's rate on one block a multiprocessor (the stream's rows of the table)
  run gemv_bench 90 "$B/examples/qwen_tp/gemv_bench" --preset qwen3-8b --tokens 1 --stream-slots 1
fi
elif [ "${PART:-all}" = streampdl ]; then
# PART=streampdl: which streams of the fused step launch with PDL, PDL_MODES (QWEN_STREAM_PDL
# values, default off attn chain all: none, o_proj after the attention, the streams after a
# stream, both) in A B C D D C B A order, at PDL_SHAPES (default qwen3-8b and qwen3-32b 512 and
# qwen3-8b 32000).
pdl_run() { GEMV=stream QWEN_STREAM_PDL=${3#*_} qn "$1" "$2" "$3" regs gemv "${@:4}"; }
over_shapes "${PDL_MODES:-off attn chain all}" "${PDL_SHAPES:-$SHAPES3}" pdl_run
elif [ "${PART:-all}" = default ]; then
# PART=default: qwen_tp as shipped (--gemv auto: without speculation the one-token stream and the
# fused step) against --gemv cublas (cuBLAS's products, the attn kernels), no QWEN_* variables,
# A B B A at qwen3-8b and qwen3-32b 512 and qwen3-8b 32000; torch.compile at 8b 512.
for c in "qwen3-8b 512 64" "qwen3-32b 512 32" "qwen3-8b 32000 64 --ctx-size 32768"; do
  # shellcheck disable=SC2086
  set -- $c
  short=${1#qwen3-}
  for r in a_auto a_cublas b_cublas b_auto; do
    run "q${short%b}_${2}_$r" 120 $Q --model-preset "$1" --prompt-tokens "$2" --n-predict "$3" --ubatch-size 2048 \
      --gemv "${r#*_}" "${@:4}"
  done
done
run torch8_compile_512 240 python3 -u "$TB" $S8 --prompt 512 --ctx 1024 --gen 64 --compile
elif [ "${PART:-all}" = bench ]; then
# PART=bench: gemv_bench alone (each product: cuBLAS, the custom GEMV, the stream; n = 1, 4, 8).
run gemv_bench 120 "$B/examples/qwen_tp/gemv_bench" --preset qwen3-8b,qwen3-32b --tp 1 --tokens 1,4,8
elif [ "${PART:-all}" = norm ]; then
# PART=norm: addRmsNorm's two kernels in one binary (QWEN_NORM=regs|loop with the default decode
# kernels, attn) and QWEN_DECODE=attnrope, A B C C B A at qwen3-8b and qwen3-32b 512, A B B A at
# qwen3-8b 32000; PyTorch eager (graph) and torch.compile at 8b 512 for the ratio; one 8b step
# under ncu.
for c in "qwen3-8b 512" "qwen3-32b 512"; do
  # shellcheck disable=SC2086
  { qn $c a_regs regs attn; qn $c a_loop loop attn; qn $c a_attnrope regs attnrope
    qn $c b_attnrope regs attnrope; qn $c b_loop loop attn; qn $c b_regs regs attn; }
done
for r in a_regs a_loop b_loop b_regs; do qn qwen3-8b 32000 "$r" "${r#*_}" attn --ctx-size 32768; done
run torch8_512 90 python3 -u "$TB" $S8 --prompt 512 --ctx 1024 --gen 64
run torch8_compile_512 150 python3 -u "$TB" $S8 --prompt 512 --ctx 1024 --gen 64 --compile
ncu_step attn qwen3-8b 512
else
# 2. qwen_tp decode at 512 in one binary: the gemv and fused paths, A B B A, with old and attn as
# the baselines; then qwen3-32b the same way.
q8() {  # q8 <tag> <mode> <prompt> [extra]
  local tag=$1 mode=$2 P=$3; shift 3
  run "q8_${P}_$tag" 90 env QWEN_DECODE=$mode $Q --model-preset qwen3-8b --prompt-tokens $P --n-predict 64 --ubatch-size 2048 "$@"
}
q32() {  # q32 <tag> <mode>
  run "q32_512_$1" 120 env QWEN_DECODE=$2 $Q --model-preset qwen3-32b --prompt-tokens 512 --n-predict 32 --ubatch-size 2048
}
for m in old attn gemv fused; do q8 a_$m $m 512; done
for m in fused gemv attn old; do q8 b_$m $m 512; done
for m in old fused attn; do q32 a_$m $m; done
for m in fused old; do q32 b_$m $m; done
# 3. Each product alone: cuBLAS against the custom GEMV (and the fused forms) at the 8b and 32b
# shapes, n = 1, 4, 8.
run gemv_bench 120 "$B/examples/qwen_tp/gemv_bench" --preset qwen3-8b,qwen3-32b --tp 1 --tokens 1,4,8

# 4. One decode step under Nsight Compute: every kernel's time, DRAM bytes, SM throughput.
ncu_step fused qwen3-8b 512
ncu_step fused qwen3-32b 512

if [ "${PART:-all}" != gemv ]; then
# 5. Position 32000 (qwen3-8b), PyTorch, the old step's profile; lowest priority last.
for m in old attn fused; do q8 a_$m $m 32000 --ctx-size 32768; done
for m in fused attn old; do q8 b_$m $m 32000 --ctx-size 32768; done
run torch8_512 90 python3 -u "$TB" $S8 --prompt 512 --ctx 1024 --gen 64
ncu_step fused qwen3-8b 32000 --ctx-size 32768
ncu_step old qwen3-8b 512
run torch8_32000 90 python3 -u "$TB" $S8 --prompt 32000 --ctx 32768 --gen 64
run torch32_512 90 python3 -u "$TB" $S32 --prompt 512 --ctx 1024 --gen 32
run torch8_compile_512 150 python3 -u "$TB" $S8 --prompt 512 --ctx 1024 --gen 64 --compile
ncu_step old qwen3-8b 32000 --ctx-size 32768
# Speculation (the field report's regime on the 8b shape): decode tok/s with 3 drafts, fused and old.
for m in fused old; do
  run "q8_512_mtp_$m" 60 env QWEN_DECODE=$m $Q --model-preset qwen3-8b --prompt-tokens 512 --n-predict 128 \
    --spec-type draft-mtp --spec-draft-n-max 3 --sim-draft-acceptance 0.6
done
# Prefill at 2048 and 8192 (the decode kernels do not change it: old path only).
for P in 2048 8192; do q8 pf_old old $P; done
fi
fi
fi

# ---- the table ----
{
  echo "# decode_ab.sh at $REV ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  echo "| run | decode kernels | prefill tok/s | decode tok/s | step ms | % roofline | graph | GEMMs alone ms | rest ms |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for f in "$L"/q8_*.log "$L"/q32_*.log; do
    [ -f "$f" ] || continue
    awk -v run="$(basename "$f" .log)" '
      /decode kernels/ { match($0, /decode kernels [a-z]+/); k = substr($0, RSTART + 15, RLENGTH - 15) }
      /prompt eval time/ && !pf { for (i = 1; i <= NF; ++i) if ($i == "tokens" && $(i+1) == "per") pf = $(i-1) }
      /^ +eval time/ && !dc { for (i = 1; i <= NF; ++i) if ($i == "tokens" && $(i+1) == "per") dc = $(i-1) }
      /^decode step [0-9]/ { st = $3; match($0, /\(([0-9.]+)% of roofline/); rf = substr($0, RSTART + 1, RLENGTH - 14);
                             match($0, /graph: [0-9]+ kernels/); gr = substr($0, RSTART + 7, RLENGTH - 7) }
      /decode step.s weight GEMMs alone/ { match($0, /\): [0-9.]+ ms/); gm = substr($0, RSTART + 3, RLENGTH - 6);
                             match($0, /everything else in the step: [0-9.]+/); re = substr($0, RSTART + 29, RLENGTH - 29) }
      /rc=[1-9]/ { bad = 1 }
      END { printf "| %s%s | %s | %s | %s | %s | %s | %s | %s | %s |\n", run, bad ? " (FAILED)" : "", k, pf, dc, st, rf, gr, gm, re }' "$f"
  done
  echo
  # Each shape's modes in an A B .. B A part (runs q<size>_<prompt>_{a,b}_<mode>): the mean of a
  # mode's step times, and the ratio of the part's first mode (its reference: modes.txt, written
  # by over_shapes) to it.
  python3 - "$L" << 'EOF'
import glob, os, re, sys
listed = []
if os.path.exists(os.path.join(sys.argv[1], "modes.txt")):
    for line in open(os.path.join(sys.argv[1], "modes.txt")):
        listed += [m for m in line.split() if m not in listed]
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "q*_*_[ab]_*.log"))):
    m = re.match(r"(q\d+_\d+)_([ab])_(.+)$", os.path.basename(f)[:-4])
    text = open(f, errors="replace").read()
    st = re.search(r"^decode step ([0-9.]+) ms \(([0-9.]+)% of roofline", text, re.M)
    if m and st:
        rows.setdefault(m.group(1), {}).setdefault(m.group(3), []).append((float(st.group(1)), float(st.group(2))))
if rows:
    print("A B .. B A means (step ms; % of roofline as qwen_tp prints it; speed-up: the reference's step over this")
    print("mode's; the reference is the part's first mode, else the first by name):")
    print("| shape | mode | runs | step ms | % roofline | speed-up |")
    print("|---|---|---|---|---|---|")
    for shape, modes in rows.items():
        order = [k for k in listed if k in modes] + sorted(k for k in modes if k not in listed)
        ref = sum(r[0] for r in modes[order[0]]) / len(modes[order[0]])
        for k in order:
            ms = sum(r[0] for r in modes[k]) / len(modes[k])
            rf = sum(r[1] for r in modes[k]) / len(modes[k])
            print(f"| {shape} | {k} | {len(modes[k])} | {ms:.3f} | {rf:.1f} | {ref / ms:.4f}x over {order[0]} |")
EOF
  echo
  echo "PyTorch (torch_tp_decode.py):"
  for f in "$L"/torch*.log; do
    [ -f "$f" ] || continue
    echo "- $(basename "$f" .log): $(grep -a '^torch TP=' "$f" | sed -E 's/; weights.*(efficiency [0-9]+%).*(peak memory [0-9.]+ GB)/; \1; \2/' | tail -1) $(grep -q 'rc=[1-9]' "$f" && echo '(FAILED or timed out)')"
  done
  echo
  echo "Memory at qwen3-8b 32000 (each run's memory line):"
  grep -ah "^memory rank 0" "$L"/q8_32000_*.log 2> /dev/null | sort | uniq -c | sed 's/^ */- /'
  echo
  clocks_summary
  echo
  echo "Prefill split, qwen3-8b at 32000 (the profile's lines: the chunk's GEMMs alone, the attention alone):"
  for f in "$L"/q8_32000_*.log; do
    [ -f "$f" ] || continue
    echo "- $(basename "$f" .log): $(grep -a "^prefill chunk's weight GEMMs alone\|^prefill attention alone" "$f" | cut -c1-220 | tr '\n' ' ')"
  done
  echo
  echo "Speculation (n-max 3, simulated acceptance 0.6):"
  for f in "$L"/q8_512_mtp_*.log; do
    [ -f "$f" ] && echo "- $(basename "$f" .log): $(grep -a 'eval time' "$f" | tail -1 | sed 's/^ *//') $(grep -a 'draft acceptance' "$f" | tail -1 | cut -c1-80)"
  done
  echo
  echo "ncu, one decode step (kernels, summed time us, DRAM GB; top 6 kernels by time, and the attention, RoPE, norm and argmax kernels):"
  for f in "$L"/ncu_*.log; do
    [ -f "$f" ] || continue
    python3 - "$f" << 'EOF'
import csv, sys, collections, re
rows = [r for r in csv.reader(l for l in open(sys.argv[1], errors="replace") if l.startswith('"'))]
if len(rows) < 3: print(f"- {sys.argv[1].split('/')[-1]}: no ncu rows"); sys.exit()
h = rows[0]; data = rows[2:]
ix = {k: h.index(k) for k in h}
def num(r, k):
    try: return float(r[ix[k]].replace(",", ""))
    except (KeyError, ValueError): return 0.0
units = rows[1]
tk, rd, wr = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"
tscale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3}.get(units[ix[tk]], 1)
bscale = {"byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1, "KB": 1e-6, "MB": 1e-3, "GB": 1}.get(units[ix[rd]], 1e-9)
by = collections.defaultdict(lambda: [0, 0.0, 0.0])
for r in data:
    name = r[ix["Kernel Name"]].replace("(anonymous namespace)::", "").replace("qwen::gpu::", "")
    name = name.split("(")[0].replace("void ", "")[:70]
    e = by[name]; e[0] += 1; e[1] += num(r, tk) * tscale; e[2] += (num(r, rd) + num(r, wr)) * bscale
tot_t = sum(e[1] for e in by.values()); tot_b = sum(e[2] for e in by.values())
print(f"- {sys.argv[1].split('/')[-1]}: {len(data)} kernels, {tot_t:.0f} us, {tot_b:.2f} GB, {tot_b / max(tot_t, 1e-9) * 1e6:.0f} GB/s over the summed time")
ranked = sorted(by.items(), key=lambda kv: -kv[1][1])
# The top 6, and the attention's, RoPE's, the norms' and the argmax's kernels wherever they rank.
for name, (n, t, b) in [kv for i, kv in enumerate(ranked) if i < 6 or re.search("attn|[Rr]ope|Norm|Argmax", kv[0])]:
    print(f"    {n:3d} x {name}: {t:8.1f} us, {b:.3f} GB, {b / max(t, 1e-9) * 1e6:.0f} GB/s")
EOF
  done
  echo
  echo "gemv_bench (us per launch, GB/s of weights; cub/gemv = cuBLAS time over the custom GEMV's):"
  [ -f "$L/gemv_bench.log" ] && grep -a '^## qwen\|^## the greedy\|^[a-z_]\+ \+[0-9]\|^norm\|^o_proj\|^down +\|^product\|^shape\|^form\|^loop\|^16-byte' "$L/gemv_bench.log"
  echo
  grep -ah "module loading\|^\[  FAILED\|^\[  PASSED\|tests, listed below\|^## rc=" "$L/tests.log" 2>/dev/null | sed "s/^/tests: /" | head -14
  [ -f "$L/skipped.log" ] && cat "$L/skipped.log"
  echo "total $(( $(date +%s) - T0 )) s"
} > "$SUM" 2>&1
cp "$SUM" "$L/summary.md"
cat "$SUM"
