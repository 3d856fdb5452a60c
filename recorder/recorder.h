// sf::recorder — the always-on stage recorder, usable in any C++ training loop.
//
// Hot path (begin/end of a step, a stage, a side span): one steady_clock read and one store into
// a preallocated ring buffer; no lock, allocation, syscall besides the clock, exception or device
// synchronize. Misuse sets an error bit, reported at the window boundary. Everything else —
// packing, the gather to rank 0 over a Transport, event polling — happens at safe points.
//
// This header is light on purpose (a training loop includes it): no MPI, JSON or Eigen. The MPI
// transport is declared in <sf/recorder/mpi_transport.h>; the gathered window a root-side sink
// receives is sf::formats::Window (<sf/formats/formats.h>).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sf::formats {
struct GatherStats;
struct RankInfo;
struct Window;
}  // namespace sf::formats

namespace sf::recorder {

/// The paper's five explicit stages in order (frontier::default_explicit_stages()).
std::vector<std::string> default_stages();

/// Nanoseconds on the monotonic clock: the only clock the recorder reads.
inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// What happens when the ring buffer is full because windows were not closed in time.
enum class OverflowPolicy : std::uint8_t {
  drop_newest,       ///< new steps are not recorded (counted in dropped_records)
  overwrite_oldest,  ///< the oldest unpacked step is overwritten (counted in dropped_records)
};

/// Error bits set on the hot path and reported (as downgrade reasons) at the window boundary.
enum RecorderFault : std::uint32_t {
  kNestedStage = 1u << 0,        ///< an ordered stage began while another was open
  kStageOutsideStep = 1u << 1,   ///< a stage began with no open step (and was not a prefetch wait)
  kStageNotClosed = 1u << 2,     ///< a step ended with an ordered stage still open
  kStepNotClosed = 1u << 3,      ///< a step began while the previous one was open
  kEndWithoutBegin = 1u << 4,    ///< end_stage/end_step/end_side without its begin
  kOutOfOrder = 1u << 5,         ///< an ordered stage began after a later one, or twice in a step
  kUnknownStage = 1u << 6,       ///< stage index outside the schema
  kSideOutsideStage = 1u << 7,   ///< a side span outside an open ordered stage
  kEventPoolExhausted = 1u << 8, ///< a sampled event pair found no free event slot
  kStepOutOfOrder = 1u << 9,     ///< begin_step with a step id not larger than the last one
};
/// One phrase per set bit.
std::vector<std::string> describe_faults(std::uint32_t bits);

/// Device timing side channel (CUDA events, or the host-stream model's timestamps).
/// Implementations never synchronize: query() only asks whether the pair has completed.
class EventTimer {
public:
  virtual ~EventTimer() = default;
  virtual int acquire() = 0;                        ///< a free pair slot, or −1
  virtual void record_begin(int slot) = 0;          ///< enqueue the start event
  virtual void record_end(int slot) = 0;            ///< enqueue the end event
  virtual std::optional<double> query(int slot) = 0;///< elapsed seconds once both completed
  virtual void release(int slot) = 0;
};

/// A contribution as it arrived at the root.
struct Contribution {
  int rank = -1;
  std::vector<std::byte> bytes;
  /// Set when a node relay checked the contribution and refused to forward it (bytes then
  /// empty): why, and which relay.
  std::string refused;
};

/// The check a node relay applies before it forwards a contribution: "" when it may travel on,
/// else why not (one phrase). The recorder installs its own: magic, version, checksum, rank
/// identity and the payload's own consistency. Not the stage schema: a relay whose schema
/// differs from the root's must not veto its node, so the root judges that.
using ContributionCheck = std::function<std::string(const Contribution&)>;

/// How windows travel to rank 0.
enum class GatherMode : std::uint8_t {
  flat,  ///< every rank sends to rank 0: rank 0 receives R − 1 messages per window
  node,  ///< one relay per node (shared-memory domain) collects its node's contributions, checks
         ///< them and forwards one message: rank 0 receives one message per node
};
/// "flat" / "node"; parse_gather_mode gives nullopt for anything else.
const char* gather_mode_name(GatherMode m);
std::optional<GatherMode> parse_gather_mode(std::string_view s);

/// Moves window payloads from every rank to rank 0. Nothing here may block training: sends are
/// fire-and-forget, the root polls, and a late contribution is drained and discarded.
class Transport {
public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual formats::RankInfo identity() const = 0;
  /// Starts sending this rank's payload for `window` to the root (the root keeps its own).
  virtual void send(int window, std::vector<std::byte> payload) = 0;
  /// Root: contributions of `window` that completed since the last call. Non-blocking.
  virtual std::vector<Contribution> receive(int window, std::size_t max_bytes) = 0;
  /// Root: stop waiting for `window`; whatever still arrives is drained and discarded.
  virtual void abandon(int window) = 0;
  /// Completes finished sends and drains abandoned receives. Non-blocking.
  virtual void progress() = 0;
  /// End of run: waits up to deadline_s for outstanding sends and receives, then gives up.
  virtual void drain(double deadline_s) = 0;
  /// Root: contributions that arrived after their window was abandoned.
  virtual std::int64_t late_discarded() const = 0;
  /// Node relays: the check applied before forwarding (transports without relays ignore it).
  virtual void set_check(ContributionCheck) {}
  /// Root: how `window`'s contributions reached it (mode, nodes, messages and bytes received),
  /// written into `out`, and forgotten; transports that do not count leave `out` as it is.
  virtual void take_gather_stats(int /*window*/, formats::GatherStats& /*out*/) {}
  /// Root: one line per node whose relay delivered none of `missing` (ranks with no
  /// contribution for `window`), naming the relay; empty where there are no relays.
  virtual std::vector<std::string> explain_missing(const std::vector<int>& /*missing*/) const { return {}; }
};

/// In-process transport: ranks are objects sharing a hub (unit tests, single-process use).
class LoopbackHub;
std::shared_ptr<LoopbackHub> make_loopback_hub(int size);
std::unique_ptr<Transport> make_loopback_transport(std::shared_ptr<LoopbackHub> hub, int rank,
                                                   std::string hostname = "localhost");

/// Rank 0 waits at least this many steps of the run's pace for a window's contributions: a
/// rank's contribution leaves at its safe point after the window's last step, a node relay
/// forwards it at its own next safe point, and rank 0 receives it at its next (two steps), with
/// two more for a rank that is a step behind.
inline constexpr int kGatherPaceSteps = 4;

struct RecorderConfig {
  std::vector<std::string> stages = default_stages();  ///< explicit, ordered
  int accumulation = 1;
  std::int64_t first_step = 0;  ///< step id where window 0 starts
  int window_steps = 100;
  int capacity_steps = 0;       ///< ring capacity; 0 → 2 × window_steps
  OverflowPolicy overflow = OverflowPolicy::drop_newest;
  /// Stages whose side spans (time blocked inside collectives) travel in the payload.
  std::vector<int> sync_wait_stages;
  double event_q = 0;           ///< sampled fraction of steps with a forward event pair
  /// How long rank 0 waits for a window's contributions after it closed the window — and never
  /// less than kGatherPaceSteps of the run's own steps (the median wall of the last steps this
  /// rank recorded): where steps outlast the deadline (a long step, a rank starved of CPU, a node
  /// relay that forwards only at its safe points), a fixed deadline would drop every window. The
  /// end of the run (finish) waits the same. Recorder::gather_wait_s() is the wait now.
  double gather_deadline_s = 1.0;
  std::string role;             ///< this rank's parallelism role ("" = homogeneous)
  bool enabled = true;          ///< false: every hot-path call returns at once (recorder "off")
  /// Root: assemble each gathered window and run the sink on a telemetry thread of the
  /// recorder's own, so the training thread's boundary work is the receive and the hand-over.
  /// false: both run in safe_point()/finish(), on the calling thread.
  bool assemble_off_thread = true;
};

/// Payload size in bytes of one rank's window contribution (header + records).
std::size_t payload_bytes(const RecorderConfig& cfg, int records);

/// Rank 0's assembly of window `window` of a world of `world` ranks from what reached it
/// (got[r]: rank r's contribution, or none), exactly as the recorder assembles it before its
/// sink: every gap or inconsistency becomes a named reason, `notes` are added to them. For
/// tools that gather contributions by another route and must agree with the recorder.
formats::Window assemble_window(const RecorderConfig& cfg, int world, int window,
                                std::vector<std::optional<Contribution>> got, std::vector<std::string> notes = {});

/// Root-side sink: receives each gathered window, in window order, as soon as it is complete or
/// its deadline passed. Runs on the recorder's telemetry thread (RecorderConfig::
/// assemble_off_thread), else on the thread that called safe_point()/finish(); never on both.
/// An exception it throws is rethrown by the next safe_point()/finish() on the training thread.
using WindowSink = std::function<void(formats::Window&& window, int index)>;

class Recorder {
public:
  /// events may be null (no device side channel). sink is used on the root only.
  Recorder(RecorderConfig cfg, Transport& transport, EventTimer* events = nullptr, WindowSink sink = {});
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // ---- hot path ------------------------------------------------------------------------------
  void begin_step(std::int64_t step) noexcept;
  void end_step() noexcept;
  /// Ordered stage s. A data stage opened between steps is a prefetch wait: it is charged to the
  /// step that consumes the batch (the next begin_step), whose wall time then starts with it.
  void begin_stage(int s) noexcept;
  void end_stage(int s) noexcept;
  /// Side span nested in the open ordered stage (time blocked in a collective); never in the
  /// prefix vector.
  void begin_side() noexcept;
  void end_side() noexcept;
  /// Adds `ns` of time blocked inside the open stage's collectives that was measured elsewhere
  /// (a comm thread, device events): collectives that run beside the host thread. One store.
  void add_side(std::int64_t ns) noexcept;
  /// Sampled forward event pair (q = event_q), bracketing device work of the open stage.
  void begin_device_event() noexcept;
  void end_device_event() noexcept;

