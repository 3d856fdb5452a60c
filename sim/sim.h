// sf::sim — the synthetic data-parallel training step on real MPI ranks, its device and comm
// backends, and the `run` orchestration (record → gather → score → verdict against truth).
#pragma once

#include "formats/formats.h"
#include "inject/inject.h"
#include "recorder/recorder.h"
#include "verify/verify.h"

#include <mpi.h>

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

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm parent);
/// NCCL on device buffers (CUDA+NCCL builds with a CUDA device). Detects the library version;
/// several ranks on one GPU need NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 (set here where
/// allowed). Returns nullptr with *why set when it cannot be used, so the caller falls back to MPI.
std::unique_ptr<Comm> make_nccl_comm(MPI_Comm parent, Device& device, std::string* why);

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

// ---- run --------------------------------------------------------------------------------------

enum class RecorderMode { off, cpu, event };
enum class CommKind { mpi, nccl };
enum class DeviceKind { automatic, cuda, host };

struct RunConfig {
  std::string scenario = "data_tail";
  std::optional<double> delay_ms;          ///< default: the scenario's
  std::vector<int> target_ranks;           ///< default: drawn from seed (hidden until the verdict)
  int target_count = 1;
  std::int64_t onset = 0, offset = inject::kForever;
  int every = 1;
  int steps = 60;
  int warmup = 5;
  int window = 0;                          ///< 0 → one window over all measured steps
  std::uint64_t seed = 1;
  CommKind comm = CommKind::mpi;
  DeviceKind device = DeviceKind::automatic;
  RecorderMode recorder = RecorderMode::cpu;
  double event_q = 0.05;                   ///< with --recorder event
  std::string out_dir;                     ///< results-style JSON and per-window packets
  std::string dump;                        ///< gathered stage matrix as JSONL
  bool check = false;                      ///< exit 1 unless the verdict meets the scenario's claim
  bool quiet = false;                      ///< no table
  double gather_deadline_s = 2.0;
  WorkloadConfig workload;
  size_t grad_floats = 4096;
  // telemetry faults (injected on purpose; training must not notice)
  inject::TelemetryFault telemetry_fault = inject::TelemetryFault::none;
  int telemetry_fault_rank = 1;
  // overhead mode: paired windows alternating off / cpu / event
  int overhead_pairs = 0;                  ///< > 0: overhead mode with this many blocks
  int overhead_window = 50;                ///< steps per overhead window
  frontier::LabelConfig label;
  std::vector<std::string> argv;           ///< the command line, for the result file
  std::string commit;                      ///< git commit of the binary, for the result file
};

/// Validates a RunConfig without MPI (rank count not yet known): returns "" or one line.
std::string validate(const RunConfig& cfg);

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

/// The verdict of one scored window against the plan's truth, as both `run` and `sim` report it.
struct VerdictReport {
  verify::Verdict verdict;
  bool claim_pass = false;
  std::string claim;         ///< the scenario's claim (what --check asserts)
  std::string truth_text;    ///< "# truth: ..." line
  std::string verdict_text;  ///< verdict, baseline and check lines
  nlohmann::ordered_json json;
};
VerdictReport verdict_report(const inject::FaultPlan& plan, const frontier::Evidence& e, double makespan_gap);
/// The cross-check of the exposed makespan Σ_t F[t,S] against the slowest rank's measured step
/// times Σ_t max_r wall[t,r]; gap = |exposed − wall sum| / exposed (0 when nothing is exposed).
struct MakespanCheck {
  double wall_sum_s = 0, gap = 0;
};
MakespanCheck makespan_check(const frontier::Evidence& e, const frontier::StageMatrix& m);

/// Runs the testbed on every rank of `world` (MPI initialized). Rank 0 prints the table, writes
/// the result files and returns the process exit code (0, or 1 when --check fails); the other
/// ranks return 0.
int run(const RunConfig& cfg, MPI_Comm world);

}  // namespace sf::sim
