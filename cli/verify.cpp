// sf-testbed verify: the property verifier and the paper's §6.1 fixtures, for a user.
#include "common.h"
#include "sf/verify/verify.h"

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <memory>

namespace sf::cli {

struct VerifyOptions {
  int cases = 1000;
  std::uint64_t seed = 1;
  std::vector<std::string> only;
  int windows = 2000;
  bool skip_fixtures = false;
  bool list = false;
};

int run_verify(const VerifyOptions& o) {
  if (o.list) {
    for (const auto& p : verify::properties()) std::printf("%-44s %s\n", p.name.c_str(), p.statement.c_str());
    return 0;
  }
  for (const auto& name : o.only) {
    bool known = false;
    for (const auto& p : verify::properties()) known |= p.name == name;
    if (!known) {
      std::fprintf(stderr, "sf-testbed verify: unknown property '%s'; expected one of the names `sf-testbed verify --list` prints\n", name.c_str());
      return kExitBadInput;
    }
  }
  std::printf("# sf-testbed verify  commit %s\n", git_commit());
  std::printf("# cases per property %d, seed %llu (rerun one: sf-testbed verify --property NAME --seed %llu --cases %d)\n",
              o.cases, static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.seed), o.cases);
  std::printf("#\n# %-44s %8s %9s %7s  %s\n", "property", "cases", "time", "result", "statement");
  std::printf("# %-44s %8s %9s %7s\n", "", "", "s", "");
  int failures = 0, checked = 0;
  for (const auto& p : verify::properties()) {
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), p.name) == o.only.end()) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = verify::check_property(p.name, o.cases, o.seed);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++checked;
    std::printf("  %-44s %8d %9.2f %7s  %s\n", p.name.c_str(), r.cases, secs, r.passed ? "PASS" : "FAIL", p.statement.c_str());
    if (!r.passed) {
      ++failures;
      std::printf("%s\n", r.failure.c_str());
    }
    std::fflush(stdout);
  }
  int fixtures = 0;
  if (!o.skip_fixtures && o.only.empty()) {
    std::printf("#\n# fixtures (paper §6.1): hits of the top-1 stage per scoring rule\n");
    std::printf("# %-30s %5s %9s %9s %9s %9s %9s %9s %7s\n", "fixture", "rows", "frontier", "max", "avg", "spread",
                "slowest", "rank0", "result");
    for (const auto& f : verify::run_fixtures(o.seed)) {
      ++fixtures;
      auto frac = [&](int hits) { return std::to_string(hits) + "/" + std::to_string(f.rows); };
      const bool has_baselines = f.name.rfind("downgrade:", 0) != 0;
      std::printf("  %-30s %5d %9s", f.name.c_str(), f.rows, frac(f.frontier_hits).c_str());
      for (int hits : f.baseline_hits) std::printf(" %9s", has_baselines ? frac(hits).c_str() : "-");
      std::printf(" %7s\n", f.passed ? "PASS" : "FAIL");
      if (!f.passed) std::printf("#   %s\n", f.detail.c_str());
      failures += f.passed ? 0 : 1;
    }
    const auto st = verify::algorithmic_validation(o.seed, o.windows);
    const bool ok = st.prop1_violations == 0 && st.prop2_violations == 0 && st.prop1_tight_reached == st.prop1_tight_cases &&
                    st.prop2_tight_reached == st.prop2_tight_cases && st.stability_max_ratio <= 1.0 + 1e-9 &&
                    st.telescoping_max_rel_error <= 1e-12;
    std::printf("#\n# algorithmic validation over %d random windows (paper §6.1: 8.88e-16, 0 violations, ratio <= 0.9998)\n",
                st.windows);
    std::printf("  telescoping max error %.3g s (relative %.3g); Prop 1/2 violations %d/%d; tight %d/%d and %d/%d; "
                "stability observed/bound max %.6f  %s\n",
                st.telescoping_max_abs_error, st.telescoping_max_rel_error, st.prop1_violations, st.prop2_violations,
                st.prop1_tight_reached, st.prop1_tight_cases, st.prop2_tight_reached, st.prop2_tight_cases,
                st.stability_max_ratio, ok ? "PASS" : "FAIL");
    failures += ok ? 0 : 1;
  }
  std::printf("# result: %s (%d properties, %d fixtures, %d failed)\n", failures ? "FAIL" : "PASS", checked, fixtures,
              failures);
  return failures ? kExitFail : 0;
}

void setup_verify(CLI::App& app) {
  auto o = std::make_shared<VerifyOptions>();
  // The property names belong to `verify --help` (its footer) and `verify --list`, not to the
  // top-level help's one line per subcommand.
  std::string names = "Properties (" + std::to_string(verify::properties().size()) + "):";
  for (const auto& p : verify::properties()) names += "\n  " + p.name;
  auto* sub = app.add_subcommand("verify", "Check the frontier identities (RapidCheck) and the §6.1 fixtures");
  sub->footer(names);
  sub->add_flag("--list", o->list, "print the property names with their statements and exit");
  sub->add_option("--cases", o->cases, "generated cases per property")->check(whole_in(1, 100000000));
  sub->add_option("--seed", o->seed, "RapidCheck and fixture seed")->check(seed_value());
  sub->add_option("--property", o->only, "run only these properties (repeatable); skips fixtures");
  sub->add_option("--windows", o->windows, "random windows for the algorithmic-validation figures")
      ->check(whole_in(1, 10000000));
  sub->add_flag("--no-fixtures", o->skip_fixtures, "properties only");
  sub->callback([o] {
    if (const int rc = run_verify(*o)) exit_with(rc);
  });
}

}  // namespace sf::cli
