#!/bin/sh
# `sf-testbed run --out` on a full disk (CTest mpi.telemetry.full_disk): a 64 KiB tmpfs filled up
# to its last 4 KiB page. No packet fits (12 KB each), a few windows.jsonl lines do, the next one
# is torn. The run must train every step, end with exit 2 and its reasons (never an abort on the
# torn line), and every whole windows.jsonl line must say that its packet was not written and why.
# usage: full_disk.sh MPIEXEC SF_TESTBED PYTHON DIR          (exit 77: cannot mount, skipped)
set -u
mpiexec=$1 sf=$2 python=$3 dir=$4
mnt=$dir/mnt
rm -rf "$dir" && mkdir -p "$mnt" || exit 1
if ! mount -t tmpfs -o size=64k sf_full_disk "$mnt" 2>"$dir/mount.err"; then
  echo "SKIP: cannot mount a 64 KiB tmpfs at $mnt (needs root): $(cat "$dir/mount.err")"
  exit 77
fi
trap 'umount "$mnt"' EXIT
trap 'exit 1' INT TERM
dd if=/dev/zero of="$mnt/fill" bs=4096 2>/dev/null
truncate -s -4096 "$mnt/fill"
"$mpiexec" -n 2 "$sf" run --quiet --out "$mnt" --scenario data_tail --steps 20 --warmup 2 --window 2 2>"$dir/err"
rc=$?
cat "$dir/err"
if [ "$rc" -ne 2 ] || grep -q "parse_error\|rank 0: " "$dir/err"; then
  echo "FAIL: exit $rc (expected 2, the run's own lines, no abort)"
  exit 1
fi
"$python" - "$mnt/windows.jsonl" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
whole = [json.loads(x) for x in text.split("\n")[:-1]]  # the last piece: "" or the torn line
bad = [w["index"] for w in whole if w["packet_written"] or "No space left on device" not in w.get("packet_error", "")]
print(f"windows.jsonl: {len(whole)} whole lines, each packet_written false with its reason: {not bad}")
if len(whole) < 3 or bad or [w["index"] for w in whole] != list(range(len(whole))):
    sys.exit(f"FAIL: lines {bad} do not say why their packet is missing (or fewer than 3 whole lines)")
EOF
