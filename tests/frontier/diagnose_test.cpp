// The diagnosis (docs/diagnosis.md): the differential against a reference, the cohort without
// one, the rules that follow a wait back to its origin, and the confidence.
#include "sf/frontier/frontier.h"
#include "sf/verify/verify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>

using namespace sf::frontier;

namespace {

StageMatrix window(int ranks, int slow, int stage, double delay, std::uint64_t seed = 1, int steps = 20) {
  sf::verify::WindowSpec spec;
  spec.ranks = ranks;
  spec.steps = steps;
  spec.slow_rank = slow;
  spec.slow_stage = stage;
  spec.delay_s = delay;
  spec.seed = seed;
  spec.jitter_rel = 0.02;
  return sf::verify::build_window(spec);
}

Reference healthy_reference(int ranks, std::uint64_t seed = 2) {
  return make_reference(evaluate(window(ranks, -1, 0, 0.0, seed)), "healthy");
}

/// Four stages (data, forward, backward with a collective, optimizer) on R ranks, one step per
/// row: every rank computes in backward and then waits in its all-reduce until the latest rank
/// arrives, 2 ms of collective past it; rank `late_rank` spends late_s more in stage `late_stage`
/// (the optimizer: of the step before, so it arrives late; data: of the step itself).
StageMatrix wait_window(int R, int steps, int late_rank, double late_s, int late_stage = 3) {
  const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"}, false);
  StageMatrix m(schema, R, 0, steps);
  for (int t = 0; t < steps; ++t)
    for (int r = 0; r < R; ++r) {
      const bool late = r == late_rank;
      const double wait = 0.002 + (late ? 0.0 : late_s);
      std::vector<double> d = {0.010, 0.040, 0.100 + wait, 0.020};
      if (late) d[static_cast<std::size_t>(late_stage)] += late_s;
      m.set_record(t, r, d, std::nullopt);
      m.set_sync_wait(t, r, 2, wait);
    }
  return m;
}

}  // namespace

TEST(Differential, telescopes_and_names_the_delayed_stage_and_rank) {
  const Reference ref = healthy_reference(8);
  Evidence e = evaluate(window(8, 5, 0, 0.060));
  diagnose_against(e, ref);
  ASSERT_TRUE(e.differential);
  const auto& d = *e.differential;
  EXPECT_NEAR(std::accumulate(d.delta_advance_s.begin(), d.delta_advance_s.end(), 0.0), d.delta_exposed_s, 1e-12);
  EXPECT_NEAR(d.delta_exposed_s, e.exposed_makespan_s / e.steps - ref.exposed_mean_s, 1e-15);
  EXPECT_EQ(e.diagnosis.basis, Diagnosis::Basis::differential);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "data.next_wait");
  EXPECT_EQ(e.diagnosis.rank, 5);
  EXPECT_NEAR(e.diagnosis.excess_s, 0.060, 0.006);
  EXPECT_GT(e.diagnosis.confidence, 0.5);
  EXPECT_EQ(e.diagnosis.reference, "healthy");
}

TEST(Differential, a_healthy_window_against_a_healthy_reference_is_no_change) {
  for (std::uint64_t seed = 3; seed < 8; ++seed) {
    Evidence e = evaluate(window(8, -1, 0, 0.0, seed));
    diagnose_against(e, healthy_reference(8));
    EXPECT_EQ(e.diagnosis.group, -1) << "seed " << seed;
    EXPECT_EQ(e.diagnosis.rank, -1);
    EXPECT_FALSE(e.diagnosis.significant());
    EXPECT_LT(e.diagnosis.excess_s, e.diagnosis.noise_floor_s);
  }
}

TEST(Differential, the_noise_floor_is_the_largest_of_z_standard_errors_min_effect_and_the_stage_drift) {
  const Reference ref = healthy_reference(8);
  const Evidence e = evaluate(window(8, -1, 0, 0.0, 9));
  DiagnosisConfig cfg;
  const auto d = compare(e, ref, cfg);
  int drift_sets_it = 0;
  for (std::size_t g = 0; g < d.noise_floor_s.size(); ++g) {
    // The reference's robust spread where it has four steps or more (it has 20 here).
    ASSERT_GE(ref.advance_robust_sd_s[g], 0.0);
    const double se = ref.advance_robust_sd_s[g] * std::sqrt(1.0 / ref.steps + 1.0 / e.steps);
    const double drift = cfg.drift * ref.advance_mean_s[g];
    EXPECT_DOUBLE_EQ(d.noise_floor_s[g], std::max({cfg.z * se, cfg.min_effect * ref.exposed_mean_s, drift}));
    drift_sets_it += drift > std::max(cfg.z * se, cfg.min_effect * ref.exposed_mean_s);
  }
  EXPECT_GT(drift_sets_it, 0) << "no stage of this window is large enough for its drift term to matter";
  cfg.min_effect = 0;
  cfg.z = 0;
  cfg.drift = 0;
  for (double f : compare(e, ref, cfg).noise_floor_s) EXPECT_EQ(f, 0.0);
}

TEST(Differential, a_common_drift_of_the_largest_stage_is_not_a_fault_and_a_larger_change_is) {
  // Every rank's backward (the step's largest stage, 0.10 s of 0.17 s) 4 ms slower: past 2 % of the
  // step (3.4 ms) and, with no step-to-step spread, past any number of standard errors, but inside
  // 5 % of backward's own time, as a busy machine moves it between two healthy periods.
  auto uniform = [](double bwd_extra) {
    const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"}, false);
    StageMatrix m(schema, 8, 0, 12);
    for (int t = 0; t < 12; ++t)
      for (int r = 0; r < 8; ++r) {
        const std::vector<double> d = {0.010, 0.040, 0.100 + bwd_extra, 0.020};
        m.set_record(t, r, d, std::nullopt);
      }
    return m;
  };
  const Reference ref = make_reference(evaluate(uniform(0.0)), "healthy");
  Evidence drifted = evaluate(uniform(0.004));
  diagnose_against(drifted, ref);
  EXPECT_NEAR(drifted.differential->delta_advance_s[2], 0.004, 1e-12);
  EXPECT_GT(drifted.differential->delta_advance_s[2], 0.02 * ref.exposed_mean_s);
  EXPECT_FALSE(drifted.diagnosis.significant());
  EXPECT_EQ(drifted.diagnosis.group, -1);
  // Twice the drift is a change of the stage (a slow link slows every rank's collective alike).
  Evidence slower = evaluate(uniform(0.012));
  diagnose_against(slower, ref);
  EXPECT_EQ(slower.group_name(slower.diagnosis.group), "model.backward_cpu_wall");
  // With the drift term off, the 4 ms is named: the term is what keeps it quiet.
  Evidence strict = evaluate(uniform(0.004));
  strict.config.diagnosis.drift = 0;
  diagnose_against(strict, ref);
  EXPECT_EQ(strict.group_name(strict.diagnosis.group), "model.backward_cpu_wall");
}

TEST(Differential, a_reference_of_other_stages_is_refused) {
  const Evidence e = evaluate(window(4, -1, 0, 0.0));
  Reference ref = make_reference(e, "other");
  ref.groups[1] = "model.something_else";
  EXPECT_NE(reference_problem(e, ref), "");
  EXPECT_THROW(compare(e, ref), std::invalid_argument);
  ref = make_reference(e, "empty");
  ref.steps = 0;
  EXPECT_NE(reference_problem(e, ref), "");
}

TEST(Diagnosis, cohort_names_a_straggler_without_a_reference) {
  const Evidence e = evaluate(window(8, 2, 1, 0.050));
  EXPECT_EQ(e.diagnosis.basis, Diagnosis::Basis::cohort);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "model.fwd_loss_cpu_wall");
  EXPECT_EQ(e.diagnosis.rank, 2);
  EXPECT_NEAR(e.diagnosis.excess_s, 0.050, 0.005);
  EXPECT_EQ(e.diagnosis.reference, "");
  // A healthy window: nothing stands out from the cohort.
  const Evidence h = evaluate(window(8, -1, 0, 0.0));
  EXPECT_EQ(h.diagnosis.group, -1);
}

