// The Watch: rank 0's (and sim's, score's) view of a run over time — change points, the series,
// culprit-stability tallies, the diagnosis window at each change, the trace's steps — in memory
// bounded whatever the length of the run (docs/detect.md, "Memory").
#include "detail.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <stdexcept>

namespace sf::testbed {

using nlohmann::ordered_json;

namespace detail {

void copy_step(const frontier::StageMatrix& m, int t, frontier::StageMatrix& one) {
  one.reset(m.step_id(t));
  if (one.roles().empty() && !m.roles().empty()) one.set_roles(m.roles());  // reset() keeps them
  const int k = m.schema().explicit_count();
  std::vector<double> d(static_cast<std::size_t>(k));
  for (int r = 0; r < m.ranks(); ++r) {
    if (!m.present(t, r)) continue;
    for (int s = 0; s < k; ++s) d[s] = m.d(t, r, s);
    one.set_record(0, r, d, m.schema().has_residual() ? std::optional<double>(m.wall(t, r)) : std::nullopt);
    if (m.has_fwd_events() && m.fwd_event_state(t, r) != frontier::EventState::unsampled)
      one.set_fwd_event(0, r, m.fwd_event_state(t, r), m.fwd_event_s(t, r));
    if (m.has_sync_wait())
      for (int s = 0; s < k; ++s)
        if (const double v = m.sync_wait(t, r, s); !std::isnan(v)) one.set_sync_wait(0, r, s, v);
    if (const double v = m.cpu_wait(t, r); !std::isnan(v)) one.set_cpu_wait(0, r, v);
  }
}

}  // namespace detail

struct Watch::State {
  WatchOptions opt;
  std::optional<detect::Detector> detector;
  /// --detect-stages: one more detector per stage group, on its advance a[t,g] (same config;
  /// relative changes against max(m_l, m_r, stage_floor · F's level)).
  std::vector<detect::Detector> stage_detectors;
  std::vector<double> step_adv;  ///< a[t,g] of the step being fed (work buffer)
  bool init = false;
  frontier::StageSchema schema;
  std::vector<std::string> groups;
  int G = 0;
  // The series: F[t,S] (NaN: not scored) and the advance per group (G per step), one entry per
  // step from series_first, the last kSeriesSteps steps.
  std::deque<double> series, series_adv;
  std::int64_t series_first = 0;
  std::int64_t steps_seen = 0, first_seen = 0;
  double T = 0;  ///< Σ F[u,S] over the steps seen (the trace's time axis)
  std::optional<detect::StabilityTracker> stability;
  std::int64_t next_window = 0;
  // Online diagnosis: steps not yet folded into the current segment (the detector may still place
  // a change among them), the current segment's accumulator, and one diagnosis per kept change.
  /// observe_step's copy of a step and what the scorer's accumulator formed of it (the segment
  /// takes both without accounting the step again); reused once the step is folded.
  struct Held {
    frontier::StageMatrix m;
    frontier::StepFacts facts;
  };
  struct Pending {
    std::shared_ptr<const frontier::StageMatrix> m;
    int t;
    bool scored;
    std::shared_ptr<Held> held;  ///< observe_step's steps only
  };
  std::deque<Pending> pending;
  std::vector<std::shared_ptr<Held>> spare;
  int pending_scored = 0, lag = 0;
  std::optional<frontier::StreamingAccumulator> segment;
  bool streaming = true;  ///< false for the rank_median baseline (no streaming evidence)
  std::int64_t segment_first = 0;
  std::optional<frontier::StageMatrix> one;
  std::deque<detail::Diagnosis> diagnoses;
  std::optional<detail::TraceRecorder> trace;

  void start(const frontier::StageMatrix& m) {
    init = true;
    schema = m.schema();
    groups = schema.groups();
    G = schema.group_count();
    detect::StabilityConfig sc;
    sc.window_steps = opt.stability_window;
    stability.emplace(schema, sc);
    next_window = m.first_step();
    segment_first = m.first_step();
    if (opt.detect && opt.detect->per_stage) stage_detectors.assign(static_cast<std::size_t>(G), detect::Detector(*opt.detect));
    first_seen = m.first_step();
    if (opt.online) {
      const auto& dc = opt.detect ? *opt.detect : detect::DetectConfig{};
      // A change is placed at most short_run observations before the one that makes it a
      // candidate and confirmed once min_gap values from it are in (the new level held), which
      // may come max_outlier_run held-back observations later.
      lag = std::max(dc.short_run, dc.min_gap) + dc.max_outlier_run + 2;
      one.emplace(frontier::StageMatrix::same_layout(m, m.first_step(), 1));
      if (opt.detect) new_segment(m);
      if (opt.trace) trace.emplace(*opt.trace, opt.plan);
    }
  }

