// The diagnosis (docs/diagnosis.md): what went wrong in a window, beside the paper's "where the
// time goes". Against a reference, the differential Δa_g = a_g/N − a_g^ref/N_ref telescopes like
// the advances themselves (Σ_g Δa_g = ΔF); without one, the cohort: the lag's origin where the
// top stage is a wait, else the rank whose own work stands out. Reads only Evidence fields, so a
// packet is enough to diagnose a window or to serve as a reference.
#include "sf/frontier/frontier.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace sf::frontier {

namespace {

bool in(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

double clamp01(double x) { return std::isfinite(x) ? std::clamp(x, 0.0, 1.0) : 0.0; }

/// Ranks with a record in the window, over the world size.
double coverage_of(const Evidence& e) {
  if (e.world_size <= 0) return 0.0;
  return clamp01(static_cast<double>(e.observed_ranks) / e.world_size);
}

/// The floor a per-step mean difference must pass: z standard errors (sd over steps, the two
/// sides' step counts) and at least min_effect of the step.
double floor_of(double sd, int n_ref, int n, double step_s, const DiagnosisConfig& cfg) {
  double se = 0;
  if (n_ref > 0 && n > 0) se = sd * std::sqrt(1.0 / n_ref + 1.0 / n);
  return std::max(cfg.z * se, cfg.min_effect * step_s);
}

/// The reference's step-to-step spread of a quantity: its robust spread where known (four steps
/// or more: one stalled step of six no longer sets the floor), else its SD.
double spread_of(double sd, double robust_sd) { return robust_sd >= 0 ? robust_sd : sd; }

/// Robust deviation of a list (1.4826 × MAD); 0 when empty.
double robust_deviation(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const double med = median_inplace(v);
  for (double& x : v) x = std::abs(x - med);
  return 1.4826 * median_inplace(v);
}

/// Ranks a cross-rank spread needs before it says anything: with fewer, a rank's noise is read
/// from its own steps alone.
constexpr int kSpreadRanks = 8;

/// How many robust spreads a rank's change must pass against its peers' when n ranks are compared
/// in `lists` lists at once (the stage groups, the whole step, the CPU wait): z made family-wise
/// over them (Bonferroni: the one-sided tail of z shared by n × lists tests), then widened by
/// 1 + 3/n because a spread read from n ranks is itself uncertain (the MAD keeps about a third of
/// an SD's information and is biased low at few ranks). For z = 3 and 8 lists: 5.6 at 8 ranks,
/// 4.8 at 32. Calibrated on healthy model pairs drawn from independent seeds, whose per-rank
/// speeds differ (results/stragglers: the null arm).
double ranks_z(double z, int n, int lists) {
  if (n <= 1) return z;
  const double tail = 0.5 * std::erfc(z / std::sqrt(2.0)) / (static_cast<double>(n) * std::max(1, lists));
  double lo = z, hi = z + 10;  // the z' with the one-sided tail `tail`, by bisection (called once per list)
  for (int i = 0; i < 80; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(mid / std::sqrt(2.0)) > tail ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi) * (1.0 + 3.0 / n);
}

/// Whether the rank that stands out most in group g also reaches the step's end later by at least
/// half as much (its whole-step standing): its extra time in g was not absorbed by a wait after
/// it, so it was not itself waiting there. A rank that waits in g for one behind leaves the wait
/// with it and ends the step with its peers; a rank that works longer in g (a host-local
/// optimizer or callback delay) ends it later, and the others wait for it in the next step.
bool top_rank_reaches_the_step_end_later(const Evidence& e, int g) {
  const Standing& st = e.standing[g];
  if (st.ranks.empty() || !(st.ranks.front().mean_s > 0)) return false;
  const RankStanding& top = st.ranks.front();
  for (const auto& x : e.standing.back().ranks)
    if (x.rank == top.rank) return x.mean_s >= 0.5 * top.mean_s;
  return false;
}

/// Whether group g's standings are evidence against a rank: the recorder took the waits off, or
/// the group is not where the ranks wait for the one behind (the frontier's lag closes there by
/// at least min_effect of the step). Where they wait and no wait was measured, the rank that
/// waited longest would stand out (the paper's W = 0 cannot tell waiting from work) — unless that
/// rank also ends the step later by half as much: then the lag closed because the rank behind
/// worked there (with two ranks the lag is half their gap, and it closes as the one behind
/// works), not because the others waited.
bool standing_usable(const Evidence& e, int g, const DiagnosisConfig& cfg) {
  if (g >= static_cast<int>(e.standing.size()) - 1) return true;  // the whole step
  if (e.standing[g].waits_off) return true;
  const double closes = g < static_cast<int>(e.lag_increment_mean_s.size()) ? -e.lag_increment_mean_s[g] : 0.0;
  return !(closes > 0 && closes >= cfg.min_effect * e.median_step_s) || top_rank_reaches_the_step_end_later(e, g);
}

const Suspect* stage_suspect(const Evidence& e, int g) {
  for (const auto& s : e.stage_suspects)
    if (s.group == g) return &s;
  return nullptr;
}

struct RankChoice {
  int rank = -1;
  std::string basis = "none";
  double support = 0;  // in [0, 1]
};

/// A change that passes its own floor (floor 0: none known, any positive change).
bool passes(const Differential::RankDelta& x) { return x.delta_s > 0 && x.delta_s > x.floor_s; }

/// The rank whose own extra work explains at least half of an excess of `excess_s` (support: its
/// share of the top two), when its change passes its own floor; else none.
RankChoice own_work_rank(const std::vector<Differential::RankDelta>& deltas, double excess_s, const char* basis) {
  RankChoice c;
  if (!deltas.empty() && passes(deltas[0]) && deltas[0].delta_s >= 0.5 * excess_s) {
    c.rank = deltas[0].rank;
    c.basis = basis;
    const double second = deltas.size() > 1 ? std::max(0.0, deltas[1].delta_s) : 0.0;
    c.support = deltas[0].delta_s / (deltas[0].delta_s + second);
  }
  return c;
}

/// The rank the labeler's evidence names for g (frontier leader, sync-wait side evidence).
RankChoice suspect_rank(const Evidence& e, int g) {
  RankChoice c;
  if (const Suspect* s = stage_suspect(e, g); s && s->rank >= 0) {
    c.rank = s->rank;
    c.basis = s->basis;
    c.support = clamp01(s->confidence);
  }
  return c;
}

/// The rank behind an excess of `excess_s` in group g: the standing-out rank whose own extra work
/// explains at least half of it, else (without per-rank floors: no standings to read) the rank
/// the labeler's evidence names for g.
RankChoice choose_rank(const Evidence& e, int g, const std::vector<Differential::RankDelta>& deltas, double excess_s,
                       bool standing) {
  if (RankChoice c = own_work_rank(deltas, excess_s, "own_work_excess"); c.rank >= 0 || standing) return c;
  return suspect_rank(e, g);
}

/// The cohort's view of group g: its standing-out ranks with their excess over the median.
std::vector<Differential::RankDelta> cohort_deltas(const Evidence& e, int g) {
  std::vector<Differential::RankDelta> out;
  if (g < static_cast<int>(e.rank_excess.size()))
    for (const auto& x : e.rank_excess[g]) out.push_back({x.rank, x.excess_s});
  return out;
}

/// The wait group downstream of g where the lag that opened at g closes (most of it), or −1.
int surfaces_in(const Evidence& e, int g) {
  if (in(e.wait_groups, g) || g >= static_cast<int>(e.lag_increment_mean_s.size())) return -1;
  const double open = e.lag_increment_mean_s[g];
  if (!(open > 0)) return -1;
  int best = -1;
  for (int h : e.wait_groups)
    if (h > g && h < static_cast<int>(e.lag_increment_mean_s.size()) && e.lag_increment_mean_s[h] <= -0.5 * open &&
        (best < 0 || e.lag_increment_mean_s[h] < e.lag_increment_mean_s[best]))
      best = h;
  return best;
}

double runner_up(const std::vector<double>& v, int g) {
  double r = 0;
  for (int h = 0; h < static_cast<int>(v.size()); ++h)
    if (h != g) r = std::max(r, v[h]);
  return r;
}

void finish_confidence(Diagnosis& d, double competing_s, double rank_support) {
  const double noise = d.excess_s > 0 ? 1.0 - d.noise_floor_s / d.excess_s : 0.0;
  const double tie = d.excess_s > 0 ? 1.0 - competing_s / d.excess_s : 0.0;
  d.confidence = clamp01(d.coverage * clamp01(noise) * clamp01(tie) * (d.rank >= 0 ? clamp01(rank_support) : 1.0));
}

/// The stage without a collective whose top rank's own work grew by at least half of `excess_s`
/// (the largest such), or −1. In a stage that holds a collective, "own work" is the stage's time
/// minus the time inside its collectives, and where the collectives overlap compute (DDP's
/// buckets) a late rank's own work reads high: a clean excess in a stage with no collective is
/// the better witness of where the time was lost.
int own_stage_witness(const Evidence& e, const std::vector<std::vector<Differential::RankDelta>>& deltas, double excess_s) {
  int best_g = -1;
  for (int h = 0; h < static_cast<int>(deltas.size()); ++h)
    if (!in(e.wait_groups, h) && !deltas[h].empty() && passes(deltas[h][0]) && deltas[h][0].delta_s >= 0.5 * excess_s &&
        (best_g < 0 || deltas[h][0].delta_s > deltas[best_g][0].delta_s))
      best_g = h;
  return best_g;
}

/// A wait's origin by own work: the top change sits in a stage that holds a collective, so the
/// time there may be others waiting. A stage without a collective where one rank's own work grew
/// by at least half of it is where the wait was born (a host-local optimizer or callback delay on
/// one rank surfaces in the next step's all-reduce).
bool follow_wait(const Evidence& e, const std::vector<std::vector<Differential::RankDelta>>& deltas, Diagnosis& d,
                 RankChoice& rc, bool standing) {
  if (!in(e.wait_groups, d.group)) return false;
  const int best_g = own_stage_witness(e, deltas, d.excess_s);
  if (best_g < 0) return false;
  d.surfaces_group = d.group;
  d.group = best_g;
  rc = choose_rank(e, best_g, deltas[best_g], d.excess_s, standing);
  return true;
}

/// Every rank whose change passes its floor in some group or over the whole step (its arrival),
/// one entry per rank: the group of its largest change past its floor (else `fallback_group`, where
/// the step's change showed), largest excess first.
std::vector<Diagnosis::Culprit> collect_culprits(const std::vector<std::vector<Differential::RankDelta>>& deltas,
                                                 const std::vector<Differential::RankDelta>& arrival,
                                                 const std::vector<Differential::RankDelta>& cpu_wait, int fallback_group) {
  const int G = static_cast<int>(deltas.size());
  std::vector<Diagnosis::Culprit> out;
  auto entry = [&](int rank) -> Diagnosis::Culprit& {
    for (auto& c : out)
      if (c.rank == rank) return c;
    Diagnosis::Culprit c;
    c.rank = rank;
    c.by_group_s.assign(G, 0.0);
    out.push_back(std::move(c));
    return out.back();
  };
  for (int g = 0; g < G; ++g)
    for (const auto& x : deltas[g])
      if (passes(x)) entry(x.rank);
  for (const auto& x : arrival)
    if (passes(x)) entry(x.rank);
  for (const auto& x : cpu_wait)
    if (passes(x)) entry(x.rank);
  for (auto& c : out) {
    for (int g = 0; g < G; ++g)
      for (const auto& x : deltas[g])
        if (x.rank == c.rank) {
          c.by_group_s[g] = x.delta_s;
          if (passes(x) && (c.group < 0 || x.delta_s > c.excess_s)) {
            c.group = g;
            c.excess_s = x.delta_s;
            c.floor_s = x.floor_s;
          }
        }
    for (const auto& x : arrival)
      if (x.rank == c.rank) {
        c.arrival_s = x.delta_s;
        if (c.group < 0 && passes(x)) {
          c.group = fallback_group;
          c.excess_s = x.delta_s;
          c.floor_s = x.floor_s;
        }
      }
    for (const auto& x : cpu_wait)
      if (x.rank == c.rank) {
        c.cpu_wait_s = x.delta_s;
        if (c.group < 0 && passes(x)) {
          c.group = fallback_group;
          c.excess_s = x.delta_s;
          c.floor_s = x.floor_s;
        }
      }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.excess_s > b.excess_s; });
  return out;
}

/// A rank named for its erratic steps is a culprit for the step's change it caused everyone,
/// though no mean change of its own passed a floor.
void name_erratic(Diagnosis& d) {
  if (d.rank_basis != "erratic" || d.rank < 0) return;
  for (const auto& c : d.culprits)
    if (c.rank == d.rank) return;
  Diagnosis::Culprit c;
  c.rank = d.rank;
  c.group = d.group;
  c.excess_s = d.excess_s;
  c.floor_s = d.noise_floor_s;
  d.culprits.insert(d.culprits.begin(), c);
}

/// The named rank first (its entry's group is the named stage), the others by excess.
/// The named rank's entry among d.culprits (end() where it has none).
std::vector<Diagnosis::Culprit>::iterator named_culprit(Diagnosis& d) {
  return std::find_if(d.culprits.begin(), d.culprits.end(), [&](const auto& c) { return c.rank == d.rank; });
}

void put_named_first(Diagnosis& d) {
  if (d.rank < 0) return;
  const auto it = named_culprit(d);
  if (it == d.culprits.end()) return;
  std::rotate(d.culprits.begin(), it, it + 1);
  d.culprits.front().group = d.group;
}

/// The rank that arrives late at the step's end, against its peers, by at least half of the
/// stage's change: a rank slowed everywhere (starved of CPU, paused) whose loss is spread over
/// its stages, so that no one stage's own work explains the change.
RankChoice arrival_rank(const std::vector<Differential::RankDelta>& arrival, double excess_s) {
  return own_work_rank(arrival, excess_s, "arrival");
}

/// The rank whose threads waited for a CPU longer than its peers' by at least half of the stage's
/// change: a rank starved or throttled whose loss shows inside its collectives (every rank then
/// waits there alike), not in its own stages or its arrival.
RankChoice cpu_wait_rank(const std::vector<Differential::RankDelta>& cpu_wait, double excess_s) {
  return own_work_rank(cpu_wait, excess_s, "cpu_wait");
}

/// The one rank whose steps grew erratic past its floor (two or more: none, the loss is not one
/// rank's), where the step changed by at least twice its floor (the attribution is indirect: it
/// needs a clear effect) and no rank's mean change explains it.
RankChoice erratic_rank(const Differential& diff) {
  RankChoice c;
  if (!(diff.delta_exposed_s > 2 * diff.exposed_noise_floor_s)) return c;
  int passing = 0;
  for (const auto& x : diff.erratic) passing += passes(x);
  if (passing != 1 || !passes(diff.erratic.front())) return c;
  c.rank = diff.erratic.front().rank;
  c.basis = "erratic";
  c.support = 1.0;
  return c;
}

/// A device origin: the named stage follows forward, and the named rank's sampled forward device
/// time (CUDA events) exceeds its cohort's by at least half the excess: the work was queued in
/// forward and became host-visible where it was named.
void follow_device(const Evidence& e, Diagnosis& d, RankChoice& rc) {
  const auto f = e.schema.group_index(e.config.forward_group);
  if (!f || d.group <= *f || d.rank < 0 || e.events.ready < e.config.min_event_samples || e.events.max_rank != d.rank) return;
  if (!(e.events.max_rank_median_s - e.events.cohort_median_s >= 0.5 * d.excess_s)) return;
  if (d.surfaces_group < 0) d.surfaces_group = d.group;
  d.group = *f;
  rc.basis = "forward_event";
}

/// A rank named by its arrival, late at the step's end by d.excess_s, that lost at least half of it
/// in one group, its own change there past its floor, is named in that group: the loss was born
/// there, and where the step's change showed (`top`, a stage that holds a collective) is where it
/// surfaced. A host-local delay on one rank smaller than backward's drift floor surfaces in the
/// next step's all-reduce, whose change alone stays inside that floor.
void born_where_it_lost(const Evidence& e, int top, Diagnosis& d) {
  const auto c = named_culprit(d);
  if (c == d.culprits.end() || c->group < 0 || c->group == top || !(c->excess_s >= 0.5 * d.excess_s)) return;
  d.surfaces_group = in(e.wait_groups, top) ? top : surfaces_in(e, c->group);
  d.group = c->group;
  d.excess_s = c->excess_s;
  d.noise_floor_s = c->floor_s;
  d.rank_basis = "own_work_excess";
}

/// No stage's change passes its floor, but the step's may: a rank slowed a little in every stage
/// (paused, starved) spreads its loss over them. Its arrival (or its CPU wait, or its erratic
/// steps), when it explains at least half of the step's change, names it in the stage that changed
/// most (by its arrival: in the stage where it lost at least half of it, if one did, past that
/// stage's floor); else `d` stays "no significant change".
Diagnosis spread_loss_diagnosis(const Evidence& e, const Differential& diff, Diagnosis d, int top) {
  if (!(diff.delta_exposed_s > diff.exposed_noise_floor_s)) return d;
  RankChoice rc = arrival_rank(diff.arrival_deltas, diff.delta_exposed_s);
  const std::vector<Differential::RankDelta>* list = &diff.arrival_deltas;
  if (rc.rank < 0) {
    rc = cpu_wait_rank(diff.cpu_wait_deltas, diff.delta_exposed_s);
    list = &diff.cpu_wait_deltas;
  }
  if (rc.rank < 0) rc = erratic_rank(diff);
  if (rc.rank < 0) return d;
  d.group = top;
  d.rank = rc.rank;
  d.rank_basis = rc.basis;
  if (rc.basis == "erratic") {
    d.excess_s = diff.delta_exposed_s;  // the step's change, which its pauses cost everyone
    d.noise_floor_s = diff.exposed_noise_floor_s;
  } else {
    d.excess_s = (*list)[0].delta_s;
    d.noise_floor_s = (*list)[0].floor_s;
  }
  d.surfaces_group = surfaces_in(e, top);
  d.culprits = collect_culprits(diff.rank_deltas, diff.arrival_deltas, diff.cpu_wait_deltas, top);
  if (rc.basis == "arrival") born_where_it_lost(e, top, d);
  d.share_of_step = diff.reference_step_s > 0 ? d.excess_s / diff.reference_step_s : 0.0;
  name_erratic(d);
  put_named_first(d);
  finish_confidence(d, runner_up(diff.delta_advance_s, top), rc.support);
  return d;
}

Diagnosis differential_diagnosis(const Evidence& e, const Differential& diff) {
  Diagnosis d;
  d.basis = Diagnosis::Basis::differential;
  d.reference = diff.reference;
  d.coverage = coverage_of(e);
  const auto& delta = diff.delta_advance_s;
  int top = -1;
  for (int g = 0; g < static_cast<int>(delta.size()); ++g)
    if (top < 0 || delta[g] > delta[top]) top = g;
  if (top < 0) return d;
  d.excess_s = delta[top];
  d.noise_floor_s = diff.noise_floor_s[top];
  d.share_of_step = diff.reference_step_s > 0 ? delta[top] / diff.reference_step_s : 0.0;
  // With standings on both sides a rank is named only by its own change against its peers' (the
  // difference in differences); when none explains the stage's change, every rank changed alike.
  const bool standing = !diff.arrival_deltas.empty();
  // No stage's change passes its floor: the step's may still have, spread over every stage.
  if (!(delta[top] > diff.noise_floor_s[top])) return standing ? spread_loss_diagnosis(e, diff, d, top) : d;
  d.group = top;
  RankChoice rc = choose_rank(e, top, diff.rank_deltas[top], delta[top], standing);
  if (!follow_wait(e, diff.rank_deltas, d, rc, standing)) d.surfaces_group = surfaces_in(e, top);
  if (rc.rank < 0 && standing) rc = arrival_rank(diff.arrival_deltas, delta[top]);
  if (rc.rank < 0 && standing) rc = cpu_wait_rank(diff.cpu_wait_deltas, delta[top]);
  if (rc.rank < 0 && standing) rc = erratic_rank(diff);
  d.common = standing && rc.rank < 0;
  if (d.common) rc.basis = "common";
  d.rank = rc.rank;
  follow_device(e, d, rc);
  d.rank_basis = rc.basis;
  if (!d.common) {
    d.culprits = collect_culprits(diff.rank_deltas, diff.arrival_deltas, diff.cpu_wait_deltas, top);
    name_erratic(d);
    put_named_first(d);
  }
  finish_confidence(d, runner_up(delta, top), d.common ? 1.0 : rc.support);
  return d;
}

/// The step a cohort excess is measured against: the window's median exposed step.
double cohort_step(const Evidence& e) { return e.median_step_s; }

/// The least a rank's excess over its peers must be without a reference: cohort_min_effect (at
/// least min_effect) of the median step, and at least cohort_min_s.
double cohort_floor(const Evidence& e, const DiagnosisConfig& cfg) {
  return std::max(std::max(cfg.min_effect, cfg.cohort_min_effect) * cohort_step(e), cfg.cohort_min_s);
}

/// Without a reference: each rank's standing (its own work above its peers' median, step by step)
/// as a delta with the floor it must pass, per group and for the whole step (arrival): z standard
/// errors of its mean over the window's steps, z robust deviations of the ranks' standings (with
/// enough ranks to have one), min_effect of the step.
struct CohortDeltas {
  std::vector<std::vector<Differential::RankDelta>> groups;
  std::vector<Differential::RankDelta> arrival, cpu_wait;
};
CohortDeltas standing_excess(const Evidence& e, const DiagnosisConfig& cfg) {
  CohortDeltas out;
  const int K = static_cast<int>(e.standing.size());
  const double z_ranks = ranks_z(cfg.z, e.observed_ranks, K + 1);  // the same for every rank and list
  for (int k = 0; k < K; ++k) {
    const Standing& st = e.standing[k];
    std::vector<Differential::RankDelta> list;
    if (!standing_usable(e, k, cfg)) {
      out.groups.push_back({});
      continue;
    }
    for (const auto& x : st.ranks) {
      // A rank's noise from its own steps; the ranks' scatter where there are enough ranks to
      // read one, or where the rank's own steps cannot say (one step).
      const bool temporal = x.sd_s >= 0 && x.steps > 1;
      const double se = temporal ? x.sd_s / std::sqrt(static_cast<double>(x.steps)) : 0.0;
      const bool scatter = e.observed_ranks >= kSpreadRanks || (!temporal && e.observed_ranks >= 3);
      const double zs = scatter ? z_ranks : 0.0;
      list.push_back({x.rank, x.mean_s,
                      std::max({cfg.z * se, zs * st.spread_s, cohort_floor(e, cfg)})});
    }
    if (k + 1 < K) out.groups.push_back(std::move(list));
    else out.arrival = std::move(list);
  }
  // The CPU wait is spread evenly over a window's steps: its noise is the ranks' scatter alone.
  const double scatter = e.observed_ranks >= kSpreadRanks ? z_ranks * e.cpu_wait.spread_s : 0.0;
  for (const auto& x : e.cpu_wait.ranks)
    out.cpu_wait.push_back({x.rank, x.mean_s, std::max(scatter, cohort_floor(e, cfg))});
  return out;
}

Diagnosis lag_origin_diagnosis(const Evidence& e, const DiagnosisConfig& cfg) {
  // The frontier's top stage holds a collective: the lag that surfaces there opened upstream, at
  // the stage with the largest lag increment on the leading rank.
  Diagnosis d;
  const int s1 = e.share_order.empty() ? -1 : e.share_order[0];
  if (s1 < 0 || !in(e.wait_groups, s1) || e.lag_increment_mean_s.empty()) return d;
  int origin = -1;
  for (int g = 0; g < s1; ++g)
    if (!in(e.wait_groups, g) && (origin < 0 || e.lag_increment_mean_s[g] > e.lag_increment_mean_s[origin])) origin = g;
  if (origin < 0) return d;
  const double open = e.lag_increment_mean_s[origin];
  const double sd = origin < static_cast<int>(e.lag_increment_sd_s.size()) ? e.lag_increment_sd_s[origin] : 0.0;
  const double floor = std::max(cfg.z * (e.steps > 0 ? sd / std::sqrt(static_cast<double>(e.steps)) : 0.0),
                                cfg.min_effect * cohort_step(e));
  if (!(open > floor)) return d;
  d.basis = Diagnosis::Basis::lag_origin;
  d.group = origin;
  d.excess_s = open;
  d.noise_floor_s = floor;
  d.share_of_step = cohort_step(e) > 0 ? open / cohort_step(e) : 0.0;
  d.surfaces_group = s1;
  d.coverage = coverage_of(e);
  RankChoice rc;
  if (!e.standing.empty()) {
    const CohortDeltas cd = standing_excess(e, cfg);
    rc = own_work_rank(cd.groups[origin], open, "own_work_excess");
    if (rc.rank < 0) rc = arrival_rank(cd.arrival, open);
    if (rc.rank < 0) rc = suspect_rank(e, origin);
    d.rank = rc.rank;
    d.culprits = collect_culprits(cd.groups, cd.arrival, cd.cpu_wait, origin);
    put_named_first(d);
  } else {
    rc = choose_rank(e, origin, cohort_deltas(e, origin), open, false);
    d.rank = rc.rank;
  }
  d.rank_basis = rc.basis;
  std::vector<double> opened(e.lag_increment_mean_s.size(), 0.0);
  for (int g = 0; g < s1; ++g) opened[g] = e.lag_increment_mean_s[g];
  finish_confidence(d, runner_up(opened, origin), rc.support);
  return d;
}

/// Without a reference, by standing: every rank whose own work stands above its peers' past its
/// floor is a culprit; the largest is named, in the stage of its largest excess (a stage without a
/// collective that holds at least half of it, where the largest sits in a wait).
Diagnosis standing_diagnosis(const Evidence& e, const DiagnosisConfig& cfg) {
  Diagnosis d;
  d.basis = Diagnosis::Basis::cohort;
  d.coverage = coverage_of(e);
  const CohortDeltas cd = standing_excess(e, cfg);
  const int G = static_cast<int>(cd.groups.size());
  const int s1 = e.share_order.empty() ? 0 : e.share_order[0];
  d.culprits = collect_culprits(cd.groups, cd.arrival, cd.cpu_wait, s1);
  if (d.culprits.empty()) {
    // Nothing passes: say the largest excess and its floor.
    auto consider = [&](const std::vector<Differential::RankDelta>& v) {
      if (!v.empty() && v[0].delta_s > d.excess_s) {
        d.excess_s = v[0].delta_s;
        d.noise_floor_s = v[0].floor_s;
      }
    };
    for (const auto& v : cd.groups) consider(v);
    d.share_of_step = cohort_step(e) > 0 ? d.excess_s / cohort_step(e) : 0.0;
    return d;
  }
  const Diagnosis::Culprit top = d.culprits.front();
  d.group = top.group;
  d.rank = top.rank;
  d.excess_s = top.excess_s;
  d.noise_floor_s = top.floor_s;
  RankChoice rc;
  rc.rank = top.rank;
  rc.basis = top.group >= 0 && top.group < G && top.by_group_s[top.group] == top.excess_s ? "standing"
             : top.arrival_s == top.excess_s                                               ? "arrival"
                                                                                           : "cpu_wait";
  const auto& own = cd.groups;
  if (in(e.wait_groups, d.group))
    if (const int h = own_stage_witness(e, own, d.excess_s); h >= 0) {
      d.surfaces_group = d.group;
      d.group = h;
      d.excess_s = own[h][0].delta_s;
      d.noise_floor_s = own[h][0].floor_s;
      d.rank = own[h][0].rank;
      rc.rank = d.rank;
      rc.basis = "standing";
    }
  // Support: the named rank's share of the two largest excesses in its stage.
  if (d.group < G && !own[d.group].empty() && own[d.group][0].rank == d.rank) {
    const double second = own[d.group].size() > 1 ? std::max(0.0, own[d.group][1].delta_s) : 0.0;
    rc.support = own[d.group][0].delta_s / (own[d.group][0].delta_s + second);
  } else {
    rc.support = d.culprits.size() > 1 ? d.excess_s / (d.excess_s + std::max(0.0, d.culprits[1].excess_s)) : 1.0;
  }
  d.share_of_step = cohort_step(e) > 0 ? d.excess_s / cohort_step(e) : 0.0;
  if (d.surfaces_group < 0) d.surfaces_group = surfaces_in(e, d.group);
  follow_device(e, d, rc);
  d.rank_basis = rc.basis;
  put_named_first(d);
  std::vector<double> tops(G, 0.0);
  for (int g = 0; g < G; ++g)
    for (const auto& x : own[g])
      if (x.rank == d.rank) tops[g] = std::max(0.0, x.delta_s);
  finish_confidence(d, runner_up(tops, d.group), rc.support);
  return d;
}

Diagnosis cohort_diagnosis(const Evidence& e, const DiagnosisConfig& cfg) {
  // The rank whose own work (time minus its collectives' waits) most exceeds its cohort's median,
  // past z robust deviations and min_effect of the step.
  if (!e.standing.empty()) return standing_diagnosis(e, cfg);
  Diagnosis d;
  d.basis = Diagnosis::Basis::cohort;
  d.coverage = coverage_of(e);
  const int G = static_cast<int>(e.rank_excess.size());
  std::vector<double> top_excess(G, 0.0);
  int best = -1;
  double best_floor = 0;
  for (int g = 0; g < G; ++g) {
    if (e.rank_excess[g].empty()) continue;
    const double x = e.rank_excess[g][0].excess_s;
    top_excess[g] = std::max(0.0, x);
    const double spread = g < static_cast<int>(e.cohort_own_spread_s.size()) ? e.cohort_own_spread_s[g] : 0.0;
    const double floor = std::max(cfg.z * spread, cfg.min_effect * cohort_step(e));
    if (best < 0 || x > d.excess_s) {
      best = g;
      best_floor = floor;
      d.excess_s = x;
    }
  }
  if (best < 0) return d;
  d.noise_floor_s = best_floor;
  d.share_of_step = cohort_step(e) > 0 ? d.excess_s / cohort_step(e) : 0.0;
  if (!(d.excess_s > best_floor)) return d;
  d.group = best;
  if (in(e.wait_groups, best)) {
    std::vector<std::vector<Differential::RankDelta>> all;
    for (int g = 0; g < G; ++g) all.push_back(cohort_deltas(e, g));
    if (const int h = own_stage_witness(e, all, d.excess_s); h >= 0) {
      d.surfaces_group = best;
      d.group = best = h;
      d.excess_s = all[h][0].delta_s;
    }
  }
  RankChoice rc = choose_rank(e, best, cohort_deltas(e, best), d.excess_s, false);
  d.rank = rc.rank;
  if (d.surfaces_group < 0) d.surfaces_group = surfaces_in(e, best);
  follow_device(e, d, rc);
  d.rank_basis = rc.basis;
  finish_confidence(d, runner_up(top_excess, best), rc.support);
  return d;
}

Diagnosis frontier_diagnosis(const Evidence& e) {
  // One rank observed and nothing to compare with: where the time goes is all there is to say.
  Diagnosis d;
  d.basis = Diagnosis::Basis::frontier;
  d.coverage = coverage_of(e);
  const int s1 = e.share_order.empty() ? -1 : e.share_order[0];
  if (s1 < 0 || e.steps == 0 || !(e.advances_s[s1] > 0)) return d;
  d.group = s1;
  d.excess_s = e.advances_s[s1] / e.steps;
  d.share_of_step = e.exposed_makespan_s > 0 ? e.advances_s[s1] / e.exposed_makespan_s : 0.0;
  if (const Suspect* s = stage_suspect(e, s1); s && s->rank >= 0) {
    d.rank = s->rank;
    d.rank_basis = s->basis;
  }
  d.confidence = 0;
  return d;
}

}  // namespace

