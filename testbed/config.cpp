// Run configuration: validation before MPI starts, the fault plan and the recorder set-up.
#include "detail.h"

#include <algorithm>
#include <cmath>

namespace sf::testbed {

std::string_view recorder_mode_name(RecorderMode m) {
  return m == RecorderMode::off ? "off" : m == RecorderMode::cpu ? "cpu" : "event";
}

std::string_view mitigation_name(Mitigation m) {
  switch (m) {
    case Mitigation::exclude: return "exclude";
    case Mitigation::rebalance: return "rebalance";
    case Mitigation::none: break;
  }
  return "none";
}

std::string validate(const RunConfig& cfg) {
  if (auto why = inject::validate(cfg.fault); !why.empty()) return why;
  const auto* sc = inject::find_scenario(cfg.fault.scenario);
  if (cfg.steps < 1) return "--steps must be >= 1";
  if (cfg.warmup < 0) return "--warmup must be >= 0";
  if (cfg.window < 0) return "--window must be >= 0";
  if (cfg.event_q < 0 || cfg.event_q > 1) return "--event-q must be in [0, 1]";
  if (cfg.workload.accumulation < 1 || cfg.workload.accumulation > 64) return "--accumulation must be in [1, 64]";
  if (cfg.overhead_pairs < 0) return "--overhead-pairs must be >= 0";
  if (cfg.overhead_pairs > 0 && cfg.overhead_window < 2) return "--overhead-window must be >= 2";
  if (cfg.gather_deadline_s <= 0) return "--gather-deadline must be > 0";
  if ((cfg.telemetry_fault == inject::TelemetryFault::late || cfg.telemetry_fault == inject::TelemetryFault::corrupt) &&
      cfg.telemetry_fault_rank == 0)
    return "--telemetry-fault-rank must not be 0 for late/corrupt (rank 0 is the gather root)";
  if (!(cfg.link_rate_mbit >= 1 && cfg.link_rate_mbit <= 1e6)) return "--link-rate must be in [1, 1000000] Mbit/s";
  if (!(cfg.link_grad_mib >= 1 && cfg.link_grad_mib <= 1024)) return "--link-grad-mib must be in [1, 1024]";
  if (!cfg.dump.empty() && cfg.recorder == RecorderMode::off) return "--dump needs the recorder (--recorder cpu|event)";
  if (cfg.reference_steps < 0 || cfg.reference_steps > 100000) return "--reference-steps must be in [0, 100000]";
  if (auto why = plot_file_problem(cfg.plot); !why.empty()) return why;
  if (!cfg.plot.empty() && cfg.out_dir.empty())
    return "--plot " + cfg.plot + " needs --out DIR: the picture is drawn from the window packets written there";
  if (!cfg.plot.empty() && cfg.recorder == RecorderMode::off) return "--plot needs the recorder (--recorder cpu|event)";
  if (const auto why = frontier::config_names_problem(
          frontier::StageSchema(sim::workload_stages(cfg.workload), true, cfg.workload.accumulation), cfg.label);
      !why.empty())
    return why;
  if (cfg.mitigate != Mitigation::none) {
    const std::string m = "--mitigate " + std::string(mitigation_name(cfg.mitigate));
    if (cfg.recorder == RecorderMode::off) return m + " needs the recorder (--recorder cpu|event): the culprit comes from its diagnosis";
    if (sc->site == inject::Site::link) return m + " with --scenario " + cfg.fault.scenario + ": a link fault names a host, not a rank";
    if (cfg.overhead_pairs > 0) return m + " with --overhead-pairs: the overhead mode diagnoses nothing";
    if (cfg.mitigate_steps < 3 || cfg.mitigate_steps > 100000) return "--mitigate-steps must be in [3, 100000]";
  }
  if (cfg.detect && !cfg.stability_stage.empty()) {
    const frontier::StageSchema schema(sim::workload_stages(cfg.workload), true, cfg.workload.accumulation);
    if (auto why = schema.group_problem(cfg.stability_stage, "--stability-stage " + cfg.stability_stage + ": ", "this run");
        !why.empty())
      return why;
  }
  if (const auto v = sim::validate(cfg.workload.layout); !v.empty()) return v;
  if (const auto v = sim::validate(cfg.workload.variation); !v.empty()) return v;
  return "";
}

std::string validate(const ValidateConfig& cfg) {
  if (!cfg.p2p && !cfg.compute) return "--no-p2p and --no-compute: nothing to validate";
  if (cfg.bytes < 1 || cfg.bytes > (1u << 30)) return "--bytes must be in [1, 1073741824]";
  if (cfg.reps < 1 || cfg.reps > 10000) return "--reps must be in [1, 10000]";
  if (cfg.sweeps < 1 || cfg.sweeps > 100) return "--sweeps must be in [1, 100]";
  if (!(cfg.threshold > 1.0) || !std::isfinite(cfg.threshold)) return "--threshold must be a finite number > 1";
  if (cfg.gemm_n < 8 || cfg.gemm_n > 8192) return "--gemm-n must be in [8, 8192]";
  if (cfg.gemm_reps < 1 || cfg.gemm_reps > 1000) return "--gemm-reps must be in [1, 1000]";
  if (cfg.device != "cpu" && cfg.device != "cuda") return "--device is '" + cfg.device + "', expected cpu or cuda";
  if (cfg.device == "cuda" && cfg.compute) {
    std::string why;
    if (!sim::cuda_available(&why)) return "--device cuda: " + why;
  }
  for (const auto& [r, f] : cfg.compute_slowdown)
    if (r < 0 || !(f >= 1.0) || f > 1000) return "--compute-slowdown RANK:FACTOR needs RANK >= 0 and FACTOR in [1, 1000]";
  return "";
}

namespace detail {

inject::FaultPlan make_plan(const RunConfig& cfg, int world_size) { return inject::make_plan(cfg.fault, world_size, cfg.seed); }

recorder::RecorderConfig recorder_config(const RunConfig& cfg, std::int64_t first_step, int window) {
  recorder::RecorderConfig rc;
  rc.stages = sim::workload_stages(cfg.workload);
  rc.accumulation = cfg.workload.accumulation;
  rc.first_step = first_step;
  rc.window_steps = window;
  rc.event_q = cfg.recorder == RecorderMode::event ? cfg.event_q : 0.0;
  rc.gather_deadline_s = cfg.gather_deadline_s;
  rc.enabled = cfg.recorder != RecorderMode::off;
  const auto idx = sim::stage_index(cfg.workload);
  rc.sync_wait_stages.push_back(idx.bwd.back());
  if (cfg.workload.sync_callbacks) rc.sync_wait_stages.push_back(idx.callbacks);
  if (cfg.workload.sharded) rc.sync_wait_stages.push_back(idx.fwd.front());
  std::sort(rc.sync_wait_stages.begin(), rc.sync_wait_stages.end());
  return rc;
}

}  // namespace detail
}  // namespace sf::testbed