  // ---- safe points ---------------------------------------------------------------------------
  /// Polls device events, closes a due window (pack + send), progresses the gather, and on the
  /// root hands complete or timed-out windows to the sink. Call once per iteration.
  void safe_point();
  /// Closes the last partial window and waits (at most the gather deadline) for the gather.
  void finish();

  // ---- introspection -------------------------------------------------------------------------
  int rank() const { return transport_.rank(); }
  bool enabled() const { return cfg_.enabled; }
  std::int64_t dropped_records() const { return dropped_total_; }
  std::uint32_t fault_bits() const { return faults_; }
  std::int64_t windows_closed() const { return windows_closed_; }
  std::int64_t payload_bytes_sent() const { return bytes_sent_; }
  /// CPU seconds the training thread spent in safe points (packing, the gather's sends and
  /// receives, the hand-over; and the assembly and sink when they run on this thread).
  double safe_point_cpu_s() const { return safe_point_cpu_s_; }
  /// CPU seconds the root's telemetry thread spent assembling windows and in the sink (0 when
  /// there is none). Read after finish().
  double telemetry_cpu_s() const;
  /// How long a window's gather waits now: max(gather_deadline_s, kGatherPaceSteps × the median
  /// wall of the last steps this rank recorded) (RecorderConfig::gather_deadline_s).
  double gather_wait_s() const;
  int stage_index(std::string_view name) const;

