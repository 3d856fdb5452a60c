#include "sf/recorder/recorder.h"

#include "sf/formats/formats.h"
#include "sf/frontier/frontier.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdexcept>
#include <thread>
#include <utility>

namespace sf::recorder {

namespace {

constexpr std::uint32_t kMagic = 0x31524653;  // "SFR1"
constexpr std::uint32_t kVersion = 2;  // 2: cpu_wait_ns (issue 38)

/// Fixed-size header of one rank's window contribution (same architecture on every rank).
struct Header {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t schema_hash;
  std::uint64_t checksum;  // FNV-1a over the whole payload with this field zeroed
  std::int32_t rank;
  std::int32_t window;
  std::int64_t first_step;
  std::int32_t steps;      // window span this rank covers
  std::int32_t stages;     // explicit stages
  std::int32_t records;
  std::int32_t n_sync;
  std::uint32_t fault_bits;
  std::int32_t accumulation;
  std::int64_t dropped;
  std::int32_t local_rank;
  std::int32_t node_rank;
  std::int64_t cpu_wait_ns;  // this rank's threads runnable but not running over the window; −1: unknown
  char hostname[64];
  char role[32];
};

enum : std::uint8_t { kEvUnsampled = 0, kEvReady = 1, kEvMissing = 2 };

std::size_t record_bytes(int stages, int n_sync) {
  return sizeof(std::int32_t) + sizeof(float) * (1 + stages) + 1 + sizeof(float) + sizeof(float) * n_sync;
}

std::uint64_t fnv1a(const std::byte* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<std::uint8_t>(p[i])) * 1099511628211ULL;
  return h;
}

/// Nanoseconds every thread of this process has spent runnable but not running (the kernel's
/// scheduler run delay, second field of /proc/self/task/*/schedstat: a core shared with busy
/// processes, a cgroup's CPU throttle), or −1 where the kernel does not say. Read at the window
/// boundary only: a directory scan and a small read per thread, never on a stage boundary.
std::int64_t process_cpu_wait_ns() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  std::int64_t total = 0;
  bool any = false;
  char path[64];
  char buf[128];
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // a thread that just ended
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    unsigned long long on_cpu = 0, waited = 0;
    if (std::sscanf(buf, "%llu %llu", &on_cpu, &waited) == 2) {
      total += static_cast<std::int64_t>(waited);
      any = true;
    }
  }
  closedir(dir);
  return any ? total : -1;
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <typename T>
T get(const std::byte*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

void copy_text(char* dst, std::size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(n - 1, s.size()));
}

}  // namespace

std::vector<std::string> describe_faults(std::uint32_t bits) {
  static const std::pair<std::uint32_t, const char*> names[] = {
      {kNestedStage, "nested ordered stage"},
      {kStageOutsideStep, "stage outside a step"},
      {kStageNotClosed, "step ended with a stage open"},
      {kStepNotClosed, "step began while the previous one was open"},
      {kEndWithoutBegin, "end without begin"},
      {kOutOfOrder, "ordered stage out of order or repeated"},
      {kUnknownStage, "unknown stage index"},
      {kSideOutsideStage, "side span outside an ordered stage"},
      {kEventPoolExhausted, "event pool exhausted"},
      {kStepOutOfOrder, "step ids not increasing"},
  };
  std::vector<std::string> out;
  for (const auto& [bit, name] : names)
    if (bits & bit) out.emplace_back(name);
  return out;
}

const char* gather_mode_name(GatherMode m) { return m == GatherMode::flat ? "flat" : "node"; }

std::optional<GatherMode> parse_gather_mode(std::string_view s) {
  if (s == "flat") return GatherMode::flat;
  if (s == "node") return GatherMode::node;
  return std::nullopt;
}

std::size_t payload_bytes(const RecorderConfig& cfg, int records) {
  return sizeof(Header) + static_cast<std::size_t>(records) *
                              record_bytes(static_cast<int>(cfg.stages.size()), static_cast<int>(cfg.sync_wait_stages.size()));
}

// ---- root state -----------------------------------------------------------------------------------

std::vector<std::string> default_stages() { return frontier::default_explicit_stages(); }

