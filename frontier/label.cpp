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
  // e.leaders[g] lists every credited rank, largest credit first (ties: lower rank first).
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
  return "";
}

void label(Evidence& e, const SideEvidence& side, const LabelConfig& cfg, const TelemetryInput& tel) {
  const StageSchema& schema = e.schema;
  const int G = schema.group_count();
  const int R = e.world_size;
  e.gather_ok = tel.gather_ok;
  e.dropped_records = tel.dropped_records;
  e.duplicate_records = tel.duplicate_records;
  e.labels.clear();
  e.downgrade_reasons.clear();
  e.co_critical_stages.clear();
  e.stage_suspects.clear();
  e.suspect = {};

  // ---- gates (Appendix C, Table 13) ----
  auto& why = e.downgrade_reasons;
  bool telemetry_limited = false;
  auto limit = [&](std::string reason) {
    telemetry_limited = true;
    why.push_back(std::move(reason));
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
  if (e.has_wall && e.closure_residual_share > cfg.max_closure_residual_share)
    limit("closure residual share " + fmt(e.closure_residual_share) + " > " + fmt(cfg.max_closure_residual_share));
  if (e.has_wall && e.overlap_error_share > cfg.max_overlap_error_share)
    limit("overlap error share " + fmt(e.overlap_error_share) + " > " + fmt(cfg.max_overlap_error_share));
  if (e.steps == 0) limit("no step has any record");

  bool lab[kLabelCount] = {};
  auto set = [&](Label l) { lab[static_cast<int>(l)] = true; };
  if (e.steps > 0) set(Label::frontier_accounting);
  if (telemetry_limited) set(Label::telemetry_limited);

  // Roles: an empty string is an undeclared role. Different declared roles make a global
  // frontier unsafe; undeclared roles are weak metadata (Table 12: downgrades likely_sync_wait).
  std::string role_a, role_b;
  int undeclared = 0;
  for (const auto& r : side.roles) {
    if (r.empty()) ++undeclared;
    else if (role_a.empty()) role_a = r;
    else if (r != role_a && role_b.empty()) role_b = r;
  }
  const bool roles_differ = !role_b.empty();
  const bool roles_weak = side.roles.empty() || undeclared > 0;
  if (roles_differ) {
    set(Label::role_aware_needed);
    why.push_back("ranks have different roles (" + role_a + ", " + role_b +
                  "): global frontier across roles is unsafe; group ranks by role");
  }
  if (const std::string acc = accumulation_problem(schema); !acc.empty()) {
    set(Label::gradient_accumulation_ambiguous);
    why.push_back(acc);
  }
  if (!e.shares_valid && e.steps > 0)
    why.push_back("exposed makespan " + fmt(e.exposed_makespan_s) + " s below the share floor " + fmt(cfg.share_floor_s) +
                  " s: raw advances only");
  if (R == 1) why.push_back("world size 1: the frontier is the rank's own vector, no cross-rank evidence");

  const bool diagnose = !telemetry_limited && !roles_differ && e.shares_valid && e.steps > 0;
  const int s1 = e.share_order.empty() ? -1 : e.share_order[0];
  const int s2 = e.share_order.size() > 1 ? e.share_order[1] : -1;
  const double a1 = s1 >= 0 ? e.shares[s1] : 0.0;
  const double g1 = s1 >= 0 ? e.static_gain[s1] : 0.0;
  const bool dominant = a1 > cfg.gamma_a;
  bool w1 = false;
  for (const auto& w : cfg.wait_model)
    if (s1 >= 0 && w == schema.groups()[s1]) w1 = true;

  // Ambiguity set E_amb = C_A ∪ C_G ∪ C_R (docs/labeler.md). The share and gain ties that make
  // a window co_critical are exactly |C_A| ≥ 2 and |C_G| ≥ 2, so the label and the set agree.
  std::vector<int> c_a, c_g;
  if (e.shares_valid && s1 >= 0 && a1 > 0) {
    std::vector<std::uint8_t> in(G, 0);
    double gmax = 0;
    for (int g = 0; g < G; ++g) gmax = std::max(gmax, e.static_gain[g]);
    for (int g : e.share_order) {
      if (e.shares[g] > 0 && e.shares[g] >= a1 - cfg.eta_a) {  // C_A
        c_a.push_back(g);
        in[g] = 1;
      }
      if (e.static_gain[g] >= cfg.gamma_g && e.static_gain[g] >= gmax - cfg.eta_g) {  // C_G
        c_g.push_back(g);
        in[g] = 1;
      }
    }
    if (!side.residual_shares.empty()) {
      // C_R: stages that lead once s1 is replaced by its clipped baseline "can remain
      // bottlenecks after optimizing one stage" (Table 12, co_critical).
      double top = 0;
      for (int h = 0; h < G; ++h) top = std::max(top, side.residual_shares[h]);
      for (int h = 0; h < G; ++h) {
        const double rs = side.residual_shares[h];
        if (rs > 0 && rs >= top - cfg.eta_a) in[h] = 1;
      }
    }
    for (int g : e.share_order)
      if (in[g]) e.co_critical_stages.push_back(g);
  }
  const bool stage_set = e.co_critical_stages.size() >= 2;

  if (diagnose && s1 >= 0 && e.advances_s[s1] > 0) {
    const std::string n1 = schema.groups()[s1];
    // A note names at most kNamed stages: with thousands of stages in a tie it stays one readable line.
    constexpr std::size_t kNamed = 8;
    auto names = [&](const std::vector<int>& gs) {
      std::string out;
      for (std::size_t i = 0; i < gs.size() && i < kNamed; ++i) out += (out.empty() ? "" : ", ") + schema.groups()[gs[i]];
      if (gs.size() > kNamed) out += " and " + std::to_string(gs.size() - kNamed) + " more";
      return out;
    };
    if (!dominant)
      why.push_back("no dominant stage: top share " + fmt(a1) + " (" + n1 + ") <= gamma_A " + fmt(cfg.gamma_a));
    // Appendix C: "near-tied or high-leader-switch windows are likewise downgraded".
    const bool share_tie = c_a.size() >= 2;
    const bool gain_tie = c_g.size() >= 2;
    if (share_tie)
      why.push_back("near tie: shares of " + names(c_a) + " are within eta_A " + fmt(cfg.eta_a) + " of the top " + fmt(a1));
    if (gain_tie) why.push_back("static gains of " + names(c_g) + " are >= gamma_G and within eta_G " + fmt(cfg.eta_g));
    bool switching = false;
    if (R > 1) {
      const int conf = e.confident_leaders[s1], sw = e.leader_switches[s1];
      const int chances = side.switch_chances.empty() ? conf - 1 : side.switch_chances[s1];
      if (conf >= 3 && chances > 0 && static_cast<double>(sw) / chances > cfg.gamma_switch) {
        switching = true;
        std::string ranks;
        for (std::size_t i = 0; i < e.leaders[s1].size() && i < 4; ++i)
          ranks += (i ? "," : "") + std::to_string(side.rank_id(e.leaders[s1][i].rank));
        why.push_back("leader of " + n1 + " switched " + std::to_string(sw) + " times in " + std::to_string(chances) +
                      " chances between confident unique leaders (ranks " + ranks +
                      "): several ranks co-critical, no stage label stands");
      }
    }
    const bool ambiguous = share_tie || gain_tie || switching;
    const bool low_gain_w0 = dominant && !ambiguous && g1 < cfg.gamma_g && !w1;
    if (R > 1 && stage_set && (ambiguous || low_gain_w0)) {
      set(Label::co_critical);
      if (low_gain_w0)
        why.push_back(n1 + " share " + fmt(a1) + " > gamma_A with static gain " + fmt(g1) +
                      " < gamma_G and no wait model (W=0): " + names(e.co_critical_stages) + " not separable");
    } else if (R > 1 && ambiguous) {
      why.push_back("ambiguity set holds only " + n1 + ": no second stage to name, so no co_critical");
    } else if (low_gain_w0 && R > 1) {
      why.push_back(n1 + " share " + fmt(a1) + " > gamma_A with static gain " + fmt(g1) +
                    " < gamma_G and no wait model (W=0), but no other stage can take the lead once " + n1 +
                    " is at its baseline (ambiguity set {" + n1 + "}): no co_critical");
    }
    if (dominant && !ambiguous) {
      const auto& spread = e.baselines[BaselineRule::raw_spread].order;
      const auto& pmax = e.baselines[BaselineRule::per_stage_max].order;
      auto top2 = [&](const std::vector<int>& o) {
        return (!o.empty() && o[0] == s1) || (o.size() > 1 && o[1] == s1);
      };
      if (g1 >= cfg.gamma_g) {
        // Table 12: "raw duration, spread, and clipped static sensitivity agree with the frontier
        // stage": all three, so s1 must be top-2 by per-stage max and by raw spread.
        if (top2(spread) && top2(pmax))
          set(Label::direct_exposure);
        else
          why.push_back("gain of " + n1 + " " + fmt(g1) + " >= gamma_G but " +
                        (top2(pmax) ? std::string("raw spread ranks it") : top2(spread) ? std::string("raw duration ranks it")
                                                                             : std::string("raw duration and spread rank it")) +
                        " below top-2: the evidence does not agree, no direct_exposure");
      } else if (w1 && R > 1) {
        set(Label::sync_wait_dependent);
      }
      if (w1 && R > 1) {
        // Sync-wait signature: the lag opens at s1 and collapses downstream as ranks wait.
        double collapse = 0;
        for (int g = s1 + 1; g < G; ++g) collapse += std::min(0.0, e.lag_increment_mean_s[g]);
        const double open = e.lag_increment_mean_s[s1];
        if (!(open > 0 && -collapse >= 0.5 * open))
          why.push_back("wait model asserted for " + n1 + " but the lag does not open there and close downstream");
        else if (roles_weak)
          why.push_back("lag opens at " + n1 + " and closes downstream, but role metadata is missing for " +
                        (side.roles.empty() ? std::string("every rank") : std::to_string(undeclared) + " rank(s)") +
                        ": no likely_sync_wait (Table 12: weak role metadata)");
        else
          set(Label::likely_sync_wait);
      }
    }
  }

  // Forward CUDA-event side evidence (Table 12 device axis), only where events were sampled.
  if (e.events.sampled > 0) {
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
      set(Label::forward_event_scope_limited);
      why.push_back(low_ready ? "event ready ratio " + fmt(e.events.ready_ratio) + " < " + fmt(cfg.min_event_ready_ratio)
                              : "trainer declares streams not covered by the event markers");
    } else if (hi_rank < 0) {
      why.push_back("no rank has " + std::to_string(cfg.min_event_samples) + " ready event samples (" +
                    std::to_string(e.events.ready) + " in all): no device labels");
    } else if (diagnose) {
      if (const auto gf = schema.group_index(cfg.forward_group)) {
        const int f = *gf;
        const double ev = side.fwd_event_median_s[hi_rank];
        const bool ev_high = e.median_step_s > 0 && ev >= cfg.gamma_event * e.median_step_s;
        if (ev_high && (s1 == f || s2 == f)) set(Label::forward_device_supported);
        // Spillover: the device time is high, forward's own exposed time per step stays well below
        // it, and an explicit stage downstream of forward leads.
        const double fwd_per_step = e.steps > 0 ? e.advances_s[f] / e.steps : 0.0;
        if (ev_high && s1 > f && s1 != schema.residual_index() && fwd_per_step <= cfg.event_low_ratio * ev)
          set(Label::forward_spillover_suspected);
        // Host overhead: forward leads on CPU wall while the event time is low — not high anywhere,
        // and at most event_low_ratio of the CPU-wall forward on forward's leading rank.
        if (!ev_high && (s1 == f || e.shares[f] > cfg.gamma_a)) {
          const int rf = e.leaders[f].empty() ? -1 : e.leaders[f].front().rank;
          if (eligible(rf) && !std::isnan(side.fwd_cpu_mean_s[rf])) {
            const double cpu = side.fwd_cpu_mean_s[rf];
            if (cpu > 0 && side.fwd_event_median_s[rf] <= cfg.event_low_ratio * cpu) set(Label::forward_host_overhead_suspected);
          } else if (rf >= 0) {
            why.push_back("forward's leading rank " + std::to_string(side.rank_id(rf)) + " has fewer than " +
                          std::to_string(cfg.min_event_samples) + " ready event samples: no host-overhead label");
          }
        }
      }
    }
  }

  for (int i = 0; i < kLabelCount; ++i)
    if (lab[i]) e.labels.push_back(static_cast<Label>(i));

  // Suspects: for every stage with an advance, the rank the evidence names; the top stage's
  // is the packet's headline suspect.
  for (int g = 0; g < G; ++g)
    if (e.advances_s[g] > 0) e.stage_suspects.push_back(suspect_for(e, side, cfg, g));
  // Columns become rank ids (the identity unless the matrix is sparse).
  if (!side.rank_ids.empty()) {
    for (auto& list : e.leaders)
      for (auto& l : list) l.rank = side.rank_id(l.rank);
    for (auto& sus : e.stage_suspects) sus.rank = side.rank_id(sus.rank);
    e.events.max_rank = side.rank_id(e.events.max_rank);
  }
  for (const auto& sus : e.stage_suspects)
    if (sus.group == s1) e.suspect = sus;
}

}  // namespace sf::frontier
