// sf-testbed import kineto TRACE... --out FILE.jsonl: PyTorch-profiler traces (one per rank)
// reduced to an sf.stages/1 matrix that `score` reads (mapping: docs/kineto.md).
#include "common.h"

#include <cstdio>
#include <memory>
#include <new>
#include <sstream>

namespace sf::cli {

struct ImportOptions {
  std::vector<std::string> traces;
  std::string out;
  int world_size = 0;
  int rank = -1;
  std::string stage_map;
  formats::ReadLimits limits;
  bool quiet = false;
  bool allow_disjoint = false;
};

int run_import_kineto(const ImportOptions& o) {
  // An output that is one of the traces (or the stage map) would replace it (issue 40, B2).
  std::vector<std::string> inputs = o.traces;
  inputs.push_back(o.stage_map);
  if (const auto err = same_file_error("--out", o.out, inputs); !err.empty()) {
    std::fprintf(stderr, "sf-testbed import kineto: %s\n", err.c_str());
    return kExitBadInput;
  }
  formats::KinetoImport imp;
  try {
    formats::KinetoOptions opt;
    opt.world_size = o.world_size;
    opt.rank = o.rank;
    opt.allow_disjoint = o.allow_disjoint;
    opt.limits = o.limits;
    if (!o.stage_map.empty()) opt.stage_map = formats::read_kineto_stage_map(o.stage_map);
    imp = formats::import_kineto(o.traces, opt);
  } catch (const formats::FormatError& e) {
    std::fprintf(stderr, "sf-testbed import kineto: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    // Only where the user raised a limit past what this machine holds (docs/formats.md, "Limits").
    std::fprintf(stderr, "sf-testbed import kineto: out of memory reading the traces; expected input within this "
                 "machine's memory (lower the --max-* limits)\n");
    return kExitBadInput;
  }
  std::ostringstream jsonl;
  formats::write_jsonl(jsonl, imp.window);
  try {
    formats::write_file_atomic(o.out, jsonl.str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sf-testbed import kineto: %s\n", e.what());
    return kExitBadInput;
  }
  if (o.quiet) return 0;
  // What step.other holds, on stderr beside the table, from 0.5 % of the walls on (the window's
  // telemetry says it too from 5 %, where the residual already downgrades the labels).
  for (const auto& t : imp.traces) {
    if (const std::string line = formats::kineto_unmapped_line(t); !line.empty() && t.other_share >= 0.005)
      std::fprintf(stderr, "sf-testbed import kineto: %s\n", line.c_str());
    if (const std::string line = formats::kineto_fallback_line(t); !line.empty())
      std::fprintf(stderr, "sf-testbed import kineto: %s\n", line.c_str());
  }
  const auto& m = imp.window.matrix;
  const auto stages = m.schema().explicit_names();
  std::printf("# sf-testbed import kineto  commit %s\n", git_commit());
  std::printf("# %-40s %-12s %-22s %-24s %-16s %9s\n", "trace", "form", "rank (from)", "world size (from)", "ProfilerStep#",
              "events");
  for (const auto& t : imp.traces) {
    const std::string rank = std::to_string(t.rank) + " (" + t.rank_source + ")";
    const std::string world = std::to_string(t.world_size) + " (" + t.world_source + ")";
    const std::string span = std::to_string(t.first_step) + ".." + std::to_string(t.last_step) + " (" + std::to_string(t.steps) + ")";
    std::printf("  %-40s %-12s %-22s %-24s %-16s %9lld\n", t.file.c_str(), t.form.c_str(), rank.c_str(), world.c_str(),
                span.c_str(), static_cast<long long>(t.events));
  }
  for (const auto& t : imp.traces) {
    std::printf("# stages of %s (rank %d), steps in which each was found:\n", t.file.c_str(), t.rank);
    for (std::size_t s = 0; s < stages.size(); ++s)
      std::printf("    %-26s %3d/%-3d %s\n", stages[s].c_str(), t.stage_steps[s], t.steps, t.stage_rules[s].c_str());
    std::printf("    %-26s %s\n", "side.sync_wait", t.collectives.c_str());
  }
  std::printf("# wrote %s: world size %d, steps %lld..%lld, %zu trace(s)", o.out.c_str(), m.world_size(),
              static_cast<long long>(m.first_step()), static_cast<long long>(m.first_step() + (m.steps() - 1)), imp.traces.size());
  if (imp.missing_rank_count > 0)
    std::printf("; %lld rank(s) without a trace are missing ranks (telemetry_limited)",
                static_cast<long long>(imp.missing_rank_count));
  std::printf("\n# score it: sf-testbed score %s\n", o.out.c_str());
  return 0;
}

void setup_import(CLI::App& app) {
  auto* imp = app.add_subcommand("import", "Reduce traces from other tools to a stage matrix (sf.stages/1)");
  imp->require_subcommand(1);
  auto o = std::make_shared<ImportOptions>();
  auto* sub = imp->add_subcommand("kineto", "PyTorch-profiler (Kineto) Chrome traces, one per rank (.json or .json.gz)");
  sub->add_option("TRACE", o->traces, "trace files, one per rank")->required()->check(CLI::ExistingFile);
  sub->add_option("--out", o->out, "stage-matrix file to write (JSON Lines, sf.stages/1)")->required();
  sub->add_option("--world-size", o->world_size,
                  "the job's world size where traces carry no distributedInfo (PyTorch 1.13 CPU traces)")
      ->check(whole_in(1, 1 << 24));
  sub->add_option("--rank", o->rank, "the rank of a single trace without distributedInfo.rank (with --world-size)")
      ->check(whole_in(0, (1 << 24) - 1));
  sub->add_option("--stage-map", o->stage_map,
                  "JSON file mapping event-name patterns to stages, new stages allowed (docs/kineto.md, \"Stage map\")")
      ->check(CLI::ExistingFile);
  sub->add_flag("--allow-disjoint", o->allow_disjoint,
                "import traces that share no ProfilerStep id (refused otherwise: two jobs' traces, most likely); the "
                "window's telemetry says so");
  sub->add_flag("--quiet", o->quiet, "print nothing on success");
  // The limits score applies (docs/formats.md, "Limits"), so what import writes, score reads.
  add_limit_options(sub, o->limits, false);
  sub->callback([o] {
    if (const int rc = run_import_kineto(*o)) exit_with(rc);
  });
}

}  // namespace sf::cli
