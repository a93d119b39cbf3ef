#!/usr/bin/env bash
# tools/tune_e2e_test.sh DOCTOR ALLREDUCE_PERF: `tpcomm-doctor --tune` on host ranks writes the
# tuning file into a scratch cache directory; the doctor's report and a communicator created
# later (allreduce_perf's, INFO table) say their choices were measured; a topology the file does
# not cover, a corrupt file and TPCOMM_TUNE=0 fall back to the model, the first two with one WARN
# naming the file. ctest: doctor_tune_host_ranks (label cpu).
set -euo pipefail
doctor=$1
perf=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export XDG_CACHE_HOME=$dir NCCL_NVLS_ENABLE=0
unset TPCOMM_TUNE TPCOMM_DEBUG TPCOMM_DEBUG_SUBSYS TPCOMM_ALGO
file=$dir/tpcomm/tune.json
fail() { echo "tune_e2e_test: $*" >&2; exit 1; }

# 1. The sweep: 2 and 3 host ranks, 64 B .. 256 KB x8, both dtype classes.
out=$("$doctor" --tune --host --tune-ranks 2,3 --tune-min-bytes 64 --tune-max-bytes 256K --tune-step 8 \
      --tune-repeats 3 --tune-seconds 120)
echo "$out"
grep -q "tune: wrote $file (2 table(s)" <<<"$out" || fail "no file written"
[ "$(stat -c %a "$file")" = 600 ] || fail "$file has mode $(stat -c %a "$file"), want 600"
[ "$(stat -c %a "$dir/tpcomm")" = 700 ] || fail "$dir/tpcomm has mode $(stat -c %a "$dir/tpcomm"), want 700"
python3 - "$file" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
assert f["format"] == "tpcomm-tune" and f["format_version"] == 1, f
assert sorted(t["ranks"] for t in f["tables"]) == [2, 3], f["tables"]
for t in f["tables"]:
    assert t["host_ranks"] is True
    sizes = {(r["dtype_bits"], r["bytes"]) for r in t["rows"]}
    want = {(b, s) for b in (16, 32) for s in (64, 512, 4096, 32768, 262144)}
    assert sizes == want, (t["ranks"], sorted(sizes))
    for r in t["rows"]:
        assert set(r["us"]) == {"staged_host"}, r
        assert 0 < r["us"]["staged_host"] < 1e6, r
print("tune_e2e_test: file holds 2 tables x 10 rows")
PY

# 2. The doctor's report reads it (2 host ranks).
report=$("$doctor")
grep -q "tuning file: $file: measured: 10 sizes for 2 ranks" <<<"$report" || { echo "$report"; fail "doctor: not measured"; }
grep -qE "^ +4K +staged_host +[0-9.]+ us measured" <<<"$report" || { echo "$report"; fail "doctor: 4K not measured"; }

# 3. A communicator created later: its INFO table says measured (and modelled beyond the sweep).
run() { TPCOMM_DEBUG=INFO TPCOMM_DEBUG_SUBSYS=INIT,TUNE "$perf" --host -t "$1" -b 1K -e 1K -n 2 -w 1 -K 1 -c 1 2>&1; }
log=$(run 3)
grep -q "tuning file: $file: measured: 10 sizes for 3 ranks" <<<"$log" || { echo "$log"; fail "create: not measured"; }
grep -qE "^ +4K +staged_host +[0-9.]+ us measured" <<<"$log" || { echo "$log"; fail "create: 4K not measured"; }
grep -qE "^ +1G +staged_host +[0-9.]+ us modelled" <<<"$log" || { echo "$log"; fail "create: 1G not modelled"; }
[ "$(echo "$log" | grep -c WARN || true)" = 0 ] || { echo "$log"; fail "unexpected WARN"; }

# 4. A topology the file does not cover: one WARN naming the file, every choice modelled.
log=$(run 4)
[ "$(echo "$log" | grep -c "tuning file $file ignored: stale: no table for this topology" || true)" = 1 ] ||
  { echo "$log"; fail "4 ranks: want one WARN"; }
grep -q " measured" <<<"$log" && { echo "$log"; fail "4 ranks: something measured"; }

# 5. TPCOMM_TUNE=0: modelled, no warning.
log=$(TPCOMM_TUNE=0 run 2)
grep -q "off (TPCOMM_TUNE=0)" <<<"$log" || { echo "$log"; fail "TPCOMM_TUNE=0 not said"; }
[ "$(echo "$log" | grep -c WARN || true)" = 0 ] || { echo "$log"; fail "TPCOMM_TUNE=0: unexpected WARN"; }

# 6. A truncated file: one WARN, modelled; the benchmark still runs and checks.
head -c 300 "$file" > "$file.cut" && mv "$file.cut" "$file"
log=$(run 2)
[ "$(echo "$log" | grep -c "tuning file $file ignored: not valid JSON" || true)" = 1 ] ||
  { echo "$log"; fail "truncated: want one WARN"; }
grep -q "Out of bounds values : 0 OK" <<<"$log" || { echo "$log"; fail "the benchmark failed"; }
echo "tune_e2e_test: OK"
