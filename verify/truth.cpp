#include "sf/verify/verify.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace sf::verify {

using frontier::Evidence;

namespace {

/// One rule's view: `order` ranks the groups, `share` normalises their scores. A top-1 within
/// η_A of the runner-up is a tie (the labeler's co-critical rule), counted apart from top-1.
RuleVerdict rule_verdict(const std::vector<int>& order, const std::vector<double>& score,
                         const std::vector<double>& share, const std::vector<int>& candidates, int g, double eta_a) {
  RuleVerdict v;
  v.candidate_size = static_cast<int>(candidates.size());
  if (g < 0) return v;
  // A stage with zero score is not "among the top" even if the list is short.
  const bool first = !order.empty() && order[0] == g && score[g] > 0;
  const bool second = order.size() > 1 && order[1] == g && score[g] > 0;
  v.top2 = first || second;
  const double margin = order.size() > 1 ? share[order[0]] - share[order[1]] : share.empty() ? 0.0 : share[order[0]];
  const bool tied = order.size() > 1 && score[order[1]] > 0 && margin <= eta_a;
  v.top1_tie = v.top2 && tied;
  v.top1 = first && !tied;
  v.candidate_hit = std::find(candidates.begin(), candidates.end(), g) != candidates.end();
  return v;
}

std::vector<double> normalised(const std::vector<double>& score) {
  double total = 0;
  for (double x : score) total += std::max(0.0, x);
  std::vector<double> out(score.size(), 0.0);
  if (total > 0)
    for (std::size_t i = 0; i < score.size(); ++i) out[i] = std::max(0.0, score[i]) / total;
  return out;
}

}  // namespace

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::top1: return "top1";
    case Outcome::tie: return "tie";
    case Outcome::top2: return "top2";
    case Outcome::unrouted: return "unrouted";
    case Outcome::misrouted: return "misrouted";
    case Outcome::routed: return "routed";
  }
  return "?";
}

std::string_view to_string(DiagnosisOutcome o) {
  switch (o) {
    case DiagnosisOutcome::hit: return "hit";
    case DiagnosisOutcome::stage_only: return "stage_only";
    case DiagnosisOutcome::rank_only: return "rank_only";
    case DiagnosisOutcome::miss: return "miss";
    case DiagnosisOutcome::unnamed: return "unnamed";
    case DiagnosisOutcome::quiet: return "quiet";
    case DiagnosisOutcome::not_exposed: return "not_exposed";
    case DiagnosisOutcome::false_alarm: return "false_alarm";
    case DiagnosisOutcome::common: return "common";
    case DiagnosisOutcome::unexplained: return "unexplained";
    case DiagnosisOutcome::common_not_rank: return "common_not_rank";
  }
  return "?";
}

bool exposed_in(const frontier::Evidence& e) {
  return !e.differential || e.differential->delta_exposed_s > e.differential->exposed_noise_floor_s;
}

DiagnosisVerdict judge_diagnosis(const Evidence& e, const Expected& x) {
  DiagnosisVerdict v;
  const auto& d = e.diagnosis;
  const auto g = e.schema.group_index(x.stage);
  const bool named = d.significant();
  const bool rank_named = named && d.rank >= 0;
  auto injected = [&](int r) { return std::find(x.ranks.begin(), x.ranks.end(), r) != x.ranks.end(); };
  const auto also = x.also_stage.empty() ? std::nullopt : e.schema.group_index(x.also_stage);
  v.stage_hit = named && (x.any_stage || (g && d.group == *g) || (also && d.group == *also));
  v.rank_hit = rank_named && injected(d.rank);
  v.fault = (x.any_stage || !x.stage.empty()) && (x.delay_s > 0 || x.rate_fault) && x.active_fraction > 0;
  // Exposed: the window's exposed step grew past its noise floor against the reference (the rule
  // the run's text prints), or the diagnosis found the injected change itself past its floor.
  // Without a reference nothing says the fault did not reach the step.
  v.exposed = v.fault && (exposed_in(e) || (v.stage_hit && v.rank_hit));
  // Every culprit against every injected rank.
  std::vector<int> culprits;
  for (const auto& c : d.culprits) culprits.push_back(c.rank);
  if (rank_named && std::find(culprits.begin(), culprits.end(), d.rank) == culprits.end()) culprits.push_back(d.rank);
  v.culprits_named = static_cast<int>(culprits.size());
  v.culprits_true = static_cast<int>(std::count_if(culprits.begin(), culprits.end(), injected));
  if (v.culprits_named > 0) v.precision = static_cast<double>(v.culprits_true) / v.culprits_named;
  if (v.fault && !x.ranks.empty()) v.recall = static_cast<double>(v.culprits_true) / static_cast<double>(x.ranks.size());
  // A fault every rank shares: every rank of the window injected, or a link they all cross.
  const bool shared = x.shared || (x.world > 0 && static_cast<int>(x.ranks.size()) >= x.world);
  using O = DiagnosisOutcome;
  if (!v.fault) v.outcome = !named ? O::quiet : d.common ? O::common : O::unexplained;
  else if (d.common && named) v.outcome = !v.exposed ? O::false_alarm : shared && v.stage_hit ? O::common : O::common_not_rank;
  else if (v.stage_hit && v.rank_hit) v.outcome = O::hit;
  else if (!v.exposed) v.outcome = named ? O::false_alarm : O::not_exposed;
  else if (!named) v.outcome = O::unnamed;
  else if (x.any_stage) v.outcome = O::miss;  // a straggler's truth is its rank: any other is a miss
  else v.outcome = v.stage_hit ? O::stage_only : v.rank_hit ? O::rank_only : O::miss;
  return v;
}

