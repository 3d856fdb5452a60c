// sf::detect: the change-point detector, FALCON's verification and ACF rule, the diagnosis window
// and culprit stability. Properties run under RapidCheck (RC_PARAMS set by CTest).
#include "sf/detect/detect.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <functional>
#include <random>
#include <string>

namespace {

using sf::detect::ChangePoint;
using sf::detect::DetectConfig;
using sf::detect::Detector;
using sf::detect::detect_series;

/// A level series with relative Gaussian noise: levels[i] holds from steps[i] on.
std::vector<double> series(int n, const std::vector<std::pair<int, double>>& levels, double rel_sd, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0, 1);
  std::vector<double> x(static_cast<std::size_t>(n));
  for (int t = 0; t < n; ++t) {
    double level = levels.front().second;
    for (const auto& [from, v] : levels)
      if (t >= from) level = v;
    x[t] = std::max(0.0, level * (1 + rel_sd * z(rng)));
  }
  return x;
}

// The bound the docs state: with ≤ 2% noise and a ≥ 20% shift, the change is placed within
// 2 steps of the onset and confirmed when the new level has held K = min_gap values from it, which
// held-back outliers may delay: at most kPlaceBound + (min_gap − 1) + max_outlier_run = 13 steps
// after the onset. (7 before the new level had to hold: a 2-3 step hiccup was confirmed.)
constexpr int kPlaceBound = 2;
constexpr int kDetectBound = 13;

}  // namespace

TEST(Detect, constant_input_has_no_change) {
  for (double v : {0.0, 1e-6, 0.2, 3.5}) {
    EXPECT_TRUE(detect_series(std::vector<double>(500, v), 0).empty()) << v;
  }
}

TEST(Detect, step_change_found_and_verified) {
  const auto x = series(200, {{0, 0.2}, {100, 0.35}}, 0.02, 7);
  const auto cps = detect_series(x, 1000);
  ASSERT_EQ(cps.size(), 1u);
  EXPECT_NEAR(static_cast<double>(cps[0].step), 1100.0, kPlaceBound);
  EXPECT_LE(cps[0].detected_at - 1100, kDetectBound);
  EXPECT_EQ(cps[0].direction(), +1);
  EXPECT_GT(cps[0].rel_change, 0.3);
}

TEST(Detect, aba_reports_a_change_and_a_recovery) {
  const auto x = series(300, {{0, 0.2}, {100, 0.35}, {200, 0.2}}, 0.02, 3);
  const auto cps = detect_series(x, 0);
  ASSERT_EQ(cps.size(), 2u);
  EXPECT_EQ(cps[0].direction(), +1);
  EXPECT_EQ(cps[1].direction(), -1);
  EXPECT_NEAR(static_cast<double>(cps[1].step), 200.0, kPlaceBound);
}

TEST(Detect, verification_drops_small_changes_and_close_ones) {
  // 5% shift: BOCPD sees it (noise 0.5%), FALCON's 10% rule rejects it.
  Detector d;
  const auto x = series(300, {{0, 0.2}, {150, 0.21}}, 0.005, 11);
  for (std::size_t t = 0; t < x.size(); ++t) d.observe(static_cast<std::int64_t>(t), x[t]);
  EXPECT_TRUE(d.changes().empty());
  EXPECT_GT(d.candidates_rejected(), 0);
  // A 6-step burst does not hold for min_gap = 10 steps: a transient (counted, with its length),
  // not a change. With min_gap = 3 it holds long enough: a change and its recovery, the
  // recovery closer than min_gap to the onset because it returns to the level before it.
  const auto y = series(200, {{0, 0.2}, {100, 0.4}, {106, 0.2}}, 0.01, 5);
  Detector dy;
  for (std::size_t t = 0; t < y.size(); ++t) dy.observe(static_cast<std::int64_t>(t), y[t]);
  EXPECT_TRUE(dy.changes().empty());
  ASSERT_EQ(dy.transients_total(), 1);
  EXPECT_NEAR(static_cast<double>(dy.transients()[0].step), 100.0, kPlaceBound);
  EXPECT_EQ(dy.transients()[0].steps, 106 - dy.transients()[0].step);
  EXPECT_EQ(dy.transients()[0].direction(), +1);
  DetectConfig loose;
  loose.min_gap = 3;
  const auto pair = detect_series(y, 0, loose);
  ASSERT_EQ(pair.size(), 2u);
  EXPECT_EQ(pair[0].direction(), +1);
  EXPECT_EQ(pair[1].direction(), -1);
  // A second step up 5 steps after the first is closer than min_gap and no return: dropped.
  const auto z = series(200, {{0, 0.2}, {100, 0.3}, {105, 0.45}}, 0.005, 5);
  const auto up = detect_series(z, 0);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_NEAR(static_cast<double>(up[0].step), 100.0, kPlaceBound);
}

