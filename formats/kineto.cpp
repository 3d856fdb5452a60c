// Kineto (PyTorch profiler) Chrome traces reduced to a stage matrix: one trace per rank, steps
// from ProfilerStep#N, stage boundaries from the CPU-side events of the step. docs/kineto.md
// gives the mapping, its assumptions and what it loses.
#include "sf/formats/formats.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
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

std::string read_maybe_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files unchanged
  if (f == nullptr) throw FormatError(path, 0, "cannot open file for reading");
  std::string out;
  std::array<char, 1 << 16> buf{};
  for (;;) {
    const int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      throw FormatError(path, 0, "cannot decompress (" + msg + "); expected a .json or .json.gz trace");
    }
    if (n == 0) break;
    out.append(buf.data(), static_cast<std::size_t>(n));
  }
  gzclose(f);
  return out;
}

std::optional<std::int64_t> as_int(const json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d)) return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

std::optional<double> as_num(const json& v) {
  if (v.is_number()) {
    const double d = v.get<double>();
    if (std::isfinite(d)) return d;
  }
  return std::nullopt;
}

std::string id_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

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

Trace load(const std::string& path) {
  Trace tr;
  tr.file = path;
  json doc;
  {
    const std::string text = read_maybe_gz(path);
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
        if (!tr.rank) throw FormatError(path, 0, "distributedInfo.rank is " + r->dump() + ", expected an integer");
      }
      if (const auto w = di->find("world_size"); w != di->end()) {
        tr.world = as_int(*w);
        if (!tr.world || *tr.world < 1)
          throw FormatError(path, 0, "distributedInfo.world_size is " + w->dump() + ", expected an integer >= 1");
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
  for (const auto& e : *events) {
    if (!e.is_object()) continue;
    const auto ph = e.find("ph");
    const auto nm = e.find("name");
    const auto ts = e.find("ts");
    if (ph == e.end() || !ph->is_string() || nm == e.end() || !nm->is_string() || ts == e.end()) continue;
    const std::string& p = ph->get_ref<const std::string&>();
    if (p != "X" && p != "B" && p != "E") continue;
    const auto t = as_num(*ts);
    if (!t) continue;
    const auto cat_it = e.find("cat");
    const std::string cat = cat_it != e.end() && cat_it->is_string() ? lower(cat_it->get<std::string>()) : "";
    const bool device = cat == "kernel" || starts_with(cat, "gpu_") || cat == "cuda_profiler_range";
    const std::string tid = (e.contains("pid") ? id_text(e["pid"]) : "") + "/" + (e.contains("tid") ? id_text(e["tid"]) : "");
    const int thread = intern(thread_ids, tr.threads, tid);
    if (p == "E") {
      auto& stack = open[thread];
      if (stack.empty()) continue;
      const auto [begin, name] = stack.back();
      stack.pop_back();
      tr.events.push_back({begin, std::max(begin, *t), thread, name, device});
      continue;
    }
    const int name = intern(name_ids, tr.names, nm->get<std::string>());
    if (name == static_cast<int>(tr.bits.size())) tr.bits.push_back(classify(tr.names.back(), cat == "kernel"));
    if (p == "B") {
      open[thread].emplace_back(*t, name);
      continue;
    }
    double dur = 0;
    if (const auto d = e.find("dur"); d != e.end()) dur = as_num(*d).value_or(0);
    tr.events.push_back({*t, *t + std::max(0.0, dur), thread, name, device});
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
    if (r.ec != std::errc() || r.ptr != n.data() + n.size())
      throw FormatError(file, 0, "step annotation '" + n + "' does not end in an integer; expected ProfilerStep#N");
    for (const auto& s : steps)
      if (s.id == id) throw FormatError(file, 0, n + " appears twice on the main thread; expected one span per step");
    steps.push_back({id, e.ts, e.end});
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.id < b.id; });

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

std::optional<int> rank_from_name(const std::string& path) {
  const std::string base = lower(path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1));
  for (std::size_t at = base.find("rank"); at != std::string::npos; at = base.find("rank", at + 1)) {
    std::size_t p = at + 4;
    if (p < base.size() && (base[p] == '-' || base[p] == '_')) ++p;
    int r = 0;
    const auto res = std::from_chars(base.data() + p, base.data() + base.size(), r);
    if (res.ec == std::errc() && res.ptr != base.data() + p) return r;
  }
  return std::nullopt;
}

}  // namespace

