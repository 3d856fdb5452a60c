// Private to formats/: the pieces of the stage-matrix readers that the whole-file reader
// (stage_file.cpp) and the streaming reader (stage_stream.cpp) share, so both accept the same
// lines with the same values and word every error alike.
#pragma once

#include "sf/formats/formats.h"
#include "sf/frontier/frontier.h"

#include <fast_float/fast_float.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sf::formats::detail {

/// An allocator whose resize() leaves the new elements uninitialised: a file's text is read over
/// at once and values are written before they are read, so zeroing them first (a memset of the
/// whole file) would be wasted.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
using Bytes = std::vector<char, UninitAllocator<char>>;

/// Closes a file descriptor when it goes out of scope (the readers' open files).
struct FdCloser {
  int fd;
  ~FdCloser();
};

class StrictJsonParser;

inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
/// A window without records, in either format (named at its header line).
inline constexpr const char* kNoRecords = "no records after the header; expected one record per (step, rank)";

/// "" when a header of n explicit stages fits the limits, else the message: the stage count
/// (max_stages), and the labeler's stage-by-stage table of (n + 1)^2 values (the residual is a
/// stage too), which a raised max_stages could otherwise make larger than memory before any
/// record is read.
inline std::string stage_count_error(std::size_t n, const ReadLimits& lim) {
  if (n > static_cast<std::size_t>(lim.max_stages))
    return "header names " + std::to_string(n) + " stages, above the limit of " + std::to_string(lim.max_stages) +
           "; expected fewer stages (raise the limit with --max-stages)";
  const double table = static_cast<double>(n + 1) * static_cast<double>(n + 1);
  if (table > static_cast<double>(lim.max_values))
    return "header names " + std::to_string(n) + " stages, whose stage-by-stage table holds " +
           std::to_string(static_cast<long long>(table)) + " values, above the limit of " + std::to_string(lim.max_values) +
           "; expected fewer stages (raise the limit with --max-values)";
  return "";
}

/// One parsed (step, rank) record waiting for its window to close.
struct Pending {
  std::int64_t step;
  std::int64_t line;
  std::size_t offset;  // into values
  double wall;
  double event_s = 0;
  std::int64_t sync_offset = -1;  // into sync values, explicit-stage count entries (NaN = null)
  double cpu_wait = std::numeric_limits<double>::quiet_NaN();  // side "cpu_wait" (NaN: none)
  int rank;
  int column = 0;  // the rank's column in the window's matrix
  bool has_wall;
  frontier::EventState event = frontier::EventState::unsampled;
};

struct PendingWindow {
  std::vector<std::string> stages;
  int world = 0;
  int accumulation = 1;
  std::vector<std::string> roles;
  std::optional<std::int64_t> span_first;
  std::optional<std::int64_t> span_steps;
  frontier::TelemetryInput telemetry;
  std::vector<RankInfo> ranks;
  std::int64_t header_line = 0;
  std::vector<Pending> records;
  std::vector<double> values;
  std::vector<double> sync_values;
  std::int64_t min_step = 0, max_step = 0;  // over the noted records (valid when noted > 0)
  std::int64_t noted = 0;                   // records note_step has seen
};

/// Text quoted in an error message: at most about `max` bytes, cut at a character boundary;
/// printable UTF-8 stays as it is, anything else shows its bytes as '?'.
std::string printable(std::string_view s, std::size_t max = 40);
std::string too_many_steps(const std::string& steps, const ReadLimits& lim);
/// Steps × ranks × stages of a dense window within lim.max_values (no overflow on the way).
bool values_fit(std::uint64_t steps, int world, int stages, const ReadLimits& lim);
/// Every record's step within the limit of steps a window may span, checked as records arrive.
void note_step(PendingWindow& pw, std::int64_t step, const std::string& file, std::int64_t line, const ReadLimits& lim);

// --- JSON Lines ---

/// A UTF-8 byte order mark (as Windows tools write one) is not part of the text.
std::string_view strip_bom(std::string_view text);
/// One non-blank JSONL line (its '\r' already removed) into obj, or FormatError naming the line.
void parse_json_line(StrictJsonParser& parser, std::string_view line, const std::string& file, std::int64_t line_no,
                     nlohmann::json& obj);
