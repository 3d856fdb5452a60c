#include "sf/formats/formats.h"

#include "stage_text.h"
#include "step_span.h"
#include "open_error.h"
#include "strict_json.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include <fcntl.h>
#include <iconv.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sf::formats {

using nlohmann::json;
using frontier::StageMatrix;
using frontier::StageSchema;
using detail::span_of;
using detail::span_text;

FormatError::FormatError(const std::string& file, std::int64_t line, const std::string& message)
    : std::runtime_error(line > 0 ? file + ":" + std::to_string(line) + ": " + message : file + ": " + message),
      file_(file),
      line_(line) {}

std::optional<MatrixFormat> format_from_path(std::string_view path) {
  auto ends = [&](std::string_view suf) {
    return path.size() >= suf.size() && path.substr(path.size() - suf.size()) == suf;
  };
  if (ends(".jsonl") || ends(".ndjson") || ends(".json")) return MatrixFormat::jsonl;
  if (ends(".csv")) return MatrixFormat::csv;
  return std::nullopt;
}

namespace detail {



std::string printable(std::string_view s, std::size_t max) {
  const bool utf8 = frontier::printable_utf8(s);
  std::size_t n = std::min(max, s.size());
  if (utf8)
    while (n < s.size() && n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  std::string out;
  for (char c : s.substr(0, n)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) || (utf8 && u >= 0x80) ? c : '?';
  }
  if (s.size() > n) out += "...";
  return out;
}

std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  if (v.is_number()) return "a number";
  return "something else";
}

std::string too_many_steps(const std::string& steps, const ReadLimits& lim) {
  return "window spans " + steps + " steps, above the limit of " + std::to_string(lim.max_window_steps) +
         " steps per window; expected fewer steps (raise the limit with --max-window-steps)";
}

bool values_fit(std::uint64_t steps, int world, int stages, const ReadLimits& lim) {
  std::uint64_t cells = 0, values = 0;
  return !__builtin_mul_overflow(steps, static_cast<std::uint64_t>(world), &cells) &&
         !__builtin_mul_overflow(cells, static_cast<std::uint64_t>(stages), &values) &&
         values <= static_cast<std::uint64_t>(std::max<std::int64_t>(lim.max_values, 0));
}

/// Every record's step within the limit of steps a window may span, checked as records arrive:
/// a runaway step id is named at its own line, before more records are read.
void note_step(PendingWindow& pw, std::int64_t step, const std::string& file, std::int64_t line, const ReadLimits& lim) {
  if (pw.noted++ == 0) {
    pw.min_step = pw.max_step = step;
    return;
  }
  const std::int64_t lo = std::min(pw.min_step, step), hi = std::max(pw.max_step, step);
  if (!pw.span_first && span_of(lo, hi) > static_cast<std::uint64_t>(lim.max_window_steps))
    throw FormatError(file, line,
                      "step " + std::to_string(step) + " widens the window to steps " + std::to_string(lo) + ".." +
                          std::to_string(hi) + ": " + too_many_steps(span_text(lo, hi), lim));
  pw.min_step = lo;
  pw.max_step = hi;
}

/// Turns a file window into Windows of opt.window_steps steps each (one when 0). Memory beyond
/// the dense matrices is proportional to the records (no table over the declared span).
/// The window's schema: every record with a wall or none.
StageSchema window_schema(const PendingWindow& pw, const std::string& file) {
  const bool has_wall = !pw.records.empty() && pw.records.front().has_wall;
  for (const auto& rec : pw.records)
    if (rec.has_wall != has_wall)
      throw FormatError(file, rec.line,
                        rec.has_wall ? "record has \"wall\" but earlier records of this window do not; expected all or none"
                                     : "record has no \"wall\" but earlier records of this window do; expected all or none");
  try {
    return StageSchema(pw.stages, has_wall, pw.accumulation);
  } catch (const std::invalid_argument& e) {
    throw FormatError(file, pw.header_line, std::string("bad header: ") + e.what());
  }
}

/// The window's span: declared (checked against the limits and INT64_MAX at the header), else the
/// records' own min..max: `total` steps from `first`.
void window_span(const PendingWindow& pw, const std::string& file, const ReadLimits& lim, std::int64_t& first,
                 std::uint64_t& total) {
  first = 0;
  total = 0;
  if (pw.span_first) {
    first = *pw.span_first;
    total = static_cast<std::uint64_t>(*pw.span_steps);
    for (const auto& rec : pw.records)
      if (rec.step < first || static_cast<std::uint64_t>(rec.step) - static_cast<std::uint64_t>(first) >= total)
        throw FormatError(file, rec.line,
                          "step " + std::to_string(rec.step) + " outside the header's window of " + std::to_string(total) +
                              " steps from step " + std::to_string(first));
  } else if (!pw.records.empty()) {
    first = pw.min_step;
    total = span_of(pw.min_step, pw.max_step);
  }
  if (total == 0)  // a header alone, or one declaring a window of 0 steps: nothing to score
    throw FormatError(file, pw.header_line, kNoRecords);
  if (total > static_cast<std::uint64_t>(lim.max_window_steps))
    throw FormatError(file, pw.header_line,
                      too_many_steps(pw.span_first ? std::to_string(total) : span_text(first, pw.max_step), lim));
}

/// Rank layout: the ranks that have records. When some of the world's ranks have none, the
/// matrix is sparse (one column per rank with records): memory follows the records present, and
/// the absent ranks are reported as missing ranges. A declared window without records keeps one
/// column, which no step scores. Sets each record's column; returns the rank ids of the columns.
std::vector<int> window_columns(PendingWindow& pw) {
  std::vector<int> ids;
  ids.reserve(pw.records.size());
  for (const auto& rec : pw.records) ids.push_back(rec.rank);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.empty()) ids.push_back(0);
  const bool sparse = static_cast<int>(ids.size()) < pw.world;
  for (auto& rec : pw.records)
    rec.column = sparse ? static_cast<int>(std::lower_bound(ids.begin(), ids.end(), rec.rank) - ids.begin()) : rec.rank;
  return ids;
}

/// Records grouped by step: a stable counting sort (line order within a step). `start[t]..start[t+1]`
/// index `order` for step first + t.
void group_by_step(const PendingWindow& pw, std::int64_t first, std::size_t n_steps, std::vector<std::size_t>& start,
                   std::vector<std::size_t>& order) {
  auto at = [&](const Pending& rec) {
    return static_cast<std::size_t>(static_cast<std::uint64_t>(rec.step) - static_cast<std::uint64_t>(first));
  };
  start.assign(n_steps + 1, 0);
  for (const auto& rec : pw.records) ++start[at(rec) + 1];
  for (std::size_t t = 0; t < n_steps; ++t) start[t + 1] += start[t];
  order.assign(pw.records.size(), 0);
  std::vector<std::size_t> fill(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < pw.records.size(); ++i) order[fill[at(pw.records[i])]++] = i;
}

