// Model-driven ranks (`sf-testbed sim`): the synthetic step as a timeline model instead of real
// processes, so scenarios can be scored at thousands of ranks without MPI or a clock.
#include "sf/sim/sim.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace sf::sim {

std::string validate(const ModelConfig& cfg) {
  const auto* sc = inject::find_scenario(cfg.scenario);
  if (!sc) return "--scenario " + cfg.scenario + ": unknown (see sf-testbed scenarios)";
  if (sc->site == inject::Site::link)
    return "--scenario " + cfg.scenario + ": a real link fault has no model; run it with `sf-testbed run` across hosts "
           "(docs/cluster.md)";
  if (cfg.ranks < 1 || cfg.ranks > (1 << 20)) return "--ranks must be in [1, 1048576]";
  if (cfg.steps < 1 || static_cast<double>(cfg.steps) * cfg.ranks > 5e8) return "--steps x --ranks must be in [1, 5e8]";
  if (const auto v = validate(cfg.variation); !v.empty()) return v;
  if (const auto v = validate(cfg.layout); !v.empty()) return v;
  if (!(cfg.comm.latency_us >= 0) || !(cfg.comm.gib_per_s > 0)) return "--comm-latency-us must be >= 0 and --comm-gib-s > 0";
  if (cfg.event_q < 0 || cfg.event_q > 1) return "--event-q must be in [0, 1]";
  for (int r : cfg.target_ranks)
    if (r < 0 || r >= cfg.ranks) return "--target-rank " + std::to_string(r) + " outside 0.." + std::to_string(cfg.ranks - 1);
  if (cfg.delay_ms)
    if (auto why = inject::delay_bound_problem(*cfg.delay_ms); !why.empty()) return why;
  if (cfg.target_count < 1 || cfg.target_count > cfg.ranks)
    return "--targets " + std::to_string(cfg.target_count) + " outside 1.." + std::to_string(cfg.ranks);
  return "";
}

inject::FaultPlan model_plan(const ModelConfig& cfg) {
  inject::FaultPlan plan;
  plan.scenario = inject::find_scenario(cfg.scenario);
  plan.delay_ms = cfg.delay_ms.value_or(plan.scenario->default_delay_ms);
  plan.ranks = cfg.target_ranks.empty() ? inject::draw_targets(cfg.seed, cfg.ranks, cfg.target_count) : cfg.target_ranks;
  plan.onset = cfg.onset;
  plan.offset = cfg.offset;
  plan.every = cfg.every;
  return plan;
}

formats::Window model_window(const ModelConfig& cfg, const inject::FaultPlan& plan) {
  formats::Window w;
  w.matrix = frontier::StageMatrix(ModelStepper::schema(), cfg.ranks, 0, cfg.steps);
  for (int r = 0; r < cfg.ranks; ++r) w.ranks.push_back({r, r, 0, "model"});
  ModelStepper stepper(cfg, plan);
  for (int t = 0; t < cfg.steps; ++t) stepper.step_into(w.matrix, t);
  return w;
}

}  // namespace sf::sim