/// A header object into pw's header fields (pw's records untouched).
void parse_header(const nlohmann::json& h, const std::string& file, std::int64_t line, PendingWindow& pw, const ReadLimits& lim);
/// A record object appended to pw.records (its values to pw.values, pw.sync_values).
void parse_record(const nlohmann::json& o, const std::string& file, std::int64_t line, PendingWindow& pw, const ReadLimits& lim);

// --- CSV ---

bool blank(char c);
std::string_view trim(std::string_view s);
/// A line of blanks only (or none). (A line whose first byte is not blank is not blank: the
/// common case skips the call.)
inline bool blank_line(std::string_view line) { return (line.empty() || blank(line.front())) && trim(line).empty(); }

/// The refusal of a line past ReadLimits::max_line_bytes: line `line_no` of `file` (1-based).
FormatError line_too_long(const std::string& file, std::int64_t line_no, std::int64_t limit);
/// Throws line_too_long for the first line of `text` longer than `limit` bytes (lines end at '\n',
/// and for CSV also at a lone '\r'); one memchr pass.
void check_line_lengths(std::string_view text, const std::string& file, std::int64_t limit, bool csv);

/// Lines ended by "\n", "\r\n" or a lone "\r", numbered from 1; blank lines are skipped.
class CsvLines {
public:
  CsvLines(std::string_view text, std::size_t pos) : text_(text), pos_(pos) {}
  bool next(std::string_view& line) {
    while (pos_ < text_.size()) {
      std::size_t end = pos_;
      while (end < text_.size() && text_[end] != '\n' && text_[end] != '\r') ++end;
      line = text_.substr(pos_, end - pos_);
      pos_ = end < text_.size() && text_[end] == '\r' && end + 1 < text_.size() && text_[end + 1] == '\n' ? end + 2 : end + 1;
      ++line_no_;
      if (!trim(line).empty()) return true;
    }
    return false;
  }
  std::int64_t line_no() const { return line_no_; }
  std::size_t pos() const { return pos_; }

private:
  std::string_view text_;
  std::size_t pos_;
  std::int64_t line_no_ = 0;
};


struct CsvField {
  std::string_view text;  ///< without quotes; unquoted fields also without surrounding blanks
  bool escaped = false;   ///< holds "" pairs (a quoted field): unquote() before use as a name
};


/// Splits a line into fields; returns "" or what is wrong with it.
std::string split_csv(std::string_view line, char sep, std::vector<CsvField>& out);
std::string unquote(const CsvField& f);
bool iequals(std::string_view a, std::string_view b);
/// An integer field: digits, or an integer written with a zero fraction or an exponent
/// ("12.0", "1.2E+1"; "12,0" with decimal commas), exactly.
bool parse_int_field(std::string_view f, std::int64_t& v, bool decimal_comma = false);
/// True when a number's mantissa (before any exponent) has a digit other than 0.
bool nonzero_mantissa(std::string_view f);
bool parse_seconds_field(std::string_view f, bool decimal_comma, double& v);

/// How a header's columns map onto a window: the value columns (after step and rank, in file
/// order) are the stages with the wall column, when there is one, anywhere among them; an
/// unnamed last column (a separator ending every line, as some spreadsheet exports write) is
/// not a value column and stays empty.
struct CsvLayout {
  std::size_t values = 0;              ///< value columns: stages and wall
  std::optional<std::size_t> wall_at;  ///< the wall's index among the value columns
  bool trailing_empty = false;         ///< an unnamed last column follows the value columns

  /// Moves the wall value to the end, the stages keeping their order: vals[0..k) stages, vals[k] wall.
  void order(std::span<double> vals) const {
    if (wall_at && *wall_at + 1 < values)
      std::rotate(vals.begin() + static_cast<std::ptrdiff_t>(*wall_at), vals.begin() + static_cast<std::ptrdiff_t>(*wall_at) + 1,
                  vals.begin() + static_cast<std::ptrdiff_t>(values));
  }
};


/// A CSV header as read: the separator, the column names, how they map onto a window.
struct CsvHeader {
  char sep = ',';
  std::vector<std::string> cols;    ///< column names as read (an unnamed trailing one dropped)
  std::vector<std::string> stages;  ///< the stage columns, in file order
  CsvLayout lay;
  std::size_t ncol = 0;             ///< fields per line, an unnamed trailing one included
  std::int64_t line = 0;            ///< the header's line
};