std::string_view to_string(Diagnosis::Basis b) {
  switch (b) {
    case Diagnosis::Basis::none: return "none";
    case Diagnosis::Basis::differential: return "differential";
    case Diagnosis::Basis::lag_origin: return "lag_origin";
    case Diagnosis::Basis::cohort: return "cohort";
    case Diagnosis::Basis::frontier: return "frontier";
  }
  return "?";
}

Reference make_reference(const Evidence& e, std::string name) {
  Reference r;
  r.name = std::move(name);
  r.groups = e.schema.groups();
  r.steps = e.steps;
  r.world_size = e.world_size;
  const auto G = r.groups.size();
  r.advance_mean_s.assign(G, 0.0);
  r.advance_sd_s.assign(G, 0.0);
  for (std::size_t g = 0; g < G && g < e.advances_s.size(); ++g) {
    r.advance_mean_s[g] = e.steps > 0 ? e.advances_s[g] / e.steps : 0.0;
    if (g < e.advance_sd_s.size()) r.advance_sd_s[g] = e.advance_sd_s[g];
  }
  r.exposed_mean_s = e.steps > 0 ? e.exposed_makespan_s / e.steps : 0.0;
  r.exposed_sd_s = e.exposed_sd_s;
  r.advance_robust_sd_s = e.advance_robust_sd_s;
  r.exposed_robust_sd_s = e.exposed_robust_sd_s;
  r.rank_excess = e.rank_excess;
  r.cohort_own_median_s = e.cohort_own_median_s;
  r.standing = e.standing;
  r.cpu_wait = e.cpu_wait;
  r.collective_s = e.whatif.collective_s;
  return r;
}

