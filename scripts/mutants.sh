#!/usr/bin/env bash
# Mutation check of the labeler (issue 28) and the diagnosis (issue 38): each mutant below changes
# one line of frontier/ the way a plausible slip would; the tests must notice every one. For each mutant: apply it,
# rebuild only the target the next test needs, run the tests from the cheapest up — unit tests
# (frontier_test, diagnose_test), the §6.1 fixtures, the independent oracle (tests/oracle/check.py against
# `sf-testbed score --json`), the label properties at 10^4 cases — and stop at the first that
# fails (killed). Prints one line per mutant, then `K/N mutants killed`; exits 1 when one survives
# or when the unmutated tree fails its own tests.
#
#   scripts/mutants.sh [--list] [--only NAME] [--all-tests]
#     --list       print the mutants and exit
#     --only NAME  run one mutant
#     --all-tests  run every test on every mutant (which tests kill which mutants; slower)
#
# $SF_MUTANTS_BASELINE names the tests the unmutated tree runs first (default: all of them; a test
# the unmutated tree fails would "kill" every mutant). scripts/test.sh names only the oracle: CTest
# has just passed the others on the same tree, and the oracle's unmutated run makes the windows and
# answers every mutant rescores (--keep).
# Uses the build directory $SF_MUTANTS_BUILD (default build/, as scripts/test.sh leaves it):
# only the one mutated source is recompiled per mutant. The source tree is restored on every exit,
# Ctrl-C included (trap), and the targets are rebuilt from the restored tree at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SF_MUTANTS_BUILD:-build}
CASES=${SF_MUTANTS_CASES:-10000}
ONLY="" LIST=0 ALL=0
while [ $# -gt 0 ]; do
  case $1 in
    --list) LIST=1 ;;
    --only) ONLY=$2; shift ;;
    --all-tests) ALL=1 ;;
    *) echo "mutants.sh: unknown option $1 (expected --list, --only NAME, --all-tests)" >&2; exit 2 ;;
  esac
  shift
done

