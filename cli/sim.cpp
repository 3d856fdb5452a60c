// sf-testbed sim: model-driven ranks at scale, no MPI — the same scenarios, scored and checked.
#include "common.h"
#include "sf/sim/sim.h"
#include "sf/testbed/testbed.h"

#include <memory>
#include <sstream>

namespace sf::cli {

namespace {

struct SimOptions {
  sim::ModelConfig cfg;
  LabelOptions label;
  StepOptions step;
  double delay_ms = -1;
  bool json = false, check = false;
  bool details = false;  ///< --details: the whole table after the answer
  bool whole = false;  ///< score the whole N × R × S matrix in memory instead of streaming
  int threads = 2;
  std::optional<std::uint64_t> reference_seed;  ///< the healthy reference's own draw (default: the run's seed)
  bool independent_reference = false;           ///< --independent-reference: seed + kIndependentSeedOffset
  std::string dump;
  std::string metrics;
  std::string plot;  ///< --plot FILE.png|svg
  DetectOptions detect;
  TraceCliOptions trace;
};

/// The options against the model: one line saying what is wrong, or "".
std::string sim_options_problem(SimOptions& o, frontier::LabelConfig& label) {
  auto& cfg = o.cfg;
  if (o.delay_ms >= 0) cfg.fault.delay_ms = o.delay_ms;
  if (auto err = apply_step_options(o.step, cfg, &cfg.comm); !err.empty()) return err;
  try {
    label = make_label_config(o.label);
  } catch (const formats::FormatError& e) {
    return e.what();
  }
  if (auto err = detect::validate(o.detect.cfg); !err.empty()) return err;
  if (auto err = sim::validate(cfg); !err.empty()) return err;
  if (!o.detect.stability_stage.empty())
    if (auto why = sim::ModelStepper::schema().group_problem(o.detect.stability_stage,
                                                           "--stability-stage " + o.detect.stability_stage + ": ", "the model");
        !why.empty())
      return why;
  if (auto why = frontier::config_names_problem(sim::ModelStepper::schema(), label); !why.empty()) return why;
  if (auto err = testbed::plot_file_problem(o.plot); !err.empty()) return err;
  for (const auto& [opt, path] : {std::pair<const char*, const std::string&>{"--trace", o.trace.file}, {"--dump", o.dump},
                                  {"--metrics", o.metrics}, {"--plot", o.plot}})
    if (!path.empty())
      if (auto err = writable_file_error(opt, path); !err.empty()) return err;
  return "";
}

/// What `sim` was asked, as testbed::simulate takes it.
testbed::SimulateOptions simulate_options(SimOptions& o, const frontier::LabelConfig& label) {
  // --independent-reference: a seed of the reference's own, derived from the run's (so that a sweep
  // over seeds gets one independent pair per seed).
  constexpr std::uint64_t kIndependentSeedOffset = 1000003;
  if (o.independent_reference && !o.reference_seed) o.reference_seed = o.cfg.seed + kIndependentSeedOffset;
  testbed::SimulateOptions so;
  so.cfg = o.cfg;
  so.label = label;
  so.whole = o.whole;
  so.threads = o.threads;
  so.reference_seed = o.reference_seed;
  if (o.detect.on) so.detect = o.detect.cfg;
  so.stability_window = o.detect.stability_window;
  so.stability_stage = o.detect.stability_stage;
  if (!o.trace.file.empty()) so.trace = testbed::TraceOptions{o.trace.file, o.trace.max_steps, o.trace.max_ranks};
  so.keep_window = !o.dump.empty();
  return so;
}

/// The files asked for: --dump, then the reporters (--metrics of the one window, --trace and --plot
/// at the end); the lines to say after the output. A file that cannot be written stops there:
/// `error` is its one line, named by its option.
std::vector<std::string> write_files(const SimOptions& o, const testbed::SimOutcome& r, std::string& error) {
  const auto& e = r.evidence;
  if (!o.dump.empty()) {
    std::ostringstream out;
    formats::write_jsonl(out, r.window);
    try {
      formats::write_file_atomic(o.dump, out.str());
    } catch (const std::exception& err) {
      error = std::string("--dump ") + err.what();
      return {};
    }
  }
  testbed::Reporters reporters;
  if (!o.metrics.empty()) reporters.add(testbed::metrics_reporter(o.metrics));
  if (r.trace) reporters.add(testbed::trace_reporter(o.trace.file));
  if (!o.plot.empty())
    reporters.add(testbed::plot_reporter(o.plot, "each rank x stage's change against the reference, the culprits outlined"));
  const formats::MetricsState counts{"sim", 1, e.steps, r.detect ? static_cast<std::int64_t>(r.detect->changes.size()) : -1,
                                     e.gather_ok ? 0 : 1};
  error = reporters.window({e, counts});
  if (error.empty()) {
    testbed::ReportedEnd end;
    if (!o.plot.empty()) end.packets = formats::evidence_to_json(e).dump() + "\n";
    end.trace = r.trace ? &*r.trace : nullptr;
    error = reporters.finish(end);
  }
  return error.empty() ? reporters.said() : std::vector<std::string>{};
}

std::string sim_json(const SimOptions& o, const testbed::SimOutcome& r) {
  const auto& cfg = o.cfg;
  nlohmann::ordered_json j;
  j["schema"] = "sf.sim/1";
  j["commit"] = git_commit();
  j["config"] = {{"scenario", cfg.fault.scenario}, {"delay_ms", r.plan.delay_ms}, {"ranks", cfg.ranks}, {"steps", cfg.steps},
                 {"seed", cfg.seed}, {"jitter", cfg.variation.jitter_sigma}, {"event_q", cfg.event_q},
                 {"profile", cfg.profile}, {"sync_mode", sim::to_string(cfg.sync_mode)},
                 {"heterogeneity", sim::to_string(cfg.variation.heterogeneity)}, {"rank_sigma", cfg.variation.rank_sigma},
                 {"grad_mib", cfg.layout.grad_mib}, {"buckets", sim::bucket_floats(cfg.layout).size()},
                 {"bwd_device_ms", cfg.costs.bwd_device_ms}, {"bwd_host_ms", cfg.costs.bwd_host_ms},
                 {"comm_latency_us", cfg.comm.latency_us}, {"comm_gib_s", cfg.comm.gib_per_s}, {"scoring", r.scoring}};
  j["reference"] = {{"seed", r.reference_seed},
                    {"median_step_s", r.reference.median_step_s},
                    {"advance_s_per_step", testbed::advance_per_step(r.reference)}};
  j["truth_ranks"] = r.plan.ranks;
  j["evidence"] = formats::evidence_to_json(r.evidence);
  j["verdict"] = r.verdict->json;
  if (r.detect)
    for (const auto& [k, v] : r.detect->json.items()) j[k] = v;
  return j.dump() + "\n";
}

/// The default: the answer first, what ran in one line, where the rest is.
std::string sim_answer(const SimOptions& o, const testbed::SimOutcome& r) {
  const auto& cfg = o.cfg;
  std::string answer = testbed::answer_text(r);
  answer += frontier::strprintf("# sim: %s on %d modelled rank(s), %d steps, seed %llu (no processes, no MPI, no clock); "
                                "commit %s\n",
                                r.plan.scenario->name.c_str(), cfg.ranks, cfg.steps,
                                static_cast<unsigned long long>(cfg.seed), git_commit());
  return answer + formats::details_pointer("--json");
}

/// --details: the model's set-up, the truth, the paper's table, the verdicts.
std::string sim_details(const SimOptions& o, const testbed::SimOutcome& r) {
  using frontier::strprintf;
  const auto& cfg = o.cfg;
  const auto& e = r.evidence;
  std::string t = strprintf("# sf-testbed sim  commit %s  (model-driven ranks: no processes, no MPI, no clock)\n", git_commit());
  t += strprintf("# scenario %s: %s\n", r.plan.scenario->name.c_str(), r.plan.scenario->injects.c_str());
  t += strprintf("# ranks %d  steps %d  seed %llu  profile %s  sync %s (%zu buckets)  cost jitter %.3g (lognormal sigma)\n",
                 cfg.ranks, cfg.steps, static_cast<unsigned long long>(cfg.seed), cfg.profile.c_str(),
                 std::string(sim::to_string(cfg.sync_mode)).c_str(), sim::bucket_floats(cfg.layout).size(),
                 cfg.variation.jitter_sigma);
  t += strprintf("# %s: median step %.2f ms  scoring: %s\n#\n", r.reference_name.substr(4).c_str(),
                 r.reference.median_step_s * 1e3, r.scoring.c_str());
  t += r.verdict->truth_text;
  t += "#\n" + formats::evidence_table(e, "model window");
  t += strprintf("# model: exposed makespan %.4f s vs slowest-rank wall sum %.4f s (%.2f%% apart)\n", e.exposed_makespan_s,
                 r.makespan.wall_sum_s, r.makespan.gap * 100);
  t += r.verdict->verdict_text;
  if (r.detect) t += "#\n" + r.detect->text;
  return t;
}

/// Checks the options, simulates, writes the files asked for, prints the answer (or --details,
/// or --json), then says what was written (on stderr with --json, which keeps stdout one line).
int run_sim(SimOptions& o) {
  frontier::LabelConfig label;
  if (const auto err = sim_options_problem(o, label); !err.empty()) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", err.c_str());
    return kExitBadInput;
  }
  testbed::SimOutcome r;
  try {
    r = testbed::simulate(simulate_options(o, label));
  } catch (const testbed::InputError& e) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", e.what());
    return kExitBadInput;
  }
  std::string error;
  const auto said = write_files(o, r, error);
  if (!error.empty()) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", error.c_str());
    return kExitBadInput;
  }
  const std::string out = o.json ? sim_json(o, r) : o.details ? sim_details(o, r) : sim_answer(o, r);
  std::fputs(out.c_str(), stdout);
  for (const auto& line : said) std::fprintf(o.json ? stderr : stdout, "%s%s\n", o.json ? "sf-testbed sim: " : "# ", line.c_str());
  return o.check && !r.verdict->claim_pass ? kExitFail : 0;
}

}  // namespace

