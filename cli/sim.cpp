// sf-testbed sim: model-driven ranks at scale, no MPI — the same scenarios, scored and checked.
#include "common.h"
#include "sf/sim/sim.h"
#include "sf/testbed/testbed.h"

#include <cmath>
#include <malloc.h>
#include <fstream>
#include <future>
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

int run_sim(SimOptions& o) {
  auto& cfg = o.cfg;
  if (o.delay_ms >= 0) cfg.delay_ms = o.delay_ms;
  if (const auto err = apply_step_options(o.step, cfg, &cfg.comm); !err.empty()) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", err.c_str());
    return kExitBadInput;
  }
  frontier::LabelConfig label;
  try {
    label = make_label_config(o.label);
  } catch (const formats::FormatError& e) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", e.what());
    return kExitBadInput;
  }
  if (const auto err = detect::validate(o.detect.cfg); !err.empty()) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", err.c_str());
    return kExitBadInput;
  }
  if (const auto err = sim::validate(cfg); !err.empty()) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", err.c_str());
    return kExitBadInput;
  }
  if (const auto err = fault_window_error(cfg.onset, cfg.offset); !err.empty()) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", err.c_str());
    return kExitBadInput;
  }
  if (const auto schema = sim::ModelStepper::schema();
      !o.detect.stability_stage.empty() && !schema.group_index(o.detect.stability_stage)) {
    std::string names;
    for (const auto& g : schema.groups()) names += (names.empty() ? "" : ", ") + g;
    std::fprintf(stderr, "sf-testbed sim: --stability-stage %s: not a stage group of the model; expected one of %s\n",
                 o.detect.stability_stage.c_str(), names.c_str());
    return kExitBadInput;
  }
  if (const auto why = frontier::config_names_problem(sim::ModelStepper::schema(), label); !why.empty()) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", why.c_str());
    return kExitBadInput;
  }
  if (const auto err = testbed::plot_file_problem(o.plot); !err.empty()) {
    std::fprintf(stderr, "sf-testbed sim: %s\n", err.c_str());
    return kExitBadInput;
  }
  for (const auto& [opt, path] : {std::pair<const char*, const std::string&>{"--trace", o.trace.file}, {"--dump", o.dump},
                                  {"--metrics", o.metrics}, {"--plot", o.plot}})
    if (!path.empty())
      if (const auto err = writable_file_error(opt, path); !err.empty()) {
        std::fprintf(stderr, "sf-testbed sim: %s\n", err.c_str());
        return kExitBadInput;
      }
  const auto plan = sim::model_plan(cfg);
  // Streamed step by step unless the answer needs the whole matrix (a dump of it, the per-rank
  // window-median gain baseline, or --trace: it keeps the steps around changes it knows only at
  // the end). --detect streams: its watch takes each step as it is scored (docs/detect.md, "Memory").
  const bool whole = o.whole || !o.dump.empty() || label.gain_baseline == frontier::GainBaseline::rank_median ||
                     !o.trace.file.empty();
  // The scorer allocates and frees R-sized scratch arrays every step; keep freed memory in the
  // heap (glibc would otherwise hand each one back to the kernel and page-fault it in again on
  // the next step, a third of the time at 10^5 ranks).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  auto score = [&](const sim::ModelConfig& c, const inject::FaultPlan& p) {
    return whole ? testbed::score_model_whole(c, p, label) : testbed::score_model_streaming(c, p, label, o.threads);
  };
  // The healthy reference: the same ranks without the fault, drawn from the same seed (the run
  // itself when there is no fault) or, with --reference-seed, from a seed of its own: its own
  // jitter and per-rank speeds, so that a healthy run is compared with another healthy run and
  // not with itself (a null that can fail, issue 38). Scored on a thread of its own beside the
  // faulty run's two: labelled up to Evidence::kStandingMaxRanks ranks (the diagnosis reads its
  // standings), past that accounted only (advances, spreads, median step).
  sim::ModelConfig healthy = cfg;
  healthy.scenario = "none";
  healthy.delay_ms.reset();
  healthy.sync_callbacks = cfg.sync_callbacks || plan.scenario->sync_callbacks;
  // --independent-reference: a seed of the reference's own, derived from the run's (so that a sweep
  // over seeds gets one independent pair per seed).
  constexpr std::uint64_t kIndependentSeedOffset = 1000003;
  if (o.independent_reference && !o.reference_seed) o.reference_seed = cfg.seed + kIndependentSeedOffset;
  const bool independent = o.reference_seed && *o.reference_seed != cfg.seed;
  if (independent) healthy.seed = *o.reference_seed;
  const bool faulty = plan.scenario->site != inject::Site::none || independent;
  const auto healthy_plan = sim::model_plan(healthy);
  const bool ref_standings = cfg.ranks <= frontier::Evidence::kStandingMaxRanks;
  std::future<testbed::ModelScore> ref_future;
  if (faulty && !whole)
    ref_future = std::async(o.threads >= 2 ? std::launch::async : std::launch::deferred, [&] {
      return ref_standings ? testbed::score_model_streaming(healthy, healthy_plan, label, 1)
                           : testbed::score_model_accounting(healthy, healthy_plan);
    });
  std::optional<testbed::Watch> watch;
  if (o.detect.on || !o.trace.file.empty()) {
    testbed::WatchOptions wo;
    wo.label = label;
    if (o.detect.on) wo.detect = o.detect.cfg;
    if (!o.trace.file.empty()) wo.trace = testbed::TraceOptions{o.trace.file, o.trace.max_steps, o.trace.max_ranks};
    wo.stability_window = o.detect.stability_window;
    wo.stability_stage = o.detect.stability_stage;
    wo.plan = &plan;
    // Streamed: the watch folds each segment between changes as the steps go by, its medians
    // bounded as run's are (exact up to RunConfig::exact_median_steps steps a segment).
    wo.online = !whole;
    if (!whole) wo.exact_median_steps = testbed::RunConfig{}.exact_median_steps;
    watch.emplace(std::move(wo));
  }
  testbed::StepSink sink;
  if (watch && !whole) sink = [&](const frontier::StageMatrix& one, const frontier::StepFacts& f) { watch->observe_step(one, f); };
  auto scored = whole ? score(cfg, plan) : testbed::score_model_streaming(cfg, plan, label, o.threads, sink);
  auto& e = scored.evidence;
  const auto [wall_sum, gap] = scored.makespan;
  const auto ref_scored = !faulty ? scored : whole ? score(healthy, healthy_plan) : ref_future.get();
  const auto& ref_e = ref_scored.evidence;
  // The diagnosis: the change against the healthy reference (for a run without a fault, itself).
  const std::string ref_name = independent ? "the healthy reference (seed " + std::to_string(healthy.seed) + ", no fault)"
                                            : std::string("the healthy reference (same seed, no fault)");
  testbed::apply_reference(e, frontier::make_reference(ref_e, ref_name));
  const auto vr = testbed::verdict_report(plan, e, gap, &ref_e, cfg.seed);
  const std::string scoring = whole ? std::string("whole matrix")
                                    : "streamed, " + std::to_string(scored.threads) + " thread(s)";
  // The matrix itself only where an answer reads it (--dump, --trace, --detect on the whole matrix).
  const bool need_matrix = !o.dump.empty() || (watch && whole);
  const formats::Window w = need_matrix ? sim::model_window(cfg, plan) : formats::Window{};
  std::optional<testbed::DetectReport> dr;
  if (watch && whole)  // the window lives until the end of this function: the watch may hold it without a copy
    watch->observe(std::shared_ptr<const frontier::StageMatrix>(std::shared_ptr<void>(), &w.matrix), w.ranks);
  if (o.detect.on) dr = watch->report(whole ? &w.matrix : nullptr);
  if (!o.dump.empty()) {
    std::ostringstream out;
    formats::write_jsonl(out, w);
    formats::write_file_atomic(o.dump, out.str());
  }
  std::string trace_line;  // said after the output: on stderr with --json, which keeps stdout one JSON line
  if (!o.trace.file.empty()) {
    try {
      const auto trace = watch->trace(&w.matrix, w.ranks);
      formats::write_file_atomic(o.trace.file, trace.dump() + "\n");
      trace_line = testbed::trace_written_line(o.trace.file, trace);
    } catch (const std::exception& err) {
      std::fprintf(stderr, "sf-testbed sim: --trace %s\n", err.what());
      return kExitBadInput;
    }
  }
  if (!o.metrics.empty()) {
    const formats::MetricsState ms{"sim", 1, e.steps, dr ? static_cast<std::int64_t>(dr->changes.size()) : -1,
                                   e.gather_ok ? 0 : 1};
    try {
      formats::write_file_atomic(o.metrics, formats::metrics_text(e, ms));
    } catch (const std::exception& err) {
      std::fprintf(stderr, "sf-testbed sim: --metrics %s\n", err.what());
      return kExitBadInput;
    }
  }
  std::string plot_line;
  if (!o.plot.empty()) {
    if (const auto err = plot_packets_text(formats::evidence_to_json(e).dump() + "\n", o.plot); !err.empty()) {
      std::fprintf(stderr, "sf-testbed sim: %s\n", err.c_str());
      return kExitBadInput;
    }
    plot_line = "plot: " + o.plot + " (each rank x stage's change against the reference, the culprits outlined)";
  }
  if (o.json) {
    nlohmann::ordered_json j;
    j["schema"] = "sf.sim/1";
    j["commit"] = git_commit();
    j["config"] = {{"scenario", cfg.scenario}, {"delay_ms", plan.delay_ms}, {"ranks", cfg.ranks}, {"steps", cfg.steps},
                   {"seed", cfg.seed}, {"jitter", cfg.variation.jitter_sigma}, {"event_q", cfg.event_q},
                   {"profile", cfg.profile}, {"sync_mode", sim::to_string(cfg.sync_mode)},
                   {"heterogeneity", sim::to_string(cfg.variation.heterogeneity)}, {"rank_sigma", cfg.variation.rank_sigma},
                   {"grad_mib", cfg.layout.grad_mib}, {"buckets", sim::bucket_floats(cfg.layout).size()},
                   {"bwd_device_ms", cfg.costs.bwd_device_ms}, {"bwd_host_ms", cfg.costs.bwd_host_ms},
                   {"comm_latency_us", cfg.comm.latency_us}, {"comm_gib_s", cfg.comm.gib_per_s}, {"scoring", scoring}};
    j["reference"] = {{"seed", healthy.seed},
                      {"median_step_s", ref_e.median_step_s},
                      {"advance_s_per_step", testbed::advance_per_step(ref_e)}};
    j["truth_ranks"] = plan.ranks;
    j["evidence"] = formats::evidence_to_json(e);
    j["verdict"] = vr.json;
    if (dr)
      for (const auto& [k, v] : dr->json.items()) j[k] = v;
    std::printf("%s\n", j.dump().c_str());
  } else if (!o.details) {
    std::string answer = formats::answer_lines(e) + vr.answer_text;
    if (dr) answer += dr->text;
    answer += frontier::strprintf("# sim: %s on %d modelled rank(s), %d steps, seed %llu (no processes, no MPI, no clock); "
                                  "commit %s\n",
                                  plan.scenario->name.c_str(), cfg.ranks, cfg.steps,
                                  static_cast<unsigned long long>(cfg.seed), git_commit());
    std::fputs((answer + formats::details_pointer("--json")).c_str(), stdout);
  } else {
    std::printf("# sf-testbed sim  commit %s  (model-driven ranks: no processes, no MPI, no clock)\n", git_commit());
    std::printf("# scenario %s: %s\n", plan.scenario->name.c_str(), plan.scenario->injects.c_str());
    std::printf("# ranks %d  steps %d  seed %llu  profile %s  sync %s (%zu buckets)  cost jitter %.3g (lognormal sigma)\n",
                cfg.ranks, cfg.steps, static_cast<unsigned long long>(cfg.seed), cfg.profile.c_str(),
                std::string(sim::to_string(cfg.sync_mode)).c_str(), sim::bucket_floats(cfg.layout).size(),
                cfg.variation.jitter_sigma);
    std::printf("# %s: median step %.2f ms  scoring: %s\n#\n", ref_name.substr(4).c_str(), ref_e.median_step_s * 1e3,
                scoring.c_str());
    std::fputs(vr.truth_text.c_str(), stdout);
    std::printf("#\n%s", formats::evidence_table(e, "model window").c_str());
    std::printf("# model: exposed makespan %.4f s vs slowest-rank wall sum %.4f s (%.2f%% apart)\n", e.exposed_makespan_s,
                wall_sum, gap * 100);
    std::fputs(vr.verdict_text.c_str(), stdout);
    if (dr) std::fputs(("#\n" + dr->text).c_str(), stdout);
  }
  if (!trace_line.empty()) std::fprintf(o.json ? stderr : stdout, "%s%s\n", o.json ? "sf-testbed sim: " : "# ", trace_line.c_str());
  if (!plot_line.empty()) std::fprintf(o.json ? stderr : stdout, "%s%s\n", o.json ? "sf-testbed sim: " : "# ", plot_line.c_str());
  return o.check && !vr.claim_pass ? kExitFail : 0;
}

}  // namespace

