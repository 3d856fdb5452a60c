// Verdicts: a scored window against the injected truth and the scenario's claim (`run --check`,
// `sim --check`), and the truth records as result files carry them.
#include "sf/testbed/testbed.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

namespace sf::testbed {

using nlohmann::ordered_json;

namespace {

ordered_json rule_json(const verify::RuleVerdict& v) {
  return {{"top1", v.top1},
          {"top1_tie", v.top1_tie},
          {"top2", v.top2},
          {"candidate_hit", v.candidate_hit},
          {"candidate_size", v.candidate_size}};
}

ordered_json diagnosis_json(const verify::DiagnosisVerdict& d) {
  return {{"outcome", verify::to_string(d.outcome)}, {"correct", d.correct()}, {"stage_hit", d.stage_hit},
          {"rank_hit", d.rank_hit},                  {"fault", d.fault},       {"exposed", d.exposed},
          {"culprits_named", d.culprits_named},      {"culprits_true", d.culprits_true},
          {"precision", d.precision},                {"recall", d.recall}};
}

/// The shuffled-target null (issue 27): the truth's stage replaced by another reporting group and
/// its ranks by as many other ranks, drawn from `seed`, everything else kept. The same evidence
/// judged against it scores what an answer unrelated to the fault would score.
verify::Expected shuffled_expected(const verify::Expected& x, const frontier::Evidence& e, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 0x27);
  verify::Expected s = x;
  std::vector<std::string> stages;
  for (const auto& g : e.schema.groups())
    if (g != x.stage) stages.push_back(g);
  // A straggler's truth has no stage: only its ranks are shuffled.
  if (!stages.empty() && !x.any_stage) s.stage = stages[std::uniform_int_distribution<std::size_t>(0, stages.size() - 1)(rng)];
  std::vector<int> others;
  // Ranks 0..R-1 of the window (R: the ranks that recorded anything; a truth rank past them counts).
  int world = e.observed_ranks;
  for (int r : x.ranks) world = std::max(world, r + 1);
  for (int r = 0; r < world; ++r)
    if (std::find(x.ranks.begin(), x.ranks.end(), r) == x.ranks.end()) others.push_back(r);
  if (!others.empty()) {
    std::shuffle(others.begin(), others.end(), rng);
    others.resize(std::min(others.size(), std::max<std::size_t>(x.ranks.size(), 1)));
    std::sort(others.begin(), others.end());
    s.ranks = others;
  }
  return s;
}

/// Fraction of the window's steps in which the plan is active on its first target.
double active_fraction(const inject::FaultPlan& plan, const frontier::Evidence& e) {
  if (plan.ranks.empty() || e.last_step < e.first_step) return 0.0;
  std::int64_t on = 0;
  for (std::int64_t t = e.first_step; t <= e.last_step; ++t) on += plan.active(plan.ranks.front(), t) ? 1 : 0;
  return static_cast<double>(on) / static_cast<double>(e.last_step - e.first_step + 1);
}

/// The claim a run is checked against (--check), per scenario family.
struct Claim {
  bool pass = false;
  std::string criterion;
};

/// What --check asserts is the diagnosis (docs/diagnosis.md): it names the injected stage on an
/// injected rank, or nothing where no fault (or none that reached the step) was there. The
/// paper's absolute verdict is reported beside it under its own name.
Claim check_claim(const inject::Scenario& sc, const frontier::Evidence& e, const verify::Verdict& v) {
  Claim c;
  bool ok = true;
  const auto& d = v.diagnosis;
  if (!d.fault) {
    // A culprit named where nothing was injected is an unexplained one (a straggler the testbed
    // did not make, or a false alarm): either way this run is not the clean run it claims to be.
    c.criterion = "no culprit where nothing was injected (a common slowdown of every rank is allowed) and no strong label";
    ok = d.correct();
    for (auto l : e.labels) ok &= !frontier::is_strong(l);
  } else if (sc.site == inject::Site::link) {
    // The host is named by the P2P pass the run makes while the fault is on (run.cpp): a
    // bandwidth fault delays every rank of the ring alike, so no rank stands out in stage time.
    c.criterion = "the diagnosis names " + sc.stage;
    ok = d.stage_hit;
  } else if (!sc.surfaces_without_events.empty() && e.events.sampled == 0) {
    // Device work queued in forward is host-visible only where the host waits for the device:
    // without the event channel no host clock sees it in forward (the paper: top-2 only).
    c.criterion = "the diagnosis names " + sc.stage + " or, with no event channel to see it there, " +
                  sc.surfaces_without_events + " (where the host waits for the device) on the injected rank";
    ok = d.correct();
  } else {
    c.criterion = "the diagnosis names " + sc.stage + " on the injected rank (nothing, if the fault never reached the step)";
    ok = d.correct();
  }
  // No makespan term: Σ_t F[t,S] equals the slowest-rank wall sum by construction (the residual
  // closes every record to its wall), so "within 2%" could never fail; the gap is reported as a
  // consistency check of the accounting, not claimed (issue 10).
  c.pass = ok;
  return c;
}


}  // namespace

