// Kineto (PyTorch profiler) Chrome traces reduced to a stage matrix: one trace per rank, steps
// from ProfilerStep#N, stage boundaries from the CPU-side events of the step. docs/kineto.md
// gives the mapping, its assumptions and what it loses. This file decides where each trace's
// rank and world size come from, in the order that fails fastest, and builds the window; the
// reading is kineto_source.cpp / kineto_parse.cpp, the reduction kineto_reduce.cpp.
#include "kineto_internal.h"
#include "step_span.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>

namespace sf::formats {

namespace {

using namespace kineto;

std::optional<std::int64_t> rank_from_name(const std::string& path) {
  const std::string base = lower(path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1));
  for (std::size_t at = base.find("rank"); at != std::string::npos; at = base.find("rank", at + 1)) {
    std::size_t p = at + 4;
    if (p < base.size() && (base[p] == '-' || base[p] == '_')) ++p;
    if (p >= base.size() || base[p] < '0' || base[p] > '9') continue;
    std::int64_t r = 0;
    const auto res = std::from_chars(base.data() + p, base.data() + base.size(), r);
    if (res.ec != std::errc())  // digits past the 64-bit range: a rank outside any world
      throw FormatError(path, 0, "the rank in the file name is outside the 64-bit integer range; expected a rank 0..world_size-1");
    return r;
  }
  return std::nullopt;
}

/// The files of a window, for a message about the window as a whole.
std::string files_label(const std::vector<KinetoTrace>& traces) {
  return traces.size() == 1 ? traces.front().file : traces.front().file + " and " + std::to_string(traces.size() - 1) + " more";
}

std::string raise_hint(const char* flag) { return std::string(" (raise the limit with ") + flag + ")"; }

/// One trace to import: its name and a way to read its bytes (twice: the head, then the events,
/// unless it can be read once only: a pipe, /dev/stdin).
struct Input {
  std::string name;
  std::function<std::unique_ptr<ByteSource>()> open;
  bool rereadable = true;
};

std::uint64_t byte_limit(const ReadLimits& lim) { return static_cast<std::uint64_t>(std::max<std::int64_t>(lim.max_file_bytes, 0)); }

int world_limit(const ReadLimits& lim) { return std::min(lim.max_world_size, kWorldSizeCeiling); }

void check_options(std::size_t n, const KinetoOptions& opt, const StageLayout& layout) {
  if (n == 0) throw FormatError("import kineto", 0, "no trace files given; expected one trace per rank");
  const int world_max = world_limit(opt.limits);
  if (opt.world_size > world_max)
    throw FormatError("import kineto", 0,
                      "--world-size " + std::to_string(opt.world_size) + " is above the limit of " + std::to_string(world_max) +
                          " ranks; expected a smaller world" + raise_hint("--max-world-size"));
  if (opt.rank >= 0 && n > 1)
    throw FormatError("import kineto", 0,
                      "--rank names the rank of one trace, and " + std::to_string(n) +
                          " traces were given; expected one trace with --rank, or traces whose rank is in distributedInfo or "
                          "the file name");
  if (static_cast<int>(layout.stages.size()) > opt.limits.max_stages)
    throw FormatError("import kineto", 0,
                      "the stage map makes " + std::to_string(layout.stages.size()) + " stages, above the limit of " +
                          std::to_string(opt.limits.max_stages) + "; expected fewer stages");
}

/// The rank a trace's head settles: distributedInfo.rank there, or the file name of a bare
/// array (which has no distributedInfo). An object without it in the head may still carry it
/// after its events, so its file name settles nothing yet.
std::optional<std::int64_t> said_rank(const TraceHead& head, const std::string& name, const KinetoOptions& opt) {
  if (head.rank) return head.rank;
  if (opt.rank >= 0 || head.form != "event array") return std::nullopt;
  return rank_from_name(name);
}

/// Every trace's head first (milliseconds each): traces of different jobs, two traces of one
/// rank and a world above the limit fail before any trace's events are read.
void check_heads(const std::vector<Input>& inputs, const KinetoOptions& opt) {
  const int world_max = world_limit(opt.limits);
  std::optional<std::int64_t> world;
  std::string world_file;
  std::map<std::int64_t, std::string> rank_file;
  for (const auto& in : inputs) {
    if (!in.rereadable) continue;  // its checks come after its events
    const auto src = in.open();
    const TraceHead head = read_head(*src, in.name, byte_limit(opt.limits));
    if (head.world) {
      if (*head.world > world_max)
        throw FormatError(in.name, 0,
                          "distributedInfo.world_size is " + std::to_string(*head.world) + ", above the limit of " +
                              std::to_string(world_max) + " ranks; expected a smaller world" + raise_hint("--max-world-size"));
      if (world && *world != *head.world)
        throw FormatError(in.name, 0,
                          "world size " + std::to_string(*head.world) + " but " + world_file + " has " + std::to_string(*world) +
                              "; expected traces of one job");
      world = head.world;
      world_file = in.name;
    }
    if (const auto r = said_rank(head, in.name, opt)) {
      if (const auto it = rank_file.find(*r); it != rank_file.end())
        throw FormatError(in.name, 0, "rank " + std::to_string(*r) + " already given by " + it->second + "; expected one trace per rank");
      rank_file[*r] = in.name;
    }
  }
}

/// Where the trace's rank and world size come from (docs/kineto.md, "Rank and world size"):
/// distributedInfo, else the flags, else (rank) the file name. Checked after the trace's steps,
/// so a trace without ProfilerStep spans says that first, whatever flags it got.
void identify(const Trace& tr, const KinetoOptions& opt, KinetoTrace& info) {
  const std::string& path = tr.file;
  const int world_max = world_limit(opt.limits);
  std::int64_t rank = 0;
  if (tr.head.rank) {
    rank = *tr.head.rank;
    info.rank_source = "distributedInfo";
    if (opt.rank >= 0 && opt.rank != rank)
      throw FormatError(path, 0,
                        "distributedInfo.rank is " + std::to_string(rank) + " but --rank is " + std::to_string(opt.rank) +
                            "; expected the trace's own rank (or no --rank)");
  } else if (opt.rank >= 0) {
    rank = opt.rank;
    info.rank_source = "--rank";
  } else if (const auto r = rank_from_name(path)) {
    rank = *r;
    info.rank_source = "file name";
  } else {
    throw FormatError(path, 0,
                      "no distributedInfo.rank and no rank in the file name; expected --rank N (with --world-size) for a "
                      "single trace without rank metadata, a Kineto trace with distributedInfo, or a file named like rank3.json");
  }
  if (tr.head.world) {
    info.world_size = static_cast<int>(*tr.head.world);  // 1..kWorldSizeCeiling (the parser checked it)
    info.world_source = "distributedInfo";
    if (info.world_size > world_max)
      throw FormatError(path, 0,
                        "distributedInfo.world_size is " + std::to_string(info.world_size) + ", above the limit of " +
                            std::to_string(world_max) + " ranks; expected a smaller world" + raise_hint("--max-world-size"));
    if (opt.world_size > 0 && opt.world_size != info.world_size)
      throw FormatError(path, 0,
                        "distributedInfo.world_size is " + std::to_string(info.world_size) + " but --world-size is " +
                            std::to_string(opt.world_size));
  } else if (opt.world_size > 0) {
    info.world_size = opt.world_size;
    info.world_source = "--world-size";
  } else {
    throw FormatError(path, 0, "no distributedInfo.world_size (an older trace form); pass --world-size N");
  }
  if (rank < 0 || rank >= info.world_size) {
    const std::string from = info.rank_source == "file name" ? "the file name" : info.rank_source == "--rank" ? "--rank" : "distributedInfo.rank";
    throw FormatError(path, 0,
                      "rank " + std::to_string(rank) + " outside world size " + std::to_string(info.world_size) + " (rank from " + from +
                          ", world size from " + (info.world_source == "--world-size" ? "--world-size" : "distributedInfo.world_size") +
                          "); expected a rank 0.." + std::to_string(info.world_size - 1));
  }
  info.rank = static_cast<int>(rank);
  info.form = tr.head.form;
}

/// The traces read so far, checked as each arrives: one job, one trace per rank, a window span
/// within the limit (a far step id is named with its file).
class Traces {
public:
  explicit Traces(const ReadLimits& lim) : lim_(lim) {}