TEST(Diagnosis, lag_origin_follows_the_wait_back_from_the_collective) {
  // Backward holds the all-reduce (declared) and leads by share; the lag opened at data. No wait
  // was measured, so the waiting ranks' own work in backward (where the lag closes) is no evidence
  // against them: the straggler stands out in data, where the wait was born.
  LabelConfig cfg;
  cfg.wait_model = {"model.backward_cpu_wall"};
  const Evidence e = evaluate(window(8, 6, 0, 0.060), cfg);
  ASSERT_EQ(e.group_name(e.share_order[0]), "model.backward_cpu_wall");
  EXPECT_EQ(e.diagnosis.basis, Diagnosis::Basis::cohort);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "data.next_wait");
  EXPECT_EQ(e.diagnosis.rank, 6);
  ASSERT_GE(e.diagnosis.surfaces_group, 0);
  EXPECT_EQ(e.group_name(e.diagnosis.surfaces_group), "model.backward_cpu_wall");
  EXPECT_EQ(e.diagnosis.culprits.size(), 1u);
  // Two ranks: each compares with the other; the waiting one is not named for its wait.
  const Evidence two = evaluate(window(2, 1, 0, 0.060), cfg);
  EXPECT_EQ(two.diagnosis.rank, 1);
  EXPECT_EQ(two.group_name(two.diagnosis.group), "data.next_wait");
  EXPECT_EQ(two.diagnosis.culprits.size(), 1u);
  // Without standings (a packet of an older schema, or past kStandingMaxRanks ranks) the lag
  // origin still names it.
  Evidence old = e;
  old.standing.clear();
  const Diagnosis d = diagnose(old, nullptr, old.config.diagnosis);
  EXPECT_EQ(d.basis, Diagnosis::Basis::lag_origin);
  EXPECT_EQ(d.rank, 6);
}

TEST(Diagnosis, a_host_local_delay_is_named_where_it_was_born_not_where_it_surfaces) {
  const StageMatrix healthy = wait_window(6, 10, -1, 0.0), faulty = wait_window(6, 10, 4, 0.080);
  Evidence e = evaluate(faulty);
  diagnose_against(e, make_reference(evaluate(healthy), "healthy"));
  ASSERT_TRUE(e.differential);
  const int bwd = *e.schema.group_index("model.backward_cpu_wall");
  EXPECT_NEAR(e.differential->delta_advance_s[bwd], 0.080, 1e-12);  // the others' wait
  EXPECT_EQ(e.group_name(e.diagnosis.group), "optim.step_cpu_wall");
  EXPECT_EQ(e.diagnosis.rank, 4);
  EXPECT_EQ(e.diagnosis.surfaces_group, bwd);
  EXPECT_EQ(e.diagnosis.rank_basis, "own_work_excess");
  // The same without a reference: the cohort says the same.
  const Evidence c = evaluate(faulty);
  EXPECT_EQ(c.group_name(c.diagnosis.group), "optim.step_cpu_wall");
  EXPECT_EQ(c.diagnosis.rank, 4);
}

TEST(Diagnosis, a_host_local_delay_at_two_ranks_is_named_where_it_was_born) {
  // With two ranks the lag is half their gap: it opens in backward, where the other rank waits
  // (measured), and closes in the optimizer as the rank behind does its extra work there. The lag
  // closing is no wait in the optimizer: the rank that stands out there also ends the step later
  // by as much. Read as a wait, the optimizer's standings were dropped and the rank was named in
  // backward, where nothing of its own changed (sim --ranks 2 --scenario optim_host_local).
  for (const int late : {0, 1}) {
    const StageMatrix healthy = wait_window(2, 10, -1, 0.0), faulty = wait_window(2, 10, late, 0.080);
    Evidence e = evaluate(faulty);
    diagnose_against(e, make_reference(evaluate(healthy), "healthy"));
    const int bwd = *e.schema.group_index("model.backward_cpu_wall");
    EXPECT_EQ(e.group_name(e.diagnosis.group), "optim.step_cpu_wall") << "late rank " << late;
    EXPECT_EQ(e.diagnosis.rank, late);
    EXPECT_EQ(e.diagnosis.surfaces_group, bwd);
    EXPECT_EQ(e.diagnosis.rank_basis, "own_work_excess");
    const Evidence c = evaluate(faulty);
    EXPECT_EQ(c.group_name(c.diagnosis.group), "optim.step_cpu_wall") << "late rank " << late;
    EXPECT_EQ(c.diagnosis.rank, late);
  }
}

TEST(Diagnosis, a_host_local_delay_under_the_drift_floor_of_its_collective_is_named_where_it_was_born) {
  // Rank 4's optimizer takes 4.5 ms more; the others wait that much in the next all-reduce. That
  // change of backward stays inside backward's drift floor (5 % of its 102 ms), so no stage's change
  // passes its floor and the rank is named by its lateness at the step's end — which it lost in the
  // optimizer, past that stage's floor: it is named there, surfacing in backward. It was named in
  // backward, where nothing of its own changed (sim --ranks 96 --scenario callback_host_tail
  // --delay-ms 20 --seed 7).
  const StageMatrix healthy = wait_window(6, 10, -1, 0.0), faulty = wait_window(6, 10, 4, 0.0045);
  Evidence e = evaluate(faulty);
  diagnose_against(e, make_reference(evaluate(healthy), "healthy"));
  ASSERT_TRUE(e.differential);
  const auto& d = *e.differential;
  const int bwd = *e.schema.group_index("model.backward_cpu_wall");
  ASSERT_NEAR(d.delta_advance_s[bwd], 0.0045, 1e-12);
  ASSERT_LT(d.delta_advance_s[bwd], d.noise_floor_s[bwd]);  // inside its floor
  ASSERT_GT(d.delta_exposed_s, d.exposed_noise_floor_s);
  EXPECT_EQ(e.diagnosis.rank, 4);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "optim.step_cpu_wall");
  EXPECT_EQ(e.diagnosis.surfaces_group, bwd);
  EXPECT_EQ(e.diagnosis.rank_basis, "own_work_excess");
  EXPECT_NEAR(e.diagnosis.excess_s, 0.0045, 1e-9);
}

TEST(Diagnosis, a_rank_that_lost_time_in_several_stages_stays_named_where_the_step_changed_most) {
  // Rank 2 loses 3.0 ms in data, 1.0 in forward and 3.7 in the optimizer (7.7 ms; the others wait
  // that much more in the all-reduce). The optimizer's change passes its floor but holds less than
  // half of the loss: no one stage is where it was born, and the rank is named by its arrival in
  // the stage that changed most, as a rank starved of CPU is.
  const std::array<double, 4> lost = {0.0030, 0.0010, 0.0, 0.0037};
  const double total = lost[0] + lost[1] + lost[3];
  const int late = 2;
  const StageMatrix healthy = wait_window(6, 10, -1, 0.0);
  StageMatrix faulty = wait_window(6, 10, -1, 0.0);
  for (int t = 0; t < 10; ++t)
    for (int r = 0; r < 6; ++r) {
      const double wait = 0.002 + (r == late ? 0.0 : total);
      std::vector<double> x = {0.010, 0.040, 0.100 + wait, 0.020};
      if (r == late)
        for (std::size_t s = 0; s < x.size(); ++s) x[s] += lost[s];
      faulty.set_record(t, r, x, std::nullopt);
      faulty.set_sync_wait(t, r, 2, wait);
    }
  Evidence e = evaluate(faulty);
  diagnose_against(e, make_reference(evaluate(healthy), "healthy"));
  const auto& d = *e.differential;
  const int bwd = *e.schema.group_index("model.backward_cpu_wall"), opt = *e.schema.group_index("optim.step_cpu_wall");
  for (std::size_t g = 0; g < d.delta_advance_s.size(); ++g) ASSERT_LT(d.delta_advance_s[g], d.noise_floor_s[g]);
  ASSERT_EQ(d.rank_deltas[opt][0].rank, late);
  ASSERT_GT(d.rank_deltas[opt][0].delta_s, d.rank_deltas[opt][0].floor_s);  // past its floor, under half
  EXPECT_EQ(e.diagnosis.rank, late);
  EXPECT_EQ(e.diagnosis.group, bwd);
  EXPECT_EQ(e.diagnosis.rank_basis, "arrival");
  EXPECT_NEAR(e.diagnosis.excess_s, total, 1e-9);
}

