#!/usr/bin/env bash
# What the GPU run's rows say (issue 43), without a GPU: scripts/gpu_rows.py reduces a run.json to
# its row with the numbers the forward labels were decided on, and a run that wrote no run.json
# gives a row saying the run's own reason; tests/gpu/check_comm.py tells an NCCL run from a silent
# MPI fallback (the first H200 run passed gpu.nccl_route on the fallback).
set -uo pipefail
root=$1
py=${2:-/usr/bin/python3}
fail() { echo "FAIL: $*"; exit 1; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/ok" "$t/dead"
cat > "$t/ok/run.json" <<'J'
{"config": {"scenario": "fwd_host", "delay_ms": 120, "ranks": 4, "comm": "mpi"},
 "verdict": {"frontier": {"top1": false, "top2": true}, "diagnosis": {"outcome": "hit"}, "check": {"pass": true}},
 "evidence": {"median_step_s": 0.3, "labels": ["frontier_accounting"],
   "config": {"forward_group": "model.fwd", "gamma_a": 0.4, "gamma_event": 0.25, "event_low_ratio": 0.5},
   "shares": {"model.fwd": 0.38123, "model.bwd": 0.6},
   "leaders": {"model.fwd": [{"rank": 3, "advance_s": 2.0}]},
   "cohort": {"model.fwd": {"ranks": [{"rank": 1, "own_mean_s": 0.05}, {"rank": 3, "own_mean_s": 0.140149}]}},
   "events": {"max_rank": 2, "max_rank_median_s": 0.0775, "cohort_median_s": 0.0701},
   "downgrade_reasons": ["first note", "second note"]}}
J
echo "sf-testbed run: --device cuda: no usable CUDA device (driver too old)" > "$t/dead/stdout.txt"
"$py" "$root/scripts/gpu_rows.py" runs "# header" "$t/rows.csv" "$t/ok" "$t/dead" || fail "gpu_rows.py exit $?"
cat "$t/rows.csv"
"$py" - "$t/rows.csv" <<'P' || fail "rows"
import csv, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == "# header", lines[0]
rows = list(csv.DictReader(lines[1:]))
ok, dead = rows
want = {"fwd_share": "0.3812", "gamma_a": "0.4", "fwd_leader_rank": "3", "fwd_leader_cpu_ms": "140.149",
        "event_max_ms": "77.5", "event_cohort_ms": "70.1", "notes": "first note | second note", "top2": "True"}
bad = {k: (ok[k], v) for k, v in want.items() if ok[k] != v}
assert not bad, f"decision columns (got, expected): {bad}"
assert dead["status"].startswith("missing: run.json") and "no usable CUDA device" in dead["status"], dead["status"]
P
cj=$root/tests/gpu/check_comm.py
w() { printf '{"config": {"comm": "%s"}, "backend_notes": "%s"}' "$1" "$2" > "$t/ok/run.json"; }
w "nccl 2.30.1 (multi-rank per GPU)" ""
"$py" "$cj" "$t/ok" || fail "an NCCL run: exit $?"
w mpi "--comm nccl unavailable (NCCL 2.28.9 refuses several ranks on one GPU (2 ranks, 1 GPU(s)); 2.30+ allows it); using MPI all-reduce. "
"$py" "$cj" "$t/ok"; rc=$?
[ $rc -eq 77 ] || fail "the shared-GPU refusal: exit $rc, expected 77 (skip)"
w mpi ""
"$py" "$cj" "$t/ok"; rc=$?
[ $rc -eq 1 ] || fail "a silent MPI run: exit $rc, expected 1"
echo "PASS"