ordered_json truth_json(const std::vector<inject::TruthRecord>& truth) {
  ordered_json a = ordered_json::array();
  for (const auto& t : truth) {
    a.push_back({{"scenario", t.scenario},
                 {"rank", t.rank},
                 {"stage", t.stage},
                 {"site", t.site},
                 {"kind", t.kind},
                 {"delay_ms", t.delay_ms},
                 {"onset", t.onset},
                 {"offset", t.offset == inject::kForever ? ordered_json(nullptr) : ordered_json(t.offset)},
                 {"every", t.every},
                 {"sync_bearing", t.sync_bearing},
                 {"should_route", t.should_route}});
    if (!t.host.empty()) {
      a.back()["host"] = t.host;
      a.back()["rate_mbit"] = t.rate_mbit;
    }
  }
  return a;
}

std::string apply_reference(frontier::Evidence& e, const frontier::Reference& ref) {
  if (auto why = frontier::reference_problem(e, ref); !why.empty()) return why;
  frontier::diagnose_against(e, ref);
  return "";
}

std::vector<double> reference_advance(const frontier::Evidence& e) {
  // The differential holds the window's change; the window's own advance minus it is the
  // reference's, per step, exactly as compare() formed it.
  std::vector<double> out = advance_per_step(e);
  for (std::size_t g = 0; g < out.size() && g < e.differential->delta_advance_s.size(); ++g)
    out[g] -= e.differential->delta_advance_s[g];
  return out;
}

std::vector<double> advance_per_step(const frontier::Evidence& e) {
  std::vector<double> out(e.advances_s.size(), 0.0);
  if (e.steps > 0)
    for (std::size_t g = 0; g < out.size(); ++g) out[g] = e.advances_s[g] / e.steps;
  return out;
}

