// Label properties (issue 10): for every label, a generated window family in which the paper's
// trigger (Table 12, Appendix C, as docs/labeler.md states it) both holds and fails, and a
// property that the label fires exactly when it holds. The oracle below is written from the
// documented triggers and recomputes the per-rank event statistics from the matrix itself; it
// reads only the window statistics the evidence packet publishes (shares, gains, baselines,
// leaders, lag), never the labeler's intermediate state.
#include "sf/verify/verify.h"

#include "generators.h"

#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

namespace sf::verify {

using frontier::Evidence;
using frontier::Label;
using frontier::LabelConfig;

namespace {

constexpr int kFwd = 1;  // model.fwd_loss_cpu_wall in the default schema

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

frontier::StageMatrix GenLabelCase::matrix() const {
  frontier::StageMatrix m(frontier::StageSchema::default_schema(), spec.ranks, spec.first_step, spec.steps);
  SplitMix64 rng(spec.seed);
  for (int t = 0; t < spec.steps; ++t) {
    WindowSpec step = spec;
    if (alternate && spec.slow_rank >= 0) step.slow_rank = (spec.slow_rank + t) % spec.ranks;
    build_step(step, rng, m, t);
  }
  if (drop_record && spec.ranks > 1 && spec.steps > 0) m.clear_record(0, spec.ranks - 1);  // a missing rank
  if (event_mode > 0)
    for (int t = 0; t < spec.steps; ++t)
      for (int r = 0; r < spec.ranks; ++r) {
        if (!m.present(t, r) || (t + r) % event_stride != 0) continue;
        const bool missing = event_mode == 2 && (t + 2 * r) % 3 == 0;
        const double v = (r == event_rank ? event_high_s : event_low_s) * (1 + 0.01 * ((t * 7 + r) % 5));
        m.set_fwd_event(t, r, missing ? frontier::EventState::missing : frontier::EventState::ready, missing ? 0.0 : v);
      }
  if (role_mode > 0) {
    std::vector<std::string> roles(spec.ranks, "dp");
    if (role_mode == 2) roles.back() = "";
    if (role_mode == 3 && spec.ranks > 1) roles.back() = "pp";
    m.set_roles(roles);
  }
  return m;
}

frontier::LabelConfig GenLabelCase::config() const {
  LabelConfig cfg;
  const std::vector<std::string> groups = frontier::StageSchema::default_schema().groups();
  for (int g = 0; g < static_cast<int>(groups.size()); ++g)
    if (wait_mask & (1u << g)) cfg.wait_model.push_back(groups[g]);
  if (reference) {
    cfg.gain_baseline = frontier::GainBaseline::reference;
    cfg.reference_s.assign(spec.base_s.begin(), spec.base_s.end());
    cfg.reference_s.push_back(0.0);  // residual
  }
  cfg.event_scope_limited = scope_limited;
  return cfg;
}

std::ostream& operator<<(std::ostream& os, const GenLabelCase& c) {
  os << "GenLabelCase{ranks=" << c.spec.ranks << " steps=" << c.spec.steps << " slow=" << c.spec.slow_rank << "@"
     << c.spec.slow_stage << " delay=" << c.spec.delay_s << " sync=" << c.spec.sync_backward << " jitter=" << c.spec.jitter_rel
     << " residual=" << c.spec.residual_rel << " seed=" << c.spec.seed << " alternate=" << c.alternate
     << " drop=" << c.drop_record << " roles=" << c.role_mode << " events=" << c.event_mode << "/" << c.event_stride
     << " ev_rank=" << c.event_rank << " ev=" << c.event_low_s << "/" << c.event_high_s << " wait=" << c.wait_mask
     << " reference=" << c.reference << " scope_limited=" << c.scope_limited << "}";
  return os;
}

rc::Gen<GenLabelCase> gen_label_case() {
  return rc::gen::exec([] {
    GenLabelCase c;
    auto& s = c.spec;
    s.ranks = *rc::gen::weightedOneOf<int>({{1, rc::gen::just(1)}, {6, rc::gen::inRange(2, 9)}});
    s.steps = *rc::gen::inRange(1, 13);
    s.jitter_rel = *rc::gen::element(0.0, 0.02, 0.3);
    s.residual_rel = *rc::gen::weightedOneOf<double>({{5, rc::gen::just(0.005)}, {1, rc::gen::just(0.2)}});
    s.sync_backward = *rc::gen::weightedOneOf<bool>({{3, rc::gen::just(true)}, {1, rc::gen::just(false)}});
    s.slow_rank = *rc::gen::inRange(-1, s.ranks);
    s.slow_stage = *rc::gen::inRange(0, 5);
    s.delay_s = *rc::gen::element(0.0, 0.02, 0.08, 0.2, 0.6);
    if (*rc::gen::weightedOneOf<bool>({{2, rc::gen::just(true)}, {1, rc::gen::just(false)}}))
      s.base_s = {0.012, 0.045, 0.110, 0.006, 0.020};
    else
      s.base_s = {0.10, 0.09, 0.10, 0.005, 0.02};  // near-tied stages
    s.seed = *rc::gen::inRange<std::uint64_t>(1, 1u << 20);
    c.alternate = *rc::gen::weightedOneOf<bool>({{3, rc::gen::just(false)}, {1, rc::gen::just(true)}});
    c.drop_record = *rc::gen::weightedOneOf<bool>({{8, rc::gen::just(false)}, {1, rc::gen::just(true)}});
    c.role_mode = *rc::gen::inRange(0, 4);
    c.event_mode = *rc::gen::inRange(0, 3);
    c.event_stride = *rc::gen::inRange(1, 4);
    c.event_rank = *rc::gen::inRange(-1, s.ranks);
    c.event_low_s = *rc::gen::element(0.002, 0.02, 0.06);
    c.event_high_s = *rc::gen::element(0.03, 0.2, 0.5);
    c.wait_mask = *rc::gen::weightedOneOf<unsigned>({{2, rc::gen::just(0u)}, {2, rc::gen::inRange(0u, 64u)}});
    c.reference = *rc::gen::arbitrary<bool>();
    c.scope_limited = *rc::gen::weightedOneOf<bool>({{6, rc::gen::just(false)}, {1, rc::gen::just(true)}});
    return c;
  });
}

LabelOracle label_oracle(const GenLabelCase& c, const Evidence& e) {
  const frontier::StageMatrix m = c.matrix();
  const LabelConfig cfg = c.config();
  const auto& schema = e.schema;
  const int G = schema.group_count(), R = e.world_size;
  LabelOracle o;
  auto set = [&](Label l, bool v) { o.fires[static_cast<int>(l)] = v; };

  // Gates: telemetry (missing records, closure residual above 0.05), roles.
  const bool telemetry = e.missing_rank_count > 0 || e.missing_steps > 0 || e.steps == 0 ||
                         (e.has_wall && e.closure_residual_share > cfg.max_closure_residual_share) ||
                         (e.has_wall && e.overlap_error_share > cfg.max_overlap_error_share);
  std::vector<std::string> declared;
  bool undeclared = m.roles().empty();
  for (const auto& r : m.roles()) {
    if (r.empty()) undeclared = true;
    else if (std::find(declared.begin(), declared.end(), r) == declared.end()) declared.push_back(r);
  }
  const bool roles_differ = declared.size() >= 2;
  set(Label::frontier_accounting, e.steps > 0);
  set(Label::telemetry_limited, telemetry);
  set(Label::role_aware_needed, roles_differ);
  set(Label::gradient_accumulation_ambiguous, false);  // the default schema has m = 1
  const bool diagnose = !telemetry && !roles_differ && e.shares_valid && e.steps > 0;

  // Stage diagnosis (Appendix C with the issue-10 decisions).
  const int s1 = e.share_order.empty() ? -1 : e.share_order[0];
  const int s2 = e.share_order.size() > 1 ? e.share_order[1] : -1;
  const double a1 = s1 >= 0 ? e.shares[s1] : 0, g1 = s1 >= 0 ? e.static_gain[s1] : 0;
  int ca = 0, cg = 0;
  double gmax = 0;
  for (int g = 0; g < G; ++g) gmax = std::max(gmax, e.static_gain[g]);
  for (int g = 0; g < G; ++g) {
    if (e.shares_valid && a1 > 0 && e.shares[g] > 0 && e.shares[g] >= a1 - cfg.eta_a) ++ca;
    if (e.static_gain[g] >= cfg.gamma_g && e.static_gain[g] >= gmax - cfg.eta_g) ++cg;
  }
  const int conf = s1 >= 0 ? e.confident_leaders[s1] : 0, sw = s1 >= 0 ? e.leader_switches[s1] : 0;
  const bool switching = R > 1 && conf >= 3 && static_cast<double>(sw) / (conf - 1) > cfg.gamma_switch;
  const bool ambiguous = ca >= 2 || cg >= 2 || switching;
  const bool dominant = a1 > cfg.gamma_a;
  const bool w1 = s1 >= 0 && std::find(cfg.wait_model.begin(), cfg.wait_model.end(), schema.groups()[s1]) != cfg.wait_model.end();
  const bool stage_diag = diagnose && s1 >= 0 && e.advances_s[s1] > 0;
  auto top2 = [&](frontier::BaselineRule rule) {
    const auto& o2 = e.baselines[rule].order;
    return (!o2.empty() && o2[0] == s1) || (o2.size() > 1 && o2[1] == s1);
  };
  const bool strong_ok = stage_diag && dominant && !ambiguous;
  set(Label::co_critical, stage_diag && R > 1 && e.co_critical_stages.size() >= 2 &&
                              (ambiguous || (dominant && g1 < cfg.gamma_g && !w1)));
  set(Label::direct_exposure, strong_ok && g1 >= cfg.gamma_g && top2(frontier::BaselineRule::raw_spread) &&
                                  top2(frontier::BaselineRule::per_stage_max));
  set(Label::sync_wait_dependent, strong_ok && R > 1 && g1 < cfg.gamma_g && w1);
  bool lag_fits = false;
  if (s1 >= 0) {
    double collapse = 0;
    for (int g = s1 + 1; g < G; ++g) collapse += std::min(0.0, e.lag_increment_mean_s[g]);
    const double open = e.lag_increment_mean_s[s1];
    lag_fits = open > 0 && -collapse >= 0.5 * open;
  }
  set(Label::likely_sync_wait, strong_ok && R > 1 && w1 && lag_fits && !undeclared);

  // Device axis, recomputed from the matrix: per-rank ready samples and medians.
  int sampled = 0, ready = 0;
  std::vector<std::vector<double>> ev(R);
  std::vector<double> cpu_sum(R, 0.0);
  std::vector<int> cpu_n(R, 0);
  if (m.has_fwd_events())
    for (int t = 0; t < m.steps(); ++t)
      for (int r = 0; r < R; ++r) {
        if (!m.present(t, r)) continue;
        const auto st = m.fwd_event_state(t, r);
        if (st != frontier::EventState::unsampled) ++sampled;
        if (st == frontier::EventState::ready) {
          ++ready;
          ev[r].push_back(m.fwd_event_s(t, r));
        }
      }
  for (int t = 0; t < m.steps(); ++t)
    for (int r = 0; r < R; ++r)
      if (m.present(t, r)) {
        cpu_sum[r] += m.d(t, r, kFwd);
        ++cpu_n[r];
      }
  auto eligible = [&](int r) { return r >= 0 && r < R && static_cast<int>(ev[r].size()) >= cfg.min_event_samples; };
  int hi = -1;
  for (int r = 0; r < R; ++r)
    if (eligible(r) && (hi < 0 || median(ev[r]) > median(ev[hi]))) hi = r;
  const bool scope = sampled > 0 && (static_cast<double>(ready) / sampled < cfg.min_event_ready_ratio || cfg.event_scope_limited);
  set(Label::forward_event_scope_limited, scope);
  const bool device = sampled > 0 && !scope && hi >= 0 && diagnose;
  const double evh = hi >= 0 ? median(ev[hi]) : 0;
  const bool ev_high = device && e.median_step_s > 0 && evh >= cfg.gamma_event * e.median_step_s;
  set(Label::forward_device_supported, ev_high && (s1 == kFwd || s2 == kFwd));
  set(Label::forward_spillover_suspected, ev_high && s1 > kFwd && s1 != schema.residual_index() &&
                                              e.advances_s[kFwd] / e.steps <= cfg.event_low_ratio * evh);
  bool host = false;
  if (device && !ev_high && (s1 == kFwd || e.shares[kFwd] > cfg.gamma_a) && !e.leaders[kFwd].empty()) {
    const int rf = e.leaders[kFwd].front().rank;
    if (eligible(rf) && cpu_n[rf] > 0) {
      const double cpu = cpu_sum[rf] / cpu_n[rf];
      host = cpu > 0 && median(ev[rf]) <= cfg.event_low_ratio * cpu;
    }
  }
  set(Label::forward_host_overhead_suspected, host);
  return o;
}

void label_fires_exactly_on_its_trigger(Label l, const GenLabelCase& c) {
  const Evidence e = frontier::evaluate(c.matrix(), c.config());
  const bool want = label_oracle(c, e).fires[static_cast<int>(l)];
  RC_CLASSIFY(want, "trigger holds");
  RC_CLASSIFY(!want, "trigger does not hold");
  RC_ASSERT(e.has(l) == want);
}

void labels_are_consistent(const GenLabelCase& c) {
  const Evidence e = frontier::evaluate(c.matrix(), c.config());
  // No contradictory pair: one says the event time is high, the other that it is low; direct
  // exposure (high gain) against sync-wait dependence (low gain); a strong stage label with
  // co-criticality (the stage is clear) or with telemetry limits.
  RC_ASSERT(!(e.has(Label::forward_device_supported) && e.has(Label::forward_host_overhead_suspected)));
  RC_ASSERT(!(e.has(Label::direct_exposure) && e.has(Label::sync_wait_dependent)));
  // The device-axis labels may stand beside co_critical (the paper's forward/device rows are
  // "co-critical with backward host time" while emitting forward_device_supported); the stage
  // labels may not: they say the stage is clear.
  for (auto l : e.labels)
    if (frontier::is_strong(l)) {
      RC_ASSERT(!e.has(Label::telemetry_limited));
      RC_ASSERT(!e.has(Label::role_aware_needed));
    }
  for (auto l : {Label::direct_exposure, Label::sync_wait_dependent, Label::likely_sync_wait})
    if (e.has(l)) RC_ASSERT(!e.has(Label::co_critical));
  // co_critical names at least two stages.
  if (e.has(Label::co_critical)) RC_ASSERT(e.co_critical_stages.size() >= 2);
  if (e.has(Label::telemetry_limited)) RC_ASSERT(!e.has(Label::co_critical));
  if (e.world_size == 1) {
    RC_ASSERT(!e.has(Label::co_critical));
    RC_ASSERT(!e.has(Label::sync_wait_dependent));
    RC_ASSERT(!e.has(Label::likely_sync_wait));
  }
}

void accumulation_label_iff_collapsed_or_mixed(const GenAccumulation& a) {
  // Table 12: "accumulation microsteps were collapsed or mixed". Trigger, from the names alone:
  // m > 1 and (no microstep-indexed stage, or a group without each microstep 0..m−1, or an
  // un-indexed stage between the first and the last indexed one).
  std::vector<std::string> names;
  std::vector<int> idx;
  for (const auto& n : a.before) names.push_back(n), idx.push_back(-1);
  for (int i = 0; i < a.m; ++i)
    for (std::size_t g = 0; g < a.loop.size(); ++g) {
      if (!((a.present_mask[g] >> i) & 1u)) continue;
      names.push_back(a.loop[g] + "#" + std::to_string(i));
      idx.push_back(i);
      if (a.inside >= 0 && i == 0 && static_cast<int>(g) == a.inside) {
        names.push_back("hook");
        idx.push_back(-1);
      }
    }
  for (const auto& n : a.after) names.push_back(n), idx.push_back(-1);
  bool any = false, partial = false, gap = false;
  for (std::size_t g = 0; g < a.loop.size(); ++g) {
    const unsigned full = (1u << a.m) - 1;
    const unsigned have = a.present_mask[g] & full;
    if (have) any = true;
    if (have && have != full) partial = true;
  }
  int first = -1, last = -1;
  for (int s = 0; s < static_cast<int>(idx.size()); ++s)
    if (idx[s] >= 0) {
      if (first < 0) first = s;
      last = s;
    }
  for (int s = first; first >= 0 && s <= last; ++s)
    if (idx[s] < 0) gap = true;
  const bool want = a.m > 1 && (!any || partial || gap);
  frontier::StageMatrix mat(frontier::StageSchema(names, false, a.m), 2, 0, 1);
  for (int r = 0; r < 2; ++r) mat.set_record(0, r, std::vector<double>(names.size(), 0.01 * (r + 1)), std::nullopt);
  const Evidence e = frontier::evaluate(mat);
  RC_CLASSIFY(want, "trigger holds");
  RC_ASSERT(e.has(Label::gradient_accumulation_ambiguous) == want);
}

std::ostream& operator<<(std::ostream& os, const GenAccumulation& a) {
  os << "GenAccumulation{m=" << a.m << " before=" << a.before.size() << " loop=" << a.loop.size() << " masks=";
  for (auto x : a.present_mask) os << x << ",";
  return os << " inside=" << a.inside << " after=" << a.after.size() << "}";
}

rc::Gen<GenAccumulation> gen_accumulation() {
  return rc::gen::exec([] {
    GenAccumulation a;
    a.m = *rc::gen::inRange(1, 5);
    if (*rc::gen::arbitrary<bool>()) a.before = {"data"};
    const int groups = *rc::gen::inRange(1, 4);
    const unsigned full = (1u << a.m) - 1;
    for (int g = 0; g < groups; ++g) {
      a.loop.push_back("g" + std::to_string(g));
      a.present_mask.push_back(*rc::gen::weightedOneOf<unsigned>(
          {{3, rc::gen::just(full)}, {1, rc::gen::just(0u)}, {1, rc::gen::inRange(0u, full + 1)}}));
    }
    a.inside = *rc::gen::weightedOneOf<int>({{3, rc::gen::just(-1)}, {1, rc::gen::inRange(0, groups)}});
    if (*rc::gen::arbitrary<bool>()) a.after = {"optim"};
    // A schema needs at least one stage.
    bool any = !a.before.empty() || !a.after.empty();
    for (unsigned mask : a.present_mask) any = any || (mask & full);
    if (!any) a.after = {"optim"};
    return a;
  });
}

}  // namespace sf::verify
