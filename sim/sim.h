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

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
  /// Device buffer -> host mirror; returns once the mirror holds the values.
  virtual void grads_to_host() {}
  /// Host mirror -> device buffer, queued in stream order and asynchronous: the mirror must not
  /// change until synchronize() (or later work on the stream) has passed the copy.
  virtual void grads_from_host() {}
  /// Runs `fn` once the work queued so far has finished (a host callback in stream order, like
  /// cudaLaunchHostFunc): how a bucket's gradients announce that backward has produced them.
  /// `fn` runs on a device-owned thread and must only hand work over (no device calls).
  virtual void when_reached(std::function<void()> fn) = 0;
  /// Copies grads[offset, offset + count) between the device buffer and the host mirror, for a
  /// host-side collective on one bucket (no-ops where the gradients live in host memory).
  /// Called from the comm backend's thread; returns when the copy is complete.
  virtual void bucket_to_host(std::size_t /*offset*/, std::size_t /*count*/) {}
  virtual void bucket_from_host(std::size_t /*offset*/, std::size_t /*count*/) {}
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

/// `validate`'s compute pass on a GPU (CUDA builds): seconds of one n³ single-precision cuBLAS
/// GEMM on GPU local_rank % count, timed with a cudaEvent pair around `repeat` back-to-back
/// products, the fastest of `reps` tries after one warm-up. Throws std::runtime_error without
/// CUDA or a device, and on any CUDA/cuBLAS error.
double cuda_gemm_seconds(int local_rank, int n, int reps, int repeat);

// ---- comm backends ----------------------------------------------------------------------------

enum class BucketOp { allreduce, reduce_scatter };

class Comm {
public:
  virtual ~Comm() = default;
  virtual std::string name() const = 0;
  virtual void allreduce(Device& d) = 0;        ///< sum the gradient buffer over ranks
  virtual void allgather(Device& d) = 0;        ///< sharded forward: gather parameter shards
  virtual void reduce_scatter(Device& d) = 0;   ///< sharded backward: reduce and scatter grads
  virtual void barrier() = 0;

  // Bucketed gradient sync (the DDP-like step): each bucket's collective is launched as backward
  // produces the bucket, the collectives run while backward compute goes on, and the host waits
  // for the last one before the optimizer.

  /// Reduces grads[offset, offset + count) once the device work queued so far has finished (the
  /// bucket's gradients are ready); returns at once. Buckets are reduced in the order started,
  /// one after the other on the rank's comm engine (an MPI comm thread with MPI_Iallreduce, or a
  /// NCCL comm stream). `entry_delay_s` > 0 holds this rank's entry into the collective back
  /// (the comm_delay fault: later buckets queue behind it). reduce_scatter keeps this rank's
  /// 1/size of the bucket (count must be a multiple of the world size).
  virtual void start_bucket(Device& d, std::size_t offset, std::size_t count, BucketOp op, double entry_delay_s) = 0;
  /// Blocks until every started bucket is reduced. Returns the seconds this rank waited at the
  /// step's collectives from its arrival: from the entry of its last bucket (its own work done) to
  /// the reduction of every bucket, waiting for peers and the last transfer included: the step's
  /// sync-wait side evidence. A rank the others wait for arrives last and waits least (issue 38;
  /// until then it was the time with any bucket in flight, which overlaps the rank's own compute).
  virtual double wait_buckets(Device& d) = 0;
  virtual int size() const = 0;  ///< ranks in the communicator
};


// ---- the synthetic step -----------------------------------------------------------------------

