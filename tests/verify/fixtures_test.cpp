#include "sf/verify/verify.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace v = sf::verify;
using sf::frontier::Label;

TEST(Fixtures, all_paper_fixtures_pass) {
  const auto results = v::run_fixtures(1);
  ASSERT_EQ(results.size(), 7u);  // 2 paper fixtures, 5 downgrade fixtures (§4 with and without C_R)
  for (const auto& r : results) EXPECT_TRUE(r.passed) << r.name << ": " << r.detail;
  EXPECT_EQ(results[0].rows, 120);  // §6.1 sync-wait fixture
  EXPECT_EQ(results[1].rows, 240);  // §6.1 direct-exposure fixture
}

TEST(Fixtures, sync_wait_rows_defeat_max_and_average) {
  // The paper's RQ1 result on each row: frontier top-1 is the stalled upstream stage while
  // per-stage max and average both pick the displaced backward wait.
  for (const auto& row : v::sync_wait_fixture(3, 12)) {
    const auto e = sf::frontier::evaluate(row.matrix);
    EXPECT_EQ(e.group_name(e.share_order[0]), row.expected_stage);
    EXPECT_EQ(e.group_name(e.baselines[sf::frontier::BaselineRule::per_stage_max].order[0]), "model.backward_cpu_wall");
    EXPECT_EQ(e.group_name(e.baselines[sf::frontier::BaselineRule::per_stage_avg].order[0]), "model.backward_cpu_wall");
    EXPECT_GT(e.per_stage_max_s, e.exposed_makespan_s);  // Proposition 1 overcount
  }
}

TEST(Fixtures, fixture_generation_is_deterministic) {
  const auto a = v::sync_wait_fixture(9, 3), b = v::sync_wait_fixture(9, 3);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].matrix.data().isApprox(b[i].matrix.data(), 0.0));
}

TEST(Fixtures, algorithmic_validation_matches_paper_claims) {
  const auto st = v::algorithmic_validation(5, 300);
  EXPECT_LT(st.telescoping_max_rel_error, 1e-15);
  EXPECT_EQ(st.prop1_violations, 0);
  EXPECT_EQ(st.prop2_violations, 0);
  EXPECT_EQ(st.prop1_tight_reached, st.prop1_tight_cases);
  EXPECT_EQ(st.prop2_tight_reached, st.prop2_tight_cases);
  EXPECT_LE(st.stability_max_ratio, 1.0 + 1e-9);
  EXPECT_GT(st.stability_max_ratio, 0.5);  // the perturbations do probe the bound
}

TEST(Truth, verdict_counts_top1_top2_candidates_and_rank) {
  const auto rows = v::sync_wait_fixture(1, 2);
  const auto e = sf::frontier::evaluate(rows[0].matrix);
  // Ground truth from the fixture itself (not the engine's own suspect): the rank it slowed.
  ASSERT_GE(rows[0].slow_rank, 0);
  v::Expected x{rows[0].expected_stage, {rows[0].slow_rank}, true};
  const auto verdict = v::score(e, x);
  EXPECT_TRUE(verdict.frontier.top1);
  EXPECT_TRUE(verdict.frontier.top2);
  EXPECT_TRUE(verdict.frontier.candidate_hit);
  EXPECT_TRUE(verdict.rank_hit);
  EXPECT_EQ(verdict.frontier.candidate_size, static_cast<int>(e.routing_set.size()));
  EXPECT_FALSE(verdict.baselines[0].top1);  // per-stage max picks the backward wait

  // The right stage with another rank: the stage still routes, the rank does not.
  v::Expected wrong_rank{rows[0].expected_stage, {(rows[0].slow_rank + 1) % rows[0].matrix.ranks()}, true};
  const auto miss_rank = v::score(e, wrong_rank);
  EXPECT_TRUE(miss_rank.frontier.top1);
  EXPECT_FALSE(miss_rank.rank_hit);
  v::Expected wrong_stage{"callbacks.cpu_wall", {rows[0].slow_rank}, true};
  EXPECT_FALSE(v::score(e, wrong_stage).frontier.top1);
}

TEST(Truth, evidence_difference_reports_first_mismatch) {
  const auto rows = v::sync_wait_fixture(1, 1);
  auto a = sf::frontier::evaluate(rows[0].matrix);
  auto b = a;
  EXPECT_EQ(v::evidence_difference(a, b, 0.0), "");
  b.shares[1] += 1e-3;
  EXPECT_NE(v::evidence_difference(a, b, 1e-12).find("shares[1]"), std::string::npos);
}

