#include "detail.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace sf::frontier {

namespace {

void check_reference(const StageSchema& schema, std::span<const double> reference) {
  const auto n = static_cast<int>(reference.size());
  if (n != schema.size() && n != schema.group_count())
    throw std::invalid_argument("gain baseline 'reference' needs " + std::to_string(schema.size()) +
                                " values (one per stage) or " + std::to_string(schema.group_count()) +
                                " (one per stage group), got " + std::to_string(n));
  // The bound of every window time (kMaxWindowSeconds), as a config file's reference_s has it.
  for (std::size_t i = 0; i < reference.size(); ++i)
    if (!(reference[i] >= 0 && reference[i] <= kMaxWindowSeconds)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", reference[i]);
      throw std::invalid_argument("gain baseline 'reference' value " + std::to_string(i + 1) + " is " + buf +
                                  ", expected seconds >= 0 and <= 1e+300");
    }
}

void validate(const StageSchema& schema, const LabelConfig& cfg) {
  if (cfg.gain_baseline == GainBaseline::reference) check_reference(schema, cfg.reference_s);
  if (!(cfg.tau_c > 0 && cfg.tau_c <= 1)) throw std::invalid_argument("tau_C must be in (0, 1]");
  if (auto why = config_names_problem(schema, cfg); !why.empty()) throw std::invalid_argument(why);
}

}  // namespace

std::string config_names_problem(const StageSchema& schema, const LabelConfig& cfg) {
  for (const auto& w : cfg.wait_model)
    if (auto why = schema.group_problem(w, "wait model: '" + w + "' is ", "this window"); !why.empty()) return why;
  return "";
}

RankedStages rank_stages(std::vector<double> score, double tau_c) {
  RankedStages out;
  const int n = static_cast<int>(score.size());
  out.order.resize(n);
  std::iota(out.order.begin(), out.order.end(), 0);
  std::stable_sort(out.order.begin(), out.order.end(), [&](int a, int b) { return score[a] > score[b]; });
  double total = 0;
  for (double v : score) total += v;
  out.share.assign(n, 0.0);
  if (total > 0) {
    for (int g = 0; g < n; ++g) out.share[g] = score[g] / total;
    // Routing set: the smallest leading prefix whose cumulative share reaches τ_C (§4).
    double cum = 0;
    for (int g : out.order) {
      if (score[g] <= 0) break;
      out.candidates.push_back(g);
      cum += out.share[g];
      if (cum >= tau_c - 1e-12) break;
    }
  }
  out.score = std::move(score);
  return out;
}

double per_stage_max_step(const StageMatrix& m, int t) {
  double sum = 0;
  for (int s = 0; s < m.stages(); ++s) {
    double mx = 0;
    for (int r = 0; r < m.ranks(); ++r)
      if (m.present(t, r)) mx = std::max(mx, m.d(t, r, s));
    sum += mx;
  }
  return sum;
}

double per_stage_avg_step(const StageMatrix& m, int t) {
  const int n = m.step_present_count(t);
  if (n == 0) return 0;
  double sum = 0;
  for (int s = 0; s < m.stages(); ++s) {
    double acc = 0;
    for (int r = 0; r < m.ranks(); ++r)
      if (m.present(t, r)) acc += m.d(t, r, s);
    sum += acc / n;
  }
  return sum;
}

BaselineSet baselines(const StageMatrix& m, const Accounting& acc, double tau_c) {
  detail::BaselineAccumulator b(m.schema());
  std::vector<double> cm(m.stages());
  detail::SelectScratch scratch;
  for (int t = 0; t < m.steps(); ++t) {
    if (!acc.scored[t]) continue;
    detail::cohort_medians(m, t, cm, scratch);
    b.add_step(m, t, cm);
  }
  return b.finish(tau_c);
}

std::vector<double> static_gain(const StageMatrix& m, const Accounting& acc, GainBaseline kind,
                                std::span<const double> reference) {
  const auto& schema = m.schema();
  if (kind == GainBaseline::reference) check_reference(schema, reference);
  Eigen::MatrixXd rm;
  if (kind == GainBaseline::rank_median) rm = detail::rank_window_median(m);
  std::vector<double> num(schema.group_count(), 0.0), cm(m.stages()), gain(schema.group_count());
  double denom = 0;
  detail::SelectScratch scratch;
  for (int t = 0; t < m.steps(); ++t) {
    if (!acc.scored[t]) continue;
    detail::cohort_medians(m, t, cm, scratch);
    const detail::StepBaseline b{kind, cm, &rm, reference};
    const double exposed = acc.exposed(t);
    denom += exposed;
    detail::step_gains(m, t, b, exposed, gain);
    for (int g = 0; g < schema.group_count(); ++g) num[g] += gain[g];
  }
  if (denom > 0)
    for (double& x : num) x /= denom;
  return num;
}

