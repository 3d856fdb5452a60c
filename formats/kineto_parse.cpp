// One pass of nlohmann's SAX parser over a trace's text (kineto_source.cpp): no document is
// built. The handler follows the trace's structure (the top-level object, distributedInfo,
// traceEvents and each event's fields), refuses a key twice in any object it reads, checks every
// timed event, and keeps only what the reduction reads: CPU-side events and device collectives
// (docs/kineto.md, "Reading").
#include "kineto_internal.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <istream>
#include <limits>
#include <unordered_map>

namespace sf::formats::kineto {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string shown(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 60; ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    out += u >= 0x20 && u < 0x7f ? s[i] : '?';
  }
  if (s.size() > 60) out += "...";
  return out;
}

namespace {

using json = nlohmann::json;

/// Timestamps and durations are microseconds in doubles (whatever displayTimeUnit says: it only
/// tells a viewer how to show them). Up to 2^53 µs (about 285 years from the trace's epoch) a
/// double resolves 1 µs; past it, a step's events round onto one another and every duration
/// would silently read 0, so such a trace is refused.
constexpr double kMaxTraceUs = 0x1p53;

bool iequals_prefix(std::string_view s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != p[i]) return false;
  return true;
}

bool icontains(std::string_view s, std::string_view p) {
  if (p.size() > s.size()) return false;
  for (std::size_t i = 0; i + p.size() <= s.size(); ++i)
    if (iequals_prefix(s.substr(i), p)) return true;
  return false;
}

/// Categories of the device timelines: CUDA and ROCm kernels, copies and sets (PyTorch 1.9
/// wrote "Kernel", "Memcpy", "Memset"), device-side annotations, MTIA's device events.
bool device_category(std::string_view cat) {
  static constexpr std::string_view kDevice[] = {"kernel", "memcpy", "memset", "gpu_memcpy", "gpu_memset",
                                                 "gpu_user_annotation", "cuda_profiler_range", "mtia_ccp_events",
                                                 "mtia_insight", "mtia_counters", "mlu_memcpy", "mlu_memset",
                                                 "mlu_user_annotation", "mlu_profiler_range"};
  for (const auto d : kDevice)
    if (cat.size() == d.size() && iequals_prefix(cat, d)) return true;
  return false;
}

/// A collective on a device timeline: NCCL/RCCL kernels by their prefix, other vendors' by the
/// collective they name.
bool device_collective(std::string_view name) {
  if (iequals_prefix(name, "nccl") || iequals_prefix(name, "rccl")) return true;
  static constexpr std::string_view kNames[] = {"allreduce", "all_reduce", "allgather", "all_gather", "reducescatter",
                                                "reduce_scatter", "alltoall", "all_to_all"};
  for (const auto n : kNames)
    if (icontains(name, n)) return true;
  return false;
}

/// "## forward ##" → "forward"; "" when the name is not a record_function annotation of that form.
std::string annotation(std::string_view name) {
  if (name.size() < 5 || name.substr(0, 2) != "##" || name.substr(name.size() - 2) != "##") return "";
  auto inner = name.substr(2, name.size() - 4);
  while (!inner.empty() && inner.front() == ' ') inner.remove_prefix(1);
  while (!inner.empty() && inner.back() == ' ') inner.remove_suffix(1);
  return lower(inner);
}

/// An autograd function run by the engine: `autograd::engine::evaluate_function: …` (PyTorch
/// ≥ 1.10), or, as PyTorch 1.9 records them, the function itself (`AddmmBackward`,
/// `MeanBackward1`) and `torch::autograd::AccumulateGrad`.
bool autograd_name(std::string_view name) {
  if (starts_with(name, "autograd::engine::evaluate_function") || name == "torch::autograd::AccumulateGrad") return true;
  std::size_t end = name.size();
  while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
  const std::string_view stem = name.substr(0, end);
  return stem.size() > 8 && stem.substr(stem.size() - 8) == "Backward" && stem.find(' ') == std::string_view::npos;
}