std::string reference_problem(const Evidence& e, const Reference& ref) {
  if (ref.groups != e.schema.groups()) {
    std::string a, b;
    for (const auto& g : ref.groups) a += (a.empty() ? "" : ", ") + g;
    for (const auto& g : e.schema.groups()) b += (b.empty() ? "" : ", ") + g;
    return "the reference's stages (" + a + ") differ from the window's (" + b + ")";
  }
  if (ref.steps <= 0) return "the reference has no scored step";
  if (e.steps <= 0) return "the window has no scored step";
  if (ref.advance_mean_s.size() != ref.groups.size() || ref.advance_sd_s.size() != ref.groups.size())
    return "the reference has " + std::to_string(ref.advance_mean_s.size()) + " advances for " +
           std::to_string(ref.groups.size()) + " stages";
  return "";
}

namespace {

/// Reference steps K with z·sd·sqrt(1/K + 1/n) within 3 % of the step (0: the floor already is;
/// −1: no K is enough with a window of n steps).
int needed_reference_steps(double sd, int n_ref, int n, double step_s, const DiagnosisConfig& cfg) {
  constexpr double kTarget = 0.03;
  if (!(step_s > 0) || n_ref <= 0 || n <= 0) return 0;
  const double allowed = kTarget * step_s / (cfg.z * sd);  // sqrt(1/K + 1/n) must stay under it
  if (!(sd > 0) || std::sqrt(1.0 / n_ref + 1.0 / n) <= allowed) return 0;
  const double inv_k = allowed * allowed - 1.0 / n;
  if (!(inv_k > 0)) return -1;
  return static_cast<int>(std::min(1e9, std::ceil(1.0 / inv_k)));
}

/// Ranks whose whole-step standing scatters from step to step more than their peers' do in the
/// window (an F-like test on ln of the variance ratio, SE sqrt(2/(n−1)) for n steps, z
/// family-wise over the ranks), and did not already in the reference.
std::vector<Differential::RankDelta> erratic_ranks(const Standing& w, const Standing& r, int observed, const DiagnosisConfig& cfg) {
  std::vector<Differential::RankDelta> out;
  if (!w.complete || w.ranks.size() < 3) return out;
  auto peers_sd = [](const Standing& st, int rank) {
    std::vector<double> v;
    for (const auto& x : st.ranks)
      if (x.rank != rank && x.sd_s > 0) v.push_back(x.sd_s);
    return v.empty() ? -1.0 : median_inplace(v);
  };
  const double zr = ranks_z(cfg.z, observed, 1);
  for (const auto& x : w.ranks) {
    const double peers = peers_sd(w, x.rank);
    if (!(x.sd_s > 0) || !(peers > 0) || x.steps < 3) continue;
    const double log_ratio = 2 * std::log(x.sd_s / peers);
    const double floor = zr * std::sqrt(2.0 / (x.steps - 1));
    // In the reference it was not already as erratic (half the log ratio at most).
    bool was = false;
    for (const auto& y : r.ranks)
      if (y.rank == x.rank && y.sd_s > 0) {
        const double p = peers_sd(r, y.rank);
        was = p > 0 && 2 * std::log(y.sd_s / p) > 0.5 * log_ratio;
      }
    if (!was) out.push_back({x.rank, log_ratio, floor});
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.delta_s > b.delta_s; });
  return out;
}

