// sf::testbed, pure half — judging evidence, no MPI, no processes: the verdict against the
// injected truth, a reference's diagnosis, the detectability sensitivity, the model's scoring,
// watching a run over time (--detect, --trace), `sim` and `score` as calls. What `run` does on
// its ranks is in run.h; what is written for the user in report.h (issue 41, design change 19).
#pragma once

#include "sf/detect/detect.h"
#include "sf/formats/formats.h"
#include "sf/frontier/frontier.h"
#include "sf/inject/inject.h"
#include "sf/recorder/recorder.h"
#include "sf/sim/sim.h"
#include "sf/verify/verify.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sf::testbed {

/// --trace: Chrome trace-event JSON of a window (docs/detect.md, "Timelines").
struct TraceOptions {
  std::string file;        ///< empty: no trace
  int max_steps = 500;     ///< --trace-steps: steps kept (around each change and truth transition, then the last)
  int max_ranks = 64;      ///< --trace-ranks: ranks 0..N-1, plus the injected targets and up to N leaders
};

// ---- verdicts -----------------------------------------------------------------------------------

/// The verdict of one scored window against the plan's truth, as both `run` and `sim` report it.
struct VerdictReport {
  verify::Verdict verdict;
  bool claim_pass = false;
  std::string claim;         ///< the scenario's claim (what --check asserts)
  std::string truth_text;    ///< "# truth: ..." line
  std::string verdict_text;  ///< verdict, baseline and check lines
  std::string answer_text;   ///< of verdict_text, what the short answer shows: the diagnosis' verdict, the what-if's check, the check
  nlohmann::ordered_json json;
};
/// `reference` (optional): the healthy reference window's evidence (same configuration, no
/// fault); with it the verdict says how much of the delay reached the step and which stage took
/// it, and can call a confident misroute. The JSON's "shuffled" is the same evidence judged
/// against a truth drawn from `shuffle_seed` among the stages and ranks the plan does not name
/// (the shuffled-target null arm of the experiments; docs/experiments.md).
VerdictReport verdict_report(const inject::FaultPlan& plan, const frontier::Evidence& e, double makespan_gap,
                             const frontier::Evidence* reference = nullptr, std::uint64_t shuffle_seed = 0);

/// e's diagnosis against ref (frontier::diagnose_against) when the two can be compared; otherwise
/// e keeps its cohort diagnosis. Returns "" or why the reference was not used.
std::string apply_reference(frontier::Evidence& e, const frontier::Reference& ref);

/// Per reporting group: advance seconds per scored step (the reference a verdict compares with).
std::vector<double> advance_per_step(const frontier::Evidence& e);
/// The reference's advance per step that e was diagnosed against (e.differential set): e's own
/// minus its change.
std::vector<double> reference_advance(const frontier::Evidence& e);

// ---- sensitivity of the detectability threshold (model-driven, no MPI) ---------------------------