Verdict score(const Evidence& e, const Expected& x) {
  Verdict v;
  v.diagnosis = judge_diagnosis(e, x);
  const auto g = e.schema.group_index(x.stage);
  const int gi = g ? *g : -1;
  const int G = e.schema.group_count();
  const std::vector<double> share = normalised(e.advances_s);
  v.frontier = rule_verdict(e.share_order, e.advances_s, share, e.routing_set, gi, x.eta_a);
  for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i) {
    const auto& rs = e.baselines.rules[i];
    v.baselines[i] = rule_verdict(rs.order, rs.score, normalised(rs.score), rs.candidates, gi, x.eta_a);
  }
  // The rank the evidence names for the injected stage (the headline suspect when it has none).
  int named = e.suspect.rank;
  for (const auto& s : e.stage_suspects)
    if (s.group == gi) named = s.rank;
  v.rank_hit = named >= 0 && std::find(x.ranks.begin(), x.ranks.end(), named) != x.ranks.end();
  v.routed = v.frontier.candidate_hit;

  // Where the injected delay went: each group's advance per step above the healthy reference.
  const int top = e.share_order.empty() ? -1 : e.share_order[0];
  const bool top_confident =
      top >= 0 && (e.share_order.size() < 2 || share[top] - share[e.share_order[1]] > x.eta_a);
  if (static_cast<int>(x.reference_advance_s.size()) == G && e.steps > 0) {
    std::vector<double> excess(G, 0.0);
    double sum = 0;
    for (int k = 0; k < G; ++k) {
      excess[k] = std::max(0.0, e.advances_s[k] / e.steps - x.reference_advance_s[k]);
      sum += excess[k];
    }
    v.exposed_s = sum;
    v.absorbed_basis = "reference";
    if (sum > 0) {
      v.absorbed_group = static_cast<int>(std::max_element(excess.begin(), excess.end()) - excess.begin());
      v.absorbed_share = excess[v.absorbed_group] / sum;
    }
    // A confident misroute: at least half the delay reached the step, most of it went to one
    // other stage, and the frontier names that stage first by more than the tie tolerance.
    const double expected = x.delay_s * x.active_fraction;
    v.misroute = gi >= 0 && expected > 0 && sum >= 0.5 * expected && v.absorbed_group != gi &&
                 v.absorbed_share >= 0.5 && v.absorbed_group == top && top_confident &&
                 (x.should_route ? !v.frontier.top2 : true);
  } else if (top >= 0) {
    v.absorbed_basis = "top_share";
    v.absorbed_group = top;
    v.absorbed_share = share[top];
  } else {
    v.absorbed_basis = "none";
  }

  if (x.should_route) {
    v.outcome = v.frontier.top1 ? Outcome::top1
                : v.frontier.top1_tie ? Outcome::tie
                : v.frontier.top2 ? Outcome::top2
                : v.misroute ? Outcome::misrouted
                             : Outcome::unrouted;
  } else {
    v.outcome = v.routed ? Outcome::routed : v.misroute ? Outcome::misrouted : Outcome::unrouted;
  }
  return v;
}

namespace {

struct Diff {
  double tol;
  std::string out;
  bool num(const std::string& what, double a, double b) {
    if (!out.empty()) return false;
    if (a == b || (std::isnan(a) && std::isnan(b))) return true;
    if (std::abs(a - b) <= tol * std::max(std::abs(a), std::abs(b))) return true;
    std::ostringstream os;
    os.precision(17);
    os << what << ": " << a << " vs " << b;
    out = os.str();
    return false;
  }
  template <typename T>
  bool vec(const std::string& what, const std::vector<T>& a, const std::vector<T>& b) {
    if (!out.empty()) return false;
    if (a.size() != b.size()) {
      out = what + ": size " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
      return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!num(what + "[" + std::to_string(i) + "]", static_cast<double>(a[i]), static_cast<double>(b[i]))) return false;
    return true;
  }
  bool same(const std::string& what, bool eq) {
    if (out.empty() && !eq) out = what + " differ";
    return eq;
  }
};

}  // namespace

