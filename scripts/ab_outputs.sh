#!/usr/bin/env bash
# Byte-for-byte A/B of two sf-testbed binaries over a corpus of deterministic commands (sim in its
# output forms, --detect, --detect-stages, --trace, --metrics, --dump, bad input; score with and
# without --detect): the check a refactor that must not change what users see is held to (issue 41:
# "each step its own commit with the bytes unchanged"). The commit hash and the output directory
# are masked; everything else, stdout, stderr, exit codes and the files written, must be equal.
#   scripts/ab_outputs.sh OLD_BINARY NEW_BINARY     (from the repository root; exit 1 on a difference)
# OLD_BINARY is typically a build of the previous commit: git worktree add /tmp/old HEAD~1 &&
# cmake --preset cpu -B /tmp/old/build && cmake --build /tmp/old/build --target sf-testbed
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_BINARY NEW_BINARY" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus() {  # corpus BINARY DIR
  local S=$1 O=$2 n=0
  mkdir -p "$O/files"
  run() {
    n=$((n + 1))
    local rc=0
    "$S" "$@" >"$O/$n.out" 2>"$O/$n.err" || rc=$?
    echo "exit $rc: $*" >>"$O/$n.out"
    sed -i -E "s#$O/files#FILES#g; s/commit [0-9a-f]{7,40}(-dirty)?/commit X/g; s/\"commit\": ?\"[^\"]*\"/\"commit\":\"X\"/g" \
      "$O/$n.out" "$O/$n.err"
  }
  local F=$O/files sc
  for sc in none data_tail bwd_compute comm_delay fwd_device optim_host_local callback_sync_tail; do
    run sim --scenario "$sc" --ranks 16 --steps 40
    run sim --scenario "$sc" --ranks 16 --steps 40 --details
    run sim --scenario "$sc" --ranks 16 --steps 40 --json
  done
  run sim --scenario data_tail --ranks 8 --steps 80 --onset 40 --detect
  run sim --scenario data_tail --ranks 8 --steps 80 --onset 40 --detect --details
  run sim --scenario data_tail --ranks 8 --steps 80 --onset 40 --detect --json
  run sim --scenario data_tail --ranks 8 --steps 80 --onset 40 --detect --detect-stages --details
  run sim --scenario data_tail --ranks 8 --steps 90 --onset 30 --offset 60 --detect --details
  run sim --scenario bwd_compute --ranks 8 --steps 80 --onset 40 --detect --whole-matrix --details
  run sim --scenario bwd_compute --ranks 8 --steps 80 --onset 40 --detect --stability-stage data.next_wait --details
  run sim --scenario bwd_compute --ranks 8 --steps 80 --onset 40 --detect --stability-stage nope
  run sim --scenario data_tail --ranks 8 --steps 90 --every 10 --detect --details
  run sim --scenario data_tail --ranks 8 --steps 60 --trace "$F/trace.json" --details
  run sim --scenario data_tail --ranks 8 --steps 80 --onset 40 --detect --trace "$F/trace_detect.json" --trace-steps 30
  run sim --scenario bwd_compute --ranks 12 --steps 90 --every 10 --trace "$F/trace_every.json" --trace-ranks 2
  run sim --scenario data_tail --ranks 8 --steps 60 --metrics "$F/m.prom"
  run sim --scenario data_tail --ranks 8 --steps 30 --dump "$F/d.jsonl"
  run sim --scenario data_tail --ranks 64 --steps 30 --threads 1
  run sim --scenario bwd_compute --ranks 3001 --steps 20 --sync-mode single --json
  run sim --scenario callback_sync_tail --ranks 700 --steps 20 --json
  run sim --scenario data_tail --ranks 16 --steps 30 --reference-seed 7 --details
  run sim --scenario data_tail --ranks 16 --steps 30 --independent-reference --json
  run sim --scenario data_tail --ranks 16 --steps 30 --targets 3 --details
  run sim --scenario data_tail --ranks 16 --steps 30 --plot "$F/x.txt"
  run sim --scenario data_tail --ranks 16 --steps 30 --trace /nonexistent/dir/t.json
  run sim --scenario data_tail --ranks 16 --steps 30 --check
  run score examples/figure1.jsonl
  run score examples/section4.jsonl --details
  run score "$F/d.jsonl" --detect --details
  run score "$F/d.jsonl" --detect --json
  run score "$F/d.jsonl" --detect --trace "$F/score_trace.json"
  run run --help
  run sim --help
  echo "$n"
}
n=$(corpus "$1" "$work/a")
corpus "$2" "$work/b" >/dev/null
# The help's usage line names the binary's path.
sed -i "/^Usage: /d" "$work"/a/*.out "$work"/b/*.out
if diff -r "$work/a" "$work/b"; then
  echo "ab_outputs: the same bytes over $n commands (stdout, stderr, exit codes, files written)"
else
  echo "ab_outputs: the outputs differ (above)" >&2
  exit 1
fi
