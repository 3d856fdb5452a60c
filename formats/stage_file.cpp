#include "sf/formats/formats.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sf::formats {

using nlohmann::json;
using frontier::StageMatrix;
using frontier::StageSchema;

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

namespace {

/// One parsed (step, rank) record waiting for its window to close.
struct Pending {
  std::int64_t step;
  std::int64_t line;
  std::size_t offset;  // into values
  double wall;
  double event_s = 0;
  std::int64_t sync_offset = -1;  // into sync values, explicit-stage count entries (NaN = null)
  int rank;
  bool has_wall;
  frontier::EventState event = frontier::EventState::unsampled;
};

struct PendingWindow {
  std::vector<std::string> stages;
  int world = 0;
  int accumulation = 1;
  std::vector<std::string> roles;
  std::optional<std::int64_t> span_first;
  std::optional<int> span_steps;
  frontier::TelemetryInput telemetry;
  std::vector<RankInfo> ranks;
  std::int64_t header_line = 0;
  std::vector<Pending> records;
  std::vector<double> values;
  std::vector<double> sync_values;
};

std::string printable(std::string_view s, std::size_t max = 40) {
  std::string out;
  for (char c : s.substr(0, max)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  if (s.size() > max) out += "...";
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

/// Splits windows into chunks of `steps` steps (by step id from the window's first step).
void emit_windows(PendingWindow& pw, const std::string& file, const ReadOptions& opt, std::vector<Window>& out) {
  const int k = static_cast<int>(pw.stages.size());
  bool has_wall = !pw.records.empty() && pw.records.front().has_wall;
  for (const auto& rec : pw.records)
    if (rec.has_wall != has_wall)
      throw FormatError(file, rec.line,
                        rec.has_wall ? "record has \"wall\" but earlier records of this window do not; expected all or none"
                                     : "record has no \"wall\" but earlier records of this window do; expected all or none");
  StageSchema schema;
  try {
    schema = StageSchema(pw.stages, has_wall, pw.accumulation);
  } catch (const std::invalid_argument& e) {
    throw FormatError(file, pw.header_line, std::string("bad header: ") + e.what());
  }
  std::int64_t first = 0, last = -1;
  if (!pw.records.empty()) {
    first = last = pw.records.front().step;
    for (const auto& rec : pw.records) {
      first = std::min(first, rec.step);
      last = std::max(last, rec.step);
    }
  }
  if (pw.span_first) first = *pw.span_first;
  if (pw.span_steps) last = first + *pw.span_steps - 1;
  for (const auto& rec : pw.records)
    if (rec.step < first || rec.step > last)
      throw FormatError(file, rec.line,
                        "step " + std::to_string(rec.step) + " outside the header's window [" + std::to_string(first) +
                            ", " + std::to_string(last) + "]");
  const std::int64_t total = last - first + 1;
  if (total > std::numeric_limits<int>::max() / std::max(1, pw.world))
    throw FormatError(file, pw.header_line, "window spans " + std::to_string(total) + " steps; too large");

  // Duplicate (step, rank) check before anything is stored.
  std::vector<std::int64_t> seen(static_cast<std::size_t>(total) * pw.world, 0);
  for (const auto& rec : pw.records) {
    auto& slot = seen[static_cast<std::size_t>(rec.step - first) * pw.world + rec.rank];
    if (slot != 0)
      throw FormatError(file, rec.line,
                        "duplicate record for (step " + std::to_string(rec.step) + ", rank " + std::to_string(rec.rank) +
                            "), first seen at line " + std::to_string(slot) + "; expected one record per (step, rank)");
    slot = rec.line;
  }

  const std::int64_t chunk = opt.window_steps > 0 ? opt.window_steps : std::max<std::int64_t>(total, 0);
  std::int64_t start = first;
  do {
    const std::int64_t n = std::min<std::int64_t>(chunk, last - start + 1);
    Window w;
    w.matrix = StageMatrix(schema, pw.world, start, static_cast<int>(std::max<std::int64_t>(n, 0)));
    w.telemetry = pw.telemetry;
    w.ranks = pw.ranks;
    w.header_line = pw.header_line;
    try {
      if (!pw.roles.empty()) w.matrix.set_roles(pw.roles);
    } catch (const std::invalid_argument& e) {
      throw FormatError(file, pw.header_line, e.what());
    }
    for (const auto& rec : pw.records) {
      if (rec.step < start || rec.step >= start + n) continue;
      const int t = static_cast<int>(rec.step - start);
      try {
        w.matrix.set_record(t, rec.rank, std::span<const double>(pw.values.data() + rec.offset, k),
                            rec.has_wall ? std::optional<double>(rec.wall) : std::nullopt);
        if (rec.event != frontier::EventState::unsampled) w.matrix.set_fwd_event(t, rec.rank, rec.event, rec.event_s);
        if (rec.sync_offset >= 0)
          for (int s = 0; s < k; ++s) {
            const double v = pw.sync_values[static_cast<std::size_t>(rec.sync_offset) + s];
            if (!std::isnan(v)) w.matrix.set_sync_wait(t, rec.rank, s, v);
          }
      } catch (const std::invalid_argument& e) {
        throw FormatError(file, rec.line, e.what());
      }
    }
    out.push_back(std::move(w));
    start += chunk;
  } while (chunk > 0 && start <= last);
}

std::int64_t get_int(const json& obj, const char* key, const std::string& file, std::int64_t line, bool required,
                     std::int64_t fallback) {
  const auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) throw FormatError(file, line, std::string("missing field \"") + key + "\"; expected an integer");
    return fallback;
  }
  if (!it->is_number_integer())
    throw FormatError(file, line, std::string("field \"") + key + "\" is " + type_name(*it) + ", expected an integer");
  return it->get<std::int64_t>();
}

double get_duration(const json& v, const std::string& file, std::int64_t line, const std::string& what) {
  if (!v.is_number()) throw FormatError(file, line, what + " is " + type_name(v) + ", expected a number of seconds >= 0");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0)
    throw FormatError(file, line, what + " is " + printable(v.dump()) + ", expected a finite number of seconds >= 0");
  return x;
}

