#include "sf/recorder/recorder.h"

#include "sf/formats/formats.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <thread>

using namespace sf;
using recorder::Recorder;
using recorder::RecorderConfig;

namespace {

void busy_ms(double ms) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int>(ms * 1000))); }

/// One or more recorders on an in-process hub; rank 0 collects the gathered windows.
struct Harness {
  /// The sink runs on the calling thread (these tests read the windows between safe points);
  /// TelemetryThread.* test the recorder's own thread.
  explicit Harness(int ranks, RecorderConfig cfg, std::vector<RecorderConfig> per_rank = {}) : hub(recorder::make_loopback_hub(ranks)) {
    for (int r = 0; r < ranks; ++r) {
      transports.push_back(recorder::make_loopback_transport(hub, r, "host" + std::to_string(r / 2)));
      auto c = per_rank.empty() ? cfg : per_rank[r];
      c.assemble_off_thread = false;
      recorders.push_back(std::make_unique<Recorder>(c, *transports.back(), nullptr,
                                                     [this](formats::Window&& w, int i) {
                                                       windows.push_back(std::move(w));
                                                       indices.push_back(i);
                                                     }));
    }
  }
  std::shared_ptr<recorder::LoopbackHub> hub;
  std::vector<std::unique_ptr<recorder::Transport>> transports;
  std::vector<std::unique_ptr<Recorder>> recorders;
  std::vector<formats::Window> windows;
  std::vector<int> indices;
};

std::string reasons(const formats::Window& w) {
  std::string s;
  for (const auto& r : w.telemetry.reasons) s += r + "; ";
  return s;
}

}  // namespace

TEST(Recorder, records_ordered_stages_wall_and_residual) {
  RecorderConfig cfg;
  cfg.stages = {"a", "b"};
  cfg.window_steps = 2;
  Harness h(1, cfg);
  auto& rec = *h.recorders[0];
  for (int t = 0; t < 2; ++t) {
    Recorder::StepScope step(rec, t);
    { Recorder::StageScope a(rec, 0); busy_ms(2); }
    busy_ms(1);  // uncovered: becomes the residual stage
    { Recorder::StageScope b(rec, 1); busy_ms(3); }
  }
  rec.safe_point();
  ASSERT_EQ(h.windows.size(), 1u);
  const auto& m = h.windows[0].matrix;
  EXPECT_EQ(m.steps(), 2);
  EXPECT_EQ(m.stages(), 3);
  for (int t = 0; t < 2; ++t) {
    EXPECT_GE(m.d(t, 0, 0), 0.0019);
    EXPECT_GE(m.d(t, 0, 1), 0.0029);
    EXPECT_GE(m.d(t, 0, 2), 0.0009);  // residual from the wall time
    EXPECT_NEAR(m.d(t, 0, 0) + m.d(t, 0, 1) + m.d(t, 0, 2), m.wall(t, 0), 1e-6);
    EXPECT_LE(m.overlap(t, 0), 1e-6);
  }
  EXPECT_TRUE(h.windows[0].telemetry.gather_ok);
  EXPECT_EQ(rec.fault_bits(), 0u);
}

TEST(Recorder, prefetch_wait_is_charged_to_the_consuming_step) {
  RecorderConfig cfg;
  cfg.stages = {"data", "compute"};
  cfg.window_steps = 3;
  Harness h(1, cfg);
  auto& rec = *h.recorders[0];
  rec.begin_step(0);
  rec.begin_stage(0);  // step 0's own batch was ready: an empty wait
  rec.end_stage(0);
  rec.begin_stage(1);
  busy_ms(2);
  rec.end_stage(1);
  rec.end_step();
  // The batch for step 1 is fetched at the end of iteration 0: a long wait.
  rec.begin_stage(0);
  busy_ms(8);
  rec.end_stage(0);
  rec.begin_step(1);
  rec.begin_stage(1);
  busy_ms(2);
  rec.end_stage(1);
  rec.end_step();
  rec.begin_step(2);
  rec.end_step();
  rec.safe_point();
  ASSERT_EQ(h.windows.size(), 1u);
  const auto& m = h.windows[0].matrix;
  EXPECT_GE(m.d(1, 0, 0), 0.0079);            // step 1 is charged for its batch
  EXPECT_LT(m.d(0, 0, 0), 0.5 * m.d(1, 0, 0));  // step 0 is not (no timing bound: the VM is noisy)
  EXPECT_GE(m.wall(1, 0), m.d(1, 0, 0) + m.d(1, 0, 1) - 1e-6);  // and its wall covers the wait
  EXPECT_EQ(rec.fault_bits(), 0u);
  EXPECT_EQ(reasons(h.windows[0]), "");
}

