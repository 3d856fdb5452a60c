// sf::formats — the project's public file and packet formats (docs/formats.md):
// stage-matrix JSON Lines (sf.stages/1) and wide CSV, the evidence packet (sf.evidence/6),
// labeler configuration files, and atomic file writes. Knows sf::frontier; no MPI, no clock.
#pragma once

#include "sf/frontier/frontier.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sf::formats {

inline constexpr std::string_view kStagesSchema = "sf.stages/1";

/// Bad input: what() is one line "FILE:LINE: what was wrong, expected what".
class FormatError : public std::runtime_error {
public:
  FormatError(const std::string& file, std::int64_t line, const std::string& message);
  const std::string& file() const { return file_; }
  std::int64_t line() const { return line_; }

private:
  std::string file_;
  std::int64_t line_;
};

enum class MatrixFormat { jsonl, csv };
/// By extension: .jsonl/.ndjson/.json → jsonl, .csv → csv; nullopt otherwise.
std::optional<MatrixFormat> format_from_path(std::string_view path);

/// Identity of one rank (TraceML's lesson: local rank alone is ambiguous across nodes).
struct RankInfo {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string hostname;
  bool operator==(const RankInfo&) const = default;
};

/// One window of a stage-matrix file (a header line opens a window; the next header closes it).
/// How a window's contributions reached rank 0 over the recorder's MPI gather (packets carry it
/// as "gather"); mode "" when the window was not gathered (read from a file).
struct GatherStats {
  std::string mode;        ///< "flat" (every rank to rank 0) or "node" (one relay per node)
  int nodes = 0;           ///< nodes (shared-memory domains) of the job
  int messages = 0;        ///< messages rank 0 received for the window
  std::int64_t bytes = 0;  ///< bytes of those messages
  /// Rank 0's monotonic clock (ns) when it closed the window (not in the packet): the start of
  /// its receive-to-scored latency.
  std::int64_t closed_ns = 0;
};

struct Window {
  frontier::StageMatrix matrix;
  frontier::TelemetryInput telemetry;
  std::vector<RankInfo> ranks;   ///< empty when the file carries no identity
  std::int64_t header_line = 0;  ///< 1-based line of the window's header (CSV: 1)
  GatherStats gather;            ///< gathered windows only
};

/// The largest world size either matrix format can express (ranks are 0..2^24 − 1).
inline constexpr int kWorldSizeCeiling = 1 << 24;

/// What one read may hold, checked before anything of that size is allocated, so hostile or
/// mistaken input is refused in one line instead of exhausting memory (docs/formats.md,
/// "Limits"). Each can be raised: score --max-file-size, --max-stages, --max-world-size,
/// --max-window-steps, --max-values.
struct ReadLimits {
  std::int64_t max_file_bytes = std::int64_t{4} << 30;  ///< bytes of the file
  /// Bytes of one line (a JSONL record or header, a CSV row), checked as bytes arrive: a stream
  /// with no line break (/dev/zero) is refused at this bound, and no line is parsed past it.
  std::int64_t max_line_bytes = std::int64_t{16} << 20;
  /// import kineto: timed events one trace may keep (32 bytes each, checked as they come: memory
  /// follows what the import keeps, not the size of the text; 2^22 = 128 MiB).
  std::int64_t max_events = std::int64_t{1} << 22;
  int max_stages = 1024;                                ///< explicit stages in a header
  int max_world_size = 65536;                           ///< world size of a window (≤ kWorldSizeCeiling)
  std::int64_t max_window_steps = 1000000;              ///< steps a file window spans (before --window splits it)
  std::int64_t max_values = 100000000;                  ///< steps × ranks with records × stages of a file window
};

struct ReadOptions {
  std::optional<MatrixFormat> format;  ///< default: by extension
  int window_steps = 0;                ///< > 0: split each file window into windows of this many steps
  int world_size = 0;                  ///< CSV only: > 0 overrides max(rank) + 1
  int accumulation = 1;                ///< CSV only
  ReadLimits limits;
};

/// Reads a stage-matrix file. Throws FormatError (file:line) on malformed input, including an
/// empty file, bad JSON, truncated lines, non-numeric/negative/NaN durations, wrong vector
/// length, ranks outside the world size, duplicate (step, rank) records, wrong schemas, names
/// that are not printable UTF-8, sums past frontier::kMaxWindowSeconds and input beyond
/// opt.limits. CSV as spreadsheets write it is accepted (docs/formats.md §2).
std::vector<Window> read_stage_file(const std::string& path, const ReadOptions& opt = {});
/// Parses in-memory text; `name` is used in error messages.
std::vector<Window> parse_stage_text(std::string_view text, const std::string& name, MatrixFormat format,
                                     const ReadOptions& opt = {});