std::string evidence_difference(const Evidence& a, const Evidence& b, double rel_tol) {
  Diff d{rel_tol, {}};
  d.same("schema", a.schema == b.schema);
  d.num("first_step", static_cast<double>(a.first_step), static_cast<double>(b.first_step));
  d.num("last_step", static_cast<double>(a.last_step), static_cast<double>(b.last_step));
  d.num("steps", a.steps, b.steps);
  d.num("world_size", a.world_size, b.world_size);
  d.num("missing_steps", a.missing_steps, b.missing_steps);
  d.num("exposed_makespan_s", a.exposed_makespan_s, b.exposed_makespan_s);
  d.num("per_stage_max_s", a.per_stage_max_s, b.per_stage_max_s);
  d.num("per_stage_avg_s", a.per_stage_avg_s, b.per_stage_avg_s);
  d.num("median_step_s", a.median_step_s, b.median_step_s);
  d.same("shares_valid", a.shares_valid == b.shares_valid);
  d.vec("advances_s", a.advances_s, b.advances_s);
  d.vec("shares", a.shares, b.shares);
  d.vec("static_gain", a.static_gain, b.static_gain);
  d.vec("lag_mean_s", a.lag_mean_s, b.lag_mean_s);
  d.vec("lag_increment_mean_s", a.lag_increment_mean_s, b.lag_increment_mean_s);
  d.vec("gap_mean_s", a.gap_mean_s, b.gap_mean_s);
  d.vec("leader_switches", a.leader_switches, b.leader_switches);
  d.vec("confident_leaders", a.confident_leaders, b.confident_leaders);
  d.same("leaders size", a.leaders.size() == b.leaders.size());
  for (std::size_t g = 0; g < a.leaders.size() && g < b.leaders.size() && d.out.empty(); ++g) {
    d.same("leaders[" + std::to_string(g) + "] size", a.leaders[g].size() == b.leaders[g].size());
    for (std::size_t i = 0; i < a.leaders[g].size() && i < b.leaders[g].size(); ++i) {
      d.num("leader rank", a.leaders[g][i].rank, b.leaders[g][i].rank);
      d.num("leader advance", a.leaders[g][i].advance_s, b.leaders[g][i].advance_s);
      d.num("leader steps", a.leaders[g][i].steps_led, b.leaders[g][i].steps_led);
    }
  }
  d.vec("routing_set", a.routing_set, b.routing_set);
  d.vec("share_order", a.share_order, b.share_order);
  d.vec("co_critical_stages", a.co_critical_stages, b.co_critical_stages);
  std::vector<int> la, lb;
  for (auto l : a.labels) la.push_back(static_cast<int>(l));
  for (auto l : b.labels) lb.push_back(static_cast<int>(l));
  d.vec("labels", la, lb);
  d.num("suspect.group", a.suspect.group, b.suspect.group);
  d.num("suspect.rank", a.suspect.rank, b.suspect.rank);
  d.same("suspect.basis", a.suspect.basis == b.suspect.basis);
  d.num("suspect.confidence", a.suspect.confidence, b.suspect.confidence);
  d.same("stage_suspects size", a.stage_suspects.size() == b.stage_suspects.size());
  for (std::size_t i = 0; i < a.stage_suspects.size() && i < b.stage_suspects.size(); ++i) {
    d.num("stage_suspect group", a.stage_suspects[i].group, b.stage_suspects[i].group);
    d.num("stage_suspect rank", a.stage_suspects[i].rank, b.stage_suspects[i].rank);
    d.same("stage_suspect basis", a.stage_suspects[i].basis == b.stage_suspects[i].basis);
  }
  for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i) {
    const std::string n = "baseline " + std::string(frontier::to_string(frontier::kBaselineRules[i]));
    d.vec(n + " score", a.baselines.rules[i].score, b.baselines.rules[i].score);
    d.vec(n + " order", a.baselines.rules[i].order, b.baselines.rules[i].order);
    d.vec(n + " candidates", a.baselines.rules[i].candidates, b.baselines.rules[i].candidates);
  }
  d.num("events.sampled", a.events.sampled, b.events.sampled);
  d.num("events.ready", a.events.ready, b.events.ready);
  d.num("events.max_rank_median_s", a.events.max_rank_median_s, b.events.max_rank_median_s);
  d.num("events.max_rank", a.events.max_rank, b.events.max_rank);
  d.num("closure_residual_share", a.closure_residual_share, b.closure_residual_share);
  d.num("overlap_error_share", a.overlap_error_share, b.overlap_error_share);
  d.same("missing_ranks", a.missing_ranks == b.missing_ranks);
  d.num("missing_rank_count", static_cast<double>(a.missing_rank_count), static_cast<double>(b.missing_rank_count));
  d.num("missing_records", static_cast<double>(a.missing_records), static_cast<double>(b.missing_records));
  d.same("gather_ok", a.gather_ok == b.gather_ok);
  d.same("downgrade_reasons", a.downgrade_reasons == b.downgrade_reasons);
  return d.out;
}

}  // namespace sf::verify
