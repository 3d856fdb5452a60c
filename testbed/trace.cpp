// --trace FILE: Chrome trace-event JSON (Perfetto, chrome://tracing) of the steps a TraceRecorder
// kept. docs/detect.md ("Timelines") says how ranks are aligned, which steps are kept and how the
// size is bounded.
#include "detail.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace sf::testbed::detail {

using nlohmann::ordered_json;

namespace {

constexpr double kUs = 1e6;
constexpr std::size_t kMaxTimes = 4096;   ///< truth and change steps whose start time is kept
constexpr std::size_t kMaxRanges = 50;    ///< dropped stretches listed in otherData

/// µs at ns resolution where the ns count is a double, else µs alone: a window holds at most
/// frontier::kMaxWindowSeconds (1e300 s), and 1e300 s in ns is past the double range (the score
/// fuzzer drew a 6e299 s stage as inf µs, null in the JSON). Times on the axis stay finite: score
/// --detect reads its windows as one run under that bound, and sim and run measure theirs.
double us(double s) {
  const double ns = s * kUs * 1000;
  return std::isfinite(ns) ? std::round(ns) / 1000 : s * kUs;
}
/// A slice's duration is its rounded end minus its rounded start, both taken from the same sums
/// its neighbours start from: rounded separately, ts + dur could pass the next slice's ts by a
/// nanosecond, which strict nesting checks and Perfetto's importer flag as an overlap.
double dur(double from, double to) { return std::max(0.0, us(to) - us(from)); }

}  // namespace

struct TraceRecorder::State {
  struct RankRec {
    int rank;
    bool leader_only;
    std::vector<double> d;
  };
  struct StepRec {
    std::int64_t step = 0;
    double T = 0, F = 0;
    bool scored = false;
    std::vector<double> f, a;
    std::vector<int> leader;  ///< per stage: rank id, or Accounting::kTie / kNone
    std::vector<RankRec> ranks;
  };
  TraceOptions opt;
  const inject::FaultPlan* plan = nullptr;
  int ctx = 1;
  std::size_t ring_cap = 0, event_budget = 0;
  bool init = false;
  frontier::StageSchema schema;
  int world = 0, ranks_recorded = 0;
  std::set<int> fixed;               ///< rank ids shown at every step
  std::map<int, formats::RankInfo> who;
  std::deque<StepRec> recent;        ///< the last ring_cap steps
  std::map<std::int64_t, StepRec> events;  ///< steps kept around change points and truth transitions
  std::vector<std::pair<std::int64_t, std::int64_t>> windows;  ///< [lo, hi) around each of them
  std::set<std::int64_t> marks;      ///< change points marked whose step has not passed yet
  std::map<std::int64_t, double> T_at;  ///< start time of truth steps (the first kMaxTimes)
  std::map<std::int64_t, double> change_T;  ///< start time of marked steps (the last kMaxTimes)
  std::int64_t seen = 0, first_seen = 0, last_seen = -1, times_dropped = 0;

  bool truth_step(std::int64_t step) const {
    if (!plan || !plan->scenario || plan->scenario->site == inject::Site::none) return false;
    if (step == plan->offset) return true;
    if (plan->every > 1) return step >= plan->onset && step < plan->offset && (step - plan->onset) % plan->every == 0;
    return step == std::max(plan->onset, first_seen);
  }
  void add_window(std::int64_t at) {
    // Windows that ended before the last step seen can take no more steps: drop them.
    std::erase_if(windows, [&](const auto& w) { return w.second <= last_seen; });
    windows.emplace_back(at - ctx, at + ctx);
  }
  bool in_window(std::int64_t step) const {
    return std::any_of(windows.begin(), windows.end(), [&](const auto& w) { return step >= w.first && step < w.second; });
  }
  void keep_event(const StepRec& r) {
    if (events.size() < event_budget || events.count(r.step)) events[r.step] = r;
  }
  void keep_time(std::int64_t step, double T) {
    if (T_at.size() < kMaxTimes || T_at.count(step)) T_at[step] = T;
    else ++times_dropped;
  }
  void keep_change_time(std::int64_t step, double T) {
    change_T[step] = T;
    while (change_T.size() > kMaxTimes) change_T.erase(change_T.begin());
  }

