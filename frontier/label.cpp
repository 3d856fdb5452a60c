// The labeler (paper Appendix C, Tables 12 and 13): gates → labels with reasons, the ambiguity
// set and the suspect ranks. Reads the window statistics and the per-rank side evidence; computes
// no statistic of its own beyond the decisions. docs/labeler.md gives every choice.
#include "detail.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace sf::frontier {

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

/// The rank the evidence names for group g: the confident frontier leader, else the rank the
/// others waited for in g's collectives, else the most-credited leader.
Suspect suspect_for(const Evidence& e, const SideEvidence& side, const LabelConfig& cfg, int g) {
  Suspect sus;
  sus.group = g;
  const int R = side.ranks;
  const double adv = e.advances_s[g];
  const SideEvidence::Credit* best_conf = nullptr;  // the largest confident credit, lowest rank on a tie
  for (const auto& c : side.confident_credit[g])
    if (c.s > 0 && (best_conf == nullptr || c.s > best_conf->s)) best_conf = &c;
  // e.leaders[g] lists the most-credited ranks, largest credit first (ties: lower rank first).
  const LeaderCredit* best = e.leaders[g].empty() ? nullptr : &e.leaders[g].front();
  std::vector<double> waits;
  int quiet = -1;
  double quiet_wait = 0;
  const auto& group_waits = side.sync_wait_mean_s[g];
  for (int r = 0; r < static_cast<int>(group_waits.size()); ++r) {
    const double w = group_waits[r];
    if (std::isnan(w)) continue;
    waits.push_back(w);
    if (quiet < 0 || w < quiet_wait) {
      quiet = r;
      quiet_wait = w;
    }
  }
  const double wait_median = waits.empty() ? 0.0 : median_inplace(waits);
  if (best_conf != nullptr && best_conf->s >= 0.5 * adv) {
    sus.rank = best_conf->rank;
    sus.basis = "frontier_leader";
    sus.confidence = best_conf->s / adv;
  } else if (R > 1 && quiet >= 0 && waits.size() > 1 && wait_median - quiet_wait >= cfg.eta_q * e.median_step_s &&
             wait_median > 0) {
    // The rank the others waited for blocks least inside the stage's collectives.
    sus.rank = quiet;
    sus.basis = "sync_wait_side_evidence";
    sus.confidence = 1.0 - quiet_wait / wait_median;
  } else if (best) {
    sus.rank = best->rank;
    sus.basis = "frontier_leader_weak";
    sus.confidence = best->advance_s / adv;
  }
  return sus;
}

}  // namespace

std::string accumulation_problem(const StageSchema& schema) {
  const int m = schema.accumulation();
  if (m <= 1) return "";
  // Microstep index per stage (−1: an un-suffixed stage), and which indices each group has.
  const int S = schema.size(), G = schema.group_count();
  std::vector<int> index(S, -1);
  std::vector<std::vector<int>> seen(G, std::vector<int>(m, 0));
  std::vector<std::uint8_t> suffixed(G, 0);
  int first = -1, last = -1;
  for (int s = 0; s < S; ++s) {
    const std::string& n = schema.name(s);
    const auto sep = n.find(kMicrostepSeparator);
    if (sep == std::string::npos) continue;
    int i = -1;
    const char* b = n.data() + sep + 1;
    const char* e = n.data() + n.size();
    const auto [end, ec] = std::from_chars(b, e, i);
    if (ec != std::errc() || end != e || i < 0 || i >= m)
      return "stage " + n + ": microstep index is not an integer in 0.." + std::to_string(m - 1) + " (accumulation " +
             std::to_string(m) + ")";
    const int g = schema.group_of(s);
    if (seen[g][i]++) return "stage " + n + ": microstep " + std::to_string(i) + " of " + schema.groups()[g] + " appears twice";
    suffixed[g] = 1;
    index[s] = i;
    if (first < 0) first = s;
    last = s;
  }
  if (first < 0)
    return "accumulation factor " + std::to_string(m) + " with collapsed microsteps: data/backward displacement cannot be separated";
  for (int g = 0; g < G; ++g) {
    if (!suffixed[g]) continue;
    int have = 0;
    for (int i = 0; i < m; ++i) have += seen[g][i] ? 1 : 0;
    if (have != m)
      return "accumulation factor " + std::to_string(m) + " but " + schema.groups()[g] + " has " + std::to_string(have) +
             " of its " + std::to_string(m) + " microsteps: mixed collapsed and unfolded microsteps";
  }
  for (int s = first; s <= last; ++s)
    if (index[s] < 0)
      return "stage " + schema.name(s) + " sits inside the microstep loop without a microstep index: mixed collapsed and unfolded microsteps";
  // Data, forward and backward run once per microstep (the recorder unfolds exactly these): one of
  // them without an index beside unfolded stages is collapsed, wherever it sits. (Structurally it
  // looks like a once-per-step stage after the loop; only its name tells.)
  const auto per_microstep = default_explicit_stages();
  for (int s = 0; s < S; ++s)
    if (index[s] < 0 && std::find(per_microstep.begin(), per_microstep.begin() + 3, schema.name(s)) != per_microstep.begin() + 3)
      return "stage " + schema.name(s) + " runs once per microstep but has no microstep index beside unfolded stages: "
             "mixed collapsed and unfolded microsteps";
  return "";
}

