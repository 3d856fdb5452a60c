// Label properties (issues 10, 28): for every label, a generated window family in which the
// paper's trigger (Table 12, Appendix C, as docs/labeler.md states it) both holds and fails, and a
// property that the label fires exactly when it holds. The oracle below is written from the
// documented triggers and recomputes what they read from the matrix: shares, leaders, switches
// and lags from account() (the engine's core, held to the paper's scalar loop by its own
// property), gains from static_gain() (a separate path from the labeler's window pass), baselines,
// gates and event statistics from the records. It reads nothing of the packet under test.
// tests/oracle/ holds a second, independent oracle (Python, no shared code).
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

constexpr int kFwdLoss = 1;  // model.fwd_loss_cpu_wall in the default schema

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

frontier::StageMatrix GenLabelCase::matrix() const {
  frontier::StageMatrix full(frontier::StageSchema::default_schema(), spec.ranks, spec.first_step, spec.steps);
  SplitMix64 rng(spec.seed);
  for (int t = 0; t < spec.steps; ++t) {
    WindowSpec step = spec;
    if (alternate && spec.slow_rank >= 0) step.slow_rank = (spec.slow_rank + t) % spec.ranks;
    build_step(step, rng, full, t);
  }
  // Without wall times the same durations, in the schema without a residual stage.
  frontier::StageMatrix m = no_wall ? frontier::StageMatrix(frontier::StageSchema(frontier::default_explicit_stages(), false),
                                                            spec.ranks, spec.first_step, spec.steps)
                                    : full;
  if (no_wall)
    for (int t = 0; t < spec.steps; ++t)
      for (int r = 0; r < spec.ranks; ++r) {
        std::vector<double> d(5);
        for (int s = 0; s < 5; ++s) d[s] = full.d(t, r, s);
        m.set_record(t, r, d, std::nullopt);
      }
  if (drop_record && spec.ranks > 1 && spec.steps > 0) m.clear_record(0, spec.ranks - 1);  // a missing rank
  if (drop_step >= 0 && drop_step < spec.steps)
    for (int r = 0; r < spec.ranks; ++r) m.clear_record(drop_step, r);  // a whole missing step
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
  // The wait model names groups the window has: without wall times it has no residual group (the
  // default schema's last), and the engine refuses a name the window does not have.
  const int n_groups = static_cast<int>(groups.size()) - (no_wall ? 1 : 0);
  for (int g = 0; g < n_groups; ++g)
    if (wait_mask & (1u << g)) cfg.wait_model.push_back(groups[g]);
  if (reference) {
    cfg.gain_baseline = frontier::GainBaseline::reference;
    cfg.reference_s.assign(spec.base_s.begin(), spec.base_s.end());
    if (!no_wall) cfg.reference_s.push_back(0.0);  // residual
  }
  cfg.event_scope_limited = scope_limited;
  cfg.co_critical_needs_two_stages = two_stages;
  cfg.require_wall = require_wall;
  return cfg;
}

std::ostream& operator<<(std::ostream& os, const GenLabelCase& c) {
  os << "GenLabelCase{ranks=" << c.spec.ranks << " steps=" << c.spec.steps << " slow=" << c.spec.slow_rank << "@"
     << c.spec.slow_stage << " delay=" << c.spec.delay_s << " sync=" << c.spec.sync_backward << " jitter=" << c.spec.jitter_rel
     << " residual=" << c.spec.residual_rel << " seed=" << c.spec.seed << " alternate=" << c.alternate
     << " drop=" << c.drop_record << " drop_step=" << c.drop_step << " no_wall=" << c.no_wall << " roles=" << c.role_mode
     << " events=" << c.event_mode << "/" << c.event_stride
     << " ev_rank=" << c.event_rank << " ev=" << c.event_low_s << "/" << c.event_high_s << " wait=" << c.wait_mask
     << " reference=" << c.reference << " scope_limited=" << c.scope_limited << " two_stages=" << c.two_stages
     << " require_wall=" << c.require_wall << "}";
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
    // A whole missing step among others (a window of no record at all is not a window a reader
    // passes on).
    c.drop_step = s.steps < 2 ? -1 : *rc::gen::weightedOneOf<int>({{8, rc::gen::just(-1)}, {1, rc::gen::inRange(0, s.steps)}});
    c.no_wall = *rc::gen::weightedOneOf<bool>({{6, rc::gen::just(false)}, {1, rc::gen::just(true)}});
    c.role_mode = *rc::gen::inRange(0, 4);
    c.event_mode = *rc::gen::inRange(0, 3);
    c.event_stride = *rc::gen::inRange(1, 4);
    c.event_rank = *rc::gen::inRange(-1, s.ranks);
    c.event_low_s = *rc::gen::element(0.002, 0.02, 0.06);
    c.event_high_s = *rc::gen::element(0.03, 0.2, 0.5);
    c.wait_mask = *rc::gen::weightedOneOf<unsigned>({{2, rc::gen::just(0u)}, {2, rc::gen::inRange(0u, 64u)}});
    c.reference = *rc::gen::arbitrary<bool>();
    c.scope_limited = *rc::gen::weightedOneOf<bool>({{6, rc::gen::just(false)}, {1, rc::gen::just(true)}});
    c.two_stages = *rc::gen::weightedOneOf<bool>({{3, rc::gen::just(false)}, {1, rc::gen::just(true)}});
    c.require_wall = *rc::gen::weightedOneOf<bool>({{3, rc::gen::just(true)}, {1, rc::gen::just(false)}});
    return c;
  });
}

