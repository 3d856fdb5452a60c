// What fixing a culprit would buy (docs/diagnosis.md, "What fixing it would buy"): the window's
// steps replayed from their arrivals with the culprits' arrivals set back to their healthy values.
#include "detail.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

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

/// A segment's time past its latest arrival, with its collective's own cost set back to the
/// healthy one (never above what it was) where `collective` gives one for the group it ends at.
double after_of(const ArrivalSegment& s, const std::vector<std::optional<double>>* collective) {
  if (collective == nullptr || s.last_group < 0 || static_cast<std::size_t>(s.last_group) >= collective->size()) return s.after_s;
  const auto& healthy = (*collective)[static_cast<std::size_t>(s.last_group)];
  return healthy ? std::min(static_cast<double>(s.after_s), *healthy) : static_cast<double>(s.after_s);
}

/// F' of one step with the listed ranks' arrivals set back to healthy in every segment (never
/// later than they were): each segment's latest arrival after the change plus the time it ran
/// past its latest arrival (its collective's healthy cost where `collective` is given: the
/// healed ranks were starved, and a starved rank is as slow inside a collective as outside).
double replay(const ArrivalLog& log, const StepArrivals& a, std::span<const int> healed, const Reference* ref,
              const std::vector<std::optional<double>>* collective = nullptr) {
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
    end += latest + after_of(s, collective);
  }
  return end;
}

/// Whether culprit c was starved of CPU: its threads' CPU wait grew by at least half of its own
/// change. Such a rank is as slow inside its collectives as outside them (its share of the
/// reduction, its progress calls), so the collective ran past its arrival longer too.
bool starved(const Diagnosis::Culprit& c) { return c.cpu_wait_s > 0 && c.cpu_wait_s >= 0.5 * c.excess_s; }

/// The healthy collective costs a fix of `healed` restores, or null: where the reference knows
/// them and every starved culprit is among the healed (one starved rank left slows the
/// collective as before).
const std::vector<std::optional<double>>* collective_to_heal(const Diagnosis& d, std::span<const int> healed,
                                                              const Reference* ref) {
  if (ref == nullptr || ref->collective_s.empty()) return nullptr;
  bool any = false;
  for (const auto& c : d.culprits) {
    if (c.rank < 0 || !starved(c)) continue;
    if (std::find(healed.begin(), healed.end(), c.rank) == healed.end()) return nullptr;
    any = true;
  }
  return any ? &ref->collective_s : nullptr;
}

/// Whether culprit c lost its time after the step's last collective (a host-local callback or
/// optimizer delay). Its lateness crosses into the next step: the others wait for it in that
/// step's first collective, whose time past its latest arrival grows by what they waited, while
/// its late arrival in this step's last segment is offset by its shorter wait in the collective
/// before (the segments' remainders are signed: ArrivalSegment::after_s). Healing that arrival
/// took its whole delay off the step, the slack it had before the fault included; the fix is the
/// collective's wait going back to its healthy cost.
bool after_last_collective(const Evidence& e, const Diagnosis::Culprit& c) {
  if (c.group < 0 || e.wait_groups.empty()) return false;
  return std::all_of(e.wait_groups.begin(), e.wait_groups.end(), [&](int g) { return g < c.group; });
}

/// The latest arrival in segment s of the ranks other than `rank`: the first listed one that is
/// not it (the median past a list of it alone).
double others_latest(const ArrivalSegment& s, int rank) {
  for (int j = 0; j < s.top_count; ++j)
    if (s.top_rank[j] != rank) return s.top_s[j];
  return s.median_s;
}

/// `rank`'s arrival in segment s where it is listed; else none (it arrived by the last listed one).
std::optional<double> own_arrival(const ArrivalSegment& s, int rank) {
  for (int j = 0; j < s.top_count; ++j)
    if (s.top_rank[j] == rank) return s.top_s[j];
  return std::nullopt;
}

