// The testbed's own logic without MPI: validation, verdicts against the truth, provenance.
#include "sf/testbed/testbed.h"
#include "testbed/detail.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace sf {
namespace {

// A run killed before it removed its cgroup (ctest's timeout kills the ranks) left an empty
// sf-straggler-PID behind; the next cgroup straggler sweeps those whose process is gone, and only
// those: a live process's, one still holding something (rmdir refuses it) and others stay.
TEST(Straggler, sweeps_the_cgroups_of_runs_that_are_gone_and_only_those) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("sweep-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  int status = 0;
  ASSERT_EQ(waitpid(gone, &status, 0), gone);
  const std::string dead = std::to_string(gone), live = std::to_string(getpid());
  for (const std::string& name : std::vector<std::string>{"sf-straggler-" + dead, "sf-straggler-probe-" + dead, "sf-straggler-" + live,
                                                          "sf-straggler-" + dead + "x", "sf-straggler-", "other-" + dead})
    fs::create_directory(dir / name);
  fs::create_directory(dir / ("sf-straggler-busy"));
  const pid_t gone2 = fork();
  if (gone2 == 0) _exit(0);
  ASSERT_EQ(waitpid(gone2, &status, 0), gone2);
  fs::create_directory(dir / ("sf-straggler-" + std::to_string(gone2)));
  std::ofstream(dir / ("sf-straggler-" + std::to_string(gone2)) / "task") << "held";  // rmdir refuses it
  testbed::detail::sweep_stale_straggler_cgroups(dir.string());
  EXPECT_FALSE(fs::exists(dir / ("sf-straggler-" + dead)));
  EXPECT_FALSE(fs::exists(dir / ("sf-straggler-probe-" + dead)));
  for (const std::string& name : std::vector<std::string>{"sf-straggler-" + live, "sf-straggler-" + dead + "x", "sf-straggler-",
                                                          "other-" + dead, "sf-straggler-busy", "sf-straggler-" + std::to_string(gone2)})
    EXPECT_TRUE(fs::exists(dir / name)) << name;
  fs::remove_all(dir);
}

TEST(Validate, rejects_bad_run_options_with_one_line) {
  testbed::RunConfig c;
  EXPECT_EQ(testbed::validate(c), "");
  c.fault.scenario = "nope";
  EXPECT_NE(testbed::validate(c).find("unknown"), std::string::npos);
  c = {};
  c.fault.onset = 5;
  c.fault.offset = 5;
  EXPECT_NE(testbed::validate(c).find("--offset 5 is not after --onset 5"), std::string::npos);
  c = {};
  c.detect = detect::DetectConfig{};
  c.stability_stage = "data.next_wait";
  EXPECT_EQ(testbed::validate(c), "");
  c.stability_stage = "nope";
  EXPECT_NE(testbed::validate(c).find("--stability-stage nope"), std::string::npos);
  c = {};
  c.telemetry_fault = inject::TelemetryFault::late;
  c.telemetry_fault_rank = 0;
  EXPECT_NE(testbed::validate(c).find("root"), std::string::npos);
  c = {};
  c.recorder = testbed::RecorderMode::off;
  c.dump = "x.jsonl";
  EXPECT_NE(testbed::validate(c), "");
}

/// A 16-rank model window with a 150 ms data tail on the rank seed 7 draws, scored.
struct DataTailWindow {
  inject::FaultPlan plan;
  frontier::Evidence e;
  testbed::MakespanCheck mk;
  DataTailWindow() {
    sim::ModelConfig mc;
    mc.fault.scenario = "data_tail";
    mc.ranks = 16;
    mc.steps = 30;
    mc.fault.delay_ms = 150;
    mc.seed = 7;
    plan = sim::model_plan(mc);
    const auto w = sim::model_window(mc, plan);
    e = frontier::evaluate(w.matrix);
    mk = testbed::makespan_check(e, w.matrix);
  }
};

TEST(Judge, diagnoses_against_the_reference_and_judges_the_truth_it_is_given) {
  const DataTailWindow win;
  const auto& [plan, e, mk] = win;
  // Nothing to judge against: the cohort diagnosis stands, no verdict.
  const auto bare = testbed::judge(e, {});
  EXPECT_FALSE(bare.verdict.has_value());
  EXPECT_EQ(bare.reference_problem, "");
  EXPECT_FALSE(bare.evidence.differential.has_value());
  // The healthy twin (same seed, no fault) as the reference, and the plan as the truth: the
  // diagnosis is the change against the twin and the verdict names the hidden rank.
  sim::ModelConfig healthy;
  healthy.ranks = 16;
  healthy.steps = 30;
  healthy.seed = 7;
  const auto hw = sim::model_window(healthy, sim::model_plan(healthy));
  const auto he = frontier::evaluate(hw.matrix);
  const auto ref = frontier::make_reference(he, "the twin");
  const auto judged = testbed::judge(e, {.reference = &ref, .plan = &plan, .reference_evidence = &he, .makespan_gap = mk.gap});
  ASSERT_TRUE(judged.verdict.has_value());
  EXPECT_EQ(judged.reference_problem, "");
  ASSERT_TRUE(judged.evidence.differential.has_value());
  EXPECT_TRUE(judged.verdict->verdict.diagnosis.correct()) << judged.verdict->verdict_text;
  // The same as the two steps it stands for, byte for byte.
  auto by_hand = e;
  EXPECT_EQ(testbed::apply_reference(by_hand, ref), "");
  const auto vr = testbed::verdict_report(plan, by_hand, mk.gap, &he);
  EXPECT_EQ(judged.verdict->json.dump(), vr.json.dump());
  EXPECT_EQ(testbed::answer_text(judged), formats::answer_lines(by_hand) + vr.answer_text);
  // A reference of other stages is not used, and says why.
  auto oref = ref;
  oref.groups.back() = "elsewhere.stage";
  const auto refused = testbed::judge(e, {.reference = &oref});
  EXPECT_NE(refused.reference_problem.find("differ from the window's"), std::string::npos) << refused.reference_problem;
  EXPECT_FALSE(refused.evidence.differential.has_value());
}

TEST(Verdict, names_the_rank_and_checks_the_claim_on_a_model_window) {
  const DataTailWindow win;
  const auto& [plan, e, mk] = win;
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

// The shuffled-target null: the same evidence judged against another stage and other ranks,
// drawn from the seed: deterministic, never the truth, and scored by the same verify::score.
TEST(Verdict, shuffled_truth_is_another_stage_and_other_ranks_scored_the_same_way) {
  const DataTailWindow win;
  const auto& [plan, e, mk] = win;
  std::set<std::string> stages;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const auto vr = testbed::verdict_report(plan, e, mk.gap, nullptr, seed);
    ASSERT_TRUE(vr.json.contains("shuffled"));
    const auto& sh = vr.json["shuffled"];
    const std::string stage = sh["expected"]["stage"];
    const auto ranks = sh["expected"]["ranks"].get<std::vector<int>>();
    EXPECT_NE(stage, "data.next_wait");
    ASSERT_EQ(ranks.size(), plan.ranks.size());
    for (int r : ranks) {
      EXPECT_GE(r, 0);
      EXPECT_LT(r, 16);
      EXPECT_EQ(std::count(plan.ranks.begin(), plan.ranks.end(), r), 0);
    }
    stages.insert(stage);
    // Same seed, same draw; and the verdict is verify::score's against that truth.
    EXPECT_EQ(testbed::verdict_report(plan, e, mk.gap, nullptr, seed).json["shuffled"], sh);
    verify::Expected x{stage, ranks, true};
    x.delay_s = plan.delay_ms * 1e-3;
    x.active_fraction = 1;
    x.eta_a = e.config.eta_a;
    const auto v = verify::score(e, x);
    EXPECT_EQ(sh["frontier"]["top1"], v.frontier.top1);
    EXPECT_EQ(sh["frontier"]["top2"], v.frontier.top2);
    EXPECT_EQ(sh["rank_hit"], v.rank_hit);
    EXPECT_EQ(sh["diagnosis"]["outcome"], std::string(verify::to_string(v.diagnosis.outcome)));
  }
  EXPECT_GE(stages.size(), 3u);  // the draw reaches several stages, not one fixed substitute
  // The real truth scores the fault; no shuffled truth names the data stage on the target rank.
  const auto vr = testbed::verdict_report(plan, e, mk.gap, nullptr, 1);
  EXPECT_TRUE(vr.verdict.rank_hit);
  EXPECT_FALSE(vr.json["shuffled"]["rank_hit"].get<bool>());
}

// ---- watching over time (--detect, --trace) ----------------------------------------------------

/// Four ranks, default schema, steps [first, first + steps): rank 2's data stage is slow by
/// `delay` at the steps `slow` says; a step with `missing` true has no record at all.
std::shared_ptr<const frontier::StageMatrix> window(std::int64_t first, int steps, const std::function<bool(std::int64_t)>& slow,
                                                    double delay = 0.15,
                                                    const std::function<bool(std::int64_t)>& missing = nullptr) {
  auto m = std::make_shared<frontier::StageMatrix>(frontier::StageSchema::default_schema(), 4, first, steps);
  std::mt19937_64 rng(static_cast<std::uint64_t>(first) + 7);
  std::uniform_real_distribution<double> j(0.98, 1.02);
  for (int t = 0; t < steps; ++t) {
    if (missing && missing(first + t)) continue;
    for (int r = 0; r < 4; ++r) {
      std::vector<double> d{0.012 * j(rng), 0.036 * j(rng), 0.125 * j(rng), 0.005 * j(rng), 0.010 * j(rng)};
      if (r == 2 && slow(first + t)) d[0] += delay;
      double wall = 0;
      for (double v : d) wall += v;
      m->set_record(t, r, d, wall + 0.001);
    }
  }
  return m;
}

testbed::WatchOptions watch_options(bool online) {
  testbed::WatchOptions o;
  o.detect = detect::DetectConfig{};
  o.online = online;
  return o;
}

// Issue 14, class 5: with --detect or --trace rank 0 kept every window of the run. The watch keeps
// no window past the few steps a change may still be placed among, and its state levels off once
// its caps are reached (series, stability records, changes, the trace's steps) however long the run.
TEST(Watch, keeps_no_window_and_its_state_levels_off) {
  auto o = watch_options(true);
  o.detect->max_changes_kept = 16;
  o.detect->per_stage = true;  // G more detectors, each capped like F's
  o.detect->max_run_length = 64;  // (7 detectors over 48,000 steps: 10 s at the default 256, 3 s at 64)
  o.trace = testbed::TraceOptions{"", 40, 4};
  o.stability_window = 5;
  testbed::Watch w(o);
  std::vector<std::weak_ptr<const frontier::StageMatrix>> fed;
  std::size_t at_three_quarters = 0;
  const int windows = 2400, steps = 20;  // 48,000 steps: past the 20,000-step series and 2048 records
  for (int i = 0; i < windows; ++i) {
    auto m = window(static_cast<std::int64_t>(i) * steps, steps, [](std::int64_t t) { return (t / 40) % 2 == 1; });
    fed.push_back(m);
    w.observe(m);
    if (i == windows * 3 / 4) at_three_quarters = w.state_size();
  }
  int alive = 0;
  for (const auto& f : fed) alive += !f.expired();
  EXPECT_LE(alive, 2);  // the windows holding the last ~12 steps
  EXPECT_LE(w.state_size(), at_three_quarters + at_three_quarters / 50);
  EXPECT_EQ(w.changes().size(), 16u);
  const auto rep = w.report();
  EXPECT_GE(rep.json["detector"]["changes_total"].get<int>(), 1000);
  EXPECT_EQ(rep.json["culprit_stability"]["per_window"].size(), 2048u);
  EXPECT_EQ(rep.json["culprit_stability"]["windows"].get<int>(), windows * steps / 5);
  EXPECT_EQ(rep.json["series"]["exposed_step_s"].size(), static_cast<std::size_t>(testbed::Watch::kSeriesSteps));
  EXPECT_EQ(rep.json["stage_detector"]["stages"], 6);
  EXPECT_GE(rep.json["stage_detector"]["changes_total"].get<int>(), 1000);  // data.next_wait flaps with F
  EXPECT_LE(rep.json["stage_change_points"].size(), 6u * 16u);
  const auto tr = w.trace();
  EXPECT_EQ(tr["otherData"]["steps_in_trace"].get<int>(), 40);
}

// The diagnosis kept online (segments folded into streaming evidence as the run goes) is the one
// read from the whole matrix, and each change's diagnosis window opens when it is confirmed.
TEST(Watch, online_diagnosis_opens_at_the_change_and_matches_the_whole_matrix) {
  auto slow = [](std::int64_t t) { return t >= 40 && t < 80; };
  const auto whole = window(0, 120, slow);
  testbed::Watch off(watch_options(false));
  off.observe(whole);
  const auto a = off.report(whole.get());
  testbed::Watch on(watch_options(true));
  std::vector<testbed::ConfirmedChange> seen;
  for (int i = 0; i < 12; ++i) {
    auto part = std::make_shared<const frontier::StageMatrix>(detect::slice(*whole, i * 10, i * 10 + 9));
    for (auto& c : on.observe(part)) seen.push_back(c);
  }
  const auto b = on.report();
  ASSERT_EQ(a.changes.size(), 2u);
  ASSERT_EQ(b.changes.size(), 2u);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].json["after"]["first_step"], seen[0].change.step);
  EXPECT_GE(seen[0].json["after"]["last_step"].get<std::int64_t>(), seen[0].change.detected_at);
  EXPECT_EQ(seen[0].json["moved_stage"], "data.next_wait");
  EXPECT_EQ(seen[0].json["suspect"]["rank"], 2);
  EXPECT_NE(seen[0].line.find("suspect data.next_wait rank 2"), std::string::npos) << seen[0].line;
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& x = a.json["change_points"][i];
    const auto& y = b.json["change_points"][i];
    EXPECT_EQ(x["step"], y["step"]);
    for (const char* side : {"before", "after"}) {
      EXPECT_EQ(x[side]["first_step"], y[side]["first_step"]);
      EXPECT_EQ(x[side]["last_step"], y[side]["last_step"]);
      for (const auto& [g, v] : x[side]["shares"].items()) EXPECT_NEAR(v.get<double>(), y[side]["shares"][g].get<double>(), 1e-9) << g;
    }
  }
  // rank_median has no streaming evidence: the diagnosis still opens at the change (from the
  // steps held), and the report reads the whole matrix the caller keeps for it.
  auto o = watch_options(true);
  o.label.gain_baseline = frontier::GainBaseline::rank_median;
  testbed::Watch rm(o);
  std::vector<testbed::ConfirmedChange> rm_seen;
  for (int i = 0; i < 12; ++i) {
    auto part = std::make_shared<const frontier::StageMatrix>(detect::slice(*whole, i * 10, i * 10 + 9));
    for (auto& c : rm.observe(part)) rm_seen.push_back(c);
  }
  ASSERT_EQ(rm_seen.size(), 2u);
  EXPECT_TRUE(rm_seen[0].json.contains("before"));
  EXPECT_EQ(rm_seen[0].json["moved_stage"], "data.next_wait");
  EXPECT_EQ(rm.report(whole.get()).changes.size(), 2u);
}

