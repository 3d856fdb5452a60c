// Internal to sf::testbed: the pieces run() and the overhead experiment share.
#pragma once

#include "sf/testbed/testbed.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#if SF_WITH_MPI
#include <mpi.h>
#include <sched.h>
#include <sys/types.h>
#endif

namespace sf::testbed::detail {

/// The recorder configuration of a run: the workload's stages, and the stages whose
/// collectives carry sync-wait side evidence.
recorder::RecorderConfig recorder_config(const RunConfig& cfg, std::int64_t first_step, int window);

/// Consecutive windows concatenated into one run-level window (all measured steps).
formats::Window concat(const std::vector<formats::Window>& windows);

/// Rank 0's handling of gathered windows in bounded memory: each window is scored as it arrives,
/// its packet, its summary line (windows.jsonl) and its dump lines go to disk at once, and its
/// steps feed a run-level StreamingAccumulator; nothing per window stays in memory. Only the
/// rank_median gain baseline needs whole windows: then they are kept (documented, noted).
/// Also samples rank 0's resident memory after every window (growth per window, fitted).
class Rank0Windows {
public:
  Rank0Windows(const RunConfig& cfg, int expected_windows);
  ~Rank0Windows();
  Rank0Windows(const Rank0Windows&) = delete;
  Rank0Windows& operator=(const Rank0Windows&) = delete;
  /// The recorder's sink. Never throws for a file it cannot write: the error is kept for finish().
  void add(formats::Window&& w, int index);
  /// The healthy reference every window's diagnosis (and the run's) is compared with.
  void set_reference(frontier::Reference ref);
  /// One line per window for the run's table (its steps, median step, top stage and diagnosis):
  /// the first kHeadLines and the last kTailLines windows, and how many between were left out
  /// (rank 0 keeps nothing per window that grows with the run).
  std::string window_lines() const;
  static constexpr std::size_t kHeadLines = 10, kTailLines = 30;
  int count() const;
  /// Run-level evidence over every measured step, the slowest-rank wall sum, the first window's
  /// rank identities. Call after the recorder finished (it changes nothing: --mitigate calls it
  /// before the steps after the switch, the report after them); count() > 0.
  frontier::Evidence run_evidence(MakespanCheck& makespan, std::vector<formats::RankInfo>& ranks);
  /// Closes the streamed files (the dump is renamed into place); "" or the first write error.
  std::string finish();
  /// The run's reporters (--metrics, told each window here; --plot and --trace, finished by
  /// report_run).
  Reporters& reporters();
  /// Per-window summaries as run.json lists them (read back from windows.jsonl; empty without --out).
  nlohmann::ordered_json summaries() const;
  std::size_t first_packet_bytes() const;
  double scoring_s() const;
  /// The gather as rank 0 saw it ({"mode", "nodes", "windows", "rank0_messages_per_window",
  /// "rank0_bytes_per_window", "rank0_close_to_scored_mean_s", "rank0_close_to_scored_max_s"}),
  /// null when no window came over MPI.
  nlohmann::ordered_json gather_json() const;
  /// {"first_kb", "last_kb", "max_kb", "growth_kb_per_window", "windows_fitted", "sample_every",
  /// "per_window_kb": [[window index, KiB], ...] every sample_every-th window, at most 256}.
  nlohmann::ordered_json rss_json() const;
  /// True when rank 0 keeps whole windows: the rank_median baseline only (--detect and --trace
  /// keep bounded state in a Watch).
  bool keeps_windows() const;
  /// The kept windows (keeps_windows()), in order.
  const std::vector<formats::Window>& kept() const;
  /// What the watch adds to a window's evidence packet: the changes confirmed in it (they go into
  /// the packets of the windows holding their steps) and the window's culprit-stability record
  /// (null: none).
  struct Notes {
    std::vector<ConfirmedChange> changes;
    nlohmann::ordered_json stability;
  };
  /// Called with each window and its evidence as it is scored (--detect, --trace, --live), at the
  /// safe point.
  using Observer = std::function<Notes(const std::shared_ptr<const formats::Window>&, const frontier::Evidence&, int)>;
  void on_window(Observer f);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Resident set size of this process in KiB (0 where /proc/self/statm is unreadable).
std::int64_t resident_kb();

/// Decorates a transport with a telemetry fault on one rank: a contribution held past the root's
/// wait (late: late_s and 2 × recorder::kGatherPaceSteps of this rank's safe points), or bytes
/// flipped in flight (corrupt).
std::unique_ptr<recorder::Transport> make_faulty_transport(std::unique_ptr<recorder::Transport> inner,
                                                           inject::TelemetryFault fault, double late_s);

/// Copies step t of m (records, walls, side evidence) into row 0 of `one` (a one-step matrix of
/// the same layout), after one.reset(step id).
void copy_step(const frontier::StageMatrix& m, int t, frontier::StageMatrix& one);

/// The diagnosis window on one side of a change, as the report needs it (not the whole Evidence).
struct Side {
  bool has = false;
  std::int64_t first = 0, last = -1;
  std::vector<double> shares;          ///< per group
  int suspect_group = -1, suspect_rank = -1;
  std::string basis = "none";
  std::shared_ptr<const frontier::Evidence> evidence;  ///< the side's evidence (its diagnosis and reference)
};
Side side_of(const frontier::Evidence& e);
struct Diagnosis {
  detect::ChangePoint change;
  Side before, after;
  int moved_group() const;             ///< largest share gain (a recovery: loss), −1 when none
  /// The slower side diagnosed against the faster one (after a change: after against before; after
  /// a recovery: before against after); null when a side is missing.
  std::shared_ptr<const frontier::Evidence> diagnosed() const;
};
/// What the --detect report is made of (the Watch's state at the end).
struct ReportInput {
  const detect::Detector* detector = nullptr;
  detect::DetectConfig dc;
  std::vector<std::string> groups;
  std::vector<Diagnosis> diagnoses;    ///< one per kept change with a diagnosis
  std::int64_t series_first = 0;       ///< step of f[0]
  std::vector<double> f;               ///< F[t,S] per step (NaN: not scored), the last kSeriesSteps
  std::vector<double> advance;         ///< per step of f, per group (step-major): a[t,g]
  std::int64_t steps_seen = 0;
  std::int64_t first_seen = 0;         ///< first step fed (the series may start later)
  const detect::StabilityTracker* tracker = nullptr;
  std::string stability_stage;
  const inject::FaultPlan* plan = nullptr;
  std::vector<const detect::Detector*> stage_detectors;  ///< --detect-stages: one per group (empty: off)
};
/// The report's JSON and table lines. Throws std::invalid_argument for an unknown stability stage.
DetectReport build_report(const ReportInput& in);
/// culprit_stability as run.json has it (the window records `st` holds under `per_window`).
nlohmann::ordered_json stability_json(const detect::CulpritStability& st, const std::string& basis);
/// Culprit stability's rule 3 (docs/detect.md): the diagnosis of the largest slowdown whose
/// diagnosis names a moved stage, or null.
template <typename Diagnoses>
const Diagnosis* largest_slowdown(const Diagnoses& ds) {
  const Diagnosis* big = nullptr;
  for (const auto& dg : ds)
    if (dg.change.direction() > 0 && dg.moved_group() >= 0 &&
        (!big || dg.change.median_after - dg.change.median_before > big->change.median_after - big->change.median_before))
      big = &dg;
  return big;
}
/// One change as change_points[] lists it (truth matching aside), and its table line.
nlohmann::ordered_json change_json(const detect::ChangePoint& c, const Diagnosis* d, const std::vector<std::string>& groups);
std::string change_line(const detect::ChangePoint& c, const Diagnosis* d, const std::vector<std::string>& groups);

/// The trace's steps in bounded memory (docs/detect.md, "Timelines"): per step the frontier's
/// advances and leaders and the shown ranks' durations (the first max_ranks, the injected
/// targets, and up to max_ranks leaders at the steps they lead); kept: max_steps/2 around change
/// points and truth transitions, the rest the last steps.
class TraceRecorder {
public:
  TraceRecorder(const TraceOptions& opt, const inject::FaultPlan* plan);
  ~TraceRecorder();
  /// Step t of m (acc = account(m)) starting at T seconds on the frontier's time axis.
  void add_step(const frontier::StageMatrix& m, const frontier::Accounting& acc, int t, double T,
                const std::vector<formats::RankInfo>& ranks);
  /// Keep the steps around step c (a change point): marked ahead, or at most a few dozen steps back.
  void mark(std::int64_t c);
  nlohmann::ordered_json finish(const std::vector<detect::ChangePoint>& changes) const;
  /// Values held (the kept steps, the event windows, the start times of marked steps).
  std::size_t state_size() const;

private:
  struct State;
  std::unique_ptr<State> s_;
};

/// What rank 0 knows at a safe point for the --live view.
struct LiveState {
  std::string scenario;
  int ranks = 0, window = 0;
  std::int64_t done = 0, total = 0;   ///< measured steps gathered so far / in the run
  double elapsed_s = 0;               ///< since the first measured step
  bool detecting = false;
  std::vector<detect::ChangePoint> changes;
  std::string last_change;            ///< the diagnosis line of the last change confirmed, or ""
};
/// The live view for one window: a redraw (ANSI home + clear) on a terminal, else one line.
std::string live_view(const LiveState& s, const frontier::Evidence& e, bool tty);

/// The fault plan of a run: the scenario, its delay, the (drawn) target ranks, onset/offset.
inject::FaultPlan make_plan(const RunConfig& cfg, int world_size);

/// Removes under `dir` (a cgroup hierarchy's root) the cgroups Straggler and its probe made in
/// runs killed before they could remove them (a test's timeout, SIGKILL): sf-straggler-PID and
/// sf-straggler-probe-PID whose process is gone. One that still holds a task refuses rmdir and
/// stays. The cgroup straggler sweeps before it makes its own.
void sweep_stale_straggler_cgroups(const std::string& dir);

#if SF_WITH_MPI
struct Backends {
  std::unique_ptr<sim::Device> device;
  std::unique_ptr<sim::Comm> comm;
  std::string notes;
};

/// Chooses device and comm backends; returns an error line (identical on every rank) or "".
std::string make_backends(const RunConfig& cfg, MPI_Comm world, int local_rank, Backends& b);

/// Before MPI_Init, on a job whose ranks are all on one host (Open MPI's launcher says so) and
/// whose transports nobody chose: the ranks' byte transports are shared memory and self, so no
/// rank listens on the network. A user's choice (environment, `--mca btl`, the user's
/// mca-params.conf) wins; across hosts nothing changes.
void keep_one_host_off_the_network();

/// Runs `body` inside MPI (initialising it at `thread_level` unless the caller did, finalising
/// what it initialised); an exception on one rank is one line naming `who` and the rank, then
/// MPI_Abort (the other ranks wait in collectives). Returns body's exit code.
int with_mpi(const char* who, int thread_level, const std::function<int()>& body);

/// The validation passes on every rank of `world` (collective); rank 0 gets the table, the
/// sf.validate/1 JSON and the verdict. Returns 2 on bad input (rank 0 printed why), else 0.
struct ValidateReport {
  bool root = false;  ///< this rank holds the report
  bool pass = true;
  std::string text, attribution;
  nlohmann::ordered_json json;
  std::vector<std::string> egress;  ///< hosts whose every outgoing inter-host link is slow
};
int validate_world(const ValidateConfig& cfg, MPI_Comm world, ValidateReport& report);

/// link_slow: the target host (the host of the drawn or given rank), all its ranks as the
/// plan's ranks, the rate; `shaper` is set on the one rank (local rank 0 of that host) that
/// applies the rate limit. Collective over `world`. "" or one line (identical on every rank).
std::string resolve_link_plan(inject::FaultPlan& plan, const RunConfig& cfg, MPI_Comm world, int rank, int size,
                              bool& shaper);

/// The link_slow rate limit on this host's link (SF_LINK_DEV), driven step by step by the
/// shaping rank; a no-op on every other rank. Removed at offset, by finish() and on destruction.
class LinkFault {
 public:
  LinkFault(const inject::FaultPlan& plan, bool shaper);
  ~LinkFault();
  LinkFault(const LinkFault&) = delete;
  LinkFault& operator=(const LinkFault&) = delete;
  /// "" when this rank can shape its link (or need not), else one line.
  std::string probe() const;
  /// Before step `step`: turns the limit on at onset and off at offset.
  void at_step(std::int64_t step);
  void finish();
  bool shaper() const { return shaper_; }
  const std::string& failures() const { return failures_; }
  std::int64_t applied_at() const { return applied_at_; }
  std::int64_t removed_at() const { return removed_at_; }
  const std::string& dev() const { return dev_; }