/// The duplicate (step, rank) whose second line comes first, as a reader going down the file
/// meets it: refused.
void refuse_duplicates(const PendingWindow& pw, const std::string& file, std::size_t columns,
                       const std::vector<std::size_t>& start, const std::vector<std::size_t>& order) {
  std::vector<std::size_t> stamp(columns, SIZE_MAX);
  std::vector<std::int64_t> first_line(columns, 0);
  const Pending* dup = nullptr;
  std::int64_t dup_first = 0;
  for (std::size_t t = 0; t + 1 < start.size(); ++t)
    for (std::size_t i = start[t]; i < start[t + 1]; ++i) {
      const Pending& rec = pw.records[order[i]];
      if (stamp[rec.column] == t) {
        if (!dup || rec.line < dup->line) {
          dup = &rec;
          dup_first = first_line[rec.column];
        }
      } else {
        stamp[rec.column] = t;
        first_line[rec.column] = rec.line;
      }
    }
  if (dup)
    throw FormatError(file, dup->line,
                      "duplicate record for (step " + std::to_string(dup->step) + ", rank " + std::to_string(dup->rank) +
                          "), first seen at line " + std::to_string(dup_first) + "; expected one record per (step, rank)");
}

/// One record into row `ti` of the window's matrix.
void set_record(Window& w, const PendingWindow& pw, const Pending& rec, int ti, int k, const std::string& file) {
  try {
    w.matrix.set_record(ti, rec.column, std::span<const double>(pw.values.data() + rec.offset, k),
                        rec.has_wall ? std::optional<double>(rec.wall) : std::nullopt);
    if (rec.event != frontier::EventState::unsampled) w.matrix.set_fwd_event(ti, rec.column, rec.event, rec.event_s);
    if (!std::isnan(rec.cpu_wait)) w.matrix.set_cpu_wait(ti, rec.column, rec.cpu_wait);
    if (rec.sync_offset >= 0)
      for (int s = 0; s < k; ++s) {
        const double v = pw.sync_values[static_cast<std::size_t>(rec.sync_offset) + s];
        if (!std::isnan(v)) w.matrix.set_sync_wait(ti, rec.column, s, v);
      }
  } catch (const std::invalid_argument& e) {
    throw FormatError(file, rec.line, e.what());
  }
}

void emit_windows(PendingWindow& pw, const std::string& file, const ReadOptions& opt, std::vector<Window>& out) {
  const auto& lim = opt.limits;
  const int k = static_cast<int>(pw.stages.size());
  const StageSchema schema = window_schema(pw, file);
  std::int64_t first = 0;
  std::uint64_t total = 0;
  window_span(pw, file, lim, first, total);
  const std::vector<int> ids = window_columns(pw);
  const int columns = static_cast<int>(ids.size());
  const bool sparse = columns < pw.world;
  if (!values_fit(total, columns, schema.size(), lim))
    throw FormatError(file, pw.header_line,
                      "window of " + std::to_string(total) + " steps x " + std::to_string(columns) + " ranks x " +
                          std::to_string(schema.size()) + " stages is above the limit of " + std::to_string(lim.max_values) +
                          " values; expected a smaller window (raise the limit with --max-values)");
  std::vector<std::size_t> start, order;
  group_by_step(pw, first, static_cast<std::size_t>(total), start, order);
  refuse_duplicates(pw, file, static_cast<std::size_t>(columns), start, order);
  // Windows of --window steps (all of them by default).
  const std::uint64_t chunk = opt.window_steps > 0 ? static_cast<std::uint64_t>(opt.window_steps) : std::max<std::uint64_t>(total, 1);
  std::uint64_t off = 0;  // steps from `first`; first + off never passes INT64_MAX while off < total
  do {
    const std::uint64_t n = std::min(chunk, total - off);
    Window w;
    try {
      const auto window_first = static_cast<std::int64_t>(static_cast<std::uint64_t>(first) + off);
      w.matrix = sparse ? StageMatrix(schema, pw.world, ids, window_first, static_cast<int>(n))
                        : StageMatrix(schema, pw.world, window_first, static_cast<int>(n));
      if (!pw.roles.empty()) w.matrix.set_roles(pw.roles);
    } catch (const std::invalid_argument& e) {
      throw FormatError(file, pw.header_line, e.what());
    }
    w.telemetry = pw.telemetry;
    w.ranks = pw.ranks;
    w.header_line = pw.header_line;
    for (std::uint64_t t = 0; t < n; ++t) {
      const auto step = static_cast<std::size_t>(off + t);
      for (std::size_t i = start[step]; i < start[step + 1]; ++i)
        set_record(w, pw, pw.records[order[i]], static_cast<int>(t), k, file);
    }
    out.push_back(std::move(w));
    off += n;
  } while (off < total);
}

/// An integer field of a JSON object; integers past the int64 range are an error, not a wrap.
std::int64_t get_int(const json& obj, const char* key, const std::string& file, std::int64_t line, bool required,
                     std::int64_t fallback) {
  const auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) throw FormatError(file, line, std::string("missing field \"") + key + "\"; expected an integer");
    return fallback;
  }
  const std::string field = std::string("field \"") + key + "\" is ";
  auto out_of_range = [&] {
    return FormatError(file, line,
                       field + it->dump() + ", outside the 64-bit integer range; expected an integer from " +
                           std::to_string(std::numeric_limits<std::int64_t>::min()) + " to " + std::to_string(kInt64Max));
  };
  if (it->is_number_float()) {
    // The strict reader stores every float literal that is an exact 64-bit integer (1.0, 1e3) as
    // an integer: a float left here has a fraction or lies past 64 bits.
    const double x = it->get<double>();
    if (x == std::floor(x) && std::fabs(x) >= 0x1p63) throw out_of_range();
    throw FormatError(file, line, field + it->dump() + ", not a whole number; expected an integer");
  }
  if (!it->is_number_integer()) throw FormatError(file, line, field + type_name(*it) + ", expected an integer");
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(kInt64Max)) throw out_of_range();
  return it->get<std::int64_t>();
}

