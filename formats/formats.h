// sf::formats — the project's public file and packet formats (docs/formats.md):
// stage-matrix JSON Lines (sf.stages/1) and wide CSV, the evidence packet (sf.evidence/1),
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
struct Window {
  frontier::StageMatrix matrix;
  frontier::TelemetryInput telemetry;
  std::vector<RankInfo> ranks;   ///< empty when the file carries no identity
  std::int64_t header_line = 0;  ///< 1-based line of the window's header (CSV: 1)
};

struct ReadOptions {
  std::optional<MatrixFormat> format;  ///< default: by extension
  int window_steps = 0;                ///< > 0: split each file window into windows of this many steps
  int world_size = 0;                  ///< CSV only: > 0 overrides max(rank) + 1
  int accumulation = 1;                ///< CSV only
};

/// Reads a stage-matrix file. Throws FormatError (file:line) on malformed input, including an
/// empty file, bad JSON, truncated lines, non-numeric/negative/NaN durations, wrong vector
/// length, ranks outside the world size, duplicate (step, rank) records and wrong schemas.
std::vector<Window> read_stage_file(const std::string& path, const ReadOptions& opt = {});
/// Parses in-memory text; `name` is used in error messages.
std::vector<Window> parse_stage_text(std::string_view text, const std::string& name, MatrixFormat format,
                                     const ReadOptions& opt = {});

/// Writes one window as JSON Lines: header (with window span, telemetry, identity) then one
/// record per present (step, rank). Doubles round-trip exactly.
void write_jsonl(std::ostream& out, const Window& w);
/// Writes a window as wide CSV `step,rank,<explicit stages…>[,wall]` (no side evidence).
void write_csv(std::ostream& out, const frontier::StageMatrix& m);

/// The evidence packet (schema sf.evidence/1), field order as documented.
nlohmann::ordered_json evidence_to_json(const frontier::Evidence& e, const std::vector<RankInfo>& ranks = {});

/// Labeler configuration as JSON (same field names as frontier::LabelConfig).
nlohmann::ordered_json config_to_json(const frontier::LabelConfig& c);
/// Applies the keys present in j onto cfg; unknown keys or wrong types throw FormatError(file, 0, …).
void apply_config_json(const nlohmann::json& j, frontier::LabelConfig& cfg, const std::string& file);
frontier::LabelConfig read_config_file(const std::string& path, frontier::LabelConfig base = {});

/// Writes content to path through a temporary file in the same directory and rename(2), so a
/// reader sees the old file or the new one, never a torn one. Throws std::runtime_error.
void write_file_atomic(const std::string& path, std::string_view content);

/// Renders the human-readable table `sf-testbed score` prints for one window.
std::string evidence_table(const frontier::Evidence& e, const std::string& title, const std::vector<RankInfo>& ranks = {});

}  // namespace sf::formats