TEST(Detect, isolated_outliers_are_not_changes) {
  auto x = series(400, {{0, 0.2}}, 0.02, 9);
  for (int t : {50, 120, 121, 250, 333}) x[t] = 0.9;  // single and double spikes
  Detector d;
  for (std::size_t t = 0; t < x.size(); ++t) d.observe(static_cast<std::int64_t>(t), x[t]);
  EXPECT_TRUE(d.changes().empty());
  EXPECT_EQ(d.outliers_dropped(), 5);
}

// Issue 14, class 2: a sustained shift of any size is found (30x, 100x, 1000x were missed: the
// outlier density was flat even above its range, so a new run never learned the new level); a
// single value 1000x the level is still an isolated outlier.
TEST(DetectFix, a_sustained_shift_of_any_size_is_found) {
  for (double ratio : {10.0, 30.0, 100.0, 1000.0, 0.02}) {
    int found = 0;
    for (std::uint64_t seed = 0; seed < 50; ++seed) {
      const auto x = series(200, {{0, 0.2}, {100, 0.2 * ratio}}, 0.02, seed);
      const auto cps = detect_series(x, 0);
      found += cps.size() == 1 && std::abs(cps[0].step - 100) <= kPlaceBound && cps[0].detected_at - 100 <= kDetectBound;
    }
    EXPECT_EQ(found, 50) << "ratio " << ratio;
  }
  auto x = series(200, {{0, 0.2}}, 0.02, 1);
  x[100] = 200;
  EXPECT_TRUE(detect_series(x, 0).empty());
}

// Issue 14, class 3: the prior was anchored on the first value, so a slow warm-up step (>= 5x the
// steady level) or a zero first step hid a later +75 % shift (0 of 50 found).
TEST(DetectFix, a_slow_or_zero_first_step_does_not_set_the_scale) {
  for (double first : {0.0, 0.002, 1.0, 2.0, 20.0}) {
    int found = 0;
    for (std::uint64_t seed = 0; seed < 50; ++seed) {
      auto x = series(200, {{0, 0.2}, {100, 0.35}}, 0.02, seed);
      x[0] = first;
      const auto cps = detect_series(x, 0);
      found += cps.size() == 1 && std::abs(cps[0].step - 100) <= kPlaceBound;
    }
    EXPECT_EQ(found, 50) << "first value " << first;
  }
}

// Issue 14, class 4: bursts of several steps (longer than the two held-back outliers) every 20
// steps made a storm of "slower" changes with no recovery. A burst that holds for K = min_gap
// steps in the halves rule (8 or more of the first 10 values) is a change and its recovery, in
// alternation, the recovery within 2 steps of the burst's end; a shorter one is a transient, one
// per burst (until the live false alarms of issue 14, 3- and 5-step bursts were pairs too).
TEST(DetectFix, bursts_are_transients_or_change_and_recovery_pairs_not_a_storm) {
  for (int len : {3, 5, 7}) {
    auto x = series(300, {{0, 0.2}}, 0.02, static_cast<std::uint64_t>(len));
    for (int t = 10; t < 300; t += 20)
      for (int k = 0; k < len; ++k) x[t + k] = 0.6;
    Detector d;
    for (std::size_t t = 0; t < x.size(); ++t) d.observe(static_cast<std::int64_t>(t), x[t]);
    EXPECT_TRUE(d.changes().empty()) << len;
    EXPECT_EQ(d.transients_total(), 15) << len;
    for (const auto& tr : d.transients()) {
      EXPECT_LE(std::abs((tr.step - 10) % 20), kPlaceBound) << "transient at " << tr.step;
      EXPECT_LE(std::abs(tr.steps - len), kPlaceBound) << "transient at " << tr.step;
    }
  }
  for (int len : {8, 12}) {
    auto x = series(300, {{0, 0.2}}, 0.02, static_cast<std::uint64_t>(len));
    for (int t = 10; t < 300; t += 20)
      for (int k = 0; k < len && t + k < 300; ++k) x[t + k] = 0.6;
    const auto cps = detect_series(x, 0);
    ASSERT_FALSE(cps.empty()) << len;
    int expect = +1, recoveries = 0;
    for (const auto& c : cps) {
      EXPECT_EQ(c.direction(), expect) << "burst length " << len << ", change at " << c.step;
      if (c.direction() < 0) {
        ++recoveries;
        EXPECT_LE(std::abs((c.step - 10) % 20 - len), kPlaceBound) << "recovery at " << c.step;
      }
      expect = -expect;
    }
    EXPECT_GE(recoveries, 13) << len;
  }
}