namespace {

/// A walked window's evidence: its statistics, labelled, diagnosed against the cohort, with the what-if.
Evidence finish_window(const detail::WindowStats& ws, const StageMatrix& m, const Accounting& acc, const LabelConfig& cfg,
                       const TelemetryInput& tel) {
  int missing = 0;
  for (int t = 0; t < m.steps(); ++t)
    if (!acc.scored[t]) ++missing;
  auto [ev, side] = ws.finish(m.first_step(), m.first_step() + (m.steps() - 1), missing);
  label(ev, side, cfg, tel);
  ev.diagnosis = diagnose(ev, nullptr, cfg.diagnosis);
  ev.whatif = what_if(ev, nullptr);
  return ev;
}

}  // namespace

Evidence evaluate(const StageMatrix& m, const LabelConfig& cfg, const TelemetryInput& tel) {
  validate(m.schema(), cfg);
  // Rank medians need the whole window before its first step is walked: account first.
  if (cfg.gain_baseline == GainBaseline::rank_median) return evaluate(m, account(m, cfg.account), cfg, tel);
  // One pass over the matrix: each step accounted as account() does it (the same Accounting is
  // built) and walked while it is in cache, instead of a second pass after accounting the whole
  // window. The top group s1, whose residual-leader counterfactual the walk takes, is known only
  // at the end: it is guessed from the first scored step's advances and, where the window's
  // differs, the window is walked again with it (evaluate over the Accounting), so the result
  // never depends on the guess.
  Accounting acc = detail::empty_accounting(m);
  detail::WindowStats ws(m.schema(), m.ranks(), m.world_size(), m.rank_ids(), cfg);
  ws.pair_standings();  // m outlives the walk
  const auto& schema = m.schema();
  std::vector<double> p, cm(m.stages()), step_adv(schema.group_count());
  std::vector<detail::Middle> mids(m.stages());
  std::vector<detail::MiddleHint> hints(m.stages());
  detail::SelectScratch scratch;
  detail::StepFrontier f;
  bool guessed = false;
  int guess = -1;
  for (int t = 0; t < m.steps(); ++t) {
    if (m.step_present_count(t) == 0) continue;
    detail::cohort_middles(m, t, mids, hints, scratch);
    for (int s = 0; s < m.stages(); ++s) cm[s] = mids[s].median();
    const std::span<const int> cf_groups =
        guess >= 0 && cfg.ambiguity_residual_leaders ? std::span<const int>(&guess, 1) : std::span<const int>();
    if (guessed && m.step_complete(t)) {
      // The rank pass forms the prefixes account_step would: it accounts the step as well.
      ws.add_step_accounting(m, t, cfg.account, f, cm, cf_groups, mids);
      detail::store_step(acc, t, f);
      continue;
    }
    detail::account_step(m, t, cfg.account, p, f);
    detail::store_step(acc, t, f);
    if (!guessed) {
      guessed = true;
      for (int s = 0; s < m.stages(); ++s) step_adv[schema.group_of(s)] += f.advance[s];
      const RankedStages ranked = rank_stages(step_adv, cfg.tau_c);
      guess = ranked.order.empty() || step_adv[ranked.order[0]] <= 0 ? -1 : ranked.order[0];
    }
    const std::span<const int> cf_first =
        guess >= 0 && cfg.ambiguity_residual_leaders ? std::span<const int>(&guess, 1) : std::span<const int>();
    ws.add_step(m, t, f, cm, nullptr, cf_first, mids);
  }
  if (cfg.ambiguity_residual_leaders && ws.top_group() != guess) return evaluate(m, acc, cfg, tel);
  ws.settle_standings();
  return finish_window(ws, m, acc, cfg, tel);
}

