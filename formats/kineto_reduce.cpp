// One trace's events reduced to steps: the main thread's ProfilerStep#N spans (refused when they
// overlap, nest or repeat), each step's time given to stages by claims of three strengths
// (a --stage-map rule, a marker event, a span derived from the markers), collective time
// clipped to the stages, and what no stage explains named (docs/kineto.md, "Mapping").
#include "kineto_internal.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <unordered_map>

namespace sf::formats::kineto {

namespace {

/// Steps may touch (one ends where the next begins) but not overlap. Kineto prints times in µs
/// with three decimals, so two adjacent spans can cross by a rounding of ~1 ns; a crossing
/// up to 10 ns is taken as touching.
constexpr double kStepSlackUs = 0.01;

std::string us(double v) { return nlohmann::json(v).dump(); }

std::string span_text(const Step& s) { return "ProfilerStep#" + std::to_string(s.id) + " (ts " + us(s.ts) + ", dur " + us(s.end - s.ts) + " us)"; }

std::int64_t step_id(const std::string& file, const std::string& n) {
  std::int64_t id = 0;
  const auto r = std::from_chars(n.data() + 13, n.data() + n.size(), id);
  if (r.ec == std::errc::result_out_of_range && r.ptr == n.data() + n.size())
    throw FormatError(file, 0,
                      "step annotation '" + shown(n) + "' has a step id outside the 64-bit integer range; expected "
                      "ProfilerStep#N with N from 0 to 9223372036854775807");
  if (r.ec != std::errc() || r.ptr != n.data() + n.size())
    throw FormatError(file, 0, "step annotation '" + shown(n) + "' does not end in an integer; expected ProfilerStep#N");
  // prof.step() counts from 0: a negative id is no step of a torch.profiler schedule (issue 40).
  if (id < 0)
    throw FormatError(file, 0, "step annotation '" + shown(n) + "' has a negative step id; expected ProfilerStep#N with N >= 0");
  return id;
}

/// Consecutive steps in time order: identical, nested and overlapping spans would count one
/// event in two steps or one step's time twice; each is refused by name.
void check_step_order(const std::string& file, const std::vector<Step>& steps) {
  for (std::size_t i = 1; i < steps.size(); ++i) {
    const Step& a = steps[i - 1];
    const Step& b = steps[i];
    if (std::fabs(b.ts - a.ts) <= kStepSlackUs && std::fabs(b.end - a.end) <= kStepSlackUs)
      throw FormatError(file, 0,
                        span_text(a) + " and ProfilerStep#" + std::to_string(b.id) +
                            " have the same span on the main thread; expected one span per step");
    if (b.end <= a.end + kStepSlackUs)
      throw FormatError(file, 0,
                        span_text(b) + " lies inside " + span_text(a) +
                            " on the main thread; expected steps one after another, not nested");
    if (b.ts < a.end - kStepSlackUs)
      throw FormatError(file, 0,
                        span_text(a) + " overlaps " + span_text(b) + " by " + us(a.end - b.ts) +
                            " us on the main thread; expected each step to end before the next begins");
  }
}

/// A claim on a step's time: a stage, by a rule of some strength. Where claims overlap, the
/// strongest wins (a map rule, then a marker event, then a derived span) and, among equals, the
/// innermost (the later start, then the earlier end): nested annotations give their time to the
/// most specific one.
struct Claim {
  double b, e;
  int stage;
  int level;  // 0 stage map, 1 marker event, 2 derived span
};

/// A piece of the step given to one stage (-1: the residual, step.other).
struct Segment {
  double b, e;
  int stage;
};

/// The step [S, E] cut into segments, each given to its winning claim.
std::vector<Segment> resolve(std::vector<Claim>& claims, double S, double E) {
  std::vector<double> cuts{S, E};
  for (auto& c : claims) {
    c.b = std::clamp(c.b, S, E);
    c.e = std::clamp(c.e, S, E);
    if (c.e > c.b) cuts.insert(cuts.end(), {c.b, c.e});
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::sort(claims.begin(), claims.end(), [](const Claim& x, const Claim& y) { return x.b < y.b; });
  auto weaker = [](const Claim* x, const Claim* y) {  // heap order: the strongest on top
    if (x->level != y->level) return x->level > y->level;
    if (x->b != y->b) return x->b < y->b;
    return x->e > y->e;
  };
  std::priority_queue<const Claim*, std::vector<const Claim*>, decltype(weaker)> active(weaker);
  std::vector<Segment> out;
  std::size_t next = 0;
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
    const double x = cuts[k], y = cuts[k + 1];
    for (; next < claims.size() && claims[next].b <= x; ++next)
      if (claims[next].e > claims[next].b) active.push(&claims[next]);
    while (!active.empty() && active.top()->e <= x) active.pop();
    const int stage = active.empty() ? -1 : active.top()->stage;
    if (!out.empty() && out.back().stage == stage && out.back().e == x) out.back().e = y;
    else out.push_back({x, y, stage});
  }
  return out;
}

/// Sorted, disjoint intervals covering the given ones.
std::vector<std::pair<double, double>> union_of(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  std::vector<std::pair<double, double>> out;
  for (const auto& [b, e] : iv) {
    if (e <= b) continue;
    if (!out.empty() && b <= out.back().second) out.back().second = std::max(out.back().second, e);
    else out.emplace_back(b, e);
  }
  return out;
}

/// Time of `cover` (disjoint, sorted) inside each segment's stage, the residual at index S.
std::vector<double> overlap_by_stage(const std::vector<Segment>& segs, const std::vector<std::pair<double, double>>& cover,
                                     int stages) {
  std::vector<double> out(static_cast<std::size_t>(stages) + 1, 0.0);
  std::size_t j = 0;
  for (const auto& s : segs) {
    while (j < cover.size() && cover[j].second <= s.b) ++j;
    for (std::size_t k = j; k < cover.size() && cover[k].first < s.e; ++k) {
      const double len = std::min(s.e, cover[k].second) - std::max(s.b, cover[k].first);
      if (len > 0) out[s.stage < 0 ? static_cast<std::size_t>(stages) : static_cast<std::size_t>(s.stage)] += len;
    }
  }
  return out;
}

/// Where the trace's sync-wait side evidence comes from: NCCL/RCCL kernels, else gloo workers,
/// else the host side of collectives (record_param_comms, nccl:*, c10d::*).
std::uint32_t collective_source(const Trace& tr, KinetoTrace& info) {
  std::uint32_t have = 0;
  for (const auto& e : tr.events) have |= tr.bits[e.name] & kAnyCollective;
  const std::uint32_t coll = (have & kIsCollDevice) ? std::uint32_t{kIsCollDevice}
                             : (have & kIsGloo)    ? std::uint32_t{kIsGloo}
                             : (have & kIsCollHost) ? std::uint32_t{kIsCollHost}
                                                    : 0u;
  info.collectives = coll == kIsCollDevice ? "device collective kernels (NCCL, RCCL, ...; device time)"
                     : coll == kIsGloo     ? "gloo:* worker events"
                     : coll == kIsCollHost ? "record_param_comms / nccl:* / c10d::* host events"
                                           : "none";
  return coll;
}

/// The claims of one step and the rule that placed each stage.
class StepClaims {
public:
  StepClaims(const Trace& tr, const StageLayout& l, int main, const Step& st, const std::vector<const Ev*>& in_step,
             const std::vector<const Ev*>& main_top)
      : how(l.stages.size()), found(l.stages.size(), false), tr_(tr), l_(l), main_(main), st_(st), in_(in_step), top_(main_top) {
    map_rules();
    backward();
    optimizer();
    backward_tail();
    data();
    forward();
    callbacks();
  }

