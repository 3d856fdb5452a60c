// --trace FILE: a window as Chrome trace-event JSON (Perfetto, chrome://tracing). docs/detect.md
// ("Timelines") says how ranks are aligned and how the size is bounded.
#include "sf/testbed/testbed.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace sf::testbed {

using nlohmann::ordered_json;

namespace {

constexpr double kUs = 1e6;

}  // namespace

ordered_json chrome_trace(const formats::Window& w, const frontier::LabelConfig& label, const TraceOptions& opt,
                          const std::vector<detect::ChangePoint>& changes, const inject::FaultPlan* plan) {
  const auto& m = w.matrix;
  const auto& schema = m.schema();
  const int S = schema.size();
  const auto acc = frontier::account(m, label.account);
  const int steps = std::min(acc.steps, std::max(1, opt.max_steps));

  // Ranks shown: the first max_ranks, plus the injected targets and each step's leaders of the
  // largest advance would be too many; the targets are always kept. `shown` holds matrix columns
  // (rank ids differ from columns when the matrix is sparse); events name rank ids.
  std::set<int> shown;
  for (int c = 0; c < m.ranks() && static_cast<int>(shown.size()) < opt.max_ranks; ++c) shown.insert(c);
  if (plan)
    for (int r : plan->ranks)
      if (const int c = m.column_of(r); c >= 0) shown.insert(c);

  ordered_json ev = ordered_json::array();
  const int frontier_pid = m.world_size() + 1;  // rank r is pid r + 1; pid 0 is not used
  auto meta = [&](const char* name, int pid, int tid, ordered_json args) {
    ev.push_back({{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}});
  };
  meta("process_name", frontier_pid, 0, {{"name", "frontier (F[t,s], leaders)"}});
  meta("process_sort_index", frontier_pid, 0, {{"sort_index", -1}});
  for (int s = 0; s < S; ++s) meta("thread_name", frontier_pid, s + 1, {{"name", schema.name(s)}});
  for (int c : shown) {
    const int r = m.rank_id(c);
    std::string name = "rank " + std::to_string(r);
    const auto who = std::find_if(w.ranks.begin(), w.ranks.end(), [r](const formats::RankInfo& i) { return i.rank == r; });
    if (who != w.ranks.end()) name += " (local " + std::to_string(who->local_rank) + ", " + who->hostname + ")";
    meta("process_name", r + 1, 0, {{"name", name}});
    meta("process_sort_index", r + 1, 0, {{"sort_index", r}});
    meta("thread_name", r + 1, 0, {{"name", "step"}});
    meta("thread_sort_index", r + 1, 0, {{"sort_index", 0}});
    for (int s = 0; s < S; ++s) {
      meta("thread_name", r + 1, s + 1, {{"name", schema.name(s)}});
      meta("thread_sort_index", r + 1, s + 1, {{"sort_index", s + 1}});
    }
  }

  // Step t starts at T_t = Σ_{u<t} F[u,S] for every rank: the frontier's time axis (docs).
  std::vector<double> start(static_cast<std::size_t>(steps) + 1, 0.0);
  for (int t = 0; t < steps; ++t) start[t + 1] = start[t] + acc.exposed(t);
  auto us = [](double s) { return std::round(s * kUs * 1000) / 1000; };  // µs, ns resolution

  for (int t = 0; t < steps; ++t) {
    if (!acc.scored[t]) continue;
    const double t0 = start[t];
    const std::int64_t step = m.step_id(t);
    for (int c : shown) {
      if (!m.present(t, c)) continue;
      const int r = m.rank_id(c);
      double p = 0;
      for (int s = 0; s < S; ++s) p += m.d(t, c, s);
      ev.push_back({{"name", "step " + std::to_string(step)}, {"ph", "X"}, {"pid", r + 1}, {"tid", 0}, {"ts", us(t0)},
                    {"dur", us(p)}, {"args", {{"step", step}}}});
      double off = 0;
      for (int s = 0; s < S; ++s) {
        const double d = m.d(t, c, s);
        if (d > 0)
          ev.push_back({{"name", schema.name(s)}, {"ph", "X"}, {"pid", r + 1}, {"tid", s + 1}, {"ts", us(t0 + off)},
                        {"dur", us(d)}, {"args", {{"step", step}}}});
        off += d;
      }
    }
    double prev = 0;
    for (int s = 0; s < S; ++s) {
      const double f = acc.frontier(t, s), a = acc.advance(t, s);
      if (a > 0) {
        const int l = acc.leader(t, s) >= 0 ? m.rank_id(acc.leader(t, s)) : acc.leader(t, s);
        const std::string who = l >= 0 ? "rank " + std::to_string(l) : l == frontier::Accounting::kTie ? "tie" : "none";
        ev.push_back({{"name", schema.name(s) + " (" + who + ")"}, {"ph", "X"}, {"pid", frontier_pid}, {"tid", s + 1},
                      {"ts", us(t0 + prev)}, {"dur", us(a)},
                      {"args", {{"step", step}, {"leader", l}, {"advance_ms", a * 1e3}}}});
      }
      prev = f;
    }
    const double exposed = acc.exposed(t);
    ev.push_back({{"name", "exposed step (ms)"}, {"ph", "C"}, {"pid", frontier_pid}, {"ts", us(t0)},
                  {"args", {{"F[t,S]", exposed * 1e3}}}});
    ordered_json shares = ordered_json::object();
    std::vector<double> g(static_cast<std::size_t>(schema.group_count()), 0.0);
    for (int s = 0; s < S; ++s) g[schema.group_of(s)] += acc.advance(t, s);
    for (int k = 0; k < schema.group_count(); ++k) shares[schema.groups()[k]] = exposed > 0 ? g[k] / exposed : 0.0;
    ev.push_back({{"name", "stage shares"}, {"ph", "C"}, {"pid", frontier_pid}, {"ts", us(t0)}, {"args", shares}});
  }

  auto instant = [&](std::int64_t step, const std::string& name, ordered_json args) {
    const std::int64_t t = step - m.first_step();
    if (t < 0 || t >= steps) return;
    ev.push_back({{"name", name}, {"ph", "i"}, {"s", "g"}, {"pid", frontier_pid}, {"tid", 0}, {"ts", us(start[t])},
                  {"args", std::move(args)}});
  };
  for (const auto& c : changes)
    instant(c.step, c.direction() > 0 ? "change point (slower)" : "change point (recovery)",
            {{"step", c.step}, {"detected_at", c.detected_at}, {"rel_change", c.rel_change}});
  if (plan && plan->scenario && plan->scenario->site != inject::Site::none) {
    ordered_json args = {{"scenario", plan->scenario->name}, {"stage", plan->scenario->stage}, {"ranks", plan->ranks},
                         {"delay_ms", plan->delay_ms}, {"every", plan->every}};
    for (int t = 0; t < steps; ++t) {
      const std::int64_t step = m.step_id(t);
      const bool on = step >= plan->onset && step < plan->offset;
      if (plan->every > 1 ? on && (step - plan->onset) % plan->every == 0 : step == std::max(plan->onset, m.first_step()))
        instant(step, "truth: fault injected", args);
      if (step == plan->offset) instant(step, "truth: fault ends", args);
    }
  }

  ordered_json out;
  out["traceEvents"] = std::move(ev);
  out["displayTimeUnit"] = "ms";
  out["otherData"] = {{"schema", "sf.trace/1"},
                      {"alignment", "every rank starts step t at sum_{u<t} F[u,S] (the frontier's time axis); within a "
                                    "step, a rank's stages are laid end to end from its own recorded durations"},
                      {"steps_in_trace", steps},
                      {"steps_in_window", acc.steps},
                      {"ranks_in_trace", shown.size()},
                      {"ranks_in_window", m.world_size()},
                      {"ranks_recorded", m.ranks()}};
  return out;
}

}  // namespace sf::testbed
