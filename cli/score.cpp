// sf-testbed score FILE: score a stage-matrix file (JSONL or CSV) from any source.
#include "common.h"
#include "sf/testbed/testbed.h"

#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <new>
#include <sstream>

namespace sf::cli {

struct ScoreOptions {
  std::string file;
  std::optional<formats::MatrixFormat> format;
  bool json = false;
  bool whole = false;
  std::string out;
  int window = 0;
  int world_size = 0;
  int accumulation = 1;
  formats::ReadLimits limits;
  LabelOptions label;
  DetectOptions detect;
  TraceCliOptions trace;
};

/// One scored window: its evidence, and the rank identity its packet carries.
struct Scored {
  frontier::Evidence evidence;
  std::vector<formats::RankInfo> ranks;
};

/// Scores a streamed file window by window (frontier::StreamingAccumulator: O(ranks x stages)
/// plus one scalar per step), giving the evidence evaluate() gives on the whole window.
class ScoreSink final : public formats::StepSink {
public:
  explicit ScoreSink(const frontier::LabelConfig& cfg) : cfg_(cfg) {}
  void begin_window(const formats::WindowHead& head) override {
    acc_.emplace(head.layout.schema(), head.layout.world_size(), cfg_, head.layout.rank_ids());
    telemetry_ = head.telemetry;
    ranks_ = head.ranks;
  }
  void add_step(const frontier::StageMatrix& step) override { acc_->add_step(step); }
  void end_window() override {
    scored.push_back({acc_->finish(telemetry_), ranks_});
    acc_.reset();
  }
  std::vector<Scored> scored;

private:
  const frontier::LabelConfig& cfg_;
  std::optional<frontier::StreamingAccumulator> acc_;
  frontier::TelemetryInput telemetry_;
  std::vector<formats::RankInfo> ranks_;
};

int run_score(const ScoreOptions& o) {
  frontier::LabelConfig cfg;
  std::vector<formats::Window> windows;
  for (const auto& [opt, path] : {std::pair<const char*, const std::string&>{"--trace", o.trace.file}, {"--out", o.out}})
    if (!path.empty())
      if (const auto err = writable_file_error(opt, path); !err.empty()) {
        std::fprintf(stderr, "sf-testbed score: %s\n", err.c_str());
        return kExitBadInput;
      }
  std::vector<Scored> scored;
  const formats::ReadOptions read{o.format, o.window, o.world_size, o.accumulation, o.limits};
  try {
    cfg = make_label_config(o.label);
    if (const auto err = detect::validate(o.detect.cfg); !err.empty()) throw formats::FormatError(o.file, 0, err);
    // Streamed unless an option needs the whole window (docs/formats.md, "Streaming"); a file
    // that cannot be streamed is read whole, and gives the same output.
    bool streamed = false;
    if (!o.whole && !o.detect.on && o.trace.file.empty() && cfg.gain_baseline != frontier::GainBaseline::rank_median) {
      ScoreSink sink(cfg);
      streamed = formats::stream_stage_file(o.file, read, sink) == formats::StreamStatus::streamed;
      if (streamed) scored = std::move(sink.scored);
    }
    if (!streamed) windows = formats::read_stage_file(o.file, read);
  } catch (const formats::FormatError& e) {
    std::fprintf(stderr, "sf-testbed score: %s\n", e.what());
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    // Only where the user raised a limit past what this machine holds (docs/formats.md, "Limits").
    std::fprintf(stderr, "sf-testbed score: %s: out of memory reading the file; expected input within this machine's "
                 "memory (lower the --max-* limits)\n", o.file.c_str());
    return kExitBadInput;
  }
  for (const auto& w : windows) {
    try {
      scored.push_back({frontier::evaluate(w.matrix, cfg, w.telemetry), w.ranks});
    } catch (const std::invalid_argument& err) {
      std::fprintf(stderr, "sf-testbed score: %s:%lld: %s\n", o.file.c_str(), static_cast<long long>(w.header_line),
                   err.what());
      return kExitBadInput;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "sf-testbed score: %s:%lld: out of memory scoring a window of %d steps x %d ranks x %d stages; "
                   "expected a window within this machine's memory (lower the --max-* limits)\n", o.file.c_str(),
                   static_cast<long long>(w.header_line), w.matrix.steps(), w.matrix.ranks(), w.matrix.stages());
      return kExitBadInput;
    }
  }
  std::string packets, tables;
  for (std::size_t i = 0; i < scored.size(); ++i) {
    const auto& [e, ranks] = scored[i];
    packets += formats::evidence_to_json(e, ranks).dump() + "\n";
    tables += formats::evidence_table(e, "sf-testbed score " + o.file + " (window " + std::to_string(i + 1) + " of " +
                                             std::to_string(scored.size()) + ")",
                                       ranks);
    if (i + 1 < scored.size()) tables += "\n";
  }
  if ((o.detect.on || !o.trace.file.empty()) && !windows.empty()) {
    // Offline: the file's windows are consecutive pieces of one run; the detector watches them
    // all, the stability windows are the file's windows (or --stability-window steps for one).
    try {
      const auto all = testbed::concat_windows(windows);
      testbed::WatchOptions wo;
      wo.label = cfg;
      if (o.detect.on) wo.detect = o.detect.cfg;
      if (!o.trace.file.empty()) wo.trace = testbed::TraceOptions{o.trace.file, o.trace.max_steps, o.trace.max_ranks};
      wo.stability_window = o.detect.stability_window;
      wo.stability_per_window = windows.size() > 1;
      wo.stability_stage = o.detect.stability_stage;
      testbed::Watch watch(std::move(wo));
      for (const auto& w : windows)
        watch.observe(std::shared_ptr<const frontier::StageMatrix>(std::shared_ptr<void>(), &w.matrix), w.ranks);
      if (o.detect.on) {
        const auto dr = watch.report(&all.matrix);
        nlohmann::ordered_json j;
        j["schema"] = "sf.detect/1";
        j["file"] = o.file;
        for (const auto& [k, v] : dr.json.items()) j[k] = v;
        packets += j.dump() + "\n";
        tables += "#\n" + dr.text;
      }
      if (!o.trace.file.empty()) formats::write_file_atomic(o.trace.file, watch.trace(&all.matrix, windows.front().ranks).dump() + "\n");
    } catch (const std::invalid_argument& err) {
      std::fprintf(stderr, "sf-testbed score: %s: --detect: %s\n", o.file.c_str(), err.what());
      return kExitBadInput;
    } catch (const std::runtime_error& err) {
      std::fprintf(stderr, "sf-testbed score: --trace %s\n", err.what());
      return kExitBadInput;
    }
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
  sub->add_flag("--json", o->json, "print the evidence packet(s) (sf.evidence/2, one per line; with --detect an sf.detect/1 line last) instead of the table");
  sub->add_option("--out", o->out, "also write the packet(s) to this file (atomically)");
  sub->add_flag("--whole", o->whole, "read each window whole before scoring it, instead of streaming the file step by step "
                "(the output is the same; docs/formats.md, \"Streaming\")");
  sub->add_option("--window", o->window, "split into windows of this many steps (default: one per header)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--world-size", o->world_size, "CSV: world size (default: max rank + 1)")->check(CLI::PositiveNumber);
  sub->add_option("--accumulation", o->accumulation, "CSV: gradient accumulation factor")->check(CLI::PositiveNumber);
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