TEST(Diagnosis, one_rank_observed_falls_back_to_the_frontier_with_no_confidence) {
  const Evidence e = evaluate(window(1, -1, 0, 0.0));
  EXPECT_EQ(e.diagnosis.basis, Diagnosis::Basis::frontier);
  EXPECT_EQ(e.diagnosis.group, e.share_order[0]);
  EXPECT_EQ(e.diagnosis.confidence, 0.0);
  EXPECT_FALSE(e.diagnosis.significant());
}

TEST(Diagnosis, confidence_falls_with_coverage) {
  // The same straggler seen on 4 ranks of a world of 4, and of a world of 128.
  const StageMatrix dense = window(4, 1, 0, 0.080);
  StageMatrix sparse(dense.schema(), 128, {0, 1, 2, 3}, dense.first_step(), dense.steps());
  std::vector<double> d(static_cast<std::size_t>(dense.schema().explicit_count()));
  for (int t = 0; t < dense.steps(); ++t)
    for (int r = 0; r < 4; ++r) {
      for (int s = 0; s < dense.schema().explicit_count(); ++s) d[s] = dense.d(t, r, s);
      sparse.set_record(t, r, d, dense.wall(t, r));
    }
  const Evidence a = evaluate(dense), b = evaluate(sparse);
  ASSERT_EQ(a.diagnosis.rank, 1);
  ASSERT_EQ(b.diagnosis.rank, 1);
  EXPECT_DOUBLE_EQ(b.diagnosis.coverage, 4.0 / 128);
  EXPECT_LE(b.diagnosis.confidence, 4.0 / 128);
  EXPECT_NEAR(b.diagnosis.confidence, a.diagnosis.confidence * 4.0 / 128, 1e-12);
}

TEST(Diagnosis, two_equal_stragglers_halve_the_rank_support) {
  // Ranks 1 and 5 both 60 ms late in data: the stage is certain, the rank is a tie.
  sf::verify::WindowSpec spec;
  spec.ranks = 8;
  spec.steps = 20;
  spec.jitter_rel = 0.0;
  StageMatrix m = sf::verify::build_window(spec);
  std::vector<double> d(static_cast<std::size_t>(m.schema().explicit_count()));
  for (int t = 0; t < m.steps(); ++t)
    for (int r : {1, 5}) {
      for (int s = 0; s < m.schema().explicit_count(); ++s) d[s] = m.d(t, r, s);
      d[0] += 0.060;
      m.set_record(t, r, d, m.wall(t, r) + 0.060);
    }
  const Evidence e = evaluate(m);
  ASSERT_EQ(e.group_name(e.diagnosis.group), "data.next_wait");
  EXPECT_TRUE(e.diagnosis.rank == 1 || e.diagnosis.rank == 5);
  EXPECT_LE(e.diagnosis.confidence, 0.5 + 1e-12);
}

TEST(Diagnosis, streaming_gives_the_whole_window_diagnosis) {
  const StageMatrix m = window(8, 3, 2, 0.050, 4);
  StreamingAccumulator acc(m.schema(), m.world_size(), LabelConfig{});
  for (int t = 0; t < m.steps(); ++t) {
    StageMatrix one(m.schema(), m.world_size(), m.step_id(t), 1);
    std::vector<double> d(static_cast<std::size_t>(m.schema().explicit_count()));
    for (int r = 0; r < m.ranks(); ++r) {
      for (int s = 0; s < m.schema().explicit_count(); ++s) d[s] = m.d(t, r, s);
      one.set_record(0, r, d, m.wall(t, r));
    }
    acc.add_step(one);
  }
  const Evidence a = evaluate(m), b = acc.finish();
  EXPECT_EQ(a.diagnosis.group, b.diagnosis.group);
  EXPECT_EQ(a.diagnosis.rank, b.diagnosis.rank);
  EXPECT_DOUBLE_EQ(a.diagnosis.excess_s, b.diagnosis.excess_s);
  EXPECT_EQ(a.advance_sd_s, b.advance_sd_s);
  EXPECT_EQ(a.cohort_own_median_s, b.cohort_own_median_s);
}

namespace {
/// Two-pass sample SD, scaled by the largest |x| so the check itself cannot overflow.
double two_pass_sd(const std::vector<double>& xs) {
  double scale = 0;
  for (double x : xs) scale = std::max(scale, std::abs(x));
  if (xs.size() < 2 || scale == 0) return 0.0;
  double mean = 0;
  for (double x : xs) mean += x / scale;
  mean /= static_cast<double>(xs.size());
  double ss = 0;
  for (double x : xs) ss += (x / scale - mean) * (x / scale - mean);
  return scale * std::sqrt(ss / static_cast<double>(xs.size() - 1));
}
}  // namespace

TEST(RunningSpread, agrees_with_a_two_pass_sd_across_magnitudes) {
  std::uint64_t state = 12345;
  auto next = [&] {  // xorshift: a fixed, reproducible sequence
    state ^= state << 13; state ^= state >> 7; state ^= state << 17;
    return static_cast<double>(state % 1000000) / 1e6;
  };
  for (double magnitude : {1e-9, 1e-3, 1.0, 1e3, 1e150, 1e299}) {
    std::vector<double> xs;
    RunningSpread s;
    for (int i = 0; i < 500; ++i) {
      // Growing values force rescales mid-stream; a few zeros and negatives too.
      const double x = i % 97 == 0 ? 0.0 : (i % 13 == 0 ? -1 : 1) * magnitude * (1 + next()) * (1 + i / 100.0);
      xs.push_back(x);
      s.add(x);
    }
    const double want = two_pass_sd(xs);
    ASSERT_TRUE(std::isfinite(s.sd())) << magnitude;
    EXPECT_NEAR(s.sd(), want, 1e-9 * want) << magnitude;
    double sum = 0;
    for (double x : xs) sum += x / magnitude;
    const auto n = static_cast<double>(xs.size());
    EXPECT_NEAR(s.mean() / magnitude, sum / n, 1e-9 * std::abs(sum / n)) << magnitude;
  }
}

TEST(RunningSpread, values_up_to_the_window_limit_give_a_finite_sd) {
  // The stage_jsonl fuzzer's input: two steps of 6e149 s and 6e299 s; the plain Welford update
  // squares a 6e299 difference and printed advance_sd_s: null.
  RunningSpread s;
  s.add(6e149);
  s.add(6e299);
  ASSERT_TRUE(std::isfinite(s.sd()));
  EXPECT_NEAR(s.sd() / 6e299, std::sqrt(0.5), 1e-12);
  RunningSpread limit;
  limit.add(kMaxWindowSeconds);
  limit.add(0);
  limit.add(kMaxWindowSeconds);
  ASSERT_TRUE(std::isfinite(limit.sd()));
  EXPECT_NEAR(limit.sd() / kMaxWindowSeconds, std::sqrt(1.0 / 3.0), 1e-12);
  RunningSpread zeros, one;
  zeros.add(0);
  zeros.add(0);
  one.add(5);
  EXPECT_EQ(zeros.sd(), 0.0);
  EXPECT_EQ(one.sd(), 0.0);
  EXPECT_EQ(one.mean(), 5.0);
}

// ---- Standings, the difference in differences, several culprits (issue 38) ----

namespace {

StageMatrix spec_window(sf::verify::WindowSpec spec) { return sf::verify::build_window(spec); }

sf::verify::WindowSpec base_spec(int ranks, std::uint64_t seed, int steps = 20) {
  sf::verify::WindowSpec spec;
  spec.ranks = ranks;
  spec.steps = steps;
  spec.seed = seed;
  spec.jitter_rel = 0.02;
  spec.record_sync_wait = true;
  return spec;
}

}  // namespace

