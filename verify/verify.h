// sf::verify — proves the frontier identities on generated inputs (RapidCheck), reproduces the
// paper's §6.1 fixtures, and scores evidence against injected ground truth. No MPI.
#pragma once

#include "sf/frontier/frontier.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sf::verify {

// Generated inputs (RapidCheck generators in the folder's generators.h, not installed: this
// header stays free of RapidCheck so that truth scoring can be used without it).
struct GenWindow;
struct GenClockWindow;
struct GenTightness;
struct GenPerturbed;
struct GenLabelCase;
struct GenAccumulation;

// ---- properties (bodies use RC_ASSERT; shared by RC_GTEST_PROP and `sf-testbed verify`) ----

void advances_telescope(const GenWindow& w);
void advances_nonnegative(const GenWindow& w);
void slack_identity(const GenWindow& w);
void prop1_bounds(const GenWindow& w);
void prop1_tight(const GenTightness& g);
void prop2_bounds(const GenWindow& w);
void prop2_tight(const GenTightness& g);
void prop3_stability(const GenPerturbed& p);
void clock_offset_invariance(const GenClockWindow& w);
void rank_permutation_invariance(const GenWindow& w);  ///< draws the permutation inside
void monotone_in_delay(const GenWindow& w);            ///< draws the cell and delay inside
void single_rank_is_own_vector();                     ///< draws an R = 1 window
void shares_sum_to_one(const GenWindow& w);
void account_equals_scalar_loop(const GenWindow& w);
void one_pass_equals_accounting();                    ///< draws a window up to 1099 ranks wide
void streaming_equals_window();                       ///< draws a sparse window
void sparse_layout_equals_dense();                    ///< draws a sparse window, drops whole ranks
void segment_equals_window();                         ///< draws a sparse window with side evidence
void segment_tight(const GenTightness& g);            ///< every leader a tie, a missing step
void routing_set_minimal(const GenWindow& w);          ///< draws tau_C inside
void gain_equals_counterfactual(const GenWindow& w);   ///< draws the reference inside
void differential_telescopes(const GenWindow& w);     ///< draws the reference's delay inside (docs/diagnosis.md)
void differential_tight(const GenTightness& g);       ///< one delayed rank-stage against its healthy window
void telemetry_limited_suppresses_strong_labels();    ///< draws a sparse window
/// Label l fires exactly when its documented trigger holds (docs/labeler.md, Table 12).
void label_fires_exactly_on_its_trigger(frontier::Label l, const GenLabelCase& c);
/// No contradictory pair; co_critical ⇒ |E_amb| ≥ 2; telemetry_limited ⇒ no strong label; R = 1 ⇒
/// no cross-rank label.
void labels_are_consistent(const GenLabelCase& c);
/// gradient_accumulation_ambiguous fires exactly on collapsed or mixed microsteps.
void accumulation_label_iff_collapsed_or_mixed(const GenAccumulation& a);

struct PropertyInfo {
  std::string name;
  std::string statement;
};
/// Every property, in the order `verify` prints them.
const std::vector<PropertyInfo>& properties();

struct PropertyResult {
  std::string name, statement;
  bool passed = false;
  int cases = 0;
  std::string failure;  ///< RapidCheck's report (counterexample, seed) when failed
};
/// Runs one property with `cases` generated inputs from `seed`. Throws std::invalid_argument
/// for an unknown name.
PropertyResult check_property(const std::string& name, int cases, std::uint64_t seed);

// ---- deterministic windows ----

/// SplitMix64: the same stream on every platform and standard library (std::*_distribution is
/// not), so a built window — and a CSV written from it — is byte-identical everywhere.
class SplitMix64 {
public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  ///< [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

private:
  std::uint64_t state_;
};