void parse_header(const json& h, const std::string& file, std::int64_t line, PendingWindow& pw) {
  const auto& schema = h["schema"];
  if (!schema.is_string() || schema.get<std::string>() != kStagesSchema)
    throw FormatError(file, line,
                      "header schema is " + printable(schema.dump()) + ", expected \"" + std::string(kStagesSchema) + "\"");
  const auto st = h.find("stages");
  if (st == h.end() || !st->is_array() || st->empty())
    throw FormatError(file, line, "header \"stages\" must be a non-empty array of stage names");
  for (const auto& s : *st) {
    if (!s.is_string()) throw FormatError(file, line, "header \"stages\" entry is " + type_name(s) + ", expected a string");
    pw.stages.push_back(s.get<std::string>());
  }
  const auto world = get_int(h, "world_size", file, line, true, 0);
  if (world < 1 || world > (1 << 24))
    throw FormatError(file, line, "header world_size is " + std::to_string(world) + ", expected 1..16777216");
  pw.world = static_cast<int>(world);
  const auto acc = get_int(h, "accumulation", file, line, false, 1);
  if (acc < 1) throw FormatError(file, line, "header accumulation is " + std::to_string(acc) + ", expected >= 1");
  pw.accumulation = static_cast<int>(acc);
  if (const auto roles = h.find("roles"); roles != h.end()) {
    if (!roles->is_array() || static_cast<int>(roles->size()) != pw.world)
      throw FormatError(file, line, "header \"roles\" must be an array of world_size strings");
    for (const auto& r : *roles) {
      if (!r.is_string()) throw FormatError(file, line, "header \"roles\" entry is " + type_name(r) + ", expected a string");
      pw.roles.push_back(r.get<std::string>());
    }
  }
  if (const auto win = h.find("window"); win != h.end()) {
    if (!win->is_object()) throw FormatError(file, line, "header \"window\" must be an object {first_step, steps}");
    pw.span_first = get_int(*win, "first_step", file, line, true, 0);
    const auto n = get_int(*win, "steps", file, line, true, 0);
    if (n < 0) throw FormatError(file, line, "header window steps is negative");
    pw.span_steps = static_cast<int>(n);
  }
  if (const auto tel = h.find("telemetry"); tel != h.end()) {
    if (!tel->is_object()) throw FormatError(file, line, "header \"telemetry\" must be an object");
    if (const auto g = tel->find("gather_ok"); g != tel->end()) {
      if (!g->is_boolean()) throw FormatError(file, line, "telemetry gather_ok must be true or false");
      pw.telemetry.gather_ok = g->get<bool>();
    }
    pw.telemetry.dropped_records = get_int(*tel, "dropped_records", file, line, false, 0);
    if (const auto rs = tel->find("reasons"); rs != tel->end()) {
      if (!rs->is_array()) throw FormatError(file, line, "telemetry reasons must be an array of strings");
      for (const auto& r : *rs) {
        if (!r.is_string()) throw FormatError(file, line, "telemetry reason is " + type_name(r) + ", expected a string");
        pw.telemetry.reasons.push_back(r.get<std::string>());
      }
    }
  }
  if (const auto ranks = h.find("ranks"); ranks != h.end()) {
    if (!ranks->is_array()) throw FormatError(file, line, "header \"ranks\" must be an array of rank identities");
    for (const auto& r : *ranks) {
      if (!r.is_object()) throw FormatError(file, line, "rank identity is " + type_name(r) + ", expected an object");
      RankInfo info;
      info.rank = static_cast<int>(get_int(r, "rank", file, line, true, 0));
      info.local_rank = static_cast<int>(get_int(r, "local_rank", file, line, false, 0));
      info.node_rank = static_cast<int>(get_int(r, "node_rank", file, line, false, 0));
      if (const auto hn = r.find("hostname"); hn != r.end() && hn->is_string()) info.hostname = hn->get<std::string>();
      pw.ranks.push_back(std::move(info));
    }
  }
}

