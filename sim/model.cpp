// Model-driven ranks (`sf-testbed sim`): the synthetic step as a timeline model instead of real
// processes, so scenarios can be scored at thousands of ranks without MPI or a clock.
#include "sf/sim/sim.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace sf::sim {

std::string validate(const ModelConfig& cfg) {
  const auto* sc = inject::find_scenario(cfg.scenario);
  if (!sc) return "--scenario " + cfg.scenario + ": unknown (see sf-testbed scenarios)";
  if (sc->site == inject::Site::link)
    return "--scenario " + cfg.scenario + ": a real link fault has no model; run it with `sf-testbed run` across hosts "
           "(docs/cluster.md)";
  if (cfg.ranks < 1 || cfg.ranks > (1 << 20)) return "--ranks must be in [1, 1048576]";
  if (cfg.steps < 1 || static_cast<double>(cfg.steps) * cfg.ranks > 5e8) return "--steps x --ranks must be in [1, 5e8]";
  if (cfg.jitter < 0 || cfg.jitter > 1) return "--jitter must be in [0, 1]";
  if (cfg.event_q < 0 || cfg.event_q > 1) return "--event-q must be in [0, 1]";
  for (int r : cfg.target_ranks)
    if (r < 0 || r >= cfg.ranks) return "--target-rank " + std::to_string(r) + " outside 0.." + std::to_string(cfg.ranks - 1);
  if (cfg.delay_ms && (*cfg.delay_ms < 0 || *cfg.delay_ms > 600000)) return "--delay-ms must be in [0, 600000]";
  return "";
}

inject::FaultPlan model_plan(const ModelConfig& cfg) {
  inject::FaultPlan plan;
  plan.scenario = inject::find_scenario(cfg.scenario);
  plan.delay_ms = cfg.delay_ms.value_or(plan.scenario->default_delay_ms);
  plan.ranks = cfg.target_ranks.empty() ? inject::draw_targets(cfg.seed, cfg.ranks, 1) : cfg.target_ranks;
  plan.onset = cfg.onset;
  plan.offset = cfg.offset;
  plan.every = cfg.every;
  return plan;
}

formats::Window model_window(const ModelConfig& cfg, const inject::FaultPlan& plan) {
  using inject::Site;
  const int R = cfg.ranks;
  const auto& c = cfg.costs;
  const bool sync_callbacks = cfg.sync_callbacks || plan.scenario->sync_callbacks;
  std::vector<std::string> stages = frontier::default_explicit_stages();
  formats::Window w;
  w.matrix = frontier::StageMatrix(frontier::StageSchema(stages, true), R, 0, cfg.steps);
  for (int r = 0; r < R; ++r) w.ranks.push_back({r, r, 0, "model"});
  std::mt19937_64 rng(cfg.seed * 0x2545f4914f6cdd1dULL + 7);
  std::lognormal_distribution<double> noise(0.0, cfg.jitter);
  auto cost = [&](double ms) { return ms * 1e-3 * (cfg.jitter > 0 ? noise(rng) : 1.0); };

  // Absolute times per rank: the host clock and when its device stream is next free.
  std::vector<double> host(R, 0.0), device(R, 0.0), arrive(R), begin(R);
  std::vector<std::array<double, 5>> d(R);
  std::vector<double> fwd_event(R), wait_bwd(R), wait_cb(R);
  const double collective_s = 0.2e-3;
  for (int t = 0; t < cfg.steps; ++t) {
    const std::int64_t step = t;
    for (int r = 0; r < R; ++r) {
      begin[r] = host[r];
      double h = host[r];
      const double data = cost(c.data_ms) + plan.delay_s(Site::data, r, step);
      h += data;
      d[r][0] = data;
      // forward: device work queued at the start of forward, then host launch overhead
      const double fwd_start = h;
      const double dev_fwd = cost(c.fwd_device_ms) + plan.delay_s(Site::forward_device, r, step);
      device[r] = std::max(device[r], fwd_start) + dev_fwd;
      fwd_event[r] = dev_fwd;
      h += cost(c.fwd_host_ms) + plan.delay_s(Site::forward_host, r, step);
      d[r][1] = h - fwd_start;
      // backward: device work queued, launches, wait for the stream, then enter the collective
      const double bwd_start = h;
      device[r] = std::max(device[r], bwd_start) + cost(c.bwd_device_ms) + plan.delay_s(Site::backward_device, r, step);
      h = std::max(h + cost(c.bwd_host_ms), device[r]);
      h += plan.delay_s(Site::backward_collective, r, step);
      arrive[r] = h;
      d[r][2] = bwd_start;  // completed below, once every rank arrived
    }
    const double exit = *std::max_element(arrive.begin(), arrive.end()) + collective_s;
    for (int r = 0; r < R; ++r) {
      wait_bwd[r] = exit - arrive[r];
      d[r][2] = exit - d[r][2];
      host[r] = exit;
      const double cb_start = host[r];
      host[r] += cost(c.callbacks_ms) + plan.delay_s(Site::callbacks, r, step);
      arrive[r] = host[r];
      d[r][3] = cb_start;
    }
    const double cb_exit = sync_callbacks ? *std::max_element(arrive.begin(), arrive.end()) + collective_s : 0.0;
    for (int r = 0; r < R; ++r) {
      if (sync_callbacks) {
        wait_cb[r] = cb_exit - arrive[r];
        host[r] = cb_exit;
      }
      d[r][3] = host[r] - d[r][3];
      const double o = cost(c.optim_ms) + plan.delay_s(Site::optimizer, r, step);
      host[r] += o;
      d[r][4] = o;
      w.matrix.set_record(t, r, d[r], host[r] - begin[r]);
      w.matrix.set_sync_wait(t, r, 2, wait_bwd[r]);
      if (sync_callbacks) w.matrix.set_sync_wait(t, r, 3, wait_cb[r]);
      const bool sampled = std::floor((t + 1) * cfg.event_q) > std::floor(t * cfg.event_q);
      if (sampled) w.matrix.set_fwd_event(t, r, frontier::EventState::ready, fwd_event[r]);
    }
  }
  return w;
}

}  // namespace sf::sim
