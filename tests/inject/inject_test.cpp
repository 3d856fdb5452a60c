#include "sf/inject/inject.h"

#include <gtest/gtest.h>

#include <set>

using namespace sf::inject;

TEST(Catalogue, lists_every_scenario_the_testbed_promises) {
  std::set<std::string> names;
  for (const auto& s : catalogue()) names.insert(s.name);
  EXPECT_EQ(names, (std::set<std::string>{"none", "data_tail", "bwd_compute", "comm_delay", "fwd_device", "fwd_host",
                                          "callback_sync_tail", "callback_host_tail", "optim_host_local", "link_slow"}));
  EXPECT_FALSE(find_scenario("callback_host_tail")->should_route);
  EXPECT_FALSE(find_scenario("optim_host_local")->should_route);
  EXPECT_TRUE(find_scenario("callback_sync_tail")->sync_callbacks);
  EXPECT_EQ(find_scenario("data_tail")->stage, "data.next_wait");
  EXPECT_EQ(find_scenario("nope"), nullptr);
}

TEST(FaultPlan, a_link_fault_is_active_by_its_rate_not_a_delay) {
  FaultPlan p;
  p.scenario = find_scenario("link_slow");
  p.ranks = {2, 3};
  p.onset = 5;
  p.host = "h1";
  EXPECT_FALSE(p.active(2, 6));  // no rate: nothing to apply
  p.rate_mbit = 200;
  EXPECT_FALSE(p.active(2, 4));
  EXPECT_TRUE(p.active(3, 5));
  EXPECT_FALSE(p.active(1, 5));
  EXPECT_EQ(p.delay_s(Site::link, 2, 6), 0.0);  // the workload sleeps nowhere: the link is slow
  const auto t = truth(p);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].host, "h1");
  EXPECT_EQ(t[0].rate_mbit, 200);
}

TEST(FaultPlan, onset_offset_every_and_ranks) {
  FaultPlan p;
  p.scenario = find_scenario("fwd_host");
  p.delay_ms = 50;
  p.ranks = {2, 5};
  p.onset = 10;
  p.offset = 30;
  p.every = 5;
  EXPECT_FALSE(p.active(2, 9));
  EXPECT_TRUE(p.active(2, 10));
  EXPECT_FALSE(p.active(2, 11));
  EXPECT_TRUE(p.active(5, 25));
  EXPECT_FALSE(p.active(5, 30));
  EXPECT_FALSE(p.active(3, 10));
  EXPECT_DOUBLE_EQ(p.delay_s(Site::forward_host, 2, 15), 0.05);
  EXPECT_DOUBLE_EQ(p.delay_s(Site::data, 2, 15), 0.0);  // another site
  const auto t = truth(p);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].rank, 5);
  EXPECT_EQ(t[0].stage, "model.fwd_loss_cpu_wall");
  EXPECT_EQ(t[0].kind, "host_delay");
  EXPECT_EQ(t[0].every, 5);
  FaultPlan none;
  none.scenario = find_scenario("none");
  EXPECT_TRUE(truth(none).empty());
}

TEST(FaultPlan, step_delay_and_targets_split_delay_s_exactly) {
  // The model takes the step's delay per site once and asks targets() per rank (10^6 ranks x 7
  // sites a step); the halves must give delay_s's value for every site, rank and step.
  for (const char* name : {"fwd_host", "data_tail", "comm_delay", "link_slow", "none"}) {
    FaultPlan p;
    p.scenario = find_scenario(name);
    p.delay_ms = 37;
    p.rate_mbit = 100;
    p.ranks = {1, 4};
    p.onset = 3;
    p.offset = 20;
    p.every = 4;
    int hits = 0;
    for (int s = 0; s <= static_cast<int>(Site::link); ++s)
      for (int r = 0; r < 6; ++r)
        for (std::int64_t t = 0; t < 25; ++t) {
          const auto site = static_cast<Site>(s);
          const double want = p.delay_s(site, r, t);
          EXPECT_EQ(p.targets(r) ? p.step_delay_s(site, t) : 0.0, want) << name << " site " << s << " rank " << r << " step " << t;
          hits += want > 0;
        }
    // Each acts on 2 ranks in steps 3, 7, 11, 15, 19: 10 (rank, step) pairs at its one site
    // (link_slow too, at Site::link, which nothing sleeps at); none has no site.
    EXPECT_EQ(hits, std::string(name) == "none" ? 0 : 10) << name;
  }
}

