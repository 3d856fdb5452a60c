// sf::testbed, the run — configuration of `run` and `validate` on real MPI ranks, its check
// before MPI starts, and the entry points (run, run_validate). No MPI in this header: run()
// initialises MPI itself when the build has it (SF_WITH_MPI).
#pragma once

#include "sf/testbed/judge.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sf::testbed {

// ---- configuration ------------------------------------------------------------------------------

enum class RecorderMode { off, cpu, event };
enum class CommKind { mpi, nccl };
enum class DeviceKind { automatic, cuda, host };
/// run --mitigate: once the run's steps are scored, the testbed goes on without the culprit
/// (exclude: a communicator of the other ranks; FALCON's S4) or with less of its batch
/// (rebalance; FALCON's S2), and measures the step the what-if predicted.
enum class Mitigation { none, exclude, rebalance };
std::string_view mitigation_name(Mitigation m);
std::string_view recorder_mode_name(RecorderMode m);


struct RunConfig {
  inject::FaultSpec fault;                 ///< what to inject (inject::validate, inject::make_plan)
  int steps = 60;
  int warmup = 5;
  int window = 0;                          ///< 0 → one window over all measured steps
  /// Run-level medians (rank 0's whole-run evidence, the watch's segments) are exact up to this
  /// many steps, then read from log2 bins within 0.034 % so that rank 0's memory stays flat over
  /// weeks (frontier::StreamingAccumulator::bound_medians); 0 keeps every step's value.
  std::size_t exact_median_steps = 4096;
  std::uint64_t seed = 1;
  CommKind comm = CommKind::mpi;
  DeviceKind device = DeviceKind::automatic;
  RecorderMode recorder = RecorderMode::cpu;
  double event_q = 0.05;                   ///< with --recorder event
  std::string out_dir;                     ///< results-style JSON and per-window packets
  std::string plot;                        ///< --plot FILE.png|svg: drawn from out_dir's packets after the run
  std::string dump;                        ///< gathered stage matrix as JSONL
  std::string metrics_file;                ///< --metrics: Prometheus text of the latest window, rewritten each window
  bool check = false;                      ///< exit 1 unless the verdict meets the scenario's claim
  bool quiet = false;                      ///< no table
  bool details = false;                    ///< --details: the paper's frontier table, gates, labels and verdict after the answer
  double gather_deadline_s = 2.0;
  /// --gather: flat (every rank to rank 0) or node (one relay per node; rank 0 receives one
  /// message per node). Relays wait half the gather deadline for their node.
  recorder::GatherMode gather = recorder::GatherMode::node;
  /// --score-inline: rank 0 assembles and scores each window in the training thread's safe point
  /// (as before the telemetry thread; for measuring what the thread takes off training).
  bool score_inline = false;
  sim::WorkloadConfig workload;
  /// Microseconds of each host sleep spent spinning; < 0: 100 when the ranks do not outnumber
  /// the cores, else 0 (decided once the world size is known).
  double spin_us = -1;
  /// Healthy steps recorded before the warm-up (step ids −K..−1, where no fault is active): the
  /// reference that says how much of the injected delay reached the step and which stage took
  /// it. 0: no reference.
  int reference_steps = 6;
  Mitigation mitigate = Mitigation::none;
  int mitigate_steps = 10;                 ///< recorded steps after the switch (two more unrecorded first)
  /// link_slow: the target host's egress rate while the fault is on (tc tbf), and the gradient
  /// bytes the all-reduce moves (sized so the healthy link is not the bottleneck, the throttled
  /// one is; for this scenario the layout is real: model_mib = grad_mib = link_grad_mib).
  double link_rate_mbit = 200;
  double link_grad_mib = 32;
  // telemetry faults (injected on purpose; training must not notice)
  inject::TelemetryFault telemetry_fault = inject::TelemetryFault::none;
  int telemetry_fault_rank = 1;
  // overhead mode: paired windows alternating off / cpu / event
  int overhead_pairs = 0;                  ///< > 0: overhead mode with this many blocks
  int overhead_window = 50;                ///< steps per overhead window
  frontier::LabelConfig label;
  std::optional<detect::DetectConfig> detect;  ///< --detect: change points on rank 0 at the safe point
  int stability_window = 20;               ///< culprit-stability window when the run has one recorder window
  std::string stability_stage;             ///< --stability-stage: the group culprit stability follows
  bool live = false;                       ///< --live: rank 0 shows a compact view at each window
  bool live_redraw = false;                ///< --live-redraw: redraw in place even under a launcher
  TraceOptions trace;                      ///< --trace FILE (rank 0, after the run)
  std::vector<std::string> argv;           ///< the command line, for the result file
  std::string commit;                      ///< git commit of the binary, for the result file
};

/// Validates a RunConfig without MPI (rank count not yet known): returns "" or one line.
std::string validate(const RunConfig& cfg);

/// True when this build can run() (configured with SF_WITH_MPI).
bool built_with_mpi();

/// Runs the testbed on every rank of MPI_COMM_WORLD (call it on every rank under mpirun):
/// initialises MPI unless the caller did (and then finalises it), builds the backends, runs the
/// workload with the recorder, and on rank 0 scores each gathered window, prints the table and
/// writes the result files. Returns the process exit code: 0, 1 when --check fails, 2 for bad
/// input (one line on stderr from rank 0). Without MPI in the build it prints why and returns 2.
int run(const RunConfig& cfg);

// ---- validation passes (FALCON §5: name the slow link, name the slow device) -------------------

/// `sf-testbed validate` under mpirun: a point-to-point pass over the ranks' ring and a compute
/// pass, each naming what is slower than `threshold` × the median of its peers.
struct ValidateConfig {
  bool p2p = true;
  bool compute = true;
  std::size_t bytes = 4u << 20;     ///< message size per directed transfer
  int reps = 10;                    ///< acknowledged messages per directed link per sweep
  int sweeps = 3;                   ///< passes over all links and ranks (the fastest try counts)
  double threshold = 2.0;           ///< slow: time > threshold × the median of its peers
  bool parallel = false;            ///< measure a round's links at once (FALCON), not one at a time
  int gemm_n = 384;                 ///< compute pass: n × n × n single-precision GEMM
  int gemm_reps = 5;                ///< timed GEMMs per rank (fastest counts)
  /// Compute pass device: "cpu" (Eigen GEMM on the rank's core) or "cuda" (cuBLAS GEMM on GPU
  /// local_rank % count, timed with cudaEvents; CUDA builds with a GPU).
  std::string device = "cpu";
  /// Injected compute fail-slow, to validate the validator: rank → factor (its GEMMs repeat
  /// `factor` times, as a device running at 1/factor of its speed would take).
  std::vector<std::pair<int, double>> compute_slowdown;
  bool check = false;               ///< exit 1 when anything is slow
  bool quiet = false;
  std::string out;                  ///< sf.validate/1 JSON file
  std::vector<std::string> argv;
  std::string commit;
};
/// Validates without MPI: "" or one line.
std::string validate(const ValidateConfig& cfg);
/// Runs both passes on every rank of MPI_COMM_WORLD (initialising MPI unless the caller did);
/// rank 0 prints the link and rank tables and writes the JSON. Exit code: 0, 1 (--check and
/// something slow), 2 (bad input, or a build without MPI).
int run_validate(const ValidateConfig& cfg);

}  // namespace sf::testbed