std::uint32_t classify(std::string_view name, bool device) {
  if (device) return device_collective(name) ? std::uint32_t{kIsCollDevice} : 0u;
  std::uint32_t bits = 0;
  if (starts_with(name, "ProfilerStep#")) bits |= kIsStep;
  const std::string ann = annotation(name);
  static const char* data_ann[] = {"data_load", "data_loading", "load_batch", "wait_for_batch", "wait_for_training_batch",
                                   "data", "dataloader", "next_batch", "get_batch", "data.next_wait"};
  static const char* fwd_ann[] = {"forward", "fwd", "forward_pass", "model_forward", "forward_loss", "model.fwd_loss_cpu_wall"};
  static const char* bwd_ann[] = {"backward", "bwd", "backward_pass", "model_backward", "model.backward_cpu_wall"};
  static const char* cb_ann[] = {"callbacks", "callback", "callbacks.cpu_wall"};
  static const char* opt_ann[] = {"optimizer", "optim", "optimizer_step", "optim.step_cpu_wall"};
  auto in = [&](const char* const* list, std::size_t n) { return std::find(list, list + n, ann) != list + n; };
  if (!ann.empty()) {
    bits |= kIsAnnotation;
    if (in(data_ann, std::size(data_ann))) bits |= kIsData;
    if (in(fwd_ann, std::size(fwd_ann))) bits |= kIsFwdAnn;
    if (in(bwd_ann, std::size(bwd_ann))) bits |= kIsBwdAnn;
    if (in(cb_ann, std::size(cb_ann))) bits |= kIsCbAnn;
    if (in(opt_ann, std::size(opt_ann))) bits |= kIsOptAnn;
  }
  if (name.find("DataLoader") != std::string_view::npos && name.find("__next__") != std::string_view::npos) bits |= kIsData;
  if (autograd_name(name)) bits |= kIsAutograd;
  if (starts_with(name, "torch.distributed.ddp.reducer::")) bits |= kIsReducer;
  if (starts_with(name, "Optimizer.step#") || starts_with(name, "Optimizer.zero_grad#")) bits |= kIsOptOp;
  if (name == "record_param_comms" || starts_with(name, "nccl:") || starts_with(name, "c10d::")) bits |= kIsCollHost;
  if (starts_with(name, "gloo:")) bits |= kIsGloo;
  return bits;
}

/// One JSON value as the SAX parser hands it over, kept for a field the importer reads.
struct Value {
  enum Kind : std::uint8_t { absent, null, boolean, integer, unsigned_, floating, string, object, array };
  Kind kind = absent;
  bool b = false;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double d = 0;
  std::string s;

  bool number() const { return kind == integer || kind == unsigned_ || kind == floating; }
  double as_double() const { return kind == integer ? static_cast<double>(i) : kind == unsigned_ ? static_cast<double>(u) : d; }
  /// As nlohmann's dump() prints it (containers are not kept: their kind is enough).
  std::string dump() const {
    switch (kind) {
      case null: return "null";
      case boolean: return b ? "true" : "false";
      case integer: return json(i).dump();
      case unsigned_: return json(u).dump();
      case floating: return json(d).dump();
      case string: return json(s).dump();
      case object: return "{...}";
      case array: return "[...]";
      case absent: break;
    }
    return "";
  }
  std::string type() const {
    switch (kind) {
      case null: return "null";
      case boolean: return "a boolean";
      case string: return "a string";
      case object: return "an object";
      case array: return "an array";
      default: return "a number";
    }
  }
  /// pid and tid as text: strings as they are, numbers as printed.
  void id_text(std::string& out) const {
    if (kind == string) out += s;
    else if (kind == integer) out += std::to_string(i);  // the common case, without a json value
    else if (kind == unsigned_) out += std::to_string(u);
    else if (kind != absent) out += dump();
  }
  /// An integer-valued number within the int64 range (2.0 counts; 2.5, 1e300 and strings do not).
  std::optional<std::int64_t> as_int() const {
    if (kind == unsigned_) {
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
      return static_cast<std::int64_t>(u);
    }
    if (kind == integer) return i;
    // [-2^63, 2^63): the doubles a cast to int64 keeps exactly.
    if (kind == floating && d == std::floor(d) && d >= -0x1p63 && d < 0x1p63) return static_cast<std::int64_t>(d);
    return std::nullopt;
  }
};

/// The fields of an event the importer reads; any other key is only checked for repeats.
enum Field : std::uint8_t { kPh, kName, kTs, kDur, kPid, kTid, kCat, kFieldCount, kOtherField = kFieldCount };

