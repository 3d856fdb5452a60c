#!/usr/bin/env bash
# The issue's Speed benchmarks, measured in one run on this machine:
#   1. frontier_bench: memcpy of the matrix bytes (yardstick), account() and evaluate() at
#      R in {8, 128, 1024, 16384}, N in {100, 600}, S = 6 (Google Benchmark, JSON out);
#   2. a deterministic ~100 MB wide CSV (1024 ranks x 750 steps), scored by
#      `sf-testbed score --json` and by experiments/pandas_score.py, alternating;
#   3. recorder_bench: one recorder boundary vs one bare steady_clock::now() (target <= 1.5x);
#   4. results/bench/results.{json,md} (+ runs/<date>-<commit>.json) with the machine, commit,
#      command and date, and where each target stands;
#   5. bench/stream_bench.py: the streamed score (docs/formats.md, "Streaming"): the 100 MB ratio
#      against pandas, throughput against `wc -l`, and a 1 GB CSV's peak RSS and wall time
#      (results/bench/stream.{json,md}).
#
#   bash bench/run_bench.sh            # REPS=5 repetitions each; BUILD=build-bench
#
# Needs Debian's /usr/bin/python3 with python3-pandas (a pyenv python3 may lack pandas).
# Debian's libbenchmark 1.7.1 is a DEBUG build of the library: say so beside any figure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${BUILD:-build-bench}
REPS=${REPS:-5}
OUT=${OUT:-results/bench}
PY=/usr/bin/python3
DATA=$BUILD/bench-data
CSV=$DATA/stages_1024x750.csv

"$PY" -c "import pandas, numpy" 2>/dev/null ||
  { echo "run_bench: $PY lacks pandas/numpy; apt-get install python3-pandas" >&2; exit 2; }
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSF_BUILD_BENCH=ON > /dev/null
cmake --build "$BUILD" -j"$(nproc)" --target frontier_bench sf_make_csv sf-testbed recorder_bench > /dev/null
mkdir -p "$DATA" "$OUT"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

echo "run_bench: frontier_bench, $REPS repetitions"
"$BUILD/bench/frontier_bench" --benchmark_repetitions="$REPS" \
  --benchmark_out="$DATA/frontier_bench.json" --benchmark_out_format=json > "$DATA/frontier_bench.txt" 2>&1

echo "run_bench: recorder_bench, $REPS repetitions"
"$BUILD/bench/recorder_bench" --benchmark_repetitions="$REPS" \
  --benchmark_out="$DATA/recorder_bench.json" --benchmark_out_format=json > "$DATA/recorder_bench.txt" 2>&1
"$PY" bench/recorder_report.py "$DATA/recorder_bench.json" --command "REPS=$REPS bash bench/run_bench.sh" --out "$OUT"

echo "run_bench: writing $CSV and comparing with pandas, $REPS runs each"
"$BUILD/bench/sf_make_csv" 1024 750 "$CSV"
"$PY" bench/compare_csv.py --sf "$BUILD/sf-testbed" --pandas experiments/pandas_score.py \
  --csv "$CSV" --reps "$REPS" --out "$DATA/csv_compare.json"

"$PY" bench/report.py --gbench "$DATA/frontier_bench.json" --csv "$DATA/csv_compare.json" \
  --loadavg-before "$LOAD_BEFORE" --command "REPS=$REPS bash bench/run_bench.sh" --out "$OUT"

echo "run_bench: streamed score (100 MB against pandas, 1 GB peak RSS), $REPS runs each"
"$PY" bench/stream_bench.py --sf "$BUILD/sf-testbed" --make-csv "$BUILD/bench/sf_make_csv" --data "$DATA" \
  --reps "$REPS" --out "$OUT" --command "REPS=$REPS bash bench/run_bench.sh" > /dev/null
