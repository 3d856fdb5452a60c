#include "sf/formats/formats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace sf::formats {

using frontier::BaselineRule;
using frontier::Evidence;

namespace {

std::string join(const Evidence& e, const std::vector<int>& groups) {
  if (groups.empty()) return "(none)";
  std::string out;
  for (std::size_t i = 0; i < groups.size(); ++i) out += (i ? ", " : "") + e.group_name(groups[i]);
  return out;
}

/// printf into a string of whatever length it takes (stage names from files have no fixed width).
std::string line(const char* fmt, auto... args) {
  const int n = std::snprintf(nullptr, 0, fmt, args...);
  if (n <= 0) return {};
  std::string out(static_cast<std::size_t>(n), '\0');
  std::snprintf(out.data(), out.size() + 1, fmt, args...);
  return out;
}

std::string ms(double s) { return line("%+.1f ms/step", s * 1e3); }

std::string where(const Evidence& e, const std::vector<RankInfo>& ranks) {
  const auto& d = e.diagnosis;
  std::string out = d.rank >= 0 ? "rank " + std::to_string(d.rank) : "";
  for (const auto& r : ranks)
    if (d.rank >= 0 && r.rank == d.rank && !r.hostname.empty()) out += " (host " + r.hostname + ")";
  return out.empty() ? e.group_name(d.group) : out + " " + e.group_name(d.group);
}

/// "fwd +12.0, bwd +30.1" over the groups where a culprit's change is at least 1 ms/step.
std::string by_stage(const Evidence& e, const frontier::Diagnosis::Culprit& c) {
  std::string out;
  for (int g = 0; g < static_cast<int>(c.by_group_s.size()); ++g)
    if (c.by_group_s[g] >= 1e-3) out += line("%s%s %+.1f", out.empty() ? "" : ", ", e.group_name(g).c_str(), c.by_group_s[g] * 1e3);
  return out;
}

/// The culprits after the named one: "; also rank 40 data.next_wait +59.8 ms/step, ...".
std::string others(const Evidence& e) {
  const auto& c = e.diagnosis.culprits;
  if (c.size() < 2) return "";
  constexpr std::size_t kShown = 3;
  std::string out = "; also ";
  for (std::size_t i = 1; i < c.size() && i <= kShown; ++i) {
    // Named for its CPU wait alone (its stages and arrival inside their floors): said as such, not
    // as a change of the stage where the step's change showed.
    const bool cpu_wait_only = c[i].excess_s == c[i].cpu_wait_s &&
                               (c[i].group < 0 || c[i].by_group_s[static_cast<std::size_t>(c[i].group)] != c[i].excess_s);
    out += (i > 1 ? ", " : "") + std::string("rank ") + std::to_string(c[i].rank) + " " +
           (cpu_wait_only ? std::string("CPU wait ")
                          : c[i].group >= 0 ? e.group_name(c[i].group) + " " : std::string()) +
           ms(c[i].excess_s);
  }
  if (c.size() > kShown + 1) out += line(" and %zu more", c.size() - kShown - 1);
  return out;
}

/// For a rank named by its arrival: where its own work grew, stage by stage; by its CPU wait:
/// how much longer its threads waited for a CPU.
std::string arrival_detail(const Evidence& e) {
  const auto& d = e.diagnosis;
  if (d.culprits.empty() || d.culprits.front().rank != d.rank) return "";
  if (d.rank_basis == "cpu_wait")
    return line("; its threads waited %.1f ms/step longer for a CPU than before, against its peers (starved or throttled)",
                d.culprits.front().cpu_wait_s * 1e3);
  if (d.rank_basis == "erratic" && e.differential)
    for (const auto& x : e.differential->erratic)
      if (x.rank == d.rank)
        return line("; its steps grew erratic (step-to-step SD %.1fx its peers'): stopped or starved now and then, it costs "
                    "everyone a wait in the collectives",
                    std::exp(x.delta_s / 2));
  if (d.rank_basis != "arrival") return "";
  const std::string by = by_stage(e, d.culprits.front());
  return line("; it reaches the step's end %.1f ms/step later against its peers", d.culprits.front().arrival_s * 1e3) +
         (by.empty() ? std::string() : " (" + by + ")");
}

}  // namespace

