#include "sf/formats/formats.h"

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

}  // namespace

std::string evidence_table(const Evidence& e, const std::string& title, const std::vector<RankInfo>& ranks) {
  const auto& c = e.config;
  std::string out;
  out += "# " + title + "\n";
  out += line("# window: steps %lld..%lld, %d scored, %d missing; world_size %d; accumulation %d\n",
              static_cast<long long>(e.first_step), static_cast<long long>(e.last_step), e.steps, e.missing_steps,
              e.world_size, e.schema.accumulation());
  out += line("# schema: %d ordered stages, order hash %s\n", e.schema.size(), e.schema.order_hash_hex().c_str());
  std::string wait = c.wait_model.empty() ? "none (W=0)" : "";
  for (std::size_t i = 0; i < c.wait_model.size(); ++i) wait += (i ? "," : "") + c.wait_model[i];
  out += line("# gates: tau_C %.2f  gamma_A %.2f  gamma_G %.2f  eta_A %.2f  eta_G %.2f  gain baseline %s  wait model %s\n",
              c.tau_c, c.gamma_a, c.gamma_g, c.eta_a, c.eta_g, std::string(frontier::to_string(c.gain_baseline)).c_str(),
              wait.c_str());
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