  /// RAII helpers (each is a pair of hot-path calls).
  class StepScope {
  public:
    StepScope(Recorder& r, std::int64_t step) noexcept : r_(r) { r_.begin_step(step); }
    ~StepScope() { r_.end_step(); }
    StepScope(const StepScope&) = delete;
    StepScope& operator=(const StepScope&) = delete;
  private:
    Recorder& r_;
  };
  class StageScope {
  public:
    StageScope(Recorder& r, int s) noexcept : r_(r), s_(s) { r_.begin_stage(s); }
    ~StageScope() { r_.end_stage(s_); }
    StageScope(const StageScope&) = delete;
    StageScope& operator=(const StageScope&) = delete;
  private:
    Recorder& r_;
    int s_;
  };
  class SideScope {
  public:
    explicit SideScope(Recorder& r) noexcept : r_(r) { r_.begin_side(); }
    ~SideScope() { r_.end_side(); }
    SideScope(const SideScope&) = delete;
    SideScope& operator=(const SideScope&) = delete;
  private:
    Recorder& r_;
  };

private:
  // Slot layout (int64 each): [0] step id, [1] step begin, [2] step end,
  // [3 + 2s] stage s begin, [4 + 2s] stage s end, [3 + 2S + s] side ns of stage s,
  // [3 + 3S] event slot (−1 none, −2 sampled but no free pair), [4 + 3S] event ns (−1 pending).
  std::int64_t* slot(std::int64_t i) noexcept { return ring_.data() + (i & mask_) * width_; }
  void on_full() noexcept;
  void poll_events();
  void close_window(std::int64_t window);
  std::int64_t gather_wait_ns() const;
  struct Ready;  // a gathered window handed to the assembly
  void pump_root(bool final_pass);
  void assemble(Ready&& r);
  void telemetry_thread();
  void stop_telemetry_thread(bool drop_queued) noexcept;
  void rethrow_sink_error();
  std::vector<std::byte> pack(std::int64_t window);

