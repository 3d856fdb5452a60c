// The testbed's own logic without MPI: validation, verdicts against the truth, provenance.
#include "sf/testbed/testbed.h"

#include <gtest/gtest.h>

namespace sf {
namespace {

TEST(Validate, rejects_bad_run_options_with_one_line) {
  testbed::RunConfig c;
  EXPECT_EQ(testbed::validate(c), "");
  c.scenario = "nope";
  EXPECT_NE(testbed::validate(c).find("unknown"), std::string::npos);
  c = {};
  c.onset = 5;
  c.offset = 5;
  EXPECT_NE(testbed::validate(c), "");
  c = {};
  c.telemetry_fault = inject::TelemetryFault::late;
  c.telemetry_fault_rank = 0;
  EXPECT_NE(testbed::validate(c).find("root"), std::string::npos);
  c = {};
  c.recorder = testbed::RecorderMode::off;
  c.dump = "x.jsonl";
  EXPECT_NE(testbed::validate(c), "");
}

TEST(Verdict, names_the_rank_and_checks_the_claim_on_a_model_window) {
  sim::ModelConfig mc;
  mc.scenario = "data_tail";
  mc.ranks = 16;
  mc.steps = 30;
  mc.delay_ms = 150;
  mc.seed = 7;
  const auto plan = sim::model_plan(mc);
  const auto w = sim::model_window(mc, plan);
  const auto e = frontier::evaluate(w.matrix);
  const auto mk = testbed::makespan_check(e, w.matrix);
  const auto vr = testbed::verdict_report(plan, e, mk.gap);
  EXPECT_TRUE(vr.verdict.frontier.top2);
  EXPECT_TRUE(vr.verdict.rank_hit);
  EXPECT_TRUE(vr.claim_pass) << vr.verdict_text;
  EXPECT_NE(vr.truth_text.find("rank " + std::to_string(plan.ranks.front())), std::string::npos);
  EXPECT_EQ(vr.json["rank_hit"], true);

  // The same window judged against a claim it does not meet: a control that must stay unrouted.
  inject::FaultPlan wrong = plan;
  wrong.scenario = inject::find_scenario("optim_host_local");
  const auto bad = testbed::verdict_report(wrong, e, mk.gap);
  EXPECT_FALSE(bad.verdict.frontier.top1);
}

TEST(Provenance, every_result_file_says_where_when_and_from_what) {
  const auto j = testbed::provenance_json("sf.test/1", {"sf-testbed", "run"}, "abc123");
  EXPECT_EQ(j["schema"], "sf.test/1");
  EXPECT_EQ(j["commit"], "abc123");
  EXPECT_EQ(j["command"].size(), 2u);
  const std::string date = j["date"];
  EXPECT_EQ(date.size(), 20u);  // YYYY-MM-DDTHH:MM:SSZ
  EXPECT_EQ(date.back(), 'Z');
  EXPECT_FALSE(std::string(j["host"]).empty());
  const auto m = testbed::machine_json();
  EXPECT_GE(m["cpus"].get<int>(), 1);
  EXPECT_GT(m["memory_gib"].get<double>(), 0.0);
  const testbed::StealMeter meter;
  const double f = meter.fraction();
  EXPECT_GE(f, 0.0);
  EXPECT_LE(f, 1.0);
}

}  // namespace
}  // namespace sf