TEST(Recorder, misuse_sets_flags_reported_at_the_window_boundary) {
  RecorderConfig cfg;
  cfg.stages = {"a", "b", "c"};
  cfg.window_steps = 1;
  Harness h(1, cfg);
  auto& rec = *h.recorders[0];
  rec.begin_step(0);
  rec.begin_stage(1);
  rec.begin_stage(2);  // nested ordered stage
  rec.end_stage(2);    // end without begin
  rec.end_stage(1);
  rec.begin_stage(0);  // out of order
  rec.end_stage(0);
  rec.begin_stage(7);  // unknown
  rec.end_step();
  rec.safe_point();
  ASSERT_EQ(h.windows.size(), 1u);
  const auto r = reasons(h.windows[0]);
  EXPECT_NE(r.find("nested ordered stage"), std::string::npos) << r;
  EXPECT_NE(r.find("end without begin"), std::string::npos) << r;
  EXPECT_NE(r.find("out of order"), std::string::npos) << r;
  EXPECT_NE(r.find("unknown stage"), std::string::npos) << r;
  const auto e = frontier::evaluate(h.windows[0].matrix, {}, h.windows[0].telemetry);
  EXPECT_TRUE(e.has(frontier::Label::telemetry_limited));
}

TEST(Recorder, overflow_policies_count_dropped_records) {
  for (auto policy : {recorder::OverflowPolicy::drop_newest, recorder::OverflowPolicy::overwrite_oldest}) {
    RecorderConfig cfg;
    cfg.stages = {"a"};
    cfg.window_steps = 4;
    cfg.capacity_steps = 4;
    cfg.overflow = policy;
    Harness h(1, cfg);
    auto& rec = *h.recorders[0];
    for (int t = 0; t < 6; ++t) {  // no safe point: the ring fills up
      rec.begin_step(t);
      rec.begin_stage(0);
      rec.end_stage(0);
      rec.end_step();
    }
    EXPECT_EQ(rec.dropped_records(), 2);
    EXPECT_EQ(rec.fault_bits(), 0u);  // a dropped step is not misuse
    rec.finish();
    std::set<std::int64_t> present;
    std::int64_t dropped = 0;
    for (const auto& w : h.windows) {
      dropped += w.telemetry.dropped_records;
      for (int t = 0; t < w.matrix.steps(); ++t)
        if (w.matrix.present(t, 0)) present.insert(w.matrix.step_id(t));
    }
    EXPECT_EQ(dropped, 2);
    if (policy == recorder::OverflowPolicy::drop_newest)
      EXPECT_EQ(present, (std::set<std::int64_t>{0, 1, 2, 3}));
    else
      EXPECT_EQ(present, (std::set<std::int64_t>{2, 3, 4, 5}));
  }
}