  std::vector<Claim> claims;
  std::vector<std::string> how;
  std::vector<bool> found;

private:
  bool cpu_main(const Ev* e) const { return !e->device && e->thread == main_; }

  /// Adds `rule` to the stage's rule text once ("## data ## annotations + --stage-map stages[0]").
  void note(int stage, const std::string& rule) {
    std::string& h = how[stage];
    if (h.find(rule) == std::string::npos) h += (h.empty() ? "" : " + ") + rule;
  }

  void claim(double b, double e, int stage, int level) {
    claims.push_back({b, std::min(e, st_.end), stage, level});
    found[stage] = true;
  }

  /// Marker events of `bit` on the main thread (from `after` on), each a claim; false if none.
  bool markers(std::uint32_t bit, int stage, const char* rule, double after = -std::numeric_limits<double>::infinity()) {
    bool any = false;
    for (const Ev* e : in_)
      if ((tr_.bits[e->name] & bit) && cpu_main(e) && e->ts >= after) {
        claim(e->ts, e->end, stage, 1);
        any = true;
      }
    if (any) note(stage, rule);
    return any;
  }

  /// The extent of the stage's claims so far.
  std::pair<double, double> extent(int stage) const {
    double b = std::numeric_limits<double>::infinity(), e = -b;
    for (const auto& c : claims)
      if (c.stage == stage) b = std::min(b, c.b), e = std::max(e, c.e);
    return {b, e};
  }

