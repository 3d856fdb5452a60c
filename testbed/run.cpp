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
int run_world(const RunConfig& cfg_in, MPI_Comm world) {
  int rank = 0, size = 1;
  SF_MPI_CHECK(MPI_Comm_rank(world, &rank));
  SF_MPI_CHECK(MPI_Comm_size(world, &size));
  RunConfig cfg = cfg_in;
  if (cfg.spin_us < 0) {
    // Spin the last stretch of each sleep only when ranks do not outnumber cores: oversubscribed,
    // spinning would turn the workload into a CPU benchmark.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    cfg.spin_us = static_cast<unsigned>(size) <= cores ? 100 : 0;
  }
  cfg.workload.spin_ns = static_cast<std::int64_t>(cfg.spin_us * 1e3);
  cfg.workload.seed = cfg.seed;  // the seed draws the target and every cost of every rank and step
  auto fail = [&](const std::string& msg) {
    if (rank == 0) std::fprintf(stderr, "sf-testbed run: %s\n", msg.c_str());
    return 2;
  };
  if (const auto v = validate(cfg); !v.empty()) return fail(v);
  for (int r : cfg.target_ranks)
    if (r < 0 || r >= size) return fail("--target-rank " + std::to_string(r) + " outside 0.." + std::to_string(size - 1));
  if (cfg.target_count > size) return fail("--targets " + std::to_string(cfg.target_count) + " > world size");
  if (cfg.telemetry_fault != inject::TelemetryFault::none && (cfg.telemetry_fault_rank < 0 || cfg.telemetry_fault_rank >= size))
    return fail("--telemetry-fault-rank outside the world");

  inject::FaultPlan plan = detail::make_plan(cfg, size);
  const auto* scenario = plan.scenario;

  RunConfig run_cfg = cfg;
  run_cfg.workload.sync_callbacks = cfg.workload.sync_callbacks || scenario->sync_callbacks;

  // link_slow: the target is a host, and the gradient buffer is sized so that the healthy link is
  // not the bottleneck and the throttled one is.
  bool link_shaper = false;
  if (scenario->site == inject::Site::link) {
    run_cfg.workload.layout.grad_mib = cfg.link_grad_mib;  // real buffer sizes: DDP's buckets of this model
    run_cfg.workload.layout.model_mib = cfg.link_grad_mib;
    if (const auto e = detail::resolve_link_plan(plan, cfg, world, rank, size, link_shaper); !e.empty()) return fail(e);
  }
  detail::LinkFault link(plan, link_shaper);
  {
    const std::string probe = link.probe();
    int bad_link = probe.empty() ? 0 : 1, any_bad_link = 0;
    SF_MPI_CHECK(MPI_Allreduce(&bad_link, &any_bad_link, 1, MPI_INT, MPI_MAX, world));
    if (any_bad_link) {
      if (!probe.empty()) std::fprintf(stderr, "sf-testbed run: rank %d: %s\n", rank, probe.c_str());
      return 2;
    }
  }

  // A straggler from outside the step: the target rank checks it can apply it (a cgroup quota
  // needs a writable cpu controller); where it cannot, the run is skipped with one line.
  detail::Straggler straggler(plan, rank);
  {
    std::string why = straggler.probe();
    int failed_at = why.empty() ? size : rank, first = size;
    SF_MPI_CHECK(MPI_Allreduce(&failed_at, &first, 1, MPI_INT, MPI_MIN, world));
    if (first < size) {
      std::array<char, 512> msg{};
      if (rank == first) std::snprintf(msg.data(), msg.size(), "%s", why.c_str());
      SF_MPI_CHECK(MPI_Bcast(msg.data(), static_cast<int>(msg.size()), MPI_CHAR, first, world));
      if (rank != 0) return 0;
      const std::string line = "--straggler " + std::string(inject::to_string(plan.straggler)) + " skipped: rank " +
                               std::to_string(first) + ": " + msg.data();
      std::printf("sf-testbed run: %s\n", line.c_str());
      if (!cfg.out_dir.empty()) {
        ordered_json skipped = provenance_json("sf.run/1", cfg.argv, cfg.commit);
        skipped["skipped"] = line;
        try {
          formats::write_file_atomic(cfg.out_dir + "/run.json", skipped.dump(2) + "\n");
        } catch (const std::exception& e) {
          std::fprintf(stderr, "sf-testbed run: --out %s\n", e.what());
          return 2;
        }
      }
      return 0;
    }
  }

  // Local rank for device selection.
  int local_rank = 0;
  {
    MPI_Comm node = MPI_COMM_NULL;
    SF_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    const recorder::CommOwner owner(node);
    SF_MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  }

  detail::Backends b;
  std::string err;
  try {
    err = detail::make_backends(run_cfg, world, local_rank, b);
  } catch (const std::exception& e) {
    err = e.what();
  }
  int bad = err.empty() ? 0 : 1, any_bad = 0;
  SF_MPI_CHECK(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, world));
  if (any_bad) return fail(err.empty() ? "backend set-up failed on another rank" : err);

  if (cfg.overhead_pairs > 0) return detail::run_overhead(run_cfg, world, plan, b, rank, size);

  sim::Workload work(run_cfg.workload, plan, *b.device, *b.comm, rank);
  const double comm_alone_ms = measure_comm_alone(run_cfg, *b.device, *b.comm, world, size);

  // The healthy reference: steps −K..−1, before any fault can be active (onset >= 0), recorded on
  // a recorder of their own (plain transport, no telemetry fault), after two unrecorded steps.
  std::optional<formats::Window> reference;
  if (cfg.reference_steps > 0 && cfg.recorder != RecorderMode::off) {
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
  }

  // --live without --window: a window of kLiveWindow steps, so the view is redrawn while the run
  // goes (one window over the whole run would draw it once, at the end).
  const int window = cfg.window > 0 ? cfg.window : cfg.live ? std::min(cfg.steps, kLiveWindow) : cfg.steps;
  auto rc = detail::recorder_config(run_cfg, cfg.warmup, window);
  rc.assemble_off_thread = !cfg.score_inline;
  if (cfg.telemetry_fault == inject::TelemetryFault::schema_mismatch && rank == cfg.telemetry_fault_rank)
    rc.stages.push_back("extra.unexpected_stage");  // this rank's schema no longer matches
  const bool faulty = cfg.telemetry_fault != inject::TelemetryFault::none && rank == cfg.telemetry_fault_rank;
  auto transport = recorder::make_mpi_transport(world, gather_options(cfg));
  if (faulty && (cfg.telemetry_fault == inject::TelemetryFault::late || cfg.telemetry_fault == inject::TelemetryFault::corrupt))
    transport = detail::make_faulty_transport(std::move(transport), cfg.telemetry_fault, 2.5 * cfg.gather_deadline_s);

  // Rank 0: each gathered window is scored, written and folded into the run-level evidence as
  // soon as it arrives; nothing per window stays in memory (detail::Rank0Windows) unless --detect,
  // --trace or the rank_median baseline need the run's windows.
  std::optional<detail::Rank0Windows> windows;
  if (rank == 0) windows.emplace(cfg, (cfg.steps + window - 1) / window);
  // Every window's diagnosis, and the run's, is the change against the healthy reference.
  std::optional<frontier::Evidence> ref_e;
  if (rank == 0 && reference) {
    ref_e = frontier::evaluate(reference->matrix, cfg.label, reference->telemetry);
    const std::string name = "the healthy reference (" + std::to_string(ref_e->steps) + " steps before the warm-up)";
    windows->set_reference(frontier::make_reference(*ref_e, name));
    // --out: the reference beside the packets (score DIR's dump --reference DIR/reference.json
    // gives the same packets).
    if (!cfg.out_dir.empty()) {
      try {
        formats::write_file_atomic(cfg.out_dir + "/reference.json", formats::reference_to_json(*ref_e, name).dump() + "\n");
      } catch (const std::exception&) {
        // The windows' packets go to the same directory and report the failure (fail-open).
      }
    }
  }
  // --detect, --trace: rank 0 watches the windows as they are gathered, at the safe point, in
  // bounded memory (testbed::Watch); a change confirmed there opens its diagnosis window at once.
  std::optional<Watch> watch;
  std::int64_t t_live = inject::monotonic_ns();  // --live: reset at the first measured step
  // Open MPI hands every rank a pseudo-terminal whether or not mpiexec writes to one, so under a
  // launcher rank 0 cannot tell: it redraws only when asked (--live-redraw), else appends lines.
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  const bool live_tty = cfg.live && rank == 0 && (cfg.live_redraw || (!launched && isatty(fileno(stdout))));
  if (rank == 0 && (cfg.detect || !cfg.trace.file.empty())) {
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
    watch.emplace(std::move(wo));
  }
  std::string last_change;
  if (rank == 0 && (watch || cfg.live))
    windows->on_window([&](const std::shared_ptr<const formats::Window>& w, const frontier::Evidence& e, int index) {
      detail::Rank0Windows::Notes notes;
      if (watch) {
        notes.changes = watch->observe(std::shared_ptr<const frontier::StageMatrix>(w, &w->matrix), w->ranks);
        notes.stability = watch->window_stability();
      }
      const auto& changes = notes.changes;
      for (const auto& c : changes) {
        last_change = c.line;
        // The diagnosis window opened at this safe point. Under --live, one line now (the redrawn
        // view shows it itself); otherwise the change is said once, in the report at the end,
        // with the after-window the run finished with.
        if (cfg.live && !live_tty) std::printf("live: %s\n", c.line.c_str());
      }
      if (cfg.live) {
        detail::LiveState ls{cfg.scenario, size, index + 1, w->matrix.first_step() + w->matrix.steps() - cfg.warmup, cfg.steps,
                             static_cast<double>(inject::monotonic_ns() - t_live) * 1e-9, cfg.detect.has_value(),
                             watch ? watch->changes() : std::vector<detect::ChangePoint>{}, last_change};
        std::fputs(detail::live_view(ls, e, live_tty).c_str(), stdout);
      }
      std::fflush(stdout);
      return notes;
    });
  auto sink = [&](formats::Window&& w, int index) { windows->add(std::move(w), index); };
  recorder::Recorder rec(rc, *transport, cfg.recorder == RecorderMode::event ? &b.device->events() : nullptr, sink);

  SF_MPI_CHECK(MPI_Barrier(world));
  for (int t = 0; t < cfg.warmup; ++t) {
    link.at_step(t);
    straggler.at_step(t);
    work.step(t, nullptr);
  }
  const std::int64_t t_start = inject::monotonic_ns();
  t_live = t_start;
  const StealMeter steal_meter;
  std::int64_t completed = 0;
  for (std::int64_t t = cfg.warmup; t < cfg.warmup + cfg.steps; ++t) {
    const bool drop = faulty && cfg.telemetry_fault == inject::TelemetryFault::drop_steps && t % 4 == 1;
    link.at_step(t);
    straggler.at_step(t);
    work.step(t, &rec, drop);
    ++completed;
    if (run_cfg.workload.fetch_ahead && t + 1 < cfg.warmup + cfg.steps) work.fetch_ahead(t + 1, &rec);
    rec.safe_point();
  }
  const double elapsed_s = static_cast<double>(inject::monotonic_ns() - t_start) * 1e-9;
  const double steal = steal_meter.fraction();
  rec.finish();
  // --mitigate: the run's diagnosis picks the culprit; the steps after the switch measure what
  // the what-if predicted (the fault stays on).
  detail::MitigationOutcome mitigation;
  if (cfg.mitigate != Mitigation::none) {
    std::optional<frontier::Evidence> decided;
    if (rank == 0 && windows->count() > 0) {
      MakespanCheck mk;
      std::vector<formats::RankInfo> ranks_seen;
      decided = windows->run_evidence(mk, ranks_seen);
    }
    mitigation = detail::run_mitigation(run_cfg, world, plan, straggler, decided ? &*decided : nullptr,
                                        cfg.warmup + cfg.steps, local_rank);
  }
  // link_slow: a bandwidth fault leaves no per-rank trace in stage times (every rank of a ring
  // waits for its slowest link), so while the fault is still on, FALCON's P2P pass names the link
  // (and its host) — the validation step that follows a detection.
  detail::ValidateReport link_check;
  if (scenario->site == inject::Site::link && !plan.ranks.empty() &&
      plan.active(plan.ranks.front(), cfg.warmup + cfg.steps - 1)) {
    ValidateConfig vc;
    vc.compute = false;
    vc.sweeps = 1;
    vc.reps = 3;
    vc.commit = cfg.commit;
    detail::validate_world(vc, world, link_check);
  }
  link.finish();
  straggler.finish();
  if (!straggler.failures().empty())
    std::fprintf(stderr, "sf-testbed run: rank %d: --straggler %s: %s\n", rank,
                 std::string(inject::to_string(plan.straggler)).c_str(), straggler.failures().c_str());
  // The shaping rank tells rank 0 whether the fault it claims was applied, and when.
  std::array<std::int64_t, 3> link_state{link.shaper() ? rank : -1, link.applied_at(), link.failures().empty() ? 0 : 1};
  std::array<std::int64_t, 3> link_any{};
  SF_MPI_CHECK(MPI_Reduce(link_state.data(), link_any.data(), 3, MPI_INT64_T, MPI_MAX, 0, world));

  std::int64_t min_completed = 0;
  SF_MPI_CHECK(MPI_Reduce(&completed, &min_completed, 1, MPI_INT64_T, MPI_MIN, 0, world));
  std::int64_t dropped = rec.dropped_records(), dropped_sum = 0;
  SF_MPI_CHECK(MPI_Reduce(&dropped, &dropped_sum, 1, MPI_INT64_T, MPI_SUM, 0, world));
  if (rank != 0) return 0;

  // ---- rank 0: verdict against the injected truth ----
  const auto truth = inject::truth(plan);
  const auto buckets = sim::bucket_floats(run_cfg.workload.layout, cfg.workload.sharded ? static_cast<std::size_t>(size) : 1);
  ordered_json result = provenance_json("sf.run/1", cfg.argv, cfg.commit);
  result["config"] = {{"scenario", cfg.scenario},
                      {"delay_ms", plan.delay_ms},
                      {"ranks", size},
                      {"steps", cfg.steps},
                      {"warmup", cfg.warmup},
                      {"window", window},
                      {"seed", cfg.seed},
                      {"comm", b.comm->name()},
                      {"device", b.device->name()},
                      {"recorder", recorder_mode_name(cfg.recorder)},
                      {"event_q", cfg.recorder == RecorderMode::event ? cfg.event_q : 0.0},
                      {"accumulation", cfg.workload.accumulation},
                      {"sharded", cfg.workload.sharded},
                      {"fetch_ahead", cfg.workload.fetch_ahead},
                      {"sync_callbacks", run_cfg.workload.sync_callbacks},
                      {"profile", cfg.workload.profile},
                      {"sync_mode", sim::to_string(cfg.workload.sync_mode)},
                      {"grad_mib", run_cfg.workload.layout.grad_mib},
                      {"layout", {{"model_mib", run_cfg.workload.layout.model_mib},
                                  {"bucket_cap_mib", cfg.workload.layout.bucket_cap_mib},
                                  {"first_bucket_mib", cfg.workload.layout.first_bucket_mib}}},
                      {"bucket_floats", buckets},
                      {"costs_ms", costs_json(cfg.workload.costs)},
                      {"jitter_sigma", cfg.workload.variation.jitter_sigma},
                      {"heterogeneity", sim::to_string(cfg.workload.variation.heterogeneity)},
                      {"rank_sigma", cfg.workload.variation.rank_sigma},
                      {"reference_steps", cfg.reference_steps},
                      {"straggler", inject::to_string(plan.straggler)},
                      {"straggler_strength", plan.strength},
                      {"telemetry_fault", inject::to_string(cfg.telemetry_fault)},
                      {"gather_deadline_s", cfg.gather_deadline_s},
                      {"gather", recorder::gather_mode_name(cfg.gather)},
                      {"score_inline", cfg.score_inline}};
  result["truth"] = truth_json(truth);
  if (scenario->site == inject::Site::link)
    result["link_fault"] = {{"host", plan.host},
                            {"ranks", plan.ranks},
                            {"rate_mbit", plan.rate_mbit},
                            {"grad_mib", cfg.link_grad_mib},
                            {"device", std::getenv("SF_LINK_DEV") ? std::getenv("SF_LINK_DEV") : ""},
                            {"shaping_rank", link_any[0]},
                            {"applied_at_step", link_any[1] >= 0 ? ordered_json(link_any[1]) : ordered_json(nullptr)},
                            {"tc_failed", link_any[2] != 0}};
  result["measured"] = {{"steps_completed_min", min_completed},
                        {"rank0_elapsed_s", elapsed_s},
                        {"vm_steal_fraction", steal},
                        {"comm_alone_ms", comm_alone_ms}};
  result["backend_notes"] = b.notes;

  int exit_code = 0;
  std::string table;   // --details: everything below
  std::string answer;  // the default: the answer first, on one screen
  std::string line;
  line = frontier::strprintf("# sf-testbed run  commit %s  %s  host %s\n", cfg.commit.c_str(), utc_now().c_str(), host_name().c_str());
  table += line;
  line = frontier::strprintf("# scenario %s: %s\n", scenario->name.c_str(), scenario->injects.c_str());
  table += line;
  if (plan.straggler != inject::StragglerKind::none)
    table += frontier::strprintf("# straggler %s, strength %g (%s), on the target rank from step %lld: its stages untouched\n",
                                 std::string(inject::to_string(plan.straggler)).c_str(), plan.strength,
                                 std::string(inject::straggler_strength_meaning(plan.straggler)).c_str(),
                                 static_cast<long long>(plan.onset));
  std::string targets;
  for (int r : plan.ranks) targets += (targets.empty() ? "" : ",") + std::to_string(r);
  line = frontier::strprintf(
                "# ranks %d  steps %d (+%d warm-up)  window %d  seed %llu  comm %s  device %s  recorder %s%s\n", size,
                cfg.steps, cfg.warmup, window, static_cast<unsigned long long>(cfg.seed), b.comm->name().c_str(),
                b.device->name().c_str(), std::string(recorder_mode_name(cfg.recorder)).c_str(),
                cfg.recorder == RecorderMode::event ? (" (q " + std::to_string(cfg.event_q).substr(0, 4) + ")").c_str() : "");
  table += line;
  if (cfg.live && cfg.window == 0 && window < cfg.steps)
    table += "# --live without --window: recorder windows of " + std::to_string(window) +
             " steps, so the live view is redrawn as the run goes\n";
  line = frontier::strprintf("# step: profile %s  sync %s  %zu bucket(s), %.2f MiB of gradients  jitter %.3g  heterogeneity %s%s\n",
                cfg.workload.profile.c_str(), std::string(sim::to_string(cfg.workload.sync_mode)).c_str(), buckets.size(),
                run_cfg.workload.layout.grad_mib, cfg.workload.variation.jitter_sigma,
                std::string(sim::to_string(cfg.workload.variation.heterogeneity)).c_str(),
                cfg.workload.variation.heterogeneity == sim::Heterogeneity::none
                    ? ""
                    : (" (rank sigma " + std::to_string(cfg.workload.variation.rank_sigma).substr(0, 5) + ")").c_str());
  table += line;
  line = frontier::strprintf("# gradient sync alone (no compute to hide it): %.2f ms, median of 5\n", comm_alone_ms);
  table += line;
  if (!b.notes.empty()) table += "# note: " + b.notes + "\n";
  if (cfg.telemetry_fault != inject::TelemetryFault::none)
    table += "# telemetry fault injected: " + std::string(inject::to_string(cfg.telemetry_fault)) + " on rank " +
             std::to_string(cfg.telemetry_fault_rank) + "\n";
  table += "#\n";

  if (windows->count() == 0) {
    table += "# recorder off: no evidence (steps completed by every rank: " + std::to_string(min_completed) + ")\n";
    line = frontier::strprintf("# rank-0 elapsed %.3f s, %.2f ms/step\n", elapsed_s, elapsed_s / cfg.steps * 1e3);
    table += line;
    answer += frontier::strprintf("# recorder off: no evidence, no diagnosis; %lld steps completed by every rank, rank 0 at %.2f ms/step\n",
                                  static_cast<long long>(min_completed), elapsed_s / cfg.steps * 1e3);
  } else {
    MakespanCheck mk;
    std::vector<formats::RankInfo> all_ranks;
    const auto e = windows->run_evidence(mk, all_ranks);
    // Cross-check: Σ_t F[t,S] against the slowest rank's measured step wall times.
    const auto [wall_sum, gap] = mk;
    const VerdictReport vr = verdict_report(plan, e, gap, ref_e ? &*ref_e : nullptr, cfg.seed);
    answer += formats::answer_lines(e, all_ranks) + vr.answer_text;
    if (ref_e) {
      line = frontier::strprintf("# healthy reference (%d steps before the warm-up, no fault): median step %.2f ms\n",
                    ref_e->steps, ref_e->median_step_s * 1e3);
      table += line;
      auto& rj = result["reference"] = ordered_json::object();
      rj["steps"] = ref_e->steps;
      rj["median_step_s"] = ref_e->median_step_s;
      rj["gather_ok"] = ref_e->gather_ok;
      auto& adv = rj["advance_ms_per_step"] = ordered_json::object();
      const auto per = advance_per_step(*ref_e);
      for (std::size_t g = 0; g < per.size(); ++g) adv[ref_e->group_name(static_cast<int>(g))] = per[g] * 1e3;
    }
    table += vr.truth_text + "#\n";
    if (windows->count() > 1)
      table += std::string("# per window (diagnosed against ") + (ref_e ? "the healthy reference" : "its cohort") + "):\n" +
               windows->window_lines() + "#\n";
    table += formats::evidence_table(e, "evidence over all measured steps (" + std::to_string(windows->count()) + " window(s))", all_ranks);
    line = frontier::strprintf(
                  "# measured: exposed makespan %.4f s vs slowest-rank wall sum %.4f s (%.2f%% apart: equal by construction, a check of the accounting); rank-0 elapsed %.4f s\n",
                  e.exposed_makespan_s, wall_sum, gap * 100, elapsed_s);
    table += line;
    table += vr.verdict_text;
    if (watch && cfg.detect) {
      // The diagnosis reads the segments kept as the run went; with rank_median the whole run
      // is in memory anyway (kept windows) and is read instead.
      const formats::Window all = windows->keeps_windows() ? detail::concat(windows->kept()) : formats::Window{};
      const auto dr = watch->report(windows->keeps_windows() ? &all.matrix : nullptr);
      table += "#\n" + dr.text;
      answer += dr.text;
      for (const auto& [k, v] : dr.json.items()) result[k] = v;
    }
    bool claim_pass = vr.claim_pass;
    result["verdict"] = vr.json;
    if (scenario->site == inject::Site::link) {
      // The P2P pass can name a link only while it is slow: it runs when the fault is still on at
      // the end. A fault that ended earlier (an A/B/A run) leaves nothing to measure, and the
      // check then rests on the routing alone and says so.
      const bool named = std::find(link_check.egress.begin(), link_check.egress.end(), plan.host) != link_check.egress.end();
      if (link_check.root) claim_pass = claim_pass && named;
      const std::string link_lines =
          "# link validation (P2P pass with the fault on): " +
          (link_check.root ? (link_check.attribution.empty() ? std::string("no slow link") : link_check.attribution)
                           : "not run: the fault ended at step " + std::to_string(plan.offset) +
                                 ", before the run did (a link is named only while it is slow)") +
          "\n# check: and the P2P pass names the throttled host " + plan.host + ": " +
          (link_check.root ? (named ? "PASS" : "FAIL") : "not applicable (no pass)") + "\n";
      table += link_lines;
      answer += link_lines;
      result["link_validation"] = link_check.root ? link_check.json : ordered_json(nullptr);
      result["verdict"]["check"]["criterion"] =
          vr.json["check"]["criterion"].get<std::string>() +
          (link_check.root ? "; the P2P pass names the throttled host" : "; no P2P pass (the fault ended before the run)");
      result["verdict"]["check"]["pass"] = claim_pass;
      result["verdict"]["host_named"] = link_check.root ? ordered_json(named) : ordered_json(nullptr);
    }
    if (cfg.mitigate != Mitigation::none) {
      table += mitigation.line();
      answer += mitigation.line();
      result["mitigation"] = mitigation.json();
    }
    if (cfg.check && !claim_pass) exit_code = 1;
    result["evidence"] = formats::evidence_to_json(e, all_ranks);
    result["measured"]["exposed_makespan_s"] = e.exposed_makespan_s;
    result["measured"]["slowest_rank_wall_sum_s"] = wall_sum;
    result["measured"]["makespan_vs_wall_rel"] = gap;
    result["measured"]["median_step_s"] = e.median_step_s;
    if (windows->keeps_windows())
      table += "# note: rank_median needs whole windows: rank 0 kept every window in memory\n";
    result["telemetry"] = {{"payload_bytes_per_rank_window", recorder::payload_bytes(rc, window)},
                           {"packet_bytes", windows->first_packet_bytes()},
                           {"dropped_records", dropped_sum},
                           {"late_contributions_discarded", transport->late_discarded()},
                           {"rank0_recorder_safe_point_cpu_s", rec.safe_point_cpu_s()},
                           {"rank0_telemetry_thread_cpu_s", rec.telemetry_cpu_s()},
                           {"gather", windows->gather_json()},
                           {"rank0_scoring_s", windows->scoring_s()},
                           {"rank0_rss", windows->rss_json()},
                           {"rank0_windows_kept", windows->kept().size()},
                           {"rank0_watch_state_values", watch ? watch->state_size() : 0},
                           {"rank0_exact_median_steps", cfg.exact_median_steps}};
  }
  if (const auto werr = windows->finish(); !werr.empty()) {
    std::fprintf(stderr, "sf-testbed run: %s\n", werr.c_str());
    exit_code = 2;
  }
  // Per-window summaries were streamed to windows.jsonl; run.json lists them too. run.json is
  // written before the trace, so a trace that cannot be written loses nothing else.
  if (windows->count() > 0 && !cfg.out_dir.empty()) result["windows"] = windows->summaries();
  if (!cfg.out_dir.empty()) {
    try {
      formats::write_file_atomic(cfg.out_dir + "/run.json", result.dump(2) + "\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sf-testbed run: --out %s\n", e.what());
      exit_code = 2;
    }
  }
  if (watch && !cfg.trace.file.empty()) {
    try {
      const auto trace = watch->trace();
      formats::write_file_atomic(cfg.trace.file, trace.dump() + "\n");
      table += "# " + trace_written_line(cfg.trace.file, trace) + "\n";
      answer += "# " + trace_written_line(cfg.trace.file, trace) + "\n";
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sf-testbed run: --trace %s\n", e.what());
      exit_code = 2;
    }
  }
  if (!cfg.quiet) {
    if (cfg.details) {
      std::fputs(table.c_str(), stdout);
    } else {
      // What ran, in one line, after the answer.
      const std::string ref_steps = ref_e ? frontier::strprintf(", %d healthy before them", ref_e->steps) : std::string();
      answer += frontier::strprintf("# run: %s on %d rank(s), %d steps (+%d warm-up%s), seed %llu; commit %s, host %s\n",
                                    scenario->name.c_str(), size, cfg.steps, cfg.warmup, ref_steps.c_str(),
                                    static_cast<unsigned long long>(cfg.seed), cfg.commit.c_str(), host_name().c_str());
      if (!b.notes.empty()) answer += "# note: " + b.notes + "\n";
      answer += formats::details_pointer(cfg.out_dir.empty() ? "" : cfg.out_dir + "/run.json");
      std::fputs(answer.c_str(), stdout);
    }
  }
  std::fflush(stdout);
  return exit_code;
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
