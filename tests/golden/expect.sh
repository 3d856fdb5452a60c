#!/usr/bin/env bash
# Golden check of the sf-testbed binary's behaviour:
#   expect.sh EXIT_CODE STDERR_REGEX STDOUT_REGEX -- COMMAND...
# Passes when COMMAND exits with EXIT_CODE, its stdout matches STDOUT_REGEX (extended, multi-line
# input searched line by line; every `@@`-separated pattern must match some line) and, when
# STDERR_REGEX is not '-', stderr is exactly one line matching it. With EXPECT_OWN_LINES=1 only
# lines written by sf-testbed count (an MPI launcher adds its own abort banner).
set -u
want_rc=$1 err_re=$2 out_re=$3
shift 3
[ "$1" = "--" ] && shift
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$@" >"$out" 2>"$err"
rc=$?
fail() { echo "FAIL: $*"; echo "--- stdout"; head -50 "$out"; echo "--- stderr"; head -20 "$err"; exit 1; }
[ "$rc" -eq "$want_rc" ] || fail "exit code $rc, expected $want_rc"
if [ "$err_re" != "-" ]; then
  if [ "${EXPECT_OWN_LINES:-0}" = 1 ]; then
    grep '^sf-testbed' "$err" >"$err.own" || true
    mv "$err.own" "$err"
  fi
  lines=$(wc -l <"$err")
  [ "$lines" -eq 1 ] || fail "stderr has $lines lines, expected exactly one"
  grep -Eq -- "$err_re" "$err" || fail "stderr does not match /$err_re/"
fi
if [ "$out_re" != "-" ]; then
  IFS=$'\n' read -r -d '' -a pats < <(printf '%s' "$out_re" | sed 's/@@/\n/g'; printf '\0')
  for p in "${pats[@]}"; do
    grep -Eq -- "$p" "$out" || fail "stdout has no line matching /$p/"
  done
fi
echo "ok"
