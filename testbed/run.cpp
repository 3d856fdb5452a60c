// The run loop on real MPI ranks (MPI builds): backends, workload, recorder windows, and on
// rank 0 scoring, the verdict against the truth, the table and the result files.
#include "detail.h"

#include "sf/check/check.h"
#include "sf/recorder/mpi_transport.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace sf::testbed {

using nlohmann::ordered_json;

namespace {

/// Steps per recorder window for --live when --window is not given.
constexpr int kLiveWindow = 10;

/// The gather as --gather asks; a node relay waits half the gather deadline for its node.
recorder::GatherOptions gather_options(const RunConfig& cfg) { return {cfg.gather, 0.5 * cfg.gather_deadline_s}; }

ordered_json costs_json(const sim::StageCosts& c) {
  return {{"data", c.data_ms},         {"loader", c.loader_ms},         {"fwd_host", c.fwd_host_ms},
          {"fwd_device", c.fwd_device_ms}, {"bwd_host", c.bwd_host_ms}, {"bwd_device", c.bwd_device_ms},
          {"callbacks", c.callbacks_ms}, {"optim", c.optim_ms}};
}

/// What the step's gradient synchronisation costs on this transport with nothing to hide it
/// behind: the whole gradient, in the run's own sync mode, five times after a barrier; the median
/// (rank 0's clock). The yardstick for how much of it backward hides.
double measure_comm_alone(const RunConfig& cfg, sim::Device& device, sim::Comm& comm, MPI_Comm world, int size) {
  const auto buckets = sim::bucket_floats(cfg.workload.layout, cfg.workload.sharded ? static_cast<std::size_t>(size) : 1);
  const sim::BucketOp op = cfg.workload.sharded ? sim::BucketOp::reduce_scatter : sim::BucketOp::allreduce;
  std::vector<double> ms;
  for (int k = 0; k < 5; ++k) {
    SF_MPI_CHECK(MPI_Barrier(world));
    const std::int64_t t0 = inject::monotonic_ns();
    if (cfg.workload.sync_mode == sim::SyncMode::single) {
      if (cfg.workload.sharded) comm.reduce_scatter(device);
      else comm.allreduce(device);
    } else {
      std::size_t offset = 0;
      for (auto n : buckets) {
        comm.start_bucket(device, offset, n, op, 0.0);
        offset += n;
      }
      comm.wait_buckets(device);
    }
    ms.push_back(static_cast<double>(inject::monotonic_ns() - t0) * 1e-6);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// The run on every rank of `world` (MPI initialised).
/// The configuration as this world runs it: the last stretch of each sleep spun only where ranks do
/// not outnumber cores (oversubscribed, spinning would turn the workload into a CPU benchmark), and
/// the seed drawing the target and every cost of every rank and step.
RunConfig effective_config(const RunConfig& in, int size) {
  RunConfig cfg = in;
  if (cfg.spin_us < 0) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    cfg.spin_us = static_cast<unsigned>(size) <= cores ? 100 : 0;
  }
  cfg.workload.spin_ns = static_cast<std::int64_t>(cfg.spin_us * 1e3);
  cfg.workload.seed = cfg.seed;
  return cfg;
}

/// What the options ask of this world that it cannot give; "" when the run can go on.
std::string world_problem(const RunConfig& cfg, int size) {
  if (auto v = validate(cfg); !v.empty()) return v;
  if (auto v = inject::validate(cfg.fault, size); !v.empty()) return v;
  if (cfg.telemetry_fault != inject::TelemetryFault::none && (cfg.telemetry_fault_rank < 0 || cfg.telemetry_fault_rank >= size))
    return "--telemetry-fault-rank outside the world";
  return "";
}

/// Every rank agrees whether the link fault can be applied; the ranks that cannot say why. An exit
/// code when the run stops here.
std::optional<int> probe_link(const detail::LinkFault& link, MPI_Comm world, int rank) {
  const std::string probe = link.probe();
  int bad = probe.empty() ? 0 : 1, any_bad = 0;
  SF_MPI_CHECK(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, world));
  if (!any_bad) return std::nullopt;
  if (!probe.empty()) std::fprintf(stderr, "sf-testbed run: rank %d: %s\n", rank, probe.c_str());
  return 2;
}

/// A straggler from outside the step: the target rank checks it can apply it (a cgroup quota
/// needs a writable cpu controller); where it cannot, the run is skipped with one line (and a
/// run.json saying so). An exit code when the run stops here.
std::optional<int> probe_straggler(detail::Straggler& straggler, const inject::FaultPlan& plan, const RunConfig& cfg,
                                   MPI_Comm world, int rank, int size) {
  const std::string why = straggler.probe();
  int failed_at = why.empty() ? size : rank, first = size;
  SF_MPI_CHECK(MPI_Allreduce(&failed_at, &first, 1, MPI_INT, MPI_MIN, world));
  if (first == size) return std::nullopt;
  std::array<char, 512> msg{};
  if (rank == first) std::snprintf(msg.data(), msg.size(), "%s", why.c_str());
  SF_MPI_CHECK(MPI_Bcast(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, first, world));
  if (rank != 0) return 0;
  const std::string line = "--straggler " + std::string(inject::to_string(plan.straggler)) + " skipped: rank " +
                           std::to_string(first) + ": " + msg.data();
  std::printf("sf-testbed run: %s\n", line.c_str());
  if (cfg.out_dir.empty()) return 0;
  ordered_json skipped = provenance_json("sf.run/1", cfg.argv, cfg.commit);
  skipped["skipped"] = line;
  try {
    formats::write_file_atomic(cfg.out_dir + "/run.json", skipped.dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sf-testbed run: --out %s\n", e.what());
    return 2;
  }
  return 0;
}

/// This rank's index among the ranks of its host (for device selection).
int local_rank_of(MPI_Comm world, int rank) {
  MPI_Comm node = MPI_COMM_NULL;
  SF_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  const recorder::CommOwner owner(node);
  int local_rank = 0;
  SF_MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  return local_rank;
}

/// The device and communication backends on every rank; "" when all ranks have theirs, else the
/// first problem this rank knows of (every rank returns non-empty when any failed).
std::string open_backends(const RunConfig& run_cfg, MPI_Comm world, int local_rank, detail::Backends& b) {
  std::string err;
  try {
    err = detail::make_backends(run_cfg, world, local_rank, b);
  } catch (const std::exception& e) {
    err = e.what();
  }
  int bad = err.empty() ? 0 : 1, any_bad = 0;
  SF_MPI_CHECK(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, world));
  if (!any_bad) return "";
  return err.empty() ? "backend set-up failed on another rank" : err;
}

/// The healthy reference: steps −K..−1, before any fault can be active (onset >= 0), recorded on a
/// recorder of its own (plain transport, no telemetry fault), after two unrecorded steps. The
/// gathered window on rank 0; nothing elsewhere or when off.
std::optional<formats::Window> record_reference(const RunConfig& cfg, const RunConfig& run_cfg, sim::Workload& work,
                                                MPI_Comm world) {
  std::optional<formats::Window> reference;
  if (cfg.reference_steps <= 0 || cfg.recorder == RecorderMode::off) return reference;
  const int K = cfg.reference_steps;
  auto ref_transport = recorder::make_mpi_transport(world, gather_options(cfg));
  recorder::Recorder ref_rec(detail::recorder_config(run_cfg, -K, K), *ref_transport, nullptr,
                             [&](formats::Window&& w, int) { reference = std::move(w); });
  SF_MPI_CHECK(MPI_Barrier(world));
  for (std::int64_t t = -K - 2; t < 0; ++t) {
    work.step(t, t < -K ? nullptr : &ref_rec);
    ref_rec.safe_point();
  }
  ref_rec.finish();
  return reference;
}

/// Rank 0: the reference's evidence, which every window's diagnosis and the run's is the change
/// against; with --out it is written beside the packets (score DIR's dump --reference
/// DIR/reference.json gives the same packets).
std::optional<frontier::Evidence> judge_reference(const RunConfig& cfg, const std::optional<formats::Window>& reference,
                                                  detail::Rank0Windows& windows) {
  if (!reference) return std::nullopt;
  frontier::Evidence ref_e = frontier::evaluate(reference->matrix, cfg.label, reference->telemetry);
  const std::string name = "the healthy reference (" + std::to_string(ref_e.steps) + " steps before the warm-up)";
  windows.set_reference(frontier::make_reference(ref_e, name));
  if (!cfg.out_dir.empty()) {
    try {
      formats::write_file_atomic(cfg.out_dir + "/reference.json", formats::reference_to_json(ref_e, name).dump() + "\n");
    } catch (const std::exception&) {
      // The windows' packets go to the same directory and report the failure (fail-open).
    }
  }
  return ref_e;
}

/// The measured steps' transport: MPI's gather, delayed or corrupted on the rank a telemetry
/// fault names (`faulty`).
std::unique_ptr<recorder::Transport> make_transport(const RunConfig& cfg, MPI_Comm world, bool faulty) {
  auto transport = recorder::make_mpi_transport(world, gather_options(cfg));
  if (faulty && (cfg.telemetry_fault == inject::TelemetryFault::late || cfg.telemetry_fault == inject::TelemetryFault::corrupt))
    transport = detail::make_faulty_transport(std::move(transport), cfg.telemetry_fault, 2.5 * cfg.gather_deadline_s);
  return transport;
}

/// --detect, --trace: rank 0 watches the windows as they are gathered, at the safe point, in
/// bounded memory (testbed::Watch); a change confirmed there opens its diagnosis window at once.
std::optional<Watch> make_watch(const RunConfig& cfg, int window, const inject::FaultPlan& plan) {
  if (!cfg.detect && cfg.trace.file.empty()) return std::nullopt;
  WatchOptions wo;
  wo.label = cfg.label;
  wo.detect = cfg.detect;
  if (!cfg.trace.file.empty()) wo.trace = cfg.trace;
  wo.stability_window = cfg.stability_window;
  wo.stability_per_window = window < cfg.steps;  // the recorder windows, when there are several
  wo.stability_stage = cfg.stability_stage;
  wo.plan = &plan;
  wo.online = true;
  wo.exact_median_steps = cfg.exact_median_steps;
  return Watch(std::move(wo));
}

/// What --live and --detect show as the windows arrive on rank 0.
struct LiveView {
  std::int64_t t0 = inject::monotonic_ns();  ///< reset at the first measured step
  std::string last_change;
  bool tty = false;  ///< redraw in place
};

/// Rank 0 at each gathered window: the watch's change points and, under --live, the view.
void watch_windows(const RunConfig& cfg, int size, detail::Rank0Windows& windows, std::optional<Watch>& watch,
                   LiveView& live) {
  if (!watch && !cfg.live) return;
  windows.on_window([&cfg, size, &watch, &live](const std::shared_ptr<const formats::Window>& w,
                                                const frontier::Evidence& e, int index) {
    detail::Rank0Windows::Notes notes;
    if (watch) {
      notes.changes = watch->observe(std::shared_ptr<const frontier::StageMatrix>(w, &w->matrix), w->ranks);
      notes.stability = watch->window_stability();
    }
    for (const auto& c : notes.changes) {
      live.last_change = c.line;
      // The diagnosis window opened at this safe point. Under --live, one line now (the redrawn
      // view shows it itself); otherwise the change is said once, in the report at the end, with
      // the after-window the run finished with.
      if (cfg.live && !live.tty) std::printf("live: %s\n", c.line.c_str());
    }
    if (cfg.live) {
      detail::LiveState ls{cfg.fault.scenario, size, index + 1, w->matrix.first_step() + w->matrix.steps() - cfg.warmup, cfg.steps,
                           static_cast<double>(inject::monotonic_ns() - live.t0) * 1e-9, cfg.detect.has_value(),
                           watch ? watch->changes() : std::vector<detect::ChangePoint>{}, live.last_change};
      std::fputs(detail::live_view(ls, e, live.tty).c_str(), stdout);
    }
    std::fflush(stdout);
    return notes;
  });
}

/// How the measured steps went on this rank.
struct Measured {
  double elapsed_s = 0;        ///< from the first measured step to the last
  double steal = 0;            ///< the hypervisor's steal over them
  std::int64_t completed = 0;  ///< measured steps this rank finished
};

/// The warm-up (unrecorded), then the measured steps on `rec`, the link and straggler faults
/// stepped along; a telemetry fault drops this rank's records of every fourth step.
Measured record_run(const RunConfig& cfg, const RunConfig& run_cfg, bool drops_steps, detail::LinkFault& link,
                    detail::Straggler& straggler, sim::Workload& work, recorder::Recorder& rec, MPI_Comm world,
                    LiveView& live) {
  SF_MPI_CHECK(MPI_Barrier(world));
  for (int t = 0; t < cfg.warmup; ++t) {
    link.at_step(t);
    straggler.at_step(t);
    work.step(t, nullptr);
  }
  Measured m;
  const std::int64_t t_start = inject::monotonic_ns();
  live.t0 = t_start;
  const StealMeter steal_meter;
  for (std::int64_t t = cfg.warmup; t < cfg.warmup + cfg.steps; ++t) {
    link.at_step(t);
    straggler.at_step(t);
    work.step(t, &rec, drops_steps && t % 4 == 1);
    ++m.completed;
    if (run_cfg.workload.fetch_ahead && t + 1 < cfg.warmup + cfg.steps) work.fetch_ahead(t + 1, &rec);
    rec.safe_point();
  }
  m.elapsed_s = static_cast<double>(inject::monotonic_ns() - t_start) * 1e-9;
  m.steal = steal_meter.fraction();
  rec.finish();
  return m;
}

/// link_slow: a bandwidth fault leaves no per-rank trace in stage times (every rank of a ring waits
/// for its slowest link), so while the fault is still on, FALCON's P2P pass names the link (and its
/// host): the validation step that follows a detection. Not run otherwise (`root` false).
detail::ValidateReport check_link(const RunConfig& cfg, const inject::FaultPlan& plan, MPI_Comm world) {
  detail::ValidateReport link_check;
  if (plan.scenario->site != inject::Site::link || plan.ranks.empty() ||
      !plan.active(plan.ranks.front(), cfg.warmup + cfg.steps - 1))
    return link_check;
  ValidateConfig vc;
  vc.compute = false;
  vc.sweeps = 1;
  vc.reps = 3;
  vc.commit = cfg.commit;
  detail::validate_world(vc, world, link_check);
  return link_check;
}

/// After the measured steps, on every rank: what rank 0's report needs from them.
struct Epilogue {
  detail::MitigationOutcome mitigation;
  detail::ValidateReport link_check;
  std::array<std::int64_t, 3> link_any{};  ///< the shaping rank, the step it applied the fault at, tc failed
  std::int64_t min_completed = 0;          ///< measured steps every rank finished
  std::int64_t dropped_sum = 0;            ///< records the recorders dropped, all ranks
};

/// The mitigation phase (--mitigate: the run's diagnosis picks the culprit; the steps after the
/// switch measure what the what-if predicted, the fault staying on), the link check while the link
/// fault is on, the faults taken off, and the counts rank 0 reports, reduced to it.
Epilogue finish_run(const RunConfig& cfg, const RunConfig& run_cfg, const inject::FaultPlan& plan, detail::LinkFault& link,
                    detail::Straggler& straggler, std::optional<detail::Rank0Windows>& windows, const Measured& measured,
                    recorder::Recorder& rec, MPI_Comm world, int local_rank) {
  int rank = 0;
  SF_MPI_CHECK(MPI_Comm_rank(world, &rank));
  Epilogue out;
  if (cfg.mitigate != Mitigation::none) {
    std::optional<frontier::Evidence> decided;
    if (windows && windows->count() > 0) {
      MakespanCheck mk;
      std::vector<formats::RankInfo> ranks_seen;
      decided = windows->run_evidence(mk, ranks_seen);
    }
    out.mitigation = detail::run_mitigation(run_cfg, world, plan, straggler, decided ? &*decided : nullptr,
                                            cfg.warmup + cfg.steps, local_rank);
  }
  out.link_check = check_link(cfg, plan, world);
  link.finish();
  straggler.finish();
  if (!straggler.failures().empty())
    std::fprintf(stderr, "sf-testbed run: rank %d: --straggler %s: %s\n", rank,
                 std::string(inject::to_string(plan.straggler)).c_str(), straggler.failures().c_str());
  // The shaping rank tells rank 0 whether the fault it claims was applied, and when.
  const std::array<std::int64_t, 3> link_state{link.shaper() ? rank : -1, link.applied_at(), link.failures().empty() ? 0 : 1};
  SF_MPI_CHECK(MPI_Reduce(link_state.data(), out.link_any.data(), 3, MPI_INT64_T, MPI_MAX, 0, world));
  SF_MPI_CHECK(MPI_Reduce(&measured.completed, &out.min_completed, 1, MPI_INT64_T, MPI_MIN, 0, world));
  const std::int64_t dropped = rec.dropped_records();
  SF_MPI_CHECK(MPI_Reduce(&dropped, &out.dropped_sum, 1, MPI_INT64_T, MPI_SUM, 0, world));
  return out;
}

/// Everything rank 0's report reads, gathered from the run.
struct RunRecord {
  const RunConfig& cfg;
  const RunConfig& run_cfg;  ///< as the workload ran it (callbacks synchronised, link buffer sizes)
  const inject::FaultPlan& plan;
  int size = 0;
  int window = 0;
  const detail::Backends& b;
  double comm_alone_ms = 0;
  Measured measured;
  std::int64_t min_completed = 0;          ///< measured steps every rank finished
  std::int64_t dropped_sum = 0;            ///< records the recorders dropped, all ranks
  std::array<std::int64_t, 3> link_any{};  ///< the shaping rank, the step it applied the fault at, tc failed
  const detail::ValidateReport& link_check;
  const detail::MitigationOutcome& mitigation;
  const std::optional<frontier::Evidence>& ref_e;
  std::optional<Watch>& watch;
  detail::Rank0Windows& windows;
  recorder::Recorder& rec;
  const recorder::RecorderConfig& rc;
  recorder::Transport& transport;
};

/// run.json's head: provenance, the configuration in effect, the truth, the link fault as applied,
/// what was measured outside the evidence, the backends' notes.
ordered_json run_json_head(const RunRecord& r) {
  const RunConfig& cfg = r.cfg;
  const auto& w = r.run_cfg.workload;
  ordered_json result = provenance_json("sf.run/1", cfg.argv, cfg.commit);
  const auto buckets = sim::bucket_floats(w.layout, cfg.workload.sharded ? static_cast<std::size_t>(r.size) : 1);
  result["config"] = {{"scenario", cfg.fault.scenario},
                      {"delay_ms", r.plan.delay_ms},
                      {"ranks", r.size},
                      {"steps", cfg.steps},
                      {"warmup", cfg.warmup},
                      {"window", r.window},
                      {"seed", cfg.seed},
                      {"comm", r.b.comm->name()},
                      {"device", r.b.device->name()},
                      {"recorder", recorder_mode_name(cfg.recorder)},
                      {"event_q", cfg.recorder == RecorderMode::event ? cfg.event_q : 0.0},
                      {"accumulation", cfg.workload.accumulation},
                      {"sharded", cfg.workload.sharded},
                      {"fetch_ahead", cfg.workload.fetch_ahead},
                      {"sync_callbacks", w.sync_callbacks},
                      {"profile", cfg.workload.profile},
                      {"sync_mode", sim::to_string(cfg.workload.sync_mode)},
                      {"grad_mib", w.layout.grad_mib},
                      {"layout", {{"model_mib", w.layout.model_mib},
                                  {"bucket_cap_mib", cfg.workload.layout.bucket_cap_mib},
                                  {"first_bucket_mib", cfg.workload.layout.first_bucket_mib}}},
                      {"bucket_floats", buckets},
                      {"costs_ms", costs_json(cfg.workload.costs)},
                      {"jitter_sigma", cfg.workload.variation.jitter_sigma},
                      {"heterogeneity", sim::to_string(cfg.workload.variation.heterogeneity)},
                      {"rank_sigma", cfg.workload.variation.rank_sigma},
                      {"reference_steps", cfg.reference_steps},
                      {"straggler", inject::to_string(r.plan.straggler)},
                      {"straggler_strength", r.plan.strength},
                      {"telemetry_fault", inject::to_string(cfg.telemetry_fault)},
                      {"gather_deadline_s", cfg.gather_deadline_s},
                      {"gather", recorder::gather_mode_name(cfg.gather)},
                      {"score_inline", cfg.score_inline}};
  result["truth"] = truth_json(inject::truth(r.plan));
  if (r.plan.scenario->site == inject::Site::link)
    result["link_fault"] = {{"host", r.plan.host},
                            {"ranks", r.plan.ranks},
                            {"rate_mbit", r.plan.rate_mbit},
                            {"grad_mib", cfg.link_grad_mib},
                            {"device", std::getenv("SF_LINK_DEV") ? std::getenv("SF_LINK_DEV") : ""},
                            {"shaping_rank", r.link_any[0]},
                            {"applied_at_step", r.link_any[1] >= 0 ? ordered_json(r.link_any[1]) : ordered_json(nullptr)},
                            {"tc_failed", r.link_any[2] != 0}};
  result["measured"] = {{"steps_completed_min", r.min_completed},
                        {"rank0_elapsed_s", r.measured.elapsed_s},
                        {"vm_steal_fraction", r.measured.steal},
                        {"comm_alone_ms", r.comm_alone_ms}};
  result["backend_notes"] = r.b.notes;
  return result;
}

/// --details' preamble: the run's set-up, one topic a line, then "#".
std::string preamble(const RunRecord& r) {
  const RunConfig& cfg = r.cfg;
  const auto& plan = r.plan;
  const auto& w = r.run_cfg.workload;
  std::string t = frontier::strprintf("# sf-testbed run  commit %s  %s  host %s\n", cfg.commit.c_str(), utc_now().c_str(),
                                      host_name().c_str());
  t += frontier::strprintf("# scenario %s: %s\n", plan.scenario->name.c_str(), plan.scenario->injects.c_str());
  if (plan.straggler != inject::StragglerKind::none)
    t += frontier::strprintf("# straggler %s, strength %g (%s), on the target rank from step %lld: its stages untouched\n",
                             std::string(inject::to_string(plan.straggler)).c_str(), plan.strength,
                             std::string(inject::straggler_strength_meaning(plan.straggler)).c_str(),
                             static_cast<long long>(plan.onset));
  t += frontier::strprintf(
      "# ranks %d  steps %d (+%d warm-up)  window %d  seed %llu  comm %s  device %s  recorder %s%s\n", r.size, cfg.steps,
      cfg.warmup, r.window, static_cast<unsigned long long>(cfg.seed), r.b.comm->name().c_str(), r.b.device->name().c_str(),
      std::string(recorder_mode_name(cfg.recorder)).c_str(),
      cfg.recorder == RecorderMode::event ? (" (q " + std::to_string(cfg.event_q).substr(0, 4) + ")").c_str() : "");
  if (cfg.live && cfg.window == 0 && r.window < cfg.steps)
    t += "# --live without --window: recorder windows of " + std::to_string(r.window) +
         " steps, so the live view is redrawn as the run goes\n";
  const auto buckets = sim::bucket_floats(w.layout, cfg.workload.sharded ? static_cast<std::size_t>(r.size) : 1);
  t += frontier::strprintf(
      "# step: profile %s  sync %s  %zu bucket(s), %.2f MiB of gradients  jitter %.3g  heterogeneity %s%s\n",
      cfg.workload.profile.c_str(), std::string(sim::to_string(cfg.workload.sync_mode)).c_str(), buckets.size(),
      w.layout.grad_mib, cfg.workload.variation.jitter_sigma,
      std::string(sim::to_string(cfg.workload.variation.heterogeneity)).c_str(),
      cfg.workload.variation.heterogeneity == sim::Heterogeneity::none
          ? ""
          : (" (rank sigma " + std::to_string(cfg.workload.variation.rank_sigma).substr(0, 5) + ")").c_str());
  t += frontier::strprintf("# gradient sync alone (no compute to hide it): %.2f ms, median of 5\n", r.comm_alone_ms);
  if (!r.b.notes.empty()) t += "# note: " + r.b.notes + "\n";
  if (cfg.telemetry_fault != inject::TelemetryFault::none)
    t += "# telemetry fault injected: " + std::string(inject::to_string(cfg.telemetry_fault)) + " on rank " +
         std::to_string(cfg.telemetry_fault_rank) + "\n";
  return t + "#\n";
}

/// The reference's summary in run.json: its steps, median step and each stage's advance per step.
ordered_json reference_json(const frontier::Evidence& ref_e) {
  ordered_json rj = ordered_json::object();
  rj["steps"] = ref_e.steps;
  rj["median_step_s"] = ref_e.median_step_s;
  rj["gather_ok"] = ref_e.gather_ok;
  auto& adv = rj["advance_ms_per_step"] = ordered_json::object();
  const auto per = advance_per_step(ref_e);
  for (std::size_t g = 0; g < per.size(); ++g) adv[ref_e.group_name(static_cast<int>(g))] = per[g] * 1e3;
  return rj;
}

/// What the run cost the recorder and the gather (run.json's "telemetry").
ordered_json telemetry_json(const RunRecord& r) {
  return {{"payload_bytes_per_rank_window", recorder::payload_bytes(r.rc, r.window)},
          {"packet_bytes", r.windows.first_packet_bytes()},
          {"dropped_records", r.dropped_sum},
          {"late_contributions_discarded", r.transport.late_discarded()},
          {"rank0_recorder_safe_point_cpu_s", r.rec.safe_point_cpu_s()},
          {"rank0_telemetry_thread_cpu_s", r.rec.telemetry_cpu_s()},
          {"gather", r.windows.gather_json()},
          {"rank0_scoring_s", r.windows.scoring_s()},
          {"rank0_rss", r.windows.rss_json()},
          {"rank0_windows_kept", r.windows.kept().size()},
          {"rank0_watch_state_values", r.watch ? r.watch->state_size() : 0},
          {"rank0_exact_median_steps", r.cfg.exact_median_steps}};
}

/// link_slow's check: the P2P pass (run while the fault was on) must name the throttled host. Says
/// so in both outputs and run.json's verdict; returns the claim with it.
bool tell_link_check(const RunRecord& r, const VerdictReport& vr, bool claim_pass, ordered_json& result, std::string& table,
                     std::string& answer) {
  // The P2P pass can name a link only while it is slow: it runs when the fault is still on at the
  // end. A fault that ended earlier (an A/B/A run) leaves nothing to measure, and the check then
  // rests on the routing alone and says so.
  const auto& lc = r.link_check;
  const auto& plan = r.plan;
  const bool named = std::find(lc.egress.begin(), lc.egress.end(), plan.host) != lc.egress.end();
  if (lc.root) claim_pass = claim_pass && named;
  const std::string lines =
      "# link validation (P2P pass with the fault on): " +
      (lc.root ? (lc.attribution.empty() ? std::string("no slow link") : lc.attribution)
               : "not run: the fault ended at step " + std::to_string(plan.offset) +
                     ", before the run did (a link is named only while it is slow)") +
      "\n# check: and the P2P pass names the throttled host " + plan.host + ": " +
      (lc.root ? (named ? "PASS" : "FAIL") : "not applicable (no pass)") + "\n";
  table += lines;
  answer += lines;
  result["link_validation"] = lc.root ? lc.json : ordered_json(nullptr);
  result["verdict"]["check"]["criterion"] =
      vr.json["check"]["criterion"].get<std::string>() +
      (lc.root ? "; the P2P pass names the throttled host" : "; no P2P pass (the fault ended before the run)");
  result["verdict"]["check"]["pass"] = claim_pass;
  result["verdict"]["host_named"] = lc.root ? ordered_json(named) : ordered_json(nullptr);
  return claim_pass;
}

/// Rank 0 with evidence: the run's evidence judged against the reference and the truth, told in
/// both outputs and run.json. Returns whether the scenario's claim holds.
bool judge_run(RunRecord& r, ordered_json& result, std::string& table, std::string& answer) {
  const RunConfig& cfg = r.cfg;
  MakespanCheck mk;
  std::vector<formats::RankInfo> all_ranks;
  // The run's evidence comes diagnosed against the healthy reference (Rank0Windows holds it).
  auto evidence = r.windows.run_evidence(mk, all_ranks);
  // Cross-check: Σ_t F[t,S] against the slowest rank's measured step wall times.
  const auto [wall_sum, gap] = mk;
  const auto* ref = r.ref_e ? &*r.ref_e : nullptr;
  Outcome out = judge(std::move(evidence), {.plan = &r.plan, .reference_evidence = ref, .makespan_gap = gap,
                                            .shuffle_seed = cfg.seed});
  const auto& e = out.evidence;
  const VerdictReport& vr = *out.verdict;
  if (ref) {
    table += frontier::strprintf("# healthy reference (%d steps before the warm-up, no fault): median step %.2f ms\n",
                                 ref->steps, ref->median_step_s * 1e3);
    result["reference"] = reference_json(*ref);
  }
  table += vr.truth_text + "#\n";
  if (r.windows.count() > 1)
    table += std::string("# per window (diagnosed against ") + (ref ? "the healthy reference" : "its cohort") + "):\n" +
             r.windows.window_lines() + "#\n";
  table += formats::evidence_table(e, "evidence over all measured steps (" + std::to_string(r.windows.count()) + " window(s))",
                                   all_ranks);
  table += frontier::strprintf(
      "# measured: exposed makespan %.4f s vs slowest-rank wall sum %.4f s (%.2f%% apart: equal by construction, a check "
      "of the accounting); rank-0 elapsed %.4f s\n",
      e.exposed_makespan_s, wall_sum, gap * 100, r.measured.elapsed_s);
  table += vr.verdict_text;
  if (r.watch && cfg.detect) {
    // The diagnosis reads the segments kept as the run went; with rank_median the whole run is in
    // memory anyway (kept windows) and is read instead.
    const formats::Window all = r.windows.keeps_windows() ? detail::concat(r.windows.kept()) : formats::Window{};
    out.detect = r.watch->report(r.windows.keeps_windows() ? &all.matrix : nullptr);
    table += "#\n" + out.detect->text;
    for (const auto& [k, v] : out.detect->json.items()) result[k] = v;
  }
  answer += answer_text(out, all_ranks);
  bool claim_pass = vr.claim_pass;
  result["verdict"] = vr.json;
  if (r.plan.scenario->site == inject::Site::link) claim_pass = tell_link_check(r, vr, claim_pass, result, table, answer);
  if (cfg.mitigate != Mitigation::none) {
    table += r.mitigation.line();
    answer += r.mitigation.line();
    result["mitigation"] = r.mitigation.json();
  }
  result["evidence"] = formats::evidence_to_json(e, all_ranks);
  result["measured"]["exposed_makespan_s"] = e.exposed_makespan_s;
  result["measured"]["slowest_rank_wall_sum_s"] = wall_sum;
  result["measured"]["makespan_vs_wall_rel"] = gap;
  result["measured"]["median_step_s"] = e.median_step_s;
  if (r.windows.keeps_windows()) table += "# note: rank_median needs whole windows: rank 0 kept every window in memory\n";
  result["telemetry"] = telemetry_json(r);
  return claim_pass;
}

/// Rank 0's report: run.json (before the trace, so a trace that cannot be written loses nothing
/// else), the trace, and on stdout the answer first (or, with --details, the whole table).
int report_run(RunRecord& r) {
  const RunConfig& cfg = r.cfg;
  int exit_code = 0;
  ordered_json result = run_json_head(r);
  std::string table = preamble(r);  // --details: everything
  std::string answer;               // the default: the answer first, on one screen
  if (r.windows.count() == 0) {
    const double per_step_ms = r.measured.elapsed_s / cfg.steps * 1e3;
    table += "# recorder off: no evidence (steps completed by every rank: " + std::to_string(r.min_completed) + ")\n";
    table += frontier::strprintf("# rank-0 elapsed %.3f s, %.2f ms/step\n", r.measured.elapsed_s, per_step_ms);
    answer += frontier::strprintf(
        "# recorder off: no evidence, no diagnosis; %lld steps completed by every rank, rank 0 at %.2f ms/step\n",
        static_cast<long long>(r.min_completed), per_step_ms);
  } else if (!judge_run(r, result, table, answer) && cfg.check) {
    exit_code = 1;
  }
  if (const auto werr = r.windows.finish(); !werr.empty()) {
    std::fprintf(stderr, "sf-testbed run: %s\n", werr.c_str());
    exit_code = 2;
  }
  // Per-window summaries were streamed to windows.jsonl; run.json lists them too.
  if (r.windows.count() > 0 && !cfg.out_dir.empty()) result["windows"] = r.windows.summaries();
  if (!cfg.out_dir.empty()) {
    try {
      formats::write_file_atomic(cfg.out_dir + "/run.json", result.dump(2) + "\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sf-testbed run: --out %s\n", e.what());
      exit_code = 2;
    }
  }
  // The files beside the answer (--plot from the packets written to --out, --trace from the watch).
  ReportedEnd end;
  for (int i = 0; !cfg.plot.empty() && i < r.windows.count(); ++i) {
    const std::string f = frontier::strprintf("%s/window_%03d.json", cfg.out_dir.c_str(), i);
    if (::access(f.c_str(), R_OK) == 0) end.packet_files.push_back(f);
  }
  end.packet_dir = cfg.out_dir;
  std::optional<ordered_json> trace;
  std::string why;
  try {
    if (r.watch && !cfg.trace.file.empty()) trace = r.watch->trace();
  } catch (const std::exception& e) {
    why = std::string("--trace ") + e.what();
  }
  end.trace = trace ? &*trace : nullptr;
  if (const auto failed = r.windows.reporters().finish(end); why.empty()) why = failed;
  for (const auto& line : r.windows.reporters().said()) {
    table += "# " + line + "\n";
    answer += "# " + line + "\n";
  }
  if (!why.empty()) {
    std::fprintf(stderr, "sf-testbed run: %s\n", why.c_str());
    exit_code = 2;
  }
  if (!cfg.quiet) {
    if (!cfg.details) {
      // What ran, in one line, after the answer; then where the rest is.
      const std::string ref_steps = r.ref_e ? frontier::strprintf(", %d healthy before them", r.ref_e->steps) : std::string();
      answer += frontier::strprintf("# run: %s on %d rank(s), %d steps (+%d warm-up%s), seed %llu; commit %s, host %s\n",
                                    r.plan.scenario->name.c_str(), r.size, cfg.steps, cfg.warmup, ref_steps.c_str(),
                                    static_cast<unsigned long long>(cfg.seed), cfg.commit.c_str(), host_name().c_str());
      if (!r.b.notes.empty()) answer += "# note: " + r.b.notes + "\n";
      answer += formats::details_pointer(cfg.out_dir.empty() ? "" : cfg.out_dir + "/run.json");
    }
    std::fputs((cfg.details ? table : answer).c_str(), stdout);
  }
  std::fflush(stdout);
  return exit_code;
}

/// One run on this world: set up (checks, fault plan, probes, backends), the healthy reference,
/// the measured steps on the recorder, the mitigation and link check after them, then rank 0 judges
/// and reports (report_run).
int run_world(const RunConfig& cfg_in, MPI_Comm world) {
  int rank = 0, size = 1;
  SF_MPI_CHECK(MPI_Comm_rank(world, &rank));
  SF_MPI_CHECK(MPI_Comm_size(world, &size));
  const RunConfig cfg = effective_config(cfg_in, size);
  auto fail = [&](const std::string& msg) {
    if (rank == 0) std::fprintf(stderr, "sf-testbed run: %s\n", msg.c_str());
    return 2;
  };
  if (const auto why = world_problem(cfg, size); !why.empty()) return fail(why);

  inject::FaultPlan plan = detail::make_plan(cfg, size);
  RunConfig run_cfg = cfg;
  run_cfg.workload.sync_callbacks = cfg.workload.sync_callbacks || plan.scenario->sync_callbacks;
  // link_slow: the target is a host, and the gradient buffer is sized so that the healthy link is
  // not the bottleneck and the throttled one is (real buffer sizes: DDP's buckets of this model).
  bool link_shaper = false;
  if (plan.scenario->site == inject::Site::link) {
    run_cfg.workload.layout.grad_mib = cfg.link_grad_mib;
    run_cfg.workload.layout.model_mib = cfg.link_grad_mib;
    if (const auto e = detail::resolve_link_plan(plan, cfg, world, rank, size, link_shaper); !e.empty()) return fail(e);
  }
  detail::LinkFault link(plan, link_shaper);
  if (const auto rc = probe_link(link, world, rank)) return *rc;
  detail::Straggler straggler(plan, rank);
  if (const auto rc = probe_straggler(straggler, plan, cfg, world, rank, size)) return *rc;
  const int local_rank = local_rank_of(world, rank);
  detail::Backends b;
  if (const auto err = open_backends(run_cfg, world, local_rank, b); !err.empty()) return fail(err);
  if (cfg.overhead_pairs > 0) return detail::run_overhead(run_cfg, world, plan, b, rank, size);

  sim::Workload work(run_cfg.workload, plan, *b.device, *b.comm, rank);
  const double comm_alone_ms = measure_comm_alone(run_cfg, *b.device, *b.comm, world, size);
  const auto reference = record_reference(cfg, run_cfg, work, world);

  // --live without --window: a window of kLiveWindow steps, so the view is redrawn while the run
  // goes (one window over the whole run would draw it once, at the end).
  const int window = cfg.window > 0 ? cfg.window : cfg.live ? std::min(cfg.steps, kLiveWindow) : cfg.steps;
  auto rc = detail::recorder_config(run_cfg, cfg.warmup, window);
  rc.assemble_off_thread = !cfg.score_inline;
  const bool faulty = cfg.telemetry_fault != inject::TelemetryFault::none && rank == cfg.telemetry_fault_rank;
  if (faulty && cfg.telemetry_fault == inject::TelemetryFault::schema_mismatch)
    rc.stages.push_back("extra.unexpected_stage");  // this rank's schema no longer matches
  const auto transport = make_transport(cfg, world, faulty);

  // Rank 0: each gathered window is scored, written and folded into the run-level evidence as soon
  // as it arrives; nothing per window stays in memory (detail::Rank0Windows) unless --detect,
  // --trace or the rank_median baseline need the run's windows.
  std::optional<detail::Rank0Windows> windows;
  std::optional<frontier::Evidence> ref_e;
  std::optional<Watch> watch;
  LiveView live;
  // Open MPI hands every rank a pseudo-terminal whether or not mpiexec writes to one, so under a
  // launcher rank 0 cannot tell: it redraws only when asked (--live-redraw), else appends lines.
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  live.tty = cfg.live && rank == 0 && (cfg.live_redraw || (!launched && isatty(fileno(stdout))));
  if (rank == 0) {
    windows.emplace(cfg, (cfg.steps + window - 1) / window);
    ref_e = judge_reference(cfg, reference, *windows);
    watch = make_watch(cfg, window, plan);
    watch_windows(cfg, size, *windows, watch, live);
  }
  auto sink = [&](formats::Window&& w, int index) { windows->add(std::move(w), index); };
  recorder::Recorder rec(rc, *transport, cfg.recorder == RecorderMode::event ? &b.device->events() : nullptr, sink);
  const bool drops_steps = faulty && cfg.telemetry_fault == inject::TelemetryFault::drop_steps;
  const Measured measured = record_run(cfg, run_cfg, drops_steps, link, straggler, work, rec, world, live);

  const Epilogue after = finish_run(cfg, run_cfg, plan, link, straggler, windows, measured, rec, world, local_rank);
  if (rank != 0) return 0;
  RunRecord record{cfg, run_cfg, plan, size, window, b, comm_alone_ms, measured,
                   after.min_completed, after.dropped_sum, after.link_any, after.link_check, after.mitigation,
                   ref_e, watch, *windows, rec, rc, *transport};
  return report_run(record);
}

}  // namespace