TEST(WindowBuilder, is_deterministic_and_does_what_its_spec_says) {
  sf::verify::WindowSpec spec;
  spec.ranks = 6;
  spec.steps = 12;
  spec.first_step = 40;
  spec.slow_rank = 4;
  spec.slow_stage = 0;
  spec.delay_s = 0.150;
  spec.seed = 3;
  const auto a = sf::verify::build_window(spec), b = sf::verify::build_window(spec);
  ASSERT_EQ(a.data(), b.data());  // bit-identical for the same spec
  EXPECT_EQ(a.first_step(), 40);
  spec.seed = 4;
  EXPECT_NE(sf::verify::build_window(spec).data(), a.data());
  // Synchronous: every rank leaves backward together, so their explicit prefixes end level.
  for (int t = 0; t < a.steps(); ++t) {
    const double p0 = a.d(t, 0, 0) + a.d(t, 0, 1) + a.d(t, 0, 2);
    for (int r = 1; r < a.ranks(); ++r) EXPECT_NEAR(a.d(t, r, 0) + a.d(t, r, 1) + a.d(t, r, 2), p0, 1e-12);
    // The slow rank's data wait carries the delay; the residual stays a small positive share.
    EXPECT_GT(a.d(t, 4, 0), 0.150);
    for (int r = 0; r < a.ranks(); ++r) {
      const double residual = a.d(t, r, 5), wall = a.wall(t, r);
      EXPECT_GT(residual, 0.0);
      EXPECT_LT(residual / wall, 0.016);
    }
  }
  const auto e = sf::frontier::evaluate(a);
  EXPECT_EQ(e.group_name(e.share_order[0]), "data.next_wait");
  EXPECT_EQ(e.suspect.rank, 4);
}

namespace {

/// Evidence whose group advances (seconds over `steps` steps) are set by hand, ordered by them.
sf::frontier::Evidence with_advances(std::vector<double> adv, int steps) {
  const auto rows = v::sync_wait_fixture(1, 1);
  auto e = sf::frontier::evaluate(rows[0].matrix);
  adv.resize(e.advances_s.size(), 0.0);
  e.advances_s = adv;
  e.steps = steps;
  e.share_order.resize(adv.size());
  for (std::size_t i = 0; i < adv.size(); ++i) e.share_order[i] = static_cast<int>(i);
  std::stable_sort(e.share_order.begin(), e.share_order.end(), [&](int a, int b) { return adv[a] > adv[b]; });
  e.routing_set = {e.share_order[0], e.share_order[1]};
  return e;
}

}  // namespace

TEST(Truth, a_lead_within_eta_a_is_a_tie_not_a_top1) {
  // Groups 0 and 1 at 1.00 and 0.95 s: shares 0.513 and 0.487, 0.026 apart (< eta_A 0.05).
  auto e = with_advances({1.0, 0.95}, 10);
  const std::string g0 = e.group_name(0);
  v::Expected x{g0, {0}, true};
  auto s = v::score(e, x);
  EXPECT_FALSE(s.frontier.top1);
  EXPECT_TRUE(s.frontier.top1_tie);
  EXPECT_TRUE(s.frontier.top2);
  EXPECT_EQ(s.outcome, v::Outcome::tie);
  // The runner-up of a tie is tied too, not a plain top-2.
  v::Expected second{e.group_name(1), {0}, true};
  EXPECT_EQ(v::score(e, second).outcome, v::Outcome::tie);
  // A clear lead is a top-1.
  e = with_advances({1.0, 0.5}, 10);
  s = v::score(e, x);
  EXPECT_TRUE(s.frontier.top1);
  EXPECT_FALSE(s.frontier.top1_tie);
  EXPECT_EQ(s.outcome, v::Outcome::top1);
  // With eta_A = 0 the narrow lead counts again.
  e = with_advances({1.0, 0.95}, 10);
  x.eta_a = 0;
  EXPECT_EQ(v::score(e, x).outcome, v::Outcome::top1);
}

TEST(Truth, a_control_whose_delay_another_stage_took_is_a_misroute) {
  // Reference: 0.10 / 0.05 / 0.02 s per step. The control injects 60 ms into group 2; the window
  // shows group 0 at +60 ms per step and leading clearly: the delay went to group 0.
  auto e = with_advances({(0.10 + 0.06) * 20, 0.05 * 20, 0.02 * 20}, 20);
  std::vector<double> ref{0.10, 0.05, 0.02};
  ref.resize(e.advances_s.size(), 0.0);  // one entry per reporting group
  v::Expected x{e.group_name(2), {0}, false};
  x.delay_s = 0.06;
  x.reference_advance_s = ref;
  auto s = v::score(e, x);
  EXPECT_EQ(s.absorbed_basis, "reference");
  EXPECT_EQ(s.absorbed_group, 0);
  EXPECT_NEAR(s.absorbed_share, 1.0, 1e-9);
  EXPECT_NEAR(s.exposed_s, 0.06, 1e-9);
  EXPECT_TRUE(s.misroute);
  EXPECT_EQ(s.outcome, v::Outcome::misrouted);
  // The same window without a reference cannot call a misroute: it reports the top share only.
  x.reference_advance_s.clear();
  s = v::score(e, x);
  EXPECT_FALSE(s.misroute);
  EXPECT_EQ(s.absorbed_basis, "top_share");
  EXPECT_EQ(s.outcome, v::Outcome::unrouted);
  // A delay that mostly did not reach the step (10 of 60 ms) is no misroute either.
  x.reference_advance_s = ref;
  e = with_advances({(0.10 + 0.01) * 20, 0.05 * 20, 0.02 * 20}, 20);
  s = v::score(e, x);
  EXPECT_FALSE(s.misroute);
  EXPECT_EQ(s.outcome, v::Outcome::unrouted);
}