TEST(Detect, periodic_spikes_are_periodic_not_a_storm) {
  auto x = series(200, {{0, 0.2}}, 0.02, 4);
  for (int t = 13; t < 200; t += 5) x[t] += 0.15;
  const auto cps = detect_series(x, 0);
  EXPECT_TRUE(cps.empty());
  const auto p = sf::detect::periodicity(x, 0);
  EXPECT_EQ(p.period, 5);
  EXPECT_EQ(p.phase, 13);  // the first spike, not the first step of its residue class
  EXPECT_EQ(p.burst, 1);
  // A level shift alone is no period.
  const auto y = series(200, {{0, 0.2}, {100, 0.3}}, 0.02, 4);
  EXPECT_EQ(sf::detect::periodicity(y, 0).period, 0);
}

// Issue 14, class 1: only segments between kept change points had their mean removed, so a
// level shift too small to be reported left a step in the series that passed for a period of
// 2-4 steps (8 of 8 seeds of a 20 ms A/B/A in sim). No seed may find a period in a level shift,
// an A/B/A or a drift, detected or not; true periodic spikes still are found.
TEST(DetectPeriod, a_level_shift_detected_or_not_is_no_period) {
  int periods = 0;
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    for (double shift : {0.05, 0.1, 0.3, 2.0}) {
      const auto up = series(200, {{0, 0.2}, {100, 0.2 * (1 + shift)}}, 0.02, seed);
      const auto aba = series(200, {{0, 0.2}, {60, 0.2 * (1 + shift)}, {140, 0.2}}, 0.02, seed);
      const auto short_b = series(200, {{0, 0.2}, {100, 0.2 * (1 + shift)}, {160, 0.2}}, 0.02, seed);
      for (const auto* x : {&up, &aba, &short_b}) {
        const auto p = sf::detect::periodicity(*x, 0);
        periods += p.period > 0;
        if (p.period > 0) ADD_FAILURE() << "seed " << seed << " shift " << shift << ": period " << p.period;
      }
    }
    std::vector<double> drift = series(200, {{0, 0.2}}, 0.02, seed);
    for (int t = 0; t < 200; ++t) drift[t] *= 1 + 0.5 * t / 200.0;
    periods += sf::detect::periodicity(drift, 0).period > 0;
  }
  EXPECT_EQ(periods, 0);
}

TEST(DetectPeriod, periodic_spikes_and_bursts_found_from_the_first_spike) {
  for (int every : {5, 7, 11}) {
    auto x = series(200, {{0, 0.07}}, 0.03, static_cast<std::uint64_t>(every));
    for (int t = 20; t < 150; t += every) x[t] += 0.03;  // the fault from step 20 to 149
    const auto p = sf::detect::periodicity(x, 100);
    EXPECT_EQ(p.period, every);
    EXPECT_EQ(p.phase, 120) << every;  // "from step 120", not the residue class's first step
    EXPECT_GE(p.repeats, 130 / every - 1);
  }
  auto b = series(300, {{0, 0.2}}, 0.02, 3);
  for (int t = 10; t < 300; t += 20)
    for (int k = 0; k < 5; ++k) b[t + k] = 0.6;
  const auto p = sf::detect::periodicity(b, 0);
  EXPECT_EQ(p.period, 20);
  EXPECT_EQ(p.burst, 5);
  EXPECT_EQ(p.phase, 10);
  EXPECT_EQ(p.spike_steps.size(), 75u);
  // Fewer than min_repeats spikes are no period.
  auto few = series(60, {{0, 0.2}}, 0.02, 3);
  for (int t = 40; t < 60; t += 7) few[t] += 0.2;
  EXPECT_EQ(sf::detect::periodicity(few, 0).period, 0);
}