/// Base costs of the healthy step (milliseconds). Where the numbers come from is a cost profile's
/// business (cost_profiles()); the member defaults are the `paper-like` profile's.
struct StageCosts {
  double data_ms = 1.2, loader_ms = 4, fwd_host_ms = 20, fwd_device_ms = 65, bwd_host_ms = 15,
         bwd_device_ms = 127, callbacks_ms = 3.6, optim_ms = 8;
  bool operator==(const StageCosts&) const = default;
  /// Every cost multiplied by f (--cost-scale).
  StageCosts scaled(double f) const {
    return {data_ms * f, loader_ms * f, fwd_host_ms * f, fwd_device_ms * f, bwd_host_ms * f, bwd_device_ms * f,
            callbacks_ms * f, optim_ms * f};
  }
  /// The batch's work (data, forward, backward; not callbacks or the optimizer) multiplied by f:
  /// a rank given f of an even batch share (run --mitigate rebalance).
  StageCosts batch_scaled(double f) const {
    StageCosts c = *this;
    for (double* x : {&c.data_ms, &c.loader_ms, &c.fwd_host_ms, &c.fwd_device_ms, &c.bwd_host_ms, &c.bwd_device_ms}) *x *= f;
    return c;
  }
  /// Backward (device compute and host launches) multiplied by f (--backward-scale).
  StageCosts backward_scaled(double f) const {
    StageCosts c = *this;
    c.bwd_host_ms *= f;
    c.bwd_device_ms *= f;
    return c;
  }
};
/// "" when every cost is finite and >= 0 ms (the model's timeline takes each as time spent),
/// else what is wrong.
std::string validate(const StageCosts& c);

/// How the gradients are synchronised: one blocking collective after backward (`single`, the
/// step the paper's comparison was built on), or DDP's buckets launched as backward produces them
/// and overlapping its compute (`bucketed`).
enum class SyncMode { single, bucketed };
std::string_view to_string(SyncMode m);
std::optional<SyncMode> sync_mode_from_string(std::string_view s);

/// The gradient buffer and its buckets. PyTorch DDP's rule (a small first bucket, then buckets of
/// at most bucket_cap_mib, filled in the order backward produces gradients) is applied to a model
/// of model_mib; every bucket is then scaled by grad_mib / model_mib, the bytes actually reduced.
/// With grad_mib == model_mib the layout is literal (real buffer sizes).
struct GradientLayout {
  double grad_mib = 4;           ///< float32 gradient bytes reduced per step (MiB)
  double model_mib = 97.5;       ///< model whose layout is imitated (ResNet-50: 25.6 M parameters)
  double bucket_cap_mib = 25;    ///< torch DDP bucket_cap_mb
  double first_bucket_mib = 1;   ///< torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
};
std::string validate(const GradientLayout& l);
/// Floats per bucket in production order (the bucket backward fills first comes first); each a
/// multiple of `multiple` (the world size for reduce-scatter), at least one multiple each.
std::vector<std::size_t> bucket_floats(const GradientLayout& l, std::size_t multiple = 1);
/// Total floats of bucket_floats(l, multiple).
std::size_t total_grad_floats(const GradientLayout& l, std::size_t multiple = 1);

/// Cost variation a seed controls, so that seeds are replicates: every cost of every rank and
/// step is multiplied by a lognormal factor exp(jitter_sigma · z), z ~ N(0, 1) (median 1), and
/// by the rank's own factor (heterogeneity): none; lognormal — exp(rank_sigma · z_rank) per rank;
/// two_tier — half the ranks (drawn from the seed) run (1 + rank_sigma) times slower.
enum class Heterogeneity { none, lognormal, two_tier };
std::string_view to_string(Heterogeneity h);
std::optional<Heterogeneity> heterogeneity_from_string(std::string_view s);
struct Variation {
  double jitter_sigma = 0;
  Heterogeneity heterogeneity = Heterogeneity::none;
  double rank_sigma = 0;
  bool operator==(const Variation&) const = default;
};
std::string validate(const Variation& v);
/// The rank's persistent cost factor (1 without heterogeneity).
double rank_factor(const Variation& v, std::uint64_t seed, int rank);
/// Levels of the jitter's normal: 2^16 equiprobable midpoint quantiles (|z| ≤ 4.33).
inline constexpr std::size_t kJitterLevels = std::size_t{1} << 16;
/// Φ⁻¹((i + ½) / kJitterLevels) for every level i, ascending (computed once).
const std::vector<double>& normal_quantiles();
/// The costs a rank pays in a step: base × rank factor × per-cost jitter exp(σ · z). Counter-based
/// draws from (seed, rank, step, cost) only, so `run` and `sim` draw the same numbers in any order.
/// z is the standard normal quantised to kJitterLevels equiprobable levels (16 hashed bits per
/// cost pick the level): one hash per four costs and no transcendental call per draw, which is
/// what lets `sim` model 10^6 ranks; the quantisation (relative steps ≈ 1e-6 near the median at
/// σ = 0.03, tails cut at 4.33 σ) is far below anything the model resolves.
StageCosts draw_costs(const StageCosts& base, const Variation& v, std::uint64_t seed, int rank, std::int64_t step);

