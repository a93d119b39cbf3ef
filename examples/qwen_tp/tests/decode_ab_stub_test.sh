#!/bin/bash
# decode_ab_stub_test.sh (ctest qwen_decode_ab_stub, label cpu): decode_ab.sh's device-call parts
# run against stub binaries, so a slip in its run order or in the settings a run gets fails here
# and not in a GPU call. The stub qwen_tp appends "<tag-free settings> <preset> <prompt>" to a file
# per call; the test compares that sequence with the A B .. B A order each part promises, checks
# the arguments gemv_bench gets, that a part leaves its summary and logs whose lines record each
# run's settings and commit, and the summary's per-mode means and ratios.
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "decode_ab_stub_test: $*" >&2; fail=1; }

mkdir -p "$work/b/examples/qwen_tp/tests"
cat > "$work/b/examples/qwen_tp/qwen_tp" << 'EOF'
#!/bin/bash
preset=; prompt=
while [ $# -gt 0 ]; do
  case $1 in --model-preset) preset=$2; shift ;; --prompt-tokens) prompt=$2; shift ;; esac
  shift
done
echo "$QWEN_DECODE ${QWEN_ARGMAX:-unset} $QWEN_GEMV $QWEN_STREAM_PDL ${QWEN_PICK:+$QWEN_PICK }${QWEN_ROPE:+rope=$QWEN_ROPE }${QWEN_STREAM_SLOTS:+slots=$QWEN_STREAM_SLOTS }$preset $prompt" >> "$STUB_CALLS"
# A step time per mode, so the summary's means and ratios can be checked.
case "$QWEN_DECODE ${QWEN_ARGMAX:-unset}" in
  "gemv loop") ms=4.000 ;; "fused vec") ms=3.950 ;; *) ms=3.900 ;;
esac
echo "decode step $ms ms (85.0% of roofline), without all-reduce $ms ms"
EOF
cat > "$work/b/examples/qwen_tp/gemv_bench" << 'EOF'
#!/bin/bash
echo "gemv_bench $*" >> "$STUB_CALLS"
echo "## the greedy argmax (argmaxPick) over 151936 fp32 logits a row, us per launch, the rows in L2"
EOF
# nvidia-smi: a header line for the logs, and for the clock sampler (-lms) three samples, one at
# the call's peak power with the SM clock down, then it waits (as itself) to be killed.
mkdir -p "$work/bin"
cat > "$work/bin/nvidia-smi" << 'EOF'
#!/bin/bash
case "$*" in
  *-lms*) printf '%s\n' "2026/12/05 00:00:00.000, 1980, 3201, 400.00, 40, 0x0000000000000000" \
            "2026/12/05 00:00:00.250, 1700, 3201, 700.00, 60, 0x0000000000000004" \
            "2026/12/05 00:00:00.500, 1980, 3201, 100.00, 40, 0x0000000000000001"
          while :; do sleep 0.2; done ;;
  *clocks_event_reasons.active*) echo "0x0000000000000000" ;;
  *) echo "NVIDIA H200, 580.00, 143771 MiB, 1980 MHz, 3201 MHz" ;;
esac
EOF
chmod +x "$work/b/examples/qwen_tp/qwen_tp" "$work/b/examples/qwen_tp/gemv_bench" "$work/bin/nvidia-smi"
export PATH="$work/bin:$PATH"

runpart() {  # runpart <PART>: decode_ab.sh with the stubs; the calls in $work/<PART>.calls
  export STUB_CALLS=$work/$1.calls
  : > "$STUB_CALLS"
  (cd "$root" && OUT=$work/out_$1 PART=$1 TESTS=none NCU=0 SKIP_BUILD=1 BUILD=$work/b TORCH_BASELINE=/dev/null \
     COMMIT=stub timeout 120 bash examples/qwen_tp/decode_ab.sh > "$work/$1.stdout" 2>&1) ||
    bad "PART=$1 exited with $? (stdout: $(tail -3 "$work/$1.stdout" | tr '\n' ' '))"
  [ -s "$work/out_$1/summary.md" ] || bad "PART=$1 left no summary.md"
  [ -s "$work/out_$1/logs.tgz" ] || bad "PART=$1 left no logs.tgz"
}

