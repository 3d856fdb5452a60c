// --detect's report: change points of F[t,S], the diagnosis window at each with its verdict
// against the injected truth, periodicity and culprit stability, as JSON and table lines
// (docs/detect.md). The state it is made from is the Watch's (watch.cpp).
#include "detail.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>

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

ordered_json shares_json(const std::vector<double>& shares, const std::vector<std::string>& groups) {
  ordered_json j = ordered_json::object();
  for (std::size_t g = 0; g < shares.size() && g < groups.size(); ++g) j[groups[g]] = shares[g];
  return j;
}

std::string pct(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", v * 100);
  return b;
}

ordered_json lead_json(const detect::RankLead& l) {
  return {{"rank", l.rank}, {"steps_led", l.steps_led}, {"step_fraction", l.step_fraction}, {"credit_fraction", l.credit_fraction}};
}

}  // namespace

formats::Window concat_windows(const std::vector<formats::Window>& windows, const formats::ReadLimits& limits) {
  if (windows.empty()) return {};
  const auto& a = windows.front().matrix;
  for (const auto& w : windows)
    if (!(w.matrix.schema() == a.schema()) || w.matrix.world_size() != a.world_size())
      throw std::invalid_argument("window at line " + std::to_string(w.header_line) +
                                  " has another schema or world size than the first; expected one run");
  // The run-level window holds every step from the first window's first to the last one's last,
  // gaps included: checked against the read limits before it is allocated. Unsigned differences,
  // so windows at both ends of the 64-bit step range are measured, not wrapped.
  const auto first = static_cast<std::uint64_t>(a.first_step());
  std::uint64_t span = 0, ranks = 0;  // span: steps - 1
  for (const auto& w : windows) {
    if (w.matrix.first_step() < a.first_step())
      throw std::invalid_argument("window at line " + std::to_string(w.header_line) + " starts at step " +
                                  std::to_string(w.matrix.first_step()) + ", before the first window's step " +
                                  std::to_string(a.first_step()) + "; expected windows in step order");
    if (w.matrix.steps() > 0)
      span = std::max(span, static_cast<std::uint64_t>(w.matrix.first_step()) - first +
                                static_cast<std::uint64_t>(w.matrix.steps() - 1));
  }
  // Columns of the run-level window: the world when every window is dense, else the rank ids present.
  bool dense = true;
  for (const auto& w : windows) dense = dense && !w.matrix.sparse();
  if (dense) {
    ranks = static_cast<std::uint64_t>(a.world_size());
  } else {
    std::vector<int> ids;
    for (const auto& w : windows)
      for (int c = 0; c < w.matrix.ranks(); ++c) ids.push_back(w.matrix.rank_id(c));
    std::sort(ids.begin(), ids.end());
    ranks = static_cast<std::uint64_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
  }
  const auto lo = a.first_step(), hi = static_cast<std::int64_t>(first + span);
  const std::string where = "the file's windows, read as one run, span steps " + std::to_string(lo) + ".." +
                            std::to_string(hi);
  if (span >= static_cast<std::uint64_t>(limits.max_window_steps))
    throw std::invalid_argument(where + ", more than the limit of " +
                                std::to_string(limits.max_window_steps) +
                                " steps per window; expected windows closer together (raise the limit with --max-window-steps)");
  const auto values = (static_cast<double>(span) + 1) * static_cast<double>(ranks) * static_cast<double>(a.stages());
  if (values > static_cast<double>(limits.max_values))
    throw std::invalid_argument(where + " x " + std::to_string(ranks) + " ranks x " + std::to_string(a.stages()) +
                                " stages, above the limit of " + std::to_string(limits.max_values) +
                                " values; expected windows closer together (raise the limit with --max-values)");
  return detail::concat(windows);
}

