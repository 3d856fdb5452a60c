// Kineto (PyTorch profiler) Chrome traces reduced to a stage matrix: one trace per rank, steps
// from ProfilerStep#N, stage boundaries from the CPU-side events of the step. docs/kineto.md
// gives the mapping, its assumptions and what it loses.
#include "sf/formats/formats.h"

#include "step_span.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

namespace sf::formats {

namespace {

using nlohmann::json;

constexpr int kStages = 5;  // data, forward/loss, backward, callbacks, optimizer
enum StageIdx { kData = 0, kFwd = 1, kBwd = 2, kCb = 3, kOpt = 4 };

// What a name says about its event (bits).
enum : std::uint32_t {
  kIsData = 1u << 0,       // a data-loading marker (## data_load ## …, DataLoader __next__)
  kIsFwdAnn = 1u << 1,     // ## forward ##
  kIsBwdAnn = 1u << 2,     // ## backward ##
  kIsCbAnn = 1u << 3,      // ## callbacks ##
  kIsOptAnn = 1u << 4,     // ## optimizer ##
  kIsAutograd = 1u << 5,   // autograd::engine::evaluate_function: …
  kIsReducer = 1u << 6,    // torch.distributed.ddp.reducer::…
  kIsOptOp = 1u << 7,      // Optimizer.step#… / Optimizer.zero_grad#…
  kIsCollHost = 1u << 8,   // record_param_comms, nccl:*, c10d::* (host side of a collective)
  kIsGloo = 1u << 9,       // gloo:* (a gloo worker inside the collective)
  kIsNcclKernel = 1u << 10,// an NCCL kernel on the device timeline
  kIsStep = 1u << 11,      // ProfilerStep#N
};

struct Ev {
  double ts, end;
  int thread;              // interned "pid/tid"
  int name;                // interned name
  bool device;             // device timeline (kernels, memcpy, gpu annotations)
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// "## forward ##" → "forward"; "" when the name is not a record_function annotation of that form.
std::string annotation(std::string_view name) {
  if (name.size() < 5 || name.substr(0, 2) != "##" || name.substr(name.size() - 2) != "##") return "";
  auto inner = name.substr(2, name.size() - 4);
  while (!inner.empty() && inner.front() == ' ') inner.remove_prefix(1);
  while (!inner.empty() && inner.back() == ' ') inner.remove_suffix(1);
  return lower(inner);
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::uint32_t classify(std::string_view name, bool kernel) {
  std::uint32_t bits = 0;
  if (kernel) return starts_with(lower(name.substr(0, 4)), "nccl") ? std::uint32_t{kIsNcclKernel} : 0u;
  if (starts_with(name, "ProfilerStep#")) bits |= kIsStep;
  const std::string ann = annotation(name);
  static const char* data_ann[] = {"data_load", "data_loading", "load_batch", "wait_for_batch", "data", "dataloader",
                                   "next_batch", "get_batch", "data.next_wait"};
  static const char* fwd_ann[] = {"forward", "fwd", "forward_pass", "model_forward", "forward_loss", "model.fwd_loss_cpu_wall"};
  static const char* bwd_ann[] = {"backward", "bwd", "backward_pass", "model_backward", "model.backward_cpu_wall"};
  static const char* cb_ann[] = {"callbacks", "callback", "callbacks.cpu_wall"};
  static const char* opt_ann[] = {"optimizer", "optim", "optimizer_step", "optim.step_cpu_wall"};
  auto in = [&](const char* const* list, std::size_t n) { return std::find(list, list + n, ann) != list + n; };
  if (!ann.empty()) {
    if (in(data_ann, std::size(data_ann))) bits |= kIsData;
    if (in(fwd_ann, std::size(fwd_ann))) bits |= kIsFwdAnn;
    if (in(bwd_ann, std::size(bwd_ann))) bits |= kIsBwdAnn;
    if (in(cb_ann, std::size(cb_ann))) bits |= kIsCbAnn;
    if (in(opt_ann, std::size(opt_ann))) bits |= kIsOptAnn;
  }
  if (name.find("DataLoader") != std::string_view::npos && name.find("__next__") != std::string_view::npos) bits |= kIsData;
  if (starts_with(name, "autograd::engine::evaluate_function")) bits |= kIsAutograd;
  if (starts_with(name, "torch.distributed.ddp.reducer::")) bits |= kIsReducer;
  if (starts_with(name, "Optimizer.step#") || starts_with(name, "Optimizer.zero_grad#")) bits |= kIsOptOp;
  if (name == "record_param_comms" || starts_with(name, "nccl:") || starts_with(name, "c10d::")) bits |= kIsCollHost;
  if (starts_with(name, "gloo:")) bits |= kIsGloo;
  return bits;
}

/// Text quoted in a message: printable ASCII kept, other bytes as '?', at most 60 bytes.
std::string shown(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 60; ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    out += u >= 0x20 && u < 0x7f ? s[i] : '?';
  }
  if (s.size() > 60) out += "...";
  return out;
}

std::string size_limit(std::uint64_t bytes, std::uint64_t limit, const char* what) {
  return std::string(what) + " is " + std::to_string(bytes) + " bytes, above the limit of " + std::to_string(limit) +
         " bytes; expected a smaller trace (raise the limit with --max-file-size)";
}

/// A gzip stream (one or more members, as gzip and zcat accept) decompressed whole, or one line
/// saying why not: a truncated stream, a missing or wrong CRC/length trailer and bytes after the
/// last member are errors (gzread took the first two for a clean end of file). At most `limit`
/// bytes come out, so a small file cannot expand past the limit.
std::string gunzip(std::string_view in, const std::string& name, std::uint64_t limit) {
  struct Stream {
    z_stream zs{};
    bool open = false;
    ~Stream() {
      if (open) inflateEnd(&zs);
    }
  } s;
  if (inflateInit2(&s.zs, 16 + MAX_WBITS) != Z_OK) throw FormatError(name, 0, "cannot start zlib");
  s.open = true;
  std::string out;
  std::array<char, 1 << 16> buf{};
  std::size_t fed = 0;  // bytes of `in` handed to zlib so far
  auto corrupt = [&](const std::string& why) {
    return FormatError(name, 0, "corrupt gzip data (" + why + "); expected a complete .json.gz trace");
  };
  for (;;) {
    if (s.zs.avail_in == 0 && fed < in.size()) {
      const std::size_t chunk = std::min<std::size_t>(in.size() - fed, std::size_t{1} << 30);
      s.zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + fed));
      s.zs.avail_in = static_cast<uInt>(chunk);
      fed += chunk;
    }
    s.zs.next_out = reinterpret_cast<Bytef*>(buf.data());
    s.zs.avail_out = static_cast<uInt>(buf.size());
    const int ret = inflate(&s.zs, Z_NO_FLUSH);
    out.append(buf.data(), buf.size() - s.zs.avail_out);
    if (out.size() > limit) throw FormatError(name, 0, size_limit(out.size(), limit, "the decompressed trace"));
    if (ret == Z_STREAM_END) {
      const std::size_t left = s.zs.avail_in + (in.size() - fed);
      if (left == 0) break;
      const std::size_t at = in.size() - left;
      if (left < 2 || static_cast<unsigned char>(in[at]) != 0x1f || static_cast<unsigned char>(in[at + 1]) != 0x8b)
        throw corrupt(std::to_string(left) + " bytes after the end of the gzip stream");
      inflateReset(&s.zs);  // the next member
      continue;
    }
    if (ret == Z_OK || ret == Z_BUF_ERROR) {
      if (s.zs.avail_in == 0 && fed == in.size() && s.zs.avail_out != 0)
        throw corrupt("the stream ends early: a truncated file, or one without its CRC and length trailer");
      continue;
    }
    throw corrupt(s.zs.msg ? s.zs.msg : "zlib error " + std::to_string(ret));
  }
  return out;
}

/// The trace's JSON text: the bytes themselves, or the gzip stream they hold (by its magic bytes,
/// whatever the file is named).
std::string trace_text(std::string_view bytes, const std::string& name, std::uint64_t limit) {
  if (bytes.size() > limit) throw FormatError(name, 0, size_limit(bytes.size(), limit, "trace"));
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b)
    return gunzip(bytes, name, limit);
  return std::string(bytes);
}