// Issue 14 (audit): run --out's window packets carried change points but no culprit stability.
// After each recorder window the watch gives that window's record as run.json has it (the class so
// far); its per-window record is the one the final report lists for the same window and stage.
TEST(Watch, window_stability_is_the_reports_record_for_that_window) {
  auto slow = [](std::int64_t t) { return t >= 40 && t < 80; };
  const auto whole = window(0, 120, slow);
  auto o = watch_options(true);
  o.stability_per_window = true;
  testbed::Watch w(o);
  std::vector<nlohmann::ordered_json> packets;
  for (int i = 0; i < 12; ++i) {
    w.observe(std::make_shared<const frontier::StageMatrix>(detect::slice(*whole, i * 10, i * 10 + 9)));
    packets.push_back(w.window_stability());
  }
  const auto rep = w.report();
  const auto& final_cs = rep.json["culprit_stability"];
  ASSERT_EQ(final_cs["stage"], "data.next_wait");
  int compared = 0;
  for (int i = 0; i < 12; ++i) {
    const auto& p = packets[i];
    ASSERT_FALSE(p.is_null()) << i;
    ASSERT_EQ(p["per_window"].size(), 1u);
    const auto& rec = p["per_window"][0];
    EXPECT_EQ(rec["first_step"], i * 10);
    EXPECT_EQ(rec["last_step"], i * 10 + 9);
    EXPECT_EQ(p["windows"], i + 1);
    EXPECT_TRUE(p["so_far"].get<bool>());
    for (const char* k : {"stage", "stage_basis", "class", "culprit", "evidence", "ranks"}) EXPECT_TRUE(p.contains(k)) << k;
    if (i >= 5 && i < 8) {  // slow windows after the change at 40 is confirmed (at 49, K = 10 values)
      EXPECT_EQ(p["stage"], "data.next_wait") << i;
      EXPECT_EQ(rec["culprit"], 2) << i;
      EXPECT_EQ(rec["top"]["rank"], 2) << i;
    }
    if (p["stage"] == final_cs["stage"]) {
      EXPECT_EQ(rec, final_cs["per_window"][i]) << i;
      ++compared;
    }
  }
  EXPECT_GE(compared, 8);
  EXPECT_EQ(packets[7]["class"], "chronic");  // so far: the slow episode is still going at step 79
  EXPECT_EQ(final_cs["class"], "one-off");
  // Not a stability window (one window over the run, stability windows of 20 steps): none.
  testbed::Watch one(watch_options(true));
  one.observe(whole);
  EXPECT_TRUE(one.window_stability().is_null());
}

