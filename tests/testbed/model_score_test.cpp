// `sim` streams the model step by step: the evidence must be the whole-matrix path's, for every
// scenario family (sync-wait side evidence, synchronised callbacks, sampled forward events).
#include "sf/formats/formats.h"
#include "sim/detail.h"
#include "sf/testbed/testbed.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <iostream>
#include <limits>

namespace sf {
namespace {

sim::ModelConfig config(const std::string& scenario, int ranks, int steps, double event_q) {
  sim::ModelConfig mc;
  mc.fault.scenario = scenario;
  mc.ranks = ranks;
  mc.steps = steps;
  mc.fault.delay_ms = 150;
  mc.seed = 11;
  mc.event_q = event_q;
  return mc;
}

void expect_same(const sim::ModelConfig& mc) {
  const auto plan = sim::model_plan(mc);
  const frontier::LabelConfig label;
  const auto whole = testbed::score_model_whole(mc, plan, label);
  for (int threads : {1, 2}) {
    const auto streamed = testbed::score_model_streaming(mc, plan, label, threads);
    SCOPED_TRACE(mc.fault.scenario + ", threads " + std::to_string(threads));
    EXPECT_TRUE(streamed.streamed);
    // Bit for bit: the JSON packet prints every double with round-trip precision.
    EXPECT_EQ(formats::evidence_to_json(streamed.evidence).dump(), formats::evidence_to_json(whole.evidence).dump());
    EXPECT_EQ(verify::evidence_difference(streamed.evidence, whole.evidence, 0.0), "");
    EXPECT_EQ(streamed.makespan.wall_sum_s, whole.makespan.wall_sum_s);
    EXPECT_EQ(streamed.makespan.gap, whole.makespan.gap);
  }
}

TEST(ModelScore, streamed_evidence_equals_the_whole_matrix) {
  expect_same(config("data_tail", 300, 40, 0.0));
  expect_same(config("fwd_device", 257, 33, 0.25));         // sampled forward events on some steps only
  expect_same(config("callback_sync_tail", 64, 25, 0.0));  // a barrier in callbacks: two sync-wait stages
  expect_same(config("comm_delay", 1, 12, 0.5));            // a single rank
}

// sim's healthy reference is accounted, not labelled: what the verdict reads of it (steps, the
// exposed makespan, the median step, the advances per group) must be the full scorer's, bit for bit.
TEST(ModelScore, the_accounted_reference_is_the_labelled_one_where_the_verdict_reads_it) {
  for (auto mc : {config("none", 300, 40, 0.0), config("none", 64, 25, 0.25), config("none", 1, 12, 0.0),
                  config("none", 128, 1, 0.0)}) {
    mc.fault.delay_ms.reset();
    const auto plan = sim::model_plan(mc);
    const auto full = testbed::score_model_streaming(mc, plan, {}, 1);
    const auto acc = testbed::score_model_accounting(mc, plan);
    SCOPED_TRACE(std::to_string(mc.ranks) + " ranks x " + std::to_string(mc.steps) + " steps");
    EXPECT_EQ(acc.evidence.steps, full.evidence.steps);
    EXPECT_EQ(acc.evidence.exposed_makespan_s, full.evidence.exposed_makespan_s);
    EXPECT_EQ(acc.evidence.median_step_s, full.evidence.median_step_s);
    EXPECT_EQ(acc.evidence.advances_s, full.evidence.advances_s);
    EXPECT_EQ(testbed::advance_per_step(acc.evidence), testbed::advance_per_step(full.evidence));
    EXPECT_EQ(acc.makespan.wall_sum_s, full.makespan.wall_sum_s);
  }
}

/// The run without its fault, as sim's reference is made (testbed/simulate.cpp).
sim::ModelConfig healthy_of(const sim::ModelConfig& mc, const inject::FaultPlan& plan) {
  auto healthy = mc;
  healthy.fault.scenario = "none";
  healthy.fault.delay_ms.reset();
  healthy.sync_callbacks = mc.sync_callbacks || plan.scenario->sync_callbacks;
  return healthy;
}

// sim's reference past Evidence::kStandingMaxRanks ranks is the run's healthy twin, stepped in the
// run's own passes on the run's draws: the run must be what it is alone, the twin what
// score_model_accounting makes of the healthy config on its own, bit for bit.
TEST(ModelScore, a_twin_stepped_in_the_runs_passes_is_the_healthy_run_accounted_alone) {
  auto single = config("comm_delay", 97, 21, 0.0);
  single.sync_mode = sim::SyncMode::single;
  auto hetero = config("data_tail", 300, 30, 0.0);
  hetero.variation = {0.05, sim::Heterogeneity::lognormal, 0.2};
  for (const auto& mc : {config("data_tail", 300, 40, 0.0), config("callback_sync_tail", 64, 25, 0.25), single, hetero,
                         config("fwd_device", 1, 9, 0.5)}) {
    const auto plan = sim::model_plan(mc);
    const auto healthy = healthy_of(mc, plan);
    const auto healthy_plan = sim::model_plan(healthy);
    const auto alone = testbed::score_model_accounting(healthy, healthy_plan);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(mc.fault.scenario + ", " + std::to_string(mc.ranks) + " ranks, threads " + std::to_string(threads));
      const auto both = testbed::score_model_streaming_with_twin(mc, plan, {}, threads, healthy, healthy_plan);
      const auto run = testbed::score_model_streaming(mc, plan, {}, threads);
      EXPECT_EQ(formats::evidence_to_json(both.run.evidence).dump(), formats::evidence_to_json(run.evidence).dump());
      EXPECT_EQ(both.run.makespan.wall_sum_s, run.makespan.wall_sum_s);
      const auto& e = both.twin.evidence;
      EXPECT_EQ(e.steps, alone.evidence.steps);
      EXPECT_EQ(e.world_size, alone.evidence.world_size);
      EXPECT_EQ(e.exposed_makespan_s, alone.evidence.exposed_makespan_s);
      EXPECT_EQ(e.median_step_s, alone.evidence.median_step_s);
      EXPECT_EQ(e.advances_s, alone.evidence.advances_s);
      EXPECT_EQ(e.advance_sd_s, alone.evidence.advance_sd_s);
      EXPECT_EQ(e.exposed_sd_s, alone.evidence.exposed_sd_s);
      EXPECT_EQ(both.twin.makespan.wall_sum_s, alone.makespan.wall_sum_s);
      // and the fault shows: the twin is not the run
      EXPECT_NE(e.exposed_makespan_s, run.evidence.exposed_makespan_s);
    }
  }
}

TEST(ModelScore, a_twin_must_draw_the_runs_costs_and_join_before_the_first_step) {
  const auto mc = config("data_tail", 16, 3, 0.0);
  const auto plan = sim::model_plan(mc);
  for (auto change : {+[](sim::ModelConfig& h) { h.seed += 1; }, +[](sim::ModelConfig& h) { h.ranks += 1; },
                      +[](sim::ModelConfig& h) { h.costs.optim_ms *= 2; },
                      +[](sim::ModelConfig& h) { h.variation.jitter_sigma = 0.1; }}) {
    auto other = mc;
    change(other);
    sim::ModelStepper stepper(mc, plan);
    EXPECT_THROW(stepper.add_twin(other, sim::model_plan(other)), std::invalid_argument);
  }
  sim::ModelStepper stepper(mc, plan);
  EXPECT_THROW(static_cast<void>(stepper.twin_maxima()), std::logic_error);
  static_cast<void>(stepper.step_maxima());
  EXPECT_THROW(stepper.add_twin(mc, plan), std::logic_error);
}

/// Sets which build of the model's passes the ModelSteppers made in its scope run.
struct PassPathScope {
  explicit PassPathScope(sim::PassPath p) { sim::model_pass_path = p; }
  ~PassPathScope() { sim::model_pass_path = sim::PassPath::fastest; }
};

/// Cells of a and b (durations, walls, sync waits, forward events) that differ in any bit.
int cells_differing(const frontier::StageMatrix& a, const frontier::StageMatrix& b) {
  auto bits = [](double x) { return std::bit_cast<std::uint64_t>(x); };
  int n = 0;
  for (int t = 0; t < a.steps(); ++t)
    for (int r = 0; r < a.ranks(); ++r) {
      n += bits(a.wall(t, r)) != bits(b.wall(t, r));
      for (int s = 0; s < a.stages(); ++s) {
        n += bits(a.d(t, r, s)) != bits(b.d(t, r, s));
        if (a.has_sync_wait()) n += bits(a.sync_wait(t, r, s)) != bits(b.sync_wait(t, r, s));
      }
      if (a.has_fwd_events()) n += bits(a.fwd_event_s(t, r)) != bits(b.fwd_event_s(t, r));
    }
  return n;
}

// Where the processor has AVX-512 the model's passes run as a build of their own (eight ranks per
// instruction): its cells, side evidence and a twin's maxima must be the baseline build's, bit
// for bit, in every sync mode and with faults on some ranks of some blocks only.
TEST(ModelScore, the_wide_and_the_portable_builds_of_the_passes_make_the_same_bits) {
  if (!sim::wide_passes_available()) std::cout << "[ note ] no AVX-512 here: both runs are the portable build\n";
  auto single = config("comm_delay", 601, 17, 0.0);
  single.sync_mode = sim::SyncMode::single;
  auto many = config("data_tail", 700, 15, 0.5);
  many.fault.target_count = 9;
  many.variation = {0.05, sim::Heterogeneity::lognormal, 0.2};
  for (const auto& mc : {config("bwd_compute", 300, 20, 0.25), config("callback_sync_tail", 513, 12, 0.0), single, many}) {
    SCOPED_TRACE(mc.fault.scenario + ", " + std::to_string(mc.ranks) + " ranks");
    const auto plan = sim::model_plan(mc);
    const auto healthy = healthy_of(mc, plan);
    const auto healthy_plan = sim::model_plan(healthy);
    formats::Window w[2];
    testbed::ModelScorePair both[2];
    for (int i = 0; i < 2; ++i) {
      PassPathScope path(i == 0 ? sim::PassPath::portable : sim::PassPath::fastest);
      w[i] = sim::model_window(mc, plan);
      both[i] = testbed::score_model_streaming_with_twin(mc, plan, {}, 2, healthy, healthy_plan);
    }
    EXPECT_EQ(cells_differing(w[0].matrix, w[1].matrix), 0);
    EXPECT_EQ(formats::evidence_to_json(both[0].run.evidence).dump(), formats::evidence_to_json(both[1].run.evidence).dump());
    EXPECT_EQ(both[0].twin.evidence.advances_s, both[1].twin.evidence.advances_s);
    EXPECT_EQ(both[0].twin.evidence.exposed_makespan_s, both[1].twin.evidence.exposed_makespan_s);
    EXPECT_EQ(both[0].twin.evidence.median_step_s, both[1].twin.evidence.median_step_s);
    EXPECT_EQ(both[0].twin.makespan.wall_sum_s, both[1].twin.makespan.wall_sum_s);
  }
}

// The timeline takes every cost as time spent (the device is free by the next forward only so):
// a negative or non-finite cost is refused, by validate with a line and by the stepper itself.
TEST(ModelScore, a_cost_below_zero_or_not_finite_is_refused) {
  for (const double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    auto mc = config("data_tail", 8, 2, 0.0);
    mc.costs.optim_ms = bad;
    EXPECT_NE(sim::validate(mc).find("stage costs must be finite and >= 0"), std::string::npos);
    EXPECT_THROW(sim::ModelStepper(mc, sim::model_plan(mc)), std::invalid_argument);
  }
  EXPECT_EQ(sim::validate(config("data_tail", 8, 2, 0.0)), "");
}

TEST(ModelScore, a_window_built_step_by_step_is_the_model_window) {
  const auto mc = config("fwd_device", 50, 20, 0.3);
  const auto plan = sim::model_plan(mc);
  const auto w = sim::model_window(mc, plan);
  sim::ModelStepper stepper(mc, plan);
  frontier::StageMatrix one(sim::ModelStepper::schema(), mc.ranks, 0, 1);
  for (int t = 0; t < mc.steps; ++t) {
    one.reset(t);
    ASSERT_EQ(stepper.next_step(), t);
    stepper.step_into(one, 0);
    ASSERT_EQ(one.first_step(), t);
    ASSERT_EQ(one.step_present_count(0), mc.ranks);
    for (int r = 0; r < mc.ranks; ++r) {
      for (int s = 0; s < one.stages(); ++s) ASSERT_EQ(one.d(0, r, s), w.matrix.d(t, r, s)) << t << " " << r << " " << s;
      ASSERT_EQ(one.wall(0, r), w.matrix.wall(t, r));
      ASSERT_EQ(one.sync_wait(0, r, 2), w.matrix.sync_wait(t, r, 2));
      ASSERT_EQ(one.fwd_event_state(0, r), w.matrix.fwd_event_state(t, r));
    }
  }
}

TEST(ModelScore, reset_forgets_every_cell_and_side_evidence) {
  frontier::StageMatrix m(sim::ModelStepper::schema(), 3, 0, 1);
  const double d[5] = {1, 2, 3, 4, 5};
  m.set_record(0, 1, d, 20.0);
  m.set_sync_wait(0, 1, 2, 0.5);
  m.set_fwd_event(0, 1, frontier::EventState::ready, 0.25);
  m.reset(7);
  EXPECT_EQ(m.first_step(), 7);
  EXPECT_EQ(m.step_present_count(0), 0);
  EXPECT_FALSE(m.present(0, 1));
  EXPECT_EQ(m.d(0, 1, 0), 0.0);
  EXPECT_FALSE(m.has_sync_wait());
  EXPECT_FALSE(m.has_fwd_events());
  EXPECT_EQ(m.fwd_event_state(0, 1), frontier::EventState::unsampled);
}

// sim --detect streams (issue 26): a watch fed each step and its facts by the streaming scorer, as
// the steps go by, reports what the offline watch reads from the whole matrix, byte for byte.
TEST(ModelScore, streamed_detect_report_equals_the_whole_matrix) {
  for (const bool periodic : {false, true}) {
    auto mc = config("data_tail", 64, 200, 0.25);
    mc.seed = 3;
    mc.fault.onset = periodic ? 20 : 60;
    mc.fault.offset = periodic ? inject::kForever : 140;
    mc.fault.every = periodic ? 5 : 1;
    const auto plan = sim::model_plan(mc);
    testbed::WatchOptions wo;
    wo.detect = detect::DetectConfig{};
    wo.detect->per_stage = true;
    wo.plan = &plan;
    const auto w = sim::model_window(mc, plan);
    testbed::Watch off(wo);
    off.observe(std::shared_ptr<const frontier::StageMatrix>(std::shared_ptr<void>(), &w.matrix), w.ranks);
    const auto want = off.report(&w.matrix);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(periodic ? "periodic" : "A/B/A") + ", threads " + std::to_string(threads));
      auto on_opt = wo;
      on_opt.online = true;
      on_opt.exact_median_steps = testbed::RunConfig{}.exact_median_steps;
      testbed::Watch on(on_opt);
      const auto scored = testbed::score_model_streaming(
          mc, plan, {}, threads, [&](const frontier::StageMatrix& one, const frontier::StepFacts& f) { on.observe_step(one, f); });
      const auto got = on.report();
      EXPECT_EQ(got.json.dump(), want.json.dump());
      EXPECT_EQ(got.text, want.text);
      EXPECT_EQ(got.changes.size(), periodic ? 0u : 2u);
      EXPECT_EQ(formats::evidence_to_json(scored.evidence).dump(),
                formats::evidence_to_json(testbed::score_model_whole(mc, plan, {}).evidence).dump());
    }
  }
}

}  // namespace
}  // namespace sf