/// draw_costs for many ranks: the rank factors and exp(σ · z) of every level computed once.
/// draw(r, t) == draw_costs(base, v, seed, r, t) exactly.
class CostSampler {
public:
  CostSampler(const StageCosts& base, const Variation& v, std::uint64_t seed, int ranks);
  StageCosts draw(int rank, std::int64_t step) const;
  /// The costs the model reads (every one but the loader's), one column each, for ranks
  /// r0 .. r0 + len − 1 (len <= kMax): column[j] == draw(r0 + j, step)'s, bit for bit. One loop
  /// over the block, so the table reads of many ranks are in flight together. kMax is also the
  /// model's block of ranks (model_stepper.cpp): 64 keeps a block's draws (3.5 KiB) and the
  /// pass's block state (under 16 KiB) in a 32 KiB L1 beside the streams. At 256 they spilled to
  /// L2: paired sim runs at 10^6 ranks × 50 (six rounds) took 0.93 of 256's user time at 64, one
  /// thread and two; 128 (and 32, tried on one thread) were within noise of 64.
  struct Block {
    static constexpr int kMax = 64;
    double data[kMax], fwd_host[kMax], fwd_device[kMax], bwd_host[kMax], bwd_device[kMax], callbacks[kMax], optim[kMax];
  };
  void draw_block(int r0, int len, std::int64_t step, Block& out) const;

private:
  StageCosts base_;
  /// Per rank: its persistent factor, and the hash of (seed, rank) that every step's jitter
  /// indices start from (jitter_indices' first two rounds, taken once rather than per step).
  std::vector<double> factor_;
  std::vector<std::uint64_t> key_;
  std::vector<double> jitter_;  // per level; empty without jitter
  bool wide_;                   // draw_block's AVX-512 build (where the CPU has it)
};

/// The model's transport (`sim` only; `run` pays what the real transport costs): a bucket of b
/// bytes over R ranks takes latency_us · ceil(log2 R) + 2 (R − 1) / R · b / bandwidth (ring).
struct CommModel {
  double latency_us = 50;
  double gib_per_s = 2;
  double seconds(double bytes, int ranks) const;
};

/// A named set of stage costs, gradient layout, jitter and transport, with where it comes from.
struct CostProfile {
  std::string name;
  std::string origin;   ///< one paragraph: the measurement or the source of every number
  StageCosts costs;
  GradientLayout layout;
  Variation variation;
  CommModel comm;
};
const std::vector<CostProfile>& cost_profiles();
/// nullptr when unknown.
const CostProfile* find_profile(std::string_view name);
inline constexpr std::string_view kDefaultProfile = "paper-like";

