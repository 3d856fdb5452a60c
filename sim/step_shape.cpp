// The shape of the synthetic step beside its costs: sync mode, gradient buckets, seed-controlled
// cost variation and the model's transport. Shared by the workload (`run`) and the model (`sim`),
// so both draw the same numbers for the same seed.
#include "sf/sim/sim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace sf::sim {

std::string_view to_string(SyncMode m) { return m == SyncMode::single ? "single" : "bucketed"; }

std::optional<SyncMode> sync_mode_from_string(std::string_view s) {
  if (s == "single") return SyncMode::single;
  if (s == "bucketed") return SyncMode::bucketed;
  return std::nullopt;
}

std::string_view to_string(Heterogeneity h) {
  switch (h) {
    case Heterogeneity::none: return "none";
    case Heterogeneity::lognormal: return "lognormal";
    case Heterogeneity::two_tier: return "two-tier";
  }
  return "?";
}

std::optional<Heterogeneity> heterogeneity_from_string(std::string_view s) {
  if (s == "none") return Heterogeneity::none;
  if (s == "lognormal") return Heterogeneity::lognormal;
  if (s == "two-tier" || s == "two_tier") return Heterogeneity::two_tier;
  return std::nullopt;
}

// ---- gradient layout ------------------------------------------------------------------------------

std::string validate(const GradientLayout& l) {
  if (!(l.grad_mib > 0) || l.grad_mib > 4096) return "--grad-mib must be in (0, 4096]";
  if (!(l.model_mib > 0) || l.model_mib > 1e6) return "--model-mib must be in (0, 1e6]";
  if (!(l.bucket_cap_mib > 0)) return "--bucket-mib must be > 0";
  if (!(l.first_bucket_mib > 0)) return "--first-bucket-mib must be > 0";
  if (l.model_mib / l.bucket_cap_mib > 4096) return "--model-mib / --bucket-mib gives more than 4096 buckets";
  return "";
}

std::vector<std::size_t> bucket_floats(const GradientLayout& l, std::size_t multiple) {
  multiple = std::max<std::size_t>(1, multiple);
  // torch DDP (reducer.cpp, compute_bucket_assignment_by_size): the first bucket is capped at
  // 1 MiB so that communication starts early, the others at bucket_cap_mb; the last one holds the
  // rest. Parameters are filled in reverse registration order, the order backward produces them.
  std::vector<double> mib;
  double rest = l.model_mib;
  mib.push_back(std::min(l.first_bucket_mib, rest));
  rest -= mib.back();
  while (rest > 1e-9) {
    mib.push_back(std::min(l.bucket_cap_mib, rest));
    rest -= mib.back();
  }
  const double scale = l.grad_mib / l.model_mib;
  std::vector<std::size_t> out;
  for (double m : mib) {
    const double floats = m * scale * (1 << 20) / sizeof(float);
    const auto units = std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(floats / static_cast<double>(multiple))));
    out.push_back(units * multiple);
  }
  return out;
}

std::size_t total_grad_floats(const GradientLayout& l, std::size_t multiple) {
  std::size_t n = 0;
  for (auto b : bucket_floats(l, multiple)) n += b;
  return n;
}

// ---- seed-controlled variation --------------------------------------------------------------------

namespace {

std::uint64_t mix(std::uint64_t z) {  // SplitMix64's finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A standard normal from (seed, rank, step, slot) alone (Box–Muller on two hashed uniforms).
double normal(std::uint64_t seed, int rank, std::int64_t step, int slot) {
  std::uint64_t h = mix(seed ^ 0x51ed2701a3c5f1b9ull);
  h = mix(h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank)));
  h = mix(h ^ static_cast<std::uint64_t>(step));
  h = mix(h ^ static_cast<std::uint64_t>(slot));
  const double u1 = (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
  const double u2 = static_cast<double>(mix(h) >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

constexpr std::int64_t kRankDraw = -1;  // the step index of per-rank (persistent) draws

}  // namespace

std::string validate(const Variation& v) {
  if (!(v.jitter_sigma >= 0) || v.jitter_sigma > 1) return "--jitter must be in [0, 1]";
  if (!(v.rank_sigma >= 0) || v.rank_sigma > 2) return "--rank-sigma must be in [0, 2]";
  return "";
}

double rank_factor(const Variation& v, std::uint64_t seed, int rank) {
  switch (v.heterogeneity) {
    case Heterogeneity::none: return 1.0;
    case Heterogeneity::lognormal: return std::exp(v.rank_sigma * normal(seed, rank, kRankDraw, 0));
    case Heterogeneity::two_tier: return normal(seed, rank, kRankDraw, 1) > 0 ? 1.0 + v.rank_sigma : 1.0;
  }
  return 1.0;
}

StageCosts draw_costs(const StageCosts& base, const Variation& v, std::uint64_t seed, int rank, std::int64_t step) {
  const double f = rank_factor(v, seed, rank);
  auto draw = [&](double ms, int slot) {
    return v.jitter_sigma > 0 ? ms * f * std::exp(v.jitter_sigma * normal(seed, rank, step, slot)) : ms * f;
  };
  return {draw(base.data_ms, 0),     draw(base.loader_ms, 1),     draw(base.fwd_host_ms, 2), draw(base.fwd_device_ms, 3),
          draw(base.bwd_host_ms, 4), draw(base.bwd_device_ms, 5), draw(base.callbacks_ms, 6), draw(base.optim_ms, 7)};
}

double CommModel::seconds(double bytes, int ranks) const {
  if (ranks <= 1) return 0.0;
  const double hops = std::ceil(std::log2(static_cast<double>(ranks)));
  return latency_us * 1e-6 * hops + 2.0 * (ranks - 1) / ranks * bytes / (gib_per_s * 1073741824.0);
}

}  // namespace sf::sim