Field field_of(const std::string& k) {
  switch (k.size()) {
    case 2:
      if (k == "ph") return kPh;
      if (k == "ts") return kTs;
      break;
    case 3:
      if (k == "dur") return kDur;
      if (k == "pid") return kPid;
      if (k == "tid") return kTid;
      if (k == "cat") return kCat;
      break;
    case 4:
      if (k == "name") return kName;
      break;
    default: break;
  }
  return kOtherField;
}

/// The SAX handler. With head_only it stops where the events begin.
class Reader {
public:
  Reader(TraceText& text, std::string file, const StageLayout* layout, std::int64_t max_events)
      : text_(text), layout_(layout), max_events_(static_cast<std::size_t>(std::max<std::int64_t>(max_events, 1))) {
    trace.file = std::move(file);
    other_keys_.reserve(16);
  }

  Trace trace;
  bool stopped = false;  // head_only: stopped at the events, on purpose

  bool null() { return scalar([](Value& v) { v.kind = Value::null; }); }
  bool boolean(bool x) {
    return scalar([x](Value& v) {
      v.kind = Value::boolean;
      v.b = x;
    });
  }
  bool number_integer(json::number_integer_t x) {
    return scalar([x](Value& v) {
      v.kind = Value::integer;
      v.i = x;
    });
  }
  bool number_unsigned(json::number_unsigned_t x) {
    return scalar([x](Value& v) {
      v.kind = Value::unsigned_;
      v.u = x;
    });
  }
  bool number_float(json::number_float_t x, const std::string&) {
    return scalar([x](Value& v) {
      v.kind = Value::floating;
      v.d = x;
    });
  }
  bool string(std::string& x) {
    return scalar([&x](Value& v) {
      v.kind = Value::string;
      v.s.assign(x);
    });
  }
  bool binary(json::binary_t&) { return scalar([](Value& v) { v.kind = Value::null; }); }

  bool start_object(std::size_t) {
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    switch (ctx_.back()) {
      case Ctx::top:
        trace.head.form = "kineto";
        ctx_.push_back(Ctx::root);
        return true;
      case Ctx::root:
        if (root_field_ == RootField::events) not_an_event_array("an object");
        if (root_field_ == RootField::dist) {
          ctx_.push_back(Ctx::dist);
          dist_keys_.clear();
          return true;
        }
        skip_ = 1;
        return true;
      case Ctx::events:
        ++index_;
        ctx_.push_back(Ctx::event);
        begin_event();
        return true;
      case Ctx::event:
      case Ctx::dist:
        container(Value::object);
        skip_ = 1;
        return true;
    }
    return true;
  }

  bool start_array(std::size_t) {
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    switch (ctx_.back()) {
      case Ctx::top:
        trace.head.form = "event array";
        if (!layout_) return stop();
        ctx_.push_back(Ctx::events);
        return true;
      case Ctx::root:
        if (root_field_ == RootField::events) {
          events_seen_ = true;
          if (!layout_) return stop();
          ctx_.push_back(Ctx::events);
          return true;
        }
        skip_ = 1;
        return true;
      case Ctx::events:
        ++index_;
        skip_ = 1;
        return true;
      case Ctx::event:
      case Ctx::dist:
        container(Value::array);
        skip_ = 1;
        return true;
    }
    return true;
  }

  bool key(std::string& k) {
    text_.value_seen();
    if (skip_ > 0) return true;
    switch (ctx_.back()) {
      case Ctx::root: return root_key(k);
      case Ctx::dist: return dist_key(k);
      case Ctx::event: return event_key(k);
      default: return true;
    }
  }

  bool end_object() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    const Ctx c = ctx_.back();
    ctx_.pop_back();
    if (c == Ctx::event) finish_event();
    if (c == Ctx::dist) finish_dist();
    if (c == Ctx::root && !events_seen_)
      throw FormatError(trace.file, 0, "no traceEvents array; expected a Chrome trace from torch.profiler");
    return true;
  }

  bool end_array() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    ctx_.pop_back();
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    if (e.id == 406) {
      // out_of_range.406: a number past the double range; what() names it ("... parsing '1e309'").
      std::string why = e.what();
      if (const auto at = why.find("] "); at != std::string::npos) why = why.substr(at + 2);
      throw FormatError(trace.file, 0, shown(why) + "; expected a Chrome trace with finite numbers");
    }
    throw FormatError(trace.file, 0,
                      "not valid JSON at byte " + std::to_string(position) +
                          "; expected a Chrome trace (an object with traceEvents, or an array of events)");
  }

  /// The end of a whole pass: the last checks and the events in time order.
  void finish() {
    if (trace.events.empty() && trace.timed == 0)
      throw FormatError(trace.file, 0, "no complete events (ph \"X\"); expected a Chrome trace from torch.profiler");
    std::sort(trace.events.begin(), trace.events.end(), [](const Ev& a, const Ev& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.end > b.end;  // parents before their children
    });
  }