// Issue 14, class 6: culprit stability followed the group with the most credit to one rank
// (model.backward_cpu_wall, healthy jitter) and said "none" while the truth rank held 72 % of
// data.next_wait's advance at the periodic spikes. It follows the stage of the spikes (or the
// stage that moved at a change), --stability-stage picks one, and every window lists its top ranks.
TEST(Watch, culprit_stability_follows_the_stage_that_moved) {
  sim::ModelConfig mc;
  mc.fault.scenario = "data_tail";
  mc.ranks = 64;
  mc.steps = 200;
  mc.fault.onset = 20;
  mc.fault.offset = 150;
  mc.fault.every = 7;
  mc.fault.delay_ms = 30;
  mc.seed = 4;
  const auto plan = sim::model_plan(mc);
  const auto w = std::make_shared<formats::Window>(sim::model_window(mc, plan));
  auto report = [&](const std::string& stage) {
    auto o = watch_options(false);
    o.plan = &plan;
    o.stability_stage = stage;
    testbed::Watch watch(o);
    watch.observe(std::shared_ptr<const frontier::StageMatrix>(w, &w->matrix));
    return watch.report(&w->matrix);
  };
  const auto rep = report("");
  const auto& cs = rep.json["culprit_stability"];
  EXPECT_EQ(cs["stage"], "data.next_wait") << cs.dump();
  EXPECT_EQ(cs["culprit"], plan.ranks.front());
  EXPECT_EQ(cs["class"], "intermittent");
  EXPECT_EQ(cs["stage_basis"], "the stage of the periodic spikes");
  ASSERT_FALSE(cs["per_window"].empty());
  for (const auto& x : cs["per_window"]) {
    EXPECT_LE(x["ranks"].size(), 4u);
    if (!x["ranks"].empty()) {
      EXPECT_EQ(x["ranks"][0], x["top"]);
    }
  }
  const auto forced = report("model.backward_cpu_wall");
  EXPECT_EQ(forced.json["culprit_stability"]["stage"], "model.backward_cpu_wall");
  EXPECT_EQ(forced.json["culprit_stability"]["stage_basis"], "--stability-stage");
  EXPECT_THROW(report("nope"), std::invalid_argument);
}

