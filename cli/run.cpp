// sf-testbed run: one scenario on real MPI ranks (mpirun -np R sf-testbed run --scenario NAME).
// Options are parsed and validated before MPI_Init.
#include "common.h"
#include "sf/testbed/testbed.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

namespace sf::cli {

namespace {

struct RunOptions {
  testbed::RunConfig cfg;
  LabelOptions label;
  StepOptions step;
  bool no_prefetch = false;
  double delay_ms = -1;
  std::string telemetry_fault = "none";
  DetectOptions detect;
  TraceCliOptions trace;
  bool single_process = false;
  std::string straggler;
  std::optional<double> straggler_strength;
};

/// True when an MPI launcher started this process (Open MPI, MPICH/Hydra, PMIx, Slurm's srun).
bool launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_STEP_NUM_TASKS"})
    if (std::getenv(v)) return true;
  return false;
}

int run_run(RunOptions& o, const std::vector<std::string>& argv) {
  auto& cfg = o.cfg;
  cfg.argv = argv;
  cfg.commit = git_commit();
  if (o.delay_ms >= 0) cfg.fault.delay_ms = o.delay_ms;
  cfg.fault.straggler_strength = o.straggler_strength;
  for (auto k : inject::straggler_kinds())
    if (inject::to_string(k) == o.straggler) cfg.fault.straggler = k;
  for (auto f : {inject::TelemetryFault::none, inject::TelemetryFault::late, inject::TelemetryFault::corrupt,
                 inject::TelemetryFault::schema_mismatch, inject::TelemetryFault::drop_steps})
    if (inject::to_string(f) == o.telemetry_fault) cfg.telemetry_fault = f;
  cfg.workload.prefetch = !o.no_prefetch;
  if (const auto err = apply_step_options(o.step, cfg.workload, nullptr); !err.empty()) {
    if (is_first_process()) std::fprintf(stderr, "sf-testbed run: %s\n", err.c_str());
    return kExitBadInput;
  }
  try {
    cfg.label = make_label_config(o.label);
  } catch (const formats::FormatError& e) {
    if (is_first_process()) std::fprintf(stderr, "sf-testbed run: %s\n", e.what());
    return kExitBadInput;
  }
  if (o.detect.on) {
    if (const auto err = detect::validate(o.detect.cfg); !err.empty()) {
      if (is_first_process()) std::fprintf(stderr, "sf-testbed run: %s\n", err.c_str());
      return kExitBadInput;
    }
    cfg.detect = o.detect.cfg;
    cfg.stability_window = o.detect.stability_window;
    cfg.stability_stage = o.detect.stability_stage;
  }
  cfg.trace = {o.trace.file, o.trace.max_steps, o.trace.max_ranks};
  cfg.live = cfg.live || cfg.live_redraw;
  if (const auto err = testbed::validate(cfg); !err.empty()) {
    if (is_first_process()) std::fprintf(stderr, "sf-testbed run: %s\n", err.c_str());
    return kExitBadInput;
  }
  // Started without mpirun, one process would run alone and judge a world of one rank: say so
  // (a build without MPI says why it cannot run at all, in testbed::run).
  if (testbed::built_with_mpi() && !launched() && !o.single_process) {
    std::fprintf(stderr,
                 "sf-testbed run: not started by an MPI launcher, so one process would run alone with no ranks to "
                 "compare; start it as: mpirun --allow-run-as-root --oversubscribe -np 8 sf-testbed run ... "
                 "(or pass --single-process to run one rank on purpose)\n");
    return kExitBadInput;
  }
  // Every file the run will write is checked before MPI starts: a bad path is one line and exit 2
  // now, not an abort after the last step.
  if (!cfg.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cfg.out_dir, ec);
    std::string err = ec ? "--out " + cfg.out_dir + ": " + ec.message() + "; expected a directory that can be created"
                         : writable_file_error("--out", cfg.out_dir + "/run.json");
    if (!err.empty()) {
      if (is_first_process()) std::fprintf(stderr, "sf-testbed run: %s\n", err.c_str());
      return kExitBadInput;
    }
  }
  for (const auto& [opt, path] : {std::pair<const char*, const std::string&>{"--trace", cfg.trace.file}, {"--dump", cfg.dump},
                                  {"--metrics", cfg.metrics_file}, {"--plot", cfg.plot}})
    if (!path.empty())
      if (const auto err = writable_file_error(opt, path); !err.empty()) {
        if (is_first_process()) std::fprintf(stderr, "sf-testbed run: %s\n", err.c_str());
        return kExitBadInput;
      }
  // The picture and another output in one file would overwrite each other.
  if (!cfg.plot.empty()) {
    std::error_code ec;
    const auto plot = std::filesystem::weakly_canonical(cfg.plot, ec);
    for (const auto& [opt, path] : {std::pair<const char*, const std::string&>{"--trace", cfg.trace.file},
                                    {"--dump", cfg.dump}, {"--metrics", cfg.metrics_file}})
      if (!path.empty() && !ec && std::filesystem::weakly_canonical(path, ec) == plot && !ec) {
        if (is_first_process())
          std::fprintf(stderr, "sf-testbed run: --plot %s is also %s: expected another path\n", cfg.plot.c_str(), opt);
        return kExitBadInput;
      }
  }