namespace {

/// The window statistics the labels read, recomputed from the matrix and its accounting (the
/// engine's core, checked against the paper's scalar loop by its own properties); nothing here
/// comes from the packet under test.
struct Recomputed {
  int steps = 0;
  double denom = 0, median_step = 0;
  std::vector<double> adv, share, gain, pmax, spread, lag_inc;
  std::vector<int> order;                  ///< groups by advance, largest first (ties: stage order)
  std::vector<int> conf, switches, chances;  ///< per group
  std::vector<std::vector<double>> credit;   ///< per group, per rank
  std::vector<int> amb;                      ///< C_A ∪ C_G in share order
  int c_a = 0, c_g = 0;
};

Recomputed recompute(const frontier::StageMatrix& m, const LabelConfig& cfg) {
  const auto& schema = m.schema();
  const int G = schema.group_count(), S = m.stages(), R = m.ranks();
  const frontier::Accounting acc = frontier::account(m, cfg.account);
  Recomputed x;
  x.adv.assign(G, 0.0);
  x.pmax.assign(G, 0.0);
  x.spread.assign(G, 0.0);
  x.lag_inc.assign(G, 0.0);
  x.conf.assign(G, 0);
  x.switches.assign(G, 0);
  x.chances.assign(G, 0);
  x.credit.assign(G, std::vector<double>(R, 0.0));
  std::vector<int> conf_s(S, 0), last(S, -1);
  std::vector<double> exposed;
  for (int t = 0; t < m.steps(); ++t) {
    if (!acc.scored[t]) continue;
    ++x.steps;
    const double f_s = acc.exposed(t);
    exposed.push_back(f_s);
    x.denom += f_s;
    double prefix_prev_lag = 0;
    std::vector<double> p(R, 0.0);
    for (int s = 0; s < S; ++s) {
      const int g = schema.group_of(s);
      const double a = acc.advance(t, s);
      x.adv[g] += a;
      std::vector<double> col, pre;
      for (int r = 0; r < R; ++r)
        if (m.present(t, r)) {
          p[r] += m.d(t, r, s);
          col.push_back(m.d(t, r, s));
          pre.push_back(p[r]);
        }
      const double mx = *std::max_element(col.begin(), col.end());
      x.pmax[g] += mx;
      x.spread[g] += mx - median(col);
      const double lag = acc.frontier(t, s) - median(pre);
      x.lag_inc[g] += lag - prefix_prev_lag;
      prefix_prev_lag = lag;
      if (a <= 0) continue;
      const int who = acc.leader(t, s);
      if (who >= 0) {
        x.credit[g][who] += a;
        if (f_s > 0 && a >= cfg.gamma_elig * f_s && acc.gap(t, s) >= cfg.eta_q * f_s) {
          ++conf_s[s];
          if (last[s] >= 0 && last[s] != who) ++x.switches[g];
          last[s] = who;
        }
      } else if (who == frontier::Accounting::kTie) {
        const auto tie = acc.tie_ranks(t, s);
        for (int r : tie) x.credit[g][r] += a / static_cast<double>(tie.size());
      }
    }
  }
  for (int s = 0; s < S; ++s) {
    x.conf[schema.group_of(s)] += conf_s[s];
    if (conf_s[s] > 1) x.chances[schema.group_of(s)] += conf_s[s] - 1;
  }
  if (!exposed.empty()) x.median_step = median(exposed);
  const bool valid = x.steps > 0 && x.denom >= cfg.share_floor_s;
  x.share.assign(G, 0.0);
  for (int g = 0; g < G; ++g) x.share[g] = valid ? x.adv[g] / x.denom : 0.0;
  x.gain = frontier::static_gain(m, acc, cfg.gain_baseline, cfg.reference_s);
  x.order.resize(G);
  for (int g = 0; g < G; ++g) x.order[g] = g;
  std::stable_sort(x.order.begin(), x.order.end(), [&](int a, int b) { return x.adv[a] > x.adv[b]; });
  const int s1 = x.order.empty() ? -1 : x.order[0];
  if (valid && s1 >= 0 && x.share[s1] > 0) {
    const double gmax = *std::max_element(x.gain.begin(), x.gain.end());
    for (int g : x.order) {
      const bool in_a = x.share[g] > 0 && x.share[g] >= x.share[s1] - cfg.eta_a;
      const bool in_g = x.gain[g] >= cfg.gamma_g && x.gain[g] >= gmax - cfg.eta_g;
      x.c_a += in_a;
      x.c_g += in_g;
      if (in_a || in_g) x.amb.push_back(g);
    }
  }
  return x;
}

}  // namespace