TEST(Recorder, gather_assembles_ranks_identity_roles_and_side_waits) {
  RecorderConfig cfg;
  cfg.stages = {"a", "sync"};
  cfg.window_steps = 2;
  cfg.sync_wait_stages = {1};
  std::vector<RecorderConfig> per(3, cfg);
  per[0].role = "dp";
  per[1].role = "dp";
  per[2].role = "dp";
  Harness h(3, cfg, per);
  // The side wait recorded at step 0 lies between what was asked (the sleep) and what the test
  // saw around begin_side..end_side: bounds from the same clock, so a loaded machine that
  // stretches the sleep cannot fail the test, while a wait charged to the wrong rank, stage or
  // step still does.
  std::array<double, 3> outer{};
  for (int t = 0; t < 2; ++t)
    for (int r = 0; r < 3; ++r) {
      auto& rec = *h.recorders[r];
      rec.begin_step(t);
      rec.begin_stage(0);
      rec.end_stage(0);
      rec.begin_stage(1);
      const auto t0 = std::chrono::steady_clock::now();
      rec.begin_side();
      busy_ms(r == 2 ? 0.1 : 2);
      rec.end_side();
      if (t == 0) outer[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rec.end_stage(1);
      rec.end_step();
    }
  for (int r = 2; r >= 0; --r) h.recorders[r]->safe_point();
  ASSERT_EQ(h.windows.size(), 1u);
  const auto& w = h.windows[0];
  EXPECT_TRUE(w.telemetry.gather_ok) << reasons(w);
  EXPECT_EQ(w.matrix.ranks(), 3);
  EXPECT_EQ(w.ranks[2].hostname, "host1");
  EXPECT_EQ(w.matrix.roles(), (std::vector<std::string>{"dp", "dp", "dp"}));
  for (int r = 0; r < 3; ++r) {
    EXPECT_GE(w.matrix.sync_wait(0, r, 1), r == 2 ? 0.0001 : 0.002) << "rank " << r;
    EXPECT_LE(w.matrix.sync_wait(0, r, 1), outer[r] + 1e-6) << "rank " << r;
  }
  EXPECT_TRUE(std::isnan(w.matrix.sync_wait(0, 0, 0)));
}

TEST(Recorder, missing_and_inconsistent_contributions_downgrade_never_throw) {
  RecorderConfig cfg;
  cfg.stages = {"a"};
  cfg.window_steps = 1;
  cfg.gather_deadline_s = 0.01;
  std::vector<RecorderConfig> per(3, cfg);
  per[2].stages = {"a", "surprise"};  // schema mismatch on rank 2
  Harness h(3, cfg, per);
  for (int r : {0, 2}) {  // rank 1 never reports
    auto& rec = *h.recorders[r];
    rec.begin_step(0);
    rec.begin_stage(0);
    rec.end_stage(0);
    rec.end_step();
  }
  h.recorders[2]->safe_point();
  h.recorders[0]->safe_point();
  EXPECT_TRUE(h.windows.empty());  // still inside the deadline
  busy_ms(20);
  h.recorders[0]->safe_point();
  ASSERT_EQ(h.windows.size(), 1u);
  const auto& w = h.windows[0];
  EXPECT_FALSE(w.telemetry.gather_ok);
  const auto r = reasons(w);
  EXPECT_NE(r.find("rank 1: no contribution within"), std::string::npos) << r;
  EXPECT_NE(r.find("rank 2: schema mismatch"), std::string::npos) << r;
  EXPECT_TRUE(w.matrix.present(0, 0));
  EXPECT_FALSE(w.matrix.present(0, 2));
  const auto e = frontier::evaluate(w.matrix, {}, w.telemetry);
  EXPECT_TRUE(e.has(frontier::Label::telemetry_limited));
  EXPECT_FALSE(e.gather_ok);
}

TEST(Recorder, the_gather_waits_four_steps_of_the_runs_pace_where_steps_outlast_its_deadline) {
  // Steps of 60 ms against a 10 ms deadline: a contribution a step late (a starved rank, a relay
  // that forwards at its next safe point) still makes its window whole, and a rank that stops
  // sending is named once kGatherPaceSteps steps have passed, not at the first safe point.
  RecorderConfig cfg;
  cfg.stages = {"a"};
  cfg.window_steps = 1;
  cfg.gather_deadline_s = 0.01;
  Harness h(2, cfg);
  auto step = [&](int r, int k, double ms) {
    auto& rec = *h.recorders[r];
    rec.begin_step(k);
    rec.begin_stage(0);
    busy_ms(ms);
    rec.end_stage(0);
    rec.end_step();
  };
  auto& root = *h.recorders[0];
  EXPECT_DOUBLE_EQ(root.gather_wait_s(), 0.01);  // no step yet: the deadline
  for (int k = 0; k < 5; ++k) {  // in step: the pace is known, every window whole at once
    step(1, k, 0);
    h.recorders[1]->safe_point();
    step(0, k, 60);
    root.safe_point();
  }
  ASSERT_EQ(h.windows.size(), 5u);
  EXPECT_GE(root.gather_wait_s(), recorder::kGatherPaceSteps * 0.055);
  // Rank 1 a step behind: window 5 is not given up at the root's next safe point.
  step(1, 5, 0);
  step(0, 5, 60);
  root.safe_point();
  step(0, 6, 60);
  root.safe_point();
  EXPECT_EQ(h.windows.size(), 5u) << "window 5 given up one step after it closed";
  step(1, 6, 0);
  h.recorders[1]->safe_point();
  step(0, 7, 60);
  root.safe_point();
  ASSERT_EQ(h.windows.size(), 7u);
  for (int i : {5, 6}) EXPECT_TRUE(h.windows[i].telemetry.gather_ok) << i << ": " << reasons(h.windows[i]);
  // Rank 1 stops: window 7 waits for it, then names it, within twice the wait.
  int steps_after = 0;
  for (int k = 8; k < 16 && h.windows.size() < 8; ++k, ++steps_after) {
    step(0, k, 60);
    root.safe_point();
    if (steps_after == 0) {
      EXPECT_EQ(h.windows.size(), 7u) << "window 7 given up one step after it closed";
    }
  }
  ASSERT_GE(h.windows.size(), 8u) << "window 7 still waiting " << steps_after << " steps after it closed";
  EXPECT_FALSE(h.windows[7].telemetry.gather_ok);
  EXPECT_NE(reasons(h.windows[7]).find("rank 1: no contribution within"), std::string::npos) << reasons(h.windows[7]);
}

namespace {

/// Event timer whose pairs complete when told to.
struct FakeEvents : recorder::EventTimer {
  std::vector<int> free{3, 2, 1, 0};
  std::map<int, bool> done;
  int acquire() override {
    if (free.empty()) return -1;
    const int p = free.back();
    free.pop_back();
    return p;
  }
  void record_begin(int) override {}
  void record_end(int p) override { done[p] = false; }
  std::optional<double> query(int p) override { return done[p] ? std::optional<double>(0.025) : std::nullopt; }
  void release(int p) override { free.push_back(p); }
};

}  // namespace

TEST(Recorder, event_channel_is_sampled_polled_and_never_in_the_prefix) {
  FakeEvents ev;
  auto hub = recorder::make_loopback_hub(1);
  auto tr = recorder::make_loopback_transport(hub, 0);
  std::vector<formats::Window> out;
  RecorderConfig cfg;
  cfg.stages = {"fwd"};
  cfg.window_steps = 8;
  cfg.event_q = 0.5;
  cfg.assemble_off_thread = false;  // reads the window between safe points
  Recorder rec(cfg, *tr, &ev, [&](formats::Window&& w, int) { out.push_back(std::move(w)); });
  for (int t = 0; t < 8; ++t) {
    rec.begin_step(t);
    rec.begin_stage(0);
    rec.begin_device_event();
    rec.end_device_event();
    rec.end_stage(0);
    rec.end_step();
    if (t < 4)
      for (auto& [p, d] : ev.done) d = true;  // the first pairs complete in time
    if (t < 7) rec.safe_point();
  }
  rec.safe_point();
  ASSERT_EQ(out.size(), 1u);
  const auto& m = out[0].matrix;
  int ready = 0, missing = 0, unsampled = 0;
  for (int t = 0; t < 8; ++t) switch (m.fwd_event_state(t, 0)) {
      case frontier::EventState::ready: ++ready; EXPECT_NEAR(m.fwd_event_s(t, 0), 0.025, 1e-6); break;
      case frontier::EventState::missing: ++missing; break;
      case frontier::EventState::unsampled: ++unsampled; break;
    }
  EXPECT_EQ(unsampled, 4);  // q = 0.5: every other step, deterministically
  EXPECT_EQ(ready, 2);
  EXPECT_EQ(missing, 2);    // not ready by the window boundary
  EXPECT_EQ(m.stages(), 2); // the event never becomes an ordered stage
  for (auto& [p, d] : ev.done) d = true;
  rec.safe_point();          // orphaned pairs are released once they complete
  EXPECT_EQ(ev.free.size(), 4u);
}

TEST(Recorder, disabled_recorder_records_nothing) {
  RecorderConfig cfg;
  cfg.enabled = false;
  cfg.window_steps = 1;
  Harness h(1, cfg);
  auto& rec = *h.recorders[0];
  rec.begin_step(0);
  rec.begin_stage(0);
  rec.end_stage(0);
  rec.end_step();
  rec.safe_point();
  rec.finish();
  EXPECT_TRUE(h.windows.empty());
  EXPECT_EQ(rec.windows_closed(), 0);
}

TEST(Recorder, payload_is_four_bytes_per_rank_step_stage_plus_framing) {
  RecorderConfig cfg;  // default six-stage schema: 5 explicit stages
  const auto per_record = recorder::payload_bytes(cfg, 1) - recorder::payload_bytes(cfg, 0);
  // step offset + wall + 5 durations + event state/value: the durations are float32.
  EXPECT_EQ(per_record, 4u + 4u + 5u * 4u + 1u + 4u);
  EXPECT_EQ(recorder::payload_bytes(cfg, 100) - recorder::payload_bytes(cfg, 0), 100u * per_record);
}

// ---- stateful property: the recorder against a model of its contract ----------------------

namespace {

constexpr int kS = 3;         // explicit stages
constexpr int kWindow = 3;
constexpr int kCapacity = 8;

/// What the recorder's contract says must happen: which steps are recorded, which misuse is
/// flagged, what is dropped, and what each safe point must have delivered to the root.
struct Model {
  bool any_step = false, step_open = false, recording = false, clean = true;
  std::int64_t last_step = -1;
  int open_stage = -1, last_stage = -1;
  enum { none, open, armed } carry = none;
  std::vector<std::pair<std::int64_t, bool>> unpacked;  // recorded steps (id, clean) not yet packed
  std::uint32_t faults = 0, packed_faults = 0;
  std::int64_t dropped = 0, packed_dropped = 0;
  std::int64_t open_window = 0;
  std::set<std::int64_t> packed, packed_clean;

  void flag(std::uint32_t bit) {
    faults |= bit;
    if (step_open && recording) clean = false;
  }
  void mark_current_clean_state() {
    for (auto& [id, c] : unpacked)
      if (id == last_step && step_open && recording) c = clean;
  }
};

struct Sut {
  Sut() : hub(recorder::make_loopback_hub(1)), tr(recorder::make_loopback_transport(hub, 0)) {
    RecorderConfig cfg;
    cfg.stages = {"s0", "s1", "s2"};
    cfg.window_steps = kWindow;
    cfg.assemble_off_thread = false;  // the model checks the windows after each safe point
    cfg.capacity_steps = kCapacity;
    rec = std::make_unique<Recorder>(cfg, *tr, nullptr, [this](formats::Window&& w, int) { windows.push_back(std::move(w)); });
  }
  std::shared_ptr<recorder::LoopbackHub> hub;
  std::unique_ptr<recorder::Transport> tr;
  std::unique_ptr<Recorder> rec;
  std::vector<formats::Window> windows;
};

using Cmd = rc::state::Command<Model, Sut>;

struct BeginStep : Cmd {
  std::int64_t gap = *rc::gen::inRange(1, 3);
  void apply(Model& m) const override {
    if (m.step_open && m.recording) {
      m.flag(recorder::kStepNotClosed);  // the open step is closed now, and counts
      m.mark_current_clean_state();
    }
    m.any_step = true;
    m.last_step += gap;
    m.step_open = true;
    m.open_stage = -1;
    m.last_stage = -1;
    if (static_cast<int>(m.unpacked.size()) == kCapacity) {  // drop_newest
      ++m.dropped;
      m.recording = false;
      return;
    }
    m.recording = true;
    m.clean = true;
    m.unpacked.push_back({m.last_step, true});
    if (m.carry == Model::armed) {  // the prefetch wait belongs to this step
      m.carry = Model::none;
      m.last_stage = 0;
    }
  }
  void run(const Model& m, Sut& s) const override { s.rec->begin_step(m.last_step + gap); }
  void show(std::ostream& os) const override { os << "BeginStep(+" << gap << ")"; }
};

struct EndStep : Cmd {
  void apply(Model& m) const override {
    if (!m.step_open) {
      m.flag(recorder::kEndWithoutBegin);
      return;
    }
    if (m.recording) {
      if (m.open_stage >= 0) m.flag(recorder::kStageNotClosed);
      m.mark_current_clean_state();
    }
    m.step_open = false;
    m.recording = false;
    m.open_stage = -1;
  }
  void run(const Model&, Sut& s) const override { s.rec->end_step(); }
  void show(std::ostream& os) const override { os << "EndStep"; }
};

struct BeginStage : Cmd {
  int stage = *rc::gen::inRange(0, kS);
  void apply(Model& m) const override {
    if (m.step_open && !m.recording) return;  // a dropped step's calls are ignored
    if (m.open_stage >= 0) {
      m.flag(recorder::kNestedStage);
    } else if (!m.step_open) {
      if (stage != 0 || !m.any_step) {
        m.flag(recorder::kStageOutsideStep);
      } else {
        m.carry = Model::open;
        m.open_stage = stage;
      }
    } else {
      if (stage <= m.last_stage) m.flag(recorder::kOutOfOrder);
      m.open_stage = stage;
    }
  }
  void run(const Model&, Sut& s) const override { s.rec->begin_stage(stage); }
  void show(std::ostream& os) const override { os << "BeginStage(" << stage << ")"; }
};

struct EndStage : Cmd {
  int stage = *rc::gen::inRange(0, kS);
  void apply(Model& m) const override {
    if (m.step_open && !m.recording) return;
    if (m.open_stage != stage) {
      m.flag(recorder::kEndWithoutBegin);
      return;
    }
    m.open_stage = -1;
    if (!m.step_open) m.carry = Model::armed;
    else m.last_stage = stage;
  }
  void run(const Model&, Sut& s) const override { s.rec->end_stage(stage); }
  void show(std::ostream& os) const override { os << "EndStage(" << stage << ")"; }
};

struct Side : Cmd {
  void apply(Model& m) const override {
    if (m.step_open && !m.recording) return;
    if (!m.step_open || m.open_stage < 0) m.flag(recorder::kSideOutsideStage);
  }
  void run(const Model&, Sut& s) const override {
    s.rec->begin_side();
    s.rec->end_side();
  }
  void show(std::ostream& os) const override { os << "Side"; }
};

struct SafePoint : Cmd {
  void apply(Model& m) const override {
    for (;;) {  // a window closes once its last step has ended or a later step began
      const std::int64_t end = (m.open_window + 1) * kWindow;
      const bool none_open = !(m.step_open && m.recording);
      if (!(m.last_step >= end || (m.last_step == end - 1 && none_open))) break;
      const std::int64_t open_id = m.step_open && m.recording ? m.last_step : -1;
      while (!m.unpacked.empty() && m.unpacked.front().first < end && m.unpacked.front().first != open_id) {
        m.packed.insert(m.unpacked.front().first);
        if (m.unpacked.front().second) m.packed_clean.insert(m.unpacked.front().first);
        m.unpacked.erase(m.unpacked.begin());
      }
      m.packed_faults |= m.faults;
      m.faults = 0;
      m.packed_dropped += m.dropped;
      m.dropped = 0;
      ++m.open_window;
    }
  }
  void run(const Model& m0, Sut& s) const override {
    s.rec->safe_point();
    const Model m = nextState(m0);
    std::set<std::int64_t> seen;
    std::set<std::string> reported;
    std::int64_t dropped = 0;
    for (const auto& w : s.windows) {
      dropped += w.telemetry.dropped_records;
      for (const auto& r : w.telemetry.reasons) reported.insert(r.substr(r.find("recorder ") + 9));
      for (int t = 0; t < w.matrix.steps(); ++t) {
        if (!w.matrix.present(t, 0)) continue;
        const auto id = w.matrix.step_id(t);
        RC_ASSERT(seen.insert(id).second);  // each step delivered once
        if (m.packed_clean.count(id)) RC_ASSERT(w.matrix.overlap(t, 0) <= 1e-6 * w.matrix.wall(t, 0) + 1e-9);
      }
    }
    RC_ASSERT(seen == m.packed);
    const auto expected = recorder::describe_faults(m.packed_faults);
    RC_ASSERT(reported == std::set<std::string>(expected.begin(), expected.end()));
    RC_ASSERT(dropped == m.packed_dropped);
  }
  void show(std::ostream& os) const override { os << "SafePoint"; }
};

}  // namespace

RC_GTEST_PROP(RecorderState, matches_its_contract_under_any_call_sequence, ()) {
  Model model;
  Sut sut;
  rc::state::check(model, sut,
                   rc::state::gen::execOneOfWithArgs<BeginStep, EndStep, BeginStage, EndStage, BeginStage, EndStage,
                                                     Side, SafePoint, SafePoint>());
}

namespace {
/// One rank on a loopback hub, `steps` steps of two stages, a safe point after each.
void drive(Recorder& rec, int steps) {
  for (int t = 0; t < steps; ++t) {
    {
      Recorder::StepScope step(rec, t);
      Recorder::StageScope a(rec, 0);
    }
    rec.safe_point();
  }
}
}  // namespace

TEST(TelemetryThread, the_sink_runs_off_the_training_thread_in_window_order) {
  RecorderConfig cfg;
  cfg.stages = {"a", "b"};
  cfg.window_steps = 2;
  auto hub = recorder::make_loopback_hub(1);
  auto tr = recorder::make_loopback_transport(hub, 0);
  std::vector<std::thread::id> threads;
  std::vector<int> order;
  Recorder rec(cfg, *tr, nullptr, [&](formats::Window&& w, int i) {
    threads.push_back(std::this_thread::get_id());
    order.push_back(i);
    EXPECT_EQ(w.matrix.steps(), 2);
  });
  drive(rec, 10);
  rec.finish();  // joins the thread: every window handed over is in
  ASSERT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (const auto& id : threads) EXPECT_NE(id, std::this_thread::get_id());
  EXPECT_GE(rec.telemetry_cpu_s(), 0.0);
}

TEST(TelemetryThread, off_means_the_sink_runs_in_the_safe_point) {
  RecorderConfig cfg;
  cfg.stages = {"a", "b"};
  cfg.window_steps = 2;
  cfg.assemble_off_thread = false;
  auto hub = recorder::make_loopback_hub(1);
  auto tr = recorder::make_loopback_transport(hub, 0);
  const auto self = std::this_thread::get_id();
  std::vector<int> order;
  bool on_caller = true;
  Recorder rec(cfg, *tr, nullptr, [&](formats::Window&&, int i) {
    on_caller = on_caller && std::this_thread::get_id() == self;
    order.push_back(i);
  });
  drive(rec, 4);
  EXPECT_EQ(order, (std::vector<int>{0, 1}));  // delivered by the safe points already
  rec.finish();
  EXPECT_TRUE(on_caller);
  EXPECT_EQ(rec.telemetry_cpu_s(), 0.0);
}

TEST(TelemetryThread, a_sink_error_is_rethrown_on_the_training_thread_once) {
  RecorderConfig cfg;
  cfg.stages = {"a", "b"};
  cfg.window_steps = 1;
  auto hub = recorder::make_loopback_hub(1);
  auto tr = recorder::make_loopback_transport(hub, 0);
  std::vector<int> seen;
  Recorder rec(cfg, *tr, nullptr, [&](formats::Window&&, int i) {
    seen.push_back(i);
    if (i == 1) throw std::runtime_error("disk gone");
  });
  int errors = 0;
  for (int t = 0; t < 6; ++t) {
    {
      Recorder::StepScope step(rec, t);
      Recorder::StageScope a(rec, 0);
    }
    try {
      rec.safe_point();
    } catch (const std::runtime_error& e) {
      ++errors;
      EXPECT_STREQ(e.what(), "disk gone");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  try {
    rec.finish();
  } catch (const std::runtime_error& e) {
    ++errors;
    EXPECT_STREQ(e.what(), "disk gone");
  }
  EXPECT_EQ(errors, 1);  // once, on the training thread (a later safe point or finish)
  // After the failure the sink is not called again: the later windows are dropped.
  EXPECT_EQ(seen, (std::vector<int>{0, 1}));
}