  void add(KinetoTrace info, RankSteps steps) {
    const std::string& path = info.file;
    if (world_ && *world_ != info.world_size)
      throw FormatError(path, 0,
                        "world size " + std::to_string(info.world_size) + " but " + world_file_ + " has " + std::to_string(*world_) +
                            "; expected traces of one job");
    world_ = info.world_size;
    world_file_ = path;
    if (const auto it = rank_file.find(info.rank); it != rank_file.end())
      throw FormatError(path, 0, "rank " + std::to_string(info.rank) + " already given by " + it->second + "; expected one trace per rank");
    rank_file[info.rank] = path;
    if (info.first_step < first) first = info.first_step, first_file_ = path;
    if (info.last_step > last) last = info.last_step, last_file_ = path;
    if (detail::span_of(first, last) > static_cast<std::uint64_t>(lim_.max_window_steps))
      throw FormatError(path, 0,
                        "ProfilerStep ids run from " + std::to_string(first) + " (" + first_file_ + ") to " + std::to_string(last) +
                            " (" + last_file_ + "): a window of " + detail::span_text(first, last) + " steps, above the limit of " +
                            std::to_string(lim_.max_window_steps) + " steps per window; expected fewer steps" +
                            raise_hint("--max-window-steps"));
    infos.push_back(std::move(info));
    reduced.push_back(std::move(steps));
  }

