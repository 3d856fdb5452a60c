// --detect: change points of F[t,S], the diagnosis window at each change with its verdict against
// the injected truth, periodicity and culprit stability, as JSON and table lines (docs/detect.md).
#include "detail.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sf::testbed {

using nlohmann::ordered_json;

namespace {

/// Steps within this distance of a truth transition count as finding it (placement bound 2 of
/// docs/detect.md, plus the outlier hold-back).
constexpr std::int64_t kMatchSteps = 5;

struct Transition {
  std::int64_t step;
  int direction;  ///< +1 onset (slower), −1 offset (recovery)
};

std::vector<Transition> truth_transitions(const inject::FaultPlan* plan, std::int64_t first, std::int64_t last) {
  std::vector<Transition> out;
  if (!plan || !plan->scenario || plan->scenario->site == inject::Site::none || plan->every > 1) return out;
  // A link fault is on by its rate, every other fault by its delay.
  if (plan->scenario->site == inject::Site::link ? plan->rate_mbit <= 0 : plan->delay_ms <= 0) return out;
  if (plan->onset > first && plan->onset <= last) out.push_back({plan->onset, +1});
  if (plan->offset != inject::kForever && plan->offset > first && plan->offset <= last && plan->offset > plan->onset)
    out.push_back({plan->offset, -1});
  return out;
}

ordered_json shares_json(const frontier::Evidence& e) {
  ordered_json j = ordered_json::object();
  for (std::size_t g = 0; g < e.shares.size(); ++g) j[e.group_name(static_cast<int>(g))] = e.shares[g];
  return j;
}

std::string pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", v * 100);
  return b;
}

}  // namespace

namespace detail {

void observe_window(detect::Detector& d, const frontier::StageMatrix& m, const frontier::AccountOptions& opt) {
  const auto acc = frontier::account(m, opt);
  for (int t = 0; t < acc.steps; ++t)
    if (acc.scored[t]) d.observe(m.step_id(t), acc.exposed(t));
}

}  // namespace detail

formats::Window concat_windows(const std::vector<formats::Window>& windows) {
  for (const auto& w : windows) {
    const auto& a = windows.front().matrix;
    if (!(w.matrix.schema() == a.schema()) || w.matrix.world_size() != a.world_size())
      throw std::invalid_argument("window at line " + std::to_string(w.header_line) +
                                  " has another schema or world size than the first; expected one run");
  }
  return detail::concat(windows);
}

