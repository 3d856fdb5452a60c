// Internal to sf::sim: the data loader behind Workload; which build of the model's passes runs.
#pragma once

#include "sf/sim/sim.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace sf::sim {

/// Data loader: a background thread prepares batches (loader_ms each, bounded queue) when
/// prefetching; next() is the main-process wait plus collate plus any injected stall.
class Workload::Loader {
public:
  Loader(const StageCosts& costs, bool prefetch, std::int64_t spin_ns);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  /// Blocks until a batch is ready (without prefetching: prepares it, `loader_s`), then spends
  /// `main_s` in the main process (collate/transfer and any injected stall).
  void next(double loader_s, double main_s);

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

/// Which build of the model's passes a ModelStepper runs: `fastest` the AVX-512 one where the
/// processor has it (checked once at run time), `portable` the baseline one; the cells are the
/// same bits.
enum class PassPath { fastest, portable };
/// True when `fastest` is the AVX-512 build on this processor.
bool wide_passes_available();
/// The path a ModelStepper takes, read when it is made (tests set it to run both paths).
inline std::atomic<PassPath> model_pass_path{PassPath::fastest};

}  // namespace sf::sim