/// One setting of `experiment sensitivity`: the competing stage's cost, the jitter, the rank
/// count and whether gradient sync overlaps backward.
struct SensitivitySetting {
  std::string scenario = "data_tail";
  double backward_scale = 1;       ///< backward compute and launch costs × this
  double jitter_sigma = 0.03;      ///< lognormal sigma per cost, rank and step
  int ranks = 8;
  sim::SyncMode sync_mode = sim::SyncMode::bucketed;
  std::optional<double> comm_gib_s;  ///< the model transport's bandwidth; empty: the profile's
};
struct SensitivityOptions {
  std::string profile = std::string(sim::kDefaultProfile);
  std::vector<double> delays_ms;   ///< ascending grid the threshold is searched on
  int seeds = 5;                   ///< seeds 1..seeds per delay
  int min_hits = 4;                ///< a delay is detected when at least this many seeds route it
  int steps = 40;
  frontier::LabelConfig label;
};
struct SensitivityResult {
  SensitivitySetting setting;
  double median_step_ms = 0;       ///< healthy reference, median over seeds
  double backward_advance_ms = 0;  ///< healthy backward advance per step (the competing stage)
  /// Smallest grid delay from which every larger grid delay is routed top-1 (strict: a top-1
  /// within eta_A of the runner-up is a tie, not a hit) / into the top-2 in >= min_hits seeds;
  /// empty when the grid never gets there.
  std::optional<double> threshold_top1_ms, threshold_top2_ms;
  std::vector<int> top1, ties, top2, misroutes;  ///< per grid delay: seeds with that outcome
  /// The prediction's inputs (docs/testbed.md, "The threshold, predicted"): the injected stage's
  /// and the whole step's healthy advance per step, and its strongest other stage (the
  /// competitor) healthy and, per grid delay, in the faulty window; medians over seeds.
  std::string competitor;
  double target_base_ms = 0, healthy_total_ms = 0, competitor_healthy_ms = 0;
  std::vector<double> competitor_faulty_ms, target_faulty_ms, total_faulty_ms;
  double eta_a = 0.05;
};
/// The smallest delay d at which the injected stage leads its competitor by more than eta_A of
/// the step, when all of d reaches the injected stage: (competitor − target_base + eta_A·rest) /
/// (1 − eta_A), with rest the step's advance without the delay. Never below 0.
double predicted_threshold_ms(double competitor_ms, double target_base_ms, double rest_ms, double eta_a);
/// Runs the timeline model (sim::model_window) for every delay and seed of one setting and
/// scores each window against its truth and a healthy reference of the same seed. Throws
/// std::invalid_argument with one line on a bad profile or setting.
SensitivityResult sensitivity(const SensitivityOptions& opt, const SensitivitySetting& s);

/// The cross-check of the exposed makespan Σ_t F[t,S] against the slowest rank's measured step
/// times Σ_t max_r wall[t,r]; gap = |exposed − wall sum| / exposed (0 when nothing is exposed).
struct MakespanCheck {
  double wall_sum_s = 0, gap = 0;
};
MakespanCheck makespan_check(const frontier::Evidence& e, const frontier::StageMatrix& m);

/// `sim`'s scoring of the model. Streamed: the model writes one step buffer while the other is
/// scored by frontier::StreamingAccumulator (two threads when threads >= 2), so memory is O(R·S)
/// however many steps; whole: model_window + evaluate() on the N × R × S matrix. Both give the
/// same evidence (the streaming path needs a gain baseline without the whole window, i.e. not
/// rank_median).
struct ModelScore {
  frontier::Evidence evidence;
  MakespanCheck makespan;
  bool streamed = false;
  int threads = 1;
};
/// Each step score_model_streaming has added, with what its accumulator formed of it (StepFacts),
/// on the scoring thread in step order: sim --detect feeds its Watch from it instead of a matrix.
using StepSink = std::function<void(const frontier::StageMatrix& one_step, const frontier::StepFacts& facts)>;
ModelScore score_model_streaming(const sim::ModelConfig& cfg, const inject::FaultPlan& plan,
                                 const frontier::LabelConfig& label, int threads, const StepSink& sink = {});
ModelScore score_model_whole(const sim::ModelConfig& cfg, const inject::FaultPlan& plan,
                             const frontier::LabelConfig& label);
/// What the verdict reads of the healthy reference, by accounting alone (no labeler: about a
/// seventh of the scorer's work), on one thread: the evidence's schema, steps,
/// exposed_makespan_s, median_step_s and advances_s, bit-identical to those of
/// score_model_streaming and score_model_whole, and the step spreads a reference needs
/// (advance_sd_s, exposed_sd_s); its other fields are left empty.
ModelScore score_model_accounting(const sim::ModelConfig& cfg, const inject::FaultPlan& plan);
/// score_model_streaming of cfg and score_model_accounting of its healthy twin in one go: the twin
/// (same ranks and cost draws, its own plan; sim::ModelStepper::add_twin) is stepped in the model's
/// passes and accounted on the model's thread, so the draws are taken once for both and no third
/// thread runs. .run and .twin equal those two calls' results bit for bit.
struct ModelScorePair {
  ModelScore run, twin;
};
ModelScorePair score_model_streaming_with_twin(const sim::ModelConfig& cfg, const inject::FaultPlan& plan,
                                               const frontier::LabelConfig& label, int threads,
                                               const sim::ModelConfig& healthy, const inject::FaultPlan& healthy_plan,
                                               const StepSink& sink = {});