  /// An accumulator of m's layout in the segment scope. Throws std::invalid_argument for a
  /// baseline that needs the whole window (rank_median).
  frontier::StreamingAccumulator segment_scope(const frontier::StageMatrix& m) const {
    frontier::StreamingAccumulator acc(m.schema(), m.world_size(), opt.label, m.rank_ids(),
                                       frontier::StreamingAccumulator::Scope::segment);
    acc.bound_medians(opt.exact_median_steps);
    return acc;
  }

  void new_segment(const frontier::StageMatrix& m) {
    segment.reset();
    if (!streaming) return;
    try {
      // The segment scope: the fields a change's diagnosis reads, at a fraction of the full cost
      // per step (property segment_equals_window).
      segment.emplace(segment_scope(m));
    } catch (const std::invalid_argument&) {
      streaming = false;  // rank_median: the report reads the whole matrix the caller keeps
    }
  }

  void fold(const Pending& p) {
    if (!segment) return;
    if (p.held) {
      segment->add_accounted_step(p.held->m, p.held->facts);
      return;
    }
    detail::copy_step(*p.m, p.t, *one);
    segment->add_step(*one);
  }

  /// Folds the oldest pending step into the segment and lets it go.
  void fold_front() {
    Pending& p = pending.front();
    if (p.scored) --pending_scored;
    fold(p);
    if (p.held) spare.push_back(std::move(p.held));
    pending.pop_front();
  }

  /// Evidence of the pending steps in [lo, hi] (a small matrix of those steps).
  std::optional<frontier::Evidence> pending_evidence(std::int64_t lo, std::int64_t hi) const {
    if (pending.empty() || hi < lo) return std::nullopt;
    auto m = frontier::StageMatrix::same_layout(*pending.front().m, lo, static_cast<int>(hi - lo + 1));
    bool any = false;
    frontier::StageMatrix step = frontier::StageMatrix::same_layout(*pending.front().m, lo, 1);
    for (const auto& p : pending) {
      const std::int64_t id = p.m->step_id(p.t);
      if (id < lo || id > hi) continue;
      // Row by row through a one-step copy (the layouts are the same).
      detail::copy_step(*p.m, p.t, step);
      const int row = static_cast<int>(id - lo);
      const int k = m.schema().explicit_count();
      std::vector<double> d(static_cast<std::size_t>(k));
      for (int r = 0; r < step.ranks(); ++r) {
        if (!step.present(0, r)) continue;
        for (int s = 0; s < k; ++s) d[s] = step.d(0, r, s);
        m.set_record(row, r, d, m.schema().has_residual() ? std::optional<double>(step.wall(0, r)) : std::nullopt);
        if (step.has_fwd_events() && step.fwd_event_state(0, r) != frontier::EventState::unsampled)
          m.set_fwd_event(row, r, step.fwd_event_state(0, r), step.fwd_event_s(0, r));
        if (step.has_sync_wait())
          for (int s = 0; s < k; ++s)
            if (const double v = step.sync_wait(0, r, s); !std::isnan(v)) m.set_sync_wait(row, r, s, v);
        if (const double v = step.cpu_wait(0, r); !std::isnan(v)) m.set_cpu_wait(row, r, v);
        any = true;
      }
    }
    if (!any) return std::nullopt;
    return frontier::evaluate(m, opt.label);
  }