/// Reads the optional sep= line and the header from `lines` (CsvLines or the streaming reader's
/// lines: next(std::string_view&) and line_no()), with every check and message of the reader.
template <typename Lines>
CsvHeader read_csv_header(Lines& lines, const std::string& file, const ReadOptions& opt);

/// A data line into step, rank and vals (file order; lay.order() moves the wall last). Returns
/// false for a row of empty cells (a blank line); throws FormatError naming the line otherwise.
/// Plain rows take parse_plain_row; every other form the general path, which words each error.
bool parse_csv_row(std::string_view line, std::int64_t line_no, const CsvHeader& h, const std::string& file,
                   const ReadOptions& opt, std::vector<CsvField>& fields, std::span<double> vals, std::int64_t& step,
                   std::int64_t& rank);

/// std::from_chars for a double as libstdc++ 12 gives it (which is fast_float inside, then
/// result_out_of_range where a nonzero number reads as 0 or a finite one as infinity), inline
/// through fast_float (libfast-float-dev): the same characters taken, the same errors, the same
/// value, and `v` untouched on an error. The CSV readers' accept/refuse rules were written
/// against that behaviour ("1e-400" is an underflow, "1e999" an overflow, "nan"/"inf" parse and
/// are refused by the caller); a test holds this to std::from_chars over a corpus.
inline std::from_chars_result parse_double(const char* first, const char* last, double& v) {
  double x;
  const auto r = fast_float::from_chars(first, last, x);
  if (r.ec != std::errc()) return {r.ptr, r.ec};
  if (x == 0 || std::isinf(x)) [[unlikely]] {
    const char* p = first + (*first == '-');
    const bool literal_inf = std::isinf(x) && (*p == 'i' || *p == 'I');
    if (!literal_inf && (std::isinf(x) || nonzero_mantissa(std::string_view(first, static_cast<std::size_t>(r.ptr - first)))))
      return {r.ptr, std::errc::result_out_of_range};
  }
  v = x;
  return {r.ptr, std::errc()};
}

/// Parses a data line of the plain form "step,rank,x,...,x" (no blanks, quotes or signs, ','
/// separated, then one more ',' when trailing_sep) into step, rank and vals, in file order.
/// Returns false for any other line, valid or not: the caller then takes the general path, which
/// accepts every form and words the error. Accepts only lines the general path accepts, with the
/// same values. Flattened: fast_float's parser is inlined here rather than called per field
/// (-1.8% CPU of `score` on the 100 MB CSV, +16 KB of code).
[[gnu::flatten]] inline bool parse_plain_row_by_field(std::string_view line, std::int64_t& step, std::int64_t& rank,
                                                     std::span<double> vals, bool trailing_sep) {
  const char* p = line.data();
  const char* const e = p + line.size();
  auto r = std::from_chars(p, e, step);
  if (r.ec != std::errc() || r.ptr == p || r.ptr == e || *r.ptr != ',') return false;
  p = r.ptr + 1;
  r = std::from_chars(p, e, rank);
  if (r.ec != std::errc() || r.ptr == p || rank < 0 || r.ptr == e || *r.ptr != ',') return false;
  p = r.ptr + 1;
  for (std::size_t col = 0; col < vals.size(); ++col) {
    double v = 0;
    const auto rv = parse_double(p, e, v);
    if (rv.ec != std::errc() || rv.ptr == p || !std::isfinite(v) || v < 0) return false;
    if (v == 0 && *p == '-' && nonzero_mantissa(std::string_view(p, static_cast<std::size_t>(rv.ptr - p)))) return false;
    vals[col] = v + 0.0;
    const char* end = rv.ptr;
    if (col + 1 < vals.size()) {
      if (end == e || *end != ',') return false;
      p = end + 1;
    } else {
      if (trailing_sep && (end == e || *end++ != ',')) return false;
      if (end != e && !(end + 1 == e && *end == '\r')) return false;
    }
  }
  return true;
}