/// A window whose gather is over (complete, timed out or final), as handed to the assembler.
struct Recorder::Ready {
  int window = 0;
  std::vector<std::optional<Contribution>> got;
  formats::GatherStats gather;
  std::vector<std::string> notes;  // the transport's lines on what is missing
  double waited_s = 0;             // how long the gather waited (Recorder::gather_wait_s)
};

namespace {
/// The run's pace: the walls of the last steps this rank recorded (a ring), for the gather's
/// wait (RecorderConfig::gather_deadline_s).
class Pace {
public:
  void add(std::int64_t wall_ns) {
    walls_[next_] = wall_ns;
    next_ = (next_ + 1) % walls_.size();
    n_ = std::min(n_ + 1, walls_.size());
  }
  /// The median wall (the upper one of an even count); 0 before the first step.
  std::int64_t median_ns() const {
    if (n_ == 0) return 0;
    std::array<std::int64_t, kSteps> w{};
    std::copy_n(walls_.begin(), n_, w.begin());
    std::nth_element(w.begin(), w.begin() + n_ / 2, w.begin() + n_);
    return w[n_ / 2];
  }

private:
  static constexpr std::size_t kSteps = 32;
  std::array<std::int64_t, kSteps> walls_{};
  std::size_t next_ = 0, n_ = 0;
};
}  // namespace

struct Recorder::Impl {
  Impl(const RecorderConfig& cfg, WindowSink s, bool is_root)
      : schema(cfg.stages, true, cfg.accumulation), sink(std::move(s)), root(is_root) {}
  frontier::StageSchema schema;
  WindowSink sink;
  bool root;
  Pace pace;  // this rank's step walls, as packed
  struct Pending {
    int window;
    std::int64_t opened_ns;
    std::int64_t wait_ns;  // the gather's wait when the window closed (Recorder::gather_wait_s)
    std::vector<std::optional<Contribution>> got;
    int arrived = 0;
  };
  std::vector<Pending> pending;  // in window order
  // The telemetry thread (root, with a sink, RecorderConfig::assemble_off_thread): the training
  // thread queues Ready windows; the thread assembles them and runs the sink, in order.
  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Recorder::Ready> queue;
  bool closing = false;
  std::exception_ptr error;        // the sink's (or the assembly's) first exception, until rethrown
  bool failed = false;             // the sink failed once: later windows are dropped
  double worker_cpu_s = 0;
};

namespace {
std::string relay_check(const Contribution& c, std::uint64_t schema_hash, int stages, int n_sync);

/// Past this many queued windows the hand-over waits for the telemetry thread: a bound on the
/// memory a scorer that cannot keep up may take, far above what scoring a window costs.
constexpr std::size_t kMaxQueued = 64;
}  // namespace

Recorder::Recorder(RecorderConfig cfg, Transport& transport, EventTimer* events, WindowSink sink)
    : cfg_(std::move(cfg)),
      impl_(std::make_unique<Impl>(cfg_, std::move(sink), transport.rank() == 0)),
      transport_(transport),
      events_(events),
      S_(impl_->schema.explicit_count()) {
  skip_ = !cfg_.enabled;
  if (cfg_.window_steps < 1) throw std::invalid_argument("window_steps must be >= 1");
  if (cfg_.event_q < 0 || cfg_.event_q > 1) throw std::invalid_argument("event_q must be in [0, 1]");
  for (int s : cfg_.sync_wait_stages)
    if (s < 0 || s >= S_) throw std::invalid_argument("sync_wait_stages entry outside the schema");
  int capacity = cfg_.capacity_steps > 0 ? cfg_.capacity_steps : 2 * cfg_.window_steps;
  std::int64_t pow2 = 1;
  while (pow2 < capacity) pow2 <<= 1;
  mask_ = pow2 - 1;
  width_ = static_cast<std::size_t>(5 + 3 * S_);
  ring_.assign(static_cast<std::size_t>(pow2) * width_, 0);
  open_window_ = 0;
  cpu_wait_mark_ns_ = process_cpu_wait_ns();
  // Node relays check what they forward with the root's own rules (window excepted: a relay
  // forwards whichever window a contribution belongs to).
  transport_.set_check([hash = impl_->schema.order_hash(), S = S_, n_sync = static_cast<int>(cfg_.sync_wait_stages.size())](
                           const Contribution& c) { return relay_check(c, hash, S, n_sync); });
  if (impl_->root && impl_->sink && cfg_.assemble_off_thread)
    impl_->worker = std::thread([this] { telemetry_thread(); });
}