  /// The same as pending_evidence, in the segment scope from the held steps' own accounting
  /// when every pending step in [lo, hi] is observe_step's (what side_of reads is the same:
  /// property segment_equals_window); a whole evaluate() of a matrix of those steps was a tenth
  /// of what --detect added to a 2000-step sim.
  std::optional<frontier::Evidence> pending_segment(std::int64_t lo, std::int64_t hi) const {
    if (pending.empty() || hi < lo) return std::nullopt;
    const bool held = streaming && std::all_of(pending.begin(), pending.end(), [&](const Pending& p) {
      const std::int64_t id = p.m->step_id(p.t);
      return id < lo || id > hi || p.held != nullptr;
    });
    if (!held) return pending_evidence(lo, hi);
    auto acc = segment_scope(*pending.front().m);
    for (const auto& p : pending)
      if (const std::int64_t id = p.m->step_id(p.t); id >= lo && id <= hi) acc.add_accounted_step(p.held->m, p.held->facts);
    if (acc.steps_seen() == 0) return std::nullopt;
    return acc.finish();
  }

  /// observe()'s work on the rows of an accounted window: the series, stability, trace, the
  /// detectors and the pending steps (`held`: observe_step's copy of its one step).
  std::vector<ConfirmedChange> observe_rows(const std::shared_ptr<const frontier::StageMatrix>& mp,
                                            const frontier::Accounting& acc, const std::shared_ptr<Held>& held,
                                            const std::vector<formats::RankInfo>& ranks);