namespace {

/// One labelling pass over a window: what it reads and the labels and reasons it has set so far.
struct Pass {
  Evidence& e;
  const SideEvidence& side;
  const LabelConfig& cfg;
  bool lab[kLabelCount] = {};
  void set(Label l) { lab[static_cast<int>(l)] = true; }
  void why(std::string reason) { e.downgrade_reasons.push_back(std::move(reason)); }
  const std::string& group(int g) const { return e.schema.groups()[g]; }
};

/// Telemetry gates (Appendix C, Table 13): a reason for each one that fails; true when any does.
bool telemetry_gates(Pass& p, const TelemetryInput& tel) {
  const Evidence& e = p.e;
  const LabelConfig& cfg = p.cfg;
  bool limited = false;
  auto limit = [&](std::string reason) {
    limited = true;
    p.why(std::move(reason));
  };
  if (!tel.gather_ok) limit("gather_ok=false: window scored with what arrived");
  for (const auto& r : tel.reasons) limit(r);
  if (tel.dropped_records > 0) limit("recorder dropped " + std::to_string(tel.dropped_records) + " records (buffer overflow)");
  if (tel.duplicate_records > 0) limit(std::to_string(tel.duplicate_records) + " duplicate (step, rank) records");
  if (e.missing_rank_count > cfg.max_missing_ranks) {
    // Ranges and a count: a window of 16 M ranks with two records gives one short line.
    limit("missing ranks: " + std::to_string(e.missing_rank_count) + " rank(s) [" +
          format_rank_ranges(e.missing_ranks) + "] absent from " +
          std::to_string(e.missing_records) + " (step, rank) records; gate allows " + std::to_string(cfg.max_missing_ranks));
  }
  if (e.missing_steps > 0) limit(std::to_string(e.missing_steps) + " step(s) of the window have no records");
  // No step wall: the closure residual and overlap error cannot be formed, so their gates cannot
  // be passed (Table 12: "missing probes cap confidence"). Never silently.
  if (!e.has_wall && e.steps > 0) {
    const std::string no_wall = "no step wall times: closure residual and overlap error cannot be checked";
    if (cfg.require_wall) limit(no_wall);
    else p.why(no_wall + " (require_wall=false: scored without those gates)");
  }
  if (e.has_wall && e.closure_residual_share > cfg.max_closure_residual_share)
    limit("closure residual share " + fmt(e.closure_residual_share) + " > " + fmt(cfg.max_closure_residual_share));
  if (e.has_wall && e.overlap_error_share > cfg.max_overlap_error_share)
    limit("overlap error share " + fmt(e.overlap_error_share) + " > " + fmt(cfg.max_overlap_error_share));
  if (e.steps == 0) limit("no step has any record");
  return limited;
}

/// The ranks' declared roles. An empty string is an undeclared role.
struct Roles {
  bool differ = false;  ///< two different declared roles: a global frontier is unsafe
  bool weak = false;    ///< no roles, or some rank undeclared (Table 12: downgrades likely_sync_wait)
  int undeclared = 0;
};

Roles role_gate(Pass& p) {
  Roles out;
  std::string role_a, role_b;
  for (const auto& r : p.side.roles) {
    if (r.empty()) ++out.undeclared;
    else if (role_a.empty()) role_a = r;
    else if (r != role_a && role_b.empty()) role_b = r;
  }
  out.differ = !role_b.empty();
  out.weak = p.side.roles.empty() || out.undeclared > 0;
  if (out.differ) {
    p.set(Label::role_aware_needed);
    p.why("ranks have different roles (" + role_a + ", " + role_b +
          "): global frontier across roles is unsafe; group ranks by role");
  }
  return out;
}

/// The top two groups by share and what the stage rules read of the top one.
struct Top {
  int s1 = -1, s2 = -1;
  double a1 = 0, g1 = 0;  ///< A_s1, G_s1
  bool dominant = false;  ///< A_s1 > γ_A
  bool w1 = false;        ///< W_s1 = 1 (the caller asserts the wait model for s1)
};

Top top_stage(const Pass& p) {
  const Evidence& e = p.e;
  Top t;
  t.s1 = e.share_order.empty() ? -1 : e.share_order[0];
  t.s2 = e.share_order.size() > 1 ? e.share_order[1] : -1;
  t.a1 = t.s1 >= 0 ? e.shares[t.s1] : 0.0;
  t.g1 = t.s1 >= 0 ? e.static_gain[t.s1] : 0.0;
  t.dominant = t.a1 > p.cfg.gamma_a;
  t.w1 = t.s1 >= 0 && std::find(e.wait_declared.begin(), e.wait_declared.end(), t.s1) != e.wait_declared.end();
  return t;
}

/// C_A and C_G: the groups near the top by share and by clipped static gain.
struct Ambiguity {
  std::vector<int> c_a, c_g;
};

/// Ambiguity set E_amb = C_A ∪ C_G (Appendix C), ∪ C_R with ambiguity_residual_leaders
/// (docs/labeler.md), into e.co_critical_stages. The share and gain ties that make a window
/// co_critical are exactly |C_A| ≥ 2 and |C_G| ≥ 2, so the label and the set agree.
Ambiguity ambiguity_set(Pass& p, const Top& top) {
  Evidence& e = p.e;
  const LabelConfig& cfg = p.cfg;
  const int G = e.schema.group_count();
  Ambiguity out;
  if (!(e.shares_valid && top.s1 >= 0 && top.a1 > 0)) return out;
  std::vector<std::uint8_t> in(G, 0);
  double gmax = 0;
  for (int g = 0; g < G; ++g) gmax = std::max(gmax, e.static_gain[g]);
  for (int g : e.share_order) {
    if (e.shares[g] > 0 && e.shares[g] >= top.a1 - cfg.eta_a) {  // C_A
      out.c_a.push_back(g);
      in[g] = 1;
    }
    if (e.static_gain[g] >= cfg.gamma_g && e.static_gain[g] >= gmax - cfg.eta_g) {  // C_G
      out.c_g.push_back(g);
      in[g] = 1;
    }
  }
  if (cfg.ambiguity_residual_leaders && !p.side.residual_shares.empty()) {
    // C_R: stages that lead once s1 is replaced by its clipped baseline "can remain
    // bottlenecks after optimizing one stage" (Table 12, co_critical).
    double top_rs = 0;
    for (int h = 0; h < G; ++h) top_rs = std::max(top_rs, p.side.residual_shares[h]);
    for (int h = 0; h < G; ++h) {
      const double rs = p.side.residual_shares[h];
      if (rs > 0 && rs >= top_rs - cfg.eta_a) in[h] = 1;
    }
  }
  for (int g : e.share_order)
    if (in[g]) e.co_critical_stages.push_back(g);
  return out;
}

/// Stage groups named in one line: at most kNamed of them, so a tie of thousands stays readable.
std::string group_list(const Pass& p, const std::vector<int>& gs) {
  constexpr std::size_t kNamed = 8;
  std::string out;
  for (std::size_t i = 0; i < gs.size() && i < kNamed; ++i) out += (out.empty() ? "" : ", ") + p.group(gs[i]);
  if (gs.size() > kNamed) out += " and " + std::to_string(gs.size() - kNamed) + " more";
  return out;
}

/// True when the leader of s1 switches more often than γ_switch between confident unique leaders
/// (Appendix C: "high-leader-switch windows are likewise downgraded"), with a reason.
bool leader_switching(Pass& p, const Top& top) {
  const Evidence& e = p.e;
  const int s1 = top.s1;
  if (e.world_size <= 1) return false;
  const int conf = e.confident_leaders[s1], sw = e.leader_switches[s1];
  const int chances = p.side.switch_chances.empty() ? conf - 1 : p.side.switch_chances[s1];
  if (!(conf >= 3 && chances > 0 && static_cast<double>(sw) / chances > p.cfg.gamma_switch)) return false;
  std::string ranks;
  for (std::size_t i = 0; i < e.leaders[s1].size() && i < 4; ++i)
    ranks += (i ? "," : "") + std::to_string(p.side.rank_id(e.leaders[s1][i].rank));
  p.why("leader of " + p.group(s1) + " switched " + std::to_string(sw) + " times in " + std::to_string(chances) +
        " chances between confident unique leaders (ranks " + ranks + "): several ranks co-critical, no stage label stands");
  return true;
}

/// True when s1 is among the top two groups of a baseline's scores by value: its score is above 0
/// and at most one group scores strictly more. Ties count for every tied group (the ranking's
/// stage-order tie break made the same pattern agree at index 0 and not at index 2), and a score
/// of 0 agrees with nothing (every rank equally long, or R = 1: no straggler to agree with).
bool in_top2(const RankedStages& ranked, int s1) {
  const double v = ranked.score[s1];
  if (!(v > 0)) return false;
  int above = 0;
  for (double x : ranked.score) above += x > v ? 1 : 0;
  return above < 2;
}

/// direct_exposure and the sync-wait labels for a dominant, unambiguous s1.
void strong_stage_labels(Pass& p, const Top& top, const Roles& roles) {
  const Evidence& e = p.e;
  const LabelConfig& cfg = p.cfg;
  const int s1 = top.s1, R = e.world_size, G = e.schema.group_count();
  const std::string& n1 = p.group(s1);
  const bool spread_ok = in_top2(e.baselines[BaselineRule::raw_spread], s1);
  const bool pmax_ok = in_top2(e.baselines[BaselineRule::per_stage_max], s1);
  if (top.g1 >= cfg.gamma_g) {
    // Table 12: "raw duration, spread, and clipped static sensitivity agree with the frontier
    // stage": all three, so s1 must be top-2 by per-stage max and by raw spread (by value).
    if (spread_ok && pmax_ok)
      p.set(Label::direct_exposure);
    else
      p.why("gain of " + n1 + " " + fmt(top.g1) + " >= gamma_G but " +
            (pmax_ok ? std::string("raw spread ranks it") : spread_ok ? std::string("raw duration ranks it")
                                                                      : std::string("raw duration and spread rank it")) +
            " below top-2: the evidence does not agree, no direct_exposure");
  } else if (top.w1 && R > 1) {
    p.set(Label::sync_wait_dependent);
  }
  if (!(top.w1 && R > 1)) return;
  // Sync-wait signature: the lag opens at s1 and collapses downstream as ranks wait.
  double collapse = 0;
  for (int g = s1 + 1; g < G; ++g) collapse += std::min(0.0, e.lag_increment_mean_s[g]);
  const double open = e.lag_increment_mean_s[s1];
  if (!(open > 0 && -collapse >= 0.5 * open))
    p.why("wait model asserted for " + n1 + " but the lag does not open there and close downstream");
  else if (roles.weak)
    p.why("lag opens at " + n1 + " and closes downstream, but role metadata is missing for " +
          (p.side.roles.empty() ? std::string("every rank") : std::to_string(roles.undeclared) + " rank(s)") +
          ": no likely_sync_wait (Table 12: weak role metadata)");
  else
    p.set(Label::likely_sync_wait);
}

/// Stage diagnosis (Appendix C) of an undowngraded window whose top group advanced.
void stage_labels(Pass& p, const Top& top, const Ambiguity& amb, const Roles& roles) {
  const Evidence& e = p.e;
  const LabelConfig& cfg = p.cfg;
  const int R = e.world_size;
  const std::string& n1 = p.group(top.s1);
  if (!top.dominant)
    p.why("no dominant stage: top share " + fmt(top.a1) + " (" + n1 + ") <= gamma_A " + fmt(cfg.gamma_a));
  // Appendix C: "near-tied or high-leader-switch windows are likewise downgraded".
  const bool share_tie = amb.c_a.size() >= 2;
  const bool gain_tie = amb.c_g.size() >= 2;
  if (share_tie)
    p.why("near tie: shares of " + group_list(p, amb.c_a) + " are within eta_A " + fmt(cfg.eta_a) + " of the top " + fmt(top.a1));
  if (gain_tie) p.why("static gains of " + group_list(p, amb.c_g) + " are >= gamma_G and within eta_G " + fmt(cfg.eta_g));
  // Ranks trading the lead of s1 are co-critical ranks (Table 12: "multiple stages or ranks"),
  // whatever the ambiguity set holds.
  const bool switching = leader_switching(p, top);
  const bool ambiguous = share_tie || gain_tie || switching;
  // Appendix C: "the same low-gain configuration with W_s1 = 0 is co_critical".
  const bool low_gain_w0 = top.dominant && !ambiguous && top.g1 < cfg.gamma_g && !top.w1;
  const bool second_stage = e.co_critical_stages.size() >= 2;
  if (R > 1 && low_gain_w0 && cfg.co_critical_needs_two_stages && !second_stage) {
    p.why(n1 + " share " + fmt(top.a1) + " > gamma_A with static gain " + fmt(top.g1) +
          " < gamma_G and no wait model (W=0), but no other stage can take the lead once " + n1 +
          " is at its baseline (ambiguity set {" + n1 + "}, co_critical_needs_two_stages): no co_critical");
  } else if (R > 1 && (ambiguous || low_gain_w0)) {
    p.set(Label::co_critical);
    if (low_gain_w0)
      p.why(n1 + " share " + fmt(top.a1) + " > gamma_A with static gain " + fmt(top.g1) +
            " < gamma_G and no wait model (W=0): " +
            (second_stage ? group_list(p, e.co_critical_stages) + " not separable"
                          : "a wait born upstream and independent work in " + n1 + " cannot be told apart"));
  }
  if (top.dominant && !ambiguous) strong_stage_labels(p, top, roles);
}

/// Forward CUDA-event side evidence (Table 12 device axis), only where events were sampled.
void event_labels(Pass& p, const Top& top, bool diagnose) {
  const Evidence& e = p.e;
  const SideEvidence& side = p.side;
  const LabelConfig& cfg = p.cfg;
  if (e.events.sampled <= 0) return;
  const bool low_ready = e.events.ready_ratio < cfg.min_event_ready_ratio;
  // A rank's median event time counts only with at least min_event_samples ready samples.
  auto eligible = [&](int r) {
    return r >= 0 && r < static_cast<int>(side.fwd_event_ready.size()) && side.fwd_event_ready[r] >= cfg.min_event_samples &&
           std::isfinite(side.fwd_event_median_s[r]);
  };
  int hi_rank = -1;
  for (int r = 0; r < side.ranks; ++r)
    if (eligible(r) && (hi_rank < 0 || side.fwd_event_median_s[r] > side.fwd_event_median_s[hi_rank])) hi_rank = r;
  if (low_ready || cfg.event_scope_limited) {
    p.set(Label::forward_event_scope_limited);
    p.why(low_ready ? "event ready ratio " + fmt(e.events.ready_ratio) + " < " + fmt(cfg.min_event_ready_ratio)
                    : "trainer declares streams not covered by the event markers");
    return;
  }
  if (hi_rank < 0) {
    p.why("no rank has " + std::to_string(cfg.min_event_samples) + " ready event samples (" + std::to_string(e.events.ready) +
          " in all): no device labels");
    return;
  }
  if (!diagnose) return;
  const auto gf = e.schema.group_index(cfg.forward_group);
  if (!gf) return;
  const int f = *gf, s1 = top.s1;
  const double ev = side.fwd_event_median_s[hi_rank];
  // "High" is high against the cohort (Table 12: "high sampled CUDA-event forward time"): the
  // deciding rank's median exceeds the median over the other eligible ranks' medians by at least
  // gamma_event of a median step. Against the step alone every healthy forward counted as high;
  // a cohort that includes the rank itself halves its excess at two ranks (leave-one-out).
  std::vector<double> medians;
  for (int r = 0; r < side.ranks; ++r)
    if (eligible(r) && r != hi_rank) medians.push_back(side.fwd_event_median_s[r]);
  const double cohort = medians.empty() ? ev : median_inplace(medians);
  const bool ev_high = e.median_step_s > 0 && !medians.empty() && ev - cohort >= cfg.gamma_event * e.median_step_s;
  if (!ev_high)
    p.why(medians.empty() ? "forward event time of rank " + std::to_string(side.rank_id(hi_rank)) +
                                " has no other eligible rank to compare with: not high"
                          : "forward event time of rank " + std::to_string(side.rank_id(hi_rank)) + " (median " + fmt(ev) +
                                " s) exceeds the median " + fmt(cohort) + " s of its cohort, the other " +
                                std::to_string(medians.size()) + " eligible rank(s), by less than gamma_event " +
                                fmt(cfg.gamma_event) + " x median step " + fmt(e.median_step_s) + " s: not high");
  if (ev_high && (s1 == f || top.s2 == f)) p.set(Label::forward_device_supported);
  // Spillover: the device time is high, forward's own exposed time per step stays well below
  // it, and an explicit stage downstream of forward leads.
  const double fwd_per_step = e.steps > 0 ? e.advances_s[f] / e.steps : 0.0;
  if (ev_high && s1 > f && s1 != e.schema.residual_index() && fwd_per_step <= cfg.event_low_ratio * ev)
    p.set(Label::forward_spillover_suspected);
  // Host overhead: forward leads on CPU wall while the event time is low — not high anywhere,
  // and at most event_low_ratio of the CPU-wall forward on forward's leading rank.
  if (ev_high || !(s1 == f || e.shares[f] > cfg.gamma_a)) return;
  const int rf = e.leaders[f].empty() ? -1 : e.leaders[f].front().rank;
  if (eligible(rf) && !std::isnan(side.fwd_cpu_mean_s[rf])) {
    const double cpu = side.fwd_cpu_mean_s[rf];
    if (cpu > 0 && side.fwd_event_median_s[rf] <= cfg.event_low_ratio * cpu) p.set(Label::forward_host_overhead_suspected);
  } else if (rf >= 0) {
    p.why("forward's leading rank " + std::to_string(side.rank_id(rf)) + " has fewer than " +
          std::to_string(cfg.min_event_samples) + " ready event samples: no host-overhead label");
  }
}

/// For every stage with an advance, the rank the evidence names; the top stage's is the packet's
/// headline suspect. Columns become rank ids (the identity unless the matrix is sparse).
void name_suspects(Evidence& e, const SideEvidence& side, const LabelConfig& cfg, int s1) {
  for (int g = 0; g < e.schema.group_count(); ++g)
    if (e.advances_s[g] > 0) e.stage_suspects.push_back(suspect_for(e, side, cfg, g));
  if (!side.rank_ids.empty()) {
    for (auto& list : e.leaders)
      for (auto& l : list) l.rank = side.rank_id(l.rank);
    for (auto& sus : e.stage_suspects) sus.rank = side.rank_id(sus.rank);
    e.events.max_rank = side.rank_id(e.events.max_rank);
  }
  for (const auto& sus : e.stage_suspects)
    if (sus.group == s1) e.suspect = sus;
}

}  // namespace

