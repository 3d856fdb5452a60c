// Internal to sf::sim: the loader, the synthetic step and the telemetry-fault transport.
#pragma once

#include "sim/sim.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace sf::sim::detail {

/// Data loader: a background thread prepares batches (loader_ms each, bounded queue) when
/// prefetching; next() is the main-process wait plus collate (data_ms) plus any injected stall.
class Loader {
public:
  Loader(const StageCosts& costs, bool prefetch, std::int64_t spin_ns);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  /// Blocks until a batch is ready; `stall_s` is an injected main-process stall. With gradient
  /// accumulation each microstep consumes a micro-batch: `batch_fraction` = 1/m of the costs.
  void next(double stall_s, double batch_fraction);

private:
  void produce();
  StageCosts costs_;
  bool prefetch_;
  std::int64_t spin_ns_;
  std::mutex m_;
  std::condition_variable cv_;
  int ready_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

/// Stage indices of a workload's schema.
struct StageIndex {
  std::vector<int> data, fwd, bwd;  // per microstep
  int callbacks = -1, optim = -1;
};
StageIndex stage_index(const WorkloadConfig& cfg);

/// One rank's synthetic data-parallel training step.
class Workload {
public:
  Workload(const WorkloadConfig& cfg, const inject::FaultPlan& plan, Device& device, Comm& comm, int rank);
  /// Runs step `step`; `rec` may be null (warm-up, recorder off). `skip_record` drops this
  /// step from the recorder only (telemetry fault: training runs it).
  void step(std::int64_t step, recorder::Recorder* rec, bool skip_record = false);
  /// With fetch_ahead: fetch the batch of `next_step` now (charged to that step by the recorder).
  void fetch_ahead(std::int64_t next_step, recorder::Recorder* rec);

private:
  void host(double seconds) const { inject::host_delay(seconds, cfg_.spin_ns); }
  WorkloadConfig cfg_;
  const inject::FaultPlan& plan_;
  Device& device_;
  Comm& comm_;
  int rank_;
  StageIndex idx_;
  Loader loader_;
  bool have_batch_ = false;
};

/// Decorates a transport with a telemetry fault on one rank: a contribution held past the
/// gather deadline (late), or bytes flipped in flight (corrupt).
std::unique_ptr<recorder::Transport> make_faulty_transport(std::unique_ptr<recorder::Transport> inner,
                                                           inject::TelemetryFault fault, double late_s);

}  // namespace sf::sim::detail
