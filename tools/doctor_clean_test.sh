#!/usr/bin/env bash
# ctest doctor_clean: `tpcomm-doctor --clean` removes a /dev/shm/tpcomm-<pid>-*
# segment whose process is gone, names it, and leaves one of a live process alone. (The first
# form of this test only matched "clean: removed N stale", so it passed with N = 0 even when the
# clean-up removed nothing: scripts/mutation_check.py --cpu, shm_stale_never_removed.)
set -euo pipefail
doctor="${1:?usage: doctor_clean_test.sh TPCOMM_DOCTOR}"
[ -d /dev/shm ] || { echo "no /dev/shm: skipped"; exit 0; }
(exit 0) &
dead=$!
wait "$dead"  # reaped: its pid is gone
stale="/dev/shm/tpcomm-$dead-0-c1ea0000"
live="/dev/shm/tpcomm-$$-0-c1ea0001"  # this shell is alive
trap 'rm -f "$stale" "$live"' EXIT
head -c 4096 /dev/zero >"$stale"
head -c 4096 /dev/zero >"$live"
out=$("$doctor" --clean)
echo "$out"
fail=0
[ -e "$stale" ] && { echo "FAILED: $stale (pid $dead is gone) is still there"; fail=1; }
[ -e "$live" ] || { echo "FAILED: $live of a live process was removed"; fail=1; }
grep -q "removed $stale" <<<"$out" || { echo "FAILED: the report does not name $stale"; fail=1; }
grep -Eq "clean: removed [1-9][0-9]* stale" <<<"$out" || { echo "FAILED: no count of removed segments"; fail=1; }
exit $fail