/// The plain row [p, p + n) (no line end, no trailing separator) read whole (plain_row.cpp): the
/// line's commas, points and digits marked by vector compares, each field's bounds from those
/// marks, its digits summed without a byte-by-byte loop, each decimal rounded by fast_float's own
/// step; with AVX-512 VBMI where the processor has it, else with AVX2, as plain_row_path asks. The
/// same values as parse_plain_row_by_field to the bit, for a narrower set of lines: false leaves
/// a line to it (and every line where the processor has no wide path).
bool parse_plain_row_wide(const char* p, std::size_t n, std::int64_t& step, std::int64_t& rank, std::span<double> vals);
/// The plain row that starts at p, its line's end found too: the line is the bytes up to the
/// first '\n' among the `avail` bytes at p (all of them without one); its length goes to `line`
/// when that end lies within the first 192 bytes (npos otherwise, and for a row of more than 14
/// values, or none: the caller finds it), whether the row was read or not. (No '\r' may end the
/// line; no separator may end every line.) The `before` bytes before p are readable too (the AVX2
/// path reads the bytes around a field there rather than copy the line; it copies it where fewer
/// than 32 are).
bool parse_plain_line_wide(const char* p, std::size_t avail, std::size_t before, std::size_t& line, std::int64_t& step,
                           std::int64_t& rank, std::span<double> vals);
/// The processor has what the VBMI path of parse_plain_row_wide uses (AVX-512 F, BW, VL, DQ,
/// VBMI, VBMI2; BMI, BMI2, POPCNT).
bool plain_row_vbmi_available();
/// The processor has what its AVX2 path uses (AVX2; BMI, BMI2, LZCNT, POPCNT): the same lines, the
/// same values, each field's bounds by bit scans of the line's marks and its digits summed in a
/// vector register of its own.
bool plain_row_avx2_available();
/// Either.
bool plain_row_wide_available();
/// Which way parse_plain_row takes: the fastest the processor has (VBMI, else AVX2), the AVX2 path
/// even where VBMI is there, or field by field everywhere (tests compare them).
enum class RowPath { fastest, avx2, portable };
inline std::atomic<RowPath> plain_row_path{RowPath::fastest};
/// Whether plain rows go a wide way now: the processor has the one plain_row_path asks for.
bool plain_rows_wide();
/// parse_plain_line_wide's own parser for this processor and plain_row_path as it is now, resolved
/// once (nullptr where plain rows go no wide way): a reader of many lines asks for it once and
/// calls it per line, without the per-call choice of path. Same arguments, same contract.
using PlainLineFn = bool (*)(const char* p, std::size_t avail, std::size_t before, std::size_t& line, std::int64_t& step,
                             std::int64_t& rank, std::span<double> vals);
PlainLineFn plain_line_wide_fn();
/// The parser a CSV of this header's form has its plain rows read with (',' separated, no
/// separator ending every line, plain_line_wide_fn()), nullptr where it has none.
inline PlainLineFn plain_lines_wide_fn(const CsvHeader& h) {
  return h.sep == ',' && !h.lay.trailing_empty ? plain_line_wide_fn() : nullptr;
}

/// A data line of the plain form (see parse_plain_row_by_field): whole (parse_plain_row_wide) where
/// the processor has a wide path, field by field for every line that leaves.
inline bool parse_plain_row(std::string_view line, std::int64_t& step, std::int64_t& rank, std::span<double> vals,
                            bool trailing_sep = false) {
  if (plain_rows_wide()) {
    std::string_view body = line;
    if (!body.empty() && body.back() == '\r') body.remove_suffix(1);
    bool ends_right = !trailing_sep;  // with a separator ending every line, that one ends it
    if (trailing_sep && !body.empty() && body.back() == ',') {
      body.remove_suffix(1);
      ends_right = true;
    }
    if (ends_right && parse_plain_row_wide(body.data(), body.size(), step, rank, vals)) return true;
  }
  return parse_plain_row_by_field(line, step, rank, vals, trailing_sep);
}