Evidence evaluate(const StageMatrix& m, const Accounting& acc, const LabelConfig& cfg, const TelemetryInput& tel) {
  validate(m.schema(), cfg);
  Eigen::MatrixXd rm;
  const Eigen::MatrixXd* rmp = nullptr;
  if (cfg.gain_baseline == GainBaseline::rank_median) {
    rm = detail::rank_window_median(m);
    rmp = &rm;
  }
  detail::WindowStats ws(m.schema(), m.ranks(), m.world_size(), m.rank_ids(), cfg);
  ws.pair_standings();  // m outlives the walk
  // The top group s1, whose residual-leader counterfactual the ambiguity set needs, is the group
  // with the largest summed advance: known from the accounting before the window is walked (the
  // same sums in the same order as WindowStats forms), so its counterfactual is taken in each
  // step's one pass.
  const auto& schema = m.schema();
  std::vector<double> adv(schema.group_count(), 0.0);
  for (int t = 0; t < m.steps(); ++t)
    if (acc.scored[t])
      for (int s = 0; s < m.stages(); ++s) adv[schema.group_of(s)] += acc.advance(t, s);
  const RankedStages ranked = rank_stages(adv, cfg.tau_c);
  const int s1 = ranked.order.empty() || adv[ranked.order[0]] <= 0 ? -1 : ranked.order[0];
  // Only the extension C_R reads it (LabelConfig::ambiguity_residual_leaders).
  const std::span<const int> cf_groups =
      s1 >= 0 && cfg.ambiguity_residual_leaders ? std::span<const int>(&s1, 1) : std::span<const int>();
  std::vector<double> cm(m.stages());
  std::vector<detail::Middle> mids(m.stages());
  std::vector<detail::MiddleHint> hints(m.stages());
  detail::SelectScratch scratch;
  detail::StepFrontier f;
  for (int t = 0; t < m.steps(); ++t)
    if (acc.scored[t]) {
      detail::cohort_middles(m, t, mids, hints, scratch);
      for (int s = 0; s < m.stages(); ++s) cm[s] = mids[s].median();
      detail::step_frontier_from(acc, t, f);
      ws.add_step(m, t, f, cm, rmp, cf_groups, mids);
    }
  if (ws.top_group() != s1)
    throw std::logic_error("evaluate: the top group from the accounting (" + std::to_string(s1) +
                           ") differs from the window's (" + std::to_string(ws.top_group()) + ")");
  ws.settle_standings();
  return finish_window(ws, m, acc, cfg, tel);
}

// --- streaming ---------------------------------------------------------------------------------

struct StreamingAccumulator::State {
  StageSchema schema;
  int world;
  std::vector<int> rank_ids;
  LabelConfig cfg;
  Scope scope;
  detail::WindowStats stats;
  std::int64_t first = 0, last = -1;
  int seen = 0, missing = 0;
  double total_s = 0;  // recorded step time so far (≤ kMaxWindowSeconds)
  // Per-step scratch: a step of 10^6 ranks allocates nothing.
  std::vector<double> cm, p;
  std::vector<detail::Middle> mids;
  std::vector<detail::MiddleHint> hints;
  std::vector<int> all_groups;
  detail::StepFrontier frontier;
  detail::SelectScratch select;
  State(StageSchema s, int w, std::vector<int> ids, LabelConfig c, Scope sc)
      : schema(std::move(s)), world(w), rank_ids(std::move(ids)), cfg(std::move(c)), scope(sc),
        stats(schema, rank_ids.empty() ? w : static_cast<int>(rank_ids.size()), w, rank_ids, cfg) {
    cm.resize(schema.size());
    mids.resize(schema.size());
    hints.resize(schema.size());
    if (cfg.ambiguity_residual_leaders)  // C_R, an extension, is the only reader of the counterfactuals
      for (int g = 0; g < schema.group_count(); ++g) all_groups.push_back(g);
  }
};

namespace {

/// The one-row Accounting of a step's frontier (account() of a one-step matrix).
void facts_from(const detail::StepFrontier& f, bool scored, int ranks, std::span<const double> lag, StepFacts& out) {
  auto& a = out.accounting;
  const int S = static_cast<int>(f.frontier.size());
  a.steps = 1;
  a.ranks = ranks;
  a.stages = S;
  a.frontier.resize(1, S);
  a.advance.resize(1, S);
  a.gap.resize(1, S);
  a.leader.resize(1, S);
  a.scored.assign(1, scored ? 1 : 0);
  a.ties.clear();
  for (int s = 0; s < S; ++s) {
    a.frontier(0, s) = f.frontier[s];
    a.advance(0, s) = f.advance[s];
    a.gap(0, s) = f.gap[s];
    a.leader(0, s) = f.leader[s];
    if (f.leader[s] == Accounting::kTie) a.ties.push_back({0, s, f.tie[s]});
  }
  if (scored) out.lag_s.assign(lag.begin(), lag.end());
  else out.lag_s.clear();
}

}  // namespace