TEST(Standing, two_ranks_compare_with_each_other_not_with_a_median_that_includes_themselves) {
  // Rank 1 sleeps 40 ms more in forward every step; with two ranks a median of both would call it
  // 20 ms, and a robust spread over two ranks is half their gap: nothing would pass.
  auto spec = base_spec(2, 4);
  spec.slow_rank = 1;
  spec.slow_stage = 1;
  spec.delay_s = 0.040;
  const Evidence e = evaluate(spec_window(spec));
  ASSERT_EQ(e.standing.size(), 7u);  // six groups and the whole step
  const auto& fwd = e.standing[1];
  ASSERT_EQ(fwd.ranks.size(), 2u);
  EXPECT_EQ(fwd.ranks[0].rank, 1);
  EXPECT_NEAR(fwd.ranks[0].mean_s, 0.040, 0.004);
  EXPECT_NEAR(fwd.ranks[1].mean_s, -fwd.ranks[0].mean_s, 1e-12);
  EXPECT_EQ(e.diagnosis.basis, Diagnosis::Basis::cohort);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "model.fwd_loss_cpu_wall");
  EXPECT_EQ(e.diagnosis.rank, 1);
  EXPECT_NEAR(e.diagnosis.excess_s, 0.040, 0.004);
  // The same job healthy: nothing stands out.
  spec.slow_rank = -1;
  EXPECT_FALSE(evaluate(spec_window(spec)).diagnosis.significant());
}

TEST(Standing, a_fault_that_starts_mid_run_at_two_ranks_is_named_against_the_first_window) {
  auto spec = base_spec(2, 5);
  const Reference first = make_reference(evaluate(spec_window(spec)), "the first window");
  spec.seed = 6;
  spec.slow_rank = 1;
  spec.slow_stage = 1;
  spec.delay_s = 0.040;
  Evidence later = evaluate(spec_window(spec));
  diagnose_against(later, first);
  EXPECT_EQ(later.diagnosis.basis, Diagnosis::Basis::differential);
  EXPECT_EQ(later.diagnosis.rank, 1);
  EXPECT_EQ(later.group_name(later.diagnosis.group), "model.fwd_loss_cpu_wall");
  ASSERT_FALSE(later.diagnosis.culprits.empty());
  EXPECT_EQ(later.diagnosis.culprits[0].rank, 1);
}

TEST(Differential, a_slowdown_of_every_rank_alike_is_common_and_names_no_rank) {
  auto spec = base_spec(16, 7);
  const Reference ref = make_reference(evaluate(spec_window(spec)), "healthy");
  spec.seed = 8;
  spec.slow_rank = 0;
  spec.slow_stage = 0;
  spec.delay_s = 0.060;
  for (int r = 1; r < 16; ++r) spec.also_slow.push_back(r);
  Evidence e = evaluate(spec_window(spec));
  diagnose_against(e, ref);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "data.next_wait");
  EXPECT_TRUE(e.diagnosis.common);
  EXPECT_EQ(e.diagnosis.rank, -1);
  EXPECT_TRUE(e.diagnosis.culprits.empty());
  EXPECT_EQ(e.diagnosis.rank_basis, "common");
}

TEST(Differential, every_faulty_rank_is_a_culprit) {
  auto spec = base_spec(64, 9);
  const Reference ref = make_reference(evaluate(spec_window(spec)), "healthy");
  spec.seed = 10;
  spec.slow_rank = 11;
  spec.also_slow = {40};
  spec.slow_stage = 0;
  spec.delay_s = 0.060;
  Evidence e = evaluate(spec_window(spec));
  diagnose_against(e, ref);
  ASSERT_EQ(e.diagnosis.culprits.size(), 2u);
  std::vector<int> named = {e.diagnosis.culprits[0].rank, e.diagnosis.culprits[1].rank};
  std::sort(named.begin(), named.end());
  EXPECT_EQ(named, (std::vector<int>{11, 40}));
  EXPECT_EQ(e.diagnosis.culprits[0].rank, e.diagnosis.rank);  // the named rank first
  for (const auto& c : e.diagnosis.culprits) {
    EXPECT_EQ(e.group_name(c.group), "data.next_wait");
    EXPECT_NEAR(c.excess_s, 0.060, 0.006);
    EXPECT_GT(c.excess_s, c.floor_s);
  }
  EXPECT_FALSE(e.diagnosis.common);
}

TEST(Differential, a_rank_slowed_in_every_stage_is_named_by_its_arrival) {
  // Rank 3 runs every stage 25 % slower (starved of CPU): no single stage's change is half of the
  // step's, but it reaches the collective late by the sum, and the others wait for it there.
  auto spec = base_spec(8, 11);
  const Reference ref = make_reference(evaluate(spec_window(spec)), "healthy");
  spec.seed = 12;
  spec.slow_rank = 3;
  spec.slow_scale = 1.25;
  Evidence e = evaluate(spec_window(spec));
  diagnose_against(e, ref);
  ASSERT_TRUE(e.diagnosis.significant());
  EXPECT_EQ(e.diagnosis.rank, 3);
  ASSERT_FALSE(e.diagnosis.culprits.empty());
  const auto& c = e.diagnosis.culprits[0];
  EXPECT_EQ(c.rank, 3);
  // Its arrival is the sum of its stages' changes: 25 % of its 193 ms of own work.
  EXPECT_NEAR(c.arrival_s, 0.25 * 0.193, 0.01);
  double sum = 0;
  for (double x : c.by_group_s) sum += x;
  EXPECT_NEAR(sum, c.arrival_s, 0.003);
  EXPECT_EQ(e.diagnosis.culprits.size(), 1u);
}

TEST(Differential, a_drift_of_the_whole_machine_cancels_in_the_difference_in_differences) {
  // Every rank 12 % slower in every stage (a busy machine): the step changed, no rank did against
  // its peers. Without standings the labeler's frontier leader would have been named.
  auto spec = base_spec(8, 13);
  const Reference ref = make_reference(evaluate(spec_window(spec)), "healthy");
  spec.seed = 14;
  spec.base_s = {0.012 * 1.12, 0.045 * 1.12, 0.110 * 1.12, 0.006 * 1.12, 0.020 * 1.12};
  Evidence e = evaluate(spec_window(spec));
  diagnose_against(e, ref);
  ASSERT_TRUE(e.diagnosis.significant());
  EXPECT_TRUE(e.diagnosis.common);
  EXPECT_EQ(e.diagnosis.rank, -1);
}

TEST(Differential, the_window_step_count_enters_the_standard_error) {
  // floor = z · sd · sqrt(1/N_ref + 1/N): with N = N_ref the window's own term doubles the variance.
  StageSchema schema({"data.next_wait", "model.backward_cpu_wall"}, false);
  auto make = [&](int steps, double wobble) {
    StageMatrix m(schema, 4, 0, steps);
    for (int t = 0; t < steps; ++t)
      for (int r = 0; r < 4; ++r) m.set_record(t, r, std::vector<double>{0.010, 0.100 + (t % 2 ? wobble : -wobble)}, std::nullopt);
    return m;
  };
  const Reference ref = make_reference(evaluate(make(8, 0.004)), "ref");
  const Evidence e = evaluate(make(8, 0.004));
  DiagnosisConfig cfg;
  cfg.min_effect = 0;
  cfg.drift = 0;
  const auto d = compare(e, ref, cfg);
  const double sd = ref.advance_robust_sd_s[1];
  ASSERT_GT(sd, 0.0);
  EXPECT_NEAR(d.noise_floor_s[1], cfg.z * sd * std::sqrt(1.0 / 8 + 1.0 / 8), 1e-12);
}