bool built_with_mpi() { return true; }

namespace detail {

namespace {

/// Whether the user's own Open MPI settings file names the byte transports (a `btl =` line).
bool user_file_names_btl() {
  const char* home = std::getenv("HOME");
  if (home == nullptr) return false;
  std::ifstream in(std::string(home) + "/.openmpi/mca-params.conf");
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find_first_not_of(" \t");
    if (at != std::string::npos && line.compare(at, 3, "btl") == 0) {
      const auto rest = line.find_first_not_of(" \t", at + 3);
      if (rest != std::string::npos && line[rest] == '=') return true;
    }
  }
  return false;
}

}  // namespace

void keep_one_host_off_the_network() {
  // Open MPI 4.1's TCP transport listens on every interface, one port per rank, even when every
  // rank is on one host and talks over shared memory (docs/cluster.md). When the launcher says
  // every rank is local and nobody chose the transports (`--mca btl`, -x, the environment or
  // ~/.openmpi/mca-params.conf), the ranks use shared memory and self only: nothing of theirs
  // listens for other machines. Across hosts (local size < world size) nothing changes.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (local == nullptr || world == nullptr || std::string(local) != world) return;
  if (std::getenv("OMPI_MCA_btl") != nullptr || user_file_names_btl()) return;
  ::setenv("OMPI_MCA_btl", "self,vader", 0);
}

int with_mpi(const char* who, int thread_level, const std::function<int()>& body) {
  int initialized = 0;
  SF_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    keep_one_host_off_the_network();
    int provided = 0;
    SF_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, thread_level, &provided));
  }
  int rc = 0;
  try {
    rc = body();
  } catch (const std::exception& e) {
    // A failure past set-up on one rank cannot be answered by that rank alone: the others wait
    // in collectives. One line, then the whole job ends.
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "sf-testbed %s: rank %d: %s\n", who, rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (!initialized) SF_MPI_CHECK(MPI_Finalize());
  return rc;
}

}  // namespace detail

int run(const RunConfig& cfg) {
  // SERIALIZED: the bucketed step's collectives run on a comm thread while the host thread makes
  // no MPI call (sim/mpi_comm.cpp).
  return detail::with_mpi("run", MPI_THREAD_SERIALIZED, [&] { return run_world(cfg, MPI_COMM_WORLD); });
}

}  // namespace sf::testbed