  return testbed::run(cfg);
}

/// --straggler and its strength (issue 38): a rank slowed from outside, its stages untouched.
void add_straggler_options(CLI::App* sub, RunOptions& opts) {
  std::map<std::string, std::string> kinds;
  std::string meanings;
  for (auto k : inject::straggler_kinds()) {
    kinds[std::string(inject::to_string(k))] = std::string(inject::to_string(k));
    meanings += std::string(meanings.empty() ? "" : "; ") + std::string(inject::to_string(k)) + ": " +
                std::string(inject::straggler_strength_meaning(k)) + " (default " +
                std::to_string(inject::default_strength(k)).substr(0, 4) + ")";
  }
  sub->add_option("--straggler", opts.straggler,
                  "slow the target rank's whole process from outside, its stages untouched (issue 38): cpu_share "
                  "(busy processes on its core), pause (SIGSTOP/SIGCONT bursts), cgroup (a CPU quota; skipped where "
                  "the machine has no writable cpu controller). Implies --scenario none")
      ->transform(choice(kinds));
  sub->add_option("--straggler-strength", opts.straggler_strength, "the straggler's strength: " + meanings);
}

/// --mitigate: after the run, a mitigation applied to the culprit and measured (issue 39).
void add_mitigation_options(CLI::App* sub, testbed::RunConfig& cfg) {
  const std::map<std::string, testbed::Mitigation> mitigations{{"exclude", testbed::Mitigation::exclude},
                                                               {"rebalance", testbed::Mitigation::rebalance}};
  sub->add_option("--mitigate", cfg.mitigate,
                  "after the run's steps, apply a mitigation to the culprit the diagnosis named and measure the step "
                  "the what-if predicted (issue 39): exclude (go on without it, on a communicator of the others) or "
                  "rebalance (move a share of its batch work to the others)")
      ->transform(choice(mitigations));
  sub->add_option("--mitigate-steps", cfg.mitigate_steps, "recorded steps after the switch (two more to settle first)")
      ->check(whole_in(3, 100000))
      ->capture_default_str();
}

/// How many ranks are targets, steps, warm-up, window, medians and the seed.
void add_shape_options(CLI::App* sub, testbed::RunConfig& cfg) {
  sub->add_option("--targets", cfg.fault.target_count, "number of hidden target ranks to draw")->check(whole_from<int>(1))->capture_default_str();
  sub->add_option("--steps", cfg.steps, "measured steps")->check(whole_in(1, 10000000))->capture_default_str();
  sub->add_option("--warmup", cfg.warmup, "unrecorded warm-up steps")->check(whole_in(0, 10000000))->capture_default_str();
  sub->add_option("--window", cfg.window, "recorder window in steps (default: all measured steps; 10 with --live)")
      ->check(whole_from<int>(0));
  sub->add_option("--exact-median-steps", cfg.exact_median_steps,
                  "run-level median step time and forward-event medians exact up to this many steps, then from "
                  "log2 bins within 0.034 % (bounded memory on long runs; 0: exact, memory grows 8 bytes a step)")
      ->check(whole_in(0, 1000000000000LL));
  sub->add_option("--seed", cfg.seed, "seed (hidden target rank)")->check(seed_value())->capture_default_str();
}