void parse_record(const json& o, const std::string& file, std::int64_t line, PendingWindow& pw) {
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
    pw.values.push_back(get_duration((*d)[s], file, line, "duration of '" + pw.stages[s] + "'"));
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
    if (const auto sw = side->find("sync_wait"); sw != side->end()) {
      if (!sw->is_array() || sw->size() != k)
        throw FormatError(file, line, "\"sync_wait\" must be an array of " + std::to_string(k) + " seconds or nulls");
      rec.sync_offset = static_cast<std::int64_t>(pw.sync_values.size());
      for (std::size_t s = 0; s < k; ++s)
        pw.sync_values.push_back((*sw)[s].is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                    : get_duration((*sw)[s], file, line, "sync_wait entry"));
    }
  }
  pw.records.push_back(rec);
}

std::vector<Window> parse_jsonl(std::string_view text, const std::string& file, const ReadOptions& opt) {
  std::vector<Window> out;
  std::optional<PendingWindow> pw;
  std::int64_t line_no = 0;
  std::size_t pos = 0;
  bool any = false;
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
    try {
      obj = json::parse(line);
    } catch (const json::parse_error& e) {
      throw FormatError(file, line_no,
                        "not valid JSON at column " + std::to_string(e.byte) +
                            " (truncated or corrupt line?); expected one JSON object per line");
    } catch (const json::out_of_range&) {
      throw FormatError(file, line_no, "a number is out of range; expected finite numbers of seconds");
    }
    if (!obj.is_object()) throw FormatError(file, line_no, "line is " + type_name(obj) + ", expected a JSON object");
    if (obj.contains("schema")) {
      if (pw) emit_windows(*pw, file, opt, out);
      pw.emplace();
      pw->header_line = line_no;
      parse_header(obj, file, line_no, *pw);
      continue;
    }
    if (!pw)
      throw FormatError(file, line_no,
                        "record before any header; expected a first line {\"schema\":\"sf.stages/1\",\"stages\":[...],\"world_size\":R}");
    parse_record(obj, file, line_no, *pw);
  }
  if (!any) throw FormatError(file, 0, "empty file; expected a sf.stages/1 header line and records");
  emit_windows(*pw, file, opt, out);
  return out;
}