/// The file's bytes, its size checked before reading.
std::string read_file(const std::string& path, std::uint64_t limit) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw FormatError(path, 0, "is a directory; expected a trace file");
    if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > limit)
      throw FormatError(path, 0, size_limit(static_cast<std::uint64_t>(st.st_size), limit, "trace file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path, 0, "cannot open file for reading");
  std::string bytes;
  std::vector<char> block(1 << 16);
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    bytes.append(block.data(), static_cast<std::size_t>(in.gcount()));
    if (bytes.size() > limit) throw FormatError(path, 0, size_limit(bytes.size(), limit, "trace file"));
  }
  if (in.bad()) throw FormatError(path, 0, "read failed");
  return bytes;
}

/// An integer-valued JSON number within the int64 range (2.0 counts; 2.5, 1e300 and strings do not).
std::optional<std::int64_t> as_int(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // [-2^63, 2^63): the doubles a cast to int64 keeps exactly.
    if (d == std::floor(d) && d >= -0x1p63 && d < 0x1p63) return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

std::string type_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "a number";
}

std::string id_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

/// Timestamps and durations are microseconds in doubles. Up to 2^53 µs (about 285 years from the
/// trace's epoch) a double resolves 1 µs; past it, a step's events round onto one another and
/// every duration would silently read 0, so such a trace is refused.
constexpr double kMaxTraceUs = 0x1p53;

