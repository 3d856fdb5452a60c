// `sim` streams the model step by step: the evidence must be the whole-matrix path's, for every
// scenario family (sync-wait side evidence, synchronised callbacks, sampled forward events).
#include "sf/formats/formats.h"
#include "sf/testbed/testbed.h"

#include <gtest/gtest.h>

namespace sf {
namespace {

sim::ModelConfig config(const std::string& scenario, int ranks, int steps, double event_q) {
  sim::ModelConfig mc;
  mc.scenario = scenario;
  mc.ranks = ranks;
  mc.steps = steps;
  mc.delay_ms = 150;
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
    SCOPED_TRACE(mc.scenario + ", threads " + std::to_string(threads));
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

}  // namespace
}  // namespace sf