/// An integer field within [lo, hi] (so a narrowing cast afterwards is exact).
std::int64_t get_int_in(const json& obj, const char* key, const std::string& file, std::int64_t line, bool required,
                        std::int64_t fallback, std::int64_t lo, std::int64_t hi, const std::string& what = "") {
  const auto v = get_int(obj, key, file, line, required, fallback);
  if (v < lo || v > hi)
    throw FormatError(file, line,
                      std::string("field \"") + key + "\" is " + std::to_string(v) + ", expected " + std::to_string(lo) +
                          ".." + std::to_string(hi) + what);
  return v;
}

double get_duration(const json& v, const std::string& file, std::int64_t line, const std::string& what) {
  if (!v.is_number()) throw FormatError(file, line, what + " is " + type_name(v) + ", expected a number of seconds >= 0");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0)
    throw FormatError(file, line, what + " is " + printable(v.dump()) + ", expected a finite number of seconds >= 0");
  return x + 0.0;  // -0 → +0
}

/// A string that ends up in a packet or a table line: printable UTF-8 (JSON input is already UTF-8).
std::string get_text(const json& v, const std::string& file, std::int64_t line, const std::string& what) {
  if (!v.is_string()) throw FormatError(file, line, what + " is " + type_name(v) + ", expected a string");
  auto s = v.get<std::string>();
  if (!frontier::printable_utf8(s))
    throw FormatError(file, line, what + " '" + printable(s) + "' has control characters; expected printable text");
  return s;
}

void parse_header(const json& h, const std::string& file, std::int64_t line, PendingWindow& pw, const ReadLimits& lim) {
  const auto& schema = h["schema"];
  if (!schema.is_string() || schema.get<std::string>() != kStagesSchema)
    throw FormatError(file, line,
                      "header schema is " + printable(schema.dump()) + ", expected \"" + std::string(kStagesSchema) + "\"");
  const auto st = h.find("stages");
  if (st == h.end() || !st->is_array() || st->empty())
    throw FormatError(file, line, "header \"stages\" must be a non-empty array of stage names");
  if (const auto err = stage_count_error(st->size(), lim); !err.empty()) throw FormatError(file, line, err);
  for (const auto& s : *st) pw.stages.push_back(get_text(s, file, line, "header \"stages\" entry"));
  const int world_max = std::min(lim.max_world_size, kWorldSizeCeiling);
  const auto world = get_int(h, "world_size", file, line, true, 0);
  if (world < 1 || world > kWorldSizeCeiling)
    throw FormatError(file, line,
                      "header world_size is " + std::to_string(world) + ", expected 1.." + std::to_string(kWorldSizeCeiling));
  if (world > world_max)
    throw FormatError(file, line,
                      "header world_size is " + std::to_string(world) + ", above the limit of " + std::to_string(world_max) +
                          " ranks; expected a smaller world (raise the limit with --max-world-size)");
  pw.world = static_cast<int>(world);
  pw.accumulation = static_cast<int>(get_int_in(h, "accumulation", file, line, false, 1, 1, std::numeric_limits<int>::max()));
  if (const auto roles = h.find("roles"); roles != h.end()) {
    if (!roles->is_array() || static_cast<std::int64_t>(roles->size()) != world)
      throw FormatError(file, line, "header \"roles\" must be an array of world_size strings");
    for (const auto& r : *roles) pw.roles.push_back(get_text(r, file, line, "header \"roles\" entry"));
  }
  if (const auto win = h.find("window"); win != h.end()) {
    if (!win->is_object()) throw FormatError(file, line, "header \"window\" must be an object {first_step, steps}");
    const auto first = get_int(*win, "first_step", file, line, true, 0);
    const auto n = get_int(*win, "steps", file, line, true, 0);
    if (n < 0) throw FormatError(file, line, "header window steps is " + std::to_string(n) + ", expected >= 0");
    if (n > lim.max_window_steps)
      throw FormatError(file, line, "header window declares " + std::to_string(n) + " steps: " +
                                        too_many_steps(std::to_string(n), lim));
    if (n > 0 && first > kInt64Max - (n - 1))
      throw FormatError(file, line,
                        "header window of " + std::to_string(n) + " steps from step " + std::to_string(first) +
                            " runs past the largest step id " + std::to_string(kInt64Max));
    pw.span_first = first;
    pw.span_steps = n;
  }
  if (const auto tel = h.find("telemetry"); tel != h.end()) {
    if (!tel->is_object()) throw FormatError(file, line, "header \"telemetry\" must be an object");
    if (const auto g = tel->find("gather_ok"); g != tel->end()) {
      if (!g->is_boolean()) throw FormatError(file, line, "telemetry gather_ok must be true or false");
      pw.telemetry.gather_ok = g->get<bool>();
    }
    pw.telemetry.dropped_records = get_int_in(*tel, "dropped_records", file, line, false, 0, 0, kInt64Max);
    if (const auto rs = tel->find("reasons"); rs != tel->end()) {
      if (!rs->is_array()) throw FormatError(file, line, "telemetry reasons must be an array of strings");
      for (const auto& r : *rs) pw.telemetry.reasons.push_back(get_text(r, file, line, "telemetry reason"));
    }
  }
  if (const auto ranks = h.find("ranks"); ranks != h.end()) {
    if (!ranks->is_array()) throw FormatError(file, line, "header \"ranks\" must be an array of rank identities");
    if (static_cast<std::int64_t>(ranks->size()) > world)
      throw FormatError(file, line, "header \"ranks\" lists " + std::to_string(ranks->size()) +
                                        " identities, expected at most world_size (" + std::to_string(world) + ")");
    constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
    for (const auto& r : *ranks) {
      if (!r.is_object()) throw FormatError(file, line, "rank identity is " + type_name(r) + ", expected an object");
      RankInfo info;
      info.rank = static_cast<int>(get_int_in(r, "rank", file, line, true, 0, 0, world - 1, " (a rank of the world)"));
      info.local_rank = static_cast<int>(get_int_in(r, "local_rank", file, line, false, 0, 0, kIntMax));
      info.node_rank = static_cast<int>(get_int_in(r, "node_rank", file, line, false, 0, 0, kIntMax));
      if (const auto hn = r.find("hostname"); hn != r.end()) info.hostname = get_text(*hn, file, line, "rank hostname");
      pw.ranks.push_back(std::move(info));
    }
  }
}