void setup_sim(CLI::App& app) {
  auto o = std::make_shared<SimOptions>();
  auto& cfg = o->cfg;
  auto* sub = app.add_subcommand("sim", "Model-driven ranks at scale (no MPI): a scenario scored and checked in milliseconds");
  add_fault_options(sub, cfg.fault, o->delay_ms);
  sub->add_option("--ranks", cfg.ranks, "modelled ranks")->check(whole_in(1, 1 << 24))->capture_default_str();
  sub->add_option("--steps", cfg.steps, "modelled steps")->check(whole_in(1, 10000000))->capture_default_str();
  sub->add_option("--seed", cfg.seed, "seed (target rank, cost jitter)")->check(seed_value())->capture_default_str();
  sub->add_option("--event-q", cfg.event_q, "sampled fraction of steps with a forward event")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  sub->add_flag("--sync-callbacks", cfg.sync_callbacks, "a barrier in callbacks (implied by callback_sync_tail)");
  add_step_options(sub, o->step, true);
  sub->add_flag("--json", o->json, "print config, evidence packet and verdict as one JSON line");
  sub->add_flag("--details", o->details,
                "instead of the answer, the whole table: the model's set-up, the truth, the paper's frontier table, gates, labels, verdicts and baselines");
  sub->add_option("--dump", o->dump, "write the model's stage matrix (sf.stages/1 JSONL; implies --whole-matrix)");
  sub->add_option("--metrics", o->metrics, "Prometheus text exposition of the window (docs/formats.md, Metrics)");
  sub->add_option("--plot", o->plot,
                  "draw the model run: each rank x stage's change against the reference (the culprits outlined) (FILE.png or .svg)");
  sub->add_flag("--whole-matrix", o->whole,
                "hold the whole steps x ranks x stages matrix and score it at once (default: stream step by step)");
  sub->add_option("--reference-seed", o->reference_seed,
                  "draw the healthy reference from this seed (its own jitter and per-rank speeds) instead of the run's "
                  "own seed without the fault: the null a healthy run can fail")
      ->check(seed_value());
  sub->add_option("--targets", o->cfg.fault.target_count, "number of hidden target ranks to draw (every rank: a common fault)")
      ->check(whole_from<int>(1))->capture_default_str();
  sub->add_flag("--independent-reference", o->independent_reference,
               "the healthy reference from a seed of its own (the run's seed + 1000003): --reference-seed without naming one");
  sub->add_option("--threads", o->threads, "streaming: 2 runs the model beside the scorer, 1 alternates")
      ->check(whole_in(1, 2))->capture_default_str();
  sub->add_flag("--check", o->check, "exit 1 unless the verdict meets the scenario's claim");
  add_label_options(sub, o->label);
  add_detect_options(sub, o->detect);
  add_trace_options(sub, o->trace);
  sub->callback([o] {
    if (const int rc = run_sim(*o)) exit_with(rc);
  });
}

}  // namespace sf::cli