// Issue 14, class 13: a step not observed is a NaN in place, so lags and the phase stay in steps
// (the report used to drop unscored steps and then place things by step offset).
TEST(DetectPeriod, steps_not_observed_keep_lags_in_steps) {
  auto x = series(200, {{0, 0.2}}, 0.02, 8);
  for (int t = 32; t < 200; t += 6) x[t] += 0.1;
  for (int t : {3, 4, 5, 10, 11}) x[t] = NAN;
  const auto p = sf::detect::periodicity(x, 0);
  EXPECT_EQ(p.period, 6);
  EXPECT_EQ(p.phase, 32);
}

/// A/B/A runs shaped like mpi.detect_aba on a loaded machine: 58 steps at 0.06 s with relative
/// noise `noise`, +0.15 s from step 20 to 39, and load spikes of +`spike`·0.06 s every 4 steps at
/// a seed-chosen phase. Counts, over `seeds` runs, the transitions missed (no change within 3
/// steps) and the changes found in the same series without the fault (false alarms).
struct SpikeTally {
  int missed_onsets = 0, missed_offsets = 0, false_alarms = 0;
};
SpikeTally spike_trains(double noise, double spike, int seeds, const DetectConfig& cfg) {
  SpikeTally out;
  for (int seed = 0; seed < seeds; ++seed) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
    std::normal_distribution<double> z(0, 1);
    std::vector<double> aba, healthy;
    for (int t = 0; t < 58; ++t) {
      const double base = 0.06 * (1 + noise * z(rng)), load = (t + seed) % 4 == 0 ? 0.06 * spike : 0.0;
      healthy.push_back(std::max(0.0, base + load));
      aba.push_back(std::max(0.0, base + load + (t >= 20 && t < 40 ? 0.15 : 0.0)));
    }
    bool on = false, off = false;
    for (const auto& c : detect_series(aba, 0, cfg)) {
      on = on || std::abs(c.step - 20) <= 3;
      off = off || std::abs(c.step - 40) <= 3;
    }
    out.missed_onsets += !on;
    out.missed_offsets += !off;
    out.false_alarms += static_cast<int>(detect_series(healthy, 0, cfg).size());
  }
  return out;
}

// The table in docs/detect.md ("Robust to spikes"): a train of load spikes must neither hide a 3.5x
// level shift nor pass for one. Plain BOCPD (contamination 0) misses 6 % of the onsets at 15 %
// noise with +200 % spikes and raises ~0.08 false alarms per healthy run (42 % and ~0.3 before
// the issue-14 prior); the contaminated likelihood must stay under 3 % misses and 0.05 false
// alarms per run in every row.
TEST(DetectRobust, spike_trains_neither_hide_a_shift_nor_pass_for_one) {
  constexpr int kSeeds = 400;
  DetectConfig plain;
  plain.contamination = 0;
  const DetectConfig robust;
  const std::vector<std::pair<double, double>> rows = {{0.03, 0}, {0.03, 1}, {0.03, 2}, {0.15, 0}, {0.15, 1}, {0.15, 2}};
  std::printf("noise spike | contamination 0: missed onsets/offsets, false alarms | %.2f: same (of %d runs)\n",
              robust.contamination, kSeeds);
  for (const auto& [noise, spike] : rows) {
    const SpikeTally a = spike_trains(noise, spike, kSeeds, plain), b = spike_trains(noise, spike, kSeeds, robust);
    std::printf("%4.0f%% +%3.0f%% | %3d/%3d %3d | %3d/%3d %3d\n", noise * 100, spike * 100, a.missed_onsets,
                a.missed_offsets, a.false_alarms, b.missed_onsets, b.missed_offsets, b.false_alarms);
    EXPECT_LE(b.missed_onsets + b.missed_offsets, 2 * kSeeds * 3 / 100) << noise << " " << spike;
    EXPECT_LE(b.false_alarms, kSeeds * 5 / 100) << noise << " " << spike;
  }
  // The failure it fixes is real in the plain model: it misses more than 3 % of the onsets in the
  // worst row (this guards the test, not the detector; since a new level must hold K steps the
  // plain model's false alarms fell from 31 to ~10 and its misses and false alarms together no
  // longer pass the sum of both limits, so the guard counts onsets only).
  const SpikeTally worst = spike_trains(0.15, 2, kSeeds, plain);
  EXPECT_GT(worst.missed_onsets, kSeeds * 3 / 100);
}