/// A synthetic data-parallel window on the default six-stage schema: per-stage base costs with
/// relative jitter, one slow rank with extra time in one stage, and (sync_backward) the gradient
/// collective at the end of backward, where every rank waits for the last — so an upstream
/// stall is displaced into the other ranks' backward spans, as in the paper's Figure 1.
struct WindowSpec {
  int ranks = 8;
  int steps = 10;
  std::int64_t first_step = 0;
  /// data, forward, backward, callbacks, optimizer (seconds): a ~200 ms backward-dominant step.
  std::array<double, 5> base_s = {0.012, 0.045, 0.110, 0.006, 0.020};
  double jitter_rel = 0.08;     ///< each duration × uniform[1 − j, 1 + j]
  int slow_rank = -1;           ///< −1: no slow rank
  int slow_stage = 0;           ///< explicit stage index 0..4
  double delay_s = 0;           ///< added to the slow rank's slow stage, every step
  std::vector<int> also_slow;   ///< more ranks with the same delay in the same stage
  double slow_scale = 1;        ///< the slow rank's every stage × this (a rank starved of CPU, slowed everywhere)
  bool sync_backward = true;    ///< ranks leave backward together (the gradient all-reduce)
  bool record_sync_wait = false;///< and the recorder measured each rank's wait there (sync-wait side evidence)
  double residual_rel = 0.01;   ///< wall = Σ d × (1 + residual_rel × uniform[0.5, 1.5])
  std::uint64_t seed = 1;
};
/// The window a spec describes; deterministic in the spec (SplitMix64 from spec.seed).
frontier::StageMatrix build_window(const WindowSpec& spec);
/// One step of a spec's window (step t of `m`, which has the default schema), drawing from rng:
/// the building block of build_window, for windows whose slow rank or delay changes per step.
void build_step(const WindowSpec& spec, SplitMix64& rng, frontier::StageMatrix& m, int t);

// ---- fixtures (§6.1) ----

struct FixtureRow {
  frontier::StageMatrix matrix;
  std::string expected_stage;
  int slow_rank = -1;  ///< the rank the fixture slowed (ground truth for rank scoring)
};
/// Rows where one rank's upstream stage stalls and every other rank waits at the backward
/// synchronisation point: frontier should recover the upstream stage, max/avg should not.
std::vector<FixtureRow> sync_wait_fixture(std::uint64_t seed, int rows = 120);
/// Rows where one rank's stage is slow with no downstream synchronisation: direct exposure.
std::vector<FixtureRow> direct_exposure_fixture(std::uint64_t seed, int rows = 240);

struct DowngradeFixture {
  std::string name;
  frontier::StageMatrix matrix;
  frontier::TelemetryInput telemetry;
  frontier::Label expected;
  std::vector<std::string> expected_co_critical;  ///< must be a subset of co_critical_stages
  frontier::LabelConfig config = {};              ///< the labeler configuration the row is scored with
};
std::vector<DowngradeFixture> downgrade_fixtures();

struct FixtureResult {
  std::string name;
  int rows = 0;
  int frontier_hits = 0;
  int baseline_hits[std::size(frontier::kBaselineRules)] = {};
  bool passed = false;
  std::string detail;
};
/// The sync-wait, direct-exposure and four downgrade fixtures with their pass criteria.
std::vector<FixtureResult> run_fixtures(std::uint64_t seed);

/// §6.1 figures over `windows` random windows: telescoping error, bound violations and
/// tightness, and the largest observed/bound ratio of Proposition 3.
struct AlgorithmicStats {
  int windows = 0;
  double telescoping_max_abs_error = 0;
  double telescoping_max_rel_error = 0;
  int prop1_violations = 0, prop2_violations = 0;
  int prop1_tight_cases = 0, prop1_tight_reached = 0;
  int prop2_tight_cases = 0, prop2_tight_reached = 0;
  double stability_max_ratio = 0;
};
AlgorithmicStats algorithmic_validation(std::uint64_t seed, int windows);

// ---- ground-truth scoring ----

/// What an injected fault should look like in the evidence.
struct Expected {
  std::string stage;        ///< reporting group of the injected stage ("" for no fault)
  std::vector<int> ranks;   ///< injected ranks
  bool should_route = true; ///< false for host-only controls that must stay unrouted
  double delay_s = 0;       ///< injected per affected step
  bool rate_fault = false;  ///< a fault with no delay figure (a rate-limited link, a straggler): active whenever injected
  double active_fraction = 1;  ///< fraction of the window's steps the fault is active in
  /// Per reporting group: seconds per step of the same step without the fault (a healthy
  /// reference window); empty when unknown. Where the injected delay went is measured against it.
  std::vector<double> reference_advance_s{};
  double eta_a = 0.05;      ///< share tie tolerance (the labeler's η_A)
  /// A straggler from outside the step (a rank starved of CPU, paused): the truth is the rank,
  /// and the stage is wherever its loss surfaced (stage names the group it is scored against
  /// only for the paper's verdict, when set).
  bool any_stage = false;
  /// Ranks of the window (0..world−1): a fault on every one of them is a common slowdown.
  int world = 0;
  /// A fault every rank shares (a slow link all collectives cross): a common slowdown is right.
  bool shared = false;
  /// A second stage the diagnosis may name for a hit (fwd_device without events: backward, where
  /// the host waits for the device); "" for none.
  std::string also_stage{};
};
/// Whether the window's exposed step grew past its floor against the reference (true without one:
/// nothing then says the fault did not reach the step).
bool exposed_in(const frontier::Evidence& e);