namespace detail {

Side side_of(const frontier::Evidence& e) {
  Side s;
  s.has = true;
  s.first = e.first_step;
  s.last = e.last_step;
  s.shares = e.shares;
  s.suspect_group = e.suspect.group;
  s.suspect_rank = e.suspect.rank;
  s.basis = e.suspect.basis;
  s.evidence = std::make_shared<const frontier::Evidence>(e);
  return s;
}

std::shared_ptr<const frontier::Evidence> Diagnosis::diagnosed() const {
  if (!before.has || !after.has || !before.evidence || !after.evidence) return nullptr;
  const bool slower = change.direction() > 0;
  const Side& slow = slower ? after : before;
  const Side& fast = slower ? before : after;
  auto e = std::make_shared<frontier::Evidence>(*slow.evidence);
  const std::string name = std::string(slower ? "the regime before the change" : "the regime after the recovery") +
                           " (steps " + std::to_string(fast.first) + ".." + std::to_string(fast.last) + ")";
  if (!apply_reference(*e, frontier::make_reference(*fast.evidence, name)).empty()) return nullptr;
  return e;
}

int Diagnosis::moved_group() const {
  if (!before.has || !after.has) return -1;
  int best_g = -1;
  double best = 0;
  for (std::size_t g = 0; g < after.shares.size() && g < before.shares.size(); ++g) {
    const double d = after.shares[g] - before.shares[g];
    const double moved = change.direction() > 0 ? d : -d;
    if (moved > best) best = moved, best_g = static_cast<int>(g);
  }
  return best_g;
}

ordered_json change_json(const detect::ChangePoint& c, const Diagnosis* d, const std::vector<std::string>& groups) {
  ordered_json j;
  j["step"] = c.step;
  j["detected_at"] = c.detected_at;
  j["direction"] = c.direction() > 0 ? "slower" : "faster";
  j["mean_before_s"] = c.mean_before;
  j["mean_after_s"] = c.mean_after;
  j["median_before_s"] = c.median_before;
  j["median_after_s"] = c.median_after;
  j["rel_change"] = c.rel_change;
  j["short_run_mass"] = c.short_run_mass;
  if (!d || !d->before.has || !d->after.has) return j;
  j["before"] = {{"first_step", d->before.first}, {"last_step", d->before.last}, {"shares", shares_json(d->before.shares, groups)}};
  j["after"] = {{"first_step", d->after.first}, {"last_step", d->after.last}, {"shares", shares_json(d->after.shares, groups)}};
  if (const int g = d->moved_group(); g >= 0) {
    j["moved_stage"] = groups[g];
    j["moved_share_before"] = d->before.shares[g];
    j["moved_share_after"] = d->after.shares[g];
  }
  // The suspect of the slower side: after a change, the after-window; after a recovery, before.
  const Side& slow = c.direction() > 0 ? d->after : d->before;
  j["suspect"] = {{"stage", slow.suspect_group >= 0 ? groups[slow.suspect_group] : std::string()},
                  {"rank", slow.suspect_rank},
                  {"basis", slow.basis}};
  if (const auto e = d->diagnosed()) j["diagnosis"] = formats::diagnosis_to_json(*e);
  return j;
}

std::string change_line(const detect::ChangePoint& c, const Diagnosis* d, const std::vector<std::string>& groups) {
  std::string line;
  line = frontier::strprintf("%s at step %lld (confirmed at %lld): %.4f -> %.4f s/step (%+.1f%%)",
                c.direction() > 0 ? "change" : "recovery", static_cast<long long>(c.step),
                static_cast<long long>(c.detected_at), c.median_before, c.median_after,
                (c.median_after - c.median_before) / std::max(c.median_before, 1e-12) * 100);
  std::string text = line;
  if (!d || !d->before.has || !d->after.has) return text;
  if (const int g = d->moved_group(); g >= 0)
    text += "; " + groups[g] + " " + pct(d->before.shares[g]) + " -> " + pct(d->after.shares[g]);
  const Side& slow = c.direction() > 0 ? d->after : d->before;
  text += "; suspect " + (slow.suspect_group >= 0 ? groups[slow.suspect_group] : std::string("-")) +
          (slow.suspect_rank >= 0 ? " rank " + std::to_string(slow.suspect_rank) : std::string());
  if (const auto e = d->diagnosed()) text += "; diagnosis: " + formats::diagnosis_line(*e);
  return text;
}

ordered_json stability_json(const detect::CulpritStability& st, const std::string& basis) {
  ordered_json sj;
  sj["stage"] = st.group_name.empty() ? ordered_json(nullptr) : ordered_json(st.group_name);
  sj["stage_basis"] = basis;
  sj["class"] = detect::to_string(st.stability);
  sj["culprit"] = st.culprit;
  sj["windows"] = st.windows_total;
  sj["windows_led"] = st.windows_led;
  sj["persistence"] = st.persistence;
  sj["episodes"] = st.episodes;
  sj["ongoing"] = st.ongoing;
  sj["step_fraction_in_led_windows"] = st.step_fraction_in_led;
  sj["evidence"] = st.evidence;
  auto& rl = sj["ranks"] = ordered_json::array();
  for (std::size_t i = 0; i < st.overall.size() && i < 8; ++i) rl.push_back(lead_json(st.overall[i]));
  sj["per_window_kept"] = st.windows.size();
  auto& wl = sj["per_window"] = ordered_json::array();
  for (const auto& w : st.windows) {
    ordered_json x = {{"first_step", w.first_step}, {"last_step", w.last_step}, {"culprit", w.culprit},
                      {"advanced_steps", w.advanced_steps}};
    if (!w.ranks.empty()) x["top"] = lead_json(w.ranks.front());
    auto& rs = x["ranks"] = ordered_json::array();
    for (const auto& l : w.ranks) rs.push_back(lead_json(l));
    wl.push_back(std::move(x));
  }
  return sj;
}

namespace {

/// The injected transitions and which of them a change point found (filled as the change points
/// are listed); judged over every step seen, not only the series kept.
struct TruthMatch {
  std::vector<Transition> transitions;
  std::vector<bool> found;
  std::string stage;  ///< the injected stage ("" when none)
  int false_alarms = 0;
};

/// The regime before the first slowdown: the reference of a window's diagnosis when the caller
/// has none (score --detect).
std::optional<frontier::Reference> pre_change_reference(const std::vector<Diagnosis>& diagnoses) {
  for (const auto& dg : diagnoses)
    if (dg.change.direction() > 0 && dg.before.has && dg.before.evidence)
      return frontier::make_reference(
          *dg.before.evidence, "the regime before the change at step " + std::to_string(dg.change.step) + " (steps " +
                                   std::to_string(dg.before.first) + ".." + std::to_string(dg.before.last) + ")");
  return std::nullopt;
}

void detector_header(DetectReport& rep, const detect::Detector& d, const detect::DetectConfig& dc) {
  rep.text += frontier::strprintf(
      "# change points (BOCPD on F[t,S]: short-run mass >= %.2f within %d steps; FALCON verification on "
      "medians: gap >= %d steps, change > %s, held for %d steps): %lld\n",
      dc.threshold, dc.short_run, dc.min_gap, pct(dc.min_rel_change).c_str(), dc.min_gap,
      static_cast<long long>(d.changes_total()));
  rep.text += frontier::strprintf(
      "#   observed %lld steps, %lld isolated outlier(s) dropped, %lld candidate(s) rejected, %lld transient(s)%s\n",
      static_cast<long long>(d.observed()), static_cast<long long>(d.outliers_dropped()),
      static_cast<long long>(d.candidates_rejected()), static_cast<long long>(d.transients_total()),
      d.changes_total() > static_cast<std::int64_t>(rep.changes.size())
          ? ("; the last " + std::to_string(rep.changes.size()) + " changes kept").c_str()
          : "");
}

/// A change point against the injected truth: the first unfound transition of its direction
/// within kMatchSteps, judged on the stage that moved (or the suspect's) and the suspect's rank.
void judge_change(const detect::ChangePoint& c, const inject::FaultPlan& plan, TruthMatch& truth, ordered_json& j,
                  std::string& text) {
  int match = -1;
  for (std::size_t i = 0; i < truth.transitions.size(); ++i)
    if (!truth.found[i] && truth.transitions[i].direction == c.direction() &&
        std::llabs(truth.transitions[i].step - c.step) <= kMatchSteps) {
      match = static_cast<int>(i);
      break;
    }
  if (match < 0) {
    ++truth.false_alarms;
    j["truth"] = {{"matched", false}};
    text += "; truth: no injected transition here (false alarm)";
    return;
  }
  truth.found[match] = true;
  const auto& tr = truth.transitions[match];
  const std::string moved = j.value("moved_stage", std::string());
  const std::string suspect_stage = j.contains("suspect") ? j["suspect"]["stage"].get<std::string>() : "";
  const int suspect_rank = j.contains("suspect") ? j["suspect"]["rank"].get<int>() : -1;
  const bool stage_hit = !truth.stage.empty() && (moved == truth.stage || suspect_stage == truth.stage);
  const bool rank_hit = std::find(plan.ranks.begin(), plan.ranks.end(), suspect_rank) != plan.ranks.end();
  j["truth"] = {{"matched", true}, {"transition", tr.direction > 0 ? "onset" : "offset"}, {"transition_step", tr.step},
                {"steps_to_detect", c.detected_at - tr.step}, {"stage_hit", stage_hit}, {"rank_hit", rank_hit}};
  text += frontier::strprintf("; truth: %s at %lld found %lld step(s) later, stage %s, rank %s",
                              tr.direction > 0 ? "onset" : "offset", static_cast<long long>(tr.step),
                              static_cast<long long>(c.detected_at - tr.step), stage_hit ? "hit" : "miss",
                              rank_hit ? "hit" : "miss");
}

void change_points(DetectReport& rep, const ReportInput& in, TruthMatch& truth) {
  auto& cps = rep.json["change_points"] = ordered_json::array();
  for (const auto& c : rep.changes) {
    const auto it = std::find_if(in.diagnoses.begin(), in.diagnoses.end(), [&](const auto& x) { return x.change.step == c.step; });
    const Diagnosis* dg = it != in.diagnoses.end() ? &*it : nullptr;
    ordered_json j = change_json(c, dg, in.groups);
    std::string text = "#   " + change_line(c, dg, in.groups);
    if (in.plan) judge_change(c, *in.plan, truth, j, text);
    cps.push_back(std::move(j));
    rep.text += text + "\n";
  }
}

/// Excursions past the threshold that did not hold for min_gap steps: counted and listed (the
/// last max_transients_kept), not change points.
void transients(DetectReport& rep, const detect::Detector& d, const detect::DetectConfig& dc) {
  const auto trs = d.transients();
  auto& tj = rep.json["transients"] = ordered_json::array();
  std::string listed;
  for (std::size_t i = 0; i < trs.size(); ++i) {
    const auto& t = trs[i];
    tj.push_back({{"step", t.step},
                  {"judged_at", t.judged_at},
                  {"steps", t.steps},
                  {"direction", t.direction() > 0 ? "slower" : "faster"},
                  {"median_before_s", t.median_before},
                  {"median_during_s", t.median_during},
                  {"rel_change", t.rel_change}});
    if (i + 5 >= trs.size())
      listed += frontier::strprintf("%s step %lld (%d step%s, %+.1f%%)", listed.empty() ? "" : ",",
                                    static_cast<long long>(t.step), t.steps, t.steps == 1 ? "" : "s",
                                    (t.median_during - t.median_before) / std::max(t.median_before, 1e-12) * 100);
  }
  if (d.transients_total() > 0)
    rep.text += frontier::strprintf("#   transients (past %s but not held for %d steps; not change points), the last:%s\n",
                                    pct(dc.min_rel_change).c_str(), dc.min_gap, listed.c_str());
}

ordered_json detector_json(const detect::Detector& d, const detect::DetectConfig& dc, std::int64_t first_seen,
                           std::size_t kept) {
  return {{"series", "exposed_step_s"},
          {"first_step", first_seen},
          {"observed_steps", d.observed()},
          {"outliers_dropped", d.outliers_dropped()},
          {"candidates_rejected", d.candidates_rejected()},
          {"changes_total", d.changes_total()},
          {"changes_dropped", d.changes_total() - static_cast<std::int64_t>(kept)},
          {"transients", d.transients_total()},
          {"hazard", dc.hazard},
          {"max_run_length", dc.max_run_length},
          {"short_run", dc.short_run},
          {"threshold", dc.threshold},
          {"min_gap", dc.min_gap},
          {"min_rel_change", dc.min_rel_change},
          {"max_changes_kept", dc.max_changes_kept}};
}

/// --detect-stages: one detector per stage group's advance a[t,g]. Time moved from one stage to
/// another leaves F[t,S] as it was, so F's detector cannot see it; these name the stages.
void stage_change_points(DetectReport& rep, const ReportInput& in, const TruthMatch& truth) {
  const auto& groups = in.groups;
  const auto& dc = in.dc;
  struct Item {
    int group;
    detect::ChangePoint c;
  };
  std::vector<Item> items;
  std::int64_t total = 0, transients = 0;
  ordered_json per = ordered_json::array();
  for (std::size_t g = 0; g < in.stage_detectors.size() && g < groups.size(); ++g) {
    const auto& sd = *in.stage_detectors[g];
    for (const auto& c : sd.changes()) items.push_back({static_cast<int>(g), c});
    total += sd.changes_total();
    transients += sd.transients_total();
    per.push_back({{"stage", groups[g]},
                   {"changes_total", sd.changes_total()},
                   {"transients", sd.transients_total()},
                   {"outliers_dropped", sd.outliers_dropped()},
                   {"candidates_rejected", sd.candidates_rejected()}});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.c.step < b.c.step; });
  rep.text += frontier::strprintf(
      "# stage change points (one detector per stage group on its advance a[t,g], same rule; change > %s of "
      "max(m_l, m_r, %s of F's level)): %lld\n",
      pct(dc.min_rel_change).c_str(), pct(dc.stage_floor).c_str(), static_cast<long long>(total));
  auto& scp = rep.json["stage_change_points"] = ordered_json::array();
  for (const auto& [g, c] : items) {
    ordered_json j;
    j["stage"] = groups[g];
    const ordered_json cj = change_json(c, nullptr, groups);
    for (const auto& [k, v] : cj.items()) j[k] = v;
    if (in.plan) {
      // The injected stage, near an injected transition of the same direction.
      bool matched = false;
      for (const auto& tr : truth.transitions)
        matched = matched ||
                  (groups[g] == truth.stage && tr.direction == c.direction() && std::llabs(tr.step - c.step) <= kMatchSteps);
      j["truth"] = {{"matched", matched}};
    }
    scp.push_back(std::move(j));
    rep.text += frontier::strprintf("#   %s: %s from step %lld (confirmed at %lld): %.4f -> %.4f s/step (%+.1f%%)\n",
                                    groups[g].c_str(), c.direction() > 0 ? "slower" : "faster",
                                    static_cast<long long>(c.step), static_cast<long long>(c.detected_at),
                                    c.median_before, c.median_after,
                                    (c.median_after - c.median_before) / std::max(c.median_before, 1e-12) * 100);
  }
  rep.json["stage_detector"] = {{"series", "advance_s per stage group"},
                                {"stages", in.stage_detectors.size()},
                                {"floor_fraction_of_f", dc.stage_floor},
                                {"changes_total", total},
                                {"changes_dropped", total - static_cast<std::int64_t>(items.size())},
                                {"transients", transients},
                                {"per_stage", std::move(per)}};
}

/// The series the detector watched, for plots beside the change points: F[t,S] per step (null
/// where no rank was present), the last Watch::kSeriesSteps steps.
ordered_json series_json(const ReportInput& in, std::int64_t first) {
  ordered_json xs = ordered_json::array();
  for (double v : in.f) xs.push_back(std::isnan(v) ? ordered_json(nullptr) : ordered_json(v));
  return {{"first_step", first}, {"exposed_step_s", std::move(xs)},
          {"truncated", in.steps_seen > static_cast<std::int64_t>(in.f.size())}};
}

void periodicity(DetectReport& rep, const detect::Periodicity& per) {
  rep.json["periodicity"] = {{"period", per.period}, {"acf", per.acf}, {"phase_step", per.phase},
                             {"repeats", per.repeats}, {"burst_steps", per.burst}};
  if (per.period > 0)
    rep.text += frontier::strprintf("# periodic: every %d steps from step %lld, %d %s (ACF %.2f)\n", per.period,
                                    static_cast<long long>(per.phase), per.repeats,
                                    per.burst > 1 ? ("bursts of " + std::to_string(per.burst) + " steps").c_str() : "spikes",
                                    per.acf);
}

void truth_detection(DetectReport& rep, const inject::FaultPlan& plan, const TruthMatch& truth,
                     const detect::Periodicity& per) {
  ordered_json tr = ordered_json::array();
  int detected = 0;
  for (std::size_t i = 0; i < truth.transitions.size(); ++i) {
    tr.push_back({{"step", truth.transitions[i].step}, {"kind", truth.transitions[i].direction > 0 ? "onset" : "offset"},
                  {"detected", static_cast<bool>(truth.found[i])}});
    detected += truth.found[i] ? 1 : 0;
  }
  ordered_json td = {{"transitions", tr}, {"detected", detected},
                     {"missed", static_cast<int>(truth.transitions.size()) - detected},
                     {"false_alarms", truth.false_alarms}};
  if (plan.every > 1 && plan.scenario && plan.scenario->site != inject::Site::none) {
    td["expected_period"] = plan.every;
    td["period_hit"] = per.period == plan.every;
  }
  rep.json["truth_detection"] = td;
  rep.text += frontier::strprintf("# detection vs truth: %d of %zu transition(s) found, %d false alarm(s)%s\n", detected,
                                  truth.transitions.size(), truth.false_alarms,
                                  plan.every > 1 ? (per.period == plan.every ? ", period found" : ", period missed") : "");
}

/// The group whose advance rises most at the periodic spikes over its advance at the other
/// steps; −1 when none rises.
int spike_group(const ReportInput& in, const detect::Periodicity& per, std::int64_t first) {
  const auto G = static_cast<int>(in.groups.size());
  std::vector<double> at(static_cast<std::size_t>(G), 0.0), off(static_cast<std::size_t>(G), 0.0);
  int n_at = 0, n_off = 0;
  std::size_t k = 0;
  for (std::size_t i = 0; i < in.f.size(); ++i) {
    if (std::isnan(in.f[i])) continue;
    const std::int64_t step = first + static_cast<std::int64_t>(i);
    while (k < per.spike_steps.size() && per.spike_steps[k] < step) ++k;
    const bool spike = k < per.spike_steps.size() && per.spike_steps[k] == step;
    auto& acc = spike ? at : off;
    (spike ? n_at : n_off) += 1;
    for (int g = 0; g < G; ++g) acc[g] += in.advance[i * static_cast<std::size_t>(G) + static_cast<std::size_t>(g)];
  }
  int group = -1;
  double best = 0;
  for (int g = 0; g < G && n_at > 0; ++g) {
    const double rise = at[g] / n_at - (n_off ? off[g] / n_off : 0.0);
    if (rise > best) best = rise, group = g;
  }
  return group;
}

/// Culprit stability follows the stage that moved (docs/detect.md): the one named, else the
/// stage of the periodic spikes, else the stage that moved at the largest slowdown, else the
/// group with the most credit to one rank. Returns the group and the basis said for it.
std::pair<int, std::string> stability_group(const ReportInput& in, const detect::Periodicity& per, std::int64_t first) {
  const auto& groups = in.groups;
  if (!in.stability_stage.empty()) {
    if (auto why = frontier::group_problem_in(groups, in.stability_stage, "--stability-stage " + in.stability_stage + ": ", "here");
        !why.empty())
      throw std::invalid_argument(why);
    const auto it = std::find(groups.begin(), groups.end(), in.stability_stage);
    return {static_cast<int>(it - groups.begin()), "--stability-stage"};
  }
  if (per.period > 0 && !groups.empty())
    if (const int g = spike_group(in, per, first); g >= 0) return {g, "the stage of the periodic spikes"};
  if (const Diagnosis* big = largest_slowdown(in.diagnoses))
    if (const int g = big->moved_group(); g >= 0)
      return {g, "the stage that moved at the change at step " + std::to_string(big->change.step)};
  return {in.tracker->dominant_group(), "the group with the most credit to one rank"};
}

void culprit_stability(DetectReport& rep, const ReportInput& in, int group, const std::string& basis) {
  const auto st = in.tracker->result(group);
  std::string leaders;
  for (const auto& w : st.windows)
    leaders += (leaders.empty() ? "" : " ") + (w.culprit >= 0 ? std::to_string(w.culprit) : std::string("."));
  rep.json["culprit_stability"] = stability_json(st, basis);
  rep.text += frontier::strprintf("# culprit stability (%s, %d windows; followed: %s): %s: %s\n",
                                  st.group_name.empty() ? "no stage" : st.group_name.c_str(), st.windows_total,
                                  basis.c_str(), std::string(detect::to_string(st.stability)).c_str(),
                                  st.evidence.c_str());
  if (!st.overall.empty()) {
    std::string top;
    for (std::size_t i = 0; i < st.overall.size() && i < 4; ++i)
      top += frontier::strprintf("%s rank %d %.0f%% of steps / %.0f%% of advance", i ? "," : "", st.overall[i].rank,
                                 st.overall[i].step_fraction * 100, st.overall[i].credit_fraction * 100);
    rep.text += "#   leaders over the run:" + top + "\n";
  }
  rep.text += "#   window culprits" +
              (st.windows_total > static_cast<int>(st.windows.size()) ? " (the last " + std::to_string(st.windows.size()) + ")"
                                                                       : std::string()) +
              ": " + leaders + "\n";
}

}  // namespace

