#!/usr/bin/env bash
# Runs the libFuzzer harnesses (fuzz/README.md) for as long as asked:
#   scripts/fuzz.sh [SECONDS_PER_HARNESS=60] [HARNESS...]   (default: every harness)
# Builds the `sanitize` preset's harnesses (clang, ASan+UBSan), seeds each working corpus
# (build-sanitize/fuzz/corpus/<h>, kept between runs) from its seed list (tests/data, examples,
# fuzz/seeds, fuzz/regressions), and fails when a harness finds a crash, a leak, a timeout, an
# out-of-memory or a broken rule (inf/nan in a packet, a multi-line message). A finding is left in
# build-sanitize/fuzz/findings/<h>/: fix it, then keep the input in fuzz/regressions/<h>/.
# SF_FUZZ_NO_BUILD=1 runs the harnesses as built, and fails if one is not (scripts/test.sh: the
# mutants edit frontier/ beside it, and a build then would compile the mutant into the harnesses).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(stage_jsonl stage_csv config kineto score)
if [ "${SF_FUZZ_NO_BUILD:-0}" = 1 ]; then
  for h in "${harnesses[@]}"; do
    [ -x "build-sanitize/fuzz/fuzz_$h" ] || { echo "fuzz: SF_FUZZ_NO_BUILD=1 but build-sanitize/fuzz/fuzz_$h is not built (cmake --build --preset sanitize --target fuzz_$h)" >&2; exit 2; }
  done
else
  [ -f build-sanitize/build.ninja ] || bash scripts/configure.sh sanitize
  cmake --build build-sanitize -j"$(nproc)" --target "${harnesses[@]/#/fuzz_}"
fi
# The harnesses run side by side (each is one process), so the wall time is SECONDS, not
# SECONDS x harnesses (four on CI's 2 cores: about half a core each for 60 s); SF_FUZZ_SERIAL=1
# runs them one after the other.
declare -A pid
for h in "${harnesses[@]}"; do
  corpus=build-sanitize/fuzz/corpus/$h findings=build-sanitize/fuzz/findings/$h
  mkdir -p "$corpus" "$findings"
  while IFS= read -r f; do [ -f "$f" ] && cp -f "$f" "$corpus/seed_$(basename "$f")"; done <build-sanitize/fuzz/$h.seeds
  echo "fuzz: $h for ${secs} s"
  build-sanitize/fuzz/fuzz_$h "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 >"$findings/log.txt" 2>&1 &
  pid[$h]=$!
  if [ "${SF_FUZZ_SERIAL:-0}" = 1 ]; then wait "${pid[$h]}" && pid[$h]=ok || pid[$h]=failed; fi
done
status=0
for h in "${harnesses[@]}"; do
  findings=build-sanitize/fuzz/findings/$h
  case ${pid[$h]} in
    ok) rc=0 ;;
    failed) rc=1 ;;
    *) wait "${pid[$h]}" && rc=0 || rc=$? ;;
  esac
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $h FOUND something; see $findings/log.txt and the input in $findings/"
    tail -30 "$findings/log.txt"
    status=1
  else
    grep -E "stat::number_of_executed_units|^Done" "$findings/log.txt" | sed "s/^/fuzz: $h: /"
  fi
done
exit $status
