// sf-testbed score FILE: score a stage-matrix file (JSONL or CSV) from any source.
#include "common.h"
#include "sf/testbed/testbed.h"

#include <cstdio>
#include <iostream>
#include <memory>

namespace sf::cli {

struct ScoreOptions {
  std::string file;
  std::optional<formats::MatrixFormat> format;
  bool json = false;
  bool whole = false;
  bool details = false;
  std::string out;
  std::string plot;  ///< --plot FILE.png|svg
  std::string reference;
  std::string metrics;
  int window = 0;
  int world_size = 0;
  int accumulation = 1;
  formats::ReadLimits limits;
  LabelOptions label;
  DetectOptions detect;
  TraceCliOptions trace;
};

int run_score(const ScoreOptions& o) {
  for (const auto& [opt, path] : {std::pair<const char*, const std::string&>{"--trace", o.trace.file}, {"--out", o.out},
                                  {"--metrics", o.metrics}, {"--plot", o.plot}})
    if (!path.empty())
      if (const auto err = writable_file_error(opt, path); !err.empty()) {
        std::fprintf(stderr, "sf-testbed score: %s\n", err.c_str());
        return kExitBadInput;
      }
  if (const auto err = testbed::plot_file_problem(o.plot); !err.empty()) {
    std::fprintf(stderr, "sf-testbed score: %s\n", err.c_str());
    return kExitBadInput;
  }
  // An output that is an input would be replaced by it (issue 40, B2): refused before reading.
  for (const auto& [opt, path] : {std::pair<const char*, const std::string&>{"--trace", o.trace.file}, {"--out", o.out},
                                  {"--metrics", o.metrics}, {"--plot", o.plot}})
    if (const auto err = same_file_error(opt, path, {o.file, o.reference}); !err.empty()) {
      std::fprintf(stderr, "sf-testbed score: %s\n", err.c_str());
      return kExitBadInput;
    }
  testbed::ScoredFile scored;
  testbed::Reporters reporters;
  if (!o.metrics.empty()) reporters.add(testbed::metrics_reporter(o.metrics));
  if (!o.plot.empty()) reporters.add(testbed::plot_reporter(o.plot, "each rank x stage's change per window, the culprits outlined"));
  if (!o.trace.file.empty()) reporters.add(testbed::trace_reporter(o.trace.file));
  try {
    testbed::ScoreFileOptions so;
    so.file = o.file;
    so.read = {o.format, o.window, o.world_size, o.accumulation, o.limits};
    so.whole = o.whole;
    so.reference = o.reference;
    so.reporters = &reporters;
    so.label = make_label_config(o.label);
    if (o.detect.on) so.detect = o.detect.cfg;
    so.stability_window = o.detect.stability_window;
    so.stability_stage = o.detect.stability_stage;
    if (!o.trace.file.empty()) so.trace = testbed::TraceOptions{o.trace.file, o.trace.max_steps, o.trace.max_ranks};
    scored = testbed::score_file(so);
  } catch (const testbed::InputError& e) {
    std::fprintf(stderr, "sf-testbed score: %s\n", e.what());
    return kExitBadInput;
  } catch (const formats::FormatError& e) {  // --config
    std::fprintf(stderr, "sf-testbed score: %s\n", e.what());
    return kExitBadInput;
  }
  try {
    if (!o.out.empty()) formats::write_file_atomic(o.out, scored.packets);
  } catch (const std::exception& err) {
    std::fprintf(stderr, "sf-testbed score: --out %s\n", err.what());
    return kExitBadInput;
  }
  testbed::ReportedEnd end;
  end.packets = scored.packets;
  end.trace = scored.trace ? &*scored.trace : nullptr;
  if (const auto err = reporters.finish(end); !err.empty()) {
    std::fprintf(stderr, "sf-testbed score: %s\n", err.c_str());
    return kExitBadInput;
  }
  std::cout << (o.json ? scored.packets : o.details ? scored.tables : scored.answers);
  // Beside the tables on stdout; on stderr with --json, which keeps stdout the packets.
  for (const auto& line : reporters.said()) {
    if (o.json) std::fprintf(stderr, "sf-testbed score: %s\n", line.c_str());
    else std::cout << "# " << line << "\n";
  }
  return 0;
}

void setup_score(CLI::App& app) {
  auto o = std::make_shared<ScoreOptions>();
  auto* sub = app.add_subcommand("score", "Score a stage-matrix file (sf.stages/1 JSONL or wide CSV)");
  sub->add_option("FILE", o->file, "stage-matrix file")->required();
  const std::map<std::string, formats::MatrixFormat> formats{{"jsonl", formats::MatrixFormat::jsonl},
                                                             {"csv", formats::MatrixFormat::csv}};
  sub->add_option("--format", o->format, "input format (default: by extension)")
      ->transform(choice(formats));
  sub->add_flag("--json", o->json, "print the evidence packet(s) (sf.evidence/6, one per line; with --detect an sf.detect/1 line last) instead of the table");
  sub->add_option("--out", o->out, "also write the packet(s) to this file (atomically)");
  sub->add_option("--plot", o->plot,
                  "draw the run: per window, each rank x stage's change (the culprits outlined) and the step time (FILE.png or .svg)");
  sub->add_flag("--details", o->details,
                "instead of the answer, each window's whole table: its diagnosis, the paper's frontier table, gates, labels and suspect");
  sub->add_option("--metrics", o->metrics,
                  "Prometheus text exposition of the last window, rewritten atomically after each window (docs/formats.md, Metrics)");
  sub->add_option("--reference", o->reference,
                  "diagnose each window against this healthy run: a stage-matrix dump or an evidence packet "
                  "(default: against the cohort; with --detect, against the regime before the first change)");
  sub->add_flag("--whole", o->whole, "read each window whole before scoring it, instead of streaming the file step by step "
                "(the output is the same; docs/formats.md, \"Streaming\")");
  sub->add_option("--window", o->window, "split into windows of this many steps (default: one per header)")
      ->check(whole_from<int>(0));
  sub->add_option("--world-size", o->world_size, "CSV: world size (default: max rank + 1)")->check(whole_from<int>(1));
  sub->add_option("--accumulation", o->accumulation, "CSV: gradient accumulation factor")->check(whole_from<int>(1));
  // Limits on what one read may hold (docs/formats.md, "Limits"): raise them for bigger inputs.
  add_limit_options(sub, o->limits);
  add_label_options(sub, o->label);
  add_detect_options(sub, o->detect);
  add_trace_options(sub, o->trace);
  sub->callback([o] {
    if (const int rc = run_score(*o)) exit_with(rc);
  });
}

}  // namespace sf::cli