namespace {

/// What the verdict expects of the evidence: the plan's truth, the share of the window it was
/// active, and the reference's advance per step the change is measured against.
verify::Expected expected_of(const inject::FaultPlan& plan, const frontier::Evidence& e, const frontier::Evidence* reference) {
  const auto& scenario = *plan.scenario;
  const bool straggler = plan.straggler != inject::StragglerKind::none;
  verify::Expected x;
  x.stage = scenario.stage;
  x.ranks = plan.ranks;
  x.should_route = scenario.should_route;
  x.delay_s = straggler ? 0.0 : plan.delay_ms * 1e-3;
  x.rate_fault = scenario.site == inject::Site::link || straggler;
  x.shared = scenario.site == inject::Site::link;
  x.any_stage = straggler;
  x.active_fraction = active_fraction(plan, e);
  x.eta_a = e.config.eta_a;
  x.world = e.world_size;
  if (e.events.sampled == 0) x.also_stage = scenario.surfaces_without_events;
  if (reference && reference->schema == e.schema && reference->steps > 0) x.reference_advance_s = advance_per_step(*reference);
  else if (e.differential && e.steps > 0) x.reference_advance_s = reference_advance(e);
  return x;
}

std::string truth_line(const inject::FaultPlan& plan, const std::vector<inject::TruthRecord>& truth) {
  const bool straggler = plan.straggler != inject::StragglerKind::none;
  std::string text = "# truth: ";
  if (truth.empty()) text += "no fault";
  for (const auto& r : truth) {
    if (straggler)
      text += frontier::strprintf("rank %d straggler %s, strength %g (%s), from step %lld, any stage; ", r.rank, r.kind.c_str(),
                                  r.strength, std::string(inject::straggler_strength_meaning(plan.straggler)).c_str(),
                                  static_cast<long long>(r.onset));
    else if (!r.host.empty())
      text += frontier::strprintf("rank %d (host %s) %s %s %.0f Mbit/s; ", r.rank, r.host.c_str(), r.stage.c_str(),
                                  r.kind.c_str(), r.rate_mbit);
    else
      text += frontier::strprintf("rank %d %s %s %.0f ms%s%s; ", r.rank, r.stage.c_str(), r.kind.c_str(), r.delay_ms,
                                  r.sync_bearing ? " sync-bearing" : "", r.should_route ? "" : " (must stay unrouted)");
  }
  return text + "\n";
}

/// "# diagnosis verdict: ...": what the diagnosis named against what was injected.
std::string diagnosis_verdict_line(const inject::FaultPlan& plan, const frontier::Evidence& e, const verify::Verdict& v,
                                   bool no_truth) {
  const bool straggler = plan.straggler != inject::StragglerKind::none;
  const auto& d = e.diagnosis;
  std::string named = !d.significant() ? std::string("nothing")
                      : d.common       ? "a common slowdown of every rank in " + e.group_name(d.group)
                      : (d.rank >= 0 ? "rank " + std::to_string(d.rank) + " " : std::string("no rank, ")) + e.group_name(d.group);
  if (d.culprits.size() > 1) {
    std::string all;
    for (const auto& c : d.culprits) all += (all.empty() ? "" : ",") + std::to_string(c.rank);
    named += " (culprits: rank " + all + ")";
  }
  std::string truth_ranks;
  for (int r : plan.ranks) truth_ranks += (truth_ranks.empty() ? "" : ",") + std::to_string(r);
  using O = verify::DiagnosisOutcome;
  const auto o = v.diagnosis.outcome;
  const bool never = o == O::not_exposed || o == O::false_alarm;
  return "# diagnosis verdict: " + std::string(verify::to_string(o)) + " (" + (v.diagnosis.correct() ? "right" : "wrong") +
         "): named " + named + "; truth " +
         (no_truth || !v.diagnosis.fault
              ? std::string("no fault")
              : "rank " + truth_ranks + " " + (straggler ? "(a straggler, any stage)" : plan.scenario->stage) +
                    (never ? ", which never reached the step" : "")) +
         (o == O::unexplained ? " (an unexplained culprit: a straggler the testbed did not inject, or a false alarm)" : "") +
         (plan.ranks.size() > 1 && v.diagnosis.fault
              ? frontier::strprintf("; culprits %d of %d named right, %d of %zu injected ranks found", v.diagnosis.culprits_true,
                                    v.diagnosis.culprits_named, v.diagnosis.culprits_true, plan.ranks.size())
              : std::string()) +
         "\n";
}

const char* yn(bool flag) { return flag ? "yes" : "no"; }

/// The paper's verdict (where the time goes), how much of the delay reached the step and which
/// stage took it, and the baselines: for an injected stage fault.
std::string paper_lines(const inject::FaultPlan& plan, const frontier::Evidence& e, const verify::Verdict& v,
                        const verify::Expected& x) {
  const auto& scenario = *plan.scenario;
  // The rank judged is the one the evidence names for the injected stage (its stage suspect).
  int judged = e.suspect.rank;
  std::string judged_basis = e.suspect.basis;
  const auto gi = e.schema.group_index(scenario.stage);
  for (const auto& s : e.stage_suspects)
    if (gi && s.group == *gi) {
      judged = s.rank;
      judged_basis = s.basis;
    }
  std::string t = frontier::strprintf(
      "# paper verdict (where the time goes): %s  top-1 %s  tie %s  top-2 %s  candidate hit %s (size %d)  rank hit %s (%s's suspect %d, %s)\n",
      std::string(verify::to_string(v.outcome)).c_str(), yn(v.frontier.top1), yn(v.frontier.top1_tie), yn(v.frontier.top2),
      yn(v.frontier.candidate_hit), v.frontier.candidate_size, yn(v.rank_hit), scenario.stage.c_str(), judged,
      judged_basis.c_str());
  const std::string absorbed = v.absorbed_group >= 0 ? e.group_name(v.absorbed_group) : std::string("-");
  // Per faulty step and over the window: an A/B/A run's 120 ms in a third of its steps is
  // 40 ms/step over the window, and saying only the latter reads as a 40 ms fault.
  const std::int64_t span = e.last_step >= e.first_step ? e.last_step - e.first_step + 1 : 0;
  const auto faulty_steps = static_cast<std::int64_t>(std::llround(x.active_fraction * static_cast<double>(span)));
  const std::string injected =
      faulty_steps == span ? frontier::strprintf("%.1f ms injected in every step", plan.delay_ms)
                           : frontier::strprintf("%.1f ms injected in %lld of %lld steps (%.1f ms/step over the window)",
                                                 plan.delay_ms, static_cast<long long>(faulty_steps),
                                                 static_cast<long long>(span), plan.delay_ms * x.active_fraction);
  // Whether the delay reached the step is said once, by the rule the verdict uses: the exposed
  // step's change against its floor (or the injected change named past its own).
  const std::string reached =
      e.differential ? frontier::strprintf("the exposed step %+.1f ms/step (floor %.1f): %s", e.differential->delta_exposed_s * 1e3,
                                           e.differential->exposed_noise_floor_s * 1e3,
                                           v.diagnosis.exposed ? "reached the step" : "did not reach the step")
                     : std::string();
  if (v.absorbed_basis == "reference")
    t += frontier::strprintf(
        "# delay: %s; %s; of the stages that grew (%.1f ms/step over the window%s), %s took %.0f%%%s\n", injected.c_str(),
        reached.empty() ? "against the reference" : reached.c_str(), v.exposed_s * 1e3,
        faulty_steps > 0 && faulty_steps < span
            ? frontier::strprintf(", %.1f ms per faulty step", v.exposed_s * 1e3 / x.active_fraction).c_str()
            : "",
        absorbed.c_str(), v.absorbed_share * 100, v.misroute ? " — a confident misroute (paper verdict)" : "");
  else
    t += frontier::strprintf("# delay: no reference; top stage %s (share %.3f)\n", absorbed.c_str(), v.absorbed_share);
  t += "# baselines top-1/top-2:";
  for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i)
    t += " " + std::string(frontier::to_string(frontier::kBaselineRules[i])) + " " + yn(v.baselines[i].top1) + "/" +
         yn(v.baselines[i].top2);
  return t + "\n";
}