namespace {

/// What the gates decide, recomputed: the telemetry gate (missing ranks and whole steps, closure
/// and overlap, no wall), the role gate, and whether the stage diagnosis runs.
struct OracleGates {
  bool telemetry = false, roles_differ = false, undeclared = false, diagnose = false;
};

OracleGates oracle_gates(const frontier::StageMatrix& m, const LabelConfig& cfg, const Recomputed& x) {
  const auto& schema = m.schema();
  const int R = m.world_size();
  int missing_steps = 0;
  bool missing_rank = false;
  double residual = 0, overlap = 0, wall = 0;
  for (int t = 0; t < m.steps(); ++t) {
    if (m.step_present_count(t) == 0) {
      ++missing_steps;
      continue;
    }
    for (int r = 0; r < R; ++r) {
      if (!m.present(t, r)) {
        missing_rank = true;
        continue;
      }
      if (!schema.has_residual()) continue;
      residual += m.d(t, r, schema.residual_index());
      overlap += m.overlap(t, r);
      wall += m.wall(t, r);
    }
  }
  const double recorded = wall + overlap;
  const bool closure_bad = schema.has_residual() && recorded > 0 &&
                           (residual / recorded > cfg.max_closure_residual_share || overlap / recorded > cfg.max_overlap_error_share);
  OracleGates g;
  g.telemetry = missing_rank || missing_steps > 0 || x.steps == 0 || closure_bad || (!schema.has_residual() && cfg.require_wall);
  std::vector<std::string> declared;
  g.undeclared = m.roles().empty();
  for (const auto& r : m.roles()) {
    if (r.empty()) g.undeclared = true;
    else if (std::find(declared.begin(), declared.end(), r) == declared.end()) declared.push_back(r);
  }
  g.roles_differ = declared.size() >= 2;
  const bool shares_valid = x.steps > 0 && x.denom >= cfg.share_floor_s;
  g.diagnose = !g.telemetry && !g.roles_differ && shares_valid;
  return g;
}

/// The stage diagnosis' labels (Appendix C, Table 12; docs/labeler.md).
void oracle_stage_labels(const frontier::StageMatrix& m, const LabelConfig& cfg, const Recomputed& x, const OracleGates& gates,
                         LabelOracle& o) {
  auto set = [&](Label l, bool v) { o.fires[static_cast<int>(l)] = v; };
  const auto& schema = m.schema();
  const int G = schema.group_count(), R = m.world_size();
  const int s1 = x.order.empty() ? -1 : x.order[0];
  const double a1 = s1 >= 0 ? x.share[s1] : 0, g1 = s1 >= 0 ? x.gain[s1] : 0;
  const bool switching = s1 >= 0 && R > 1 && x.conf[s1] >= 3 && x.chances[s1] > 0 &&
                         static_cast<double>(x.switches[s1]) / x.chances[s1] > cfg.gamma_switch;
  const bool ambiguous = x.c_a >= 2 || x.c_g >= 2 || switching;
  const bool dominant = a1 > cfg.gamma_a;
  const bool w1 = s1 >= 0 && std::find(cfg.wait_model.begin(), cfg.wait_model.end(), schema.groups()[s1]) != cfg.wait_model.end();
  const bool stage_diag = gates.diagnose && s1 >= 0 && x.adv[s1] > 0;
  auto top2 = [&](const std::vector<double>& score) {  // by value: above 0, at most one group above
    if (!(score[s1] > 0)) return false;
    int above = 0;
    for (double v : score) above += v > score[s1] ? 1 : 0;
    return above < 2;
  };
  const bool strong_ok = stage_diag && dominant && !ambiguous;
  const bool low_gain_w0 = dominant && !ambiguous && g1 < cfg.gamma_g && !w1;
  set(Label::co_critical, stage_diag && R > 1 &&
                              (ambiguous || (low_gain_w0 && (!cfg.co_critical_needs_two_stages || x.amb.size() >= 2))));
  set(Label::direct_exposure, strong_ok && g1 >= cfg.gamma_g && top2(x.spread) && top2(x.pmax));
  set(Label::sync_wait_dependent, strong_ok && R > 1 && g1 < cfg.gamma_g && w1);
  bool lag_fits = false;
  if (s1 >= 0 && x.steps > 0) {
    double collapse = 0;
    for (int g = s1 + 1; g < G; ++g) collapse += std::min(0.0, x.lag_inc[g] / x.steps);
    const double open = x.lag_inc[s1] / x.steps;
    lag_fits = open > 0 && -collapse >= 0.5 * open;
  }
  set(Label::likely_sync_wait, strong_ok && R > 1 && w1 && lag_fits && !gates.undeclared);
}

/// The device axis' labels, recomputed from the matrix: per-rank ready samples and medians.
void oracle_device_labels(const frontier::StageMatrix& m, const LabelConfig& cfg, const Recomputed& x, const OracleGates& gates,
                          LabelOracle& o) {
  auto set = [&](Label l, bool v) { o.fires[static_cast<int>(l)] = v; };
  const auto& schema = m.schema();
  const int R = m.world_size();
  const int s1 = x.order.empty() ? -1 : x.order[0];
  const int s2 = x.order.size() > 1 ? x.order[1] : -1;
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
        cpu_sum[r] += m.d(t, r, kFwdLoss);
        ++cpu_n[r];
      }
  auto eligible = [&](int r) { return r >= 0 && r < R && static_cast<int>(ev[r].size()) >= cfg.min_event_samples; };
  int hi = -1;
  for (int r = 0; r < R; ++r)
    if (eligible(r) && (hi < 0 || median(ev[r]) > median(ev[hi]))) hi = r;
  const bool scope = sampled > 0 && (static_cast<double>(ready) / sampled < cfg.min_event_ready_ratio || cfg.event_scope_limited);
  set(Label::forward_event_scope_limited, scope);
  const bool device = sampled > 0 && !scope && hi >= 0 && gates.diagnose;
  const double evh = hi >= 0 ? median(ev[hi]) : 0;
  std::vector<double> medians;  // the cohort: every other eligible rank's median (leave-one-out)
  for (int r = 0; r < R; ++r)
    if (eligible(r) && r != hi) medians.push_back(median(ev[r]));
  const double cohort = medians.empty() ? evh : median(medians);
  const bool ev_high = device && !medians.empty() && x.median_step > 0 && evh - cohort >= cfg.gamma_event * x.median_step;
  set(Label::forward_device_supported, ev_high && (s1 == kFwdLoss || s2 == kFwdLoss));
  set(Label::forward_spillover_suspected, ev_high && s1 > kFwdLoss && s1 != schema.residual_index() &&
                                              x.adv[kFwdLoss] / x.steps <= cfg.event_low_ratio * evh);
  bool host = false;
  if (device && !ev_high && (s1 == kFwdLoss || x.share[kFwdLoss] > cfg.gamma_a)) {
    int rf = -1;  // forward's most credited rank (ties: the lower rank)
    for (int r = 0; r < R; ++r)
      if (x.credit[kFwdLoss][r] > 0 && (rf < 0 || x.credit[kFwdLoss][r] > x.credit[kFwdLoss][rf])) rf = r;
    if (eligible(rf) && cpu_n[rf] > 0) {
      const double cpu = cpu_sum[rf] / cpu_n[rf];
      host = cpu > 0 && median(ev[rf]) <= cfg.event_low_ratio * cpu;
    }
  }
  set(Label::forward_host_overhead_suspected, host);
}

}  // namespace