std::string diagnosis_line(const Evidence& e, const std::vector<RankInfo>& ranks) {
  using Basis = frontier::Diagnosis::Basis;
  const auto& d = e.diagnosis;
  const std::string conf = line(" (confidence %.2f)", d.confidence);
  const std::string surfaces =
      d.surfaces_group >= 0 ? "; the wait surfaces in " + e.group_name(d.surfaces_group) : std::string();
  const std::string norank = d.rank < 0 && d.group >= 0 ? "; no rank evidenced" : "";
  const std::string pct = line("%.0f %%", d.share_of_step * 100);
  switch (d.basis) {
    case Basis::none: return "no step scored";
    case Basis::differential:
      if (d.group < 0) {
        const auto& dd = e.differential;
        std::string largest;
        if (dd && !dd->delta_advance_s.empty()) {
          int top = 0;
          for (int g = 1; g < static_cast<int>(dd->delta_advance_s.size()); ++g)
            if (dd->delta_advance_s[g] > dd->delta_advance_s[top]) top = g;
          largest = dd->delta_advance_s[top] > 0
                        ? ": largest " + e.group_name(top) + " " + ms(dd->delta_advance_s[top]) + ", inside its noise floor " +
                              line("%.1f ms/step", dd->noise_floor_s[top] * 1e3)
                        : ": no stage got slower";
        }
        return "no significant change against " + d.reference + largest;
      }
      if (d.common)
        return "common slowdown on every rank: " + e.group_name(d.group) + " " + ms(d.excess_s) + " (+" + pct +
               " of the step) against " + d.reference + "; no rank's change stands out from its peers'" + conf;
      return where(e, ranks) + " " + ms(d.excess_s) + " (+" + pct + " of the step) against " + d.reference + surfaces +
             arrival_detail(e) + norank + others(e) + conf;
    case Basis::lag_origin:
      return where(e, ranks) + " opens a lag of " + ms(d.excess_s) + " (" + pct + " of the step) on its cohort" + surfaces +
             " (no reference: lag origin)" + norank + others(e) + conf;
    case Basis::cohort:
      if (d.group < 0)
        return "no significant excess against the cohort (no reference)" +
               (d.excess_s > 0 ? ": largest " + ms(d.excess_s) + ", inside its noise floor " +
                                     line("%.1f ms/step", d.noise_floor_s * 1e3)
                               : std::string());
      return where(e, ranks) + " " + ms(d.excess_s) + " above " +
             (e.standing.empty() ? std::string("its cohort's median") : std::string("its peers'")) + " (" + pct +
             " of the step; no reference)" + surfaces + arrival_detail(e) + norank + others(e) + conf;
    case Basis::frontier:
      if (d.group < 0) return "nothing exposed";
      return "no reference and one rank observed: " + e.group_name(d.group) + " takes " + pct +
             " of the exposed step (where the time goes, not what changed)";
  }
  return "";
}

std::string whatif_line(const Evidence& e, const std::vector<RankInfo>& ranks) {
  const auto& w = e.whatif;
  if (!w.available) return "not available: " + w.why_not;
  const auto& d = e.diagnosis;
  const std::string ideal = line("as if no rank straggled %.1f ms/step (S = %.2f, %.1f %% of the step waited for ranks behind "
                                 "the median)", w.ideal_s * 1e3, w.slowdown, w.wasted * 100);
  if (d.common && e.differential)
    return line("a common slowdown on every rank: no one rank to fix (the step is %+.1f ms/step against %s); ",
                e.differential->delta_exposed_s * 1e3, e.differential->reference.c_str()) + ideal;
  if (w.fixes.empty())
    return line("nothing to gain: no culprit past its floor (%.1f ms/step) in %.1f ms/step; ", w.floor_s * 1e3, w.actual_s * 1e3) +
           ideal;
  auto name = [&](const frontier::WhatIf::Fix& f) {
    std::string s = "rank " + std::to_string(f.rank);
    for (const auto& r : ranks)
      if (r.rank == f.rank && !r.hostname.empty()) s += " (" + r.hostname + ")";
    return f.group >= 0 ? s + " " + e.group_name(f.group) : s;
  };
  const auto& f = w.fixes.front();
  std::string out;
  if (!w.gains())
    out = line("nothing to gain: fixing %s would give %.1f ms/step, inside the step's floor %.1f ms/step", name(f).c_str(),
               f.gain_s * 1e3, w.floor_s * 1e3);
  else
    out = line("fixing %s would give ~%.1f ms/step (%+.0f %%): %.1f -> %.1f ms/step", name(f).c_str(), f.gain_s * 1e3,
               w.actual_s > 0 ? -f.gain_s / w.actual_s * 100 : 0.0, w.actual_s * 1e3, f.healed_s * 1e3);
  if (w.fixes.size() > 1)
    out += line("; every culprit (%zu ranks) %.1f ms/step (%+.0f %%)", w.fixes.size(), w.all_healed_s * 1e3,
                w.actual_s > 0 ? (w.all_healed_s - w.actual_s) / w.actual_s * 100 : 0.0);
  return out + "; " + ideal;
}