/// The what-if checked against the truth the testbed has: the step without the fault, measured.
/// Appends its line to `t`; its JSON (null when there is nothing to check).
ordered_json whatif_check(const frontier::Evidence& e, bool has_truth, std::string& t) {
  if (!has_truth || !e.whatif.available || !e.differential || e.differential->reference_step_s <= 0) return nullptr;
  const double measured = e.differential->reference_step_s;
  const double predicted = e.whatif.all_healed_s;
  const double err = (predicted - measured) / measured;
  t += frontier::strprintf("# what-if check: fixing %s predicts %.1f ms/step; %s measured %.1f ms/step without the fault: "
                           "error %+.1f %%\n",
                           e.whatif.fixes.empty() ? "nothing" : e.whatif.fixes.size() > 1 ? "every culprit" : "the culprit",
                           predicted * 1e3, e.differential->reference.c_str(), measured * 1e3, err * 100);
  return {{"predicted_s", predicted}, {"measured_s", measured}, {"measured_by", e.differential->reference},
          {"rel_error", err}, {"actual_s", e.whatif.actual_s}};
}

ordered_json verdict_json(const inject::FaultPlan& plan, const frontier::Evidence& e, const verify::Verdict& v,
                          const verify::Expected& x, const Claim& claim, double makespan_gap, ordered_json whatif,
                          std::uint64_t shuffle_seed) {
  const auto& scenario = *plan.scenario;
  const bool straggler = plan.straggler != inject::StragglerKind::none;
  ordered_json j;
  j["expected"] = {{"stage", straggler ? ordered_json(nullptr) : ordered_json(scenario.stage)},
                   {"ranks", plan.ranks},
                   {"should_route", scenario.should_route}};
  if (straggler)
    j["expected"]["straggler"] = {{"kind", inject::to_string(plan.straggler)}, {"strength", plan.strength}};
  j["diagnosis"] = diagnosis_json(v.diagnosis);
  j["outcome"] = verify::to_string(v.outcome);
  j["frontier"] = rule_json(v.frontier);
  j["rank_hit"] = v.rank_hit;
  j["misroute"] = v.misroute;
  j["makespan_vs_slowest_wall_rel"] = makespan_gap;  // an accounting identity, reported, not claimed
  j["absorbed"] = {{"stage", v.absorbed_group >= 0 ? ordered_json(e.group_name(v.absorbed_group)) : ordered_json(nullptr)},
                   {"share", v.absorbed_share},
                   {"basis", v.absorbed_basis},
                   {"exposed_ms_per_step", v.exposed_s >= 0 ? ordered_json(v.exposed_s * 1e3) : ordered_json(nullptr)},
                   {"injected_ms_per_step", plan.delay_ms * x.active_fraction}};
  if (!x.reference_advance_s.empty()) {
    auto& ref = j["reference_ms_per_step"] = ordered_json::object();
    for (std::size_t g = 0; g < x.reference_advance_s.size(); ++g) ref[e.group_name(static_cast<int>(g))] = x.reference_advance_s[g] * 1e3;
  }
  j["suspect"] = {{"rank", e.suspect.rank}, {"basis", e.suspect.basis}};
  auto& bls = j["baselines"] = ordered_json::object();
  for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i)
    bls[std::string(frontier::to_string(frontier::kBaselineRules[i]))] = rule_json(v.baselines[i]);
  j["check"] = {{"criterion", claim.criterion}, {"pass", claim.pass}};
  j["whatif"] = std::move(whatif);
  if (!scenario.stage.empty() || straggler) {
    const verify::Expected sx = shuffled_expected(x, e, shuffle_seed);
    const verify::Verdict sv = verify::score(e, sx);
    j["shuffled"] = {{"expected", {{"stage", sx.stage}, {"ranks", sx.ranks}}},
                     {"seed", shuffle_seed},
                     {"diagnosis", diagnosis_json(sv.diagnosis)},
                     {"outcome", verify::to_string(sv.outcome)},
                     {"frontier", rule_json(sv.frontier)},
                     {"rank_hit", sv.rank_hit},
                     {"misroute", sv.misroute}};
  }
  return j;
}

}  // namespace