/// The events of one trace, interned, sorted by start time.
struct Trace {
  std::string file;
  std::string form;
  std::optional<std::int64_t> rank, world;
  std::vector<Ev> events;
  std::vector<std::string> names;
  std::vector<std::uint32_t> bits;  // per interned name
  std::vector<std::string> threads;
};

Trace load(std::string_view bytes, const std::string& path, const ReadLimits& lim) {
  Trace tr;
  tr.file = path;
  json doc;
  {
    const std::string text = trace_text(bytes, path, static_cast<std::uint64_t>(std::max<std::int64_t>(lim.max_file_bytes, 0)));
    // Event arguments (call stacks, shapes, ids) are not needed: drop them while parsing.
    json::parser_callback_t skip_args = [](int depth, json::parse_event_t event, json& parsed) {
      return !(event == json::parse_event_t::key && depth >= 2 && parsed == "args");
    };
    try {
      doc = json::parse(text, skip_args);
    } catch (const json::parse_error& e) {
      throw FormatError(path, 0,
                        "not valid JSON at byte " + std::to_string(e.byte) +
                            "; expected a Chrome trace (an object with traceEvents, or an array of events)");
    } catch (const json::exception& e) {
      // out_of_range.406: a number past the double range; what() names it ("... parsing '1e309'").
      std::string why = e.what();
      if (const auto at = why.find("] "); at != std::string::npos) why = why.substr(at + 2);
      throw FormatError(path, 0, shown(why) + "; expected a Chrome trace with finite numbers");
    }
  }
  const json* events = nullptr;
  if (doc.is_object()) {
    const auto it = doc.find("traceEvents");
    if (it == doc.end() || !it->is_array())
      throw FormatError(path, 0, "no traceEvents array; expected a Chrome trace from torch.profiler");
    events = &*it;
    tr.form = "kineto";
    if (const auto di = doc.find("distributedInfo"); di != doc.end() && di->is_object()) {
      if (const auto r = di->find("rank"); r != di->end()) {
        tr.rank = as_int(*r);
        if (!tr.rank || *tr.rank < 0)
          throw FormatError(path, 0, "distributedInfo.rank is " + shown(r->dump()) + ", expected an integer rank >= 0");
      }
      if (const auto w = di->find("world_size"); w != di->end()) {
        tr.world = as_int(*w);
        if (!tr.world || *tr.world < 1 || *tr.world > kWorldSizeCeiling)
          throw FormatError(path, 0,
                            "distributedInfo.world_size is " + shown(w->dump()) + ", expected an integer 1.." +
                                std::to_string(kWorldSizeCeiling));
      }
    }
  } else if (doc.is_array()) {
    events = &doc;
    tr.form = "event array";
  } else {
    throw FormatError(path, 0, "neither a JSON object with traceEvents nor an array of events; expected a Chrome trace");
  }

  std::unordered_map<std::string, int> name_ids, thread_ids;
  auto intern = [](std::unordered_map<std::string, int>& ids, std::vector<std::string>& table, const std::string& s) {
    const auto [it, fresh] = ids.try_emplace(s, static_cast<int>(table.size()));
    if (fresh) table.push_back(s);
    return it->second;
  };
  std::map<int, std::vector<std::pair<double, int>>> open;  // B events awaiting their E, per thread
  tr.events.reserve(events->size());
  std::size_t index = 0;
  for (const auto& e : *events) {
    const std::size_t i = index++;
    if (!e.is_object()) continue;
    const auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string()) continue;
    const std::string& p = ph->get_ref<const std::string&>();
    if (p != "X" && p != "B" && p != "E") continue;  // metadata, counters, flows, instants
    // Complete, begin and end events carry the time; a bad one is an error, never a dropped event.
    const auto nm = e.find("name");
    const bool named = nm != e.end() && nm->is_string();
    const std::string where = "traceEvents[" + std::to_string(i) + "]" +
                              (named ? " ('" + shown(nm->get_ref<const std::string&>()) + "')" : "") + ", ph \"" + p + "\"";
    if (!named && p != "E")  // an E event may omit its name (it closes the open B)
      throw FormatError(path, 0, where + ", has no name; expected a string name");
    const auto ts = e.find("ts");
    if (ts == e.end()) throw FormatError(path, 0, where + ", has no ts; expected a timestamp in microseconds");
    if (!ts->is_number()) throw FormatError(path, 0, where + ": ts is " + type_of(*ts) + ", expected a number of microseconds");
    const double t = ts->get<double>();
    if (!(std::fabs(t) <= kMaxTraceUs))
      throw FormatError(path, 0,
                        where + ": ts is " + shown(ts->dump()) +
                            " us, beyond 2^53 us where a double no longer resolves a microsecond; expected trace timestamps "
                            "in microseconds");
    const auto cat_it = e.find("cat");
    const std::string cat = cat_it != e.end() && cat_it->is_string() ? lower(cat_it->get<std::string>()) : "";
    const bool device = cat == "kernel" || starts_with(cat, "gpu_") || cat == "cuda_profiler_range";
    const std::string tid = (e.contains("pid") ? id_text(e["pid"]) : "") + "/" + (e.contains("tid") ? id_text(e["tid"]) : "");
    const int thread = intern(thread_ids, tr.threads, tid);
    if (p == "E") {
      auto& stack = open[thread];
      if (stack.empty()) continue;  // closes a span begun before the trace: nothing to time
      const auto [begin, name] = stack.back();
      stack.pop_back();
      if (t < begin)
        throw FormatError(path, 0,
                          where + ": ends at ts " + shown(ts->dump()) + " before its B event ('" + shown(tr.names[name]) +
                              "') begins; expected an end at or after the begin");
      tr.events.push_back({begin, t, thread, name, device});
      continue;
    }
    const int name = intern(name_ids, tr.names, nm->get<std::string>());
    if (name == static_cast<int>(tr.bits.size())) tr.bits.push_back(classify(tr.names.back(), cat == "kernel"));
    if (p == "B") {
      open[thread].emplace_back(t, name);
      continue;
    }
    const auto d = e.find("dur");
    if (d == e.end()) throw FormatError(path, 0, where + ", has no dur; expected the duration in microseconds");
    if (!d->is_number()) throw FormatError(path, 0, where + ": dur is " + type_of(*d) + ", expected a number of microseconds");
    const double dur = d->get<double>();
    if (dur < 0) throw FormatError(path, 0, where + ": dur is " + shown(d->dump()) + ", expected microseconds >= 0");
    const double end = t + dur;
    if (!(end <= kMaxTraceUs))
      throw FormatError(path, 0,
                        where + ": ends at ts + dur = " + shown(json(end).dump()) +
                            " us, beyond 2^53 us where a double no longer resolves a microsecond; expected trace times in "
                            "microseconds");
    tr.events.push_back({t, end, thread, name, device});
  }
  if (tr.events.empty()) throw FormatError(path, 0, "no complete events (ph \"X\"); expected a Chrome trace from torch.profiler");
  std::sort(tr.events.begin(), tr.events.end(), [](const Ev& a, const Ev& b) {
    return a.ts != b.ts ? a.ts < b.ts : a.end > b.end;  // parents before their children
  });
  return tr;
}