TEST(Differential, a_noisy_reference_says_how_many_steps_would_judge_three_percent) {
  // Six reference steps whose exposed step swings by ±15 %: the floor is far above 3 % of the step.
  StageSchema schema({"data.next_wait", "model.backward_cpu_wall"}, false);
  auto make = [&](int steps, double swing) {
    StageMatrix m(schema, 4, 0, steps);
    for (int t = 0; t < steps; ++t)
      for (int r = 0; r < 4; ++r) m.set_record(t, r, std::vector<double>{0.010, 0.190 * (1 + swing * std::sin(1.7 * t))}, std::nullopt);
    return m;
  };
  const Reference ref = make_reference(evaluate(make(6, 0.15)), "ref");
  const Evidence e = evaluate(make(200, 0.15));
  const DiagnosisConfig cfg;
  const auto d = compare(e, ref, cfg);
  ASSERT_GT(d.exposed_noise_floor_s, 0.03 * ref.exposed_mean_s);
  ASSERT_GT(d.needed_reference_steps, ref.steps);
  // With that many reference steps the floor is within 3 % of the step, and one fewer is not.
  const double sd = ref.exposed_robust_sd_s;
  const int k = d.needed_reference_steps;
  EXPECT_LE(cfg.z * sd * std::sqrt(1.0 / k + 1.0 / e.steps), 0.03 * ref.exposed_mean_s * (1 + 1e-12));
  EXPECT_GT(cfg.z * sd * std::sqrt(1.0 / (k - 1) + 1.0 / e.steps), 0.03 * ref.exposed_mean_s);
  // A window too short for any reference: −1.
  EXPECT_EQ(compare(evaluate(make(2, 0.15)), ref, cfg).needed_reference_steps, -1);
}


TEST(Differential, a_rank_slowed_inside_its_collectives_is_named_by_its_cpu_wait) {
  // Every rank's backward 20 ms longer (the collective waits for one rank that progresses it
  // slowly: throttled), arrivals unchanged. The stages alone say "common"; rank 5's threads
  // waiting 40 ms a step longer for a CPU say who.
  auto spec = base_spec(8, 15);
  auto with_cpu_wait = [](StageMatrix m, int slow, double extra) {
    for (int t = 0; t < m.steps(); ++t)
      for (int r = 0; r < m.ranks(); ++r) m.set_cpu_wait(t, r, 0.002 + (r == slow ? extra : 0.0));
    return m;
  };
  const Reference ref = make_reference(evaluate(with_cpu_wait(spec_window(spec), -1, 0)), "healthy");
  spec.seed = 16;
  spec.base_s[2] += 0.020;
  Evidence plain = evaluate(spec_window(spec));
  diagnose_against(plain, make_reference(evaluate(spec_window(base_spec(8, 15))), "healthy"));
  EXPECT_TRUE(plain.diagnosis.common);
  Evidence e = evaluate(with_cpu_wait(spec_window(spec), 5, 0.040));
  diagnose_against(e, ref);
  ASSERT_TRUE(e.diagnosis.significant());
  EXPECT_FALSE(e.diagnosis.common);
  EXPECT_EQ(e.diagnosis.rank, 5);
  EXPECT_EQ(e.diagnosis.rank_basis, "cpu_wait");
  ASSERT_FALSE(e.diagnosis.culprits.empty());
  EXPECT_NEAR(e.diagnosis.culprits[0].cpu_wait_s, 0.040, 1e-6);
}

TEST(Differential, a_step_change_spread_over_every_stage_names_the_rank_by_its_arrival) {
  // Four 20 ms stages; rank 2 1.2 ms slower in each: every stage's change (1.2 ms) is under its
  // floor (2 % of the 80 ms step), the step's (4.8 ms) is not, and rank 2 arrives late by all of it.
  const StageSchema schema({"a", "b", "c", "d"}, false);
  auto make = [&](int slow, std::uint64_t seed) {
    sf::verify::SplitMix64 rng(seed);
    StageMatrix m(schema, 8, 0, 40);
    for (int t = 0; t < 40; ++t)
      for (int r = 0; r < 8; ++r) {
        std::vector<double> d(4);
        for (auto& x : d) x = 0.020 * rng.uniform(0.999, 1.001) + (r == slow ? 0.0012 : 0.0);
        m.set_record(t, r, d, std::nullopt);
      }
    return m;
  };
  const Reference ref = make_reference(evaluate(make(-1, 19)), "healthy");
  Evidence e = evaluate(make(2, 20));
  diagnose_against(e, ref);
  const auto& d = *e.differential;
  int past = 0;
  for (std::size_t g = 0; g < d.delta_advance_s.size(); ++g) past += d.delta_advance_s[g] > d.noise_floor_s[g];
  ASSERT_EQ(past, 0) << "a stage passed its floor: the case is not the one this test is about";
  ASSERT_GT(d.delta_exposed_s, d.exposed_noise_floor_s);
  EXPECT_EQ(e.diagnosis.rank, 2);
  EXPECT_EQ(e.diagnosis.rank_basis, "arrival");
  EXPECT_NEAR(e.diagnosis.excess_s, 0.0048, 0.0005);
}

TEST(Differential, a_rank_stopped_now_and_then_is_named_by_its_erratic_steps) {
  // Rank 3's forward is 30 ms shorter and 30 ms longer on alternate steps: its mean is unchanged,
  // the others wait for it every other step (the step grows 15 ms on average), and only the
  // scatter of its own steps says who.
  const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"}, false);
  auto make = [&](int erratic, std::uint64_t seed) {
    sf::verify::SplitMix64 rng(seed);
    StageMatrix m(schema, 8, 0, 40);
    for (int t = 0; t < 40; ++t) {
      std::vector<double> fwd(8);
      double slowest = 0;
      for (int r = 0; r < 8; ++r) {
        fwd[r] = 0.045 * rng.uniform(0.995, 1.005) + (r == erratic ? (t % 2 ? 0.030 : -0.030) : 0.0);
        slowest = std::max(slowest, fwd[r]);
      }
      for (int r = 0; r < 8; ++r) {
        const double wait = slowest - fwd[r];
        m.set_record(t, r, std::vector<double>{0.012, fwd[r], 0.110 + wait}, std::nullopt);
        m.set_sync_wait(t, r, 2, wait);
      }
    }
    return m;
  };
  const Reference ref = make_reference(evaluate(make(-1, 21)), "healthy");
  Evidence e = evaluate(make(3, 22));
  diagnose_against(e, ref);
  ASSERT_GT(e.differential->delta_exposed_s, 2 * e.differential->exposed_noise_floor_s);
  EXPECT_EQ(e.diagnosis.rank, 3);
  EXPECT_EQ(e.diagnosis.rank_basis, "erratic");
  ASSERT_FALSE(e.diagnosis.culprits.empty());
  EXPECT_EQ(e.diagnosis.culprits[0].rank, 3);
  // Its own mean did not move: no mean change named it.
  for (const auto& x : e.differential->arrival_deltas) {
    if (x.rank == 3) {
      EXPECT_LT(x.delta_s, x.floor_s);
    }
  }
}

TEST(Differential, a_rank_slower_in_the_reference_too_is_no_culprit) {
  // Rank 4 does 30 ms more data work in the reference and in the window (a rank that always loads
  // more): its standing is high on both sides, its change is nothing.
  auto spec = base_spec(8, 24);
  spec.slow_rank = 4;
  spec.slow_stage = 0;
  spec.delay_s = 0.030;
  const Reference ref = make_reference(evaluate(spec_window(spec)), "healthy");
  spec.seed = 25;
  Evidence e = evaluate(spec_window(spec));
  diagnose_against(e, ref);
  EXPECT_FALSE(e.diagnosis.significant());
  EXPECT_TRUE(e.diagnosis.culprits.empty());
  ASSERT_FALSE(e.standing.empty());
  EXPECT_EQ(e.standing[0].ranks[0].rank, 4);  // it does stand out, in level
  EXPECT_GT(e.standing[0].ranks[0].mean_s, 0.025);
  for (const auto& x : e.differential->rank_deltas[0]) EXPECT_LT(x.delta_s, x.floor_s);
}