// ---- streaming (docs/formats.md, "Streaming") --------------------------------------------------

/// What a streamed window's consumer knows before its first step: the facts read_stage_file
/// puts in the Window, and the layout (schema, world size, rank layout, roles) of every step.
struct WindowHead {
  frontier::StageMatrix layout;  ///< no steps; StageMatrix::same_layout(layout, id, 1) is a step of it
  frontier::TelemetryInput telemetry;
  std::vector<RankInfo> ranks;
  std::int64_t header_line = 0;
};

/// Receives the windows of a streamed file, one step at a time.
class StepSink {
public:
  virtual ~StepSink() = default;
  /// Opens a window. Called again before end_window, it restarts the window (the stream learned
  /// its rank layout only at its end): forget the steps since the last begin_window.
  virtual void begin_window(const WindowHead& head) = 0;
  /// One step of the window (steps() == 1, the head's layout), ids increasing. A step without
  /// records is a missing step, sent where it bounds the window (its first or last step).
  virtual void add_step(const frontier::StageMatrix& step) = 0;
  virtual void end_window() = 0;
};

enum class StreamStatus {
  streamed,  ///< every window went to the sink, as read_stage_file would have returned it
  whole,     ///< not streamed: read the file with read_stage_file, and drop what the sink got
};

/// Reads a stage-matrix file as read_stage_file(path, opt) does, but hands it to sink step by step
/// in memory that does not grow with the file (a read buffer, one step, the set of ranks seen).
/// The windows, steps, values and rank layouts are those read_stage_file returns. Streams when
/// every window's records come in nondecreasing step order; returns StreamStatus::whole otherwise,
/// and for any problem that is not one line's error (a duplicate record, a sum past the limits,
/// a sink that throws, not a regular file, ...), so that read_stage_file words it. Throws
/// FormatError only for a line's error that read_stage_file reports first, with its message.
/// why (optional) is set to the reason for StreamStatus::whole.
StreamStatus stream_stage_file(const std::string& path, const ReadOptions& opt, StepSink& sink, std::string* why = nullptr);

/// Writes one window as JSON Lines: header (with window span, telemetry, identity) then one
/// record per present (step, rank). Doubles round-trip exactly.
void write_jsonl(std::ostream& out, const Window& w);
/// Writes a window as wide CSV `step,rank,<explicit stages…>[,wall]` (no side evidence); a stage
/// name with a comma, quote or edge blank is quoted as RFC 4180 says.
void write_csv(std::ostream& out, const frontier::StageMatrix& m);

/// The evidence packet (schema sf.evidence/6), field order as documented.
nlohmann::ordered_json evidence_to_json(const frontier::Evidence& e, const std::vector<RankInfo>& ranks = {});

/// Labeler configuration as JSON (same field names as frontier::LabelConfig).
nlohmann::ordered_json config_to_json(const frontier::LabelConfig& c);
/// Applies the keys present in j onto cfg; unknown keys, wrong types and values outside a key's
/// range (docs/formats.md §4) throw FormatError(file, 0, …).
void apply_config_json(const nlohmann::json& j, frontier::LabelConfig& cfg, const std::string& file);
/// Parses a labeler configuration from text (at most kMaxConfigBytes); `name` is used in errors.
frontier::LabelConfig parse_config_text(std::string_view text, const std::string& name, frontier::LabelConfig base = {});
frontier::LabelConfig read_config_file(const std::string& path, frontier::LabelConfig base = {});
inline constexpr std::size_t kMaxConfigBytes = 1 << 20;

/// Writes content to path through a temporary file in the same directory and rename(2), so a
/// reader sees the old file or the new one, never a torn one. Throws std::runtime_error.
void write_file_atomic(const std::string& path, std::string_view content);

/// The diagnosis as one sentence for a person (no "# diagnosis: " prefix, no newline): what got
/// slower, on which rank and host, by how much per step, against what, and where a wait surfaces.
std::string diagnosis_line(const frontier::Evidence& e, const std::vector<RankInfo>& ranks = {});
/// One line of what fixing the diagnosis' culprits would buy (frontier::WhatIf): "fixing rank 7
/// data.next_wait would give ~X ms/step (−Y %): A -> B ms/step; ...", "nothing to gain ..." or why
/// it is not available (docs/diagnosis.md, "What fixing it would buy").
std::string whatif_line(const frontier::Evidence& e, const std::vector<RankInfo>& ranks = {});
/// "# reference too noisy: ..." when the reference's exposed floor passes 3 % of the step (with
/// the reference steps that would bring it under), else "".
std::string reference_advice(const frontier::Differential& d);