void parse_record(const json& o, const std::string& file, std::int64_t line, PendingWindow& pw, const ReadLimits& lim) {
  Pending rec{};
  rec.line = line;
  rec.step = get_int(o, "step", file, line, true, 0);
  const auto rank = get_int(o, "rank", file, line, true, 0);
  if (rank < 0 || rank >= pw.world)
    throw FormatError(file, line,
                      "rank " + std::to_string(rank) + " outside world size " + std::to_string(pw.world) +
                          "; expected 0.." + std::to_string(pw.world - 1));
  rec.rank = static_cast<int>(rank);
  const auto d = o.find("d");
  const auto k = pw.stages.size();
  if (d == o.end() || !d->is_array())
    throw FormatError(file, line, "missing \"d\" array; expected " + std::to_string(k) + " stage durations in seconds");
  if (d->size() != k)
    throw FormatError(file, line,
                      "\"d\" has " + std::to_string(d->size()) + " durations, expected " + std::to_string(k) +
                          " (one per header stage)");
  rec.offset = pw.values.size();
  for (std::size_t s = 0; s < k; ++s)
    pw.values.push_back(get_duration((*d)[s], file, line, "duration of '" + printable(pw.stages[s]) + "'"));
  if (const auto w = o.find("wall"); w != o.end()) {
    rec.has_wall = true;
    rec.wall = get_duration(*w, file, line, "\"wall\"");
  }
  if (const auto side = o.find("side"); side != o.end()) {
    if (!side->is_object()) throw FormatError(file, line, "\"side\" is " + type_name(*side) + ", expected an object");
    if (const auto ev = side->find("fwd_event"); ev != side->end()) {
      const std::string state = ev->is_string() ? ev->get<std::string>() : "";
      if (state == "ready") {
        rec.event = frontier::EventState::ready;
        const auto v = side->find("fwd_event_s");
        if (v == side->end()) throw FormatError(file, line, "ready fwd_event needs \"fwd_event_s\" (seconds)");
        rec.event_s = get_duration(*v, file, line, "\"fwd_event_s\"");
      } else if (state == "missing") {
        rec.event = frontier::EventState::missing;
      } else if (state != "unsampled") {
        throw FormatError(file, line, "fwd_event is " + printable(ev->dump()) + ", expected \"ready\", \"missing\" or \"unsampled\"");
      }
    }
    if (const auto cw = side->find("cpu_wait"); cw != side->end())
      rec.cpu_wait = get_duration(*cw, file, line, "\"cpu_wait\"");
    if (const auto sw = side->find("sync_wait"); sw != side->end()) {
      if (!sw->is_array() || sw->size() != k)
        throw FormatError(file, line, "\"sync_wait\" must be an array of " + std::to_string(k) + " seconds or nulls");
      rec.sync_offset = static_cast<std::int64_t>(pw.sync_values.size());
      for (std::size_t s = 0; s < k; ++s)
        pw.sync_values.push_back((*sw)[s].is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                    : get_duration((*sw)[s], file, line, "sync_wait entry"));
    }
  }
  note_step(pw, rec.step, file, line, lim);
  pw.records.push_back(rec);
}

std::string_view strip_bom(std::string_view text) {
  return text.substr(0, 3) == "\xEF\xBB\xBF" ? text.substr(3) : text;
}

void parse_json_line(StrictJsonParser& parser, std::string_view line, const std::string& file, std::int64_t line_no,
                     json& obj) {
  if (!parser.parse(line, obj)) {
    const auto& p = parser.problem();
    switch (p.kind) {
      case JsonProblem::number_range:
        throw FormatError(file, line_no, p.describe() + "; expected a finite number (seconds, or an integer step or rank)");
      case JsonProblem::negative_underflow:
        throw FormatError(file, line_no, p.describe() + "; expected a number of seconds >= 0");
      case JsonProblem::duplicate_key:
        throw FormatError(file, line_no, p.describe() + "; expected each key once per object");
      case JsonProblem::nul_byte:
        throw FormatError(file, line_no, "a NUL byte at column " + std::to_string(p.byte) + " (binary data?); expected one JSON object per line of text");
      default:
        throw FormatError(file, line_no,
                          "not valid JSON at column " + std::to_string(p.byte) +
                              " (truncated or corrupt line?); expected one JSON object per line");
    }
  }
  if (!obj.is_object()) throw FormatError(file, line_no, "line is " + type_name(obj) + ", expected a JSON object");
}

std::vector<Window> parse_jsonl(std::string_view text, const std::string& file, const ReadOptions& opt) {
  text = strip_bom(text);
  std::vector<Window> out;
  std::optional<PendingWindow> pw;
  std::int64_t line_no = 0;
  std::size_t pos = 0;
  bool any = false;
  StrictJsonParser parser;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    any = true;
    json obj;
    parse_json_line(parser, line, file, line_no, obj);
    if (obj.contains("schema")) {
      if (pw) emit_windows(*pw, file, opt, out);
      pw.emplace();
      pw->header_line = line_no;
      parse_header(obj, file, line_no, *pw, opt.limits);
      continue;
    }
    if (!pw)
      throw FormatError(file, line_no,
                        "record before any header; expected a first line {\"schema\":\"sf.stages/1\",\"stages\":[...],\"world_size\":R}");
    parse_record(obj, file, line_no, *pw, opt.limits);
  }
  if (!any) throw FormatError(file, 0, "empty file; expected a sf.stages/1 header line and records");
  emit_windows(*pw, file, opt, out);
  return out;
}

// --- CSV ---------------------------------------------------------------------------------------
//
// RFC 4180 as spreadsheets and Windows tools write it: an optional UTF-8 BOM, CRLF, LF or CR
// line ends, fields optionally quoted ("" is a quote inside quotes), blanks around fields, the
// separator ',' (or ';' or a tab, taken from the header, where a decimal comma is then allowed),
// rows of empty fields as blank lines. Numbers: optional '+', decimal or scientific notation
// (1E-3, .5, 5.). A quoted field cannot span lines (no stage name holds a line break).

bool blank(char c) { return c == ' ' || c == '\t'; }

FormatError line_too_long(const std::string& file, std::int64_t line_no, std::int64_t limit) {
  return FormatError(file, line_no,
                     "line " + std::to_string(line_no) + " runs past " + std::to_string(limit) +
                         " bytes without a line break; expected records of at most that length (raise the limit with "
                         "--max-line-bytes)");
}

