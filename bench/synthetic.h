// A deterministic synthetic window for the benchmarks and the CSV generator: the default
// six-stage schema, stage times of a plausible data-parallel step with a few ms of jitter,
// and one slow rank whose backward pass runs 12 ms long.
#pragma once

#include "sf/frontier/frontier.h"

#include <array>
#include <cstdint>

namespace sf::bench {

/// SplitMix64: the same stream on every platform and standard library (std::*_distribution
/// is not), so the matrix and the CSV are byte-identical everywhere.
class SplitMix64 {
public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  ///< [0, 1)

private:
  std::uint64_t state_;
};

/// The slow rank of synthetic_matrix(ranks, …).
inline int synthetic_slow_rank(int ranks) { return ranks / 3; }

/// R ranks × N steps of the default schema (five explicit stages + residual), every cell present.
inline frontier::StageMatrix synthetic_matrix(int ranks, int steps, std::uint64_t seed = 20240601) {
  // data wait, forward, backward, callbacks, optimizer (seconds); jitter is uniform [0, 3 ms).
  constexpr std::array<double, 5> kBase = {0.004, 0.030, 0.055, 0.002, 0.008};
  constexpr double kJitter = 0.003, kSlowBackward = 0.012, kOtherCpu = 0.001;
  frontier::StageMatrix m(frontier::StageSchema::default_schema(), ranks, 0, steps);
  SplitMix64 rng(seed);
  const int slow = synthetic_slow_rank(ranks);
  std::array<double, 5> d{};
  for (int t = 0; t < steps; ++t)
    for (int r = 0; r < ranks; ++r) {
      double sum = 0;
      for (std::size_t s = 0; s < d.size(); ++s) {
        d[s] = kBase[s] + kJitter * rng.uniform();
        sum += d[s];
      }
      if (r == slow) {
        d[2] += kSlowBackward;
        sum += kSlowBackward;
      }
      const double wall = sum + kOtherCpu * (1 + rng.uniform());
      m.set_record(t, r, d, wall);
    }
  return m;
}

}  // namespace sf::bench