inline constexpr std::string_view kReferenceSchema = "sf.reference/1";
/// A reference file (sf.reference/1, one line): the reference's name and the evidence packet it is
/// made from. `run --out` and sf_torch write theirs as reference.json, so that `score --reference`
/// on it names the reference as the run did (its packets then match byte for byte).
nlohmann::ordered_json reference_to_json(const frontier::Evidence& e, const std::string& name);

/// A reference (frontier::Reference) read from a file: a stage-matrix dump of a healthy run (scored
/// with `cfg`; several windows are one run), an evidence packet (`score --json`, `run --out`'s
/// window_NNN.json; the first packet of a file of them; named by the path) or a reference file
/// (sf.reference/1, named by its "name"). Throws FormatError naming the file.
frontier::Reference read_reference(const std::string& path, const frontier::LabelConfig& cfg);
/// A reference from an evidence packet's JSON (sf.evidence/6; /3 packets have no standings, so
/// their ranks are compared by own-work levels; /2 packets have no step spread either, so their
/// noise floor is min_effect alone). Throws FormatError(name, 0, ...) on a packet
/// without the fields a reference needs.
frontier::Reference reference_from_packet(const nlohmann::json& packet, const std::string& name);

/// The packet's "diagnosis" object alone (a change point's diagnosis carries it too).
nlohmann::ordered_json diagnosis_to_json(const frontier::Evidence& e, const std::vector<RankInfo>& ranks = {});

/// What the metrics file says beyond the latest window's evidence: counts since the start.
struct MetricsState {
  std::string source;                ///< "run", "sim", "score", "sf_torch" (the `source` label)
  std::int64_t windows = 0;          ///< windows scored so far, this one included
  std::int64_t steps = 0;            ///< steps scored so far
  std::int64_t change_points = -1;   ///< confirmed so far (--detect); −1: not detecting (no sample)
  std::int64_t gather_failures = 0;  ///< windows whose gather failed so far
};
/// The latest window as Prometheus text exposition (format 0.0.4; docs/formats.md, "Metrics"):
/// per-stage exposed advance and share (label `stage`), step time, the diagnosis' stage and rank,
/// labels, change points, telemetry health. `--metrics FILE` writes it atomically each window.
std::string metrics_text(const frontier::Evidence& e, const MetricsState& s);

/// The answer first (issue 41): the lines a person came for, each "# ...\n": the diagnosis, what
/// fixing it would buy, how sure (its confidence and the floor a change had to pass, in words),
/// and the window's notes (why its evidence is downgraded), nothing of the paper's accounting.
/// `evidence_table` starts with the same diagnosis and what-if and goes on with the frontier table,
/// gates and labels (`--details`).
std::string answer_lines(const frontier::Evidence& e, const std::vector<RankInfo>& ranks = {});
/// The last line of a short answer: where the details are and what the terms mean.
std::string details_pointer(std::string_view where_else);

/// Renders the human-readable table `sf-testbed score --details` prints for one window.
std::string evidence_table(const frontier::Evidence& e, const std::string& title, const std::vector<RankInfo>& ranks = {});

// ---- trace import (docs/kineto.md) -------------------------------------------------------------

/// A --stage-map file (docs/kineto.md, "Stage map"): event-name patterns mapped to a stage of
/// the default schema or to a new stage, which the imported schema then gains.
struct KinetoStageRule {
  std::string stage;               ///< a default explicit stage, or a new one
  std::vector<std::string> match;  ///< fnmatch(3) patterns on the whole event name (case-sensitive)
  bool any_thread = false;         ///< match on every CPU thread, not only the main thread
  std::string after;               ///< a new stage: the stage it follows ("" = after the last explicit stage)
};
struct KinetoStageMap {
  std::vector<KinetoStageRule> rules;  ///< in file order: the first rule that matches a name wins
};
/// Parses a stage map (JSON, at most kMaxConfigBytes); `name` is used in errors. Throws
/// FormatError (one line) on bad JSON, duplicate or unknown keys, empty patterns, a stage named
/// twice with different places, an `after` that names no stage, the residual as a target.
KinetoStageMap parse_kineto_stage_map(std::string_view text, const std::string& name);
KinetoStageMap read_kineto_stage_map(const std::string& path);