void check_line_lengths(std::string_view text, const std::string& file, std::int64_t limit, bool csv) {
  const auto max = static_cast<std::size_t>(std::max<std::int64_t>(limit, 1));
  if (text.size() <= max) return;
  const char* p = text.data();
  const char* const end = p + text.size();
  std::int64_t line_no = 1;
  while (p < end) {
    const auto left = static_cast<std::size_t>(end - p);
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', left));
    const char* stop = nl ? nl : end;
    if (static_cast<std::size_t>(stop - p) > max) {
      // CSV may end lines with a lone '\r' (old spreadsheets): those are line breaks too.
      if (!csv) throw line_too_long(file, line_no, limit);
      const char* q = p;
      for (;;) {
        const char* cr = static_cast<const char*>(std::memchr(q, '\r', static_cast<std::size_t>(stop - q)));
        const char* seg_end = cr ? cr : stop;
        if (static_cast<std::size_t>(seg_end - q) > max) throw line_too_long(file, line_no, limit);
        if (!cr) break;
        q = cr + 1;
        ++line_no;
      }
    }
    if (!nl) break;
    p = nl + 1;
    ++line_no;
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && (blank(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}



std::string split_csv(std::string_view line, char sep, std::vector<CsvField>& out) {
  out.clear();
  const std::size_t n = line.size();
  std::size_t i = 0;
  for (;;) {
    std::size_t b = i;
    while (b < n && line[b] != sep && blank(line[b])) ++b;
    if (b < n && line[b] == '"') {
      std::size_t j = b + 1;
      bool esc = false;
      for (;; ++j) {
        if (j >= n) return "unterminated quoted field (a quoted field cannot span lines); expected a closing '\"'";
        if (line[j] != '"') continue;
        if (j + 1 < n && line[j + 1] == '"') {
          esc = true;
          ++j;
          continue;
        }
        break;
      }
      std::size_t k = j + 1;
      while (k < n && line[k] != sep && (blank(line[k]) || line[k] == '\r')) ++k;
      if (k < n && line[k] != sep) return "text after a closing quote; expected a separator";
      out.push_back({line.substr(b + 1, j - b - 1), esc});  // quoted text is literal
      if (k >= n) return "";
      i = k + 1;
    } else {
      std::size_t c = line.find(sep, b);
      if (c == std::string_view::npos) c = n;
      out.push_back({trim(line.substr(b, c - b)), false});
      if (c >= n) return "";
      i = c + 1;
    }
  }
}

std::string unquote(const CsvField& f) {
  if (!f.escaped) return std::string(f.text);
  std::string s;
  for (std::size_t i = 0; i < f.text.size(); ++i) {
    s += f.text[i];
    if (f.text[i] == '"' && i + 1 < f.text.size() && f.text[i + 1] == '"') ++i;
  }
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

/// An integer field: optional sign ('+' too), digits, within the int64 range.
bool parse_int_field(std::string_view f, std::int64_t& v, bool decimal_comma) {
  f = trim(f);
  if (f.size() > 1 && f[0] == '+' && f[1] != '-' && f[1] != '+') f.remove_prefix(1);
  const auto r = std::from_chars(f.data(), f.data() + f.size(), v);
  if (r.ec == std::errc() && r.ptr == f.data() + f.size() && !f.empty()) return true;
  // An integer written as a number with a fraction or an exponent, as a spreadsheet or a float
  // column writes it ("12.0", "1.2E+1", "12,0" with decimal commas): its value from the text, exactly
  // (no double: step ids past 2^53 stay exact), and only when every digit after the point is 0.
  std::string_view t = f;
  const bool negative = !t.empty() && t[0] == '-';
  if (negative) t.remove_prefix(1);
  std::string digits;  // mantissa digits without the point
  std::int64_t point = -1;
  std::size_t i = 0;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c >= '0' && c <= '9') digits += c;
    else if ((c == '.' || (decimal_comma && c == ',')) && point < 0) point = static_cast<std::int64_t>(digits.size());
    else break;
  }
  if (digits.empty()) return false;
  if (point < 0) point = static_cast<std::int64_t>(digits.size());
  if (i < t.size()) {
    if (t[i] != 'e' && t[i] != 'E') return false;
    int exp = 0;
    std::string_view e = t.substr(i + 1);
    if (!e.empty() && e[0] == '+') e.remove_prefix(1);
    const auto re = std::from_chars(e.data(), e.data() + e.size(), exp);
    if (re.ec != std::errc() || re.ptr != e.data() + e.size() || e.empty() || exp < -400 || exp > 400) return false;
    point += exp;
  }
  // digits[0, point) is the integer part (zeros appended past the end); the rest must be zeros.
  for (std::size_t k = static_cast<std::size_t>(std::max<std::int64_t>(point, 0)); k < digits.size(); ++k)
    if (digits[k] != '0') return false;
  std::string whole = negative ? "-" : "";
  if (point > 0) {
    const auto n = static_cast<std::size_t>(point);
    std::string ip = digits.substr(0, std::min(n, digits.size()));
    if (n > digits.size()) {
      if (n > 40) return false;  // past any 64-bit integer
      ip.append(n - digits.size(), '0');
    }
    whole += ip;
  } else {
    whole += "0";
  }
  const auto rw = std::from_chars(whole.data(), whole.data() + whole.size(), v);
  return rw.ec == std::errc() && rw.ptr == whole.data() + whole.size();
}

/// True when a number's mantissa (before any exponent) has a digit other than 0: "-1e-400" is a
/// negative number even though no double holds it, "-0.0" is zero.
bool nonzero_mantissa(std::string_view f) {
  for (const char c : f) {
    if (c == 'e' || c == 'E') break;
    if (c >= '1' && c <= '9') return true;
  }
  return false;
}

/// A duration field in seconds: finite, >= 0, optional '+', decimal comma when allowed. A
/// positive underflow reads as 0 (as in the JSON reader); an overflow and a negative number,
/// even one too small for a double (-1e-400), are errors; -0 reads as 0.
bool parse_seconds_field(std::string_view f, bool decimal_comma, double& v) {
  f = trim(f);
  if (f.size() > 1 && f[0] == '+' && f[1] != '-' && f[1] != '+') f.remove_prefix(1);
  if (f.empty()) return false;
  char buf[64];
  if (decimal_comma && f.find(',') != std::string_view::npos) {
    if (f.size() >= sizeof buf) return false;
    std::memcpy(buf, f.data(), f.size());
    std::replace(buf, buf + f.size(), ',', '.');
    f = std::string_view(buf, f.size());
  }
  const auto r = parse_double(f.data(), f.data() + f.size(), v);
  if (r.ptr != f.data() + f.size()) return false;
  if (r.ec == std::errc::result_out_of_range) {
    // Tell an underflow (a mantissa with a large negative exponent) from an overflow.
    const auto e = f.find_first_of("eE");
    if (e == std::string_view::npos || e + 1 >= f.size() || f[e + 1] != '-' || f.front() == '-') return false;
    v = 0;
  } else if (r.ec != std::errc()) {
    return false;
  }
  if (!std::isfinite(v) || v < 0 || (v == 0 && f.front() == '-' && nonzero_mantissa(f))) return false;
  v += 0.0;  // -0 → +0
  return true;
}



/// The common case, read in one pass straight into the window's matrix: one window, ','
/// separated, LF or CRLF lines, every data line a plain row, the first line holding the
/// smallest step and the last line the largest step and (unless opt.world_size is given) the
/// largest rank, as write_csv and sorted files have them, no duplicate (step, rank), and within
/// every limit. Builds the matrix the general path would, without its list of pending records.
/// nullopt for any other input, valid or not; the caller then takes the general path, which
/// also words every error.
std::optional<std::vector<Window>> parse_csv_direct(std::string_view body, const std::vector<std::string>& stages,
                                                    const CsvLayout& lay, std::size_t ncol, std::int64_t header_line,
                                                    const ReadOptions& opt) {
  if (opt.window_steps > 0) return std::nullopt;
  const auto& lim = opt.limits;
  const bool has_wall = lay.wall_at.has_value();
  std::vector<double> vals(lay.values);
  std::string_view first_line, last_line;
  for (std::size_t pos = 0; pos < body.size() && first_line.empty();) {
    const std::size_t end = std::min(body.find('\n', pos), body.size());
    if (!trim(body.substr(pos, end - pos)).empty()) first_line = body.substr(pos, end - pos);
    pos = end + 1;
  }
  for (std::size_t end = body.size(); end > 0 && last_line.empty();) {
    const std::size_t nl = body.rfind('\n', end - 1);
    const std::size_t start = nl == std::string_view::npos ? 0 : nl + 1;
    if (!trim(body.substr(start, end - start)).empty()) last_line = body.substr(start, end - start);
    end = nl == std::string_view::npos ? 0 : nl;
  }
  std::int64_t first = 0, last = 0, rank = 0, step = 0;
  if (first_line.empty() || !parse_plain_row(first_line, first, rank, vals, lay.trailing_empty)) return std::nullopt;
  if (!parse_plain_row(last_line, last, rank, vals, lay.trailing_empty)) return std::nullopt;
  const int world_max = std::min(lim.max_world_size, kWorldSizeCeiling);
  if (opt.world_size <= 0 && rank >= world_max) return std::nullopt;
  const int world = opt.world_size > 0 ? opt.world_size : static_cast<int>(rank) + 1;
  if (world > world_max || last < first) return std::nullopt;
  const std::uint64_t total = span_of(first, last);
  if (total > static_cast<std::uint64_t>(lim.max_window_steps) ||
      !values_fit(total, world, static_cast<int>(stages.size()) + (has_wall ? 1 : 0), lim))
    return std::nullopt;
  // A row takes at least 2 bytes per column: a body too short to fill half the dense window is
  // sparse, and the general path lays it out by the ranks present.
  if (static_cast<long double>(body.size() / (2 * ncol)) * 2 < static_cast<long double>(total) * world) return std::nullopt;

  std::vector<Window> out(1);
  Window& w = out[0];
  w.header_line = header_line;
  try {
    w.matrix = StageMatrix(StageSchema(stages, has_wall, opt.accumulation), world, first, static_cast<int>(total));
    const std::size_t k = stages.size();
    for (std::size_t pos = 0; pos < body.size();) {
      const std::size_t end = std::min(body.find('\n', pos), body.size());
      const std::string_view line = body.substr(pos, end - pos);
      pos = end + 1;
      if (trim(line).empty()) continue;
      if (!parse_plain_row(line, step, rank, vals, lay.trailing_empty)) return std::nullopt;
      if (step < first || step > last || rank >= world) return std::nullopt;
      lay.order(vals);
      const int t = static_cast<int>(step - first);  // 0 <= step - first < total <= INT_MAX
      const int r = static_cast<int>(rank);
      if (w.matrix.present(t, r)) return std::nullopt;  // duplicate: the general path words it
      w.matrix.set_record(t, r, std::span<const double>(vals).first(k),
                          has_wall ? std::optional<double>(vals[k]) : std::nullopt);
    }
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  return out;
}

bool parse_csv_row(std::string_view line, std::int64_t line_no, const CsvHeader& h, const std::string& file,
                   const ReadOptions& opt, std::vector<CsvField>& fields, std::span<double> vals, std::int64_t& step,
                   std::int64_t& rank) {
  const int world_max = std::min(opt.limits.max_world_size, kWorldSizeCeiling);
  if (h.sep == ',' && parse_plain_row(line, step, rank, vals, h.lay.trailing_empty) && rank < world_max &&
      !(opt.world_size > 0 && rank >= opt.world_size))
    return true;
  // General path: every accepted form, and every error message.
  const auto& cols = h.cols;
  if (auto why = split_csv(line, h.sep, fields); !why.empty()) throw FormatError(file, line_no, why);
  bool empty_row = true;  // a spreadsheet's row of empty cells is a blank line
  for (const auto& f : fields) empty_row = empty_row && trim(f.text).empty();
  if (empty_row) return false;
  if (fields.size() != h.ncol) {
    throw FormatError(file, line_no,
                      std::to_string(fields.size()) + " columns, expected " + std::to_string(h.ncol) + " (as in the header" +
                          (h.lay.trailing_empty ? ", whose separator at the end every line repeats)" : ")"));
  }
  if (h.lay.trailing_empty && !trim(fields.back().text).empty())
    throw FormatError(file, line_no,
                      "column " + std::to_string(h.ncol) + " is '" + printable(fields.back().text) +
                          "' but has no name in the header; expected it empty (a separator ending the line)");
  for (std::size_t col = 0; col < 2 + h.lay.values; ++col) {
    const std::string_view f = fields[col].text;
    bool ok;
    if (col == 0) {
      ok = parse_int_field(f, step, h.sep != ',');
      if (!ok)
        throw FormatError(file, line_no,
                          "column '" + printable(cols[0]) + "' is '" + printable(f) + "', expected an integer step (64-bit)");
    } else if (col == 1) {
      ok = parse_int_field(f, rank, h.sep != ',') && rank >= 0;
      if (!ok)
        throw FormatError(file, line_no,
                          "column '" + printable(cols[1]) + "' is '" + printable(f) + "', expected a rank 0.." +
                              std::to_string(world_max - 1));
      if (opt.world_size > 0 && rank >= opt.world_size)
        throw FormatError(file, line_no,
                          "rank " + std::to_string(rank) + " outside world size " + std::to_string(opt.world_size));
      if (rank >= world_max)
        throw FormatError(file, line_no,
                          "rank " + std::to_string(rank) + " is at or above the limit of " + std::to_string(world_max) +
                              " ranks; expected a smaller world (raise the limit with --max-world-size)");
    } else {
      ok = parse_seconds_field(f, h.sep != ',', vals[col - 2]);
      if (!ok)
        throw FormatError(file, line_no,
                          "column '" + printable(cols[col]) + "' is '" + printable(f) + "', expected a finite number of seconds >= 0");
    }
  }
  return true;
}

std::vector<Window> parse_csv(std::string_view text, const std::string& file, const ReadOptions& opt) {
  const auto& lim = opt.limits;
  const std::size_t bom = text.size() - strip_bom(text).size();
  CsvLines lines(text, bom);
  const CsvHeader h = read_csv_header(lines, file, opt);
  const std::size_t k = h.stages.size();
  const bool has_wall = h.lay.wall_at.has_value();
  if (h.sep == ',')
    if (auto direct = parse_csv_direct(text.substr(std::min(lines.pos(), text.size())), h.stages, h.lay, h.ncol,
                                       lines.line_no(), opt))
      return std::move(*direct);

  PendingWindow pw;
  pw.stages = h.stages;
  pw.header_line = lines.line_no();
  pw.accumulation = opt.accumulation;
  int max_rank = -1;
  // One record per remaining line, at most: reserve once instead of growing through copies.
  std::size_t n_lines = 1;
  for (std::size_t q = lines.pos(); (q = text.find('\n', q)) != std::string_view::npos; ++q) ++n_lines;
  pw.records.reserve(n_lines);
  pw.values.reserve(n_lines * k);
  std::vector<double> vals(h.lay.values);
  std::vector<CsvField> fields;
  std::int64_t step = 0, rank = 0;
  std::string_view line;
  while (lines.next(line)) {
    if (!parse_csv_row(line, lines.line_no(), h, file, opt, fields, vals, step, rank)) continue;
    h.lay.order(vals);
    Pending rec{};
    rec.line = lines.line_no();
    rec.step = step;
    rec.rank = static_cast<int>(rank);
    rec.offset = pw.values.size();
    pw.values.insert(pw.values.end(), vals.begin(), vals.begin() + static_cast<std::ptrdiff_t>(k));
    rec.has_wall = has_wall;
    rec.wall = has_wall ? vals[k] : 0.0;
    max_rank = std::max(max_rank, rec.rank);
    note_step(pw, rec.step, file, rec.line, lim);
    pw.records.push_back(rec);
  }
  pw.world = opt.world_size > 0 ? opt.world_size : max_rank + 1;
  if (pw.world < 1) throw FormatError(file, pw.header_line, kNoRecords);
  std::vector<Window> out;
  emit_windows(pw, file, opt, out);
  return out;
}

FdCloser::~FdCloser() { ::close(fd); }

/// A regular file's bytes as they are while it is read, up to the size it had when opened (what
/// the streaming reader reads too); nullopt for anything else (a pipe, a FIFO, /dev/stdin) or a
/// file that cannot be opened: the caller reads those as a stream, and words the failure. Read
/// rather than mapped: a mapping's pages fault with SIGBUS once another process truncates the
/// file under it (a logger rewriting its file in place), which killed the process; a read just
/// sees the shorter file, whose cut last line (if any) the parser then names. Past `limit` bytes
/// at open it throws too_big(size) before reading.
template <typename TooBig>
std::optional<Bytes> read_regular_file(const std::string& path, std::uint64_t limit, TooBig too_big) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (static_cast<std::uint64_t>(st.st_size) > limit) throw too_big(static_cast<std::uint64_t>(st.st_size));  // grew since stat
  Bytes text(static_cast<std::size_t>(st.st_size));
  std::size_t have = 0;
  while (have < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + have, text.size() - have, static_cast<off_t>(have));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FormatError(path, 0, std::string("read failed: ") + std::strerror(errno));
    if (n == 0) break;  // shorter than it was: what is there now
    have += static_cast<std::size_t>(n);
  }
  text.resize(have);
  return text;
}

}  // namespace detail