struct Interval {
  double b = 0, e = 0;
  bool found = false;
  void add(double x, double y) {
    if (!found) {
      b = x;
      e = y;
      found = true;
    } else {
      b = std::min(b, x);
      e = std::max(e, y);
    }
  }
};

/// One rank's reduced steps: durations (seconds), wall, sync waits, in step-id order.
struct RankSteps {
  std::vector<std::int64_t> ids;
  std::vector<std::array<double, kStages>> d;
  std::vector<double> wall;
  std::vector<std::array<double, kStages>> sync;
  std::array<bool, kStages> has_sync{};
};

RankSteps reduce(const Trace& tr, KinetoTrace& info) {
  const std::string& file = tr.file;
  // Steps: ProfilerStep#N on the thread that carries most of them (the main thread).
  std::map<int, int> per_thread;
  for (const auto& e : tr.events)
    if (tr.bits[e.name] & kIsStep) ++per_thread[e.thread];
  if (per_thread.empty())
    throw FormatError(file, 0,
                      "no ProfilerStep#N events; expected a torch.profiler trace recorded with a schedule and prof.step() "
                      "once per training iteration");
  const int main_thread =
      std::max_element(per_thread.begin(), per_thread.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  // Kernels, memory copies and device annotations live on the device timeline; everything else
  // of the trace's processes is CPU-side.
  struct Step {
    std::int64_t id;
    double ts, end;
  };
  std::vector<Step> steps;
  for (const auto& e : tr.events) {
    if (e.thread != main_thread || !(tr.bits[e.name] & kIsStep)) continue;
    const std::string& n = tr.names[e.name];
    std::int64_t id = 0;
    const auto r = std::from_chars(n.data() + 13, n.data() + n.size(), id);
    if (r.ec == std::errc::result_out_of_range && r.ptr == n.data() + n.size())
      throw FormatError(file, 0,
                        "step annotation '" + shown(n) + "' has a step id outside the 64-bit integer range; expected "
                        "ProfilerStep#N with N from -9223372036854775808 to 9223372036854775807");
    if (r.ec != std::errc() || r.ptr != n.data() + n.size())
      throw FormatError(file, 0, "step annotation '" + shown(n) + "' does not end in an integer; expected ProfilerStep#N");
    steps.push_back({id, e.ts, e.end});
  }
  std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.id < b.id; });
  for (std::size_t i = 1; i < steps.size(); ++i)
    if (steps[i].id == steps[i - 1].id)
      throw FormatError(file, 0,
                        "ProfilerStep#" + std::to_string(steps[i].id) + " appears twice on the main thread; expected one span per step");

  // Where the sync-wait side evidence comes from: NCCL kernels, else gloo workers, else the host
  // side of collectives (record_param_comms, nccl:*, c10d::*).
  std::uint32_t coll = 0;
  for (const auto bit : {kIsNcclKernel, kIsGloo, kIsCollHost}) {
    for (const auto& e : tr.events)
      if (tr.bits[e.name] & bit) {
        coll = bit;
        break;
      }
    if (coll) break;
  }
  info.collectives = coll == kIsNcclKernel ? "NCCL kernels (device time)"
                     : coll == kIsGloo     ? "gloo:* worker events"
                     : coll == kIsCollHost ? "record_param_comms / nccl:* / c10d::* host events"
                                           : "none";

  RankSteps out;
  info.stage_steps.assign(kStages, 0);
  std::array<std::map<std::string, int>, kStages> rules;
  int with_backward = 0;
  std::vector<const Ev*> main_top, in_step;
  for (const auto& st : steps) {
    const auto lo = std::lower_bound(tr.events.begin(), tr.events.end(), st.ts, [](const Ev& e, double t) { return e.ts < t; });
    in_step.clear();
    main_top.clear();
    double top_end = -std::numeric_limits<double>::infinity();
    for (auto it = lo; it != tr.events.end() && it->ts <= st.end; ++it) {
      if (it->thread == main_thread && (tr.bits[it->name] & kIsStep)) continue;
      in_step.push_back(&*it);
      if (it->thread == main_thread && !it->device && it->ts >= top_end) {
        main_top.push_back(&*it);  // not nested in an earlier main-thread event
        top_end = it->end;
      }
    }
    auto span = [&](std::uint32_t bit, bool main_only, double after = -1e300) {
      Interval iv;
      for (const Ev* e : in_step)
        if ((tr.bits[e->name] & bit) && !e->device && (!main_only || e->thread == main_thread) && e->ts >= after)
          iv.add(e->ts, std::min(e->end, st.end));
      return iv;
    };
    std::array<Interval, kStages> iv;
    std::array<std::string, kStages> how;
    // Backward first: it anchors the others.
    iv[kBwd] = span(kIsBwdAnn, true);
    how[kBwd] = "## backward ##";
    if (!iv[kBwd].found) {
      const Interval ag = span(kIsAutograd, false);
      if (ag.found) {
        iv[kBwd] = ag;
        how[kBwd] = "autograd::engine events";
      }
    }
    iv[kOpt] = span(kIsOptAnn, true);
    how[kOpt] = "## optimizer ##";
    if (!iv[kOpt].found) {
      iv[kOpt] = span(kIsOptOp, true, iv[kBwd].found ? iv[kBwd].b : st.ts);
      how[kOpt] = "Optimizer.step#/zero_grad# after backward";
    }
    if (iv[kBwd].found && how[kBwd] != "## backward ##") {
      // The backward pass ends when the last gradient work of the step is done: autograd
      // functions, DDP's reducer and the gradient collectives that began before the optimizer.
      const double stop = iv[kOpt].found ? iv[kOpt].b : st.end;
      for (const Ev* e : in_step)
        if (!e->device && (tr.bits[e->name] & (kIsAutograd | kIsReducer | kIsCollHost | kIsGloo)) && e->ts >= iv[kBwd].b &&
            e->ts < stop)
          iv[kBwd].e = std::max(iv[kBwd].e, std::min(e->end, stop));
    }
    iv[kFwd] = span(kIsFwdAnn, true);
    how[kFwd] = "## forward ##";
    const double first_later = iv[kBwd].found ? iv[kBwd].b : iv[kOpt].found ? iv[kOpt].b : st.end;
    {
      Interval data;
      for (const Ev* e : in_step)
        if ((tr.bits[e->name] & kIsData) && e->thread == main_thread && e->ts < first_later &&
            (!iv[kFwd].found || e->ts < iv[kFwd].b))
          data.add(e->ts, std::min(e->end, st.end));
      iv[kData] = data;
      bool ann = false, loader = false;
      for (const Ev* e : in_step)
        if ((tr.bits[e->name] & kIsData) && e->thread == main_thread) (annotation(tr.names[e->name]).empty() ? loader : ann) = true;
      how[kData] = ann && loader ? "## data ## annotations and DataLoader __next__" : ann ? "## data ## annotations" : "DataLoader __next__";
    }
    if (!iv[kFwd].found) {
      // The first forward op: the first top-level main-thread event after the data wait.
      const double from = iv[kData].found ? iv[kData].e : st.ts;
      for (const Ev* e : main_top)
        if (e->ts >= from && e->ts < first_later && !(tr.bits[e->name] & kIsData)) {
          iv[kFwd].add(e->ts, first_later);
          how[kFwd] = "first main-thread op after data, up to backward";
          break;
        }
    }
    iv[kCb] = span(kIsCbAnn, true);
    how[kCb] = "## callbacks ##";
    if (!iv[kCb].found && iv[kBwd].found && iv[kOpt].found && iv[kOpt].b > iv[kBwd].e) {
      iv[kCb].add(iv[kBwd].e, iv[kOpt].b);
      how[kCb] = "between backward and optimizer";
    }
    // Ordered, non-overlapping, inside the step.
    double prev = st.ts;
    std::array<double, kStages> d{};
    std::array<double, kStages> b{}, e{};
    for (int s = 0; s < kStages; ++s) {
      if (!iv[s].found) continue;
      b[s] = std::clamp(std::max(iv[s].b, prev), st.ts, st.end);
      e[s] = std::clamp(std::max(iv[s].e, b[s]), b[s], st.end);
      d[s] = (e[s] - b[s]) / 1e6;
      prev = e[s];
      ++info.stage_steps[s];
      ++rules[s][how[s]];
    }
    with_backward += iv[kBwd].found ? 1 : 0;
    // Collective time by where it starts (kernels of the step start inside its CPU span or not at all).
    std::array<double, kStages> sync{};
    if (coll)
      for (const Ev* ev : in_step) {
        if (!(tr.bits[ev->name] & coll)) continue;
        for (int s = 0; s < kStages; ++s)
          if (iv[s].found && ev->ts >= b[s] && ev->ts < e[s]) {
            sync[s] += (ev->end - ev->ts) / 1e6;
            out.has_sync[s] = true;
          }
      }
    out.ids.push_back(st.id);
    out.d.push_back(d);
    out.wall.push_back((st.end - st.ts) / 1e6);
    out.sync.push_back(sync);
  }
  if (with_backward == 0)
    throw FormatError(file, 0,
                      "no backward events in any of its " + std::to_string(steps.size()) +
                          " ProfilerStep spans; expected '## backward ##' annotations or "
                          "autograd::engine::evaluate_function events (a training trace, profiled with CPU activity)");
  info.steps = static_cast<int>(steps.size());
  info.first_step = steps.front().id;
  info.last_step = steps.back().id;
  info.events = static_cast<std::int64_t>(tr.events.size());
  info.stage_rules.assign(kStages, "");
  for (int s = 0; s < kStages; ++s) {
    std::string text;
    for (const auto& [rule, n] : rules[s]) text += (text.empty() ? "" : "; ") + rule + " (" + std::to_string(n) + ")";
    info.stage_rules[s] = text.empty() ? "not found" : text;
  }
  return out;
}

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