/// What the segments are to a mitigation: whether each ends at a collective (its time past the
/// latest arrival is that collective's own), and whether it is batch work (it ends at or before
/// the gradient collective: data, forward, backward), which a batch share scales.
struct SegmentRoles {
  std::vector<int> wait_groups;
  int gradient_group = -1;  ///< the first collective at or after the forward group
  bool collective(const ArrivalSegment& s) const {
    return std::find(wait_groups.begin(), wait_groups.end(), s.last_group) != wait_groups.end();
  }
  bool batch(const ArrivalSegment& s) const { return gradient_group >= 0 && s.last_group <= gradient_group; }
};

SegmentRoles segment_roles(const Evidence& e) {
  SegmentRoles roles;
  roles.wait_groups = e.wait_groups;
  const auto fwd = e.schema.group_index(e.config.forward_group);
  for (int g : e.wait_groups)
    if (g >= (fwd ? *fwd : 0) && (roles.gradient_group < 0 || g < roles.gradient_group)) roles.gradient_group = g;
  return roles;
}

/// A ring all-reduce moves 2(n−1)/n of the buffer per rank: its cost with n ranks over its cost
/// with `ranks` (0 with one rank left: nothing to reduce).
double ring_ratio(int ranks, int n) {
  auto ring = [](int k) { return k <= 1 ? 0.0 : 2.0 * (k - 1) / k; };
  return ring(ranks) > 0 ? ring(n) / ring(ranks) : 1.0;
}

/// F' of one step without `rank`: each segment's latest arrival among the others, and each
/// collective's own time for one rank fewer (from its healthy cost where `collective` gives one:
/// the rank left was starved, and slowed the ring it is no longer part of).
double replay_excluded(const ArrivalLog& log, const StepArrivals& a, int rank, const SegmentRoles& roles,
                       const std::vector<std::optional<double>>* collective) {
  double end = 0;
  for (std::uint32_t k = a.first; k < a.first + a.count; ++k) {
    const auto& s = log.segments[k];
    end += others_latest(s, rank) + after_of(s, collective) * (roles.collective(s) ? ring_ratio(a.ranks, a.ranks - 1) : 1.0);
  }
  return end;
}

/// F' of one step with `rank`'s batch work scaled by `share` and every other rank's by
/// (R − share)/(R − 1); segments past the gradient collective unchanged.
double replay_rebalanced(const ArrivalLog& log, const StepArrivals& a, int rank, double share, const SegmentRoles& roles) {
  const double others_share = (a.ranks - share) / (a.ranks - 1);
  double end = 0;
  for (std::uint32_t k = a.first; k < a.first + a.count; ++k) {
    const auto& s = log.segments[k];
    const double others = others_latest(s, rank);
    const auto own = own_arrival(s, rank);  // unlisted: at most `others`, and share ≤ 1 ≤ others_share
    const double latest = roles.batch(s) ? std::max(own ? share * *own : 0.0, others_share * others)
                                         : std::max(own.value_or(others), others);
    end += latest + s.after_s;
  }
  return end;
}

/// The batch share in (0, 1] that minimises the mean rebalanced step (a grid of kShares), and that step.
std::pair<double, double> best_rebalance(const ArrivalLog& log, int rank, const SegmentRoles& roles) {
  constexpr int kShares = 50;
  double best_share = 1, best_s = 1e300;
  for (int i = kShares; i >= 1; --i) {
    const double share = static_cast<double>(i) / kShares;
    double sum = 0;
    for (const auto& a : log.steps) sum += replay_rebalanced(log, a, rank, share, roles);
    const double mean = sum / static_cast<double>(log.steps.size());
    if (mean < best_s) {
      best_s = mean;
      best_share = share;
    }
  }
  return {best_share, best_s};
}