  void map_rules() {
    if (l_.rules.empty()) return;
    for (const Ev* e : in_) {
      const std::int16_t r = tr_.rules[e->name];
      if (r == kNoRule || e->device) continue;
      const auto& rule = l_.rules[static_cast<std::size_t>(r)];
      if (!rule.any_thread && e->thread != main_) continue;
      claim(e->ts, e->end, rule.stage, 0);
      note(rule.stage, "--stage-map stages[" + std::to_string(r) + "]");
    }
  }

  void backward() {
    if (markers(kIsBwdAnn, l_.bwd, "## backward ##")) {
      bwd_annotated_ = true;
      return;
    }
    // The autograd engine runs on its own thread (any thread: on CPU it is the caller's).
    double b = std::numeric_limits<double>::infinity(), e = -b;
    for (const Ev* ev : in_)
      if ((tr_.bits[ev->name] & kIsAutograd) && !ev->device) b = std::min(b, ev->ts), e = std::max(e, ev->end);
    if (b > e) return;
    bwd_ = {b, e};
    note(l_.bwd, "autograd::engine / Backward events");
  }

  void optimizer() {
    if (markers(kIsOptAnn, l_.opt, "## optimizer ##")) return;
    const auto [bb, be] = bwd_span();
    markers(kIsOptOp, l_.opt, "Optimizer.step#/zero_grad# after backward", bb <= be ? bb : st_.ts);
  }

  /// The backward pass ends when the last gradient work of the step is done: autograd
  /// functions, DDP's reducer and the gradient collectives that began before the optimizer.
  void backward_tail() {
    if (bwd_annotated_ || !bwd_) return;
    const auto [ob, oe] = extent(l_.opt);
    const double stop = ob <= oe ? ob : st_.end;
    auto [b, e] = *bwd_;
    for (const Ev* ev : in_)
      if (!ev->device && (tr_.bits[ev->name] & (kIsAutograd | kIsReducer | kIsCollHost | kIsGloo)) && ev->ts >= b && ev->ts < stop)
        e = std::max(e, std::min(ev->end, stop));
    claim(b, e, l_.bwd, 2);
  }

  std::pair<double, double> bwd_span() const {
    if (bwd_) return *bwd_;
    return extent(l_.bwd);
  }

  /// Data waits anywhere in the step: a ## data_load ## after forward (prefetch) is data too.
  void data() {
    bool ann = false, loader = false;
    for (const Ev* e : in_)
      if ((tr_.bits[e->name] & kIsData) && cpu_main(e)) {
        claim(e->ts, e->end, l_.data, 1);
        ((tr_.bits[e->name] & kIsAnnotation) ? ann : loader) = true;
      }
    if (ann || loader)
      note(l_.data, ann && loader ? "## data ## annotations and DataLoader __next__" : ann ? "## data ## annotations" : "DataLoader __next__");
  }