template <typename Lines>
CsvHeader read_csv_header(Lines& lines, const std::string& file, const ReadOptions& opt) {
  const auto& lim = opt.limits;
  if (opt.world_size > std::min(lim.max_world_size, kWorldSizeCeiling))
    throw FormatError(file, 0,
                      "world size " + std::to_string(opt.world_size) + " is above the limit of " +
                          std::to_string(std::min(lim.max_world_size, kWorldSizeCeiling)) +
                          " ranks; expected a smaller world (raise the limit with --max-world-size)");
  std::string_view line;
  if (!lines.next(line)) throw FormatError(file, 0, "empty file; expected a header step,rank,<stages...>[,wall]");
  if (line.find('\0') != std::string_view::npos) throw FormatError(file, lines.line_no(), "binary data; expected a CSV header");
  // Excel's separator hint: a first line "sep=;" names the separator of the lines after it.
  char hint = 0;
  if (std::string_view h = line; h.size() >= 5 && iequals(h.substr(0, 4), "sep=")) {
    hint = h[4];
    if (hint != ',' && hint != ';' && hint != '\t' && hint != '|')
      throw FormatError(file, lines.line_no(),
                        "separator line '" + printable(line) + "' names '" + printable(h.substr(4, 1)) +
                            "'; expected sep=, sep=; sep=| or sep= and a tab");
    if (!trim(h.substr(5)).empty())
      throw FormatError(file, lines.line_no(), "separator line '" + printable(line) + "' has more after the separator; expected sep=X alone");
    if (!lines.next(line)) throw FormatError(file, lines.line_no(), "a separator line and no header; expected a header step,rank,<stages...>[,wall]");
  }
  auto bad_header = [&] {
    return FormatError(file, lines.line_no(), "header is '" + printable(line) + "', expected step,rank,<stage...>[,wall]" +
                                                  (hint ? std::string(" separated by the sep= line's '") + (hint == '\t' ? "\\t" : std::string(1, hint)) + "'" : ""));
  };
  // The separator is the character after the first field, "step" (quoted or not), and the one
  // a sep= line named.
  char sep = ',';
  {
    std::string_view h = trim(line);
    const bool quoted = !h.empty() && h.front() == '"';
    if (quoted) h.remove_prefix(1);
    if (!iequals(h.substr(0, 4), "step")) throw bad_header();
    h.remove_prefix(4);
    if (quoted) {
      if (h.empty() || h.front() != '"') throw bad_header();
      h.remove_prefix(1);
    }
    while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
    if (h.empty() || (hint ? h.front() != hint : h.front() != ',' && h.front() != ';' && h.front() != '\t')) throw bad_header();
    sep = h.front();
  }
  std::vector<CsvField> fields;
  if (auto why = split_csv(line, sep, fields); !why.empty()) throw FormatError(file, lines.line_no(), "header: " + why);
  std::vector<std::string> cols;
  for (const auto& f : fields) cols.push_back(unquote(f));
  if (cols.size() < 3 || !iequals(cols[0], "step") || !iequals(cols[1], "rank")) throw bad_header();
  const std::size_t ncol = cols.size();  // fields per line, an unnamed trailing one included
  CsvLayout lay;
  lay.trailing_empty = cols.size() > 3 && trim(cols.back()).empty();
  if (lay.trailing_empty) cols.pop_back();
  lay.values = cols.size() - 2;
  std::vector<std::string> stages;
  for (std::size_t c = 2; c < cols.size(); ++c) {
    if (!iequals(cols[c], "wall")) {
      stages.push_back(cols[c]);
      continue;
    }
    if (lay.wall_at)
      throw FormatError(file, lines.line_no(),
                        "columns " + std::to_string(*lay.wall_at + 3) + " and " + std::to_string(c + 1) +
                            " are both named wall; expected at most one wall column");
    lay.wall_at = c - 2;
  }
  if (stages.empty()) throw FormatError(file, lines.line_no(), "header names no stage column; expected step,rank,<stage...>[,wall]");
  if (const auto err = stage_count_error(stages.size(), lim); !err.empty()) throw FormatError(file, lines.line_no(), err);
  for (std::size_t c = 2; c < cols.size(); ++c) {
    if (cols[c].empty())
      throw FormatError(file, lines.line_no(), "column " + std::to_string(c + 1) + " has no name; expected a stage name");
    if (!frontier::printable_utf8(cols[c]))
      throw FormatError(file, lines.line_no(),
                        "column " + std::to_string(c + 1) + " name '" + printable(cols[c]) +
                            "' is not printable UTF-8; expected a UTF-8 stage name without control characters");
  }
  CsvHeader out;
  out.sep = sep;
  out.cols = std::move(cols);
  out.stages = std::move(stages);
  out.lay = lay;
  out.ncol = ncol;
  out.line = lines.line_no();
  return out;
}

}  // namespace sf::formats::detail
