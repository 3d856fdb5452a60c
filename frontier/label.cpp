// The labeler (paper Appendix C, Tables 12 and 13): gates → labels with reasons, the ambiguity
// set and the suspect ranks. Reads the window statistics and the per-rank side evidence; computes
// no statistic of its own beyond the decisions. docs/labeler.md gives every choice.
#include "detail.h"

#include <algorithm>
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
  const auto row = static_cast<std::size_t>(g) * R;
  int best_conf = -1;
  for (int r = 0; r < R; ++r) {
    const double c = side.confident_credit_s[row + r];
    if (c > 0 && (best_conf < 0 || c > side.confident_credit_s[row + best_conf])) best_conf = r;
  }
  // e.leaders[g] lists every credited rank, largest credit first (ties: lower rank first).
  const LeaderCredit* best = e.leaders[g].empty() ? nullptr : &e.leaders[g].front();
  std::vector<double> waits;
  int quiet = -1;
  double quiet_wait = 0;
  for (int r = 0; r < R; ++r) {
    const double w = side.sync_wait_mean_s[row + r];
    if (std::isnan(w)) continue;
    waits.push_back(w);
    if (quiet < 0 || w < quiet_wait) {
      quiet = r;
      quiet_wait = w;
    }
  }
  const double wait_median = waits.empty() ? 0.0 : detail::median_inplace(waits);
  if (best_conf >= 0 && side.confident_credit_s[row + best_conf] >= 0.5 * adv) {
    sus.rank = best_conf;
    sus.basis = "frontier_leader";
    sus.confidence = side.confident_credit_s[row + best_conf] / adv;
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

void label(Evidence& e, const SideEvidence& side, const LabelConfig& cfg, const TelemetryInput& tel) {
  const StageSchema& schema = e.schema;
  const int G = schema.group_count();
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
  if (static_cast<int>(e.missing_ranks.size()) > cfg.max_missing_ranks) {
    // Ranges and a count: a window of 16 M ranks with two records gives one short line.
    limit("missing ranks: " + std::to_string(e.missing_ranks.size()) + " rank(s) [" +
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

  bool roles_differ = false;
  for (const auto& r : side.roles)
    if (r != side.roles.front()) roles_differ = true;
  if (roles_differ) {
    set(Label::role_aware_needed);
    why.push_back("ranks have different roles: global frontier across roles is unsafe; group ranks by role");
  }
  if (schema.accumulation() > 1 && !schema.microstep_expanded()) {
    set(Label::gradient_accumulation_ambiguous);
    why.push_back("accumulation factor " + std::to_string(schema.accumulation()) +
                  " with collapsed microsteps: data/backward displacement cannot be separated");
  }
  if (!e.shares_valid && e.steps > 0)
    why.push_back("exposed makespan " + fmt(e.exposed_makespan_s) + " s below the share floor " + fmt(cfg.share_floor_s) +
                  " s: raw advances only");
  if (e.world_size == 1) why.push_back("world size 1: the frontier is the rank's own vector, no cross-rank evidence");

  const bool diagnose = !telemetry_limited && !roles_differ && e.shares_valid && e.steps > 0;
  const int s1 = e.share_order.empty() ? -1 : e.share_order[0];
  const int s2 = e.share_order.size() > 1 ? e.share_order[1] : -1;
  const double a1 = s1 >= 0 ? e.shares[s1] : 0.0;
  const double a2 = s2 >= 0 ? e.shares[s2] : 0.0;
  const double g1 = s1 >= 0 ? e.static_gain[s1] : 0.0;
  const bool dominant = a1 > cfg.gamma_a;
  const bool near_tie = s2 >= 0 && a2 >= cfg.gamma_a / 2 && a1 - a2 < cfg.eta_a;
  bool w1 = false;
  for (const auto& w : cfg.wait_model)
    if (s1 >= 0 && w == schema.groups()[s1]) w1 = true;

  // Ambiguity set E_amb = C_A ∪ C_G ∪ residual leaders (docs/labeler.md).
  if (e.shares_valid && s1 >= 0 && a1 > 0) {
    std::vector<std::uint8_t> in(G, 0);
    double gmax = 0;
    for (int g = 0; g < G; ++g) gmax = std::max(gmax, e.static_gain[g]);
    for (int g = 0; g < G; ++g) {
      if (e.shares[g] > 0 && e.shares[g] >= a1 - cfg.eta_a) in[g] = 1;                  // C_A
      if (e.static_gain[g] >= cfg.gamma_g && e.static_gain[g] >= gmax - cfg.eta_g) in[g] = 1;  // C_G
    }
    if (!side.residual_shares.empty()) {
      // Stages that lead once s1 is replaced by its clipped baseline "can remain bottlenecks
      // after optimizing one stage" (Table 12, co_critical).
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

  if (diagnose && s1 >= 0) {
    const std::string n1 = schema.groups()[s1];
    if (!dominant)
      why.push_back("no dominant stage: top share " + fmt(a1) + " (" + n1 + ") <= gamma_A " + fmt(cfg.gamma_a));
    if (near_tie) {
      set(Label::co_critical);
      why.push_back("near tie: " + n1 + " " + fmt(a1) + " and " + schema.groups()[s2] + " " + fmt(a2) +
                    " are within eta_A " + fmt(cfg.eta_a));
    }
    int gain_leaders = 0;
    double gmax = 0;
    for (int g = 0; g < G; ++g) gmax = std::max(gmax, e.static_gain[g]);
    for (int g = 0; g < G; ++g)
      if (e.static_gain[g] >= cfg.gamma_g && e.static_gain[g] >= gmax - cfg.eta_g) ++gain_leaders;
    if (gain_leaders > 1) {
      set(Label::co_critical);
      why.push_back(std::to_string(gain_leaders) + " stages have static gain >= gamma_G within eta_G of each other");
    }
    if (dominant && !near_tie) {
      const auto& spread = e.baselines[BaselineRule::raw_spread].order;
      const auto& pmax = e.baselines[BaselineRule::per_stage_max].order;
      auto top2 = [&](const std::vector<int>& o) {
        return (!o.empty() && o[0] == s1) || (o.size() > 1 && o[1] == s1);
      };
      if (g1 >= cfg.gamma_g) {
        if (top2(spread) || top2(pmax))
          set(Label::direct_exposure);
        else
          why.push_back("gain of " + n1 + " " + fmt(g1) + " >= gamma_G but raw duration and spread rank it below top-2");
      } else if (w1 && e.world_size > 1) {
        set(Label::sync_wait_dependent);
      } else if (e.world_size > 1) {
        set(Label::co_critical);
        why.push_back(n1 + " share " + fmt(a1) + " > gamma_A with static gain " + fmt(g1) +
                      " < gamma_G and no wait model (W=0): cause and co-critical stages not separable");
      }
      if (w1 && e.world_size > 1) {
        // Sync-wait signature: the lag opens at s1 and collapses downstream as ranks wait.
        double collapse = 0;
        for (int g = s1 + 1; g < G; ++g) collapse += std::min(0.0, e.lag_increment_mean_s[g]);
        const double open = e.lag_increment_mean_s[s1];
        if (open > 0 && -collapse >= 0.5 * open)
          set(Label::likely_sync_wait);
        else
          why.push_back("wait model asserted for " + n1 + " but the lag does not open there and close downstream");
      }
    }
    if (e.world_size > 1) {
      int conf = e.confident_leaders[s1], sw = e.leader_switches[s1];
      if (conf >= 3 && static_cast<double>(sw) / (conf - 1) > cfg.gamma_switch) {
        set(Label::co_critical);
        why.push_back("leader of " + n1 + " switched " + std::to_string(sw) + " times among " + std::to_string(conf) +
                      " confident unique leaders: several ranks co-critical");
      }
    }
  }

  // Forward CUDA-event side evidence (Table 12 device axis).
  if (e.events.sampled > 0 || cfg.event_scope_limited) {
    const bool low_ready = e.events.sampled > 0 && e.events.ready_ratio < cfg.min_event_ready_ratio;
    if (low_ready || cfg.event_scope_limited) {
      set(Label::forward_event_scope_limited);
      why.push_back(low_ready ? "event ready ratio " + fmt(e.events.ready_ratio) + " < " + fmt(cfg.min_event_ready_ratio)
                              : "trainer declares streams not covered by the event markers");
    } else if (e.events.ready < cfg.min_event_samples) {
      why.push_back("only " + std::to_string(e.events.ready) + " ready event samples (< " +
                    std::to_string(cfg.min_event_samples) + "): no device labels");
    } else if (diagnose) {
      if (const auto gf = schema.group_index(cfg.forward_group)) {
        const int f = *gf;
        const bool ev_high = e.median_step_s > 0 && e.events.max_rank_median_s >= cfg.gamma_event * e.median_step_s;
        const bool fwd_top2 = (s1 == f) || (s2 == f);
        if (ev_high && fwd_top2) set(Label::forward_device_supported);
        if (ev_high && s1 > f) set(Label::forward_spillover_suspected);
        // Host overhead: CPU-wall forward high on its leading rank while its event time is low.
        if (s1 == f || e.shares[f] > cfg.gamma_a) {
          int rf = e.leaders[f].empty() ? -1 : e.leaders[f].front().rank;
          if (rf >= 0 && !std::isnan(side.fwd_cpu_mean_s[rf]) && std::isfinite(side.fwd_event_median_s[rf])) {
            const double cpu = side.fwd_cpu_mean_s[rf];
            if (cpu > 0 && side.fwd_event_median_s[rf] <= cfg.event_low_ratio * cpu) set(Label::forward_host_overhead_suspected);
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
  for (const auto& sus : e.stage_suspects)
    if (sus.group == s1) e.suspect = sus;
}


}  // namespace sf::frontier