StreamingAccumulator::StreamingAccumulator(StageSchema schema, int world_size, LabelConfig cfg, std::vector<int> rank_ids,
                                           Scope scope) {
  if (cfg.gain_baseline == GainBaseline::rank_median)
    throw std::invalid_argument("gain baseline rank_median needs the whole window; use cohort_median or reference");
  validate(schema, cfg);
  if (world_size < 1) throw std::invalid_argument("world size must be >= 1");
  // The layout is checked the way StageMatrix checks it (a full list is the dense layout).
  if (!rank_ids.empty()) rank_ids = StageMatrix(schema, world_size, std::move(rank_ids), 0, 0).rank_ids();
  state_ = std::make_unique<State>(std::move(schema), world_size, std::move(rank_ids), std::move(cfg), scope);
}

StreamingAccumulator::~StreamingAccumulator() = default;
StreamingAccumulator::StreamingAccumulator(StreamingAccumulator&&) noexcept = default;
StreamingAccumulator& StreamingAccumulator::operator=(StreamingAccumulator&&) noexcept = default;

int StreamingAccumulator::steps_seen() const { return state_->seen; }

void StreamingAccumulator::bound_medians(std::size_t exact_cap) {
  if (state_->seen > 0) throw std::invalid_argument("bound_medians before the first step only");
  state_->stats.bound_medians(exact_cap);
}

bool StreamingAccumulator::admit(const StageMatrix& one) {
  auto& st = *state_;
  if (one.steps() != 1) throw std::invalid_argument("add_step expects a one-step matrix");
  if (!(one.schema() == st.schema)) throw std::invalid_argument("step schema differs from the window's schema");
  if (one.world_size() != st.world || one.rank_ids() != st.rank_ids)
    throw std::invalid_argument("step world size or rank layout differs from the window's");
  const std::int64_t id = one.first_step();
  if (st.seen > 0 && id <= st.last) throw std::invalid_argument("step ids must increase");
  // The gap in unsigned arithmetic: id − last may not fit an int64 (UB), let alone an int.
  const std::uint64_t gap = st.seen > 0 ? static_cast<std::uint64_t>(id) - static_cast<std::uint64_t>(st.last) - 1 : 0;
  if (gap > static_cast<std::uint64_t>(std::numeric_limits<int>::max() - 1 - st.missing - st.seen))
    throw std::invalid_argument("step " + std::to_string(id) + " leaves a gap of " + std::to_string(gap) +
                                " steps: the window would span more than INT_MAX steps");
  if (!(st.total_s + one.total_seconds() <= kMaxWindowSeconds))
    throw std::invalid_argument("step " + std::to_string(id) + " carries the window past the most recorded step time one "
                                "window can hold (kMaxWindowSeconds)");
  st.total_s += one.total_seconds();
  if (st.seen == 0) st.first = id;
  else st.missing += static_cast<int>(gap);
  st.last = id;
  ++st.seen;
  if (one.step_present_count(0) == 0) {
    ++st.missing;
    return false;
  }
  return true;
}

void StreamingAccumulator::add_step(const StageMatrix& one, StepFacts* facts) {
  auto& st = *state_;
  const bool scored = admit(one);
  if (!scored && !facts) return;
  const bool full = scored && st.scope == Scope::full;
  if (full) {
    detail::cohort_middles(one, 0, st.mids, st.hints, st.select);
    for (int s = 0; s < one.stages(); ++s) st.cm[s] = st.mids[s].median();
  }
  // s1 is known only at the end: keep the counterfactual of every group (O(G·R·S) per step, in
  // the one pass over the ranks).
  if (full && one.step_complete(0)) {
    // evaluate()'s one pass: the rank pass accounts the step as it forms the prefixes.
    st.stats.add_step_accounting(one, 0, st.cfg.account, st.frontier, st.cm, st.all_groups, st.mids);
  } else {
    detail::account_step(one, 0, st.cfg.account, st.p, st.frontier);  // zeros for a step no rank is present in
    if (full) st.stats.add_step(one, 0, st.frontier, st.cm, nullptr, st.all_groups, st.mids);
    else if (scored) st.stats.add_segment_step(one, 0, st.frontier, {});
  }
  if (facts) facts_from(st.frontier, scored, one.ranks(), st.stats.last_lag(), *facts);
}