/// The gradient sync, the device and the recorder.
void add_backend_options(CLI::App* sub, testbed::RunConfig& cfg) {
  const std::map<std::string, testbed::CommKind> comms{{"mpi", testbed::CommKind::mpi}, {"nccl", testbed::CommKind::nccl}};
  sub->add_option("--comm", cfg.comm, "gradient sync backend")->transform(choice(comms));
  const std::map<std::string, testbed::DeviceKind> devices{
      {"auto", testbed::DeviceKind::automatic}, {"cuda", testbed::DeviceKind::cuda}, {"host", testbed::DeviceKind::host}};
  sub->add_option("--device", cfg.device, "device backend (auto: CUDA where present, else the host-stream model)")
      ->transform(choice(devices));
  const std::map<std::string, testbed::RecorderMode> modes{
      {"off", testbed::RecorderMode::off}, {"cpu", testbed::RecorderMode::cpu}, {"event", testbed::RecorderMode::event}};
  sub->add_option("--recorder", cfg.recorder, "recorder mode")->transform(choice(modes));
  sub->add_option("--event-q", cfg.event_q, "sampled fraction of steps with a forward event pair (--recorder event)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
}

/// What is written and shown: --out, --plot, --dump, --metrics, --check, --quiet, --details, --live.
void add_output_options(CLI::App* sub, RunOptions& opts) {
  auto& cfg = opts.cfg;
  sub->add_option("--out", cfg.out_dir, "directory for run.json and one evidence packet per window");
  sub->add_option("--plot", cfg.plot,
                  "after the run, draw it from --out's packets: per window, each rank x stage's change against the reference "
                  "(the culprits outlined) and the step time (FILE.png or .svg)");
  sub->add_option("--dump", cfg.dump, "write the gathered stage matrix (sf.stages/1 JSONL, one header per window)");
  sub->add_option("--metrics", cfg.metrics_file,
                  "Prometheus text exposition of the latest window, rewritten atomically each window (node_exporter's "
                  "textfile collector reads it; docs/formats.md, Metrics)");
  sub->add_flag("--check", cfg.check, "exit 1 unless the verdict meets the scenario's claim");
  sub->add_flag("--quiet", cfg.quiet, "no table on stdout");
  sub->add_flag("--details", cfg.details,
                "instead of the answer, the whole table: set-up, the truth, the paper's frontier table, gates, labels, verdicts and baselines");
  sub->add_flag("--single-process", opts.single_process, "run as one rank without mpirun (on purpose: a world of one)");
  sub->add_flag("--live", cfg.live, "rank 0 shows a compact view at each window (every 10 steps unless --window): redrawn on "
                "a terminal, plain appended lines otherwise");
  sub->add_flag("--live-redraw", cfg.live_redraw, "--live, redrawn in place even under mpirun (which gives ranks a pseudo-terminal, "
                "so rank 0 cannot tell whether you are watching)");
}

/// How windows reach rank 0 and where they are scored.
void add_gather_options(CLI::App* sub, testbed::RunConfig& cfg) {
  sub->add_option("--gather-deadline", cfg.gather_deadline_s,
                  "seconds rank 0 waits for a window's contributions (never less than 4 steps of the run's pace)")
      ->check(CLI::Range(0.001, 3600.0))->capture_default_str();
  const std::map<std::string, recorder::GatherMode> gathers{{"flat", recorder::GatherMode::flat},
                                                            {"node", recorder::GatherMode::node}};
  sub->add_option("--gather", cfg.gather,
                  "how windows reach rank 0: node (default; one relay per node collects, checks and forwards its node's "
                  "contributions: rank 0 receives one message per node) or flat (every rank sends to rank 0)")
      ->transform(choice(gathers));
  sub->add_flag("--score-inline", cfg.score_inline,
                "rank 0 assembles and scores each window in the training thread's safe point instead of on its "
                "telemetry thread (measures what the thread takes off training)");
}

/// The DDP-like step (group "Workload").
void add_workload_options(CLI::App* sub, RunOptions& opts) {
  auto& cfg = opts.cfg;
  const std::string w = "Workload";
  sub->add_option("--accumulation", cfg.workload.accumulation, "gradient accumulation factor (no-sync microsteps)")
      ->check(whole_in(1, 64))->group(w);
  sub->add_flag("--sharded", cfg.workload.sharded, "all-gather in forward, reduce-scatter in backward")->group(w);
  sub->add_flag("--fetch-ahead", cfg.workload.fetch_ahead, "fetch the next batch at the end of a step (prefetch-aware charge)")
      ->group(w);
  sub->add_flag("--no-prefetch", opts.no_prefetch, "no background loader thread")->group(w);
  sub->add_flag("--sync-callbacks", cfg.workload.sync_callbacks, "a barrier in callbacks (implied by callback_sync_tail)")
      ->group(w);
  add_step_options(sub, opts.step, false);
  sub->add_option("--reference-steps", cfg.reference_steps,
                  "healthy steps recorded before the warm-up as the verdict's reference (0: none)")
      ->check(whole_in(0, 100000))->group(w)->capture_default_str();
  sub->add_option("--link-rate", cfg.link_rate_mbit, "link_slow: the target host's egress rate while the fault is on (Mbit/s)")
      ->group(w)->capture_default_str();
  sub->add_option("--link-grad-mib", cfg.link_grad_mib,
                  "link_slow: gradient MiB the all-reduce moves per step (real buffer sizes: sets --grad-mib and --model-mib)")
      ->group(w)->capture_default_str();
  sub->add_option("--spin-us", cfg.spin_us, "spin the last microseconds of each sleep (default: 100, 0 when oversubscribed)")
      ->check(CLI::Range(0.0, 100000.0))->group(w);
}

/// Telemetry faults and the overhead experiment.
void add_telemetry_options(CLI::App* sub, RunOptions& opts) {
  auto& cfg = opts.cfg;
  const std::string t = "Telemetry faults and overhead";
  // A string option mapped afterwards: CLI11 2.1 trips over enums that have an ADL to_string.
  std::map<std::string, std::string> tfaults;
  for (auto f : {inject::TelemetryFault::none, inject::TelemetryFault::late, inject::TelemetryFault::corrupt,
                 inject::TelemetryFault::schema_mismatch, inject::TelemetryFault::drop_steps})
    tfaults.emplace(std::string(inject::to_string(f)), std::string(inject::to_string(f)));
  sub->add_option("--telemetry-fault", opts.telemetry_fault, "inject a telemetry failure (training must not notice)")
      ->transform(choice(tfaults))->group(t);
  sub->add_option("--telemetry-fault-rank", cfg.telemetry_fault_rank, "rank whose telemetry fails")
      ->check(whole_from<int>(0))->group(t)->capture_default_str();
  sub->add_option("--overhead-pairs", cfg.overhead_pairs, "overhead mode: blocks of paired off/cpu/event windows")
      ->check(whole_from<int>(0))->group(t);
  sub->add_option("--overhead-window", cfg.overhead_window, "steps per overhead window")->check(whole_in(2, 1000000))->group(t)->capture_default_str();
}

}  // namespace