  int world() const { return *world_; }

  std::vector<KinetoTrace> infos;
  std::vector<RankSteps> reduced;
  std::map<int, std::string> rank_file;
  std::string disjoint_reason;  ///< set by check_common_steps under --allow-disjoint
  std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = std::numeric_limits<std::int64_t>::min();

private:
  const ReadLimits& lim_;
  std::optional<int> world_;
  std::string world_file_, first_file_, last_file_;
};

/// Traces of one job share steps: with several traces, some ProfilerStep id must be in every one
/// (two jobs' traces once imported as one window with 1002 of its steps missing). With
/// --allow-disjoint they are imported, and the window's telemetry says so.
void check_common_steps(Traces& t, const KinetoOptions& opt) {
  if (t.reduced.size() < 2) return;
  std::vector<std::int64_t> common(t.reduced[0].ids);
  std::sort(common.begin(), common.end());
  for (std::size_t i = 1; i < t.reduced.size() && !common.empty(); ++i) {
    std::vector<std::int64_t> ids(t.reduced[i].ids), both;
    std::sort(ids.begin(), ids.end());
    std::set_intersection(common.begin(), common.end(), ids.begin(), ids.end(), std::back_inserter(both));
    common.swap(both);
  }
  if (!common.empty()) return;
  std::string spans;
  for (std::size_t i = 0; i < t.infos.size() && i < 4; ++i)
    spans += (i ? ", " : "") + t.infos[i].file + " " + std::to_string(t.infos[i].first_step) + ".." + std::to_string(t.infos[i].last_step);
  if (t.infos.size() > 4) spans += ", ...";
  const std::string what = "no ProfilerStep id is in every trace (" + spans + ")";
  if (!opt.allow_disjoint)
    throw FormatError(files_label(t.infos), 0,
                      what + "; expected traces of one job's same steps (or --allow-disjoint to import them as one window "
                             "in which each rank lacks the others' steps)");
  t.disjoint_reason = "kineto import: " + what + ", imported with --allow-disjoint: each step has the ranks that recorded it";
}

/// Every --stage-map rule took some event's time in some step: a rule that matched nothing (a
/// misspelt name, a pattern without the '*' a whole-name match needs, a name an earlier rule took)
/// is refused rather than silently leaving its stage empty.
void check_map_rules_matched(const Traces& t, const KinetoStageMap& map) {
  for (std::size_t r = 0; r < map.rules.size(); ++r) {
    const std::string tag = "--stage-map stages[" + std::to_string(r) + "]";
    bool used = false;
    for (const auto& info : t.infos)
      for (const auto& text : info.stage_rules) used = used || text.find(tag) != std::string::npos;
    if (used) continue;
    std::string patterns;
    for (const auto& m : map.rules[r].match) patterns += (patterns.empty() ? "\"" : ", \"") + m + "\"";
    throw FormatError(files_label(t.infos), 0,
                      tag + " (" + patterns + " -> " + map.rules[r].stage + ") matched no event in any step of the traces" +
                          (map.rules[r].any_thread ? "" : " on the main thread") +
                          "; expected patterns of event names the traces hold (a pattern matches the whole name: "
                          "add '*' for a part; an earlier rule takes a name first)");
  }
}

/// The matrix keeps side evidence as float: rounded toward zero, a sync wait equal to its stage
/// stays at or below the stage's (double) duration instead of rounding a hair above it.
double toward_zero(double seconds) {
  float f = static_cast<float>(seconds);
  if (static_cast<double>(f) > seconds) f = std::nextafter(f, 0.0f);
  return f;
}

/// The window: one column per rank with a trace (sparse when some of the world has none), every
/// limit checked before it is allocated.
void build_window(Traces& t, const StageLayout& layout, const ReadLimits& lim, KinetoImport& out) {
  const int R = t.world();
  const auto total = static_cast<int>(detail::span_of(t.first, t.last));  // ≤ max_window_steps ≤ INT_MAX
  std::vector<int> ids;
  for (const auto& [r, file] : t.rank_file) ids.push_back(r);  // ascending
  const frontier::StageSchema schema(layout.stages, true);
  std::uint64_t values = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(total), ids.size() * static_cast<std::uint64_t>(schema.size()), &values) ||
      values > static_cast<std::uint64_t>(std::max<std::int64_t>(lim.max_values, 0)))
    throw FormatError(files_label(t.infos), 0,
                      "window of " + std::to_string(total) + " steps x " + std::to_string(ids.size()) + " ranks x " +
                          std::to_string(schema.size()) + " stages is above the limit of " + std::to_string(lim.max_values) +
                          " values; expected a smaller window" + raise_hint("--max-values"));
  const bool sparse = static_cast<int>(ids.size()) < R;
  Window& w = out.window;
  w.matrix = sparse ? frontier::StageMatrix(schema, R, ids, t.first, total) : frontier::StageMatrix(schema, R, t.first, total);
  w.header_line = 0;
  const int S = static_cast<int>(layout.stages.size());
  for (std::size_t i = 0; i < t.reduced.size(); ++i) {
    const int r = t.infos[i].rank;
    const int column = sparse ? static_cast<int>(std::lower_bound(ids.begin(), ids.end(), r) - ids.begin()) : r;
    const auto& rs = t.reduced[i];
    for (std::size_t k = 0; k < rs.ids.size(); ++k) {
      const auto row = static_cast<int>(static_cast<std::uint64_t>(rs.ids[k]) - static_cast<std::uint64_t>(t.first));
      try {
        w.matrix.set_record(row, column, rs.d[k], rs.wall[k]);
        for (int s = 0; s < S; ++s)
          if (rs.has_sync[s]) w.matrix.set_sync_wait(row, column, s, toward_zero(rs.sync[k][s]));
      } catch (const std::invalid_argument& e) {
        throw FormatError(t.infos[i].file, 0, "ProfilerStep#" + std::to_string(rs.ids[k]) + ": " + e.what());
      }
    }
  }
  // Ranks without a trace, as ranges: memory follows the traces, not the world.
  int next = 0;
  for (const int r : ids) {
    if (r > next) out.missing_ranks.push_back({next, r - 1});
    next = r + 1;
  }
  if (next < R) out.missing_ranks.push_back({next, R - 1});
  for (const auto& range : out.missing_ranks) out.missing_rank_count += range.count();
  if (out.missing_rank_count > 0) {
    // Ranges ("2-127") keep the reason one readable line at any world size.
    const std::string list = frontier::format_rank_ranges(out.missing_ranks, 16);
    w.telemetry.reasons.push_back("kineto import: no trace for " + std::to_string(out.missing_rank_count) + " of " +
                                  std::to_string(R) + " ranks (" + list + ")");
  }
}