std::string reference_advice(const frontier::Differential& d) {
  if (d.needed_reference_steps == 0 || !(d.reference_step_s > 0)) return "";
  const double pct = d.exposed_noise_floor_s / d.reference_step_s * 100;
  if (d.needed_reference_steps < 0)
    return line("# reference too noisy: changes under %.1f ms/step (%.1f %% of the step) cannot be judged, and no number of "
                "reference steps brings that under 3 %% with a window this short: score longer windows\n",
                d.exposed_noise_floor_s * 1e3, pct);
  return line("# reference too noisy: changes under %.1f ms/step (%.1f %% of the step) cannot be judged; 3 %% needs a "
              "reference of >= %d steps (run: --reference-steps %d)\n",
              d.exposed_noise_floor_s * 1e3, pct, d.needed_reference_steps, d.needed_reference_steps);
}

namespace {

/// "how sure" in words: the confidence and the floor the named change passed, or the floor nothing
/// passed; "" where there is no floor (nothing scored, one rank).
std::string how_sure(const Evidence& e) {
  const auto& d = e.diagnosis;
  using Basis = frontier::Diagnosis::Basis;
  if (d.basis == Basis::none || d.basis == Basis::frontier) return "";
  const double step = d.excess_s > 0 && d.share_of_step > 0 ? d.excess_s / d.share_of_step : e.median_step_s;
  auto floor_words = [&](double floor_s) {
    return step > 0 ? line("%.1f ms/step (%.1f %% of the step)", floor_s * 1e3, floor_s / step * 100)
                    : line("%.1f ms/step", floor_s * 1e3);
  };
  if (d.significant())
    return line("confidence %.2f of 1; named past a floor of ", d.confidence) + floor_words(d.noise_floor_s) +
           (d.noise_floor_s > 0 ? line(", %.1fx over it", d.excess_s / d.noise_floor_s) : std::string());
  if (e.differential)
    return "nothing named: the whole step's change had to pass " + floor_words(e.differential->exposed_noise_floor_s) +
           line(" (it changed %+.1f ms/step)", e.differential->delta_exposed_s * 1e3);
  return "nothing named: a rank's excess over its peers had to pass " + floor_words(d.noise_floor_s);
}

}  // namespace

std::string answer_lines(const Evidence& e, const std::vector<RankInfo>& ranks) {
  std::string out = "# diagnosis: " + diagnosis_line(e, ranks) + "\n";
  out += "# what-if: " + whatif_line(e, ranks) + "\n";
  if (const auto sure = how_sure(e); !sure.empty()) out += "# how sure: " + sure + "\n";
  if (e.differential) out += reference_advice(*e.differential);
  // What the evidence lacks (the telemetry gates' reasons; the labeler's others are --details').
  // At most kShownNotes of them: a node that died can leave one per missing rank.
  constexpr std::size_t kShownNotes = 3;
  const auto n = std::min(static_cast<std::size_t>(std::max(e.telemetry_reasons, 0)), e.downgrade_reasons.size());
  for (std::size_t i = 0; i < n && i < kShownNotes; ++i) out += "# note: " + e.downgrade_reasons[i] + "\n";
  if (n > kShownNotes) out += line("# note: and %zu more on the evidence (--details)\n", n - kShownNotes);
  return out;
}

std::string details_pointer(std::string_view where_else) {
  return "# more: --details for the paper's frontier table, gates, labels and verdict" +
         (where_else.empty() ? std::string() : " (also in " + std::string(where_else) + ")") +
         "; the terms: docs/glossary.md\n";
}