/// A series of tests/data/detect/: one value per line, `#` lines a header with "# first_step N".
std::pair<std::vector<double>, std::int64_t> live_series(const std::string& name) {
  std::ifstream in(std::string(SF_SOURCE_DIR) + "/tests/data/detect/" + name);
  std::vector<double> x;
  std::int64_t first = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# first_step ", 0) == 0) first = std::stoll(line.substr(13));
    if (!line.empty() && line[0] != '#') x.push_back(std::stod(line));
  }
  return {x, first};
}

// Issue 14 (audit, live false alarms): two healthy 2500-step live runs at 8 ranks on a loaded
// 2-core VM reported 7 and 4 change points, 2-3-step bumps of 10-16 % confirmed as onsets (and
// their returns as recoveries). A new level must now hold K steps: none is a change, the bumps are
// counted as transients; the live A/B/A at the smallest delay (12 ms on ~67 ms steps, +13 %) still
// gives its onset at 55 and its recovery at 105 in all three seeds.
TEST(DetectLive, healthy_live_bumps_are_transients_and_a_12ms_aba_is_found) {
  for (const char* name : {"live_none_2500_seed2.txt", "live_none_2500_seed3.txt"}) {
    const auto [x, first] = live_series(name);
    ASSERT_EQ(x.size(), 2500u) << name;
    Detector d;
    for (std::size_t i = 0; i < x.size(); ++i) d.observe(first + static_cast<std::int64_t>(i), x[i]);
    EXPECT_TRUE(d.changes().empty()) << name << ": first change at " << (d.changes().empty() ? -1 : d.changes()[0].step);
    EXPECT_GE(d.transients_total(), 1) << name;
    for (const auto& t : d.transients()) EXPECT_LE(t.steps, 3) << name << " transient at " << t.step;
  }
  for (const char* name : {"live_aba_12ms_seed1.txt", "live_aba_12ms_seed2.txt", "live_aba_12ms_seed3.txt"}) {
    const auto [x, first] = live_series(name);
    ASSERT_EQ(x.size(), 150u) << name;
    const auto cps = detect_series(x, first);
    ASSERT_EQ(cps.size(), 2u) << name;
    EXPECT_LE(std::abs(cps[0].step - 55), kPlaceBound) << name;
    EXPECT_EQ(cps[0].direction(), +1) << name;
    EXPECT_LE(std::abs(cps[1].step - 105), kPlaceBound) << name;
    EXPECT_EQ(cps[1].direction(), -1) << name;
  }
}

TEST(Detect, bad_input_throws_one_line) {
  Detector d;
  d.observe(5, 0.1);
  EXPECT_THROW(d.observe(5, 0.1), std::invalid_argument);
  EXPECT_THROW(d.observe(6, NAN), std::invalid_argument);
  EXPECT_THROW(d.observe(7, -1), std::invalid_argument);
  DetectConfig bad;
  bad.hazard = 0;
  EXPECT_FALSE(sf::detect::validate(bad).empty());
  EXPECT_THROW(Detector{bad}, std::invalid_argument);
}

/// What Detector::state_size() may hold for a run-length cap and a change cap: posterior, four
/// statistics, the Student-t constants, work buffers and inlier weights per run length, the
/// history (2 values per step), the level window, the verification buffers (and the half-window
/// of the hold check), three held outliers, the kept changes and the held candidate
/// (ChangePoint's 8 values each) and the kept transients (6 values each).
std::size_t state_bound(const DetectConfig& c) {
  const std::size_t cap = static_cast<std::size_t>(c.max_run_length) + 1;
  return 5 * cap + 4 * cap + 2 * (cap - 1) + cap + static_cast<std::size_t>(c.level_window) +
         2 * static_cast<std::size_t>(c.max_outlier_run + 1) + 8 * static_cast<std::size_t>(c.max_changes_kept + 1) +
         cap / 2 + 1 + 6 * static_cast<std::size_t>(c.max_transients_kept);
}