  using Kept = std::map<std::int64_t, const StepRec*>;
  /// The steps kept: those around change points and truth transitions, then the last ones.
  Kept kept_steps() const {
    Kept kept;
    for (const auto& [step, r] : events) kept[step] = &r;
    const auto want = static_cast<std::size_t>(std::max(1, opt.max_steps));
    for (auto it = recent.rbegin(); it != recent.rend() && kept.size() < want; ++it) kept.emplace(it->step, &*it);
    return kept;
  }

  /// Leaders outside the fixed ranks: shown (at the steps they lead) by advance led, at most
  /// max_ranks of them; a slice naming any other leader says it is not in the trace.
  std::set<int> added_leaders(const Kept& kept, std::int64_t& not_shown) const {
    std::map<int, double> led;
    for (const auto& [step, r] : kept)
      for (int s = 0; s < static_cast<int>(r->leader.size()); ++s)
        if (r->leader[s] >= 0 && !fixed.count(r->leader[s])) led[r->leader[s]] += r->a[s];
    std::vector<std::pair<double, int>> by_lead;
    for (const auto& [rank, a] : led) by_lead.emplace_back(-a, rank);
    std::sort(by_lead.begin(), by_lead.end());
    std::set<int> leaders;
    for (std::size_t i = 0; i < by_lead.size() && static_cast<int>(i) < opt.max_ranks; ++i) leaders.insert(by_lead[i].second);
    not_shown = static_cast<std::int64_t>(by_lead.size() - leaders.size());
    return leaders;
  }

  int frontier_pid() const { return world + 1; }  // rank r is pid r + 1; pid 0 is not used

  /// Process and thread names: the frontier's, each fixed rank's, each added leader's.
  void metadata(ordered_json& ev, const std::set<int>& leaders) const {
    const int S = schema.size();
    auto meta = [&](const char* name, int pid, int tid, ordered_json args) {
      ev.push_back({{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}});
    };
    meta("process_name", frontier_pid(), 0, {{"name", "frontier (F[t,s], leaders)"}});
    meta("process_sort_index", frontier_pid(), 0, {{"sort_index", -1}});
    for (int s = 0; s < S; ++s) meta("thread_name", frontier_pid(), s + 1, {{"name", schema.name(s)}});
    auto process = [&](int r, bool leader_only) {
      std::string name = "rank " + std::to_string(r);
      if (const auto it = who.find(r); it != who.end())
        name += " (local " + std::to_string(it->second.local_rank) + ", " + it->second.hostname + ")";
      if (leader_only) name += " (leader: only the steps it leads)";
      meta("process_name", r + 1, 0, {{"name", name}});
      meta("process_sort_index", r + 1, 0, {{"sort_index", r}});
      meta("thread_name", r + 1, 0, {{"name", "step"}});
      meta("thread_sort_index", r + 1, 0, {{"sort_index", 0}});
      for (int s = 0; s < S; ++s) {
        meta("thread_name", r + 1, s + 1, {{"name", schema.name(s)}});
        meta("thread_sort_index", r + 1, s + 1, {{"sort_index", s + 1}});
      }
    };
    for (int r : fixed) process(r, false);
    for (int r : leaders) process(r, true);
  }