# The A B .. B A order of over_shapes at the given shapes ("preset prompt;..."; default the three).
expect() {  # expect [-s shapes] <settings per mode...>: the modes' settings in A B .. order
  local shapes="qwen3-8b 512;qwen3-32b 512;qwen3-8b 32000" shape m
  [ "$1" = -s ] && { shapes=$2; shift 2; }
  local -a modes=("$@") order=() list
  for m in "${modes[@]}"; do order+=("$m"); done
  for ((m = ${#modes[@]} - 1; m >= 0; m--)); do order+=("${modes[m]}"); done
  IFS=';' read -r -a list <<< "$shapes"
  for shape in "${list[@]}"; do
    for m in "${order[@]}"; do echo "$m $shape"; done
  done
}
checkpart() {  # checkpart <PART>: runs it and compares its calls with $work/<PART>.want
  runpart "$1"
  diff "$work/$1.want" "$work/$1.calls" > "$work/$1.diff" ||
    bad "PART=$1 ran another sequence (want < > got): $(head -8 "$work/$1.diff" | tr '\n' ' ')"
}

{ expect "gemv loop stream auto" "gemv vec stream auto" "fused vec stream auto"
  echo "gemv_bench --preset qwen3-8b --argmax-only"; } > "$work/argmaxrope.want"
checkpart argmaxrope
expect "gemv vec stream auto" "fused vec stream auto" > "$work/fusedrope.want"
checkpart fusedrope
expect "gemv unset stream auto split" "gemv unset stream auto fused" > "$work/pick.want"
checkpart pick
expect "gemv unset stream auto rope=kernel" "gemv unset stream auto rope=qkv" > "$work/rope.want"
checkpart rope
{ expect -s "qwen3-8b 512;qwen3-32b 512" "gemv unset stream auto slots=2" "gemv unset stream all slots=1" \
    "gemv unset stream chain slots=1" "gemv unset stream all rope=qkv slots=1"
  echo "gemv_bench --preset qwen3-8b --tokens 1 --stream-slots 1"; } > "$work/slots.want"
checkpart slots
cat "$work/rope.want" "$work/slots.want" > "$work/ropeslots.want"
checkpart ropeslots

# The logs record each run's command with its settings (what a results page cites).
mkdir -p "$work/x" && tar xzf "$work/out_argmaxrope/logs.tgz" -C "$work/x" 2> /dev/null
grep -q 'QWEN_DECODE=gemv .*QWEN_ARGMAX=loop' "$work/x/logs/q8_512_a_gemvloop.log" 2> /dev/null ||
  bad "q8_512_a_gemvloop.log does not record QWEN_ARGMAX=loop with QWEN_DECODE=gemv"
grep -q '^# commit stub' "$work/x/logs/q32_512_b_fused.log" 2> /dev/null || bad "q32_512_b_fused.log has no commit line"

# The summary's A B .. B A means: each mode's mean step, and the first mode's over it.
for want in "| q8_512 | gemvloop | 2 | 4.000 | 85.0 | 1.0000x over gemvloop |" \
            "| q8_512 | gemv | 2 | 3.900 | 85.0 | 1.0256x over gemvloop |" \
            "| q32_512 | fused | 2 | 3.950 | 85.0 | 1.0127x over gemvloop |"; do
  grep -qF "$want" "$work/out_argmaxrope/summary.md" || bad "PART=argmaxrope's summary lacks the row '$want'"
done

# The clock samples (ab_common.sh's sampler, stopped at exit) and their summary line.
grep -qF "SM 1700 / 1980 / 1980 MHz (min / median / max), power up to 700 W; at 90% of that power or more (1 samples) SM median 1700" \
  "$work/out_argmaxrope/summary.md" || bad "PART=argmaxrope's summary lacks the clocks line of the stub's samples"
[ -s "$work/x/logs/clocks.csv" ] || bad "logs.tgz has no clocks.csv"
pgrep -f "$work/bin/nvidia-smi" > /dev/null && bad "the clock sampler outlived decode_ab.sh"

[ $fail = 0 ] && echo "decode_ab_stub_test: argmaxrope and fusedrope run their A B .. B A orders with their settings"
exit $fail
