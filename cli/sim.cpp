// sf-testbed sim: model-driven ranks at scale, no MPI — the same scenarios, scored and checked.
#include "common.h"
#include "sf/sim/sim.h"
#include "sf/testbed/testbed.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

namespace sf::cli {

namespace {

struct SimOptions {
  sim::ModelConfig cfg;
  LabelOptions label;
  double delay_ms = -1;
  double cost_scale = 1.0;
  bool json = false, check = false;
  std::string dump;
  DetectOptions detect;
  TraceCliOptions trace;
};

int run_sim(SimOptions& o) {
  auto& cfg = o.cfg;
  if (o.delay_ms >= 0) cfg.delay_ms = o.delay_ms;
  cfg.costs = cfg.costs.scaled(o.cost_scale);
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
  const auto plan = sim::model_plan(cfg);
  const auto w = sim::model_window(cfg, plan);
  const auto e = frontier::evaluate(w.matrix, label, w.telemetry);
  const auto [wall_sum, gap] = testbed::makespan_check(e, w.matrix);
  const auto vr = testbed::verdict_report(plan, e, gap);
  std::optional<testbed::DetectReport> dr;
  if (o.detect.on) dr = testbed::detect_report(w.matrix, label, o.detect.cfg, &plan, {}, o.detect.stability_window);
  if (!o.dump.empty()) {
    std::ostringstream out;
    formats::write_jsonl(out, w);
    formats::write_file_atomic(o.dump, out.str());
  }
  if (!o.trace.file.empty()) {
    const auto tr = testbed::chrome_trace(w, label, {o.trace.file, o.trace.max_steps, o.trace.max_ranks},
                                          dr ? dr->changes : std::vector<detect::ChangePoint>{}, &plan);
    try {
      formats::write_file_atomic(o.trace.file, tr.dump() + "\n");
    } catch (const std::exception& err) {
      std::fprintf(stderr, "sf-testbed sim: --trace %s\n", err.what());
      return kExitBadInput;
    }
  }
  if (o.json) {
    nlohmann::ordered_json j;
    j["schema"] = "sf.sim/1";
    j["commit"] = git_commit();
    j["config"] = {{"scenario", cfg.scenario}, {"delay_ms", plan.delay_ms}, {"ranks", cfg.ranks}, {"steps", cfg.steps},
                   {"seed", cfg.seed}, {"jitter", cfg.jitter}, {"event_q", cfg.event_q}};
    j["truth_ranks"] = plan.ranks;
    j["evidence"] = formats::evidence_to_json(e);
    j["verdict"] = vr.json;
    if (dr)
      for (const auto& [k, v] : dr->json.items()) j[k] = v;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("# sf-testbed sim  commit %s  (model-driven ranks: no processes, no MPI, no clock)\n", git_commit());
    std::printf("# scenario %s: %s\n", plan.scenario->name.c_str(), plan.scenario->injects.c_str());
    std::printf("# ranks %d  steps %d  seed %llu  cost jitter %.3g (lognormal sigma)\n#\n", cfg.ranks, cfg.steps,
                static_cast<unsigned long long>(cfg.seed), cfg.jitter);
    std::fputs(vr.truth_text.c_str(), stdout);
    std::printf("#\n%s", formats::evidence_table(e, "model window").c_str());
    std::printf("# model: exposed makespan %.4f s vs slowest-rank wall sum %.4f s (%.2f%% apart)\n", e.exposed_makespan_s,
                wall_sum, gap * 100);
    std::fputs(vr.verdict_text.c_str(), stdout);
    if (dr) std::fputs(("#\n" + dr->text).c_str(), stdout);
  }
  return o.check && !vr.claim_pass ? kExitFail : 0;
}

}  // namespace

void setup_sim(CLI::App& app) {
  auto o = std::make_shared<SimOptions>();
  auto& cfg = o->cfg;
  auto* sub = app.add_subcommand("sim", "Model-driven ranks at scale (no MPI): a scenario scored and checked in milliseconds");
  add_fault_options(sub, cfg, o->delay_ms);
  sub->add_option("--ranks", cfg.ranks, "modelled ranks")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--steps", cfg.steps, "modelled steps")->check(CLI::Range(1, 10000000));
  sub->add_option("--seed", cfg.seed, "seed (target rank, cost jitter)");
  sub->add_option("--jitter", cfg.jitter, "lognormal sigma of every stage cost")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--event-q", cfg.event_q, "sampled fraction of steps with a forward event")->check(CLI::Range(0.0, 1.0));
  sub->add_flag("--sync-callbacks", cfg.sync_callbacks, "a barrier in callbacks (implied by callback_sync_tail)");
  sub->add_option("--cost-scale", o->cost_scale, "multiply every base stage cost")->check(CLI::Range(0.01, 100.0));
  sub->add_flag("--json", o->json, "print config, evidence packet and verdict as one JSON line");
  sub->add_option("--dump", o->dump, "write the model's stage matrix (sf.stages/1 JSONL)");
  sub->add_flag("--check", o->check, "exit 1 unless the verdict meets the scenario's claim");
  add_label_options(sub, o->label);
  add_detect_options(sub, o->detect);
  add_trace_options(sub, o->trace);
  sub->callback([o] {
    if (const int rc = run_sim(*o)) exit_with(rc);
  });
}

}  // namespace sf::cli
