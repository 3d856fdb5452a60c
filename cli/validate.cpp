// sf-testbed validate: link and compute validation passes under mpirun
// (mpirun -np R sf-testbed validate [--check]); options are validated before MPI starts.
#include "common.h"

#include "sf/testbed/testbed.h"

#include <charconv>
#include <cstdio>
#include <memory>

namespace sf::cli {

namespace {

struct ValidateOptions {
  testbed::ValidateConfig cfg;
  bool no_p2p = false, no_compute = false;
  std::vector<std::string> slowdown;  // RANK:FACTOR
};

int run_validate(ValidateOptions& o, std::vector<std::string> argv) {
  auto& cfg = o.cfg;
  cfg.argv = std::move(argv);
  cfg.commit = git_commit();
  cfg.p2p = !o.no_p2p;
  cfg.compute = !o.no_compute;
  for (const auto& s : o.slowdown) {
    const auto colon = s.find(':');
    int rank = -1;
    double factor = 0;
    const bool ok = colon != std::string::npos &&
                    std::from_chars(s.data(), s.data() + colon, rank).ptr == s.data() + colon &&
                    std::from_chars(s.data() + colon + 1, s.data() + s.size(), factor).ptr == s.data() + s.size();
    if (!ok) {
      if (is_first_process())
        std::fprintf(stderr, "sf-testbed validate: --compute-slowdown '%s': expected RANK:FACTOR, e.g. 3:4\n", s.c_str());
      return kExitBadInput;
    }
    cfg.compute_slowdown.emplace_back(rank, factor);
  }
  if (const auto err = testbed::validate(cfg); !err.empty()) {
    if (is_first_process()) std::fprintf(stderr, "sf-testbed validate: %s\n", err.c_str());
    return kExitBadInput;
  }
  return testbed::run_validate(cfg);
}

}  // namespace

void setup_validate(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  auto& cfg = o->cfg;
  auto* sub = app.add_subcommand(
      "validate", "Link and compute validation under mpirun: name slow links (p2p ring) and slow ranks (GEMM)");
  sub->add_flag("--no-p2p", o->no_p2p, "skip the point-to-point pass");
  sub->add_flag("--no-compute", o->no_compute, "skip the compute pass");
  sub->add_option("--bytes", cfg.bytes, "message size of each directed transfer")->check(whole_in(1, 1 << 30));
  sub->add_option("--reps", cfg.reps, "acknowledged messages per directed link; the fastest counts")->check(whole_in(1, 10000));
  sub->add_option("--threshold", cfg.threshold, "slow: more than THRESHOLD x the median of its class")
      ->check(CLI::Range(1.000001, 1000.0));
  sub->add_option("--gemm-n", cfg.gemm_n, "compute pass: n x n x n single-precision GEMM")->check(whole_in(8, 8192));
  sub->add_option("--sweeps", cfg.sweeps, "passes over every link and rank; a link's (rank's) fastest try over all passes counts")
      ->check(whole_in(1, 100));
  sub->add_option("--gemm-reps", cfg.gemm_reps, "timed GEMMs per rank; the fastest counts")->check(whole_in(1, 1000));
  sub->add_option("--device", cfg.device, "compute pass: cpu (Eigen) or cuda (cuBLAS on GPU local_rank % count)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--compute-slowdown", o->slowdown,
                  "inject a compute fail-slow to validate the validator: RANK:FACTOR (its GEMMs take FACTOR x)")
      ->delimiter(',');
  sub->add_flag("--parallel", cfg.parallel,
                "measure all links of a round at once (FALCON's rounds; fast on a cluster, unfair when ranks share cores)");
  sub->add_flag("--check", cfg.check, "exit 1 when a link or a rank is slow (validate does so on FAIL either way; kept for scripts)");
  sub->add_flag("--quiet", cfg.quiet, "no table on stdout");
  sub->add_option("--out", cfg.out, "write the result (sf.validate/1 JSON)");
  sub->callback([o, sub] {
    std::vector<std::string> argv{"sf-testbed", "validate"};
    for (const auto* opt : sub->get_options())
      for (const auto& r : opt->results())
        if (!opt->get_name().empty()) argv.push_back(opt->get_name(false, true) + "=" + r);
    if (const int rc = run_validate(*o, argv)) exit_with(rc);
  });
}

}  // namespace sf::cli
