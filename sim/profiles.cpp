// Named cost profiles (`--profile`): every number with where it comes from. None is chosen to
// make a detectability threshold land anywhere; `sf-testbed experiment sensitivity` shows how
// the thresholds move with them.
#include "sf/sim/sim.h"

namespace sf::sim {

const std::vector<CostProfile>& cost_profiles() {
  static const std::vector<CostProfile> list = [] {
    std::vector<CostProfile> v;
    {
      CostProfile p;
      p.name = "paper-like";
      p.origin =
          "The paper's healthy step: 207.8 ms median at 8 ranks (E6 A windows; Delay/p50 0.58 at 120 ms), "
          "callbacks 1.75% of it (3.6 ms), a data wait of ~1.2 ms (a 12 ms data tail gives a data share of "
          "0.06). The rest (~195 ms) is split forward:backward = 1:2, the usual FLOP ratio of training "
          "(backward computes gradients for activations and weights), with the optimizer at an assumed "
          "4% (8 ms) and host launch overhead an assumed ~30% of forward and ~12% of backward device time. "
          "Gradient layout: PyTorch's 1 MiB + 25 MiB buckets of a 100 MiB model (5 buckets), reduced at "
          "4 MiB so that 8-32 CPU ranks can afford it. Jitter: the backward-compute spread measured in "
          "the torch-mlp-cpu profile. Transport (sim only): MPI shared memory on the project's VM.";
      p.costs = StageCosts{};  // the member defaults are this profile
      p.layout = {4, 100, 25, 1};
      p.variation = {0.03, Heterogeneity::none, 0};
      p.comm = {50, 2};
      v.push_back(p);
    }
    return v;
  }();
  return list;
}

const CostProfile* find_profile(std::string_view name) {
  for (const auto& p : cost_profiles())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace sf::sim