/// The stage groups where some trace shows a collective, in schema order, the residual last.
std::vector<std::string> wait_groups(const Traces& t, const frontier::StageSchema& schema) {
  const int S = schema.explicit_count();
  std::vector<bool> any(static_cast<std::size_t>(S) + 1, false);
  for (const auto& rs : t.reduced)
    for (int s = 0; s <= S; ++s) any[s] = any[s] || rs.waits[s];
  std::vector<std::string> out;
  for (int s = 0; s <= S; ++s) {
    if (!any[s]) continue;
    const std::string& g = schema.groups()[schema.group_of(s == S ? schema.residual_index() : s)];
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  }
  return out;
}

/// step.other's share at which the window's telemetry names what it holds: the labeler's
/// default gate on the closure residual (docs/labeler.md), so the note comes with the downgrade
/// the residual already causes, never alone.
constexpr double kUnmappedNoteShare = 0.05;

KinetoImport import_each(const std::vector<Input>& inputs, const KinetoOptions& opt) {
  const StageLayout layout = make_layout(opt.stage_map);
  check_options(inputs.size(), opt, layout);
  check_heads(inputs, opt);
  Traces traces(opt.limits);
  for (const auto& in : inputs) {
    const auto src = in.open();
    const Trace tr = read_trace(*src, in.name, byte_limit(opt.limits), layout, opt.limits.max_events);
    const StepSpans spans = find_steps(tr);
    KinetoTrace info;
    info.file = in.name;
    // What the trace holds first (an inference trace says it has no backward), then whose it is.
    RankSteps steps = reduce(tr, spans, layout, info);
    identify(tr, opt, info);
    traces.add(std::move(info), std::move(steps));
  }
  check_common_steps(traces, opt);
  check_map_rules_matched(traces, opt.stage_map);
  KinetoImport out;
  build_window(traces, layout, opt.limits, out);
  if (!traces.disjoint_reason.empty()) out.window.telemetry.reasons.push_back(traces.disjoint_reason);
  out.wait_stages = wait_groups(traces, out.window.matrix.schema());
  out.traces = std::move(traces.infos);
  for (const auto& t : out.traces)
    if (t.other_share >= kUnmappedNoteShare) out.window.telemetry.reasons.push_back("kineto import: " + kineto_unmapped_line(t));
  return out;
}