// Issue 14, class 5: a run that flaps every 12 steps for 10^6 steps confirms ~83,000 changes; the
// detector keeps the last max_changes_kept of them, counts the rest, and state_size() counts the
// kept ones (it did not, and the list grew without limit).
TEST(Detect, state_stays_bounded_over_a_million_steps) {
  DetectConfig cfg;
  cfg.max_run_length = 64;
  cfg.short_run = 8;
  cfg.max_changes_kept = 32;
  Detector d(cfg);
  std::size_t most = 0;
  for (std::int64_t t = 0; t < 1'000'000; ++t) {
    d.observe(t, (t / 12) % 2 ? 0.4 : 0.2);
    most = std::max(most, d.state_size());
  }
  EXPECT_LE(most, state_bound(cfg));
  EXPECT_EQ(d.changes().size(), 32u);
  EXPECT_GE(d.changes_total(), 80'000);
  EXPECT_GE(d.changes().back().step, 1'000'000 - 3 * 12);  // the most recent are the ones kept
}

// ---- properties ---------------------------------------------------------------------------------

RC_GTEST_PROP(DetectProp, no_change_on_constant_input, ()) {
  const double v = *rc::gen::inRange(0, 100000) * 1e-5;
  const int n = *rc::gen::inRange(1, 400);
  RC_ASSERT(detect_series(std::vector<double>(static_cast<std::size_t>(n), v), 0).empty());
}

RC_GTEST_PROP(DetectProp, step_change_found_within_the_stated_bound, ()) {
  const double a = *rc::gen::inRange(50, 500) * 1e-3;          // 50..500 ms
  const double ratio = *rc::gen::inRange(120, 300) * 1e-2;     // ≥ 20% up, or down below
  const bool up = *rc::gen::arbitrary<bool>();
  const double b = up ? a * ratio : a / ratio;
  const int onset = *rc::gen::inRange(20, 150);
  const double sd = *rc::gen::inRange(0, 20) * 1e-3;           // ≤ 2% noise
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 30);
  const auto x = series(onset + 40, {{0, a}, {onset, b}}, sd, seed);
  const auto cps = detect_series(x, 0);
  RC_ASSERT(cps.size() == 1u);
  RC_ASSERT(std::abs(cps[0].step - onset) <= kPlaceBound);
  RC_ASSERT(cps[0].detected_at - onset <= kDetectBound);
  RC_ASSERT(cps[0].direction() == (up ? 1 : -1));
}

RC_GTEST_PROP(DetectProp, shifting_the_input_in_time_shifts_the_change_points, ()) {
  const int onset = *rc::gen::inRange(20, 100);
  const double sd = *rc::gen::inRange(0, 20) * 1e-3;
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 30);
  const auto x = series(onset + 60, {{0, 0.2}, {onset, 0.32}, {onset + 30, 0.2}}, sd, seed);
  const std::int64_t shift = *rc::gen::inRange<std::int64_t>(-1000000, 1000000);
  const auto c0 = detect_series(x, 0);
  const auto c1 = detect_series(x, shift);
  RC_ASSERT(c0.size() == c1.size());
  for (std::size_t i = 0; i < c0.size(); ++i) {
    RC_ASSERT(c1[i].step == c0[i].step + shift);
    RC_ASSERT(c1[i].detected_at == c0[i].detected_at + shift);
  }
  // Noise-free, prepending k more steps of the first level delays every change by k.
  const auto clean = series(onset + 60, {{0, 0.2}, {onset, 0.32}, {onset + 30, 0.2}}, 0.0, 0);
  const int k = *rc::gen::inRange(0, 80);
  std::vector<double> longer(static_cast<std::size_t>(k), 0.2);
  longer.insert(longer.end(), clean.begin(), clean.end());
  const auto d0 = detect_series(clean, 0);
  const auto d1 = detect_series(longer, 0);
  RC_ASSERT(d0.size() == d1.size());
  for (std::size_t i = 0; i < d0.size(); ++i) RC_ASSERT(d1[i].step == d0[i].step + k);
}