  /// The first step time that belongs to a later stage than forward.
  double first_later() const {
    const auto [bb, be] = bwd_span();
    if (bb <= be) return bb;
    const auto [ob, oe] = extent(l_.opt);
    return ob <= oe ? ob : st_.end;
  }

  void forward() {
    if (markers(kIsFwdAnn, l_.fwd, "## forward ##")) return;
    // The first forward op: the first top-level main-thread event after the data wait that
    // opens the step; forward runs up to backward (the loss included).
    const double later = first_later();
    double from = st_.ts;
    double first_data = std::numeric_limits<double>::infinity();
    for (const auto& c : claims)
      if (c.stage == l_.data && c.level == 1 && c.b < later && c.b < first_data) first_data = c.b, from = c.e;
    for (const Ev* e : top_)
      if (e->ts >= from && e->ts < later && !(tr_.bits[e->name] & kIsData)) {
        claim(e->ts, later, l_.fwd, 2);
        note(l_.fwd, "first main-thread op after data, up to backward");
        return;
      }
  }

  void callbacks() {
    if (markers(kIsCbAnn, l_.cb, "## callbacks ##")) return;
    const auto [bb, be] = extent(l_.bwd);
    const auto [ob, oe] = extent(l_.opt);
    if (bb <= be && ob <= oe && ob > be) {
      claim(be, ob, l_.cb, 2);
      note(l_.cb, "between backward and optimizer");
    }
  }