DetectReport build_report(const ReportInput& in) {
  DetectReport rep;
  const auto& d = *in.detector;
  rep.changes = d.changes();
  if (auto ref = pre_change_reference(in.diagnoses)) rep.pre_change = std::move(*ref);
  // An empty series has no last step: first - 1 would overflow at the lowest step id, so last = first.
  const std::int64_t first = in.series_first,
                     last = in.series_first + (in.f.empty() ? 0 : static_cast<std::int64_t>(in.f.size()) - 1);
  TruthMatch truth;
  truth.transitions = truth_transitions(in.plan, in.first_seen, last);
  truth.found.assign(truth.transitions.size(), false);
  truth.stage = in.plan && in.plan->scenario ? in.plan->scenario->stage : "";

  detector_header(rep, d, in.dc);
  change_points(rep, in, truth);
  transients(rep, d, in.dc);
  rep.json["detector"] = detector_json(d, in.dc, in.first_seen, rep.changes.size());
  if (!in.stage_detectors.empty()) stage_change_points(rep, in, truth);
  rep.json["series"] = series_json(in, first);
  const auto per = detect::periodicity(in.f, first, in.dc);
  periodicity(rep, per);
  if (in.plan) truth_detection(rep, *in.plan, truth, per);
  const auto [group, basis] = stability_group(in, per, first);
  culprit_stability(rep, in, group, basis);
  return rep;
}

}  // namespace detail
}  // namespace sf::testbed