  ConfirmedChange confirmed(const detect::ChangePoint& c) {
    ConfirmedChange out;
    out.change = c;
    if (trace) trace->mark(c.step);
    const detail::Diagnosis* dg = nullptr;
    if (opt.online) {
      detail::Diagnosis d;
      d.change = c;
      // The segment before: everything since the previous change (its pending steps first). With
      // no streaming evidence (rank_median), the steps still held before the change.
      if (!segment)
        if (auto e = pending_evidence(std::max(segment_first, c.step - lag), c.step - 1)) d.before = detail::side_of(*e);
      while (!pending.empty() && pending.front().m->step_id(pending.front().t) < c.step) fold_front();
      if (segment && segment->steps_seen() > 0) d.before = detail::side_of(segment->finish());
      if (!diagnoses.empty() && diagnoses.back().change.step == segment_first) diagnoses.back().after = d.before;
      // The segment after: from the change to the latest step (it grows until the next change).
      if (!pending.empty()) {
        if (auto e = pending_segment(c.step, pending.back().m->step_id(pending.back().t))) d.after = detail::side_of(*e);
        new_segment(*pending.front().m);
      }
      segment_first = c.step;
      diagnoses.push_back(std::move(d));
      const auto cap = static_cast<std::size_t>(opt.detect->max_changes_kept);
      while (diagnoses.size() > cap) diagnoses.pop_front();
      dg = &diagnoses.back();
    }
    out.line = detail::change_line(c, dg, groups);
    out.json = detail::change_json(c, dg, groups);
    return out;
  }
};

Watch::Watch(WatchOptions o) : s_(std::make_unique<State>()) {
  s_->opt = std::move(o);
  if (s_->opt.detect) s_->detector.emplace(*s_->opt.detect);
}
Watch::~Watch() = default;
Watch::Watch(Watch&&) noexcept = default;
Watch& Watch::operator=(Watch&&) noexcept = default;

std::vector<ConfirmedChange> Watch::State::observe_rows(const std::shared_ptr<const frontier::StageMatrix>& mp,
                                                        const frontier::Accounting& acc, const std::shared_ptr<Held>& held,
                                                        const std::vector<formats::RankInfo>& ranks) {
  auto& st = *this;
  const auto& m = *mp;
  std::vector<ConfirmedChange> out;
  const bool detecting = st.detector.has_value();  // the series and stability serve --detect only
  if (detecting && st.opt.stability_per_window) st.stability->begin_window(m.first_step());
  for (int t = 0; t < acc.steps; ++t) {
    const std::int64_t step = m.step_id(t);
    const bool scored = acc.scored[t] != 0;
    ++st.steps_seen;
    if (detecting) {
      if (st.series.empty()) st.series_first = step;
      while (st.series_first + static_cast<std::int64_t>(st.series.size()) < step) {  // a gap between windows
        st.series.push_back(NAN);
        st.series_adv.insert(st.series_adv.end(), static_cast<std::size_t>(st.G), 0.0);
      }
      st.series.push_back(scored ? acc.exposed(t) : NAN);
      const std::size_t at = st.series_adv.size();
      st.series_adv.insert(st.series_adv.end(), static_cast<std::size_t>(st.G), 0.0);
      if (scored)
        for (int s = 0; s < st.schema.size(); ++s)
          st.series_adv[at + static_cast<std::size_t>(st.schema.group_of(s))] += acc.advance(t, s);
      while (st.series.size() > static_cast<std::size_t>(kSeriesSteps)) {
        st.series.pop_front();
        st.series_adv.erase(st.series_adv.begin(), st.series_adv.begin() + st.G);
        ++st.series_first;
      }
      if (!st.opt.stability_per_window && step >= st.next_window) {
        st.stability->begin_window(step);
        // Saturates: a window near the last 64-bit step id has no next one.
        const std::int64_t n = std::max(1, st.opt.stability_window);
        st.next_window = step <= std::numeric_limits<std::int64_t>::max() - n ? step + n
                                                                              : std::numeric_limits<std::int64_t>::max();
      }
      st.stability->add_step(m, acc, t);
    }
    if (st.trace) st.trace->add_step(m, acc, t, st.T, ranks);
    st.T += scored ? acc.exposed(t) : 0.0;
    if (st.opt.online && detecting) {
      st.pending.push_back({mp, t, scored, held});
      st.pending_scored += scored ? 1 : 0;
    }
    if (st.detector && scored)
      if (const auto c = st.detector->observe(step, acc.exposed(t))) out.push_back(st.confirmed(*c));
    if (!st.stage_detectors.empty() && scored) {
      // Each stage group's advance (F[t,S] = Σ_g a[t,g]: time moved from one stage to another
      // leaves F as it was). The floor follows F's level: a tiny stage cannot fire on its noise.
      st.step_adv.assign(static_cast<std::size_t>(st.G), 0.0);
      for (int s = 0; s < st.schema.size(); ++s) st.step_adv[st.schema.group_of(s)] += acc.advance(t, s);
      const double floor = st.opt.detect->stage_floor * st.detector->level();
      for (int g = 0; g < st.G; ++g) {
        st.stage_detectors[g].set_floor(floor);
        st.stage_detectors[g].observe(step, std::max(0.0, st.step_adv[g]));
      }
    }
    while (st.opt.online && st.pending_scored > st.lag) st.fold_front();
  }
  if (detecting && st.opt.stability_per_window) st.stability->end_window();
  return out;
}

std::vector<ConfirmedChange> Watch::observe(std::shared_ptr<const frontier::StageMatrix> mp,
                                            const std::vector<formats::RankInfo>& ranks) {
  auto& st = *s_;
  const auto& m = *mp;
  if (!st.init) st.start(m);
  if (!(m.schema() == st.schema))
    throw std::invalid_argument("window from step " + std::to_string(m.first_step()) +
                                " has another schema than the first; expected one run");
  const auto acc = frontier::account(m, st.opt.label.account);
  return st.observe_rows(mp, acc, nullptr, ranks);
}

std::vector<ConfirmedChange> Watch::observe_step(const frontier::StageMatrix& one, const frontier::StepFacts& facts) {
  auto& st = *s_;
  if (!st.opt.online) throw std::logic_error("Watch::observe_step: only an online watch holds the steps it needs");
  if (one.steps() != 1 || facts.accounting.steps != 1)
    throw std::invalid_argument("Watch::observe_step expects a one-step matrix and its facts");
  if (!st.init) st.start(one);
  if (!(one.schema() == st.schema))
    throw std::invalid_argument("step " + std::to_string(one.first_step()) + " has another schema than the first; expected one run");
  if (!st.detector) return st.observe_rows(std::shared_ptr<const frontier::StageMatrix>(std::shared_ptr<void>(), &one),
                                           facts.accounting, nullptr, {});  // nothing pends: no copy
  // The step pends until the detector can no longer place a change before it: copy it (into a
  // buffer of a step already folded, so a long run allocates nothing per step).
  std::shared_ptr<State::Held> h;
  if (st.spare.empty()) {
    h = std::make_shared<State::Held>();
  } else {
    h = std::move(st.spare.back());
    st.spare.pop_back();
  }
  h->m = one;
  h->facts = facts;
  return st.observe_rows(std::shared_ptr<const frontier::StageMatrix>(h, &h->m), h->facts.accounting, h, {});
}

std::vector<detect::ChangePoint> Watch::changes() const {
  return s_->detector ? s_->detector->changes() : std::vector<detect::ChangePoint>{};
}

ordered_json Watch::window_stability() const {
  const auto& st = *s_;
  if (!st.detector || !st.stability || !st.opt.stability_per_window || st.stability->window_open()) return nullptr;
  // The report's rules as far as they are known at this window: --stability-stage, the stage that
  // moved at the largest slowdown so far, the group with the most credit to one rank so far.
  int group = -1;
  std::string basis;
  if (const auto it = std::find(st.groups.begin(), st.groups.end(), st.opt.stability_stage); it != st.groups.end()) {
    group = static_cast<int>(it - st.groups.begin());
    basis = "--stability-stage";
  } else if (const detail::Diagnosis* big = detail::largest_slowdown(st.diagnoses)) {
    group = big->moved_group();
    basis = "the stage that moved at the change at step " + std::to_string(big->change.step);
  } else {
    group = st.stability->dominant_group();
    basis = "the group with the most credit to one rank";
  }
  if (group < 0) return nullptr;  // no group has had a unique leader yet
  auto j = detail::stability_json(st.stability->result(group, 1), basis);
  j["so_far"] = true;  // the class as of this window; run.json has the final one
  return j;
}

DetectReport Watch::report(const frontier::StageMatrix* whole) {
  auto& st = *s_;
  if (!st.detector) throw std::logic_error("Watch::report without --detect");
  if (st.stability) st.stability->end_window();
  detail::ReportInput in;
  in.detector = &*st.detector;
  in.dc = *st.opt.detect;
  in.groups = st.groups;
  const auto changes = st.detector->changes();
  if (whole) {
    for (const auto& d : detect::diagnose(*whole, changes, st.opt.label))
      in.diagnoses.push_back({d.change, detail::side_of(d.before), detail::side_of(d.after)});
  } else if (st.opt.online) {
    // The last segment ends with the run.
    while (!st.pending.empty()) st.fold_front();
    if (st.segment && st.segment->steps_seen() > 0 && !st.diagnoses.empty() &&
        st.diagnoses.back().change.step == st.segment_first)
      st.diagnoses.back().after = detail::side_of(st.segment->finish());
    in.diagnoses.assign(st.diagnoses.begin(), st.diagnoses.end());
  }
  in.series_first = st.series_first;
  in.f.assign(st.series.begin(), st.series.end());
  in.advance.assign(st.series_adv.begin(), st.series_adv.end());
  in.steps_seen = st.steps_seen;
  in.first_seen = st.first_seen;
  detect::StabilityTracker empty(st.init ? st.schema : frontier::StageSchema::default_schema());
  in.tracker = st.stability ? &*st.stability : &empty;
  in.stability_stage = st.opt.stability_stage;
  in.plan = st.opt.plan;
  for (const auto& d : st.stage_detectors) in.stage_detectors.push_back(&d);
  return detail::build_report(in);
}

ordered_json Watch::trace(const frontier::StageMatrix* whole, const std::vector<formats::RankInfo>& ranks) const {
  const auto& st = *s_;
  const TraceOptions opt = st.opt.trace.value_or(TraceOptions{});
  const auto changes = this->changes();
  if (!whole) {
    if (st.trace) return st.trace->finish(changes);
    return detail::TraceRecorder(opt, st.opt.plan).finish(changes);
  }
  // Offline: the changes are known before the steps are fed, so the steps around them are kept.
  detail::TraceRecorder rec(opt, st.opt.plan);
  for (const auto& c : changes) rec.mark(c.step);
  const auto acc = frontier::account(*whole, st.opt.label.account);
  double T = 0;
  for (int t = 0; t < acc.steps; ++t) {
    rec.add_step(*whole, acc, t, T, ranks);
    T += acc.scored[t] ? acc.exposed(t) : 0.0;
  }
  return rec.finish(changes);
}

std::size_t Watch::state_size() const {
  const auto& st = *s_;
  std::size_t n = st.detector ? st.detector->state_size() : 0;
  for (const auto& d : st.stage_detectors) n += d.state_size();
  n += st.step_adv.size();
  n += st.series.size() + st.series_adv.size();
  if (st.stability) n += st.stability->state_size();
  if (st.trace) n += st.trace->state_size();
  n += st.pending.size() * 3 + st.diagnoses.size() * (8 + 2 * (4 + static_cast<std::size_t>(st.G)));
  return n;
}

}  // namespace sf::testbed