/// Truth records as they appear in run.json.
nlohmann::ordered_json truth_json(const std::vector<inject::TruthRecord>& truth);

/// One window's line in windows.jsonl (run --out, and sf_torch's out_dir): its steps, shares,
/// labels, diagnosis, routing set, median step, gather_ok, and whether its packet reached the disk
/// ("packet_written"; when false, "packet_error" says why). `packet` is the window's evidence
/// packet (sf.evidence/6); `packet_error` empty: the packet was written.
nlohmann::ordered_json window_summary(const nlohmann::ordered_json& packet, int index, const std::string& packet_error);

// ---- watching over time (--detect, --trace; docs/detect.md) ------------------------------------

/// Change points of F[t,S] with the diagnosis window at each, periodicity and culprit stability,
/// as JSON ("change_points", "detector", "series", "periodicity", "culprit_stability", and with a
/// plan "truth_detection") and as table lines.
struct DetectReport {
  nlohmann::ordered_json json;
  std::string text;
  std::vector<detect::ChangePoint> changes;
  /// The regime before the first slowdown, as a reference for a window's diagnosis; empty when
  /// no slowdown was confirmed with a diagnosis.
  std::optional<frontier::Reference> pre_change;
};
/// Consecutive windows (same schema and world size) as one window over all their steps, gaps
/// included; throws std::invalid_argument when schemas or world sizes differ, or when that window
/// would pass `limits` (its span against max_window_steps, steps x ranks x stages against
/// max_values), before allocating it.
formats::Window concat_windows(const std::vector<formats::Window>& windows, const formats::ReadLimits& limits = {});

// ---- one window judged, whatever made it (issue 41) -------------------------------------------

/// What a window is judged against: a healthy reference (its diagnosis), the injected truth (its
/// verdict). Every front-end fills what it has: `run` and `sim` a reference and the plan, `score`
/// a reference file or the regime before a detected change, sf_torch a reference window and the
/// trainer's plan.
struct JudgeOptions {
  const frontier::Reference* reference = nullptr;           ///< none: the window's cohort diagnosis stands
  const inject::FaultPlan* plan = nullptr;                  ///< the truth; none: no verdict
  const frontier::Evidence* reference_evidence = nullptr;   ///< the reference's own evidence, for the verdict
  double makespan_gap = 0;                                  ///< Σ F[t,S] against the slowest wall sum (the verdict's check)
  std::uint64_t shuffle_seed = 0;                           ///< the verdict's shuffled-target null
};
/// One window judged: the same record from `run`, `sim`, `score` and sf_torch, which their
/// reporters (table, run.json, trace, metrics, plot) read.
struct Outcome {
  frontier::Evidence evidence;            ///< scored, diagnosed against the reference when it could be
  std::string reference_problem;          ///< why a reference given was not used ("" when it was, or none given)
  std::optional<VerdictReport> verdict;   ///< against the truth, where one is known
  std::optional<DetectReport> detect;     ///< --detect: the watch over the run
  std::optional<nlohmann::ordered_json> trace;  ///< --trace's Chrome trace-event JSON (written by its reporter)
};
/// The one road from evidence to an answer: `e` diagnosed against `o.reference` (when the two can
/// be compared: apply_reference) and judged against `o.plan`'s truth (verdict_report). Pure.
Outcome judge(frontier::Evidence e, const JudgeOptions& o);
/// The answer first, as every front-end prints it: the diagnosis, the what-if and how sure
/// (formats::answer_lines), the verdict's short lines, the watch's report.
std::string answer_text(const Outcome& o, const std::vector<formats::RankInfo>& ranks = {});