// Issue 14, class 13: steps with no record used to be dropped from the series the period search
// read while everything else was placed by step, so the phase slid by the number of gaps.
TEST(Watch, steps_without_records_keep_the_phase_in_steps) {
  const auto m = window(0, 200, [](std::int64_t t) { return t >= 32 && (t - 32) % 6 == 0; }, 0.1,
                        [](std::int64_t t) { return t == 3 || t == 4 || t == 5 || t == 10; });
  testbed::Watch w(watch_options(false));
  w.observe(m);
  const auto rep = w.report(m.get());
  EXPECT_EQ(rep.json["periodicity"]["period"], 6);
  EXPECT_EQ(rep.json["periodicity"]["phase_step"], 32);
  EXPECT_TRUE(rep.json["series"]["exposed_step_s"][4].is_null());
}

/// Four ranks, default schema, `steps` steps: data 20 ms, forward 30, backward 50, callbacks
/// `cb` (±`cb_noise` relative), optimizer 10; from step `at` on, `moved` seconds go from backward
/// to data on every rank (F[t,S] stays as it was) and callbacks grow by `cb_shift` (relative).
std::shared_ptr<const frontier::StageMatrix> stage_move(int steps, int at, double moved, double cb = 0.001,
                                                        double cb_noise = 0.1, double cb_shift = 0.0) {
  auto m = std::make_shared<frontier::StageMatrix>(frontier::StageSchema::default_schema(), 4, 0, steps);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> j(0.98, 1.02), jc(1 - cb_noise, 1 + cb_noise);
  for (int t = 0; t < steps; ++t)
    for (int r = 0; r < 4; ++r) {
      const double shift = t >= at ? moved : 0.0;
      std::vector<double> d{(0.020 + shift) * j(rng), 0.030 * j(rng), (0.050 - shift) * j(rng),
                            cb * (t >= at ? 1 + cb_shift : 1.0) * jc(rng), 0.010 * j(rng)};
      double wall = 0;
      for (double v : d) wall += v;
      m->set_record(t, r, d, wall + 0.001);
    }
  return m;
}

