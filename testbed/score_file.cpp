// score_file(): what `sf-testbed score FILE` does, as a library call, so the CLI only parses
// options and the fuzz harness drives the same code (streamed and whole reads, --window,
// --detect, --trace).
#include "detail.h"

#include <memory>
#include <new>
#include <optional>
#include <utility>

namespace sf::testbed {

namespace {

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
  struct Scored {
    frontier::Evidence evidence;
    std::vector<formats::RankInfo> ranks;
  };
  std::vector<Scored> scored;

private:
  const frontier::LabelConfig& cfg_;
  std::optional<frontier::StreamingAccumulator> acc_;
  frontier::TelemetryInput telemetry_;
  std::vector<formats::RankInfo> ranks_;
};

}  // namespace

ScoredFile score_file(const ScoreFileOptions& o) {
  std::vector<formats::Window> windows;
  std::vector<ScoreSink::Scored> scored;
  ScoredFile out;
  std::optional<frontier::Reference> reference;
  std::string detect_packet, detect_text;  // --detect: after the windows' packets
  try {
    if (!o.reference.empty()) reference = formats::read_reference(o.reference, o.label);
    if (o.detect)
      if (const auto err = detect::validate(*o.detect); !err.empty()) throw formats::FormatError(o.file, 0, err);
    // Streamed unless an option needs the whole window (docs/formats.md, "Streaming"); a file
    // that cannot be streamed is read whole, and gives the same output.
    if (!o.whole && !o.detect && !o.trace && o.label.gain_baseline != frontier::GainBaseline::rank_median) {
      ScoreSink sink(o.label);
      out.streamed = formats::stream_stage_file(o.file, o.read, sink) == formats::StreamStatus::streamed;
      if (out.streamed) scored = std::move(sink.scored);
    }
    if (!out.streamed) windows = formats::read_stage_file(o.file, o.read);
  } catch (const formats::FormatError& e) {
    throw InputError(e.what());
  } catch (const std::bad_alloc&) {
    // Only where the user raised a limit past what this machine holds (docs/formats.md, "Limits").
    throw InputError(o.file + ": out of memory reading the file; expected input within this machine's memory "
                     "(lower the --max-* limits)");
  }
  for (const auto& w : windows) {
    const std::string at = o.file + ":" + std::to_string(w.header_line) + ": ";
    try {
      scored.push_back({frontier::evaluate(w.matrix, o.label, w.telemetry), w.ranks});
    } catch (const std::invalid_argument& err) {
      throw InputError(at + err.what());
    } catch (const std::bad_alloc&) {
      throw InputError(at + "out of memory scoring a window of " + std::to_string(w.matrix.steps()) + " steps x " +
                       std::to_string(w.matrix.ranks()) + " ranks x " + std::to_string(w.matrix.stages()) +
                       " stages; expected a window within this machine's memory (lower the --max-* limits)");
    }
  }
  if ((o.detect || o.trace) && !windows.empty()) {
    // Offline: the file's windows are consecutive pieces of one run; the detector watches them
    // all, the stability windows are the file's windows (or stability_window steps for one).
    const std::string what = o.detect ? (o.trace ? "--detect/--trace" : "--detect") : "--trace";
    try {
      const auto all = concat_windows(windows, o.read.limits);
      WatchOptions wo;
      wo.label = o.label;
      wo.detect = o.detect;
      wo.trace = o.trace;
      wo.stability_window = o.stability_window;
      wo.stability_per_window = windows.size() > 1;
      wo.stability_stage = o.stability_stage;
      Watch watch(std::move(wo));
      for (const auto& w : windows)
        watch.observe(std::shared_ptr<const frontier::StageMatrix>(std::shared_ptr<void>(), &w.matrix), w.ranks);
      if (o.detect) {
        const auto dr = watch.report(&all.matrix);
        nlohmann::ordered_json j;
        j["schema"] = "sf.detect/1";
        j["file"] = o.file;
        for (const auto& [k, v] : dr.json.items()) j[k] = v;
        detect_packet = j.dump() + "\n";
        detect_text = "#\n" + dr.text;
        if (!reference && dr.pre_change) reference = dr.pre_change;
      }
      if (o.trace) out.trace = watch.trace(&all.matrix, windows.front().ranks);
    } catch (const std::invalid_argument& err) {
      throw InputError(o.file + ": " + what + ": " + err.what());
    } catch (const std::bad_alloc&) {
      throw InputError(o.file + ": " + what + ": out of memory holding the file's windows as one run; expected input "
                       "within this machine's memory (lower the --max-* limits)");
    }
  }
  // Each window judged: diagnosed against the reference when there is one (no truth in a file).
  const frontier::Reference* ref = reference ? &*reference : nullptr;
  for (auto& [e, ranks] : scored) {
    out.windows.push_back(judge(std::move(e), {.reference = ref}));
    if (const auto& why = out.windows.back().reference_problem; !why.empty())
      throw InputError((o.reference.empty() ? o.file : o.reference) + ": cannot serve as the reference of " + o.file +
                       ": " + why);
  }
  std::int64_t steps_so_far = 0, gather_failures = 0;
  for (std::size_t i = 0; i < scored.size(); ++i) {
    const auto& e = out.windows[i].evidence;
    const auto& ranks = scored[i].ranks;
    steps_so_far += e.steps;
    gather_failures += e.gather_ok ? 0 : 1;
    if (o.reporters != nullptr) {
      const formats::MetricsState counts{"score", static_cast<std::int64_t>(i + 1), steps_so_far, -1, gather_failures};
      if (auto why = o.reporters->window({e, counts}); !why.empty()) throw InputError(why);
    }
    out.packets += formats::evidence_to_json(e, ranks).dump() + "\n";
    out.tables += formats::evidence_table(e, "sf-testbed score " + o.file + " (window " + std::to_string(i + 1) + " of " +
                                                 std::to_string(scored.size()) + ")",
                                          ranks);
    if (i + 1 < scored.size()) out.tables += "\n";
    if (scored.size() > 1)
      out.answers += "# window " + std::to_string(i + 1) + " of " + std::to_string(scored.size()) + ": steps " +
                     std::to_string(e.first_step) + ".." + std::to_string(e.last_step) + "\n";
    out.answers += answer_text(out.windows[i], ranks);
  }
  out.packets += detect_packet;
  out.tables += detect_text;
  out.answers += detect_text;
  out.answers += "# scored: " + o.file + ", " + std::to_string(scored.size()) + " window(s), " + std::to_string(steps_so_far) +
                 " step(s)\n" + formats::details_pointer("--json");
  return out;
}

}  // namespace sf::testbed
