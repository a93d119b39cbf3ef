#!/usr/bin/env bash
# tools/expect_run.sh RC REGEX COMMAND [ARGS...]: runs COMMAND and passes only when it exits with
# RC and its output (stdout and stderr, newlines folded to spaces) matches the extended regular
# expression REGEX. ctest's PASS_REGULAR_EXPRESSION alone ignores the exit code, so a crash after
# the matching line would pass; this checks both.
set -uo pipefail
want_rc="$1" regex="$2"
shift 2
out="$("$@" 2>&1)"
rc=$?
printf '%s\n' "$out"
if [ "$rc" != "$want_rc" ]; then
  echo "expect_run: exit code $rc, expected $want_rc: $*" >&2
  exit 1
fi
if ! printf '%s' "$out" | tr '\n' ' ' | grep -Eq -- "$regex"; then
  echo "expect_run: output does not match '$regex': $*" >&2
  exit 1
fi
echo "expect_run: exit code $rc and output as expected"