testbed::DetectReport stage_report(const std::shared_ptr<const frontier::StageMatrix>& m, double floor) {
  auto o = watch_options(false);
  o.detect->per_stage = true;
  o.detect->stage_floor = floor;
  testbed::Watch w(o);
  w.observe(m);
  return w.report(m.get());
}

// Issue 14 (per-stage detection): a fault that moves 15 ms from backward to data leaves F[t,S]
// within 10 % of where it was, so F's detector reports nothing; the per-stage detectors report
// data.next_wait slower and model.backward_cpu_wall faster, at the step it happened.
TEST(Watch, per_stage_detectors_name_a_move_that_f_cannot_see) {
  const auto m = stage_move(200, 100, 0.015);
  const auto acc = frontier::account(*m);
  std::vector<double> before, after;
  for (int t = 0; t < acc.steps; ++t) (t < 100 ? before : after).push_back(acc.exposed(t));
  auto med = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  ASSERT_LT(std::abs(med(after) - med(before)) / med(before), 0.10);  // F nearly unchanged
  const auto rep = stage_report(m, 0.25);
  EXPECT_TRUE(rep.json["change_points"].empty()) << rep.text;
  const auto& scp = rep.json["stage_change_points"];
  ASSERT_EQ(scp.size(), 2u) << rep.text;
  std::map<std::string, std::string> moved;
  for (const auto& c : scp) {
    EXPECT_LE(std::abs(c["step"].get<std::int64_t>() - 100), 2) << c.dump();
    EXPECT_LE(c["detected_at"].get<std::int64_t>() - 100, 13) << c.dump();
    moved[c["stage"].get<std::string>()] = c["direction"].get<std::string>();
  }
  EXPECT_EQ(moved["data.next_wait"], "slower");
  EXPECT_EQ(moved["model.backward_cpu_wall"], "faster");
  EXPECT_EQ(rep.json["stage_detector"]["stages"], 6);
  EXPECT_NE(rep.text.find("#   data.next_wait: slower from step"), std::string::npos) << rep.text;
  EXPECT_NE(rep.text.find("#   model.backward_cpu_wall: faster from step"), std::string::npos) << rep.text;
  // Without --detect-stages none of it is there (existing consumers see what they saw).
  testbed::Watch plain(watch_options(false));
  plain.observe(m);
  EXPECT_FALSE(plain.report(m.get()).json.contains("stage_change_points"));
}