# name, file, the text as it is, the text it becomes (tab-separated; the text occurs exactly once in the file)
MUTANTS=$(cat <<'EOF'
c_r_tolerance	frontier/label.cpp	rs >= top_rs - cfg.eta_a	rs >= top_rs - 3 * cfg.eta_a
confident_gap	frontier/window_stats.cpp	a >= cfg_.gamma_elig * exposed && f.gap[s] >= cfg_.eta_q * exposed;	a >= cfg_.gamma_elig * exposed;
missing_steps_gate	frontier/label.cpp	if (e.missing_steps > 0) limit(	if (false) limit(
spillover_residual	frontier/label.cpp	s1 > f && s1 != e.schema.residual_index() &&	s1 > f &&
event_high_vs_step	frontier/label.cpp	ev - cohort >= cfg.gamma_event	ev >= cfg.gamma_event
switching_not_co_critical	frontier/label.cpp	} else if (R > 1 && (ambiguous || low_gain_w0)) {	} else if (R > 1 && (share_tie || gain_tie || low_gain_w0)) {
two_stages_by_default	frontier/label.cpp	low_gain_w0 && cfg.co_critical_needs_two_stages && !second_stage	low_gain_w0 && !second_stage
spread_zero_agrees	frontier/label.cpp	if (!(v > 0)) return false;	if (!(v >= 0)) return false;
top2_is_top1	frontier/label.cpp	return above < 2;	return above < 1;
collapsed_loop_stage	frontier/label.cpp	if (index[s] < 0 && std::find(	if (false && std::find(
no_wall_passes	frontier/label.cpp	if (cfg.require_wall) limit(no_wall);	if (false) limit(no_wall);
gain_set_floor	frontier/label.cpp	if (e.static_gain[g] >= cfg.gamma_g && e.static_gain[g] >= gmax - cfg.eta_g) {	if (e.static_gain[g] >= gmax - cfg.eta_g) {
share_tie_width	frontier/label.cpp	e.shares[g] >= top.a1 - cfg.eta_a) {	e.shares[g] >= top.a1 - 2 * cfg.eta_a) {
dominance_gate	frontier/label.cpp	t.dominant = t.a1 > p.cfg.gamma_a;	t.dominant = t.a1 > p.cfg.gamma_g;
switch_min_leaders	frontier/label.cpp	if (!(conf >= 3 && chances > 0	if (!(conf >= 2 && chances > 0
lag_must_close	frontier/label.cpp	if (!(open > 0 && -collapse >= 0.5 * open))	if (!(open > 0))
host_event_low	frontier/label.cpp	side.fwd_event_median_s[rf] <= cfg.event_low_ratio * cpu)	side.fwd_event_median_s[rf] <= cpu)
no_roles_not_weak	frontier/label.cpp	out.weak = p.side.roles.empty() || out.undeclared > 0;	out.weak = out.undeclared > 0;
event_cohort_with_itself	frontier/label.cpp	if (eligible(r) && r != hi_rank) medians.push_back(side.fwd_event_median_s[r]);	if (eligible(r)) medians.push_back(side.fwd_event_median_s[r]);
se_without_window	frontier/diagnose.cpp	if (n_ref > 0 && n > 0) se = sd * std::sqrt(1.0 / n_ref + 1.0 / n);	if (n_ref > 0 && n > 0) se = sd * std::sqrt(1.0 / n_ref);
no_drift_term	frontier/diagnose.cpp	cfg.drift * std::max(0.0, ref.advance_mean_s[g])	0.0 * std::max(0.0, ref.advance_mean_s[g])
level_not_change	frontier/diagnose.cpp	const double change = x.mean_s - base;	const double change = x.mean_s;
median_with_itself	frontier/window_stats.cpp	if (n % 2 == 0) return v <= lo ? mid : lo;  // a[k − 1] = lo, a[k] = mid	if (n % 2 == 0) return lo + (mid - lo) / 2;
never_common	frontier/diagnose.cpp	d.common = standing && rc.rank < 0;	d.common = false;
no_arrival	frontier/diagnose.cpp	RankChoice rc = arrival_rank(diff.arrival_deltas, diff.delta_exposed_s);	RankChoice rc;
no_cpu_wait	frontier/diagnose.cpp	if (rc.rank < 0 && standing) rc = cpu_wait_rank(diff.cpu_wait_deltas, delta[top]);	if (false) rc = cpu_wait_rank(diff.cpu_wait_deltas, delta[top]);
exclusion_keeps_the_ring	frontier/whatif.cpp	end += others_latest(s, rank) + after_of(s, collective) * (roles.collective(s) ? ring_ratio(a.ranks, a.ranks - 1) : 1.0);	end += others_latest(s, rank) + after_of(s, collective);
rebalance_scales_optimizer	frontier/whatif.cpp	return gradient_group >= 0 && s.last_group <= gradient_group;	return true;
waits_always_usable	frontier/diagnose.cpp	return !(closes > 0 && closes >= cfg.min_effect * e.median_step_s) || top_rank_reaches_the_step_end_later(e, g);	return true;
starved_never	frontier/whatif.cpp	bool starved(const Diagnosis::Culprit& c) { return c.cpu_wait_s > 0 && c.cpu_wait_s >= 0.5 * c.excess_s; }	bool starved(const Diagnosis::Culprit& c) { return c.cpu_wait_s < 0; }
step_end_unchecked	frontier/diagnose.cpp	if (x.rank == top.rank) return x.mean_s >= 0.5 * top.mean_s;	if (x.rank == top.rank) return true;
erratic_at_one_floor	frontier/diagnose.cpp	if (!(diff.delta_exposed_s > 2 * diff.exposed_noise_floor_s)) return c;	if (!(diff.delta_exposed_s > diff.exposed_noise_floor_s)) return c;
window_spread_not_null	frontier/diagnose.cpp	const double sd = base_sd >= 0 ? base_sd : null_sd;	const double sd = x.sd_s;
unlisted_own_spread	frontier/diagnose.cpp	const double null_sd = typical_sd >= 0 ? typical_sd : x.sd_s;	const double null_sd = x.sd_s;
paired_spread_never	frontier/diagnose.cpp	const bool pairs = static_cast<int>(paired.size()) >= kSpreadRanks;	const bool pairs = false;
born_at_the_top	frontier/diagnose.cpp	if (rc.basis == "arrival") born_where_it_lost(e, top, d);	if (false) born_where_it_lost(e, top, d);
host_local_heals_arrival	frontier/whatif.cpp	if (c.group < 0 || e.wait_groups.empty()) return false;	if (true) return false;
EOF
)
if [ "$LIST" = 1 ]; then
  printf '%s\n' "$MUTANTS" | awk -F'\t' '{printf "%-26s %-26s %s  ->  %s\n", $1, $2, $3, $4}'
  exit 0
fi

t0=$SECONDS
backup=$(mktemp -d)
out=$(mktemp -d)
declare -A saved=()
restore() {
  for f in "${!saved[@]}"; do
    cmp -s "$backup/${saved[$f]}" "$f" || put_back "$f"
  done
}
trap 'restore; rm -rf "$backup" "$out"' EXIT
trap 'echo "mutants.sh: interrupted; source tree restored" >&2; exit 130' INT TERM

# Gives a file its original back with its original time (cp -p), so other build trees of the same
# sources (scripts/test.sh's clang trees) see nothing to rebuild, and removes the file's object
# from $BUILD, which was compiled from the mutant and is now newer than the source.
put_back() {
  local f=$1
  cp -p "$backup/${saved[$f]}" "$f"
  find "$BUILD" -path "*/$(dirname "$f")/*" -name "$(basename "$f").o" -delete
}
save() {  # keep the original of a file before its first mutant
  local f=$1
  if [ -z "${saved[$f]:-}" ]; then
    saved[$f]=$(echo "$f" | tr '/' '_')
    cp -p "$f" "$backup/${saved[$f]}"
  fi
}

mutate() {  # file old new: replace the one occurrence of old, or fail
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(path).read()
n = text.count(old)
if n != 1:
    sys.exit(f"mutants.sh: '{old}' occurs {n} times in {path}, expected once (has the source moved?)")
open(path, "w").write(text.replace(old, new))
PY
}

build() { cmake --build "$BUILD" -j2 --target "$@" >"$out/build.log" 2>&1; }

# The tests, cheapest first: name, build target, command.
run_test() {
  case $1 in
    unit) build frontier_test && "$BUILD/tests/frontier_test" --gtest_brief=1 >"$out/test.log" 2>&1 ;;
    diagnosis) build diagnose_test && "$BUILD/tests/diagnose_test" --gtest_brief=1 >"$out/test.log" 2>&1 ;;
    fixtures) build fixtures_test && "$BUILD/tests/fixtures_test" --gtest_brief=1 >"$out/test.log" 2>&1 ;;
    # The generated windows and the oracle's answers are the same for every mutant: kept from the
    # unmutated run (--keep), each mutant only rescores them. The windows are CTest's labels.oracle's
    # (--windows 2600), whose kept answers the unmutated run starts from (below).
    oracle) build sf-testbed && /usr/bin/python3 tests/oracle/check.py "$BUILD/sf-testbed" . "$out/oracle" --windows 2600 --keep --fail-fast >"$out/test.log" 2>&1 ;;
    properties) build properties_test &&
      RC_PARAMS="max_success=$CASES" "$BUILD/tests/properties_test" --gtest_brief=1 --gtest_filter='Labels.*' >"$out/test.log" 2>&1 ;;
  esac
}
TESTS="unit diagnosis fixtures oracle properties"
BASELINE=${SF_MUTANTS_BASELINE:-$TESTS}
for t in $BASELINE; do
  case " $TESTS " in *" $t "*) ;; *) echo "mutants.sh: SF_MUTANTS_BASELINE: '$t' is not one of: $TESTS" >&2; exit 2 ;; esac
done
case " $BASELINE " in *" oracle "*) ;; *) echo "mutants.sh: SF_MUTANTS_BASELINE must name oracle (its unmutated run keeps the windows the mutants rescore)" >&2; exit 2 ;; esac

# CTest's labels.oracle keeps its windows and the oracle's answers in $BUILD/tests/oracle (--keep):
# the unmutated run starts from a copy of them (check.py reuses them only when they were made with
# the same --windows, --seed, oracle sources and numpy, and answers a changed file anew), so it
# scores the files without answering them again (on this project's Xeon VM: 15 s against 47 s).
if [ -f "$BUILD/tests/oracle/answers.pickle" ]; then
  cp -r "$BUILD/tests/oracle" "$out/oracle"
  echo "mutants.sh: the oracle's windows and answers from $BUILD/tests/oracle (CTest's labels.oracle)"
fi
echo "mutants.sh: unmutated tree first (build $BUILD/): $BASELINE"
for t in $BASELINE; do
  if ! run_test "$t"; then
    echo "mutants.sh: the unmutated tree fails '$t':" >&2
    tail -20 "$out/build.log" "$out/test.log" >&2
    exit 1
  fi
done
echo "mutants.sh: unmutated tree passes ($((SECONDS - t0)) s)"

killed=0 total=0 survivors=""
while IFS=$'\t' read -r name file old new; do
  [ -n "$name" ] || continue
  [ -z "$ONLY" ] || [ "$ONLY" = "$name" ] || continue
  total=$((total + 1))
  m0=$SECONDS
  save "$file"
  mutate "$file" "$old" "$new"
  by=""
  for t in $TESTS; do
    if ! run_test "$t"; then
      if grep -q "error:" "$out/build.log" 2>/dev/null && ! grep -q "Built target" "$out/build.log"; then
        echo "mutants.sh: mutant $name does not compile:" >&2
        grep "error:" "$out/build.log" | head -3 >&2
        exit 1
      fi
      by="$by${by:+,}$t"
      [ "$ALL" = 1 ] || break
    fi
  done
  put_back "$file"
  if [ -n "$by" ]; then
    killed=$((killed + 1))
    printf 'mutants.sh: %-26s killed by %-28s (%s s)\n' "$name" "$by" "$((SECONDS - m0))"
  else
    survivors="$survivors $name"
    printf 'mutants.sh: %-26s SURVIVED every test         (%s s)\n' "$name" "$((SECONDS - m0))"
  fi
done <<<"$MUTANTS"

restore
build frontier_test diagnose_test fixtures_test properties_test sf-testbed || { echo "mutants.sh: rebuild of the restored tree failed" >&2; exit 1; }
echo "$killed/$total mutants killed ($((SECONDS - t0)) s)"
if [ "$killed" -ne "$total" ]; then
  echo "mutants.sh: survived:$survivors" >&2
  exit 1
fi