LabelOracle label_oracle(const GenLabelCase& c) {
  const frontier::StageMatrix m = c.matrix();
  const LabelConfig cfg = c.config();
  const Recomputed x = recompute(m, cfg);
  LabelOracle o;
  o.ambiguity_set = x.amb;
  const OracleGates gates = oracle_gates(m, cfg, x);
  auto set = [&](Label l, bool v) { o.fires[static_cast<int>(l)] = v; };
  set(Label::frontier_accounting, x.steps > 0);
  set(Label::telemetry_limited, gates.telemetry);
  set(Label::role_aware_needed, gates.roles_differ);
  set(Label::gradient_accumulation_ambiguous, false);  // the default schema has m = 1
  oracle_stage_labels(m, cfg, x, gates, o);
  oracle_device_labels(m, cfg, x, gates, o);
  return o;
}

void label_fires_exactly_on_its_trigger(Label l, const GenLabelCase& c) {
  const Evidence e = frontier::evaluate(c.matrix(), c.config());
  const LabelOracle o = label_oracle(c);
  const bool want = o.fires[static_cast<int>(l)];
  RC_CLASSIFY(want, "trigger holds");
  RC_CLASSIFY(!want, "trigger does not hold");
  RC_ASSERT(e.has(l) == want);
  // The ambiguity set every co_critical decision reads: Appendix C's C_A ∪ C_G, in share order.
  RC_ASSERT(e.co_critical_stages == o.ambiguity_set);
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
  // co_critical names at least one stage.
  if (e.has(Label::co_critical)) RC_ASSERT(!e.co_critical_stages.empty());
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
  // A stage every microstep runs (the recorder's data, forward, backward) left un-indexed beside
  // indexed ones is collapsed, wherever it sits.
  bool collapsed_loop_stage = false;
  for (int s = 0; s < static_cast<int>(idx.size()); ++s)
    if (idx[s] < 0 && (names[s] == "data.next_wait" || names[s] == "model.fwd_loss_cpu_wall" ||
                       names[s] == "model.backward_cpu_wall"))
      collapsed_loop_stage = true;
  const bool want = a.m > 1 && (!any || partial || gap || (first >= 0 && collapsed_loop_stage));
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
    // Stage names: neutral ones, or the recorder's (whose data, forward and backward run once per
    // microstep, so un-indexed beside indexed stages they are collapsed).
    const bool recorder_names = *rc::gen::arbitrary<bool>();
    const std::vector<std::string> loop_names = {"data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"};
    if (*rc::gen::arbitrary<bool>()) a.before = {recorder_names ? "data.next_wait" : "data"};
    const int groups = *rc::gen::inRange(1, 4);
    const unsigned full = (1u << a.m) - 1;
    for (int g = 0; g < groups; ++g) {
      a.loop.push_back(recorder_names ? loop_names[g] : "g" + std::to_string(g));
      a.present_mask.push_back(*rc::gen::weightedOneOf<unsigned>(
          {{3, rc::gen::just(full)}, {1, rc::gen::just(0u)}, {1, rc::gen::inRange(0u, full + 1)}}));
    }
    a.inside = *rc::gen::weightedOneOf<int>({{3, rc::gen::just(-1)}, {1, rc::gen::inRange(0, groups)}});
    if (*rc::gen::arbitrary<bool>()) a.after = {"optim"};
    if (recorder_names && *rc::gen::arbitrary<bool>()) a.after.insert(a.after.begin(), "model.backward_cpu_wall");
    // A schema needs at least one stage.
    bool any = !a.before.empty() || !a.after.empty();
    for (unsigned mask : a.present_mask) any = any || (mask & full);
    if (!any) a.after = {"optim"};
    return a;
  });
}

}  // namespace sf::verify