VerdictReport verdict_report(const inject::FaultPlan& plan, const frontier::Evidence& e, double makespan_gap,
                             const frontier::Evidence* reference, std::uint64_t shuffle_seed) {
  const auto truth = inject::truth(plan);
  VerdictReport out;
  const bool straggler = plan.straggler != inject::StragglerKind::none;
  const verify::Expected x = expected_of(plan, e, reference);
  out.verdict = verify::score(e, x);
  const auto& v = out.verdict;
  const Claim claim = straggler ? Claim{v.diagnosis.correct(), "the diagnosis names the straggling rank (in whatever stage its "
                                                                "loss surfaced; nothing, if it never reached the step)"}
                                : check_claim(*plan.scenario, e, v);
  out.claim_pass = claim.pass;
  out.claim = claim.criterion;
  out.truth_text = truth_line(plan, truth);
  std::string& t = out.verdict_text;
  t += diagnosis_verdict_line(plan, e, v, truth.empty());
  if (straggler) {
    t += "# paper verdict (where the time goes): not applicable (a straggler has no stage of its own)\n";
    if (e.differential)
      t += frontier::strprintf("# slowdown: the exposed step %+.1f ms/step against the reference (floor %.1f): %s\n",
                               e.differential->delta_exposed_s * 1e3, e.differential->exposed_noise_floor_s * 1e3,
                               v.diagnosis.exposed ? "reached the step" : "did not reach the step");
  } else if (!truth.empty()) {
    t += paper_lines(plan, e, v, x);
  }
  ordered_json whatif = whatif_check(e, !truth.empty(), t);
  t += "# check: " + claim.criterion + ": " + (claim.pass ? "PASS" : "FAIL") + "\n";
  std::istringstream lines(t);
  for (std::string l; std::getline(lines, l);)
    if (l.starts_with("# diagnosis verdict:") || l.starts_with("# what-if check:") || l.starts_with("# check:"))
      out.answer_text += l + "\n";
  out.json = verdict_json(plan, e, v, x, claim, makespan_gap, std::move(whatif), shuffle_seed);
  return out;
}

Outcome judge(frontier::Evidence e, const JudgeOptions& o) {
  Outcome out;
  if (o.reference != nullptr) out.reference_problem = apply_reference(e, *o.reference);
  if (o.plan != nullptr) out.verdict = verdict_report(*o.plan, e, o.makespan_gap, o.reference_evidence, o.shuffle_seed);
  out.evidence = std::move(e);
  return out;
}

std::string answer_text(const Outcome& o, const std::vector<formats::RankInfo>& ranks) {
  std::string out = formats::answer_lines(o.evidence, ranks);
  if (o.verdict) out += o.verdict->answer_text;
  if (o.detect) out += o.detect->text;
  return out;
}

MakespanCheck makespan_check(const frontier::Evidence& e, const frontier::StageMatrix& m) {
  MakespanCheck c;
  for (int t = 0; t < m.steps(); ++t) {
    double mx = 0;
    for (int r = 0; r < m.ranks(); ++r)
      if (m.present(t, r)) mx = std::max(mx, m.wall(t, r));
    c.wall_sum_s += mx;
  }
  if (e.exposed_makespan_s > 0) c.gap = std::abs(e.exposed_makespan_s - c.wall_sum_s) / e.exposed_makespan_s;
  return c;
}

}  // namespace sf::testbed
