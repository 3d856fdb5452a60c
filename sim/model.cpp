// Model-driven ranks (`sf-testbed sim`): the synthetic step as a timeline model instead of real
// processes, so scenarios can be scored at thousands of ranks without MPI or a clock.
#include "sf/sim/sim.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace sf::sim {

std::string validate(const ModelConfig& cfg) {
  if (!inject::find_scenario(cfg.scenario)) return "--scenario " + cfg.scenario + ": unknown (see sf-testbed scenarios)";
  if (cfg.ranks < 1 || cfg.ranks > (1 << 20)) return "--ranks must be in [1, 1048576]";
  if (cfg.steps < 1 || static_cast<double>(cfg.steps) * cfg.ranks > 5e8) return "--steps x --ranks must be in [1, 5e8]";
  if (const auto v = validate(cfg.variation); !v.empty()) return v;
  if (const auto v = validate(cfg.layout); !v.empty()) return v;
  if (!(cfg.comm.latency_us >= 0) || !(cfg.comm.gib_per_s > 0)) return "--comm-latency-us must be >= 0 and --comm-gib-s > 0";
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
  const bool sync_callbacks = cfg.sync_callbacks || plan.scenario->sync_callbacks;
  std::vector<std::string> stages = frontier::default_explicit_stages();
  formats::Window w;
  w.matrix = frontier::StageMatrix(frontier::StageSchema(stages, true), R, 0, cfg.steps);
  for (int r = 0; r < R; ++r) w.ranks.push_back({r, r, 0, "model"});

  // The same buckets as the workload; each bucket's backward compute in proportion to its bytes.
  const auto buckets = bucket_floats(cfg.layout);
  const std::size_t B = buckets.size();
  double total = 0;
  for (auto b : buckets) total += static_cast<double>(b);
  std::vector<double> frac(B), bucket_s(B);
  for (std::size_t i = 0; i < B; ++i) {
    frac[i] = static_cast<double>(buckets[i]) / total;
    bucket_s[i] = cfg.comm.seconds(static_cast<double>(buckets[i]) * sizeof(float), R);
  }
  const double whole_s = cfg.comm.seconds(total * sizeof(float), R);
  const double barrier_s = cfg.comm.seconds(0, R);

  // Absolute times per rank: the host clock and when its device stream is next free.
  std::vector<double> host(R, 0.0), device(R, 0.0), arrive(R), begin(R), bwd_start(R), own_done(R);
  std::vector<std::array<double, 5>> d(R);
  std::vector<double> fwd_event(R), wait_bwd(R), wait_cb(R);
  std::vector<double> launch(static_cast<std::size_t>(R) * B), bucket_end(B);
  for (int t = 0; t < cfg.steps; ++t) {
    const std::int64_t step = t;
    for (int r = 0; r < R; ++r) {
      const StageCosts c = draw_costs(cfg.costs, cfg.variation, cfg.seed, r, step);
      begin[r] = host[r];
      double h = host[r];
      const double data = c.data_ms * 1e-3 + plan.delay_s(Site::data, r, step);
      h += data;
      d[r][0] = data;
      // forward: device work queued at the start of forward, then host launch overhead
      const double fwd_start = h;
      const double dev_fwd = c.fwd_device_ms * 1e-3 + plan.delay_s(Site::forward_device, r, step);
      device[r] = std::max(device[r], fwd_start) + dev_fwd;
      fwd_event[r] = dev_fwd;
      h += c.fwd_host_ms * 1e-3 + plan.delay_s(Site::forward_host, r, step);
      d[r][1] = h - fwd_start;
      // backward: device work queued, launches, then the gradient synchronisation
      bwd_start[r] = h;
      const double bwd_dev = c.bwd_device_ms * 1e-3 + plan.delay_s(Site::backward_device, r, step);
      const double entry = plan.delay_s(Site::backward_collective, r, step);
      if (cfg.sync_mode == SyncMode::single) {
        device[r] = std::max(device[r], h) + bwd_dev;
        arrive[r] = std::max(h + c.bwd_host_ms * 1e-3, device[r]) + entry;
      } else {
        // Bucket i is queued when the host has paid the launches of the buckets before it; its
        // collective can start once its compute is done (and, after a late entry, once the
        // buckets before it started: the comm engine takes them in order).
        double hb = h;
        for (std::size_t i = 0; i < B; ++i) {
          device[r] = std::max(device[r], hb) + bwd_dev * frac[i];
          double& l = launch[static_cast<std::size_t>(r) * B + i];
          l = i == 0 ? device[r] + entry : std::max(device[r], launch[static_cast<std::size_t>(r) * B + i - 1]);
          hb += c.bwd_host_ms * 1e-3 * frac[i];
        }
        own_done[r] = std::max(hb, device[r]);
      }
    }
    if (cfg.sync_mode == SyncMode::single) {
      const double exit = *std::max_element(arrive.begin(), arrive.end()) + whole_s;
      for (int r = 0; r < R; ++r) {
        wait_bwd[r] = exit - arrive[r];
        d[r][2] = exit - bwd_start[r];
        host[r] = exit;
      }
    } else {
      // One bucket collective at a time, each starting when every rank has entered it.
      double prev = 0;
      for (std::size_t i = 0; i < B; ++i) {
        double all_in = 0;
        for (int r = 0; r < R; ++r) all_in = std::max(all_in, launch[static_cast<std::size_t>(r) * B + i]);
        bucket_end[i] = std::max(all_in, prev) + bucket_s[i];
        prev = bucket_end[i];
      }
      for (int r = 0; r < R; ++r) {
        // Time inside collectives: the union of [entry, completion] over the rank's buckets.
        double inside = 0, lo = -1, hi = -1;
        for (std::size_t i = 0; i < B; ++i) {
          const double a = launch[static_cast<std::size_t>(r) * B + i], e = bucket_end[i];
          if (a > hi) {
            inside += hi - lo;
            lo = a;
          }
          hi = std::max(hi, e);
        }
        inside += hi - lo;
        wait_bwd[r] = inside;
        const double end = std::max(own_done[r], bucket_end[B - 1]);
        d[r][2] = end - bwd_start[r];
        host[r] = end;
      }
    }
    for (int r = 0; r < R; ++r) {
      const StageCosts c = draw_costs(cfg.costs, cfg.variation, cfg.seed, r, step);
      const double cb_start = host[r];
      host[r] += c.callbacks_ms * 1e-3 + plan.delay_s(Site::callbacks, r, step);
      arrive[r] = host[r];
      d[r][3] = cb_start;
    }
    const double cb_exit = sync_callbacks ? *std::max_element(arrive.begin(), arrive.end()) + barrier_s : 0.0;
    for (int r = 0; r < R; ++r) {
      const StageCosts c = draw_costs(cfg.costs, cfg.variation, cfg.seed, r, step);
      if (sync_callbacks) {
        wait_cb[r] = cb_exit - arrive[r];
        host[r] = cb_exit;
      }
      d[r][3] = host[r] - d[r][3];
      const double o = c.optim_ms * 1e-3 + plan.delay_s(Site::optimizer, r, step);
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