void setup_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto& cfg = o->cfg;
  auto* sub = app.add_subcommand("run", "Run one fault scenario on real MPI ranks: mpirun -np R sf-testbed run --scenario NAME");
  add_fault_options(sub, cfg.fault, o->delay_ms);
  add_straggler_options(sub, *o);
  add_mitigation_options(sub, cfg);
  add_shape_options(sub, cfg);
  add_backend_options(sub, cfg);
  add_output_options(sub, *o);
  add_gather_options(sub, cfg);
  add_workload_options(sub, *o);
  add_telemetry_options(sub, *o);
  add_label_options(sub, o->label);
  add_detect_options(sub, o->detect);
  add_trace_options(sub, o->trace);
  sub->callback([o, sub] {
    std::vector<std::string> argv{"sf-testbed", "run"};
    for (const auto* opt : sub->get_options())
      for (const auto& r : opt->results()) {
        if (opt->get_name().empty()) continue;
        argv.push_back(opt->get_name(false, true) + "=" + r);
      }
    // A straggler is the run's fault: without --scenario, no scenario of the catalogue runs beside it.
    if (!o->straggler.empty() && sub->count("--scenario") == 0) o->cfg.fault.scenario = "none";
    if (const int rc = run_run(*o, argv)) exit_with(rc);
  });
}

void setup_scenarios(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* sub = app.add_subcommand("scenarios", "List the fault scenario catalogue");
  sub->add_flag("--json", *json, "machine-readable");
  sub->callback([json] {
    if (*json) {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const auto& s : inject::catalogue())
        a.push_back({{"name", s.name}, {"stage", s.stage}, {"site", inject::to_string(s.site)},
                     {"kind", inject::to_string(s.kind)}, {"sync_bearing", s.sync_bearing},
                     {"default_delay_ms", s.default_delay_ms}, {"should_route", s.should_route}, {"injects", s.injects}});
      std::printf("%s\n", a.dump(2).c_str());
      return;
    }
    std::printf("# %-20s %-26s %-22s %-5s %8s %-7s  %s\n", "scenario", "stage", "kind", "sync", "delay", "routed", "injects");
    std::printf("# %-20s %-26s %-22s %-5s %8s %-7s\n", "", "", "", "", "ms", "");
    for (const auto& s : inject::catalogue())
      std::printf("  %-20s %-26s %-22s %-5s %8.0f %-7s  %s\n", s.name.c_str(), s.stage.empty() ? "-" : s.stage.c_str(),
                  std::string(inject::to_string(s.kind)).c_str(), s.sync_bearing ? "yes" : "no", s.default_delay_ms,
                  s.site == inject::Site::none ? "-" : s.should_route ? "yes" : "no", s.injects.c_str());
  });
}

}  // namespace sf::cli