void StreamingAccumulator::add_accounted_step(const StageMatrix& one, const StepFacts& facts) {
  auto& st = *state_;
  if (st.scope != Scope::segment)
    throw std::invalid_argument("add_accounted_step: a full-scope accumulator takes the step's medians itself; use add_step");
  const auto& a = facts.accounting;
  if (a.steps != 1 || a.stages != st.schema.size() || a.ranks != one.ranks() ||
      (a.scored[0] != 0) != (one.step_present_count(0) > 0) ||
      (a.scored[0] != 0 && static_cast<int>(facts.lag_s.size()) != st.schema.size()))
    throw std::invalid_argument("add_accounted_step: the facts are not this step's (steps, stages, ranks or presence differ)");
  if (!admit(one)) return;
  detail::step_frontier_from(a, 0, st.frontier);
  st.stats.add_segment_step(one, 0, st.frontier, facts.lag_s);
}

Evidence StreamingAccumulator::finish(const TelemetryInput& tel) const {
  const auto& st = *state_;
  auto [ev, side] = st.stats.finish(st.first, st.last, st.missing);
  label(ev, side, st.cfg, tel);
  if (st.scope == Scope::segment) {
    // The labels read the static gain and the baselines, which a segment does not form; its
    // suspects (the same rule on what it does form) stay.
    ev.labels.clear();
    ev.downgrade_reasons.clear();
    ev.telemetry_reasons = 0;
    ev.co_critical_stages.clear();
  }
  ev.diagnosis = diagnose(ev, nullptr, st.cfg.diagnosis);
  ev.whatif = what_if(ev, nullptr);
  return ev;
}

// --- names -------------------------------------------------------------------------------------

namespace {
constexpr std::string_view kLabelNames[kLabelCount] = {
    "frontier_accounting",          "likely_sync_wait",          "sync_wait_dependent",
    "direct_exposure",              "forward_device_supported",  "forward_spillover_suspected",
    "forward_host_overhead_suspected", "forward_event_scope_limited", "co_critical",
    "gradient_accumulation_ambiguous", "role_aware_needed",      "telemetry_limited"};
}

std::string_view to_string(Label l) { return kLabelNames[static_cast<int>(l)]; }

std::optional<Label> label_from_string(std::string_view s) {
  for (int i = 0; i < kLabelCount; ++i)
    if (kLabelNames[i] == s) return static_cast<Label>(i);
  return std::nullopt;
}

bool is_strong(Label l) {
  switch (l) {
    case Label::likely_sync_wait:
    case Label::sync_wait_dependent:
    case Label::direct_exposure:
    case Label::forward_device_supported:
    case Label::forward_spillover_suspected:
    case Label::forward_host_overhead_suspected: return true;
    default: return false;
  }
}

std::string_view to_string(BaselineRule rule) {
  switch (rule) {
    case BaselineRule::per_stage_max: return "per_stage_max";
    case BaselineRule::per_stage_avg: return "per_stage_avg";
    case BaselineRule::raw_spread: return "raw_spread";
    case BaselineRule::slowest_rank: return "slowest_rank";
    case BaselineRule::rank0_total: return "rank0_total";
  }
  return "?";
}

std::string_view to_string(GainBaseline b) {
  switch (b) {
    case GainBaseline::rank_median: return "rank_median";
    case GainBaseline::cohort_median: return "cohort_median";
    case GainBaseline::reference: return "reference";
  }
  return "?";
}

std::optional<GainBaseline> gain_baseline_from_string(std::string_view s) {
  for (auto b : {GainBaseline::rank_median, GainBaseline::cohort_median, GainBaseline::reference})
    if (to_string(b) == s) return b;
  return std::nullopt;
}

bool Evidence::has(Label l) const { return std::find(labels.begin(), labels.end(), l) != labels.end(); }

}  // namespace sf::frontier
