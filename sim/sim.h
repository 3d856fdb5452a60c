// sf::sim — the synthetic data-parallel training step and its backends: device (host-stream
// model, CUDA) and communication (MPI, NCCL), and the same step as a timeline model of many
// ranks without processes. Knows the recorder (it records itself) and the fault plan (it
// injects); knows nothing of labels or verdicts (sf::testbed runs and judges it).
//
// No MPI in this header: the MPI and NCCL backends are made through <sf/sim/mpi_backends.h>
// (builds with SF_WITH_MPI).
#pragma once

#include "sf/formats/formats.h"
#include "sf/inject/inject.h"
#include "sf/recorder/recorder.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sf::sim {

// ---- device backends --------------------------------------------------------------------------

/// A rank's accelerator: work is queued asynchronously and becomes host-visible only at a
/// synchronization, exactly the displacement the paper's fwd_device scenario is about.
class Device {
public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  /// Queues ~seconds of model compute (kernels) on the rank's stream; returns at once.
  virtual void compute(double seconds) = 0;
  /// Queues an injected compute fail-slow of `seconds` (calibrated spin); returns at once.
  virtual void spin(double seconds) = 0;
  /// Host waits until every queued item finished (as a trainer does before a host collective).
  virtual void synchronize() = 0;
  /// Forward-event side channel; never synchronizes.
  virtual recorder::EventTimer& events() = 0;
  /// Gradient buffer the comm backend reduces (host memory for the host-stream model; for CUDA
  /// the device buffer is copied to this host mirror around host-side collectives).
  virtual float* host_grads() = 0;
  virtual std::size_t grad_floats() const = 0;
  virtual void grads_to_host() {}
  virtual void grads_from_host() {}
};

/// Host-stream model: a worker thread per rank executes queued items in order, each item ending
/// at max(enqueue time, previous end) + its duration; events are stamped when the worker reaches
/// them. Works everywhere (CI), no CPU is burnt for "device" time.
std::unique_ptr<Device> make_host_stream_device(std::size_t grad_floats, std::int64_t spin_ns, int event_pairs = 256);

/// True when this build has the CUDA backend and a device can be used; *why says otherwise.
bool cuda_available(std::string* why);
/// CUDA device (CUDA builds only): per-rank stream on GPU local_rank % count, a compute kernel
/// calibrated at start-up, a %globaltimer spin kernel, cudaEvent pairs from a pool.
/// Throws std::runtime_error when unavailable.
std::unique_ptr<Device> make_cuda_device(int local_rank, std::size_t grad_floats);

/// Calibration error of the CUDA spin kernel at the requested durations (CUDA builds; a GPU).
struct SpinCalibration {
  double requested_ms, measured_ms, error_pct;
};
std::vector<SpinCalibration> cuda_spin_calibration(Device& device, const std::vector<double>& ms);

// ---- comm backends ----------------------------------------------------------------------------

class Comm {
public:
  virtual ~Comm() = default;
  virtual std::string name() const = 0;
  virtual void allreduce(Device& d) = 0;        ///< sum the gradient buffer over ranks
  virtual void allgather(Device& d) = 0;        ///< sharded forward: gather parameter shards
  virtual void reduce_scatter(Device& d) = 0;   ///< sharded backward: reduce and scatter grads
  virtual void barrier() = 0;
};


// ---- the synthetic step -----------------------------------------------------------------------

/// Base costs of the healthy step (milliseconds). The defaults give a ~195 ms, backward-dominant
/// step with the paper's proportions (data 12 ms main-process wait, forward 36 ms host with 25 ms
/// of overlapped device work, backward 125 ms of device work behind 15 ms of launches, callbacks
/// 5 ms, optimizer 10 ms), so a 120 ms data tail leads the frontier with a two-stage candidate set
/// as in the paper's Table 4.
struct StageCosts {
  double data_ms = 12, loader_ms = 4, fwd_host_ms = 36, fwd_device_ms = 25, bwd_host_ms = 15,
         bwd_device_ms = 125, callbacks_ms = 5, optim_ms = 10;
  /// Every cost multiplied by f (--cost-scale).
  StageCosts scaled(double f) const {
    return {data_ms * f, loader_ms * f, fwd_host_ms * f, fwd_device_ms * f, bwd_host_ms * f, bwd_device_ms * f,
            callbacks_ms * f, optim_ms * f};
  }
};