namespace {

/// Eight ranks, data / forward / backward (with its wait measured), `steps` steps; rank 3's data
/// stage gets `extra(t)` on step t (the others wait for it in backward).
StageMatrix alternating(int steps, std::uint64_t seed, const std::function<double(int)>& extra) {
  const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"}, false);
  sf::verify::SplitMix64 rng(seed);
  StageMatrix m(schema, 8, 0, steps);
  for (int t = 0; t < steps; ++t) {
    std::vector<double> data(8);
    double slowest = 0;
    for (int r = 0; r < 8; ++r) {
      data[r] = 0.012 * rng.uniform(0.99, 1.01) + (r == 3 ? extra(t) : 0.0);
      slowest = std::max(slowest, data[r]);
    }
    for (int r = 0; r < 8; ++r) {
      const double wait = slowest - data[r];
      m.set_record(t, r, std::vector<double>{data[r], 0.045, 0.110 + wait}, std::nullopt);
      m.set_sync_wait(t, r, 2, wait);
    }
  }
  return m;
}

}  // namespace

TEST(Differential, a_rank_whose_fault_also_scatters_its_steps_is_judged_by_the_reference_spread) {
  // Rank 3 loses 24 ms on every other step (mean +12 ms, its own steps now scatter by 12 ms). Under
  // the null its window is its reference's process: the reference's small spread is the noise, and
  // the +12 ms is named. Its own window spread would have hidden it behind a 6-step reference.
  const Reference ref = make_reference(evaluate(alternating(6, 26, [](int) { return 0.0; })), "six healthy steps");
  Evidence e = evaluate(alternating(40, 27, [](int t) { return t % 2 ? 0.024 : 0.0; }));
  diagnose_against(e, ref);
  EXPECT_EQ(e.diagnosis.rank, 3);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "data.next_wait");
  EXPECT_EQ(e.diagnosis.rank_basis, "own_work_excess");  // by its mean, not only by its scatter
}

namespace {

/// `ranks` ranks, data / forward / backward (its wait measured), `steps` steps: rank r's data stage
/// takes 12 ms × tier(r) × (1 ± 1 %), plus extra(r, t) on step t (the others wait for the latest in
/// backward). The same seed draws the same noise: a model's healthy twin shares its draws.
StageMatrix cohort_window(int ranks, int steps, std::uint64_t seed, const std::function<double(int)>& tier,
                          const std::function<double(int, int)>& extra) {
  const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"}, false);
  sf::verify::SplitMix64 rng(seed);
  StageMatrix m(schema, ranks, 0, steps);
  for (int t = 0; t < steps; ++t) {
    std::vector<double> data(static_cast<std::size_t>(ranks));
    double slowest = 0;
    for (int r = 0; r < ranks; ++r) {
      data[r] = 0.012 * tier(r) * rng.uniform(0.99, 1.01) + extra(r, t);
      slowest = std::max(slowest, data[r]);
    }
    for (int r = 0; r < ranks; ++r) {
      const double wait = slowest - data[r];
      m.set_record(t, r, std::vector<double>{data[r], 0.045, 0.110 + wait}, std::nullopt);
      m.set_sync_wait(t, r, 2, wait);
    }
  }
  return m;
}

bool listed(const Standing& st, int rank) {
  return std::any_of(st.ranks.begin(), st.ranks.end(), [&](const RankStanding& x) { return x.rank == rank; });
}

}  // namespace

TEST(Differential, a_rank_the_reference_did_not_list_is_judged_by_the_references_typical_spread) {
  // 80 ranks: the lists hold the 16 largest standings, and rank 50 is not among the reference's.
  // Its fault comes and goes (60 ms on 10 of 40 steps: +15 ms a step, its own steps scattered by
  // 26 ms). Under the null its window is the reference's process, whose spread is the 1 % noise:
  // the window's own spread put its floor above the change, and the answer was a common slowdown
  // (sim --ranks 96 --scenario bwd_compute --onset 30 --offset 45 --seed 7).
  const int R = 80, late = 50;
  const auto flat = [](int) { return 1.0; };
  const Evidence healthy = evaluate(cohort_window(R, 40, 31, flat, [](int, int) { return 0.0; }));
  ASSERT_FALSE(healthy.standing[0].complete);
  ASSERT_FALSE(listed(healthy.standing[0], late));
  const Reference ref = make_reference(healthy, "healthy");
  Evidence e =
      evaluate(cohort_window(R, 40, 32, flat, [&](int r, int t) { return r == late && t >= 10 && t < 20 ? 0.060 : 0.0; }));
  diagnose_against(e, ref);
  EXPECT_EQ(e.diagnosis.rank, late);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "data.next_wait");
  EXPECT_EQ(e.diagnosis.rank_basis, "own_work_excess");
  const auto& top = e.differential->rank_deltas[0][0];
  EXPECT_EQ(top.rank, late);
  EXPECT_NEAR(top.delta_s, 0.015, 0.001);
  EXPECT_LT(top.floor_s, 0.5 * top.delta_s);
}

TEST(Differential, ranks_in_two_tiers_alike_in_both_runs_do_not_hide_a_change) {
  // 80 ranks in two tiers (the odd ones 50 % slower in data, in the reference and in the window
  // alike: the same draws, as a model's healthy twin has). The lists hold the 16 largest
  // standings; the ranks both list moved by their noise alone, and that is the spread of changes.
  // The ranks' scatter of levels (half of them 6 ms above the other half) is not: as the floor of
  // rank 51's +12 ms it named a common slowdown (sim --ranks 96 --heterogeneity two-tier --seed 7).
  const int R = 80, late = 51;
  const auto tiers = [](int r) { return r % 2 ? 1.5 : 1.0; };
  const Reference ref =
      make_reference(evaluate(cohort_window(R, 40, 33, tiers, [](int, int) { return 0.0; })), "healthy twin");
  Evidence e = evaluate(cohort_window(R, 40, 33, tiers, [&](int r, int) { return r == late ? 0.012 : 0.0; }));
  diagnose_against(e, ref);
  ASSERT_FALSE(e.standing[0].complete);
  EXPECT_GT(e.standing[0].spread_s, 0.004);  // the levels' scatter
  EXPECT_EQ(e.diagnosis.rank, late);
  EXPECT_EQ(e.group_name(e.diagnosis.group), "data.next_wait");
  EXPECT_FALSE(e.diagnosis.common);
  const auto& top = e.differential->rank_deltas[0][0];
  EXPECT_EQ(top.rank, late);
  EXPECT_LT(top.floor_s, 0.5 * top.delta_s);
}

TEST(Differential, an_erratic_rank_is_named_only_for_a_step_change_of_twice_its_floor) {
  // Rank 3's forward swings ±10 ms (its mean unchanged): the step grows 5 ms on average, past its
  // floor but not twice it. The attribution by scatter is indirect: the answer is a common slowdown.
  const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"}, false);
  auto make = [&](double swing, std::uint64_t seed) {
    sf::verify::SplitMix64 rng(seed);
    StageMatrix m(schema, 8, 0, 40);
    for (int t = 0; t < 40; ++t) {
      std::vector<double> fwd(8);
      double slowest = 0;
      for (int r = 0; r < 8; ++r) {
        fwd[r] = 0.045 * rng.uniform(0.999, 1.001) + (r == 3 ? (t % 2 ? swing : -swing) : 0.0);
        slowest = std::max(slowest, fwd[r]);
      }
      for (int r = 0; r < 8; ++r) {
        const double wait = slowest - fwd[r];
        m.set_record(t, r, std::vector<double>{0.012, fwd[r], 0.110 + wait}, std::nullopt);
        m.set_sync_wait(t, r, 2, wait);
      }
    }
    return m;
  };
  const Reference ref = make_reference(evaluate(make(0.0, 28)), "healthy");
  Evidence e = evaluate(make(0.010, 29));
  diagnose_against(e, ref);
  const auto& d = *e.differential;
  ASSERT_GT(d.delta_exposed_s, d.exposed_noise_floor_s);
  ASSERT_LT(d.delta_exposed_s, 2 * d.exposed_noise_floor_s);
  ASSERT_FALSE(d.erratic.empty());
  EXPECT_EQ(d.erratic[0].rank, 3);
  EXPECT_GT(d.erratic[0].delta_s, d.erratic[0].floor_s);
  EXPECT_NE(e.diagnosis.rank_basis, "erratic");
  EXPECT_EQ(e.diagnosis.rank, -1);
}

// --- What fixing it would buy (docs/diagnosis.md) ---------------------------------------------