RC_GTEST_PROP(DetectProp, state_bounded_by_the_run_length_cap, ()) {
  DetectConfig cfg;
  cfg.max_run_length = *rc::gen::inRange(16, 128);
  cfg.short_run = 8;
  Detector d(cfg);
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 30);
  const auto x = series(2000, {{0, 0.2}, {700, 0.5}, {1400, 0.1}}, 0.05, seed);
  const std::size_t cap = static_cast<std::size_t>(cfg.max_run_length) + 1;
  for (std::size_t t = 0; t < x.size(); ++t) {
    d.observe(static_cast<std::int64_t>(t), x[t]);
    RC_ASSERT(d.run_length_posterior().size() <= cap);
    RC_ASSERT(d.state_size() <= state_bound(cfg));
    double sum = 0;
    for (double p : d.run_length_posterior()) sum += p;
    RC_ASSERT(std::abs(sum - 1) < 1e-9);
  }
}

// ---- diagnosis and culprit stability on a stage matrix -----------------------------------------

namespace {

/// Four ranks, default schema; rank 2's data stage is slow (+delay) in the steps `slow` says.
sf::frontier::StageMatrix matrix(int steps, const std::function<bool(int)>& slow, double delay = 0.15) {
  using namespace sf::frontier;
  StageMatrix m(StageSchema::default_schema(), 4, 0, steps);
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> j(0.98, 1.02);
  for (int t = 0; t < steps; ++t)
    for (int r = 0; r < 4; ++r) {
      std::vector<double> d{0.012 * j(rng), 0.036 * j(rng), 0.125 * j(rng), 0.005 * j(rng), 0.010 * j(rng)};
      if (r == 2 && slow(t)) d[0] += delay;
      double wall = 0;
      for (double v : d) wall += v;
      m.set_record(t, r, d, wall + 0.001);
    }
  return m;
}

}  // namespace

TEST(DetectDiagnosis, aba_window_names_the_moved_stage) {
  const auto m = matrix(120, [](int t) { return t >= 40 && t < 80; });
  const auto acc = sf::frontier::account(m);
  std::vector<double> f(120);
  for (int t = 0; t < 120; ++t) f[t] = acc.exposed(t);
  const auto cps = detect_series(f, 0);
  ASSERT_EQ(cps.size(), 2u);
  const auto d = sf::detect::diagnose(m, cps, {});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(m.schema().groups()[d[0].moved_group], "data.next_wait");
  EXPECT_EQ(d[0].after.suspect.rank, 2);
  EXPECT_GT(d[0].share_delta[0], 0.2);
  EXPECT_EQ(m.schema().groups()[d[1].moved_group], "data.next_wait");  // recovery: data shrank most
  EXPECT_LT(d[1].share_delta[0], -0.2);
}

TEST(DetectStability, chronic_one_off_intermittent_none) {
  using sf::detect::Stability;
  auto classify = [](const std::function<bool(int)>& slow) {
    const auto m = matrix(120, slow);
    const auto acc = sf::frontier::account(m);
    const auto st = sf::detect::culprit_stability(m, acc, 0, {});
    return st;
  };
  const auto chronic = classify([](int) { return true; });
  EXPECT_EQ(chronic.stability, Stability::chronic) << chronic.evidence;
  EXPECT_EQ(chronic.culprit, 2);
  EXPECT_EQ(chronic.windows_led, 6);
  EXPECT_EQ(classify([](int t) { return t >= 60; }).stability, Stability::chronic);  // since step 60, ongoing
  const auto one = classify([](int t) { return t >= 40 && t < 60; });
  EXPECT_EQ(one.stability, Stability::one_off) << one.evidence;
  const auto periodic = classify([](int t) { return t % 5 == 3; });
  EXPECT_EQ(periodic.stability, Stability::intermittent) << periodic.evidence;
  EXPECT_LT(periodic.step_fraction_in_led, 0.5);
  const auto twice = classify([](int t) { return (t >= 20 && t < 40) || (t >= 80 && t < 100); });
  EXPECT_EQ(twice.stability, Stability::intermittent) << twice.evidence;
  EXPECT_EQ(twice.episodes, 2);
  const auto healthy = classify([](int) { return false; });
  EXPECT_EQ(healthy.stability, Stability::none) << healthy.evidence;
}

