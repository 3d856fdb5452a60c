// The benchmarks' synthetic window: the project's one window builder (sf::verify::build_window)
// with a ~100 ms step, a few percent of jitter and one slow rank whose backward runs 12 ms long,
// every rank present. Deterministic (SplitMix64), so the CSV written from it is byte-identical
// on every platform.
#pragma once

#include "sf/verify/verify.h"

#include <cstdint>

namespace sf::bench {

/// The slow rank of synthetic_matrix(ranks, …).
inline int synthetic_slow_rank(int ranks) { return ranks / 3; }

/// R ranks × N steps of the default schema (five explicit stages + residual), every cell present.
inline frontier::StageMatrix synthetic_matrix(int ranks, int steps, std::uint64_t seed = 20240601) {
  verify::WindowSpec spec;
  spec.ranks = ranks;
  spec.steps = steps;
  spec.base_s = {0.0055, 0.0315, 0.0565, 0.0035, 0.0095};  // data, forward, backward, callbacks, optimizer
  spec.jitter_rel = 0.05;
  spec.slow_rank = synthetic_slow_rank(ranks);
  spec.slow_stage = 2;
  spec.delay_s = 0.012;
  spec.sync_backward = false;  // the benchmark times the engine, not a particular sync pattern
  spec.residual_rel = 0.01;
  spec.seed = seed;
  return verify::build_window(spec);
}

}  // namespace sf::bench
