#!/usr/bin/env bash
# tests/expect.sh PATTERN COMMAND [ARGS...]: runs COMMAND and passes only when it exits 0 and its
# output (stdout and stderr) matches the extended regular expression PATTERN. CTest's
# PASS_REGULAR_EXPRESSION alone ignores the exit code; tests that look for an "ok" line run
# through this instead. Any other exit code is passed on (77 stays a skip).
set -uo pipefail
pattern=$1
shift
out=$("$@" 2>&1)
code=$?
printf '%s\n' "$out"
if ((code != 0)); then
  echo "expect.sh: exit code $code" >&2
  exit "$code"
fi
if ! grep -Eq -- "$pattern" <<<"$out"; then
  echo "expect.sh: exit code 0, but the output does not match /$pattern/" >&2
  exit 1
fi