DetectReport detect_report(const frontier::StageMatrix& m, const frontier::LabelConfig& label, const detect::DetectConfig& dc,
                           const inject::FaultPlan* plan, const std::vector<std::int64_t>& window_bounds, int stability_window,
                           const detect::Detector* online) {
  DetectReport rep;
  const auto acc = frontier::account(m, label.account);
  // F[t,S] per step from the matrix's first step, NaN where no rank was present: the periodicity
  // search and everything placed by step read one indexing.
  std::vector<double> f(static_cast<std::size_t>(acc.steps), NAN);
  std::int64_t first_scored = -1;
  for (int t = 0; t < acc.steps; ++t)
    if (acc.scored[t]) {
      if (first_scored < 0) first_scored = m.step_id(t);
      f[t] = acc.exposed(t);
    }
  detect::Detector local(dc);
  if (!online)
    for (int t = 0; t < acc.steps; ++t)
      if (acc.scored[t]) local.observe(m.step_id(t), acc.exposed(t));
  const detect::Detector& d = online ? *online : local;
  rep.changes = d.changes();

  const std::int64_t first = m.first_step(), last = m.first_step() + (m.steps() - 1);
  const auto transitions = truth_transitions(plan, first, last);
  std::vector<bool> found(transitions.size(), false);
  const auto diags = detect::diagnose(m, rep.changes, label);
  const std::string truth_stage = plan && plan->scenario ? plan->scenario->stage : "";

  char line[640];
  std::snprintf(line, sizeof line,
                "# change points (BOCPD on F[t,S]: short-run mass >= %.2f within %d steps; FALCON verification: gap >= %d "
                "steps, mean change > %s): %zu\n",
                dc.threshold, dc.short_run, dc.min_gap, pct(dc.min_rel_change).c_str(), rep.changes.size());
  rep.text += line;
  std::snprintf(line, sizeof line, "#   observed %lld steps, %lld isolated outlier(s) dropped, %lld candidate(s) rejected\n",
                static_cast<long long>(d.observed()), static_cast<long long>(d.outliers_dropped()),
                static_cast<long long>(d.candidates_rejected()));
  rep.text += line;

  auto& cps = rep.json["change_points"] = ordered_json::array();
  int false_alarms = 0;
  for (const auto& c : rep.changes) {
    ordered_json j;
    j["step"] = c.step;
    j["detected_at"] = c.detected_at;
    j["direction"] = c.direction() > 0 ? "slower" : "faster";
    j["mean_before_s"] = c.mean_before;
    j["mean_after_s"] = c.mean_after;
    j["rel_change"] = c.rel_change;
    j["short_run_mass"] = c.short_run_mass;
    std::snprintf(line, sizeof line, "#   %s at step %lld (confirmed at %lld): %.4f -> %.4f s/step (%+.1f%%)",
                  c.direction() > 0 ? "change" : "recovery", static_cast<long long>(c.step),
                  static_cast<long long>(c.detected_at), c.mean_before, c.mean_after,
                  (c.mean_after - c.mean_before) / std::max(c.mean_before, 1e-12) * 100);
    std::string text = line;
    const auto it = std::find_if(diags.begin(), diags.end(), [&](const auto& x) { return x.change.step == c.step; });
    std::string moved, suspect_stage;
    int suspect_rank = -1;
    if (it != diags.end()) {
      const auto& dg = *it;
      j["before"] = {{"first_step", dg.before_first}, {"last_step", dg.before_last}, {"shares", shares_json(dg.before)}};
      j["after"] = {{"first_step", dg.after_first}, {"last_step", dg.after_last}, {"shares", shares_json(dg.after)}};
      if (dg.moved_group >= 0) {
        moved = dg.after.group_name(dg.moved_group);
        j["moved_stage"] = moved;
        j["moved_share_before"] = dg.before.shares[dg.moved_group];
        j["moved_share_after"] = dg.after.shares[dg.moved_group];
        text += "; " + moved + " " + pct(dg.before.shares[dg.moved_group]) + " -> " + pct(dg.after.shares[dg.moved_group]);
      }
      // The suspect of the slower side: after a change, the after-window; after a recovery, before.
      const auto& slow = c.direction() > 0 ? dg.after : dg.before;
      if (slow.suspect.group >= 0) {
        suspect_stage = slow.group_name(slow.suspect.group);
        suspect_rank = slow.suspect.rank;
      }
      j["suspect"] = {{"stage", suspect_stage}, {"rank", suspect_rank}, {"basis", slow.suspect.basis}};
      text += "; suspect " + (suspect_stage.empty() ? std::string("-") : suspect_stage) +
              (suspect_rank >= 0 ? " rank " + std::to_string(suspect_rank) : std::string());
    }
    if (plan) {
      int match = -1;
      for (std::size_t i = 0; i < transitions.size(); ++i)
        if (!found[i] && transitions[i].direction == c.direction() && std::llabs(transitions[i].step - c.step) <= kMatchSteps) {
          match = static_cast<int>(i);
          break;
        }
      ordered_json t;
      if (match >= 0) {
        found[match] = true;
        const auto& tr = transitions[match];
        const bool stage_hit = !truth_stage.empty() && (moved == truth_stage || suspect_stage == truth_stage);
        const bool rank_hit = std::find(plan->ranks.begin(), plan->ranks.end(), suspect_rank) != plan->ranks.end();
        t = {{"matched", true}, {"transition", tr.direction > 0 ? "onset" : "offset"}, {"transition_step", tr.step},
             {"steps_to_detect", c.detected_at - tr.step}, {"stage_hit", stage_hit}, {"rank_hit", rank_hit}};
        std::snprintf(line, sizeof line, "; truth: %s at %lld found %lld step(s) later, stage %s, rank %s",
                      tr.direction > 0 ? "onset" : "offset", static_cast<long long>(tr.step),
                      static_cast<long long>(c.detected_at - tr.step), stage_hit ? "hit" : "miss", rank_hit ? "hit" : "miss");
        text += line;
      } else {
        ++false_alarms;
        t = {{"matched", false}};
        text += "; truth: no injected transition here (false alarm)";
      }
      j["truth"] = t;
    }
    cps.push_back(std::move(j));
    rep.text += text + "\n";
  }

  rep.json["detector"] = {{"series", "exposed_step_s"},
                          {"first_step", first_scored},
                          {"observed_steps", d.observed()},
                          {"outliers_dropped", d.outliers_dropped()},
                          {"candidates_rejected", d.candidates_rejected()},
                          {"hazard", dc.hazard},
                          {"max_run_length", dc.max_run_length},
                          {"short_run", dc.short_run},
                          {"threshold", dc.threshold},
                          {"min_gap", dc.min_gap},
                          {"min_rel_change", dc.min_rel_change}};
  // The series the detector watched, for plots beside the change points: F[t,S] per step from the
  // matrix's first step (null where no rank was present), at most kSeriesSteps steps.
  {
    constexpr int kSeriesSteps = 20000;
    const int n = std::min(acc.steps, kSeriesSteps);
    ordered_json xs = ordered_json::array();
    for (int t = 0; t < n; ++t) xs.push_back(acc.scored[t] ? ordered_json(acc.exposed(t)) : ordered_json(nullptr));
    rep.json["series"] = {{"first_step", m.first_step()}, {"exposed_step_s", std::move(xs)}, {"truncated", acc.steps > n}};
  }

  const auto per = detect::periodicity(f, m.first_step(), dc);
  rep.json["periodicity"] = {{"period", per.period}, {"acf", per.acf}, {"phase_step", per.phase},
                             {"repeats", per.repeats}, {"burst_steps", per.burst}};
  if (per.period > 0) {
    std::snprintf(line, sizeof line, "# periodic: every %d steps from step %lld, %d %s (ACF %.2f)\n", per.period,
                  static_cast<long long>(per.phase), per.repeats,
                  per.burst > 1 ? ("bursts of " + std::to_string(per.burst) + " steps").c_str() : "spikes", per.acf);
    rep.text += line;
  }

  if (plan) {
    ordered_json tr = ordered_json::array();
    int detected = 0;
    for (std::size_t i = 0; i < transitions.size(); ++i) {
      tr.push_back({{"step", transitions[i].step}, {"kind", transitions[i].direction > 0 ? "onset" : "offset"},
                    {"detected", static_cast<bool>(found[i])}});
      detected += found[i] ? 1 : 0;
    }
    ordered_json td = {{"transitions", tr}, {"detected", detected}, {"missed", static_cast<int>(transitions.size()) - detected},
                       {"false_alarms", false_alarms}};
    if (plan->every > 1 && plan->scenario && plan->scenario->site != inject::Site::none) {
      td["expected_period"] = plan->every;
      td["period_hit"] = per.period == plan->every;
    }
    rep.json["truth_detection"] = td;
    std::snprintf(line, sizeof line, "# detection vs truth: %d of %zu transition(s) found, %d false alarm(s)%s\n", detected,
                  transitions.size(), false_alarms,
                  plan->every > 1 ? (per.period == plan->every ? ", period found" : ", period missed") : "");
    rep.text += line;
  }

  // Culprit stability of the group that costs time beyond its baseline (docs/detect.md).
  const int group = detect::dominant_group(m, acc);
  detect::StabilityConfig sc;
  sc.window_steps = stability_window;
  const auto st = detect::culprit_stability(m, acc, group, sc, window_bounds);
  ordered_json sj;
  sj["stage"] = st.group_name;
  sj["class"] = detect::to_string(st.stability);
  sj["culprit"] = st.culprit;
  sj["windows"] = st.windows.size();
  sj["windows_led"] = st.windows_led;
  sj["persistence"] = st.persistence;
  sj["episodes"] = st.episodes;
  sj["ongoing"] = st.ongoing;
  sj["step_fraction_in_led_windows"] = st.step_fraction_in_led;
  sj["evidence"] = st.evidence;
  auto& rl = sj["ranks"] = ordered_json::array();
  for (std::size_t i = 0; i < st.overall.size() && i < 8; ++i) {
    const auto& l = st.overall[i];
    rl.push_back({{"rank", l.rank}, {"steps_led", l.steps_led}, {"step_fraction", l.step_fraction},
                  {"credit_fraction", l.credit_fraction}});
  }
  auto& wl = sj["per_window"] = ordered_json::array();
  std::string leaders;
  for (const auto& w : st.windows) {
    ordered_json x = {{"first_step", w.first_step}, {"last_step", w.last_step}, {"culprit", w.culprit}};
    if (!w.ranks.empty())
      x["top"] = {{"rank", w.ranks.front().rank}, {"step_fraction", w.ranks.front().step_fraction},
                  {"credit_fraction", w.ranks.front().credit_fraction}};
    wl.push_back(std::move(x));
    leaders += (leaders.empty() ? "" : " ") + (w.culprit >= 0 ? std::to_string(w.culprit) : std::string("."));
  }
  rep.json["culprit_stability"] = std::move(sj);
  std::snprintf(line, sizeof line, "# culprit stability (%s, %zu windows): %s: %s\n", st.group_name.c_str(), st.windows.size(),
                std::string(detect::to_string(st.stability)).c_str(), st.evidence.c_str());
  rep.text += line;
  if (!st.overall.empty()) {
    std::string top;
    for (std::size_t i = 0; i < st.overall.size() && i < 4; ++i) {
      std::snprintf(line, sizeof line, "%s rank %d %.0f%% of steps / %.0f%% of advance", i ? "," : "", st.overall[i].rank,
                    st.overall[i].step_fraction * 100, st.overall[i].credit_fraction * 100);
      top += line;
    }
    rep.text += "#   leaders over the run:" + top + "\n";
  }
  rep.text += "#   window culprits: " + leaders + "\n";
  return rep;
}

}  // namespace sf::testbed