/// One list of standings (a group, the whole step, the CPU wait) against the reference's.
std::vector<Differential::RankDelta> standing_changes(const Standing& w, const Standing& r, int ref_steps, int observed,
                                                      int lists, double effect, const DiagnosisConfig& cfg) {
  std::vector<Differential::RankDelta> list;
  std::vector<double> changes, se, paired;
  // The reference's typical per-step spread of a standing (the median over the ranks it lists):
  // the null's spread for a rank it did not list. Past kStandingAll ranks a list holds only the
  // largest standings, and a rank whose fault came and went is listed in the window alone, its own
  // steps scattered by the fault.
  std::vector<double> listed_sd;
  for (const auto& y : r.ranks)
    if (y.sd_s >= 0) listed_sd.push_back(y.sd_s);
  const double typical_sd = listed_sd.empty() ? -1.0 : median_inplace(listed_sd);
  for (const auto& x : w.ranks) {
    double base = r.median_s, base_sd = -1;
    int base_n = ref_steps;
    bool listed = false;
    for (const auto& y : r.ranks)
      if (y.rank == x.rank) {
        base = y.mean_s;
        base_sd = y.sd_s;
        base_n = y.steps;
        listed = true;
      }
    const double change = x.mean_s - base;
    if (listed) paired.push_back(change);
    // Under the null hypothesis (the rank's window is its reference's process) both means have the
    // reference's spread: the rank's own where the reference listed it, else the reference's typical
    // one; the window's only where the reference listed no rank. A paused rank's own spread grows
    // with the fault and would hide it.
    const double null_sd = typical_sd >= 0 ? typical_sd : x.sd_s;
    const double sd = base_sd >= 0 ? base_sd : null_sd;
    double var = 0;
    if (sd >= 0 && x.steps > 0) var += sd * sd / x.steps;
    if (sd >= 0 && base_n > 0) var += sd * sd / base_n;
    list.push_back({x.rank, change, 0.0});
    changes.push_back(change);
    se.push_back(std::sqrt(var));
  }
  // Ranks that differ persistently (other hosts, other speeds) move against each other between two
  // runs by more than their steps' noise says: the part of the ranks' scatter of changes that the
  // noise does not explain is that heterogeneity. It is read from few ranks and many ranks are
  // tested at once, so it is weighted by ranks_z; the noise by z. On a machine of like ranks the
  // scatter is the noise and the floor stays z standard errors.
  // Where the lists hold only the largest standings: the changes of the ranks both list (at least
  // kSpreadRanks of them), else the ranks' scatter of levels, which bounds it from above. Ranks that
  // differ persistently and alike in both runs (two tiers of speed) scatter in level, not in change,
  // and their levels' scatter would hide every rank's change.
  double hetero = 0;
  if (observed >= kSpreadRanks) {
    const bool pairs = static_cast<int>(paired.size()) >= kSpreadRanks;
    const double spread = w.complete && r.complete ? robust_deviation(changes)
                          : pairs                  ? robust_deviation(paired)
                                                   : std::max(w.spread_s, r.spread_s);
    std::vector<double> typical = se;
    const double noise = typical.empty() ? 0.0 : median_inplace(typical);
    hetero = std::sqrt(std::max(0.0, spread * spread - noise * noise));
  }
  const double zr = ranks_z(cfg.z, observed, lists);
  for (std::size_t i = 0; i < list.size(); ++i)
    list[i].floor_s = std::max(std::hypot(cfg.z * se[i], zr * hetero), effect);
  std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.delta_s > b.delta_s; });
  return list;
}