Recorder::~Recorder() { stop_telemetry_thread(true); }

void Recorder::stop_telemetry_thread(bool drop_queued) noexcept {
  if (!impl_ || !impl_->worker.joinable()) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->closing = true;
    if (drop_queued) impl_->queue.clear();  // no finish(): the caller's sink may be going away
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

void Recorder::telemetry_thread() {
  Impl& im = *impl_;
  for (;;) {
    Ready r;
    bool failed = false;
    {
      std::unique_lock lock(im.mu);
      im.cv.wait(lock, [&] { return !im.queue.empty() || im.closing; });
      if (im.queue.empty()) break;
      r = std::move(im.queue.front());
      im.queue.pop_front();
      failed = im.failed;
    }
    im.cv.notify_all();  // a hand-over waiting for room
    std::exception_ptr error;
    if (!failed) {  // after the sink failed once, windows are dropped (the error is rethrown)
      try {
        assemble(std::move(r));
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error) {
      std::lock_guard lock(im.mu);
      im.error = error;
      im.failed = true;
    }
  }
  std::lock_guard lock(im.mu);
  im.worker_cpu_s = thread_cpu_s();
}

void Recorder::rethrow_sink_error() {
  if (!impl_->worker.joinable()) return;
  std::exception_ptr e;
  {
    std::lock_guard lock(impl_->mu);
    e = std::exchange(impl_->error, nullptr);
  }
  if (e) std::rethrow_exception(e);
}

std::int64_t Recorder::gather_wait_ns() const {
  const auto deadline = static_cast<std::int64_t>(cfg_.gather_deadline_s * 1e9);
  return std::max(deadline, kGatherPaceSteps * impl_->pace.median_ns());
}

double Recorder::gather_wait_s() const { return static_cast<double>(gather_wait_ns()) * 1e-9; }

double Recorder::telemetry_cpu_s() const {
  std::lock_guard lock(impl_->mu);
  return impl_->worker_cpu_s;
}

int Recorder::stage_index(std::string_view name) const {
  const auto i = impl_->schema.index_of(name);
  return i && *i < S_ ? *i : -1;
}

void Recorder::on_full() noexcept {
  ++dropped_;
  ++dropped_total_;
  if (cfg_.overflow == OverflowPolicy::overwrite_oldest) {
    std::fill_n(slot(tail_), width_, 0);
    ++tail_;
  }
}

// The event pair is side evidence: sampled deterministically at fraction q (evenly spread),
// never synchronized, polled at safe points.
void Recorder::begin_device_event() noexcept {
  if (skip_ || events_ == nullptr || cfg_.event_q <= 0 || cur_ == nullptr) return;
  const std::int64_t k = sample_counter_++;
  const bool sampled = std::floor(static_cast<double>(k + 1) * cfg_.event_q) > std::floor(static_cast<double>(k) * cfg_.event_q);
  if (!sampled) return;
  const int pair = events_->acquire();
  if (pair < 0) {
    faults_ |= kEventPoolExhausted;
    cur_[3 + 3 * S_] = -1;  // sampled, no free pair: missing
    return;
  }
  cur_[3 + 3 * S_] = pair + 1;
  cur_[4 + 3 * S_] = -1;
  events_->record_begin(pair);
}

void Recorder::end_device_event() noexcept {
  if (skip_ || events_ == nullptr || cur_ == nullptr) return;
  const std::int64_t v = cur_[3 + 3 * S_];
  if (v > 0 && cur_[4 + 3 * S_] == -1) {
    events_->record_end(static_cast<int>(v - 1));
    cur_[4 + 3 * S_] = -3;  // in flight
  }
}

void Recorder::poll_events() {
  if (events_ == nullptr) return;
  std::erase_if(orphan_pairs_, [&](std::int64_t pair) {
    if (!events_->query(static_cast<int>(pair))) return false;
    events_->release(static_cast<int>(pair));
    return true;
  });
  for (std::int64_t i = tail_; i < head_; ++i) {
    std::int64_t* p = slot(i);
    if (p[3 + 3 * S_] > 0 && p[4 + 3 * S_] == -3) {
      const int pair = static_cast<int>(p[3 + 3 * S_] - 1);
      if (const auto secs = events_->query(pair)) {
        p[4 + 3 * S_] = static_cast<std::int64_t>(std::llround(*secs * 1e9));
        p[3 + 3 * S_] = -2;  // ready
        events_->release(pair);
      }
    }
  }
}

std::vector<std::byte> Recorder::pack(std::int64_t window) {
  const std::int64_t start = cfg_.first_step + window * cfg_.window_steps;
  const std::int64_t end = start + cfg_.window_steps;
  const int n_sync = static_cast<int>(cfg_.sync_wait_stages.size());
  std::vector<std::byte> out;
  out.reserve(payload_bytes(cfg_, cfg_.window_steps));
  out.resize(sizeof(Header));
  int records = 0;
  std::vector<std::int64_t> still_in_flight;
  while (tail_ < head_) {
    std::int64_t* p = slot(tail_);
    if (p == cur_) break;                 // the open step belongs to a later window
    if (p[0] >= end) break;
    if (p[0] >= start && p[2] != 0) {     // an ended step of this window
      put(out, static_cast<std::int32_t>(p[0] - start));
      put(out, static_cast<float>(static_cast<double>(p[2] - p[1]) * 1e-9));
      impl_->pace.add(p[2] - p[1]);
      for (int s = 0; s < S_; ++s) {
        const std::int64_t b = p[3 + 2 * s], e = p[4 + 2 * s];
        put(out, static_cast<float>(b != 0 && e >= b ? static_cast<double>(e - b) * 1e-9 : 0.0));
      }
      const std::int64_t ev = p[3 + 3 * S_];
      std::uint8_t state = kEvUnsampled;
      float ev_s = 0;
      if (ev == -2) {
        state = kEvReady;
        ev_s = static_cast<float>(static_cast<double>(p[4 + 3 * S_]) * 1e-9);
      } else if (ev != 0) {
        state = kEvMissing;  // no free pair, or not ready by its window boundary
        if (ev > 0) still_in_flight.push_back(ev - 1);
      }
      put(out, state);
      put(out, ev_s);
      for (int s : cfg_.sync_wait_stages) put(out, static_cast<float>(static_cast<double>(p[3 + 2 * S_ + s]) * 1e-9));
      ++records;
    } else if (p[0] < start) {
      faults_ |= kStepOutOfOrder;         // a step from a window already closed
    }
    std::fill_n(p, width_, 0);
    ++tail_;
  }
  // Events not ready by the boundary are reported missing; their pairs are released once done.
  orphan_pairs_.insert(orphan_pairs_.end(), still_in_flight.begin(), still_in_flight.end());

  Header h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.schema_hash = impl_->schema.order_hash();
  h.rank = transport_.rank();
  h.window = static_cast<std::int32_t>(window);
  h.first_step = start;
  // The span this rank reached: the whole window, or up to its last step when the run ended
  // inside it. The root takes the largest span, so steps no rank recorded count as missing.
  h.steps = static_cast<std::int32_t>(std::clamp<std::int64_t>(last_step_ - start + 1, 0, cfg_.window_steps));
  h.stages = S_;
  h.records = records;
  h.n_sync = n_sync;
  h.fault_bits = faults_;
  h.accumulation = cfg_.accumulation;
  h.dropped = dropped_;
  const auto id = transport_.identity();
  h.local_rank = id.local_rank;
  h.node_rank = id.node_rank;
  // The window's CPU wait: the process's run delay since the last window closed.
  const std::int64_t waited = process_cpu_wait_ns();
  h.cpu_wait_ns = waited >= 0 && cpu_wait_mark_ns_ >= 0 ? std::max<std::int64_t>(0, waited - cpu_wait_mark_ns_) : -1;
  cpu_wait_mark_ns_ = waited;
  copy_text(h.hostname, sizeof h.hostname, id.hostname);
  copy_text(h.role, sizeof h.role, cfg_.role);
  std::memcpy(out.data(), &h, sizeof h);
  h.checksum = fnv1a(out.data(), out.size());
  std::memcpy(out.data(), &h, sizeof h);
  faults_ = 0;
  dropped_ = 0;
  return out;
}

void Recorder::close_window(std::int64_t window) {
  auto payload = pack(window);
  bytes_sent_ += static_cast<std::int64_t>(payload.size());
  ++windows_closed_;
  if (impl_->root)
    impl_->pending.push_back({static_cast<int>(window), now_ns(), gather_wait_ns(),
                              std::vector<std::optional<Contribution>>(transport_.size())});
  transport_.send(static_cast<int>(window), std::move(payload));
}

void Recorder::safe_point() {
  if (!cfg_.enabled) return;
  rethrow_sink_error();
  const double cpu0 = thread_cpu_s();
  poll_events();
  // Close every window whose last step has ended (or that a later step has passed).
  for (;;) {
    const std::int64_t end = cfg_.first_step + (open_window_ + 1) * cfg_.window_steps;
    const bool passed = last_step_ >= end || (last_step_ == end - 1 && cur_ == nullptr);
    if (!passed) break;
    close_window(open_window_++);
  }
  transport_.progress();
  if (impl_->root) pump_root(false);
  safe_point_cpu_s_ += thread_cpu_s() - cpu0;
}

void Recorder::finish() {
  if (!cfg_.enabled) return;
  const double cpu0 = thread_cpu_s();
  if (cur_ != nullptr) {
    faults_ |= kStepNotClosed;
    cur_ = nullptr;
  }
  poll_events();
  const std::int64_t last_window =
      last_step_ == INT64_MIN ? -1 : (last_step_ - cfg_.first_step) / cfg_.window_steps;
  while (open_window_ <= last_window) close_window(open_window_++);
  const std::int64_t wait = gather_wait_ns();
  const std::int64_t deadline = now_ns() + wait;
  while (true) {
    transport_.progress();
    if (impl_->root) pump_root(false);
    if (!impl_->root || impl_->pending.empty() || now_ns() >= deadline) break;
    struct timespec ts{0, 200000};
    nanosleep(&ts, nullptr);
  }
  if (impl_->root) pump_root(true);
  transport_.drain(static_cast<double>(wait) * 1e-9);
  safe_point_cpu_s_ += thread_cpu_s() - cpu0;
  // Every window is handed over: the telemetry thread assembles the rest, then stops.
  const bool threaded = impl_->worker.joinable();
  stop_telemetry_thread(false);
  if (threaded) {
    std::exception_ptr e = std::exchange(impl_->error, nullptr);
    if (e) std::rethrow_exception(e);
  }
}

// ---- root: assembly ---------------------------------------------------------------------------

namespace {

struct Decoded {
  Header h{};
  bool ok = false;
  std::string why;
  const std::byte* records = nullptr;
};

/// Checks a contribution against the root's rules. relay: a node relay's check, which does not
/// know the window and does not judge the stage schema (a relay whose own schema differs must
/// not veto its node; the root judges it): integrity, rank identity and self-consistency only.
Decoded decode(const Contribution& c, std::uint64_t schema_hash, int window, int stages, int n_sync, bool relay = false) {
  Decoded d;
  const auto who = "rank " + std::to_string(c.rank) + ": ";
  if (!c.refused.empty()) {
    d.why = who + c.refused;
    return d;
  }
  if (c.bytes.size() < sizeof(Header)) {
    d.why = who + "corrupt contribution (" + std::to_string(c.bytes.size()) + " bytes, shorter than a header)";
    return d;
  }
  std::memcpy(&d.h, c.bytes.data(), sizeof(Header));
  std::vector<std::byte> copy = c.bytes;
  Header zeroed = d.h;
  zeroed.checksum = 0;
  std::memcpy(copy.data(), &zeroed, sizeof zeroed);
  if (d.h.magic != kMagic || d.h.version != kVersion) {
    d.why = who + "corrupt contribution (bad magic or version)";
  } else if (fnv1a(copy.data(), copy.size()) != d.h.checksum) {
    d.why = who + "corrupt contribution (checksum mismatch)";
  } else if (relay && (d.h.stages < 1 || d.h.stages > 65536 || d.h.n_sync < 0 || d.h.n_sync > d.h.stages)) {
    d.why = who + "inconsistent contribution (stage count)";
  } else if (!relay && (d.h.schema_hash != schema_hash || d.h.stages != stages)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "schema mismatch (stage order hash %016llx, %d stages; expected %016llx, %d stages)",
                  static_cast<unsigned long long>(d.h.schema_hash), d.h.stages,
                  static_cast<unsigned long long>(schema_hash), stages);
    d.why = who + buf;
  } else if ((!relay && d.h.window != window) || d.h.rank != c.rank) {
    d.why = who + "inconsistent contribution (window " + std::to_string(d.h.window) + ", rank " +
            std::to_string(d.h.rank) + ")";
  } else if ((!relay && d.h.n_sync != n_sync) || d.h.records < 0 || d.h.records > d.h.steps ||
             c.bytes.size() != sizeof(Header) + static_cast<std::size_t>(d.h.records) *
                                                    record_bytes(relay ? d.h.stages : stages, relay ? d.h.n_sync : n_sync)) {
    d.why = who + "inconsistent contribution (record count or size)";
  } else {
    d.ok = true;
    d.records = c.bytes.data() + sizeof(Header);
  }
  return d;
}

std::string relay_check(const Contribution& c, std::uint64_t schema_hash, int stages, int n_sync) {
  Decoded d = decode(c, schema_hash, -1, stages, n_sync, true);
  if (d.ok) return {};
  // decode's reason starts with "rank R: "; the relay's line is the contribution's.
  const auto colon = d.why.find(": ");
  return colon == std::string::npos ? d.why : d.why.substr(colon + 2);
}

}  // namespace

void Recorder::pump_root(bool final_pass) {
  auto& pending = impl_->pending;
  const int R = transport_.size();
  const std::size_t max_bytes = payload_bytes(cfg_, cfg_.window_steps);
  const std::int64_t now = now_ns();
  while (!pending.empty()) {
    auto& p = pending.front();
    for (auto& c : transport_.receive(p.window, max_bytes)) {
      if (c.rank < 0 || c.rank >= R || p.got[c.rank]) continue;
      p.got[c.rank] = std::move(c);
      ++p.arrived;
    }
    const bool timed_out = now - p.opened_ns >= p.wait_ns;
    if (p.arrived < R && !timed_out && !final_pass) break;
    if (p.arrived < R) transport_.abandon(p.window);

    Ready r;
    r.window = p.window;
    r.got = std::move(p.got);
    transport_.take_gather_stats(p.window, r.gather);
    r.gather.closed_ns = p.opened_ns;
    r.waited_s = static_cast<double>(p.wait_ns) * 1e-9;
    if (p.arrived < R) {
      std::vector<int> missing;
      for (int k = 0; k < R; ++k)
        if (!r.got[k]) missing.push_back(k);
      r.notes = transport_.explain_missing(missing);
    }
    pending.erase(pending.begin());
    if (!impl_->worker.joinable()) {
      assemble(std::move(r));
      continue;
    }
    // The hand-over: the telemetry thread assembles and scores it.
    {
      std::unique_lock lock(impl_->mu);
      impl_->cv.wait(lock, [&] { return impl_->queue.size() < kMaxQueued; });
      impl_->queue.push_back(std::move(r));
    }
    impl_->cv.notify_all();
  }
}

namespace {

/// Rank 0's assembly of one window (the recorder's and assemble_window's).
formats::Window assemble_from(const frontier::StageSchema& schema, const RecorderConfig& cfg, int R, int window,
                              std::vector<std::optional<Contribution>>& got, std::vector<std::string>&& notes,
                              double waited_s) {
  const int S = schema.explicit_count();
  const int n_sync = static_cast<int>(cfg.sync_wait_stages.size());
  // Assemble what arrived; every gap or inconsistency becomes a named reason.
  formats::Window w;
  frontier::TelemetryInput& tel = w.telemetry;
  std::vector<Decoded> dec(R);
  int span = 0;
  for (int r = 0; r < R; ++r) {
    if (!got[r]) {
      tel.gather_ok = false;
      char buf[96];
      std::snprintf(buf, sizeof buf, "rank %d: no contribution within the %.3g s gather deadline", r, waited_s);
      tel.reasons.emplace_back(buf);
      continue;
    }
    dec[r] = decode(*got[r], schema.order_hash(), window, S, n_sync);
    if (!dec[r].ok) {
      tel.gather_ok = false;
      tel.reasons.push_back(dec[r].why);
      continue;
    }
    span = std::max(span, dec[r].h.steps);
  }
  const std::int64_t start = cfg.first_step + static_cast<std::int64_t>(window) * cfg.window_steps;
  w.matrix = frontier::StageMatrix(schema, R, start, std::max(span, 0));
  std::vector<std::string> roles(R);
  bool any_role = false;
  std::vector<double> d(S);
  for (int r = 0; r < R; ++r) {
    formats::RankInfo info{r, 0, 0, ""};
    if (dec[r].ok) {
      const Header& h = dec[r].h;
      info = {r, h.local_rank, h.node_rank, std::string(h.hostname, strnlen(h.hostname, sizeof h.hostname))};
      roles[r] = std::string(h.role, strnlen(h.role, sizeof h.role));
      any_role |= !roles[r].empty();
      tel.dropped_records += h.dropped;
      if (h.fault_bits != 0)
        for (const auto& f : describe_faults(h.fault_bits)) tel.reasons.push_back("rank " + std::to_string(r) + ": recorder " + f);
      const std::byte* q = dec[r].records;
      // The window's CPU wait spread over the rank's recorded steps of it.
      const double cpu_wait = h.cpu_wait_ns >= 0 && h.records > 0 ? static_cast<double>(h.cpu_wait_ns) * 1e-9 / h.records : -1.0;
      for (int i = 0; i < h.records; ++i) {
        const auto off = get<std::int32_t>(q);
        const double wall = get<float>(q);
        for (int s = 0; s < S; ++s) d[s] = get<float>(q);
        const auto state = get<std::uint8_t>(q);
        const double ev = get<float>(q);
        std::vector<double> sync(n_sync);
        for (int k = 0; k < n_sync; ++k) sync[k] = get<float>(q);
        if (off < 0 || off >= w.matrix.steps()) continue;
        try {
          w.matrix.set_record(off, r, d, wall);
          if (state == kEvReady) w.matrix.set_fwd_event(off, r, frontier::EventState::ready, ev);
          if (state == kEvMissing) w.matrix.set_fwd_event(off, r, frontier::EventState::missing, 0);
          for (int k = 0; k < n_sync; ++k) w.matrix.set_sync_wait(off, r, cfg.sync_wait_stages[k], sync[k]);
          if (cpu_wait >= 0) w.matrix.set_cpu_wait(off, r, cpu_wait);
        } catch (const std::invalid_argument& e) {
          tel.gather_ok = false;
          tel.reasons.push_back("rank " + std::to_string(r) + ": inconsistent record (" + e.what() + ")");
          w.matrix.clear_record(off, r);
        }
      }
    }
    w.ranks.push_back(std::move(info));
  }
  if (any_role) w.matrix.set_roles(roles);
  for (auto& n : notes) tel.reasons.push_back(std::move(n));
  return w;
}

}  // namespace

void Recorder::assemble(Ready&& rd) {
  formats::Window w =
      assemble_from(impl_->schema, cfg_, transport_.size(), rd.window, rd.got, std::move(rd.notes), rd.waited_s);
  w.gather = std::move(rd.gather);
  if (impl_->sink) impl_->sink(std::move(w), rd.window);
}

formats::Window assemble_window(const RecorderConfig& cfg, int world, int window,
                                std::vector<std::optional<Contribution>> got, std::vector<std::string> notes) {
  if (world < 1 || static_cast<int>(got.size()) != world)
    throw std::invalid_argument("assemble_window: got must hold one entry per rank of the world");
  const frontier::StageSchema schema(cfg.stages, true, cfg.accumulation);
  return assemble_from(schema, cfg, world, window, got, std::move(notes), cfg.gather_deadline_s);
}

}  // namespace sf::recorder