// --- CSV ---------------------------------------------------------------------------------------

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

/// Parses a data line of the plain form "step,rank,x,...,x" (no blanks around fields) into
/// row's row.size() columns. Returns false for any other line, valid or not: the caller then
/// takes the general path, which accepts blanks and words the error. Accepts only lines the
/// general path accepts, with the same values.
bool parse_plain_row(std::string_view line, std::vector<double>& row) {
  const char* p = line.data();
  const char* const e = p + line.size();
  const std::size_t ncol = row.size();
  for (std::size_t col = 0; col < ncol; ++col) {
    const char* end = nullptr;
    if (col < 2) {
      std::int64_t iv = 0;
      const auto r = std::from_chars(p, e, iv);
      if (r.ec != std::errc() || r.ptr == p || (col == 1 && (iv < 0 || iv > (1 << 24)))) return false;
      row[col] = static_cast<double>(iv);
      end = r.ptr;
    } else {
      double v = 0;
      const auto r = std::from_chars(p, e, v);
      if (r.ec != std::errc() || r.ptr == p || !std::isfinite(v) || v < 0) return false;
      row[col] = v;
      end = r.ptr;
    }
    if (col + 1 < ncol) {
      if (end == e || *end != ',') return false;
      p = end + 1;
    } else if (end != e && !(end + 1 == e && *end == '\r')) {
      return false;
    }
  }
  return true;
}

