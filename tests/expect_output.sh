#!/usr/bin/env bash
# tests/expect_output.sh RC REGEX COMMAND [ARGS...]: runs COMMAND, shows its output, and passes
# only if COMMAND exits with status RC (or one of a comma-separated list, "0,2") and its output
# (stdout and stderr) matches REGEX (POSIX
# extended; '.' matches newlines too, as in ctest's PASS_REGULAR_EXPRESSION). ctest's
# PASS_REGULAR_EXPRESSION alone ignores the exit status, so a crash after the matching line
# passed; WILL_FAIL alone takes any failure, a crash included.
set -u
want="$1" re="$2"
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
ok=1
if [[ ",$want," != *",$rc,"* ]]; then
  echo "expect_output.sh: exit status $rc, expected $want: $*"
  ok=0
fi
if ! [[ $out =~ $re ]]; then
  echo "expect_output.sh: the output does not match: $re"
  ok=0
fi
[ "$ok" = 1 ]
