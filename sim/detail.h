// Internal to sf::sim: the data loader behind Workload.
#pragma once

#include "sf/sim/sim.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace sf::sim {

/// Data loader: a background thread prepares batches (loader_ms each, bounded queue) when
/// prefetching; next() is the main-process wait plus collate (data_ms) plus any injected stall.
class Workload::Loader {
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

}  // namespace sf::sim