void setup_sim(CLI::App& app) {
  auto o = std::make_shared<SimOptions>();
  auto& cfg = o->cfg;
  auto* sub = app.add_subcommand("sim", "Model-driven ranks at scale (no MPI): a scenario scored and checked in milliseconds");
  add_fault_options(sub, cfg, o->delay_ms);
  sub->add_option("--ranks", cfg.ranks, "modelled ranks")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  sub->add_option("--steps", cfg.steps, "modelled steps")->check(CLI::Range(1, 10000000))->capture_default_str();
  sub->add_option("--seed", cfg.seed, "seed (target rank, cost jitter)")->capture_default_str();
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
                  "own seed without the fault: the null a healthy run can fail");
  sub->add_option("--targets", o->cfg.target_count, "number of hidden target ranks to draw (every rank: a common fault)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  sub->add_flag("--independent-reference", o->independent_reference,
               "the healthy reference from a seed of its own (the run's seed + 1000003): --reference-seed without naming one");
  sub->add_option("--threads", o->threads, "streaming: 2 runs the model beside the scorer, 1 alternates")
      ->check(CLI::Range(1, 2))->capture_default_str();
  sub->add_flag("--check", o->check, "exit 1 unless the verdict meets the scenario's claim");
  add_label_options(sub, o->label);
  add_detect_options(sub, o->detect);
  add_trace_options(sub, o->trace);
  sub->callback([o] {
    if (const int rc = run_sim(*o)) exit_with(rc);
  });
}

}  // namespace sf::cli