 private:
  const inject::FaultPlan& plan_;
  bool shaper_ = false, on_ = false;
  std::string dev_, failures_;
  std::int64_t applied_at_ = -1, removed_at_ = -1;
};

/// A straggler from outside the step on the target ranks (issue 38; inject::StragglerKind),
/// switched on at the plan's onset and off at its offset, by finish() and on destruction; a no-op
/// on every other rank.
class Straggler {
 public:
  Straggler(const inject::FaultPlan& plan, int rank);
  ~Straggler();
  Straggler(const Straggler&) = delete;
  Straggler& operator=(const Straggler&) = delete;
  /// "" when this rank can apply its straggler (or need not), else why not (cgroup: no writable
  /// cpu controller here).
  std::string probe();
  /// Before step `step`.
  void at_step(std::int64_t step);
  void finish();
  /// What failed while applying it ("" when nothing did).
  const std::string& failures() const { return failures_; }

 private:
  void start();
  void stop();
  void start_cpu_share();
  void start_pause();
  void start_cgroup();
  const inject::FaultPlan& plan_;
  bool target_ = false, on_ = false, pinned_ = false, cgroup_v2_ = false;
  int rank_ = 0;
  std::vector<pid_t> children_;
  cpu_set_t saved_mask_{};
  std::string cgroup_dir_, cgroup_home_, failures_;
};

/// run --mitigate: what was switched, what the what-if predicted and what the steps after the
/// switch measured (testbed/mitigate.cpp). Rank 0's copy is complete; rank < 0: nothing applied.
struct MitigationOutcome {
  Mitigation kind = Mitigation::none;
  int rank = -1;              ///< the culprit excluded or rebalanced
  double share = 1;           ///< its batch share (rebalance)
  std::int64_t first_step = 0;
  int steps = 0;              ///< recorded steps after the switch
  double before_s = 0;        ///< T_actual of the run's steps (the what-if's)
  double predicted_s = 0;     ///< the what-if's step after the switch
  double measured_s = 0;      ///< the recorded steps' mean exposed step
  std::string why_not;        ///< when nothing was applied
  double error() const { return predicted_s > 0 ? (measured_s - predicted_s) / predicted_s : 0.0; }
  nlohmann::ordered_json json() const;
  std::string line() const;   ///< the table's line
};

/// Every rank of `world`, after the run's steps: rank 0 decides from `e` (its run evidence; null
/// elsewhere), every rank learns the culprit, and cfg.mitigate_steps steps (after two to settle)
/// run from `first_step` with the mitigation applied.
MitigationOutcome run_mitigation(const RunConfig& cfg, MPI_Comm world, const inject::FaultPlan& plan, Straggler& straggler,
                                 const frontier::Evidence* e, std::int64_t first_step, int local_rank);

/// The paired overhead experiment (run --overhead-pairs K).
int run_overhead(const RunConfig& cfg, MPI_Comm world, const inject::FaultPlan& plan, Backends& b, int rank, int size);
#endif

}  // namespace sf::testbed::detail