private:
  enum class Ctx : std::uint8_t { top, root, events, event, dist };
  enum class RootField : std::uint8_t { other, events, dist };
  enum class DistField : std::uint8_t { other, rank, world };

  bool stop() {
    stopped = true;
    return false;
  }

  /// A scalar value: stored when it is a field the importer reads, else passed over.
  template <typename Set>
  bool scalar(Set&& set) {
    text_.value_seen();
    if (skip_ > 0) return true;
    switch (ctx_.back()) {
      case Ctx::top:
        throw FormatError(trace.file, 0, "neither a JSON object with traceEvents nor an array of events; expected a Chrome trace");
      case Ctx::root:
        if (root_field_ == RootField::events) {
          Value v;
          set(v);
          not_an_event_array(v.type());
        }
        return true;
      case Ctx::events: ++index_; return true;
      case Ctx::event:
        if (field_ != kOtherField) set(fields_[field_]);
        return true;
      case Ctx::dist:
        if (dist_field_ == DistField::rank) set(rank_);
        if (dist_field_ == DistField::world) set(world_);
        return true;
    }
    return true;
  }

  void container(Value::Kind kind) {
    if (ctx_.back() == Ctx::event && field_ != kOtherField) fields_[field_].kind = kind;
    if (ctx_.back() == Ctx::dist && dist_field_ == DistField::rank) rank_.kind = kind;
    if (ctx_.back() == Ctx::dist && dist_field_ == DistField::world) world_.kind = kind;
  }

  [[noreturn]] void not_an_event_array(const std::string& type) {
    throw FormatError(trace.file, 0, "traceEvents is " + type + ", not an array; expected a Chrome trace from torch.profiler");
  }

  [[noreturn]] void duplicate(const std::string& k, const std::string& where) {
    throw FormatError(trace.file, 0,
                      "key " + json(shown(k)).dump() + " appears twice in " + where + " (byte " + std::to_string(text_.position()) +
                          "); expected each key once: JSON leaves a repeated key undefined, so neither value can be trusted");
  }

  bool root_key(const std::string& k) {
    if (std::find(root_keys_.begin(), root_keys_.end(), k) != root_keys_.end()) duplicate(k, "the top-level object");
    root_keys_.push_back(k);
    root_field_ = k == "traceEvents" ? RootField::events : k == "distributedInfo" ? RootField::dist : RootField::other;
    return true;
  }

  bool dist_key(const std::string& k) {
    if (std::find(dist_keys_.begin(), dist_keys_.end(), k) != dist_keys_.end()) duplicate(k, "distributedInfo");
    dist_keys_.push_back(k);
    dist_field_ = k == "rank" ? DistField::rank : k == "world_size" ? DistField::world : DistField::other;
    return true;
  }

  bool event_key(const std::string& k) {
    field_ = field_of(k);
    if (field_ != kOtherField) {
      const auto bit = static_cast<std::uint32_t>(1u << field_);
      if ((seen_ & bit) && repeated_.empty()) repeated_ = k, repeated_at_ = text_.position();
      seen_ |= bit;
    } else {
      // Kineto's events have a handful of other keys (args, id, bp, s): a short list is enough.
      if (std::find(other_keys_.begin(), other_keys_.end(), k) != other_keys_.end()) {
        if (repeated_.empty()) repeated_ = k, repeated_at_ = text_.position();
      } else {
        other_keys_.push_back(k);
      }
    }
    return true;
  }

  void finish_dist() {
    if (rank_.kind != Value::absent) {
      const auto r = rank_.as_int();
      if (!r || *r < 0) throw FormatError(trace.file, 0, "distributedInfo.rank is " + shown(rank_.dump()) + ", expected an integer rank >= 0");
      trace.head.rank = r;
    }
    if (world_.kind != Value::absent) {
      const auto w = world_.as_int();
      if (!w || *w < 1 || *w > kWorldSizeCeiling)
        throw FormatError(trace.file, 0,
                          "distributedInfo.world_size is " + shown(world_.dump()) + ", expected an integer 1.." +
                              std::to_string(kWorldSizeCeiling));
      trace.head.world = w;
    }
    trace.head.before_events = !events_seen_;
  }

  void begin_event() {
    for (auto& f : fields_) f.kind = Value::absent;
    seen_ = 0;
    other_keys_.clear();
    repeated_.clear();
    field_ = kOtherField;
  }

  /// "traceEvents[i] ('name'), ph "X"": where an event's error is.
  std::string where(std::size_t i) const {
    const Value& nm = fields_[kName];
    const bool named = nm.kind == Value::string && repeated_ != "name";
    std::string w = "traceEvents[" + std::to_string(i) + "]" + (named ? " ('" + shown(nm.s) + "')" : "");
    if (fields_[kPh].kind == Value::string) w += ", ph \"" + shown(fields_[kPh].s) + "\"";
    return w;
  }

  double time_field(Field f, const char* key, std::size_t i) const {
    const Value& v = fields_[f];
    if (v.kind == Value::absent)
      throw FormatError(trace.file, 0,
                        where(i) + ", has no " + key + "; expected " + (f == kTs ? "a timestamp" : "the duration") + " in microseconds");
    if (!v.number()) throw FormatError(trace.file, 0, where(i) + ": " + key + " is " + v.type() + ", expected a number of microseconds");
    return v.as_double();
  }

  void finish_event() {
    const std::size_t i = index_ - 1;
    if (!repeated_.empty())
      throw FormatError(trace.file, 0,
                        where(i) + ": key " + json(shown(repeated_)).dump() + " appears twice (byte " + std::to_string(repeated_at_) +
                            "); expected each key once: JSON leaves a repeated key undefined, so neither value can be trusted");
    const Value& ph = fields_[kPh];
    if (ph.kind != Value::string || ph.s.size() != 1) return;
    const char p = ph.s[0];
    if (p != 'X' && p != 'B' && p != 'E') return;  // metadata, counters, flows, instants
    // Complete, begin and end events carry the time; a bad one is an error, never a dropped event.
    const bool named = fields_[kName].kind == Value::string;
    if (!named && p != 'E')  // an E event may omit its name (it closes the open B)
      throw FormatError(trace.file, 0, where(i) + ", has no name; expected a string name");
    const double t = time_field(kTs, "ts", i);
    if (!(std::fabs(t) <= kMaxTraceUs))
      throw FormatError(trace.file, 0,
                        where(i) + ": ts is " + shown(fields_[kTs].dump()) +
                            " us, beyond 2^53 us where a double no longer resolves a microsecond; expected trace timestamps "
                            "in microseconds");
    const bool device = fields_[kCat].kind == Value::string && device_category(fields_[kCat].s);
    const int thread = thread_id();
    if (p == 'E') return end_event(thread, t, i);
    // A user's record_function range (cat user_annotation): listed where a fallback span swallows it.
    const bool user_ann = !device && fields_[kCat].kind == Value::string && fields_[kCat].s.size() == 15 &&
                          iequals_prefix(fields_[kCat].s, "user_annotation");
    if (p == 'B') {
      const int id = name_id(device);
      if (user_ann) trace.bits[id] |= kIsUserAnn;
      open_[thread].emplace_back(t, id);
      return;
    }
    const double dur = time_field(kDur, "dur", i);
    if (dur < 0) throw FormatError(trace.file, 0, where(i) + ": dur is " + shown(fields_[kDur].dump()) + ", expected microseconds >= 0");
    const double end = t + dur;
    if (!(end <= kMaxTraceUs))
      throw FormatError(trace.file, 0,
                        where(i) + ": ends at ts + dur = " + shown(json(end).dump()) +
                            " us, beyond 2^53 us where a double no longer resolves a microsecond; expected trace times in "
                            "microseconds");
    ++trace.timed;
    // Device work other than collectives is never read: dropped before its name is interned.
    if (device && !device_collective(fields_[kName].s)) return;
    const int id = name_id(device);
    if (user_ann) trace.bits[id] |= kIsUserAnn;
    keep({t, end, thread, id, device});
  }

  void end_event(int thread, double t, std::size_t i) {
    auto& stack = open_[thread];
    if (stack.empty()) return;  // closes a span begun before the trace: nothing to time
    const auto [begin, name] = stack.back();
    stack.pop_back();
    if (t < begin)
      throw FormatError(trace.file, 0,
                        where(i) + ": ends at ts " + shown(fields_[kTs].dump()) + " before its B event ('" +
                            shown(trace.names[name]) + "') begins; expected an end at or after the begin");
    ++trace.timed;
    const bool device = name_device_[name];
    if (device && !(trace.bits[name] & kIsCollDevice)) return;
    keep({begin, t, thread, name, device});
  }

  /// Keeps a timed event: memory follows the events kept, bounded as they come (a gzip of valid
  /// events once reached 4.71 GB before it was refused at the end).
  void keep(const Ev& e) {
    if (trace.events.size() >= max_events_)
      throw FormatError(trace.file, 0,
                        "more than " + std::to_string(max_events_) + " timed events to keep (at byte " +
                            std::to_string(text_.position()) + " of the text); expected a trace of at most that many "
                            "(raise the limit with --max-events)");
    trace.events.push_back(e);
  }

  int thread_id() {
    key_.clear();
    fields_[kPid].id_text(key_);
    key_ += '/';
    fields_[kTid].id_text(key_);
    if (key_ == last_key_) return last_thread_;
    const auto [it, fresh] = thread_ids_.try_emplace(key_, static_cast<int>(trace.threads.size()));
    if (fresh) trace.threads.push_back(key_);
    last_key_ = key_;
    last_thread_ = it->second;
    return it->second;
  }

  int name_id(bool device) {
    const std::string& n = fields_[kName].s;
    auto& ids = device ? device_names_ : cpu_names_;
    const auto [it, fresh] = ids.try_emplace(n, static_cast<int>(trace.names.size()));
    if (fresh) {
      trace.names.push_back(n);
      trace.bits.push_back(classify(n, device));
      trace.rules.push_back(device || !layout_ ? kNoRule : layout_->rule_of(n));
      name_device_.push_back(device);
    }
    return it->second;
  }

  TraceText& text_;
  const StageLayout* layout_;  // null: head only
  std::vector<Ctx> ctx_{Ctx::top};
  int skip_ = 0;  // depth inside a value passed over
  RootField root_field_ = RootField::other;
  DistField dist_field_ = DistField::other;
  bool events_seen_ = false;
  std::vector<std::string> root_keys_, dist_keys_;
  Value rank_, world_;
  std::size_t index_ = 0;  // traceEvents elements begun

  // The event being read.
  Field field_ = kOtherField;
  std::array<Value, kFieldCount> fields_;
  std::uint32_t seen_ = 0;
  std::vector<std::string> other_keys_;
  std::string repeated_;
  std::uint64_t repeated_at_ = 0;

  std::unordered_map<std::string, int> cpu_names_, device_names_, thread_ids_;
  std::vector<bool> name_device_;
  std::string key_, last_key_;
  int last_thread_ = -1;
  std::unordered_map<int, std::vector<std::pair<double, int>>> open_;  // B events awaiting their E, per thread
  std::size_t max_events_;
};

/// Runs the parser over the trace's text; returns the handler's result.
Trace parse(ByteSource& src, const std::string& name, std::uint64_t limit, const StageLayout* layout, std::int64_t max_events) {
  TraceText text(src, name, limit);
  std::istream in(&text);
  Reader reader(text, name, layout, max_events);
  const bool whole = json::sax_parse(in, &reader);
  if (!whole && !reader.stopped)  // the handler throws its own errors; this is a safety net
    throw FormatError(name, 0, "not valid JSON at byte " + std::to_string(text.position()) + "; expected a Chrome trace");
  if (layout) reader.finish();
  Trace tr = std::move(reader.trace);
  return tr;
}

}  // namespace

TraceHead read_head(ByteSource& src, const std::string& name, std::uint64_t limit) {
  return parse(src, name, limit, nullptr, ReadLimits{}.max_events).head;
}

Trace read_trace(ByteSource& src, const std::string& name, std::uint64_t limit, const StageLayout& layout, std::int64_t max_events) {
  return parse(src, name, limit, &layout, max_events);
}

}  // namespace sf::formats::kineto