/// The common case, read in one pass straight into the window's matrix: one window, every data
/// line a plain row, the first line holding the smallest step and the last line the largest
/// step and (unless opt.world_size is given) the largest rank, as write_csv and sorted files
/// have them, and no duplicate (step, rank). Builds the matrix the general path would, without
/// its list of pending records. nullopt for any other input, valid or not; the caller then
/// takes the general path, which also words every error.
std::optional<std::vector<Window>> parse_csv_direct(std::string_view body, const std::vector<std::string>& stages,
                                                    bool has_wall, std::size_t ncol, const ReadOptions& opt) {
  if (opt.window_steps > 0) return std::nullopt;
  std::vector<double> row(ncol);
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
  if (first_line.empty() || !parse_plain_row(first_line, row)) return std::nullopt;
  const auto first = static_cast<std::int64_t>(row[0]);
  if (!parse_plain_row(last_line, row)) return std::nullopt;
  const auto last = static_cast<std::int64_t>(row[0]);
  const int world = opt.world_size > 0 ? opt.world_size : static_cast<int>(row[1]) + 1;
  if (last < first || last - first + 1 > std::numeric_limits<int>::max() / world) return std::nullopt;

  std::vector<Window> out(1);
  Window& w = out[0];
  w.header_line = 1;
  try {
    w.matrix = StageMatrix(StageSchema(stages, has_wall, opt.accumulation), world, first,
                           static_cast<int>(last - first + 1));
    for (std::size_t pos = 0; pos < body.size();) {
      const std::size_t end = std::min(body.find('\n', pos), body.size());
      const std::string_view line = body.substr(pos, end - pos);
      pos = end + 1;
      if (trim(line).empty()) continue;
      if (!parse_plain_row(line, row)) return std::nullopt;
      const auto step = static_cast<std::int64_t>(row[0]);
      const int rank = static_cast<int>(row[1]);
      if (step < first || step > last || rank >= world) return std::nullopt;
      const int t = static_cast<int>(step - first);
      if (w.matrix.present(t, rank)) return std::nullopt;  // duplicate: the general path words it
      w.matrix.set_record(t, rank, std::span<const double>(row).subspan(2, stages.size()),
                          has_wall ? std::optional<double>(row[ncol - 1]) : std::nullopt);
    }
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  return out;
}

std::vector<Window> parse_csv(std::string_view text, const std::string& file, const ReadOptions& opt) {
  std::size_t pos = 0;
  std::int64_t line_no = 0;
  auto next_line = [&](std::string_view& line) {
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      line = text.substr(pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (!trim(line).empty()) return true;
    }
    return false;
  };
  std::string_view line;
  if (!next_line(line)) throw FormatError(file, 0, "empty file; expected a header step,rank,<stages...>[,wall]");
  if (line.find('\0') != std::string_view::npos) throw FormatError(file, line_no, "binary data; expected a CSV header");
  std::vector<std::string> cols;
  for (std::size_t p = 0;;) {
    const std::size_t c = line.find(',', p);
    cols.emplace_back(trim(line.substr(p, c == std::string_view::npos ? std::string_view::npos : c - p)));
    if (c == std::string_view::npos) break;
    p = c + 1;
  }
  if (cols.size() < 3 || cols[0] != "step" || cols[1] != "rank")
    throw FormatError(file, line_no,
                      "header is '" + printable(line) + "', expected step,rank,<stage...>[,wall]");
  const bool has_wall = cols.back() == "wall";
  const std::vector<std::string> stages(cols.begin() + 2, cols.end() - (has_wall ? 1 : 0));
  if (stages.empty()) throw FormatError(file, line_no, "header names no stage column");
  const std::size_t k = stages.size(), ncol = cols.size();
  if (auto direct = parse_csv_direct(text.substr(std::min(pos, text.size())), stages, has_wall, ncol, opt))
    return std::move(*direct);

  PendingWindow pw;
  pw.stages = stages;
  pw.header_line = 1;
  pw.accumulation = opt.accumulation;
  int max_rank = -1;
  std::vector<double> row(ncol);
  // General path: blanks around fields, and every error message.
  auto parse_row = [&] {
    const char* p = line.data();
    const char* e = line.data() + line.size();
    std::size_t col = 0;
    while (true) {
      const char* c = static_cast<const char*>(std::memchr(p, ',', static_cast<std::size_t>(e - p)));
      const char* fe = c ? c : e;
      if (col >= ncol)
        throw FormatError(file, line_no, "more than " + std::to_string(ncol) + " columns; expected " + std::to_string(ncol));
      const char* fb = p;
      while (fb < fe && (*fb == ' ' || *fb == '\t')) ++fb;
      const char* fz = fe;
      while (fz > fb && (fz[-1] == ' ' || fz[-1] == '\t' || fz[-1] == '\r')) --fz;
      double v = 0;
      bool ok;
      if (col < 2) {
        std::int64_t iv = 0;
        const auto r = std::from_chars(fb, fz, iv);
        ok = r.ec == std::errc() && r.ptr == fz && fb != fz;
        v = static_cast<double>(iv);
        if (ok && col == 0) row[0] = v;
        if (ok && col == 1 && (iv < 0 || iv > (1 << 24))) ok = false;
      } else {
        const auto r = std::from_chars(fb, fz, v);
        ok = r.ec == std::errc() && r.ptr == fz && fb != fz && std::isfinite(v) && v >= 0;
      }
      if (!ok)
        throw FormatError(file, line_no,
                          "column '" + cols[col] + "' is '" + printable(std::string_view(fb, static_cast<std::size_t>(fz - fb))) +
                              "', expected " + (col == 0 ? "an integer step" : col == 1 ? "a rank 0..16777216" : "a finite number of seconds >= 0"));
      row[col++] = v;
      if (!c) break;
      p = c + 1;
    }
    if (col != ncol)
      throw FormatError(file, line_no, std::to_string(col) + " columns, expected " + std::to_string(ncol));
  };
  // One record per remaining line, at most: reserve once instead of growing through copies.
  std::size_t lines = 1;
  for (std::size_t q = pos; (q = text.find('\n', q)) != std::string_view::npos; ++q) ++lines;
  pw.records.reserve(lines);
  pw.values.reserve(lines * k);
  while (next_line(line)) {
    if (!parse_plain_row(line, row)) parse_row();
    Pending rec{};
    rec.line = line_no;
    rec.step = static_cast<std::int64_t>(row[0]);
    rec.rank = static_cast<int>(row[1]);
    rec.offset = pw.values.size();
    for (std::size_t s = 0; s < k; ++s) pw.values.push_back(row[2 + s]);
    rec.has_wall = has_wall;
    rec.wall = has_wall ? row[ncol - 1] : 0.0;
    max_rank = std::max(max_rank, rec.rank);
    pw.records.push_back(rec);
  }
  pw.world = opt.world_size > 0 ? opt.world_size : max_rank + 1;
  if (pw.world < 1) throw FormatError(file, line_no, "no records after the header");
  for (const auto& rec : pw.records)
    if (rec.rank >= pw.world)
      throw FormatError(file, rec.line,
                        "rank " + std::to_string(rec.rank) + " outside world size " + std::to_string(pw.world));
  std::vector<Window> out;
  emit_windows(pw, file, opt, out);
  return out;
}

/// A regular, non-empty file mapped read-only and populated in one go: no copy into a buffer
/// and no zeroing of one. Not mapped (mapped() false) for anything else or on any failure;
/// the caller then reads the file. Stage files are replaced by rename (write_file_atomic),
/// which leaves an existing mapping intact.
class MappedFile {
public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      const auto size = static_cast<std::size_t>(st.st_size);
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = p;
        size_ = size;
      }
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  bool mapped() const { return data_ != nullptr; }
  std::string_view text() const { return {static_cast<const char*>(data_), size_}; }

private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace

std::vector<Window> parse_stage_text(std::string_view text, const std::string& name, MatrixFormat format,
                                     const ReadOptions& opt) {
  return format == MatrixFormat::csv ? parse_csv(text, name, opt) : parse_jsonl(text, name, opt);
}

std::vector<Window> read_stage_file(const std::string& path, const ReadOptions& opt) {
  const auto format = opt.format ? opt.format : format_from_path(path);
  if (!format) throw FormatError(path, 0, "unknown file extension; expected .jsonl or .csv (or pass --format)");
  if (const MappedFile mapped(path); mapped.mapped()) return parse_stage_text(mapped.text(), path, *format, opt);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path, 0, "cannot open file for reading");
  in.seekg(0, std::ios::end);
  const auto size = in.tellg();
  if (size < 0) throw FormatError(path, 0, "cannot read file size");
  // Uninitialised: read() fills every byte, so zeroing first would be one more pass over the file.
  const auto text = std::make_unique_for_overwrite<char[]>(static_cast<std::size_t>(size));
  in.seekg(0);
  in.read(text.get(), size);
  if (!in) throw FormatError(path, 0, "read failed");
  return parse_stage_text(std::string_view(text.get(), static_cast<std::size_t>(size)), path, *format, opt);
}

// --- writers -----------------------------------------------------------------------------------

void write_jsonl(std::ostream& out, const Window& w) {
  const auto& m = w.matrix;
  const auto& schema = m.schema();
  nlohmann::ordered_json h;
  h["schema"] = kStagesSchema;
  h["stages"] = schema.explicit_names();
  h["world_size"] = m.ranks();
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
      rec["rank"] = r;
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
      if (!side.empty()) rec["side"] = std::move(side);
      out << rec.dump() << '\n';
    }
}

void write_csv(std::ostream& out, const StageMatrix& m) {
  const auto& schema = m.schema();
  out << "step,rank";
  for (const auto& n : schema.explicit_names()) out << ',' << n;
  if (schema.has_residual()) out << ",wall";
  out << '\n';
  char buf[64];
  for (int t = 0; t < m.steps(); ++t)
    for (int r = 0; r < m.ranks(); ++r) {
      if (!m.present(t, r)) continue;
      out << m.step_id(t) << ',' << r;
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