void label(Evidence& e, const SideEvidence& side, const LabelConfig& cfg, const TelemetryInput& tel) {
  e.gather_ok = tel.gather_ok;
  e.dropped_records = tel.dropped_records;
  e.duplicate_records = tel.duplicate_records;
  e.labels.clear();
  e.downgrade_reasons.clear();
  e.co_critical_stages.clear();
  e.stage_suspects.clear();
  e.suspect = {};
  Pass p{e, side, cfg};

  const bool telemetry_limited = telemetry_gates(p, tel);
  e.telemetry_reasons = static_cast<int>(e.downgrade_reasons.size());
  if (e.steps > 0) p.set(Label::frontier_accounting);
  if (telemetry_limited) p.set(Label::telemetry_limited);
  const Roles roles = role_gate(p);
  if (const std::string acc = accumulation_problem(e.schema); !acc.empty()) {
    p.set(Label::gradient_accumulation_ambiguous);
    p.why(acc);
  }
  if (!e.shares_valid && e.steps > 0)
    p.why("exposed makespan " + fmt(e.exposed_makespan_s) + " s below the share floor " + fmt(cfg.share_floor_s) +
          " s: raw advances only");
  if (e.world_size == 1) p.why("world size 1: the frontier is the rank's own vector, no cross-rank evidence");

  const bool diagnose = !telemetry_limited && !roles.differ && e.shares_valid && e.steps > 0;
  const Top top = top_stage(p);
  const Ambiguity amb = ambiguity_set(p, top);
  if (diagnose && top.s1 >= 0 && e.advances_s[top.s1] > 0) stage_labels(p, top, amb, roles);
  event_labels(p, top, diagnose);

  for (int i = 0; i < kLabelCount; ++i)
    if (p.lab[i]) e.labels.push_back(static_cast<Label>(i));
  name_suspects(e, side, cfg, top.s1);
}

}  // namespace sf::frontier