/// Per group, the mean time the segments ending at a wait group ran past their latest arrival
/// (WhatIf::collective_s); nullopt elsewhere.
std::vector<std::optional<double>> collective_costs(const Evidence& e, const SegmentRoles& roles) {
  const int G = e.schema.group_count();
  std::vector<double> sum(static_cast<std::size_t>(G), 0.0);
  std::vector<int> n(static_cast<std::size_t>(G), 0);
  for (const auto& s : e.arrivals.segments)
    if (s.last_group >= 0 && s.last_group < G && roles.collective(s)) {
      sum[static_cast<std::size_t>(s.last_group)] += s.after_s;
      ++n[static_cast<std::size_t>(s.last_group)];
    }
  std::vector<std::optional<double>> out(static_cast<std::size_t>(G));
  for (int g = 0; g < G; ++g)
    if (n[static_cast<std::size_t>(g)] > 0) out[static_cast<std::size_t>(g)] = sum[static_cast<std::size_t>(g)] / n[static_cast<std::size_t>(g)];
  return out;
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
  const SegmentRoles roles = segment_roles(e);
  w.collective_s = collective_costs(e, roles);
  const auto& d = e.diagnosis;
  std::vector<int> all;
  for (const auto& c : d.culprits)
    if (c.rank >= 0) all.push_back(c.rank);
  // "As if no rank straggled" takes the collectives at their healthy cost where starved ranks
  // slowed them: that part of their time is the stragglers', not the collectives' own.
  const auto* healthy_collective = collective_to_heal(d, all, ref);
  // A culprit that lost its time after the last collective is healed by the collectives' healthy
  // cost where the reference knows it (after_last_collective), not by its own arrival.
  const bool ref_collective = ref != nullptr && !ref->collective_s.empty();
  const auto crosses = [&](const Diagnosis::Culprit& c) { return ref_collective && after_last_collective(e, c); };
  std::vector<int> arrivals_healed;
  for (const auto& c : d.culprits)
    if (c.rank >= 0 && !crosses(c)) arrivals_healed.push_back(c.rank);
  const auto* all_collective = arrivals_healed.size() < all.size() ? &ref->collective_s : healthy_collective;
  double actual = 0, ideal = 0;
  for (const auto& a : e.arrivals.steps) {
    actual += a.exposed_s;
    for (std::uint32_t k = a.first; k < a.first + a.count; ++k)
      ideal += static_cast<double>(e.arrivals.segments[k].median_s) + after_of(e.arrivals.segments[k], healthy_collective);
  }
  w.actual_s = actual / w.steps;
  w.ideal_s = ideal / w.steps;
  w.slowdown = w.ideal_s > 0 ? w.actual_s / w.ideal_s : 1.0;
  w.wasted = w.actual_s > 0 ? 1.0 - w.ideal_s / w.actual_s : 0.0;
  w.floor_s = e.differential ? e.differential->exposed_noise_floor_s : e.config.diagnosis.min_effect * w.actual_s;
  for (const auto& c : d.culprits) {
    if (c.rank < 0) continue;
    const std::span<const int> one(&c.rank, 1);
    const auto* starved_collective = collective_to_heal(d, one, ref);
    const bool late_after_last = crosses(c);
    const auto* collective = late_after_last ? &ref->collective_s : starved_collective;
    double healed = 0;
    for (const auto& a : e.arrivals.steps)
      healed += replay(e.arrivals, a, one.first(late_after_last ? 0 : 1), ref, collective);
    WhatIf::Fix f;
    f.rank = c.rank;
    f.group = c.group;
    f.healed_s = healed / w.steps;
    f.gain_s = w.actual_s - f.healed_s;
    double excluded = 0;
    // The step without the rank keeps the starved rule alone: with the collectives at their healthy
    // cost, a culprit late after the last collective would lose its delay twice there (its last
    // segment's remainder is signed against its own arrival, which the others' replace).
    for (const auto& a : e.arrivals.steps) excluded += replay_excluded(e.arrivals, a, c.rank, roles, starved_collective);
    f.excluded_s = excluded / w.steps;
    std::tie(f.rebalance_share, f.rebalanced_s) = best_rebalance(e.arrivals, c.rank, roles);
    w.fixes.push_back(f);
  }
  double healed = 0;
  for (const auto& a : e.arrivals.steps) healed += replay(e.arrivals, a, arrivals_healed, ref, all_collective);
  w.all_healed_s = all.empty() ? w.actual_s : healed / w.steps;
  return w;
}

}  // namespace sf::frontier