using detail::read_regular_file;
using detail::parse_csv;
using detail::parse_jsonl;

namespace {

/// UTF-16 text with its byte order mark (Excel's "Unicode Text", PowerShell 5's `>`) as UTF-8,
/// by glibc's iconv; nullopt for text without one. Line numbers are kept (a line is a line in
/// either encoding). Invalid UTF-16 (a lone surrogate, an odd byte at the end) is one line.
std::optional<std::string> utf16_as_utf8(std::string_view text, const std::string& name) {
  if (text.size() < 2) return std::nullopt;
  const auto b0 = static_cast<unsigned char>(text[0]), b1 = static_cast<unsigned char>(text[1]);
  const char* from = b0 == 0xFF && b1 == 0xFE ? "UTF-16LE" : b0 == 0xFE && b1 == 0xFF ? "UTF-16BE" : nullptr;
  if (!from) return std::nullopt;
  const iconv_t cd = ::iconv_open("UTF-8", from);
  if (cd == reinterpret_cast<iconv_t>(-1)) throw FormatError(name, 0, std::string("cannot convert ") + from + " text here (iconv)");
  struct Closer {
    iconv_t cd;
    ~Closer() { ::iconv_close(cd); }
  } closer{cd};
  text.remove_prefix(2);
  // Two UTF-16 bytes become at most three UTF-8 bytes; a surrogate pair's four become four.
  std::string out(text.size() / 2 * 3 + 4, '\0');
  char* in = const_cast<char*>(text.data());
  std::size_t in_left = text.size(), out_left = out.size();
  char* o = out.data();
  if (::iconv(cd, &in, &in_left, &o, &out_left) == static_cast<std::size_t>(-1)) {
    const std::size_t done = static_cast<std::size_t>(o - out.data());
    const auto line = 1 + std::count(out.data(), out.data() + done, '\n');
    throw FormatError(name, line,
                      std::string(errno == EINVAL ? "truncated " : "invalid ") + from + " text at byte " +
                          std::to_string(2 + (text.size() - in_left)) + "; expected " + from +
                          " throughout (as its byte order mark says), or UTF-8");
  }
  out.resize(out.size() - out_left);
  return out;
}

}  // namespace