struct RuleVerdict {
  bool top1 = false;       ///< first, ahead of the runner-up by more than η_A of share
  bool top1_tie = false;   ///< among the first two and within η_A of each other: a tie, not a top-1
  bool top2 = false, candidate_hit = false;
  int candidate_size = 0;
};

/// How one scored window ended, per row of a table. Positive scenarios: top1, tie, top2 (top-2
/// only), misrouted (the delay went, confidently, to another stage), unrouted. Controls (must
/// stay unrouted): unrouted (correct), routed (the injected stage is in the routing set),
/// misrouted (the delay was exposed and confidently routed to another stage).
enum class Outcome { top1, tie, top2, unrouted, misrouted, routed };
std::string_view to_string(Outcome o);

/// How the diagnosis (frontier::Diagnosis) ended against the truth. Correct: hit, quiet (no fault,
/// nothing named), not_exposed (the fault never reached the step, nothing named), common (a common
/// slowdown where the fault was on every rank or on a link they all share, or where no fault was
/// injected and no rank was named). Wrong: stage_only (the stage without the rank), rank_only
/// (the rank, another stage), miss (neither), unnamed (an exposed fault, nothing named),
/// false_alarm (something named where an injected fault never reached the step), unexplained (a
/// culprit named where nothing was injected: a straggler the testbed did not make, or a false
/// alarm), common_not_rank (a common slowdown where one rank was at fault).
enum class DiagnosisOutcome {
  hit, stage_only, rank_only, miss, unnamed, quiet, not_exposed, false_alarm, common, unexplained, common_not_rank
};
std::string_view to_string(DiagnosisOutcome o);
struct DiagnosisVerdict {
  DiagnosisOutcome outcome = DiagnosisOutcome::quiet;
  bool stage_hit = false, rank_hit = false;
  bool fault = false;    ///< a fault with a delay was active in the window
  bool exposed = false;  ///< and it reached the step (ΔF past its floor; assumed without a reference)
  /// The culprits' ranks against the injected ranks (several targets): named ∩ truth over named
  /// (precision; 1 when none named) and over truth (recall; 1 when no fault).
  int culprits_named = 0, culprits_true = 0;
  double precision = 1, recall = 1;
  bool correct() const {
    return outcome == DiagnosisOutcome::hit || outcome == DiagnosisOutcome::quiet ||
           outcome == DiagnosisOutcome::not_exposed || outcome == DiagnosisOutcome::common;
  }
};
/// Judges e.diagnosis against the truth: a hit needs the injected stage and one of the injected ranks.
DiagnosisVerdict judge_diagnosis(const frontier::Evidence& e, const Expected& x);

struct Verdict {
  DiagnosisVerdict diagnosis;
  RuleVerdict frontier;
  RuleVerdict baselines[std::size(frontier::kBaselineRules)];
  bool rank_hit = false;
  bool routed = false;  ///< stage in the frontier routing set
  // Where the injected delay went.
  int absorbed_group = -1;        ///< the group that took most of it (−1: nothing exposed / unknown)
  double absorbed_share = 0;      ///< that group's part of the exposed excess (its frontier share
                                  ///< when there is no reference)
  double exposed_s = -1;          ///< Σ_g max(0, advance_g − reference_g) per step; −1: no reference
  std::string absorbed_basis;     ///< "reference" | "top_share" | "none"
  bool misroute = false;          ///< exposed (≥ half the delay) and confidently routed elsewhere
  Outcome outcome = Outcome::unrouted;
};
Verdict score(const frontier::Evidence& e, const Expected& x);

/// Compares two evidence packets field by field (numbers within rel_tol); returns "" when
/// equal, else the first difference.
std::string evidence_difference(const frontier::Evidence& a, const frontier::Evidence& b, double rel_tol);

}  // namespace sf::verify
