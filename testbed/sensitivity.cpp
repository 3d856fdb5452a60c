// `experiment sensitivity`: where the detectability threshold sits as the step's shape changes.
// Model-driven (sim::model_window, no processes), so a sweep of thousands of windows takes
// seconds; the same buckets, cost draws and scenario catalogue as `run`.
#include "sf/testbed/testbed.h"

#include <algorithm>
#include <stdexcept>

namespace sf::testbed {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Smallest grid delay from which every larger one reaches `min_hits`.
std::optional<double> threshold(const std::vector<double>& delays, const std::vector<int>& hits, int min_hits) {
  std::optional<double> t;
  for (std::size_t i = delays.size(); i-- > 0;) {
    if (hits[i] < min_hits) break;
    t = delays[i];
  }
  return t;
}

}  // namespace

SensitivityResult sensitivity(const SensitivityOptions& opt, const SensitivitySetting& s) {
  const auto* profile = sim::find_profile(opt.profile);
  if (!profile) throw std::invalid_argument("profile " + opt.profile + ": unknown");
  if (opt.delays_ms.empty() || !std::is_sorted(opt.delays_ms.begin(), opt.delays_ms.end()))
    throw std::invalid_argument("delays_ms must be a non-empty ascending list");
  if (opt.seeds < 1 || opt.min_hits < 1 || opt.min_hits > opt.seeds)
    throw std::invalid_argument("need seeds >= 1 and 1 <= min_hits <= seeds");
  sim::ModelConfig base;
  base.fault.scenario = s.scenario;
  base.ranks = s.ranks;
  base.steps = opt.steps;
  base.profile = profile->name;
  base.costs = profile->costs.backward_scaled(s.backward_scale);
  base.layout = profile->layout;
  base.variation = profile->variation;
  base.variation.jitter_sigma = s.jitter_sigma;
  base.comm = profile->comm;
  if (s.comm_gib_s) base.comm.gib_per_s = *s.comm_gib_s;
  base.sync_mode = s.sync_mode;
  if (const auto err = sim::validate(base); !err.empty()) throw std::invalid_argument(err);

  SensitivityResult out;
  out.setting = s;
  const std::size_t D = opt.delays_ms.size();
  out.top1.assign(D, 0);
  out.ties.assign(D, 0);
  out.top2.assign(D, 0);
  out.misroutes.assign(D, 0);
  std::vector<double> steps_ms, bwd_ms, target_ms, total_ms, comp_ms;
  std::vector<std::vector<double>> comp_f(D), target_f(D), total_f(D);
  const std::string target_stage = sim::model_plan(base).scenario->stage;
  // The competitor: the strongest stage other than the injected one in the healthy window of seed 1.
  int competitor = -1;
  for (int seed = 1; seed <= opt.seeds; ++seed) {
    // The healthy reference of this seed: same ranks and cost draws, no fault.
    sim::ModelConfig healthy = base;
    healthy.seed = static_cast<std::uint64_t>(seed);
    healthy.fault.scenario = "none";
    // A scenario that brings a callback barrier (callback_sync_tail) has it in its reference too.
    healthy.sync_callbacks = sim::model_plan(base).scenario->sync_callbacks;
    const auto hplan = sim::model_plan(healthy);
    const auto hw = sim::model_window(healthy, hplan);
    const auto he = frontier::evaluate(hw.matrix, opt.label, hw.telemetry);
    const auto ref = advance_per_step(he);
    steps_ms.push_back(he.median_step_s * 1e3);
    if (const auto g = he.schema.group_index("model.backward_cpu_wall"); g && static_cast<std::size_t>(*g) < ref.size())
      bwd_ms.push_back(ref[static_cast<std::size_t>(*g)] * 1e3);
    const auto tg = he.schema.group_index(target_stage);
    if (competitor < 0)
      for (int g = 0; g < static_cast<int>(ref.size()); ++g)
        if ((!tg || g != *tg) && (competitor < 0 || ref[g] > ref[competitor])) competitor = g;
    if (competitor >= 0 && out.competitor.empty()) out.competitor = he.group_name(competitor);
    double total = 0;
    for (double a : ref) total += a;
    total_ms.push_back(total * 1e3);
    target_ms.push_back(tg && static_cast<std::size_t>(*tg) < ref.size() ? ref[*tg] * 1e3 : 0.0);
    if (competitor >= 0) comp_ms.push_back(ref[competitor] * 1e3);
    for (std::size_t i = 0; i < D; ++i) {
      sim::ModelConfig cfg = base;
      cfg.seed = static_cast<std::uint64_t>(seed);
      cfg.fault.delay_ms = opt.delays_ms[i];
      const auto plan = sim::model_plan(cfg);
      const auto w = sim::model_window(cfg, plan);
      const auto e = frontier::evaluate(w.matrix, opt.label, w.telemetry);
      verify::Expected x{plan.scenario->stage, plan.ranks, plan.scenario->should_route};
      x.delay_s = plan.delay_ms * 1e-3;
      x.eta_a = e.config.eta_a;
      if (e.schema == he.schema) x.reference_advance_s = ref;
      const auto v = verify::score(e, x);
      if (e.schema == he.schema) {
        const auto adv = advance_per_step(e);
        double faulty_total = 0;
        for (double a : adv) faulty_total += a;
        total_f[i].push_back(faulty_total * 1e3);
        const auto faulty_tg = e.schema.group_index(target_stage);
        target_f[i].push_back(faulty_tg ? adv[*faulty_tg] * 1e3 : 0.0);
        if (competitor >= 0) comp_f[i].push_back(adv[competitor] * 1e3);
      }
      out.top1[i] += v.frontier.top1 ? 1 : 0;
      out.ties[i] += v.frontier.top1_tie ? 1 : 0;
      out.top2[i] += v.frontier.top2 ? 1 : 0;
      out.misroutes[i] += v.misroute ? 1 : 0;
    }
  }
  out.eta_a = opt.label.eta_a;
  out.target_base_ms = median(target_ms);
  out.healthy_total_ms = median(total_ms);
  out.competitor_healthy_ms = median(comp_ms);
  for (std::size_t i = 0; i < D; ++i) {
    out.competitor_faulty_ms.push_back(median(comp_f[i]));
    out.target_faulty_ms.push_back(median(target_f[i]));
    out.total_faulty_ms.push_back(median(total_f[i]));
  }
  out.median_step_ms = median(steps_ms);
  out.backward_advance_ms = median(bwd_ms);
  out.threshold_top1_ms = threshold(opt.delays_ms, out.top1, opt.min_hits);
  out.threshold_top2_ms = threshold(opt.delays_ms, out.top2, opt.min_hits);
  return out;
}

double predicted_threshold_ms(double competitor_ms, double target_base_ms, double rest_ms, double eta_a) {
  // Top-1: (target_base + d) − competitor > eta_A · (rest + d), rest = the step without d.
  return std::max(0.0, (competitor_ms - target_base_ms + eta_a * rest_ms) / (1.0 - eta_a));
}

}  // namespace sf::testbed
