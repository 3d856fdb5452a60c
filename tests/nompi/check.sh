#!/usr/bin/env bash
# The no-MPI build (cmake --preset nompi) must score, verify and simulate, and refuse `run` with
# one line and exit 2.   check.sh BINARY EXAMPLES_DIR
set -uo pipefail
sf=$1 ex=$2
fail() { echo "FAIL: $*"; exit 1; }
out=$("$sf" score --details "$ex/figure1.jsonl") || fail "score exited $?"
grep -q "exposed makespan *8.2000 s" <<<"$out" || fail "score: no 8.2 s exposed makespan"
"$sf" verify --cases 200 --windows 50 | grep -q "result: PASS" || fail "verify did not pass"
"$sf" sim --scenario data_tail --ranks 256 --steps 30 --delay-ms 150 --check | grep -q "check: .*PASS" || fail "sim --check"
err=$("$sf" run --scenario data_tail 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "run exited $rc, expected 2"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "run printed more than one line: $err"
grep -q "no MPI" <<<"$err" || fail "run did not say why: $err"
echo "nompi: ok"
