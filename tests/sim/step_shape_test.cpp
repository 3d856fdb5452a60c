// The step's shape: DDP bucket layout, seed-controlled cost variation, the bucketed model.
#include "sf/sim/sim.h"
#include "sim/detail.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace sf;

namespace {
constexpr double kMiB = 1 << 20;
double mib(std::size_t floats) { return static_cast<double>(floats) * sizeof(float) / kMiB; }
}  // namespace

TEST(StepShape, buckets_follow_ddp_first_small_then_capped) {
  // 100 MiB at real size: torch's 1 MiB first bucket, then 25 MiB buckets, the rest last.
  const auto b = sim::bucket_floats({100, 100, 25, 1});
  ASSERT_EQ(b.size(), 5u);
  EXPECT_DOUBLE_EQ(mib(b[0]), 1);
  for (int i = 1; i < 4; ++i) EXPECT_DOUBLE_EQ(mib(b[i]), 25);
  EXPECT_DOUBLE_EQ(mib(b[4]), 24);
  // Scaled to 4 MiB of gradients: the same proportions, 4 MiB in all.
  const auto s = sim::bucket_floats({4, 100, 25, 1});
  ASSERT_EQ(s.size(), 5u);
  EXPECT_NEAR(mib(std::accumulate(s.begin(), s.end(), std::size_t{0})), 4, 1e-3);
  EXPECT_NEAR(mib(s[1]) / mib(s[0]), 25, 0.01);
  // Reduce-scatter needs every bucket a multiple of the world size.
  for (auto n : sim::bucket_floats({3, 63.85, 25, 1}, 24)) EXPECT_EQ(n % 24, 0u);
}

TEST(StepShape, cost_draws_are_replicates_a_seed_controls) {
  const sim::StageCosts base;
  const sim::Variation none{};
  const auto c0 = sim::draw_costs(base, none, 7, 3, 11);
  EXPECT_DOUBLE_EQ(c0.bwd_device_ms, base.bwd_device_ms);  // no variation: the base exactly
  const sim::Variation v{0.1, sim::Heterogeneity::none, 0};
  const auto a = sim::draw_costs(base, v, 7, 3, 11), b = sim::draw_costs(base, v, 7, 3, 11);
  EXPECT_DOUBLE_EQ(a.bwd_device_ms, b.bwd_device_ms);  // same (seed, rank, step): same draw
  EXPECT_NE(a.bwd_device_ms, sim::draw_costs(base, v, 8, 3, 11).bwd_device_ms);  // another seed
  EXPECT_NE(a.bwd_device_ms, sim::draw_costs(base, v, 7, 3, 12).bwd_device_ms);  // another step
  EXPECT_NE(a.bwd_device_ms, a.fwd_device_ms / base.fwd_device_ms * base.bwd_device_ms);  // per cost
  // Lognormal with median 1 and the configured sigma.
  std::vector<double> logs;
  for (int t = 0; t < 4000; ++t) logs.push_back(std::log(sim::draw_costs(base, v, 1, 0, t).optim_ms / base.optim_ms));
  std::sort(logs.begin(), logs.end());
  EXPECT_NEAR(logs[logs.size() / 2], 0.0, 0.01);
  double ss = 0;
  for (double x : logs) ss += x * x;
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(logs.size())), 0.1, 0.005);
}