struct WorkloadConfig {
  StageCosts costs;
  int accumulation = 1;       ///< microsteps per step; only the last one synchronizes (no_sync)
  bool sharded = false;       ///< all-gather in forward, reduce-scatter in backward
  bool prefetch = true;       ///< background loader thread
  bool fetch_ahead = false;   ///< fetch step t+1's batch at the end of step t (prefetch-aware charge)
  bool sync_callbacks = false;///< a barrier in callbacks
  std::int64_t spin_ns = 0;   ///< spin margin of host sleeps
};

/// Recorder stage names for a workload (accumulation unfolds data/forward/backward).
std::vector<std::string> workload_stages(const WorkloadConfig& cfg);

/// Stage indices of a workload's schema.
struct StageIndex {
  std::vector<int> data, fwd, bwd;  ///< per microstep
  int callbacks = -1, optim = -1;
};
StageIndex stage_index(const WorkloadConfig& cfg);

/// One rank's synthetic data-parallel training step.
class Workload {
public:
  Workload(const WorkloadConfig& cfg, const inject::FaultPlan& plan, Device& device, Comm& comm, int rank);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  /// Runs step `step`; `rec` may be null (warm-up, recorder off). `skip_record` drops this
  /// step from the recorder only (telemetry fault: training runs it).
  void step(std::int64_t step, recorder::Recorder* rec, bool skip_record = false);
  /// With fetch_ahead: fetch the batch of `next_step` now (charged to that step by the recorder).
  void fetch_ahead(std::int64_t next_step, recorder::Recorder* rec);

private:
  class Loader;
  void host(double seconds) const { inject::host_delay(seconds, cfg_.spin_ns); }
  WorkloadConfig cfg_;
  const inject::FaultPlan& plan_;
  Device& device_;
  Comm& comm_;
  int rank_;
  StageIndex idx_;
  std::unique_ptr<Loader> loader_;
  bool have_batch_ = false;
};

// ---- model-driven ranks (no MPI) -------------------------------------------------------------

/// The synthetic step as a timeline model: per-rank host and device clocks, device work that
/// becomes host-visible at the next synchronize, collectives that release every rank when the
/// last arrives. Same scenario catalogue and stage costs as `run`; no processes, no clock.
struct ModelConfig {
  std::string scenario = "data_tail";
  std::optional<double> delay_ms;
  std::vector<int> target_ranks;          ///< default: one rank drawn from seed
  std::int64_t onset = 0, offset = inject::kForever;
  int every = 1;
  int ranks = 1024;
  int steps = 100;
  std::uint64_t seed = 1;
  double jitter = 0.03;                   ///< lognormal sigma applied to every stage cost
  double event_q = 0;                     ///< sampled fraction of steps with a forward event
  bool sync_callbacks = false;
  StageCosts costs;
};
std::string validate(const ModelConfig& cfg);
inject::FaultPlan model_plan(const ModelConfig& cfg);
/// One window of the model: the stage matrix with walls, sync-wait side evidence and events.
formats::Window model_window(const ModelConfig& cfg, const inject::FaultPlan& plan);

/// The model one step at a time in O(R) memory: the same timeline and the same random draws in
/// the same order as model_window (which is built from it), so a window assembled step by step
/// equals model_window's cell for cell. `sim` streams 10^6 ranks through it.
class ModelStepper {
public:
  ModelStepper(const ModelConfig& cfg, const inject::FaultPlan& plan);
  ~ModelStepper();
  ModelStepper(const ModelStepper&) = delete;
  ModelStepper& operator=(const ModelStepper&) = delete;
  /// The model's schema (the five default stages and the residual).
  static frontier::StageSchema schema();
  /// Step id the next step_into() writes (0, 1, ...).
  std::int64_t next_step() const;
  /// Writes step next_step() into row `row` of m (cfg.ranks ranks, schema()) and advances.
  void step_into(frontier::StageMatrix& m, int row);

private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace sf::sim
