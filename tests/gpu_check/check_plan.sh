#!/usr/bin/env bash
# scripts/gpu_check.sh without a GPU (issue 31): it parses, --dry-run prints every part with its
# budget and a total inside the 480 s limit and names the eight files, a limit below the plan is
# refused with one line and exit 2, a missing OUTDIR is a usage line and exit 2, and a bundle without
# the packages the configure requires is said before the machine starts.
set -uo pipefail
root=$1
s=$root/scripts/gpu_check.sh
fail() { echo "FAIL: $*"; exit 1; }
bash -n "$s" || fail "bash -n"
out=$(BUNDLE=/nonexistent bash "$s" --dry-run /tmp/sf_gpu_check_plan 2>&1) || fail "--dry-run exit $?: $out"
echo "$out"
for part in bundle build gpu_tests events routing calibration overhead nccl torch; do
  grep -Eq "^  $part +[0-9]+ s  " <<<"$out" || fail "the plan has no budget for $part"
done
total=$(sed -n 's/^  total *\([0-9]*\) s  (limit \([0-9]*\) s)$/\1 \2/p' <<<"$out")
read -r sum limit <<<"$total"
[ -n "$sum" ] && [ "$sum" -le "$limit" ] && [ "$limit" -le 480 ] || fail "total '$total' not within a limit <= 480 s"
files=$(sed -n 's/^  files: //p' <<<"$out")
[ "$(wc -w <<<"$files")" -le 8 ] || fail "more than 8 files: $files"
grep -q "bundle: /nonexistent missing" <<<"$out" || fail "a missing bundle is not said"
[ -e /tmp/sf_gpu_check_plan ] && fail "--dry-run created OUTDIR"
# A bundle made by ompi-bundle.sh alone lacks the fast_float headers the configure requires: said
# before the machine is started, with the line that adds it, and a nonzero exit.
fake=$(mktemp -d); trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/debs" && touch "$fake/unpack.sh" "$fake/env.sh" "$fake/debs/libeigen3-dev_3.4.0-4_all.deb"
out=$(BUNDLE=$fake bash "$s" --dry-run /tmp/sf_gpu_check_plan 2>&1) && fail "a bundle without fast_float: exit 0"
grep -q "lacks libfast-float-dev, which the configure requires (add: (cd $fake/debs && apt-get download libfast-float-dev))" <<<"$out" \
  || fail "a bundle without fast_float is not said: $out"
touch "$fake/debs/libfast-float-dev_3.9.0-1_amd64.deb"
out=$(BUNDLE=$fake bash "$s" --dry-run /tmp/sf_gpu_check_plan 2>&1) || fail "a whole bundle: exit $?: $out"
grep -q "lacks" <<<"$out" && fail "a whole bundle is said to lack: $out"
err=$(GPU_CHECK_TOTAL_S=100 bash "$s" --dry-run /tmp/x 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] || fail "a 100 s limit: exit $rc, '$err' (expected one line, exit 2)"
err=$(bash "$s" 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] || fail "no OUTDIR: exit $rc, '$err' (expected one usage line, exit 2)"
echo "PASS: plan $sum s within $limit s; $(wc -w <<<"$files") files"