struct WorkloadConfig {
  std::string profile = std::string(kDefaultProfile);  ///< name, for result files
  StageCosts costs;
  SyncMode sync_mode = SyncMode::bucketed;
  GradientLayout layout;
  Variation variation;
  std::uint64_t seed = 1;     ///< draws the per-rank and per-step cost variation
  int accumulation = 1;       ///< microsteps per step; only the last one synchronizes (no_sync)
  bool sharded = false;       ///< all-gather in forward, reduce-scatter in backward
  bool prefetch = true;       ///< background loader thread
  bool fetch_ahead = false;   ///< fetch step t+1's batch at the end of step t (prefetch-aware charge)
  bool sync_callbacks = false;///< a barrier in callbacks
  std::int64_t spin_ns = 0;   ///< spin margin of host sleeps
  /// This rank's share of the batch against an even one (run --mitigate rebalance): its data,
  /// forward and backward work, and the faults injected there (a slow rate, not a fixed stall),
  /// scale by it; the collective entry, callbacks and the optimizer do not.
  double batch_share = 1.0;
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
  /// The last microstep's backward: compute and the gradient synchronisation of cfg_.sync_mode.
  void backward_sync(std::int64_t step, const StageCosts& c, double inv, recorder::Recorder* rec);
  WorkloadConfig cfg_;
  const inject::FaultPlan& plan_;
  Device& device_;
  Comm& comm_;
  int rank_;
  StageIndex idx_;
  std::unique_ptr<Loader> loader_;
  std::vector<std::size_t> buckets_;  ///< floats per gradient bucket, in production order
  bool have_batch_ = false;
};

// ---- model-driven ranks (no MPI) -------------------------------------------------------------

/// The synthetic step as a timeline model: per-rank host and device clocks, device work that
/// becomes host-visible at the next synchronize, collectives that release every rank when the
/// last arrives. Same scenario catalogue and stage costs as `run`; no processes, no clock.
struct ModelConfig {
  inject::FaultSpec fault;                ///< what to inject (no stragglers: the model has no process to slow)
  int ranks = 1024;
  int steps = 100;
  std::uint64_t seed = 1;                 ///< target rank and cost variation
  double event_q = 0;                     ///< sampled fraction of steps with a forward event
  bool sync_callbacks = false;
  std::string profile = std::string(kDefaultProfile);  ///< name, for result files
  StageCosts costs;
  SyncMode sync_mode = SyncMode::bucketed;
  GradientLayout layout;
  Variation variation;
  CommModel comm;
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
  /// The same, but the row is left to commit: its durations and side evidence are written
  /// (StageMatrix::begin_step), its walls go to `wall`, and m.commit_step(row, wall.data())
  /// completes it — on another thread, so that the checks and sums of a 10^6-rank row are
  /// paid beside the model of the next step.
  void fill_step(frontier::StageMatrix& m, int row, std::vector<double>& wall);
  /// The step's frontier without its row: what step_into would write, reduced in the passes that
  /// make it (no matrix, no side evidence). Advances like step_into.
  struct StepMaxima {
    /// F[t,s] = max_r P[t,r,s], P the prefix Σ_{j≤s} d[t,r,j] (paper eq. (2)); [5] is the residual's.
    std::array<double, 6> frontier{};
    double slowest_wall = 0;  ///< max_r wall[t,r]
  };
  StepMaxima step_maxima();

  /// A healthy twin stepped beside the model: `healthy` is the same ranks with the same cost
  /// draws (seed, costs, variation) and its own plan (no fault, as a rule). Each step of the model
  /// then steps the twin too, in the same passes' blocks of ranks, so the draws are taken once for
  /// both, and reduces it as step_maxima would: twin_maxima() is what a ModelStepper of its own
  /// would return from step_maxima(), bit for bit. Throws std::invalid_argument when the twin
  /// would draw other costs, std::logic_error once a step is made or a twin is already there.
  void add_twin(const ModelConfig& healthy, const inject::FaultPlan& healthy_plan);
  /// The twin's maxima of the step last made (add_twin first, and a step).
  const StepMaxima& twin_maxima() const;

private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace sf::sim
