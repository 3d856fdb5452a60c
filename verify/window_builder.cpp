// The one deterministic window builder of the project: unit tests, the §6.1 fixtures and the
// benchmarks all build their synthetic windows here.
#include "sf/verify/verify.h"

#include <algorithm>
#include <stdexcept>

namespace sf::verify {

void build_step(const WindowSpec& spec, SplitMix64& rng, frontier::StageMatrix& m, int t) {
  constexpr int kData = 0, kFwd = 1, kBwd = 2;
  const int R = spec.ranks;
  std::vector<std::array<double, 5>> x(R);
  double sync_at = 0;
  for (int r = 0; r < R; ++r) {
    for (int s = 0; s < 5; ++s) x[r][s] = spec.base_s[s] * rng.uniform(1 - spec.jitter_rel, 1 + spec.jitter_rel);
    if (r == spec.slow_rank)
      for (int s = 0; s < 5; ++s) x[r][s] *= spec.slow_scale;
    if (r == spec.slow_rank || std::find(spec.also_slow.begin(), spec.also_slow.end(), r) != spec.also_slow.end())
      x[r][spec.slow_stage] += spec.delay_s;
    sync_at = std::max(sync_at, x[r][kData] + x[r][kFwd] + x[r][kBwd]);
  }
  for (int r = 0; r < R; ++r) {
    std::array<double, 5> d = x[r];
    // Host-visible wait in backward: every rank leaves the collective when the last arrives.
    const double wait = spec.sync_backward ? sync_at - (x[r][kData] + x[r][kFwd] + x[r][kBwd]) : 0.0;
    d[kBwd] += wait;
    double sum = 0;
    for (double v : d) sum += v;
    m.set_record(t, r, d, sum * (1 + spec.residual_rel * rng.uniform(0.5, 1.5)));
    if (spec.record_sync_wait && spec.sync_backward) m.set_sync_wait(t, r, kBwd, wait);
  }
}

frontier::StageMatrix build_window(const WindowSpec& spec) {
  if (spec.ranks < 1 || spec.steps < 0) throw std::invalid_argument("build_window: need ranks >= 1, steps >= 0");
  if (spec.slow_stage < 0 || spec.slow_stage > 4) throw std::invalid_argument("build_window: slow_stage outside 0..4");
  frontier::StageMatrix m(frontier::StageSchema::default_schema(), spec.ranks, spec.first_step, spec.steps);
  SplitMix64 rng(spec.seed);
  for (int t = 0; t < spec.steps; ++t) build_step(spec, rng, m, t);
  return m;
}

}  // namespace sf::verify