  /// One kept step: each shown rank's step and stage slices, the frontier's advance slices with
  /// their leaders, and the exposed step and stage shares as counters.
  void step_events(ordered_json& ev, const StepRec& r, const std::set<int>& leaders) const {
    const int S = schema.size();
    const std::int64_t step = r.step;
    for (const auto& rr : r.ranks) {
      if (rr.leader_only && !leaders.count(rr.rank)) continue;
      double p = 0;
      for (double v : rr.d) p += v;
      ev.push_back({{"name", "step " + std::to_string(step)}, {"ph", "X"}, {"pid", rr.rank + 1}, {"tid", 0}, {"ts", us(r.T)},
                    {"dur", dur(r.T, r.T + p)}, {"args", {{"step", step}}}});
      double off = 0;
      for (int s = 0; s < S; ++s) {
        const double next = off + rr.d[s];
        if (rr.d[s] > 0)
          ev.push_back({{"name", schema.name(s)}, {"ph", "X"}, {"pid", rr.rank + 1}, {"tid", s + 1}, {"ts", us(r.T + off)},
                        {"dur", dur(r.T + off, r.T + next)}, {"args", {{"step", step}}}});
        off = next;
      }
    }
    double prev = 0;
    for (int s = 0; s < S; ++s) {
      const double f = r.f[s], a = r.a[s];
      if (a > 0) {
        const int l = r.leader[s];
        std::string name = l >= 0 ? "rank " + std::to_string(l) : l == frontier::Accounting::kTie ? "tie" : "none";
        if (l >= 0 && !fixed.count(l) && !leaders.count(l)) name += ", not in trace";
        ev.push_back({{"name", schema.name(s) + " (" + name + ")"}, {"ph", "X"}, {"pid", frontier_pid()}, {"tid", s + 1},
                      {"ts", us(r.T + prev)}, {"dur", dur(r.T + prev, r.T + f)},
                      {"args", {{"step", step}, {"leader", l}, {"advance_ms", a * 1e3}}}});
      }
      prev = f;
    }
    ev.push_back({{"name", "exposed step (ms)"}, {"ph", "C"}, {"pid", frontier_pid()}, {"ts", us(r.T)},
                  {"args", {{"F[t,S]", r.F * 1e3}}}});
    ordered_json shares = ordered_json::object();
    std::vector<double> g(static_cast<std::size_t>(schema.group_count()), 0.0);
    for (int s = 0; s < S; ++s) g[schema.group_of(s)] += r.a[s];
    for (int k = 0; k < schema.group_count(); ++k) shares[schema.groups()[k]] = r.F > 0 ? g[k] / r.F : 0.0;
    ev.push_back({{"name", "stage shares"}, {"ph", "C"}, {"pid", frontier_pid()}, {"ts", us(r.T)}, {"args", shares}});
  }

  /// Instants for every change point and truth transition, kept step or not (they are few).
  void instants(ordered_json& ev, const Kept& kept, const std::vector<detect::ChangePoint>& changes) const {
    auto instant = [&](std::int64_t step, const std::string& name, ordered_json args, const std::map<std::int64_t, double>& at) {
      const auto it = at.find(step);
      if (it == at.end()) return;
      args["step_in_trace"] = kept.count(step) > 0;
      ev.push_back({{"name", name}, {"ph", "i"}, {"s", "g"}, {"pid", frontier_pid()}, {"tid", 0}, {"ts", us(it->second)},
                    {"args", std::move(args)}});
    };
    for (const auto& c : changes)
      instant(c.step, c.direction() > 0 ? "change point (slower)" : "change point (recovery)",
              {{"step", c.step}, {"detected_at", c.detected_at}, {"rel_change", c.rel_change}}, change_T);
    if (!plan || !plan->scenario || plan->scenario->site == inject::Site::none) return;
    const auto& p = *plan;
    const ordered_json args = {{"scenario", p.scenario->name}, {"stage", p.scenario->stage}, {"ranks", p.ranks},
                               {"delay_ms", p.delay_ms}, {"every", p.every}};
    for (const auto& [step, T] : T_at) {
      if (!truth_step(step)) continue;
      ordered_json a = args;
      a["step"] = step;
      instant(step, step == p.offset ? "truth: fault ends" : "truth: fault injected", std::move(a), T_at);
    }
  }