// The floor: a stage's relative change is taken against max(m_l, m_r, stage_floor · F's level).
// Callbacks take ~1 % of the step; +60 % of that is 0.5 % of F: no stage change with the floor
// (25 % of F), a change without it (floor 0: FALCON's max(m_l, m_r)).
TEST(Watch, per_stage_floor_keeps_a_tiny_stage_from_firing) {
  const auto m = stage_move(200, 100, 0.0, 0.001, 0.1, 0.6);
  const auto with_floor = stage_report(m, 0.25);
  EXPECT_TRUE(with_floor.json["stage_change_points"].empty()) << with_floor.text;
  const auto no_floor = stage_report(m, 0.0);
  bool callbacks = false;
  for (const auto& c : no_floor.json["stage_change_points"]) callbacks = callbacks || c["stage"] == "callbacks.cpu_wall";
  EXPECT_TRUE(callbacks) << no_floor.text;
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

// Reporters: a new output is one Reporter; the multiplex tells each, keeps the first failure and
// stops telling the reporter that failed; metrics and trace write their files, naming their option.
TEST(Reporters, a_new_output_is_one_reporter_and_a_failure_names_its_option) {
  struct Counting final : testbed::Reporter {
    int* windows;
    std::string fail_at;
    Counting(int* w, std::string f) : windows(w), fail_at(std::move(f)) {}
    std::string window(const testbed::ReportedWindow& w) override {
      ++*windows;
      return fail_at == "window" ? "--counting: full after window " + std::to_string(w.counts.windows) : "";
    }
    std::string finish(const testbed::ReportedEnd&) override { return fail_at == "finish" ? "--counting: no end" : ""; }
    std::string said() const override { return "counted " + std::to_string(*windows); }
  };
  const DataTailWindow d;
  int a = 0, b = 0;
  testbed::Reporters rs;
  EXPECT_TRUE(rs.empty());
  rs.add(std::make_unique<Counting>(&a, "window"));
  rs.add(std::make_unique<Counting>(&b, ""));
  const formats::MetricsState counts{"test", 1, d.e.steps, -1, 0};
  EXPECT_EQ(rs.window({d.e, counts}), "--counting: full after window 1");
  EXPECT_EQ(rs.window({d.e, counts}), "");  // the failed one is not told again
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(rs.finish({}), "");
  EXPECT_EQ(rs.said(), std::vector<std::string>{"counted 2"});

  const std::string dir = ::testing::TempDir() + "reporters_test";
  std::filesystem::create_directories(dir);
  testbed::Reporters files;
  files.add(testbed::metrics_reporter(dir + "/sf.prom"));
  files.add(testbed::trace_reporter(dir + "/no/such/dir/trace.json"));
  EXPECT_EQ(files.window({d.e, counts}), "");
  std::ifstream prom(dir + "/sf.prom");
  const std::string text((std::istreambuf_iterator<char>(prom)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, formats::metrics_text(d.e, counts));
  const nlohmann::ordered_json trace = {{"traceEvents", nlohmann::ordered_json::array()}};
  testbed::ReportedEnd end;
  end.trace = &trace;
  const std::string failed = files.finish(end);
  EXPECT_EQ(failed.rfind("--trace ", 0), 0u) << failed;
  EXPECT_NE(failed.find(dir + "/no/such/dir/trace.json"), std::string::npos) << failed;
  EXPECT_TRUE(files.said().empty());
  testbed::Reporters plot;
  plot.add(testbed::plot_reporter(dir + "/p.svg", "what"));
  end.packet_dir = dir;
  EXPECT_EQ(plot.finish(end), "--plot " + dir + "/p.svg: no window packet was written to " + dir);
}

}  // namespace
}  // namespace sf