// The jitter's normal is quantised to 2^16 equiprobable levels: the table must be the standard
// normal's midpoint quantiles (symmetric, ascending, unit variance to the quantisation), the
// sampler must draw exactly what draw_costs draws, and the eight costs of a rank-step must be
// independent draws (their logs uncorrelated, each with the configured sigma).
TEST(StepShape, jitter_levels_are_normal_quantiles_and_the_sampler_draws_what_draw_costs_draws) {
  const auto& z = sim::normal_quantiles();
  ASSERT_EQ(z.size(), sim::kJitterLevels);
  double ss = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    if (i > 0) {
      ASSERT_LT(z[i - 1], z[i]) << i;
    }
    ASSERT_NEAR(z[i], -z[z.size() - 1 - i], 1e-12) << i;  // symmetric
    ss += z[i] * z[i];
  }
  EXPECT_NEAR(z[z.size() / 2], 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(z.size())), 1.0, 1e-3);
  EXPECT_NEAR(z.back(), 4.325, 0.002);  // Φ⁻¹(1 − 2^-17)
  EXPECT_NEAR(z[static_cast<std::size_t>(0.8413447 * static_cast<double>(z.size()))], 1.0, 1e-3);  // Φ(1)

  const sim::StageCosts base;
  for (const sim::Variation v : {sim::Variation{0.2, sim::Heterogeneity::lognormal, 0.3},
                                 sim::Variation{0.0, sim::Heterogeneity::two_tier, 0.5}, sim::Variation{}}) {
    const sim::CostSampler sampler(base, v, 11, 64);
    for (int r = 0; r < 64; ++r)
      for (std::int64_t t : {0, 1, 77, 100000}) {
        const auto a = sampler.draw(r, t), b = sim::draw_costs(base, v, 11, r, t);
        ASSERT_EQ(a.data_ms, b.data_ms);
        ASSERT_EQ(a.loader_ms, b.loader_ms);
        ASSERT_EQ(a.fwd_host_ms, b.fwd_host_ms);
        ASSERT_EQ(a.fwd_device_ms, b.fwd_device_ms);
        ASSERT_EQ(a.bwd_host_ms, b.bwd_host_ms);
        ASSERT_EQ(a.bwd_device_ms, b.bwd_device_ms);
        ASSERT_EQ(a.callbacks_ms, b.callbacks_ms);
        ASSERT_EQ(a.optim_ms, b.optim_ms);
      }
    // A block of the model's costs is draw()'s, column by column (a block at the end shorter, some
    // ranks past a multiple of eight), in both builds of draw_block (AVX-512 where there is one).
    for (const auto path : {sim::PassPath::portable, sim::PassPath::fastest}) {
      sim::model_pass_path = path;
      const sim::CostSampler built(base, v, 11, 64);
      sim::model_pass_path = sim::PassPath::fastest;
      sim::CostSampler::Block blk;
      for (int r0 : {0, 3, 60})
        for (std::int64_t t : {0, 3, 100000}) {
          built.draw_block(r0, 64 - r0, t, blk);
          for (int j = 0; j < 64 - r0; ++j) {
            const auto c = sampler.draw(r0 + j, t);
            ASSERT_EQ(blk.data[j], c.data_ms);
            ASSERT_EQ(blk.fwd_host[j], c.fwd_host_ms);
            ASSERT_EQ(blk.fwd_device[j], c.fwd_device_ms);
            ASSERT_EQ(blk.bwd_host[j], c.bwd_host_ms);
            ASSERT_EQ(blk.bwd_device[j], c.bwd_device_ms);
            ASSERT_EQ(blk.callbacks[j], c.callbacks_ms);
            ASSERT_EQ(blk.optim[j], c.optim_ms);
          }
        }
    }
  }
  // Costs of one rank-step drawn independently: pairwise correlation of their logs near 0.
  const sim::Variation v{0.1, sim::Heterogeneity::none, 0};
  const int n = 20000;
  std::vector<double> x(n), y(n);
  for (int t = 0; t < n; ++t) {
    const auto c = sim::draw_costs(base, v, 5, 2, t);
    x[t] = std::log(c.fwd_host_ms / base.fwd_host_ms);
    y[t] = std::log(c.bwd_host_ms / base.bwd_host_ms);  // slot 4: the second hashed word
  }
  double sx = 0, sy = 0, sxy = 0, sxx = 0, syy = 0;
  for (int t = 0; t < n; ++t) {
    sx += x[t];
    sy += y[t];
  }
  sx /= n;
  sy /= n;
  for (int t = 0; t < n; ++t) {
    sxy += (x[t] - sx) * (y[t] - sy);
    sxx += (x[t] - sx) * (x[t] - sx);
    syy += (y[t] - sy) * (y[t] - sy);
  }
  EXPECT_LT(std::abs(sxy / std::sqrt(sxx * syy)), 0.03);
  EXPECT_NEAR(std::sqrt(sxx / n), 0.1, 0.003);
  EXPECT_NEAR(std::sqrt(syy / n), 0.1, 0.003);
}

TEST(StepShape, two_tier_heterogeneity_slows_about_half_the_ranks) {
  const sim::Variation v{0, sim::Heterogeneity::two_tier, 0.5};
  int slow = 0;
  for (int r = 0; r < 400; ++r) {
    const double f = sim::rank_factor(v, 3, r);
    ASSERT_TRUE(f == 1.0 || f == 1.5) << f;
    slow += f > 1 ? 1 : 0;
  }
  EXPECT_GT(slow, 150);
  EXPECT_LT(slow, 250);
  int differ = 0;  // another seed draws another set of slow ranks
  for (int r = 0; r < 400; ++r) differ += sim::rank_factor(v, 3, r) != sim::rank_factor(v, 4, r) ? 1 : 0;
  EXPECT_GT(differ, 100);
}

namespace {
double healthy_step_ms(sim::SyncMode mode, double gib_per_s) {
  sim::ModelConfig cfg;
  cfg.fault.scenario = "none";
  cfg.ranks = 8;
  cfg.steps = 10;
  cfg.sync_mode = mode;
  cfg.variation = {};
  cfg.comm.gib_per_s = gib_per_s;
  const auto plan = sim::model_plan(cfg);
  const auto w = sim::model_window(cfg, plan);
  return w.matrix.wall(5, 0) * 1e3;
}
}  // namespace

TEST(StepShape, bucketed_sync_hides_communication_behind_backward_single_does_not) {
  // 4 MiB over 8 ranks at 0.05 GiB/s: ~137 ms of communication. One collective after backward
  // adds all of it to the step; buckets overlapping backward's ~127 ms of compute hide most.
  const double fast_single = healthy_step_ms(sim::SyncMode::single, 1000);
  const double slow_single = healthy_step_ms(sim::SyncMode::single, 0.05);
  const double slow_bucketed = healthy_step_ms(sim::SyncMode::bucketed, 0.05);
  EXPECT_NEAR(slow_single - fast_single, 137, 10);
  EXPECT_LT(slow_bucketed - fast_single, 0.6 * (slow_single - fast_single));
  // Nothing to hide behind when communication is free: both modes give the same step.
  EXPECT_NEAR(healthy_step_ms(sim::SyncMode::bucketed, 1000), fast_single, 1.0);
}