TEST(WhatIf, the_late_rank_fixed_gives_the_step_its_peers_set_exactly) {
  // Rank 1 arrives 50 ms late at the all-reduce; the others wait there for it. Arrivals: 220 ms
  // for rank 1, 170 ms for the others; every step ends 2 ms after the last arrival (222 ms).
  // Fixed, rank 1 arrives with its peers' median: 170 + 2 = 172 ms, which is also T_ideal.
  const Evidence e = evaluate(wait_window(5, 12, 1, 0.050));
  ASSERT_EQ(e.diagnosis.rank, 1);
  // (Waits are kept as floats: exact to ~1e-8 s.)
  const auto& w = e.whatif;
  ASSERT_TRUE(w.available) << w.why_not;
  EXPECT_EQ(w.steps, 12);
  EXPECT_NEAR(w.actual_s, 0.222, 1e-6);
  ASSERT_EQ(w.fixes.size(), 1u);
  EXPECT_EQ(w.fixes[0].rank, 1);
  EXPECT_NEAR(w.fixes[0].healed_s, 0.172, 1e-6);
  EXPECT_NEAR(w.fixes[0].gain_s, 0.050, 1e-6);
  EXPECT_NEAR(w.all_healed_s, 0.172, 1e-6);
  EXPECT_NEAR(w.ideal_s, 0.172, 1e-6);
  EXPECT_NEAR(w.slowdown, 0.222 / 0.172, 1e-6);
  EXPECT_NEAR(w.wasted, 1 - 0.172 / 0.222, 1e-6);
  EXPECT_TRUE(w.gains());
}

TEST(WhatIf, the_healed_step_matches_the_same_run_without_the_fault) {
  // The model's twin: the same seed (jitter, per-rank speeds) with and without 60 ms in rank 5's
  // data wait; fixing rank 5 must give the twin's step, not the reference's (another seed).
  for (const int stage : {0, 2}) {
    auto spec = base_spec(16, 21, 30);
    const Reference ref = make_reference(evaluate(spec_window(spec)), "healthy");
    spec.seed = 22;
    const Evidence twin = evaluate(spec_window(spec));
    spec.slow_rank = 5;
    spec.slow_stage = stage;
    spec.delay_s = 0.060;
    Evidence e = evaluate(spec_window(spec));
    diagnose_against(e, ref);
    ASSERT_EQ(e.diagnosis.rank, 5) << stage;
    const auto& w = e.whatif;
    ASSERT_TRUE(w.available) << w.why_not;
    const double sham = twin.exposed_makespan_s / twin.steps;
    EXPECT_GT(w.actual_s - sham, 0.050) << stage;
    EXPECT_NEAR(w.all_healed_s, sham, 0.02 * sham) << stage;
    EXPECT_TRUE(w.gains());
  }
}

TEST(WhatIf, a_starved_rank_fixed_gives_back_the_time_it_slowed_the_collective_by_too) {
  // Rank 2's threads wait for a CPU (a cgroup quota, busy neighbours): its backward compute takes
  // 40 ms longer and, as slow inside the all-reduce as outside, it makes the collective run 60 ms
  // past the last arrival instead of 2 ms. Fixed, its arrival goes back to its peers' (150 ms) and
  // the collective to the reference's cost: 150 + 2 + 20 = 172 ms, the healthy step. Healing its
  // arrival alone left the 60 ms collective: 230 ms (sf-testbed run --straggler cgroup at two
  // ranks predicted 275 ms/step where the healthy step was 208).
  const auto make = [](double late_s, double collective_s, int steps, bool rank1_too = false) {
    const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"}, false);
    StageMatrix m(schema, 5, 0, steps);
    for (int t = 0; t < steps; ++t)
      for (int r = 0; r < 5; ++r) {
        const bool slow = r == 2 || (rank1_too && r == 1);
        const double wait = collective_s + (slow ? 0.0 : late_s);
        m.set_record(t, r, std::vector<double>{0.010, 0.040, 0.100 + late_s + collective_s, 0.020}, std::nullopt);
        m.set_sync_wait(t, r, 2, wait);
        m.set_cpu_wait(t, r, slow && late_s > 0 ? 0.200 + 0.001 * (t % 3) : 0.001 + 0.0001 * ((t + r) % 3));
      }
    return m;
  };
  const Evidence healthy = evaluate(make(0.0, 0.002, 12));
  const Reference ref = make_reference(healthy, "healthy");
  const int bwd = *healthy.schema.group_index("model.backward_cpu_wall");
  ASSERT_EQ(ref.collective_s.size(), 4u);
  ASSERT_TRUE(ref.collective_s[static_cast<std::size_t>(bwd)].has_value());
  EXPECT_NEAR(*ref.collective_s[static_cast<std::size_t>(bwd)], 0.002, 1e-6);
  Evidence e = evaluate(make(0.040, 0.060, 12));
  diagnose_against(e, ref);
  ASSERT_EQ(e.diagnosis.rank, 2);
  const auto& w = e.whatif;
  ASSERT_TRUE(w.available) << w.why_not;
  EXPECT_NEAR(w.actual_s, 0.270, 1e-6);
  ASSERT_EQ(w.fixes.size(), 1u);
  EXPECT_NEAR(w.fixes[0].healed_s, 0.172, 1e-6);
  EXPECT_NEAR(w.all_healed_s, 0.172, 1e-6);
  EXPECT_NEAR(w.ideal_s, 0.172, 1e-6);  // as if no rank straggled: the collective at its own cost
  // Without it, the ring of 4 runs at its healthy cost scaled by 2(n-1)/n from 5 to 4 ranks
  // (1.5 / 1.6): 150 + 2 x 0.9375 + 20 ms. Rebalanced, it is still in the ring and still slows it.
  EXPECT_NEAR(w.fixes[0].excluded_s, 0.150 + 0.002 * 0.9375 + 0.020, 1e-6);
  EXPECT_GT(w.fixes[0].rebalanced_s, 0.150 + 0.060);
  // A rank late by its own work (80 ms), not starved (no CPU wait), leaves a slow collective alone:
  // its fix buys its lateness only, 310 -> 150 + 60 + 20 = 230 ms.
  const auto slow_link = [&](int steps) {
    StageMatrix m = make(0.080, 0.060, steps);
    for (int t = 0; t < steps; ++t)
      for (int r = 0; r < 5; ++r) m.set_cpu_wait(t, r, 0.001 + 0.0001 * ((t + r) % 3));
    return m;
  };
  Evidence late = evaluate(slow_link(12));
  diagnose_against(late, ref);
  ASSERT_EQ(late.diagnosis.rank, 2);
  ASSERT_EQ(late.whatif.fixes.size(), 1u);
  EXPECT_NEAR(late.whatif.fixes[0].healed_s, 0.230, 1e-6);
  // Two starved ranks (1 and 2): fixing one leaves the other late and slowing the ring (the step
  // stays 150 + 40 + 60 + 20 ms); fixing both gives the healthy step.
  Evidence two = evaluate(make(0.040, 0.060, 12, true));
  diagnose_against(two, ref);
  ASSERT_EQ(two.whatif.fixes.size(), 2u);
  for (const auto& f : two.whatif.fixes) EXPECT_NEAR(f.healed_s, 0.270, 1e-6) << "rank " << f.rank;
  EXPECT_NEAR(two.whatif.all_healed_s, 0.172, 1e-6);
  // Against the cohort (no reference, no healthy collective cost): its arrival alone.
  const Evidence cohort = evaluate(make(0.040, 0.060, 12));
  for (const auto& f : cohort.whatif.fixes) EXPECT_NEAR(f.healed_s, 0.230, 1e-6);
}