TEST(Targets, drawn_from_the_seed_distinct_and_in_range) {
  EXPECT_EQ(draw_targets(1, 8, 1), draw_targets(1, 8, 1));
  std::set<int> seen;
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    const auto t = draw_targets(seed, 8, 3);
    ASSERT_EQ(t.size(), 3u);
    EXPECT_EQ(std::set<int>(t.begin(), t.end()).size(), 3u);
    for (int r : t) {
      EXPECT_GE(r, 0);
      EXPECT_LT(r, 8);
      seen.insert(r);
    }
  }
  EXPECT_EQ(seen.size(), 8u);  // every rank can be the hidden target
}

// One spec for run, sim and train.py: each bad field is refused in one line naming its option.
TEST(FaultSpec, validate_names_the_option_and_make_plan_draws_as_run_does) {
  FaultSpec ok;
  EXPECT_EQ(validate(ok), "");
  EXPECT_EQ(validate(ok, 4), "");
  auto bad = [](auto edit, int world = 0) {
    FaultSpec f;
    edit(f);
    return validate(f, world);
  };
  EXPECT_NE(bad([](FaultSpec& f) { f.scenario = "nope"; }).find("--scenario nope: unknown; expected one of none, data_tail"),
            std::string::npos);
  EXPECT_EQ(bad([](FaultSpec& f) { f.delay_ms = -1; }), delay_bound_problem(-1));
  EXPECT_EQ(bad([](FaultSpec& f) { f.delay_ms = kMaxDelayMs + 1; }), delay_bound_problem(kMaxDelayMs + 1));
  EXPECT_NE(bad([](FaultSpec& f) { f.onset = 40, f.offset = 30; }).find("--offset 30 is not after --onset 40"), std::string::npos);
  EXPECT_EQ(bad([](FaultSpec& f) { f.every = 0; }), "--every must be >= 1");
  EXPECT_EQ(bad([](FaultSpec& f) { f.target_ranks = {4}; }), "");  // the world is not known yet
  EXPECT_EQ(bad([](FaultSpec& f) { f.target_ranks = {4}; }, 4), "--target-rank 4 outside 0..3");
  EXPECT_EQ(bad([](FaultSpec& f) { f.target_count = 5; }, 4), "--targets 5 outside 1..4");
  EXPECT_NE(bad([](FaultSpec& f) { f.straggler = StragglerKind::pause; }).find("a straggler is the run's fault"), std::string::npos);
  EXPECT_EQ(bad([](FaultSpec& f) { f.scenario = "none", f.straggler = StragglerKind::pause, f.straggler_strength = 2; }),
            check_strength(StragglerKind::pause, 2));
  EXPECT_EQ(bad([](FaultSpec& f) { f.straggler_strength = 2; }), "--straggler-strength without --straggler");
  EXPECT_NE(bad([](FaultSpec& f) { f.scenario = "link_slow", f.delay_ms = 5; }).find("link_slow is a rate limit"), std::string::npos);

  FaultSpec f;
  f.scenario = "fwd_host";
  f.target_count = 2;
  f.onset = 3;
  f.every = 2;
  const auto plan = make_plan(f, 16, 7);
  EXPECT_EQ(plan.scenario, find_scenario("fwd_host"));
  EXPECT_EQ(plan.delay_ms, find_scenario("fwd_host")->default_delay_ms);
  EXPECT_EQ(plan.ranks, draw_targets(7, 16, 2));
  EXPECT_EQ(plan.onset, 3);
  EXPECT_EQ(plan.every, 2);
  f.target_ranks = {5};
  f.delay_ms = 80;
  EXPECT_EQ(make_plan(f, 16, 7).ranks, std::vector<int>{5});
  EXPECT_EQ(make_plan(f, 16, 7).delay_ms, 80);
  f.scenario = "none";
  f.straggler = StragglerKind::cgroup;
  EXPECT_EQ(make_plan(f, 16, 7).strength, default_strength(StragglerKind::cgroup));
  f.target_ranks = {16};
  EXPECT_THROW(make_plan(f, 16, 7), std::invalid_argument);
}

TEST(Primitives, precise_sleep_never_ends_early) {
  for (double ms : {1.0, 5.0, 20.0}) {
    const auto t0 = monotonic_ns();
    host_delay(ms * 1e-3, 200000);
    EXPECT_GE(monotonic_ns() - t0, static_cast<std::int64_t>(ms * 1e6));
  }
  host_delay(0, 0);
  host_delay(-1, 0);  // nothing to do
}
