// What fixing a culprit would buy (docs/diagnosis.md, "What fixing it would buy"): the window's
// steps replayed from their arrivals with the culprits' arrivals set back to their healthy values.
#include "detail.h"

#include <algorithm>
#include <cmath>

namespace sf::frontier {

double ArrivalLog::peers_median(const ArrivalSegment& s, int ranks, double v) {
  return detail::loo_median(v, static_cast<std::size_t>(ranks), s.lo_s, s.mid_s, s.hi_s);
}

namespace {

/// A rank's healthy offset from its peers' median arrival over groups first..last: its standing
/// there in the reference where the reference listed it, else the reference's median standing,
/// else 0 (the cohort's value).
double healthy_offset(const Reference* ref, int rank, int first, int last) {
  if (ref == nullptr || ref->standing.empty()) return 0.0;
  double sum = 0;
  for (int g = first; g <= last && g + 1 < static_cast<int>(ref->standing.size()); ++g) {
    const Standing& st = ref->standing[static_cast<std::size_t>(g)];
    double v = st.median_s;
    for (const auto& x : st.ranks)
      if (x.rank == rank) v = x.mean_s;
    sum += v;
  }
  return sum;
}

/// F' of one step with the listed ranks' arrivals set back to healthy in every segment (never
/// later than they were): each segment's latest arrival after the change plus the time it ran
/// past its latest arrival.
double replay(const ArrivalLog& log, const StepArrivals& a, std::span<const int> healed, const Reference* ref) {
  double end = 0;
  for (std::uint32_t k = a.first; k < a.first + a.count; ++k) {
    const auto& s = log.segments[k];
    double latest = -1e300;
    bool all_healed = true;
    for (int j = 0; j < s.top_count; ++j) {
      double v = s.top_s[j];
      const bool fixed = std::find(healed.begin(), healed.end(), s.top_rank[j]) != healed.end();
      if (fixed)
        v = std::min(v, ArrivalLog::peers_median(s, a.ranks, v) + healthy_offset(ref, s.top_rank[j], s.first_group, s.last_group));
      all_healed = all_healed && fixed;
      latest = std::max(latest, v);
      if (!fixed) break;  // an unhealed arrival bounds every later one in the list
    }
    // Every listed arrival healed and ranks beyond them: the next one is unknown but not below the
    // median (at most kTop of at least 2·kTop ranks sit above it).
    if (all_healed && s.top_count < a.ranks) latest = std::max(latest, static_cast<double>(s.median_s));
    end += latest + s.after_s;
  }
  return end;
}

}  // namespace

WhatIf what_if(const Evidence& e, const Reference* ref) {
  WhatIf w;
  if (e.steps == 0) {
    w.why_not = "no step scored";
    return w;
  }
  if (e.arrivals.empty()) {
    w.why_not = e.observed_ranks <= 1 ? "one rank: no peers to arrive with"
                : e.standing.empty()   ? "no standings (read back from a packet, or past the ranks kept)"
                                       : "no step with two ranks present";
    return w;
  }
  if (e.standing.empty() || !e.standing.back().waits_off) {
    w.why_not = "no wait measured inside the collectives: a rank's arrival at the step's end is unknown";
    return w;
  }
  w.available = true;
  w.steps = static_cast<int>(e.arrivals.size());
  double actual = 0, ideal = 0;
  for (const auto& a : e.arrivals.steps) {
    actual += a.exposed_s;
    for (std::uint32_t k = a.first; k < a.first + a.count; ++k)
      ideal += static_cast<double>(e.arrivals.segments[k].median_s) + e.arrivals.segments[k].after_s;
  }
  w.actual_s = actual / w.steps;
  w.ideal_s = ideal / w.steps;
  w.slowdown = w.ideal_s > 0 ? w.actual_s / w.ideal_s : 1.0;
  w.wasted = w.actual_s > 0 ? 1.0 - w.ideal_s / w.actual_s : 0.0;
  const auto& d = e.diagnosis;
  w.floor_s = e.differential ? e.differential->exposed_noise_floor_s : e.config.diagnosis.min_effect * w.actual_s;
  std::vector<int> all;
  for (const auto& c : d.culprits) {
    if (c.rank < 0) continue;
    all.push_back(c.rank);
    double healed = 0;
    for (const auto& a : e.arrivals.steps) healed += replay(e.arrivals, a, {&c.rank, 1}, ref);
    WhatIf::Fix f;
    f.rank = c.rank;
    f.group = c.group;
    f.healed_s = healed / w.steps;
    f.gain_s = w.actual_s - f.healed_s;
    w.fixes.push_back(f);
  }
  double healed = 0;
  for (const auto& a : e.arrivals.steps) healed += replay(e.arrivals, a, all, ref);
  w.all_healed_s = all.empty() ? w.actual_s : healed / w.steps;
  return w;
}

}  // namespace sf::frontier