KinetoImport import_kineto(const std::vector<std::string>& files, const KinetoOptions& opt) {
  if (files.empty()) throw FormatError("import kineto", 0, "no trace files given; expected one trace per rank");
  KinetoImport out;
  std::vector<RankSteps> reduced;
  std::optional<int> world;
  std::string world_file;
  std::map<int, std::string> rank_file;
  for (const auto& path : files) {
    const Trace tr = load(path);
    KinetoTrace info;
    info.file = path;
    info.form = tr.form;
    if (tr.rank) {
      info.rank = static_cast<int>(*tr.rank);
      info.rank_source = "distributedInfo";
    } else if (const auto r = rank_from_name(path)) {
      info.rank = *r;
      info.rank_source = "file name";
    } else {
      throw FormatError(path, 0,
                        "no distributedInfo.rank and no rank in the file name; expected a Kineto trace with distributedInfo "
                        "or a file named like rank3.json");
    }
    if (tr.world) {
      info.world_size = static_cast<int>(*tr.world);
      info.world_source = "distributedInfo";
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
    if (info.rank < 0 || info.rank >= info.world_size)
      throw FormatError(path, 0,
                        "rank " + std::to_string(info.rank) + " outside world size " + std::to_string(info.world_size));
    if (const auto it = rank_file.find(info.rank); it != rank_file.end())
      throw FormatError(path, 0, "rank " + std::to_string(info.rank) + " already given by " + it->second + "; expected one trace per rank");
    rank_file[info.rank] = path;
    reduced.push_back(reduce(tr, info));
    out.traces.push_back(std::move(info));
  }

  const int R = *world;
  std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = std::numeric_limits<std::int64_t>::min();
  for (const auto& t : out.traces) {
    first = std::min(first, t.first_step);
    last = std::max(last, t.last_step);
  }
  if (last - first + 1 > std::numeric_limits<int>::max() / std::max(1, R))
    throw FormatError(files.front(), 0, "steps span " + std::to_string(last - first + 1) + " ids; too large");
  Window& w = out.window;
  w.matrix = frontier::StageMatrix(frontier::StageSchema::default_schema(), R, first, static_cast<int>(last - first + 1));
  w.header_line = 0;
  for (std::size_t i = 0; i < reduced.size(); ++i) {
    const int r = out.traces[i].rank;
    const auto& rs = reduced[i];
    for (std::size_t k = 0; k < rs.ids.size(); ++k) {
      const int t = static_cast<int>(rs.ids[k] - first);
      try {
        w.matrix.set_record(t, r, rs.d[k], rs.wall[k]);
        for (int s = 0; s < kStages; ++s)
          if (rs.has_sync[s]) w.matrix.set_sync_wait(t, r, s, rs.sync[k][s]);
      } catch (const std::invalid_argument& e) {
        throw FormatError(out.traces[i].file, 0, "ProfilerStep#" + std::to_string(rs.ids[k]) + ": " + e.what());
      }
    }
  }
  for (int r = 0; r < R; ++r)
    if (!rank_file.count(r)) out.missing_ranks.push_back(r);
  if (!out.missing_ranks.empty()) {
    // Ranges ("2-127") keep the reason one readable line at any world size.
    const std::string list = frontier::format_rank_ranges(out.missing_ranks, 16);
    w.telemetry.reasons.push_back("kineto import: no trace for " + std::to_string(out.missing_ranks.size()) + " of " +
                                  std::to_string(R) + " ranks (" + list + ")");
  }
  return out;
}

}  // namespace sf::formats