namespace {

/// A window's evidence diagnosed against a healthy one of the same spec (seeds 21 and 22).
sf::frontier::Evidence judged_window(v::WindowSpec spec) {
  v::WindowSpec healthy = spec;
  healthy.slow_rank = -1;
  healthy.also_slow.clear();
  healthy.seed = 21;
  spec.seed = 22;
  auto e = sf::frontier::evaluate(v::build_window(healthy));
  const auto ref = sf::frontier::make_reference(e, "healthy");
  e = sf::frontier::evaluate(v::build_window(spec));
  sf::frontier::diagnose_against(e, ref);
  return e;
}

v::WindowSpec straggler_spec(int ranks, int slow, std::vector<int> also = {}) {
  v::WindowSpec s;
  s.ranks = ranks;
  s.steps = 20;
  s.jitter_rel = 0.02;
  s.record_sync_wait = true;
  s.slow_rank = slow;
  s.also_slow = std::move(also);
  s.slow_stage = 0;
  s.delay_s = 0.06;
  return s;
}

}  // namespace

TEST(Truth, several_faulty_ranks_are_scored_by_precision_and_recall) {
  const auto e = judged_window(straggler_spec(32, 5, {17}));
  v::Expected both{"data.next_wait", {5, 17}, true};
  both.delay_s = 0.06;
  both.world = 32;
  const auto a = v::judge_diagnosis(e, both);
  EXPECT_EQ(a.outcome, v::DiagnosisOutcome::hit);
  EXPECT_EQ(a.culprits_named, 2);
  EXPECT_EQ(a.culprits_true, 2);
  EXPECT_DOUBLE_EQ(a.precision, 1.0);
  EXPECT_DOUBLE_EQ(a.recall, 1.0);
  // Told of only one of them, the other is a culprit nobody injected: precision 1/2.
  v::Expected one{"data.next_wait", {5}, true};
  one.delay_s = 0.06;
  one.world = 32;
  const auto b = v::judge_diagnosis(e, one);
  EXPECT_DOUBLE_EQ(b.precision, 0.5);
  EXPECT_DOUBLE_EQ(b.recall, 1.0);
}

TEST(Truth, a_common_slowdown_is_right_for_a_fault_on_every_rank_and_wrong_for_one) {
  std::vector<int> rest;
  for (int r = 1; r < 8; ++r) rest.push_back(r);
  const auto e = judged_window(straggler_spec(8, 0, rest));
  ASSERT_TRUE(e.diagnosis.common);
  v::Expected all{"data.next_wait", {0, 1, 2, 3, 4, 5, 6, 7}, true};
  all.delay_s = 0.06;
  all.world = 8;
  EXPECT_EQ(v::judge_diagnosis(e, all).outcome, v::DiagnosisOutcome::common);
  EXPECT_TRUE(v::judge_diagnosis(e, all).correct());
  v::Expected one{"data.next_wait", {3}, true};
  one.delay_s = 0.06;
  one.world = 8;
  EXPECT_EQ(v::judge_diagnosis(e, one).outcome, v::DiagnosisOutcome::common_not_rank);
  EXPECT_FALSE(v::judge_diagnosis(e, one).correct());
}

TEST(Truth, a_culprit_where_nothing_was_injected_is_unexplained_and_a_straggler_is_scored_by_its_rank) {
  const auto e = judged_window(straggler_spec(8, 6));
  const v::Expected none{"", {}, true};
  EXPECT_EQ(v::judge_diagnosis(e, none).outcome, v::DiagnosisOutcome::unexplained);
  EXPECT_FALSE(v::judge_diagnosis(e, none).correct());
  // A straggler from outside the step: the rank is the truth, any stage.
  v::Expected straggler{"", {6}, true};
  straggler.any_stage = true;
  straggler.delay_s = 0.06;
  EXPECT_EQ(v::judge_diagnosis(e, straggler).outcome, v::DiagnosisOutcome::hit);
  v::Expected other{"", {2}, true};
  other.any_stage = true;
  other.delay_s = 0.06;
  EXPECT_EQ(v::judge_diagnosis(e, other).outcome, v::DiagnosisOutcome::miss);
  // A second stage a hit may name (fwd_device without events: where the host waits for it).
  v::Expected elsewhere{"model.fwd_loss_cpu_wall", {6}, true};
  elsewhere.delay_s = 0.06;
  EXPECT_EQ(v::judge_diagnosis(e, elsewhere).outcome, v::DiagnosisOutcome::rank_only);
  elsewhere.also_stage = "data.next_wait";
  EXPECT_EQ(v::judge_diagnosis(e, elsewhere).outcome, v::DiagnosisOutcome::hit);
}