  /// What the trace holds and what it dropped, as stretches of steps.
  ordered_json other_data(const Kept& kept, const std::set<int>& leaders, std::int64_t not_shown) const {
    ordered_json ranges = ordered_json::array();
    // `next` is the first step not yet kept or counted (none once the last 64-bit step id is
    // kept), so no step arithmetic here leaves the int64 range.
    std::int64_t dropped = 0, more = 0;
    std::optional<std::int64_t> next = first_seen;
    auto gap = [&](std::int64_t lo, std::int64_t hi) {
      if (hi < lo) return;
      dropped += (hi - lo) + 1;
      if (ranges.size() < kMaxRanges) ranges.push_back({lo, hi});
      else ++more;
    };
    for (const auto& [step, r] : kept) {
      if (next && step > *next) gap(*next, step - 1);
      next = step < std::numeric_limits<std::int64_t>::max() ? std::optional<std::int64_t>(step + 1) : std::nullopt;
    }
    if (next) gap(*next, last_seen);
    const std::vector<int> leader_list(leaders.begin(), leaders.end());
    const auto want = static_cast<std::size_t>(std::max(1, opt.max_steps));
    return {{"schema", "sf.trace/2"},
            {"alignment", "every rank starts step t at sum_{u<t} F[u,S] over every step seen (the frontier's time "
                          "axis; dropped steps leave a gap); within a step, a rank's stages are laid end to end "
                          "from its own recorded durations"},
            {"selection", "up to " + std::to_string(event_budget) + " steps within " + std::to_string(ctx) +
                              " steps of each change point and truth transition, then the last steps, " +
                              std::to_string(want) + " in all (--trace-steps)"},
            {"steps_in_trace", kept.size()},
            {"steps_seen", seen},
            {"steps_in_window", seen},
            {"first_step_seen", first_seen},
            {"last_step_seen", last_seen},
            {"steps_dropped", dropped},
            {"dropped_ranges", std::move(ranges)},
            {"dropped_ranges_not_listed", more},
            {"ranks_in_trace", fixed.size() + leaders.size()},
            {"leader_ranks_added", leader_list},
            {"leaders_not_in_trace", not_shown},
            {"ranks_in_window", world},
            {"ranks_recorded", ranks_recorded},
            {"instant_times_dropped", times_dropped}};
  }
};

TraceRecorder::TraceRecorder(const TraceOptions& opt, const inject::FaultPlan* plan) : s_(std::make_unique<State>()) {
  auto& st = *s_;
  st.opt = opt;
  st.plan = plan;
  const auto n = static_cast<std::size_t>(std::max(1, opt.max_steps));
  st.ctx = std::max(1, std::min(16, opt.max_steps / 8));
  st.ring_cap = std::max<std::size_t>(n, static_cast<std::size_t>(st.ctx) + 64);
  st.event_budget = n / 2;
  if (plan && plan->scenario && plan->scenario->site != inject::Site::none) {
    st.add_window(plan->onset);
    if (plan->offset != inject::kForever) st.add_window(plan->offset);
  }
}

TraceRecorder::~TraceRecorder() = default;

void TraceRecorder::add_step(const frontier::StageMatrix& m, const frontier::Accounting& acc, int t, double T,
                             const std::vector<formats::RankInfo>& ranks) {
  auto& st = *s_;
  const int S = m.schema().size();
  if (!st.init) {
    st.init = true;
    st.schema = m.schema();
    st.world = m.world_size();
    st.ranks_recorded = m.ranks();
    st.first_seen = m.step_id(t);
    // Ranks shown at every step: the first max_ranks columns and the injected targets. Leaders
    // outside them are shown at the steps they lead (finish()).
    for (int c = 0; c < m.ranks() && static_cast<int>(st.fixed.size()) < st.opt.max_ranks; ++c) st.fixed.insert(m.rank_id(c));
    if (st.plan)
      for (int r : st.plan->ranks)
        if (m.column_of(r) >= 0) st.fixed.insert(r);
  }
  for (const auto& i : ranks)
    if (!st.who.count(i.rank) && (st.fixed.count(i.rank) || st.who.size() < 4 * static_cast<std::size_t>(st.opt.max_ranks)))
      st.who[i.rank] = i;
  State::StepRec r;
  r.step = m.step_id(t);
  r.T = T;
  r.scored = acc.scored[t] != 0;
  r.F = r.scored ? acc.exposed(t) : 0.0;
  if (r.scored) {
    r.f.resize(static_cast<std::size_t>(S));
    r.a.resize(static_cast<std::size_t>(S));
    r.leader.resize(static_cast<std::size_t>(S));
    auto durations = [&](int c) {
      std::vector<double> d(static_cast<std::size_t>(S));
      for (int s = 0; s < S; ++s) d[s] = m.d(t, c, s);
      return d;
    };
    for (int s = 0; s < S; ++s) {
      r.f[s] = acc.frontier(t, s);
      r.a[s] = acc.advance(t, s);
      const int l = acc.leader(t, s);
      r.leader[s] = l >= 0 ? m.rank_id(l) : l;
    }
    for (int rank : st.fixed)
      if (const int c = m.column_of(rank); c >= 0 && m.present(t, c)) r.ranks.push_back({rank, false, durations(c)});
    for (int s = 0; s < S; ++s) {
      const int l = r.leader[s];
      if (l < 0 || r.a[s] <= 0 || st.fixed.count(l)) continue;
      if (std::any_of(r.ranks.begin(), r.ranks.end(), [&](const auto& x) { return x.rank == l; })) continue;
      if (const int c = m.column_of(l); c >= 0 && m.present(t, c)) r.ranks.push_back({l, true, durations(c)});
    }
  }
  ++st.seen;
  st.last_seen = r.step;
  if (st.truth_step(r.step)) st.keep_time(r.step, r.T);
  if (st.marks.erase(r.step)) st.keep_change_time(r.step, r.T);
  if (st.in_window(r.step)) st.keep_event(r);
  st.recent.push_back(std::move(r));
  while (st.recent.size() > st.ring_cap) st.recent.pop_front();
}

