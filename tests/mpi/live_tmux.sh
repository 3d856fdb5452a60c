#!/usr/bin/env bash
# `run --live` as a person sees it: started in a tmux pane (a real terminal), the pane captured
# while it runs and at the end, and what is on screen asserted. Then the same run with stdout
# redirected must append plain lines, no escape codes.
#   live_tmux.sh SF MPIEXEC OUTDIR
# Exit 77 (CTest SKIP) with the reason when tmux is not installed (scripts/setup.sh installs it).
set -u
sf=$1 mpiexec=$2 out=$3
if ! command -v tmux >/dev/null; then echo "SKIP: tmux is not installed (scripts/setup.sh installs it)"; exit 77; fi
rm -rf "$out" && mkdir -p "$out"
args="--scenario data_tail --delay-ms 150 --cost-scale 0.3 --steps 60 --warmup 2 --window 10 --onset 22 --offset 42 --seed 3 --detect --live"
sock="$out/tmux.sock" sess="sflive$$"
fail() { echo "FAIL: $*"; echo "--- last pane"; cat "$out/pane.txt" 2>/dev/null; tmux -S "$sock" kill-server 2>/dev/null; exit 1; }
tmux -S "$sock" new-session -d -s "$sess" -x 150 -y 30 \
  "$mpiexec -n 4 '$sf' run $args --live-redraw > /dev/tty 2>'$out/stderr.txt'; echo \"exit=\$?\" > '$out/rc.txt'; echo LIVE-DONE; sleep 60"
seen_mid=0
for _ in $(seq 1 120); do
  sleep 0.5
  tmux -S "$sock" capture-pane -p -t "$sess" > "$out/pane.txt" 2>/dev/null || true
  if grep -q "^progress \[#" "$out/pane.txt" && ! grep -q "LIVE-DONE" "$out/pane.txt"; then seen_mid=1; fi
  grep -q "LIVE-DONE" "$out/pane.txt" && break
done
# What a person sees once the run is over: the live block was drawn while it ran, the final table after it.
tmux -S "$sock" capture-pane -p -S -200 -t "$sess" > "$out/pane.txt"
tmux -S "$sock" kill-server 2>/dev/null
grep -q "exit=0" "$out/rc.txt" 2>/dev/null || fail "run did not exit 0: $(cat "$out/rc.txt" 2>/dev/null) $(head -3 "$out/stderr.txt")"
[ "$seen_mid" = 1 ] || fail "no live view on screen while the run was going"
grep -q "sf-testbed run --live" "$out/pane.txt" || fail "no live header"
grep -Eq "^rate +[0-9.]+ steps/s" "$out/pane.txt" || fail "no step rate"
grep -Eq "^progress \[#+\.*\] [0-9]+/60 steps +ETA [0-9]+ s" "$out/pane.txt" || fail "no progress with ETA"
grep -Eq "^top +data\.next_wait [0-9]+%" "$out/pane.txt" || grep -Eq "^top +.*data\.next_wait" "$out/pane.txt" || fail "no top stages"
grep -Eq "^diagnosis +rank [0-9]+ .*data\.next_wait" "$out/pane.txt" || fail "no diagnosis"
grep -Eq "^changes +(.*, )?[0-9]+ \(slower\)" "$out/pane.txt" || fail "change point not shown live"
grep -q "recovery at step 4[0-9]" "$out/pane.txt" || fail "final table missing after the live view"
# (Where the changes sit is mpi.detect_aba's business; on a loaded machine a transient can move
# them. Here: that a person sees them.)
# Not a terminal: plain appended lines, one per window, no escape codes.
"$mpiexec" -n 4 "$sf" run $args --quiet > "$out/plain.txt" 2>&1 || fail "plain run failed"
n=$(grep -c "^live: window" "$out/plain.txt")
[ "$n" = 6 ] || fail "expected 6 live lines (one per window), got $n"
grep -q $'\033' "$out/plain.txt" && fail "escape codes in plain output"
grep -Eq "^live: window 6 .* 60/60 steps \(100%\).*change points: .*[0-9]+ \(slower\).* [0-9]+ \(recovery\)" "$out/plain.txt" || fail "last plain line"
echo "live: ok (pane and plain lines)"