/// Reads and reduces traces one at a time (load_one(i) gives trace i), checking every limit
/// before the window is allocated; the window holds one column per rank with a trace.
template <typename LoadOne>
KinetoImport import_each(std::size_t n, LoadOne&& load_one, const KinetoOptions& opt) {
  if (n == 0) throw FormatError("import kineto", 0, "no trace files given; expected one trace per rank");
  const ReadLimits& lim = opt.limits;
  const int world_max = std::min(lim.max_world_size, kWorldSizeCeiling);
  if (opt.world_size > world_max)
    throw FormatError("import kineto", 0,
                      "--world-size " + std::to_string(opt.world_size) + " is above the limit of " + std::to_string(world_max) +
                          " ranks; expected a smaller world" + raise_hint("--max-world-size"));
  KinetoImport out;
  std::vector<RankSteps> reduced;
  std::optional<int> world;
  std::string world_file;
  std::map<int, std::string> rank_file;
  std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = std::numeric_limits<std::int64_t>::min();
  std::string first_file, last_file;
  for (std::size_t i = 0; i < n; ++i) {
    const Trace tr = load_one(i);
    const std::string& path = tr.file;
    KinetoTrace info;
    info.file = path;
    info.form = tr.form;
    std::int64_t rank = 0;
    if (tr.rank) {
      rank = *tr.rank;
      info.rank_source = "distributedInfo";
    } else if (const auto r = rank_from_name(path)) {
      rank = *r;
      info.rank_source = "file name";
    } else {
      throw FormatError(path, 0,
                        "no distributedInfo.rank and no rank in the file name; expected a Kineto trace with distributedInfo "
                        "or a file named like rank3.json");
    }
    if (tr.world) {
      info.world_size = static_cast<int>(*tr.world);  // 1..kWorldSizeCeiling (load checked it)
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
    if (world && *world != info.world_size)
      throw FormatError(path, 0,
                        "world size " + std::to_string(info.world_size) + " but " + world_file + " has " +
                            std::to_string(*world) + "; expected traces of one job");
    world = info.world_size;
    world_file = path;
    if (rank < 0 || rank >= info.world_size)
      throw FormatError(path, 0,
                        "rank " + std::to_string(rank) + " outside world size " + std::to_string(info.world_size) + " (rank from " +
                            (info.rank_source == "file name" ? "the file name" : "distributedInfo.rank") + ", world size from " +
                            (info.world_source == "--world-size" ? "--world-size" : "distributedInfo.world_size") +
                            "); expected a rank 0.." + std::to_string(info.world_size - 1));
    info.rank = static_cast<int>(rank);
    if (const auto it = rank_file.find(info.rank); it != rank_file.end())
      throw FormatError(path, 0, "rank " + std::to_string(info.rank) + " already given by " + it->second + "; expected one trace per rank");
    rank_file[info.rank] = path;
    reduced.push_back(reduce(tr, info));
    // The window's span so far, checked as each trace arrives: a far step id is named with its file.
    if (info.first_step < first) {
      first = info.first_step;
      first_file = path;
    }
    if (info.last_step > last) {
      last = info.last_step;
      last_file = path;
    }
    if (detail::span_of(first, last) > static_cast<std::uint64_t>(lim.max_window_steps))
      throw FormatError(path, 0,
                        "ProfilerStep ids run from " + std::to_string(first) + " (" + first_file + ") to " + std::to_string(last) +
                            " (" + last_file + "): a window of " + detail::span_text(first, last) + " steps, above the limit of " +
                            std::to_string(lim.max_window_steps) + " steps per window; expected fewer steps" +
                            raise_hint("--max-window-steps"));
    out.traces.push_back(std::move(info));
  }

  const int R = *world;
  const auto total = static_cast<int>(detail::span_of(first, last));  // ≤ max_window_steps ≤ INT_MAX
  // Columns: the ranks with a trace (sparse when some of the world has none).
  std::vector<int> ids;
  for (const auto& [r, file] : rank_file) ids.push_back(r);  // ascending
  const auto schema = frontier::StageSchema::default_schema();
  std::uint64_t values = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(total), ids.size() * static_cast<std::uint64_t>(schema.size()), &values) ||
      values > static_cast<std::uint64_t>(std::max<std::int64_t>(lim.max_values, 0)))
    throw FormatError(files_label(out.traces), 0,
                      "window of " + std::to_string(total) + " steps x " + std::to_string(ids.size()) + " ranks x " +
                          std::to_string(schema.size()) + " stages is above the limit of " + std::to_string(lim.max_values) +
                          " values; expected a smaller window" + raise_hint("--max-values"));
  const bool sparse = static_cast<int>(ids.size()) < R;
  Window& w = out.window;
  w.matrix = sparse ? frontier::StageMatrix(schema, R, ids, first, total) : frontier::StageMatrix(schema, R, first, total);
  w.header_line = 0;
  for (std::size_t i = 0; i < reduced.size(); ++i) {
    const int r = out.traces[i].rank;
    const int column = sparse ? static_cast<int>(std::lower_bound(ids.begin(), ids.end(), r) - ids.begin()) : r;
    const auto& rs = reduced[i];
    for (std::size_t k = 0; k < rs.ids.size(); ++k) {
      const auto t = static_cast<int>(static_cast<std::uint64_t>(rs.ids[k]) - static_cast<std::uint64_t>(first));
      try {
        w.matrix.set_record(t, column, rs.d[k], rs.wall[k]);
        for (int s = 0; s < kStages; ++s)
          if (rs.has_sync[s]) w.matrix.set_sync_wait(t, column, s, rs.sync[k][s]);
      } catch (const std::invalid_argument& e) {
        throw FormatError(out.traces[i].file, 0, "ProfilerStep#" + std::to_string(rs.ids[k]) + ": " + e.what());
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
  return out;
}

}  // namespace

KinetoImport import_kineto(const std::vector<std::string>& files, const KinetoOptions& opt) {
  const auto limit = static_cast<std::uint64_t>(std::max<std::int64_t>(opt.limits.max_file_bytes, 0));
  return import_each(
      files.size(), [&](std::size_t i) { return load(read_file(files[i], limit), files[i], opt.limits); }, opt);
}

KinetoImport import_kineto_buffers(const std::vector<KinetoBuffer>& traces, const KinetoOptions& opt) {
  return import_each(
      traces.size(), [&](std::size_t i) { return load(traces[i].bytes, traces[i].name, opt.limits); }, opt);
}

}  // namespace sf::formats