/// The difference in differences (docs/diagnosis.md): per group and for the whole step, each
/// standing-out rank's standing in the window minus its standing in the reference. A drift of the
/// machine moves every rank's own work and its peers' median alike and cancels; what is left is
/// the rank's own change. Its floor: z standard errors of the two means (with the reference's
/// per-step SD: the rank's own, or the reference's typical one where it did not list the rank),
/// z robust deviations of the ranks' changes (of those both sides list, where the lists hold only
/// the largest), min_effect of the reference step.
void standing_deltas(const Evidence& e, const Reference& ref, const DiagnosisConfig& cfg, Differential& d) {
  const int K = static_cast<int>(e.standing.size());
  const int G = K - 1;
  const double effect = cfg.min_effect * ref.exposed_mean_s;
  for (int k = 0; k < K; ++k) {
    if (!standing_usable(e, k, cfg)) continue;  // no evidence: an empty list
    auto list = standing_changes(e.standing[k], ref.standing[k], ref.steps, e.observed_ranks, K + 1, effect, cfg);
    if (k < G) d.rank_deltas[k] = std::move(list);
    else d.arrival_deltas = std::move(list);
  }
  if (!e.cpu_wait.ranks.empty() && !ref.cpu_wait.ranks.empty())
    d.cpu_wait_deltas = standing_changes(e.cpu_wait, ref.cpu_wait, ref.steps, e.observed_ranks, K + 1, effect, cfg);
  d.erratic = erratic_ranks(e.standing[G], ref.standing[G], e.observed_ranks, cfg);
}

}  // namespace