std::string amount(double seconds) {
  char buf[32];
  if (seconds >= 1e-3) std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f us", seconds * 1e6);
  return buf;
}

}  // namespace

std::string kineto_unmapped_line(const KinetoTrace& t) {
  if (t.unmapped.empty()) return "";
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.0f %%", t.other_share * 100);
  std::string line = t.file + " (rank " + std::to_string(t.rank) + "): step.other " + pct + " of the step walls:";
  for (std::size_t i = 0; i < t.unmapped.size(); ++i)
    line += (i ? ", " : " ") + shown(t.unmapped[i].name) + " " + amount(t.unmapped[i].seconds_per_step) + "/step";
  return line;
}

std::string kineto_fallback_line(const KinetoTrace& t) {
  if (t.in_fallback.empty()) return "";
  std::string line = t.file + " (rank " + std::to_string(t.rank) +
                     "): model.backward_cpu_wall is the span of autograd events (no '## backward ##' annotation) and holds "
                     "annotations";
  for (std::size_t i = 0; i < t.in_fallback.size(); ++i)
    line += (i ? ", " : " ") + shown(t.in_fallback[i].name) + " " + amount(t.in_fallback[i].seconds_per_step) + "/step";
  return line + "; --stage-map can give them stages of their own (docs/kineto.md, \"Stage map\")";
}

KinetoImport import_kineto(const std::vector<std::string>& files, const KinetoOptions& opt) {
  std::vector<Input> inputs;
  for (const auto& f : files) {
    struct stat st {};
    const bool regular = ::stat(f.c_str(), &st) != 0 || S_ISREG(st.st_mode);  // a missing file fails on open
    inputs.push_back({f, [&f, &opt] { return file_source(f, byte_limit(opt.limits)); }, regular});
  }
  return import_each(inputs, opt);
}

KinetoImport import_kineto_buffers(const std::vector<KinetoBuffer>& traces, const KinetoOptions& opt) {
  std::vector<Input> inputs;
  for (const auto& t : traces)
    inputs.push_back({t.name, [&t, &opt] { return buffer_source(t.bytes, t.name, byte_limit(opt.limits)); }});
  return import_each(inputs, opt);
}

}  // namespace sf::formats