void TraceRecorder::mark(std::int64_t c) {
  auto& st = *s_;
  if (st.change_T.count(c) || st.marks.count(c)) return;
  st.add_window(c);
  if (c > st.last_seen) st.marks.insert(c);  // its start time is taken when it passes
  for (const auto& r : st.recent) {
    if (r.step == c) st.keep_change_time(c, r.T);
    if (r.step >= c - st.ctx && r.step < c + st.ctx) st.keep_event(r);
  }
}

std::size_t TraceRecorder::state_size() const {
  const auto& st = *s_;
  auto rec = [](const State::StepRec& r) {
    std::size_t n = 4 + r.f.size() + r.a.size() + r.leader.size();
    for (const auto& x : r.ranks) n += 2 + x.d.size();
    return n;
  };
  std::size_t n = 2 * st.windows.size() + st.marks.size() + 2 * (st.T_at.size() + st.change_T.size());
  for (const auto& r : st.recent) n += rec(r);
  for (const auto& [step, r] : st.events) n += rec(r);
  return n;
}

ordered_json TraceRecorder::finish(const std::vector<detect::ChangePoint>& changes) const {
  const auto& st = *s_;
  ordered_json ev = ordered_json::array();
  ordered_json out;
  if (!st.init) {
    out["traceEvents"] = std::move(ev);
    out["otherData"] = {{"schema", "sf.trace/2"}, {"steps_in_trace", 0}, {"steps_seen", 0}};
    return out;
  }
  const auto kept = st.kept_steps();
  std::int64_t not_shown = 0;
  const std::set<int> leaders = st.added_leaders(kept, not_shown);
  st.metadata(ev, leaders);
  for (const auto& [step, rp] : kept)
    if (rp->scored) st.step_events(ev, *rp, leaders);
  st.instants(ev, kept, changes);
  out["traceEvents"] = std::move(ev);
  out["displayTimeUnit"] = "ms";
  out["otherData"] = st.other_data(kept, leaders, not_shown);
  return out;
}

}  // namespace sf::testbed::detail

namespace sf::testbed {

std::string trace_written_line(const std::string& file, const nlohmann::ordered_json& trace) {
  std::size_t events = 0;
  if (trace.contains("traceEvents")) events = trace["traceEvents"].size();
  std::string what;
  if (trace.contains("otherData")) {
    const auto& o = trace["otherData"];
    what = ", " + std::to_string(o.value("steps_in_trace", std::size_t{0})) + " of " +
           std::to_string(o.value("steps_seen", std::int64_t{0})) + " steps, " +
           std::to_string(o.value("ranks_in_trace", std::size_t{0})) + " ranks";
  }
  return "trace: wrote " + file + " (" + std::to_string(events) + " events" + what +
         "); open it in https://ui.perfetto.dev or chrome://tracing";
}

}  // namespace sf::testbed