  struct Impl;  // off the hot path: the stage schema, the sink, the root's pending windows
  RecorderConfig cfg_;
  std::unique_ptr<Impl> impl_;
  Transport& transport_;
  EventTimer* events_;
  int S_;
  std::size_t width_;
  std::int64_t mask_;
  std::vector<std::int64_t> ring_;
  std::int64_t head_ = 0, tail_ = 0;  // slots [tail_, head_) hold unpacked steps
  std::int64_t* cur_ = nullptr;       // open step's slot, or null
  bool skip_ = false;  // recorder off, or a step dropped on overflow: stage calls are ignored
  int open_stage_ = -1;
  int last_stage_ = -1;
  std::int64_t side_begin_ = 0;
  std::int64_t last_step_ = INT64_MIN;
  std::int64_t carry_begin_ = 0, carry_end_ = 0;  // prefetch wait awaiting its step
  int carry_stage_ = -1;
  std::uint32_t faults_ = 0;
  std::uint32_t window_faults_ = 0;
  std::int64_t dropped_ = 0, dropped_total_ = 0;
  std::int64_t cpu_wait_mark_ns_ = -1;  // the process's run delay when the last window closed (−1: unknown)
  std::int64_t open_window_ = 0;
  std::int64_t windows_closed_ = 0;
  std::int64_t bytes_sent_ = 0;
  double safe_point_cpu_s_ = 0;
  std::int64_t sample_counter_ = 0;
  std::vector<std::int64_t> orphan_pairs_;  // event pairs reported missing, released once done
};

// ---- hot path, inline -------------------------------------------------------------------------

inline void Recorder::begin_step(std::int64_t step) noexcept {
  if (!cfg_.enabled) [[unlikely]]
    return;
  const std::int64_t now = now_ns();
  if (cur_ != nullptr) [[unlikely]] {
    faults_ |= kStepNotClosed;
    cur_[2] = now;
  }
  if (step <= last_step_) [[unlikely]]
    faults_ |= kStepOutOfOrder;
  last_step_ = step;
  open_stage_ = -1;
  last_stage_ = -1;
  skip_ = false;
  if (head_ - tail_ > mask_) [[unlikely]] {
    on_full();
    if (cfg_.overflow == OverflowPolicy::drop_newest) {
      cur_ = nullptr;
      skip_ = true;  // this step's stage calls are ignored, not flagged
      return;
    }
  }
  cur_ = slot(head_++);
  cur_[0] = step;
  cur_[1] = now;
  if (carry_stage_ >= 0) [[unlikely]] {
    // Prefetch-aware: the wait for this step's batch happened before the step began.
    cur_[1] = carry_begin_;
    cur_[3 + 2 * carry_stage_] = carry_begin_;
    cur_[4 + 2 * carry_stage_] = carry_end_;
    last_stage_ = carry_stage_;
    carry_stage_ = -1;
  }
}

inline void Recorder::end_step() noexcept {
  if (!cfg_.enabled) [[unlikely]]
    return;
  const std::int64_t now = now_ns();
  if (skip_) [[unlikely]] {
    skip_ = false;
    return;
  }
  if (cur_ == nullptr) [[unlikely]] {
    faults_ |= kEndWithoutBegin;
    return;
  }
  if (open_stage_ >= 0) [[unlikely]] {
    faults_ |= kStageNotClosed;
    cur_[4 + 2 * open_stage_] = now;
    open_stage_ = -1;
  }
  cur_[2] = now;
  cur_ = nullptr;
}

inline void Recorder::begin_stage(int s) noexcept {
  if (skip_) [[unlikely]]
    return;
  const std::int64_t now = now_ns();
  if (s < 0 || s >= S_) [[unlikely]] {
    faults_ |= kUnknownStage;
    return;
  }
  if (open_stage_ >= 0) [[unlikely]] {
    faults_ |= kNestedStage;
    return;
  }
  if (cur_ == nullptr) [[unlikely]] {
    if (s != 0 || last_step_ == INT64_MIN) {
      faults_ |= kStageOutsideStep;
      return;
    }
    carry_begin_ = now;  // a prefetch wait for the next step's batch
    carry_stage_ = -2 - s;
    open_stage_ = s;
    return;
  }
  if (s <= last_stage_) [[unlikely]]
    faults_ |= kOutOfOrder;
  cur_[3 + 2 * s] = now;
  open_stage_ = s;
}

inline void Recorder::end_stage(int s) noexcept {
  if (skip_) [[unlikely]]
    return;
  const std::int64_t now = now_ns();
  if (open_stage_ != s || s < 0) [[unlikely]] {
    faults_ |= kEndWithoutBegin;
    return;
  }
  open_stage_ = -1;
  if (cur_ == nullptr) [[unlikely]] {
    carry_end_ = now;
    carry_stage_ = -2 - carry_stage_;  // armed: the next begin_step takes it
    return;
  }
  cur_[4 + 2 * s] = now;
  last_stage_ = s;
}

inline void Recorder::begin_side() noexcept {
  if (skip_) [[unlikely]]
    return;
  const std::int64_t now = now_ns();
  if (cur_ == nullptr || open_stage_ < 0) [[unlikely]] {
    faults_ |= kSideOutsideStage;
    side_begin_ = 0;
    return;
  }
  side_begin_ = now;
}

inline void Recorder::end_side() noexcept {
  if (skip_) [[unlikely]]
    return;
  const std::int64_t now = now_ns();
  if (side_begin_ == 0 || cur_ == nullptr || open_stage_ < 0) [[unlikely]]
    return;  // already flagged by begin_side
  cur_[3 + 2 * S_ + open_stage_] += now - side_begin_;
  side_begin_ = 0;
}

inline void Recorder::add_side(std::int64_t ns) noexcept {
  if (skip_) [[unlikely]]
    return;
  if (cur_ == nullptr || open_stage_ < 0) [[unlikely]] {
    faults_ |= kSideOutsideStage;
    return;
  }
  cur_[3 + 2 * S_ + open_stage_] += ns;
}

}  // namespace sf::recorder