struct WatchOptions {
  frontier::LabelConfig label;
  std::optional<detect::DetectConfig> detect;  ///< --detect
  std::optional<TraceOptions> trace;           ///< --trace (the file is the caller's business)
  int stability_window = 20;                   ///< steps per culprit-stability window ...
  bool stability_per_window = false;           ///< ... unless the fed windows are the stability windows
  std::string stability_stage;                 ///< --stability-stage: the group followed ("": chosen, docs)
  const inject::FaultPlan* plan = nullptr;     ///< the injected truth (sim, run); null for score
  /// run: diagnose each change when it is confirmed, keep the evidence of the segments between
  /// changes as they go by and the trace's steps as they pass (bounded memory, nothing else of a
  /// window is kept). Otherwise report() and trace() read the whole matrix they are given.
  bool online = false;
  /// online: the segments' medians past this many steps come from bins (RunConfig::exact_median_steps).
  std::size_t exact_median_steps = 0;
};

/// A change as the watch saw it when it was confirmed: the diagnosis window opened at that
/// point (before: the segment since the previous change; after: the change to the latest step).
struct ConfirmedChange {
  detect::ChangePoint change;
  std::string line;             ///< one line for a person (no newline)
  nlohmann::ordered_json json;  ///< as change_points[] has it, with "before"/"after" so far
};

/// Watching a run over time: fed window by window (run: rank 0 at the safe point; sim and score:
/// the whole window at once), it runs the change-point detector on F[t,S], keeps the series
/// (the last kSeriesSteps steps), culprit-stability tallies per window, and in online mode the
/// segment evidence for the diagnosis and the trace's steps. Its state is bounded whatever the
/// length of the run (docs/detect.md, "Memory").
class Watch {
public:
  static constexpr int kSeriesSteps = 20000;
  explicit Watch(WatchOptions o);
  ~Watch();
  Watch(Watch&&) noexcept;
  Watch& operator=(Watch&&) noexcept;
  /// The next window (its steps follow the previous window's). The watch keeps `m` only while it
  /// needs its last steps (online). `ranks`: identities for the trace's process names.
  std::vector<ConfirmedChange> observe(std::shared_ptr<const frontier::StageMatrix> m,
                                       const std::vector<formats::RankInfo>& ranks = {});
  /// One step that a frontier::StreamingAccumulator has accounted (`facts` from its add_step), as
  /// observe() of a one-step window but without accounting it again (sim's streamed --detect).
  /// Online only (throws std::logic_error otherwise); the watch copies the step where it holds
  /// it, so the caller may reuse its buffer.
  std::vector<ConfirmedChange> observe_step(const frontier::StageMatrix& one_step, const frontier::StepFacts& facts);
  /// The changes kept so far (the detector's last max_changes_kept).
  std::vector<detect::ChangePoint> changes() const;
  /// After observe() of a window that is a culprit-stability window (--detect, stability_per_window):
  /// culprit_stability as report() has it, as of that window (the class so far, `per_window` holding
  /// that window's record), for the window's evidence packet; null otherwise. The stage followed is
  /// chosen by the report's rules as far as they are known then (not the period rule: it needs the
  /// whole series).
  nlohmann::ordered_json window_stability() const;
  /// --detect's report, once, after the last window. `whole`: the run's whole matrix when the
  /// caller holds it (sim, score; run with the rank_median baseline): the diagnosis reads it.
  /// Otherwise (online) the segments kept as the run went. Throws std::invalid_argument with one
  /// line for an unknown --stability-stage.
  DetectReport report(const frontier::StageMatrix* whole = nullptr);
  /// --trace's Chrome trace-event JSON: from `whole` (offline) or the steps kept online. After
  /// report() when detecting, so the change instants are final.
  nlohmann::ordered_json trace(const frontier::StageMatrix* whole = nullptr,
                               const std::vector<formats::RankInfo>& ranks = {}) const;
  /// Values held: detector, series, stability records, pending steps, diagnoses, the trace's
  /// steps (bounded by their caps, not by the length of the run; tests).
  std::size_t state_size() const;

private:
  struct State;
  std::unique_ptr<State> s_;
};