Differential compare(const Evidence& e, const Reference& ref, const DiagnosisConfig& cfg) {
  if (const auto why = reference_problem(e, ref); !why.empty()) throw std::invalid_argument(why);
  Differential d;
  d.reference = ref.name;
  d.reference_steps = ref.steps;
  d.reference_step_s = ref.exposed_mean_s;
  const int G = e.schema.group_count();
  const int N = e.steps;
  d.delta_advance_s.resize(G);
  d.noise_floor_s.resize(G);
  d.rank_deltas.assign(G, {});
  // Under the null hypothesis (the window is the reference's process) both means have the
  // reference's step-to-step spread.
  // Two periods of one healthy run differ by more than their step-to-step spread says: the machine
  // drifts (a neighbour, steal time, contention in the collectives), and what it moves is mostly
  // the largest stage. The drift term scales with the stage's own reference time; the exposed
  // step's floor has none, since it decides only whether a fault reached the step at all.
  // The spreads are the reference's robust ones where it has them (four steps or more).
  const auto robust = [&](int g) {
    return g < static_cast<int>(ref.advance_robust_sd_s.size()) ? spread_of(ref.advance_sd_s[g], ref.advance_robust_sd_s[g])
                                                                 : ref.advance_sd_s[g];
  };
  for (int g = 0; g < G; ++g) {
    d.delta_advance_s[g] = e.advances_s[g] / N - ref.advance_mean_s[g];
    d.noise_floor_s[g] = std::max(floor_of(robust(g), ref.steps, N, ref.exposed_mean_s, cfg),
                                  cfg.drift * std::max(0.0, ref.advance_mean_s[g]));
  }
  d.delta_exposed_s = e.exposed_makespan_s / N - ref.exposed_mean_s;
  const double exposed_sd = spread_of(ref.exposed_sd_s, ref.exposed_robust_sd_s);
  d.exposed_noise_floor_s = floor_of(exposed_sd, ref.steps, N, ref.exposed_mean_s, cfg);
  d.needed_reference_steps = needed_reference_steps(exposed_sd, ref.steps, N, ref.exposed_mean_s, cfg);
  d.cohort_delta_s.assign(G, 0.0);
  for (int g = 0; g < G && g < static_cast<int>(e.cohort_own_median_s.size()) &&
                  g < static_cast<int>(ref.cohort_own_median_s.size());
       ++g)
    d.cohort_delta_s[g] = e.cohort_own_median_s[g] - ref.cohort_own_median_s[g];
  if (!e.standing.empty() && e.standing.size() == ref.standing.size() && static_cast<int>(ref.standing.size()) == G + 1) {
    standing_deltas(e, ref, cfg, d);
    return d;
  }
  for (int g = 0; g < G && g < static_cast<int>(e.rank_excess.size()); ++g) {
    for (const auto& x : e.rank_excess[g]) {
      // The rank's own work in the reference: its own mean where the reference listed it, else
      // the reference cohort's median, else (no per-rank reference) the window cohort's.
      double base = g < static_cast<int>(e.cohort_own_median_s.size()) ? e.cohort_own_median_s[g] : 0.0;
      if (g < static_cast<int>(ref.cohort_own_median_s.size())) base = ref.cohort_own_median_s[g];
      if (g < static_cast<int>(ref.rank_excess.size()))
        for (const auto& y : ref.rank_excess[g])
          if (y.rank == x.rank) base = y.own_mean_s;
      d.rank_deltas[g].push_back({x.rank, x.own_mean_s - base});
    }
    std::stable_sort(d.rank_deltas[g].begin(), d.rank_deltas[g].end(),
                     [](const Differential::RankDelta& a, const Differential::RankDelta& b) { return a.delta_s > b.delta_s; });
  }
  return d;
}

Diagnosis diagnose(const Evidence& e, const Reference* ref, const DiagnosisConfig& cfg) {
  if (e.steps == 0) return {};
  if (ref != nullptr) return differential_diagnosis(e, compare(e, *ref, cfg));
  if (e.observed_ranks <= 1) return frontier_diagnosis(e);
  // Standings read each rank's own work against its peers' with the waits taken off: the origin of
  // a wait is where its rank's standing grew, with no lag (whose median over two ranks is their
  // mean) to follow back.
  if (!e.standing.empty()) return standing_diagnosis(e, cfg);
  if (Diagnosis d = lag_origin_diagnosis(e, cfg); d.group >= 0) return d;
  return cohort_diagnosis(e, cfg);
}

void diagnose_against(Evidence& e, const Reference& ref) {
  e.differential = compare(e, ref, e.config.diagnosis);
  e.diagnosis = differential_diagnosis(e, *e.differential);
  e.whatif = what_if(e, &ref);
}

}  // namespace sf::frontier