std::string evidence_table(const Evidence& e, const std::string& title, const std::vector<RankInfo>& ranks) {
  const auto& c = e.config;
  std::string out;
  out += "# diagnosis: " + diagnosis_line(e, ranks) + "\n";
  out += "# what-if: " + whatif_line(e, ranks) + "\n";
  out += "# " + title + "\n";
  out += line("# window: steps %lld..%lld, %d scored, %d missing; world_size %d; accumulation %d\n",
              static_cast<long long>(e.first_step), static_cast<long long>(e.last_step), e.steps, e.missing_steps,
              e.world_size, e.schema.accumulation());
  out += line("# schema: %d ordered stages, order hash %s\n", e.schema.size(), e.schema.order_hash_hex().c_str());
  // The wait model the window was read with: the declared groups and those where the recorder
  // measured waits inside collectives (the same set the diagnosis follows waits through).
  std::string wait;
  for (int g : e.wait_groups) {
    const bool declared = std::find(e.wait_declared.begin(), e.wait_declared.end(), g) != e.wait_declared.end();
    wait += (wait.empty() ? "" : ",") + e.group_name(g) + (declared ? "" : " (measured)");
  }
  if (wait.empty()) wait = "none (W=0)";
  out += line("# gates: tau_C %.2f  gamma_A %.2f  gamma_G %.2f  eta_A %.2f  eta_G %.2f  gain baseline %s  wait model %s\n",
              c.tau_c, c.gamma_a, c.gamma_g, c.eta_a, c.eta_g, std::string(frontier::to_string(c.gain_baseline)).c_str(),
              wait.c_str());
  if (!e.wait_groups.empty()) out += "# stages holding a collective (the diagnosis' waits): " + join(e, e.wait_groups) + "\n";
  out += "#\n";
  out += line("# %-30s %10s %7s %7s %10s %10s %10s  %s\n", "stage", "advance", "share", "gain", "per-stage", "per-stage",
              "lag", "leaders");
  out += line("# %-30s %10s %7s %7s %10s %10s %10s  %s\n", "", "s", "", "", "max s", "avg s", "mean s",
              "rank:advance s");
  const auto& pmax = e.baselines[BaselineRule::per_stage_max];
  const auto& pavg = e.baselines[BaselineRule::per_stage_avg];
  for (int g = 0; g < e.schema.group_count(); ++g) {
    std::string lead;
    for (std::size_t i = 0; i < e.leaders[g].size() && i < 3; ++i)
      lead += line("%sr%d:%.4g", i ? " " : "", e.leaders[g][i].rank, e.leaders[g][i].advance_s);
    if (lead.empty()) lead = "-";
    const std::string share = e.shares_valid ? line("%7.3f", e.shares[g]) : std::string("    n/a");
    out += line("  %-30s %10.4f %s %7.3f %10.4f %10.4f %10.4f  %s\n", e.group_name(g).c_str(), e.advances_s[g],
                share.c_str(), e.static_gain[g], pmax.score[g], pavg.score[g], e.lag_mean_s[g], lead.c_str());
  }
  if (const auto& d = e.differential) {
    std::string deltas;
    for (int g = 0; g < static_cast<int>(d->delta_advance_s.size()); ++g)
      deltas += line("%s%s %+.1f", g ? ", " : "", e.group_name(g).c_str(), d->delta_advance_s[g] * 1e3);
    out += line("# change per step against %s (%d steps, %.1f ms/step): %s; exposed %+.1f ms (floor %.1f)\n",
                d->reference.c_str(), d->reference_steps, d->reference_step_s * 1e3, deltas.c_str(),
                d->delta_exposed_s * 1e3, d->exposed_noise_floor_s * 1e3);
    out += reference_advice(*d);
  }
  const double ex = e.exposed_makespan_s;
  out += line("# exposed makespan   %12.4f s  (sum_t F[t,S]; median step %.4f s)\n", ex, e.median_step_s);
  out += line("# per-stage max      %12.4f s  (%.2fx exposed)\n", e.per_stage_max_s, ex > 0 ? e.per_stage_max_s / ex : 0.0);
  out += line("# per-stage average  %12.4f s  (%.2fx exposed)\n", e.per_stage_avg_s, ex > 0 ? e.per_stage_avg_s / ex : 0.0);
  out += line("# routing set (tau_C %.2f): %s (size %zu)\n", c.tau_c, join(e, e.routing_set).c_str(), e.routing_set.size());
  out += "# co_critical_stages: " + join(e, e.co_critical_stages) + "\n";
  std::string labels;
  for (std::size_t i = 0; i < e.labels.size(); ++i) labels += (i ? ", " : "") + std::string(frontier::to_string(e.labels[i]));
  out += "# labels: " + (labels.empty() ? std::string("(none)") : labels) + "\n";
  if (e.suspect.group >= 0) {
    std::string where = e.suspect.rank >= 0 ? std::to_string(e.suspect.rank) : "?";
    for (const auto& r : ranks)
      if (r.rank == e.suspect.rank && !r.hostname.empty()) where += " on host " + r.hostname;
    out += line("# suspect: %s on rank %s (%s, %.2f)\n", e.group_name(e.suspect.group).c_str(), where.c_str(),
                e.suspect.basis.c_str(), e.suspect.confidence);
  }
  std::string missing = e.missing_ranks.empty() ? "none"
                                                : std::to_string(e.missing_rank_count) + " rank(s) [" +
                                                      frontier::format_rank_ranges(e.missing_ranks, 4) + "]";
  out += line("# telemetry: closure residual share %s, overlap error share %s, missing ranks %s, gather %s\n",
              e.has_wall ? line("%.4f", e.closure_residual_share).c_str() : "n/a",
              e.has_wall ? line("%.4f", e.overlap_error_share).c_str() : "n/a", missing.c_str(),
              e.gather_ok ? "ok" : "FAILED");
  if (e.events.sampled > 0)
    out += line("# events: %d sampled, %d ready (ratio %.2f), max rank median %.4f s (rank %d), cohort median %.4f s\n",
                e.events.sampled, e.events.ready, e.events.ready_ratio, e.events.max_rank_median_s, e.events.max_rank,
                e.events.cohort_median_s);
  for (const auto& r : e.downgrade_reasons) out += "# note: " + r + "\n";
  return out;
}

}  // namespace sf::formats
