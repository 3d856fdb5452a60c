#!/usr/bin/env bash
# Regenerates results/bench/sim44.{md,json} (issue 44, part 1): `sim` at 10^6 ranks x 100 steps,
# this build paired with the turn-4 baseline binary in the same run; see bench/sim44.py.
#   BUILD=build BASE=../base/build ROUNDS=3 bash bench/sim44.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BASE=${BASE:-../base/build}
exec /usr/bin/python3 bench/sim44.py --sf "$BUILD/sf-testbed" --base "$BASE/sf-testbed" --rounds "${ROUNDS:-3}" --one-thread \
  --out results/bench "$@"