// ---- sim: the model scored and judged ------------------------------------------------------------

/// `sf-testbed sim` as a call: the model's ranks under the plan, scored, diagnosed against a
/// healthy reference and judged against the truth (docs/testbed.md, "sim").
struct SimulateOptions {
  sim::ModelConfig cfg;
  frontier::LabelConfig label;
  bool whole = false;  ///< hold the whole N × R × S matrix (forced by keep_window, rank_median, a trace)
  int threads = 2;     ///< streaming: 2 runs the model beside the scorer, 1 alternates
  /// The healthy reference's own draw: its jitter and per-rank speeds (default: the run's seed
  /// without the fault).
  std::optional<std::uint64_t> reference_seed;
  std::optional<detect::DetectConfig> detect;  ///< --detect
  int stability_window = 20;
  std::string stability_stage;
  std::optional<TraceOptions> trace;           ///< --trace (its file is not written here)
  bool keep_window = false;                    ///< the model's stage matrix in the outcome (--dump)
};
/// What `simulate` found: the outcome (the evidence diagnosed against the healthy reference, the
/// verdict, what was asked beside them) and the model's side of it.
struct SimOutcome : Outcome {
  inject::FaultPlan plan;
  frontier::Evidence reference;  ///< the healthy reference's evidence (the run itself when nothing differs)
  std::string reference_name;
  std::uint64_t reference_seed = 0;
  MakespanCheck makespan;
  std::string scoring;           ///< "whole matrix" or "streamed, N thread(s)"
  formats::Window window;        ///< keep_window: the model's stage matrix
};
/// Scores the model. The options are checked by the caller (sim::validate, detect::validate,
/// the label config against the model's schema). Throws InputError for an unknown
/// --stability-stage or a trace that cannot be made.
SimOutcome simulate(SimulateOptions o);

// ---- score a file -------------------------------------------------------------------------------

/// Bad input to a library entry point: what() is one line that says what was wrong, where
/// (file:line, window, option) and what was expected; `sf-testbed` prints it and exits 2.
class InputError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// `sf-testbed score FILE` as a call (docs/formats.md).
struct ScoreFileOptions {
  std::string file;
  formats::ReadOptions read;                   ///< format, --window, --world-size, --accumulation, limits
  bool whole = false;                          ///< --whole: read each window whole, never stream
  std::string reference;                       ///< --reference FILE: a healthy dump or packet to diagnose against
  /// Told each window as it is scored (--metrics: report.h); a failure is an InputError.
  class Reporters* reporters = nullptr;
  frontier::LabelConfig label;
  std::optional<detect::DetectConfig> detect;  ///< --detect
  int stability_window = 20;                   ///< --stability-window (one window in the file)
  std::string stability_stage;                 ///< --stability-stage
  std::optional<TraceOptions> trace;           ///< --trace (its file is not written here)
};
struct ScoredFile {
  std::vector<Outcome> windows;  ///< each window judged (against --reference, or the regime before a detected change)
  std::string packets;  ///< one sf.evidence/6 line per window, then the sf.detect/1 line (--detect)
  std::string tables;   ///< the same for a person, in full (--details)
  std::string answers;  ///< the answer first: each window's diagnosis, what-if and how sure (the default)
  std::optional<nlohmann::ordered_json> trace;  ///< --trace's Chrome trace-event JSON
  bool streamed = false;                        ///< read step by step (docs/formats.md, "Streaming")
};
/// Reads, scores and (optionally) watches a stage-matrix file. Throws InputError for bad input
/// (the file, a window's values, the detector's configuration, a run past the limits).
ScoredFile score_file(const ScoreFileOptions& o);

}  // namespace sf::testbed