  const Trace& tr_;
  const StageLayout& l_;
  int main_;
  const Step& st_;
  const std::vector<const Ev*>& in_;
  const std::vector<const Ev*>& top_;
  bool bwd_annotated_ = false;
  std::optional<std::pair<double, double>> bwd_;  // the autograd events' span, before its tail
};

}  // namespace

StepSpans find_steps(const Trace& tr) {
  // Steps: ProfilerStep#N on the thread that carries most of them (the main thread).
  std::map<int, int> per_thread;
  for (const auto& e : tr.events)
    if (tr.bits[e.name] & kIsStep) ++per_thread[e.thread];
  if (per_thread.empty())
    throw FormatError(tr.file, 0,
                      "no ProfilerStep#N events; expected a torch.profiler trace recorded with a schedule and prof.step() "
                      "once per training iteration");
  StepSpans out;
  out.main_thread = std::max_element(per_thread.begin(), per_thread.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  for (const auto& e : tr.events)
    if (e.thread == out.main_thread && (tr.bits[e.name] & kIsStep)) out.steps.push_back({step_id(tr.file, tr.names[e.name]), e.ts, e.end});
  std::vector<Step> by_id = out.steps;
  std::sort(by_id.begin(), by_id.end(), [](const Step& a, const Step& b) { return a.id < b.id; });
  for (std::size_t i = 1; i < by_id.size(); ++i)
    if (by_id[i].id == by_id[i - 1].id)
      throw FormatError(tr.file, 0, "ProfilerStep#" + std::to_string(by_id[i].id) + " appears twice on the main thread; expected one span per step");
  check_step_order(tr.file, out.steps);  // tr.events is in time order, so are the steps
  return out;
}

namespace {

/// The events that start inside a step (the step's own span left out), and the main thread's
/// top-level ones among them (not nested in an earlier main-thread event).
void step_events(const Trace& tr, int main, const Step& st, std::vector<const Ev*>& in_step, std::vector<const Ev*>& main_top) {
  const auto lo = std::lower_bound(tr.events.begin(), tr.events.end(), st.ts, [](const Ev& e, double t) { return e.ts < t; });
  in_step.clear();
  main_top.clear();
  double top_end = -std::numeric_limits<double>::infinity();
  for (auto it = lo; it != tr.events.end() && it->ts <= st.end; ++it) {
    if (it->thread == main && (tr.bits[it->name] & kIsStep)) continue;
    in_step.push_back(&*it);
    if (it->thread == main && !it->device && it->ts >= top_end) {
      main_top.push_back(&*it);
      top_end = it->end;
    }
  }
}

/// Collective time inside each stage (µs; the residual at index S): the union of the intervals
/// of `bits` (two gloo workers at once are one wait), clipped to the stage's pieces of the main
/// thread's step, so never above the stage.
/// `carried`: collectives of earlier steps still running when this one starts (their part in this
/// step counts here, clipped to it).
std::vector<double> collective_time(const Trace& tr, const std::vector<const Ev*>& in_step, const std::vector<const Ev*>& carried,
                                    const Step& st, const std::vector<Segment>& segs, std::uint32_t bits, int S) {
  std::vector<std::pair<double, double>> iv;
  for (const auto* list : {&carried, &in_step})
    for (const Ev* e : *list)
      if ((tr.bits[e->name] & bits) && std::min(e->end, st.end) > std::max(e->ts, st.ts))
        iv.emplace_back(std::max(e->ts, st.ts), std::min(e->end, st.end));
  return overlap_by_stage(segs, union_of(std::move(iv)), S);
}

/// The collectives that go on past the end of step `st` (from earlier steps or started in it):
/// the next step counts their rest.
void carry_collectives(const Trace& tr, const std::vector<const Ev*>& in_step, const Step& st, std::vector<const Ev*>& carried) {
  std::vector<const Ev*> next;
  for (const std::vector<const Ev*>* list : {static_cast<const std::vector<const Ev*>*>(&carried), &in_step})
    for (const Ev* e : *list)
      if ((tr.bits[e->name] & kAnyCollective) && e->end > st.end) next.push_back(e);
  carried.swap(next);
}

/// What no stage explains, by the outermost main-thread event over it (name id; -1: none).
double attribute_residual(const std::vector<Segment>& segs, const std::vector<const Ev*>& main_top,
                          std::unordered_map<int, double>& unmapped) {
  double residual = 0;
  std::size_t j = 0;
  for (const auto& s : segs) {
    if (s.stage >= 0) continue;
    residual += s.e - s.b;
    double named = 0;
    while (j < main_top.size() && main_top[j]->end <= s.b) ++j;
    for (std::size_t k = j; k < main_top.size() && main_top[k]->ts < s.e; ++k) {
      const double len = std::min(s.e, main_top[k]->end) - std::max(s.b, main_top[k]->ts);
      if (len > 0) unmapped[main_top[k]->name] += len, named += len;
    }
    if (s.e - s.b - named > 0) unmapped[-1] += s.e - s.b - named;
  }
  return residual;
}

std::vector<KinetoUnmapped> largest(const Trace& tr, const std::unordered_map<int, double>& by_name, int steps);

/// The per-stage rule texts and the five largest contributors to step.other.
void summarize(const Trace& tr, const std::vector<std::map<std::string, int>>& rules,
               const std::unordered_map<int, double>& unmapped, double residual_us, double wall_us, KinetoTrace& info) {
  info.stage_rules.assign(rules.size(), "");
  for (std::size_t s = 0; s < rules.size(); ++s) {
    std::string text;
    for (const auto& [rule, n] : rules[s]) text += (text.empty() ? "" : "; ") + rule + " (" + std::to_string(n) + ")";
    info.stage_rules[s] = text.empty() ? "not found" : text;
  }
  info.other_share = wall_us > 0 ? residual_us / wall_us : 0;
  info.unmapped = largest(tr, unmapped, info.steps);
}

/// What swallowed holds (name id, -1: no main-thread event → µs), the five largest per step.
std::vector<KinetoUnmapped> largest(const Trace& tr, const std::unordered_map<int, double>& by_name, int steps) {
  std::vector<std::pair<double, int>> ranked;
  for (const auto& [name, t] : by_name) ranked.emplace_back(t, name);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::vector<KinetoUnmapped> out;
  for (std::size_t k = 0; k < ranked.size() && k < 5; ++k)
    out.push_back({ranked[k].second < 0 ? "(no main-thread event)" : tr.names[ranked[k].second], ranked[k].first / 1e6 / steps});
  return out;
}

/// Backward found as the span of autograd events: the user annotations on the main thread inside
/// its pieces of the step, by name (µs).
void fallback_annotations(const Trace& tr, int main, const std::vector<const Ev*>& in_step, const std::vector<Segment>& segs,
                          int stage, std::unordered_map<int, double>& by_name) {
  for (const Ev* e : in_step) {
    const auto bits = tr.bits[e->name];
    if (e->thread != main || e->device || !(bits & kIsUserAnn) || (bits & (kIsAnnotation | kIsStep))) continue;
    for (const auto& sg : segs)
      if (sg.stage == stage) {
        const double len = std::min(sg.e, e->end) - std::max(sg.b, e->ts);
        if (len > 0) by_name[e->name] += len;
      }
  }
}

}  // namespace

RankSteps reduce(const Trace& tr, const StepSpans& spans, const StageLayout& l, KinetoTrace& info) {
  const int S = static_cast<int>(l.stages.size());
  const std::uint32_t coll = collective_source(tr, info);
  RankSteps out;
  out.has_sync.assign(S, false);
  out.waits.assign(S + 1, false);
  info.stage_steps.assign(S, 0);
  std::vector<std::map<std::string, int>> rules(S);
  std::unordered_map<int, double> unmapped;  // name id (-1: no main-thread event) → µs of residual
  std::unordered_map<int, double> in_fallback;  // name id → µs of a user annotation inside a fallback backward
  double residual_us = 0, wall_us = 0;
  int with_backward = 0;
  std::vector<const Ev*> in_step, main_top, carried;
  for (const auto& st : spans.steps) {
    step_events(tr, spans.main_thread, st, in_step, main_top);
    StepClaims c(tr, l, spans.main_thread, st, in_step, main_top);
    const std::vector<Segment> segs = resolve(c.claims, st.ts, st.end);
    std::vector<double> d(S, 0.0), sync(S, 0.0);
    for (const auto& s : segs)
      if (s.stage >= 0) d[s.stage] += (s.e - s.b) / 1e6;
    for (int s = 0; s < S; ++s)
      if (c.found[s]) ++info.stage_steps[s], ++rules[s][c.how[s]];
    if (c.found[l.bwd] && c.how[l.bwd].find("## backward ##") == std::string::npos &&
        c.how[l.bwd].find("--stage-map") == std::string::npos)
      fallback_annotations(tr, spans.main_thread, in_step, segs, l.bwd, in_fallback);
    with_backward += c.found[l.bwd] ? 1 : 0;
    const auto sync_us = collective_time(tr, in_step, carried, st, segs, coll, S);
    const auto any_us = collective_time(tr, in_step, carried, st, segs, kAnyCollective, S);
    carry_collectives(tr, in_step, st, carried);
    for (int s = 0; s < S; ++s) {
      sync[s] = sync_us[s] / 1e6;
      out.has_sync[s] = out.has_sync[s] || sync_us[s] > 0;
    }
    for (int s = 0; s <= S; ++s) out.waits[s] = out.waits[s] || any_us[s] > 0;
    residual_us += attribute_residual(segs, main_top, unmapped);
    wall_us += st.end - st.ts;
    out.ids.push_back(st.id);
    out.d.push_back(std::move(d));
    out.wall.push_back((st.end - st.ts) / 1e6);
    out.sync.push_back(std::move(sync));
  }
  if (with_backward == 0)
    throw FormatError(tr.file, 0,
                      "no backward events in any of its " + std::to_string(spans.steps.size()) +
                          " ProfilerStep spans; expected '## backward ##' annotations, autograd::engine::evaluate_function events "
                          "or PyTorch 1.9's ...Backward functions (a training trace, profiled with CPU activity)");
  info.steps = static_cast<int>(spans.steps.size());
  info.first_step = *std::min_element(out.ids.begin(), out.ids.end());
  info.last_step = *std::max_element(out.ids.begin(), out.ids.end());
  info.events = tr.timed;
  info.kept = static_cast<std::int64_t>(tr.events.size());
  summarize(tr, rules, unmapped, residual_us, wall_us, info);
  info.in_fallback = largest(tr, in_fallback, info.steps);
  return out;
}

}  // namespace sf::formats::kineto
