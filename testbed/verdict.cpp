// Verdicts: a scored window against the injected truth and the scenario's claim (`run --check`,
// `sim --check`), and the truth records as result files carry them.
#include "sf/testbed/testbed.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sf::testbed {

using nlohmann::ordered_json;

namespace {

ordered_json rule_json(const verify::RuleVerdict& v) {
  return {{"top1", v.top1}, {"top2", v.top2}, {"candidate_hit", v.candidate_hit}, {"candidate_size", v.candidate_size}};
}

/// The claim a run is checked against (--check), per scenario family.
struct Claim {
  bool pass = false;
  std::string criterion;
};

Claim check_claim(const inject::Scenario& sc, const frontier::Evidence& e, const verify::Verdict& v,
                  double makespan_gap) {
  Claim c;
  bool ok = true;
  if (sc.site == inject::Site::none) {
    c.criterion = "no strong label";
    for (auto l : e.labels) ok &= !frontier::is_strong(l);
  } else if (!sc.should_route) {
    c.criterion = sc.stage + " not in the routing set";
    ok = !v.frontier.candidate_hit;
  } else if (sc.site == inject::Site::link) {
    // The host is named by the P2P pass the run makes while the fault is on (run.cpp): a
    // bandwidth fault delays every rank of the ring alike, so no rank stands out in stage time.
    c.criterion = sc.stage + " in the top-2";
    ok = v.frontier.top2;
  } else if (sc.site == inject::Site::forward_device) {
    c.criterion = sc.stage + " in the top-2 (device work becomes host-visible in backward)";
    ok = v.frontier.top2;
  } else {
    c.criterion = sc.stage + " in the top-2 and the target rank named";
    ok = v.frontier.top2 && v.rank_hit;
  }
  c.criterion += "; exposed makespan within 2% of the slowest-rank wall sum";
  ok &= makespan_gap <= 0.02;
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

VerdictReport verdict_report(const inject::FaultPlan& plan, const frontier::Evidence& e, double makespan_gap) {
  const auto& scenario = *plan.scenario;
  const auto truth = inject::truth(plan);
  VerdictReport out;
  out.verdict = verify::score(e, {scenario.stage, plan.ranks, scenario.should_route});
  const auto& v = out.verdict;
  const Claim claim = check_claim(scenario, e, v, makespan_gap);
  out.claim_pass = claim.pass;
  out.claim = claim.criterion;
  char line[512];
  auto yn = [](bool flag) { return flag ? "yes" : "no"; };
  out.truth_text = "# truth: ";
  if (truth.empty()) out.truth_text += "no fault";
  for (const auto& r : truth) {
    if (!r.host.empty())
      std::snprintf(line, sizeof line, "rank %d (host %s) %s %s %.0f Mbit/s; ", r.rank, r.host.c_str(), r.stage.c_str(),
                    r.kind.c_str(), r.rate_mbit);
    else
      std::snprintf(line, sizeof line, "rank %d %s %s %.0f ms%s%s; ", r.rank, r.stage.c_str(), r.kind.c_str(), r.delay_ms,
                    r.sync_bearing ? " sync-bearing" : "", r.should_route ? "" : " (must stay unrouted)");
    out.truth_text += line;
  }
  out.truth_text += "\n";
  std::string& t = out.verdict_text;
  if (!truth.empty()) {
    std::snprintf(line, sizeof line, "# verdict: top-1 %s  top-2 %s  candidate hit %s (size %d)  rank hit %s (suspect %d, %s)\n",
                  yn(v.frontier.top1), yn(v.frontier.top2), yn(v.frontier.candidate_hit), v.frontier.candidate_size,
                  yn(v.rank_hit), e.suspect.rank, e.suspect.basis.c_str());
    t += line;
    t += "# baselines top-1/top-2:";
    for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i)
      t += " " + std::string(frontier::to_string(frontier::kBaselineRules[i])) + " " + yn(v.baselines[i].top1) + "/" +
           yn(v.baselines[i].top2);
    t += "\n";
  }
  t += "# check: " + claim.criterion + ": " + (claim.pass ? "PASS" : "FAIL") + "\n";

  auto& j = out.json;
  j["expected"] = {{"stage", scenario.stage}, {"ranks", plan.ranks}, {"should_route", scenario.should_route}};
  j["frontier"] = rule_json(v.frontier);
  j["rank_hit"] = v.rank_hit;
  j["suspect"] = {{"rank", e.suspect.rank}, {"basis", e.suspect.basis}};
  auto& bls = j["baselines"] = ordered_json::object();
  for (std::size_t i = 0; i < std::size(frontier::kBaselineRules); ++i)
    bls[std::string(frontier::to_string(frontier::kBaselineRules[i]))] = rule_json(v.baselines[i]);
  j["check"] = {{"criterion", claim.criterion}, {"pass", claim.pass}};
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
