// sf-testbed score FILE: score a stage-matrix file (JSONL or CSV) from any source.
#include "common.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

namespace sf::cli {

struct ScoreOptions {
  std::string file;
  std::optional<formats::MatrixFormat> format;
  bool json = false;
  std::string out;
  int window = 0;
  int world_size = 0;
  int accumulation = 1;
  LabelOptions label;
};

int run_score(const ScoreOptions& o) {
  frontier::LabelConfig cfg;
  std::vector<formats::Window> windows;
  try {
    cfg = make_label_config(o.label);
    windows = formats::read_stage_file(o.file, {o.format, o.window, o.world_size, o.accumulation});
  } catch (const formats::FormatError& e) {
    std::fprintf(stderr, "sf-testbed score: %s\n", e.what());
    return kExitBadInput;
  }
  std::string packets, tables;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const auto& w = windows[i];
    frontier::Evidence e;
    try {
      e = frontier::evaluate(w.matrix, cfg, w.telemetry);
    } catch (const std::invalid_argument& err) {
      std::fprintf(stderr, "sf-testbed score: %s:%lld: %s\n", o.file.c_str(), static_cast<long long>(w.header_line),
                   err.what());
      return kExitBadInput;
    }
    packets += formats::evidence_to_json(e, w.ranks).dump() + "\n";
    tables += formats::evidence_table(e, "sf-testbed score " + o.file + " (window " + std::to_string(i + 1) + " of " +
                                             std::to_string(windows.size()) + ")",
                                       w.ranks);
    if (i + 1 < windows.size()) tables += "\n";
  }
  if (!o.out.empty()) {
    try {
      formats::write_file_atomic(o.out, packets);
    } catch (const std::exception& err) {
      std::fprintf(stderr, "sf-testbed score: %s\n", err.what());
      return kExitBadInput;
    }
  }
  std::cout << (o.json ? packets : tables);
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
  sub->add_flag("--json", o->json, "print the evidence packet(s) (sf.evidence/1, one per line) instead of the table");
  sub->add_option("--out", o->out, "also write the packet(s) to this file (atomically)");
  sub->add_option("--window", o->window, "split into windows of this many steps (default: one per header)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--world-size", o->world_size, "CSV: world size (default: max rank + 1)")->check(CLI::PositiveNumber);
  sub->add_option("--accumulation", o->accumulation, "CSV: gradient accumulation factor")->check(CLI::PositiveNumber);
  add_label_options(sub, o->label);
  sub->callback([o] {
    if (const int rc = run_score(*o)) exit_with(rc);
  });
}

}  // namespace sf::cli