/// Options of the Kineto import (docs/kineto.md, "Rank and world size"): world_size > 0 names the
/// job's world size where traces carry no distributedInfo.world_size and is checked against it
/// where they do; rank >= 0 does the same for distributedInfo.rank, for a single trace.
struct KinetoOptions {
  int world_size = 0;
  int rank = -1;
  KinetoStageMap stage_map;
  /// Several traces with no ProfilerStep id in common are refused (two jobs' traces, most likely);
  /// true imports them, and the window's telemetry says so.
  bool allow_disjoint = false;
  /// As for score (docs/formats.md, "Limits"): max_file_bytes bounds each trace file and its
  /// decompressed text (checked as it is inflated); max_world_size, max_window_steps and
  /// max_values bound the window, checked before it is allocated; max_stages bounds the stages
  /// a stage map may add.
  ReadLimits limits;
};

/// Time of a step that no stage explains (the residual, step.other), by the main-thread event
/// that spans it.
struct KinetoUnmapped {
  std::string name;          ///< the outermost main-thread event over that time, or "(no main-thread event)"
  double seconds_per_step = 0;
};

/// What the importer read from one trace file, for the user to check against the trace.
struct KinetoTrace {
  std::string file;
  std::string form;          ///< "kineto" (object with traceEvents) or "event array" (no distributedInfo)
  int rank = -1;
  int world_size = 0;
  std::string rank_source;   ///< "distributedInfo", "--rank" or "file name"
  std::string world_source;  ///< "distributedInfo" or "--world-size"
  std::int64_t first_step = 0, last_step = -1;
  int steps = 0;
  std::vector<int> stage_steps;          ///< per explicit stage: steps in which it was found
  std::vector<std::string> stage_rules;  ///< per explicit stage: the markers that placed it
  std::string collectives;   ///< where sync-wait side evidence came from, or "none"
  std::int64_t events = 0;   ///< timed events read (X, and B/E pairs)
  std::int64_t kept = 0;     ///< of which kept for the reduction (CPU side, device collectives)
  double other_share = 0;    ///< step.other's share of the summed step walls
  std::vector<KinetoUnmapped> unmapped;  ///< the largest contributors to step.other, largest first (at most 5)
  /// Backward taken as the span of autograd events (no '## backward ##' annotation, no stage-map
  /// rule): the user annotations (record_function ranges) inside it, by their time there, largest
  /// first (at most 5): work the span swallowed that a --stage-map could name.
  std::vector<KinetoUnmapped> in_fallback;
};

struct KinetoImport {
  Window window;             ///< default five stages (plus a stage map's), R = world size, steps = ProfilerStep ids
  std::vector<KinetoTrace> traces;
  std::vector<frontier::RankRange> missing_ranks;  ///< ranks of the job without a trace, ascending ranges
  std::int64_t missing_rank_count = 0;
  /// The stage groups (schema order, the residual last) in which some trace shows a collective
  /// (NCCL/RCCL kernels, gloo:*, c10d::*, record_param_comms, nccl:*; any thread) overlapping
  /// the stage's time on the main thread: where a wait can surface (docs/kineto.md).
  std::vector<std::string> wait_stages;
};

/// One line per trace saying what step.other holds ("FILE (rank R): step.other 86 % of the step
/// walls: ## sparse_data_dist ## 149 ms/step, ..."); empty for a trace without unmapped time.
std::string kineto_unmapped_line(const KinetoTrace& t);
/// "FILE (rank R): model.backward_cpu_wall is the span of autograd events and holds annotations
/// dispatch 35.3 ms/step, ...; --stage-map can give them stages"; empty when in_fallback is.
std::string kineto_fallback_line(const KinetoTrace& t);

/// Reduces PyTorch-profiler (Kineto) Chrome traces, one per rank (.json or .json.gz), to one
/// stage-matrix window (sparse when some ranks have no trace), reading each trace in one pass in
/// memory bounded by what it keeps. Throws FormatError naming the file and what is missing or
/// wrong (no ProfilerStep#N; overlapping, nested or identical steps; a duplicate key; no backward
/// events; no rank or world size; duplicate ranks; bad timestamps; corrupt gzip; input beyond
/// opt.limits, …).
KinetoImport import_kineto(const std::vector<std::string>& files, const KinetoOptions& opt = {});

/// One trace already in memory: its bytes (JSON, or gzip'd JSON) and the name that messages and
/// the rank-from-file-name rule use.
struct KinetoBuffer {
  std::string name;
  std::string_view bytes;
};
/// import_kineto over traces in memory (the fuzz harness; callers that hold the bytes).
KinetoImport import_kineto_buffers(const std::vector<KinetoBuffer>& traces, const KinetoOptions& opt = {});

}  // namespace sf::formats