std::vector<Window> parse_stage_text(std::string_view text, const std::string& name, MatrixFormat format,
                                     const ReadOptions& opt) {
  if (const auto utf8 = utf16_as_utf8(text, name)) return parse_stage_text(*utf8, name, format, opt);
  detail::check_line_lengths(text, name, opt.limits.max_line_bytes, format == MatrixFormat::csv);
  return format == MatrixFormat::csv ? parse_csv(text, name, opt) : parse_jsonl(text, name, opt);
}

std::vector<Window> read_stage_file(const std::string& path, const ReadOptions& opt) {
  const auto format = opt.format ? opt.format : format_from_path(path);
  if (!format) throw FormatError(path, 0, "unknown file extension; expected .jsonl or .csv (or pass --format)");
  const auto limit = static_cast<std::uint64_t>(std::max<std::int64_t>(opt.limits.max_file_bytes, 0));
  auto too_big = [&](std::uint64_t bytes) {
    return FormatError(path, 0,
                       "file is " + std::to_string(bytes) + " bytes, above the limit of " + std::to_string(limit) +
                           " bytes; expected a smaller file (raise the limit with --max-file-size)");
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw FormatError(path, 0, "is a directory; expected a stage-matrix file");
    if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > limit) throw too_big(static_cast<std::uint64_t>(st.st_size));
  }
  if (const auto bytes = read_regular_file(path, limit, too_big)) {
    return parse_stage_text({bytes->data(), bytes->size()}, path, *format, opt);
  }
  // Not a regular file (a pipe, a FIFO, /dev/stdin): read in blocks, never past the limit.
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path, 0, "the file " + detail::open_error(path) + "; expected a stage-matrix file");
  std::string text;
  std::vector<char> block(1 << 16);
  // A stream with no line break (/dev/zero) is refused once its line passes --max-line-bytes.
  const auto max_line = static_cast<std::size_t>(std::max<std::int64_t>(opt.limits.max_line_bytes, 1));
  std::size_t line_start = 0;
  std::int64_t line_no = 1;
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    const std::size_t from = text.size();
    text.append(block.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > limit) throw too_big(text.size());
    for (std::size_t i = from; i < text.size(); ++i) {
      if (text[i] == '\n') ++line_no;
      if (text[i] == '\n' || (*format == MatrixFormat::csv && text[i] == '\r')) line_start = i + 1;
    }
    if (text.size() - line_start > max_line) throw detail::line_too_long(path, line_no, opt.limits.max_line_bytes);
  }
  if (in.bad()) throw FormatError(path, 0, "read failed");
  return parse_stage_text(text, path, *format, opt);
}

