// Model-driven ranks (`sf-testbed sim`): the synthetic step as a timeline model instead of real
// processes, so scenarios can be scored at thousands of ranks without MPI or a clock.
#include "sf/sim/sim.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace sf::sim {

std::string validate(const ModelConfig& cfg) {
  if (cfg.fault.straggler != inject::StragglerKind::none)
    return "--straggler: the model has no process to slow from outside; run it with `sf-testbed run`";
  if (const auto* sc = inject::find_scenario(cfg.fault.scenario); sc && sc->site == inject::Site::link)
    return "--scenario " + cfg.fault.scenario + ": a real link fault has no model; run it with `sf-testbed run` across hosts "
           "(docs/cluster.md)";
  if (cfg.ranks < 1 || cfg.ranks > (1 << 24)) return "--ranks must be in [1, 16777216]";
  if (cfg.steps < 1 || static_cast<double>(cfg.steps) * cfg.ranks > 5e8) return "--steps x --ranks must be in [1, 5e8]";
  if (const auto v = validate(cfg.variation); !v.empty()) return v;
  if (const auto v = validate(cfg.layout); !v.empty()) return v;
  if (!(cfg.comm.latency_us >= 0) || !(cfg.comm.gib_per_s > 0)) return "--comm-latency-us must be >= 0 and --comm-gib-s > 0";
  if (cfg.event_q < 0 || cfg.event_q > 1) return "--event-q must be in [0, 1]";
  if (const auto v = validate(cfg.costs); !v.empty()) return v;
  return inject::validate(cfg.fault, cfg.ranks);
}

inject::FaultPlan model_plan(const ModelConfig& cfg) { return inject::make_plan(cfg.fault, cfg.ranks, cfg.seed); }

formats::Window model_window(const ModelConfig& cfg, const inject::FaultPlan& plan) {
  formats::Window w;
  w.matrix = frontier::StageMatrix(ModelStepper::schema(), cfg.ranks, 0, cfg.steps);
  for (int r = 0; r < cfg.ranks; ++r) w.ranks.push_back({r, r, 0, "model"});
  ModelStepper stepper(cfg, plan);
  for (int t = 0; t < cfg.steps; ++t) stepper.step_into(w.matrix, t);
  return w;
}

}  // namespace sf::sim