// Issue 14, class 5: culprit stability is tallied window by window in bounded memory; the last
// max_windows_kept window records are kept, the classification counts every window.
TEST(DetectStability, tracker_keeps_the_last_windows_and_counts_them_all) {
  const auto m = matrix(120, [](int t) { return t >= 30 && t < 70; });
  const auto acc = sf::frontier::account(m);
  sf::detect::StabilityConfig all, few;
  all.window_steps = few.window_steps = 4;
  few.max_windows_kept = 5;
  const auto a = sf::detect::culprit_stability(m, acc, 0, all);
  const auto b = sf::detect::culprit_stability(m, acc, 0, few);
  EXPECT_EQ(a.windows.size(), 30u);
  EXPECT_EQ(b.windows.size(), 5u);
  EXPECT_EQ(b.windows_total, 30);
  EXPECT_EQ(b.windows.back().last_step, 119);
  EXPECT_EQ(a.stability, b.stability);
  EXPECT_EQ(a.culprit, b.culprit);
  EXPECT_EQ(a.windows_led, b.windows_led);
  EXPECT_EQ(a.evidence, b.evidence);
  EXPECT_EQ(b.stability, sf::detect::Stability::one_off) << b.evidence;
  // Each window lists its top ranks (at most kept_ranks), the culprit first.
  for (const auto& w : a.windows) {
    EXPECT_LE(w.ranks.size(), 4u);
    if (w.culprit >= 0) {
      EXPECT_EQ(w.ranks.front().rank, w.culprit);
    }
  }
}

// A periodic culprit leads its windows' advance by far at its spikes and by a hair at the quiet
// steps it happens to lead; the margin rule weighs each led step by the advance credited there.
// (Unweighted, one spike per 10-step window and two or three chance leads made no culprit at all:
// the quick detect experiment's live --every 5 row said "none".)
TEST(DetectStability, a_periodic_culprit_is_found_in_short_windows) {
  const auto m = matrix(120, [](int t) { return t % 10 == 3; });
  const auto acc = sf::frontier::account(m);
  sf::detect::StabilityConfig cfg;
  cfg.window_steps = 10;
  const auto st = sf::detect::culprit_stability(m, acc, 0, cfg);
  EXPECT_EQ(st.culprit, 2);
  EXPECT_EQ(st.windows_led, 12) << st.evidence;
  EXPECT_EQ(st.stability, sf::detect::Stability::intermittent) << st.evidence;
  // A rank a hair slower at every quiet step (so it leads them by < 5 %) and spiking every 5 steps
  // is intermittent, not chronic: only the spikes are clear leads.
  using sf::frontier::StageMatrix;
  StageMatrix hair = matrix(120, [](int t) { return t % 5 == 3; });
  for (int t = 0; t < 120; ++t) {
    std::vector<double> d;
    for (int s = 0; s < 5; ++s) d.push_back(hair.d(t, 2, s));
    d[0] += 0.002;
    double wall = 0;
    for (double v : d) wall += v;
    hair.set_record(t, 2, d, wall + 0.001);
  }
  const auto hs = sf::detect::culprit_stability(hair, sf::frontier::account(hair), 0, cfg);
  EXPECT_EQ(hs.culprit, 2);
  EXPECT_EQ(hs.stability, sf::detect::Stability::intermittent) << hs.evidence;
  // Healthy: still no culprit in any window.
  const auto h = matrix(120, [](int) { return false; });
  const auto healthy = sf::detect::culprit_stability(h, sf::frontier::account(h), 0, cfg);
  EXPECT_EQ(healthy.stability, sf::detect::Stability::none) << healthy.evidence;
}

TEST(Detect, student_t_constant_matches_a_long_double_lgamma_on_both_sides_of_the_switch) {
  // The series takes over at α = 10; a wrong coefficient or a dropped term shows here.
  // (Up to α = 1000: past it the long-double reference itself loses digits to cancellation.)
  for (double alpha : {0.5, 1.0, 2.5, 9.75, 9.999, 10.0, 10.001, 10.5, 12.0, 37.25, 100.0, 130.5, 1e3}) {
    const long double a = alpha;
    const long double want = lgammal(a + 0.5L) - lgammal(a) - 0.5L * logl(2 * a * 3.141592653589793238462643383279502884L);
    EXPECT_NEAR(sf::detect::student_t_log_const(alpha), static_cast<double>(want), 2e-14) << "alpha " << alpha;
  }
}