// --- writers -----------------------------------------------------------------------------------

void write_jsonl(std::ostream& out, const Window& w) {
  const auto& m = w.matrix;
  const auto& schema = m.schema();
  nlohmann::ordered_json h;
  h["schema"] = kStagesSchema;
  h["stages"] = schema.explicit_names();
  h["world_size"] = m.world_size();
  if (!m.roles().empty()) h["roles"] = m.roles();
  if (schema.accumulation() > 1) h["accumulation"] = schema.accumulation();
  h["window"] = {{"first_step", m.first_step()}, {"steps", m.steps()}};
  const auto& tel = w.telemetry;
  if (!tel.gather_ok || !tel.reasons.empty() || tel.dropped_records != 0)
    h["telemetry"] = {{"gather_ok", tel.gather_ok}, {"reasons", tel.reasons}, {"dropped_records", tel.dropped_records}};
  if (!w.ranks.empty()) {
    auto& arr = h["ranks"] = nlohmann::ordered_json::array();
    for (const auto& r : w.ranks)
      arr.push_back({{"rank", r.rank}, {"local_rank", r.local_rank}, {"node_rank", r.node_rank}, {"hostname", r.hostname}});
  }
  out << h.dump() << '\n';
  const int k = schema.explicit_count();
  for (int t = 0; t < m.steps(); ++t)
    for (int r = 0; r < m.ranks(); ++r) {
      if (!m.present(t, r)) continue;
      nlohmann::ordered_json rec;
      rec["step"] = m.step_id(t);
      rec["rank"] = m.rank_id(r);
      auto& d = rec["d"] = nlohmann::ordered_json::array();
      for (int s = 0; s < k; ++s) d.push_back(m.d(t, r, s));
      if (schema.has_residual()) rec["wall"] = m.wall(t, r);
      nlohmann::ordered_json side;
      switch (m.fwd_event_state(t, r)) {
        case frontier::EventState::unsampled: break;
        case frontier::EventState::ready:
          side["fwd_event"] = "ready";
          side["fwd_event_s"] = m.fwd_event_s(t, r);
          break;
        case frontier::EventState::missing: side["fwd_event"] = "missing"; break;
      }
      if (m.has_sync_wait()) {
        bool any = false;
        auto sw = nlohmann::ordered_json::array();
        for (int s = 0; s < k; ++s) {
          const double v = m.sync_wait(t, r, s);
          if (std::isnan(v)) {
            sw.push_back(nullptr);
          } else {
            sw.push_back(v);
            any = true;
          }
        }
        if (any) side["sync_wait"] = std::move(sw);
      }
      if (const double cw = m.cpu_wait(t, r); !std::isnan(cw)) side["cpu_wait"] = cw;
      if (!side.empty()) rec["side"] = std::move(side);
      out << rec.dump() << '\n';
    }
}

void write_csv(std::ostream& out, const StageMatrix& m) {
  const auto& schema = m.schema();
  out << "step,rank";
  for (const auto& n : schema.explicit_names()) {
    // RFC 4180: a name with a separator, a quote or edge blanks is quoted, its quotes doubled.
    const bool quote = n.find_first_of(",\"") != std::string::npos || n.front() == ' ' || n.back() == ' ' ||
                       n.front() == '\t' || n.back() == '\t';
    if (!quote) {
      out << ',' << n;
      continue;
    }
    out << ",\"";
    for (char c : n) out << (c == '"' ? "\"\"" : std::string(1, c));
    out << '"';
  }
  if (schema.has_residual()) out << ",wall";
  out << '\n';
  char buf[64];
  for (int t = 0; t < m.steps(); ++t)
    for (int r = 0; r < m.ranks(); ++r) {
      if (!m.present(t, r)) continue;
      out << m.step_id(t) << ',' << m.rank_id(r);
      auto put = [&](double v) {
        const auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
        out << ',' << std::string_view(buf, static_cast<std::size_t>(res.ptr - buf));
      };
      for (int s = 0; s < schema.explicit_count(); ++s) put(m.d(t, r, s));
      if (schema.has_residual()) put(m.wall(t, r));
      out << '\n';
    }
}

}  // namespace sf::formats