TEST(WhatIf, a_host_local_delay_fixed_gives_back_what_the_others_waited_not_the_whole_delay) {
  // Rank 4's own backward is 10 ms shorter than its peers': healthy, it waits 10 ms longer in the
  // all-reduce (its slack). Its optimizer then takes 30 ms more: it starts the next step 30 ms late,
  // arrives 20 ms after its peers, and they wait 20 ms more — the step grows by 20 ms, not 30.
  // Healing its optimizer's arrival took all 30 off (162 ms, 10 below the healthy step); the fix
  // is the all-reduce's wait back to its healthy cost: 172 ms (sim --scenario optim_host_local
  // predicted up to a third faster than the healthy reference).
  const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"}, false);
  const int late = 4;
  const auto make = [&](double delay_s) {
    StageMatrix m(schema, 5, 0, 12);
    const double lateness = std::max(0.0, delay_s - 0.010);  // its arrival past its peers'
    for (int t = 0; t < 12; ++t)
      for (int r = 0; r < 5; ++r) {
        const double own = r == late ? 0.090 : 0.100;
        const double wait = r == late ? 0.002 + 0.010 - std::min(delay_s, 0.010) : 0.002 + lateness;
        m.set_record(t, r, std::vector<double>{0.010, 0.040, own + wait, 0.020 + (r == late ? delay_s : 0.0)}, std::nullopt);
        m.set_sync_wait(t, r, 2, wait);
      }
    return m;
  };
  const Evidence healthy = evaluate(make(0.0));
  ASSERT_NEAR(healthy.exposed_makespan_s / healthy.steps, 0.172, 1e-9);
  Evidence e = evaluate(make(0.030));
  diagnose_against(e, make_reference(healthy, "healthy"));
  ASSERT_EQ(e.diagnosis.rank, late);
  ASSERT_EQ(e.group_name(e.diagnosis.group), "optim.step_cpu_wall");
  const auto& w = e.whatif;
  ASSERT_TRUE(w.available) << w.why_not;
  EXPECT_NEAR(w.actual_s, 0.192, 1e-6);
  ASSERT_EQ(w.fixes.size(), 1u);
  EXPECT_NEAR(w.fixes[0].healed_s, 0.172, 1e-6);
  EXPECT_NEAR(w.fixes[0].gain_s, 0.020, 1e-6);
  EXPECT_NEAR(w.all_healed_s, 0.172, 1e-6);
  // Without a reference the healthy collective is unknown: the arrival is healed, as before.
  Evidence alone = evaluate(make(0.030));
  ASSERT_EQ(alone.diagnosis.rank, late);
  ASSERT_EQ(alone.whatif.fixes.size(), 1u);
  EXPECT_NEAR(alone.whatif.fixes[0].healed_s, 0.162, 1e-6);
}

TEST(WhatIf, a_healthy_window_has_nothing_to_gain) {
  auto spec = base_spec(16, 23);
  const Reference ref = make_reference(evaluate(spec_window(spec)), "healthy");
  spec.seed = 24;
  Evidence e = evaluate(spec_window(spec));
  diagnose_against(e, ref);
  ASSERT_FALSE(e.diagnosis.significant());
  const auto& w = e.whatif;
  ASSERT_TRUE(w.available) << w.why_not;
  EXPECT_TRUE(w.fixes.empty());
  EXPECT_FALSE(w.gains());
  EXPECT_DOUBLE_EQ(w.all_healed_s, w.actual_s);
  EXPECT_GE(w.slowdown, 1.0);  // healthy jitter: the latest rank is behind the median every step
  EXPECT_LT(w.wasted, 0.1);
}

TEST(WhatIf, fixing_one_of_two_equal_stragglers_buys_little_and_fixing_both_buys_the_delay) {
  auto spec = base_spec(16, 25, 30);
  const Reference ref = make_reference(evaluate(spec_window(spec)), "healthy");
  spec.seed = 26;
  const Evidence twin = evaluate(spec_window(spec));
  spec.slow_rank = 3;
  spec.also_slow = {12};
  spec.slow_stage = 0;
  spec.delay_s = 0.060;
  Evidence e = evaluate(spec_window(spec));
  diagnose_against(e, ref);
  const auto& w = e.whatif;
  ASSERT_EQ(w.fixes.size(), 2u);
  for (const auto& f : w.fixes) EXPECT_LT(f.gain_s, 0.25 * 0.060) << f.rank;  // the other still straggles
  const double sham = twin.exposed_makespan_s / twin.steps;
  EXPECT_NEAR(w.all_healed_s, sham, 0.02 * sham);
}

TEST(WhatIf, without_waits_measured_inside_the_collectives_it_says_why_not) {
  auto spec = base_spec(8, 27);
  spec.record_sync_wait = false;
  spec.slow_rank = 2;
  spec.delay_s = 0.060;
  const Evidence e = evaluate(spec_window(spec));
  EXPECT_FALSE(e.whatif.available);
  EXPECT_NE(e.whatif.why_not.find("no wait measured"), std::string::npos) << e.whatif.why_not;
  const Evidence one = evaluate(window(1, -1, 0, 0.0));
  EXPECT_FALSE(one.whatif.available);
  EXPECT_FALSE(one.whatif.why_not.empty());
}

TEST(Standing, without_a_reference_a_rank_must_lose_a_scheduler_time_slice_to_be_named) {
  // Two ranks on an 8 ms step; rank 1's data wait is `extra` longer every step and rank 0 waits for
  // it at the all-reduce. 1 ms is 12 % of the step but under a time slice (cohort_min_s, 2 ms): a
  // shared machine moves one rank's step against another's by that much (CI once named it).
  auto window_with = [](double extra) {
    const StageSchema schema({"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"}, false);
    StageMatrix m(schema, 2, 0, 20);
    for (int t = 0; t < 20; ++t)
      for (int r = 0; r < 2; ++r) {
        const double jitter = 1e-5 * ((t * 7 + r * 3) % 5);
        const double data = 0.001 + (r == 1 ? extra : 0.0) + jitter;
        const double wait = 0.0002 + (r == 1 ? 0.0 : extra);
        const std::vector<double> d = {data, 0.002, 0.004 + wait, 0.001};
        m.set_record(t, r, d, std::nullopt);
        m.set_sync_wait(t, r, 2, wait);
      }
    return evaluate(m);
  };
  const Evidence small = window_with(0.001);
  EXPECT_FALSE(small.diagnosis.significant()) << small.diagnosis.rank;
  EXPECT_DOUBLE_EQ(small.config.diagnosis.cohort_min_s, 0.002);
  const Evidence large = window_with(0.003);
  ASSERT_TRUE(large.diagnosis.significant());
  EXPECT_EQ(large.diagnosis.rank, 1);
  EXPECT_EQ(large.group_name(large.diagnosis.group), "data.next_wait");
}

TEST(WhatIf, exclusion_and_rebalance_follow_the_arrivals_and_the_ring) {
  // Arrivals at the all-reduce: 150 ms for the others, 200 ms for rank 1; 2 ms of collective past
  // the last; then 20 ms of optimizer. Five ranks.
  const Evidence e = evaluate(wait_window(5, 12, 1, 0.050, 0));  // rank 1 late in its data wait
  ASSERT_EQ(e.diagnosis.rank, 1);
  const auto& w = e.whatif;
  ASSERT_TRUE(w.available) << w.why_not;
  EXPECT_NEAR(w.actual_s, 0.222, 1e-6);
  ASSERT_EQ(w.fixes.size(), 1u);
  const auto& f = w.fixes[0];
  EXPECT_NEAR(f.healed_s, 0.172, 1e-6);
  // Without rank 1: the others' arrival, the ring's 2(n-1)/n from 5 ranks to 4 (x 0.9375), the optimizer.
  EXPECT_NEAR(f.excluded_s, 0.150 + 0.002 * (1.5 / 1.6) + 0.020, 1e-6);
  // Rebalanced: rank 1's share x and the others' (5 - x)/4 balance its 200 ms against their 150 ms
  // at x = 0.789; on the grid of 0.02, x = 0.78: max(0.78 * 0.200, 1.055 * 0.150) + 0.002 + 0.020.
  EXPECT_NEAR(f.rebalance_share, 0.78, 1e-9);
  EXPECT_NEAR(f.rebalanced_s, (5 - 0.78) / 4 * 0.150 + 0.002 + 0.020, 1e-6);
  // The optimizer is not batch work: a share past the gradient collective would have scaled it.
  EXPECT_GT(f.rebalanced_s, f.healed_s);
}
